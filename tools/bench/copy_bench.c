/* The device front end's audio-thread copy, alone (not a test): what one
 * feeding thread can move per block from C channels' buffers into the
 * page-locked PCM rings (ssae_engine_pcm.c), with the engine's layout:
 * rows of 8192 floats (32 KB) a channel, in huge pages; the source as
 * engine_bench feeds it (two seconds of distinct audio per channel, looped:
 * cold in DRAM at thousands of channels) or warm (one block's buffers
 * reused every period, as a JACK client's port buffers are).
 *
 *   copy_bench [--channels C] [--block B] [--blocks N] [--cpu K] [--ahead K[,K...]]
 *              [--period-us P]
 *
 * Variants, run in turn block by block so that the host's noise falls on
 * all of them alike:
 *   cached    the loop through the cache (store after a read for ownership)
 *   stream    non-temporal stores: each 64-byte line of a row is written
 *             whole, with no read of the line first
 *   stream+pfK the same, the sources of the channels K ahead prefetched
 *             (--ahead: default 4,8,16; the engine takes 4)
 * The copies are the engine's own (src/engine/ssae_pcm_copy.h): each also
 * notes zeros and non-finite samples.
 * --period-us P: each block starts P microseconds after the one before (the
 * thread sleeps in between), as an audio thread's do (4000 for blocks of 64
 * at 16 kHz); 0 (the default): back to back, which leaves the sources of
 * the next block partly in the cache (the hardware prefetchers run ahead of
 * each channel's read), so that "cold" is then warmer than a real period's.
 * Prints mean, p50, p99 and max milliseconds per block and GB/s (bytes
 * copied over the mean). */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "ssae_pcm_copy.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void *huge(size_t bytes) {
  const size_t align = 2u << 20;
  bytes = (bytes + align - 1) & ~(align - 1);
  void *p = aligned_alloc(align, bytes);
  if (!p) return NULL;
  madvise(p, bytes, MADV_HUGEPAGE);
  memset(p, 0, bytes);
  return p;
}

static int cmp(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

enum { VMAX = 10 };

int main(int argc, char **argv) {
  int C = 8192, B = 256, N = 300, cpu = 1, V = 2, period_us = 0;
  int ahead[VMAX] = {0, 0};
  char names[VMAX][24] = {"cached", "stream"};
  const char *list = "4,8,16";
  static const char usage[] =
      "usage: copy_bench [--channels C (8192)] [--block B (256)] [--blocks N (300)] [--cpu K "
      "(1)]\n                  [--ahead K[,K...] (4,8,16)] [--period-us P (0)]\n";
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(usage, stdout);
      return 0;
    }
  if (argc % 2 == 0) {
    fprintf(stderr, "copy_bench: %s needs a value\n%s", argv[argc - 1], usage);
    return 2;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--channels")) C = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--ahead")) list = argv[i + 1];
    else if (!strcmp(argv[i], "--block")) B = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--blocks")) N = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--cpu")) cpu = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--period-us")) period_us = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "copy_bench: unknown option %s\n%s", argv[i], usage);
      return 2;
    }
  }
  for (const char *q = list; q && *q && V < VMAX; V++) {
    ahead[V] = atoi(q);
    snprintf(names[V], sizeof names[V], "stream+pf%d", ahead[V]);
    q = strchr(q, ',');
    if (q) q++;
  }
  if (C < 1 || B < 16 || B > 2048 || N < 10 || period_us < 0 || period_us > 1000000) {
    fprintf(stderr, "copy_bench: bad sizes\n");
    return 2;
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set)) perror("copy_bench: pinning");
  const size_t row = 8192, len = 32000;
  float *rows = huge(sizeof(float) * row * (size_t)C);
  float *cold = huge(sizeof(float) * len * (size_t)C);
  float *warm = huge(sizeof(float) * (size_t)B * (size_t)C);
  double *t = malloc(sizeof(double) * (size_t)N * VMAX * 2);
  const float **src = malloc(sizeof(*src) * (size_t)C);
  if (!rows || !cold || !warm || !t || !src) {
    fprintf(stderr, "copy_bench: out of memory\n");
    return 1;
  }
  uint32_t x = 1;
  for (size_t i = 0; i < len * (size_t)C; i++) {
    x = x * 1664525u + 1013904223u;
    cold[i] = ((float)(x >> 8) / 16777216.0f - 0.5f) * 0.1f;
  }
  memcpy(warm, cold, sizeof(float) * (size_t)B * (size_t)C);
  printf("# copy_bench: %d channels, blocks of %d, %d blocks per variant, CPU %d, %s\n", C, B,
         N, cpu, period_us ? "one block a period" : "blocks back to back");
  if (period_us) printf("# period %d us\n", period_us);
  printf("# source  variant      mean_ms   p50_ms   p99_ms   max_ms    GB/s\n");
  unsigned flags = 0;
  for (int s = 0; s < 2; s++) {
    size_t pos = 0, at = 0;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    for (int b = 0; b < N * V; b++) {
      const int v = b % V;
      if (period_us) {
        next.tv_nsec += (long)period_us * 1000;
        while (next.tv_nsec >= 1000000000L) {
          next.tv_nsec -= 1000000000L;
          next.tv_sec++;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
      }
      for (int i = 0; i < C; i++)
        src[i] = s ? warm + (size_t)i * B : cold + (size_t)i * len + pos;
      const double t0 = now_ms();
      for (int i = 0; i < C; i++) {
        float *d = rows + (size_t)i * row + at;
        if (v == 0) flags += ssae_pcm_copy_cached(d, src[i], (size_t)B);
        else {
          const int a = ahead[v];
          if (a && i + a < C) ssae_pcm_prefetch(src[i + a], (size_t)B);
          flags += ssae_pcm_copy_stream(d, src[i], (size_t)B);
        }
      }
      ssae_pcm_stream_fence();
      t[(size_t)s * N * V + (size_t)v * N + (size_t)(b / V)] = now_ms() - t0;
      /* Every block its own sources and ring positions, whichever variant
       * copies it: a variant after another on the same block would read
       * sources the first left in the cache (cold sources read warm). */
      pos = pos + 2 * (size_t)B > len ? 0 : pos + (size_t)B;
      at = (at + (size_t)B) & (row - 1);
    }
    for (int v = 0; v < V; v++) {
      double *r = t + (size_t)s * N * V + (size_t)v * N, sum = 0;
      for (int k = 0; k < N; k++) sum += r[k];
      qsort(r, (size_t)N, sizeof *r, cmp);
      const double mean = sum / N;
      printf("  %-6s  %-10s %8.3f %8.3f %8.3f %8.3f %7.2f\n", s ? "warm" : "cold", names[v],
             mean, r[N / 2], r[(N * 99) / 100], r[N - 1],
             (double)C * B * sizeof(float) / (mean * 1e6));
    }
  }
  /* The flags, so that no copy can be left out as unused. */
  printf("# (%u)\n", flags % 7);
  return 0;
}
