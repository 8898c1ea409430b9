/* Host helper of the CUDA objects (the backend instance, the PyTorch
 * module's net): each lives on the device current when it was made, and its
 * calls may come from any thread (the engine's worker, a Python thread
 * whose current device is torch's). */
#ifndef SSAE_CUDA_DEVICE_SCOPE_CUH
#define SSAE_CUDA_DEVICE_SCOPE_CUH

#include <cuda_runtime.h>

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

#endif
