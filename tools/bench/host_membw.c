/* Host memory bandwidth probe (not a test): what the offline GPU path's
 * decoding threads and the copy engine share. `ssae score --backend cuda`
 * moves every file's samples from the page cache into page-locked blocks
 * (read and written) and the copy engine reads them again: on a host whose
 * memory this says moves N GB/s, the job needs at least its bytes over N
 * (BENCHMARKS.md, "Where a fresh process's time goes").
 *
 *   host_membw [THREADS]     (default: every CPU; also 1 and half of them)
 *
 * Each thread copies (memcpy) its own 256 MiB five times, then reads it
 * five times, in 2 MB pages where the kernel gives them; the threads start
 * together and the rate is their bytes over the slowest one's time. Prints
 * GB/s: copy (bytes read + bytes written) and read. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define BYTES ((size_t)256 << 20)
#define ROUNDS 5

typedef struct {
  pthread_barrier_t *bar;
  int copy;
  uint64_t sink; /* the reads' sum: kept so that they are made */
  int ok;
} job;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static unsigned char *huge(void) {
  unsigned char *p = aligned_alloc((size_t)2 << 20, BYTES);
  if (p) {
    madvise(p, BYTES, MADV_HUGEPAGE);
    memset(p, 1, BYTES);
  }
  return p;
}

static void *run(void *arg) {
  job *j = arg;
  unsigned char *src = huge(), *dst = huge();
  j->ok = src && dst;
  pthread_barrier_wait(j->bar);
  uint64_t acc = 0;
  for (int r = 0; r < ROUNDS && j->ok; r++) {
    if (j->copy) {
      memcpy(dst, src, BYTES);
      acc += dst[(size_t)r * 4096]; /* the copy is used: not left out */
      src[r]++;
    } else {
      const uint64_t *p = (const uint64_t *)(void *)src;
      uint64_t x = 0;
      for (size_t i = 0; i < BYTES / 8; i += 8)
        x += p[i] + p[i + 1] + p[i + 2] + p[i + 3] + p[i + 4] + p[i + 5] + p[i + 6] + p[i + 7];
      acc += x;
    }
  }
  j->sink = acc;
  pthread_barrier_wait(j->bar);
  free(src);
  free(dst);
  return NULL;
}

/* GB/s of threads copying (copy) or reading; -1 when memory ran out. */
static double measure(int threads, int copy) {
  pthread_barrier_t bar;
  pthread_t tid[1024];
  job jobs[1024];
  pthread_barrier_init(&bar, NULL, (unsigned)threads + 1);
  for (int i = 0; i < threads; i++) {
    jobs[i] = (job){.bar = &bar, .copy = copy};
    if (pthread_create(&tid[i], NULL, run, &jobs[i])) {
      fprintf(stderr, "host_membw: cannot start thread %d\n", i);
      exit(1);
    }
  }
  pthread_barrier_wait(&bar);
  const double t0 = now();
  pthread_barrier_wait(&bar);
  const double dt = now() - t0;
  int ok = 1;
  for (int i = 0; i < threads; i++) {
    pthread_join(tid[i], NULL);
    ok &= jobs[i].ok;
  }
  pthread_barrier_destroy(&bar);
  if (!ok) return -1;
  return (double)threads * ROUNDS * (double)BYTES * (copy ? 2 : 1) / dt / 1e9;
}

int main(int argc, char **argv) {
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int max = argc > 1 ? atoi(argv[1]) : (int)(ncpu > 0 ? ncpu : 1);
  if (max < 1 || max > 1024) {
    fprintf(stderr, "usage: host_membw [THREADS (1 to 1024)]\n");
    return 2;
  }
  printf("# threads  copy GB/s (read + written)  read GB/s   (256 MiB a thread, %d rounds)\n",
         ROUNDS);
  const int counts[3] = {1, max / 2, max};
  for (int k = 0; k < 3; k++) {
    if (counts[k] < 1 || (k && counts[k] == counts[k - 1])) continue;
    const double c = measure(counts[k], 1), r = measure(counts[k], 0);
    if (c < 0 || r < 0) {
      fprintf(stderr, "host_membw: out of memory for %d threads\n", counts[k]);
      return 1;
    }
    printf("%9d  %26.1f  %9.1f\n", counts[k], c, r);
  }
  return 0;
}
