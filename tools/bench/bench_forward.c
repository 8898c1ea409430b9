/* Windows per second of the CPU forward pass alone (BENCHMARKS.md):
 *   bench_forward [MODEL] [SECONDS]
 * on a single thread and on all threads: separate windows (scores only and
 * with reconstructions, batches of 4096 windows at log-mel scale) and runs
 * of consecutive frames as `ssae score` gives them (4100 frames: 4096
 * windows).
 *   bench_forward [MODEL] [SECONDS] streams
 * only the comparison that ends the full run: the real-time engine's case,
 * one window of each of 256 streams per call on one thread,
 * ssae_cpu_forward against ssae_cpu_score_cached with every window
 * continuing its stream (only its new frame encoded), alternating, 3
 * rounds, with the ratio. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ssae_cpu.h"
#include "ssae_model.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* Prints windows per second of wall time and per CPU-second (the latter
 * holds on a machine that others share). */
/* frames: x holds n+F-1 consecutive frames, not n windows. */
static void rate(const char *what, ssae_cpu *c, const float *x, size_t n, float *s, float *r,
                 int frames, int F, double secs) {
  size_t done = 0;
  double t0 = 0, c0 = 0, t;
  for (int warm = 1; warm >= 0; warm--) {
    t0 = now(), c0 = cpu_now();
    do {
      if (frames) ssae_cpu_score_frames(c, x, n + (size_t)F - 1, s);
      else ssae_cpu_forward(c, x, n, s, r);
      done += n;
    } while ((t = now() - t0) < (warm ? secs / 4 : secs));
    if (warm) done = 0;
  }
  double ct = cpu_now() - c0;
  printf("%-28s %10.0f windows/s  %10.0f windows per CPU-second\n", what, (double)done / t,
         (double)done / ct);
}

/* Windows per second of nw windows per call, ssae_cpu_forward or (caches
 * not NULL) ssae_cpu_score_cached with every window continuing its stream.
 * The same windows every call, so the continuations are not true of the
 * data; that changes the scores, not the work. */
static double rate_streams(ssae_cpu *c, const float *x, size_t nw, float *s, double **caches,
                           const unsigned char *cont, double secs) {
  size_t done = 0;
  double t0 = 0, t;
  for (int warm = 1; warm >= 0; warm--) {
    t0 = now();
    do {
      if (caches) ssae_cpu_score_cached(c, x, nw, caches, cont, s);
      else ssae_cpu_forward(c, x, nw, s, NULL);
      done += nw;
    } while ((t = now() - t0) < (warm ? secs / 4 : secs));
    if (warm) done = 0;
  }
  return (double)done / t;
}

static void streams(ssae_cpu *c1, const float *x, float *s, double secs) {
  enum { NW = 256 };
  size_t len = ssae_cpu_codes_len(c1);
  double *store = calloc(NW * len, sizeof *store), *caches[NW];
  unsigned char cont[NW];
  for (size_t i = 0; i < NW; i++) caches[i] = store + i * len, cont[i] = 0;
  ssae_cpu_score_cached(c1, x, NW, caches, cont, s); /* every stream's first window */
  memset(cont, 1, sizeof cont);
  printf("1 thread, %d streams, one window each per call:\n", NW);
  for (int round = 1; round <= 3; round++) {
    double f = rate_streams(c1, x, NW, s, NULL, NULL, secs);
    double k = rate_streams(c1, x, NW, s, caches, cont, secs);
    printf("  round %d: forward %10.0f windows/s, cached %10.0f windows/s, ratio %.2f\n", round,
           f, k, k / f);
  }
  free(store);
}

int main(int argc, char **argv) {
  ssae_err err = {{0}};
  ssae_model *m = ssae_model_open(argc > 1 && argv[1][0] ? argv[1] : NULL, &err);
  if (!m) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  double secs = argc > 2 ? atof(argv[2]) : 2.0;
  size_t n = 4096, win = (size_t)m->d.frames * (size_t)m->d.n_mels;
  float *x = malloc(n * win * sizeof *x), *r = malloc(n * win * sizeof *r),
        *s = malloc(n * sizeof *s);
  unsigned seed = 1;
  for (size_t i = 0; i < n * win; i++) {
    seed = seed * 1103515245u + 12345u;
    x[i] = -90.0f + 80.0f * (float)((seed >> 8) & 0xFFFF) / 65535.0f;
  }
  ssae_cpu *c1 = ssae_cpu_new(m, 1, &err), *ca = ssae_cpu_new(m, 0, &err);
  if (!c1 || !ca) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  printf("kernels %s; model n_mels=%d frames=%d latent=%d slice_latent=%d, batch %zu\n",
         ssae_cpu_isa(), m->d.n_mels, m->d.frames, m->d.latent, m->d.slice_latent, n);
  if (!(argc > 3 && !strcmp(argv[3], "streams"))) {
    char what[64];
    int F = m->d.frames;
    rate("1 thread, frames (score)", c1, x, n, s, NULL, 1, F, secs);
    rate("1 thread, windows, scores", c1, x, n, s, NULL, 0, F, secs);
    rate("1 thread, windows, recon", c1, x, n, s, r, 0, F, secs);
    snprintf(what, sizeof what, "%d threads, frames (score)", ssae_cpu_threads(ca));
    rate(what, ca, x, n, s, NULL, 1, F, secs);
    snprintf(what, sizeof what, "%d threads, windows, scores", ssae_cpu_threads(ca));
    rate(what, ca, x, n, s, NULL, 0, F, secs);
    snprintf(what, sizeof what, "%d threads, windows, recon", ssae_cpu_threads(ca));
    rate(what, ca, x, n, s, r, 0, F, secs);
  }
  streams(c1, x, s, secs);
  ssae_cpu_free(c1);
  ssae_cpu_free(ca);
  ssae_model_free(m);
  free(x);
  free(r);
  free(s);
  return 0;
}
