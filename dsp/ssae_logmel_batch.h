/* Log-mel frames computed SSAE_LANES at a time (internal to dsp/).
 *
 * What a front end needs to turn frames of samples into dB mel bands: the
 * FFT plan, the periodic Hann window, the filterbank, and a batch of up to
 * SSAE_LANES frames (where each frame's samples are, where its bands go).
 * The single-stream front end (ssae_logmel.c) and the multi-channel one
 * (ssae_logmel_multi.c) both run their frames through this code, so a
 * frame's bits are the same whichever object, batch size or lane computes
 * it (ssae_lanes.h). Also the stream geometry both share (which frames a
 * stream of n samples has, when a frame is ready, the reflect padding). */
#ifndef SSAE_LOGMEL_BATCH_H
#define SSAE_LOGMEL_BATCH_H

#include <kiss_fftr.h>
#include <stdint.h>

#include "ssae_err.h"
#include "ssae_features.h"
#include "ssae_fft.h"
#include "ssae_lanes.h"
#include "ssae_melbank.h"

typedef struct ssae_lmbatch {
  ssae_feat_cfg cfg;
  int n_fft, hop, half, n_bins, n_mels;
  /* Power-of-two sizes (the default 1024) take the double FFT; other even
   * sizes take kiss_fftr in float (see ssae_fft.h). */
  ssae_rfft *dfft;
  kiss_fftr_cfg fft;
  double *win;   /* periodic Hann, n_fft */
  float *fframe; /* windowed frame for kiss_fftr */
  kiss_fft_cpx *spec;
  ssae_melbank bank;
  /* The batch: frame l's samples (n_fft floats) and its bands' place. */
  const float *src[SSAE_LANES];
  float *dst[SSAE_LANES];
  int n;
  float *gather;   /* SSAE_LANES frames of n_fft: frames that need copying */
  ssae_v8d *power; /* n_bins vectors: bin k of the batch's frames */
  double *mel;     /* n_mels: a single frame's band sums */
} ssae_lmbatch;

/* Builds the tables and buffers (cfg already validated). On failure the
 * half-built batch can be released. */
int ssae_lmbatch_init(ssae_lmbatch *b, const ssae_feat_cfg *cfg, ssae_err *err);
void ssae_lmbatch_release(ssae_lmbatch *b);

/* Where the next queued frame may be copied when it cannot be read in
 * place (n_fft floats, valid until the batch runs). */
static inline float *ssae_lmbatch_gather(ssae_lmbatch *b) {
  return b->gather + (size_t)b->n * (size_t)b->n_fft;
}

/* Queues a frame (src: n_fft samples, read when the batch runs; dst: n_mels
 * floats). Returns 1 when the batch is full: the caller runs it. */
static inline int ssae_lmbatch_add(ssae_lmbatch *b, const float *src, float *dst) {
  b->src[b->n] = src;
  b->dst[b->n] = dst;
  return ++b->n == SSAE_LANES;
}

/* Computes the queued frames and empties the batch. Audio-thread safe. */
void ssae_lmbatch_run(ssae_lmbatch *b);

/* numpy's 'reflect' index of sample j of a signal of n samples. */
uint64_t ssae_lm_reflect_index(int64_t j, uint64_t n);

/* First sample of frame t (negative: in the start padding). */
static inline int64_t ssae_lm_frame_start(const ssae_lmbatch *b, uint64_t t) {
  return (int64_t)(t * (uint64_t)b->hop) - (b->cfg.center ? b->half : 0);
}

/* Whether frame t can be computed from the first n_total samples of a
 * stream that goes on. */
int ssae_lm_frame_ready(const ssae_lmbatch *b, uint64_t t, uint64_t n_total);

/* Frames of a whole stream of n samples (torch.stft's count). */
uint64_t ssae_lm_total_frames(const ssae_lmbatch *b, uint64_t n);

#endif
