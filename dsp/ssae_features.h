/* Feature settings (SPEC section 1). Stored in every model file's metadata
 * and read back from it, so that a model is always fed the features it was
 * trained on. */
#ifndef SSAE_FEATURES_H
#define SSAE_FEATURES_H

#include <stddef.h>

#include "ssae_err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SSAE_PAD_REFLECT = 0, SSAE_PAD_CONSTANT = 1 } ssae_pad_mode;
typedef enum { SSAE_MEL_SLANEY = 0, SSAE_MEL_HTK = 1 } ssae_mel_scale;
typedef enum { SSAE_MELNORM_SLANEY = 0, SSAE_MELNORM_NONE = 1 } ssae_mel_norm;

typedef struct ssae_feat_cfg {
  int sample_rate;        /* 16000 */
  int n_fft;              /* 1024: frame length = FFT size */
  int hop_length;         /* 512 */
  int center;             /* 1: frame t centred on sample t*hop */
  ssae_pad_mode pad_mode; /* reflect */
  int n_mels;             /* 64 */
  double fmin;            /* 0 */
  double fmax;            /* 0 means sample_rate / 2 */
  ssae_mel_scale mel_scale;
  ssae_mel_norm mel_norm;
  double power;           /* 2.0 */
  int frames;             /* 5 frames per window */
} ssae_feat_cfg;

/* The SPEC defaults. */
void ssae_feat_cfg_default(ssae_feat_cfg *cfg);

/* Checks ranges and consistency; names the offending key. */
int ssae_feat_cfg_validate(const ssae_feat_cfg *cfg, ssae_err *err);

/* Metadata keys, in the order they are written: sample_rate, n_fft,
 * hop_length, window, center, pad_mode, n_mels, fmin, fmax, mel_scale,
 * mel_norm, power, log, frames. NULL-terminated. */
extern const char *const ssae_feat_keys[];

/* Sets one key from its metadata text. Returns 1 when the key is a feature
 * key and the value was accepted, 0 when the key is not a feature key, -1
 * (with a message naming key and value) when the value is bad. */
int ssae_feat_cfg_set(ssae_feat_cfg *cfg, const char *key, const char *value,
                      ssae_err *err);

/* Writes the metadata text of one key into buf. Returns 0, or -1 for an
 * unknown key. Numbers are the shortest text that reads back exactly; fmax
 * is written as its effective value (sample_rate/2 when 0); window is
 * "hann"; log is "10*log10(mel+2.220446049250313e-16)" (set also accepts the
 * SPEC's spelling and "10*log10(x+eps)"). */
int ssae_feat_cfg_get(const ssae_feat_cfg *cfg, const char *key, char *buf,
                      size_t len);

#ifdef __cplusplus
}
#endif
#endif
