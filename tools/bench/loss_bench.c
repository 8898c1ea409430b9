/* The CPU training step alone (not a test): ssae_api_net_loss, the fused
 * MSE loss and its parameter gradient that the drop-in module's
 * reconstruction_loss and reconstruction_backward run on CPU tensors,
 * through the public C API, without Python or torch around it.
 *
 *   loss_bench [--windows N[,N...]] [--threads T[,T...]] [--calls K]
 *              [--kernels default|avx2|both]
 *
 * For each batch size and thread count: the median and the best of K
 * calls (after K/10 + 1 warm-up calls) in milliseconds, and microseconds a
 * window per thread (the median's). --kernels both runs the default kernel
 * set (AVX-512 where the CPU has it) and the AVX2 set (SSAE_NO_AVX512) one
 * call each in turn, so that the host's noise falls on both alike. The
 * windows are log-mel-like (-60 dB with a spread of 10 dB), the parameters
 * random around the SPEC module's initial scale; the result's checksum is
 * printed so that two kernel sets can be seen to agree. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ssae_tensor_api.h"

#define MAX_LIST 16

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *const USAGE =
    "usage: loss_bench [--windows N[,N...]] [--threads T[,T...]] [--calls K]\n"
    "                  [--kernels default|avx2|both]\n";

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "loss_bench: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n%s", USAGE);
  return 2;
}

/* A comma-separated list of positive integers; 0 when it is one. */
static int parse_list(const char *s, long *v, int *n, long max) {
  *n = 0;
  while (*s) {
    char *end;
    long x = strtol(s, &end, 10);
    if (end == s || x <= 0 || x > max || *n == MAX_LIST || (*end && *end != ',')) return -1;
    v[(*n)++] = x;
    s = *end ? end + 1 : end;
  }
  return *n ? 0 : -1;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  long windows[MAX_LIST] = {512, 8192, 65536}, threads[MAX_LIST] = {1};
  int n_windows = 3, n_threads = 1;
  long calls = 50;
  const char *kernels = "both";
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(USAGE, stdout);
      return 0;
    }
    if (!strcmp(a, "--windows") || !strcmp(a, "--threads") || !strcmp(a, "--calls") ||
        !strcmp(a, "--kernels")) {
      if (!v) return usage_error("%s needs a value", a);
      i++;
      long list[MAX_LIST];
      int n_list;
      if (!strcmp(a, "--windows") && parse_list(v, windows, &n_windows, 1L << 24))
        return usage_error("--windows %s: expected counts from 1 to 16777216", v);
      if (!strcmp(a, "--threads") && parse_list(v, threads, &n_threads, 1024))
        return usage_error("--threads %s: expected counts from 1 to 1024", v);
      if (!strcmp(a, "--calls")) {
        if (parse_list(v, list, &n_list, 100000) || n_list != 1)
          return usage_error("--calls %s: expected a count from 1 to 100000", v);
        calls = list[0];
      }
      if (!strcmp(a, "--kernels")) {
        if (strcmp(v, "default") && strcmp(v, "avx2") && strcmp(v, "both"))
          return usage_error("--kernels %s: expected default, avx2 or both", v);
        kernels = v;
      }
      continue;
    }
    return usage_error("unknown option %s", a);
  }

  const int dims[4] = {64, 5, 32, 64};
  const size_t P = ssae_api_dims_param_count(dims), win = (size_t)dims[0] * (size_t)dims[1];
  long max_n = 0;
  for (int i = 0; i < n_windows; i++)
    if (windows[i] > max_n) max_n = windows[i];
  float *params = malloc(P * sizeof *params), *grad = malloc(P * sizeof *grad);
  float *x = malloc((size_t)max_n * win * sizeof *x);
  double *t = malloc(2 * (size_t)calls * sizeof *t);
  if (!params || !grad || !x || !t) {
    fprintf(stderr, "loss_bench: out of memory for %ld windows\n", max_n);
    return 1;
  }
  unsigned long long r = 88172645463325252ull;
  for (size_t i = 0; i < P; i++) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    params[i] = (float)(((double)(r >> 11) / 9007199254740992.0 - 0.5) * 0.2);
  }
  for (int i = 0; i < dims[0]; i++) params[i] += 1.0f; /* LayerNorm weights near 1 */
  for (size_t i = 0; i < (size_t)max_n * win; i++) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    x[i] = (float)(-60.0 + 10.0 * ((double)(r >> 11) / 9007199254740992.0));
  }

  const int both = !strcmp(kernels, "both");
  const char *names[2] = {both || !strcmp(kernels, "default") ? "default" : "avx2", "avx2"};
  const int n_sets = both ? 2 : 1;
  printf("# kernels  windows threads  median_ms  best_ms  us/window-thread  checksum\n");
  for (int ti = 0; ti < n_threads; ti++) {
    ssae_api_net *net[2] = {NULL, NULL};
    for (int k = 0; k < n_sets; k++) {
      ssae_err err;
      /* the kernel set is chosen when a net is made */
      if (!strcmp(names[k], "avx2")) setenv("SSAE_NO_AVX512", "1", 1);
      else unsetenv("SSAE_NO_AVX512");
      net[k] = ssae_api_net_new(dims, (int)threads[ti], &err);
      if (!net[k] || ssae_api_net_set_params(net[k], params, P, &err)) {
        fprintf(stderr, "loss_bench: %s\n", err.msg);
        return 1;
      }
    }
    for (int wi = 0; wi < n_windows; wi++) {
      const size_t n = (size_t)windows[wi];
      double sum[2] = {0, 0};
      for (long c = -(calls / 10 + 1); c < calls; c++)
        for (int k = 0; k < n_sets; k++) {
          ssae_err err;
          double loss, t0 = now_s();
          if (ssae_api_net_loss(net[k], x, n, &loss, grad, &err)) {
            fprintf(stderr, "loss_bench: %s\n", err.msg);
            return 1;
          }
          if (c >= 0) t[k * calls + c] = now_s() - t0;
          if (c == calls - 1) {
            sum[k] = loss;
            for (size_t i = 0; i < P; i++) sum[k] += fabs(grad[i]);
          }
        }
      for (int k = 0; k < n_sets; k++) {
        double *tk = t + k * calls;
        qsort(tk, (size_t)calls, sizeof *tk, cmp_double);
        const double med = tk[calls / 2];
        printf("%-9s %8zu %7ld %10.3f %8.3f %17.2f  %.9g\n", names[k], n, threads[ti], med * 1e3,
               tk[0] * 1e3, med * 1e6 * (double)threads[ti] / (double)n, sum[k]);
      }
      fflush(stdout);
    }
    for (int k = 0; k < n_sets; k++) ssae_api_net_free(net[k]);
  }
  free(params);
  free(grad);
  free(x);
  free(t);
  return 0;
}
