/* The forward kernels as one table: each row says what the kernel is for,
 * when it fits (dimensions, device), which batches auto gives it, its
 * shared memory and how it is launched. The table drives auto selection,
 * SSAE_CUDA_KERNEL=<name>, ssae_cuda_kernel_name, the shared-memory limits
 * set at create, and the tests and tools that list the kernels
 * (ssae_cuda_kernel_count / ssae_cuda_kernel_info). A new kernel is its
 * header and one row here. */
#include <stdint.h>
#include <string.h>

#include <algorithm>

#include "ssae_cuda_batch1_cluster.cuh"
#include "ssae_cuda_generic.cuh"
#include "ssae_cuda_impl.cuh"
#include "ssae_cuda_small_batch.cuh"
#include "ssae_cuda_tiled.cuh"
#include "ssae_cuda_warp_3xtf32.cuh"
#include "ssae_cuda_warp_fp32.cuh"

namespace ssae_cuda {
namespace {

/* What a launch function gets: the batch, and poison (launch with an
 * invalid block size: the SSAE_CUDA_FAIL_AFTER test hook). */
struct launch_args {
  const float *x;
  size_t n;
  float *scores, *recon;
  bool poison;
  cudaStream_t stream; /* c's own, or the caller's (launch_on) */
};

struct kernel_row {
  ssae_cuda_kernel_desc about; /* name, purpose, auto_max, opt_in */
  /* auto takes it only from this many windows per SM (0: any) */
  unsigned auto_min_per_sm;
  /* 1 when it runs for c's dimensions on c's device, 0 when not; -1 with
   * err on a CUDA error. */
  int (*fits)(const cuda_impl *c, ssae_err *err);
  /* Dynamic shared memory it asks for on c at most (NULL: none), and the
   * kernel function for c's frame count whose limit is raised to it. */
  size_t (*smem)(const cuda_impl *c);
  const void *(*func)(const cuda_impl *c);
  /* Enqueues the kernel on a.stream; the caller checks the launch. */
  cudaError_t (*launch)(const cuda_impl *c, const launch_args &a);
};

/* The dimensions the specialised kernels are written for. */
bool default_mlsl(const cuda_impl *c) {
  return c->lo.M == 64 && c->lo.S == 64 && c->lo.L == 32;
}

unsigned blocks_upto(size_t want, size_t most) { return (unsigned)std::min(want, most); }

/* ---- batch1_cluster ---- */

int cluster_fits(const cuda_impl *c, ssae_err *err) {
  if (!default_mlsl(c) || c->lo.F > SSAE_CLUSTER_FMAX || c->cc_major < 9) return 0;
  /* The kernel's body exists only in code built for sm_90 or later (a
   * build for older targets JIT-compiled here would run an empty body). */
  cudaFuncAttributes fa;
  cudaError_t e = cudaFuncGetAttributes(&fa, ssae_batch1_cluster_kernel<5>);
  if (e != cudaSuccess) return cuda_fail(NULL, err, "reading kernel attributes", e);
  return fa.ptxVersion >= 90;
}

cudaError_t cluster_launch(const cuda_impl *c, const launch_args &a) {
  const size_t ncl =
      std::max<size_t>(1, std::min<size_t>(a.n, (size_t)c->sms / SSAE_CLUSTER_CTAS));
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = SSAE_CLUSTER_CTAS;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.gridDim = dim3((unsigned)(ncl * SSAE_CLUSTER_CTAS));
  cfg.blockDim = dim3(a.poison ? 4096 : SSAE_CLUSTER_THREADS);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = a.stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  if (c->lo.F == 5)
    return cudaLaunchKernelEx(&cfg, ssae_batch1_cluster_kernel<5>, (const float *)c->d_w, c->lo,
                              a.x, a.n, a.scores, a.recon);
  return cudaLaunchKernelEx(&cfg, ssae_batch1_cluster_kernel<0>, (const float *)c->d_w, c->lo,
                            a.x, a.n, a.scores, a.recon);
}

/* ---- small_batch ---- */

int small_fits(const cuda_impl *c, ssae_err *) {
  return default_mlsl(c) && c->lo.F <= SSAE_SMALL_FMAX;
}

cudaError_t small_launch(const cuda_impl *c, const launch_args &a) {
  const unsigned grid = blocks_upto(a.n, (size_t)c->sms * 2);
  const unsigned block = a.poison ? 4096 : SSAE_SMALL_THREADS;
  ssae_small_batch_kernel<<<grid, block, 0, a.stream>>>(c->d_w, c->lo, a.x, a.n, a.scores,
                                                          a.recon);
  return cudaSuccess;
}

/* ---- warp_fp32 and warp_3xtf32: a block of SSAE_WARP_NW warps per SM ---- */

/* Every SM gets a block while there are tiles: the kernels deal tiles
 * round the blocks first, so a small batch runs one warp per SM. */
unsigned warp_grid(const cuda_impl *c, size_t n) {
  return blocks_upto((n + SSAE_WARP_TW - 1) / SSAE_WARP_TW, (size_t)c->sms);
}

size_t warp_fp32_smem(const cuda_impl *c) { return ssae_warp_smem(&c->lo); }

int warp_fp32_fits(const cuda_impl *c, ssae_err *) {
  return default_mlsl(c) && warp_fp32_smem(c) <= c->smem_optin;
}

/* The frame count fixed at compile time for the default 5. */
const void *warp_fp32_func(const cuda_impl *c) {
  return c->lo.F == 5 ? (const void *)ssae_warp_fp32_kernel<5>
                      : (const void *)ssae_warp_fp32_kernel<0>;
}

cudaError_t warp_fp32_launch(const cuda_impl *c, const launch_args &a) {
  const unsigned grid = warp_grid(c, a.n), block = a.poison ? 4096 : 32 * SSAE_WARP_NW;
  const size_t smem = warp_fp32_smem(c);
  if (c->lo.F == 5)
    ssae_warp_fp32_kernel<5><<<grid, block, smem, a.stream>>>(c->d_w, c->lo, a.x, a.n,
                                                               a.scores, a.recon);
  else
    ssae_warp_fp32_kernel<0><<<grid, block, smem, a.stream>>>(c->d_w, c->lo, a.x, a.n,
                                                               a.scores, a.recon);
  return cudaSuccess;
}

size_t warp_3xtf32_smem(const cuda_impl *c) { return ssae_tc_smem(&c->lo); }

/* mma.sync TF32 needs sm_80; built for the default frame count only (the
 * one its tests run). */
int warp_3xtf32_fits(const cuda_impl *c, ssae_err *) {
  return default_mlsl(c) && c->cc_major >= 8 && c->lo.F == 5 &&
         warp_3xtf32_smem(c) <= c->smem_optin;
}

const void *warp_3xtf32_func(const cuda_impl *) {
  return (const void *)ssae_warp_3xtf32_kernel<5>;
}

cudaError_t warp_3xtf32_launch(const cuda_impl *c, const launch_args &a) {
  const unsigned grid = warp_grid(c, a.n), block = a.poison ? 4096 : 32 * SSAE_WARP_NW;
  ssae_warp_3xtf32_kernel<5><<<grid, block, warp_3xtf32_smem(c), a.stream>>>(
      c->d_w, c->lo, c->tl, a.x, a.n, a.scores, a.recon);
  return cudaSuccess;
}

/* ---- tiled32 / tiled64 / tiled128 ---- */

template <int TW>
size_t tiled_smem(const cuda_impl *c) {
  return ssae_tiled_smem(&c->lo, TW);
}

template <int TW>
int tiled_fits(const cuda_impl *c, ssae_err *) {
  return default_mlsl(c) && tiled_smem<TW>(c) <= c->smem_optin;
}

template <int TW>
const void *tiled_func(const cuda_impl *) {
  return (const void *)ssae_tiled_kernel<TW>;
}

template <int TW>
cudaError_t tiled_launch(const cuda_impl *c, const launch_args &a) {
  const unsigned grid = blocks_upto((a.n + TW - 1) / TW, (size_t)c->sms);
  const unsigned block = a.poison ? 4096 : SSAE_TILED_THREADS;
  ssae_tiled_kernel<TW><<<grid, block, tiled_smem<TW>(c), a.stream>>>(c->d_w, c->lo, a.x, a.n,
                                                                       a.scores, a.recon);
  return cudaSuccess;
}

/* ---- generic ---- */

/* Shared memory for g windows per block. */
size_t generic_smem_for(const ssae_cuda_layout &lo, size_t g) {
  return g * (size_t)(lo.F * lo.M + lo.F * lo.S + 2 * lo.L) * sizeof(float);
}

size_t generic_smem(const cuda_impl *c) { return generic_smem_for(c->lo, c->gen_gmax); }

int generic_fits(const cuda_impl *c, ssae_err *) { return c->gen_gmax >= 1; }

const void *generic_func(const cuda_impl *) { return (const void *)ssae_generic_kernel; }

cudaError_t generic_launch(const cuda_impl *c, const launch_args &a) {
  /* Windows per block: the batch spread over two blocks per SM. */
  size_t g = (a.n + 2 * (size_t)c->sms - 1) / (2 * (size_t)c->sms);
  g = std::max<size_t>(1, std::min(g, c->gen_gmax));
  const unsigned grid = blocks_upto((a.n + g - 1) / g, (size_t)c->sms * 8);
  const unsigned block = a.poison ? 4096 : SSAE_GENERIC_THREADS;
  ssae_generic_kernel<<<grid, block, generic_smem_for(c->lo, g), a.stream>>>(
      c->d_w, c->lo, (int)g, a.x, a.n, a.scores, a.recon);
  return cudaSuccess;
}

/* In the order auto tries them: the first row that fits, whose batch range
 * holds n and that is not opt-in (or is, with SSAE_CUDA_MATH=3xtf32) runs
 * the batch. The last row fits every model and takes what no other row
 * does; a forced kernel that does not fit falls back to it. */
const kernel_row kKernels[] = {
    {{"batch1_cluster",
      "latency: a cluster of 8 blocks per window, weights in registers, partials through "
      "distributed shared memory (M=S=64, L=32, F<=16, sm_90)",
      16, 0},
     0, cluster_fits, NULL, NULL, cluster_launch},
    {{"small_batch",
      "latency: one window per 1024-thread block, every weight load issued at once "
      "(M=S=64, L=32, F<=16)",
      1024, 0},
     0, small_fits, NULL, NULL, small_launch},
    {{"warp_3xtf32",
      "throughput, opt-in (SSAE_CUDA_MATH=3xtf32): warp_fp32 with the products on the "
      "tensor cores in 3xTF32 (M=S=64, L=32, F=5, sm_80)",
      SIZE_MAX, 1},
     0, warp_3xtf32_fits, warp_3xtf32_smem, warp_3xtf32_func, warp_3xtf32_launch},
    {{"warp_fp32",
      "throughput: every warp a 16-window tile start to end, weights in shared memory "
      "(M=S=64, L=32, F whose weights and 16 warp buffers fit)",
      SIZE_MAX, 0},
     0, warp_fp32_fits, warp_fp32_smem, warp_fp32_func, warp_fp32_launch},
    {{"tiled128",
      "throughput where warp_fp32 does not fit: a block per SM walks 128-window tiles in "
      "lock-step (from 128 windows per SM)",
      SIZE_MAX, 0},
     128, tiled_fits<128>, tiled_smem<128>, tiled_func<128>, tiled_launch<128>},
    {{"tiled64", "as tiled128 with 64-window tiles (from 64 windows per SM)", SIZE_MAX, 0},
     64, tiled_fits<64>, tiled_smem<64>, tiled_func<64>, tiled_launch<64>},
    {{"tiled32", "as tiled128 with 32-window tiles", SIZE_MAX, 0},
     0, tiled_fits<32>, tiled_smem<32>, tiled_func<32>, tiled_launch<32>},
    {{"generic",
      "any dimensions whose window fits in shared memory; the fallback for every other case",
      SIZE_MAX, 0},
     0, generic_fits, generic_smem, generic_func, generic_launch},
};
const int kKernelCount = (int)(sizeof kKernels / sizeof kKernels[0]);
const int kFallback = kKernelCount - 1;
static_assert(sizeof kKernels / sizeof kKernels[0] <= (size_t)kMaxKernels,
              "raise kMaxKernels in ssae_cuda_impl.cuh");

}  // namespace

int find_kernel(const char *name, int *row, ssae_err *err) {
  *row = -1;
  if (!name || !*name || !strcmp(name, "auto")) return 0;
  for (int i = 0; i < kKernelCount; i++)
    if (!strcmp(name, kKernels[i].about.name)) {
      *row = i;
      return 0;
    }
  char names[256] = "";
  for (int i = 0; i < kKernelCount; i++) {
    strncat(names, i ? ", " : "", sizeof names - strlen(names) - 1);
    strncat(names, kKernels[i].about.name, sizeof names - strlen(names) - 1);
  }
  return ssae_err_set(err, "CUDA: SSAE_CUDA_KERNEL=%s: no such kernel (auto, %s)", name, names);
}

int setup_kernels(cuda_impl *c, ssae_err *err) {
  /* The fallback must run: at least one window per block of generic. */
  const size_t per = generic_smem_for(c->lo, 1);
  c->gen_gmax = std::min<size_t>(16, c->smem_optin / per);
  if (c->gen_gmax < 1)
    return ssae_err_set(err,
                        "CUDA: model dimensions too large for the GPU's shared memory "
                        "(%zu bytes per window, %zu available)",
                        per, c->smem_optin);
  for (int i = 0; i < kKernelCount; i++) {
    const kernel_row &k = kKernels[i];
    const int ok = k.fits(c, err);
    if (ok < 0) return -1;
    c->fits[i] = ok != 0;
    if (ok && k.smem)
      CK(cudaFuncSetAttribute(k.func(c), cudaFuncAttributeMaxDynamicSharedMemorySize,
                              (int)k.smem(c)),
         "raising the kernel's shared-memory limit");
  }
  return 0;
}

int choose_kernel(const cuda_impl *c, size_t n) {
  if (c->force >= 0) return c->fits[c->force] ? c->force : kFallback;
  for (int i = 0; i < kKernelCount; i++) {
    const kernel_row &k = kKernels[i];
    if (c->fits[i] && n <= k.about.auto_max && n >= (size_t)k.auto_min_per_sm * c->sms &&
        (!k.about.opt_in || c->math_3xtf32))
      return i;
  }
  return kFallback;
}

int launch(cuda_impl *c, const float *dx, size_t n, float *dscores, float *drecon,
           int poison_config, ssae_err *err) {
  return launch_on(c, c->stream, dx, n, dscores, drecon, poison_config, err);
}

int launch_on(cuda_impl *c, cudaStream_t stream, const float *dx, size_t n, float *dscores,
              float *drecon, int poison_config, ssae_err *err) {
  const launch_args a = {dx, n, dscores, drecon, poison_config != 0, stream};
  cudaError_t e = kKernels[choose_kernel(c, n)].launch(c, a);
  if (e == cudaSuccess) e = cudaGetLastError();
  CK(e, "kernel launch");
  return 0;
}

}  // namespace ssae_cuda

using namespace ssae_cuda;

extern "C" int ssae_cuda_kernel_count(void) { return kKernelCount; }

extern "C" const ssae_cuda_kernel_desc *ssae_cuda_kernel_info(int i) {
  return i >= 0 && i < kKernelCount ? &kKernels[i].about : NULL;
}

extern "C" const char *ssae_cuda_kernel_name(void *impl, size_t n) {
  return kKernels[choose_kernel((const cuda_impl *)impl, n)].about.name;
}

extern "C" size_t ssae_cuda_warp_round(void) {
  int dev = 0, sms = 0;
  if (!device_present() || cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return (size_t)sms * SSAE_WARP_NW * SSAE_WARP_TW;
}
