/* Tokenizers: GPT-2's byte-level BPE (identical to OpenAI's encoder, read from the standard
   vocabulary and merges files) and a plain byte tokenizer (ids 0-255, end of document 256)
   for text when no vocabulary is at hand. Not collective; encoding writes work space, so one
   tokenizer (or clone, mgt_tok_clone) per encoding thread. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "mgt/common.h"
#include "mgt/config.h" /* the tokenizer types */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mgt_tokenizer mgt_tokenizer;

/* A growable array of token ids. */
typedef struct mgt_ids {
  int32_t *ids;
  size_t n, cap;
} mgt_ids;

MGT_NODISCARD mgt_status mgt_ids_push(mgt_ids *v, int32_t id);
void mgt_ids_free(mgt_ids *v);

/* GPT-2 BPE from gpt2-vocab.json (encoder.json) and gpt2-merges.txt (vocab.bpe). Errors name
   the file and the problem. */
MGT_NODISCARD mgt_status mgt_tok_load_gpt2(const char *vocab_file, const char *merge_file,
                                           mgt_tokenizer **out);
/* BERT's WordPiece from vocab.txt (Google's BasicTokenizer + greedy longest match, as Megatron-LM
   uses it); `lower` for BertWordPieceLowerCase. Its end-of-document id is [SEP]. */
MGT_NODISCARD mgt_status mgt_tok_load_wordpiece(const char *vocab_file, int lower,
                                                mgt_tokenizer **out);
/* Hugging Face's tokenizer.json (BPE: Llama 3, Qwen, Llama 2, GPT-2's own), its end of document
   the eos_token of tokenizer_config.json beside it (io/text/hf_tokenizer.c says what is
   implemented; anything else is refused naming it). */
MGT_NODISCARD mgt_status mgt_tok_load_hf(const char *path, mgt_tokenizer **out);
/* The tokenizer of `type` (MGT_TOKENIZER_*) from the files it needs (merge_file only for GPT-2);
   a missing file is named in the error. */
MGT_NODISCARD mgt_status mgt_tok_open(int type, const char *vocab_file, const char *merge_file,
                                      mgt_tokenizer **out);
/* A tokenizer that shares src's tables (vocabulary, merges, patterns) and has work space of its
   own, so that threads encode at once, each with its clone, with no lock: the tables are only
   read. src must outlive its clones. Decoding only reads, so one tokenizer decodes for many
   threads. */
MGT_NODISCARD mgt_status mgt_tok_clone(const mgt_tokenizer *src, mgt_tokenizer **out);
/* Byte tokenizer: every byte its own id, end of document 256. */
MGT_NODISCARD mgt_status mgt_tok_create_bytes(mgt_tokenizer **out);
void mgt_tok_destroy(mgt_tokenizer **tok);

int mgt_tok_vocab_size(const mgt_tokenizer *tok);
int32_t mgt_tok_eod(const mgt_tokenizer *tok);
/* The text of id: its bytes (GPT-2, bytes) or its vocabulary piece (WordPiece, "##" included);
 *s stays valid while the tokenizer lives. Fails for an id outside the vocabulary. */
MGT_NODISCARD mgt_status mgt_tok_piece(const mgt_tokenizer *tok, int32_t id, const char **s,
                                       size_t *len);
/* The id of a WordPiece special token ("[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]"), or -1
   (always -1 for GPT-2 and bytes). */
int32_t mgt_tok_special(const mgt_tokenizer *tok, const char *name);
/* The beginning-of-sequence id a Hugging Face tokenizer declares (tokenizer_config.json's
   bos_token), or -1. */
int32_t mgt_tok_bos(const mgt_tokenizer *tok);
/* The tokenizer_config.json a Hugging Face tokenizer read (beside its tokenizer.json), written
   into out[0..n) and returned; NULL for the other tokenizers. */
const char *mgt_tok_config_file(const mgt_tokenizer *tok, char *out, size_t n);
/* Its name, as --tokenizer-type spells it, and its type (MGT_TOKENIZER_*). */
const char *mgt_tok_name(const mgt_tokenizer *tok);
int mgt_tok_type(const mgt_tokenizer *tok);
/* SHA-256 (hex) of the vocabulary and merges files; for bytes, of the name. */
const char *mgt_tok_hash(const mgt_tokenizer *tok);

/* Appends the ids of text[0..len) to out. Any bytes are accepted: invalid UTF-8 bytes are
   pre-tokenized as symbols, so decoding gives the input back. "<|endoftext|>" in the text
   is ordinary text. */
MGT_NODISCARD mgt_status mgt_tok_encode(mgt_tokenizer *tok, const char *text, size_t len,
                                        mgt_ids *out);

/* As mgt_tok_encode, and appends to `ends`, for each id, the offset in text just past the bytes
   it stands for (a text of at most INT32_MAX bytes): the ends rise, and the last is len. A
   token made of bytes that normalization changed (NFC composing a character, a space written
   as "▁") ends where the last of them ends. Not for WordPiece (its text is lower-cased and
   split into words): refused. */
MGT_NODISCARD mgt_status mgt_tok_encode_ends(mgt_tokenizer *tok, const char *text, size_t len,
                                             mgt_ids *out, mgt_ids *ends);

/* Appends the bytes of ids to *buf (grown with realloc; *len and *cap updated). Fails with
   MGT_ERR_INPUT on an id outside the vocabulary. The end-of-document id decodes to
   "<|endoftext|>" for GPT-2 and to nothing for bytes. */
MGT_NODISCARD mgt_status mgt_tok_decode(const mgt_tokenizer *tok, const int32_t *ids, size_t n,
                                        char **buf, size_t *len, size_t *cap);

#ifdef __cplusplus
}
#endif
