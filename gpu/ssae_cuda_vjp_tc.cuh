/* The tensor-core kernel of the VJP and of the CUDA trainer's gradient
 * steps (k_vjp_tc) for the default dimensions (M = S = 64, L = 32, 5
 * frames) on sm_80 or newer: the forward, or the forward again and the
 * backward from an upstream gradient or from the trainer's squared error,
 * of groups of 16 windows (contiguous, or gathered through an offset
 * table), every matrix product on mma.sync in the 3xTF32 form
 * (ssae_cuda_mma_tf32.cuh: fp32 accuracy), LayerNorms and GELU on the CUDA
 * cores (tc_ln1, tc_gelu: float forms as accurate as the gradients need,
 * see there). Included by
 * ssae_cuda_train_vjp.cu and ssae_cuda_train.cu after
 * ssae_cuda_train_kernels.cuh (dims_t, dev_w, warp_sum).
 *
 * Why not k_vjp / k_fwd_bwd: their products are one output per thread with
 * both operands from shared memory, about 8 % of the FMA pipes; at 65,536
 * windows the module's training step took 2.3x PyTorch's (cuBLAS) time, 0.55x
 * with this kernel (BENCHMARKS.md). What limits it now: block-wide stages
 * of 16 windows leave each warp little independent work (Nsight: 0.43
 * instructions issued per cycle per scheduler, the tensor pipe 21 % busy),
 * and it runs at 128 registers a thread (one block of 512 per SM), where a
 * small edit can make ptxas spill in the group loop (once 5 % of the
 * kernel): after a change, run tools/cuda-spills.py BUILD --kernel k_vjp_tc
 * (sm_90: 0 bytes spilled now; sm_80: 60) and measure (doc/gpu-kernels.md,
 * "The backward kernel").
 *
 * One block of 16 warps per SM takes groups of 16 windows (80 slices) in
 * turn. A group's activations live in shared memory, slice-major (a slice's
 * 64 values in a row of 68 floats: the A fragments' eight rows fall in
 * distinct banks), window-level ones in rows of 36. A product is a set of
 * 16 x 16 output tiles that the warps take in turn, operands read through
 * accessors (any layout or transpose; the weights are copied to shared
 * memory once per block); the four K = 320 products over the latent
 * (16 x 32 outputs) are split over k in eight parts summed in a fixed
 * order. The weight gradients (the four large matrices: 76 tiles of
 * 16 x 16) stay in registers across the block's groups, up to 5 per warp
 * (tile T of warp w: slot (T - w) / 16); biases' and LayerNorms' sums in
 * shared memory. Each block writes one partial gradient at the end, which
 * k_update sums in block order: no atomics, the same bits on every run. */
#ifndef SSAE_CUDA_VJP_TC_CUH
#define SSAE_CUDA_VJP_TC_CUH

#include "ssae_cuda_mma_tf32.cuh"

namespace {

const int kTcWarps = 16, kTcThreads = kTcWarps * 32;
const int kTcWin = 16;             /* windows per group */
const int kTcRows = kTcWin * 5;    /* slices per group */
const int kTcLd = 68, kTcLdw = 36; /* row strides: slice-level, window-level */
const int kTcSlots = 5;            /* gradient tile pairs per warp */
/* gradient tile pairs (16 x 16): decoder weight, bottleneck weight, basis,
 * encoder weight */
enum { TC_WD = 0, TC_WB = 16, TC_BN = 20, TC_WE = 60, TC_TILES = 76 };
/* sums kept in shared memory: LayerNorm 1 weight and bias, encoder bias,
 * LayerNorm 2 weight and bias, bottleneck bias, decoder bias */
enum { GA_LN1W = 0, GA_LN1B = 64, GA_BE = 128, GA_LN2W = 192, GA_LN2B = 224, GA_BB = 256,
       GA_BD = 288, GA_TOTAL = 352 };

/* Shared memory, floats: five slice arrays and seven window arrays (the
 * kernel names them), the split-k parts, LayerNorm 1's rstd, LayerNorm 2's,
 * the sums, LayerNorm 1's shifts and shifted means, then the weights:
 * encoder and decoder (64 rows of kTcLd), bottleneck (32 of kTcLdw), the normalised
 * basis (32 of kTcLdb). LayerNorm 1's output and xhat are made again from
 * the input once, where the backward needs them (the group's 20 KB of
 * input, in L2 by then), into two spent slice arrays: room for the
 * weights. */
const int kTcLdb = 324;
const int kTcSlice = kTcRows * kTcLd, kTcWinA = kTcWin * kTcLdw;
const int kTcSmemFloats = 5 * kTcSlice + 7 * kTcWinA + 8 * 512 + kTcRows + kTcWin + GA_TOTAL +
                          2 * kTcRows + 2 * 64 * kTcLd + 32 * kTcLdw + 32 * kTcLdb;

inline size_t tc_smem_bytes() { return sizeof(float) * (size_t)kTcSmemFloats; }

/* c[j] += A B over KS k steps of 8 from k0 for the two 16 x 8 tiles at
 * rows m0.., columns n0 + 8 j..: the A fragment serves both (operand
 * loads and splits are most of the instructions). Unrolled, so that the
 * loads of several steps are in flight. */
template <int KS, class FA, class FB>
__device__ __forceinline__ void tc_tile2(float (&c)[2][4], const FA &A, const FB &B, int m0,
                                         int n0, int k0, int g, int t) {
  /* the small terms in their own accumulators, added at the end: four
   * independent chains of MMAs instead of two chains of three */
  float cs[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
  for (int ks = 0; ks < KS; ks++) {
    const int k = k0 + 8 * ks;
    unsigned ab[4], as[4];
    ssae_split_t(A(m0 + g, k + t), ab[0], as[0]);
    ssae_split_t(A(m0 + g + 8, k + t), ab[1], as[1]);
    ssae_split_t(A(m0 + g, k + t + 4), ab[2], as[2]);
    ssae_split_t(A(m0 + g + 8, k + t + 4), ab[3], as[3]);
#pragma unroll
    for (int j = 0; j < 2; j++) {
      unsigned bb[2], bs[2];
      ssae_split_t(B(k + t, n0 + 8 * j + g), bb[0], bs[0]);
      ssae_split_t(B(k + t + 4, n0 + 8 * j + g), bb[1], bs[1]);
      ssae_mma(cs[j], as, bb);
      ssae_mma(cs[j], ab, bs);
      ssae_mma(c[j], ab, bb);
    }
  }
#pragma unroll
  for (int j = 0; j < 2; j++)
#pragma unroll
    for (int r = 0; r < 4; r++) c[j][r] += cs[j][r];
}

template <class FS>
__device__ __forceinline__ void tc_put(const float (&c)[4], const FS &S, int m0, int n0, int g,
                                       int t) {
  S(m0 + g, n0 + 2 * t, c[0]);
  S(m0 + g, n0 + 2 * t + 1, c[1]);
  S(m0 + g + 8, n0 + 2 * t, c[2]);
  S(m0 + g + 8, n0 + 2 * t + 1, c[3]);
}

template <class FS>
__device__ __forceinline__ void tc_put2(const float (&c)[2][4], const FS &S, int m0, int n0,
                                        int g, int t) {
  tc_put(c[0], S, m0, n0, g, t);
  tc_put(c[1], S, m0, n0 + 8, g, t);
}

/* Out (MR x NC) = A (MR x K) B (K x NC), each element through S(row, col,
 * value); the block's warps take the 16 x 16 tiles in turn. */
template <int MR, int NC, int K, class FA, class FB, class FS>
__device__ __forceinline__ void tc_gemm(const FA &A, const FB &B, const FS &S) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  constexpr int nt = NC / 16, items = (MR / 16) * nt;
  for (int it = warp; it < items; it += kTcWarps) {
    const int m0 = it / nt * 16, n0 = it % nt * 16;
    float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    tc_tile2<K / 8>(c, A, B, m0, n0, 0, g, t);
    tc_put2(c, S, m0, n0, g, t);
  }
}

/* The 16 x 32 products over K = 320: warp w takes columns 16 (w % 2)..,
 * k part w / 2 (of 40), into parts[part][16 x 32]; tc_k320_sum adds the
 * eight in order. */
template <class FA, class FB>
__device__ __forceinline__ void tc_gemm_k320(float *parts, const FA &A, const FB &B) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int n0 = (warp & 1) * 16, kp = warp >> 1;
  float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
  tc_tile2<5>(c, A, B, 0, n0, kp * 40, g, t);
  float *o = parts + kp * 512;
  tc_put2(c, [&](int r, int col, float v) { o[r * 32 + col] = v; }, 0, n0, g, t);
}

__device__ __forceinline__ float tc_k320_sum(const float *parts, int i) {
  float v = parts[i];
#pragma unroll
  for (int p = 1; p < 8; p++) v += parts[p * 512 + i];
  return v;
}

/* Out (80 x 64) = A (80 x 64) B (64 x 64), the slice-level products: of
 * the 20 tiles of 16 x 16 the warps take 0-15 whole and the last four
 * (rows 64-79) in quarters of k, summed in order through parts (4096
 * floats) after a barrier. Whole tiles only, 20 over 16 warps, took two
 * rounds where this takes 1.25 and a short pass. All threads call it. */
template <class FA, class FB, class FS>
__device__ __forceinline__ void tc_gemm_slices(const FA &A, const FB &B, const FS &S,
                                               float *parts) {
  static_assert(kTcRows == 80 && kTcWarps == 16, "the split below");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  {
    const int m0 = warp / 4 * 16, n0 = warp % 4 * 16;
    float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    tc_tile2<8>(c, A, B, m0, n0, 0, g, t);
    tc_put2(c, S, m0, n0, g, t);
  }
  {
    const int n0 = (warp >> 2) * 16, kq = warp & 3;
    float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    tc_tile2<2>(c, A, B, 64, n0, 16 * kq, g, t);
    float *o = parts + warp * 256;
    tc_put2(c, [&](int r, int col, float v) { o[(r - 64) * 16 + col - n0] = v; }, 64, n0, g, t);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 1024; i += kTcThreads) {
    const int tile = i >> 8, e = i & 255;
    const float *q = parts + tile * 1024 + e;
    S(64 + (e >> 4), tile * 16 + (e & 15), ((q[0] + q[256]) + q[512]) + q[768]);
  }
}

__device__ __forceinline__ float tc_sum32(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* GELU a Phi(a) and its derivative Phi(a) + a phi(a), with
 * Phi(-|a|) = erfc(z) / 2, z = |a| / sqrt(2), from the Chebyshev fit of
 * Numerical Recipes (erfcc: fractional error < 1.2e-7 everywhere) and
 * phi from the same exp(-z^2): two ex2 and a reciprocal in place of
 * normcdff and expf. The negative tail keeps its relative accuracy (no
 * 1 + erf); an error of ~2e-7 in Phi is far inside the gradients' 1e-4. */
__device__ __forceinline__ void tc_gelu(float a, float *h, float *d) {
  const float z = fabsf(a) * 0.70710678118654752f;
  const float t = __fdividef(1.0f, fmaf(0.5f, z, 1.0f));
  float p = fmaf(t, 0.17087277f, -0.82215223f);
  p = fmaf(t, p, 1.48851587f);
  p = fmaf(t, p, -1.13520398f);
  p = fmaf(t, p, 0.27886807f);
  p = fmaf(t, p, -0.18628806f);
  p = fmaf(t, p, 0.09678418f);
  p = fmaf(t, p, 0.37409196f);
  p = fmaf(t, p, 1.00002368f);
  p = fmaf(t, p, -1.26551223f);
  const float L2E = 1.4426950408889634f;
  const float e = exp2f(-(z * z) * L2E); /* exp(-a^2 / 2) */
  const float half = 0.5f * t * e * exp2f(p * L2E);
  const float cdf = a >= 0.f ? 1.0f - half : half;
  *h = a * cdf;
  *d = fmaf(a, 0.39894228040143268f * e, cdf);
}

/* acc (this warp's slots I0..I1) += A B for the gradient tile pairs
 * [LO, HI) (16 x 16 each) of an output NTN pairs wide, K = KS * 8. */
template <int I0, int I1, int LO, int HI, int NTN, int KS, class FA, class FB>
__device__ __forceinline__ void tc_grad(float (&acc)[kTcSlots][2][4], const FA &A, const FB &B) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = I0; i <= I1; i++) {
    const int T = warp + kTcWarps * i;
    if (T >= LO && T < HI) {
      const int e = T - LO;
      tc_tile2<KS>(acc[i], A, B, e / NTN * 16, e % NTN * 16, 0, g, t);
    }
  }
}

/* The backward of a 64 -> 64 Linear over the group's slices (slice
 * arrays of rows kTcLd, W in shared memory, [out][in] in rows of kTcLd):
 * the weight's gradient tiles [LO, HI) (slots I0..I1) += dout^T in,
 * din = dout W, and the bias's sums added to gbias[64] by warps 8 and 9
 * (parts: tc_gemm_slices'). */
template <int I0, int I1, int LO, int HI>
__device__ __forceinline__ void tc_linear_bwd(float (&acc)[kTcSlots][2][4], const float *dout,
                                              const float *in, const float *W, float *din,
                                              float *gbias, float *parts) {
  tc_grad<I0, I1, LO, HI, 4, kTcRows / 8>(
      acc, [&](int o, int s) { return dout[s * kTcLd + o]; },
      [&](int s, int i) { return in[s * kTcLd + i]; });
  tc_gemm_slices([&](int s, int o) { return dout[s * kTcLd + o]; },
                 [&](int o, int i) { return W[o * kTcLd + i]; },
                 [&](int s, int i, float v) { din[s * kTcLd + i] = v; }, parts);
  const int tid = threadIdx.x;
  if (tid >= 256 && tid < 320) {
    const int j = tid - 256;
    float a = 0.f;
    for (int s = 0; s < kTcRows; s++) a += dout[s * kTcLd + j];
    gbias[j] += a;
  }
}

/* LayerNorm of one row of 32 values (one warp, a value a lane): xhat and
 * the output to their rows; the rstd returned. Statistics in float after
 * subtracting the row's first value, as the inference kernels: the
 * differences of values that sit close together are exact, so nothing is
 * lost to cancellation, and no double arithmetic is left in the forward
 * (1/64 of the float rate on the sm_86 and sm_89 parts this kernel also
 * runs on). */
__device__ __forceinline__ float tc_ln_row32(float x, const float *__restrict__ gw,
                                             const float *__restrict__ gb, float *xh,
                                             float *out) {
  const int lane = threadIdx.x & 31;
  const float dv = x - __shfl_sync(0xffffffffu, x, 0);
  const float md = tc_sum32(dv) * (1.0f / 32);
  const float e = dv - md;
  const float rf = rsqrtf(tc_sum32(e * e) * (1.0f / 32) + 1e-5f);
  const float v = e * rf;
  xh[lane] = v;
  out[lane] = fmaf(v, __ldg(gw + lane), __ldg(gb + lane));
  return rf;
}

/* The input gradient of one LayerNorm row (as ln_bwd_dx): lane's values of
 * dout and xhat in, dx out. */
template <int PER>
__device__ __forceinline__ void tc_ln_bwd_row(const float (&dv)[PER], const float (&xh)[PER],
                                              float rstd, const float *__restrict__ gw,
                                              float (&dx)[PER]) {
  const int lane = threadIdx.x & 31;
  double s1 = 0, s2 = 0;
  float t[PER];
#pragma unroll
  for (int i = 0; i < PER; i++) {
    t[i] = dv[i] * __ldg(gw + lane + 32 * i);
    s1 += (double)t[i];
    s2 += (double)t[i] * xh[i];
  }
  const float m1 = (float)(warp_sum(s1) / (32 * PER)), m2 = (float)(warp_sum(s2) / (32 * PER));
#pragma unroll
  for (int i = 0; i < PER; i++) dx[i] = rstd * (t[i] - m1 - xh[i] * m2);
}

/* LayerNorm 1 of one value from its row's shift (its first value), mean
 * after the shift and rstd (tc_ln_row32's statistics): xhat and the
 * output, the same bits wherever the kernel computes them again. */
__device__ __forceinline__ void tc_ln1(float xv, float sh, float md, float rf, float gw,
                                       float gb, float &xh, float &u) {
  xh = ((xv - sh) - md) * rf;
  u = fmaf(xh, gw, gb);
}

/* What k_vjp_tc does: the forward (y_out gets the reconstruction); the
 * forward and the backward from the upstream gradient dyg (the input
 * gradient at dx when not NULL); or the forward and the backward of the
 * trainer's loss, the squared error scaled by s2 / 2 (block b's sum of
 * squared errors at part_sse[b]). With a backward, block b's partial
 * gradient goes to part + b * d.P. */
enum { TC_FORWARD = 0, TC_UPSTREAM = 1, TC_MSE = 2 };

/* n windows; window i at x + offs[i] (offs NULL: x + i * 320). */
__global__ void __launch_bounds__(kTcThreads, 1)
    k_vjp_tc(dims_t d, dev_w w, const float *__restrict__ x,
             const unsigned long long *__restrict__ offs, size_t n, int mode, float s2,
             const float *__restrict__ dyg, float *__restrict__ y_out, float *__restrict__ dx,
             float *__restrict__ part, double *__restrict__ part_sse) {
  extern __shared__ float4 smem_tc[];
  float *sm = reinterpret_cast<float *>(smem_tc);
  /* slice arrays: H the GELU output; G1 its derivative, then the encoder's
   * pre-GELU gradient; RR the LayerNorm 1 output (forward), then the
   * reconstruction codes; DY (the trainer's loss: the input first) the
   * output gradient, then LayerNorm 1's output gradient; DR the codes'
   * gradient, then LayerNorm 1's output again; H, once spent, xhat */
  float *H = sm, *G1 = H + kTcSlice, *RR = G1 + kTcSlice, *DY = RR + kTcSlice;
  float *DR = DY + kTcSlice, *U = RR;
  float *ZH = DR + kTcSlice, *V = ZH + kTcWinA, *ZP = V + kTcWinA, *G2 = ZP + kTcWinA;
  float *DZP = G2 + kTcWinA, *DV = DZP + kTcWinA, *DZ = DV + kTcWinA;
  float *SK = DZ + kTcWinA, *RS1 = SK + 8 * 512, *RS2 = RS1 + kTcRows, *GA = RS2 + kTcWin;
  float *SH1 = GA + GA_TOTAL, *MD1 = SH1 + kTcRows;
  float *WE = MD1 + kTcRows, *WD = WE + 64 * kTcLd;
  float *WB = WD + 64 * kTcLd, *BN = WB + 32 * kTcLdw;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const float *__restrict__ P = w.p;
  const float *ln1w = P + d.off[0], *ln1b = P + d.off[1];
  const float *be = P + d.off[3], *bbias = P + d.off[8], *bd = P + d.off[10];
  const size_t ngroups = (n + kTcWin - 1) / kTcWin;
  const bool grad = mode != TC_FORWARD;
  double sse = 0; /* TC_MSE: this warp's windows' squared errors */

  /* the weights, once per block */
  for (int i = tid; i < 4096; i += kTcThreads) {
    WE[(i >> 6) * kTcLd + (i & 63)] = __ldg(P + d.off[2] + i);
    WD[(i >> 6) * kTcLd + (i & 63)] = __ldg(P + d.off[9] + i);
  }
  for (int i = tid; i < 1024; i += kTcThreads)
    WB[(i >> 5) * kTcLdw + (i & 31)] = __ldg(P + d.off[7] + i);
  for (int i = tid; i < 32 * 320; i += kTcThreads)
    BN[(i / 320) * kTcLdb + i % 320] = __ldg(w.bn + i);
  float acc[kTcSlots][2][4];
#pragma unroll
  for (int i = 0; i < kTcSlots; i++)
#pragma unroll
    for (int j = 0; j < 8; j++) acc[i][j >> 2][j & 3] = 0.f;
  for (int i = tid; i < GA_TOTAL; i += kTcThreads) GA[i] = 0.f;
  __syncthreads();

  /* slice s's element j of a slice array; window wi's code cc (its slices
   * side by side) in one */
  auto sl = [](const float *a, int s, int j) { return a[s * kTcLd + j]; };
  auto code = [](int wi, int cc) { return (wi * 5 + (cc >> 6)) * kTcLd + (cc & 63); };
  /* window i's input */
  auto xwin = [&](size_t i) { return x + (offs ? offs[i] : i * 320); };
  /* LayerNorm 1's output of the group again, into U2, and xhat, into XH
   * (rows past the last window zero); a thread's loads of the input first,
   * five at a time (issued one after another they cost a trip to L2 each) */
  auto ln1_again = [&](size_t base, int R, float *U2, float *XH) {
    constexpr int IT = kTcRows * 64 / kTcThreads, CHUNK = 5;
    static_assert(kTcRows * 64 % kTcThreads == 0 && IT % CHUNK == 0, "whole rounds");
    const int j = tid & 63, s0 = tid >> 6; /* element s0 + 8 k of column j */
    const float w1 = __ldg(ln1w + j), b1 = __ldg(ln1b + j);
#pragma unroll 1
    for (int h = 0; h < IT; h += CHUNK) {
      float xv[CHUNK];
#pragma unroll
      for (int k = 0; k < CHUNK; k++) {
        const int s = s0 + 8 * (h + k);
        xv[k] = s < R ? __ldg(xwin(base + s / 5) + s % 5 * 64 + j) : 0.f;
      }
#pragma unroll
      for (int k = 0; k < CHUNK; k++) {
        const int s = s0 + 8 * (h + k);
        float xh = 0.f, u = 0.f;
        if (s < R) tc_ln1(xv[k], SH1[s], MD1[s], RS1[s], w1, b1, xh, u);
        U2[s * kTcLd + j] = u;
        XH[s * kTcLd + j] = xh;
      }
    }
  };

  for (size_t grp = blockIdx.x; grp < ngroups; grp += gridDim.x) {
    const size_t base = grp * kTcWin;
    const int nw = (int)(n - base < (size_t)kTcWin ? n - base : (size_t)kTcWin);
    const int R = nw * 5;
    /* slice s (< R) of the group's windows */
    auto xrow = [&](int s) { return xwin(base + s / 5) + s % 5 * 64; };

    /* LayerNorm 1, a warp per slice (five each, their loads first),
     * statistics in float after the slice's first band (tc_ln_row32's
     * reason); the rows past the last window zero */
    {
      constexpr int RW = kTcRows / kTcWarps;
      float xv[RW][2];
#pragma unroll
      for (int q = 0; q < RW; q++) {
        const int s = warp + kTcWarps * q;
        xv[q][0] = s < R ? __ldg(xrow(s) + lane) : 0.f;
        xv[q][1] = s < R ? __ldg(xrow(s) + lane + 32) : 0.f;
      }
#pragma unroll
      for (int q = 0; q < RW; q++) {
        const int s = warp + kTcWarps * q;
        const float sh = __shfl_sync(0xffffffffu, xv[q][0], 0);
        const float md = tc_sum32((xv[q][0] - sh) + (xv[q][1] - sh)) * (1.0f / 64);
        const float e0 = (xv[q][0] - sh) - md, e1 = (xv[q][1] - sh) - md;
        const float rf = rsqrtf(tc_sum32(fmaf(e0, e0, e1 * e1)) * (1.0f / 64) + 1e-5f);
        float xh, u0 = 0.f, u1 = 0.f;
        if (s < R) {
          tc_ln1(xv[q][0], sh, md, rf, __ldg(ln1w + lane), __ldg(ln1b + lane), xh, u0);
          tc_ln1(xv[q][1], sh, md, rf, __ldg(ln1w + lane + 32), __ldg(ln1b + lane + 32), xh, u1);
          if (lane == 0) {
            RS1[s] = rf;
            SH1[s] = sh;
            MD1[s] = md;
          }
        }
        U[s * kTcLd + lane] = u0;
        U[s * kTcLd + lane + 32] = u1;
        if (mode == TC_MSE) { /* the input kept for y - x (DY is free until then) */
          DY[s * kTcLd + lane] = xv[q][0];
          DY[s * kTcLd + lane + 32] = xv[q][1];
        }
      }
    }
    __syncthreads();
    /* the next group's input towards L2 (its LayerNorm 1 then waits for L2,
     * not for DRAM): a 128-byte line a thread */
    {
      const size_t nb = base + (size_t)gridDim.x * kTcWin;
      const int wi = tid / 10, line = tid % 10;
      if (tid < kTcWin * 10 && nb + wi < n) {
        const float *p = xwin(nb + wi) + line * 32;
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
      }
    }
    /* slice encoder: h = GELU(u We^T + be), GELU' kept, in the product's
     * epilogue (its last four tiles' on all the threads: tc_gemm_slices).
     * A pass of its own cost a barrier, and the compiler then spilled in
     * the group loop: ~4 % of the kernel (doc/gpu-kernels.md). */
    tc_gemm_slices(
        [&](int s, int k) { return sl(U, s, k); }, [&](int k, int o) { return WE[o * kTcLd + k]; },
        [&](int s, int o, float v) {
          const int e = s * kTcLd + o;
          tc_gelu(v + __ldg(be + o), &H[e], &G1[e]);
        },
        SK);
    __syncthreads();
    /* z = B c */
    tc_gemm_k320(
        SK, [&](int wi, int cc) { return H[code(wi, cc)]; },
        [&](int cc, int l) { return BN[l * kTcLdb + cc]; });
    __syncthreads();
    {
      const int wi = tid >> 5, l = tid & 31;
      DV[wi * kTcLdw + l] = tc_k320_sum(SK, tid);
    }
    __syncthreads();
    /* LayerNorm 2, a warp per window */
    {
      const float rf = tc_ln_row32(DV[warp * kTcLdw + lane], P + d.off[5], P + d.off[6],
                                   ZH + warp * kTcLdw, V + warp * kTcLdw);
      if (lane == 0) RS2[warp] = rf;
    }
    __syncthreads();
    /* bottleneck: z' = GELU(v Wb^T + bb); the product's two tiles on two
     * warps, the GELUs a thread each */
    tc_gemm<kTcWin, 32, 32>(
        [&](int wi, int k) { return V[wi * kTcLdw + k]; },
        [&](int k, int l) { return WB[l * kTcLdw + k]; },
        [&](int wi, int l, float v) { ZP[wi * kTcLdw + l] = v + __ldg(bbias + l); });
    __syncthreads();
    {
      const int e = (tid >> 5) * kTcLdw + (tid & 31);
      const float a = ZP[e];
      tc_gelu(a, &ZP[e], &G2[e]);
    }
    __syncthreads();
    /* r = B^T z', into the slices' rows */
    tc_gemm<kTcWin, 320, 32>(
        [&](int wi, int l) { return ZP[wi * kTcLdw + l]; },
        [&](int l, int cc) { return BN[l * kTcLdb + cc]; },
        [&](int wi, int cc, float v) { RR[code(wi, cc)] = v; });
    __syncthreads();

    if (!grad) {
      /* y = r Wd^T + bd */
      float *yg = y_out + base * 320;
      tc_gemm_slices(
          [&](int s, int k) { return sl(RR, s, k); },
          [&](int k, int m) { return WD[m * kTcLd + k]; },
          [&](int s, int m, float v) {
            if (s < R) yg[s * 64 + m] = v + __ldg(bd + m);
          },
          SK);
      __syncthreads();
      continue;
    }

    if (mode == TC_UPSTREAM) {
      /* the upstream gradient (zero past the last window) */
      const float *dg = dyg + base * 320;
      for (int i = tid; i < kTcRows * 64; i += kTcThreads) {
        const int s = i >> 6, m = i & 63;
        DY[s * kTcLd + m] = s < R ? __ldg(dg + i) : 0.f;
      }
      __syncthreads();
    } else {
      /* the loss's: y - x in the decoder product's epilogue (x in DY
       * since LayerNorm 1), then per window (a warp each) its squared
       * error in double and s2 (y - x); zero past the last window */
      tc_gemm_slices(
          [&](int s, int k) { return sl(RR, s, k); },
          [&](int k, int m) { return WD[m * kTcLd + k]; },
          [&](int s, int m, float v) {
            float *p = DY + s * kTcLd + m;
            *p = (v + __ldg(bd + m)) - *p;
          },
          SK);
      __syncthreads();
      double e = 0;
      float *dw = DY + warp * 5 * kTcLd;
      if (warp < nw) {
#pragma unroll
        for (int h = 0; h < 10; h++) {
          const int i = lane + 32 * h;
          float *p = dw + (i >> 6) * kTcLd + (i & 63);
          const float d = *p;
          e += (double)d * (double)d;
          *p = s2 * d;
        }
      } else {
        for (int i = lane; i < 320; i += 32) dw[(i >> 6) * kTcLd + (i & 63)] = 0.f;
      }
      sse += warp_sum(e);
      __syncthreads();
    }
    /* decoder: dWd += dy^T r, dbd, dr = dy Wd */
    tc_linear_bwd<0, 0, TC_WD, TC_WB>(acc, DY, RR, WD, DR, GA + GA_BD, SK);
    __syncthreads();
    /* dz' = B dr, times GELU' */
    tc_gemm_k320(
        SK, [&](int wi, int cc) { return DR[code(wi, cc)]; },
        [&](int cc, int l) { return BN[l * kTcLdb + cc]; });
    __syncthreads();
    {
      const int wi = tid >> 5, l = tid & 31;
      DZP[wi * kTcLdw + l] = tc_k320_sum(SK, tid) * G2[wi * kTcLdw + l];
    }
    __syncthreads();
    /* bottleneck Linear: dWb += dp^T v, dbb, dv = dp Wb */
    tc_grad<1, 1, TC_WB, TC_BN, 2, kTcWin / 8>(
        acc, [&](int l, int wi) { return DZP[wi * kTcLdw + l]; },
        [&](int wi, int k) { return V[wi * kTcLdw + k]; });
    tc_gemm<kTcWin, 32, 32>(
        [&](int wi, int l) { return DZP[wi * kTcLdw + l]; },
        [&](int l, int k) { return WB[l * kTcLdw + k]; },
        [&](int wi, int k, float v) { DV[wi * kTcLdw + k] = v; });
    if (warp == 8) {
      float a = 0.f;
      for (int wi = 0; wi < kTcWin; wi++) a += DZP[wi * kTcLdw + lane];
      GA[GA_BB + lane] += a;
    }
    __syncthreads();
    /* LayerNorm 2: its parameters, dz */
    if (tid < 32) {
      float gw = 0.f, gb = 0.f;
      for (int wi = 0; wi < kTcWin; wi++) {
        gw = fmaf(DV[wi * kTcLdw + tid], ZH[wi * kTcLdw + tid], gw);
        gb += DV[wi * kTcLdw + tid];
      }
      GA[GA_LN2W + tid] += gw;
      GA[GA_LN2B + tid] += gb;
    }
    {
      const float dv[1] = {DV[warp * kTcLdw + lane]}, zh[1] = {ZH[warp * kTcLdw + lane]};
      float dz[1];
      tc_ln_bwd_row<1>(dv, zh, RS2[warp], P + d.off[5], dz);
      DZ[warp * kTcLdw + lane] = dz[0];
    }
    __syncthreads();
    /* the basis from both uses: dB += z'^T dr + dz^T c; dc = dz B, times
     * GELU', in place of GELU' */
    tc_grad<1, 3, TC_BN, TC_WE, 20, kTcWin / 8>(
        acc, [&](int l, int wi) { return ZP[wi * kTcLdw + l]; },
        [&](int wi, int cc) { return DR[code(wi, cc)]; });
    tc_grad<1, 3, TC_BN, TC_WE, 20, kTcWin / 8>(
        acc, [&](int l, int wi) { return DZ[wi * kTcLdw + l]; },
        [&](int wi, int cc) { return H[code(wi, cc)]; });
    tc_gemm<kTcWin, 320, 32>(
        [&](int wi, int l) { return DZ[wi * kTcLdw + l]; },
        [&](int l, int cc) { return BN[l * kTcLdb + cc]; },
        [&](int wi, int cc, float v) {
          const int i = code(wi, cc);
          G1[i] = v * G1[i];
        });
    __syncthreads();
    float *U2 = DR; /* the codes' gradient is spent */
    ln1_again(base, R, U2, H); /* H is spent too: xhat there */
    __syncthreads();
    /* slice encoder Linear: dWe += da^T u, dbe, du = da We (into DY) */
    tc_linear_bwd<3, 4, TC_WE, TC_TILES>(acc, G1, U2, WE, DY, GA + GA_BE, SK);
    __syncthreads();
    /* LayerNorm 1: its parameters, and with dx the input gradient (xhat
     * from H, where ln1_again put it) */
    {
      constexpr int RW = kTcRows / kTcWarps;
      /* the parameters' sums per warp (its five rows), then over the warps */
      float gw[2] = {0.f, 0.f}, gb[2] = {0.f, 0.f};
#pragma unroll
      for (int q = 0; q < RW; q++) {
        const int s = warp + kTcWarps * q;
        if (s >= R) continue;
        float dv[2], xh[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
          dv[i] = sl(DY, s, lane + 32 * i);
          xh[i] = sl(H, s, lane + 32 * i);
          gw[i] = fmaf(dv[i], xh[i], gw[i]);
          gb[i] += dv[i];
        }
        if (dx) {
          float o[2];
          tc_ln_bwd_row<2>(dv, xh, RS1[s], ln1w, o);
          dx[(base * 5 + s) * 64 + lane] = o[0];
          dx[(base * 5 + s) * 64 + lane + 32] = o[1];
        }
      }
#pragma unroll
      for (int i = 0; i < 2; i++) {
        SK[warp * 128 + lane + 32 * i] = gw[i];
        SK[warp * 128 + 64 + lane + 32 * i] = gb[i];
      }
    }
    __syncthreads();
    if (tid < 128) {
      float a = 0.f;
#pragma unroll
      for (int q = 0; q < kTcWarps; q++) a += SK[q * 128 + tid];
      GA[(tid < 64 ? GA_LN1W : GA_LN1B - 64) + tid] += a;
    }
    __syncthreads();
  }
  if (!grad) return;
  if (mode == TC_MSE) {
    /* the warps' sums in warp order */
    double *red = reinterpret_cast<double *>(SK); /* the parts are spent */
    __syncthreads();
    if (lane == 0) red[warp] = sse;
    __syncthreads();
    if (tid == 0) {
      double b = 0;
      for (int q = 0; q < kTcWarps; q++) b += red[q];
      part_sse[blockIdx.x] = b;
    }
  }

  /* this block's partial gradient */
  float *pb = part + (size_t)blockIdx.x * d.P;
  {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < kTcSlots; i++) {
      const int T = warp + kTcWarps * i;
      if (T >= TC_TILES) continue;
      int e, ntn, cols, off;
      if (T < TC_WB) e = T - TC_WD, ntn = 4, cols = 64, off = d.off[9];
      else if (T < TC_BN) e = T - TC_WB, ntn = 2, cols = 32, off = d.off[7];
      else if (T < TC_WE) e = T - TC_BN, ntn = 20, cols = 320, off = d.off[4];
      else e = T - TC_WE, ntn = 4, cols = 64, off = d.off[2];
      float *o = pb + off;
      tc_put2(acc[i], [&](int r, int c, float v) { o[r * cols + c] = v; }, e / ntn * 16,
              e % ntn * 16, g, t);
    }
  }
  for (int i = tid; i < 64; i += kTcThreads) {
    pb[d.off[0] + i] = GA[GA_LN1W + i];
    pb[d.off[1] + i] = GA[GA_LN1B + i];
    pb[d.off[3] + i] = GA[GA_BE + i];
    pb[d.off[10] + i] = GA[GA_BD + i];
  }
  for (int i = tid; i < 32; i += kTcThreads) {
    pb[d.off[5] + i] = GA[GA_LN2W + i];
    pb[d.off[6] + i] = GA[GA_LN2B + i];
    pb[d.off[8] + i] = GA[GA_BB + i];
  }
}

}  // namespace

#endif
