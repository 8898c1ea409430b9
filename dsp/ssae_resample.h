/* Fixed-ratio streaming resampler for the audio thread: rational polyphase
 * windowed-sinc (Kaiser window). Everything is allocated at creation;
 * processing never allocates, locks or calls the system. (libsoxr's
 * streaming API may allocate inside soxr_process, so it is used only for
 * offline file loading.) */
#ifndef SSAE_RESAMPLE_H
#define SSAE_RESAMPLE_H

#include <stddef.h>

#include "ssae_err.h"
#include "ssae_realtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ssae_resampler ssae_resampler;

/* in_rate, out_rate: positive integers (Hz). max_in: largest block per
 * call. Refuses ratios whose reduced form needs an unreasonably large
 * filter table. */
ssae_resampler *ssae_resampler_new(long in_rate, long out_rate, size_t max_in,
                                   ssae_err *err);
void ssae_resampler_free(ssae_resampler *r);

/* Upper bound on the output of one call with n input samples. */
SSAE_REALTIME size_t ssae_resampler_max_out(const ssae_resampler *r, size_t n);

/* n <= max_in samples in; writes the output samples to out (at least
 * ssae_resampler_max_out(n) floats) and returns how many. Audio-thread
 * safe. */
SSAE_REALTIME size_t ssae_resampler_process(ssae_resampler *r, const float *in, size_t n,
                                            float *out);

/* Forgets the history (a new stream). Audio-thread safe. */
SSAE_REALTIME void ssae_resampler_reset(ssae_resampler *r);

#ifdef __cplusplus
}
#endif
#endif
