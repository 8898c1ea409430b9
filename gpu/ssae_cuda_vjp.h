/* Forward and vector-Jacobian product of the SSAE on CUDA tensors: the
 * caller's parameters (one flat float vector in state_dict order), input
 * and upstream gradient in device memory, results written to the caller's
 * device memory, all queued on the caller's stream (a cudaStream_t; NULL:
 * the legacy default stream) without waiting. The default dimensions
 * (64 mels, 5 frames, latent 32, slice latent 64) on sm_80 or newer run on
 * a tensor-core kernel (gpu/ssae_cuda_vjp_tc.cuh: every product in 3xTF32,
 * fp32 accuracy), others on the CUDA trainer's kernels
 * (gpu/ssae_cuda_train_kernels.cuh: float32 products); both keep LayerNorm
 * statistics in float64, sum the blocks' partial gradients in float64 in
 * a fixed order and use no atomics: the same bits on every run on one
 * device. The backward takes an upstream gradient of the
 * reconstruction instead of the trainer's mean squared error, and also
 * gives the input gradient. SSAE_CUDA_VJP=simt (read when an object is
 * made) keeps the trainer's kernels for every dimension (and makes
 * `ssae train --backend cuda`, whose gradient steps also run on the
 * tensor-core kernel, keep its own). Present when the
 * build found nvcc (SSAE_HAVE_CUDA).
 *
 * An object keeps scratch on the device it was made on (the current device
 * then): derived weights and per-block partial gradients. Calls on one
 * object may come on different streams: each waits, on the device, for the
 * previous call's work (an event), so the scratch is never shared between
 * two calls in flight. Parameters are not checked for finiteness (that
 * would need a wait). */
#ifndef SSAE_CUDA_VJP_H
#define SSAE_CUDA_VJP_H

#include <stddef.h>

#include "ssae_err.h"
#include "ssae_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ssae_cuda_vjp ssae_cuda_vjp;

/* On the current device; NULL with a reason (no device, dimensions whose
 * activations do not fit its shared memory). */
ssae_cuda_vjp *ssae_cuda_vjp_new(const ssae_dims *d, ssae_err *err);
void ssae_cuda_vjp_free(ssae_cuda_vjp *v);

/* y_dev (n*F*M floats) = f(x_dev; params_dev) for n windows. */
int ssae_cuda_vjp_forward(ssae_cuda_vjp *v, const float *params_dev, const float *x_dev,
                          size_t n, float *y_dev, void *stream, ssae_err *err);

/* Most pieces ssae_cuda_vjp_forward_parts takes. */
#define SSAE_CUDA_VJP_MAX_PARTS 16

/* The same forward from the parameters in nparts pieces (device arrays of
 * counts[i] floats, in the flat vector's order: a module's parameter
 * tensors where they lie), gathered on the device into the net's own copy
 * by the kernel that compares them with the last call's. No flat vector is
 * made by the caller, and for the default dimensions a call is three
 * kernels: the gather (and, when the values changed, the basis's
 * normalisation), the fold (nothing unless they changed), the forward. */
int ssae_cuda_vjp_forward_parts(ssae_cuda_vjp *v, const float *const *parts,
                                const size_t *counts, int nparts, const float *x_dev, size_t n,
                                float *y_dev, void *stream, ssae_err *err);

/* From the upstream gradient dy_dev (n*F*M floats): dparams_dev (the flat
 * vector's length) = sum over windows of dy . dy/dparams, and, when not
 * NULL, dx_dev (n*F*M) = dy . dy/dx. n may be 0 (dparams_dev zeroed). */
int ssae_cuda_vjp_backward(ssae_cuda_vjp *v, const float *params_dev, const float *x_dev,
                           size_t n, const float *dy_dev, float *dparams_dev, float *dx_dev,
                           void *stream, ssae_err *err);

/* The reconstruction loss and its gradient, fused: *loss_dev (one float) =
 * the mean over the n*F*M values of (f(x) - x)^2 (PyTorch's
 * mse_loss(f(x), x)), and dparams_dev = its gradient (the input taken as
 * a constant) - the step `ssae train` takes, one pass over the windows
 * instead of a forward, a loss and a backward. n 0: *loss_dev NaN (the
 * mean of nothing), dparams_dev zeroed. */
int ssae_cuda_vjp_loss(ssae_cuda_vjp *v, const float *params_dev, const float *x_dev, size_t n,
                       float *loss_dev, float *dparams_dev, void *stream, ssae_err *err);

#ifdef __cplusplus
}
#endif
#endif
