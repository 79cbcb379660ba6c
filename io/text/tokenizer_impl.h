/* Private to the tokenizers (io/text/): the tokenizer object and the byte-level BPE machinery
   GPT-2's files and Hugging Face's tokenizer.json share (tokenizer.c), used by
   hf_tokenizer.c. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "mgt/tokenizer.h"
#include "wordpiece.h"

typedef struct mgt_hf_tok mgt_hf_tok;

enum { KIND_GPT2, KIND_BYTES, KIND_WORDPIECE, KIND_HF };
enum { C_OTHER = 0, C_LETTER = 1, C_NUMBER = 2, C_SPACE = 3 };
/* the piece cache: 2^17 slots for a tokenizer that reads datasets, 2^12 for a clone (one
   request's prompts: a small table costs little to make for each) */
enum { CACHE_BITS = 17, CLONE_CACHE_BITS = 12, CACHE_MAX_PIECE = 48, HEAP_MIN = 32 };

typedef struct cache_slot {
  uint64_t hash;
  uint32_t key_off, ids_off; /* into the cache blobs */
  uint16_t key_len, n_ids;
} cache_slot;

struct mgt_tokenizer {
  int kind;
  int clone;         /* mgt_tok_clone's: the tables are its origin's; only the work space is own */
  int type;          /* MGT_TOKENIZER_* */
  mgt_wordpiece *wp; /* KIND_WORDPIECE */
  mgt_hf_tok *hf;    /* KIND_HF: its pipeline (hf_tokenizer.c) */
  char bytes[256];   /* KIND_BYTES: byte i, the text of id i */
  int n_vocab;
  int32_t eod;
  char hash[65];
  /* id -> bytes */
  unsigned char *blob;
  uint32_t *tok_off, *tok_len;
  int32_t byte_id[256];
  /* merges: (a, b) -> rank << 32 | merged id, open addressing */
  uint64_t *mkey, *mval;
  size_t mmask;
  /* code point classes below 0x10000; above, binary search in the tables */
  uint8_t *cls;
  /* piece -> ids cache, of 2^cache_bits slots */
  int cache_bits;
  cache_slot *slots;
  size_t n_cached;
  unsigned char *ckeys;
  int32_t *cids;
  size_t ckeys_used, cids_used;
  /* work space for one piece */
  int32_t *work, *work2;
  size_t work_cap;
};

/* ---- tokenizer.c, for hf_tokenizer.c ---- */

uint64_t mgt_tok_hash_bytes(const unsigned char *p, size_t n);
/* The merge table, for at least n merges; a merge of ids (a, b) into m at rank, the last of
   equal pairs kept. */
mgt_status mgt_tok_merges_alloc(mgt_tokenizer *t, size_t n);
void mgt_tok_merge_add(mgt_tokenizer *t, int32_t a, int32_t b, uint32_t rank, int32_t m);
/* Merges ids[0..*n) by rank in place: the lowest-ranked pair first, leftmost on ties, one at a
   time (Hugging Face's reading) or every occurrence at once (GPT-2's encoder.py, for a
   tokenizer that is not t->hf's); tokenizer.c says where they differ. */
mgt_status mgt_tok_merge_ids(mgt_tokenizer *t, int32_t *ids, size_t *n);
/* Appends the ids of one pre-tokenized piece of raw bytes, each byte t->byte_id's (cached). */
mgt_status mgt_tok_encode_piece(mgt_tokenizer *t, const unsigned char *s, size_t n, mgt_ids *out);
/* GPT-2's printable spelling of bytes, and back (the length, or -1). */
void mgt_tok_byte_tables(uint32_t b2u[256], int16_t u2b[324]);
long mgt_tok_unspell(const int16_t u2b[324], const unsigned char *s, size_t n, unsigned char *out);
/* The piece cache and the code point classes. */
mgt_status mgt_tok_alloc_common(mgt_tokenizer *t);
/* The piece cache alone, of 2^bits slots. */
mgt_status mgt_tok_alloc_cache(mgt_tokenizer *t, int bits);

/* ---- hf_tokenizer.c ---- */

mgt_status mgt_hf_encode(mgt_tokenizer *t, const char *text, size_t len, mgt_ids *out);
mgt_status mgt_hf_encode_ends(mgt_tokenizer *t, const char *text, size_t len, mgt_ids *out,
                              mgt_ids *ends);
void mgt_hf_free(mgt_hf_tok **h);
/* A pipeline sharing src's tables with its own work space (mgt_tok_clone). */
mgt_status mgt_hf_clone(const mgt_hf_tok *src, mgt_hf_tok **out);
