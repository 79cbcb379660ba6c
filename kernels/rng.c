#include "mgt/rng.h"

#include "philox.h"

void mgt_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  mgt_philox_block(ctr[0], ctr[1], ctr[2], ctr[3], key[0], key[1], out);
}

uint64_t mgt_rng_init_stream(uint32_t tensor_id) { return (1ull << 63) | tensor_id; }

uint64_t mgt_rng_dropout_stream(uint64_t sample, int layer, int site) {
  return mgt_philox_dropout_stream(sample, layer, site);
}

uint64_t mgt_rng_data_stream(uint32_t what) { return (3ull << 62) | what; }

void mgt_rng_block(uint64_t seed, uint64_t stream, uint64_t block, uint32_t out[4]) {
  mgt_philox_at(seed, stream, block, out);
}

void mgt_rng_normal_pair(uint64_t seed, uint64_t stream, uint64_t pair, float out[2]) {
  uint32_t w[4];
  mgt_philox_at(seed, stream, pair, w);
  /* 53-bit uniforms in (0, 1]; the log never sees zero. */
  uint64_t a = ((uint64_t)w[0] << 21) ^ (w[1] >> 11);
  uint64_t b = ((uint64_t)w[2] << 21) ^ (w[3] >> 11);
  double u1 = ((double)(a & ((1ull << 53) - 1)) + 1.0) / 9007199254740992.0;
  double u2 = (double)(b & ((1ull << 53) - 1)) / 9007199254740992.0;
  double r = sqrt(-2.0 * log(u1));
  double th = 6.283185307179586 * u2;
  out[0] = (float)(r * cos(th));
  out[1] = (float)(r * sin(th));
}

float mgt_rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  float z[2];
  mgt_rng_normal_pair(seed, stream, index >> 1, z);
  return z[index & 1];
}
