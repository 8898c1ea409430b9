/* Streaming log-mel front end (SPEC section 1).
 *
 * One object turns a stream of samples (at cfg->sample_rate) into log-mel
 * frames and 5-frame windows. Offline processing is the same object fed the
 * whole file: blocks of any size give bit-identical frames. The last frames
 * of a stream, which need the end padding, come from ssae_logmel_flush(). */
#ifndef SSAE_LOGMEL_H
#define SSAE_LOGMEL_H

#include <stddef.h>

#include "ssae_err.h"
#include "ssae_features.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ssae_logmel ssae_logmel;

/* Allocates everything the object will ever need (FFT plan, filterbank,
 * buffers). */
ssae_logmel *ssae_logmel_new(const ssae_feat_cfg *cfg, ssae_err *err);

/* Accepts half-built objects and NULL. */
void ssae_logmel_free(ssae_logmel *lm);

/* Upper bound on the frames that one call with n samples can emit
 * (process or flush; n = 0 gives the bound for flush). */
size_t ssae_logmel_max_frames(const ssae_logmel *lm, size_t n);

/* Feeds n samples; writes every completed frame (n_mels floats each,
 * frame-major) to `frames`, which holds at least ssae_logmel_max_frames(n)
 * frames. Returns the number of frames written.
 * Audio-thread safe: no allocation, no locks, no system calls, bounded work. */
size_t ssae_logmel_process(ssae_logmel *lm, const float *in, size_t n,
                           float *frames);

/* Ends the stream: emits the frames that need the end padding. The object
 * is then reset for a new stream. Audio-thread safe.
 * A centred stream of n > 0 samples has 1 + n/hop frames (torch.stft's
 * count). With reflect padding, frame 0 waits for sample n_fft/2; a stream
 * shorter than that is reflected again here, as numpy's pad(mode="reflect")
 * (librosa) does; torchaudio refuses such a stream. */
size_t ssae_logmel_flush(ssae_logmel *lm, float *frames);

/* Forgets the stream so far. Audio-thread safe. */
void ssae_logmel_reset(ssae_logmel *lm);

/* The calling thread's front end for cfg, reset, for offline work: kept
 * for the thread's next call with the same settings (set-up and fresh
 * memory cost as much as a 10 s clip) and freed when the thread ends; a
 * call with other settings frees the one kept before, so a thread uses one
 * at a time. *owned = 1 where it could not be kept: the caller frees it.
 * Not for the audio thread. */
ssae_logmel *ssae_logmel_cached(const ssae_feat_cfg *cfg, int *owned, ssae_err *err);

/* Whole-signal convenience for offline work: all frames of x[0..n) into a
 * newly allocated array (*out, *n_frames x n_mels); the streaming object fed
 * the whole signal, so the frames are bit-identical to any block sizes.
 * No frames (n = 0): returns 0 with *out NULL. Not for the audio thread.
 * Uses the thread's ssae_logmel_cached front end. */
int ssae_logmel_compute(const ssae_feat_cfg *cfg, const float *x, size_t n,
                        float **out, size_t *n_frames, ssae_err *err);

/* Sliding window of cfg->frames frames (SPEC: x[n_mels*k + m] =
 * logmel[t+k][m]). */
typedef struct ssae_window ssae_window;
ssae_window *ssae_window_new(int n_mels, int frames, ssae_err *err);
void ssae_window_free(ssae_window *w);
/* Adds one frame; when a full window is available copies it to `out`
 * (n_mels*frames floats) and returns 1, else 0. Audio-thread safe. */
int ssae_window_push(ssae_window *w, const float *frame, float *out);
void ssae_window_reset(ssae_window *w);

/* All T-frames+1 windows of a frame array, newly allocated (window t at
 * out + t*n_mels*frames_per_window). Fewer frames than a window: returns 0
 * with *out NULL and *n_windows 0. */
int ssae_windows_from_frames(const float *frames, size_t n_frames, int n_mels,
                             int frames_per_window, float **out,
                             size_t *n_windows, ssae_err *err);

#ifdef __cplusplus
}
#endif
#endif
