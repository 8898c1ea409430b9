/* The CUDA backend on windows already in device memory (a CUDA tensor of
 * the Python package): the kernel of the kernel table reads them where
 * they lie and writes scores (and reconstructions) where the caller says,
 * on the caller's stream, with no copy and no wait. The backend table's
 * run_device (src/model/ssae_backend.h). */
#include <stdint.h>

#include <algorithm>

#include "ssae_cuda_impl.cuh"

namespace ssae_cuda {

namespace {

/* check_device_ptr's refusal as the backend table's code for a bad
 * argument. */
int check_arg(const void *p, int dev, const char *what, ssae_err *err) {
  return check_device_ptr(p, dev, what, err) ? SSAE_BACKEND_DEVICE_EARG : 0;
}

}  // namespace

int run_device(void *impl, const float *x_dev, size_t n, float *scores_dev, float *recon_dev,
               void *stream, ssae_err *err) {
  cuda_impl *c = (cuda_impl *)impl;
  if (c->broken) return ssae_err_set(err, "%s", c->broken_msg);
  if (!n) return 0;
  if (!x_dev || !scores_dev) {
    ssae_err_set(err, "CUDA: NULL device buffer");
    return SSAE_BACKEND_DEVICE_EARG;
  }
  /* The kernels read windows and write reconstructions as float4. */
  if ((((uintptr_t)x_dev | (uintptr_t)recon_dev) & 15) != 0) {
    ssae_err_set(err, "CUDA: windows and reconstructions must be 16-byte aligned");
    return SSAE_BACKEND_DEVICE_EARG;
  }
  int rc;
  if ((rc = check_arg(x_dev, c->dev, "windows", err)) ||
      (rc = check_arg(scores_dev, c->dev, "scores", err)) ||
      (recon_dev && (rc = check_arg(recon_dev, c->dev, "reconstructions", err))))
    return rc;
  ON_DEVICE(c);
  c->runs++;
  const int inject = c->fail_after >= 0 && c->runs > c->fail_after;
  const size_t FM = (size_t)c->FM;
  rc = 0;
  /* In launches of up to 1,048,576 windows (the largest batch every
   * kernel is tested at; offsets inside a launch stay far below 2^31
   * floats), each with the kernel the table chooses for its size. Not in
   * the backend's buffer size (65,536 by default): the windows are read
   * where they lie, and a launch's last partial wave is paid once per
   * launch (16 launches cost ~15 % at 1 M windows, H100). */
  const size_t chunk = std::max(c->cap, kDeviceLaunchMax);
  for (size_t i = 0; i < n && rc == 0; i += chunk) {
    const size_t k = std::min(chunk, n - i);
    rc = launch_on(c, (cudaStream_t)stream, x_dev + i * FM, k, scores_dev + i,
                   recon_dev ? recon_dev + i * FM : NULL, inject, err);
  }
  return rc;
}

}  // namespace ssae_cuda
