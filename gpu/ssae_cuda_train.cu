/* CUDA training backend (see ssae_cuda_train.h); the kernels are in
 * ssae_cuda_train_kernels.cuh.
 *
 * Per Adam step these launches:
 *  - k_vjp_tc (ssae_cuda_vjp_tc.cuh) for the default dimensions on sm_80+:
 *    groups of 16 windows gathered through the offset table, every product
 *    on the tensor cores in 3xTF32, one partial gradient and sum of squared
 *    errors per block (one block per multiprocessor); or
 *  - k_fwd_bwd (other dimensions, validation scores, SSAE_CUDA_VJP=simt):
 *    each block takes groups of WB windows (gathered straight
 *    from the frames on the device through an offset table), runs the
 *    forward pass keeping every activation in shared memory, then the
 *    backward pass, and writes its own partial gradient (w.r.t. the
 *    normalised basis for global_basis) and its sum of squared errors.
 *    A block that takes several groups adds them in group order, so the
 *    partials depend only on the batch and the grid size, which is a
 *    function of the batch size alone.
 *  - k_part_sum: sums the partials in double in a fixed order (four
 *    threads a parameter); after k_vjp_tc, k_decoder_grad takes the
 *    blocks' summed gradient of the folded decoder to the basis and Wd;
 *  - k_update: one block per basis row takes the gradient through
 *    B = G/max(|G|, 1e-12) (as the CPU does, in double), applies Adam, and
 *    derives the next step's normalised basis and transposed weights (so
 *    the products read coalesced rows).
 * Everything is a fixed-order sum: no atomics, the same bits on every run.
 *
 * The host queues the steps of an epoch without waiting, at most kInflight
 * ahead of the last step whose loss it has read (progress line, Ctrl-C and
 * the divergence check see every batch, a few batches late). */
#include "ssae_cuda_train.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_cuda_device_scope.cuh"
#include "ssae_cuda_grad_sums.cuh"
#include "ssae_cuda_train_kernels.cuh"
#include "ssae_cuda_vjp_tc.cuh"

namespace {

/* Most partial gradients per step: a batch of more than kMaxBlocks*WB
 * windows has blocks take several groups. */
const int kMaxBlocks = 256;
const int kInflight = 4;

struct ctrain {
  dims_t d;
  size_t smem;
  int dev;
  int tc;  /* the gradient steps on k_vjp_tc (as ssae_cuda_vjp: default dimensions, sm_80+) */
  int nsm; /* its blocks: the multiprocessors, at most kMaxBlocks */
  cudaStream_t st;
  dev_w w;
  float *d_part;
  double *d_psum; /* the partials' sums (k_part_sum) */
  double *d_psse;
  float *d_gout;
  double *d_sse, *h_sse; /* per step of an epoch */
  size_t sse_cap;
  float *d_x, *d_sc; /* host batches */
  size_t x_cap, sc_cap;
  /* device-resident windows */
  float *d_tdata, *d_vdata;
  int vdata_shared;
  unsigned long long *h_toff, *h_poff, *d_poff, *d_voff;
  size_t n_train, n_val;
  float *d_vsc, *h_vsc;
  ssae_adam_cfg adam;
  long step;
  cudaEvent_t ev[kInflight];
  int broken;
  char broken_msg[SSAE_ERR_LEN];
};

int cfail(ctrain *c, ssae_err *err, const char *what, cudaError_t e) {
  if (c) {
    c->broken = 1;
    snprintf(c->broken_msg, sizeof c->broken_msg, "CUDA: %s: %s", what, cudaGetErrorString(e));
  }
  return ssae_err_set(err, "CUDA: %s: %s", what, cudaGetErrorString(e));
}

#define CK(call, what)                                      \
  do {                                                      \
    cudaError_t e_ = (call);                                \
    if (e_ != cudaSuccess) return cfail(c, err, what, e_);  \
  } while (0)

/* Each callback's start: work that left the device in an unknown state is
 * refused after; the rest runs on the trainer's device whichever thread
 * calls, the caller's own device restored at return (device_scope). */
#define ENTER()                                                  \
  if (c->broken) return ssae_err_set(err, "%s", c->broken_msg); \
  device_scope on_dev_(c->dev);                                  \
  CK(on_dev_.e, "selecting the trainer's device")

void free_sets(ctrain *c) {
  cudaFree(c->d_tdata);
  if (!c->vdata_shared) cudaFree(c->d_vdata);
  cudaFree(c->d_poff);
  cudaFree(c->d_voff);
  cudaFree(c->d_vsc);
  cudaFreeHost(c->h_poff);
  free(c->h_toff);
  free(c->h_vsc);
  c->d_tdata = c->d_vdata = NULL;
  c->d_poff = c->d_voff = NULL;
  c->d_vsc = NULL;
  c->h_poff = c->h_toff = NULL;
  c->h_vsc = NULL;
  c->vdata_shared = 0;
  c->n_train = c->n_val = 0;
}

void destroy(ctrain *c) {
  if (!c) return;
  device_scope on_dev(c->dev);
  free_sets(c);
  for (int i = 0; i < kInflight; i++)
    if (c->ev[i]) cudaEventDestroy(c->ev[i]);
  if (c->st) cudaStreamDestroy(c->st);
  void *dev_ptrs[] = {c->w.p,    c->w.m,    c->w.v,     c->w.bn,   c->w.bnt,
                      c->w.enct, c->w.bnwt, c->w.dect,  c->w.gnorm, c->d_part,
                      c->d_psum, c->d_psse, c->d_gout,  c->d_sse,  c->d_x,
                      c->d_sc};
  for (size_t i = 0; i < sizeof dev_ptrs / sizeof *dev_ptrs; i++) cudaFree(dev_ptrs[i]);
  cudaFreeHost(c->h_sse);
  free(c);
}

int launch_update(ctrain *c, int upd, int nparts, double *sse_out, const adam_args &a,
                  ssae_err *err) {
  if (upd != UPD_PREP) {
    const char *what = "";
    CK(queue_part_sums(c->d, c->tc, c->d_part, nparts, c->d_psum, c->w.p, c->w.bn, c->st, &what),
       what);
  }
  k_update<<<grid_update(c->d), kThreads, sizeof(double) * (size_t)c->d.C, c->st>>>(
      c->d, c->w, c->d_psum, nparts, c->d_psse, sse_out, upd, a, c->d_gout, NULL);
  CK(cudaGetLastError(), "launching the update kernel");
  return 0;
}

unsigned grid_for(const ctrain *c, size_t n, int grad) {
  if (grad && c->tc) {
    const size_t groups = (n + kTcWin - 1) / kTcWin;
    return (unsigned)(groups < (size_t)c->nsm ? groups : (size_t)c->nsm);
  }
  const size_t groups = (n + c->d.wb - 1) / c->d.wb;
  const size_t cap = grad ? (size_t)kMaxBlocks : (size_t)65535;
  return (unsigned)(groups < cap ? groups : cap);
}

/* Queues forward (+ backward) of n windows. */
int launch_fwd(ctrain *c, const float *data, const unsigned long long *offs, size_t n,
               double scale, int mode, float *scores, ssae_err *err) {
  const float s2 = 2.0f * (float)scale;
  if (mode == MODE_GRAD && c->tc) {
    k_vjp_tc<<<grid_for(c, n, 1), kTcThreads, tc_smem_bytes(), c->st>>>(
        c->d, c->w, data, offs, n, TC_MSE, s2, NULL, NULL, NULL, c->d_part, c->d_psse);
    CK(cudaGetLastError(), "launching the training kernel");
    return 0;
  }
  k_fwd_bwd<<<grid_for(c, n, mode == MODE_GRAD), kFwdThreads, c->smem, c->st>>>(
      c->d, c->w, data, offs, n, s2, mode, c->d_part, c->d_psse, scores);
  CK(cudaGetLastError(), "launching the training kernel");
  return 0;
}

adam_args adam_for(const ssae_adam_cfg *cfg, long step) {
  adam_args a;
  a.b1 = (float)cfg->beta1;
  a.b2 = (float)cfg->beta2;
  a.one_b1 = (float)(1.0 - cfg->beta1);
  a.one_b2 = (float)(1.0 - cfg->beta2);
  a.wd = (float)cfg->weight_decay;
  const double bc1 = 1.0 - pow(cfg->beta1, (double)step);
  const double bc2 = 1.0 - pow(cfg->beta2, (double)step);
  a.neg_step = (float)(-(cfg->lr / bc1));
  a.bc2_sqrt = (float)sqrt(bc2);
  a.eps = (float)cfg->eps;
  return a;
}

int grow(ctrain *c, float **p, size_t *cap, size_t want, ssae_err *err) {
  if (want <= *cap) return 0;
  cudaFree(*p);
  *p = NULL;
  *cap = 0;
  CK(cudaMalloc(p, want * sizeof(float)), "allocating a batch buffer");
  *cap = want;
  return 0;
}

/* ---- backend callbacks ------------------------------------------------------ */

int cb_set_params(void *ctx, const float *params, ssae_err *err) {
  ctrain *c = (ctrain *)ctx;
  ENTER();
  for (int i = 0; i < c->d.P; i++)
    if (!isfinite(params[i]))
      return ssae_err_set(err, "parameter %d is not finite (training diverged; try a smaller "
                          "--lr)", i);
  CK(cudaMemcpyAsync(c->w.p, params, sizeof(float) * c->d.P, cudaMemcpyHostToDevice, c->st),
     "uploading the parameters");
  adam_args a;
  memset(&a, 0, sizeof a);
  if (launch_update(c, UPD_PREP, 0, NULL, a, err)) return -1;
  CK(cudaStreamSynchronize(c->st), "preparing the weights");
  return 0;
}

int cb_grad(void *ctx, const float *x, size_t n, double scale, double *sse, float *grad,
            ssae_err *err) {
  ctrain *c = (ctrain *)ctx;
  ENTER();
  if (n == 0) return ssae_err_set(err, "empty batch");
  const size_t FM = (size_t)c->d.F * c->d.M;
  if (grow(c, &c->d_x, &c->x_cap, n * FM, err)) return -1;
  CK(cudaMemcpyAsync(c->d_x, x, sizeof(float) * n * FM, cudaMemcpyHostToDevice, c->st),
     "copying windows to the device");
  if (launch_fwd(c, c->d_x, NULL, n, scale, MODE_GRAD, NULL, err)) return -1;
  adam_args a;
  memset(&a, 0, sizeof a);
  if (launch_update(c, UPD_GRAD_OUT, (int)grid_for(c, n, 1), c->d_sse, a, err)) return -1;
  CK(cudaMemcpyAsync(grad, c->d_gout, sizeof(float) * c->d.P, cudaMemcpyDeviceToHost, c->st),
     "copying the gradient");
  CK(cudaMemcpyAsync(sse, c->d_sse, sizeof(double), cudaMemcpyDeviceToHost, c->st),
     "copying the loss");
  CK(cudaStreamSynchronize(c->st), "computing the gradient");
  return 0;
}

int cb_scores(void *ctx, const float *x, size_t n, float *scores, ssae_err *err) {
  ctrain *c = (ctrain *)ctx;
  ENTER();
  if (n == 0) return 0;
  const size_t FM = (size_t)c->d.F * c->d.M;
  if (grow(c, &c->d_x, &c->x_cap, n * FM, err) || grow(c, &c->d_sc, &c->sc_cap, n, err))
    return -1;
  CK(cudaMemcpyAsync(c->d_x, x, sizeof(float) * n * FM, cudaMemcpyHostToDevice, c->st),
     "copying windows to the device");
  if (launch_fwd(c, c->d_x, NULL, n, 0, MODE_SCORES, c->d_sc, err)) return -1;
  CK(cudaMemcpyAsync(scores, c->d_sc, sizeof(float) * n, cudaMemcpyDeviceToHost, c->st),
     "copying scores");
  CK(cudaStreamSynchronize(c->st), "scoring");
  return 0;
}

/* Offsets of a set's windows and the extent of data they use. */
unsigned long long *set_offsets(const ssae_window_set *s, size_t fm, size_t *extent) {
  unsigned long long *o = (unsigned long long *)malloc((s->n ? s->n : 1) * sizeof *o);
  if (!o) return NULL;
  size_t ext = 0;
  for (size_t i = 0; i < s->n; i++) {
    const size_t v = s->off ? s->off[i] : i * fm;
    o[i] = v;
    if (v + fm > ext) ext = v + fm;
  }
  *extent = ext;
  return o;
}

int cb_begin(void *ctx, const ssae_window_set *train, const ssae_window_set *val,
             const float *params, const ssae_adam_cfg *adam, ssae_err *err) {
  ctrain *c = (ctrain *)ctx;
  ENTER();
  free_sets(c);
  const size_t fm = (size_t)c->d.F * c->d.M;
  size_t text = 0, vext = 0;
  c->h_toff = set_offsets(train, fm, &text);
  unsigned long long *voff = NULL;
  const size_t nv = val ? val->n : 0;
  if (nv) voff = set_offsets(val, fm, &vext);
  if (!c->h_toff || (nv && !voff)) {
    free(voff);
    return ssae_err_set(err, "out of memory for the window offsets");
  }
  c->n_train = train->n;
  c->n_val = nv;
  int rc = -1;
  {
    const int share = nv && val->data == train->data;
    const size_t tbytes = sizeof(float) * (share && vext > text ? vext : text);
#define CKB(call, what)                                  \
  do {                                                   \
    cudaError_t e_ = (call);                             \
    if (e_ != cudaSuccess) {                             \
      cfail(c, err, what, e_);                           \
      goto out;                                          \
    }                                                    \
  } while (0)
    CKB(cudaMalloc(&c->d_tdata, tbytes ? tbytes : 4), "allocating the training windows");
    CKB(cudaMemcpy(c->d_tdata, train->data, tbytes, cudaMemcpyHostToDevice),
        "uploading the training windows");
    if (share) {
      c->d_vdata = c->d_tdata;
      c->vdata_shared = 1;
    } else if (nv) {
      CKB(cudaMalloc(&c->d_vdata, sizeof(float) * vext), "allocating the validation windows");
      CKB(cudaMemcpy(c->d_vdata, val->data, sizeof(float) * vext, cudaMemcpyHostToDevice),
          "uploading the validation windows");
    }
    if (nv) {
      CKB(cudaMalloc(&c->d_voff, sizeof(*voff) * nv), "allocating validation offsets");
      CKB(cudaMemcpy(c->d_voff, voff, sizeof(*voff) * nv, cudaMemcpyHostToDevice),
          "uploading validation offsets");
      CKB(cudaMalloc(&c->d_vsc, sizeof(float) * nv), "allocating validation scores");
      c->h_vsc = (float *)malloc(sizeof(float) * nv);
      if (!c->h_vsc) {
        ssae_err_set(err, "out of memory for the validation scores");
        goto out;
      }
    }
    /* from pageable memory the copies above may still be in flight on the
     * legacy stream, which c->st (non-blocking) does not wait for */
    CKB(cudaStreamSynchronize(0), "uploading the windows");
    CKB(cudaMalloc(&c->d_poff, sizeof(unsigned long long) * (train->n ? train->n : 1)),
        "allocating the shuffled offsets");
    CKB(cudaMallocHost(&c->h_poff, sizeof(unsigned long long) * (train->n ? train->n : 1)),
        "allocating pinned memory");
    CKB(cudaMemsetAsync(c->w.m, 0, sizeof(float) * c->d.P, c->st), "clearing Adam");
    CKB(cudaMemsetAsync(c->w.v, 0, sizeof(float) * c->d.P, c->st), "clearing Adam");
#undef CKB
    c->adam = *adam;
    c->step = 0;
    rc = cb_set_params(ctx, params, err);
  }
out:
  free(voff);
  return rc;
}

int cb_epoch(void *ctx, const size_t *perm, size_t batch, volatile sig_atomic_t *stop,
             ssae_train_batch_fn done, void *user, ssae_err *err) {
  ctrain *c = (ctrain *)ctx;
  ENTER();
  const size_t n = c->n_train;
  if (n == 0 || batch == 0) return ssae_err_set(err, "nothing to train on");
  const size_t fm = (size_t)c->d.F * c->d.M;
  for (size_t i = 0; i < n; i++) c->h_poff[i] = c->h_toff[perm[i]];
  CK(cudaMemcpyAsync(c->d_poff, c->h_poff, sizeof(unsigned long long) * n,
                     cudaMemcpyHostToDevice, c->st),
     "uploading the shuffled order");
  const size_t steps = (n + batch - 1) / batch;
  if (steps > c->sse_cap) {
    cudaFree(c->d_sse);
    cudaFreeHost(c->h_sse);
    c->d_sse = c->h_sse = NULL;
    c->sse_cap = 0;
    CK(cudaMalloc(&c->d_sse, sizeof(double) * steps), "allocating the loss buffer");
    CK(cudaMallocHost(&c->h_sse, sizeof(double) * steps), "allocating pinned memory");
    c->sse_cap = steps;
  }
  size_t reported = 0, queued = 0;
  int rc = 0;
  for (size_t s = 0; s < steps && rc == 0; s++) {
    const size_t b0 = s * batch, nb = n - b0 < batch ? n - b0 : batch;
    const double scale = 1.0 / ((double)nb * (double)fm);
    if (launch_fwd(c, c->d_tdata, c->d_poff + b0, nb, scale, MODE_GRAD, NULL, err)) return -1;
    const adam_args a = adam_for(&c->adam, ++c->step);
    if (launch_update(c, UPD_ADAM, (int)grid_for(c, nb, 1), c->d_sse + s, a, err)) return -1;
    CK(cudaMemcpyAsync(c->h_sse + s, c->d_sse + s, sizeof(double), cudaMemcpyDeviceToHost,
                       c->st),
       "copying the loss");
    CK(cudaEventRecord(c->ev[s % kInflight], c->st), "recording an event");
    queued = s + 1;
    while (queued - reported >= (size_t)kInflight && rc == 0) {
      CK(cudaEventSynchronize(c->ev[reported % kInflight]), "running a training step");
      const size_t r0 = reported * batch;
      rc = done(user, c->h_sse[reported], n - r0 < batch ? n - r0 : batch, err);
      reported++;
    }
    if (stop && *stop) break;
  }
  CK(cudaStreamSynchronize(c->st), "running the training steps");
  while (reported < queued && rc == 0) {
    const size_t r0 = reported * batch;
    rc = done(user, c->h_sse[reported], n - r0 < batch ? n - r0 : batch, err);
    reported++;
  }
  return rc ? -1 : 0;
}

int cb_val_loss(void *ctx, double *loss, ssae_err *err) {
  ctrain *c = (ctrain *)ctx;
  ENTER();
  if (c->n_val == 0) {
    *loss = NAN;
    return 0;
  }
  if (launch_fwd(c, c->d_vdata, c->d_voff, c->n_val, 0, MODE_SCORES, c->d_vsc, err)) return -1;
  CK(cudaMemcpyAsync(c->h_vsc, c->d_vsc, sizeof(float) * c->n_val, cudaMemcpyDeviceToHost,
                     c->st),
     "copying validation scores");
  CK(cudaStreamSynchronize(c->st), "validating");
  double s = 0;
  for (size_t i = 0; i < c->n_val; i++) s += c->h_vsc[i];
  *loss = s / (double)c->n_val;
  return 0;
}

int cb_get_params(void *ctx, float *params, ssae_err *err) {
  ctrain *c = (ctrain *)ctx;
  ENTER();
  CK(cudaMemcpyAsync(params, c->w.p, sizeof(float) * c->d.P, cudaMemcpyDeviceToHost, c->st),
     "copying the parameters");
  CK(cudaStreamSynchronize(c->st), "copying the parameters");
  return 0;
}

void cb_free(void *ctx) { destroy((ctrain *)ctx); }

const ssae_train_dev_ops dev_ops = {cb_begin, cb_epoch, cb_val_loss, cb_get_params};

ctrain *create(const ssae_dims *dm, ssae_err *err) {
  ctrain *c = NULL;
  if (dm->n_mels < 1 || dm->frames < 1 || dm->latent < 1 || dm->slice_latent < 1 ||
      (double)dm->frames * dm->slice_latent * dm->latent > 1e8 ||
      (double)dm->n_mels * dm->slice_latent > 1e8) {
    ssae_err_set(err, "CUDA: model dimensions out of range for training");
    return NULL;
  }
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev < 1) {
    cudaGetLastError();
    ssae_err_set(err, "CUDA: no device%s%s", e != cudaSuccess ? ": " : "",
                 e != cudaSuccess ? cudaGetErrorString(e) : "");
    return NULL;
  }
  c = (ctrain *)calloc(1, sizeof *c);
  if (!c) {
    ssae_err_set(err, "CUDA: out of memory");
    return NULL;
  }
  dims_t &d = c->d;
  d = make_dims(dm);

#define CKN(call, what)          \
  do {                           \
    cudaError_t e_ = (call);     \
    if (e_ != cudaSuccess) {     \
      cfail(c, err, what, e_);   \
      destroy(c);                \
      return NULL;               \
    }                            \
  } while (0)
  /* The device current on this thread (0 unless the caller selected
   * another: ssae train --device), where the trainer lives; its calls
   * select it (ENTER). */
  CKN(cudaGetDevice(&c->dev), "reading the current device");
  cudaDeviceProp prop;
  CKN(cudaGetDeviceProperties(&prop, c->dev), "reading device properties");
  /* Windows per group: 4 at most (SSAE_CUDA_TRAIN_WB overrides, for
   * benchmarks). */
  int want = 4;
  const char *wbe = getenv("SSAE_CUDA_TRAIN_WB");
  if (wbe && atoi(wbe) >= 1 && atoi(wbe) <= 32) want = atoi(wbe);
  c->smem = pick_group(d, want, prop.sharedMemPerBlockOptin);
  if (d.wb == 0 || sizeof(double) * (size_t)d.C > 48 * 1024) {
    ssae_err_set(err, "CUDA: model dimensions too large for training in the GPU's shared "
                 "memory (use --backend cpu)");
    destroy(c);
    return NULL;
  }
  CKN(cudaFuncSetAttribute(k_fwd_bwd, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           (int)c->smem),
      "raising the kernel's shared-memory limit");
  {
    /* the gradient steps on the tensor cores where the VJP's are
     * (ssae_cuda_vjp.h; SSAE_CUDA_VJP=simt keeps k_fwd_bwd); validation
     * scores stay on k_fwd_bwd */
    const char *pick = getenv("SSAE_CUDA_VJP");
    c->nsm = prop.multiProcessorCount < kMaxBlocks ? prop.multiProcessorCount : kMaxBlocks;
    c->tc = d.M == 64 && d.S == 64 && d.L == 32 && d.F == 5 && prop.major >= 8 &&
            tc_smem_bytes() <= prop.sharedMemPerBlockOptin && !(pick && !strcmp(pick, "simt"));
    if (c->tc)
      CKN(cudaFuncSetAttribute(k_vjp_tc, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)tc_smem_bytes()),
          "raising the kernel's shared-memory limit");
  }
  const size_t P = (size_t)d.P, LC = (size_t)d.L * d.C;
  CKN(cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking), "creating a stream");
  for (int i = 0; i < kInflight; i++)
    CKN(cudaEventCreateWithFlags(&c->ev[i], cudaEventDisableTiming), "creating an event");
  CKN(cudaMalloc(&c->w.p, sizeof(float) * P), "allocating parameters");
  CKN(cudaMalloc(&c->w.m, sizeof(float) * P), "allocating Adam state");
  CKN(cudaMalloc(&c->w.v, sizeof(float) * P), "allocating Adam state");
  CKN(cudaMalloc(&c->w.bn, sizeof(float) * LC), "allocating the basis");
  CKN(cudaMalloc(&c->w.bnt, sizeof(float) * LC), "allocating the basis");
  CKN(cudaMalloc(&c->w.enct, sizeof(float) * d.M * d.S), "allocating weights");
  CKN(cudaMalloc(&c->w.bnwt, sizeof(float) * d.L * d.L), "allocating weights");
  CKN(cudaMalloc(&c->w.dect, sizeof(float) * d.M * d.S), "allocating weights");
  CKN(cudaMalloc(&c->w.gnorm, sizeof(double) * d.L), "allocating the basis norms");
  /* a partial gradient: the parameters', and k_vjp_tc's dD^T after them */
  const size_t PX = (size_t)part_floats(c->d, c->tc);
  CKN(cudaMalloc(&c->d_part, sizeof(float) * PX * kMaxBlocks), "allocating partial gradients");
  CKN(cudaMalloc(&c->d_psum, sizeof(double) * PX), "allocating the gradient sum");
  CKN(cudaMalloc(&c->d_psse, sizeof(double) * kMaxBlocks), "allocating partial losses");
  CKN(cudaMalloc(&c->d_gout, sizeof(float) * P), "allocating the gradient");
  CKN(cudaMalloc(&c->d_sse, sizeof(double)), "allocating the loss");
  CKN(cudaMallocHost(&c->h_sse, sizeof(double)), "allocating pinned memory");
  c->sse_cap = 1;
  CKN(cudaMemset(c->w.m, 0, sizeof(float) * P), "clearing Adam");
  CKN(cudaMemset(c->w.v, 0, sizeof(float) * P), "clearing Adam");
  /* on the legacy stream, which c->st (non-blocking) does not wait for */
  CKN(cudaStreamSynchronize(0), "clearing Adam");
#undef CKN
  return c;
}

}  // namespace

extern "C" int ssae_cuda_train_available(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n > 0;
}

extern "C" int ssae_train_backend_cuda(ssae_train_backend *be, const ssae_dims *d,
                                       ssae_err *err) {
  memset(be, 0, sizeof *be);
  ctrain *c = create(d, err);
  if (!c) return -1;
  be->name = "cuda";
  be->ctx = c;
  be->set_params = cb_set_params;
  be->grad = cb_grad;
  be->scores = cb_scores;
  be->free = cb_free;
  be->dev = &dev_ops;
  return 0;
}

extern "C" int ssae_cuda_adam_steps(const ssae_adam_cfg *cfg, size_t n, float *params,
                                    const float *grads, int steps, ssae_err *err) {
  ctrain *c = NULL; /* for CK: no object to mark broken */
  float *dp = NULL, *dm = NULL, *dv = NULL, *dg = NULL;
  int rc = -1;
  cudaError_t e = cudaSuccess;
  const size_t bytes = sizeof(float) * (n ? n : 1);
  const char *what = "allocating";
  if ((e = cudaMalloc(&dp, bytes)) || (e = cudaMalloc(&dm, bytes)) ||
      (e = cudaMalloc(&dv, bytes)) || (e = cudaMalloc(&dg, bytes)))
    goto out;
  what = "copying";
  if ((e = cudaMemcpy(dp, params, sizeof(float) * n, cudaMemcpyHostToDevice)) ||
      (e = cudaMemset(dm, 0, bytes)) || (e = cudaMemset(dv, 0, bytes)))
    goto out;
  for (int s = 0; s < steps; s++) {
    what = "running Adam";
    if ((e = cudaMemcpy(dg, grads + (size_t)s * n, sizeof(float) * n, cudaMemcpyHostToDevice)))
      goto out;
    k_adam_only<<<(unsigned)((n + 255) / 256), 256>>>(adam_for(cfg, s + 1), n, dp, dm, dv, dg);
    if ((e = cudaGetLastError())) goto out;
  }
  what = "copying";
  if ((e = cudaMemcpy(params, dp, sizeof(float) * n, cudaMemcpyDeviceToHost))) goto out;
  rc = 0;
out:
  if (rc) cfail(c, err, what, e);
  cudaFree(dp);
  cudaFree(dm);
  cudaFree(dv);
  cudaFree(dg);
  return rc;
}
