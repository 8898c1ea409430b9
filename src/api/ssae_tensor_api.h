/* A flat C API for foreign callers (Python through ctypes, other FFIs):
 * plain functions over float32 buffers and opaque handles, no structs to
 * mirror. Every call that can fail returns 0 or a negative SSAE_API_E*
 * code with a message in err (an ssae_err: a char buffer of SSAE_ERR_LEN
 * bytes; NULL allowed). Nothing here prints, exits or aborts.
 *
 * Thread safety: one call at a time per handle; different handles are
 * independent.
 *
 * Shapes: a window is F*M floats (frame-major, SPEC section 1), a frame M
 * floats; n windows are n*F*M floats, C order. */
#ifndef SSAE_TENSOR_API_H
#define SSAE_TENSOR_API_H

#include <stddef.h>

#include "ssae_err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped when a signature here changes; callers check it at load. */
#define SSAE_API_VERSION 3
int ssae_api_version(void);

#define SSAE_API_OK 0
#define SSAE_API_EARG (-1)     /* bad argument (shape, NULL buffer, key) */
#define SSAE_API_EIO (-2)      /* a file could not be read or written */
#define SSAE_API_EBACKEND (-3) /* a backend failed and nothing could take over */
#define SSAE_API_ENOMEM (-4)
#define SSAE_API_ENODEV (-5)   /* device memory given to a backend that reads none (below) */

/* Frees what the functions below return through a pointer (frames,
 * scores). NULL is fine. */
void ssae_api_free(void *p);

/* Backends of this build, one per line: "name\tavailable" (1 or 0), CPU
 * last. Returns the length of the whole text (as snprintf: the text is cut
 * when it is len or longer). */
size_t ssae_api_backends(char *buf, size_t len);

/* ---- models ------------------------------------------------------------- */

typedef struct ssae_api_model ssae_api_model;

/* path NULL: the built-in model. backend: "auto" (CUDA when present and its
 * self-test passes, else CPU), "cpu" or "cuda". */
ssae_api_model *ssae_api_model_open(const char *path, const char *backend, ssae_err *err);
void ssae_api_model_free(ssae_api_model *m);
/* A model from a flat parameter vector (state_dict order, as
 * ssae_api_net_set_params; n = ssae_api_dims_param_count(dims)) with the
 * default feature settings and no threshold, on backend (as above): how
 * the PyTorch module's evaluation forward reaches the inference kernels.
 * NULL with the reason. */
ssae_api_model *ssae_api_model_from_params(const int dims[4], const float *params, size_t n,
                                           const char *backend, ssae_err *err);
/* The arithmetic of the matrix products (ssae_backend_set_math): "fp32"
 * (default) or "3xtf32" (CUDA: tensor cores, fp32-level accuracy, higher
 * throughput; the CPU computes as it does). 0, or SSAE_API_EARG for
 * another value. */
int ssae_api_model_set_math(ssae_api_model *m, const char *math, ssae_err *err);

/* n_mels, frames, latent_dim, slice_latent_dim. */
void ssae_api_model_dims(const ssae_api_model *m, int dims[4]);
/* The decision threshold; NaN when the model has none. */
double ssae_api_model_threshold(const ssae_api_model *m);
/* Metadata text of one feature key (ssae_feat_keys: sample_rate, n_fft,
 * ...); 0, or SSAE_API_EARG for an unknown key. */
int ssae_api_model_feature(const ssae_api_model *m, const char *key, char *buf, size_t len);
/* Any metadata entry (provenance, threshold_method, ...); 0, or
 * SSAE_API_EARG when absent. */
int ssae_api_model_meta(const ssae_api_model *m, const char *key, char *buf, size_t len);
/* Every metadata key of the model file, one per line; the length of the
 * whole text (cut when it is len or longer, as snprintf). */
size_t ssae_api_model_meta_keys(const ssae_api_model *m, char *buf, size_t len);
/* The parameters, one flat vector in state_dict order (as
 * ssae_api_net_set_params takes them); n must be
 * ssae_api_dims_param_count(dims). */
int ssae_api_model_params(const ssae_api_model *m, float *out, size_t n, ssae_err *err);

/* Name of the backend now in use ("cuda", "cpu"); why "auto" passed over a
 * faster one ("" when it did not); 1 once it fell back to the CPU after a
 * failure, with the failure's message from ssae_api_model_fallback_msg. */
const char *ssae_api_model_backend(const ssae_api_model *m);
const char *ssae_api_model_note(const ssae_api_model *m);
int ssae_api_model_fell_back(const ssae_api_model *m);
const char *ssae_api_model_fallback_msg(const ssae_api_model *m);

/* n windows at x (host memory): scores (n floats, mean squared error per
 * window) and, when recon is not NULL, the reconstructions (n*F*M). A
 * backend failure falls back to the CPU and reruns the batch (see
 * ssae_api_model_fell_back). */
int ssae_api_model_score(ssae_api_model *m, const float *x, size_t n, float *scores,
                         float *recon, ssae_err *err);
/* Every window of a run of n_frames consecutive frames (n_frames*M floats):
 * n_frames-F+1 scores (none when n_frames < F); each frame is encoded once
 * on the CPU. */
int ssae_api_model_score_frames(ssae_api_model *m, const float *frames, size_t n_frames,
                                float *scores, ssae_err *err);

/* A file scored as `ssae score` does (its pipeline: load, channel, resample
 * to the model's rate, the model's features, every window): *file_score,
 * and the window scores in *scores (n_windows floats, free with
 * ssae_api_free). channel: an index, or -1 for the mean of all channels. */
int ssae_api_score_file(ssae_api_model *m, const char *path, int channel, double *file_score,
                        float **scores, size_t *n_windows, ssae_err *err);

/* Test hook: the next score call fails on the current backend as a device
 * error would (it then falls back like any failure). */
void ssae_api_model_fail_next(ssae_api_model *m);

/* ---- features ----------------------------------------------------------- */

/* Log-mel frames of n samples, exactly as `ssae features` computes them.
 * settings: "key=value" lines (feature keys of SPEC section 1, as in model
 * metadata), NULL or "" for the defaults; the samples are taken to be at
 * the settings' sample_rate (no resampling). *frames: n_frames x n_mels
 * floats (free with ssae_api_free). */
int ssae_api_logmel(const char *settings, const float *x, size_t n, float **frames,
                    size_t *n_frames, int *n_mels, ssae_err *err);

/* ---- training: forward and backward on the CPU ---------------------------- */

/* Floats in the flat parameter vector of a model of these dimensions
 * (n_mels, frames, latent_dim, slice_latent_dim); 0 when out of range. */
size_t ssae_api_dims_param_count(const int dims[4]);

typedef struct ssae_api_net ssae_api_net;

/* A network whose parameters the caller owns and changes (an optimiser):
 * forward and backward of y = f(x; params). threads: 0 = every core. */
ssae_api_net *ssae_api_net_new(const int dims[4], int threads, ssae_err *err);
void ssae_api_net_free(ssae_api_net *net);
/* Copies the parameters (flat, state_dict order); call again after every
 * change. Refuses non-finite values. */
int ssae_api_net_set_params(ssae_api_net *net, const float *params, size_t n, ssae_err *err);
/* The same from nparts pieces in order (counts[i] floats at parts[i]: a
 * module's parameter tensors, each contiguous), doing nothing when they
 * equal, bit for bit, the parameters set last. A caller can call it before
 * every forward and backward, whatever changed the values: a cache keyed
 * by the tensors (PyTorch's version counters) misses changes made through
 * .data or by a CUDA graph's replay. */
int ssae_api_net_set_params_parts(ssae_api_net *net, const float *const *parts,
                                  const size_t *counts, size_t nparts, ssae_err *err);
/* y = f(x) for n windows (the CPU forward, float64 inside: SPEC accuracy). */
int ssae_api_net_forward(ssae_api_net *net, const float *x, size_t n, float *y,
                         ssae_err *err);
/* Gradients for the upstream gradient dy (n*F*M floats): dparams (the
 * flat vector's length) = sum over windows of dy . dy/dparams, and dx
 * (n*F*M, or NULL) = dy . dy/dx. */
int ssae_api_net_backward(ssae_api_net *net, const float *x, size_t n, const float *dy,
                          float *dparams, float *dx, ssae_err *err);
/* Training without recomputation: the forward of the backward's kernels
 * (float32 products, float64 LayerNorm statistics), keeping what the
 * backward needs in act, the caller's n_act = ssae_api_net_act_floats(net,
 * n) floats (about 1.7k per window at the default dimensions); then the
 * backward from them, for the parameters of that forward (set them again
 * before, if another forward changed them). act NULL and n_act 0: the same
 * forward keeping nothing, for ssae_api_net_backward to recompute (at large
 * batches writing and reading the activations costs more than computing
 * them again). */
size_t ssae_api_net_act_floats(const ssae_api_net *net, size_t n);
int ssae_api_net_forward_train(ssae_api_net *net, const float *x, size_t n, float *y, float *act,
                               size_t n_act, ssae_err *err);
int ssae_api_net_backward_saved(ssae_api_net *net, const float *act, size_t n_act, size_t n,
                                const float *dy, float *dparams, float *dx, ssae_err *err);
/* The mean squared reconstruction error of n windows at x, as
 * mse_loss(forward(x), x) over every value (x a constant), into *loss, and
 * its parameter gradient into dparams: the forward, the error's gradient
 * and the backward in one pass over each chunk of windows, no output and no
 * activations written. The gradient is ssae_api_net_backward's for dy =
 * (y - x) * (2 / (n F M)) (in float), bit for bit. */
int ssae_api_net_loss(ssae_api_net *net, const float *x, size_t n, double *loss,
                      float *dparams, ssae_err *err);
/* The training forward and backward above run on the caller's thread team
 * instead of the net's own threads: team is a function with the signature
 * (and meaning) of libgomp's GOMP_parallel(fn, data, n_threads, flags),
 * e.g. that of the OpenMP runtime PyTorch's CPU operators run on, and
 * threads how many of its threads to use (at most the net's). NULL or
 * threads <= 1: the net's own threads. Results do not change. */
void ssae_api_net_set_team(ssae_api_net *net, void *team, int threads);
/* Test hook: the next forward or backward fails with SSAE_API_EBACKEND
 * (callers test their own fallback). */
void ssae_api_net_fail_next(ssae_api_net *net);

/* Writes a model file: the flat parameters, the metadata lines "key=value"
 * (feature keys, threshold, provenance; NULL for none; dimensions come from
 * dims). Atomic, validated as a load would be. */
int ssae_api_save(const char *path, const int dims[4], const float *params, size_t n,
                  const char *metadata, ssae_err *err);

/* ---- CUDA tensors (device pointers) ---------------------------------------
 * Defined in builds with the CUDA backend (the library then has these
 * symbols; SSAE_API_HAVE_CUDA_TENSORS is for callers that compile against
 * them): callers look the symbols up and copy to the host when they are
 * absent. Pointers are device memory of one device (checked: another
 * device's memory or host memory is SSAE_API_EARG); stream is the caller's
 * cudaStream_t (NULL: the legacy default stream). The work is queued on it
 * and the call returns without waiting, so the caller's stream order holds
 * (a producer queued before, a consumer after); nothing is copied through
 * the host. Errors found at launch are returned; a fault during the
 * kernels shows at the caller's next synchronisation, as for any CUDA
 * work. */
#ifdef SSAE_API_HAVE_CUDA_TENSORS
/* As ssae_api_model_score, on the model's backend when that is CUDA (its
 * kernel table's kernel for n windows reads x_dev in place): scores_dev
 * (n floats), recon_dev (n*F*M floats or NULL); x_dev and recon_dev
 * 16-byte aligned (the kernels move float4s; a fresh CUDA allocation is).
 * The model's device is the one current on the thread that opened it
 * (device 0 unless the caller selected another: cudaSetDevice, or
 * torch.cuda.device in Python); calls may come from any thread (each
 * selects the model's device for its duration and restores the caller's).
 * SSAE_API_ENODEV when the backend
 * in use reads no device memory (the CPU; or after a fall back, which a
 * device failure in this very call makes: ssae_api_model_fell_back and its
 * message say so): nothing was written; the caller copies the windows to
 * the host and calls ssae_api_model_score. */
int ssae_api_model_score_cuda(ssae_api_model *m, const float *x_dev, size_t n,
                              float *scores_dev, float *recon_dev, void *stream, ssae_err *err);
/* Forward and backward of a net on device memory of the current device:
 * params_dev is the flat parameter vector (as ssae_api_net_set_params
 * takes it; the net's own parameters are not used). The first call makes
 * the net's device scratch (on the current device; later calls must use
 * memory of that device). Calls on one net may come on different streams
 * (each waits on the device for the previous one's work). The kernels
 * (gpu/ssae_cuda_vjp.h): for the default dimensions on sm_80 or newer the
 * forward on the inference kernels (small_batch up to 1,024 windows, else
 * warp_3xtf32; their weights folded on the device from params_dev, again
 * only when its bits differ from the last forward's: the comparison is on
 * the device, so a change by any means is seen; x_dev and y_dev 16-byte
 * aligned, else the next kernel's forward) and the backward on a 3xTF32 tensor-core kernel; otherwise the
 * CUDA trainer's (float32). float64 LayerNorm statistics and sums of the
 * blocks' partial gradients; deterministic. Non-finite parameters are not
 * refused. The net's test
 * hook (ssae_api_net_fail_next) applies. A call queued while stream is
 * being captured into a CUDA graph runs on scratch of the graph's own (a
 * stream-ordered allocation inside the capture) and orders itself by the
 * stream alone: replays share no buffer with the net's other calls, read
 * params_dev's values of their moment, and give the eager call's bits. The
 * net's own buffers may be made inside a capture (relaxed capture mode;
 * they are not the graph's). */
int ssae_api_net_forward_cuda(ssae_api_net *net, const float *params_dev, const float *x_dev,
                              size_t n, float *y_dev, void *stream, ssae_err *err);
/* The same forward from the parameters in nparts pieces, 1 to 16 (device
 * arrays of counts[i] floats in the flat vector's order, together its
 * length: a module's parameter tensors where they lie), gathered on the
 * device by the kernel that compares them with the last forward's: no
 * flat vector for the caller to make, and for the default dimensions
 * three kernels a call (gather and compare, fold when changed, forward)
 * where a flat vector costs the caller a concatenation too. */
int ssae_api_net_forward_cuda_parts(ssae_api_net *net, const float *const *parts_dev,
                                    const size_t *counts, size_t nparts, const float *x_dev,
                                    size_t n, float *y_dev, void *stream, ssae_err *err);
/* dparams_dev (the flat vector's length) and dx_dev (n*F*M, or NULL) for
 * the upstream gradient dy_dev (n*F*M floats) of the reconstruction, as
 * ssae_api_net_backward. */
int ssae_api_net_backward_cuda(ssae_api_net *net, const float *params_dev, const float *x_dev,
                               size_t n, const float *dy_dev, float *dparams_dev,
                               float *dx_dev, void *stream, ssae_err *err);
/* The reconstruction loss of n windows and its gradient in one pass (the
 * step `ssae train` takes): *loss_dev (one float of device memory) = the
 * mean over the n*F*M values of (f(x) - x)^2, as PyTorch's
 * mse_loss(f(x), x), and dparams_dev (the flat vector's length) = its
 * gradient with x taken as a constant; no reconstruction is written and
 * no upstream gradient read. The same kernels and accuracy as
 * ssae_api_net_backward_cuda. n 0: *loss_dev NaN, dparams_dev zeroed. */
int ssae_api_net_loss_cuda(ssae_api_net *net, const float *params_dev, const float *x_dev,
                           size_t n, float *loss_dev, float *dparams_dev, void *stream,
                           ssae_err *err);
/* Test hook: the input device pointer the last *_cuda call that ran on the
 * device read (x_dev), NULL before any. */
const void *ssae_api_last_device_input(void);
#endif

#ifdef __cplusplus
}
#endif
#endif
