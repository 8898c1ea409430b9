/* The CUDA backend: the SSAE forward pass as one fused kernel launch per
 * batch, behind the backend table of src/model/ssae_backend.h; the kernels
 * and when each runs are the table of gpu/ssae_cuda_kernel_table.cu
 * (doc/gpu-kernels.md). Present when the build found nvcc
 * (SSAE_HAVE_CUDA); `available` says whether a device is there.
 *
 * create uploads the folded weights once, allocates device buffers, pinned
 * host buffers and one stream; run copies in, launches, copies out (small
 * batches replay a CUDA graph of exactly that sequence) and splits batches
 * larger than the buffers into chunks. run never allocates.
 *
 * Test hook: with SSAE_CUDA_FAIL_AFTER=N in the environment at create time,
 * every run after the first N launches the kernel with an invalid
 * configuration, so that the real CUDA error path is taken (-1 with CUDA's
 * message). SSAE_CUDA_KERNEL=<name> (a name of the kernel table, or auto)
 * forces one kernel (tests, bench): one that does not fit the model or the
 * device runs as generic; a name not in the table makes create fail.
 * SSAE_CUDA_MATH=3xtf32 lets auto take the opt-in 3xTF32 kernel. */
#ifndef SSAE_CUDA_H
#define SSAE_CUDA_H

#include <stddef.h>

#include "ssae_backend.h"
#include "ssae_err.h"
#include "ssae_model.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const ssae_backend_ops ssae_backend_cuda;

/* Device-resident timing for `ssae bench`, on the device current on this
 * thread: n windows of random log-mel-like input already on the device,
 * `reps` launches (after warm-up), each timed
 * with CUDA events. Writes the median and the 99th percentile in
 * microseconds. recon: also write reconstructions. graph: time the replay
 * of a one-kernel CUDA graph instead of a plain launch. */
int ssae_cuda_time_kernel(const ssae_model *m, size_t n, int recon, int graph,
                          int reps, double *us_median, double *us_p99,
                          ssae_err *err);

/* The floor of that measurement: median device time of the replay of a
 * graph holding one empty kernel, timed the same way (CUDA events). */
int ssae_cuda_time_empty(int reps, double *us_median, ssae_err *err);

/* Which kernel a batch of n windows uses ("warp_fp32", "generic", ...). */
const char *ssae_cuda_kernel_name(void *impl, size_t n);

/* One row of the kernel table, for tests and tools. */
typedef struct {
  const char *name;    /* what SSAE_CUDA_KERNEL takes, ssae_cuda_kernel_name says */
  const char *purpose; /* one line: what it is for, where it fits */
  size_t auto_max;     /* auto gives it batches up to this many windows (SIZE_MAX: any) */
  int opt_in;          /* auto takes it only with SSAE_CUDA_MATH=3xtf32 */
} ssae_cuda_kernel_desc;

/* The number of kernels in the table, and row i (NULL outside 0..count-1).
 * Need no device. */
int ssae_cuda_kernel_count(void);
const ssae_cuda_kernel_desc *ssae_cuda_kernel_info(int i);

/* Windows in one full round of warp_fp32 on device 0 (its SMs x
 * 16 warps x 16 windows), 0 without a device: a batch of this plus a few
 * tiles ends in a last round of fewer tiles than blocks, which the kernel
 * computes with several warps per tile (the tests' case for that path). */
size_t ssae_cuda_warp_round(void);

/* Name of the device current on this thread (device 0 unless selected:
 * "NVIDIA H100 80GB HBM3"), or "" when there is none. */
const char *ssae_cuda_device_name(void);

/* Makes CUDA device dev current on the calling thread, so that the CUDA
 * backend made next on this thread lives on it (an instance stays on the
 * device it was made on, whichever thread calls it). 0, or -1 with the
 * reason (no such device: the count of this host's devices named). */
int ssae_cuda_use_device(int dev, ssae_err *err);

/* The device selection above and below exists in builds without CUDA too
 * (gpu/ssae_cuda_device_none.c: no devices, and a device asked for is
 * refused saying that the build has no CUDA). */

/* How many CUDA devices this host has (0 when none, or no driver). */
int ssae_cuda_device_count(void);

/* 0 when dev is one of this host's devices, else -1 with the reason, as
 * ssae_cuda_use_device gives it (the count of this host's devices named).
 * Selects nothing. */
int ssae_cuda_check_device(int dev, ssae_err *err);

/* For objects made on a thread that is not the maker's to change (the
 * live engine's, made on a JACK or LV2 host's thread): enter makes device
 * dev current on the calling thread and writes the one current before into
 * *prev; leave(prev) makes that one current again. enter: 0, or -1 with
 * the reason (ssae_cuda_check_device's). */
int ssae_cuda_device_enter(int dev, int *prev, ssae_err *err);
void ssae_cuda_device_leave(int prev);

/* The device current on the calling thread, -1 when none can be read (no
 * device, no CUDA): for tests of the code that must leave it alone. */
int ssae_cuda_current_device(void);

#ifdef __cplusplus
}
#endif
#endif
