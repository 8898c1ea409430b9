/* The CUDA backend against a float64 forward pass (written here, straight
 * from SPEC section 2) and against the CPU backend, on fresh random models
 * and inputs each run, outputs poisoned with NaN before each launch.
 * Exits 77 without a CUDA device (but --list).
 *
 *   test_cuda_forward [--quick|--tiny|--last-round]
 *                                        every dims / kernel / batch case,
 *                                        auto and every kernel of the table
 *                                        forced (--quick: up to 4097
 *                                        windows and the last-round batch,
 *                                        --tiny: up to 33, --last-round:
 *                                        only that batch; the last two for
 *                                        the sanitizers). SSAE_TEST_KERNELS=
 *                                        a,b: auto and only these forced
 *   test_cuda_forward --list             the kernel table, one kernel a line
 *                                        (name, auto's largest batch or
 *                                        "any", opt-in or auto, purpose;
 *                                        tab-separated), checked: names
 *                                        unique, [a-z0-9_], generic last
 *   test_cuda_forward --fallback         the backend table's switch to the CPU
 *   test_cuda_forward --apply MODEL IN N SCORES RECON
 *                                        raw float32 files in and out (for
 *                                        the PyTorch test) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ssae_backend.h"
#include "ssae_cpu.h"
#include "ssae_cuda.h"
#include "ssae_model.h"

static uint64_t rng_state;

static uint64_t rnd(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  uint64_t z = rng_state;
  z = (z ^ (z >> 33)) * 0xff51afd7ed558ccdull;
  return z ^ (z >> 33);
}

static double unif(void) { return (double)(rnd() >> 11) * 0x1.0p-53; }

/* Windows at log-mel scale: a level per window in -100 ... -20 dB, a slope
 * across the bands and +-20 dB of noise (so -100 ... +20 overall). */
static void random_windows(const ssae_dims *d, float *x, size_t n) {
  const size_t FM = (size_t)d->frames * d->n_mels;
  for (size_t w = 0; w < n; w++) {
    const double level = -100.0 + 80.0 * unif(), slope = 30.0 * (unif() - 0.5);
    for (size_t i = 0; i < FM; i++) {
      const double band = (double)(i % (size_t)d->n_mels) / d->n_mels;
      x[w * FM + i] = (float)(level + slope * band + 40.0 * (unif() - 0.5));
    }
  }
}

/* A random model, LayerNorm parameters away from ones/zeros so that their
 * handling is checked too. */
static ssae_model *random_model(const ssae_dims *d) {
  ssae_err err = {{0}};
  ssae_model *m = ssae_model_new(d, &err);
  if (!m) {
    fprintf(stderr, "model: %s\n", err.msg);
    exit(1);
  }
  ssae_model_init(m, rnd());
  for (int i = 0; i < d->n_mels; i++) {
    m->ln_enc_w[i] = (float)(0.5 + unif());
    m->ln_enc_b[i] = (float)(0.4 * (unif() - 0.5));
  }
  for (int i = 0; i < d->latent; i++) {
    m->ln_bn_w[i] = (float)(0.5 + unif());
    m->ln_bn_b[i] = (float)(0.4 * (unif() - 0.5));
  }
  if (ssae_model_update(m, &err)) {
    fprintf(stderr, "model: %s\n", err.msg);
    exit(1);
  }
  return m;
}

static double gelu64(double v) { return 0.5 * v * (1.0 + erf(v / sqrt(2.0))); }

static void layernorm64(double *v, int n, const float *w, const float *b) {
  double s = 0, q = 0;
  for (int i = 0; i < n; i++) s += v[i];
  const double mean = s / n;
  for (int i = 0; i < n; i++) q += (v[i] - mean) * (v[i] - mean);
  const double rstd = 1.0 / sqrt(q / n + 1e-5);
  for (int i = 0; i < n; i++) v[i] = (v[i] - mean) * rstd * w[i] + b[i];
}

/* SPEC section 2 in float64 from the float32 weights; returns the score. */
static double forward64(const ssae_model *m, const float *x, double *y, double *scratch) {
  const int M = m->d.n_mels, F = m->d.frames, L = m->d.latent, S = m->d.slice_latent;
  const int C = F * S;
  double *xn = scratch, *c = xn + M, *z = c + C, *z2 = z + L, *nb = z2 + L, *r = nb + L * C;
  for (int l = 0; l < L; l++) {
    double q = 0;
    for (int k = 0; k < C; k++) q += (double)m->basis[l * C + k] * m->basis[l * C + k];
    const double nrm = fmax(sqrt(q), 1e-12);
    for (int k = 0; k < C; k++) nb[l * C + k] = m->basis[l * C + k] / nrm;
  }
  for (int f = 0; f < F; f++) {
    for (int i = 0; i < M; i++) xn[i] = x[f * M + i];
    layernorm64(xn, M, m->ln_enc_w, m->ln_enc_b);
    for (int s = 0; s < S; s++) {
      double a = m->enc_b[s];
      for (int i = 0; i < M; i++) a += (double)m->enc_w[s * M + i] * xn[i];
      c[f * S + s] = gelu64(a);
    }
  }
  for (int l = 0; l < L; l++) {
    double a = 0;
    for (int k = 0; k < C; k++) a += nb[l * C + k] * c[k];
    z[l] = a;
  }
  layernorm64(z, L, m->ln_bn_w, m->ln_bn_b);
  for (int l = 0; l < L; l++) {
    double a = m->bn_b[l];
    for (int k = 0; k < L; k++) a += (double)m->bn_w[l * L + k] * z[k];
    z2[l] = gelu64(a);
  }
  for (int k = 0; k < C; k++) {
    double a = 0;
    for (int l = 0; l < L; l++) a += nb[l * C + k] * z2[l];
    r[k] = a;
  }
  double se = 0;
  for (int f = 0; f < F; f++)
    for (int i = 0; i < M; i++) {
      double a = m->dec_b[i];
      for (int s = 0; s < S; s++) a += (double)m->dec_w[i * S + s] * r[f * S + s];
      y[f * M + i] = a;
      se += (a - x[f * M + i]) * (a - x[f * M + i]);
    }
  return se / (F * M);
}

static int failures;

#define CHECK(cond, ...)              \
  do {                                \
    if (!(cond)) {                    \
      fprintf(stderr, "FAIL: ");      \
      fprintf(stderr, __VA_ARGS__);   \
      fprintf(stderr, "\n");          \
      failures++;                     \
    }                                 \
  } while (0)

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "out of memory (%zu bytes)\n", n);
    exit(1);
  }
  return p;
}

static void poison(float *p, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = NAN;
}

/* One batch through one CUDA instance: every output written and finite,
 * sampled windows within SPEC section 2 of float64 and of the CPU. */
static void check_batch(const ssae_model *m, ssae_cpu *cpu, void *gpu, const char *kname,
                        size_t n) {
  const size_t FM = (size_t)m->d.frames * m->d.n_mels;
  float *x = xmalloc(n * FM * sizeof *x), *rec = xmalloc(n * FM * sizeof *rec);
  float *sc = xmalloc(n * sizeof *sc), *sc2 = xmalloc(n * sizeof *sc2);
  random_windows(&m->d, x, n);
  ssae_err err = {{0}};
  poison(sc, n);
  poison(rec, n * FM);
  if (ssae_backend_cuda.run(gpu, x, n, sc, rec, &err)) {
    CHECK(0, "%s n=%zu: run: %s", kname, n, err.msg);
    goto out;
  }
  poison(sc2, n);
  if (ssae_backend_cuda.run(gpu, x, n, sc2, NULL, &err)) {
    CHECK(0, "%s n=%zu: scores-only run: %s", kname, n, err.msg);
    goto out;
  }
  size_t bad = 0, diff = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(sc[i]) || !isfinite(sc2[i])) bad++;
    else if (sc[i] != sc2[i]) diff++;
  }
  for (size_t i = 0; i < n * FM; i++)
    if (!isfinite(rec[i])) bad++;
  CHECK(bad == 0, "%s n=%zu: %zu outputs not written (still NaN) or not finite", kname, n, bad);
  CHECK(diff == 0, "%s n=%zu: %zu scores differ between the two modes", kname, n, diff);

  /* Every window up to 4097, else 2000 random ones plus both ends. */
  size_t ns = n <= 4097 ? n : 2002;
  size_t *idx = xmalloc(ns * sizeof *idx);
  for (size_t i = 0; i < ns; i++)
    idx[i] = n <= 4097 ? i : i == 0 ? 0 : i == 1 ? n - 1 : (size_t)(rnd() % n);
  float *xs = xmalloc(ns * FM * sizeof *xs), *cr = xmalloc(ns * FM * sizeof *cr);
  float *cs = xmalloc(ns * sizeof *cs);
  for (size_t i = 0; i < ns; i++) memcpy(xs + i * FM, x + idx[i] * FM, FM * sizeof *xs);
  if (ssae_cpu_forward(cpu, xs, ns, cs, cr)) CHECK(0, "cpu forward failed");
  const int C = m->d.frames * m->d.slice_latent, L = m->d.latent;
  double *y = xmalloc(FM * sizeof *y);
  double *scr = xmalloc(((size_t)m->d.n_mels + 2 * C + 2 * L + (size_t)L * C) * sizeof *scr);
  double num = 0, den = 0, cnum = 0, worst_w = 0, worst_s = 0, worst_cs = 0;
  for (size_t i = 0; i < ns; i++) {
    const size_t w = idx[i];
    const double s64 = forward64(m, x + w * FM, y, scr);
    double wn = 0, wd = 0;
    for (size_t k = 0; k < FM; k++) {
      const double e = rec[w * FM + k] - y[k], ce = (double)rec[w * FM + k] - cr[i * FM + k];
      wn += e * e;
      wd += y[k] * y[k];
      cnum += ce * ce;
    }
    num += wn;
    den += wd;
    const double wr = sqrt(wn / wd);
    if (!(wr <= worst_w)) worst_w = wr;
    const double se = fabs(sc[w] - s64) / fabs(s64);
    if (!(se <= worst_s)) worst_s = se;
    const double ce = fabs((double)sc[w] - cs[i]) / fabs((double)cs[i]);
    if (!(ce <= worst_cs)) worst_cs = ce;
  }
  const double rel = sqrt(num / den), crel = sqrt(cnum / den);
  printf("%-16s M=%-3d F=%-2d L=%-3d S=%-3d n=%-8zu relL2(f64)=%.2e worst-window=%.2e "
         "score-rel(f64)=%.2e relL2(cpu)=%.2e score-rel(cpu)=%.2e\n",
         kname, m->d.n_mels, m->d.frames, m->d.latent, m->d.slice_latent, n, rel, worst_w,
         worst_s, crel, worst_cs);
  CHECK(rel <= 1e-6, "%s n=%zu: relative L2 %.3g vs float64 > 1e-6", kname, n, rel);
  CHECK(worst_s <= 1e-5, "%s n=%zu: score relative error %.3g vs float64 > 1e-5", kname, n,
        worst_s);
  CHECK(crel <= 2e-6, "%s n=%zu: relative L2 %.3g vs the CPU backend", kname, n, crel);
  CHECK(worst_cs <= 2e-5, "%s n=%zu: score error %.3g vs the CPU backend", kname, n, worst_cs);
  free(idx);
  free(xs);
  free(cr);
  free(cs);
  free(y);
  free(scr);
out:
  free(x);
  free(rec);
  free(sc);
  free(sc2);
}

/* quick: 0 every size, 1 up to 4097, 2 tiny batches only (sanitizers),
 * 3 only the last-round batch (one full round of the per-warp kernel plus
 * five tiles and three windows: the tiles that warps of a block compute
 * together), default dims. The last-round batch is also in 0 and 1. */
static void run_cases(int quick) {
  static const ssae_dims dims[] = {
      {64, 5, 32, 64},  /* default: tiled kernels */
      {64, 7, 32, 64},  /* tiled, other frame count */
      {40, 3, 16, 24},  /* generic */
      {33, 2, 5, 17},   /* generic, nothing a multiple of 4 */
      {128, 5, 48, 96}, /* generic, larger */
  };
  const size_t round = ssae_cuda_warp_round();
  const size_t all_n[] = {1, 7, 33, 4097, 100000, 1048576, round ? round + 83 : 0};
  const int nkernels = ssae_cuda_kernel_count();
  /* SSAE_TEST_KERNELS=a,b,...: only auto and these (device time is scarce). */
  char only_buf[256], *only = NULL;
  const char *ok = getenv("SSAE_TEST_KERNELS");
  if (ok && *ok) {
    snprintf(only_buf, sizeof only_buf, ",%s,", ok);
    only = only_buf;
  }
  for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
    const ssae_dims *d = &dims[di];
    ssae_model *m = random_model(d);
    ssae_err err = {{0}};
    ssae_cpu *cpu = ssae_cpu_new(m, 0, &err);
    if (!cpu) {
      fprintf(stderr, "cpu: %s\n", err.msg);
      exit(1);
    }
    /* Other dimensions run only on generic: the specialised kernels
     * forced there would be generic again. */
    const int spec = d->n_mels == 64 && d->slice_latent == 64 && d->latent == 32;
    /* k = -1: auto; else row k of the kernel table forced. */
    for (int k = -1; k < nkernels; k++) {
      const char *kname = k < 0 ? "auto" : ssae_cuda_kernel_info(k)->name;
      if (k >= 0 && !spec && strcmp(kname, "generic")) continue;
      if (only && k >= 0) {
        char key[64];
        snprintf(key, sizeof key, ",%s,", kname);
        if (!strstr(only, key)) continue;
      }
      setenv("SSAE_CUDA_KERNEL", k < 0 ? "" : kname, 1);
      void *gpu = ssae_backend_cuda.create(m, 0, &err);
      if (!gpu) {
        CHECK(0, "create (%s): %s", kname, err.msg);
        continue;
      }
      for (size_t ni = 0; ni < sizeof all_n / sizeof all_n[0]; ni++) {
        const size_t n = all_n[ni];
        const int last = ni == sizeof all_n / sizeof all_n[0] - 1;
        if (n == 0 || (quick == 3 && (!last || di != 0))) continue;
        /* The largest batches for the default dims on every kernel; the
         * other cases up to 100000 (or 4097 with --quick). */
        if (!(last && di == 0 && quick != 2) && n > (quick == 2 ? 33 : quick ? 4097 : 100000) &&
            !(di == 0 && !quick))
          continue;
        char name[96];
        snprintf(name, sizeof name, "%s/%s", kname, ssae_cuda_kernel_name(gpu, n));
        check_batch(m, cpu, gpu, name, n);
      }
      ssae_backend_cuda.destroy(gpu);
    }
    unsetenv("SSAE_CUDA_KERNEL");
    ssae_cpu_free(cpu);
    ssae_model_free(m);
  }
}

static int fallback_msgs;
static void on_fallback(void *user, const char *msg) {
  (void)user;
  fallback_msgs++;
  printf("fallback reported: %s\n", msg);
}

/* A real CUDA error (an invalid launch, via the test hook) in the middle of a
 * stream of batches: every window still gets its score, the ones after the
 * switch from the CPU, and the switch is reported once. */
static void run_fallback(void) {
  ssae_dims d;
  ssae_dims_default(&d);
  ssae_model *m = random_model(&d);
  ssae_err err = {{0}};
  /* The backend's start-up self-test is run 1; batches 1 and 2 run on the
   * GPU, batch 3 hits the failure. */
  setenv("SSAE_CUDA_FAIL_AFTER", "3", 1);
  ssae_backend *b = ssae_backend_new(m, "cuda", 0, &err);
  unsetenv("SSAE_CUDA_FAIL_AFTER");
  if (!b) {
    CHECK(0, "backend: %s", err.msg);
    ssae_model_free(m);
    return;
  }
  ssae_backend_set_fallback_cb(b, on_fallback, NULL);
  ssae_cpu *cpu = ssae_cpu_new(m, 0, &err);
  const size_t FM = 320, nb = 5, n = 1000;
  float *x = xmalloc(nb * n * FM * sizeof *x), *sc = xmalloc(nb * n * sizeof *sc);
  float *ref = xmalloc(nb * n * sizeof *ref);
  random_windows(&d, x, nb * n);
  poison(sc, nb * n);
  for (size_t i = 0; i < nb; i++) {
    const char *before = ssae_backend_name(b);
    if (ssae_backend_run(b, x + i * n * FM, n, sc + i * n, NULL, &err))
      CHECK(0, "batch %zu: %s", i, err.msg);
    printf("batch %zu: %s -> %s\n", i, before, ssae_backend_name(b));
  }
  ssae_cpu_forward(cpu, x, nb * n, ref, NULL);
  size_t lost = 0, off = 0, exact = 0;
  for (size_t i = 0; i < nb * n; i++) {
    if (!isfinite(sc[i])) lost++;
    else if (fabs(sc[i] - ref[i]) > 2e-5 * fabs(ref[i])) off++;
    if (i >= 2 * n && sc[i] == ref[i]) exact++;
  }
  printf("fallback: %zu windows, %zu lost, %zu off, %zu of %zu after the switch identical "
         "to the CPU\n", nb * n, lost, off, exact, (nb - 2) * n);
  CHECK(lost == 0, "%zu windows lost", lost);
  CHECK(off == 0, "%zu scores differ from the CPU", off);
  CHECK(exact == (nb - 2) * n, "batches after the failure are not the CPU's scores");
  CHECK(fallback_msgs == 1, "fallback reported %d times", fallback_msgs);
  CHECK(!strcmp(ssae_backend_name(b), "cpu"), "backend still says %s", ssae_backend_name(b));

  /* The hook's error comes from CUDA itself and leaves the instance failed. */
  setenv("SSAE_CUDA_FAIL_AFTER", "0", 1);
  void *g = ssae_backend_cuda.create(m, 0, &err);
  unsetenv("SSAE_CUDA_FAIL_AFTER");
  if (g) {
    int rc = ssae_backend_cuda.run(g, x, 10, sc, NULL, &err);
    printf("forced failure: rc=%d msg=%s\n", rc, err.msg);
    CHECK(rc == -1 && strstr(err.msg, "CUDA"), "forced failure not reported");
    ssae_backend_cuda.destroy(g);
  } else {
    CHECK(0, "create: %s", err.msg);
  }
  free(x);
  free(sc);
  free(ref);
  ssae_cpu_free(cpu);
  ssae_backend_free(b);
  ssae_model_free(m);
}

/* A random default-size model, a CUDA backend on it whose fourth run (the
 * start-up self-test is the first) fails for real, and the CPU; 0 when the
 * test cannot go on (reported). */
static int failing_setup(ssae_dims *d, ssae_model **m, ssae_backend **b, ssae_cpu **cpu) {
  ssae_err err = {{0}};
  ssae_dims_default(d);
  *m = random_model(d);
  setenv("SSAE_CUDA_FAIL_AFTER", "3", 1);
  *b = ssae_backend_new(*m, "cuda", 4096, &err);
  unsetenv("SSAE_CUDA_FAIL_AFTER");
  *cpu = ssae_cpu_new(*m, 0, &err);
  if (!*b || !*cpu) {
    CHECK(0, "backend: %s", err.msg);
    ssae_backend_free(*b);
    ssae_cpu_free(*cpu);
    ssae_model_free(*m);
    return 0;
  }
  fallback_msgs = 0;
  ssae_backend_set_fallback_cb(*b, on_fallback, NULL);
  return 1;
}

/* Asynchronous slots (the engine's worker): two batches in flight, laid out
 * in the backend's pinned buffers or given from elsewhere, equal to the
 * CPU; then a real CUDA failure at the launch of the third batch: collect
 * falls back and scores it on the CPU from the slot's windows. */
static void run_async(void) {
  ssae_dims d;
  ssae_model *m;
  ssae_backend *b;
  ssae_cpu *cpu;
  ssae_err err = {{0}};
  if (!failing_setup(&d, &m, &b, &cpu)) return;
  const size_t FM = 320, n[3] = {4096, 37, 1000};
  size_t cap0 = 0, cap1 = 0;
  float *b0 = ssae_backend_input_buffer(b, 0, &cap0), *b1 = ssae_backend_input_buffer(b, 1, &cap1);
  CHECK(b0 && b1 && b0 != b1 && cap0 == 4096 && cap1 == 4096, "slot buffers %p %p, %zu %zu",
        (void *)b0, (void *)b1, cap0, cap1);
  float *own = xmalloc(n[2] * FM * sizeof *own), *sc[3], *ref[3];
  float *xs[3] = {b0, b1, own};
  for (int i = 0; i < 3; i++) {
    sc[i] = xmalloc(n[i] * sizeof *sc[i]);
    ref[i] = xmalloc(n[i] * sizeof *ref[i]);
    poison(sc[i], n[i]);
    /* The CPU's scores now: a slot's buffer is the backend's again once
     * collected (batch 2 is staged through slot 0's). */
    if (xs[i]) {
      random_windows(&d, xs[i], n[i]);
      ssae_cpu_forward(cpu, xs[i], n[i], ref[i], NULL);
    }
  }
  if (b0 && b1) {
    size_t off = 0, lost = 0;
    /* Batches 0 and 1 in flight together, collected in order; batch 2 goes
     * into slot 0 again (from the caller's own memory) and fails. */
    CHECK(!ssae_backend_submit(b, 0, b0, n[0], &err), "submit 0: %s", err.msg);
    CHECK(!ssae_backend_submit(b, 1, b1, n[1], &err), "submit 1: %s", err.msg);
    CHECK(!ssae_backend_collect(b, 0, sc[0], &err), "collect 0: %s", err.msg);
    CHECK(!strcmp(ssae_backend_name(b), "cuda"), "slot 0 ran on %s", ssae_backend_name(b));
    CHECK(!ssae_backend_submit(b, 0, own, n[2], &err), "submit 2: %s", err.msg);
    CHECK(!ssae_backend_collect(b, 1, sc[1], &err), "collect 1: %s", err.msg);
    CHECK(!ssae_backend_collect(b, 0, sc[2], &err), "collect 2: %s", err.msg);
    for (int i = 0; i < 3; i++)
      for (size_t k = 0; k < n[i]; k++) {
        if (!isfinite(sc[i][k])) lost++;
        else if (fabs(sc[i][k] - ref[i][k]) > 2e-5 * fabs(ref[i][k]) ||
                 (i == 2 && sc[i][k] != ref[i][k]))
          off++;
      }
    printf("async: batches of %zu and %zu in flight together, then %zu after a CUDA failure: "
           "%zu lost, %zu off, backend now %s\n", n[0], n[1], n[2], lost, off,
           ssae_backend_name(b));
    CHECK(lost == 0 && off == 0, "async: %zu lost, %zu off", lost, off);
    CHECK(fallback_msgs == 1, "async: fallback reported %d times", fallback_msgs);
    CHECK(!strcmp(ssae_backend_name(b), "cpu"), "async: backend says %s", ssae_backend_name(b));
    CHECK(!ssae_backend_input_buffer(b, 0, &cap0), "async: a GPU buffer after the fall back");
  }
  for (int i = 0; i < 3; i++) {
    free(sc[i]);
    free(ref[i]);
  }
  free(own);
  ssae_cpu_free(cpu);
  ssae_backend_free(b);
  ssae_model_free(m);
}

/* Batches read in place (ssae_backend_submit_spans) from a page-locked
 * array of slots at a pitch wider than a window (as the engine's rings):
 * two batches in flight, then a third that fails and is scored on the CPU
 * from the slots. */
static void run_spans(void) {
  ssae_dims d;
  ssae_model *m;
  ssae_backend *b;
  ssae_cpu *cpu;
  ssae_err err = {{0}};
  if (!failing_setup(&d, &m, &b, &cpu)) return;
  const size_t FM = 320, P = FM + 16, R = 3000;
  float *ring = xmalloc(R * P * sizeof *ring), *win = xmalloc(R * FM * sizeof *win);
  float *ref = xmalloc(R * sizeof *ref);
  random_windows(&d, win, R);
  ssae_cpu_forward(cpu, win, R, ref, NULL);
  poison(ring, R * P);
  for (size_t i = 0; i < R; i++) memcpy(ring + i * P + 8, win + i * FM, FM * sizeof *win);
  const ssae_backend_ops *pin = NULL;
  CHECK(!ssae_backend_host_register(b, ring, R * P * sizeof *ring, &pin) && pin,
        "page-locking the slots");
  CHECK(ssae_backend_spans_direct(b), "the CUDA backend does not read spans itself");
  size_t cap = 0;
  CHECK(ssae_backend_input_buffer(b, 0, &cap) && ssae_backend_input_buffer(b, 1, &cap),
        "slot buffers");
  /* Batch 0: slots 0-99, 150, 200-1199 (a span of one, then one that wraps
   * nothing); batch 1: 1300-1336; batch 2 (fails): 2000-2499 and 2900. */
  const ssae_span s0[3] = {{ring + 8, 100, P}, {ring + 150 * P + 8, 1, P},
                           {ring + 200 * P + 8, 1000, P}};
  const ssae_span s1[1] = {{ring + 1300 * P + 8, 37, P}};
  const ssae_span s2[2] = {{ring + 2000 * P + 8, 500, P}, {ring + 2900 * P + 8, 1, P}};
  const size_t first[3][3] = {{0, 150, 200}, {1300, 0, 0}, {2000, 2900, 0}};
  const ssae_span *sp[3] = {s0, s1, s2};
  const int nsp[3] = {3, 1, 2};
  const size_t n[3] = {1101, 37, 501};
  float *sc[3];
  for (int i = 0; i < 3; i++) {
    sc[i] = xmalloc(n[i] * sizeof *sc[i]);
    poison(sc[i], n[i]);
  }
  const ssae_span bad = {ring + 8, 2, FM - 1};
  CHECK(ssae_backend_submit_spans(b, 0, s0, 3, 1100, &err) == -1, "a wrong total accepted");
  CHECK(ssae_backend_submit_spans(b, 0, &bad, 1, 2, &err) == -1, "overlapping rows accepted");
  CHECK(!ssae_backend_submit_spans(b, 0, sp[0], nsp[0], n[0], &err), "spans 0: %s", err.msg);
  CHECK(!ssae_backend_submit_spans(b, 1, sp[1], nsp[1], n[1], &err), "spans 1: %s", err.msg);
  CHECK(!ssae_backend_collect(b, 0, sc[0], &err), "collect 0: %s", err.msg);
  CHECK(!ssae_backend_submit_spans(b, 0, sp[2], nsp[2], n[2], &err), "spans 2: %s", err.msg);
  CHECK(!ssae_backend_collect(b, 1, sc[1], &err), "collect 1: %s", err.msg);
  CHECK(!ssae_backend_collect(b, 0, sc[2], &err), "collect 2: %s", err.msg);
  size_t lost = 0, off = 0;
  for (int i = 0; i < 3; i++) {
    size_t k = 0;
    for (int j = 0; j < nsp[i]; j++)
      for (size_t w = 0; w < sp[i][j].n; w++, k++) {
        const float r = ref[first[i][j] + w], v = sc[i][k];
        if (!isfinite(v)) lost++;
        else if (fabsf(v - r) > 2e-5f * fabsf(r) || (i == 2 && v != r)) off++;
      }
  }
  printf("spans: batches of %zu (3 runs) and %zu in flight together from page-locked slots, "
         "then %zu after a CUDA failure: %zu lost, %zu off, backend now %s\n",
         n[0], n[1], n[2], lost, off, ssae_backend_name(b));
  CHECK(lost == 0 && off == 0, "spans: %zu lost, %zu off", lost, off);
  CHECK(fallback_msgs == 1, "spans: fallback reported %d times", fallback_msgs);
  CHECK(!ssae_backend_spans_direct(b), "spans still direct after the fall back");
  ssae_backend_host_unregister(pin, ring);
  for (int i = 0; i < 3; i++) free(sc[i]);
  free(ring);
  free(win);
  free(ref);
  ssae_cpu_free(cpu);
  ssae_backend_free(b);
  ssae_model_free(m);
}

/* The kernel table as the tools read it (tools/gpu-device-check.sh), and
 * what they rely on: unique names that SSAE_CUDA_KERNEL and a shell word
 * can carry, a purpose each, generic (the fallback) last. An unknown name
 * must make create fail rather than run auto silently. */
static int run_list(void) {
  const int n = ssae_cuda_kernel_count();
  CHECK(n >= 1 && !ssae_cuda_kernel_info(n) && !ssae_cuda_kernel_info(-1), "table bounds");
  for (int i = 0; i < n; i++) {
    const ssae_cuda_kernel_desc *k = ssae_cuda_kernel_info(i);
    if (!k) {
      CHECK(0, "row %d missing", i);
      continue;
    }
    CHECK(k->name && *k->name && strspn(k->name, "abcdefghijklmnopqrstuvwxyz0123456789_") ==
                                     strlen(k->name),
          "row %d: name '%s'", i, k->name ? k->name : "(null)");
    CHECK(k->purpose && *k->purpose, "row %d: no purpose", i);
    for (int j = 0; j < i; j++)
      CHECK(strcmp(k->name, ssae_cuda_kernel_info(j)->name), "name %s twice", k->name);
    char amax[32];
    if (k->auto_max == SIZE_MAX) snprintf(amax, sizeof amax, "any");
    else snprintf(amax, sizeof amax, "%zu", k->auto_max);
    printf("%s\t%s\t%s\t%s\n", k->name, amax, k->opt_in ? "opt-in" : "auto", k->purpose);
  }
  CHECK(n >= 1 && !strcmp(ssae_cuda_kernel_info(n - 1)->name, "generic"),
        "generic is not the last row");
  {
    /* The name is checked before the device is looked for. */
    ssae_dims d;
    ssae_dims_default(&d);
    ssae_model *m = random_model(&d);
    ssae_err err = {{0}};
    setenv("SSAE_CUDA_KERNEL", "no_such_kernel", 1);
    void *g = ssae_backend_cuda.create(m, 0, &err);
    unsetenv("SSAE_CUDA_KERNEL");
    CHECK(!g && strstr(err.msg, "no_such_kernel"), "an unknown SSAE_CUDA_KERNEL accepted");
    if (g) ssae_backend_cuda.destroy(g);
    ssae_model_free(m);
  }
  return failures ? 1 : 0;
}

static int read_file(const char *path, void *buf, size_t bytes) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  size_t r = fread(buf, 1, bytes, f);
  fclose(f);
  return r == bytes ? 0 : -1;
}

static int write_file(const char *path, const void *buf, size_t bytes) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t w = fwrite(buf, 1, bytes, f);
  return (fclose(f) == 0 && w == bytes) ? 0 : -1;
}

static int run_apply(char **argv) {
  ssae_err err = {{0}};
  ssae_model *m = ssae_model_load(argv[0], &err);
  if (!m) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  const size_t n = strtoull(argv[2], NULL, 10), FM = (size_t)m->d.frames * m->d.n_mels;
  float *x = xmalloc(n * FM * 4), *sc = xmalloc(n * 4), *rec = xmalloc(n * FM * 4);
  if (read_file(argv[1], x, n * FM * 4)) {
    fprintf(stderr, "cannot read %s\n", argv[1]);
    return 1;
  }
  poison(sc, n);
  poison(rec, n * FM);
  void *g = ssae_backend_cuda.create(m, 0, &err);
  if (!g || ssae_backend_cuda.run(g, x, n, sc, rec, &err)) {
    fprintf(stderr, "cuda: %s\n", err.msg);
    return 1;
  }
  printf("kernel %s\n", ssae_cuda_kernel_name(g, n));
  ssae_backend_cuda.destroy(g);
  if (write_file(argv[3], sc, n * 4) || write_file(argv[4], rec, n * FM * 4)) {
    fprintf(stderr, "cannot write the outputs\n");
    return 1;
  }
  free(x);
  free(sc);
  free(rec);
  ssae_model_free(m);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "--list")) return run_list();
  if (!ssae_backend_cuda.available()) {
    printf("no CUDA device: skipped\n");
    return 77;
  }
  printf("device: %s\n", ssae_cuda_device_name());
  if (argc == 7 && !strcmp(argv[1], "--apply")) return run_apply(argv + 2);
  rng_state = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid();
  printf("seed %llu\n", (unsigned long long)rng_state);
  if (argc > 1 && !strcmp(argv[1], "--fallback")) {
    run_fallback();
    run_async();
    run_spans();
  } else if (argc > 1 && !strcmp(argv[1], "--tiny")) {
    run_cases(2);
  } else if (argc > 1 && !strcmp(argv[1], "--last-round")) {
    run_cases(3);
  } else {
    run_cases(argc > 1 && !strcmp(argv[1], "--quick"));
  }
  if (failures) printf("%d failures\n", failures);
  else printf("all passed\n");
  return failures ? 1 : 0;
}
