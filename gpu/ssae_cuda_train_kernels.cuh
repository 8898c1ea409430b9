/* The device side of CUDA training (gpu/ssae_cuda_train.cu): the
 * dimensions and shared-memory layout the kernels share with the host,
 * the forward + backward kernel (k_fwd_bwd), the gradient + Adam kernel
 * (k_update) and Adam alone (k_adam_only, a test hook); the partial
 * gradients' sums are ssae_cuda_grad_sums.cuh's. Included by ssae_cuda_train.cu and
 * ssae_cuda_train_vjp.cu (file-local: each has its own copy). */
#ifndef SSAE_CUDA_TRAIN_KERNELS_CUH
#define SSAE_CUDA_TRAIN_KERNELS_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "ssae_model.h"

namespace {

const int kThreads = 256;     /* k_update (its block sums assume it) */
const int kFwdThreads = 512;  /* k_fwd_bwd: 16 warps hide the L1 and shared-memory latency */
const double kLnEps = 1e-5;
const double kNormEps = 1e-12;

enum { MODE_GRAD = 0, MODE_SCORES = 1 };
enum { UPD_PREP = 0, UPD_GRAD_OUT = 1, UPD_ADAM = 2 };

struct dims_t {
  int M, F, L, S, C, P, wb;
  int off[SSAE_N_TENSORS + 1];
};

/* Shared-memory layout of k_fwd_bwd, in floats; wsse (doubles) last. */
struct lay_t {
  int xs, xhat, u, rstd1, h, gd1, z, zhat, v, zp, gd2, rstd2, r, y, dr, dzp, dv, dz, wsse;
  int total;
};

__host__ __device__ inline int even(int v) { return (v + 1) & ~1; }

__host__ __device__ inline lay_t make_lay(const dims_t &d) {
  lay_t l;
  const int R = d.wb * d.F, W = d.wb;
  int o = 0;
  l.xs = o; o += even(R * d.M);
  l.xhat = o; o += even(R * d.M);
  l.u = o; o += even(R * d.M);
  l.y = o; o += even(R * d.M);
  l.h = o; o += even(R * d.S);
  l.gd1 = o; o += even(R * d.S);
  l.r = o; o += even(R * d.S);
  l.dr = o; o += even(R * d.S);
  l.rstd1 = o; o += even(R);
  l.z = o; o += even(W * d.L);
  l.zhat = o; o += even(W * d.L);
  l.v = o; o += even(W * d.L);
  l.zp = o; o += even(W * d.L);
  l.gd2 = o; o += even(W * d.L);
  l.dzp = o; o += even(W * d.L);
  l.dv = o; o += even(W * d.L);
  l.dz = o; o += even(W * d.L);
  l.rstd2 = o; o += even(W);
  l.wsse = o; o += 2 * W;
  l.total = o;
  return l;
}

/* A model's dimensions for the kernels; wb is pick_group's. */
inline dims_t make_dims(const ssae_dims *dm) {
  dims_t d;
  d.M = dm->n_mels;
  d.F = dm->frames;
  d.L = dm->latent;
  d.S = dm->slice_latent;
  d.C = d.F * d.S;
  size_t off[SSAE_N_TENSORS + 1];
  ssae_param_offsets(dm, off);
  for (int i = 0; i <= SSAE_N_TENSORS; i++) d.off[i] = (int)off[i];
  d.P = (int)off[SSAE_N_TENSORS];
  d.wb = 0;
  return d;
}

/* Windows per group: the most of want, want/2, ..., 1 whose activations
 * fit in `shared` bytes of shared memory, in d.wb (0: none fits); returns
 * their bytes. Fixed per dimensions and device, so runs repeat bit for
 * bit. */
inline size_t pick_group(dims_t &d, int want, size_t shared) {
  for (int wb = want; wb >= 1; wb /= 2) {
    d.wb = wb;
    const size_t bytes = sizeof(float) * (size_t)make_lay(d).total;
    if (bytes <= shared) return bytes;
  }
  d.wb = 0;
  return 0;
}

struct dev_w {
  float *p, *m, *v;                 /* parameters, Adam moments [P] */
  float *bn, *bnt;                  /* normalised basis [L x C], [C x L] */
  float *enct, *bnwt, *dect;        /* transposed Linear weights */
  double *gnorm;                    /* row norms of global_basis [L] */
};

struct adam_args {
  float b1, b2, one_b1, one_b2, wd, neg_step, bc2_sqrt, eps;
};

/* ---- device helpers ------------------------------------------------------ */

__device__ __forceinline__ double warp_sum(double s) {
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  return s;
}

/* Fixed-tree block sum (blockDim.x == kThreads); every thread gets it. */
__device__ double block_sum(double v, double *red) {
  red[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  double r = red[0];
  __syncthreads();
  return r;
}

/* Exact GELU a*Phi(a) and its derivative Phi(a) + a*phi(a); normcdff keeps
 * the negative tail's relative accuracy (1 + erf would cancel). */
__device__ __forceinline__ void gelu(float a, float *h, float *d) {
  const float cdf = normcdff(a);
  const float pdf = 0.39894228040143268f * expf(-0.5f * a * a);
  *h = a * cdf;
  *d = cdf + a * pdf;
}

/* torch.optim.Adam's float32 arithmetic, operation for operation as
 * ssae_adam_step (no contraction into other FMAs than the explicit ones). */
__device__ __forceinline__ void adam_one(const adam_args &a, float &p, float &m, float &v,
                                         float g) {
  if (a.wd != 0.0f) g = fmaf(p, a.wd, g);
  m = fmaf(g, a.one_b1, __fmul_rn(m, a.b1));
  v = fmaf(__fmul_rn(a.one_b2, g), g, __fmul_rn(v, a.b2));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), a.bc2_sqrt), a.eps);
  p = __fadd_rn(p, __fdiv_rn(__fmul_rn(a.neg_step, m), denom));
}

/* LayerNorm of R rows of n, one warp per row, statistics in double. */
__device__ void ln_fwd(int R, int n, const float *x, const float *__restrict__ gw,
                       const float *__restrict__ gb, float *xhat, float *out, float *rstd) {
  const int lane = threadIdx.x & 31, nwarp = blockDim.x >> 5;
  for (int row = threadIdx.x >> 5; row < R; row += nwarp) {
    const float *xi = x + row * n;
    double s = 0;
    for (int j = lane; j < n; j += 32) s += xi[j];
    const double mean = warp_sum(s) / n;
    double ss = 0;
    for (int j = lane; j < n; j += 32) {
      const double t = xi[j] - mean;
      ss += t * t;
    }
    const double rs = 1.0 / sqrt(warp_sum(ss) / n + kLnEps);
    const float mf = (float)mean, rf = (float)rs;
    if (lane == 0) rstd[row] = rf;
    for (int j = lane; j < n; j += 32) {
      const float xh = (xi[j] - mf) * rf;
      xhat[row * n + j] = xh;
      out[row * n + j] = xh * gw[j] + gb[j];
    }
  }
}

/* ln_fwd with x - mean in double, as the CPU's VJP (ssae_cuda_train_vjp.cu) (log-mel rows sit far
 * from zero: the float difference would cost the output SPEC accuracy). */
__device__ void ln_fwd_exact(int R, int n, const float *x, const float *__restrict__ gw,
                             const float *__restrict__ gb, float *xhat, float *out,
                             float *rstd) {
  const int lane = threadIdx.x & 31, nwarp = blockDim.x >> 5;
  for (int row = threadIdx.x >> 5; row < R; row += nwarp) {
    const float *xi = x + row * n;
    double s = 0;
    for (int j = lane; j < n; j += 32) s += xi[j];
    const double mean = warp_sum(s) / n;
    double ss = 0;
    for (int j = lane; j < n; j += 32) {
      const double t = xi[j] - mean;
      ss += t * t;
    }
    const double rs = 1.0 / sqrt(warp_sum(ss) / n + kLnEps);
    const float rf = (float)rs;
    if (lane == 0) rstd[row] = rf;
    for (int j = lane; j < n; j += 32) {
      const float xh = (float)(((double)xi[j] - mean) * (double)rf);
      xhat[row * n + j] = xh;
      out[row * n + j] = xh * gw[j] + gb[j];
    }
  }
}

/* Input gradient of the LayerNorm, one warp per row:
 * dx = rstd (dxh - mean(dxh) - xhat mean(dxh xhat)), dxh = dout * gw. */
__device__ void ln_bwd_dx(int R, int n, const float *dout, const float *xhat, const float *rstd,
                          const float *__restrict__ gw, float *dx) {
  const int lane = threadIdx.x & 31, nwarp = blockDim.x >> 5;
  for (int row = threadIdx.x >> 5; row < R; row += nwarp) {
    const float *dy = dout + row * n, *xh = xhat + row * n;
    double s1 = 0, s2 = 0;
    for (int j = lane; j < n; j += 32) {
      const double t = (double)dy[j] * gw[j];
      s1 += t;
      s2 += t * xh[j];
    }
    const float m1 = (float)(warp_sum(s1) / n), m2 = (float)(warp_sum(s2) / n);
    for (int j = lane; j < n; j += 32)
      dx[row * n + j] = rstd[row] * (dy[j] * gw[j] - m1 - xh[j] * m2);
  }
}

__device__ __forceinline__ void put(float *pb, int i, float v, bool first) {
  pb[i] = first ? v : pb[i] + v;
}

/* The arrays of one group of windows in shared memory (make_lay). */
struct grp_t {
  float *xs, *xhat, *u, *y, *h, *gd1, *rr, *dr, *rstd1, *z, *zhat, *v, *zp, *gd2, *dzp, *dv,
      *dz, *rstd2;
};

__device__ __forceinline__ grp_t make_grp(float *sm, const lay_t &ly) {
  grp_t s;
  s.xs = sm + ly.xs, s.xhat = sm + ly.xhat, s.u = sm + ly.u, s.y = sm + ly.y;
  s.h = sm + ly.h, s.gd1 = sm + ly.gd1, s.rr = sm + ly.r, s.dr = sm + ly.dr;
  s.rstd1 = sm + ly.rstd1, s.z = sm + ly.z, s.zhat = sm + ly.zhat, s.v = sm + ly.v;
  s.zp = sm + ly.zp, s.gd2 = sm + ly.gd2, s.dzp = sm + ly.dzp, s.dv = sm + ly.dv;
  s.dz = sm + ly.dz, s.rstd2 = sm + ly.rstd2;
  return s;
}

/* The forward of the nw windows in sh.xs up to the slice codes of the
 * reconstruction in sh.rr; the decoder is the caller's (the trainer's loss,
 * or the VJP's output). kExactMean: the LayerNorms take x - mean in double
 * (ln_fwd_exact, the VJP's); else ln_fwd (the trainer's). */
template <bool kExactMean>
__device__ __forceinline__ void group_fwd(const dims_t &d, const dev_w &w, const grp_t &sh,
                                          int nw) {
  float *xs = sh.xs, *xhat = sh.xhat, *u = sh.u, *h = sh.h, *gd1 = sh.gd1, *rr = sh.rr;
  float *rstd1 = sh.rstd1, *z = sh.z, *zhat = sh.zhat, *v = sh.v, *zp = sh.zp, *gd2 = sh.gd2;
  float *rstd2 = sh.rstd2;
  const int tid = threadIdx.x, T = blockDim.x;
  const int M = d.M, L = d.L, S = d.S, C = d.C, R = nw * d.F;
  const float *P = w.p;
  if (kExactMean)
    ln_fwd_exact(R, M, xs, P + d.off[0], P + d.off[1], xhat, u, rstd1);
  else
    ln_fwd(R, M, xs, P + d.off[0], P + d.off[1], xhat, u, rstd1);
  __syncthreads();
  /* slice encoder: a = u We^T + be, h = GELU(a) */
  for (int i = tid; i < R * S; i += T) {
    const int r = i / S, s = i - r * S;
    float acc = P[d.off[3] + s];
    const float *ur = u + r * M;
    for (int k = 0; k < M; k++) acc = fmaf(ur[k], w.enct[k * S + s], acc);
    gelu(acc, &h[i], &gd1[i]);
  }
  __syncthreads();
  /* z = B c, c = the window's slice codes side by side */
  for (int i = tid; i < nw * L; i += T) {
    const int wi = i / L, l = i - wi * L;
    const float *c = h + wi * C;
    float acc = 0;
    for (int k = 0; k < C; k++) acc = fmaf(c[k], w.bnt[k * L + l], acc);
    z[i] = acc;
  }
  __syncthreads();
  if (kExactMean)
    ln_fwd_exact(nw, L, z, P + d.off[5], P + d.off[6], zhat, v, rstd2);
  else
    ln_fwd(nw, L, z, P + d.off[5], P + d.off[6], zhat, v, rstd2);
  __syncthreads();
  for (int i = tid; i < nw * L; i += T) {
    const int wi = i / L, l = i - wi * L;
    float acc = P[d.off[8] + l];
    for (int k = 0; k < L; k++) acc = fmaf(v[wi * L + k], w.bnwt[k * L + l], acc);
    gelu(acc, &zp[i], &gd2[i]);
  }
  __syncthreads();
  /* reconstruction r = B^T z' */
  for (int i = tid; i < nw * C; i += T) {
    const int wi = i / C, c = i - wi * C;
    float acc = 0;
    for (int l = 0; l < L; l++) acc = fmaf(zp[wi * L + l], w.bn[l * C + c], acc);
    rr[i] = acc;
  }
  __syncthreads();
}

/* The backward of the nw windows from the output gradient dy in sh.y (used
 * as scratch) and the activations group_fwd left: the partial gradient in
 * pb (first: written, else added to) and, with dx, the input gradient. */
__device__ __forceinline__ void group_bwd(const dims_t &d, const dev_w &w, const grp_t &sh,
                                          int nw, float *pb, bool first, float *dx) {
  float *xhat = sh.xhat, *u = sh.u, *y = sh.y, *h = sh.h, *gd1 = sh.gd1, *rr = sh.rr;
  float *dr = sh.dr, *rstd1 = sh.rstd1, *zhat = sh.zhat, *v = sh.v, *zp = sh.zp;
  float *gd2 = sh.gd2, *dzp = sh.dzp, *dv = sh.dv, *dz = sh.dz, *rstd2 = sh.rstd2;
  const int tid = threadIdx.x, T = blockDim.x;
  const int M = d.M, L = d.L, S = d.S, C = d.C, R = nw * d.F;
  const float *P = w.p;
  /* decoder: bias, weight, dr = dy Wd */
  for (int m = tid; m < M; m += T) {
    float acc = 0;
    for (int r = 0; r < R; r++) acc += y[r * M + m];
    put(pb, d.off[10] + m, acc, first);
  }
  for (int i = tid; i < M * S; i += T) {
    const int m = i / S, s = i - m * S;
    float acc = 0;
    for (int r = 0; r < R; r++) acc = fmaf(y[r * M + m], rr[r * S + s], acc);
    put(pb, d.off[9] + i, acc, first);
  }
  for (int i = tid; i < R * S; i += T) {
    const int r = i / S, s = i - r * S;
    float acc = 0;
    for (int m = 0; m < M; m++) acc = fmaf(y[r * M + m], P[d.off[9] + m * S + s], acc);
    dr[i] = acc;
  }
  __syncthreads();
  /* through r = B^T z' and the bottleneck GELU: dp = (dr B^T) * GELU' */
  for (int i = tid; i < nw * L; i += T) {
    const int wi = i / L, l = i - wi * L;
    const float *dc = dr + wi * C;
    float acc = 0;
    for (int k = 0; k < C; k++) acc = fmaf(dc[k], w.bnt[k * L + l], acc);
    dzp[i] = acc * gd2[i];
  }
  __syncthreads();
  /* bottleneck Linear */
  for (int l = tid; l < L; l += T) {
    float acc = 0;
    for (int i = 0; i < nw; i++) acc += dzp[i * L + l];
    put(pb, d.off[8] + l, acc, first);
  }
  for (int i = tid; i < L * L; i += T) {
    const int l = i / L, k = i - l * L;
    float acc = 0;
    for (int wi = 0; wi < nw; wi++) acc = fmaf(dzp[wi * L + l], v[wi * L + k], acc);
    put(pb, d.off[7] + i, acc, first);
  }
  for (int i = tid; i < nw * L; i += T) {
    const int wi = i / L, k = i - wi * L;
    float acc = 0;
    for (int l = 0; l < L; l++) acc = fmaf(dzp[wi * L + l], P[d.off[7] + l * L + k], acc);
    dv[i] = acc;
  }
  __syncthreads();
  /* bottleneck LayerNorm */
  for (int k = tid; k < L; k += T) {
    float gw = 0, gb = 0;
    for (int wi = 0; wi < nw; wi++) {
      gw = fmaf(dv[wi * L + k], zhat[wi * L + k], gw);
      gb += dv[wi * L + k];
    }
    put(pb, d.off[5] + k, gw, first);
    put(pb, d.off[6] + k, gb, first);
  }
  ln_bwd_dx(nw, L, dv, zhat, rstd2, P + d.off[5], dz);
  __syncthreads();
  /* basis (normalised) from both uses, z = B c and r = B^T z'; dc, then
   * da = dc * GELU' into rr (r is no longer needed) */
  for (int i = tid; i < L * C; i += T) {
    const int l = i / C, c = i - l * C;
    float acc = 0;
    for (int wi = 0; wi < nw; wi++) {
      acc = fmaf(zp[wi * L + l], dr[wi * C + c], acc);
      acc = fmaf(dz[wi * L + l], h[wi * C + c], acc);
    }
    put(pb, d.off[4] + i, acc, first);
  }
  for (int i = tid; i < nw * C; i += T) {
    const int wi = i / C, c = i - wi * C;
    float acc = 0;
    for (int l = 0; l < L; l++) acc = fmaf(dz[wi * L + l], w.bn[l * C + c], acc);
    rr[i] = acc * gd1[i];
  }
  __syncthreads();
  /* slice encoder Linear; du into y (dy is no longer needed) */
  for (int s = tid; s < S; s += T) {
    float acc = 0;
    for (int r = 0; r < R; r++) acc += rr[r * S + s];
    put(pb, d.off[3] + s, acc, first);
  }
  for (int i = tid; i < S * M; i += T) {
    const int s = i / M, m = i - s * M;
    float acc = 0;
    for (int r = 0; r < R; r++) acc = fmaf(rr[r * S + s], u[r * M + m], acc);
    put(pb, d.off[2] + i, acc, first);
  }
  for (int i = tid; i < R * M; i += T) {
    const int r = i / M, m = i - r * M;
    float acc = 0;
    for (int s = 0; s < S; s++) acc = fmaf(rr[r * S + s], P[d.off[2] + s * M + m], acc);
    y[i] = acc;
  }
  __syncthreads();
  /* slice encoder LayerNorm: its parameters, and with dx the input
   * gradient */
  for (int m = tid; m < M; m += T) {
    float gw = 0, gb = 0;
    for (int r = 0; r < R; r++) {
      gw = fmaf(y[r * M + m], xhat[r * M + m], gw);
      gb += y[r * M + m];
    }
    put(pb, d.off[0] + m, gw, first);
    put(pb, d.off[1] + m, gb, first);
  }
  if (dx) ln_bwd_dx(R, M, y, xhat, rstd1, P + d.off[0], dx);
}

/* Forward (+ backward in MODE_GRAD) of n windows; window i starts at
 * data + offs[i] (offs NULL: i*F*M). MODE_GRAD: partial gradient of block b
 * at part + b*P, its sse at part_sse[b]. MODE_SCORES: scores[i]. */
__global__ void __launch_bounds__(kFwdThreads, 1)
    k_fwd_bwd(dims_t d, dev_w w, const float *__restrict__ data,
              const unsigned long long *__restrict__ offs, size_t n, float s2, int mode,
              float *__restrict__ part, double *__restrict__ part_sse,
              float *__restrict__ scores) {
  extern __shared__ double smem_d[];
  float *sm = (float *)smem_d;
  const lay_t ly = make_lay(d);
  const grp_t sh = make_grp(sm, ly);
  float *xs = sh.xs, *y = sh.y, *rr = sh.rr;
  double *wsse = (double *)(sm + ly.wsse);
  const int tid = threadIdx.x, T = blockDim.x;
  const int M = d.M, F = d.F, S = d.S, FM = F * M;
  const float *P = w.p;
  const size_t ngroups = (n + d.wb - 1) / d.wb;
  float *pb = part ? part + (size_t)blockIdx.x * d.P : NULL;
  double sse_blk = 0;
  bool first = true;

  for (size_t g = blockIdx.x; g < ngroups; g += gridDim.x) {
    const size_t base = g * d.wb;
    const int nw = (int)(n - base < (size_t)d.wb ? n - base : (size_t)d.wb);
    const int R = nw * F;
    for (int i = tid; i < nw * FM; i += T) {
      const int wi = i / FM, j = i - wi * FM;
      const size_t o = offs ? (size_t)offs[base + wi] : (base + wi) * (size_t)FM;
      xs[i] = data[o + j];
    }
    __syncthreads();
    group_fwd<false>(d, w, sh, nw);
    /* decoder, and y - x in place of y */
    for (int i = tid; i < R * M; i += T) {
      const int r = i / M, m = i - r * M;
      float acc = P[d.off[10] + m];
      const float *rrow = rr + r * S;
      for (int k = 0; k < S; k++) acc = fmaf(rrow[k], w.dect[k * M + m], acc);
      y[i] = acc - xs[i];
    }
    __syncthreads();
    {
      const int lane = tid & 31, nwarp = T >> 5;
      for (int wi = tid >> 5; wi < nw; wi += nwarp) {
        double s = 0;
        for (int j = lane; j < FM; j += 32) {
          const double t = y[wi * FM + j];
          s += t * t;
        }
        s = warp_sum(s);
        if (lane == 0) wsse[wi] = s;
      }
    }
    __syncthreads();
    if (mode == MODE_SCORES) {
      for (int wi = tid; wi < nw; wi += T) scores[base + wi] = (float)(wsse[wi] / FM);
      __syncthreads();
      continue;
    }
    if (tid == 0)
      for (int wi = 0; wi < nw; wi++) sse_blk += wsse[wi];
    for (int i = tid; i < R * M; i += T) y[i] = s2 * y[i]; /* dy */
    __syncthreads();

    group_bwd(d, w, sh, nw, pb, first, NULL);
    __syncthreads();
    first = false;
  }
  if (mode == MODE_GRAD && tid == 0) part_sse[blockIdx.x] = sse_blk;
}

/* The nparts blocks' squared errors summed by a warp in a fixed order
 * (the same bits on every run): lane q adds blocks q, q + 32, ..., then
 * the lanes in a fixed tree; every lane gets the sum. */
__device__ __forceinline__ double blocks_sse(const double *part_sse, int nparts, int lane) {
  double s = 0;
  for (int b = lane; b < nparts; b += 32) s += part_sse[b];
  return warp_sum(s);
}

/* A basis row's gradient through its normalisation: dB (shared, C
 * doubles) holds the gradient of the normalised row b = G / |G| (nrm =
 * |G|) and becomes that of G, db . (I - b b^T) / |G|. A whole block
 * (kThreads) calls it. */
__device__ void basis_row_back(double *dB, const float *G, double nrm, int C, double *red) {
  const int tid = threadIdx.x;
  __syncthreads();
  if (nrm >= kNormEps) {
    double loc = 0;
    for (int c = tid; c < C; c += kThreads) loc += dB[c] * ((double)G[c] / nrm);
    const double dot = block_sum(loc, red);
    for (int c = tid; c < C; c += kThreads) dB[c] = (dB[c] - ((double)G[c] / nrm) * dot) / nrm;
  } else {
    for (int c = tid; c < C; c += kThreads) dB[c] /= kNormEps;
  }
}

/* k_update's blocks: one per basis row, then one per kThreads of the other
 * parameters */
inline unsigned grid_update(const dims_t &d) {
  return (unsigned)(d.L + (d.P - d.L * d.C + kThreads - 1) / kThreads);
}

/* Blocks [0, L): one basis row each; the rest: the other parameters, one
 * per thread. UPD_PREP derives the normalised basis and the transposes
 * from the parameters; UPD_GRAD_OUT writes the summed gradient (psum, from
 * k_part_sum) to gout; UPD_ADAM applies Adam with it, then prepares as
 * UPD_PREP. sse_out (NULL: none) gets the nparts blocks' squared errors
 * summed in a fixed order, and loss_out (NULL: none) their sum times
 * loss_scale, as a float. gate (NULL: none): nothing is done while *gate
 * is 0 (the VJP forward's weights, made again only when the parameters
 * changed). */
__global__ void __launch_bounds__(kThreads)
    k_update(dims_t d, dev_w w, const double *__restrict__ psum, int nparts,
             const double *__restrict__ part_sse, double *sse_out, int upd, adam_args a,
             float *__restrict__ gout, const int *__restrict__ gate, float *loss_out = NULL,
             double loss_scale = 0) {
  if (gate && !*gate) return;
  __shared__ double red[kThreads];
  extern __shared__ double dB[];
  const int L = d.L, C = d.C, M = d.M, S = d.S, P = d.P, tid = threadIdx.x;
  if ((int)blockIdx.x < L) {
    const int l = blockIdx.x;
    const int o = d.off[4] + l * C;
    float *G = w.p + o;
    if (upd != UPD_PREP) {
      for (int c = tid; c < C; c += kThreads) dB[c] = psum[o + c];
      basis_row_back(dB, G, w.gnorm[l], C, red);
      for (int c = tid; c < C; c += kThreads) {
        const float g = (float)dB[c];
        if (upd == UPD_GRAD_OUT) gout[o + c] = g;
        else adam_one(a, G[c], w.m[o + c], w.v[o + c], g);
      }
      __syncthreads();
    }
    if (upd != UPD_GRAD_OUT) {
      double loc = 0;
      for (int c = tid; c < C; c += kThreads) loc += (double)G[c] * G[c];
      const double nrm = sqrt(block_sum(loc, red));
      if (tid == 0) w.gnorm[l] = nrm;
      const double div = nrm > kNormEps ? nrm : kNormEps;
      for (int c = tid; c < C; c += kThreads) {
        const float b = (float)(G[c] / div);
        w.bn[l * C + c] = b;
        w.bnt[c * L + l] = b;
      }
    }
    return;
  }
  const size_t e = (size_t)(blockIdx.x - L) * kThreads + tid;
  if (e < 32 && upd != UPD_PREP && (sse_out || loss_out)) {
    const double s = blocks_sse(part_sse, nparts, (int)e);
    if (e == 0) {
      if (sse_out) *sse_out = s;
      if (loss_out) *loss_out = (float)(s * loss_scale);
    }
  }
  if (e >= (size_t)(P - L * C)) return;
  const int i = (int)e < d.off[4] ? (int)e : (int)e + L * C;
  float p = w.p[i];
  if (upd != UPD_PREP) {
    const float g = (float)psum[i];
    if (upd == UPD_GRAD_OUT) {
      gout[i] = g;
      return;
    }
    adam_one(a, p, w.m[i], w.v[i], g);
    w.p[i] = p;
  }
  if (i >= d.off[2] && i < d.off[3]) {
    const int s = (i - d.off[2]) / M, m = (i - d.off[2]) % M;
    w.enct[m * S + s] = p;
  } else if (i >= d.off[7] && i < d.off[8]) {
    const int r = (i - d.off[7]) / L, k = (i - d.off[7]) % L;
    w.bnwt[k * L + r] = p;
  } else if (i >= d.off[9] && i < d.off[10]) {
    const int m = (i - d.off[9]) / S, s = (i - d.off[9]) % S;
    w.dect[s * M + m] = p;
  }
}

__global__ void k_adam_only(adam_args a, size_t n, float *p, float *m, float *v,
                            const float *g) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) adam_one(a, p[i], m[i], v[i], g[i]);
}

}  // namespace

#endif
