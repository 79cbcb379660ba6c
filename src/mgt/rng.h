/* Counter-based random numbers (Philox4x32-10). A number is a pure function of
   (seed, stream, element index), so it does not depend on which rank draws it or in what
   order: initialization and dropout masks are the same for every parallel layout. */
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Philox4x32 with 10 rounds (Salmon et al., SC'11): four 32-bit outputs for a 128-bit
   counter and a 64-bit key. */
void mgt_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* Stream ids. Bit 63 separates initialization streams from dropout streams; a dropout
   stream names the global sample index, the layer and the site, so a mask depends only on
   which sample is processed, never on the micro-batch it landed in. */
enum {
  MGT_DROPOUT_EMBED = 0, /* after the embedding sum */
  MGT_DROPOUT_ATTN = 1,  /* attention probabilities */
  MGT_DROPOUT_PROJ = 2,  /* after the attention output projection */
  MGT_DROPOUT_MLP = 3,   /* after the MLP output projection */
  MGT_DROPOUT_HEAD = 4,  /* a fine-tuning head's input, the pooled [CLS] */
};
uint64_t mgt_rng_init_stream(uint32_t tensor_id);
uint64_t mgt_rng_dropout_stream(uint64_t sample, int layer, int site);
/* Stream of the synthetic data generator and of the data sampler. */
uint64_t mgt_rng_data_stream(uint32_t what);

/* One standard normal for element `index` of `stream` (Box-Muller over one Philox call
   per pair of elements). */
float mgt_rng_normal(uint64_t seed, uint64_t stream, uint64_t index);
/* Elements 2*pair and 2*pair + 1 at once (the two outputs of one Box-Muller draw). */
void mgt_rng_normal_pair(uint64_t seed, uint64_t stream, uint64_t pair, float out[2]);
/* The four raw 32-bit words of the Philox block that holds elements 4k..4k+3. */
void mgt_rng_block(uint64_t seed, uint64_t stream, uint64_t block, uint32_t out[4]);

#ifdef __cplusplus
}
#endif
