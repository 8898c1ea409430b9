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

/* Model-rate samples [*first, *end) that window w reads: its frames w ..
 * w + frames - 1, frame t at sample t * hop (a stream's window index when
 * frame 0 is at its first sample; a frame index minus frames - 1 where the
 * time axis goes on across streams). end is the sample after the last
 * frame's last sample (with centred frames the last ones reach past the
 * end of a stream into its padding); first is clamped at 0 (centred frames
 * begin in the padding before the stream). */
SSAE_REALTIME void ssae_window_samples(const ssae_feat_cfg *f, uint64_t w, uint64_t *first,
                                       uint64_t *end);

/* Window w's time in seconds since the stream's start: end / sample_rate,
 * the moment its last sample has arrived and it can first be judged (the
 * `t` of its events). */
SSAE_REALTIME double ssae_window_time(const ssae_feat_cfg *f, uint64_t w);

/* Streaming scan of one channel's model-rate samples (the audio thread's
 * part: no allocation, work bounded by the samples). It keeps the latest
 * SSAE_SILENCE_SPANS spans of qualifying zeros, so that a window is judged
 * on its own samples however far the scan has gone past its end (a whole
 * block is scanned before the frames it completes are made). When more
 * spans come, the two oldest merge into one that also covers the stretch
 * between them: a window inside that stretch could then read as silent,
 * but only after SSAE_SILENCE_SPANS separate runs of zeros between its end
 * and its judgement (in one block). A plain value: zero it (or ssae_silence_reset) to start. */
#define SSAE_SILENCE_SPANS 16
typedef struct ssae_silence {
  uint64_t zrun; /* exact zeros in a row at the end of what was scanned */
  uint64_t next; /* the sample after what was scanned */
  /* Qualifying zeros (at least the SSAE_SILENCE_MIN_ZEROS-th of their run):
   * samples [start[i], end[i]), i < n, oldest first. */
  uint64_t start[SSAE_SILENCE_SPANS], end[SSAE_SILENCE_SPANS];
  int n;
} ssae_silence;

SSAE_REALTIME void ssae_silence_reset(ssae_silence *s);

/* Scans x[0 .. n), whose first sample is sample pos of the stream
 * (positions only grow; a gap in them ends a run of zeros). */
SSAE_REALTIME void ssae_silence_scan(ssae_silence *s, uint64_t pos, const float *x, size_t n);

/* The same as ssae_silence_scan of n samples none of which is zero (a
 * reader that knows it from another pass over them). */
SSAE_REALTIME void ssae_silence_scan_nonzero(ssae_silence *s, uint64_t pos, size_t n);

/* 1 when samples [first, end) touch digital silence (they must have been
 * scanned). */
SSAE_REALTIME int ssae_silence_touches(const ssae_silence *s, uint64_t first, uint64_t end);

/* The silent flags of windows w0 .. w0 + n - 1 into silent[0 .. n), from
 * a scan that has gone at least to each window's end or to the stream's
 * end (offline readers: scan each block as it is read, flag the windows
 * its frames complete). */
void ssae_silence_flag_windows(const ssae_silence *s, const ssae_feat_cfg *f, uint64_t w0,
                               size_t n, unsigned char *silent);

/* The silent flag of windows 0 .. n_windows - 1 of a whole stream x[0 ..
 * n) (offline), each judged on its own samples as the live scan judges it. */
void ssae_silence_windows(const ssae_feat_cfg *f, const float *x, size_t n, size_t n_windows,
                          unsigned char *silent);

#ifdef __cplusplus
}
#endif
#endif
