/* SHA-256 (FIPS 180-4), for vocabulary hashes and checkpoint checksums. */
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

#ifdef __cplusplus
}
#endif
