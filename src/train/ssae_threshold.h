/* The decision threshold from training scores (a gamma fit, SPEC section
 * 3's "how it was set"), and what to do when the scores cannot give one:
 * data with no spread (every score equal, or zero: a model that
 * reconstructs its training data exactly) has no meaningful quantile, so
 * the model is written with threshold "none" and a warning that says why,
 * instead of training failing at its last step. */
#ifndef SSAE_THRESHOLD_H
#define SSAE_THRESHOLD_H

#include <stddef.h>

#include "ssae_err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ssae_threshold_fit {
  double threshold;   /* NAN: none (warning says why) */
  double shape, scale; /* the gamma fit (location 0); NAN when none */
  const char *method; /* model metadata threshold_method:
                         "gamma_mle_loc0_file_scores",
                         "gamma_mle_loc0_window_scores" or "none" */
  char warning[SSAE_ERR_LEN]; /* empty, or why there is no threshold */
} ssae_threshold_fit;

/* Fits a gamma (location 0) to the n scores x (per_window: window scores,
 * else file scores) and puts the threshold at its `percentile` quantile.
 * Returns 0 with fit->threshold set; 1 when these scores give no
 * threshold (fewer than 2, not all positive and finite, no spread), with
 * fit->threshold NAN, method "none" and the reason in fit->warning; -1
 * with err for a percentile outside (0, 1). */
int ssae_threshold_fit_scores(const double *x, size_t n, double percentile, int per_window,
                              ssae_threshold_fit *fit, ssae_err *err);

#ifdef __cplusplus
}
#endif
#endif
