/* Private to io/: Google BERT's tokenizer (BasicTokenizer, then greedy longest-match WordPiece),
   as Megatron-LM's BertWordPieceLowerCase / BertWordPieceCase use it. io/text/tokenizer.c wraps it
   in mgt_tokenizer. Not collective; one per thread. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "mgt/common.h"
#include "mgt/tokenizer.h"

typedef struct mgt_wordpiece mgt_wordpiece;

/* Reads vocab.txt (line i, stripped, is id i; a later duplicate wins, as in Google's code);
   `lower` selects the uncased rules (lower case, NFD, accents stripped). [UNK] must exist. */
MGT_NODISCARD mgt_status mgt_wp_load(const char *vocab_file, int lower, mgt_wordpiece **out);
void mgt_wp_free(mgt_wordpiece **wp);
/* A tokenizer sharing src's vocabulary with its own work space (src must outlive it). */
MGT_NODISCARD mgt_status mgt_wp_clone(const mgt_wordpiece *src, mgt_wordpiece **out);
int mgt_wp_vocab_size(const mgt_wordpiece *wp);
/* The id of a special token such as "[SEP]", or -1. */
int32_t mgt_wp_special(const mgt_wordpiece *wp, const char *name);
/* The piece of id ("##" included). */
MGT_NODISCARD mgt_status mgt_wp_piece(const mgt_wordpiece *wp, int32_t id, const char **s,
                                      size_t *len);
/* Appends the ids of text[0..len) (no [CLS]/[SEP]). Bytes that are not UTF-8 read as U+FFFD,
   which cleaning deletes. */
MGT_NODISCARD mgt_status mgt_wp_encode(mgt_wordpiece *wp, const char *text, size_t len,
                                       mgt_ids *out);
/* The text of ids: pieces joined by spaces, "##" continuations glued to the piece before. */
MGT_NODISCARD mgt_status mgt_wp_decode(const mgt_wordpiece *wp, const int32_t *ids, size_t n,
                                       char **buf, size_t *len, size_t *cap);
