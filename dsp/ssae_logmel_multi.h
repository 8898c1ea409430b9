/* Log-mel front end for many channels with the same settings (SPEC
 * section 1), for a real-time engine that gets one block per channel.
 *
 * A live stream completes about one frame per channel per period; a
 * single-stream front end (ssae_logmel.h) per channel then computes every
 * frame alone. This object keeps each channel's stream (its recent samples
 * and frame count) but one set of tables (FFT plan, window, filterbank) and
 * one batch: the frames that complete in any channel are queued and
 * computed SSAE_LANES at a time, one per SIMD lane, and handed to a
 * callback. Each channel gets exactly the frames, bit for bit, that a
 * ssae_logmel fed the same blocks gives (the same kernels: ssae_lanes.h).
 *
 * Typical use, once per audio period: ssae_logmel_multi_feed() for every
 * channel, then ssae_logmel_multi_run() for the frames still queued. */
#ifndef SSAE_LOGMEL_MULTI_H
#define SSAE_LOGMEL_MULTI_H

#include <stddef.h>

#include "ssae_err.h"
#include "ssae_features.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ssae_logmel_multi ssae_logmel_multi;

/* Receives channel `channel`'s next frame (n_mels floats, valid during the
 * call). A channel's frames come in order; frames of different channels
 * come in the order they completed. Runs on the thread that fed, flushed or
 * ran the object, inside that call; it must not call back into the object. */
typedef void (*ssae_logmel_frame_fn)(void *user, int channel, const float *frame);

/* Allocates everything the object will ever need (per channel a history of
 * a few n_fft samples; the tables once) and touches it, so that the audio
 * thread does not take the first page faults. */
ssae_logmel_multi *ssae_logmel_multi_new(const ssae_feat_cfg *cfg, int channels,
                                         ssae_logmel_frame_fn fn, void *user,
                                         ssae_err *err);

/* Accepts half-built objects and NULL. */
void ssae_logmel_multi_free(ssae_logmel_multi *mm);

int ssae_logmel_multi_channels(const ssae_logmel_multi *mm);

/* Feeds n samples (any n) to channel c. The frames they complete are queued;
 * whenever SSAE_LANES frames are queued (from any channels) they are
 * computed and handed to the callback. Returns the number of frames queued.
 * Audio-thread safe: no allocation, no locks, no system calls, bounded work
 * (at most ceil(n / chunk) + 1 batches, chunk >= 3 n_fft samples). */
size_t ssae_logmel_multi_feed(ssae_logmel_multi *mm, int c, const float *in, size_t n);

/* Computes the frames still queued and hands them to the callback.
 * Audio-thread safe. */
void ssae_logmel_multi_run(ssae_logmel_multi *mm);

/* Ends channel c's stream: queues the frames that need the end padding (as
 * ssae_logmel_flush) and starts a new stream. Run the object afterwards to
 * get them. Returns the number queued. Audio-thread safe. */
size_t ssae_logmel_multi_flush(ssae_logmel_multi *mm, int c);

/* Forgets channel c's stream so far (frames already queued are still
 * delivered). Audio-thread safe. */
void ssae_logmel_multi_reset(ssae_logmel_multi *mm, int c);

#ifdef __cplusplus
}
#endif
#endif
