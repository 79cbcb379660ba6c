/* SHA-256 (FIPS 180-4), for vocabulary hashes and checkpoint checksums, and the 64-bit mixer
   behind the checkpoint's per-element hash and the tokenizer's hash tables. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mgt_sha256 {
  uint32_t h[8];
  uint64_t bytes;
  unsigned char buf[64];
  size_t fill;
} mgt_sha256;

void mgt_sha256_init(mgt_sha256 *s);
void mgt_sha256_update(mgt_sha256 *s, const void *data, size_t n);
void mgt_sha256_final(mgt_sha256 *s, unsigned char digest[32]);
/* Lower-case hex of a digest: 64 characters and a NUL. */
void mgt_sha256_hex(const unsigned char digest[32], char hex[65]);

/* MurmurHash3's 64-bit finalizer: every input bit affects every output bit. */
static inline uint64_t mgt_fmix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

#ifdef __cplusplus
}
#endif
