/* Device helpers every forward kernel shares: the exact GELU, warp sums,
 * a warp's LayerNorm, a 16-byte shared load. */
#ifndef SSAE_CUDA_COMMON_CUH
#define SSAE_CUDA_COMMON_CUH

#include "ssae_cuda_layout.cuh"

__device__ __forceinline__ float ssae_gelu(float v) {
  return 0.5f * v * (1.0f + erff(v * 0.70710678118654752440f));
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

__device__ __forceinline__ float4 ssae_ld4(const float *p) {
  return *reinterpret_cast<const float4 *>(p);
}

#endif
