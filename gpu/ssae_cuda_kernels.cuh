/* The fused SSAE forward pass (SPEC section 2) on the GPU: one launch per
 * batch runs LayerNorm, slice encoder + exact GELU, basis projection,
 * LayerNorm + bottleneck + GELU, reconstruction + slice decoder and the
 * per-window squared error, with every intermediate in shared memory or
 * registers.
 *
 * The weights arrive pre-folded (ssae_cuda.cu, in double precision, once per
 * model):
 *   - LayerNorm weight/bias fold into the following Linear:
 *     W'(g*n + b) + c = (W diag g) n + (W b + c);
 *   - reconstruction and decoder fold into one matrix per slice,
 *     D_f = W_d B_f^T (M x L), since y_f = W_d (B_f^T z') + b_d.
 * Both are exact re-associations of the same function; the second removes
 * 20480 of the 62464 multiply-adds per window (default dims).
 *
 * Folded weight layout (floats, every segment padded to 4 floats), each
 * matrix stored transposed ([k][row]) so that a thread's output rows are
 * contiguous:
 *   WeT [M][S]  BT [C][L]  WbT [L][L]  DT [L][F*M]  be [S]  bb [L]  bd [M]
 */
#ifndef SSAE_CUDA_KERNELS_CUH
#define SSAE_CUDA_KERNELS_CUH

#include <cuda_runtime.h>
#include <stddef.h>

#define SSAE_CUDA_THREADS 256

struct ssae_cuda_layout {
  int M, F, L, S;
  int we, bt, wbt, dt, be, bb, bd; /* float offsets into the folded weights */
  int total;                       /* floats, multiple of 4 */
};

__device__ __forceinline__ float ssae_gelu(float v) {
  return 0.5f * v * (1.0f + erff(v * 0.70710678118654752440f));
}

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

/* The specialised kernel for M = S = 64, L = 32 (any F whose weights fit in
 * shared memory). A persistent block loads the folded weights into shared
 * memory once, then walks tiles of TW windows. 256 threads; two thread maps:
 *   map A (64 output rows): rows 4*(lane&15).., column group warp*2+lane/16
 *     of 16, TW/16 columns per thread;
 *   map B (32 output rows): rows 4*(lane&7).., column group warp*4+lane/8
 *     of 32, TW/32 columns per thread.
 * Map A puts the 64 rows of a slice for one window inside one warp, so the
 * decoder's squared errors are summed with shuffles, and its loads of x and
 * stores of the reconstruction are 256 contiguous bytes per window. */
template <int TW>
__global__ void __launch_bounds__(SSAE_CUDA_THREADS, 1)
    ssae_fused_tiled(const float *__restrict__ wts, ssae_cuda_layout lo,
                     const float *__restrict__ x, size_t n,
                     float *__restrict__ scores, float *__restrict__ recon) {
  constexpr int LD = TW + 4;
  constexpr int CTA = TW / 16, VA = CTA < 4 ? CTA : 4, CSA = 16 * VA;
  constexpr int CTB = TW / 32, VB = CTB < 4 ? CTB : 4, CSB = 32 * VB;
  constexpr int RAW = 65; /* row stride of the raw slice: conflict-free LN */
  extern __shared__ float4 smem4[];
  float *sm = reinterpret_cast<float *>(smem4);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int F = lo.F, FM = 64 * F;

  {
    const float4 *w4 = reinterpret_cast<const float4 *>(wts);
    for (int i = tid; i < lo.total / 4; i += SSAE_CUDA_THREADS) smem4[i] = __ldg(w4 + i);
  }
  const float *WeT = sm + lo.we, *BT = sm + lo.bt, *WbT = sm + lo.wbt, *DT = sm + lo.dt;
  const float *be = sm + lo.be, *bb = sm + lo.bb, *bd = sm + lo.bd;
  float *Xs = sm + lo.total; /* [64][LD]; later Zs [32][LD] */
  float *Hs = Xs + 64 * LD;  /* [64][LD] or raw [TW][65]; later Z2s [32][LD] */
  __syncthreads();

  const int rA = 4 * (lane & 15), cA = (warp * 2 + (lane >> 4)) * VA;
  const int rB = 4 * (lane & 7), cB = (warp * 4 + (lane >> 3)) * VB;
  const size_t ntiles = (n + TW - 1) / TW;

  for (size_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
    const size_t base = tile * TW;
    const int nv = (int)((n - base) < (size_t)TW ? (n - base) : (size_t)TW);
    float zacc[4][CTB];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < CTB; j++) zacc[i][j] = 0.f;

    for (int f = 0; f < F; f++) {
      /* Raw slice f of the tile, coalesced, into Hs as [w][65]. */
      for (int i = tid; i < TW * 16; i += SSAE_CUDA_THREADS) {
        const int w = i >> 4, m4 = (i & 15) * 4;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (w < nv)
          v = __ldg(reinterpret_cast<const float4 *>(x + (base + w) * FM + f * 64 + m4));
        float *d = Hs + w * RAW + m4;
        d[0] = v.x; d[1] = v.y; d[2] = v.z; d[3] = v.w;
      }
      __syncthreads();
      /* LayerNorm_M (two-pass, biased variance), one thread per window. */
      if (tid < TW) {
        const float *r = Hs + tid * RAW;
        float s = 0.f;
#pragma unroll 16
        for (int m = 0; m < 64; m++) s += r[m];
        const float mean = s * (1.0f / 64.0f);
        float q = 0.f;
#pragma unroll 16
        for (int m = 0; m < 64; m++) {
          const float d = r[m] - mean;
          q = fmaf(d, d, q);
        }
        const float rstd = 1.0f / sqrtf(q * (1.0f / 64.0f) + 1e-5f);
#pragma unroll 16
        for (int m = 0; m < 64; m++) Xs[m * LD + tid] = (r[m] - mean) * rstd;
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
      /* Basis projection, accumulated over slices: z += B_f h_f. */
      ssae_tile_fma<64, CTB, VB, CSB>(zacc, BT + f * 64 * 32, 32, rB, Hs, LD, cB);
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
      float s = 0.f;
#pragma unroll
      for (int l = 0; l < 32; l++) s += Zs[l * LD + tid];
      const float mean = s * (1.0f / 32.0f);
      float q = 0.f;
#pragma unroll
      for (int l = 0; l < 32; l++) {
        const float d = Zs[l * LD + tid] - mean;
        q = fmaf(d, d, q);
      }
      const float rstd = 1.0f / sqrtf(q * (1.0f / 32.0f) + 1e-5f);
#pragma unroll
      for (int l = 0; l < 32; l++) Zs[l * LD + tid] = (Zs[l * LD + tid] - mean) * rstd;
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
  return ((size_t)lo->total + 64 * ld + hs) * sizeof(float);
}

__device__ __forceinline__ float ssae_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* LayerNorm in place over len floats (one warp). */
__device__ __forceinline__ void ssae_warp_layernorm(float *v, int len, int lane) {
  float s = 0.f;
  for (int i = lane; i < len; i += 32) s += v[i];
  const float mean = ssae_warp_sum(s) / (float)len;
  float q = 0.f;
  for (int i = lane; i < len; i += 32) {
    const float d = v[i] - mean;
    q = fmaf(d, d, q);
  }
  const float rstd = 1.0f / sqrtf(ssae_warp_sum(q) / (float)len + 1e-5f);
  __syncwarp();
  for (int i = lane; i < len; i += 32) v[i] = (v[i] - mean) * rstd;
}

/* The generic kernel: any dimensions, G windows per block, weights read
 * through the read-only cache (coalesced: consecutive threads take
 * consecutive output rows of the transposed matrices). Also the fastest
 * choice for the smallest batches, where it spreads one window over a
 * whole block. Shared memory per window: F*M + C + 2L floats. */
__global__ void __launch_bounds__(SSAE_CUDA_THREADS)
    ssae_fused_generic(const float *__restrict__ wts, ssae_cuda_layout lo, int G,
                       const float *__restrict__ x, size_t n,
                       float *__restrict__ scores, float *__restrict__ recon) {
  extern __shared__ float4 smem4[];
  float *sm = reinterpret_cast<float *>(smem4);
  const int M = lo.M, F = lo.F, L = lo.L, S = lo.S, C = F * S, FM = F * M;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int nwarps = blockDim.x >> 5;
  const float *WeT = wts + lo.we, *BT = wts + lo.bt, *WbT = wts + lo.wbt, *DT = wts + lo.dt;
  const float *be = wts + lo.be, *bb = wts + lo.bb, *bd = wts + lo.bd;
  float *xs = sm;             /* [G][FM]; later squared errors */
  float *hs = xs + G * FM;    /* [G][C] */
  float *zs = hs + G * C;     /* [G][L] */
  float *z2s = zs + G * L;    /* [G][L] */
  const size_t nblk = (n + G - 1) / G;

  for (size_t blk = blockIdx.x; blk < nblk; blk += gridDim.x) {
    const size_t base = blk * G;
    const int nv = (int)((n - base) < (size_t)G ? (n - base) : (size_t)G);
    for (int i = tid; i < G * FM; i += blockDim.x)
      xs[i] = i < nv * FM ? __ldg(x + base * FM + i) : 0.f;
    __syncthreads();
    for (int p = warp; p < G * F; p += nwarps) ssae_warp_layernorm(xs + p * M, M, lane);
    __syncthreads();
    for (int o = tid; o < G * C; o += blockDim.x) {
      const int g = o / C, c = o - g * C, f = c / S, s = c - f * S;
      const float *xn = xs + g * FM + f * M;
      float acc = __ldg(be + s);
#pragma unroll 8
      for (int m = 0; m < M; m++) acc = fmaf(__ldg(WeT + m * S + s), xn[m], acc);
      hs[o] = ssae_gelu(acc);
    }
    __syncthreads();
    for (int o = tid; o < G * L; o += blockDim.x) {
      const int g = o / L, l = o - g * L;
      const float *h = hs + g * C;
      float acc = 0.f;
#pragma unroll 8
      for (int c = 0; c < C; c++) acc = fmaf(__ldg(BT + c * L + l), h[c], acc);
      zs[o] = acc;
    }
    __syncthreads();
    for (int g = warp; g < G; g += nwarps) ssae_warp_layernorm(zs + g * L, L, lane);
    __syncthreads();
    for (int o = tid; o < G * L; o += blockDim.x) {
      const int g = o / L, l = o - g * L;
      const float *z = zs + g * L;
      float acc = __ldg(bb + l);
#pragma unroll 8
      for (int k = 0; k < L; k++) acc = fmaf(__ldg(WbT + k * L + l), z[k], acc);
      z2s[o] = ssae_gelu(acc);
    }
    __syncthreads();
    for (int o = tid; o < nv * FM; o += blockDim.x) {
      const int g = o / FM, j = o - g * FM, m = j % M;
      const float *z2 = z2s + g * L;
      float acc = __ldg(bd + m);
#pragma unroll 8
      for (int l = 0; l < L; l++) acc = fmaf(__ldg(DT + l * FM + j), z2[l], acc);
      const float d = acc - __ldg(x + base * FM + o);
      xs[o] = d * d;
      if (recon) recon[base * FM + o] = acc;
    }
    __syncthreads();
    for (int g = warp; g < nv; g += nwarps) {
      float s = 0.f;
      for (int i = lane; i < FM; i += 32) s += xs[g * FM + i];
      s = ssae_warp_sum(s);
      if (lane == 0) scores[base + g] = s / (float)FM;
    }
    __syncthreads();
  }
}

#endif
