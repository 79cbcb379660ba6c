/* --mock-data: synthetic sources of GPT windows and BERT samples (include/mgt/data.h). */
#pragma once

#include "mgt/common.h"
#include "mgt/config.h"
#include "mgt/data.h"

#ifdef __cplusplus
extern "C" {
#endif

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
#ifdef __cplusplus
}
#endif
