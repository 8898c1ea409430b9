/* The device side of CUDA training (gpu/ssae_cuda_train.cu): the
 * dimensions and shared-memory layout the kernels share with the host,
 * the forward + backward kernel (k_fwd_bwd), the partial gradients' sum
 * (k_part_sum, and k_decoder_grad after k_vjp_tc's: queue_part_sums), the
 * gradient + Adam kernel (k_update) and Adam alone
 * (k_adam_only, a test hook). Included by ssae_cuda_train.cu and
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

/* Each value's sum over the nparts partial gradients (block b's count
 * values at part + b * count: the P parameters', and for k_vjp_tc the
 * folded decoder's dD^T after them) into psum, in double and in a fixed
 * order (the same bits on every run): kSumLanes threads a value, lane q
 * adding the partials b = q, q + kSumLanes, ... in turn, the lanes' sums
 * then added in lane order. A thread a parameter adding all nparts in turn
 * (132 on an H100 or H200, 70 blocks) took 25 us of a 0.58 ms training
 * step at 65,536 windows: one chain of loads and additions per thread. */
const int kSumLanes = 4, kSumParams = kThreads / kSumLanes;
/* The floats of a block's partial gradient: the P parameters', and after
 * k_vjp_tc's (tc) the folded decoder's dD^T after them (L rows of F M; the
 * basis's entries then hold only its encoder-side term, Wd's are zero),
 * which k_decoder_grad takes back through the fold once they are summed. */
__host__ __device__ inline int part_floats(const dims_t &d, bool tc) {
  return tc ? d.P + d.L * d.F * d.M : d.P;
}
inline unsigned grid_part_sum(int count) {
  return (unsigned)((count + kSumParams - 1) / kSumParams);
}
/* Whether parameter i's gradient is complete once summed: all but the
 * basis's and Wd's, which k_decoder_grad completes after k_vjp_tc. */
__device__ __forceinline__ bool summed_is_final(const dims_t &d, int i) {
  return i < d.P && (i < d.off[4] || i >= d.off[5]) && (i < d.off[9] || i >= d.off[10]);
}

/* gout (NULL: none; k_vjp_tc's partials only) gets the complete gradients
 * as floats (summed_is_final) in place of their sums in psum: the step's
 * gradient output without a kernel of its own (k_decoder_grad writes the
 * rest). */
__global__ void __launch_bounds__(kThreads)
    k_part_sum(int count, const float *__restrict__ part, int nparts, double *__restrict__ psum,
               dims_t d, float *__restrict__ gout) {
  __shared__ double lanes[kThreads];
  const int j = threadIdx.x % kSumParams, q = threadIdx.x / kSumParams;
  const int i = (int)blockIdx.x * kSumParams + j;
  double acc = 0;
  if (i < count) {
#pragma unroll 8
    for (int b = q; b < nparts; b += kSumLanes) acc += part[(size_t)b * count + i];
  }
  lanes[threadIdx.x] = acc;
  __syncthreads();
  if (q == 0 && i < count) {
    double s = lanes[j];
    for (int l = 1; l < kSumLanes; l++) s += lanes[l * kSumParams + j];
    if (gout && summed_is_final(d, i))
      gout[i] = (float)s;
    else
      psum[i] = s;
  }
}

/* a . b over n terms (a[i * sa], b[i * sb]) in double in four chains (i
 * mod 4) added in a fixed order: a quarter the latency of one chain, the
 * same bits on every run */
template <class TA, class TB>
__device__ __forceinline__ double dot4(const TA *a, int sa, const TB *b, int sb, int n) {
  double c0 = 0, c1 = 0, c2 = 0, c3 = 0;
  int i = 0;
  for (; i + 3 < n; i += 4) {
    c0 += (double)a[i * sa] * (double)b[i * sb];
    c1 += (double)a[(i + 1) * sa] * (double)b[(i + 1) * sb];
    c2 += (double)a[(i + 2) * sa] * (double)b[(i + 2) * sb];
    c3 += (double)a[(i + 3) * sa] * (double)b[(i + 3) * sb];
  }
  for (; i < n; i++) c0 += (double)a[i * sa] * (double)b[i * sb];
  return (c0 + c1) + (c2 + c3);
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
    /* a warp: lane q adds blocks q, q + 32, ..., then the lanes in a
     * fixed tree (a fixed order: the same bits on every run) */
    double s = 0;
    for (int b = (int)e; b < nparts; b += 32) s += part_sse[b];
    s = warp_sum(s);
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

/* k_decoder_grad's blocks: a basis row each, then Wd's 8 x 8 tiles (and
 * with a loss to write one more, which writes it) */
const int kDgTile = 8;
__host__ __device__ inline unsigned grid_decoder_grad(const dims_t &d) {
  return (unsigned)(d.L + ((d.M + kDgTile - 1) / kDgTile) * ((d.S + kDgTile - 1) / kDgTile));
}
/* its dynamic shared memory: the larger of a dD^T row and a basis row's
 * gradient in double and Wd (blocks [0, L)), and a tile's F L x 8 of dD^T
 * (double) and of the basis with kSumLanes partial sums a weight (the
 * others) */
inline size_t smem_decoder_grad(const dims_t &d) {
  const size_t K = (size_t)d.F * d.L;
  const size_t row = sizeof(double) * (d.F * d.M + d.C) + sizeof(float) * d.M * d.S;
  const size_t tile = (sizeof(double) + sizeof(float)) * K * kDgTile +
                      sizeof(double) * kSumLanes * kDgTile * kDgTile;
  return row > tile ? row : tile;
}

/* The folded decoder's gradient taken back through the fold, once per step
 * from k_vjp_tc's blocks' dD^T summed (psum + P: L rows of F M), in double,
 * where each block had done it for its own part (two products as large as
 * a sixth of a group's each): the normalised basis's dB_f += dD^T_f Wd
 * (blocks [0, L), a basis row each) and dWd = sum over f of
 * (dD^T_f)^T B_f (the other blocks, a tile of 8 x 8 weights each,
 * kSumLanes threads a weight, each a quarter of the F L terms, added in
 * lane order), into psum's sums of the other terms (the blocks' dWd is
 * zero). The operands are staged in shared memory, a thread's loads in
 * flight together: read from L2 in the sums' loops, a trip each, the
 * kernel took 2.4 times as long (H200).
 * With gout (k_part_sum having written the other gradients there) it
 * writes these as floats to gout instead, each basis row's through the
 * normalisation (gnorm: the rows' norms) as k_update's UPD_GRAD_OUT does,
 * and with loss_out one more block writes the loss: the nparts blocks'
 * squared errors (part_sse) summed in a fixed order, times loss_scale. */
__global__ void __launch_bounds__(kThreads)
    k_decoder_grad(dims_t d, const float *__restrict__ P, const float *__restrict__ bn,
                   double *__restrict__ psum, const double *__restrict__ gnorm,
                   float *__restrict__ gout, const double *__restrict__ part_sse, int nparts,
                   float *__restrict__ loss_out, double loss_scale) {
  extern __shared__ double dg_smem[];
  const int FM = d.F * d.M, tid = threadIdx.x;
  const double *gdt = psum + d.P;
  if (blockIdx.x == grid_decoder_grad(d)) {
    /* as k_update's: lane q adds blocks q, q + 32, ..., then a fixed tree */
    if (tid < 32) {
      double s = 0;
      for (int b = tid; b < nparts; b += 32) s += part_sse[b];
      s = warp_sum(s);
      if (tid == 0) *loss_out = (float)(s * loss_scale);
    }
    return;
  }
  if ((int)blockIdx.x < d.L) {
    __shared__ double red[kThreads];
    const int l = blockIdx.x;
    const size_t o = d.off[4] + (size_t)l * d.C;
    double *row = dg_smem, *dB = row + FM;
    float *wd = reinterpret_cast<float *>(dB + d.C);
#pragma unroll 16
    for (int i = tid; i < d.M * d.S; i += kThreads) wd[i] = __ldg(P + d.off[9] + i);
    for (int c = tid; c < FM; c += kThreads) row[c] = gdt[(size_t)l * FM + c];
    __syncthreads();
    for (int c = tid; c < d.F * d.S; c += kThreads) {
      const int f = c / d.S, s = c % d.S;
      const double v = psum[o + c] + dot4(row + f * d.M, 1, wd + s, d.S, d.M);
      if (gout)
        dB[c] = v;
      else
        psum[o + c] = v;
    }
    if (gout) {
      basis_row_back(dB, P + o, gnorm[l], d.C, red);
      for (int c = tid; c < d.C; c += kThreads) gout[o + c] = (float)dB[c];
    }
    return;
  }
  const int K = d.F * d.L, nts = (d.S + kDgTile - 1) / kDgTile;
  const int tile = (int)blockIdx.x - d.L, m0 = tile / nts * kDgTile, s0 = tile % nts * kDgTile;
  /* k = f L + l: gt[k][j] = dD^T[l][f M + m0 + j], bt[k][j] = B[l][f S + s0 + j] */
  double *gt = dg_smem, *lanes = gt + K * kDgTile;
  float *bt = reinterpret_cast<float *>(lanes + kSumLanes * kDgTile * kDgTile);
#pragma unroll 8
  for (int i = tid; i < K * kDgTile; i += kThreads) {
    const int k = i / kDgTile, j = i % kDgTile, f = k / d.L, l = k % d.L;
    gt[i] = m0 + j < d.M ? gdt[(size_t)l * FM + f * d.M + m0 + j] : 0.0;
    bt[i] = s0 + j < d.S ? __ldg(bn + (size_t)l * d.C + f * d.S + s0 + j) : 0.f;
  }
  __syncthreads();
  const int per = (K + kSumLanes - 1) / kSumLanes;
  for (int i = tid; i < kSumLanes * kDgTile * kDgTile; i += kThreads) {
    const int q = i / (kDgTile * kDgTile), mj = i / kDgTile % kDgTile, sj = i % kDgTile;
    const int k0 = q * per, n = min(K, k0 + per) - k0;
    lanes[i] = dot4(gt + k0 * kDgTile + mj, kDgTile, bt + k0 * kDgTile + sj, kDgTile, n);
  }
  __syncthreads();
  for (int i = tid; i < kDgTile * kDgTile; i += kThreads) {
    const int m = m0 + i / kDgTile, s = s0 + i % kDgTile;
    if (m >= d.M || s >= d.S) continue;
    double v = lanes[i];
    for (int q = 1; q < kSumLanes; q++) v += lanes[q * kDgTile * kDgTile + i];
    const size_t o = d.off[9] + (size_t)m * d.S + s;
    if (gout)
      gout[o] = (float)(psum[o] + v);
    else
      psum[o] += v;
  }
}

/* Where queue_part_sums puts the step's gradient when no k_update follows
 * (k_vjp_tc's partials only): gout gets the complete gradient as floats,
 * through the basis's normalisation (gnorm: the rows' norms), and loss_out
 * (NULL: none) the nparts blocks' squared errors (part_sse) summed times
 * loss_scale. */
struct grad_dest {
  float *gout;
  const double *gnorm, *part_sse;
  float *loss_out;
  double loss_scale;
};

/* Queues the sums of the first nparts partial gradients at part (tc: made
 * by k_vjp_tc) into psum on s: k_part_sum, then for k_vjp_tc's
 * k_decoder_grad (params, bn: the parameters and the normalised basis the
 * step ran on); with out (tc only) the gradient and loss to out's places
 * instead. On a launch's failure, *what names it. */
inline cudaError_t queue_part_sums(const dims_t &d, bool tc, const float *part, int nparts,
                                   double *psum, const float *params, const float *bn,
                                   cudaStream_t s, const char **what,
                                   const grad_dest *out = NULL) {
  const int count = part_floats(d, tc);
  k_part_sum<<<grid_part_sum(count), kThreads, 0, s>>>(count, part, nparts, psum, d,
                                                       out ? out->gout : NULL);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    *what = "launching the gradient sum";
    return e;
  }
  if (!tc) return cudaSuccess;
  const grad_dest none = {NULL, NULL, NULL, NULL, 0};
  const grad_dest &o = out ? *out : none;
  k_decoder_grad<<<grid_decoder_grad(d) + (o.loss_out ? 1 : 0), kThreads, smem_decoder_grad(d),
                   s>>>(d, params, bn, psum, o.gnorm, o.gout, o.part_sse, nparts, o.loss_out,
                        o.loss_scale);
  e = cudaGetLastError();
  if (e != cudaSuccess) *what = "launching the decoder's gradient";
  return e;
}

__global__ void k_adam_only(adam_args a, size_t n, float *p, float *m, float *v,
                            const float *g) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) adam_one(a, p[i], m[i], v[i], g[i]);
}

}  // namespace

#endif
