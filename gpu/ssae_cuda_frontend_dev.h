/* The device half of the GPU front end (internal to gpu/ssae_cuda_frontend*):
 * buffers, tables and kernels on one CUDA device. The host half
 * (ssae_cuda_frontend.c) decides which frames and windows each run makes,
 * keeps the per-channel bookkeeping and a CPU path of the same steps, and
 * fills the descriptors below; this half only executes them.
 *
 * Per channel the device keeps the newest n_fft samples of its stream (hist:
 * a frame not yet made starts after the newest n_fft samples, and the end
 * reflection reaches back n_fft/2 + 1, as in dsp/ssae_logmel.c), and the
 * log-mel frames and slice codes of its last F-1 frames (a window's first
 * F-1 frames are its predecessor's last F-1: each frame is encoded once). */
#ifndef SSAE_CUDA_FRONTEND_DEV_H
#define SSAE_CUDA_FRONTEND_DEV_H

#include <stddef.h>

#include "ssae_err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Zeroed host memory for bytes, page-aligned (the device page-locks it),
 * in 2 MB pages where it is large (4 MiB or more) and the system has them:
 * a run or a block writes a little into many channels' rows, and with
 * 4 KB pages each row is a TLB miss; touched now, so that no page fault
 * comes later (an audio thread writes the rings) and page-locking it is
 * quick. *size: the bytes allocated (bytes rounded up). NULL when out of
 * memory. Free with free(). Host half (ssae_cuda_frontend.c). */
void *ssae_fe_host_alloc(size_t bytes, size_t *size);

/* What one run does on one channel (filled by the host half). */
typedef struct ssae_fe_desc {
  long long n_in; /* stream samples before this run */
  long long t0;   /* first frame made in this run */
  int hlen;       /* samples of hist on the device before this run (min(n_fft, n_in)) */
  int n;          /* new samples in this run */
  int end;        /* the stream ends after them: samples past it are padding */
  int nnew;       /* frames made in this run: t0 .. t0+nnew-1 */
  int carry;      /* frames (and codes) before t0 kept from earlier runs, <= F-1 */
  int keep;       /* samples of hist after this run (min(n_fft, n_in + n)) */
  int i16;        /* this run's block holds int16 samples (else float) */
  /* Where the new samples lie, in units of their type: blocks: the
   * offset of the channel's first one in the input memory; a ring
   * (ext_in): their first position in the channel's row, which they may
   * run past (they go on at the row's start). */
  long long src;
  int buf;        /* set by the device half: which of its two sample buffers
                     holds the channel's hist (each run moves it to the other) */
} ssae_fe_desc;

/* The tables, built on the host in double precision. */
typedef struct ssae_fe_dev_cfg {
  int device, channels, pcm_i16, keep_frames;
  size_t max_block; /* samples per channel per run */
  /* NULL: the device allocates the input blocks (channels x max_block,
   * ssae_fe_dev_block, page-locked), which each run copies to the device
   * (what each channel brings) before fe_start reads them. Else the caller's
   * rings: channels rows of ext_row floats at ext_in (ext_in_bytes,
   * page-aligned), which the device page-locks; each run's samples are
   * copied from them by the copy engine. The memory stays the caller's,
   * usable after the device is freed. */
  void *ext_in;
  size_t ext_in_bytes, ext_row;
  int max_rows;     /* carry + frames per channel per run, at most */
  /* Features. */
  int n_fft, hop, center, reflect, n_mels;
  double power;
  const double *win;   /* periodic Hann, n_fft */
  const int *mel_start, *mel_len, *mel_off; /* n_mels each: band m's bins and weights */
  const double *mel_w; /* band m's weights at mel_off[m] */
  /* The model, folded (LayerNorm affine into the next Linear; D_f = W_d B_f^T). */
  int M, F, L, S;
  const double *encT;  /* [M][S] */
  const double *enc_b; /* [S] */
  const double *B;     /* [F*S][L] normalised basis, transposed */
  const double *bnT;   /* [L][L]: bnT[i*L+o] */
  const double *bn_b;  /* [L] */
  const double *D;     /* [L][F*M]: column f*M+m */
  const double *dec_b; /* [M] */
} ssae_fe_dev_cfg;

typedef struct ssae_fe_dev ssae_fe_dev;

/* 1 when a CUDA device is present. */
int ssae_fe_dev_present(void);
/* Starts the driver and makes device's primary context (errors ignored:
 * the calls that need them report them). */
void ssae_fe_dev_warm(int device);

/* NULL with err on a CUDA failure or sizes the device cannot take. */
ssae_fe_dev *ssae_fe_dev_new(const ssae_fe_dev_cfg *cfg, ssae_err *err);
void ssae_fe_dev_free(ssae_fe_dev *d);

/* Page-locked input of channel ch: max_block samples (float, or int16 when
 * pcm_i16; a float block may hold int16 samples, see ssae_fe_desc.i16).
 * NULL with ext_in. */
void *ssae_fe_dev_block(ssae_fe_dev *d, int ch);
/* Page-locked descriptors, one per channel, filled before each run. */
ssae_fe_desc *ssae_fe_dev_desc(ssae_fe_dev *d);

/* Queues a run of channels lo .. hi-1: their inputs and descriptors in,
 * their frames and scores made, copied out; the other channels are not
 * touched (a run of one input group of many costs that group's share).
 * Returns without waiting: ssae_fe_dev_wait with the same range ends it.
 * Up to SSAE_FE_DEV_RUNS runs may be queued, on disjoint channels; the
 * device runs them in order and wait ends the oldest. A run's descriptors
 * and inputs stay unchanged until its wait. poison: launch with an invalid
 * configuration (the SSAE_CUDA_FAIL_AFTER test hook: the real CUDA error
 * path). -1 with err on any CUDA error (of the launch or, from wait, of the
 * run); the object is then unusable. ready: 1 when the oldest run queued
 * has finished on the device (or failed: its wait says how), or none is
 * queued; never waits. */
#define SSAE_FE_DEV_RUNS 2
int ssae_fe_dev_launch(ssae_fe_dev *d, int lo, int hi, int poison, ssae_err *err);
int ssae_fe_dev_wait(ssae_fe_dev *d, int lo, int hi, ssae_err *err);
int ssae_fe_dev_ready(ssae_fe_dev *d);

/* After a run, page-locked: channel ch's window scores (in order), and its
 * rows (carry + nnew frames of n_mels floats; the new frames from row
 * carry on; only with keep_frames), for a channel of that run's range. */
const float *ssae_fe_dev_scores(const ssae_fe_dev *d, int ch);
const float *ssae_fe_dev_rows(const ssae_fe_dev *d, int ch);

#ifdef __cplusplus
}
#endif
#endif
