/* The project's one deterministic generator: xoshiro256** seeded through
 * splitmix64, a fixed, documented stream so that a seed means the same
 * numbers on every platform (model initialisation, training shuffles and
 * dropout of batches, generated test recordings). */
#ifndef SSAE_RNG_H
#define SSAE_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ssae_rng {
  uint64_t s[4];
} ssae_rng;

void ssae_rng_seed(ssae_rng *r, uint64_t seed);
/* splitmix64: advances *x and returns a well-mixed value of it (the
 * seeding step; also a way to derive independent seeds). */
uint64_t ssae_rng_splitmix64(uint64_t *x);
uint64_t ssae_rng_next(ssae_rng *r);
/* Uniform in [0, 1) with 53 bits. */
double ssae_rng_uniform(ssae_rng *r);
/* Uniform integer in [0, n), unbiased. */
uint64_t ssae_rng_below(ssae_rng *r, uint64_t n);

#ifdef __cplusplus
}
#endif
#endif
