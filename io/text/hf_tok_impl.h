/* Private to io/text/hf_tokenizer.c (reading tokenizer.json) and io/text/hf_encode.c (encoding
   with it): the pipeline's tables and work space. */
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer_impl.h"

/* The longest added token implemented: finding the added token at a position of the text walks
   at most this many bytes. */
enum { ADDED_MAX = 1024 };

typedef struct added_token {
  const unsigned char *s; /* into added_text */
  size_t n;
  int32_t id;
} added_token;

struct mgt_hf_tok {
  /* encode-side strings -> ids: the vocabulary as the model matches it (raw bytes for a
     byte-level model, the pieces' UTF-8 otherwise) and the added tokens' contents */
  unsigned char *keys;
  size_t keys_used, keys_cap;
  uint32_t *key_off, *key_len; /* by id; key_len UINT32_MAX: none */
  int32_t *slot;
  size_t mask;
  /* the pipeline */
  int nfc;              /* normalizer NFC */
  int prepend, spaces;  /* normalizer: prepend "▁", replace " " by "▁" (Llama 2) */
  pcre2_code *split;    /* Split (Isolated) or ByteLevel's use_regex pattern */
  pcre2_match_data *md; /* its match data */
  int byte_level;       /* the model's symbols are bytes */
  int prefix_space;     /* ByteLevel add_prefix_space */
  int ignore_merges;    /* a piece that is a vocabulary token is that token */
  int byte_fallback, fuse_unk;
  int32_t unk, fallback[256]; /* <0xNN> ids */
  int32_t bos;                /* tokenizer_config.json's bos_token, or -1 */
  added_token *added;         /* in the file's order */
  unsigned char *added_text;  /* their contents */
  int n_added;
  uint8_t first_byte[256]; /* an added token starts with this byte */
  /* the added tokens as a trie of their bytes: node 0 the root, edges in an open-addressing
     table keyed by 1 + (node << 8 | byte), trie_end[node] the added token ending there or -1;
     finding the longest at a position walks at most ADDED_MAX bytes */
  int32_t *trie_end, *trie_child;
  uint64_t *trie_key;
  size_t trie_mask;
  char *path; /* the file, for errors met while encoding */
  int clone;  /* mgt_hf_clone's: everything above but md is the origin's */
  /* scratch */
  unsigned char *buf;
  size_t buf_cap;
  int32_t *ids;
  size_t ids_cap;
  /* mgt_tok_encode_ends: where each id ends in the text being encoded; the map of normalized
     positions to the text's, built while normalizing */
  mgt_ids *ends;
  size_t *map, *map2, map_cap;
  unsigned char *nbuf;
  size_t nbuf_cap;
  /* NFC's code points and scratch (hf_encode.c: nfc) */
  uint32_t *u32, *u32b;
  size_t u32_cap, u32b_cap;
  unsigned char *pbuf;
  size_t pbuf_cap;
};

/* The id whose key is s[0..n), or -1. */
int32_t mgt_hf_find_key(const mgt_hf_tok *h, const unsigned char *s, size_t n);
/* *p of at least need elements of elem bytes (*cap updated, doubling). */
mgt_status mgt_hf_grow(void **p, size_t *cap, size_t need, size_t elem);
/* The child of added-token trie node `node` by byte c, or -1. */
int32_t mgt_hf_trie_step(const mgt_hf_tok *h, int32_t node, unsigned char c);
