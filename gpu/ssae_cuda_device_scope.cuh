/* Host helpers of the CUDA objects (the backend instance, the PyTorch
 * module's net): each lives on the device current when it was made, and its
 * calls may come from any thread (the engine's worker, a Python thread
 * whose current device is torch's) with pointers of the caller's. */
#ifndef SSAE_CUDA_DEVICE_SCOPE_CUH
#define SSAE_CUDA_DEVICE_SCOPE_CUH

#include <cuda_runtime.h>

#include "ssae_err.h"

/* For one call: device d current on the calling thread, the caller's own
 * restored when the scope ends (a failure to restore is cleared, not
 * reported: the call's own work is done by then). Where the devices are
 * the same (one GPU, or the engine's own threads) this is one
 * cudaGetDevice; it never allocates. e: cudaSuccess, or why d could not be
 * selected. */
struct device_scope {
  int prev, dev;
  cudaError_t e;
  explicit device_scope(int d) : prev(-1), dev(d), e(cudaGetDevice(&prev)) {
    if (e == cudaSuccess && prev != dev) e = cudaSetDevice(dev);
  }
  ~device_scope() {
    if (prev >= 0 && prev != dev && cudaSetDevice(prev) != cudaSuccess) cudaGetLastError();
  }
  device_scope(const device_scope &) = delete;
  device_scope &operator=(const device_scope &) = delete;
};

/* 0 when p is memory of device dev that its kernels can read and write
 * (device or managed memory); -1 with err naming `what` and the problem
 * when it is not (a host pointer, another device's memory), so that a
 * caller's mistake is a message, not a fault in a kernel. */
inline int check_device_ptr(const void *p, int dev, const char *what, ssae_err *err) {
  cudaPointerAttributes at;
  const cudaError_t e = cudaPointerGetAttributes(&at, p);
  if (e != cudaSuccess) {
    cudaGetLastError(); /* not a sticky error: clear it */
    return ssae_err_set(err, "CUDA: %s: not device memory (%s)", what, cudaGetErrorString(e));
  }
  if (at.type != cudaMemoryTypeDevice && at.type != cudaMemoryTypeManaged)
    return ssae_err_set(err, "CUDA: %s: host memory, not device memory", what);
  if (at.device != dev)
    return ssae_err_set(err, "CUDA: %s: memory of device %d, the model is on device %d", what,
                        at.device, dev);
  return 0;
}

#endif
