/* SHA-256 (FIPS 180-4), for the input-list digest of shard outputs. */
#ifndef SSAE_SHA256_H
#define SSAE_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct ssae_sha256 {
  uint32_t h[8];
  uint64_t len; /* bytes so far */
  unsigned char buf[64];
  size_t fill;
} ssae_sha256;

void ssae_sha256_init(ssae_sha256 *s);
void ssae_sha256_update(ssae_sha256 *s, const void *data, size_t n);
void ssae_sha256_final(ssae_sha256 *s, unsigned char out[32]);

#endif
