#include "ssae_detector.h"

#include <math.h>

void ssae_detector_params_default(ssae_detector_params *p) {
  p->threshold = NAN;
  p->smoothing_s = SSAE_DETECTOR_SMOOTHING_S;
  p->on_count = SSAE_DETECTOR_ON_COUNT;
  p->off_count = SSAE_DETECTOR_OFF_COUNT;
}

void ssae_detector_restart(ssae_detector *d) {
  d->smoothed = 0.0;
  d->have_smoothed = 0;
  d->above = d->below = 0;
}

void ssae_detector_reset(ssae_detector *d) {
  ssae_detector_restart(d);
  d->alarm = 0;
}

double ssae_detector_alpha(double hop_s, double smoothing_s) {
  return smoothing_s > 0 ? 1.0 - exp(-hop_s / smoothing_s) : 1.0;
}

int ssae_detector_step(ssae_detector *d, double score, int silent, double alpha,
                       double threshold, int on_count, int off_count) {
  const int was = d->alarm;
  if (on_count < 1) on_count = 1;
  if (off_count < 1) off_count = 1;
  if (silent) {
    ssae_detector_reset(d);
  } else if (isfinite(score)) {
    if (!d->have_smoothed) {
      d->smoothed = score;
      d->have_smoothed = 1;
    } else {
      d->smoothed += alpha * (score - d->smoothed);
    }
    if (!isfinite(threshold)) {
      d->above = d->below = 0;
      d->alarm = 0;
    } else if (d->smoothed > threshold) {
      d->above++;
      d->below = 0;
      if (!d->alarm && d->above >= on_count) d->alarm = 1;
    } else {
      d->below++;
      d->above = 0;
      if (d->alarm && d->below >= off_count) d->alarm = 0;
    }
  } else if (!isfinite(threshold)) {
    d->above = d->below = 0;
    d->alarm = 0;
  }
  if (d->alarm == was) return SSAE_DETECTOR_NO_CHANGE;
  return d->alarm ? SSAE_DETECTOR_ALARM_ON : SSAE_DETECTOR_ALARM_OFF;
}

void ssae_detector_run(const ssae_detector_params *p, double hop_s, const float *scores,
                       const unsigned char *silent, size_t n, float *smoothed,
                       unsigned char *alarm) {
  ssae_detector d;
  ssae_detector_reset(&d);
  const double a = ssae_detector_alpha(hop_s, p->smoothing_s);
  for (size_t i = 0; i < n; i++) {
    ssae_detector_step(&d, scores[i], silent ? silent[i] : 0, a, p->threshold, p->on_count,
                       p->off_count);
    if (smoothed) smoothed[i] = d.have_smoothed ? (float)d.smoothed : NAN;
    if (alarm) alarm[i] = (unsigned char)d.alarm;
  }
}
