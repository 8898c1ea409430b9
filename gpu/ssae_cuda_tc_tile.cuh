/* The tensor-core tile of the training kernel (k_vjp_tc,
 * ssae_cuda_vjp_tc.cuh) and of tools/bench/mma_rate: a warp's 16 x 8 or
 * 16 x 16 output block of a product in 3xTF32 on mma.sync m16n8k8
 * (ssae_cuda_mma_tf32.cuh), its operands read from shared memory through
 * views of any layout, its output put back through a caller's store. */
#ifndef SSAE_CUDA_TC_TILE_CUH
#define SSAE_CUDA_TC_TILE_CUH

#include "ssae_cuda_mma_tf32.cuh"

namespace {

/* Operands in shared memory, as views: at(r, c), the element (r, c), and
 * pair(r, c), it and its neighbour in memory as one 8-byte load: (r, c + 1)
 * for views whose pairs run along c (kPairCol), (r + 1, c) otherwise; pair
 * is only asked for at even r (columns) or even c (rows). */
template <int LD, bool ROW_MAJOR>
struct tc_view { /* (r, c) at p[r * LD + c] (row-major) or p[c * LD + r] */
  const float *p;
  static constexpr bool kPairCol = ROW_MAJOR;
  __device__ __forceinline__ int idx(int r, int c) const {
    return ROW_MAJOR ? r * LD + c : c * LD + r;
  }
  __device__ __forceinline__ float at(int r, int c) const { return p[idx(r, c)]; }
  __device__ __forceinline__ float2 pair(int r, int c) const {
    return *reinterpret_cast<const float2 *>(p + idx(r, c));
  }
};
template <int LD>
using tc_rm = tc_view<LD, true>;
template <int LD>
using tc_cm = tc_view<LD, false>;
/* c[j] += A B over KS k steps of 8 from k0 for the NJ (two or one)
 * 16 x 8 tiles of the output block at m0, n0 (16 x 8 NJ): the A fragment
 * serves them all (operand loads and splits are most of the
 * instructions). Unrolled U steps at a time, so that the loads of several
 * steps are in flight (the products in the group loop take 2: unrolled
 * whole, ptxas spilled 124 bytes, and it was no faster,
 * doc/gpu-kernels.md).
 *
 * The fragments' rows, columns and k are permuted (the MMA does not care
 * which k it sums in which lane, nor which row or column is which as long
 * as the output is put back by the same map, tc_put): lane (g, t) takes
 * rows m0 + 2g and m0 + 2g + 1 (the fragment's g and g + 8), k steps
 * k + 2t and k + 2t + 1 (its t and t + 4) and, with NJ = 2, columns
 * n0 + 2g + j (tile j's g), so that each pair of a fragment's values is
 * adjacent in memory whichever way the operand is laid out: one 8-byte
 * load where there were two of 4, and with row strides of 4 mod 32 banks
 * the half-warps' 8-byte loads fall in 32 distinct banks. */
template <int KS, int U = KS, int NJ = 2, class FA, class FB>
__device__ __forceinline__ void tc_tile2(float (&c)[NJ][4], const FA &A, const FB &B, int m0,
                                         int n0, int k0, int g, int t) {
  /* the small terms in their own accumulators, added at the end: four
   * independent chains of MMAs instead of two chains of three */
  float cs[NJ][4];
#pragma unroll
  for (int j = 0; j < NJ; j++)
#pragma unroll
    for (int r = 0; r < 4; r++) cs[j][r] = 0.f;
  const int m = m0 + 2 * g, n = NJ == 2 ? n0 + 2 * g : n0 + g;
#pragma unroll U
  for (int ks = 0; ks < KS; ks++) {
    const int k = k0 + 8 * ks + 2 * t;
    float a[4], b[NJ][2];
    if (FA::kPairCol) { /* (m, k) (m, k + 1); (m + 1, k) (m + 1, k + 1) */
      const float2 u = A.pair(m, k), v = A.pair(m + 1, k);
      a[0] = u.x, a[2] = u.y, a[1] = v.x, a[3] = v.y;
    } else { /* (m, k) (m + 1, k); (m, k + 1) (m + 1, k + 1) */
      const float2 u = A.pair(m, k), v = A.pair(m, k + 1);
      a[0] = u.x, a[1] = u.y, a[2] = v.x, a[3] = v.y;
    }
    if (!FB::kPairCol) { /* (k, n + j) (k + 1, n + j) */
#pragma unroll
      for (int j = 0; j < NJ; j++) {
        const float2 u = B.pair(k, n + j);
        b[j][0] = u.x, b[j][1] = u.y;
      }
    } else if (NJ == 2) { /* (k, n) (k, n + 1); (k + 1, n) (k + 1, n + 1) */
      const float2 u = B.pair(k, n), v = B.pair(k + 1, n);
      b[0][0] = u.x, b[NJ - 1][0] = u.y, b[0][1] = v.x, b[NJ - 1][1] = v.y;
    } else {
      b[0][0] = B.at(k, n), b[0][1] = B.at(k + 1, n);
    }
    unsigned ab[4], as[4];
#pragma unroll
    for (int r = 0; r < 4; r++) ssae_split_tt(a[r], ab[r], as[r]);
#pragma unroll
    for (int j = 0; j < NJ; j++) {
      unsigned bb[2], bs[2];
      ssae_split_tt(b[j][0], bb[0], bs[0]);
      ssae_split_tt(b[j][1], bb[1], bs[1]);
      ssae_mma(cs[j], as, bb);
      ssae_mma(cs[j], ab, bs);
      ssae_mma(c[j], ab, bb);
    }
  }
#pragma unroll
  for (int j = 0; j < NJ; j++)
#pragma unroll
    for (int r = 0; r < 4; r++) c[j][r] += cs[j][r];
}

/* The output of tc_tile2 through S(row, column, value), by its map: lane
 * (g, t)'s rows m0 + 2g and m0 + 2g + 1; its columns n0 + 2t and
 * n0 + 2t + 1 (NJ = 1), or tile j's n0 + 4t + j and n0 + 4t + 2 + j. */
template <class FS>
__device__ __forceinline__ void tc_put(const float (&c)[4], const FS &S, int m0, int n0, int g,
                                       int t) {
  const int m = m0 + 2 * g, n = n0 + 2 * t;
  S(m, n, c[0]);
  S(m, n + 1, c[1]);
  S(m + 1, n, c[2]);
  S(m + 1, n + 1, c[3]);
}

template <class FS>
__device__ __forceinline__ void tc_put2(const float (&c)[2][4], const FS &S, int m0, int n0,
                                        int g, int t) {
  const int m = m0 + 2 * g, n = n0 + 4 * t;
#pragma unroll
  for (int j = 0; j < 2; j++) {
    S(m, n + j, c[j][0]);
    S(m, n + 2 + j, c[j][1]);
    S(m + 1, n + j, c[j][2]);
    S(m + 1, n + 2 + j, c[j][3]);
  }
}

/* The same as pairs of adjacent columns, S2(row, column, (value, next)):
 * one 8-byte store where the map's scalar stores would put four lanes in
 * a bank (rows 2g apart in strides of 4 mod 32 banks). */
template <class FS2>
__device__ __forceinline__ void tc_put_v(const float (&c)[4], const FS2 &S2, int m0, int n0,
                                         int g, int t) {
  const int m = m0 + 2 * g, n = n0 + 2 * t;
  S2(m, n, make_float2(c[0], c[1]));
  S2(m + 1, n, make_float2(c[2], c[3]));
}

template <class FS2>
__device__ __forceinline__ void tc_put2_v(const float (&c)[2][4], const FS2 &S2, int m0, int n0,
                                          int g, int t) {
  const int m = m0 + 2 * g, n = n0 + 4 * t;
  S2(m, n, make_float2(c[0][0], c[1][0]));
  S2(m, n + 2, make_float2(c[0][1], c[1][1]));
  S2(m + 1, n, make_float2(c[0][2], c[1][2]));
  S2(m + 1, n + 2, make_float2(c[0][3], c[1][3]));
}

/* a plain 8-byte store at p + r * LD + c, as an S2 */
template <int LD>
struct tc_st2 {
  float *p;
  __device__ __forceinline__ void operator()(int r, int c, float2 v) const {
    *reinterpret_cast<float2 *>(p + r * LD + c) = v;
  }
};

}  // namespace

#endif
