/* The device selection of gpu/ssae_cuda.h in a build without CUDA: no
 * device, and a device asked for is refused saying why (the live engine
 * and the commands call these in every build). */
#include "ssae_cuda.h"

int ssae_cuda_device_count(void) { return 0; }

int ssae_cuda_check_device(int dev, ssae_err *err) {
  return ssae_err_set(err, "CUDA device %d: this build has no CUDA", dev);
}

int ssae_cuda_device_enter(int dev, int *prev, ssae_err *err) {
  (void)prev;
  return ssae_cuda_check_device(dev, err);
}

int ssae_cuda_use_device(int dev, ssae_err *err) { return ssae_cuda_check_device(dev, err); }

void ssae_cuda_device_leave(int prev) { (void)prev; }

int ssae_cuda_current_device(void) { return -1; }
