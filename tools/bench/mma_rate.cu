/* How fast mma.sync m16n8k8 TF32 runs on this GPU (not a test): the
 * ceiling that the tensor-core kernels built on it (the inference kernel
 * warp_3xtf32, the backward k_vjp_tc; gpu/ssae_cuda_mma_tf32.cuh) can
 * reach, against which doc/gpu-kernels.md weighs them.
 *
 *   mma_rate [ROUNDS]      (default 3)
 *
 * One block per multiprocessor, each warp timing itself with clock64():
 *   regs W x C   W warps a block, each C independent accumulator chains of
 *                MMAs on operands in registers: the instruction's own rate;
 *   tile3 W      W warps, each a 16 x 16 output tile at a time over K = 64
 *                in 3xTF32 with its operands from shared memory rows of 68
 *                floats and split on the fly, as k_vjp_tc's products
 *                (its tc_tile2 itself): what such a product can reach with
 *                every warp busy and no barrier;
 *   wide3 W      the same product with 16 x 64 tiles: each A fragment
 *                loaded and split once for eight MMA columns instead of two;
 *   wide3s W     wide3 with B's halves split once into shared memory (as
 *                weights could be, at twice their room).
 * Prints MMAs per cycle per multiprocessor (the slowest warp's cycles) and
 * the fp32-equivalent TFLOPS at the clock the run measured (3 MMAs per
 * fp32 product in tile3). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "ssae_cuda_mma_tf32.cuh"
#include "ssae_cuda_tc_tile.cuh" /* tc_tile2: the backward kernel's own tile */

namespace {

int check(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 0;
  fprintf(stderr, "mma_rate: %s: %s\n", what, cudaGetErrorString(e));
  return 1;
}

const int kIters = 4096;

template <int C>
__global__ void k_regs(float *out, long long *cycles) {
  const int lane = threadIdx.x & 31;
  unsigned a[4], b[2];
  for (int r = 0; r < 4; r++) a[r] = ssae_tf32(1.0f + 1e-3f * (lane + r));
  for (int r = 0; r < 2; r++) b[r] = ssae_tf32(1.0f - 1e-3f * (lane + r));
  float c[C][4];
#pragma unroll
  for (int i = 0; i < C; i++)
#pragma unroll
    for (int r = 0; r < 4; r++) c[i][r] = 0.f;
  __syncthreads();
  const long long t0 = clock64();
  for (int it = 0; it < kIters; it++) {
#pragma unroll
    for (int i = 0; i < C; i++) ssae_mma(c[i], a, b);
  }
  const long long t1 = clock64();
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < C; i++) s += c[i][0] + c[i][1] + c[i][2] + c[i][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
  if (lane == 0) cycles[blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32] = t1 - t0;
}

/* k_vjp_tc's product shape: A 80 x 64, B 64 x 64, rows of 68 floats. */
const int kLd = 68, kTileIters = 256;

__global__ void k_tile3(float *out, long long *cycles) {
  extern __shared__ float sm[];
  float *A = sm, *B = sm + 80 * kLd;
  for (int i = threadIdx.x; i < 144 * kLd; i += blockDim.x) sm[i] = 0.5f + 1e-4f * (i % 97);
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  float acc = 0.f;
  const long long t0 = clock64();
  for (int it = 0; it < kTileIters; it++) {
    const int tile = (warp + it) % 20, m0 = tile / 4 * 16, n0 = tile % 4 * 16;
    float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    tc_tile2<8>(c, tc_rm<kLd>{A}, tc_cm<kLd>{B}, m0, n0, 0, g, t);
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
      for (int r = 0; r < 4; r++) acc += c[j][r];
  }
  const long long t1 = clock64();
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
  if (lane == 0) cycles[blockIdx.x * (blockDim.x / 32) + warp] = t1 - t0;
}

/* 16 x 64 output tiles (5 in the 80 rows); PRESPLIT: B's tf32 halves
 * read from two arrays instead of split at each load. */
template <bool PRESPLIT>
__global__ void k_wide3(float *out, long long *cycles) {
  extern __shared__ float sm[];
  float *A = sm, *B = sm + 80 * kLd, *Bs = B + 64 * kLd;
  for (int i = threadIdx.x; i < 208 * kLd; i += blockDim.x) sm[i] = 0.5f + 1e-4f * (i % 97);
  __syncthreads();
  if (PRESPLIT) {
    for (int i = threadIdx.x; i < 64 * kLd; i += blockDim.x) {
      unsigned b, s;
      ssae_split_t(B[i], b, s);
      B[i] = __uint_as_float(b);
      Bs[i] = __uint_as_float(s);
    }
    __syncthreads();
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  float acc = 0.f;
  const long long t0 = clock64();
  for (int it = 0; it < kTileIters / 4; it++) {
    const int m0 = (warp + it) % 5 * 16;
    float c[8][4];
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
      for (int r = 0; r < 4; r++) c[j][r] = 0.f;
#pragma unroll 2
    for (int k = 0; k < 64; k += 8) {
      unsigned ab[4], as[4];
      ssae_split_t(A[(m0 + g) * kLd + k + t], ab[0], as[0]);
      ssae_split_t(A[(m0 + g + 8) * kLd + k + t], ab[1], as[1]);
      ssae_split_t(A[(m0 + g) * kLd + k + t + 4], ab[2], as[2]);
      ssae_split_t(A[(m0 + g + 8) * kLd + k + t + 4], ab[3], as[3]);
#pragma unroll
      for (int j = 0; j < 8; j++) {
        unsigned bb[2], bs[2];
        const int r0 = (8 * j + g) * kLd + k + t;
        if (PRESPLIT) {
          bb[0] = __float_as_uint(B[r0]);
          bb[1] = __float_as_uint(B[r0 + 4]);
          bs[0] = __float_as_uint(Bs[r0]);
          bs[1] = __float_as_uint(Bs[r0 + 4]);
        } else {
          ssae_split_t(B[r0], bb[0], bs[0]);
          ssae_split_t(B[r0 + 4], bb[1], bs[1]);
        }
        ssae_mma(c[j], as, bb);
        ssae_mma(c[j], ab, bs);
        ssae_mma(c[j], ab, bb);
      }
    }
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
      for (int r = 0; r < 4; r++) acc += c[j][r];
  }
  const long long t1 = clock64();
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
  if (lane == 0) cycles[blockIdx.x * (blockDim.x / 32) + warp] = t1 - t0;
}

struct result {
  double mma_per_clk, ms, ghz;
};

/* Launches one block per multiprocessor; the slowest warp's cycles. */
template <class K>
int run(K kernel, int nsm, int warps, size_t smem, double mmas_per_warp, result *r) {
  float *out;
  long long *cyc;
  const int n = nsm * warps;
  if (check(cudaMalloc(&out, sizeof(float) * (size_t)n * 32), "allocating") ||
      check(cudaMalloc(&cyc, sizeof(long long) * (size_t)n), "allocating"))
    return 1;
  if (smem > 48 * 1024 &&
      check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
            "shared memory"))
    return 1;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  kernel<<<nsm, warps * 32, smem>>>(out, cyc); /* warm-up */
  cudaEventRecord(e0);
  kernel<<<nsm, warps * 32, smem>>>(out, cyc);
  cudaEventRecord(e1);
  if (check(cudaEventSynchronize(e1), "running")) return 1;
  float ms;
  cudaEventElapsedTime(&ms, e0, e1);
  long long *h = (long long *)malloc(sizeof(long long) * (size_t)n), most = 0;
  cudaMemcpy(h, cyc, sizeof(long long) * (size_t)n, cudaMemcpyDeviceToHost);
  for (int i = 0; i < n; i++)
    if (h[i] > most) most = h[i];
  r->mma_per_clk = mmas_per_warp * warps / (double)most;
  r->ms = ms;
  r->ghz = (double)most / (ms * 1e6); /* the kernel's cycles over its time: a lower bound */
  free(h);
  cudaFree(out);
  cudaFree(cyc);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  const int rounds = argc > 1 ? atoi(argv[1]) : 3;
  cudaDeviceProp p;
  if (check(cudaGetDeviceProperties(&p, 0), "the device")) return 1;
  const int nsm = p.multiProcessorCount;
  printf("# %s, %d multiprocessors, sm_%d%d\n", p.name, nsm, p.major, p.minor);
  printf("# test        warps  chains  MMA/clk/SM  TFLOPS(fp32 equiv)  kernel_ms  GHz(>=)\n");
  for (int r = 0; r < rounds; r++) {
    const int wl[] = {4, 8, 16, 32};
    for (int wi = 0; wi < 4; wi++) {
      const int w = wl[wi];
      result a, b;
      if (run(k_regs<4>, nsm, w, 0, 4.0 * kIters, &a) ||
          run(k_regs<8>, nsm, w, 0, 8.0 * kIters, &b))
        return 1;
      /* an m16n8k8 MMA: 1024 multiply-adds; TF32 alone here */
      printf("regs          %5d  %6d  %10.3f  %18.1f  %9.3f  %7.3f\n", w, 4, a.mma_per_clk,
             a.mma_per_clk * 2048.0 * nsm * a.ghz / 1e3, a.ms, a.ghz);
      printf("regs          %5d  %6d  %10.3f  %18.1f  %9.3f  %7.3f\n", w, 8, b.mma_per_clk,
             b.mma_per_clk * 2048.0 * nsm * b.ghz / 1e3, b.ms, b.ghz);
    }
    const int tw[] = {8, 16};
    for (int wi = 0; wi < 2; wi++) {
      result t;
      if (run(k_tile3, nsm, tw[wi], sizeof(float) * 144 * kLd, 48.0 * kTileIters, &t))
        return 1;
      /* three MMAs per fp32-accurate product */
      printf("tile3         %5d  %6d  %10.3f  %18.1f  %9.3f  %7.3f\n", tw[wi], 4,
             t.mma_per_clk, t.mma_per_clk / 3 * 2048.0 * nsm * t.ghz / 1e3, t.ms, t.ghz);
      /* a 16 x 64 tile: 8 k steps x 8 columns x 3 MMAs */
      const double wide = 192.0 * (kTileIters / 4);
      if (run(k_wide3<false>, nsm, tw[wi], sizeof(float) * 208 * kLd, wide, &t)) return 1;
      printf("wide3         %5d  %6d  %10.3f  %18.1f  %9.3f  %7.3f\n", tw[wi], 8,
             t.mma_per_clk, t.mma_per_clk / 3 * 2048.0 * nsm * t.ghz / 1e3, t.ms, t.ghz);
      if (run(k_wide3<true>, nsm, tw[wi], sizeof(float) * 208 * kLd, wide, &t)) return 1;
      printf("wide3s        %5d  %6d  %10.3f  %18.1f  %9.3f  %7.3f\n", tw[wi], 8,
             t.mma_per_clk, t.mma_per_clk / 3 * 2048.0 * nsm * t.ghz / 1e3, t.ms, t.ghz);
    }
  }
  return 0;
}
