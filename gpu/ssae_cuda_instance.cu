/* Creating and destroying a CUDA backend instance: the weights folded (in
 * double) and uploaded once, device and pinned host buffers, one stream,
 * the kernel table's checks for this model and device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "ssae_cuda_impl.cuh"

namespace ssae_cuda {
namespace {

/* The model's tensors (ssae_fold_one's off[]). */
const int kModelTensors = 11;

/* Folds the LayerNorm affine parameters into the next Linear and the
 * decoder into the reconstruction (see ssae_cuda_layout.cuh), in double;
 * then the row-major copies the generic kernel reads. */
void fold_weights(const ssae_model *m, const ssae_cuda_layout &lo, float *w) {
  memset(w, 0, sizeof(float) * lo.total);
  /* the model's weights are one block in state_dict order */
  const float *P = m->ln_enc_w;
  const float *const t[kModelTensors] = {m->ln_enc_w, m->ln_enc_b, m->enc_w,  m->enc_b,
                                         m->basis,    m->ln_bn_w,  m->ln_bn_b, m->bn_w,
                                         m->bn_b,     m->dec_w,    m->dec_b};
  int off[kModelTensors];
  for (int k = 0; k < kModelTensors; k++) off[k] = (int)(t[k] - P);
  const int n = ssae_fold_count(lo);
  for (int i = 0; i < n; i++) {
    ssae_fold_one(lo, off, P, m->basis_n, i, w);
    ssae_fold_row_copy(lo, i, w);
  }
}

}  // namespace

int cuda_fail(cuda_impl *c, ssae_err *err, const char *what, cudaError_t e) {
  if (c) {
    c->broken = 1;
    snprintf(c->broken_msg, sizeof c->broken_msg, "CUDA: %s: %s", what,
             cudaGetErrorString(e));
  }
  return ssae_err_set(err, "CUDA: %s: %s", what, cudaGetErrorString(e));
}

int device_present(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n > 0;
}

extern "C" int ssae_cuda_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

extern "C" int ssae_cuda_check_device(int dev, ssae_err *err) {
  const int n = ssae_cuda_device_count();
  if (dev < 0 || dev >= n)
    return ssae_err_set(err, "CUDA device %d: this host has %d CUDA device%s", dev, n,
                        n == 1 ? "" : "s");
  return 0;
}

extern "C" int ssae_cuda_device_enter(int dev, int *prev, ssae_err *err) {
  if (ssae_cuda_check_device(dev, err)) return -1;
  int p = 0;
  cudaError_t e = cudaGetDevice(&p);
  if (e == cudaSuccess && p != dev) e = cudaSetDevice(dev);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return ssae_err_set(err, "CUDA device %d: %s", dev, cudaGetErrorString(e));
  }
  *prev = p;
  return 0;
}

extern "C" int ssae_cuda_use_device(int dev, ssae_err *err) {
  int prev; /* not given back: dev stays the thread's */
  return ssae_cuda_device_enter(dev, &prev, err);
}

extern "C" void ssae_cuda_device_leave(int prev) {
  int cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur == prev) return;
  /* As device_scope: a failure to restore is cleared, the work is done. */
  if (cudaSetDevice(prev) != cudaSuccess) cudaGetLastError();
}

extern "C" int ssae_cuda_current_device(void) {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return d;
}

void destroy_impl(cuda_impl *c) {
  if (!c) return;
  device_scope on_dev(c->dev);
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
  c->fail_after = -1;
  c->lo = ssae_cuda_layout_make(d->n_mels, d->frames, d->latent, d->slice_latent);
  c->tl = ssae_tc_layout_of(&c->lo);
  c->FM = d->frames * d->n_mels;
  const char *fa = getenv("SSAE_CUDA_FAIL_AFTER");
  if (fa && *fa) c->fail_after = strtol(fa, NULL, 10);
  if (find_kernel(getenv("SSAE_CUDA_KERNEL"), &c->force, err)) {
    free(c);
    return NULL;
  }
  {
    const char *math = getenv("SSAE_CUDA_MATH");
    c->math_3xtf32 = math && !strcmp(math, "3xtf32");
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
  /* The device current on this thread, as CUDA's own libraries take it:
   * device 0 unless the caller selected another (the Python package
   * selects the tensors' device; the engine and the command line leave
   * 0). Every later call selects it for its own duration (device_scope). */
  CKN(cudaGetDevice(&c->dev), "reading the current device");
  cudaDeviceProp prop;
  CKN(cudaGetDeviceProperties(&prop, c->dev), "reading device properties");
  c->sms = prop.multiProcessorCount;
  c->smem_optin = prop.sharedMemPerBlockOptin;
  c->cc_major = prop.major;
  if (setup_kernels(c, err)) {
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
  /* From pageable memory the copy may still be in flight on the legacy
   * stream when cudaMemcpy returns, and the kernels' non-blocking stream
   * does not wait for it. */
  CKN(cudaStreamSynchronize(0), "uploading the weights");
#undef CKN
  return c;
}

}  // namespace ssae_cuda
