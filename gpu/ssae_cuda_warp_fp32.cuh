/* warp_fp32: the large-batch kernel for M = S = 64, L = 32 (what auto
 * takes above 1024 windows): every warp runs the whole forward pass of its
 * own tile of 16 windows, start to end, with no block-wide barrier after
 * the weights are in shared memory.
 *
 * Why per warp: the block-wide tiled kernels (ssae_cuda_tiled.cuh) run
 * every phase (LayerNorm, GEMM, GELU, reduction) in lock-step behind
 * __syncthreads, so the FMA pipes idle while the block does anything else.
 * Independent warps sit at different phases at any moment and the
 * scheduler fills the FMA pipes from whichever warps are in a GEMM.
 *
 * Per warp: one buffer of 64 x 20 floats in shared memory that holds, in
 * turn and in place, the normalised slice (k-major: [m][window]), the
 * slice's encoder output h_f, then the normalised latent (rows 0..31) and
 * z' (rows 32..63). Register tiles (lane: rg = lane & 7, cg = lane >> 3):
 *   64-row GEMMs (encoder, decoder): rows 4rg+i and 32+4rg+i, windows
 *     4cg..4cg+3: 32 FMA per three 16-byte shared loads;
 *   32-row GEMMs (basis projection, bottleneck): rows 4rg+i, 16 FMA per
 *     two loads.
 * Every weight load of a warp reads 128 contiguous bytes (one wavefront),
 * every activation load four distinct 16-byte words (broadcast).
 *
 * The raw input of the next slice is loaded into registers one phase
 * ahead; LayerNorm runs on those registers before they go to shared
 * memory. GELU is the 11-instruction form on k-scaled weights
 * (ssae_gelu_scaled), 1/sqrt in the LayerNorms rsqrtf (2 ulp). */
#ifndef SSAE_CUDA_WARP_FP32_CUH
#define SSAE_CUDA_WARP_FP32_CUH

#include "ssae_cuda_common.cuh"

#define SSAE_WARP_TW 16 /* windows per warp tile */
#define SSAE_WARP_LDB 20
#define SSAE_WARP_NW 16 /* warps per block (warp_fp32 and warp_3xtf32) */

/* k GELU(u / k), k = sqrt(log2(e) / 2), in 11 instructions: the products
 * before it carry the factor k and those after it 1/k (ssae_warp_scale), so
 * exp(-z^2) = 2^(-u^2) is one multiply. GELU(v) = v Phi(v) =
 * max(v, 0) - |v| erfc(|v|/sqrt2)/2, erfc(z)/2 = exp(-z^2) Q(t),
 * t = 1/(1 + p|v|), p = 0.262, Q of degree 4 fitted (Lawson's weighted
 * minimax) to the error that matters for GELU, |v| exp(-z^2) dQ /
 * max(|v|, 1): 6.0e-8 for the fit, 1.65e-7 of max(|v|, 1) evaluated in
 * float over [-12, 12] with correctly rounded rcp and ex2. */
__device__ __forceinline__ float ssae_gelu_scaled(float u) {
  const float a = fabsf(u);
  float t, e;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(t) : "f"(fmaf(a, 0.30848142589905436f, 1.0f)));
  float q = 0.5832255482673645f;
  q = fmaf(q, t, -0.6764459013938904f);
  q = fmaf(q, t, 0.6521080732345581f);
  q = fmaf(q, t, -0.08494661003351212f);
  q = fmaf(q, t, 0.026061654090881348f);
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(u * -u));
  return fmaf(-a, q * e, fmaxf(u, 0.0f));
}

/* The factor on float4 i of the tiled weights for ssae_gelu_scaled: k on
 * the encoder's and the bottleneck's weights and biases (their GELU sees
 * k v), 1/k on the products that read a GELU's output (the basis
 * projection, the folded decoder); the decoder's bias as it is. The
 * layout's parts are in the order we, bt, wbt, dt, be, bb, bd, each padded
 * to whole float4s. */
__device__ __forceinline__ float ssae_warp_scale(const ssae_cuda_layout &lo, int i) {
  const float k = 0.8493218002880191f, rk = 1.1774100225154747f;
  const int f = 4 * i;
  return f < lo.bt ? k : f < lo.wbt ? rk : f < lo.dt ? k : f < lo.be ? rk : f < lo.bd ? k : 1.0f;
}

/* acc[i][e] += w_i(k) a_e(k) for one k: w = 4 rows, a = 4 windows. */
__device__ __forceinline__ void ssae_fma44(float (&acc)[4][4], float4 w, float4 a) {
  const float wv[4] = {w.x, w.y, w.z, w.w}, av[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int e = 0; e < 4; e++) acc[i][e] = fmaf(wv[i], av[e], acc[i][e]);
}

/* acc0 (rows 4rg+i) and, NH = 2, acc1 (rows 32+4rg+i) += W A over K
 * steps: weight rows at pw + k ws (+ 32 for acc1), activations at
 * pa + k SSAE_WARP_LDB. Loops of U steps that advance two pointers and
 * compare one: ptxas otherwise recomputes both addresses from the step
 * counter in every iteration (7-13 integer instructions per 8 steps,
 * ~2 % of the kernel's instructions); ws is a compile-time constant
 * where the caller's is. */
template <int K, int NH, int U>
__device__ __forceinline__ void ssae_wgemm(float (&a0)[4][4], float (&a1)[4][4],
                                           const float *pw, const int ws, const float *pa) {
  static_assert(K % U == 0, "K must be a multiple of the unroll");
  const float *const end = pa + K * SSAE_WARP_LDB;
#pragma unroll 1
  for (; pa != end; pa += U * SSAE_WARP_LDB, pw += U * ws) {
#pragma unroll
    for (int k = 0; k < U; k++) {
      const float4 a = ssae_ld4(pa + k * SSAE_WARP_LDB);
      ssae_fma44(a0, ssae_ld4(pw + k * ws), a);
      if constexpr (NH == 2) ssae_fma44(a1, ssae_ld4(pw + k * ws + 32), a);
    }
  }
}

/* Windows of tile t (SSAE_WARP_TW wide) inside a batch of n. */
__device__ __forceinline__ int ssae_tile_nv(size_t n, size_t t) {
  const size_t b = t * SSAE_WARP_TW;
  return (int)((n - b) < (size_t)SSAE_WARP_TW ? (n - b) : (size_t)SSAE_WARP_TW);
}

/* Raw slice f of tile t into pre: lane (lw, lh) bands 8j + 4lh .. of
 * window lw. Windows past the end of the batch re-read the last one
 * (always a valid address); their results are never stored. */
__device__ __forceinline__ void ssae_load_slice(float4 (&pre)[8], const float *__restrict__ x,
                                                size_t n, int FM, size_t t, int f, int lw,
                                                int lh) {
  const int nv = ssae_tile_nv(n, t);
  const size_t w = t * SSAE_WARP_TW + (lw < nv ? lw : nv - 1);
  const float4 *src = reinterpret_cast<const float4 *>(x + w * FM + f * 64 + 4 * lh);
#pragma unroll
  for (int j = 0; j < 8; j++) pre[j] = __ldg(src + 2 * j);
}

/* LayerNorm_M of a prefetched slice (16 windows x 64 bands, pre[8] per
 * lane) into buf, k-major with row stride ldb. Lane (lw, lh) holds bands
 * 8j + 4lh + e of window lw. The statistics are taken in float after
 * subtracting the window's first band: log-mel values sit far from zero
 * (-100 dB) with a small spread, and x - x0 is exact or a single rounding
 * of a difference of the spread's size, so the mean and variance lose
 * nothing to cancellation (a plain float mean of -100 dB values would cost
 * ~1e-6 of relative output error). 1/sqrt as rsqrtf (2 ulp). */
__device__ __forceinline__ void ssae_ln64_store(const float4 (&pre)[8], float *buf, int ldb,
                                                int lw, int lh) {
  const unsigned FULL = 0xffffffffu;
  const float p = __shfl_sync(FULL, pre[0].x, lw);
  float d[32];
#pragma unroll
  for (int j = 0; j < 8; j++) {
    d[4 * j] = pre[j].x - p;
    d[4 * j + 1] = pre[j].y - p;
    d[4 * j + 2] = pre[j].z - p;
    d[4 * j + 3] = pre[j].w - p;
  }
  float s[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int i = 0; i < 32; i++) s[i & 3] += d[i];
  float sum = (s[0] + s[1]) + (s[2] + s[3]);
  sum += __shfl_xor_sync(FULL, sum, 16);
  const float mean = sum * (1.0f / 64.0f);
#pragma unroll
  for (int i = 0; i < 32; i++) d[i] -= mean;
  float q[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int i = 0; i < 32; i++) q[i & 3] = fmaf(d[i], d[i], q[i & 3]);
  float qs = (q[0] + q[1]) + (q[2] + q[3]);
  qs += __shfl_xor_sync(FULL, qs, 16);
  const float rstd = rsqrtf(qs * (1.0f / 64.0f) + 1e-5f);
#pragma unroll
  for (int j = 0; j < 8; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) buf[(8 * j + 4 * lh + e) * ldb + lw] = d[4 * j + e] * rstd;
}

/* The 64-row products (encoder, decoder): acc0 and acc1 (rows 4rg+i and
 * 32+4rg+i of four windows) = bias + W A over K steps; w and b at the
 * lane's rows, weight rows ws apart, a at the lane's windows of a k-major
 * buffer. */
template <int K>
__device__ __forceinline__ void ssae_warp_prod64(float (&a0)[4][4], float (&a1)[4][4],
                                                 const float *w, const int ws, const float *b,
                                                 const float *a) {
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const float b0 = b[i], b1 = b[32 + i];
#pragma unroll
    for (int e = 0; e < 4; e++) {
      a0[i][e] = b0;
      a1[i][e] = b1;
    }
  }
  ssae_wgemm<K, 2, 8>(a0, a1, w, ws, a);
}

/* FC: the frame count when fixed at compile time (0: the model's), which
 * makes the decoder's weight stride a constant. */
template <int FC>
__global__ void __launch_bounds__(SSAE_WARP_NW * 32, 1)
    ssae_warp_fp32_kernel(const float *__restrict__ wts, ssae_cuda_layout lo,
                          const float *__restrict__ x, size_t n,
                          float *__restrict__ scores, float *__restrict__ recon) {
  constexpr int NW = SSAE_WARP_NW, TW = SSAE_WARP_TW, LDB = SSAE_WARP_LDB;
  extern __shared__ float4 smem4[];
  float *sm = reinterpret_cast<float *>(smem4);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int F = FC ? FC : lo.F, FM = 64 * F;
  {
    const float4 *w4 = reinterpret_cast<const float4 *>(wts);
    const int n4 = lo.tiled_total / 4;
    for (int i = tid; i < n4; i += 4 * NW * 32) {
      float4 v[4];
#pragma unroll
      for (int u = 0; u < 4; u++)
        if (i + u * NW * 32 < n4) v[u] = __ldg(w4 + i + u * NW * 32);
#pragma unroll
      for (int u = 0; u < 4; u++)
        if (i + u * NW * 32 < n4) {
          float4 w = v[u];
          const float c = ssae_warp_scale(lo, i + u * NW * 32);
          w = make_float4(w.x * c, w.y * c, w.z * c, w.w * c);
          smem4[i + u * NW * 32] = w;
        }
    }
  }
  __syncthreads();
  const float *WeT = sm + lo.we, *BT = sm + lo.bt, *WbT = sm + lo.wbt, *DT = sm + lo.dt;
  const float *be = sm + lo.be, *bb = sm + lo.bb, *bd = sm + lo.bd;
  float *buf = sm + lo.tiled_total + warp * (64 * LDB);
  const int rg = lane & 7, cg = lane >> 3; /* compute map */
  const int lw = lane & 15, lh = lane >> 4; /* load map: window lw, bands 8j+4lh.. */
  const size_t ntiles = (n + TW - 1) / TW;
  const size_t stride = (size_t)gridDim.x * NW;
  const unsigned FULL = 0xffffffffu;

  auto tile_nv = [&](size_t t) { return ssae_tile_nv(n, t); };
  float4 pre[8];
  auto load_raw = [&](size_t t, int f) { ssae_load_slice(pre, x, n, FM, t, f, lw, lh); };
  auto ln_store = [&]() { ssae_ln64_store(pre, buf, LDB, lw, lh); };

  /* Slice encoder of slice f of the tile whose raw slice is in pre:
   * LayerNorm into buf, h = GELU(We' n + be') back into buf (k-major). */
  auto encode = [&]() {
    ln_store();
    __syncwarp();
    float a0[4][4], a1[4][4];
    ssae_warp_prod64<64>(a0, a1, WeT + 4 * rg, 64, be + 4 * rg, buf + 4 * cg);
    __syncwarp();
#pragma unroll
    for (int i = 0; i < 4; i++) {
      *reinterpret_cast<float4 *>(buf + (4 * rg + i) * LDB + 4 * cg) =
          make_float4(ssae_gelu_scaled(a0[i][0]), ssae_gelu_scaled(a0[i][1]),
                      ssae_gelu_scaled(a0[i][2]), ssae_gelu_scaled(a0[i][3]));
      *reinterpret_cast<float4 *>(buf + (32 + 4 * rg + i) * LDB + 4 * cg) =
          make_float4(ssae_gelu_scaled(a1[i][0]), ssae_gelu_scaled(a1[i][1]),
                      ssae_gelu_scaled(a1[i][2]), ssae_gelu_scaled(a1[i][3]));
    }
    __syncwarp();
  };
  /* Basis projection of slice f: zp = B_f h_f (the slice's 64 terms summed
   * on their own: smaller rounding error than one running sum of 320). */
  auto project = [&](int f, float (&zp)[4][4]) {
    const float *B = BT + f * 64 * 32 + 4 * rg;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int e = 0; e < 4; e++) zp[i][e] = 0.f;
    ssae_wgemm<64, 1, 8>(zp, zp, B, 32, buf + 4 * cg);
  };
  /* LayerNorm_L of each window's z (column e of the tile: rows 4rg+i on
   * the eight lanes of one cg), in float: z carries its own rounding from
   * the projection, which a wider mean would not remove. Into buf rows
   * 0..31. */
  auto ln_latent = [&](float (&zacc)[4][4]) {
#pragma unroll
    for (int e = 0; e < 4; e++) {
      float s = (zacc[0][e] + zacc[1][e]) + (zacc[2][e] + zacc[3][e]);
      s += __shfl_xor_sync(FULL, s, 1);
      s += __shfl_xor_sync(FULL, s, 2);
      s += __shfl_xor_sync(FULL, s, 4);
      const float mean = s * (1.0f / 32.0f);
      float q = 0.f;
#pragma unroll
      for (int i = 0; i < 4; i++) {
        zacc[i][e] -= mean;
        q = fmaf(zacc[i][e], zacc[i][e], q);
      }
      q += __shfl_xor_sync(FULL, q, 1);
      q += __shfl_xor_sync(FULL, q, 2);
      q += __shfl_xor_sync(FULL, q, 4);
      const float rstd = rsqrtf(q * (1.0f / 32.0f) + 1e-5f);
#pragma unroll
      for (int i = 0; i < 4; i++) zacc[i][e] *= rstd;
    }
#pragma unroll
    for (int i = 0; i < 4; i++)
      *reinterpret_cast<float4 *>(buf + (4 * rg + i) * LDB + 4 * cg) =
          make_float4(zacc[i][0], zacc[i][1], zacc[i][2], zacc[i][3]);
    __syncwarp();
  };
  /* Bottleneck: z' = GELU(Wb' zn + bb') from buf rows 0..31 into rows
   * 32..63. */
  auto bottleneck = [&]() {
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const float b = bb[4 * rg + i];
#pragma unroll
      for (int e = 0; e < 4; e++) acc[i][e] = b;
    }
    ssae_wgemm<32, 1, 8>(acc, acc, WbT + 4 * rg, 32, buf + 4 * cg);
#pragma unroll
    for (int i = 0; i < 4; i++)
      *reinterpret_cast<float4 *>(buf + (32 + 4 * rg + i) * LDB + 4 * cg) =
          make_float4(ssae_gelu_scaled(acc[i][0]), ssae_gelu_scaled(acc[i][1]),
                      ssae_gelu_scaled(acc[i][2]), ssae_gelu_scaled(acc[i][3]));
    __syncwarp();
  };
  /* Reconstruction + decoder (folded) of slice f from z' in zb (rows
   * 32..63 of a warp's buffer): y_f = D_f z' + bd, and the squared error
   * against x (re-read: from L2) added to part. */
  auto decode = [&](int f, const float *zb, size_t base, int nv, float (&part)[4]) {
    float a0[4][4], a1[4][4];
    ssae_warp_prod64<32>(a0, a1, DT + f * 64 + 4 * rg, FM, bd + 4 * rg, zb + 32 * LDB + 4 * cg);
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int w = 4 * cg + e;
      const size_t off = (base + (w < nv ? w : nv - 1)) * FM + f * 64 + 4 * rg;
      const float4 x0 = __ldg(reinterpret_cast<const float4 *>(x + off));
      const float4 x1 = __ldg(reinterpret_cast<const float4 *>(x + off + 32));
      const float d0 = a0[0][e] - x0.x, d1 = a0[1][e] - x0.y;
      const float d2 = a0[2][e] - x0.z, d3 = a0[3][e] - x0.w;
      const float d4 = a1[0][e] - x1.x, d5 = a1[1][e] - x1.y;
      const float d6 = a1[2][e] - x1.z, d7 = a1[3][e] - x1.w;
      part[e] = fmaf(d0, d0, fmaf(d1, d1, fmaf(d2, d2, fmaf(d3, d3, part[e]))));
      part[e] = fmaf(d4, d4, fmaf(d5, d5, fmaf(d6, d6, fmaf(d7, d7, part[e]))));
      if (recon && w < nv) {
        *reinterpret_cast<float4 *>(recon + off) =
            make_float4(a0[0][e], a0[1][e], a0[2][e], a0[3][e]);
        *reinterpret_cast<float4 *>(recon + off + 32) =
            make_float4(a1[0][e], a1[1][e], a1[2][e], a1[3][e]);
      }
    }
  };
  /* The rows' partial sums of the squared error, reduced over the eight
   * lanes of each column. */
  auto reduce_part = [&](float (&part)[4]) {
#pragma unroll
    for (int e = 0; e < 4; e++) {
      part[e] += __shfl_xor_sync(FULL, part[e], 1);
      part[e] += __shfl_xor_sync(FULL, part[e], 2);
      part[e] += __shfl_xor_sync(FULL, part[e], 4);
    }
  };

  /* Tiles go round the blocks first, so that when the tile count is not a
   * multiple of the warps (1 M windows: 65 536 tiles on 2 112 warps) the
   * last round's tiles sit one per block instead of filling the first few
   * blocks. Such a last round (at most one tile per block) is left to the
   * warps of each block together (below): a tile alone on its SM runs on one warp
   * at a fraction of the SM's issue rate (1 M windows: ~18 us of ~2.65 ms
   * for the last 1 024 windows). */
  size_t tend = ntiles;
  {
    const size_t rem = ntiles % stride;
    if (ntiles >= stride && rem <= gridDim.x && F <= NW) tend = ntiles - rem;
  }
  size_t t = (size_t)warp * gridDim.x + blockIdx.x;
  if (t < tend) load_raw(t, 0);
  for (; t < tend; t += stride) {
    const size_t base = t * TW;
    const int nv = tile_nv(t);
    float zacc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int e = 0; e < 4; e++) zacc[i][e] = 0.f;
    for (int f = 0; f < F; f++) {
      encode();
      if (f + 1 < F) load_raw(t, f + 1);
      float zp[4][4];
      project(f, zp);
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) zacc[i][e] += zp[i][e];
      __syncwarp();
    }
    ln_latent(zacc);
    if (t + stride < tend) load_raw(t + stride, 0);
    bottleneck();
    float part[4] = {0.f, 0.f, 0.f, 0.f};
    for (int f = 0; f < F; f++) decode(f, buf, base, nv, part);
    reduce_part(part);
#pragma unroll
    for (int e = 0; e < 4; e++)
      if (rg == 0 && 4 * cg + e < nv) scores[base + 4 * cg + e] = part[e] / (float)FM;
    __syncwarp();
  }

  {
    /* The last round's tile of this block, warp f taking
     * slice f: encoder and projection, then warp 0 sums the F partial
     * latents in slice order (the same additions as the loop above), runs
     * the LayerNorm and the bottleneck, then warp f decodes slice f and
     * warp 0 sums the F partial errors. Named barrier 1 over the F warps. */
    if (tend < ntiles && blockIdx.x < ntiles - tend && warp < F) {
      const size_t tc = tend + blockIdx.x;
      const size_t base = tc * TW;
      const int nv = tile_nv(tc);
      const unsigned nthr = 32u * (unsigned)F;
      float *const buf0 = sm + lo.tiled_total;
      load_raw(tc, warp);
      encode();
      float zp[4][4];
      project(warp, zp);
      __syncwarp();
#pragma unroll
      for (int i = 0; i < 4; i++)
        *reinterpret_cast<float4 *>(buf + (4 * rg + i) * LDB + 4 * cg) =
            make_float4(zp[i][0], zp[i][1], zp[i][2], zp[i][3]);
      asm volatile("bar.sync 1, %0;" ::"r"(nthr) : "memory");
      if (warp == 0) {
        float zacc[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
          for (int e = 0; e < 4; e++) zacc[i][e] = 0.f;
        for (int f = 0; f < F; f++) {
#pragma unroll
          for (int i = 0; i < 4; i++) {
            const float4 v = ssae_ld4(buf0 + f * 64 * LDB + (4 * rg + i) * LDB + 4 * cg);
            zacc[i][0] += v.x;
            zacc[i][1] += v.y;
            zacc[i][2] += v.z;
            zacc[i][3] += v.w;
          }
        }
        __syncwarp();
        ln_latent(zacc);
        bottleneck();
      }
      asm volatile("bar.sync 1, %0;" ::"r"(nthr) : "memory");
      float part[4] = {0.f, 0.f, 0.f, 0.f};
      decode(warp, buf0, base, nv, part);
      reduce_part(part);
      /* Rows 0..31 of this warp's buffer are free again (warp 0 read the
       * partial latents before the barrier). */
      if (rg == 0)
        *reinterpret_cast<float4 *>(buf + 4 * cg) = make_float4(part[0], part[1], part[2], part[3]);
      asm volatile("bar.sync 1, %0;" ::"r"(nthr) : "memory");
      if (warp == 0 && lane < TW) {
        float v = 0.f;
        for (int f = 0; f < F; f++) v += buf0[f * 64 * LDB + lane];
        if (lane < nv) scores[base + lane] = v / (float)FM;
      }
    }
  }
}

/* Shared memory of ssae_warp_fp32_kernel, bytes. */
static inline size_t ssae_warp_smem(const ssae_cuda_layout *lo) {
  return ((size_t)lo->tiled_total + (size_t)SSAE_WARP_NW * 64 * SSAE_WARP_LDB) * sizeof(float);
}

#endif
