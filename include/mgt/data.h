/* Sources of training samples. A sample is a window of seq_length + 1 tokens named by its
   global index, so sample order depends only on the seed and the samples consumed. */
#pragma once

#include <stdint.h>

#include "mgt/common.h"
#include "mgt/config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mgt_data {
  void *ctx;
  /* Writes samples [first, first + n) as n rows of T + 1 tokens. Not collective. */
  mgt_status (*get)(void *ctx, uint64_t first, int n, int T, int32_t *out);
  void (*destroy)(void *ctx);
} mgt_data;

/* Synthetic data: sample i is (start + stride * j) mod vocab for j = 0..T, with start
   uniform in [0, vocab) and stride uniform in [1, 8], both drawn from (seed, i). Learning
   it needs attention: the next token depends on the stride, visible only across
   positions. */
MGT_NODISCARD mgt_status mgt_data_mock_create(const mgt_config *cfg, mgt_data *out);
/* The same generator from sample 2^40 on: validation samples the training never sees. */
MGT_NODISCARD mgt_status mgt_data_mock_valid_create(const mgt_config *cfg, mgt_data *out);
void mgt_data_destroy(mgt_data *data);

#ifdef __cplusplus
}
#endif
