/* Device-resident timing for `ssae bench` (see ssae_cuda.h) and the device's
 * name. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include <algorithm>
#include <vector>

#include "ssae_cuda_impl.cuh"

using namespace ssae_cuda;

extern "C" const char *ssae_cuda_device_name(void) {
  static char name[256];
  cudaDeviceProp p;
  int d = 0;
  if (!device_present() || cudaGetDevice(&d) != cudaSuccess ||
      cudaGetDeviceProperties(&p, d) != cudaSuccess)
    return "";
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
  if (!device_present()) return ssae_err_set(err, "CUDA: no device");
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
