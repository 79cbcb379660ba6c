/* Sources of training samples. A sample is named by its global index, so sample order
   depends only on the seed and the samples consumed. A GPT sample is a window of
   seq_length + 1 tokens; a BERT sample is one row of mgt_bert_row_ints(T) ids (below). */
#pragma once

#include <stdint.h>

#include "mgt/common.h"
#include "mgt/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A BERT sample of T positions packed in one row: the ids, the token types (0 for [CLS], A
   and the first [SEP], 1 after it), the labels (the original id at a masked position, -1
   elsewhere), then the real length (positions before the padding) and the sentence-order
   label (1: the segments were swapped). */
enum { MGT_BERT_TOKENS = 0, MGT_BERT_TYPES = 1, MGT_BERT_LABELS = 2 }; /* times T */
static inline int mgt_bert_row_ints(int T) { return 3 * T + 2; }
static inline int mgt_bert_length_at(int T) { return 3 * T; }
static inline int mgt_bert_random_at(int T) { return 3 * T + 1; }
/* The most masked positions a BERT sample of T positions may have: mask_prob of them plus one
   (the builder stays within mask_prob of the target length; the model's LM-head buffers hold
   this many rows per sample). */
static inline int mgt_bert_max_predictions(int T, double mask_prob) {
  int p = (int)(mask_prob * T) + 1;
  return p < T ? p : T;
}

/* In a GPT sample of packed documents (--sft), a token's bits above its id say: a document
   starts here (positions restart, its tokens see no key before it, and this token is no target of
   the one before), and this token is trained as no target (its loss mask is 0, or padding). Ids
   are then below 2^29. */
enum { MGT_TOKEN_ID = (1 << 29) - 1, MGT_TOKEN_DOC_START = 1 << 29, MGT_TOKEN_NO_LOSS = 1 << 30 };
/* Whether the token, as a target, has a loss (with flags). */
static inline int mgt_token_trains(int32_t x) {
  return (x & (MGT_TOKEN_DOC_START | MGT_TOKEN_NO_LOSS)) == 0;
}

typedef struct mgt_data {
  void *ctx;
  /* Writes samples [first, first + n) as n rows of T + 1 tokens (GPT), or of
     mgt_bert_row_ints(T) (BERT). Not collective. */
  mgt_status (*get)(void *ctx, uint64_t first, int n, int T, int32_t *out);
  void (*destroy)(void *ctx);
} mgt_data;

/* Releases the source (its destroy) and empties it. */
void mgt_data_destroy(mgt_data *data);

#ifdef __cplusplus
}
#endif
