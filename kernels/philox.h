/* Private inline Philox4x32-10 shared by the CPU kernels and kernels/rng.c. */
#pragma once

#include <math.h>
#include <stdint.h>

#define MGT_PHILOX_M0 0xD2511F53u
#define MGT_PHILOX_M1 0xCD9E8D57u
#define MGT_PHILOX_W0 0x9E3779B9u
#define MGT_PHILOX_W1 0xBB67AE85u

static inline void mgt_philox_block(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                                    uint32_t k1, uint32_t out[4]) {
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)MGT_PHILOX_M0 * c0;
    uint64_t p1 = (uint64_t)MGT_PHILOX_M1 * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
    k0 += MGT_PHILOX_W0;
    k1 += MGT_PHILOX_W1;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

/* Element-addressed block: counter = (block, stream), key = seed. */
static inline void mgt_philox_at(uint64_t seed, uint64_t stream, uint64_t block, uint32_t out[4]) {
  mgt_philox_block((uint32_t)block, (uint32_t)(block >> 32), (uint32_t)stream,
                   (uint32_t)(stream >> 32), (uint32_t)seed, (uint32_t)(seed >> 32), out);
}

/* A dropout keep decision: drop when the word is below p * 2^32. */
static inline uint32_t mgt_dropout_threshold(float p) {
  double t = (double)p * 4294967296.0;
  return t >= 4294967295.0 ? 0xFFFFFFFFu : (uint32_t)t;
}
