/* Inside the CUDA backend: one instance (cuda_impl) and what its source
 * files share. Included only by gpu/ssae_cuda*.cu:
 *   ssae_cuda.cu               the backend table's functions, graphs, chunks
 *   ssae_cuda_instance.cu      create/destroy: folded weights, buffers
 *   ssae_cuda_kernel_table.cu  the kernel table: selection, launches
 *   ssae_cuda_timing.cu        device-resident timing for `ssae bench`
 *   ssae_cuda_device_io.cu     windows in device memory, on the caller's stream */
#ifndef SSAE_CUDA_IMPL_CUH
#define SSAE_CUDA_IMPL_CUH

#include <cuda_runtime.h>
#include <stddef.h>

#include "ssae_cuda.h"
#include "ssae_cuda_device_scope.cuh"
#include "ssae_cuda_layout.cuh"

namespace ssae_cuda {

/* Batches up to this size replay a captured graph (copy in, kernel, copy
 * out): one launch instead of three API calls. */
const size_t kGraphMax = 4096;
const int kGraphSlots = 40;
/* Asynchronous batches (the engine's worker) come in every size from one
 * period to the next; a graph per size would be captured and instantiated
 * for nearly every batch. They replay graphs up to this size only, where
 * the sizes are few and one launch instead of three matters most. */
const size_t kAsyncGraphMax = 16;
/* Default buffer capacity in windows when the caller gives no bound. */
const size_t kDefaultCap = 65536;
/* Most windows per launch on device memory (run_device). */
const size_t kDeviceLaunchMax = (size_t)1 << 20;
/* Room for the rows of the kernel table (ssae_cuda_kernel_table.cu). */
const int kMaxKernels = 16;

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
  int cc_major; /* compute capability of the device */
  size_t smem_optin;
  ssae_cuda_layout lo;
  ssae_tc_layout tl;
  int FM;
  int force;                /* -1 auto, else the forced row of the kernel table */
  int math_3xtf32;          /* SSAE_CUDA_MATH=3xtf32: auto may take 3xTF32 kernels */
  bool fits[kMaxKernels];   /* row i runs for these dimensions on this device */
  size_t gen_gmax;          /* windows per block the generic kernel can hold */
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

/* Marks c failed (every later call reports the same message) and sets err;
 * returns -1. c may be NULL. */
int cuda_fail(cuda_impl *c, ssae_err *err, const char *what, cudaError_t e);

#define CK(call, what)                                           \
  do {                                                           \
    cudaError_t e_ = (call);                                     \
    if (e_ != cudaSuccess) return cuda_fail(c, err, what, e_);   \
  } while (0)

/* 1 when a CUDA device is present. */
int device_present(void);

/* The first statement of a backend call that touches c's device (made on
 * the device current at create_impl): that device for the call. */
#define ON_DEVICE(c)                                      \
  device_scope on_dev_((c)->dev);                         \
  CK(on_dev_.e, "selecting the model's device")

cuda_impl *create_impl(const ssae_model *m, size_t max_batch, ssae_err *err);
void destroy_impl(cuda_impl *c);

/* The kernel table (ssae_cuda_kernel_table.cu). */

/* The row SSAE_CUDA_KERNEL names, -1 for "" or "auto"; -1 with err for a
 * name not in the table. */
int find_kernel(const char *name, int *row, ssae_err *err);
/* Which rows run for c's dimensions on c's device (c->fits), each with its
 * shared-memory limit raised; -1 with err when not even generic fits. */
int setup_kernels(cuda_impl *c, ssae_err *err);
/* The row that runs a batch of n windows. */
int choose_kernel(const cuda_impl *c, size_t n);
/* Enqueues one launch on c's stream (no synchronisation). poison_config:
 * an invalid launch configuration (the SSAE_CUDA_FAIL_AFTER test hook). */
int launch(cuda_impl *c, const float *dx, size_t n, float *dscores, float *drecon,
           int poison_config, ssae_err *err);
/* The same on another stream (the caller's: ssae_cuda_device_io.cu). */
int launch_on(cuda_impl *c, cudaStream_t stream, const float *dx, size_t n, float *dscores,
              float *drecon, int poison_config, ssae_err *err);

/* The backend table's run_device (ssae_cuda_device_io.cu). */
int run_device(void *impl, const float *x_dev, size_t n, float *scores_dev, float *recon_dev,
               void *stream, ssae_err *err);

}  // namespace ssae_cuda

#endif
