/* ssae bench: throughput and latency of the backends (issue 4).
 *
 * For each backend and batch size: calls of the backend's run (host windows
 * in, host scores out) repeated for --seconds, giving windows/s and the
 * per-call latency percentiles; batch 1 is the one-window round trip. For
 * CUDA also the kernel alone on device-resident input, timed with events
 * (plain launch and CUDA-graph replay). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "ssae_backend.h"
#include "ssae_config.h"
#include "ssae_model.h"
#if SSAE_HAVE_CUDA
#include "ssae_cuda.h"
#endif

static const char *const CMD = "bench";

static void usage(FILE *f) {
  fprintf(f,
          "usage: ssae bench [--model M] [--backend all|cpu|cuda] [--batches N,N,...]\n"
          "                  [--seconds S]\n\n"
          "Throughput (windows/s) and latency percentiles of each backend over batch\n"
          "sizes, host windows in and host scores out; batch 1 is the one-window round\n"
          "trip. For CUDA also the fused kernel alone on device-resident input.\n\n"
          "  --model M       model file (default: the built-in model)\n"
          "  --backend B     all (default: every backend available here), cpu, cuda\n"
          "  --batches LIST  default 1,32,256,4096,65536,1048576\n"
          "  --seconds S     time per measurement, default 1\n");
}

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

static int parse_batches(const char *s, size_t *out, int max, int *count) {
  int n = 0;
  const char *p = s;
  while (*p) {
    char *end;
    unsigned long long v = strtoull(p, &end, 10);
    if (end == p || v < 1 || v > (1ull << 26) || n == max) return -1;
    out[n++] = (size_t)v;
    p = end;
    if (*p == ',') p++;
    else if (*p) return -1;
  }
  *count = n;
  return n ? 0 : -1;
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

int ssae_cmd_bench(int argc, char **argv) {
  const char *model_path = NULL, *which = "all";
  size_t batches[32] = {1, 32, 256, 4096, 65536, 1048576};
  int nb = 6;
  double seconds = 1.0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return SSAE_EXIT_OK;
    }
    if (i + 1 >= argc) {
      ssae_cli_error(CMD, "unknown option or missing value: %s", a);
      usage(stderr);
      return SSAE_EXIT_USAGE;
    }
    const char *v = argv[++i];
    if (!strcmp(a, "--model")) {
      model_path = v;
    } else if (!strcmp(a, "--backend")) {
      if (strcmp(v, "all") && strcmp(v, "cpu") && strcmp(v, "cuda")) {
        ssae_cli_error(CMD, "--backend: '%s' is not all, cpu or cuda", v);
        return SSAE_EXIT_USAGE;
      }
      which = v;
    } else if (!strcmp(a, "--batches")) {
      if (parse_batches(v, batches, 32, &nb)) {
        ssae_cli_error(CMD, "--batches: '%s' is not a comma-separated list of sizes "
                       "(1 to 67108864, at most 32)", v);
        return SSAE_EXIT_USAGE;
      }
    } else if (!strcmp(a, "--seconds")) {
      if (ssae_cli_parse_double(CMD, "--seconds", v, 0.001, 3600, &seconds))
        return SSAE_EXIT_USAGE;
    } else {
      ssae_cli_error(CMD, "unknown option: %s", a);
      usage(stderr);
      return SSAE_EXIT_USAGE;
    }
  }

  ssae_err err = {{0}};
  ssae_model *m = ssae_model_open(model_path, &err);
  if (!m) {
    ssae_cli_error(CMD, "%s", err.msg);
    return SSAE_EXIT_INPUT;
  }
  size_t maxn = 1;
  for (int i = 0; i < nb; i++)
    if (batches[i] > maxn) maxn = batches[i];
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
         "%.2f s per measurement\n",
         model_path ? model_path : "(built in)", m->d.n_mels, m->d.frames, m->d.latent,
         m->d.slice_latent, seconds);
#if SSAE_HAVE_CUDA
  if (ssae_backend_cuda.available()) printf("# CUDA device: %s\n", ssae_cuda_device_name());
#endif
  printf("%-7s %9s %8s %14s %11s %11s %11s\n", "backend", "batch", "calls", "windows/s",
         "p50_us", "p99_us", "max_us");
  for (int bi = 0; ssae_backends[bi]; bi++) {
    const ssae_backend_ops *ops = ssae_backends[bi];
    if (strcmp(which, "all") && strcmp(which, ops->name)) continue;
    if (!ops->available()) {
      if (strcmp(which, "all")) {
        ssae_cli_error(CMD, "backend %s is not available on this machine", ops->name);
        rc = SSAE_EXIT_INPUT;
      }
      continue;
    }
    void *impl = ops->create(m, 0, &err);
    if (!impl) {
      ssae_cli_error(CMD, "%s: %s", ops->name, err.msg);
      rc = SSAE_EXIT_INPUT;
      continue;
    }
    ran++;
    for (int k = 0; k < nb; k++) {
      const size_t n = batches[k];
      if (ops->run(impl, x, n, sc, NULL, &err)) { /* warm-up */
        ssae_cli_error(CMD, "%s batch %zu: %s", ops->name, n, err.msg);
        rc = SSAE_EXIT_INPUT;
        break;
      }
      size_t calls = 0;
      const double t0 = now_s();
      double t = t0;
      while (calls < 3 || t - t0 < seconds) {
        if (calls == lat_cap) {
          lat_cap = lat_cap ? 2 * lat_cap : 4096;
          double *nl = realloc(lat, lat_cap * sizeof *lat);
          if (!nl) break;
          lat = nl;
        }
        const double a = now_s();
        if (ops->run(impl, x, n, sc, NULL, &err)) break;
        t = now_s();
        lat[calls++] = (t - a) * 1e6;
        if (t - t0 > 10 * seconds) break;
      }
      if (calls == 0) {
        ssae_cli_error(CMD, "%s batch %zu: %s", ops->name, n, err.msg);
        rc = SSAE_EXIT_INPUT;
        break;
      }
      qsort(lat, calls, sizeof *lat, cmp_double);
      printf("%-7s %9zu %8zu %14.0f %11.1f %11.1f %11.1f\n", ops->name, n, calls,
             (double)n * (double)calls / (t - t0), pct(lat, calls, 0.5), pct(lat, calls, 0.99),
             lat[calls - 1]);
      fflush(stdout);
    }
    ops->destroy(impl);
  }
#if SSAE_HAVE_CUDA
  if (strcmp(which, "cpu") && ssae_backend_cuda.available()) {
    printf("\n# CUDA kernel alone, input resident on the device, CUDA events per launch\n");
    printf("%-7s %9s %-9s %11s %11s %14s %11s %14s\n", "backend", "batch", "kernel",
           "launch_p50", "launch_p99", "windows/s", "graph_p50", "windows/s");
    void *impl = ssae_backend_cuda.create(m, 1, &err);
    for (int k = 0; impl && k < nb; k++) {
      const size_t n = batches[k];
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
  }
#endif
  int known = !strcmp(which, "all");
  for (int bi = 0; ssae_backends[bi]; bi++)
    if (!strcmp(which, ssae_backends[bi]->name)) known = 1;
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
