/* The device front end's per-sample work on the audio thread (AUDIO THREAD:
 * ssae_engine_pcm.c; tools/bench/copy_bench.c times the same functions):
 * copy a channel's block into its ring row, noting in the same pass whether
 * any sample is zero (the worker then scans the row for digital silence)
 * or not finite. Both return bit 0: some sample is zero, bit 1: some is
 * NaN or infinite. Internal to the engine; not installed. */
#ifndef SSAE_PCM_COPY_H
#define SSAE_PCM_COPY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "ssae_realtime.h"

/* Through the cache (branch-free: it vectorises). */
SSAE_REALTIME static inline unsigned ssae_pcm_copy_cached(float *dst, const float *src,
                                                          size_t n) {
  uint32_t zero = 0, bad = 0;
  for (size_t i = 0; i < n; i++) {
    const float v = src[i];
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    dst[i] = v;
    zero |= v == 0.0f;
    bad |= (u & 0x7f800000u) == 0x7f800000u;
  }
  return zero | bad << 1;
}

/* With non-temporal stores: each 64-byte line of dst written whole, with no
 * read of it first. Such stores are not ordered by a release: the caller
 * calls ssae_pcm_stream_fence before it publishes the samples. */
SSAE_REALTIME static inline unsigned ssae_pcm_copy_stream(float *dst, const float *src,
                                                          size_t n) {
#if defined(__SSE2__)
  size_t i = 0;
  while (i < n && ((uintptr_t)(dst + i) & 15)) i++;
  unsigned f = ssae_pcm_copy_cached(dst, src, i);
  const __m128 z = _mm_setzero_ps();
  const __m128i ex = _mm_set1_epi32(0x7f800000);
  __m128i za = _mm_setzero_si128(), ba = _mm_setzero_si128();
  for (; i + 4 <= n; i += 4) {
    const __m128 v = _mm_loadu_ps(src + i);
    _mm_stream_ps(dst + i, v);
    za = _mm_or_si128(za, _mm_castps_si128(_mm_cmpeq_ps(v, z)));
    ba = _mm_or_si128(ba, _mm_cmpeq_epi32(_mm_and_si128(_mm_castps_si128(v), ex), ex));
  }
  f |= (unsigned)(_mm_movemask_epi8(za) != 0) | (unsigned)(_mm_movemask_epi8(ba) != 0) << 1;
  return f | ssae_pcm_copy_cached(dst + i, src + i, n - i);
#else
  return ssae_pcm_copy_cached(dst, src, n);
#endif
}

/* The n samples at src into the cache ahead of their copy: one channel's
 * block is too short a stream for the hardware prefetchers, so the copy
 * prefetches the channel a few ahead of the one it copies. */
SSAE_REALTIME static inline void ssae_pcm_prefetch(const float *src, size_t n) {
  const char *a = (const char *)src;
  for (size_t k = 0; k < n * sizeof(float); k += 64) __builtin_prefetch(a + k, 0, 0);
}

/* The streaming stores before it visible before any later store. */
SSAE_REALTIME static inline void ssae_pcm_stream_fence(void) {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

#endif
