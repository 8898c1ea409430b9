/* Backend table: one struct of function pointers per backend (CUDA, CPU;
 * the CPU is always present and always last). ssae_backend runs a batch on
 * the chosen backend and, if that backend fails, reports it once, switches to
 * the CPU and reruns the batch: no window is lost. Streams (below) are the
 * real-time engine's path: batches of windows of many channels, each
 * window with its channel and continuity, scored by whichever backend runs
 * (the CPU keeping per-channel codes inside ssae_backend). */
#ifndef SSAE_BACKEND_H
#define SSAE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "ssae_err.h"
#include "ssae_model.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ssae_span;

typedef struct ssae_backend_ops {
  const char *name;
  /* 1 when the backend can run here (device present, ...). */
  int (*available)(void);
  /* Uploads the model once; max_batch bounds later calls (0: unbounded,
   * buffers grow outside the run path). */
  void *(*create)(const ssae_model *m, size_t max_batch, ssae_err *err);
  /* x: n windows; scores: n floats; recon: n*F*M floats or NULL. */
  int (*run)(void *impl, const float *x, size_t n, float *scores, float *recon,
             ssae_err *err);
  void (*destroy)(void *impl);
  /* Optional (NULL: none). Asynchronous runs in two slots (0, 1): each
   * has a host buffer of *cap windows (input_buffer; pinned memory for the
   * GPU: the windows go to the device without a staging copy; made on the
   * first call, valid until destroy; slot 0's is also what run() reads in
   * place when x points to it). submit starts scoring n windows of slot s
   * (x: anywhere, or the slot's buffer) and returns; collect waits for that
   * slot's scores. One thread; a slot is collected before it is submitted
   * again. */
  float *(*input_buffer)(void *impl, int slot, size_t *cap);
  int (*submit)(void *impl, int slot, const float *x, size_t n, ssae_err *err);
  int (*collect)(void *impl, int slot, float *scores, ssae_err *err);
  /* Optional: submit of slot s from runs of windows where they lie
   * (ssae_backend_submit_spans), the device's copy engine reading them
   * from host memory; and page-locking such memory for the process
   * (0 or -1), undone by host_unregister. */
  int (*submit_spans)(void *impl, int slot, const struct ssae_span *sp, int nsp, size_t n,
                      ssae_err *err);
  int (*host_register)(void *p, size_t bytes);
  void (*host_unregister)(void *p);
  /* Optional: n windows already in device memory (x_dev) scored on the
   * caller's stream (a cudaStream_t; NULL: the legacy default stream),
   * scores to scores_dev (n floats) and, when not NULL, reconstructions to
   * recon_dev (n*F*M floats), all device memory of the backend's device.
   * Queued, not waited for: the caller's stream order holds. Returns 0,
   * -1 on a device failure (the caller falls back), or
   * SSAE_BACKEND_DEVICE_EARG when the pointers are not such memory
   * (nothing ran; nothing to fall back from). */
  int (*run_device)(void *impl, const float *x_dev, size_t n, float *scores_dev,
                    float *recon_dev, void *stream, ssae_err *err);
  /* Optional: the arithmetic of the products ("fp32", or "3xtf32": the
   * CUDA tensor cores in 3xTF32, fp32-level accuracy); -1 with the reason
   * for a value the backend does not know. */
  int (*set_math)(void *impl, const char *math, ssae_err *err);
} ssae_backend_ops;

#define SSAE_BACKEND_DEVICE_EARG (-2)

/* n windows from x on, window i at x + i * pitch (floats). */
typedef struct ssae_span {
  const float *x;
  size_t n, pitch;
} ssae_span;

/* NULL-terminated, CPU last. */
extern const ssae_backend_ops *const ssae_backends[];
extern const ssae_backend_ops ssae_backend_cpu;

typedef struct ssae_backend ssae_backend;

/* which: "auto" (CUDA when present and its start-up self-test against the
 * CPU passes, else CPU), "cpu", "cuda" (an error when unavailable). */
ssae_backend *ssae_backend_new(const ssae_model *m, const char *which,
                               size_t max_batch, ssae_err *err);
/* Same, with the CPU backend's thread count (also for the CPU that takes
 * over after a failure): 0 = every core, 1 = the calling thread only. */
ssae_backend *ssae_backend_new_threads(const ssae_model *m, const char *which,
                                       size_t max_batch, int cpu_threads,
                                       ssae_err *err);
void ssae_backend_free(ssae_backend *b);

/* Runs a batch; falls back to the CPU on failure (see above). Returns -1
 * only if the CPU fails too. One thread at a time per object. */
int ssae_backend_run(ssae_backend *b, const float *x, size_t n, float *scores,
                     float *recon, ssae_err *err);

/* Scores of every window of a run of consecutive frames (n_frames x
 * n_mels floats): n_frames-frames+1 scores, none when n_frames < frames.
 * The CPU reads the frames in place and encodes each once; other backends
 * get the windows laid out in a buffer that grows to the largest call
 * (this call may allocate). Falls back like ssae_backend_run. */
int ssae_backend_run_frames(ssae_backend *b, const float *frames, size_t n_frames,
                            float *scores, ssae_err *err);

/* Runs n windows at x through b once, scores discarded (scores: n floats
 * of scratch), so that first-use costs (page faults, cold code, lazy
 * device set-up) are paid before real-time work starts. With a stream
 * open (below) they also go through its path as the first windows of
 * channels 0, 1, ... (as many as there are channels), which then start
 * afresh. Not a run: no test hook fires and a failure does not fall back
 * (a real fault shows again at the next run, which falls back and
 * reports it). */
void ssae_backend_warm(ssae_backend *b, const float *x, size_t n, float *scores);

/* 1 when b runs on the CPU and no test hook is armed: a caller may then
 * score on ssae_cpu objects of its own (one per thread, ssae_cpu.h) with
 * the same results as through b. */
int ssae_backend_cpu_direct(const ssae_backend *b);

/* Asynchronous runs (a GPU scores one batch while the caller prepares the
 * next): input_buffer gives slot s's own buffer (pinned memory on the GPU)
 * and its capacity in windows, or NULL when the running backend has none
 * (the CPU, or after a fall back): the caller then uses its own memory,
 * and submit/collect still work (collect computes). The buffer lives as
 * long as b; slot 0's may also be given to ssae_backend_run as x.
 * submit starts slot s on n windows at x (its buffer, or any memory that
 * stays unchanged until collect); collect waits for them and writes the
 * scores. A backend failure at either step falls back to the CPU like
 * ssae_backend_run (reported once), which scores the slot's windows from
 * x: no window lost. One thread; each submit is followed by one collect
 * of that slot before the slot is submitted again. */
#define SSAE_BACKEND_SLOTS 2
float *ssae_backend_input_buffer(ssae_backend *b, int slot, size_t *cap);
int ssae_backend_submit(ssae_backend *b, int slot, const float *x, size_t n, ssae_err *err);
int ssae_backend_collect(ssae_backend *b, int slot, float *scores, ssae_err *err);

/* Submit of slot s from nsp runs of windows (n in all) where they lie,
 * e.g. in place in the rings they arrived through: the GPU copies them
 * straight from there (from page-locked memory without any CPU copy; see
 * ssae_backend_host_register), so the caller copies nothing. sp and the
 * windows stay unchanged until the slot's collect, which falls back like
 * ssae_backend_collect (the CPU then scores the windows in place). Works
 * on every backend; ssae_backend_spans_direct says whether it saves the
 * copy (1: the device reads the spans; 0: the CPU scores them at collect,
 * one window per call, slower than a laid-out batch). */
int ssae_backend_submit_spans(ssae_backend *b, int slot, const ssae_span *sp, int nsp,
                              size_t n, ssae_err *err);
int ssae_backend_spans_direct(const ssae_backend *b);
/* Streams: the real-time engine's one path. b scores windows of
 * `channels` streams (channels 0 .. channels-1); with each batch comes,
 * per window, its channel and whether it follows the channel's previous
 * window by one frame (its first F-1 frames are that window's last F-1;
 * 0: the channel's first window, or after a drop or a restart). Submitted
 * with ssae_backend_stream_submit, collected with ssae_backend_collect,
 * like the slots above. Each backend does with the continuity what it
 * can: the CPU keeps every channel's slice codes (one cache per channel,
 * inside b, allocated and touched here, made anew when the CPU takes over
 * or the code size changes) and encodes only a window's new frame,
 * bit-identical to scoring it afresh; a device that reads spans in place
 * (spans_direct) copies them from where they lie and ignores it.
 * Opens once per backend, before the first stream submit (allocates; not
 * on the audio thread). Returns 0, or -1 (out of memory, channels < 1). */
int ssae_backend_stream_open(ssae_backend *b, int channels, ssae_err *err);
/* Slot s on nsp spans of stream windows, n in all; channel[i] and cont[i]
 * belong to the i-th window (the spans' windows in order; channels below
 * the open count). One laid-out span (pitch F*M, e.g. slot s's input
 * buffer) goes to the backend's submit, spans elsewhere to its span
 * reader; without either (the CPU, after a fall back) the slot's collect
 * scores them, on the CPU through the caches. The spans, the arrays and
 * the windows stay unchanged until the collect, which falls back like
 * ssae_backend_collect: no window is lost, and the CPU that takes over
 * starts every channel afresh. */
int ssae_backend_stream_submit(ssae_backend *b, int slot, const ssae_span *sp, int nsp,
                               size_t n, const uint32_t *channel, const unsigned char *cont,
                               ssae_err *err);
/* 1 when both slots of up to n windows are scored while the caller goes
 * on (the GPU, whose slots' input buffers hold n windows): the caller may
 * take the next batch before collecting one, and lays batches out in the
 * slots' input buffers (ssae_backend_input_buffer); 0 when the collect
 * does the work (the CPU, also after a fall back): collect right after
 * the submit. */
int ssae_backend_stream_async(const ssae_backend *b, size_t n);

/* n windows in device memory (x_dev) scored where they lie, on the
 * caller's stream, by a backend that reads device memory (run_device
 * above; the CUDA backend): scores_dev, recon_dev (NULL: none) as there.
 * Returns 0 once queued (not waited for); SSAE_BACKEND_NO_DEVICE when the
 * backend in use reads no device memory (the CPU, or after a fall back,
 * which a device failure in this call makes, reported once as
 * ssae_backend_run does): nothing was written, the caller copies the
 * windows to the host and calls ssae_backend_run; SSAE_BACKEND_DEVICE_EARG
 * when the pointers are not device memory of the backend's device (err
 * says why). The test hooks fire here as in ssae_backend_run. */
#define SSAE_BACKEND_NO_DEVICE (-1)
int ssae_backend_run_device(ssae_backend *b, const float *x_dev, size_t n, float *scores_dev,
                            float *recon_dev, void *stream, ssae_err *err);

/* Page-locks [p, p + bytes) for the device copies of b's kind, for the
 * process (it outlives b; a later backend of the same kind benefits).
 * Returns 0, or -1 when b's kind has no such thing or it failed: copies
 * from there then still work, through the driver's own staging. Undo with
 * ssae_backend_host_unregister(ops, p), ops: what this call returned
 * through *ops (the kind that pinned it). */
int ssae_backend_host_register(ssae_backend *b, void *p, size_t bytes,
                               const ssae_backend_ops **ops);
void ssae_backend_host_unregister(const ssae_backend_ops *ops, void *p);

/* The arithmetic of the model's matrix products on the backend: "fp32"
 * (the default: every product an fp32 FMA, as the CPU's reference) or
 * "3xtf32" (CUDA: the throughput kernel's products on the tensor cores,
 * each operand split into two TF32 halves: relative L2 error against
 * float64 within 1e-6, about 1.4x the windows per second on an H100; the
 * same as SSAE_CUDA_MATH=3xtf32). Backends without the choice (the CPU)
 * accept both and compute as they do. -1 with the reason for another
 * value. Not during a run (same thread as the runs). */
int ssae_backend_set_math(ssae_backend *b, const char *math, ssae_err *err);

/* Name of the backend now in use ("cuda", "cpu"). */
const char *ssae_backend_name(const ssae_backend *b);

/* Called once, from the thread that ran the batch, when the backend falls
 * back to the CPU; msg says why. */
void ssae_backend_set_fallback_cb(ssae_backend *b,
                                  void (*cb)(void *user, const char *msg),
                                  void *user);

/* Why "auto" passed over a faster backend (its start or self-test failed);
 * "" when it did not. */
const char *ssae_backend_note(const ssae_backend *b);

/* 1 once the backend has fallen back to the CPU. */
int ssae_backend_fell_back(const ssae_backend *b);

/* Test hook: the next ssae_backend_run fails on the current backend as a
 * device error would, so that tests exercise the fall back on any build.
 * The environment variable SSAE_BACKEND_FAIL_AT=N (read by
 * ssae_backend_new) does the same for the N-th run (1-based). */
void ssae_backend_fail_next(ssae_backend *b);

#ifdef __cplusplus
}
#endif
#endif
