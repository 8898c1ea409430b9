/* What a CUDA process pays before and after its work: loads the driver
 * (dlopen of libcuda, so that no runtime is in the way), cuInit, makes the
 * primary context of device 0 current, allocates 1 MB there, and returns.
 * Prints CLOCK_MONOTONIC nanoseconds at each step on one line
 * ("start T dlopen T init T ctx T"); cuda_start.py runs it in fresh
 * processes under several environments and times each to its exit.
 *
 *   cuda_start [init]     init: stop after cuInit (no context) */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef int cu_result;
typedef int cu_device;
typedef void *cu_context;

static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv) {
  const int init_only = argc > 1 && !strcmp(argv[1], "init");
  const long long t0 = now_ns();
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  const long long t1 = now_ns();
  if (!h) {
    fprintf(stderr, "cuda_start: %s\n", dlerror());
    return 1;
  }
  cu_result (*init)(unsigned) = (cu_result(*)(unsigned))dlsym(h, "cuInit");
  cu_result (*device_get)(cu_device *, int) =
      (cu_result(*)(cu_device *, int))dlsym(h, "cuDeviceGet");
  cu_result (*retain)(cu_context *, cu_device) =
      (cu_result(*)(cu_context *, cu_device))dlsym(h, "cuDevicePrimaryCtxRetain");
  cu_result (*set_current)(cu_context) = (cu_result(*)(cu_context))dlsym(h, "cuCtxSetCurrent");
  cu_result (*mem_alloc)(unsigned long long *, size_t) =
      (cu_result(*)(unsigned long long *, size_t))dlsym(h, "cuMemAlloc_v2");
  if (!init || !device_get || !retain || !set_current || !mem_alloc) {
    fprintf(stderr, "cuda_start: libcuda lacks a driver entry point\n");
    return 1;
  }
  cu_result r = init(0);
  const long long t2 = now_ns();
  if (r) {
    fprintf(stderr, "cuda_start: cuInit failed (%d)\n", r);
    return 1;
  }
  if (init_only) {
    printf("start %lld dlopen %lld init %lld\n", t0, t1, t2);
    return 0;
  }
  cu_device d;
  cu_context c;
  unsigned long long p;
  if ((r = device_get(&d, 0)) || (r = retain(&c, d)) || (r = set_current(c)) ||
      (r = mem_alloc(&p, 1 << 20))) {
    fprintf(stderr, "cuda_start: no context on device 0 (%d)\n", r);
    return 1;
  }
  printf("start %lld dlopen %lld init %lld ctx %lld\n", t0, t1, t2, now_ns());
  return 0;
}
