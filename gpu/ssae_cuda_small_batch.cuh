#ifndef SSAE_CUDA_SMALL_BATCH_CUH
#define SSAE_CUDA_SMALL_BATCH_CUH

#include "ssae_cuda_common.cuh"

/* small_batch: the kernel for batches up to 1024 windows, M = S = 64, L = 32,
 * F <= 16: one window per block of 1024 threads, every stage laid out so
 * that each thread issues all of its weight loads at once and each warp's
 * loads are contiguous (the
 * weights come from L2 on every call; what costs time here is the number of
 * dependent round trips, not arithmetic):
 *   encoder  thread per (f, s), 64 loads of WeT[m][s] (coalesced over s);
 *   z        warp per l, lanes over c of B[l][c], shuffle sum;
 *   bottleneck warp per l, lane per k;
 *   decoder  thread per output (f, m), 32 loads of DT[l][j]. */
#define SSAE_SMALL_THREADS 1024
#define SSAE_SMALL_FMAX 16
/* static: the kernel table's file and the VJP's each have their copy */
static __global__ void __launch_bounds__(SSAE_SMALL_THREADS)
    ssae_small_batch_kernel(const float *__restrict__ wts, ssae_cuda_layout lo,
                            const float *__restrict__ x, size_t n,
                            float *__restrict__ scores, float *__restrict__ recon) {
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
