#include "ssae_reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void ssae_reference_release(ssae_reference *r) {
  if (!r) return;
  free(r->mean);
  free(r->var);
  memset(r, 0, sizeof *r);
}

/* The mean over frames of one window, per band. */
static void window_mean(const float *w, int n_mels, int frames, double *x) {
  for (int m = 0; m < n_mels; m++) x[m] = 0;
  for (int f = 0; f < frames; f++)
    for (int m = 0; m < n_mels; m++) x[m] += w[(size_t)f * (size_t)n_mels + (size_t)m];
  for (int m = 0; m < n_mels; m++) x[m] /= frames;
}

int ssae_reference_fit(const ssae_window_set *w, int n_mels, int frames, ssae_reference *r,
                       ssae_err *err) {
  memset(r, 0, sizeof *r);
  if (n_mels < 1 || frames < 1) return ssae_err_set(err, "reference: bad dimensions");
  if (w->n < 2) return ssae_err_set(err, "reference: %zu training windows, 2 at least", w->n);
  const size_t M = (size_t)n_mels, FM = (size_t)frames * M;
  double *x = malloc(M * sizeof *x), *mu = calloc(M, sizeof *mu), *m2 = calloc(M, sizeof *m2);
  r->mean = malloc(M * sizeof *r->mean);
  r->var = malloc(M * sizeof *r->var);
  if (!x || !mu || !m2 || !r->mean || !r->var) {
    free(x), free(mu), free(m2);
    ssae_reference_release(r);
    return ssae_err_set(err, "reference: out of memory");
  }
  /* Welford's update: one pass, no loss of precision on large sets. */
  for (size_t i = 0; i < w->n; i++) {
    window_mean(w->data + (w->off ? w->off[i] : i * FM), n_mels, frames, x);
    for (size_t m = 0; m < M; m++) {
      double d = x[m] - mu[m];
      mu[m] += d / (double)(i + 1);
      m2[m] += d * (x[m] - mu[m]);
    }
  }
  int bad = 0;
  for (size_t m = 0; m < M; m++) {
    double v = m2[m] / (double)(w->n - 1);
    if (!isfinite(mu[m]) || !isfinite(v)) bad = 1;
    r->mean[m] = (float)mu[m];
    r->var[m] = (float)(v < SSAE_REFERENCE_VAR_FLOOR ? SSAE_REFERENCE_VAR_FLOOR : v);
  }
  free(x), free(mu), free(m2);
  if (bad) {
    ssae_reference_release(r);
    return ssae_err_set(err, "reference: the training windows hold non-finite values");
  }
  r->n_mels = n_mels;
  r->frames = frames;
  return 0;
}

int ssae_reference_to_model(const ssae_reference *r, ssae_model *m, ssae_err *err) {
  if (r->n_mels != m->d.n_mels || r->frames != m->d.frames)
    return ssae_err_set(err, "reference: %d bands of %d frames, the model has %d of %d",
                        r->n_mels, r->frames, m->d.n_mels, m->d.frames);
  uint64_t shape[2] = {(uint64_t)r->n_mels, 0};
  if (ssae_model_extra_set(m, SSAE_REFERENCE_MEAN, 1, shape, r->mean, err) ||
      ssae_model_extra_set(m, SSAE_REFERENCE_VAR, 1, shape, r->var, err))
    return -1;
  return 0;
}

int ssae_reference_from_model(const ssae_model *m, ssae_reference *r, ssae_err *err) {
  const ssae_model_extra *mu = ssae_model_extra_get(m, SSAE_REFERENCE_MEAN),
                         *var = ssae_model_extra_get(m, SSAE_REFERENCE_VAR);
  if (!mu && !var) return 1;
  const size_t M = (size_t)m->d.n_mels;
  if (!mu || !var)
    return ssae_err_set(err, "the model has %s but not %s", mu ? mu->name : var->name,
                        mu ? SSAE_REFERENCE_VAR : SSAE_REFERENCE_MEAN);
  if (mu->ndim != 1 || var->ndim != 1 || mu->shape[0] != M || var->shape[0] != M)
    return ssae_err_set(err, "the model's reference tensors are not %zu values each (one "
                             "per mel band)", M);
  for (size_t k = 0; k < M; k++)
    if (!isfinite(mu->data[k]) || !(var->data[k] > 0) || !isfinite(var->data[k]))
      return ssae_err_set(err, "the model's reference: band %zu has mean %g, variance %g", k,
                          mu->data[k], var->data[k]);
  memset(r, 0, sizeof *r);
  r->mean = malloc(M * sizeof *r->mean);
  r->var = malloc(M * sizeof *r->var);
  if (!r->mean || !r->var) {
    ssae_reference_release(r);
    return ssae_err_set(err, "reference: out of memory");
  }
  memcpy(r->mean, mu->data, M * sizeof *r->mean);
  memcpy(r->var, var->data, M * sizeof *r->var);
  r->n_mels = m->d.n_mels;
  r->frames = m->d.frames;
  return 0;
}

double ssae_reference_window_score(const ssae_reference *r, const float *window) {
  const size_t M = (size_t)r->n_mels;
  double s = 0;
  for (size_t m = 0; m < M; m++) {
    double x = 0;
    for (int f = 0; f < r->frames; f++) x += window[(size_t)f * M + m];
    double d = x / r->frames - r->mean[m];
    s += d * d / r->var[m];
  }
  return s / (double)M;
}

double ssae_reference_file_score(const ssae_reference *r, const float *frames, size_t n_frames,
                                 float *scores) {
  if (n_frames < (size_t)r->frames) return NAN;
  size_t nw = n_frames - (size_t)r->frames + 1;
  double sum = 0;
  for (size_t w = 0; w < nw; w++) {
    double s = ssae_reference_window_score(r, frames + w * (size_t)r->n_mels);
    if (scores) scores[w] = (float)s;
    sum += s;
  }
  return sum / (double)nw;
}
