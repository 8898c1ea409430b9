/* CUDA training backend (see ssae_cuda_train.h).
 *
 * Per Adam step two launches:
 *  - k_fwd_bwd: each block takes groups of WB windows (gathered straight
 *    from the frames on the device through an offset table), runs the
 *    forward pass keeping every activation in shared memory, then the
 *    backward pass, and writes its own partial gradient (w.r.t. the
 *    normalised basis for global_basis) and its sum of squared errors.
 *    A block that takes several groups adds them in group order, so the
 *    partials depend only on the batch and the grid size, which is a
 *    function of the batch size alone.
 *  - k_update: sums the partials in block order in double; one block per
 *    basis row takes the gradient through B = G/max(|G|, 1e-12) (as the CPU
 *    does, in double), applies Adam, and derives the next step's normalised
 *    basis and transposed weights (so the products read coalesced rows).
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

namespace {

const int kThreads = 256;     /* k_update (its block sums assume it) */
const int kFwdThreads = 512;  /* k_fwd_bwd: 16 warps hide the L1 and shared-memory latency */
/* Most partial gradients per step: a batch of more than kMaxBlocks*WB
 * windows has blocks take several groups. */
const int kMaxBlocks = 256;
const int kInflight = 4;
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
  float *xs = sm + ly.xs, *xhat = sm + ly.xhat, *u = sm + ly.u, *y = sm + ly.y;
  float *h = sm + ly.h, *gd1 = sm + ly.gd1, *rr = sm + ly.r, *dr = sm + ly.dr;
  float *rstd1 = sm + ly.rstd1, *z = sm + ly.z, *zhat = sm + ly.zhat, *v = sm + ly.v;
  float *zp = sm + ly.zp, *gd2 = sm + ly.gd2, *dzp = sm + ly.dzp, *dv = sm + ly.dv;
  float *dz = sm + ly.dz, *rstd2 = sm + ly.rstd2;
  double *wsse = (double *)(sm + ly.wsse);
  const int tid = threadIdx.x, T = blockDim.x;
  const int M = d.M, F = d.F, L = d.L, S = d.S, C = d.C, FM = F * M;
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
    /* slice encoder LayerNorm (its input gradient is not needed) */
    for (int m = tid; m < M; m += T) {
      float gw = 0, gb = 0;
      for (int r = 0; r < R; r++) {
        gw = fmaf(y[r * M + m], xhat[r * M + m], gw);
        gb += y[r * M + m];
      }
      put(pb, d.off[0] + m, gw, first);
      put(pb, d.off[1] + m, gb, first);
    }
    __syncthreads();
    first = false;
  }
  if (mode == MODE_GRAD && tid == 0) part_sse[blockIdx.x] = sse_blk;
}

/* Blocks [0, L): one basis row each; the rest: the other parameters, one
 * per thread. UPD_PREP derives the normalised basis and the transposes
 * from the parameters; UPD_GRAD_OUT writes the summed gradient to gout;
 * UPD_ADAM applies Adam, then prepares as UPD_PREP. */
__global__ void __launch_bounds__(kThreads)
    k_update(dims_t d, dev_w w, const float *__restrict__ part, int nparts,
             const double *__restrict__ part_sse, double *sse_out, int upd, adam_args a,
             float *__restrict__ gout) {
  __shared__ double red[kThreads];
  extern __shared__ double dB[];
  const int L = d.L, C = d.C, M = d.M, S = d.S, P = d.P, tid = threadIdx.x;
  if ((int)blockIdx.x < L) {
    const int l = blockIdx.x;
    const int o = d.off[4] + l * C;
    float *G = w.p + o;
    if (upd != UPD_PREP) {
      for (int c = tid; c < C; c += kThreads) {
        double acc = 0;
#pragma unroll 8
        for (int b = 0; b < nparts; b++) acc += part[(size_t)b * P + o + c];
        dB[c] = acc;
      }
      const double nrm = w.gnorm[l];
      if (nrm >= kNormEps) {
        double loc = 0;
        for (int c = tid; c < C; c += kThreads) loc += dB[c] * ((double)G[c] / nrm);
        const double dot = block_sum(loc, red);
        for (int c = tid; c < C; c += kThreads)
          dB[c] = (dB[c] - ((double)G[c] / nrm) * dot) / nrm;
      } else {
        for (int c = tid; c < C; c += kThreads) dB[c] /= kNormEps;
      }
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
  if (e == 0 && upd != UPD_PREP && sse_out) {
    double s = 0;
    for (int b = 0; b < nparts; b++) s += part_sse[b];
    *sse_out = s;
  }
  if (e >= (size_t)(P - L * C)) return;
  const int i = (int)e < d.off[4] ? (int)e : (int)e + L * C;
  float p = w.p[i];
  if (upd != UPD_PREP) {
    double acc = 0;
#pragma unroll 8
    for (int b = 0; b < nparts; b++) acc += part[(size_t)b * P + i];
    const float g = (float)acc;
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

/* ---- host side ------------------------------------------------------------ */

struct ctrain {
  dims_t d;
  size_t smem;
  int dev;
  cudaStream_t st;
  dev_w w;
  float *d_part;
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

/* Work that left the device in an unknown state is refused after. */
#define CHECK_BROKEN()                                                 \
  do {                                                                 \
    if (c->broken) return ssae_err_set(err, "%s", c->broken_msg);     \
  } while (0)

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
  cudaSetDevice(c->dev);
  free_sets(c);
  for (int i = 0; i < kInflight; i++)
    if (c->ev[i]) cudaEventDestroy(c->ev[i]);
  if (c->st) cudaStreamDestroy(c->st);
  void *dev_ptrs[] = {c->w.p,   c->w.m,    c->w.v,    c->w.bn,  c->w.bnt, c->w.enct,
                      c->w.bnwt, c->w.dect, c->w.gnorm, c->d_part, c->d_psse, c->d_gout,
                      c->d_sse, c->d_x,    c->d_sc};
  for (size_t i = 0; i < sizeof dev_ptrs / sizeof *dev_ptrs; i++) cudaFree(dev_ptrs[i]);
  cudaFreeHost(c->h_sse);
  free(c);
}

unsigned grid_update(const dims_t &d) {
  return (unsigned)(d.L + (d.P - d.L * d.C + kThreads - 1) / kThreads);
}

int launch_update(ctrain *c, int upd, int nparts, double *sse_out, const adam_args &a,
                  ssae_err *err) {
  k_update<<<grid_update(c->d), kThreads, sizeof(double) * (size_t)c->d.C, c->st>>>(
      c->d, c->w, c->d_part, nparts, c->d_psse, sse_out, upd, a, c->d_gout);
  CK(cudaGetLastError(), "launching the update kernel");
  return 0;
}

unsigned grid_for(const ctrain *c, size_t n, int grad) {
  const size_t groups = (n + c->d.wb - 1) / c->d.wb;
  const size_t cap = grad ? (size_t)kMaxBlocks : (size_t)65535;
  return (unsigned)(groups < cap ? groups : cap);
}

/* Queues forward (+ backward) of n windows. */
int launch_fwd(ctrain *c, const float *data, const unsigned long long *offs, size_t n,
               double scale, int mode, float *scores, ssae_err *err) {
  const float s2 = 2.0f * (float)scale;
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
  CHECK_BROKEN();
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
  CHECK_BROKEN();
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
  CHECK_BROKEN();
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
  CHECK_BROKEN();
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
  CHECK_BROKEN();
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
  CHECK_BROKEN();
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
  CHECK_BROKEN();
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
  d.M = dm->n_mels;
  d.F = dm->frames;
  d.L = dm->latent;
  d.S = dm->slice_latent;
  d.C = d.F * d.S;
  size_t off[SSAE_N_TENSORS + 1];
  ssae_param_offsets(dm, off);
  for (int i = 0; i <= SSAE_N_TENSORS; i++) d.off[i] = (int)off[i];
  d.P = (int)off[SSAE_N_TENSORS];

#define CKN(call, what)          \
  do {                           \
    cudaError_t e_ = (call);     \
    if (e_ != cudaSuccess) {     \
      cfail(c, err, what, e_);   \
      destroy(c);                \
      return NULL;               \
    }                            \
  } while (0)
  c->dev = 0;
  CKN(cudaSetDevice(0), "selecting device 0");
  cudaDeviceProp prop;
  CKN(cudaGetDeviceProperties(&prop, 0), "reading device properties");
  /* Windows per group: the most of 4, 2, 1 whose activations fit in shared
   * memory (SSAE_CUDA_TRAIN_WB overrides, for benchmarks). Fixed per
   * dimensions and device, so runs repeat bit for bit. */
  int want = 4;
  const char *wbe = getenv("SSAE_CUDA_TRAIN_WB");
  if (wbe && atoi(wbe) >= 1 && atoi(wbe) <= 32) want = atoi(wbe);
  d.wb = 0;
  for (int wb = want; wb >= 1; wb /= 2) {
    d.wb = wb;
    const size_t bytes = sizeof(float) * (size_t)make_lay(d).total;
    if (bytes <= prop.sharedMemPerBlockOptin) {
      c->smem = bytes;
      break;
    }
    d.wb = 0;
  }
  if (d.wb == 0 || sizeof(double) * (size_t)d.C > 48 * 1024) {
    ssae_err_set(err, "CUDA: model dimensions too large for training in the GPU's shared "
                 "memory (use --backend cpu)");
    destroy(c);
    return NULL;
  }
  CKN(cudaFuncSetAttribute(k_fwd_bwd, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           (int)c->smem),
      "raising the kernel's shared-memory limit");
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
  CKN(cudaMalloc(&c->d_part, sizeof(float) * P * kMaxBlocks), "allocating partial gradients");
  CKN(cudaMalloc(&c->d_psse, sizeof(double) * kMaxBlocks), "allocating partial losses");
  CKN(cudaMalloc(&c->d_gout, sizeof(float) * P), "allocating the gradient");
  CKN(cudaMalloc(&c->d_sse, sizeof(double)), "allocating the loss");
  CKN(cudaMallocHost(&c->h_sse, sizeof(double)), "allocating pinned memory");
  c->sse_cap = 1;
  CKN(cudaMemset(c->w.m, 0, sizeof(float) * P), "clearing Adam");
  CKN(cudaMemset(c->w.v, 0, sizeof(float) * P), "clearing Adam");
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
