/* warp_3xtf32: the opt-in tensor-core kernel (SSAE_CUDA_MATH=3xtf32 or
 * SSAE_CUDA_KERNEL=warp_3xtf32), M = S = 64, L = 32, 5 frames, sm_80 or
 * newer: the per-warp structure of warp_fp32 (every warp a 16-window tile
 * start to end,
 * weights in shared memory, the next slice's input prefetched into
 * registers, the last round's tiles 5 warps per tile), with the four
 * matrix products on mma.sync m16n8k8 TF32 in the 3xTF32 form: each fp32
 * operand v = big + small, big = tf32(v), small = tf32(v - big), and
 * a b ~ big_a big_b + big_a small_b + small_a big_b (the dropped
 * small_a small_b is 2^-22 of the product), accumulated in fp32.
 *
 * Products as C (rows x 16 windows) = A (rows x K) B (K x windows): A the
 * weights, in shared memory in fragment order (lane l's four values of
 * each 16 x 8 block in one 16-byte word); the encoder's split once at
 * load (both halves stored), the others split as they are read. B the
 * activations, k-major in the warp's buffer (row stride 24: the eight
 * groups of four lanes that read one fragment fall in distinct banks).
 * Fragments (PTX ISA, m16n8k8 .tf32), g = lane / 4, t = lane % 4:
 *   A: a[r] = (row g + 8 (r & 1), k t + 4 (r >> 1))
 *   B: b[r] = (k t + 4 r, column g)
 *   C: c[r] = (row g + 8 (r >> 1), column 2t + (r & 1))
 * LayerNorms, GELU (the 11-instruction form on k-scaled weights) and the
 * squared error stay in fp32 on the CUDA cores, as in warp_fp32.
 *
 * The activations' and the weights' small halves (but the encoder's, split
 * once at load) are left for the MMA to truncate (ssae_split_t): one
 * instruction fewer per operand, an error of 2^-21 of the operand. */
#ifndef SSAE_CUDA_WARP_3XTF32_CUH
#define SSAE_CUDA_WARP_3XTF32_CUH

#include "ssae_cuda_mma_tf32.cuh"
#include "ssae_cuda_warp_fp32.cuh"

#define SSAE_TC_LDB 24

/* Shared memory of ssae_warp_3xtf32_kernel, bytes. */
static inline size_t ssae_tc_smem(const ssae_cuda_layout *lo) {
  return ((size_t)ssae_tc_layout_of(lo).total + (size_t)SSAE_WARP_NW * 64 * SSAE_TC_LDB) *
         sizeof(float);
}

/* B fragments of k step ks for the two 8-window column blocks, split:
 * rows ks*8 + t (+4) of a k-major buffer. */
__device__ __forceinline__ void ssae_tc_bfrag(const float *buf, int ks, int g, int t,
                                              unsigned (&bb)[2][2], unsigned (&bs)[2][2]) {
#pragma unroll
  for (int nt = 0; nt < 2; nt++)
#pragma unroll
    for (int r = 0; r < 2; r++) {
      const float v = buf[(ks * 8 + t + 4 * r) * SSAE_TC_LDB + nt * 8 + g];
      ssae_split_t(v, bb[nt][r], bs[nt][r]);
    }
}

/* acc[mt][nt] += A B over KS k steps: A fragment (mt, ks) of an fp32
 * fragment-ordered matrix at af (MT row blocks), split here; B from the
 * k-major buffer rows b0.. */
template <int MT, int KS>
__device__ __forceinline__ void ssae_tc_gemm(float (&acc)[MT][2][4], const float *af,
                                             const float *b0, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll 2
  for (int ks = 0; ks < KS; ks++) {
    unsigned bb[2][2], bs[2][2];
    ssae_tc_bfrag(b0, ks, g, t, bb, bs);
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
      const float4 a = ssae_ld4(af + ((mt * KS + ks) * 32 + lane) * 4);
      unsigned ab[4], as[4];
      ssae_split_t(a.x, ab[0], as[0]);
      ssae_split_t(a.y, ab[1], as[1]);
      ssae_split_t(a.z, ab[2], as[2]);
      ssae_split_t(a.w, ab[3], as[3]);
#pragma unroll
      for (int nt = 0; nt < 2; nt++) ssae_mma3(acc[mt][nt], ab, as, bb[nt], bs[nt]);
    }
  }
}

template <int MT>
__device__ __forceinline__ void ssae_tc_zero(float (&acc)[MT][2][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int nt = 0; nt < 2; nt++)
#pragma unroll
      for (int r = 0; r < 4; r++) acc[mt][nt][r] = 0.f;
}

/* Accumulators of rows mt*16 + g (+8) set to their bias. */
template <int MT>
__device__ __forceinline__ void ssae_tc_bias(float (&acc)[MT][2][4], const float *b, int g) {
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    const float lo = b[mt * 16 + g], hi = b[mt * 16 + g + 8];
#pragma unroll
    for (int nt = 0; nt < 2; nt++) {
      acc[mt][nt][0] = acc[mt][nt][1] = lo;
      acc[mt][nt][2] = acc[mt][nt][3] = hi;
    }
  }
}

/* C fragments (optionally through GELU) into a k-major buffer from row r0. */
template <int MT, bool GELU>
__device__ __forceinline__ void ssae_tc_store(float *buf, int r0, const float (&acc)[MT][2][4],
                                              int g, int t) {
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int nt = 0; nt < 2; nt++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        float v0 = acc[mt][nt][2 * h], v1 = acc[mt][nt][2 * h + 1];
        if (GELU) {
          v0 = ssae_gelu_scaled(v0);
          v1 = ssae_gelu_scaled(v1);
        }
        *reinterpret_cast<float2 *>(buf + (r0 + mt * 16 + g + 8 * h) * SSAE_TC_LDB + nt * 8 +
                                    2 * t) = make_float2(v0, v1);
      }
}

/* FC: the frame count fixed at compile time (0: the model's). */
template <int FC>
__global__ void __launch_bounds__(SSAE_WARP_NW * 32, 1)
    ssae_warp_3xtf32_kernel(const float *__restrict__ wts, ssae_cuda_layout lo,
                            ssae_tc_layout tl, const float *__restrict__ x, size_t n,
                            float *__restrict__ scores, float *__restrict__ recon) {
  constexpr int NW = SSAE_WARP_NW, TW = SSAE_WARP_TW, LDB = SSAE_TC_LDB;
  extern __shared__ float4 smem4[];
  float *sm = reinterpret_cast<float *>(smem4);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int F = FC ? FC : lo.F, FM = 64 * F;
  const unsigned FULL = 0xffffffffu;
  /* The weights into fragment order, k-scaled for the 11-instruction GELU
   * as in warp_fp32 (ssae_warp_scale). Element e of a
   * fragment-ordered R x K matrix: word w = e / 4 = (mt * KS + ks) * 32 +
   * lane, r = e % 4: row mt*16 + lane/4 + 8 (r & 1), k ks*8 + lane%4 +
   * 4 (r >> 1). */
  {
    auto frag_rk = [](int e, int ksn, int &row, int &k) {
      const int w = e >> 2, r = e & 3, l = w & 31, blk = w >> 5;
      const int mt = blk / ksn, ks = blk % ksn;
      row = mt * 16 + (l >> 2) + 8 * (r & 1);
      k = ks * 8 + (l & 3) + 4 * (r >> 1);
    };
    auto wv = [&](int off) { return __ldg(wts + off) * ssae_warp_scale(lo, off >> 2); };
    const int nb = F * 2048;
    for (int e = tid; e < 4096; e += NW * 32) {
      int row, k;
      frag_rk(e, 8, row, k);
      unsigned b, s;
      ssae_split(wv(lo.we + k * 64 + row), b, s);
      sm[tl.web + e] = __uint_as_float(b);
      sm[tl.wes + e] = __uint_as_float(s);
    }
    for (int e = tid; e < nb; e += NW * 32) {
      const int f = e / 2048, ef = e % 2048;
      int row, k;
      frag_rk(ef, 8, row, k); /* 32 latent rows x 64 slice-latent k */
      sm[tl.bf + e] = wv(lo.bt + f * 2048 + k * 32 + row);
      frag_rk(ef, 4, row, k); /* 64 bands x 32 latent k */
      sm[tl.df + e] = wv(lo.dt + k * FM + f * 64 + row);
    }
    for (int e = tid; e < 1024; e += NW * 32) {
      int row, k;
      frag_rk(e, 4, row, k);
      sm[tl.wbf + e] = wv(lo.wbt + k * 32 + row);
    }
    for (int e = tid; e < 160; e += NW * 32)
      sm[tl.be + e] = e < 64 ? wv(lo.be + e) : e < 96 ? wv(lo.bb + e - 64) : wv(lo.bd + e - 96);
  }
  __syncthreads();
  const float *WeB = sm + tl.web, *WeS = sm + tl.wes, *BF = sm + tl.bf, *WbF = sm + tl.wbf;
  const float *DF = sm + tl.df, *be = sm + tl.be, *bb = sm + tl.bb, *bd = sm + tl.bd;
  float *buf = sm + tl.total + warp * (64 * LDB);
  const int g = lane >> 2, t = lane & 3;
  const int lw = lane & 15, lh = lane >> 4;
  const size_t ntiles = (n + TW - 1) / TW;
  const size_t stride = (size_t)gridDim.x * NW;

  auto tile_nv = [&](size_t tt) { return ssae_tile_nv(n, tt); };
  float4 pre[8];
  auto load_raw = [&](size_t tt, int f) { ssae_load_slice(pre, x, n, FM, tt, f, lw, lh); };
  /* LayerNorm and slice encoder; h_f back into buf (rows 0..63). */
  auto encode = [&]() {
    ssae_ln64_store(pre, buf, LDB, lw, lh);
    __syncwarp();
    float acc[4][2][4];
    ssae_tc_bias<4>(acc, be, g);
#pragma unroll 2
    for (int ks = 0; ks < 8; ks++) {
      unsigned bbf[2][2], bsf[2][2];
      ssae_tc_bfrag(buf, ks, g, t, bbf, bsf);
#pragma unroll
      for (int mt = 0; mt < 4; mt++) {
        const int w = ((mt * 8 + ks) * 32 + lane) * 4;
        const float4 a = ssae_ld4(WeB + w), s = ssae_ld4(WeS + w);
        const unsigned ab[4] = {__float_as_uint(a.x), __float_as_uint(a.y), __float_as_uint(a.z),
                                __float_as_uint(a.w)};
        const unsigned as[4] = {__float_as_uint(s.x), __float_as_uint(s.y), __float_as_uint(s.z),
                                __float_as_uint(s.w)};
#pragma unroll
        for (int nt = 0; nt < 2; nt++) ssae_mma3(acc[mt][nt], ab, as, bbf[nt], bsf[nt]);
      }
    }
    __syncwarp();
    ssae_tc_store<4, true>(buf, 0, acc, g, t);
    __syncwarp();
  };
  auto project = [&](int f, float (&zp)[2][2][4]) {
    ssae_tc_zero(zp);
    ssae_tc_gemm<2, 8>(zp, BF + f * 2048, buf, lane);
  };
  /* LayerNorm_L per window (column 2t + (r & 1) of block nt: rows on the
   * eight lanes of one t), zn into buf rows 0..31, then the bottleneck's
   * z' = GELU(Wb' zn + bb') into rows 32..63. */
  auto latent = [&](float (&z)[2][2][4]) {
#pragma unroll
    for (int nt = 0; nt < 2; nt++)
#pragma unroll
      for (int c = 0; c < 2; c++) {
        float s = (z[0][nt][c] + z[0][nt][c + 2]) + (z[1][nt][c] + z[1][nt][c + 2]);
        s += __shfl_xor_sync(FULL, s, 4);
        s += __shfl_xor_sync(FULL, s, 8);
        s += __shfl_xor_sync(FULL, s, 16);
        const float mean = s * (1.0f / 32.0f);
        float q = 0.f;
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
          for (int h = 0; h < 2; h++) {
            z[mt][nt][c + 2 * h] -= mean;
            q = fmaf(z[mt][nt][c + 2 * h], z[mt][nt][c + 2 * h], q);
          }
        q += __shfl_xor_sync(FULL, q, 4);
        q += __shfl_xor_sync(FULL, q, 8);
        q += __shfl_xor_sync(FULL, q, 16);
        const float rstd = rsqrtf(q * (1.0f / 32.0f) + 1e-5f);
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
          for (int h = 0; h < 2; h++) z[mt][nt][c + 2 * h] *= rstd;
      }
    ssae_tc_store<2, false>(buf, 0, z, g, t);
    __syncwarp();
    float acc[2][2][4];
    ssae_tc_bias<2>(acc, bb, g);
    ssae_tc_gemm<2, 4>(acc, WbF, buf, lane);
    ssae_tc_store<2, true>(buf, 32, acc, g, t);
    __syncwarp();
  };
  /* Decoder of slice f from z' (rows 32..63 of zb) and the squared error
   * against x: part[nt][c] for window nt*8 + 2t + c, summed over this
   * lane's bands. */
  auto decode = [&](int f, const float *zb, size_t base, int nv, float (&part)[2][2]) {
    float acc[4][2][4];
    ssae_tc_bias<4>(acc, bd, g);
    ssae_tc_gemm<4, 4>(acc, DF + f * 2048, zb + 32 * LDB, lane);
#pragma unroll
    for (int nt = 0; nt < 2; nt++)
#pragma unroll
      for (int c = 0; c < 2; c++) {
        const int w = nt * 8 + 2 * t + c;
        const float *xr = x + (base + (w < nv ? w : nv - 1)) * FM + f * 64 + g;
        float *yr = recon ? recon + (base + w) * FM + f * 64 + g : nullptr;
#pragma unroll
        for (int mt = 0; mt < 4; mt++)
#pragma unroll
          for (int h = 0; h < 2; h++) {
            const float y = acc[mt][nt][c + 2 * h];
            const float d = y - __ldg(xr + mt * 16 + 8 * h);
            part[nt][c] = fmaf(d, d, part[nt][c]);
            if (yr && w < nv) yr[mt * 16 + 8 * h] = y;
          }
      }
  };
  auto reduce_part = [&](float (&part)[2][2]) {
#pragma unroll
    for (int nt = 0; nt < 2; nt++)
#pragma unroll
      for (int c = 0; c < 2; c++) {
        part[nt][c] += __shfl_xor_sync(FULL, part[nt][c], 4);
        part[nt][c] += __shfl_xor_sync(FULL, part[nt][c], 8);
        part[nt][c] += __shfl_xor_sync(FULL, part[nt][c], 16);
      }
  };

  /* Tiles round the blocks first; a last round of at most one tile per
   * block is computed 5 warps per tile below (as in warp_fp32). */
  size_t tend = ntiles;
  {
    const size_t rem = ntiles % stride;
    if (ntiles >= stride && rem <= gridDim.x && F < NW) tend = ntiles - rem;
  }
  size_t tt = (size_t)warp * gridDim.x + blockIdx.x;
  if (tt < tend) load_raw(tt, 0);
  for (; tt < tend; tt += stride) {
    const size_t base = tt * TW;
    const int nv = tile_nv(tt);
    float z[2][2][4];
    ssae_tc_zero(z);
    for (int f = 0; f < F; f++) {
      encode();
      if (f + 1 < F) load_raw(tt, f + 1);
      float zp[2][2][4];
      project(f, zp);
#pragma unroll
      for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
          for (int r = 0; r < 4; r++) z[mt][nt][r] += zp[mt][nt][r];
      __syncwarp();
    }
    if (tt + stride < tend) load_raw(tt + stride, 0);
    latent(z);
    float part[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
    for (int f = 0; f < F; f++) decode(f, buf, base, nv, part);
    reduce_part(part);
    if (g == 0)
#pragma unroll
      for (int nt = 0; nt < 2; nt++)
#pragma unroll
        for (int c = 0; c < 2; c++) {
          const int w = nt * 8 + 2 * t + c;
          if (w < nv) scores[base + w] = part[nt][c] / (float)FM;
        }
    __syncwarp();
  }

  if (tend < ntiles && blockIdx.x < ntiles - tend && warp < F) {
    const size_t tc = tend + blockIdx.x;
    const size_t base = tc * TW;
    const int nv = tile_nv(tc);
    const unsigned nthr = 32u * (unsigned)F;
    float *const buf0 = sm + tl.total;
    load_raw(tc, warp);
    encode();
    float zp[2][2][4];
    project(warp, zp);
    __syncwarp();
    ssae_tc_store<2, false>(buf, 0, zp, g, t);
    asm volatile("bar.sync 1, %0;" ::"r"(nthr) : "memory");
    if (warp == 0) {
      float z[2][2][4];
      ssae_tc_zero(z);
      for (int f = 0; f < F; f++)
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
          for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
              const float2 v = *reinterpret_cast<const float2 *>(
                  buf0 + f * 64 * LDB + (mt * 16 + g + 8 * h) * LDB + nt * 8 + 2 * t);
              z[mt][nt][2 * h] += v.x;
              z[mt][nt][2 * h + 1] += v.y;
            }
      __syncwarp();
      latent(z);
    }
    asm volatile("bar.sync 1, %0;" ::"r"(nthr) : "memory");
    float part[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
    decode(warp, buf0, base, nv, part);
    reduce_part(part);
    /* Row w of warp F's buffer (not in this group: F < NW): warp 0's own
     * rows still hold z' while the others decode. */
    float *const scratch = buf0 + F * 64 * LDB;
    if (g == 0)
#pragma unroll
      for (int nt = 0; nt < 2; nt++)
#pragma unroll
        for (int c = 0; c < 2; c++) scratch[warp * LDB + nt * 8 + 2 * t + c] = part[nt][c];
    asm volatile("bar.sync 1, %0;" ::"r"(nthr) : "memory");
    if (warp == 0 && lane < TW) {
      float v = 0.f;
      for (int f = 0; f < F; f++) v += scratch[f * LDB + lane];
      if (lane < nv) scores[base + lane] = v / (float)FM;
    }
  }
}

#endif
