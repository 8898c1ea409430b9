/* Training the SSAE (issue 5): gradients of the MSE loss, Adam with
 * torch.optim.Adam's semantics, the training loop, and the gamma-fit
 * threshold calibration.
 *
 * Parameters travel as one flat float vector in state_dict order
 * (slice_encoder.0.weight, slice_encoder.0.bias, slice_encoder.1.weight,
 * slice_encoder.1.bias, global_basis, bottleneck_mlp.0.weight,
 * bottleneck_mlp.0.bias, bottleneck_mlp.1.weight, bottleneck_mlp.1.bias,
 * slice_decoder.0.weight, slice_decoder.0.bias), PyTorch shapes. The
 * trainer only sees a backend (ssae_train_backend): the CPU one is here,
 * the CUDA one (gpu/ssae_cuda_train.cu) fills in the same struct plus its
 * device-resident operations (ssae_train_dev_ops). */
#ifndef SSAE_TRAIN_H
#define SSAE_TRAIN_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "ssae_err.h"
#include "ssae_model.h"
#include "ssae_rng.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SSAE_N_TENSORS 11

extern const char *const ssae_tensor_names[SSAE_N_TENSORS];

/* Offsets (in floats) of the tensors in the flat vector; off[11] is the
 * total. */
void ssae_param_offsets(const ssae_dims *d, size_t off[SSAE_N_TENSORS + 1]);

/* PyTorch's default initialisation drawn from our own generator (the
 * numbers differ from torch's, the distributions do not): Linear weights
 * kaiming_uniform(a=sqrt 5) = U(-1/sqrt(fan_in), 1/sqrt(fan_in)), Linear
 * biases the same bound, global_basis xavier_uniform, LayerNorm 1 / 0. */
void ssae_param_init(const ssae_dims *d, uint64_t seed, float *params);

/* ---- CPU gradients ------------------------------------------------------ */

typedef struct ssae_grad ssae_grad;

/* threads: 0 = all cores (fewer when the system refuses some:
 * ssae_grad_threads says how many). The work is cut into chunks of a fixed
 * number of windows whose gradients are summed in a fixed order, so the
 * result does not depend on the number of threads. */
ssae_grad *ssae_grad_new(const ssae_dims *d, int threads, ssae_err *err);
void ssae_grad_free(ssae_grad *g);
int ssae_grad_threads(const ssae_grad *g);

/* Takes a copy of the parameters (and derives the normalised basis). */
int ssae_grad_set_params(ssae_grad *g, const float *params, ssae_err *err);

/* n windows of F*M floats. *sse: sum of squared errors over all n*F*M
 * values. grad: d(sse * scale)/d(params) (scale = 1/(n*F*M) gives
 * nn.MSELoss's mean). */
int ssae_grad_compute(ssae_grad *g, const float *x, size_t n, double scale,
                      double *sse, float *grad, ssae_err *err);
/* The same for n windows where they lie: window i is the F*M floats at
 * win[i] (a batch drawn from a window set, gathered by the threads that
 * compute it); the same result as ssae_grad_compute on them copied one
 * after another. */
int ssae_grad_compute_windows(ssae_grad *g, const float *const *win, size_t n, double scale,
                              double *sse, float *grad, ssae_err *err);

/* Forward only: mean squared error of each window (scores, n floats). */
int ssae_grad_scores(ssae_grad *g, const float *x, size_t n, float *scores,
                     ssae_err *err);

/* ---- Adam --------------------------------------------------------------- */

typedef struct ssae_adam_cfg {
  double lr, beta1, beta2, eps, weight_decay;
} ssae_adam_cfg;

typedef struct ssae_adam {
  ssae_adam_cfg cfg;
  size_t n;
  long step;
  float *m, *v;
} ssae_adam;

ssae_adam *ssae_adam_new(const ssae_adam_cfg *cfg, size_t n, ssae_err *err);
void ssae_adam_free(ssae_adam *a);
/* One torch.optim.Adam step (float32 state, L2 weight decay added to the
 * gradient as PyTorch does); grad is overwritten when weight_decay != 0. */
void ssae_adam_step(ssae_adam *a, float *params, float *grad);

/* ---- backends ----------------------------------------------------------- */

/* A set of windows: window i is the F*M floats at data + off[i] (windows of
 * one recording overlap in its frame array, so they are not copied), or at
 * data + i*F*M when off is NULL. */
typedef struct ssae_window_set {
  const float *data;
  const size_t *off;
  size_t n;
} ssae_window_set;

/* Device-resident training (a GPU backend). The loop hands the windows over
 * once (begin), then an epoch at a time the shuffled order (epoch); the
 * device keeps the parameters and the Adam state. epoch calls done once per
 * finished batch, in order, with the batch's sum of squared errors (a
 * non-zero return stops the epoch with -1); it polls *stop after queuing
 * each batch and then finishes the batches already queued (a few at most). */
typedef int (*ssae_train_batch_fn)(void *user, double sse, size_t nb,
                                   ssae_err *err);
typedef struct ssae_train_dev_ops {
  int (*begin)(void *ctx, const ssae_window_set *train,
               const ssae_window_set *val, const float *params,
               const ssae_adam_cfg *adam, ssae_err *err);
  int (*epoch)(void *ctx, const size_t *perm, size_t batch,
               volatile sig_atomic_t *stop, ssae_train_batch_fn done,
               void *user, ssae_err *err);
  /* mean window score of the validation set given to begin */
  int (*val_loss)(void *ctx, double *loss, ssae_err *err);
  int (*get_params)(void *ctx, float *params, ssae_err *err);
} ssae_train_dev_ops;

/* What the training loop needs from a device: forward + backward on a batch
 * held in host memory, and forward-only scores. */
typedef struct ssae_train_backend {
  const char *name;
  void *ctx;
  int (*set_params)(void *ctx, const float *params, ssae_err *err);
  int (*grad)(void *ctx, const float *x, size_t n, double scale, double *sse,
              float *grad, ssae_err *err);
  /* grad on windows where they lie (win[i]: window i), or NULL: the loop
   * then copies each batch together for grad */
  int (*grad_windows)(void *ctx, const float *const *win, size_t n, double scale,
                      double *sse, float *grad, ssae_err *err);
  int (*scores)(void *ctx, const float *x, size_t n, float *scores,
                ssae_err *err);
  void (*free)(void *ctx);
  /* NULL on the CPU; set by device backends, which the loop then drives
   * through it (set_params, grad and scores still work on host batches). */
  const ssae_train_dev_ops *dev;
} ssae_train_backend;

/* The CPU backend (ssae_grad). */
int ssae_train_backend_cpu(ssae_train_backend *be, const ssae_dims *d,
                           int threads, ssae_err *err);
void ssae_train_backend_free(ssae_train_backend *be);

/* The training backend by name (ssae_train_select.c): "cpu"; "cuda" (-1
 * with the reason when there is no usable device: no silent fall back);
 * "auto": CUDA when a device is present and passes the self-test below,
 * else the CPU, with the reason CUDA was passed over in note (NULL
 * allowed; "" when it was not). threads: the CPU backend's (0 = all
 * cores). On success be->name says which one runs. */
int ssae_train_backend_new(ssae_train_backend *be, const char *which, const ssae_dims *d,
                           int threads, ssae_err *note, ssae_err *err);
/* 1 when `which` names a training backend this build has ("auto", "cpu",
 * and "cuda" when built with CUDA). */
int ssae_train_backend_built(const char *which);

/* Start-up self-test of a backend against the CPU one: gradient and window
 * scores of a fixed random batch (log-mel scale) at fixed random weights
 * agree per tensor to 1e-3 relative (float32 kernels agree to about 1e-6).
 * Leaves be's parameters set to the test's. -1 with what differed. */
int ssae_train_backend_selftest(const ssae_train_backend *be,
                                const ssae_dims *d, ssae_err *err);

/* ---- training loop ------------------------------------------------------ */

typedef struct ssae_train_cfg {
  int epochs;          /* 100 */
  int batch;           /* 512 */
  int patience;        /* 0: no early stop; else epochs without improvement */
  ssae_adam_cfg adam;  /* lr 1e-3, betas 0.9/0.999, eps 1e-8, wd 0 */
  uint64_t seed;       /* shuffling */
} ssae_train_cfg;

void ssae_train_cfg_default(ssae_train_cfg *c);

typedef struct ssae_train_progress {
  int epoch;       /* 1-based, the epoch under way or just finished */
  int epochs;
  size_t done;     /* windows of this epoch done */
  size_t total;    /* windows per epoch */
  double loss;     /* running mean loss of this epoch */
  double val_loss; /* last validation loss, NAN when none */
  double elapsed;  /* seconds since the start */
  int epoch_end;   /* 1 once per finished epoch */
} ssae_train_progress;

typedef void (*ssae_train_progress_fn)(const ssae_train_progress *p,
                                       void *user);

typedef struct ssae_train_result {
  int epochs_run;
  double loss;      /* mean loss of the last epoch */
  double val_loss;  /* validation loss of the model returned, NAN if none */
  int best_epoch;   /* with patience: the epoch whose weights are returned */
  int interrupted;  /* stop flag seen */
  int early_stopped;
  double seconds;
} ssae_train_result;

/* Trains params in place on train; val may hold no windows.
 * stop: polled after every batch (may be NULL); when it becomes non-zero
 * the loop ends and params hold the weights after the last batch. With
 * patience > 0 and validation data, the weights of the best validation
 * epoch are returned. */
int ssae_train_run(const ssae_dims *d, const ssae_train_cfg *cfg,
                   const ssae_train_backend *be, float *params,
                   const ssae_window_set *train, const ssae_window_set *val,
                   volatile sig_atomic_t *stop,
                   ssae_train_progress_fn progress, void *user,
                   ssae_train_result *res, ssae_err *err);

/* ---- threshold ---------------------------------------------------------- */

/* Gamma maximum-likelihood fit with the location fixed at 0, as
 * scipy.stats.gamma.fit(x, floc=0). Needs n >= 2, every x > 0 and not all
 * equal. */
int ssae_gamma_fit(const double *x, size_t n, double *shape, double *scale,
                   ssae_err *err);
/* Regularised lower incomplete gamma P(a, x). */
double ssae_gamma_p(double a, double x);
/* Its inverse in x: P(a, x) = p, 0 < p < 1. */
double ssae_gamma_p_inv(double a, double p);

#ifdef __cplusplus
}
#endif
#endif
