/* The GPU front end: PCM in, window scores out, for many streams at once
 * (offline: one stream per file; live: one per channel).
 *
 * Each run takes a block of samples for every channel (any sizes up to
 * max_block, zero included) and makes, on the device, every log-mel frame
 * the blocks complete (SPEC section 1: periodic Hann, FFT, power, Slaney
 * mel, dB; double precision where float is not enough), the frames' slice
 * codes (each frame encoded once), and the score of every window they
 * complete (SPEC section 2). The frames are those of the CPU front end
 * (dsp/ssae_logmel.h) for any block sizes: a channel's stream state (the
 * newest n_fft samples, the last F-1 frames and codes) stays on the device
 * between runs, and ending a channel's stream (end[ch]) adds the end
 * padding as ssae_logmel_flush does, then starts the channel afresh.
 *
 * The same object also runs every step on the CPU (dsp's frame code and
 * ssae_cpu_score_frames) from a copy of the stream state it keeps on the
 * host: with cfg.cpu set, or after a CUDA error, when it moves to the CPU
 * for good and re-runs the failed step there: no window is lost, and
 * ssae_cuda_fe_note says why it moved. Test hook: SSAE_CUDA_FAIL_AFTER=N
 * in the environment at creation makes every run after the first N fail
 * on the device with a real CUDA error (an invalid launch configuration).
 *
 * Not for the audio thread (runs wait for the device); the live engine's
 * worker calls it. One call at a time per object. */
#ifndef SSAE_CUDA_FRONTEND_H
#define SSAE_CUDA_FRONTEND_H

#include <stddef.h>
#include <stdint.h>

#include "ssae_err.h"
#include "ssae_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SSAE_FE_PCM_F32 = 0, SSAE_FE_PCM_I16 = 1 } ssae_fe_pcm;

typedef struct ssae_cuda_fe_cfg {
  int channels;     /* streams per run (up to 65535 on the GPU) */
  size_t max_block; /* samples per channel per run, at most */
  ssae_fe_pcm pcm;  /* float in [-1, 1), or 16-bit (divided by 32768 on the device) */
  int device;       /* CUDA device index */
  int cpu;          /* 1: run on the CPU only (the reference; hosts without a GPU) */
  int keep_frames;  /* 1: also return the log-mel frames (tests, pictures) */
  /* 0: each run's samples are in the per-run blocks (ssae_cuda_fe_block,
   * ssae_cuda_fe_run). Else ring input (a live engine): each channel has a
   * circular buffer of ring_len float samples (a power of two, at least
   * max_block + ssae_cuda_fe_ring_keep), page-locked, which the caller
   * fills in place (ssae_cuda_fe_ring, ssae_cuda_fe_run_ring) and from
   * which each run's samples go to the device by the copy engine (2D
   * copies of the rows); the CPU path's copy of each stream is the ring. */
  size_t ring_len;
} ssae_cuda_fe_cfg;

typedef struct ssae_cuda_fe ssae_cuda_fe;

/* Frames and windows follow m->feat and m->d. Fails (NULL with err) when
 * the device cannot be set up, or for n_fft above 8192 (4096 for sizes
 * that are not powers of two) unless cfg->cpu. */
ssae_cuda_fe *ssae_cuda_fe_new(const ssae_model *m, const ssae_cuda_fe_cfg *cfg, ssae_err *err);
/* Accepts half-built objects and NULL. */
void ssae_cuda_fe_free(ssae_cuda_fe *fe);

/* Where the caller puts channel ch's samples for the next run: max_block
 * samples of the cfg's format (page-locked memory on the GPU path). NULL
 * with ring input. */
void *ssae_cuda_fe_block(ssae_cuda_fe *fe, int ch);

/* For a float front end: when each of channel ch's first n samples is
 * k/32768 for a 16-bit k (16-bit audio: what libsndfile gives for it),
 * rewrites the block in place as int16 for the next run, which halves the
 * bytes the device reads over PCIe; returns 1 then, else 0 (the block is
 * unchanged). The frames are the same either way. May be called for
 * different channels on different threads at once (not during a run). */
int ssae_cuda_fe_pack_i16(ssae_cuda_fe *fe, int ch, size_t n);
/* Channel ch's block was filled with 16-bit samples (k / 32768 each) at its
 * start, as ssae_cuda_fe_pack_i16 leaves it: for a reader that gives them
 * as they are (ssae_audio_read_i16). Float blocks (SSAE_FE_PCM_F32) only;
 * 0 otherwise. */
int ssae_cuda_fe_set_i16(ssae_cuda_fe *fe, int ch);

/* One run: channel ch takes n[ch] samples from its block (n[ch] <=
 * max_block); end NULL, or end[ch] != 0 to end channel ch's stream after
 * them. 0, or -1 with err when the CPU path fails too (out of range n, no
 * memory): results are then unspecified and the streams must be ended. */
int ssae_cuda_fe_run(ssae_cuda_fe *fe, const size_t *n, const unsigned char *end, ssae_err *err);

/* The last run's results for channel ch, valid until the next run: its
 * window scores in stream order (the return value counts them), and its
 * new log-mel frames (n_mels floats each; only with keep_frames, else
 * *frames NULL). */
size_t ssae_cuda_fe_scores(const ssae_cuda_fe *fe, int ch, const float **scores);
size_t ssae_cuda_fe_frames(const ssae_cuda_fe *fe, int ch, const float **frames);

/* Ring input (cfg.ring_len): channel ch's circular buffer, ring_len floats;
 * sample position p (any 64-bit count) lies at [p & (ring_len - 1)]. NULL
 * without ring input. The memory stays valid for the object's life (also
 * after a move to the CPU). */
float *ssae_cuda_fe_ring(ssae_cuda_fe *fe, int ch);
/* Samples before a run's first position that must stay unchanged until the
 * next run (the CPU path reads them after a CUDA error): the writer may
 * fill position p once p < (that run's first position) + ring_len - keep. */
size_t ssae_cuda_fe_ring_keep(const ssae_cuda_fe *fe);
/* One run on ring input: channel ch takes n[ch] samples from positions
 * pos[ch] ... pos[ch] + n[ch] - 1 of its ring (each channel's positions
 * follow on from its previous run's, until its stream ends or is reset);
 * pos[ch] of a channel that brings no sample and does not end is not read.
 * Otherwise as ssae_cuda_fe_run. */
int ssae_cuda_fe_run_ring(ssae_cuda_fe *fe, const uint64_t *pos, const size_t *n,
                          const unsigned char *end, ssae_err *err);

/* ssae_cuda_fe_run_ring in two halves, for a caller with other work to do
 * while the device runs (a live engine's worker collects and publishes the
 * last run's windows meanwhile, and queues the next channels' run): submit
 * takes the channels' samples and queues their run; wait ends the oldest
 * run in flight (0, or -1 with err as ssae_cuda_fe_run_ring; a CUDA error
 * moves to the CPU there, and the runs still in flight are then made on
 * the CPU at their own wait). At most SSAE_CUDA_FE_IN_FLIGHT runs are in
 * flight, on channel ranges (a run's first to its last channel that brings
 * samples or ends) that do not overlap; the device runs them in order.
 * pos, n and end are read by submit only; a run's ring samples stay
 * unchanged until its wait. Unlike ssae_cuda_fe_run_ring, the channels
 * outside a run's range keep the results of their own last run, readable
 * while it is in flight. */
#define SSAE_CUDA_FE_IN_FLIGHT 2
int ssae_cuda_fe_submit_ring(ssae_cuda_fe *fe, const uint64_t *pos, const size_t *n,
                             const unsigned char *end, ssae_err *err);
int ssae_cuda_fe_wait(ssae_cuda_fe *fe, ssae_err *err);
/* ssae_cuda_fe_run in two halves (blocks; one run in flight): submit
 * queues the run and returns; ssae_cuda_fe_wait ends it, as
 * ssae_cuda_fe_run would have. The blocks stay unchanged until the wait,
 * and the results are read after it. Offline scoring queues one object's
 * run while another's is on the device (their copies and kernels
 * overlap). */
int ssae_cuda_fe_submit(ssae_cuda_fe *fe, const size_t *n, const unsigned char *end,
                        ssae_err *err);
/* Runs submitted and not yet waited for (0 .. SSAE_CUDA_FE_IN_FLIGHT). */
int ssae_cuda_fe_in_flight(const ssae_cuda_fe *fe);
/* 1 when ssae_cuda_fe_wait would not wait for the device (the oldest run
 * has finished there, failed, or runs on the CPU at its wait; or none is
 * in flight), else 0. Never waits. */
int ssae_cuda_fe_ready(ssae_cuda_fe *fe);

/* Channel ch forgets its stream without the end padding (samples were lost
 * in between): its next samples start a new stream. Between runs. */
void ssae_cuda_fe_reset(ssae_cuda_fe *fe, int ch);
/* Frames the last run made on channel ch (kept or not). */
size_t ssae_cuda_fe_new_frames(const ssae_cuda_fe *fe, int ch);

/* Frames a channel can produce in one run, at most. */
size_t ssae_cuda_fe_max_frames(const ssae_cuda_fe *fe);

/* 1 while the object runs on the GPU. */
int ssae_cuda_fe_on_gpu(const ssae_cuda_fe *fe);
/* "" on the GPU or with cfg.cpu; otherwise the CUDA error that moved it to
 * the CPU. */
const char *ssae_cuda_fe_note(const ssae_cuda_fe *fe);

/* 1 when a CUDA device is present. */
int ssae_cuda_fe_device_present(void);

/* Starts the CUDA driver and device's context on a thread of its own, so
 * that what the caller does next (listing files, loading a model) overlaps
 * them: in a fresh process they take 0.2 s before any GPU work can start
 * (BENCHMARKS.md). Later CUDA calls of any thread wait for what is still
 * under way. ssae_cuda_fe_warm_up_end waits for the thread: call it before
 * the process can exit. Nothing happens when the thread cannot start, or
 * with a warm-up already under way. From one thread (a program's main). */
void ssae_cuda_fe_warm_up(int device);
void ssae_cuda_fe_warm_up_end(void);

#ifdef __cplusplus
}
#endif
#endif
