/* The detector (SPEC section 4): window scores in, a smoothed score and an
 * alarm state out. One step function serves every place that judges
 * scores: the engine's worker (live), the LV2 plugin, `ssae report` and
 * threshold calibration (offline), so that a file gives the same alarms
 * whichever way it is played.
 *
 * Smoothing is exponential with a time constant in seconds of audio
 * (alpha = 1 - exp(-hop / tau)), so that it means the same at any hop; the
 * first window after a reset starts the average at its own score. The
 * alarm goes on after on_count consecutive smoothed scores above the
 * threshold and off after off_count consecutive ones at or below it.
 * A window that touches digital silence resets the detector and ends an
 * alarm (its frames say nothing about the machine); a non-finite score
 * (a failed batch) carries no evidence either way and leaves the state as
 * it is; without a finite threshold nothing is judged and no alarm is on.
 *
 * Time convention (doc/SPEC.md, section 4): a window's time is the end of
 * its last frame, the moment its last sample has arrived and it can first
 * be judged (ssae_window_time in ssae_silence.h: for the default features,
 * centred frames with n_fft = 2 hop, (window index + frames) * hop seconds
 * after the stream's start); an alarm starts at the time of the window
 * that turned it on and ends at the time of the window that turned it off.
 * Events, `ssae report` and its picture all use it. */
#ifndef SSAE_DETECTOR_H
#define SSAE_DETECTOR_H

#include <stddef.h>

#include "ssae_realtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The defaults, for every front end (command line, engine, service). */
#define SSAE_DETECTOR_SMOOTHING_S 0.1
#define SSAE_DETECTOR_ON_COUNT 3
#define SSAE_DETECTOR_OFF_COUNT 5
/* A default as text, for help messages: SSAE_DETECTOR_TEXT(SSAE_DETECTOR_ON_COUNT) is "3". */
#define SSAE_DETECTOR_TEXT(x) SSAE_DETECTOR_TEXT_(x)
#define SSAE_DETECTOR_TEXT_(x) #x

typedef struct ssae_detector_params {
  double threshold;   /* NAN (or <= 0): none given; callers substitute the
                         model's before judging */
  double smoothing_s; /* EMA time constant in seconds of audio; 0: none */
  int on_count;       /* >= 1 */
  int off_count;      /* >= 1 */
} ssae_detector_params;

/* threshold NAN, the defaults above. */
void ssae_detector_params_default(ssae_detector_params *p);

/* One stream's state; a plain value (no allocation): zero it, or call
 * ssae_detector_reset, to start. */
typedef struct ssae_detector {
  double smoothed; /* meaningful once have_smoothed */
  int have_smoothed;
  int above, below; /* consecutive smoothed scores above / not above */
  int alarm;
} ssae_detector;

/* What a step did. */
enum { SSAE_DETECTOR_NO_CHANGE = 0, SSAE_DETECTOR_ALARM_ON = 1, SSAE_DETECTOR_ALARM_OFF = -1 };

SSAE_REALTIME void ssae_detector_reset(ssae_detector *d);
/* The smoothing and the hysteresis counts start afresh; an alarm on stays
 * on until the scores from here end it (a new model: its scores are on
 * another scale than the average so far). */
SSAE_REALTIME void ssae_detector_restart(ssae_detector *d);

/* The smoothing factor for a hop and a time constant (both in seconds). */
SSAE_REALTIME double ssae_detector_alpha(double hop_s, double smoothing_s);

/* One window: score (non-finite: no evidence), silent (1: the window
 * touches digital silence), alpha from ssae_detector_alpha, threshold
 * (non-finite: nothing judged), the hysteresis counts (values below 1
 * count as 1). Returns SSAE_DETECTOR_ALARM_ON / _OFF when the alarm
 * changed, else SSAE_DETECTOR_NO_CHANGE. */
SSAE_REALTIME int ssae_detector_step(ssae_detector *d, double score, int silent, double alpha,
                                     double threshold, int on_count, int off_count);

/* A whole sequence from a fresh state (offline: report, calibration):
 * scores[i] with silent[i] (NULL: none silent) at hop_s per window;
 * p->threshold is used as given (non-finite: no alarm). Writes the
 * smoothed score (NAN before the first evidence) and the alarm state per
 * window; either output may be NULL. */
void ssae_detector_run(const ssae_detector_params *p, double hop_s, const float *scores,
                       const unsigned char *silent, size_t n, float *smoothed,
                       unsigned char *alarm);

#ifdef __cplusplus
}
#endif
#endif
