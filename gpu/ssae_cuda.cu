/* The CUDA backend's table of operations (see ssae_cuda.h): batches copied
 * in, one kernel launch, scores (and reconstructions) copied out; small
 * batches replay a captured CUDA graph of exactly that sequence, larger
 * ones are split into chunks of the buffer size; two asynchronous slots
 * for the engine's worker. run never allocates. */
#include "ssae_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>

#include "ssae_cuda_impl.cuh"

using namespace ssae_cuda;

namespace {

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

static int cuda_available(void) { return device_present(); }

static void *cuda_create(const ssae_model *m, size_t max_batch, ssae_err *err) {
  return create_impl(m, max_batch, err);
}

static int cuda_run(void *impl, const float *x, size_t n, float *scores, float *recon,
                    ssae_err *err) {
  cuda_impl *c = (cuda_impl *)impl;
  if (c->broken) return ssae_err_set(err, "%s", c->broken_msg);
  ON_DEVICE(c);
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
   * call makes anything (on c's device). */
  if (c->ev[0] && c->ev[1] && (slot == 0 || c->h_x1)) {
    if (cap) *cap = c->cap;
    return slot ? c->h_x1 : c->h_x;
  }
  device_scope on_dev(c->dev);
  if (on_dev.e != cudaSuccess) {
    cudaGetLastError();
    return NULL;
  }
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
  ON_DEVICE(c);
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
  ON_DEVICE(c);
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
  ON_DEVICE(c);
  CK(cudaEventSynchronize(c->ev[s]), "running the batch");
  memcpy(scores, lane(c, s).h_scores, sizeof(float) * c->pend_n[s]);
  return 0;
}

static int cuda_set_math(void *impl, const char *math, ssae_err *err) {
  cuda_impl *c = (cuda_impl *)impl;
  if (!strcmp(math, "fp32") || !strcmp(math, "3xtf32")) {
    c->math_3xtf32 = !strcmp(math, "3xtf32");
    return 0;
  }
  return ssae_err_set(err, "CUDA: math '%s': fp32 or 3xtf32", math);
}

extern "C" const ssae_backend_ops ssae_backend_cuda = {
    "cuda", cuda_available, cuda_create, cuda_run, cuda_destroy,
    cuda_input_buffer, cuda_submit, cuda_collect, cuda_submit_spans, cuda_host_register,
    cuda_host_unregister, run_device, cuda_set_math,
};
