/* tiled32 / tiled64 / tiled128: the large-batch kernels for GPUs (or frame
 * counts) where warp_fp32's per-warp buffers do not fit in shared memory.
 * A persistent block per SM holds the folded weights and walks tiles of TW
 * windows, every phase in lock-step behind __syncthreads. */
#ifndef SSAE_CUDA_TILED_CUH
#define SSAE_CUDA_TILED_CUH

#include "ssae_cuda_common.cuh"

#define SSAE_TILED_THREADS 256

template <int V>
__device__ __forceinline__ void ssae_ldv(float *d, const float *s) {
  if constexpr (V == 4) {
    float4 t = *reinterpret_cast<const float4 *>(s);
    d[0] = t.x; d[1] = t.y; d[2] = t.z; d[3] = t.w;
  } else if constexpr (V == 2) {
    float2 t = *reinterpret_cast<const float2 *>(s);
    d[0] = t.x; d[1] = t.y;
  } else {
    d[0] = s[0];
  }
}

/* acc[4][CT] += W[k][r0..r0+3] * In[k][col(j)] over k < K, where
 * col(j) = c0 + (j / V) * CS + j % V. W and In are in shared memory; the four
 * weights of a k are one 16-byte broadcast, the activations V-wide vectors. */
template <int K, int CT, int V, int CS>
__device__ __forceinline__ void ssae_tile_fma(float (&acc)[4][CT], const float *W,
                                              int ldw, int r0, const float *In,
                                              int ldi, int c0) {
#pragma unroll 8
  for (int k = 0; k < K; k++) {
    float w[4], a[CT];
    ssae_ldv<4>(w, W + k * ldw + r0);
#pragma unroll
    for (int q = 0; q < CT / V; q++) ssae_ldv<V>(a + q * V, In + k * ldi + c0 + q * CS);
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < CT; j++) acc[i][j] = fmaf(w[i], a[j], acc[i][j]);
  }
}

/* M = S = 64, L = 32, any F whose weights fit in shared memory. A
 * persistent block loads the folded weights into shared memory once, then
 * walks tiles of TW windows. NT threads (W = NT/32 warps); two thread maps:
 *   map A (64 output rows): rows 4*(lane&15).., column group warp*2+lane/16
 *     of 2W, TW/(2W) columns per thread;
 *   map B (32 output rows): rows 4*(lane&7).., column group warp*4+lane/8
 *     of 4W, TW/(4W) columns per thread.
 * Map A puts the 64 rows of a slice for one window inside one warp, so the
 * decoder's squared errors are summed with shuffles, and its loads of x and
 * stores of the reconstruction are 256 contiguous bytes per window. */
template <int TW>
__global__ void __launch_bounds__(SSAE_TILED_THREADS, 1)
    ssae_tiled_kernel(const float *__restrict__ wts, ssae_cuda_layout lo,
                      const float *__restrict__ x, size_t n,
                      float *__restrict__ scores, float *__restrict__ recon) {
  constexpr int NT = SSAE_TILED_THREADS, LD = TW + 4, NWARP = NT / 32;
  constexpr int CTA = TW / (2 * NWARP), VA = CTA < 4 ? CTA : 4, CSA = 2 * NWARP * VA;
  constexpr int CTB = TW / (4 * NWARP), VB = CTB < 4 ? CTB : 4, CSB = 4 * NWARP * VB;
  static_assert(CTB >= 1 && 2 * TW <= NT * 2, "tile too narrow for the block");
  constexpr int RAW = 65; /* row stride of the raw slice: conflict-free LN */
  extern __shared__ float4 smem4[];
  float *sm = reinterpret_cast<float *>(smem4);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int F = lo.F, FM = 64 * F;

  {
    const float4 *w4 = reinterpret_cast<const float4 *>(wts);
    /* Four loads in flight per thread, not one. */
    const int n4 = lo.tiled_total / 4;
    for (int i = tid; i < n4; i += 4 * NT) {
      float4 v[4];
#pragma unroll
      for (int u = 0; u < 4; u++)
        if (i + u * NT < n4) v[u] = __ldg(w4 + i + u * NT);
#pragma unroll
      for (int u = 0; u < 4; u++)
        if (i + u * NT < n4) smem4[i + u * NT] = v[u];
    }
  }
  const float *WeT = sm + lo.we, *BT = sm + lo.bt, *WbT = sm + lo.wbt, *DT = sm + lo.dt;
  const float *be = sm + lo.be, *bb = sm + lo.bb, *bd = sm + lo.bd;
  float *Xs = sm + lo.tiled_total; /* [64][LD]; later Zs [32][LD] */
  float *Hs = Xs + 64 * LD;  /* [64][LD] or raw [TW][65]; later Z2s [32][LD] */
  __syncthreads();

  const int rA = 4 * (lane & 15), cA = (warp * 2 + (lane >> 4)) * VA;
  const int rB = 4 * (lane & 7), cB = (warp * 4 + (lane >> 3)) * VB;
  const size_t ntiles = (n + TW - 1) / TW;

  /* Raw input is prefetched into registers one phase ahead (the next
   * slice during the basis projection, the next tile's first slice during
   * the decoder) so that no phase waits on device memory. */
  constexpr int NPRE = TW * 16 / NT;
  float4 pre[NPRE];
  auto load_raw = [&](size_t b, int nvv, int f) {
#pragma unroll
    for (int it = 0; it < NPRE; it++) {
      const int i = tid + it * NT, w = i >> 4, m4 = (i & 15) * 4;
      pre[it] = w < nvv
                    ? __ldg(reinterpret_cast<const float4 *>(x + (b + w) * FM + f * 64 + m4))
                    : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  };
  auto tile_nv = [&](size_t t) {
    const size_t b = t * TW;
    return (int)((n - b) < (size_t)TW ? (n - b) : (size_t)TW);
  };
  if ((size_t)blockIdx.x < ntiles) load_raw((size_t)blockIdx.x * TW, tile_nv(blockIdx.x), 0);

  for (size_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
    const size_t base = tile * TW;
    const int nv = tile_nv(tile);
    float zacc[4][CTB];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < CTB; j++) zacc[i][j] = 0.f;

    for (int f = 0; f < F; f++) {
      /* The prefetched raw slice f into Hs as [w][65]. */
#pragma unroll
      for (int it = 0; it < NPRE; it++) {
        const int i = tid + it * NT, w = i >> 4, m4 = (i & 15) * 4;
        float *d = Hs + w * RAW + m4;
        d[0] = pre[it].x; d[1] = pre[it].y; d[2] = pre[it].z; d[3] = pre[it].w;
      }
      __syncthreads();
      /* LayerNorm_M (two-pass, biased variance), two threads per window
       * (adjacent lanes, 32 bands each). The statistics are taken in double:
       * log-mel windows sit far from zero (-100 dB) with a small spread, and
       * a float mean would cost up to 1e-6 of relative output error. */
      if (tid < 2 * TW) {
        const int w = tid >> 1, h = (tid & 1) * 32;
        const float *r = Hs + w * RAW + h;
        double s = 0.0;
#pragma unroll
        for (int m = 0; m < 32; m++) s += (double)r[m];
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        const double mean = s * (1.0 / 64.0);
        double q = 0.0;
#pragma unroll
        for (int m = 0; m < 32; m++) {
          const double d = (double)r[m] - mean;
          q = fma(d, d, q);
        }
        q += __shfl_xor_sync(0xffffffffu, q, 1);
        const double rstd = 1.0 / sqrt(q * (1.0 / 64.0) + 1e-5);
#pragma unroll
        for (int m = 0; m < 32; m++) Xs[(h + m) * LD + w] = (float)(((double)r[m] - mean) * rstd);
      }
      __syncthreads();
      /* Slice encoder: h = GELU(We' n + be'). */
      {
        float acc[4][CTA];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
          for (int j = 0; j < CTA; j++) acc[i][j] = 0.f;
        ssae_tile_fma<64, CTA, VA, CSA>(acc, WeT, 64, rA, Xs, LD, cA);
#pragma unroll
        for (int i = 0; i < 4; i++) {
          const float b = be[rA + i];
#pragma unroll
          for (int q = 0; q < CTA / VA; q++)
#pragma unroll
            for (int e = 0; e < VA; e++)
              Hs[(rA + i) * LD + cA + q * CSA + e] = ssae_gelu(acc[i][q * VA + e] + b);
        }
      }
      __syncthreads();
      if (f + 1 < F) load_raw(base, nv, f + 1);
      /* Basis projection, accumulated over slices: z += B_f h_f (each
       * slice's 64 terms summed on their own first: smaller rounding error
       * than one running sum of 320). */
      {
        float zp[4][CTB];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
          for (int j = 0; j < CTB; j++) zp[i][j] = 0.f;
        ssae_tile_fma<64, CTB, VB, CSB>(zp, BT + f * 64 * 32, 32, rB, Hs, LD, cB);
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
          for (int j = 0; j < CTB; j++) zacc[i][j] += zp[i][j];
      }
      __syncthreads();
    }

    float *Zs = Xs, *Z2s = Hs;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int q = 0; q < CTB / VB; q++)
#pragma unroll
        for (int e = 0; e < VB; e++) Zs[(rB + i) * LD + cB + q * CSB + e] = zacc[i][q * VB + e];
    __syncthreads();
    if (tid < TW) {
      double s = 0.0;
#pragma unroll
      for (int l = 0; l < 32; l++) s += (double)Zs[l * LD + tid];
      const double mean = s * (1.0 / 32.0);
      double q = 0.0;
#pragma unroll
      for (int l = 0; l < 32; l++) {
        const double d = (double)Zs[l * LD + tid] - mean;
        q = fma(d, d, q);
      }
      const double rstd = 1.0 / sqrt(q * (1.0 / 32.0) + 1e-5);
#pragma unroll
      for (int l = 0; l < 32; l++)
        Zs[l * LD + tid] = (float)(((double)Zs[l * LD + tid] - mean) * rstd);
    }
    __syncthreads();
    /* Bottleneck: z' = GELU(Wb' zn + bb'). */
    {
      float acc[4][CTB];
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < CTB; j++) acc[i][j] = 0.f;
      ssae_tile_fma<32, CTB, VB, CSB>(acc, WbT, 32, rB, Zs, LD, cB);
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const float b = bb[rB + i];
#pragma unroll
        for (int q = 0; q < CTB / VB; q++)
#pragma unroll
          for (int e = 0; e < VB; e++)
            Z2s[(rB + i) * LD + cB + q * CSB + e] = ssae_gelu(acc[i][q * VB + e] + b);
      }
    }
    __syncthreads();
    /* Reconstruction + decoder (folded): y_f = D_f z' + bd; squared error. */
    float part[CTA];
#pragma unroll
    for (int j = 0; j < CTA; j++) part[j] = 0.f;
    const float4 bias = *reinterpret_cast<const float4 *>(bd + rA);
    if (tile + gridDim.x < ntiles)
      load_raw((tile + gridDim.x) * TW, tile_nv(tile + gridDim.x), 0);
    for (int f = 0; f < F; f++) {
      float acc[4][CTA];
#pragma unroll
      for (int j = 0; j < CTA; j++) {
        acc[0][j] = bias.x; acc[1][j] = bias.y; acc[2][j] = bias.z; acc[3][j] = bias.w;
      }
      ssae_tile_fma<32, CTA, VA, CSA>(acc, DT + f * 64, FM, rA, Z2s, LD, cA);
#pragma unroll
      for (int q = 0; q < CTA / VA; q++)
#pragma unroll
        for (int e = 0; e < VA; e++) {
          const int j = q * VA + e, w = cA + q * CSA + e;
          if (w < nv) {
            const size_t off = (base + w) * FM + f * 64 + rA;
            const float4 xv = __ldg(reinterpret_cast<const float4 *>(x + off));
            const float d0 = acc[0][j] - xv.x, d1 = acc[1][j] - xv.y;
            const float d2 = acc[2][j] - xv.z, d3 = acc[3][j] - xv.w;
            part[j] = fmaf(d0, d0, fmaf(d1, d1, fmaf(d2, d2, fmaf(d3, d3, part[j]))));
            if (recon)
              *reinterpret_cast<float4 *>(recon + off) =
                  make_float4(acc[0][j], acc[1][j], acc[2][j], acc[3][j]);
          }
        }
    }
#pragma unroll
    for (int j = 0; j < CTA; j++) {
      float v = part[j];
      v += __shfl_xor_sync(0xffffffffu, v, 1);
      v += __shfl_xor_sync(0xffffffffu, v, 2);
      v += __shfl_xor_sync(0xffffffffu, v, 4);
      v += __shfl_xor_sync(0xffffffffu, v, 8);
      part[j] = v;
    }
    if ((lane & 15) == 0) {
#pragma unroll
      for (int q = 0; q < CTA / VA; q++)
#pragma unroll
        for (int e = 0; e < VA; e++) {
          const int w = cA + q * CSA + e;
          if (w < nv) scores[base + w] = part[q * VA + e] / (float)FM;
        }
    }
    __syncthreads();
  }
}

/* Shared memory of the tiled kernel, bytes. */
static inline size_t ssae_tiled_smem(const ssae_cuda_layout *lo, int tw) {
  const size_t ld = (size_t)tw + 4;
  size_t hs = 64 * ld;
  if ((size_t)tw * 65 > hs) hs = (size_t)tw * 65;
  return ((size_t)lo->tiled_total + 64 * ld + hs) * sizeof(float);
}

#endif
