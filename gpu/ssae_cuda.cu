/* The CUDA backend (see ssae_cuda.h): weight folding and upload, buffers,
 * kernel choice, CUDA graphs for small batches, chunking, error handling. */
#include "ssae_cuda.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "ssae_cuda_cluster.cuh"
#include "ssae_cuda_kernels.cuh"
#include "ssae_cuda_tc.cuh"
#include "ssae_cuda_warp.cuh"

namespace {

/* Batches up to this size replay a captured graph (copy in, kernel, copy
 * out): one launch instead of three API calls. */
const size_t kGraphMax = 4096;
const int kGraphSlots = 40;
/* Asynchronous batches (the engine's worker) come in every size from one
 * period to the next; a graph per size would be captured and instantiated
 * for nearly every batch. They replay graphs up to this size only, where
 * the sizes are few and one launch instead of three matters most. */
const size_t kAsyncGraphMax = 16;
/* Up to this many windows a batch runs one window per cluster of 8
 * blocks (sm_90), then one window per block. */
const size_t kClusterMax = 16;
const size_t kSmallMax = 1024;
/* The per-warp kernel that auto picks (a kernel_kind): K_WARP16J, the
 * k loops on two pointers, the frame count fixed at compile time for the
 * default 5 and the last round's tiles computed by several warps each
 * (H100, 1048576 windows, graph replay, three rounds alternating in one
 * call: 400.2-401.0 M windows/s against 395.7-400.2 M for K_WARP16I, the
 * same without the last-round change, and 395.7-396.8 M for K_WARP16N with
 * F fixed; 399.8-401.3 M against 394.2-395.8 M for K_WARP16N in the two
 * calls after). Measured no faster and removed: the decoder's slice of x
 * prefetched into L1 before its products (400.7-401.5 M, same call).
 * Measured slower and removed: biases replicated in shared memory so one
 * 16-byte load sets four accumulators (381-384 M), the slice encoder on
 * window-major input with the LayerNorm's scale after the products
 * (370-371 M), the decoder's products started from bd - x (384 M, and
 * reconstructions off by ~1e-4 for models whose y is far smaller than x),
 * each k loop's first operands loaded in the loop before (391-392 M).
 * Earlier: K_WARP16N 391.9-392.3 M against 390.4-391.0 M for K_WARP16R;
 * K_WARP16R 390.1 M against 388.1 M for K_WARP16G, 382.7 M for K_WARP16;
 * starting the products from their bias, K_WARP16P and K_WARP16B, 352.9 M
 * and 374.1 M; the k loops unrolled 16 instead of 8, 379-385 M. */
const int kWarpAuto = 23;
/* The tensor-core kernel that SSAE_CUDA_MATH=3xtf32 picks above kSmallMax
 * (opt-in: products in 3xTF32 on the tensor cores): K_TC2, both operands'
 * small halves truncated by the MMA (H100, 1048576 windows, graph replay,
 * three rounds alternating: 554.5-558.1 M windows/s; K_TC1, the
 * activations' small halves rounded, 552.7-553.4 M; warp16j 397.5-403.8 M
 * in the same call). Measured slower and removed: cvt.rna.tf32 for the
 * rounding (four instructions on sm_90, 520-532 M), z' split once for the
 * decoder's five slices (543-551 M), the k loops not unrolled (483-512 M,
 * though without spills). */
const int kTcAuto = 42;
/* Default buffer capacity in windows when the caller gives no bound. */
const size_t kDefaultCap = 65536;

/* Tiled kinds: the value is the tile width; K_TILED128W is 128 windows on
 * 512 threads (twice the warps, half the registers per thread). Per-warp
 * kinds: the value is the warps per block. */
enum kernel_kind { K_GENERIC = 0, K_TILED32 = 32, K_TILED64 = 64, K_TILED128 = 128,
                   K_TILED128W = 129, K_SMALL = 1, K_CLUSTER = 2, K_CLUSTER0 = 3,
                   K_CLUSTER1 = 4, K_WARP12 = 12, K_WARP16 = 16, K_WARP16B = 17,
                   K_WARP16G = 18, K_WARP16P = 19, K_WARP16R = 20, K_WARP16N = 21,
                   K_WARP16I = 22, K_WARP16J = 23, K_TC1 = 41, K_TC2 = 42 };
/* ssae_fused_warp<16, 8, V>: K_WARP16B V = 3 (13-instruction GELU and
 * products that start from their bias), K_WARP16G V = 1 (the GELU only),
 * K_WARP16P V = 2 (the bias start only), K_WARP16R V = 5, K_WARP16N V = 13
 * (K_WARP16R with the 11-instruction GELU); on top of K_WARP16N:
 * K_WARP16I V = 29 (k loops on two pointers), K_WARP16J V = 61 (and the
 * last round's tiles by F warps together); these two with the frame count fixed at compile time
 * when the model's is 5. */
/* K_TC1, K_TC2: ssae_fused_tc<16, FC, V>, the opt-in 3xTF32 tensor-core
 * kernel, V = 1 (the weights' small halves truncated by the MMA) and V = 5
 * (the activations' too); FC = 5 (the only frame count they run). */
int is_warp(int k) {
  return k == K_WARP12 || k == K_WARP16 || k == K_WARP16B || k == K_WARP16G ||
         k == K_WARP16P || k == K_WARP16R || k == K_WARP16N || k == K_WARP16I ||
         k == K_WARP16J;
}
int is_cluster(int k) { return k == K_CLUSTER || k == K_CLUSTER0 || k == K_CLUSTER1; }
int warp_index(int k) { return k == K_WARP12 ? 0 : k == K_WARP16 ? 1 : 2; }
int warp_count(int k) { return k == K_WARP12 ? 12 : 16; }
int tile_width(kernel_kind k) { return k == K_TILED128W ? 128 : (int)k; }

struct graph_slot {
  cudaGraphExec_t exec;
  size_t n;
  int recon;
  int lane; /* which input/score buffers (0, or 1 for asynchronous slot 1) */
  unsigned long long used;
};

struct cuda_impl {
  int dev;
  int sms;
  size_t smem_optin;
  ssae_cuda_layout lo;
  int FM;
  int tiled_ok[4]; /* TW 32, 64, 128, 128 on 512 threads */
  int force;       /* -1 auto, else kernel_kind */
  int wide;        /* auto picks K_TILED128W for large batches */
  int small_ok;    /* ssae_fused_small fits these dimensions */
  int cluster_ok;  /* ssae_fused_cluster: these dimensions on sm_90+ */
  int warp_ok[3];  /* ssae_fused_warp<12>, <16>, <16, 8, V> fit in shared memory */
  int tc_ok;       /* ssae_fused_tc runs here (sm_80+, default dimensions 64/5/32/64) */
  int tc_auto;     /* SSAE_CUDA_MATH=3xtf32: auto takes ssae_fused_tc above kSmallMax */
  ssae_tc_layout tl;
  size_t gen_gmax; /* windows per block the generic kernel can hold */
  cudaStream_t stream;
  float *d_w, *d_x, *d_scores, *d_recon;
  float *h_x, *h_scores, *h_recon;
  /* Slot 1 of the asynchronous runs (slot 0 uses the buffers above): its
   * own pinned input and scores, made on first use; an event per slot. */
  float *d_x1, *d_scores1, *h_x1, *h_scores1;
  cudaEvent_t ev[2];
  size_t pend_n[2];
  size_t cap;
  graph_slot graphs[kGraphSlots];
  unsigned long long tick;
  long fail_after; /* -1: no injected failure */
  long runs;
  int broken;
  char broken_msg[SSAE_ERR_LEN];
};

int cuda_fail(cuda_impl *c, ssae_err *err, const char *what, cudaError_t e) {
  if (c) {
    c->broken = 1;
    snprintf(c->broken_msg, sizeof c->broken_msg, "CUDA: %s: %s", what,
             cudaGetErrorString(e));
  }
  return ssae_err_set(err, "CUDA: %s: %s", what, cudaGetErrorString(e));
}

#define CK(call, what)                                   \
  do {                                                   \
    cudaError_t e_ = (call);                             \
    if (e_ != cudaSuccess) return cuda_fail(c, err, what, e_); \
  } while (0)

int pad4(int v) { return (v + 3) & ~3; }

ssae_cuda_layout make_layout(const ssae_dims *d) {
  ssae_cuda_layout lo;
  lo.M = d->n_mels;
  lo.F = d->frames;
  lo.L = d->latent;
  lo.S = d->slice_latent;
  const int C = lo.F * lo.S, FM = lo.F * lo.M;
  int o = 0;
  lo.we = o; o += pad4(lo.M * lo.S);
  lo.bt = o; o += pad4(C * lo.L);
  lo.wbt = o; o += pad4(lo.L * lo.L);
  lo.dt = o; o += pad4(lo.L * FM);
  lo.be = o; o += pad4(lo.S);
  lo.bb = o; o += pad4(lo.L);
  lo.bd = o; o += pad4(lo.M);
  /* The tiled kernel copies [0, tiled_total) into shared memory. */
  lo.tiled_total = o;
  lo.we_r = o; o += pad4(lo.M * lo.S);
  lo.b_r = o; o += pad4(C * lo.L);
  lo.wb_r = o; o += pad4(lo.L * lo.L);
  lo.d_r = o; o += pad4(lo.L * FM);
  lo.total = o;
  return lo;
}

/* Folds the LayerNorm affine parameters into the next Linear and the
 * decoder into the reconstruction (see ssae_cuda_kernels.cuh), in double. */
void fold_weights(const ssae_model *m, const ssae_cuda_layout &lo, float *w) {
  const int M = lo.M, F = lo.F, L = lo.L, S = lo.S, C = F * S, FM = F * M;
  memset(w, 0, sizeof(float) * lo.total);
  for (int s = 0; s < S; s++) {
    double b = m->enc_b[s];
    for (int k = 0; k < M; k++) {
      w[lo.we + k * S + s] = (float)((double)m->enc_w[s * M + k] * m->ln_enc_w[k]);
      b += (double)m->enc_w[s * M + k] * m->ln_enc_b[k];
    }
    w[lo.be + s] = (float)b;
  }
  for (int l = 0; l < L; l++)
    for (int c = 0; c < C; c++) w[lo.bt + c * L + l] = m->basis_n[l * C + c];
  for (int l = 0; l < L; l++) {
    double b = m->bn_b[l];
    for (int k = 0; k < L; k++) {
      w[lo.wbt + k * L + l] = (float)((double)m->bn_w[l * L + k] * m->ln_bn_w[k]);
      b += (double)m->bn_w[l * L + k] * m->ln_bn_b[k];
    }
    w[lo.bb + l] = (float)b;
  }
  for (int f = 0; f < F; f++)
    for (int mm = 0; mm < M; mm++)
      for (int l = 0; l < L; l++) {
        double a = 0;
        for (int s = 0; s < S; s++)
          a += (double)m->dec_w[mm * S + s] * m->basis_n[l * C + f * S + s];
        w[lo.dt + l * FM + f * M + mm] = (float)a;
      }
  for (int mm = 0; mm < M; mm++) w[lo.bd + mm] = m->dec_b[mm];
  for (int s = 0; s < S; s++)
    for (int k = 0; k < M; k++) w[lo.we_r + s * M + k] = w[lo.we + k * S + s];
  for (int l = 0; l < L; l++)
    for (int c = 0; c < C; c++) w[lo.b_r + l * C + c] = w[lo.bt + c * L + l];
  for (int l = 0; l < L; l++)
    for (int k = 0; k < L; k++) w[lo.wb_r + l * L + k] = w[lo.wbt + k * L + l];
  for (int j = 0; j < FM; j++)
    for (int l = 0; l < L; l++) w[lo.d_r + j * L + l] = w[lo.dt + l * FM + j];
}

int tw_index(int k) { return k == 32 ? 0 : k == 64 ? 1 : k == 128 ? 2 : 3; }

kernel_kind choose_kernel(const cuda_impl *c, size_t n) {
  if (c->force == K_GENERIC) return K_GENERIC;
  if (c->force == K_SMALL) return c->small_ok ? K_SMALL : K_GENERIC;
  if (is_cluster(c->force))
    return c->cluster_ok ? (kernel_kind)c->force : K_GENERIC;
  if (is_warp(c->force))
    return c->warp_ok[warp_index(c->force)] ? (kernel_kind)c->force : K_GENERIC;
  if (c->force == K_TC1 || c->force == K_TC2) return c->tc_ok ? (kernel_kind)c->force : K_GENERIC;
  if (c->force > 0) return c->tiled_ok[tw_index(c->force)] ? (kernel_kind)c->force : K_GENERIC;
  if (c->cluster_ok && n <= kClusterMax) return K_CLUSTER;
  if (c->small_ok && n <= kSmallMax) return K_SMALL;
  if (c->tc_auto && c->tc_ok) return (kernel_kind)kTcAuto;
  /* Above that the per-warp kernel (H100: 130 M windows/s at 4096 against
   * 107 M for tiled32, 389 M against 252 M for tiled128 at 1048576). */
  if (c->warp_ok[warp_index(kWarpAuto)]) return (kernel_kind)kWarpAuto;
  if (!c->tiled_ok[0] || n < 512) return K_GENERIC;
  const size_t sms = (size_t)c->sms;
  if (c->tiled_ok[3] && n >= 128 * sms && c->wide) return K_TILED128W;
  if (c->tiled_ok[2] && n >= 128 * sms) return K_TILED128;
  if (c->tiled_ok[1] && n >= 64 * sms) return K_TILED64;
  return K_TILED32;
}

size_t generic_g(const cuda_impl *c, size_t n) {
  size_t g = (n + 2 * (size_t)c->sms - 1) / (2 * (size_t)c->sms);
  return std::max<size_t>(1, std::min(g, c->gen_gmax));
}

size_t generic_smem(const ssae_cuda_layout &lo, size_t g) {
  return g * (size_t)(lo.F * lo.M + lo.F * lo.S + 2 * lo.L) * sizeof(float);
}

/* Enqueues one launch on the stream (no synchronisation). */
int launch(cuda_impl *c, const float *dx, size_t n, float *dscores, float *drecon,
           int poison_config, ssae_err *err) {
  const kernel_kind k = choose_kernel(c, n);
  dim3 block(poison_config ? 4096 : SSAE_CUDA_THREADS);
  if (k == K_SMALL) {
    const unsigned grid = (unsigned)std::min<size_t>(n, (size_t)c->sms * 2);
    if (!poison_config) block.x = SSAE_SMALL_THREADS;
    ssae_fused_small<<<grid, block, 0, c->stream>>>(c->d_w, c->lo, dx, n, dscores, drecon);
  } else if (is_cluster(k)) {
    const size_t ncl =
        std::max<size_t>(1, std::min<size_t>(n, (size_t)c->sms / SSAE_CLUSTER_CTAS));
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = SSAE_CLUSTER_CTAS;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3((unsigned)(ncl * SSAE_CLUSTER_CTAS));
    cfg.blockDim = dim3(poison_config ? 4096 : SSAE_CLUSTER_THREADS);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = c->stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    /* K_CLUSTER0: two cluster barriers per window; K_CLUSTER1: mbarriers,
     * two-pass LayerNorm statistics (the versions before). */
    if (c->lo.F == 5 && k == K_CLUSTER1)
      CK(cudaLaunchKernelEx(&cfg, ssae_fused_cluster<5, 1>, (const float *)c->d_w, c->lo, dx,
                            n, dscores, drecon),
         "kernel launch");
    else if (k == K_CLUSTER1)
      CK(cudaLaunchKernelEx(&cfg, ssae_fused_cluster<0, 1>, (const float *)c->d_w, c->lo, dx,
                            n, dscores, drecon),
         "kernel launch");
    else if (c->lo.F == 5 && k == K_CLUSTER0)
      CK(cudaLaunchKernelEx(&cfg, ssae_fused_cluster<5, 0>, (const float *)c->d_w, c->lo, dx,
                            n, dscores, drecon),
         "kernel launch");
    else if (c->lo.F == 5)
      CK(cudaLaunchKernelEx(&cfg, ssae_fused_cluster<5>, (const float *)c->d_w, c->lo, dx, n,
                            dscores, drecon),
         "kernel launch");
    else if (k == K_CLUSTER0)
      CK(cudaLaunchKernelEx(&cfg, ssae_fused_cluster<0, 0>, (const float *)c->d_w, c->lo, dx,
                            n, dscores, drecon),
         "kernel launch");
    else
      CK(cudaLaunchKernelEx(&cfg, ssae_fused_cluster<0>, (const float *)c->d_w, c->lo, dx, n,
                            dscores, drecon),
         "kernel launch");
  } else if (k == K_TC1 || k == K_TC2) {
    const size_t ntiles = (n + SSAE_WARP_TW - 1) / SSAE_WARP_TW;
    const unsigned grid = (unsigned)std::min<size_t>(ntiles, (size_t)c->sms);
    const size_t smem = ssae_tc_smem(&c->lo, 16);
    if (!poison_config) block.x = 32 * 16;
#define SSAE_TC_LAUNCH(FC, V)                                                              \
  ssae_fused_tc<16, FC, V><<<grid, block, smem, c->stream>>>(c->d_w, c->lo, c->tl, dx, n, \
                                                             dscores, drecon)
    if (k == K_TC1) SSAE_TC_LAUNCH(5, 1);
    else SSAE_TC_LAUNCH(5, 5);
#undef SSAE_TC_LAUNCH
  } else if (is_warp(k)) {
    const size_t ntiles = (n + SSAE_WARP_TW - 1) / SSAE_WARP_TW;
    /* Every SM gets a block while there are tiles: the kernel deals tiles
     * round the blocks first, so a small batch runs one warp per SM. */
    const unsigned grid = (unsigned)std::min<size_t>(ntiles, (size_t)c->sms);
    const size_t smem = ssae_warp_smem(&c->lo, warp_count(k));
    if (!poison_config) block.x = 32 * (unsigned)warp_count(k);
    if (k == K_WARP12)
      ssae_fused_warp<12><<<grid, block, smem, c->stream>>>(c->d_w, c->lo, dx, n, dscores,
                                                           drecon);
    else if (k == K_WARP16B)
      ssae_fused_warp<16, 8, 3><<<grid, block, smem, c->stream>>>(c->d_w, c->lo, dx, n,
                                                                  dscores, drecon);
    else if (k == K_WARP16G)
      ssae_fused_warp<16, 8, 1><<<grid, block, smem, c->stream>>>(c->d_w, c->lo, dx, n,
                                                                  dscores, drecon);
    else if (k == K_WARP16R)
      ssae_fused_warp<16, 8, 5><<<grid, block, smem, c->stream>>>(c->d_w, c->lo, dx, n,
                                                                  dscores, drecon);
    else if (k == K_WARP16P)
      ssae_fused_warp<16, 8, 2><<<grid, block, smem, c->stream>>>(c->d_w, c->lo, dx, n,
                                                                  dscores, drecon);
    else if (k == K_WARP16N)
      ssae_fused_warp<16, 8, 13><<<grid, block, smem, c->stream>>>(c->d_w, c->lo, dx, n,
                                                                   dscores, drecon);
    else if (k == K_WARP16I && c->lo.F == 5)
      ssae_fused_warp<16, 8, 29, 5><<<grid, block, smem, c->stream>>>(c->d_w, c->lo, dx, n,
                                                                      dscores, drecon);
    else if (k == K_WARP16I)
      ssae_fused_warp<16, 8, 29><<<grid, block, smem, c->stream>>>(c->d_w, c->lo, dx, n,
                                                                   dscores, drecon);
    else if (k == K_WARP16J && c->lo.F == 5)
      ssae_fused_warp<16, 8, 61, 5><<<grid, block, smem, c->stream>>>(c->d_w, c->lo, dx, n,
                                                                      dscores, drecon);
    else if (k == K_WARP16J)
      ssae_fused_warp<16, 8, 61><<<grid, block, smem, c->stream>>>(c->d_w, c->lo, dx, n,
                                                                   dscores, drecon);
    else
      ssae_fused_warp<16><<<grid, block, smem, c->stream>>>(c->d_w, c->lo, dx, n, dscores,
                                                           drecon);
  } else if (k == K_GENERIC) {
    block.x = poison_config ? 4096 : SSAE_GENERIC_THREADS;
    const size_t g = generic_g(c, n);
    const size_t nblk = (n + g - 1) / g;
    const unsigned grid = (unsigned)std::min<size_t>(nblk, (size_t)c->sms * 8);
    ssae_fused_generic<<<grid, block, generic_smem(c->lo, g), c->stream>>>(
        c->d_w, c->lo, (int)g, dx, n, dscores, drecon);
  } else {
    const int tw = tile_width(k);
    const size_t ntiles = (n + tw - 1) / tw;
    const unsigned grid = (unsigned)std::min<size_t>(ntiles, (size_t)c->sms);
    const size_t smem = ssae_tiled_smem(&c->lo, tw);
    if (k == K_TILED128W) {
      if (!poison_config) block.x = 512;
      ssae_fused_tiled<128, 512><<<grid, block, smem, c->stream>>>(c->d_w, c->lo, dx, n,
                                                                   dscores, drecon);
    } else if (k == K_TILED128) {
      ssae_fused_tiled<128, 256><<<grid, block, smem, c->stream>>>(c->d_w, c->lo, dx, n,
                                                                   dscores, drecon);
    } else if (k == K_TILED64) {
      ssae_fused_tiled<64, 256><<<grid, block, smem, c->stream>>>(c->d_w, c->lo, dx, n,
                                                                  dscores, drecon);
    } else {
      ssae_fused_tiled<32, 256><<<grid, block, smem, c->stream>>>(c->d_w, c->lo, dx, n,
                                                                  dscores, drecon);
    }
  }
  CK(cudaGetLastError(), "kernel launch");
  return 0;
}

void destroy_impl(cuda_impl *c) {
  if (!c) return;
  cudaSetDevice(c->dev);
  for (int i = 0; i < kGraphSlots; i++)
    if (c->graphs[i].exec) cudaGraphExecDestroy(c->graphs[i].exec);
  if (c->stream) cudaStreamDestroy(c->stream);
  for (int i = 0; i < 2; i++)
    if (c->ev[i]) cudaEventDestroy(c->ev[i]);
  cudaFree(c->d_x1);
  cudaFree(c->d_scores1);
  cudaFreeHost(c->h_x1);
  cudaFreeHost(c->h_scores1);
  cudaFree(c->d_w);
  cudaFree(c->d_x);
  cudaFree(c->d_scores);
  cudaFree(c->d_recon);
  cudaFreeHost(c->h_x);
  cudaFreeHost(c->h_scores);
  cudaFreeHost(c->h_recon);
  free(c);
}

template <typename K>
int set_smem_attr(cuda_impl *c, K kern, size_t bytes, ssae_err *err) {
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
     "raising the kernel's shared-memory limit");
  return 0;
}

cuda_impl *create_impl(const ssae_model *m, size_t max_batch, ssae_err *err) {
  const ssae_dims *d = &m->d;
  if (d->n_mels < 1 || d->frames < 1 || d->latent < 1 || d->slice_latent < 1) {
    ssae_err_set(err, "CUDA: invalid model dimensions");
    return NULL;
  }
  cuda_impl *c = (cuda_impl *)calloc(1, sizeof *c);
  if (!c) {
    ssae_err_set(err, "CUDA: out of memory");
    return NULL;
  }
  {
    /* Folding and uploading would take too long or overflow int offsets. */
    const double M = d->n_mels, F = d->frames, L = d->latent, S = d->slice_latent;
    const double floats = M * S + F * S * L + L * L + L * F * M + S + L + M;
    if (floats > (double)(1 << 28) || F * M * L * S > 1e11) {
      ssae_err_set(err, "CUDA: model dimensions too large for the CUDA backend");
      free(c);
      return NULL;
    }
  }
  c->force = -1;
  c->fail_after = -1;
  {
    const char *w = getenv("SSAE_CUDA_WIDE");
    c->wide = w && *w == '1';
  }
  c->lo = make_layout(d);
  c->FM = d->frames * d->n_mels;
  const char *fa = getenv("SSAE_CUDA_FAIL_AFTER");
  if (fa && *fa) c->fail_after = strtol(fa, NULL, 10);
  const char *fk = getenv("SSAE_CUDA_KERNEL");
  if (fk && *fk) {
    if (!strcmp(fk, "generic")) c->force = K_GENERIC;
    else if (!strcmp(fk, "tiled32")) c->force = K_TILED32;
    else if (!strcmp(fk, "tiled64")) c->force = K_TILED64;
    else if (!strcmp(fk, "tiled128") || !strcmp(fk, "tiled")) c->force = K_TILED128;
    else if (!strcmp(fk, "tiled128w")) c->force = K_TILED128W;
    else if (!strcmp(fk, "small")) c->force = K_SMALL;
    else if (!strcmp(fk, "cluster")) c->force = K_CLUSTER;
    else if (!strcmp(fk, "cluster0")) c->force = K_CLUSTER0;
    else if (!strcmp(fk, "cluster1")) c->force = K_CLUSTER1;
    else if (!strcmp(fk, "warp12")) c->force = K_WARP12;
    else if (!strcmp(fk, "warp16") || !strcmp(fk, "warp")) c->force = K_WARP16;
    else if (!strcmp(fk, "warp16b")) c->force = K_WARP16B;
    else if (!strcmp(fk, "warp16g")) c->force = K_WARP16G;
    else if (!strcmp(fk, "warp16p")) c->force = K_WARP16P;
    else if (!strcmp(fk, "warp16r")) c->force = K_WARP16R;
    else if (!strcmp(fk, "warp16n")) c->force = K_WARP16N;
    else if (!strcmp(fk, "warp16i")) c->force = K_WARP16I;
    else if (!strcmp(fk, "warp16j")) c->force = K_WARP16J;
    else if (!strcmp(fk, "tc1")) c->force = K_TC1;
    else if (!strcmp(fk, "tc2") || !strcmp(fk, "tc")) c->force = K_TC2;
  }

#define CKN(call, what)                                      \
  do {                                                       \
    cudaError_t e_ = (call);                                 \
    if (e_ != cudaSuccess) {                                 \
      cuda_fail(c, err, what, e_);                           \
      destroy_impl(c);                                       \
      return NULL;                                           \
    }                                                        \
  } while (0)

  int ndev = 0;
  CKN(cudaGetDeviceCount(&ndev), "looking for a device");
  if (ndev < 1) {
    ssae_err_set(err, "CUDA: no device");
    free(c);
    return NULL;
  }
  c->dev = 0;
  CKN(cudaSetDevice(c->dev), "selecting device 0");
  cudaDeviceProp prop;
  CKN(cudaGetDeviceProperties(&prop, c->dev), "reading device properties");
  c->sms = prop.multiProcessorCount;
  c->smem_optin = prop.sharedMemPerBlockOptin;

  /* The specialised kernel: M = S = 64, L = 32, weights + tile in shared
   * memory. */
  const int spec = d->n_mels == 64 && d->slice_latent == 64 && d->latent == 32;
  c->small_ok = spec && d->frames <= SSAE_SMALL_FMAX;
  c->cluster_ok = spec && d->frames <= SSAE_CLUSTER_FMAX && prop.major >= 9;
  if (c->cluster_ok) {
    /* The kernel's body exists only in code built for sm_90 or later (a
     * build for older targets JIT-compiled here would run an empty body). */
    cudaFuncAttributes fa;
    CKN(cudaFuncGetAttributes(&fa, ssae_fused_cluster<5>), "reading kernel attributes");
    c->cluster_ok = fa.ptxVersion >= 90;
  }
  {
    /* The tensor-core kernel (opt-in, SSAE_CUDA_MATH=3xtf32 or
 * SSAE_CUDA_KERNEL=tc): mma.sync TF32 needs sm_80. */
    c->tl = ssae_tc_layout_of(&c->lo);
    const size_t b = ssae_tc_smem(&c->lo, 16);
    /* Built for the default frame count only: the one the tests run. */
    c->tc_ok = spec && prop.major >= 8 && d->frames == 5 && b <= c->smem_optin;
    if (c->tc_ok) {
      int r = set_smem_attr(c, ssae_fused_tc<16, 5, 1>, b, err);
      if (!r) r = set_smem_attr(c, ssae_fused_tc<16, 5, 5>, b, err);
      if (r) {
        destroy_impl(c);
        return NULL;
      }
    }
    const char *math = getenv("SSAE_CUDA_MATH");
    c->tc_auto = math && !strcmp(math, "3xtf32");
  }
  {
    const int nws[3] = {12, 16, 16};
    for (int i = 0; i < 3; i++) {
      const size_t b = ssae_warp_smem(&c->lo, nws[i]);
      c->warp_ok[i] = spec && b <= c->smem_optin;
      if (!c->warp_ok[i]) continue;
      int r = 0;
      if (i == 0) r = set_smem_attr(c, ssae_fused_warp<12>, b, err);
      else if (i == 1) r = set_smem_attr(c, ssae_fused_warp<16>, b, err);
      else {
        r = set_smem_attr(c, ssae_fused_warp<16, 8, 3>, b, err);
        if (!r) r = set_smem_attr(c, ssae_fused_warp<16, 8, 1>, b, err);
        if (!r) r = set_smem_attr(c, ssae_fused_warp<16, 8, 2>, b, err);
        if (!r) r = set_smem_attr(c, ssae_fused_warp<16, 8, 5>, b, err);
        if (!r) r = set_smem_attr(c, ssae_fused_warp<16, 8, 13>, b, err);
        if (!r) r = set_smem_attr(c, ssae_fused_warp<16, 8, 29>, b, err);
        if (!r) r = set_smem_attr(c, ssae_fused_warp<16, 8, 29, 5>, b, err);
        if (!r) r = set_smem_attr(c, ssae_fused_warp<16, 8, 61>, b, err);
        if (!r) r = set_smem_attr(c, ssae_fused_warp<16, 8, 61, 5>, b, err);
      }
      if (r) {
        destroy_impl(c);
        return NULL;
      }
    }
  }
  const int tws[4] = {32, 64, 128, 128};
  for (int i = 0; i < 4; i++) {
    const size_t b = ssae_tiled_smem(&c->lo, tws[i]);
    c->tiled_ok[i] = spec && b <= c->smem_optin;
    if (!c->tiled_ok[i]) continue;
    int r = 0;
    if (i == 0) r = set_smem_attr(c, ssae_fused_tiled<32, 256>, b, err);
    else if (i == 1) r = set_smem_attr(c, ssae_fused_tiled<64, 256>, b, err);
    else if (i == 2) r = set_smem_attr(c, ssae_fused_tiled<128, 256>, b, err);
    else r = set_smem_attr(c, ssae_fused_tiled<128, 512>, b, err);
    if (r) {
      destroy_impl(c);
      return NULL;
    }
  }
  const size_t per = generic_smem(c->lo, 1);
  c->gen_gmax = std::min<size_t>(16, c->smem_optin / per);
  if (c->gen_gmax < 1) {
    ssae_err_set(err,
                 "CUDA: model dimensions too large for the GPU's shared memory "
                 "(%zu bytes per window, %zu available)",
                 per, c->smem_optin);
    destroy_impl(c);
    return NULL;
  }
  if (set_smem_attr(c, ssae_fused_generic, generic_smem(c->lo, c->gen_gmax), err)) {
    destroy_impl(c);
    return NULL;
  }

  std::vector<float> w(c->lo.total);
  fold_weights(m, c->lo, w.data());
  c->cap = max_batch ? max_batch : kDefaultCap;
  const size_t FM = (size_t)c->FM;
  CKN(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "creating a stream");
  CKN(cudaMalloc(&c->d_w, sizeof(float) * c->lo.total), "allocating weights");
  CKN(cudaMalloc(&c->d_x, sizeof(float) * FM * c->cap), "allocating the input buffer");
  CKN(cudaMalloc(&c->d_scores, sizeof(float) * c->cap), "allocating the score buffer");
  CKN(cudaMalloc(&c->d_recon, sizeof(float) * FM * c->cap), "allocating the output buffer");
  CKN(cudaMallocHost(&c->h_x, sizeof(float) * FM * c->cap), "allocating pinned memory");
  CKN(cudaMallocHost(&c->h_scores, sizeof(float) * c->cap), "allocating pinned memory");
  CKN(cudaMallocHost(&c->h_recon, sizeof(float) * FM * c->cap), "allocating pinned memory");
  CKN(cudaMemcpy(c->d_w, w.data(), sizeof(float) * c->lo.total, cudaMemcpyHostToDevice),
      "uploading the weights");
#undef CKN
  return c;
}

struct lane_bufs {
  float *h_x, *d_x, *h_scores, *d_scores;
};
lane_bufs lane(const cuda_impl *c, int s) {
  return s ? lane_bufs{c->h_x1, c->d_x1, c->h_scores1, c->d_scores1}
           : lane_bufs{c->h_x, c->d_x, c->h_scores, c->d_scores};
}

graph_slot *get_graph(cuda_impl *c, size_t n, int recon, ssae_err *err, int s = 0) {
  const lane_bufs L = lane(c, s);
  graph_slot *lru = &c->graphs[0];
  for (int i = 0; i < kGraphSlots; i++) {
    graph_slot *g = &c->graphs[i];
    if (g->exec && g->n == n && g->recon == recon && g->lane == s) {
      g->used = ++c->tick;
      return g;
    }
    if (!g->exec || g->used < lru->used) lru = g;
  }
  if (lru->exec) {
    cudaGraphExecDestroy(lru->exec);
    lru->exec = NULL;
  }
  const size_t FM = (size_t)c->FM;
  cudaGraph_t graph;
  cudaError_t e = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) {
    cuda_fail(c, err, "starting graph capture", e);
    return NULL;
  }
  cudaMemcpyAsync(L.d_x, L.h_x, sizeof(float) * FM * n, cudaMemcpyHostToDevice, c->stream);
  int lr = launch(c, L.d_x, n, L.d_scores, recon ? c->d_recon : NULL, 0, err);
  cudaMemcpyAsync(L.h_scores, L.d_scores, sizeof(float) * n, cudaMemcpyDeviceToHost, c->stream);
  if (recon)
    cudaMemcpyAsync(c->h_recon, c->d_recon, sizeof(float) * FM * n, cudaMemcpyDeviceToHost,
                    c->stream);
  e = cudaStreamEndCapture(c->stream, &graph);
  if (lr) return NULL;
  if (e != cudaSuccess) {
    cuda_fail(c, err, "capturing the graph", e);
    return NULL;
  }
  e = cudaGraphInstantiate(&lru->exec, graph, 0);
  cudaGraphDestroy(graph);
  if (e != cudaSuccess) {
    lru->exec = NULL;
    cuda_fail(c, err, "instantiating the graph", e);
    return NULL;
  }
  lru->n = n;
  lru->recon = recon;
  lru->lane = s;
  lru->used = ++c->tick;
  return lru;
}

int run_chunk(cuda_impl *c, const float *x, size_t n, float *scores, float *recon,
              ssae_err *err) {
  const size_t FM = (size_t)c->FM;
  /* Windows laid out in the pinned buffer already (input_buffer) need no
   * staging copy. */
  if (x != c->h_x) memcpy(c->h_x, x, sizeof(float) * FM * n);
  const int inject = c->fail_after >= 0 && c->runs > c->fail_after;
  if (n <= kGraphMax && !inject) {
    graph_slot *g = get_graph(c, n, recon != NULL, err);
    if (!g) return -1;
    CK(cudaGraphLaunch(g->exec, c->stream), "launching the graph");
  } else {
    CK(cudaMemcpyAsync(c->d_x, c->h_x, sizeof(float) * FM * n, cudaMemcpyHostToDevice,
                       c->stream),
       "copying windows to the device");
    if (launch(c, c->d_x, n, c->d_scores, recon ? c->d_recon : NULL, inject, err)) return -1;
    CK(cudaMemcpyAsync(c->h_scores, c->d_scores, sizeof(float) * n, cudaMemcpyDeviceToHost,
                       c->stream),
       "copying scores from the device");
    if (recon)
      CK(cudaMemcpyAsync(c->h_recon, c->d_recon, sizeof(float) * FM * n,
                         cudaMemcpyDeviceToHost, c->stream),
         "copying reconstructions from the device");
  }
  CK(cudaStreamSynchronize(c->stream), "running the batch");
  memcpy(scores, c->h_scores, sizeof(float) * n);
  if (recon) memcpy(recon, c->h_recon, sizeof(float) * FM * n);
  return 0;
}

}  // namespace

static int cuda_available(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n > 0;
}

static void *cuda_create(const ssae_model *m, size_t max_batch, ssae_err *err) {
  return create_impl(m, max_batch, err);
}

static int cuda_run(void *impl, const float *x, size_t n, float *scores, float *recon,
                    ssae_err *err) {
  cuda_impl *c = (cuda_impl *)impl;
  if (c->broken) return ssae_err_set(err, "%s", c->broken_msg);
  c->runs++;
  const size_t FM = (size_t)c->FM;
  for (size_t i = 0; i < n; i += c->cap) {
    const size_t k = std::min(c->cap, n - i);
    if (run_chunk(c, x + i * FM, k, scores + i, recon ? recon + i * FM : NULL, err)) return -1;
  }
  return 0;
}

static void cuda_destroy(void *impl) { destroy_impl((cuda_impl *)impl); }

/* Slot 1's buffers and both events are made here, on the first call for
 * them (not on the run path). */
static float *cuda_input_buffer(void *impl, int slot, size_t *cap) {
  cuda_impl *c = (cuda_impl *)impl;
  if (cap) *cap = 0;
  if (c->broken || slot < 0 || slot > 1) return NULL;
  const size_t FM = (size_t)c->FM;
  /* The engine's worker asks on every turn of its loop: only the first
   * call of a thread makes anything (and selects the device for it). */
  if (!c->ev[0] || !c->ev[1] || (slot == 1 && !c->h_x1)) cudaSetDevice(c->dev);
  for (int i = 0; i < 2; i++)
    if (!c->ev[i] && cudaEventCreateWithFlags(&c->ev[i], cudaEventDisableTiming) != cudaSuccess) {
      c->ev[i] = NULL;
      cudaGetLastError();
      return NULL;
    }
  if (slot == 1 && !c->h_x1) {
    if (cudaMalloc(&c->d_x1, sizeof(float) * FM * c->cap) != cudaSuccess ||
        cudaMalloc(&c->d_scores1, sizeof(float) * c->cap) != cudaSuccess ||
        cudaMallocHost(&c->h_scores1, sizeof(float) * c->cap) != cudaSuccess ||
        cudaMallocHost(&c->h_x1, sizeof(float) * FM * c->cap) != cudaSuccess) {
      cudaGetLastError();
      cudaFree(c->d_x1);
      cudaFree(c->d_scores1);
      cudaFreeHost(c->h_scores1);
      c->d_x1 = c->d_scores1 = c->h_scores1 = c->h_x1 = NULL;
      return NULL;
    }
  }
  if (cap) *cap = c->cap;
  return slot ? c->h_x1 : c->h_x;
}

/* The windows of slot s are on the device (or their copy enqueued):
 * kernel, scores back, event; no wait. */
static int enqueue_rest(cuda_impl *c, int s, size_t n, int inject, ssae_err *err) {
  const lane_bufs L = lane(c, s);
  if (launch(c, L.d_x, n, L.d_scores, NULL, inject, err)) return -1;
  CK(cudaMemcpyAsync(L.h_scores, L.d_scores, sizeof(float) * n, cudaMemcpyDeviceToHost,
                     c->stream),
     "copying scores from the device");
  CK(cudaEventRecord(c->ev[s], c->stream), "recording an event");
  c->pend_n[s] = n;
  return 0;
}

static int slot_ready(cuda_impl *c, int s, size_t n, ssae_err *err) {
  if (c->broken) return ssae_err_set(err, "%s", c->broken_msg);
  if (s < 0 || s > 1 || !lane(c, s).h_x || !c->ev[s] || n > c->cap)
    return ssae_err_set(err, "CUDA: slot %d not set up for %zu windows", s, n);
  return 0;
}

/* Copy in, kernel, copy out enqueued for slot s, then an event; no wait. */
static int cuda_submit(void *impl, int s, const float *x, size_t n, ssae_err *err) {
  cuda_impl *c = (cuda_impl *)impl;
  if (slot_ready(c, s, n, err)) return -1;
  const lane_bufs L = lane(c, s);
  c->runs++;
  const size_t FM = (size_t)c->FM;
  if (x != L.h_x) memcpy(L.h_x, x, sizeof(float) * FM * n);
  const int inject = c->fail_after >= 0 && c->runs > c->fail_after;
  if (n <= kAsyncGraphMax && !inject) {
    graph_slot *g = get_graph(c, n, 0, err, s);
    if (!g) return -1;
    CK(cudaGraphLaunch(g->exec, c->stream), "launching the graph");
    CK(cudaEventRecord(c->ev[s], c->stream), "recording an event");
    c->pend_n[s] = n;
    return 0;
  }
  CK(cudaMemcpyAsync(L.d_x, L.h_x, sizeof(float) * FM * n, cudaMemcpyHostToDevice,
                     c->stream),
     "copying windows to the device");
  return enqueue_rest(c, s, n, inject, err);
}

/* The copy engine gathers the spans into slot s's device buffer (one 2D
 * copy per span: rows of F*M floats at the span's pitch), no host copy. */
static int cuda_submit_spans(void *impl, int s, const ssae_span *sp, int nsp, size_t n,
                             ssae_err *err) {
  cuda_impl *c = (cuda_impl *)impl;
  if (slot_ready(c, s, n, err)) return -1;
  const lane_bufs L = lane(c, s);
  c->runs++;
  const size_t FM = (size_t)c->FM;
  size_t off = 0;
  for (int i = 0; i < nsp; i++) {
    if (!sp[i].n) continue;
    CK(cudaMemcpy2DAsync(L.d_x + off * FM, sizeof(float) * FM, sp[i].x,
                         sizeof(float) * (sp[i].n > 1 ? sp[i].pitch : FM), sizeof(float) * FM,
                         sp[i].n, cudaMemcpyHostToDevice, c->stream),
       "copying windows to the device");
    off += sp[i].n;
  }
  return enqueue_rest(c, s, n, c->fail_after >= 0 && c->runs > c->fail_after, err);
}

static int cuda_host_register(void *p, size_t bytes) {
  if (cudaHostRegister(p, bytes, cudaHostRegisterPortable) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return 0;
}

static void cuda_host_unregister(void *p) {
  if (cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
}

static int cuda_collect(void *impl, int s, float *scores, ssae_err *err) {
  cuda_impl *c = (cuda_impl *)impl;
  if (c->broken) return ssae_err_set(err, "%s", c->broken_msg);
  if (s < 0 || s > 1 || !c->ev[s]) return ssae_err_set(err, "CUDA: slot %d not set up", s);
  CK(cudaEventSynchronize(c->ev[s]), "running the batch");
  memcpy(scores, lane(c, s).h_scores, sizeof(float) * c->pend_n[s]);
  return 0;
}

extern "C" const ssae_backend_ops ssae_backend_cuda = {
    "cuda", cuda_available, cuda_create, cuda_run, cuda_destroy,
    cuda_input_buffer, cuda_submit, cuda_collect, cuda_submit_spans, cuda_host_register,
    cuda_host_unregister,
};

extern "C" const char *ssae_cuda_kernel_name(void *impl, size_t n) {
  switch (choose_kernel((const cuda_impl *)impl, n)) {
    case K_TILED32: return "tiled32";
    case K_TILED64: return "tiled64";
    case K_TILED128: return "tiled128";
    case K_TILED128W: return "tiled128w";
    case K_SMALL: return "small";
    case K_CLUSTER: return "cluster";
    case K_CLUSTER0: return "cluster0";
    case K_CLUSTER1: return "cluster1";
    case K_WARP12: return "warp12";
    case K_WARP16: return "warp16";
    case K_WARP16B: return "warp16b";
    case K_WARP16G: return "warp16g";
    case K_WARP16P: return "warp16p";
    case K_WARP16R: return "warp16r";
    case K_WARP16N: return "warp16n";
    case K_WARP16I: return "warp16i";
    case K_WARP16J: return "warp16j";
    case K_TC1: return "tc1";
    case K_TC2: return "tc2";
    default: return "generic";
  }
}

extern "C" size_t ssae_cuda_warp_round(void) {
  int dev = 0, sms = 0;
  if (!cuda_available() || cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return (size_t)sms * 16 * SSAE_WARP_TW;
}

extern "C" const char *ssae_cuda_device_name(void) {
  static char name[256];
  cudaDeviceProp p;
  if (!cuda_available() || cudaGetDeviceProperties(&p, 0) != cudaSuccess) return "";
  snprintf(name, sizeof name, "%s", p.name);
  return name;
}

extern "C" int ssae_cuda_time_kernel(const ssae_model *m, size_t n, int recon, int graph,
                                     int reps, double *us_median, double *us_p99,
                                     ssae_err *err) {
  cuda_impl *c = create_impl(m, n, err);
  if (!c) return -1;
  const size_t FM = (size_t)c->FM;
  /* Log-mel-like input: a level per window, +-20 dB around it. */
  uint64_t s = 0x9E3779B97F4A7C15ull ^ n;
  for (size_t w = 0; w < n; w++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const float level = -80.0f + 80.0f * (float)((s >> 40) * (1.0 / 16777216.0));
    for (size_t i = 0; i < FM; i++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      c->h_x[w * FM + i] = level + 40.0f * ((float)((s >> 40) * (1.0 / 16777216.0)) - 0.5f);
    }
  }
  int rc = -1;
  std::vector<float> t;
  cudaEvent_t e0 = NULL, e1 = NULL;
  cudaGraphExec_t exec = NULL;
  float *dr = recon ? c->d_recon : NULL;
#define CKT(call, what)                                        \
  do {                                                         \
    cudaError_t e_ = (call);                                   \
    if (e_ != cudaSuccess) {                                   \
      cuda_fail(c, err, what, e_);                             \
      goto done;                                               \
    }                                                          \
  } while (0)
  CKT(cudaMemcpy(c->d_x, c->h_x, sizeof(float) * FM * n, cudaMemcpyHostToDevice), "upload");
  CKT(cudaEventCreate(&e0), "event");
  CKT(cudaEventCreate(&e1), "event");
  if (graph) {
    cudaGraph_t g;
    CKT(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal), "capture");
    if (launch(c, c->d_x, n, c->d_scores, dr, 0, err)) {
      cudaStreamEndCapture(c->stream, &g);
      goto done;
    }
    CKT(cudaStreamEndCapture(c->stream, &g), "capture");
    CKT(cudaGraphInstantiate(&exec, g, 0), "instantiate");
    cudaGraphDestroy(g);
  }
  for (int i = 0; i < reps + 3; i++) {
    CKT(cudaEventRecord(e0, c->stream), "event");
    if (graph) {
      CKT(cudaGraphLaunch(exec, c->stream), "graph launch");
    } else if (launch(c, c->d_x, n, c->d_scores, dr, 0, err)) {
      goto done;
    }
    CKT(cudaEventRecord(e1, c->stream), "event");
    CKT(cudaEventSynchronize(e1), "running the kernel");
    float ms = 0;
    CKT(cudaEventElapsedTime(&ms, e0, e1), "event time");
    if (i >= 3) t.push_back(ms * 1000.0);
  }
  std::sort(t.begin(), t.end());
  *us_median = t[t.size() / 2];
  *us_p99 = t[std::min(t.size() - 1, (size_t)ceil(0.99 * (double)t.size()) - 1)];
  rc = 0;
done:
#undef CKT
  if (exec) cudaGraphExecDestroy(exec);
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  destroy_impl(c);
  return rc;
}

namespace {
__global__ void ssae_empty_kernel() {}
}  // namespace

extern "C" int ssae_cuda_time_empty(int reps, double *us_median, ssae_err *err) {
  cuda_impl *c = NULL;
  if (!cuda_available()) return ssae_err_set(err, "CUDA: no device");
  cudaStream_t st = NULL;
  cudaEvent_t e0 = NULL, e1 = NULL;
  cudaGraphExec_t exec = NULL;
  cudaGraph_t g = NULL;
  std::vector<float> t;
  int rc = -1;
#define CKE(call, what)                  \
  do {                                   \
    cudaError_t e_ = (call);             \
    if (e_ != cudaSuccess) {             \
      cuda_fail(c, err, what, e_);       \
      goto done;                         \
    }                                    \
  } while (0)
  CKE(cudaSetDevice(0), "selecting device 0");
  CKE(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "creating a stream");
  CKE(cudaEventCreate(&e0), "event");
  CKE(cudaEventCreate(&e1), "event");
  CKE(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), "capture");
  ssae_empty_kernel<<<1, 32, 0, st>>>();
  CKE(cudaStreamEndCapture(st, &g), "capture");
  CKE(cudaGraphInstantiate(&exec, g, 0), "instantiate");
  for (int i = 0; i < reps + 3; i++) {
    CKE(cudaEventRecord(e0, st), "event");
    CKE(cudaGraphLaunch(exec, st), "graph launch");
    CKE(cudaEventRecord(e1, st), "event");
    CKE(cudaEventSynchronize(e1), "running the kernel");
    float ms = 0;
    CKE(cudaEventElapsedTime(&ms, e0, e1), "event time");
    if (i >= 3) t.push_back(ms * 1000.0);
  }
  std::sort(t.begin(), t.end());
  *us_median = t[t.size() / 2];
  rc = 0;
done:
#undef CKE
  if (exec) cudaGraphExecDestroy(exec);
  if (g) cudaGraphDestroy(g);
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  if (st) cudaStreamDestroy(st);
  return rc;
}
