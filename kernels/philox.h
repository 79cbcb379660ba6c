/* Private inline Philox4x32-10 shared by the CPU kernels, the CUDA kernels and kernels/rng.c,
   so that both backends draw the same numbers. */
#pragma once

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define MGT_HD __host__ __device__
#else
#define MGT_HD
#endif

#define MGT_PHILOX_M0 0xD2511F53u
#define MGT_PHILOX_M1 0xCD9E8D57u
#define MGT_PHILOX_W0 0x9E3779B9u
#define MGT_PHILOX_W1 0xBB67AE85u

MGT_HD static inline void mgt_philox_block(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                           uint32_t k0, uint32_t k1, uint32_t out[4]) {
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
MGT_HD static inline void mgt_philox_at(uint64_t seed, uint64_t stream, uint64_t block,
                                        uint32_t out[4]) {
  mgt_philox_block((uint32_t)block, (uint32_t)(block >> 32), (uint32_t)stream,
                   (uint32_t)(stream >> 32), (uint32_t)seed, (uint32_t)(seed >> 32), out);
}

/* A dropout keep decision: drop when the word is below p * 2^32. */
MGT_HD static inline uint32_t mgt_dropout_threshold(float p) {
  double t = (double)p * 4294967296.0;
  return t >= 4294967295.0 ? 0xFFFFFFFFu : (uint32_t)t;
}

/* The dropout stream of (global sample, layer, site): 20 low bits, 16 for the layer (the
   embedding uses layer 0xFFFF) and 4 for the site. */
MGT_HD static inline uint64_t mgt_philox_dropout_stream(uint64_t sample, int layer, int site) {
  return ((sample & 0x3FFFFFFFFFFull) << 20) | ((uint64_t)(layer & 0xFFFF) << 4) |
         (uint64_t)(site & 0xF);
}
