/* Which samples a window reads, when it can first be judged, and whether
 * it touches digital silence: one definition for the live engine and the
 * offline path (ssae_file_score), so that both hand the detector
 * (ssae_detector.h) the same windows with the same silent flags.
 *
 * Digital silence is a run of at least SSAE_SILENCE_MIN_ZEROS exact zeros
 * at the model's rate. Real signals, even quiet 16-bit ones, do not have
 * them; unconnected ports, ended streams and muted devices do. A window
 * touches it when a zero that is at least the SSAE_SILENCE_MIN_ZEROS-th of
 * its run lies among the window's samples. */
#ifndef SSAE_SILENCE_H
#define SSAE_SILENCE_H

#include <stddef.h>
#include <stdint.h>

#include "ssae_features.h"
#include "ssae_realtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 4 ms at 16 kHz. */
#define SSAE_SILENCE_MIN_ZEROS 64

/* Model-rate samples [*first, *end) that window w of a stream reads (its
 * frames w .. w + frames - 1, frame 0 at the stream's first sample): end is
 * the sample after the last frame's last sample (with centred frames the
 * last ones reach past the end of a stream into its padding), first is
 * clamped at 0 (centred frames begin in the padding before the stream). */
SSAE_REALTIME void ssae_window_samples(const ssae_feat_cfg *f, uint64_t w, uint64_t *first,
                                       uint64_t *end);

/* Window w's time in seconds since the stream's start: end / sample_rate,
 * the moment its last sample has arrived and it can first be judged (the
 * `t` of its events). */
SSAE_REALTIME double ssae_window_time(const ssae_feat_cfg *f, uint64_t w);

/* Streaming scan of one channel's model-rate samples; a plain value: zero
 * it to start. */
typedef struct ssae_silence {
  uint64_t zrun;    /* exact zeros in a row at the end of what was scanned */
  uint64_t gap_end; /* sample after the latest zero that was at least the
                       SSAE_SILENCE_MIN_ZEROS-th of its run (0: none yet) */
} ssae_silence;

/* Scans x[0 .. n), whose first sample is sample pos of the stream. */
SSAE_REALTIME void ssae_silence_scan(ssae_silence *s, uint64_t pos, const float *x, size_t n);

/* 1 when the scanned samples from first on touch digital silence: for a
 * window [first, end) once the stream is scanned up to end. */
SSAE_REALTIME static inline int ssae_silence_since(const ssae_silence *s, uint64_t first) {
  return s->gap_end > first;
}

/* The silent flag of windows 0 .. n_windows - 1 of a whole stream x[0 ..
 * n) (offline): each window judged on the samples up to its end, as the
 * engine judges it when its last sample arrives. */
void ssae_silence_windows(const ssae_feat_cfg *f, const float *x, size_t n, size_t n_windows,
                          unsigned char *silent);

#ifdef __cplusplus
}
#endif
#endif
