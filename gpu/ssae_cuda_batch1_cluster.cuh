/* batch1_cluster: the latency kernel for batches up to 16 windows, M = S =
 * 64, L = 32, F <= 16, on sm_90: a thread-block cluster of 8 blocks shares
 * one window. What a tiny batch costs is the number of dependent round
 * trips to L2 and the bytes one SM pulls from it, so:
 *   - every block holds only its eighth of the weights (about 12 KB), and
 *     loads them into registers at kernel start, all at once: one L2 round
 *     trip for the whole kernel, spread over 8 SMs;
 *   - block r computes the encoder rows s = 8r..8r+7 of every slice, the
 *     basis projection's partial sums over those columns of the combined
 *     vector, and decoder outputs 8F r .. 8F r + 8F - 1;
 *   - the partial latents go to every block's shared memory through
 *     distributed shared memory (one remote store per thread), the partial
 *     squared errors to block 0's, each as an st.async that counts its
 *     bytes on an mbarrier of the receiving block (below), which waits only
 *     for what it receives: a one-way trip instead of a cluster barrier's
 *     round trip.
 * The bottleneck (32 x 32) is computed by warp 0 of every block. The
 * LayerNorms take mean and variance from one butterfly
 * (ssae_warp_meanvar) and 1/sqrt as rsqrtf; GELU is the 16-instruction
 * ssae_gelu_fast. */
#ifndef SSAE_CUDA_BATCH1_CLUSTER_CUH
#define SSAE_CUDA_BATCH1_CLUSTER_CUH

#include <cooperative_groups.h>

#include "ssae_cuda_common.cuh"

#define SSAE_CLUSTER_CTAS 8
#define SSAE_CLUSTER_THREADS 256
#define SSAE_CLUSTER_FMAX 16

/* GELU(v) = v Phi(v), Phi(v) = erfc(-v/sqrt2)/2, with erfc from the
 * Chebyshev fit of Numerical Recipes (erfcc: erfc(z) = t exp(-z^2 + P(t)),
 * t = 1/(1 + z/2), fractional error < 1.2e-7 for all z >= 0). Evaluated in
 * float its error is at most 1.0e-7 * max(|v|, 1), the same bound as
 * 0.5 v (1 + erff(v/sqrt2)) (checked against erf in double over
 * [-12, 12]), in 16 instructions instead of about 28: P is pre-scaled by
 * log2(e) with the factor 1/2 folded into its constant, and
 * v Phi(v) = max(v, 0) - |v| erfc(|v|/sqrt2)/2 on both sides of zero. */
__device__ __forceinline__ float ssae_gelu_fast(float v) {
  const float a = fabsf(v);
  float t, e;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(t) : "f"(fmaf(a, 0.35355339059327373f, 1.0f)));
  float p = 2.465172979e-01f;
  p = fmaf(p, t, -1.186114945e+00f);
  p = fmaf(p, t, 2.147474464e+00f);
  p = fmaf(p, t, -1.637753152e+00f);
  p = fmaf(p, t, 4.023215817e-01f);
  p = fmaf(p, t, -2.687568603e-01f);
  p = fmaf(p, t, 1.396300565e-01f);
  p = fmaf(p, t, 5.397006155e-01f);
  p = fmaf(p, t, 1.442729204e+00f);
  p = fmaf(p, t, -2.825748218e+00f);
  const float arg = fmaf(v * -7.213475204e-01f, v, p);
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(arg));
  return fmaf(-a, t * e, fmaxf(v, 0.0f));
}

/* Signalling (sm_90 PTX): every remote store is an st.async that counts
 * its bytes on an mbarrier in the receiving block, which waits only for the
 * bytes it needs, and a block that has nothing left to receive runs on or
 * exits. */
__device__ __forceinline__ unsigned ssae_smem_u32(const void *p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void ssae_st_async(const float *local, unsigned long long *bar,
                                              unsigned rank, float v) {
  unsigned ra, rb;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(ra)
               : "r"(ssae_smem_u32(local)), "r"(rank));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(rb)
               : "r"(ssae_smem_u32(bar)), "r"(rank));
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];"
               ::"r"(ra), "f"(v), "r"(rb) : "memory");
}
__device__ __forceinline__ void ssae_mbar_expect(unsigned long long *bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               ::"r"(ssae_smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void ssae_mbar_wait(unsigned long long *bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile("{\n .reg .pred p;\n"
                 " mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                 " selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done) : "r"(ssae_smem_u32(bar)), "r"(parity) : "memory");
  } while (!done);
}

/* Mean and M2 (sum of squared deviations) over the warp of per-lane
 * statistics of c0 values each: Chan's pairwise combination, one butterfly
 * of 5 rounds with two independent shuffles each instead of two dependent
 * reductions (a mean, then the squares about it). Symmetric in the two
 * halves of every pair, so every lane ends with the same bits. */
__device__ __forceinline__ void ssae_warp_meanvar(float &m, float &s, float c0) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float mo = __shfl_xor_sync(0xffffffffu, m, o);
    const float so = __shfl_xor_sync(0xffffffffu, s, o);
    const float dm = mo - m;
    s = (s + so) + dm * dm * (0.5f * c0 * (float)o);
    m = 0.5f * (m + mo);
  }
}

/* FT: the frame count when it is known at compile time (the loops over
 * slices unroll without predicates: less code, and each instruction of a
 * batch-of-one launch runs once, straight from a cold instruction cache),
 * 0 for any F <= SSAE_CLUSTER_FMAX. */
template <int FT>
__global__ void __launch_bounds__(SSAE_CLUSTER_THREADS)
    ssae_batch1_cluster_kernel(const float *__restrict__ wts, ssae_cuda_layout lo,
                               const float *__restrict__ x, size_t n,
                               float *__restrict__ scores, float *__restrict__ recon) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  constexpr int CS = SSAE_CLUSTER_CTAS, FMAX = FT ? FT : SSAE_CLUSTER_FMAX;
  __shared__ float xs[FMAX * 64], xn[FMAX * 64], hs[FMAX * 8];
  __shared__ float zpart[2][CS][32], red[8], spart[CS];
  __shared__ unsigned long long mbar[3]; /* zpart[0], zpart[1], spart */
  if (threadIdx.x == 0) {
#pragma unroll
    for (int i = 0; i < 3; i++)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(ssae_smem_u32(&mbar[i])));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  unsigned wi = 0; /* windows done by this cluster: buffer and phase */
  __shared__ __align__(16) float zn[32], z2[32];
  cg::cluster_group cl = cg::this_cluster();
  /* Distributed shared memory may be written only once every block of the
   * cluster has started: arrive now, wait just before the first remote
   * store (by then every block has long arrived, so the wait is free). */
  cl.barrier_arrive();
  int started = 0;
  const int r = (int)cl.block_rank();
  const int F = FT ? FT : lo.F, FM = 64 * F, C = 64 * F, NO = 8 * F;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const unsigned FULL = 0xffffffffu;
  const float *WeT = wts + lo.we, *Br = wts + lo.b_r, *Wbr = wts + lo.wb_r, *Dr = wts + lo.d_r;
  const size_t ncl = gridDim.x / CS;
  size_t w = blockIdx.x / CS;

  /* The window first (its latency is the kernel's first critical step),
   * the next one always a window ahead. */
  constexpr int XR = (FMAX * 64 + SSAE_CLUSTER_THREADS - 1) / SSAE_CLUSTER_THREADS;
  float xr[XR];
  auto load_x = [&](size_t ww) {
#pragma unroll
    for (int q = 0; q < XR; q++) {
      const int i = tid + q * SSAE_CLUSTER_THREADS;
      xr[q] = i < FM ? __ldg(x + ww * FM + i) : 0.f;
    }
  };
  if (w < n) load_x(w);
  /* Every weight this thread will use, loaded before the first use. */
  const int s = 8 * r + warp; /* encoder row of this warp; lanes split k */
  const float we0 = __ldg(WeT + lane * 64 + s), we1 = __ldg(WeT + (lane + 32) * 64 + s);
  const float bes = __ldg(wts + lo.be + s);
  const int zl = tid >> 3, zj = tid & 7; /* basis: latent zl, column 8r+zj of each slice */
  float bw[FMAX];
#pragma unroll
  for (int f = 0; f < FMAX; f++)
    bw[f] = f < F ? __ldg(Br + zl * C + f * 64 + 8 * r + zj) : 0.f;
  float4 wb[8];
  float bbl = 0.f;
  if (warp == 0) {
#pragma unroll
    for (int q = 0; q < 8; q++)
      wb[q] = __ldg(reinterpret_cast<const float4 *>(Wbr + lane * 32) + q);
    bbl = __ldg(wts + lo.bb + lane);
  }
  const int dq = tid & 3, dout = tid >> 2; /* decoder: output dout (+64), l = 8dq.. */
  float4 dw[2][2];
  float bdj[2];
#pragma unroll
  for (int it = 0; it < 2; it++) {
    const int o = dout + 64 * it, j = NO * r + (o < NO ? o : 0);
    const float4 *p = reinterpret_cast<const float4 *>(Dr + j * 32 + 8 * dq);
    dw[it][0] = __ldg(p);
    dw[it][1] = __ldg(p + 1);
    bdj[it] = __ldg(wts + lo.bd + j % 64);
  }

  for (; w < n; w += ncl) {
#pragma unroll
    for (int q = 0; q < XR; q++) {
      const int i = tid + q * SSAE_CLUSTER_THREADS;
      if (i < FM) xs[i] = xr[q];
    }
    if (w + ncl < n) load_x(w + ncl);
    __syncthreads();
    /* LayerNorm_M, a warp per slice; float statistics after subtracting the
     * slice's first band (see ssae_cuda_warp_fp32.cuh). */
    for (int f = warp; f < F; f += 8) {
      const float p = xs[f * 64];
      float d0 = xs[f * 64 + lane] - p, d1 = xs[f * 64 + 32 + lane] - p;
      float rstd;
      {
        float m = 0.5f * (d0 + d1), h = 0.5f * (d0 - d1), s = 2.0f * h * h;
        ssae_warp_meanvar(m, s, 2.0f);
        d0 -= m;
        d1 -= m;
        rstd = rsqrtf(s * (1.0f / 64.0f) + 1e-5f);
      }
      xn[f * 64 + lane] = d0 * rstd;
      xn[f * 64 + 32 + lane] = d1 * rstd;
    }
    __syncthreads();
    /* Encoder row s of every slice: lanes split k, F sums reduced side by
     * side. */
    {
      float ps[FMAX];
#pragma unroll
      for (int f = 0; f < FMAX; f++)
        ps[f] = f < F ? fmaf(we0, xn[f * 64 + lane], we1 * xn[f * 64 + 32 + lane]) : 0.f;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int f = 0; f < FMAX; f++)
          if (f < F) ps[f] += __shfl_xor_sync(FULL, ps[f], o);
      if (lane < F) {
        float v = ps[0];
#pragma unroll
        for (int f = 1; f < FMAX; f++)
          if (lane == f) v = ps[f];
        hs[lane * 8 + warp] = ssae_gelu_fast(v + bes);
      }
    }
    __syncthreads();
    /* Partial latent over this block's columns, to every block. */
    {
      float p = 0.f;
#pragma unroll
      for (int f = 0; f < FMAX; f++)
        if (f < F) p = fmaf(bw[f], hs[f * 8 + zj], p);
      p += __shfl_xor_sync(FULL, p, 1);
      p += __shfl_xor_sync(FULL, p, 2);
      p += __shfl_xor_sync(FULL, p, 4);
      if (!started) {
        cl.barrier_wait();
        started = 1;
      }
      ssae_st_async(&zpart[wi & 1][r][zl], &mbar[wi & 1], (unsigned)zj, p);
    }
    if (warp == 0) {
      /* zpart[b] is written again two windows later, by blocks that have by
       * then received this block's next partials, so after this warp has
       * read it. */
      if (lane == 0) ssae_mbar_expect(&mbar[wi & 1], CS * 32 * sizeof(float));
      ssae_mbar_wait(&mbar[wi & 1], (wi >> 1) & 1);
      const int b = (int)(wi & 1);
      float z = 0.f;
#pragma unroll
      for (int q = 0; q < CS; q++) z += zpart[b][q][lane];
      float mean, q;
      {
        float s = 0.f;
        mean = z;
        ssae_warp_meanvar(mean, s, 1.0f);
        q = s * (1.0f / 32.0f) + 1e-5f;
      }
      const float d = z - mean;
      const float rstd = rsqrtf(q);
      zn[lane] = d * rstd;
      __syncwarp();
      float a0 = bbl, a1 = 0.f, a2 = 0.f, a3 = 0.f;
#pragma unroll
      for (int q = 0; q < 8; q++) {
        const float4 zq = *reinterpret_cast<const float4 *>(zn + 4 * q);
        a0 = fmaf(wb[q].x, zq.x, a0);
        a1 = fmaf(wb[q].y, zq.y, a1);
        a2 = fmaf(wb[q].z, zq.z, a2);
        a3 = fmaf(wb[q].w, zq.w, a3);
      }
      z2[lane] = ssae_gelu_fast((a0 + a1) + (a2 + a3));
    }
    __syncthreads();
    /* Decoder outputs of this block and their squared errors. */
    float sq = 0.f;
#pragma unroll
    for (int it = 0; it < 2; it++) {
      const int o = dout + 64 * it;
      const float *zz = z2 + 8 * dq;
      float a = dw[it][0].x * zz[0];
      a = fmaf(dw[it][0].y, zz[1], a);
      a = fmaf(dw[it][0].z, zz[2], a);
      a = fmaf(dw[it][0].w, zz[3], a);
      a = fmaf(dw[it][1].x, zz[4], a);
      a = fmaf(dw[it][1].y, zz[5], a);
      a = fmaf(dw[it][1].z, zz[6], a);
      a = fmaf(dw[it][1].w, zz[7], a);
      a += __shfl_xor_sync(FULL, a, 1);
      a += __shfl_xor_sync(FULL, a, 2);
      if (o < NO && dq == 0) {
        const int j = NO * r + o;
        const float y = a + bdj[it], d = y - xs[j];
        sq = fmaf(d, d, sq);
        if (recon) recon[w * FM + j] = y;
      }
    }
    sq = ssae_warp_sum(sq);
    if (lane == 0) red[warp] = sq;
    __syncthreads();
    if (warp == 0) {
      const float v = ssae_warp_sum(lane < 8 ? red[lane] : 0.f);
      if (lane == 0) ssae_st_async(&spart[r], &mbar[2], 0, v);
    }
    if (r == 0 && tid == 0) {
      /* Block r sends its next part only after block 0's next partial
       * latents, which follow this read. */
      ssae_mbar_expect(&mbar[2], CS * sizeof(float));
      ssae_mbar_wait(&mbar[2], wi & 1);
      float v = 0.f;
#pragma unroll
      for (int q = 0; q < CS; q++) v += spart[q];
      scores[w] = v / (float)FM;
    }
    wi++;
  }
  if (!started) cl.barrier_wait(); /* every arrive has its wait */
#endif
}

#endif
