#include "ssae_melbank.h"

#include <math.h>
#include <stdlib.h>

/* Slaney: linear (200/3 Hz per mel) below 1 kHz, logarithmic above. */
#define SLANEY_F_SP (200.0 / 3.0)
#define SLANEY_MIN_LOG_HZ 1000.0
#define SLANEY_MIN_LOG_MEL 15.0

static double slaney_logstep(void) { return log(6.4) / 27.0; }

double ssae_hz_to_mel(double hz, ssae_mel_scale scale) {
  if (scale == SSAE_MEL_HTK) return 2595.0 * log10(1.0 + hz / 700.0);
  if (hz < SLANEY_MIN_LOG_HZ) return hz / SLANEY_F_SP;
  return SLANEY_MIN_LOG_MEL + log(hz / SLANEY_MIN_LOG_HZ) / slaney_logstep();
}

double ssae_mel_to_hz(double mel, ssae_mel_scale scale) {
  if (scale == SSAE_MEL_HTK) return 700.0 * (pow(10.0, mel / 2595.0) - 1.0);
  if (mel < SLANEY_MIN_LOG_MEL) return mel * SLANEY_F_SP;
  return SLANEY_MIN_LOG_HZ * exp(slaney_logstep() * (mel - SLANEY_MIN_LOG_MEL));
}

void ssae_melbank_release(ssae_melbank *b) {
  if (!b) return;
  free(b->start);
  free(b->len);
  free(b->off);
  free(b->w);
  b->start = b->len = NULL;
  b->off = NULL;
  b->w = NULL;
}

/* The bins that can have weight in a band from lo to hi Hz. */
static void bin_range(double lo, double hi, double top, int n_bins, int *k0, int *k1) {
  *k0 = (int)floor(lo / top * (n_bins - 1)) - 1;
  *k1 = (int)ceil(hi / top * (n_bins - 1)) + 1;
  if (*k0 < 0) *k0 = 0;
  if (*k1 > n_bins - 1) *k1 = n_bins - 1;
}

int ssae_melbank_init(ssae_melbank *b, const ssae_feat_cfg *cfg, ssae_err *err) {
  const int n_mels = cfg->n_mels, n_bins = cfg->n_fft / 2 + 1;
  b->n_mels = n_mels;
  b->n_bins = n_bins;
  b->n_empty = 0;
  b->w = NULL;
  b->start = calloc((size_t)n_mels, sizeof *b->start);
  b->len = calloc((size_t)n_mels, sizeof *b->len);
  b->off = calloc((size_t)n_mels + 1, sizeof *b->off);
  double *f_pts = malloc(sizeof *f_pts * (size_t)(n_mels + 2));
  if (!b->start || !b->len || !b->off || !f_pts) {
    free(f_pts);
    ssae_melbank_release(b);
    return ssae_err_set(err, "out of memory for the mel filterbank");
  }
  const double fmax = cfg->fmax > 0 ? cfg->fmax : cfg->sample_rate / 2.0;
  const double m_min = ssae_hz_to_mel(cfg->fmin, cfg->mel_scale);
  const double m_max = ssae_hz_to_mel(fmax, cfg->mel_scale);
  for (int i = 0; i < n_mels + 2; i++)
    f_pts[i] = ssae_mel_to_hz(m_min + (m_max - m_min) * i / (n_mels + 1), cfg->mel_scale);
  /* torchaudio spaces the bins over [0, sample_rate // 2]. */
  const double top = (double)(cfg->sample_rate / 2);
  /* Only the bins near [lo, hi] can have weight (one bin of slack for
   * rounding): their count bounds the room for the weights (a dense
   * n_mels x n_bins table would be mostly zeros, and large enough to be
   * mapped afresh for every front end). */
  size_t room = 0;
  for (int m = 0; m < n_mels; m++) {
    int k0, k1;
    bin_range(f_pts[m], f_pts[m + 2], top, n_bins, &k0, &k1);
    room += (size_t)(k1 >= k0 ? k1 - k0 + 1 : 0) + 1; /* + 1: an empty band's zero */
  }
  b->w = malloc(sizeof *b->w * room);
  if (!b->w) {
    free(f_pts);
    ssae_melbank_release(b);
    return ssae_err_set(err, "out of memory for the mel filterbank");
  }
  /* The triangles in a loop of their own, which the compiler vectorises
   * (divisions are most of the set-up time of a front end). */
  double *v = malloc(sizeof *v * (size_t)n_bins);
  if (!v) {
    free(f_pts);
    ssae_melbank_release(b);
    return ssae_err_set(err, "out of memory for the mel filterbank");
  }
  size_t off = 0;
  for (int m = 0; m < n_mels; m++) {
    const double lo = f_pts[m], mid = f_pts[m + 1], hi = f_pts[m + 2];
    const double norm = cfg->mel_norm == SSAE_MELNORM_SLANEY ? 2.0 / (hi - lo) : 1.0;
    int k0, k1, first = -1, last = -1;
    bin_range(lo, hi, top, n_bins, &k0, &k1);
    for (int k = k0; k <= k1; k++) {
      double f = top * k / (n_bins - 1);
      double down = (f - lo) / (mid - lo), up = (hi - f) / (hi - mid);
      v[k] = down < up ? down : up;
    }
    for (int k = k0; k <= k1; k++)
      if (v[k] > 0) {
        if (first < 0) first = k;
        last = k;
      }
    /* A band narrower than a bin has no weights and stays at the floor,
     * as in torchaudio: one zero weight at bin 0. */
    if (first < 0) first = last = 0, v[0] = 0.0, b->n_empty++;
    b->start[m] = first;
    b->len[m] = last - first + 1;
    b->off[m] = off;
    for (int k = first; k <= last; k++) b->w[off++] = v[k] > 0 ? v[k] * norm : 0.0;
  }
  free(v);
  b->off[n_mels] = off;
  free(f_pts);
  return 0;
}

double ssae_melbank_weight(const ssae_melbank *b, int m, int k) {
  if (m < 0 || m >= b->n_mels || k < b->start[m] || k >= b->start[m] + b->len[m]) return 0.0;
  return b->w[b->off[m] + (size_t)(k - b->start[m])];
}

void ssae_melbank_apply(const ssae_melbank *b, const double *power, float *out, double eps) {
  for (int m = 0; m < b->n_mels; m++) {
    const double *w = b->w + b->off[m];
    const double *p = power + b->start[m];
    double s = 0.0;
    for (int k = 0; k < b->len[m]; k++) s += w[k] * p[k];
    /* 10*log10(x) as (10/ln 10)*ln(x): one libm call instead of two. */
    out[m] = (float)(4.3429448190325182 * log(s + eps));
  }
}

static int empty_bands(const ssae_feat_cfg *cfg, ssae_err *err) {
  ssae_melbank b;
  if (ssae_melbank_init(&b, cfg, err)) return -1;
  const int n = b.n_empty;
  ssae_melbank_release(&b);
  return n;
}

int ssae_feat_cfg_empty_bands(const ssae_feat_cfg *cfg, int *most, ssae_err *err) {
  const int n = empty_bands(cfg, err);
  if (most) *most = cfg->n_mels;
  if (n <= 0 || !most) return n;
  /* Fewer bands are wider: the largest count without an empty one, by
   * bisection (a dozen filterbanks at most). */
  ssae_feat_cfg c = *cfg;
  int lo = 1, hi = cfg->n_mels - 1;
  *most = 0;
  while (lo <= hi) {
    c.n_mels = lo + (hi - lo) / 2;
    const int e = empty_bands(&c, err);
    if (e < 0) return -1;
    if (e == 0) *most = c.n_mels, lo = c.n_mels + 1;
    else hi = c.n_mels - 1;
  }
  return n;
}
