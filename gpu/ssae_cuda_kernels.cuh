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
 * followed by the row-major copies the generic kernel reads:
 *   We [S][M]  B [L][C]  Wb [L][L]  D [F*M][L]
 */
#ifndef SSAE_CUDA_KERNELS_CUH
#define SSAE_CUDA_KERNELS_CUH

#include <cuda_runtime.h>
#include <stddef.h>

#define SSAE_CUDA_THREADS 256
#define SSAE_GENERIC_THREADS 1024

struct ssae_cuda_layout {
  int M, F, L, S;
  int we, bt, wbt, dt, be, bb, bd; /* float offsets into the folded weights */
  int we_r, b_r, wb_r, d_r;        /* the same matrices row-major (generic) */
  int tiled_total;                 /* floats of the tiled kernel's part */
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
 * memory once, then walks tiles of TW windows. NT threads (W = NT/32 warps);
 * two thread maps:
 *   map A (64 output rows): rows 4*(lane&15).., column group warp*2+lane/16
 *     of 2W, TW/(2W) columns per thread;
 *   map B (32 output rows): rows 4*(lane&7).., column group warp*4+lane/8
 *     of 4W, TW/(4W) columns per thread.
 * Map A puts the 64 rows of a slice for one window inside one warp, so the
 * decoder's squared errors are summed with shuffles, and its loads of x and
 * stores of the reconstruction are 256 contiguous bytes per window. */
template <int TW, int NT>
__global__ void __launch_bounds__(NT, 1)
    ssae_fused_tiled(const float *__restrict__ wts, ssae_cuda_layout lo,
                     const float *__restrict__ x, size_t n,
                     float *__restrict__ scores, float *__restrict__ recon) {
  constexpr int LD = TW + 4, NWARP = NT / 32;
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

__device__ __forceinline__ float ssae_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ double ssae_warp_sum_d(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* LayerNorm in place over len floats (one warp); statistics in double (see
 * the tiled kernel). */
__device__ __forceinline__ void ssae_warp_layernorm(float *v, int len, int lane) {
  double s = 0.0;
  for (int i = lane; i < len; i += 32) s += (double)v[i];
  const double mean = ssae_warp_sum_d(s) / (double)len;
  double q = 0.0;
  for (int i = lane; i < len; i += 32) {
    const double d = (double)v[i] - mean;
    q = fma(d, d, q);
  }
  const double rstd = 1.0 / sqrt(ssae_warp_sum_d(q) / (double)len + 1e-5);
  __syncwarp();
  for (int i = lane; i < len; i += 32) v[i] = (float)(((double)v[i] - mean) * rstd);
}

/* sum over k = j, j+T, ... < K of w[k] a[k]; eight weight loads in flight
 * at a time (the weights come from L2 on a small batch). */
__device__ __forceinline__ float ssae_dot_split(const float *__restrict__ w, const float *a,
                                                int K, int j, int T) {
  float acc = 0.f;
  for (int k0 = j; k0 < K; k0 += 8 * T) {
    float wv[8], av[8];
#pragma unroll
    for (int u = 0; u < 8; u++) {
      const int k = k0 + u * T;
      wv[u] = k < K ? __ldg(w + k) : 0.f;
      av[u] = k < K ? a[k] : 0.f;
    }
#pragma unroll
    for (int u = 0; u < 8; u++) acc = fmaf(wv[u], av[u], acc);
  }
  return acc;
}

/* out = f(W[r] . act) for every output o = (g, r) of G windows x R rows, W
 * row-major [R][K] in device memory (read-only cache), act in shared memory
 * [G][lda]. T lanes (a power of two, chosen so that the block has work for
 * every thread) split each dot product and combine with shuffles: a batch
 * of one window still keeps the whole block busy. */
template <typename Out>
__device__ __forceinline__ void ssae_rows(int G, int R, int K, const float *__restrict__ W,
                                         const float *act, int lda, Out out) {
  const int nthr = blockDim.x, tid = threadIdx.x;
  int T = 1;
  while (T < 32 && G * R * T < nthr && 2 * T <= K) T *= 2;
  const int tasks = G * R * T;
  for (int b = 0; b < tasks; b += nthr) {
    const int task = b + tid, o = task / T, j = task & (T - 1);
    float acc = 0.f;
    const int ok = task < tasks;
    if (ok) {
      const int g = o / R, r = o - g * R;
      acc = ssae_dot_split(W + (size_t)r * K, act + g * lda, K, j, T);
    }
    for (int sft = T >> 1; sft > 0; sft >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, sft);
    if (ok && j == 0) out(o / R, o % R, acc);
  }
}

/* The generic kernel: any dimensions, G windows per block, weights
 * row-major (the *_r segments) through the read-only cache. Also the fastest
 * choice for the smallest batches. Shared memory per window: F*M + C + 2L
 * floats. */
__global__ void __launch_bounds__(SSAE_GENERIC_THREADS)
    ssae_fused_generic(const float *__restrict__ wts, ssae_cuda_layout lo, int G,
                       const float *__restrict__ x, size_t n,
                       float *__restrict__ scores, float *__restrict__ recon) {
  extern __shared__ float4 smem4[];
  float *sm = reinterpret_cast<float *>(smem4);
  const int M = lo.M, F = lo.F, L = lo.L, S = lo.S, C = F * S, FM = F * M;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int nwarps = blockDim.x >> 5;
  const float *We = wts + lo.we_r, *B = wts + lo.b_r, *Wb = wts + lo.wb_r, *D = wts + lo.d_r;
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
    /* Slice encoder: rows (f, s) of each window, input slice f. */
    {
      const int R = C;
      int T = 1;
      while (T < 32 && G * R * T < (int)blockDim.x && 2 * T <= M) T *= 2;
      const int tasks = G * R * T;
      for (int b = 0; b < tasks; b += blockDim.x) {
        const int task = b + tid, o = task / T, j = task & (T - 1);
        const int ok = task < tasks;
        float acc = 0.f;
        int g = 0, f = 0, sl = 0;
        if (ok) {
          g = o / R;
          const int c = o - g * R;
          f = c / S;
          sl = c - f * S;
          acc = ssae_dot_split(We + (size_t)sl * M, xs + g * FM + f * M, M, j, T);
        }
        for (int sft = T >> 1; sft > 0; sft >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, sft);
        if (ok && j == 0) hs[g * C + f * S + sl] = ssae_gelu(acc + __ldg(be + sl));
      }
    }
    __syncthreads();
    ssae_rows(G, L, C, B, hs, C, [&](int g, int l, float v) { zs[g * L + l] = v; });
    __syncthreads();
    for (int g = warp; g < G; g += nwarps) ssae_warp_layernorm(zs + g * L, L, lane);
    __syncthreads();
    ssae_rows(G, L, L, Wb, zs, L,
              [&](int g, int l, float v) { z2s[g * L + l] = ssae_gelu(v + __ldg(bb + l)); });
    __syncthreads();
    ssae_rows(nv, FM, L, D, z2s, L, [&](int g, int j, float v) {
      const float y = v + __ldg(bd + j % M);
      const size_t o = (base + g) * FM + j;
      const float d = y - __ldg(x + o);
      xs[g * FM + j] = d * d;
      if (recon) recon[o] = y;
    });
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

/* The small-batch kernel for M = S = 64, L = 32, F <= 16: one window per
 * block of 1024 threads, every stage laid out so that each thread issues all
 * of its weight loads at once and each warp's loads are contiguous (the
 * weights come from L2 on every call; what costs time here is the number of
 * dependent round trips, not arithmetic):
 *   encoder  thread per (f, s), 64 loads of WeT[m][s] (coalesced over s);
 *   z        warp per l, lanes over c of B[l][c], shuffle sum;
 *   bottleneck warp per l, lane per k;
 *   decoder  thread per output (f, m), 32 loads of DT[l][j]. */
#define SSAE_SMALL_THREADS 1024
#define SSAE_SMALL_FMAX 16
__global__ void __launch_bounds__(SSAE_SMALL_THREADS)
    ssae_fused_small(const float *__restrict__ wts, ssae_cuda_layout lo,
                     const float *__restrict__ x, size_t n, float *__restrict__ scores,
                     float *__restrict__ recon) {
  __shared__ float xs[SSAE_SMALL_FMAX * 64];
  __shared__ float hs[SSAE_SMALL_FMAX * 64];
  __shared__ float zs[32], z2s[32], red[32];
  const int F = lo.F, FM = 64 * F, C = 64 * F;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const float *WeT = wts + lo.we, *Br = wts + lo.b_r, *Wbr = wts + lo.wb_r, *DT = wts + lo.dt;
  const float *be = wts + lo.be, *bb = wts + lo.bb, *bd = wts + lo.bd;

  for (size_t w = blockIdx.x; w < n; w += gridDim.x) {
    const float *xw = x + w * FM;
    if (tid < FM) xs[tid] = __ldg(xw + tid);
    __syncthreads();
    if (warp < F) ssae_warp_layernorm(xs + warp * 64, 64, lane);
    __syncthreads();
    if (tid < C) {
      const int f = tid >> 6, sl = tid & 63;
      const float *a = xs + f * 64;
      float wv[64];
#pragma unroll
      for (int m = 0; m < 64; m++) wv[m] = __ldg(WeT + m * 64 + sl);
      float acc0 = 0.f, acc1 = 0.f;
#pragma unroll
      for (int m = 0; m < 64; m += 2) {
        acc0 = fmaf(wv[m], a[m], acc0);
        acc1 = fmaf(wv[m + 1], a[m + 1], acc1);
      }
      hs[tid] = ssae_gelu(acc0 + acc1 + __ldg(be + sl));
    }
    __syncthreads();
    {
      const float *b = Br + (size_t)warp * C;
      float acc = 0.f;
      for (int c0 = 0; c0 < C; c0 += 32 * 16) {
        float wv[16];
#pragma unroll
        for (int i = 0; i < 16; i++) {
          const int c = c0 + lane + 32 * i;
          wv[i] = c < C ? __ldg(b + c) : 0.f;
        }
#pragma unroll
        for (int i = 0; i < 16; i++) {
          const int c = c0 + lane + 32 * i;
          if (c < C) acc = fmaf(wv[i], hs[c], acc);
        }
      }
      acc = ssae_warp_sum(acc);
      if (lane == 0) zs[warp] = acc;
    }
    __syncthreads();
    if (warp == 0) ssae_warp_layernorm(zs, 32, lane);
    __syncthreads();
    {
      const float v = ssae_warp_sum(__ldg(Wbr + warp * 32 + lane) * zs[lane]);
      if (lane == 0) z2s[warp] = ssae_gelu(v + __ldg(bb + warp));
    }
    __syncthreads();
    float sq = 0.f;
    if (tid < FM) {
      float wv[32];
#pragma unroll
      for (int l = 0; l < 32; l++) wv[l] = __ldg(DT + l * FM + tid);
      float acc0 = __ldg(bd + (tid & 63)), acc1 = 0.f;
#pragma unroll
      for (int l = 0; l < 32; l += 2) {
        acc0 = fmaf(wv[l], z2s[l], acc0);
        acc1 = fmaf(wv[l + 1], z2s[l + 1], acc1);
      }
      const float y = acc0 + acc1, d = y - __ldg(xw + tid);
      sq = d * d;
      if (recon) recon[w * FM + tid] = y;
    }
    sq = ssae_warp_sum(sq);
    if (lane == 0) red[warp] = sq;
    __syncthreads();
    if (warp == 0) {
      float t = ssae_warp_sum(red[lane]);
      if (lane == 0) scores[w] = t / (float)FM;
    }
    __syncthreads();
  }
}

#endif
