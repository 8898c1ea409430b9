/* Host jitter probe (not a test): how long this machine takes threads away.
 *
 *   host_jitter [THREADS [SECONDS]]     (default: every CPU but the first, 8 s)
 *   host_jitter --mem [SECONDS [FILE]]  (memory latency, one thread on the last CPU)
 *
 * THREADS threads, pinned to CPUs 1..THREADS, each read CLOCK_MONOTONIC in a
 * loop; a gap between two reads is time the thread did not run (preempted,
 * or its virtual CPU taken by the hypervisor). engine_bench's feeding
 * threads see the same gaps inside their blocks (blk_max): on a host where
 * this prints gaps of several milliseconds, no window-to-score latency below
 * that can be shown without real-time priority.
 *
 * --mem: one thread on the last CPU (beside engine_bench's feeders on
 * the first ones) follows a random cycle through 256 MB (one hop
 * per cache line, far beyond any last-level cache, in huge pages where the
 * kernel gives them) and times each millisecond: the latency of one load
 * from DRAM, its median and the milliseconds where it was 2x and 4x that,
 * the longest such stretch. A thread that copies thousands of channels'
 * blocks (engine_bench's feeder) or walks their state (the worker) waits on
 * exactly these loads: on a host where other tenants saturate the memory
 * for tens of milliseconds, both slow down by the same factor, and no
 * latency target below that stretch can be shown there. FILE: each
 * millisecond's end (CLOCK_MONOTONIC, ns) and latency (ns), a line each,
 * to set beside another program's timeline. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef struct probe {
  int cpu;
  double seconds, max_ms;
  long over[4]; /* gaps > 0.5, 1, 5, 10 ms */
} probe;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void *run(void *arg) {
  probe *p = arg;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(p->cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) perror("host_jitter: pinning");
  static const double lim[4] = {0.5, 1, 5, 10};
  const double t0 = now_s();
  double last = t0;
  while (last - t0 < p->seconds) {
    const double t = now_s(), gap = (t - last) * 1e3;
    for (int i = 0; i < 4; i++) p->over[i] += gap > lim[i];
    if (gap > p->max_ms) p->max_ms = gap;
    last = t;
  }
  return NULL;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* --mem: see the header. */
static int mem_probe(double seconds, const char *file) {
  const size_t bytes = (size_t)256 << 20, line = 64, n = bytes / line;
  const size_t wins = (size_t)(seconds * 1000) + 1;
  char *buf = NULL;
  if (posix_memalign((void **)&buf, (size_t)2 << 20, bytes) != 0) {
    fprintf(stderr, "host_jitter: --mem: no 256 MB\n");
    return 1;
  }
#ifdef MADV_HUGEPAGE
  madvise(buf, bytes, MADV_HUGEPAGE);
#endif
  double *ns = malloc(wins * sizeof *ns), *at = malloc(wins * sizeof *at);
  uint32_t *perm = malloc(n * sizeof *perm);
  if (!ns || !at || !perm) {
    fprintf(stderr, "host_jitter: --mem: out of memory\n");
    return 1;
  }
  /* One cycle through every line in random order (Sattolo's shuffle):
   * each load's address comes from the one before, so no two overlap. */
  for (size_t i = 0; i < n; i++) perm[i] = (uint32_t)i;
  uint64_t x = 88172645463325252ull;
  for (size_t i = n - 1; i > 0; i--) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const size_t j = (size_t)(x % i);
    const uint32_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  for (size_t i = 0; i < n; i++)
    *(char **)(void *)(buf + perm[i] * line) = buf + perm[(i + 1) % n] * line;
  free(perm);
  cpu_set_t set;
  CPU_ZERO(&set);
  const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  const int cpu = ncpu > 1 ? (int)ncpu - 1 : 0;
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) perror("host_jitter: pinning");
  char *p = buf;
  size_t w = 0;
  double t0 = now_s(), start = t0;
  long hops = 0;
  while (w < wins && now_s() - start < seconds) {
    for (int k = 0; k < 64; k++) p = *(char **)(void *)p;
    hops += 64;
    const double t = now_s();
    if (t - t0 >= 1e-3) {
      at[w] = t;
      ns[w++] = (t - t0) * 1e9 / (double)hops;
      t0 = t;
      hops = 0;
    }
  }
  if (!w) return 1;
  if (file) {
    FILE *f = fopen(file, "w");
    int bad = !f;
    for (size_t i = 0; f && i < w; i++) bad |= fprintf(f, "%.0f %.1f\n", at[i] * 1e9, ns[i]) < 0;
    if (f) bad |= fclose(f) != 0;
    if (bad) fprintf(stderr, "host_jitter: --mem: cannot write %s\n", file);
  }
  double *sorted = malloc(w * sizeof *sorted);
  if (!sorted) return 1;
  memcpy(sorted, ns, w * sizeof *ns);
  qsort(sorted, w, sizeof *sorted, cmp_double);
  const double med = sorted[w / 2];
  long over2 = 0, over4 = 0, run = 0, longest = 0;
  for (size_t i = 0; i < w; i++) {
    over2 += ns[i] > 2 * med;
    over4 += ns[i] > 4 * med;
    run = ns[i] > 2 * med ? run + 1 : 0;
    if (run > longest) longest = run;
  }
  printf("host_jitter --mem: %zu ms on CPU %d (%p): DRAM load %.0f ns median, %.0f ns p99, %.0f ns "
         "max; ms over 2x the median %ld, over 4x %ld; longest stretch over 2x %ld ms\n",
         w, cpu, (void *)p, med, sorted[w * 99 / 100], sorted[w - 1], over2, over4, longest);
  free(sorted);
  free(ns);
  free(at);
  free(buf);
  return 0;
}

static const char usage[] =
    "usage: host_jitter [THREADS (1-1024) [SECONDS]]     gaps in threads' time (default: "
    "every CPU but the first, 8 s)\n"
    "       host_jitter --mem [SECONDS (up to 3600) [FILE]]  DRAM load latency per ms\n";

int main(int argc, char **argv) {
  if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    fputs(usage, stdout);
    return 0;
  }
  if (argc > 1 && argv[1][0] == '-' && strcmp(argv[1], "--mem")) {
    fprintf(stderr, "host_jitter: unknown option %s\n%s", argv[1], usage);
    return 2;
  }
  if (argc > 1 && !strcmp(argv[1], "--mem")) {
    const double seconds = argc > 2 ? atof(argv[2]) : 8.0;
    if (!(seconds > 0) || seconds > 3600) {
      fputs(usage, stderr);
      return 2;
    }
    return mem_probe(seconds, argc > 3 ? argv[3] : NULL);
  }
  const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int n = argc > 1 ? atoi(argv[1]) : (int)(ncpu > 1 ? ncpu - 1 : 1);
  const double seconds = argc > 2 ? atof(argv[2]) : 8.0;
  if (n < 1 || n > 1024 || !(seconds > 0)) {
    fputs(usage, stderr);
    return 2;
  }
  probe *p = calloc((size_t)n, sizeof *p);
  pthread_t *th = calloc((size_t)n, sizeof *th);
  if (!p || !th) return 1;
  for (int i = 0; i < n; i++) {
    p[i].cpu = (int)((1 + i) % (ncpu > 0 ? ncpu : 1));
    p[i].seconds = seconds;
    if (pthread_create(&th[i], NULL, run, &p[i]) != 0) {
      fprintf(stderr, "host_jitter: cannot start thread %d\n", i);
      return 1;
    }
  }
  long over[4] = {0, 0, 0, 0};
  double max_ms = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(th[i], NULL);
    for (int k = 0; k < 4; k++) over[k] += p[i].over[k];
    if (p[i].max_ms > max_ms) max_ms = p[i].max_ms;
  }
  printf("host_jitter: %d pinned threads x %g s: gaps > 0.5 ms %ld, > 1 ms %ld, > 5 ms %ld, "
         "> 10 ms %ld; longest %.2f ms\n",
         n, seconds, over[0], over[1], over[2], over[3], max_ms);
  free(p);
  free(th);
  return 0;
}
