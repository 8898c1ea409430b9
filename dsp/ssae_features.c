#include "ssae_features.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The log formula is fixed (SPEC section 1); the text names it so that a
 * model file says what its features are. */
#define SSAE_LOG_TEXT "10*log10(mel+2.220446049250313e-16)"

const char *const ssae_feat_keys[] = {
    "sample_rate", "n_fft",     "hop_length", "window",   "center",
    "pad_mode",    "n_mels",    "fmin",       "fmax",     "mel_scale",
    "mel_norm",    "power",     "log",        "frames",   NULL};

void ssae_feat_cfg_default(ssae_feat_cfg *cfg) {
  cfg->sample_rate = 16000;
  cfg->n_fft = 1024;
  cfg->hop_length = 512;
  cfg->center = 1;
  cfg->pad_mode = SSAE_PAD_REFLECT;
  cfg->n_mels = 64;
  cfg->fmin = 0.0;
  cfg->fmax = 0.0;
  cfg->mel_scale = SSAE_MEL_SLANEY;
  cfg->mel_norm = SSAE_MELNORM_SLANEY;
  cfg->power = 2.0;
  cfg->frames = 5;
}

int ssae_feat_cfg_validate(const ssae_feat_cfg *cfg, ssae_err *err) {
  if (!cfg) return ssae_err_set(err, "no feature settings");
  if (cfg->sample_rate < 1000 || cfg->sample_rate > 768000)
    return ssae_err_set(err, "sample_rate %d is out of range (1000 to 768000)", cfg->sample_rate);
  /* kiss_fftr needs an even size; centring pads n_fft/2 on each side. */
  if (cfg->n_fft < 16 || cfg->n_fft > 65536 || cfg->n_fft % 2)
    return ssae_err_set(err, "n_fft %d must be even and from 16 to 65536", cfg->n_fft);
  if (cfg->hop_length < 1 || cfg->hop_length > cfg->n_fft)
    return ssae_err_set(err, "hop_length %d must be from 1 to n_fft (%d)", cfg->hop_length,
                        cfg->n_fft);
  if (cfg->center != 0 && cfg->center != 1)
    return ssae_err_set(err, "center must be true or false");
  if (cfg->pad_mode != SSAE_PAD_REFLECT && cfg->pad_mode != SSAE_PAD_CONSTANT)
    return ssae_err_set(err, "pad_mode must be reflect or constant");
  if (cfg->n_mels < 1 || cfg->n_mels > 4096)
    return ssae_err_set(err, "n_mels %d is out of range (1 to 4096)", cfg->n_mels);
  double nyq = cfg->sample_rate / 2.0;
  double fmax = cfg->fmax > 0 ? cfg->fmax : nyq;
  if (!isfinite(cfg->fmin) || cfg->fmin < 0 || cfg->fmin >= nyq)
    return ssae_err_set(err, "fmin %g must be from 0 to below sample_rate/2 (%g)", cfg->fmin, nyq);
  if (!isfinite(cfg->fmax) || cfg->fmax < 0 || fmax > nyq || fmax <= cfg->fmin)
    return ssae_err_set(err, "fmax %g must be above fmin (%g) and at most sample_rate/2 (%g)",
                        cfg->fmax, cfg->fmin, nyq);
  if (cfg->mel_scale != SSAE_MEL_SLANEY && cfg->mel_scale != SSAE_MEL_HTK)
    return ssae_err_set(err, "mel_scale must be slaney or htk");
  if (cfg->mel_norm != SSAE_MELNORM_SLANEY && cfg->mel_norm != SSAE_MELNORM_NONE)
    return ssae_err_set(err, "mel_norm must be slaney or none");
  if (!isfinite(cfg->power) || cfg->power <= 0 || cfg->power > 4)
    return ssae_err_set(err, "power %g must be above 0 and at most 4", cfg->power);
  if (cfg->frames < 1 || cfg->frames > 256)
    return ssae_err_set(err, "frames %d is out of range (1 to 256)", cfg->frames);
  return 0;
}

static int parse_long(const char *key, const char *v, long min, long max, int *out,
                      ssae_err *err) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || end == v || *end || x < min || x > max)
    return ssae_err_set(err, "feature setting %s: '%s' is not a whole number from %ld to %ld",
                        key, v, min, max);
  *out = (int)x;
  return 1;
}

static int parse_double(const char *key, const char *v, double *out, ssae_err *err) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || *end || !isfinite(x))
    return ssae_err_set(err, "feature setting %s: '%s' is not a number", key, v);
  *out = x;
  return 1;
}

static int parse_bool(const char *v, int *out) {
  if (!strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "1")) *out = 1;
  else if (!strcmp(v, "false") || !strcmp(v, "False") || !strcmp(v, "0")) *out = 0;
  else return -1;
  return 0;
}

/* Spaces do not matter in the log formula text; "eps" stands for the
 * float64 machine epsilon. */
static int log_text_ok(const char *v) {
  static const char *const ok[] = {SSAE_LOG_TEXT, "10*log10(x+2.220446049250313e-16)",
                                   "10log10(mel+2.220446049250313e-16)",
                                   "10log10(x+2.220446049250313e-16)",
                                   "10*log10(mel+eps)", "10*log10(x+eps)", "10log10(x+eps)",
                                   "10log10(mel+eps)", NULL};
  char s[128];
  size_t n = 0;
  for (const char *p = v; *p && n < sizeof s - 1; p++)
    if (*p != ' ' && *p != '\t' && *p != '\xc2' && *p != '\xb7') s[n++] = *p;
  s[n] = '\0';
  for (int i = 0; ok[i]; i++)
    if (!strcmp(s, ok[i])) return 1;
  return 0;
}

int ssae_feat_cfg_set(ssae_feat_cfg *cfg, const char *key, const char *value, ssae_err *err) {
  if (!key || !value) return ssae_err_set(err, "feature setting without key or value");
  if (!strcmp(key, "sample_rate"))
    return parse_long(key, value, 1000, 768000, &cfg->sample_rate, err);
  if (!strcmp(key, "n_fft")) return parse_long(key, value, 16, 65536, &cfg->n_fft, err);
  if (!strcmp(key, "hop_length")) return parse_long(key, value, 1, 65536, &cfg->hop_length, err);
  if (!strcmp(key, "n_mels")) return parse_long(key, value, 1, 4096, &cfg->n_mels, err);
  if (!strcmp(key, "frames")) return parse_long(key, value, 1, 256, &cfg->frames, err);
  if (!strcmp(key, "fmin")) return parse_double(key, value, &cfg->fmin, err);
  if (!strcmp(key, "fmax")) return parse_double(key, value, &cfg->fmax, err);
  if (!strcmp(key, "power")) return parse_double(key, value, &cfg->power, err);
  if (!strcmp(key, "window")) {
    if (!strcmp(value, "hann") || !strcmp(value, "hann (periodic)") ||
        !strcmp(value, "hann_periodic"))
      return 1;
    return ssae_err_set(err, "feature setting window: '%s' is not supported (only hann)", value);
  }
  if (!strcmp(key, "center")) {
    if (parse_bool(value, &cfg->center))
      return ssae_err_set(err, "feature setting center: '%s' is not true or false", value);
    return 1;
  }
  if (!strcmp(key, "pad_mode")) {
    if (!strcmp(value, "reflect")) cfg->pad_mode = SSAE_PAD_REFLECT;
    else if (!strcmp(value, "constant")) cfg->pad_mode = SSAE_PAD_CONSTANT;
    else
      return ssae_err_set(err, "feature setting pad_mode: '%s' is not reflect or constant", value);
    return 1;
  }
  if (!strcmp(key, "mel_scale")) {
    if (!strcmp(value, "slaney")) cfg->mel_scale = SSAE_MEL_SLANEY;
    else if (!strcmp(value, "htk")) cfg->mel_scale = SSAE_MEL_HTK;
    else return ssae_err_set(err, "feature setting mel_scale: '%s' is not slaney or htk", value);
    return 1;
  }
  if (!strcmp(key, "mel_norm")) {
    if (!strcmp(value, "slaney")) cfg->mel_norm = SSAE_MELNORM_SLANEY;
    else if (!strcmp(value, "none") || !strcmp(value, "None")) cfg->mel_norm = SSAE_MELNORM_NONE;
    else return ssae_err_set(err, "feature setting mel_norm: '%s' is not slaney or none", value);
    return 1;
  }
  if (!strcmp(key, "log")) {
    if (log_text_ok(value)) return 1;
    return ssae_err_set(err, "feature setting log: '%s' is not supported (only %s)", value,
                        SSAE_LOG_TEXT);
  }
  return 0;
}

/* Shortest text that reads back to the same double. */
static void put_double(char *buf, size_t len, double v) {
  for (int prec = 6; prec <= 17; prec++) {
    snprintf(buf, len, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) return;
  }
}

int ssae_feat_cfg_get(const ssae_feat_cfg *cfg, const char *key, char *buf, size_t len) {
  if (!key || !buf || !len) return -1;
  if (!strcmp(key, "sample_rate")) snprintf(buf, len, "%d", cfg->sample_rate);
  else if (!strcmp(key, "n_fft")) snprintf(buf, len, "%d", cfg->n_fft);
  else if (!strcmp(key, "hop_length")) snprintf(buf, len, "%d", cfg->hop_length);
  else if (!strcmp(key, "window")) snprintf(buf, len, "hann");
  else if (!strcmp(key, "center")) snprintf(buf, len, "%s", cfg->center ? "true" : "false");
  else if (!strcmp(key, "pad_mode"))
    snprintf(buf, len, "%s", cfg->pad_mode == SSAE_PAD_CONSTANT ? "constant" : "reflect");
  else if (!strcmp(key, "n_mels")) snprintf(buf, len, "%d", cfg->n_mels);
  else if (!strcmp(key, "fmin")) put_double(buf, len, cfg->fmin);
  /* The effective value, so that a reader needs no convention for 0. */
  else if (!strcmp(key, "fmax"))
    put_double(buf, len, cfg->fmax > 0 ? cfg->fmax : cfg->sample_rate / 2.0);
  else if (!strcmp(key, "mel_scale"))
    snprintf(buf, len, "%s", cfg->mel_scale == SSAE_MEL_HTK ? "htk" : "slaney");
  else if (!strcmp(key, "mel_norm"))
    snprintf(buf, len, "%s", cfg->mel_norm == SSAE_MELNORM_NONE ? "none" : "slaney");
  else if (!strcmp(key, "power")) put_double(buf, len, cfg->power);
  else if (!strcmp(key, "log")) snprintf(buf, len, "%s", SSAE_LOG_TEXT);
  else if (!strcmp(key, "frames")) snprintf(buf, len, "%d", cfg->frames);
  else return -1;
  return 0;
}
