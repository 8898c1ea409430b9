/* Forward and vector-Jacobian product on CUDA tensors (ssae_cuda_vjp.h).
 *
 * Two kernels. k_vjp_tc (ssae_cuda_vjp_tc.cuh): the default dimensions on
 * sm_80+, every product on the tensor cores in 3xTF32. k_vjp, for any
 * dimensions: the trainer's group_fwd and group_bwd
 * (ssae_cuda_train_kernels.cuh, whose k_update it uses too; the header's
 * kernels are file-local, so this file has its own copies) without the
 * loss: the forward writes the reconstruction; the backward starts from the
 * caller's dy instead of 2 (y - x) scale, and also takes the gradient
 * through the first LayerNorm to the input. Per call:
 *   k_update(UPD_PREP)      normalised basis and transposes from params
 *   k_vjp_tc or k_vjp       forward, or forward + backward (one partial
 *                           gradient per block, dx per window)
 *   k_part_sum              partials summed in double in a fixed order
 *   k_decoder_grad          (after k_vjp_tc) the folded decoder's summed
 *                           gradient back to the basis and Wd
 *   k_update(UPD_GRAD_OUT)  through the basis normalisation, to dparams
 *                           (and the fused loss's sum)
 * all on the caller's stream; the forward on the inference kernels instead
 * compares the parameters (the flat vector, or the caller's tensors where
 * they lie) with the last call's (k_params_gather) and folds them
 * (k_fold) only when they changed. The fused reconstruction loss runs the
 * trainer's own step instead (k_vjp_tc or k_fwd_bwd on the squared error,
 * each block's sum of squares beside its partial gradient), then the same
 * sums, k_update(UPD_GRAD_OUT) adding the blocks' squared errors too. */
#include "ssae_cuda_vjp.h"

#include "ssae_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_cuda_device_scope.cuh"
#include "ssae_cuda_small_batch.cuh"
#include "ssae_cuda_grad_sums.cuh"
#include "ssae_cuda_train_kernels.cuh"
#include "ssae_cuda_vjp_tc.cuh"
#include "ssae_cuda_warp_3xtf32.cuh"

namespace {

/* Most partial gradients per backward (as the trainer). */
const int kVjpMaxBlocks = 256;

/* Batches of at least this many windows run in groups of up to
 * kLargeGroup windows (those of fewer in the trainer's groups of 4): at
 * 8,192 and 65,536 windows groups of 16 took the forward and backward
 * 1.45-1.5x less time than groups of 4, at 512 1.3-1.9x more (H100; fewer
 * groups than SMs). */
const size_t kLargeBatch = 4096;
const int kLargeGroup = 16;

/* Forwards of up to this many windows run small_batch (one window a block,
 * latency-bound), as the kernel table chooses for inference: at one window
 * the inference kernel's single 16-window tile on one warp took longer. */
const size_t kSmallBatch = 1024;

/* Forward (dy NULL: y_out gets the reconstruction) or forward + backward
 * (dy: partial gradient of block b at part + b*P, the input gradient at dx
 * when not NULL) of n windows at x (F*M floats each). */
__global__ void __launch_bounds__(kFwdThreads, 1)
    k_vjp(dims_t d, dev_w w, const float *__restrict__ x, size_t n,
          const float *__restrict__ dyg, float *__restrict__ y_out, float *__restrict__ dx,
          float *__restrict__ part) {
  extern __shared__ double smem_d[];
  const grp_t sh = make_grp((float *)smem_d, make_lay(d));
  float *y = sh.y, *rr = sh.rr;
  const int tid = threadIdx.x, T = blockDim.x;
  const int M = d.M, F = d.F, S = d.S, FM = F * M;
  const float *P = w.p;
  const size_t ngroups = (n + d.wb - 1) / d.wb;
  float *pb = dyg ? part + (size_t)blockIdx.x * d.P : NULL;
  bool first = true;

  for (size_t g = blockIdx.x; g < ngroups; g += gridDim.x) {
    const size_t base = g * d.wb;
    const int nw = (int)(n - base < (size_t)d.wb ? n - base : (size_t)d.wb);
    const int R = nw * F;
    const float *xg = x + base * (size_t)FM;
    for (int i = tid; i < nw * FM; i += T) sh.xs[i] = xg[i];
    __syncthreads();
    group_fwd<true>(d, w, sh, nw);
    if (!dyg) {
      float *yg = y_out + base * (size_t)FM;
      for (int i = tid; i < R * M; i += T) {
        const int r = i / M, m = i - r * M;
        float acc = P[d.off[10] + m];
        const float *rrow = rr + r * S;
        for (int k = 0; k < S; k++) acc = fmaf(rrow[k], w.dect[k * M + m], acc);
        yg[i] = acc;
      }
      __syncthreads();
      continue;
    }
    /* the upstream gradient of this group's reconstructions */
    {
      const float *dg = dyg + base * (size_t)FM;
      for (int i = tid; i < R * M; i += T) y[i] = dg[i];
    }
    __syncthreads();
    group_bwd(d, w, sh, nw, pb, first, dx ? dx + base * (size_t)FM : NULL);
    __syncthreads();
    first = false;
  }
}

/* The inference kernels' folded weights from the caller's parameters and
 * the normalised basis: one thread per folded value and its row-major copy
 * (ssae_fold_one, ssae_fold_row_copy: as the host folds a loaded model);
 * none while *gate is 0. */
__global__ void k_fold(dims_t d, const float *__restrict__ P, const float *__restrict__ bn,
                       ssae_cuda_layout lo, float *__restrict__ w, const int *__restrict__ gate) {
  if (!*gate) return;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= ssae_fold_count(lo)) return;
  ssae_fold_one(lo, d.off, P, bn, i, w);
  ssae_fold_row_copy(lo, i, w);
}

/* Parameters compared with the last call's: one block (the folding kernels
 * after it read its flag), a thread's loads issued several at a time: one
 * at a time they were a trip to memory each. */
const int kSeenThreads = 1024;
__device__ __forceinline__ bool bits_differ(float4 a, float4 b) {
  return (__float_as_uint(a.x) ^ __float_as_uint(b.x)) |
         (__float_as_uint(a.y) ^ __float_as_uint(b.y)) |
         (__float_as_uint(a.z) ^ __float_as_uint(b.z)) |
         (__float_as_uint(a.w) ^ __float_as_uint(b.w));
}

/* The parameters in pieces (ssae_cuda_vjp_forward_parts; the flat vector
 * is one piece): piece q's floats at p[q], flat indices [start[q],
 * start[q + 1]), q < n. */
struct param_parts {
  const float *p[SSAE_CUDA_VJP_MAX_PARTS];
  int start[SSAE_CUDA_VJP_MAX_PARTS + 1];
  int n;
  int vec; /* every piece 16-byte aligned, starts and counts multiples of 4 */
};

/* The piece holding flat index i (of elements, or of float4s with UNIT 4),
 * as a pointer at flat index 0 of it: an unrolled select over the kernel's
 * parameters (an indexed load of them would copy them to local memory). */
template <int UNIT, class T>
__device__ __forceinline__ const T *part_base(const param_parts &pp, int i) {
  const T *b = reinterpret_cast<const T *>(pp.p[0]);
#pragma unroll
  for (int q = 1; q < SSAE_CUDA_VJP_MAX_PARTS; q++)
    if (q < pp.n && UNIT * i >= pp.start[q])
      b = reinterpret_cast<const T *>(pp.p[q]) - pp.start[q] / UNIT;
  return b;
}

/* seen (the flat vector's d.P floats) = the pieces' bits, U loads of them
 * in flight a thread (one at a time they were a trip to memory each); the
 * return value: whether any differed. */
template <int UNIT, class T>
__device__ __forceinline__ int gather_seen(const param_parts &pp, float *seen, int total) {
  const int U = 5;
  const int n = total / UNIT;
  T *s = reinterpret_cast<T *>(seen);
  int any = 0;
  for (int base = 0; base < n; base += U * kSeenThreads) {
    T a[U], b[U];
#pragma unroll
    for (int k = 0; k < U; k++) {
      const int i = base + k * kSeenThreads + threadIdx.x;
      if (i < n) {
        a[k] = part_base<UNIT, T>(pp, i)[i];
        b[k] = s[i];
      }
    }
#pragma unroll
    for (int k = 0; k < U; k++) {
      const int i = base + k * kSeenThreads + threadIdx.x;
      bool diff;
      if constexpr (UNIT == 4) diff = bits_differ(a[k], b[k]);
      else diff = __float_as_uint(a[k]) != __float_as_uint(b[k]);
      if (i < n && diff) {
        s[i] = a[k];
        any = 1;
      }
    }
  }
  return any;
}

/* *changed = 1 when the pieces differ, bit for bit, from seen (or force),
 * else 0; seen takes their values. When they changed, also what the fold
 * reads besides: the normalised basis into bn (as k_update's UPD_PREP, a
 * warp a row; bn NULL: not). */
__global__ void __launch_bounds__(kSeenThreads)
    k_params_gather(param_parts pp, dims_t d, float *__restrict__ seen, int force,
                    int *__restrict__ changed, float *__restrict__ bn) {
  int any = pp.vec ? gather_seen<4, float4>(pp, seen, d.P) : gather_seen<1, float>(pp, seen, d.P);
  any = __syncthreads_or(any) || force; /* also orders seen's writes before the reads below */
  if (threadIdx.x == 0) *changed = any;
  if (!any || !bn) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int l = warp; l < d.L; l += kSeenThreads / 32) {
    const float *G = seen + d.off[4] + (size_t)l * d.C;
    double loc = 0;
    for (int c = lane; c < d.C; c += 32) loc += (double)G[c] * G[c];
    const double nrm = sqrt(warp_sum(loc));
    const double div = nrm > kNormEps ? nrm : kNormEps;
    for (int c = lane; c < d.C; c += 32) bn[(size_t)l * d.C + c] = (float)(G[c] / div);
  }
}

}  // namespace

struct ssae_cuda_vjp {
  dims_t d, d_large; /* the same but for windows per group (wb) */
  size_t smem, smem_large;
  int dev;
  int tc;      /* k_vjp_tc serves (default dimensions, sm_80+, its shared memory) */
  int nsm;     /* the device's multiprocessors: k_vjp_tc's blocks */
  /* The forward alone on the inference kernel (warp_3xtf32) where tc: its
   * layout, folded weights and a score buffer it also writes */
  ssae_cuda_layout lo;
  ssae_tc_layout tl;
  int fwd_inf; /* the inference kernel fits */
  float *wf, *scores;
  /* The parameters wf was folded from (seen) and whether this call's
   * differ (changed, on the device): an evaluation loop folds once, and a
   * change the caller made without a trace (through .data, a CUDA graph's
   * replay) is folded at the next call. seen_ok 0: fold whatever seen
   * holds (none yet, or a call failed after seen was written). */
  float *seen;
  int *changed;
  int seen_ok;
  size_t scores_cap;
  dev_w w;     /* w.p is set per call to the caller's parameters */
  float *part; /* kVjpMaxBlocks partial gradients */
  double *psum; /* their sum (k_part_sum) */
  double *part_sse; /* and their sums of squared errors (the fused loss) */
  cudaEvent_t done; /* the last call's work */
  int have_done;
  int capturing; /* this call is being captured into a CUDA graph (graph_call) */
};

namespace {

#define CKV(call, what)                                                          \
  do {                                                                           \
    cudaError_t e_ = (call);                                                     \
    if (e_ != cudaSuccess)                                                       \
      return ssae_err_set(err, "CUDA: %s: %s", what, cudaGetErrorString(e_));    \
  } while (0)

/* The flat vector of P floats as one piece. */
param_parts one_piece(const float *params, int P) {
  param_parts pp;
  memset(&pp, 0, sizeof pp);
  pp.p[0] = params;
  pp.start[1] = P;
  pp.n = 1;
  pp.vec = (uintptr_t)params % 16 == 0 && P % 4 == 0;
  return pp;
}

/* Queues on s: wait for the previous call's work, then the derived weights
 * of params. */
int begin(ssae_cuda_vjp *v, const float *params, cudaStream_t s, ssae_err *err,
          const int *gate = NULL) {
  if (v->have_done) CKV(cudaStreamWaitEvent(s, v->done, 0), "ordering after the last call");
  v->w.p = (float *)params; /* read only: UPD_PREP and UPD_GRAD_OUT write no parameter */
  if (gate) {
    const int force = !v->seen_ok;
    v->seen_ok = 0; /* seen is being written: until the caller's fold is queued */
    k_params_gather<<<1, kSeenThreads, 0, s>>>(one_piece(params, v->d.P), v->d, v->seen, force,
                                                v->changed, NULL);
    CKV(cudaGetLastError(), "launching the parameters' comparison");
  }
  adam_args a;
  memset(&a, 0, sizeof a);
  k_update<<<grid_update(v->d), kThreads, sizeof(double) * (size_t)v->d.C, s>>>(
      v->d, v->w, NULL, 0, NULL, NULL, UPD_PREP, a, NULL, gate);
  CKV(cudaGetLastError(), "launching the weight preparation");
  return 0;
}

int end(ssae_cuda_vjp *v, cudaStream_t s, ssae_err *err) {
  if (v->capturing) return 0;
  CKV(cudaEventRecord(v->done, s), "recording an event");
  v->have_done = 1;
  return 0;
}

/* The group size for a batch of n windows (kLargeBatch). */
const dims_t &dims_for(const ssae_cuda_vjp *v, size_t n, size_t *smem) {
  const int large = n >= kLargeBatch && v->d_large.wb > v->d.wb;
  *smem = large ? v->smem_large : v->smem;
  return large ? v->d_large : v->d;
}

/* Whether a forward of n windows at x into y runs the inference kernels
 * (their 16-byte loads and stores). */
bool inference_fits(const ssae_cuda_vjp *v, const float *x, size_t n, const float *y) {
  return n && v->fwd_inf && (uintptr_t)x % 16 == 0 && (uintptr_t)y % 16 == 0;
}

/* Queues the inference kernels' forward on the folded weights wf (their
 * scores to scratch). */
int infer(ssae_cuda_vjp *v, const float *x, size_t n, float *y, cudaStream_t s, ssae_err *err) {
  if (v->scores_cap < n) {
    cudaFree(v->scores);
    v->scores = NULL;
    v->scores_cap = 0;
    CKV(cudaMalloc(&v->scores, sizeof(float) * n), "allocating a score buffer");
    v->scores_cap = n;
  }
  if (n <= kSmallBatch) {
    const size_t most = (size_t)v->nsm * 2;
    ssae_small_batch_kernel<<<(unsigned)(n < most ? n : most), SSAE_SMALL_THREADS, 0, s>>>(
        v->wf, v->lo, x, n, v->scores, y);
  } else {
    const size_t tiles = (n + SSAE_WARP_TW - 1) / SSAE_WARP_TW;
    const size_t blocks = (tiles + SSAE_WARP_NW - 1) / SSAE_WARP_NW;
    const unsigned grid = (unsigned)(blocks < (size_t)v->nsm ? blocks : (size_t)v->nsm);
    ssae_warp_3xtf32_kernel<5><<<grid, 32 * SSAE_WARP_NW, ssae_tc_smem(&v->lo), s>>>(
        v->wf, v->lo, v->tl, x, n, v->scores, y);
  }
  CKV(cudaGetLastError(), "launching the forward kernel");
  return 0;
}

/* Queues the fold of the parameters at P (and the normalised basis) into
 * wf, gated by v->changed. */
int fold(ssae_cuda_vjp *v, const float *P, cudaStream_t s, ssae_err *err) {
  const int nf = ssae_fold_count(v->lo);
  k_fold<<<(unsigned)((nf + kThreads - 1) / kThreads), kThreads, 0, s>>>(v->d, P, v->w.bn, v->lo,
                                                                        v->wf, v->changed);
  CKV(cudaGetLastError(), "launching the weight folding");
  v->seen_ok = 1;
  return 0;
}

int forward(ssae_cuda_vjp *v, const float *params, const float *x, size_t n, float *y,
            cudaStream_t s, ssae_err *err) {
  const bool inf = inference_fits(v, x, n, y);
  /* the inference kernel's weights, folded only when the parameters
   * changed: the basis's normalisation too, which nothing else here then
   * reads (every other call makes its own) */
  if (begin(v, params, s, err, inf ? v->changed : NULL)) return -1;
  if (inf) {
    /* the inference kernel (the same function to fp32 accuracy, 3-4x
     * faster: no block-wide barriers) */
    if (fold(v, v->w.p, s, err) || infer(v, x, n, y, s, err)) return -1;
  } else if (n && v->tc) {
    const size_t groups = (n + kTcWin - 1) / kTcWin;
    const unsigned grid = (unsigned)(groups < (size_t)v->nsm ? groups : (size_t)v->nsm);
    k_vjp_tc<<<grid, kTcThreads, tc_smem_bytes(), s>>>(v->d, v->w, x, NULL, n, TC_FORWARD,
                                                        0.f, NULL, y, NULL, NULL, NULL);
    CKV(cudaGetLastError(), "launching the forward kernel");
  } else if (n) {
    size_t smem;
    const dims_t &d = dims_for(v, n, &smem);
    const size_t groups = (n + d.wb - 1) / d.wb;
    const unsigned grid = (unsigned)(groups < 65535 ? groups : 65535);
    k_vjp<<<grid, kFwdThreads, smem, s>>>(d, v->w, x, n, NULL, y, NULL, NULL);
    CKV(cudaGetLastError(), "launching the forward kernel");
  }
  return end(v, s, err);
}

/* The forward from pieces: gathered into seen, which is then the call's
 * flat vector. For the inference kernels the gather also compares and
 * normalises (three kernels in all); otherwise it copies, and forward
 * follows (seen then no longer holds what wf was folded from). */
int forward_parts(ssae_cuda_vjp *v, const param_parts &pp, const float *x, size_t n, float *y,
                  cudaStream_t s, ssae_err *err) {
  const bool inf = inference_fits(v, x, n, y);
  if (v->have_done) CKV(cudaStreamWaitEvent(s, v->done, 0), "ordering after the last call");
  const int force = !v->seen_ok;
  v->seen_ok = 0; /* seen is being written: until the fold is queued */
  k_params_gather<<<1, kSeenThreads, 0, s>>>(pp, v->d, v->seen, force, v->changed,
                                              inf ? v->w.bn : NULL);
  CKV(cudaGetLastError(), "launching the parameters' gather");
  if (!inf) return forward(v, v->seen, x, n, y, s, err);
  v->w.p = v->seen;
  if (fold(v, v->seen, s, err) || infer(v, x, n, y, s, err)) return -1;
  return end(v, s, err);
}

/* Queues the sum of the first nparts partial gradients, in a fixed order, to
 * dparams; with loss_dev, the blocks' squared errors too, times inv. */
int grad_out(ssae_cuda_vjp *v, int nparts, float *dparams, cudaStream_t s, ssae_err *err,
             float *loss_dev = NULL, double inv = 0) {
  const char *what = "";
  if (v->tc) {
    /* the sums write the gradient and the loss themselves: no k_update */
    const grad_dest out = {dparams, v->w.gnorm, v->part_sse, loss_dev, inv};
    CKV(queue_part_sums(v->d, true, v->part, nparts, v->psum, v->w.p, v->w.bn, s, &what, &out),
        what);
    return 0;
  }
  CKV(queue_part_sums(v->d, false, v->part, nparts, v->psum, v->w.p, v->w.bn, s, &what), what);
  adam_args a;
  memset(&a, 0, sizeof a);
  k_update<<<grid_update(v->d), kThreads, sizeof(double) * (size_t)v->d.C, s>>>(
      v->d, v->w, v->psum, nparts, loss_dev ? v->part_sse : NULL, NULL, UPD_GRAD_OUT, a, dparams,
      NULL, loss_dev, inv);
  CKV(cudaGetLastError(), "launching the gradient's output");
  return 0;
}

int backward(ssae_cuda_vjp *v, const float *params, const float *x, size_t n,
             const float *dy, float *dparams, float *dx, cudaStream_t s, ssae_err *err) {
  if (begin(v, params, s, err)) return -1;
  if (n == 0) {
    CKV(cudaMemsetAsync(dparams, 0, sizeof(float) * (size_t)v->d.P, s), "clearing gradients");
    return end(v, s, err);
  }
  int nparts;
  if (v->tc) {
    const size_t groups = (n + kTcWin - 1) / kTcWin;
    nparts = (int)(groups < (size_t)v->nsm ? groups : (size_t)v->nsm);
    k_vjp_tc<<<(unsigned)nparts, kTcThreads, tc_smem_bytes(), s>>>(
        v->d, v->w, x, NULL, n, TC_UPSTREAM, 0.f, dy, NULL, dx, v->part, NULL);
  } else {
    size_t smem;
    const dims_t &d = dims_for(v, n, &smem);
    const size_t groups = (n + d.wb - 1) / d.wb;
    nparts = (int)(groups < (size_t)kVjpMaxBlocks ? groups : (size_t)kVjpMaxBlocks);
    k_vjp<<<(unsigned)nparts, kFwdThreads, smem, s>>>(d, v->w, x, n, dy, NULL, dx, v->part);
  }
  CKV(cudaGetLastError(), "launching the backward kernel");
  if (grad_out(v, nparts, dparams, s, err)) return -1;
  return end(v, s, err);
}

int loss(ssae_cuda_vjp *v, const float *params, const float *x, size_t n, float *loss_dev,
         float *dparams, cudaStream_t s, ssae_err *err) {
  if (begin(v, params, s, err)) return -1;
  if (n == 0) {
    CKV(cudaMemsetAsync(dparams, 0, sizeof(float) * (size_t)v->d.P, s), "clearing gradients");
    CKV(cudaMemsetAsync(loss_dev, 0xff, sizeof(float), s), "writing the loss"); /* a NaN */
    return end(v, s, err);
  }
  /* d/dy of mean((y - x)^2) over n*F*M values: 2 (y - x) / (n*F*M) */
  const double inv = 1.0 / ((double)n * v->d.F * v->d.M);
  const float s2 = (float)(2.0 * inv);
  int nparts;
  if (v->tc) {
    const size_t groups = (n + kTcWin - 1) / kTcWin;
    nparts = (int)(groups < (size_t)v->nsm ? groups : (size_t)v->nsm);
    k_vjp_tc<<<(unsigned)nparts, kTcThreads, tc_smem_bytes(), s>>>(
        v->d, v->w, x, NULL, n, TC_MSE, s2, NULL, NULL, NULL, v->part, v->part_sse);
  } else {
    size_t smem;
    const dims_t &d = dims_for(v, n, &smem);
    const size_t groups = (n + d.wb - 1) / d.wb;
    nparts = (int)(groups < (size_t)kVjpMaxBlocks ? groups : (size_t)kVjpMaxBlocks);
    k_fwd_bwd<<<(unsigned)nparts, kFwdThreads, smem, s>>>(d, v->w, x, NULL, n, s2, MODE_GRAD,
                                                          v->part, v->part_sse, NULL);
  }
  CKV(cudaGetLastError(), "launching the loss kernel");
  if (grad_out(v, nparts, dparams, s, err, loss_dev, inv)) return -1;
  return end(v, s, err);
}

/* Runs call(v) on stream s, or, while s is being captured into a CUDA
 * graph (torch.cuda.graph, torch.compile's "reduce-overhead" mode), on a
 * copy of v whose scratch is the graph's own: one stream-ordered
 * allocation, freed at the call's end, so that the graph's replays share
 * no buffer with the net's other calls or other graphs. Such a call waits
 * for and records no event (an event recorded outside a capture cannot be
 * waited for inside it, nor one recorded inside it outside), and its
 * folded weights are made at every replay (the comparison's copy is the
 * graph's, undefined at each replay's start). */
template <class F>
int graph_call(ssae_cuda_vjp *v, cudaStream_t s, size_t n, ssae_err *err, F &&call) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  CKV(cudaStreamIsCapturing(s, &st), "asking whether the stream is being captured");
  if (st == cudaStreamCaptureStatusNone) return call(v);
  if (st != cudaStreamCaptureStatusActive)
    return ssae_err_set(err, "CUDA: the stream's graph capture was invalidated before this call");
  const dims_t &d = v->d;
  const size_t LC = (size_t)d.L * d.C, MS = (size_t)d.M * d.S;
  size_t at = 0;
  auto room = [&at](size_t bytes) {
    const size_t o = at;
    at += (bytes + 255) / 256 * 256;
    return o;
  };
  const size_t o_bn = room(sizeof(float) * LC), o_bnt = room(sizeof(float) * LC);
  const size_t o_enct = room(sizeof(float) * MS), o_dect = room(sizeof(float) * MS);
  const size_t o_bnwt = room(sizeof(float) * d.L * d.L), o_gnorm = room(sizeof(double) * d.L);
  const size_t PX = (size_t)part_floats(d, v->tc);
  const size_t o_part = room(sizeof(float) * PX * kVjpMaxBlocks);
  const size_t o_psum = room(sizeof(double) * PX);
  const size_t o_sse = room(sizeof(double) * kVjpMaxBlocks);
  const size_t o_wf = room(v->fwd_inf ? sizeof(float) * v->lo.total : 0);
  const size_t o_scores = room(sizeof(float) * (n ? n : 1));
  const size_t o_seen = room(sizeof(float) * d.P), o_changed = room(sizeof(int));
  char *a = NULL;
  CKV(cudaMallocAsync((void **)&a, at, s), "allocating the graph's scratch");
  ssae_cuda_vjp g = *v;
  g.w.bn = (float *)(a + o_bn);
  g.w.bnt = (float *)(a + o_bnt);
  g.w.enct = (float *)(a + o_enct);
  g.w.dect = (float *)(a + o_dect);
  g.w.bnwt = (float *)(a + o_bnwt);
  g.w.gnorm = (double *)(a + o_gnorm);
  g.part = (float *)(a + o_part);
  g.psum = (double *)(a + o_psum);
  g.part_sse = (double *)(a + o_sse);
  g.wf = v->fwd_inf ? (float *)(a + o_wf) : NULL;
  g.scores = (float *)(a + o_scores);
  g.scores_cap = n;
  g.seen = (float *)(a + o_seen);
  g.changed = (int *)(a + o_changed);
  g.seen_ok = 0;
  g.have_done = 0;
  g.capturing = 1;
  /* what the fold does not write, zero (as the net's own, cleared once) */
  cudaError_t z = g.wf ? cudaMemsetAsync(g.wf, 0, sizeof(float) * v->lo.total, s) : cudaSuccess;
  const int rc = z != cudaSuccess
                     ? ssae_err_set(err, "CUDA: clearing folded weights: %s", cudaGetErrorString(z))
                     : call(&g);
  const cudaError_t e = cudaFreeAsync(a, s);
  if (rc) return rc;
  CKV(e, "freeing the graph's scratch");
  return 0;
}

}  // namespace

extern "C" void ssae_cuda_vjp_free(ssae_cuda_vjp *v) {
  if (!v) return;
  {
    device_scope on_dev(v->dev);
    void *ptrs[] = {v->w.bn,   v->w.bnt, v->w.enct, v->w.bnwt,     v->w.dect,
                    v->w.gnorm, v->part,  v->psum,   v->part_sse,   v->wf,
                    v->scores,  v->seen,  v->changed};
    for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++) cudaFree(ptrs[i]);
    if (v->done) cudaEventDestroy(v->done);
  }
  cudaGetLastError();
  free(v);
}

namespace {

/* For its life, this thread's CUDA calls in the relaxed capture mode: the
 * net's buffers can then be made while one of the caller's streams is
 * being captured into a graph (a first call inside torch.cuda.graph),
 * where the default mode refuses cudaMalloc; they are the net's, not the
 * graph's. */
struct relaxed_capture {
  cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
  relaxed_capture() {
    if (cudaThreadExchangeStreamCaptureMode(&m) != cudaSuccess) cudaGetLastError();
  }
  ~relaxed_capture() {
    if (cudaThreadExchangeStreamCaptureMode(&m) != cudaSuccess) cudaGetLastError();
  }
};

}  // namespace

extern "C" ssae_cuda_vjp *ssae_cuda_vjp_new(const ssae_dims *dm, ssae_err *err) {
  if (ssae_dims_check(dm, err)) return NULL;
  relaxed_capture relaxed;
  if ((double)dm->frames * dm->slice_latent * dm->latent > 1e8 ||
      (double)dm->n_mels * dm->slice_latent > 1e8) {
    ssae_err_set(err, "CUDA: model dimensions out of range");
    return NULL;
  }
  ssae_cuda_vjp *v = (ssae_cuda_vjp *)calloc(1, sizeof *v);
  if (!v) {
    ssae_err_set(err, "CUDA: out of memory");
    return NULL;
  }
  dims_t &d = v->d;
  d = make_dims(dm);
#define CKN(call, what)                                                        \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess) {                                                   \
      cudaGetLastError();                                                      \
      ssae_err_set(err, "CUDA: %s: %s", what, cudaGetErrorString(e_));         \
      ssae_cuda_vjp_free(v);                                                   \
      return NULL;                                                             \
    }                                                                          \
  } while (0)
  v->dev = -1;
  CKN(cudaGetDevice(&v->dev), "reading the current device");
  cudaDeviceProp prop;
  CKN(cudaGetDeviceProperties(&prop, v->dev), "reading device properties");
  v->smem = pick_group(d, 4, prop.sharedMemPerBlockOptin); /* as the trainer */
  if (d.wb == 0 || sizeof(double) * (size_t)d.C > 48 * 1024) {
    ssae_err_set(err, "CUDA: model dimensions too large for the GPU's shared memory");
    ssae_cuda_vjp_free(v);
    return NULL;
  }
  v->d_large = d;
  v->smem_large = pick_group(v->d_large, kLargeGroup, prop.sharedMemPerBlockOptin);
  CKN(cudaFuncSetAttribute(k_vjp, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           (int)(v->smem_large > v->smem ? v->smem_large : v->smem)),
      "raising the kernel's shared-memory limit");
  CKN(cudaFuncSetAttribute(k_fwd_bwd, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           (int)(v->smem_large > v->smem ? v->smem_large : v->smem)),
      "raising the kernel's shared-memory limit");
  /* SSAE_CUDA_VJP=simt keeps k_vjp (a test hook: both kernels are checked) */
  const char *pick = getenv("SSAE_CUDA_VJP");
  v->nsm = prop.multiProcessorCount < kVjpMaxBlocks ? prop.multiProcessorCount : kVjpMaxBlocks;
  v->tc = d.M == 64 && d.S == 64 && d.L == 32 && d.F == 5 && prop.major >= 8 &&
          tc_smem_bytes() <= prop.sharedMemPerBlockOptin && !(pick && !strcmp(pick, "simt"));
  if (v->tc) {
    CKN(cudaFuncSetAttribute(k_vjp_tc, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)tc_smem_bytes()),
        "raising the kernel's shared-memory limit");
    v->lo = ssae_cuda_layout_make(d.M, d.F, d.L, d.S);
    v->tl = ssae_tc_layout_of(&v->lo);
    v->fwd_inf = ssae_tc_smem(&v->lo) <= prop.sharedMemPerBlockOptin;
  }
  if (v->fwd_inf) {
    CKN(cudaFuncSetAttribute(ssae_warp_3xtf32_kernel<5>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)ssae_tc_smem(&v->lo)),
        "raising the kernel's shared-memory limit");
    CKN(cudaMalloc(&v->wf, sizeof(float) * v->lo.total), "allocating folded weights");
    CKN(cudaMemset(v->wf, 0, sizeof(float) * v->lo.total), "clearing folded weights");
    /* on the legacy stream: the callers' streams may not wait for it */
    CKN(cudaStreamSynchronize(0), "clearing folded weights");
  }
  const size_t P = (size_t)d.P, LC = (size_t)d.L * d.C;
  /* the parameters of the last forward (every net: ssae_cuda_vjp_forward_parts gathers into it) */
  CKN(cudaMalloc(&v->seen, sizeof(float) * P), "allocating a parameter copy");
  CKN(cudaMalloc(&v->changed, sizeof(int)), "allocating a flag");
  CKN(cudaMalloc(&v->w.bn, sizeof(float) * LC), "allocating the basis");
  CKN(cudaMalloc(&v->w.bnt, sizeof(float) * LC), "allocating the basis");
  CKN(cudaMalloc(&v->w.enct, sizeof(float) * d.M * d.S), "allocating weights");
  CKN(cudaMalloc(&v->w.bnwt, sizeof(float) * d.L * d.L), "allocating weights");
  CKN(cudaMalloc(&v->w.dect, sizeof(float) * d.M * d.S), "allocating weights");
  CKN(cudaMalloc(&v->w.gnorm, sizeof(double) * d.L), "allocating the basis norms");
  /* a partial gradient: the parameters', and k_vjp_tc's dD^T after them */
  const size_t PX = (size_t)part_floats(d, v->tc);
  CKN(cudaMalloc(&v->part, sizeof(float) * PX * kVjpMaxBlocks), "allocating partial gradients");
  CKN(cudaMalloc(&v->psum, sizeof(double) * PX), "allocating the gradient sum");
  CKN(cudaMalloc(&v->part_sse, sizeof(double) * kVjpMaxBlocks), "allocating partial losses");
  CKN(cudaEventCreateWithFlags(&v->done, cudaEventDisableTiming), "creating an event");
#undef CKN
  return v;
}

extern "C" int ssae_cuda_vjp_forward(ssae_cuda_vjp *v, const float *params_dev,
                                     const float *x_dev, size_t n, float *y_dev, void *stream,
                                     ssae_err *err) {
  if (!params_dev || (n && (!x_dev || !y_dev))) return ssae_err_set(err, "forward: NULL buffer");
  if (check_device_ptr(params_dev, v->dev, "parameters", err) ||
      (n && (check_device_ptr(x_dev, v->dev, "input", err) ||
             check_device_ptr(y_dev, v->dev, "output", err))))
    return -1;
  device_scope on_dev(v->dev);
  CKV(on_dev.e, "selecting the device");
  const cudaStream_t s = (cudaStream_t)stream;
  return graph_call(v, s, n, err, [&](ssae_cuda_vjp *u) {
    return forward(u, params_dev, x_dev, n, y_dev, s, err);
  });
}

extern "C" int ssae_cuda_vjp_forward_parts(ssae_cuda_vjp *v, const float *const *parts,
                                           const size_t *counts, int nparts,
                                           const float *x_dev, size_t n, float *y_dev,
                                           void *stream, ssae_err *err) {
  if (!parts || !counts || nparts < 1 || nparts > SSAE_CUDA_VJP_MAX_PARTS)
    return ssae_err_set(err, "forward: %d parameter pieces (1 to %d)", nparts,
                        SSAE_CUDA_VJP_MAX_PARTS);
  if (n && (!x_dev || !y_dev)) return ssae_err_set(err, "forward: NULL buffer");
  param_parts pp;
  memset(&pp, 0, sizeof pp);
  pp.n = nparts;
  pp.vec = 1;
  size_t at = 0;
  for (int q = 0; q < nparts; q++) {
    char what[48];
    snprintf(what, sizeof what, "parameter piece %d", q);
    if (!parts[q] || !counts[q]) return ssae_err_set(err, "forward: %s empty or NULL", what);
    if (check_device_ptr(parts[q], v->dev, what, err)) return -1;
    pp.p[q] = parts[q];
    pp.start[q] = (int)at;
    if ((uintptr_t)parts[q] % 16 || counts[q] % 4 || at % 4) pp.vec = 0;
    at += counts[q];
    if (at > (size_t)v->d.P) break;
  }
  if (at != (size_t)v->d.P)
    return ssae_err_set(err, "forward: the pieces hold %s%zu floats, the model has %d",
                        at > (size_t)v->d.P ? "more than " : "", at, v->d.P);
  pp.start[nparts] = (int)at;
  if (n && (check_device_ptr(x_dev, v->dev, "input", err) ||
            check_device_ptr(y_dev, v->dev, "output", err)))
    return -1;
  device_scope on_dev(v->dev);
  CKV(on_dev.e, "selecting the device");
  const cudaStream_t s = (cudaStream_t)stream;
  return graph_call(v, s, n, err, [&](ssae_cuda_vjp *u) {
    return forward_parts(u, pp, x_dev, n, y_dev, s, err);
  });
}

extern "C" int ssae_cuda_vjp_backward(ssae_cuda_vjp *v, const float *params_dev,
                                      const float *x_dev, size_t n, const float *dy_dev,
                                      float *dparams_dev, float *dx_dev, void *stream,
                                      ssae_err *err) {
  if (!params_dev || !dparams_dev || (n && (!x_dev || !dy_dev)))
    return ssae_err_set(err, "backward: NULL buffer");
  if (check_device_ptr(params_dev, v->dev, "parameters", err) ||
      check_device_ptr(dparams_dev, v->dev, "parameter gradients", err) ||
      (n && (check_device_ptr(x_dev, v->dev, "input", err) ||
             check_device_ptr(dy_dev, v->dev, "upstream gradient", err) ||
             (dx_dev && check_device_ptr(dx_dev, v->dev, "input gradient", err)))))
    return -1;
  device_scope on_dev(v->dev);
  CKV(on_dev.e, "selecting the device");
  const cudaStream_t s = (cudaStream_t)stream;
  return graph_call(v, s, n, err, [&](ssae_cuda_vjp *u) {
    return backward(u, params_dev, x_dev, n, dy_dev, dparams_dev, dx_dev, s, err);
  });
}

extern "C" int ssae_cuda_vjp_loss(ssae_cuda_vjp *v, const float *params_dev, const float *x_dev,
                                  size_t n, float *loss_dev, float *dparams_dev, void *stream,
                                  ssae_err *err) {
  if (!params_dev || !loss_dev || !dparams_dev || (n && !x_dev))
    return ssae_err_set(err, "loss: NULL buffer");
  if (check_device_ptr(params_dev, v->dev, "parameters", err) ||
      check_device_ptr(loss_dev, v->dev, "loss", err) ||
      check_device_ptr(dparams_dev, v->dev, "parameter gradients", err) ||
      (n && check_device_ptr(x_dev, v->dev, "input", err)))
    return -1;
  device_scope on_dev(v->dev);
  CKV(on_dev.e, "selecting the device");
  const cudaStream_t s = (cudaStream_t)stream;
  return graph_call(v, s, n, err, [&](ssae_cuda_vjp *u) {
    return loss(u, params_dev, x_dev, n, loss_dev, dparams_dev, s, err);
  });
}
