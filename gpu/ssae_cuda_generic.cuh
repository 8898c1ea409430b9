/* generic: the kernel for any dimensions (the fallback whenever no other
 * kernel fits the model or the device). */
#ifndef SSAE_CUDA_GENERIC_CUH
#define SSAE_CUDA_GENERIC_CUH

#include "ssae_cuda_common.cuh"

#define SSAE_GENERIC_THREADS 1024

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

/* Any dimensions, G windows per block, weights row-major (the *_r
 * segments) through the read-only cache. Shared memory per window:
 * F*M + C + 2L floats. */
__global__ void __launch_bounds__(SSAE_GENERIC_THREADS)
    ssae_generic_kernel(const float *__restrict__ wts, ssae_cuda_layout lo, int G,
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

#endif
