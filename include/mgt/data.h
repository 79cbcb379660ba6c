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

typedef struct mgt_data {
  void *ctx;
  /* Writes samples [first, first + n) as n rows of T + 1 tokens (GPT), or of
     mgt_bert_row_ints(T) (BERT). Not collective. */
  mgt_status (*get)(void *ctx, uint64_t first, int n, int T, int32_t *out);
  void (*destroy)(void *ctx);
} mgt_data;

/* Synthetic data: sample i is (start + stride * j) mod vocab for j = 0..T, with start
   uniform in [0, vocab) and stride uniform in [1, 8], both drawn from (seed, i). Learning
   it needs attention: the next token depends on the stride, visible only across
   positions. */
MGT_NODISCARD mgt_status mgt_data_mock_create(const mgt_config *cfg, mgt_data *out);
/* BERT's synthetic samples (--model bert --mock-data): from (seed, i), a length in [5, T], a
   first segment of random ids, a second that repeats it with every id shifted by one, types
   0/1 over the two, and each position but [CLS]/[SEP] masked with probability mask_prob
   (80% [MASK], 10% a random id, 10% kept), the segments swapped with probability 0.5. Ids
   0-4 are [PAD] [UNK] [CLS] [SEP] [MASK]. Learnable: the masked ids follow from the other
   segment, and the order from the shift's direction. */
MGT_NODISCARD mgt_status mgt_data_mock_bert_create(const mgt_config *cfg, uint64_t first,
                                                   mgt_data *out);
/* The same generator from sample 2^40 on: validation samples the training never sees. */
MGT_NODISCARD mgt_status mgt_data_mock_valid_create(const mgt_config *cfg, mgt_data *out);
void mgt_data_destroy(mgt_data *data);

#ifdef __cplusplus
}
#endif
