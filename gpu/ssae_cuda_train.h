/* Training on the GPU: the SSAE's forward pass with its saved
 * activations and the whole backward pass in one fused kernel that writes
 * one partial gradient per block, then one kernel that sums the partials in
 * a fixed order (double), takes the gradient through the basis
 * normalisation and applies Adam. Parameters, Adam moments and the training
 * windows stay on the device; per batch the host only queues two launches.
 * No float atomics anywhere: the same seed, files and device give the same
 * model bit for bit.
 *
 * It is an ssae_train_backend (src/train/ssae_train.h) with the device
 * operations (ssae_train_dev_ops) filled in, so ssae_train_run drives it
 * like the CPU backend; set_params, grad and scores work on host batches
 * too (tests, threshold calibration). Present when the build found nvcc
 * (SSAE_HAVE_CUDA). */
#ifndef SSAE_CUDA_TRAIN_H
#define SSAE_CUDA_TRAIN_H

#include <stddef.h>

#include "ssae_err.h"
#include "ssae_model.h"
#include "ssae_train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when a CUDA device is present. */
int ssae_cuda_train_available(void);

/* Creates the CUDA training backend on device 0; -1 with a reason when
 * there is no device or the dimensions do not fit its shared memory. */
int ssae_train_backend_cuda(ssae_train_backend *be, const ssae_dims *d,
                            ssae_err *err);

/* Test hook: `steps` Adam steps of the device's Adam arithmetic on n
 * parameters with the given gradients (steps x n), params updated in place.
 * The same device function the training kernel uses. */
int ssae_cuda_adam_steps(const ssae_adam_cfg *cfg, size_t n, float *params,
                         const float *grads, int steps, ssae_err *err);

#ifdef __cplusplus
}
#endif
#endif
