/* The tensor-core kernel of the VJP and of the CUDA trainer's gradient
 * steps (k_vjp_tc) for the default dimensions (M = S = 64, L = 32, 5
 * frames) on sm_80 or newer: the forward, or the forward again and the
 * backward from an upstream gradient or from the trainer's squared error,
 * of groups of 16 windows (contiguous, or gathered through an offset
 * table), every matrix product on mma.sync in the 3xTF32 form
 * (ssae_cuda_mma_tf32.cuh: fp32 accuracy), LayerNorms and GELU on the CUDA
 * cores (tc_gelu: a float form as accurate as the gradients need, see
 * there). Included by ssae_cuda_train_vjp.cu and ssae_cuda_train.cu after
 * ssae_cuda_train_kernels.cuh (dims_t, dev_w, warp_sum) and
 * ssae_cuda_grad_sums.cuh (part_floats).
 *
 * It runs on the folded weights, as the inference kernels do, and takes the
 * gradients of those, turned into the parameters' gradients once per block
 * at the end:
 *   - the LayerNorms' scale and shift folded into the Linear after them
 *     (We' = We diag(g1), be' = be + We b1; Wb' likewise): the products take
 *     xhat and zhat, and dWe, dg1, db1 all follow from dWe' = sum da xhat^T
 *     and dbe' (dWe = dWe' diag(g1) + dbe' b1^T, dg1 = colsum(We o dWe'),
 *     db1 = We^T dbe'). Without an input gradient there is no 64 x 64
 *     product back to the LayerNorm's output and no LayerNorm backward.
 *   - the decoder folded into the basis, D^T = B_f Wd^T per slice f
 *     (32 x 320): y = z' D^T + bd is one 16 x 320 product over K = 32 where
 *     r = B^T z' and y = r Wd^T were two, and the decoder side's backward is
 *     dD^T += z'^T dy and dz' = dy D, where it was dWd += dy^T r, dr = dy Wd,
 *     dB += z'^T dr and dz' = B dr. Each block makes D^T; the blocks'
 *     dD^T, summed, is taken back once per step (k_decoder_grad): dWd =
 *     sum_f dD^T_f^T B_f and dB_f += dD^T_f Wd, where each block had
 *     taken its own back with two products at its end (2 % of the kernel
 *     at 65,536 windows).
 * About 211 kFLOP a window in the trainer's mode against 375 k unfolded.
 *
 * It runs at 128 registers a thread (one block of 512 per SM), where a
 * small edit can make ptxas spill in the group loop: after a change, run
 * tools/cuda-spills.py BUILD --kernel k_vjp_tc and measure (doc/gpu-kernels.md,
 * "The backward kernel").
 *
 * One block of 16 warps per SM takes groups of 16 windows (80 slices) in
 * turn. A group's activations live in shared memory, slice-major (a slice's
 * 64 values in a row of 68 floats), window-level ones in rows of 36: every
 * row stride is 4 mod 32 banks, where the fragments' 8-byte loads
 * (tc_tile2) fall in distinct banks. A product is a set of 16 x 16 output
 * tiles that the warps take in turn, operands read through views of any
 * layout or transpose (ssae_cuda_tc_tile.cuh, and tc_code below; the
 * folded weights are made in shared memory once per block); the K = 320
 * products over the latent (16 x 32 outputs) are split over k in eight
 * parts summed in a fixed order. The folded weights' gradients (the three
 * large matrices: 96 tiles of 16 x 16) stay in registers across the
 * block's groups, 6 per warp (tile T of warp w: slot (T - w) / 16); the
 * bottleneck's and the biases' sums in shared memory. Each block writes
 * one partial gradient at the end, which k_part_sum adds up in a fixed
 * order: no atomics, the same bits on every run.
 * The trainer's input (or an upstream gradient) for the next group is
 * copied into shared memory (cp.async) while the block works on this one.
 * The operands' tf32 halves are split by truncation (ssae_split_tt). */
#ifndef SSAE_CUDA_VJP_TC_CUH
#define SSAE_CUDA_VJP_TC_CUH

#include "ssae_cuda_layout.cuh"
#include "ssae_cuda_tc_tile.cuh"

namespace {

const int kTcWarps = 16, kTcThreads = kTcWarps * 32;
const int kTcWin = 16;             /* windows per group */
const int kTcRows = kTcWin * 5;    /* slices per group */
const int kTcLd = 68, kTcLdw = 36; /* row strides: slice-level, window-level */
const int kTcLdb = 324;            /* row stride of the 32 x 320 matrices */
const int kTcSlots = 6;            /* gradient tile pairs per warp */
/* gradient tiles (16 x 16) of the folded weights kept in registers: D^T
 * (32 x 320), the basis (32 x 320, its encoder-side use), We' (64 x 64);
 * Wb''s four in shared memory (GW), which makes it six a warp, not seven */
enum { TC_DT = 0, TC_BN = 40, TC_WE = 80, TC_TILES = 96 };
/* sums kept in shared memory: the folded encoder's and bottleneck's
 * biases, the decoder's bias */
enum { GA_BE = 0, GA_BB = 64, GA_BD = 96, GA_TOTAL = 160 };

/* Shared memory, floats: four slice arrays and six window arrays (the
 * kernel names them), the split-k parts, LayerNorm 1's and 2's rstd, the
 * sums, the folded biases (be', bb'), Wb''s gradient, then the folded
 * weights: encoder (64 rows of kTcLd), bottleneck (32 of kTcLdw), the
 * normalised basis and D^T (32 of kTcLdb each). At the end the gradient
 * tiles go to the start (the slice and window arrays and the parts:
 * kTcDump floats). */
const int kTcSlice = kTcRows * kTcLd, kTcWinA = kTcWin * kTcLdw;
/* The split-k parts: the K = 320 products' in rows of kTcLdk, the slice
 * products' tails in rows of kTcLdq (even: their 8-byte stores). */
const int kTcLdk = 36, kTcLdq = 20;
const int kTcParts = 16 * 16 * kTcLdq; /* >= 8 * 16 * kTcLdk */
static_assert(kTcParts >= 8 * 16 * kTcLdk, "the split-k parts");
const int kTcSmemFloats = 4 * kTcSlice + 6 * kTcWinA + kTcParts + kTcRows + kTcWin +
                          GA_TOTAL + 96 + 32 * 32 + 64 * kTcLd + 32 * kTcLdw + 2 * 32 * kTcLdb;
const int kTcDump = 2 * 32 * kTcLdb + 64 * 64;
static_assert(kTcDump <= 4 * kTcSlice + 6 * kTcWinA + kTcParts,
              "the gradients' room at the end");
static_assert(kTcSmemFloats * 4 <= 227 * 1024, "a block's shared memory on sm_90");

inline size_t tc_smem_bytes() { return sizeof(float) * (size_t)kTcSmemFloats; }

/* a slice array as windows' codes: window r's code c (its five slices side
 * by side) at p[(5 r + c / 64) * kTcLd + c % 64] */
struct tc_code {
  const float *p;
  static constexpr bool kPairCol = true;
  __device__ __forceinline__ static int idx(int r, int c) {
    return (r * 5 + (c >> 6)) * kTcLd + (c & 63);
  }
  __device__ __forceinline__ float at(int r, int c) const { return p[idx(r, c)]; }
  __device__ __forceinline__ float2 pair(int r, int c) const {
    return *reinterpret_cast<const float2 *>(p + idx(r, c));
  }
};

/* Out (MR x NC) = A (MR x K) B (K x NC), through S2 (column pairs,
 * tc_put2_v); the block's warps take the 16 x 16 tiles in turn, from warp
 * W0 (a product of a few tiles put on warps that have nothing else then). */
template <int MR, int NC, int K, int W0 = 0, class FA, class FB, class FS2>
__device__ __forceinline__ void tc_gemm(const FA &A, const FB &B, const FS2 &S2) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  constexpr int nt = NC / 16, items = (MR / 16) * nt;
  for (int it = (warp + kTcWarps - W0) % kTcWarps; it < items; it += kTcWarps) {
    const int m0 = it / nt * 16, n0 = it % nt * 16;
    float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    tc_tile2<K / 8, 2>(c, A, B, m0, n0, 0, g, t);
    tc_put2_v(c, S2, m0, n0, g, t);
  }
}

/* Out (16 x 320) = A (16 x 32) B (32 x 320), the window-level products
 * over the slices' codes, through S2 (column pairs, tc_put2_v): 40 blocks
 * of 16 x 8, warp w the two of columns 16 w.., the eight left over one
 * each on warps 0-7 (whole tiles, 20 on 16 warps, took two rounds on four;
 * in the basis's backward warps 0-7 also have a gradient tile fewer than
 * warps 8-15). */
template <class FA, class FB, class FS2>
__device__ __forceinline__ void tc_gemm_w320(const FA &A, const FB &B, const FS2 &S2) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  {
    float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    tc_tile2<4, 2>(c, A, B, 0, 16 * warp, 0, g, t);
    tc_put2_v(c, S2, 0, 16 * warp, g, t);
  }
  if (warp < 8) {
    const int n0 = 256 + 8 * warp;
    float c[1][4] = {{0.f, 0.f, 0.f, 0.f}};
    tc_tile2<4, 2, 1>(c, A, B, 0, n0, 0, g, t);
    tc_put_v(c[0], S2, 0, n0, g, t);
  }
}

/* A bias's gradient over the group's slices: the column sums of a slice
 * array (rows of LD) added to sum[64], by the last two warps (the others
 * are in a product then). */
template <int LD>
__device__ __forceinline__ void tc_bias_sum(const float *a, float *sum) {
  const int j = (int)threadIdx.x - (kTcThreads - 64);
  if (j < 0) return;
  float v = 0.f;
  for (int s = 0; s < kTcRows; s++) v += a[s * LD + j];
  sum[j] += v;
}

/* The folded decoder D^T_f = B_f Wd^T for the five slices f, into DT
 * (DT[l][64 f + m] = sum_s BN[l][64 f + s] Wd[m][s], Wd in rows of kTcLd):
 * 40 tiles of 16 x 16 that the warps take in turn, their operands read as
 * the group loop's are (8-byte pairs, in place). */
__device__ __forceinline__ void tc_fold_decoder(const float *BN, const float *Wd, float *DT) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  for (int it = warp; it < 40; it += kTcWarps) {
    const int f = it >> 3, m0 = (it >> 2 & 1) * 16, n0 = (it & 3) * 16;
    float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    tc_tile2<8>(c, tc_rm<kTcLdb>{BN + 64 * f}, tc_cm<kTcLd>{Wd}, m0, n0, 0, g, t);
    tc_put2_v(c, tc_st2<kTcLdb>{DT + 64 * f}, m0, n0, g, t);
  }
}

/* The 16 x 32 products over K = 320: warp w takes columns 16 (w % 2)..,
 * k part w / 2 of eight, into parts[part] (16 rows of kTcLdk); tc_k320_sum
 * adds the eight in order. The parts are five k steps each, or (SKEW, for
 * the stage where warps 0-7 also have a gradient tile more than warps 8-15)
 * four on warps 0-7 and six on warps 8-15. Unrolled by two (a step at a
 * time they took 1 % more of the kernel; whole, ptxas spills). */
template <bool SKEW, class FA, class FB>
__device__ __forceinline__ void tc_gemm_k320(float *parts, const FA &A, const FB &B) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int n0 = (warp & 1) * 16, kp = warp >> 1;
  float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
  if (!SKEW)
    tc_tile2<5, 2>(c, A, B, 0, n0, kp * 40, g, t);
  else if (kp < 4)
    tc_tile2<4, 2>(c, A, B, 0, n0, kp * 32, g, t);
  else
    tc_tile2<6, 2>(c, A, B, 0, n0, 128 + (kp - 4) * 48, g, t);
  tc_put2_v(c, tc_st2<kTcLdk>{parts + kp * (16 * kTcLdk)}, 0, n0, g, t);
}

__device__ __forceinline__ float tc_k320_sum(const float *parts, int i) {
  const float *q = parts + (i >> 5) * kTcLdk + (i & 31);
  float v = q[0];
#pragma unroll
  for (int p = 1; p < 8; p++) v += q[p * (16 * kTcLdk)];
  return v;
}

/* Out (80 x 64) = A (80 x 64) B (64 x 64), the slice-level products,
 * through S2 (column pairs, tc_put2_v): of the 20 tiles of 16 x 16 the
 * warps take 0-15 whole and the last four (rows 64-79) in quarters of k,
 * summed in order through parts (rows of kTcLdq) after a barrier. Whole
 * tiles only, 20 over 16 warps, took two rounds where this takes 1.25 and
 * a short pass. All threads call it. */
template <class FA, class FB, class FS2>
__device__ __forceinline__ void tc_gemm_slices(const FA &A, const FB &B, const FS2 &S2,
                                               float *parts) {
  static_assert(kTcRows == 80 && kTcWarps == 16 && kTcThreads == 512, "the split below");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  {
    const int m0 = warp / 4 * 16, n0 = warp % 4 * 16;
    float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    tc_tile2<8, 2>(c, A, B, m0, n0, 0, g, t);
    tc_put2_v(c, S2, m0, n0, g, t);
  }
  {
    const int n0 = (warp >> 2) * 16, kq = warp & 3;
    float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    tc_tile2<2>(c, A, B, 64, n0, 16 * kq, g, t);
    float *o = parts + warp * (16 * kTcLdq); /* part (tile, kq) */
    tc_put2_v(
        c,
        [&](int r, int col, float2 v) {
          *reinterpret_cast<float2 *>(o + (r - 64) * kTcLdq + col - n0) = v;
        },
        64, n0, g, t);
  }
  __syncthreads();
  { /* a column pair a thread: 4 tiles of 16 x 16 */
    const int i = threadIdx.x, tile = i >> 7, e = (i & 127) * 2;
    const float *q = parts + tile * (64 * kTcLdq) + (e >> 4) * kTcLdq + (e & 15);
    float2 v[4];
#pragma unroll
    for (int p = 0; p < 4; p++) v[p] = *reinterpret_cast<const float2 *>(q + p * (16 * kTcLdq));
    S2(64 + (e >> 4), tile * 16 + (e & 15),
       make_float2(((v[0].x + v[1].x) + v[2].x) + v[3].x, ((v[0].y + v[1].y) + v[2].y) + v[3].y));
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
      tc_tile2<KS, 2>(acc[i], A, B, e / NTN * 16, e % NTN * 16, 0, g, t);
    }
  }
}

/* The input gradient of one LayerNorm row whose scale is folded into the
 * product after it (a unit scale): lane's values of dxhat and xhat in, dx
 * out; the row's means in double. */
template <int PER>
__device__ __forceinline__ void tc_ln_bwd_row(const float (&dv)[PER], const float (&xh)[PER],
                                              float rstd, float (&dx)[PER]) {
  double s1 = 0, s2 = 0;
#pragma unroll
  for (int i = 0; i < PER; i++) {
    s1 += (double)dv[i];
    s2 += (double)dv[i] * xh[i];
  }
  const float m1 = (float)(warp_sum(s1) / (32 * PER)), m2 = (float)(warp_sum(s2) / (32 * PER));
#pragma unroll
  for (int i = 0; i < PER; i++) dx[i] = rstd * (dv[i] - m1 - xh[i] * m2);
}

/* A 16-byte copy from global to shared memory that lands while the block
 * works on (cp.async; complete after tc_cp_wait and a barrier). */
__device__ __forceinline__ void tc_cp16(float *dst, const float *src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(
                   (unsigned)__cvta_generic_to_shared(dst)),
               "l"(src)
               : "memory");
}
__device__ __forceinline__ void tc_cp_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
__device__ __forceinline__ void tc_cp_wait() {
  asm volatile("cp.async.wait_group 0;" ::: "memory");
}

/* The gradients of a LayerNorm's scale and shift at column k, from those of
 * the folded Linear after it (W, ROWS x N; dWf, its bias's dbf), in
 * double: the column sum of W o dWf, and (W^T dbf)[k]. */
template <int ROWS, int N>
__device__ __forceinline__ void tc_unfold_ln_col(const float *__restrict__ W, const float *dWf,
                                                 const float *dbf, int k, float *dg, float *db) {
  double a = 0, c = 0;
  for (int r = 0; r < ROWS; r++) {
    const double wv = __ldg(W + r * N + k);
    a += wv * dWf[r * N + k];
    c += wv * dbf[r];
  }
  *dg = (float)a;
  *db = (float)c;
}

/* What k_vjp_tc does: the forward (y_out gets the reconstruction); the
 * forward and the backward from the upstream gradient dyg (the input
 * gradient at dx when not NULL); or the forward and the backward of the
 * trainer's loss, the squared error scaled by s2 / 2 (block b's sum of
 * squared errors at part_sse[b]). With a backward, block b's partial
 * gradient goes to part + b * part_floats(d, true) (the basis's: of the
 * normalised basis, which k_update takes through the normalisation;
 * k_part_sum then k_decoder_grad sum and complete them). */
enum { TC_FORWARD = 0, TC_UPSTREAM = 1, TC_MSE = 2 };

/* n windows; window i at x + offs[i] (offs NULL: x + i * 320). */
__global__ void __launch_bounds__(kTcThreads, 1)
    k_vjp_tc(dims_t d, dev_w w, const float *__restrict__ x,
             const unsigned long long *__restrict__ offs, size_t n, int mode, float s2,
             const float *__restrict__ dyg, float *__restrict__ y_out, float *__restrict__ dx,
             float *__restrict__ part, double *__restrict__ part_sse) {
  extern __shared__ float4 smem_tc[];
  float *sm = reinterpret_cast<float *>(smem_tc);
  /* slice arrays: H the GELU output c; G1 its derivative, then the
   * encoder's pre-GELU gradient da; XH LayerNorm 1's xhat; DY (the
   * trainer's loss: the input first) the output gradient, then (with dx)
   * xhat's gradient. Window arrays: ZH LayerNorm 2's zhat, ZP z', G2 its
   * GELU', DZP dz' times G2, DV zhat's gradient, DZ dz. */
  float *H = sm, *G1 = H + kTcSlice, *XH = G1 + kTcSlice, *DY = XH + kTcSlice;
  float *ZH = DY + kTcSlice, *ZP = ZH + kTcWinA, *G2 = ZP + kTcWinA, *DZP = G2 + kTcWinA;
  float *DV = DZP + kTcWinA, *DZ = DV + kTcWinA;
  float *SK = DZ + kTcWinA, *RS1 = SK + kTcParts, *RS2 = RS1 + kTcRows, *GA = RS2 + kTcWin;
  float *FB = GA + GA_TOTAL; /* be' [64], bb' [32] */
  float *GW = FB + 96;       /* dWb' [32][32] */
  float *WE = GW + 32 * 32, *WB = WE + 64 * kTcLd, *BN = WB + 32 * kTcLdw, *DT = BN + 32 * kTcLdb;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const float *__restrict__ P = w.p;
  const float *ln1w = P + d.off[0], *ln1b = P + d.off[1], *We = P + d.off[2];
  const float *be = P + d.off[3], *ln2w = P + d.off[5], *ln2b = P + d.off[6];
  const float *Wb = P + d.off[7], *bbias = P + d.off[8], *Wd = P + d.off[9], *bd = P + d.off[10];
  const size_t ngroups = (n + kTcWin - 1) / kTcWin;
  const bool grad = mode != TC_FORWARD;
  double sse = 0; /* TC_MSE: this thread's squared errors */
  /* window i's input */
  auto xwin = [&](size_t i) { return x + (offs ? offs[i] : i * 320); };
  /* Group gi's rows copied into DY (cp.async): in the trainer's mode its
   * input, which LayerNorm 1 and y - x read there; from an upstream
   * gradient without dx, that gradient. Issued a group ahead, as soon as DY
   * is spent, so that they land while the block works (the input read from
   * global memory at LayerNorm 1, the loads' latency was a fifth of the
   * kernel's time). Rows past the last window zero; a row not 16-byte
   * aligned (a caller's tensor at an odd offset) by plain loads. */
  const bool staged = mode == TC_MSE || (mode == TC_UPSTREAM && !dx);
  auto fetch = [&](size_t gi) {
    const size_t b0 = gi * kTcWin;
    const int Rn = 5 * (int)(n - b0 < (size_t)kTcWin ? n - b0 : (size_t)kTcWin);
#pragma unroll 1
    for (int i = tid; i < kTcRows * 16; i += kTcThreads) {
      const int s = i >> 4, q = (i & 15) * 4;
      float *dst = DY + s * kTcLd + q;
      if (s < Rn) {
        /* contiguous windows: the group's rows one after another */
        const float *src = mode != TC_MSE ? dyg + (b0 * 320 + 4 * i)
                           : offs         ? xwin(b0 + s / 5) + s % 5 * 64 + q
                                          : x + (b0 * 320 + 4 * i);
        if (((size_t)src & 15) == 0) {
          tc_cp16(dst, src);
        } else {
#pragma unroll
          for (int k = 0; k < 4; k++) dst[k] = __ldg(src + k);
        }
      } else {
#pragma unroll
        for (int k = 0; k < 4; k++) dst[k] = 0.f;
      }
    }
    tc_cp_commit();
  };
  if (staged && blockIdx.x < ngroups) fetch(blockIdx.x);

  /* the folded weights, once per block, by the inference kernels' fold
   * (ssae_cuda_layout.cuh: the same bits); Wd into H for D^T below */
  for (int i = tid; i < 4096; i += kTcThreads) {
    const int o = i >> 6, k = i & 63;
    WE[o * kTcLd + k] = ssae_fold_ln_weight(We, ln1w, 64, 64, k * 64 + o);
    H[o * kTcLd + k] = __ldg(Wd + i);
  }
  for (int i = tid; i < 1024; i += kTcThreads) {
    const int l = i >> 5, k = i & 31;
    WB[l * kTcLdw + k] = ssae_fold_ln_weight(Wb, ln2w, 32, 32, k * 32 + l);
  }
  for (int i = tid; i < 32 * 320; i += kTcThreads)
    BN[(i / 320) * kTcLdb + i % 320] = __ldg(w.bn + i);
  if (tid < 64)
    FB[tid] = ssae_fold_ln_bias(We, ln1b, be, 64, tid);
  else if (tid < 96)
    FB[tid] = ssae_fold_ln_bias(Wb, ln2b, bbias, 32, tid - 64);
  float acc[kTcSlots][2][4];
#pragma unroll
  for (int i = 0; i < kTcSlots; i++)
#pragma unroll
    for (int j = 0; j < 8; j++) acc[i][j >> 2][j & 3] = 0.f;
  for (int i = tid; i < GA_TOTAL; i += kTcThreads) GA[i] = 0.f;
  for (int i = tid; i < 32 * 32; i += kTcThreads) GW[i] = 0.f;
  __syncthreads();
  /* D^T_f = B_f Wd^T: DT[l][64 f + m] = sum_s B[l][64 f + s] Wd[m][s] */
  tc_fold_decoder(BN, H, DT);
  tc_cp_wait();
  __syncthreads();

  for (size_t grp = blockIdx.x; grp < ngroups; grp += gridDim.x) {
    const size_t base = grp * kTcWin;
    const int nw = (int)(n - base < (size_t)kTcWin ? n - base : (size_t)kTcWin);
    const int R = nw * 5;
    /* slice s (< R) of the group's windows */
    auto xrow = [&](int s) { return xwin(base + s / 5) + s % 5 * 64; };

    /* LayerNorm 1's xhat, a warp per slice (five each, their loads first),
     * statistics in float after the slice's first band, as the inference
     * kernels (the differences of values that sit close together are
     * exact); the rows past the last window zero */
    {
      constexpr int RW = kTcRows / kTcWarps;
      float xv[RW][2];
#pragma unroll
      for (int q = 0; q < RW; q++) {
        const int s = warp + kTcWarps * q;
        if (mode == TC_MSE) { /* fetch's copy */
          xv[q][0] = DY[s * kTcLd + lane];
          xv[q][1] = DY[s * kTcLd + lane + 32];
        } else {
          xv[q][0] = s < R ? __ldg(xrow(s) + lane) : 0.f;
          xv[q][1] = s < R ? __ldg(xrow(s) + lane + 32) : 0.f;
        }
      }
#pragma unroll
      for (int q = 0; q < RW; q++) {
        const int s = warp + kTcWarps * q;
        const float sh = __shfl_sync(0xffffffffu, xv[q][0], 0);
        const float md = tc_sum32((xv[q][0] - sh) + (xv[q][1] - sh)) * (1.0f / 64);
        const float e0 = (xv[q][0] - sh) - md, e1 = (xv[q][1] - sh) - md;
        const float rf = rsqrtf(tc_sum32(fmaf(e0, e0, e1 * e1)) * (1.0f / 64) + 1e-5f);
        const bool in = s < R;
        XH[s * kTcLd + lane] = in ? e0 * rf : 0.f;
        XH[s * kTcLd + lane + 32] = in ? e1 * rf : 0.f;
        if (in && lane == 0) RS1[s] = rf;
      }
    }
    __syncthreads();
    /* the other modes: the next group's input towards L2 (its LayerNorm 1
     * then waits for L2, not for DRAM): a 128-byte line a thread */
    if (mode != TC_MSE) {
      const size_t nb = base + (size_t)gridDim.x * kTcWin;
      const int wi = tid / 10, line = tid % 10;
      if (tid < kTcWin * 10 && nb + wi < n) {
        const float *p = xwin(nb + wi) + line * 32;
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
      }
    }
    /* slice encoder: c = GELU(xhat We'^T + be'), GELU' kept, in the
     * product's epilogue (a pass of its own cost a barrier and made the
     * compiler spill: doc/gpu-kernels.md) */
    tc_gemm_slices(
        tc_rm<kTcLd>{XH}, tc_cm<kTcLd>{WE},
        [&](int s, int o, float2 v) {
          float2 h, d;
          tc_gelu(v.x + FB[o], &h.x, &d.x);
          tc_gelu(v.y + FB[o + 1], &h.y, &d.y);
          *reinterpret_cast<float2 *>(H + s * kTcLd + o) = h;
          *reinterpret_cast<float2 *>(G1 + s * kTcLd + o) = d;
        },
        SK);
    __syncthreads();
    /* z = B c */
    tc_gemm_k320<false>(SK, tc_code{H}, tc_cm<kTcLdb>{BN});
    __syncthreads();
    /* LayerNorm 2's zhat, a warp per window, from its z's eight parts (its
     * scale and shift are in Wb' and bb') */
    {
      const float z = tc_k320_sum(SK, tid);
      const float dv = z - __shfl_sync(0xffffffffu, z, 0);
      const float md = tc_sum32(dv) * (1.0f / 32);
      const float e = dv - md;
      const float rf = rsqrtf(tc_sum32(e * e) * (1.0f / 32) + 1e-5f);
      ZH[warp * kTcLdw + lane] = e * rf;
      if (lane == 0) RS2[warp] = rf;
    }
    __syncthreads();
    /* bottleneck: z' = GELU(zhat Wb'^T + bb'), GELU' kept: the product's
     * four 16 x 8 blocks on warps 0-3, the GELUs in its epilogue (a stage
     * of their own cost a barrier) */
    if (warp < 4) {
      float c[1][4] = {{0.f, 0.f, 0.f, 0.f}};
      tc_tile2<32 / 8, 2, 1>( /* K = 32 */
          c, tc_rm<kTcLdw>{ZH}, tc_cm<kTcLdw>{WB}, 0, 8 * warp, 0, g, t);
      tc_put(
          c[0],
          [&](int wi, int l, float v) {
            tc_gelu(v + FB[64 + l], &ZP[wi * kTcLdw + l], &G2[wi * kTcLdw + l]);
          },
          0, 8 * warp, g, t);
    }
    __syncthreads();

    if (!grad) {
      /* y = z' D^T + bd */
      float *yg = y_out + base * 320;
      tc_gemm_w320(
          tc_rm<kTcLdw>{ZP}, tc_rm<kTcLdb>{DT},
          [&](int wi, int cc, float2 v) {
            if (wi < nw) {
              yg[wi * 320 + cc] = v.x + __ldg(bd + (cc & 63));
              yg[wi * 320 + cc + 1] = v.y + __ldg(bd + (cc & 63) + 1);
            }
          });
      __syncthreads();
      continue;
    }

    if (mode == TC_UPSTREAM) {
      /* the upstream gradient (zero past the last window; fetch put it in
       * DY where there is no dx); y itself is not needed */
      if (dx) {
        const float *dg = dyg + base * 320;
        for (int i = tid; i < kTcRows * 64; i += kTcThreads) {
          const int s = i >> 6, m = i & 63;
          DY[s * kTcLd + m] = s < R ? __ldg(dg + i) : 0.f;
        }
        __syncthreads();
      }
    } else {
      /* the loss's, in the product's epilogue (x in DY since LayerNorm
       * 1): y - x, its square added to this thread's sum in double, and
       * s2 (y - x) in place; zero past the last window */
      tc_gemm_w320(
          tc_rm<kTcLdw>{ZP}, tc_rm<kTcLdb>{DT},
          [&](int wi, int cc, float2 v) {
            float2 *p = reinterpret_cast<float2 *>(DY + tc_code::idx(wi, cc));
            const float2 x2 = *p;
            const float d0 = (v.x + __ldg(bd + (cc & 63))) - x2.x;
            const float d1 = (v.y + __ldg(bd + (cc & 63) + 1)) - x2.y;
            if (wi < nw) {
              sse += (double)d0 * (double)d0;
              sse += (double)d1 * (double)d1;
              *p = make_float2(s2 * d0, s2 * d1);
            } else {
              *p = make_float2(0.f, 0.f);
            }
          });
      __syncthreads();
    }
    /* the folded decoder: dD^T += z'^T dy, dz' = dy D (times GELU' below),
     * dbd */
    tc_grad<0, 2, TC_DT, TC_BN, 20, kTcWin / 8>(acc, tc_cm<kTcLdw>{ZP}, tc_code{DY});
    tc_gemm_k320<true>(SK, tc_code{DY}, tc_cm<kTcLdb>{DT});
    tc_bias_sum<kTcLd>(DY, GA + GA_BD);
    __syncthreads();
    /* DY is spent: the next group's input into it */
    if (staged && grp + gridDim.x < ngroups) fetch(grp + gridDim.x);
    {
      const int wi = tid >> 5, l = tid & 31;
      DZP[wi * kTcLdw + l] = tc_k320_sum(SK, tid) * G2[wi * kTcLdw + l];
    }
    __syncthreads();
    /* the folded bottleneck: dWb' += dp^T zhat, dbb', dzhat = dp Wb' */
    if (warp < 4) { /* its tile warp of GW, read and written by that warp only */
      const int m0 = warp >> 1 << 4, n0 = (warp & 1) << 4;
      float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
      tc_tile2<kTcWin / 8>(c, tc_cm<kTcLdw>{DZP}, tc_rm<kTcLdw>{ZH}, m0, n0, 0, g, t);
      tc_put2_v(
          c,
          [&](int r, int k, float2 v) {
            float2 *p = reinterpret_cast<float2 *>(GW + r * 32 + k);
            const float2 o = *p;
            *p = make_float2(o.x + v.x, o.y + v.y);
          },
          m0, n0, g, t);
    }
    tc_gemm<kTcWin, 32, 32, 4>( /* on warps 4 and 5: 0-3 have GW's tiles */
        tc_rm<kTcLdw>{DZP}, tc_rm<kTcLdw>{WB}, tc_st2<kTcLdw>{DV});
    if (warp == 8) {
      float a = 0.f;
      for (int wi = 0; wi < kTcWin; wi++) a += DZP[wi * kTcLdw + lane];
      GA[GA_BB + lane] += a;
    }
    __syncthreads();
    /* LayerNorm 2's input gradient dz */
    {
      const float dv[1] = {DV[warp * kTcLdw + lane]}, zh[1] = {ZH[warp * kTcLdw + lane]};
      float dz[1];
      tc_ln_bwd_row<1>(dv, zh, RS2[warp], dz);
      DZ[warp * kTcLdw + lane] = dz[0];
    }
    __syncthreads();
    /* the basis's encoder-side use: dB += dz^T c; dc = dz B, times GELU',
     * in place of GELU' */
    tc_grad<2, 4, TC_BN, TC_WE, 20, kTcWin / 8>(acc, tc_cm<kTcLdw>{DZ}, tc_code{H});
    tc_gemm_w320(
        tc_rm<kTcLdw>{DZ}, tc_rm<kTcLdb>{BN},
        [&](int wi, int cc, float2 v) {
          float2 *p = reinterpret_cast<float2 *>(G1 + tc_code::idx(wi, cc));
          const float2 d = *p;
          *p = make_float2(v.x * d.x, v.y * d.y);
        });
    __syncthreads();
    /* the folded encoder: dWe' += da^T xhat, dbe' */
    tc_grad<5, 5, TC_WE, TC_TILES, 4, kTcRows / 8>(acc, tc_cm<kTcLd>{G1}, tc_rm<kTcLd>{XH});
    tc_bias_sum<kTcLd>(G1, GA + GA_BE);
    if (dx) {
      /* the input gradient: dxhat = da We' (into DY, spent), then
       * LayerNorm 1's backward a warp per slice */
      tc_gemm_slices(tc_rm<kTcLd>{G1}, tc_rm<kTcLd>{WE}, tc_st2<kTcLd>{DY}, SK);
      __syncthreads();
#pragma unroll 1
      for (int s = warp; s < R; s += kTcWarps) {
        const float dv[2] = {DY[s * kTcLd + lane], DY[s * kTcLd + lane + 32]};
        const float xh[2] = {XH[s * kTcLd + lane], XH[s * kTcLd + lane + 32]};
        float o[2];
        tc_ln_bwd_row<2>(dv, xh, RS1[s], o);
        dx[(base * 5 + s) * 64 + lane] = o[0];
        dx[(base * 5 + s) * 64 + lane + 32] = o[1];
      }
    }
    tc_cp_wait(); /* fetch's copies (long landed) before the barrier */
    __syncthreads();
  }
  if (!grad) return;
  if (mode == TC_MSE) {
    /* the warps' sums in warp order */
    double *red = reinterpret_cast<double *>(SK); /* the parts are spent */
    sse = warp_sum(sse);
    if (lane == 0) red[warp] = sse;
    __syncthreads();
    if (tid == 0) {
      double b = 0;
      for (int q = 0; q < kTcWarps; q++) b += red[q];
      part_sse[blockIdx.x] = b;
    }
    __syncthreads();
  }

  /* the folded weights' gradients into shared memory (everything from the
   * slice arrays to the parts is spent) */
  float *GDT = sm, *GB2 = GDT + 32 * kTcLdb, *GM = GB2 + 32 * kTcLdb, *GWB = GW;
#pragma unroll
  for (int i = 0; i < kTcSlots; i++) {
    const int T = warp + kTcWarps * i;
    if (T >= TC_TILES) continue;
    if (T < TC_BN)
      tc_put2(acc[i], [&](int r, int c, float v) { GDT[r * kTcLdb + c] = v; }, T / 20 * 16,
              T % 20 * 16, g, t);
    else if (T < TC_WE)
      tc_put2(acc[i], [&](int r, int c, float v) { GB2[r * kTcLdb + c] = v; },
              (T - TC_BN) / 20 * 16, (T - TC_BN) % 20 * 16, g, t);
    else
      tc_put2(acc[i], [&](int r, int c, float v) { GM[r * 64 + c] = v; }, (T - TC_WE) / 4 * 16,
              (T - TC_WE) % 4 * 16, g, t);
  }
  __syncthreads();

  /* this block's partial gradient (part_floats): the normalised basis's
   * encoder-side term, dD^T after the parameters (k_decoder_grad takes it
   * through the fold, to the basis and Wd, once for all blocks), Wd's own
   * zero */
  float *pb = part + (size_t)blockIdx.x * part_floats(d, true);
  for (int i = tid; i < 32 * 320; i += kTcThreads) {
    const int l = i / 320, c = i % 320;
    pb[d.off[4] + i] = GB2[l * kTcLdb + c];
    pb[d.P + i] = GDT[l * kTcLdb + c];
  }
  for (int i = tid; i < 4096; i += kTcThreads) pb[d.off[9] + i] = 0.f;
  /* the encoder and LayerNorm 1 from dWe' and dbe' (dWe = dWe' diag(g1) +
   * dbe' b1^T, dg1 and db1 by tc_unfold_ln_col); the bottleneck and
   * LayerNorm 2 from dWb' and dbb' likewise; in double */
  for (int i = tid; i < 4096; i += kTcThreads) {
    const int o = i >> 6, j = i & 63;
    pb[d.off[2] + i] = (float)((double)GM[i] * __ldg(ln1w + j) +
                               (double)GA[GA_BE + o] * __ldg(ln1b + j));
  }
  for (int i = tid; i < 1024; i += kTcThreads) {
    const int l = i >> 5, k = i & 31;
    pb[d.off[7] + i] = (float)((double)GWB[i] * __ldg(ln2w + k) +
                               (double)GA[GA_BB + l] * __ldg(ln2b + k));
  }
  if (tid < 64) {
    tc_unfold_ln_col<64, 64>(We, GM, GA + GA_BE, tid, pb + d.off[0] + tid, pb + d.off[1] + tid);
    pb[d.off[3] + tid] = GA[GA_BE + tid];
    pb[d.off[10] + tid] = GA[GA_BD + tid];
  } else if (tid < 96) {
    const int k = tid - 64;
    tc_unfold_ln_col<32, 32>(Wb, GWB, GA + GA_BB, k, pb + d.off[5] + k, pb + d.off[6] + k);
    pb[d.off[8] + k] = GA[GA_BB + k];
  }
}

}  // namespace

#endif
