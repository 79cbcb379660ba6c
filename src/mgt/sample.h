/* The sampler of mgt generate and mgt serve (src/infer/sample.c). Not collective. */
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Picks the next token from full-vocabulary logits (the first n are eligible): the argmax
   (lowest id on ties) when greedy, else a draw from softmax(logits / temperature) restricted
   to the top_k largest and then to the smallest set of probability >= top_p, using the
   uniform u in [0, 1). Not collective. */
int32_t mgt_sample_token(const float *logits, int n, int greedy, double temperature, int top_k,
                         double top_p, double u);

#ifdef __cplusplus
}
#endif
