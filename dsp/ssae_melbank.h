/* Mel filterbank (torchaudio.functional.melscale_fbanks, which matches
 * librosa.filters.mel): triangles on the Slaney or HTK mel scale over the
 * n_fft/2+1 FFT bins, Slaney area normalisation 2/(f[i+2]-f[i]) or none.
 * Stored sparse: each band keeps only its non-zero run of bins. */
#ifndef SSAE_MELBANK_H
#define SSAE_MELBANK_H

#include <stddef.h>

#include "ssae_err.h"
#include "ssae_features.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ssae_melbank {
  int n_mels, n_bins;
  int *start, *len; /* first bin and bin count of each band */
  size_t *off;      /* offset of each band's weights in w */
  double *w;
  int n_empty; /* bands narrower than an FFT bin: no weight, always at the
                  floor (torchaudio warns of them too) */
} ssae_melbank;

double ssae_hz_to_mel(double hz, ssae_mel_scale scale);
double ssae_mel_to_hz(double mel, ssae_mel_scale scale);

int ssae_melbank_init(ssae_melbank *b, const ssae_feat_cfg *cfg, ssae_err *err);
void ssae_melbank_release(ssae_melbank *b);

/* Dense weight of band m at bin k (0 outside the band). */
double ssae_melbank_weight(const ssae_melbank *b, int m, int k);

/* out[m] = 10*log10(sum_k w[m][k] * power[k] + eps). Audio-thread safe. */
void ssae_melbank_apply(const ssae_melbank *b, const double *power, float *out, double eps);

/* Mel bands narrower than one FFT bin under valid settings: they get no
 * weight and stay at the floor in every frame (too many bands for n_fft).
 * Returns their count (0: none) and, in *most (may be NULL), the largest
 * n_mels below the given one that has none; -1 with a message when the
 * filterbank cannot be made. */
int ssae_feat_cfg_empty_bands(const ssae_feat_cfg *cfg, int *most, ssae_err *err);

#ifdef __cplusplus
}
#endif
#endif
