/* Vector-Jacobian products of the SSAE forward pass y = f(x; params) on
 * the CPU, for callers whose loss is their own (the PyTorch module of the
 * Python package): given the upstream gradient dy = dLoss/dy, the
 * gradients of every parameter and of the input. ssae_grad (ssae_train.h)
 * is the special case dy = 2 (y - x) scale that `ssae train` uses, without
 * the input gradient; both run on the trainer's kernels
 * (ssae_train_kern.h).
 *
 * Parameters are one flat float vector in state_dict order
 * (ssae_param_offsets). Arithmetic is float32 with float64 LayerNorm
 * statistics and float64 sums over the batch, as in ssae_grad: gradients
 * agree with PyTorch autograd in float64 to about 1e-6 relative. */
#ifndef SSAE_VJP_H
#define SSAE_VJP_H

#include <stddef.h>

#include "ssae_err.h"
#include "ssae_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ssae_vjp ssae_vjp;

/* threads: 0 = every core, 1 = the calling thread only (the others are
 * started here and wait between calls). The result does not depend on it
 * (chunks are summed in a fixed order). */
ssae_vjp *ssae_vjp_new(const ssae_dims *d, int threads, ssae_err *err);
void ssae_vjp_free(ssae_vjp *v);

/* Runs fn(data) once on each of n threads, the calling thread among them,
 * and returns when every call has returned: the signature (flags 0) of
 * libgomp's GOMP_parallel, the entry of an OpenMP parallel region. */
typedef void (*ssae_team_fn)(void (*fn)(void *), void *data, unsigned n, unsigned flags);

/* Lends the object a host's thread team for its calls: a host whose own
 * work runs on an OpenMP team (PyTorch on the CPU) keeps its threads
 * spinning between its operations, and ssae's threads woken beside them
 * would compete for the same cores; the team's threads are free and hot
 * when a call comes. threads: how many of them to use (at most the
 * object's); team NULL or threads <= 1: ssae's own threads again. The
 * result does not change. */
void ssae_vjp_set_team(ssae_vjp *v, ssae_team_fn team, int threads);

/* Floats in the flat parameter vector. */
size_t ssae_vjp_param_count(const ssae_vjp *v);

/* Takes a copy of the parameters; refuses non-finite ones. */
int ssae_vjp_set_params(ssae_vjp *v, const float *params, ssae_err *err);

/* n windows of F*M floats at x; y: n*F*M floats of output. */
int ssae_vjp_forward(ssae_vjp *v, const float *x, size_t n, float *y, ssae_err *err);

/* The forward pass again and its backward from dy (n*F*M floats):
 * dparams (ssae_vjp_param_count floats) = sum over the batch of
 * dy . dy/dparams; dx (n*F*M floats, or NULL when not wanted) = dy . dy/dx.
 * One call at a time per object; may allocate (buffers grow to the largest
 * batch). */
int ssae_vjp_backward(ssae_vjp *v, const float *x, size_t n, const float *dy, float *dparams,
                      float *dx, ssae_err *err);

/* The mean squared reconstruction error of n windows at x (x taken as a
 * constant), mean over all n*F*M values, into *loss (NaN for n = 0), and
 * its parameter gradient into dparams: the forward, the error's gradient
 * 2 (y - x) / (n F M) and the backward in one pass over each chunk (no
 * output written, no forward again). The same gradient as
 * ssae_vjp_backward from that dy, bit for bit. */
int ssae_vjp_loss(ssae_vjp *v, const float *x, size_t n, double *loss, float *dparams,
                  ssae_err *err);

/* Training without recomputation: the forward, keeping what the backward
 * needs in act (ssae_vjp_act_floats(v, n) floats, the caller's); then the
 * backward from them (the same results as ssae_vjp_backward on the
 * forward's x), for the parameters of that forward (unchanged since, or
 * set again to the same values). */
size_t ssae_vjp_act_floats(const ssae_vjp *v, size_t n);
int ssae_vjp_forward_save(ssae_vjp *v, const float *x, size_t n, float *y, float *act,
                          ssae_err *err);
int ssae_vjp_backward_saved(ssae_vjp *v, const float *act, size_t n, const float *dy,
                            float *dparams, float *dx, ssae_err *err);

#ifdef __cplusplus
}
#endif
#endif
