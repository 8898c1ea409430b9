/* The spectrum-only reference: what a model with no network at all makes
 * of the same features. A window's mean log-mel spectrum (the mean of its
 * F frames, one value per band) under a diagonal Gaussian fitted on the
 * training windows (M means, M variances). A window's reference score is
 * the squared Mahalanobis distance of its mean spectrum per band,
 *   (1/M) sum_m (x_m - mean_m)^2 / var_m,
 * which is the Gaussian's negative log-likelihood up to a constant and a
 * factor; a file's is the mean of its windows' (as the network's file
 * score). `ssae train` stores it in the model as two extra tensors
 * (SSAE_REFERENCE_MEAN, SSAE_REFERENCE_VAR; SPEC section 3 allows extra
 * tensors, and readers of the network's parameters ignore them), and
 * `ssae eval` reports its AUC next to the network's: when the network does
 * not beat it, the recordings' anomalies are a change of level or
 * spectral balance that needs no network to find. */
#ifndef SSAE_REFERENCE_H
#define SSAE_REFERENCE_H

#include <stddef.h>

#include "ssae_err.h"
#include "ssae_model.h"
#include "ssae_realtime.h"
#include "ssae_train.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SSAE_REFERENCE_MEAN "reference.mean"
#define SSAE_REFERENCE_VAR "reference.var"

/* A variance below this (dB^2) is raised to it: a band that never moves in
 * training (digital silence, a fixed floor) would otherwise make any
 * change in it infinitely unlikely. */
#define SSAE_REFERENCE_VAR_FLOOR 1e-2

typedef struct ssae_reference {
  int n_mels, frames;
  float *mean, *var; /* n_mels each */
} ssae_reference;

/* Fits the Gaussian on the windows (F = frames frames of n_mels values
 * each; ssae_train.h's window set). At least two windows. */
int ssae_reference_fit(const ssae_window_set *w, int n_mels, int frames, ssae_reference *r,
                       ssae_err *err);
void ssae_reference_release(ssae_reference *r);

/* Into the model as its two extra tensors, and back. _from_model returns 1
 * (r untouched) when the model has no reference, -1 with the reason when
 * its tensors are there but unusable (wrong length, a variance that is
 * not positive). */
int ssae_reference_to_model(const ssae_reference *r, ssae_model *m, ssae_err *err);
int ssae_reference_from_model(const ssae_model *m, ssae_reference *r, ssae_err *err);

/* The score of one window (frames * n_mels values, frame-major). */
SSAE_REALTIME double ssae_reference_window_score(const ssae_reference *r, const float *window);

/* The scores of every window of n_frames frames (n_frames - frames + 1
 * windows, written to scores when it is not NULL); returns their mean,
 * the file's reference score (NAN when there is no window). */
double ssae_reference_file_score(const ssae_reference *r, const float *frames, size_t n_frames,
                                 float *scores);

#ifdef __cplusplus
}
#endif
#endif
