/* Host jitter probe (not a test): how long this machine takes threads away.
 *
 *   host_jitter [THREADS [SECONDS]]     (default: every CPU but the first, 8 s)
 *
 * THREADS threads, pinned to CPUs 1..THREADS, each read CLOCK_MONOTONIC in a
 * loop; a gap between two reads is time the thread did not run (preempted,
 * or its virtual CPU taken by the hypervisor). engine_bench's feeding
 * threads see the same gaps inside their blocks (blk_max): on a host where
 * this prints gaps of several milliseconds, no window-to-score latency below
 * that can be shown without real-time priority. */
#define _GNU_SOURCE
#include <pthread.h>
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

int main(int argc, char **argv) {
  const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int n = argc > 1 ? atoi(argv[1]) : (int)(ncpu > 1 ? ncpu - 1 : 1);
  const double seconds = argc > 2 ? atof(argv[2]) : 8.0;
  if (n < 1 || n > 1024 || !(seconds > 0)) {
    fprintf(stderr, "usage: host_jitter [THREADS (1-1024)] [SECONDS]\n");
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
