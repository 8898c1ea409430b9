/* ssae bench: throughput and latency of the backends (issue 4).
 *
 * For each backend and batch size: calls of the backend's run (host windows
 * in, host scores out) repeated for --seconds, giving windows/s and the
 * per-call latency percentiles; batch 1 is the one-window round trip. For
 * CUDA also the kernel alone on device-resident input, timed with events
 * (plain launch and CUDA-graph replay). */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cli_opts.h"
#include "ssae_backend.h"
#include "ssae_config.h"
#include "ssae_model.h"
#if SSAE_HAVE_CUDA
#include "ssae_cuda.h"
#endif

static const char *const CMD = "bench";

#define MAX_BATCHES 32

typedef struct opts {
  const char *model, *backend;
  int device;
  double seconds;
  struct batches {
    size_t v[MAX_BATCHES];
    int n;
  } batches;
} opts;

static const char *const bench_backends[] = {"all", "cpu", "cuda", NULL};

static int parse_batches(const ssae_cli_opt *o, const char *s, void *dest, ssae_err *err) {
  (void)o;
  struct batches *b = dest;
  int n = 0;
  const char *p = s;
  while (*p) {
    char *end;
    unsigned long long v = strtoull(p, &end, 10);
    if (end == p || v < 1 || v > (1ull << 26) || n == MAX_BATCHES) break;
    b->v[n++] = (size_t)v;
    p = end;
    if (*p == ',') p++;
    else if (*p) break;
  }
  if (*p || !n)
    return ssae_err_set(err, "'%s' is not a comma-separated list of sizes (1 to 67108864, at "
                             "most %d)", s, MAX_BATCHES);
  b->n = n;
  return 0;
}

static void show_batches(const ssae_cli_opt *o, const void *dest, char *buf, size_t len) {
  (void)o;
  const struct batches *b = dest;
  size_t k = 0;
  buf[0] = 0;
  for (int i = 0; i < b->n && k < len; i++)
    k += (size_t)snprintf(buf + k, len - k, "%s%zu", i ? "," : "", b->v[i]);
}

static const ssae_cli_opt options[] = {
    {.kind = SSAE_CLI_STRING, .name = "--model", .offset = offsetof(opts, model), .metavar = "M",
     .help = "model file", .def = "the built-in model"},
    {.kind = SSAE_CLI_CHOICE, .name = "--backend", .offset = offsetof(opts, backend),
     .choices = bench_backends, .help = "all: every backend available here"},
    {.kind = SSAE_CLI_INT, .name = "--device", .offset = offsetof(opts, device), .metavar = "N",
     .min = 0, .max = 255, .help = "CUDA device of the CUDA backend and of the kernels alone",
     .def = "0"},
    {.kind = SSAE_CLI_CUSTOM, .name = "--batches", .offset = offsetof(opts, batches),
     .metavar = "N,N,...", .help = "batch sizes", .parse = parse_batches, .show = show_batches},
    {.kind = SSAE_CLI_DOUBLE, .name = "--seconds", .offset = offsetof(opts, seconds),
     .metavar = "S", .min = 0.001, .max = 3600, .help = "time per measurement"},
    {0}};

static const ssae_cli_cmd command = {
    .name = "bench",
    .usage = "usage: ssae bench [--model M] [--backend all|cpu|cuda] [--device N]\n"
             "                  [--batches N,N,...] [--seconds S]",
    .about = "Throughput (windows/s) and latency percentiles of each backend over batch\n"
             "sizes, host windows in and host scores out; batch 1 is the one-window round\n"
             "trip. For CUDA also the fused kernel alone on device-resident input.",
    .epilogue = "Exit status: 0 every backend asked for ran, 1 a backend or the model failed,\n"
                "2 usage error.",
    .opts = options,
};

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double pct(const double *v, size_t n, double p) {
  size_t i = (size_t)ceil(p * (double)n);
  if (i > 0) i--;
  if (i >= n) i = n - 1;
  return v[i];
}

static void fill_windows(const ssae_model *m, float *x, size_t n) {
  const size_t FM = (size_t)m->d.frames * (size_t)m->d.n_mels;
  uint64_t s = 0x243F6A8885A308D3ull;
  for (size_t w = 0; w < n; w++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const float level = -90.0f + 70.0f * (float)((s >> 40) * (1.0 / 16777216.0));
    for (size_t i = 0; i < FM; i++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      x[w * FM + i] = level + 40.0f * ((float)((s >> 40) * (1.0 / 16777216.0)) - 0.5f);
    }
  }
}

static void on_fallback(void *user, const char *msg) {
  snprintf(user, SSAE_ERR_LEN, "%s", msg);
}

/* Host-level rows of one backend, chosen through the backend registry:
 * every batch size timed for o->seconds. lat: scratch that grows. */
static int bench_backend(const opts *o, const ssae_model *m, const char *name, const float *x,
                         float *sc, double **lat, size_t *lat_cap) {
  ssae_err err = {{0}};
  ssae_backend *b = ssae_backend_new(m, name, 0, &err);
  if (!b) {
    /* the registry's message names the backend ("cuda: not available on
     * this machine"), as score, eval and report print it */
    ssae_cli_error(CMD, "%s", err.msg);
    return SSAE_EXIT_INPUT;
  }
  /* A fall back to the CPU would time the CPU under this backend's name. */
  char fell[SSAE_ERR_LEN] = "";
  ssae_backend_set_fallback_cb(b, on_fallback, fell);
  int rc = SSAE_EXIT_OK;
  for (int k = 0; k < o->batches.n && rc == SSAE_EXIT_OK; k++) {
    const size_t n = o->batches.v[k];
    size_t calls = 0;
    int failed = 0;
    if (ssae_backend_run(b, x, n, sc, NULL, &err) || fell[0]) /* warm-up */
      failed = 1;
    /* windows/s over the timed calls only (the warm-up's time counted in
     * would read low by calls / (calls + 1), a quarter at 1 M windows). */
    const double t0 = now_s();
    double t = t0;
    /* At least three calls and the time asked; where calls take so long
     * that three would pass ten times that (a large batch on a small
     * machine), as many as fit, at least one: the row says how many. */
    while (!failed && (calls < 3 || t - t0 < o->seconds)) {
      if (calls == *lat_cap) {
        size_t cap = *lat_cap ? 2 * *lat_cap : 4096;
        double *nl = realloc(*lat, cap * sizeof *nl);
        if (!nl) {
          ssae_err_set(&err, "out of memory for %zu latencies", cap);
          failed = 1;
          break;
        }
        *lat = nl;
        *lat_cap = cap;
      }
      const double a = now_s();
      if (ssae_backend_run(b, x, n, sc, NULL, &err) || fell[0]) {
        failed = 1;
        break;
      }
      t = now_s();
      (*lat)[calls++] = (t - a) * 1e6;
      if (t - t0 > 10 * o->seconds) break;
    }
    if (failed) {
      ssae_cli_error(CMD, "%s batch %zu: %s", name, n,
                     fell[0] ? fell : err.msg[0] ? err.msg : "the backend failed");
      rc = SSAE_EXIT_INPUT;
      break;
    }
    qsort(*lat, calls, sizeof **lat, cmp_double);
    printf("%-7s %9zu %8zu %14.0f %11.1f %11.1f %11.1f\n", name, n, calls,
           (double)n * (double)calls / (t - t0), pct(*lat, calls, 0.5), pct(*lat, calls, 0.99),
           (*lat)[calls - 1]);
    fflush(stdout);
  }
  ssae_backend_free(b);
  return rc;
}

#if SSAE_HAVE_CUDA
/* The CUDA kernel alone on device-resident input, timed with CUDA events
 * (plain launch and graph replay). */
static int bench_cuda_kernel(const opts *o, const ssae_model *m) {
  ssae_err err = {{0}};
  int rc = SSAE_EXIT_OK;
  printf("\n# CUDA kernel alone, input resident on the device, CUDA events per launch\n");
  printf("%-7s %9s %-9s %11s %11s %14s %11s %14s\n", "backend", "batch", "kernel",
         "launch_p50", "launch_p99", "windows/s", "graph_p50", "windows/s");
  void *impl = ssae_backend_cuda.create(m, 1, &err);
  for (int k = 0; impl && k < o->batches.n; k++) {
    const size_t n = o->batches.v[k];
    const int reps = n >= 65536 ? 30 : 300;
    double p50, p99, g50, g99;
    if (ssae_cuda_time_kernel(m, n, 0, 0, reps, &p50, &p99, &err) ||
        ssae_cuda_time_kernel(m, n, 0, 1, reps, &g50, &g99, &err)) {
      ssae_cli_error(CMD, "cuda kernel batch %zu: %s", n, err.msg);
      rc = SSAE_EXIT_INPUT;
      break;
    }
    printf("%-7s %9zu %-9s %11.2f %11.2f %14.0f %11.2f %14.0f\n", "cuda", n,
           ssae_cuda_kernel_name(impl, n), p50, p99, (double)n / p50 * 1e6, g50,
           (double)n / g50 * 1e6);
    fflush(stdout);
  }
  if (impl) ssae_backend_cuda.destroy(impl);
  double e50;
  if (ssae_cuda_time_empty(300, &e50, &err) == 0)
    printf("# floor of the graph_p50 column: an empty kernel's graph replay, same "
           "timing: %.2f us\n", e50);
  return rc;
}
#endif

static int run(const opts *o) {
  ssae_err err = {{0}};
  ssae_model *m = ssae_model_open(o->model, &err);
  if (!m) {
    ssae_cli_error(CMD, "%s", err.msg);
    return SSAE_EXIT_INPUT;
  }
  const char *which = o->backend;
  size_t maxn = 1;
  for (int i = 0; i < o->batches.n; i++)
    if (o->batches.v[i] > maxn) maxn = o->batches.v[i];
  const size_t FM = (size_t)m->d.frames * (size_t)m->d.n_mels;
  float *x = malloc(maxn * FM * sizeof *x), *sc = malloc(maxn * sizeof *sc);
  double *lat = NULL;
  size_t lat_cap = 0;
  int rc = SSAE_EXIT_OK, ran = 0;
  if (!x || !sc) {
    ssae_cli_error(CMD, "out of memory for %zu windows", maxn);
    rc = SSAE_EXIT_INPUT;
    goto done;
  }
  fill_windows(m, x, maxn);
  printf("# ssae bench: model %s (n_mels %d, frames %d, latent %d, slice_latent %d), "
         "%g s per measurement\n",
         o->model ? o->model : "(built in)", m->d.n_mels, m->d.frames, m->d.latent,
         m->d.slice_latent, o->seconds);
#if SSAE_HAVE_CUDA
  if (ssae_backend_cuda.available())
    printf("# CUDA device %d: %s\n", ssae_cuda_current_device(), ssae_cuda_device_name());
#endif
  printf("%-7s %9s %8s %14s %11s %11s %11s\n", "backend", "batch", "calls", "windows/s",
         "p50_us", "p99_us", "max_us");
  int known = !strcmp(which, "all");
  for (int bi = 0; ssae_backends[bi]; bi++) {
    const char *name = ssae_backends[bi]->name;
    if (!strcmp(which, name)) known = 1;
    if (strcmp(which, "all") && strcmp(which, name)) continue;
    /* "all" passes over the backends this machine lacks; a named one is
     * an error there. */
    if (!strcmp(which, "all") && !ssae_backends[bi]->available()) continue;
    int brc = bench_backend(o, m, name, x, sc, &lat, &lat_cap);
    if (brc) rc = brc;
    else ran++;
  }
#if SSAE_HAVE_CUDA
  if (strcmp(which, "cpu") && ssae_backend_cuda.available()) {
    int krc = bench_cuda_kernel(o, m);
    if (krc) rc = krc;
  }
#endif
  if (!known) {
    ssae_cli_error(CMD, "backend %s: this ssae was built without it", which);
    rc = SSAE_EXIT_INPUT;
  } else if (!ran && rc == SSAE_EXIT_OK) {
    ssae_cli_error(CMD, "no backend ran");
    rc = SSAE_EXIT_INPUT;
  }
done:
  free(x);
  free(sc);
  free(lat);
  ssae_model_free(m);
  return rc;
}

int ssae_cmd_bench(int argc, char **argv) {
  opts o = {.backend = "all", .seconds = 1.0,
            .batches = {.v = {1, 32, 256, 4096, 65536, 1048576}, .n = 6}};
  ssae_cli_args args;
  int rc = ssae_cli_parse(&command, argc, argv, &o, &args);
  if (rc != SSAE_CLI_CONTINUE) return rc;
  /* before any work: the backends and the kernels' timing run there */
  if ((rc = ssae_cli_use_device(CMD, o.device, o.backend)) == SSAE_EXIT_OK) rc = run(&o);
  ssae_cli_args_free(&args);
  return rc;
}
