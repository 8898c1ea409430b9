/* Frames side by side in SIMD lanes (internal to dsp/).
 *
 * The power-of-two front end computes SSAE_LANES frames at once, frame l in
 * lane l of every vector, with the GCC/Clang vector extension. Every
 * operation on these vectors is lane-wise IEEE arithmetic (add, multiply,
 * divide, no contraction into FMA in ISO C mode) or data movement, so the
 * bits of a frame do not depend on the frames that share its batch nor on
 * how many lanes are in use: a stream fed one sample at a time gets the very
 * bits of a whole-file pass. Without AVX-512 the compiler splits each vector
 * into AVX2 or SSE2 halves; the result is the same. */
#ifndef SSAE_LANES_H
#define SSAE_LANES_H

#include <string.h>

#define SSAE_LANES 8

typedef double ssae_v8d __attribute__((vector_size(64)));
typedef float ssae_v8f __attribute__((vector_size(32)));
typedef long long ssae_v8l __attribute__((vector_size(64)));

/* Clones for AVX-512, AVX2 and the baseline, picked at load time. Not under
 * ThreadSanitizer: glibc runs ifunc resolvers before TSan is initialised,
 * and the process dies at start. */
#if !defined(__SANITIZE_THREAD__) && defined(__x86_64__) && defined(__GNUC__) && \
    !defined(__clang__) && defined(__linux__)
#define SSAE_LANES_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SSAE_LANES_CLONES
#endif

#endif
