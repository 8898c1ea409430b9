/* What page-locked host memory costs on this host (not a test): the GPU
 * front end's input blocks (gpu/ssae_cuda_frontend.cu) are memory touched
 * in 2 MB pages and then registered, because cudaHostAlloc and
 * cudaFreeHost cost a large share of an offline job's time on the GPU.
 *
 *   pinned_bench [MIB [ROUNDS]]     (default 64 MiB, 3 rounds)
 *   pinned_bench 0                  (the driver and the context, then exit)
 *
 * Prints, in milliseconds: the driver's start (the first CUDA call) and the
 * context's creation once, then per round: cudaHostAlloc + cudaFreeHost;
 * aligned_alloc in 2 MB pages + memset + cudaHostRegister, then
 * cudaHostUnregister + free; the same registration of memory not touched
 * first; and a host-to-device copy of the size from each kind. With 0 it
 * stops after the context: timed as a whole process (bench_gpu_frontend.sh),
 * what any CUDA program pays on this host before and after its work. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int check(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 0;
  fprintf(stderr, "pinned_bench: %s: %s\n", what, cudaGetErrorString(e));
  return 1;
}

static char *huge(size_t bytes) {
  char *p = (char *)aligned_alloc((size_t)2 << 20, bytes);
  if (p) madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

int main(int argc, char **argv) {
  const long mib = argc > 1 ? strtol(argv[1], NULL, 10) : 64;
  const int rounds = argc > 2 ? atoi(argv[2]) : 3;
  if ((mib != 0 && mib < 2) || mib > 65536 || mib % 2 || rounds < 1) {
    fprintf(stderr, "usage: pinned_bench [MIB (even, or 0) [ROUNDS]]\n");
    return 2;
  }
  const size_t bytes = (size_t)mib << 20;
  int n = 0;
  double t = now_ms();
  if (check(cudaGetDeviceCount(&n), "looking for a device") || !n) return 77;
  printf("driver start %.1f ms", now_ms() - t);
  t = now_ms();
  if (check(cudaFree(0), "creating the context")) return 1;
  printf(", context %.1f ms", now_ms() - t);
  if (!mib) {
    printf("\n");
    return 0;
  }
  printf("; %ld MiB:\n", mib);
  void *dev = NULL;
  if (check(cudaMalloc(&dev, bytes), "device memory")) return 1;
  printf("round  hostalloc  freehost  touch+register  unregister+free  register-untouched"
         "  copy-from-hostalloc  copy-from-registered\n");
  for (int r = 0; r < rounds; r++) {
    void *a = NULL;
    double t0 = now_ms();
    if (check(cudaHostAlloc(&a, bytes, cudaHostAllocPortable), "cudaHostAlloc")) return 1;
    const double alloc = now_ms() - t0;
    memset(a, 0, bytes);
    t0 = now_ms();
    if (check(cudaMemcpy(dev, a, bytes, cudaMemcpyHostToDevice), "copy")) return 1;
    const double copy_a = now_ms() - t0;
    t0 = now_ms();
    if (check(cudaFreeHost(a), "cudaFreeHost")) return 1;
    const double freeh = now_ms() - t0;

    t0 = now_ms();
    char *h = huge(bytes);
    if (!h) return 1;
    memset(h, 0, bytes);
    if (check(cudaHostRegister(h, bytes, cudaHostRegisterPortable), "cudaHostRegister")) return 1;
    const double reg = now_ms() - t0;
    t0 = now_ms();
    if (check(cudaMemcpy(dev, h, bytes, cudaMemcpyHostToDevice), "copy")) return 1;
    const double copy_r = now_ms() - t0;
    t0 = now_ms();
    if (check(cudaHostUnregister(h), "cudaHostUnregister")) return 1;
    free(h);
    const double unreg = now_ms() - t0;

    char *u = huge(bytes);
    if (!u) return 1;
    t0 = now_ms();
    if (check(cudaHostRegister(u, bytes, cudaHostRegisterPortable), "cudaHostRegister")) return 1;
    const double reg_u = now_ms() - t0;
    if (check(cudaHostUnregister(u), "cudaHostUnregister")) return 1;
    free(u);
    printf("%5d %10.2f %9.2f %15.2f %16.2f %19.2f %20.2f %21.2f\n", r + 1, alloc, freeh, reg,
           unreg, reg_u, copy_a, copy_r);
  }
  cudaFree(dev);
  return 0;
}
