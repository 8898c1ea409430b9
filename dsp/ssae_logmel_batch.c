#include "ssae_logmel_batch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* float64 machine epsilon: the floor of the dB scale (SPEC section 1). */
#define SSAE_LOG_EPS 2.220446049250313e-16
/* 10/ln(10): 10*log10(x) = DB_PER_LN * ln(x). */
#define DB_PER_LN 4.3429448190325182
#define INLINE static inline __attribute__((always_inline))

#define KV ssae_v8d
#define KI ssae_v8l
#define MASK(c) (c)
#define K(name) name##_8
#include "ssae_logmel_kernel.h"
#undef KV
#undef KI
#undef MASK
#undef K
#define KV double
#define KI long long
#define MASK(c) (-(long long)(c))
#define K(name) name##_1
#include "ssae_logmel_kernel.h"
#undef KV
#undef KI
#undef MASK
#undef K

void ssae_lmbatch_release(ssae_lmbatch *b) {
  ssae_rfft_free(b->dfft);
  kiss_fftr_free(b->fft);
  free(b->win);
  free(b->fframe);
  free(b->spec);
  free(b->gather);
  free(b->power);
  free(b->mel);
  ssae_melbank_release(&b->bank);
  memset(b, 0, sizeof *b);
}

int ssae_lmbatch_init(ssae_lmbatch *b, const ssae_feat_cfg *cfg, ssae_err *err) {
  memset(b, 0, sizeof *b);
  b->cfg = *cfg;
  b->n_fft = cfg->n_fft;
  b->hop = cfg->hop_length;
  b->half = cfg->n_fft / 2;
  b->n_bins = cfg->n_fft / 2 + 1;
  b->n_mels = cfg->n_mels;
  const int pow2 = (cfg->n_fft & (cfg->n_fft - 1)) == 0;
  if (pow2 && !(b->dfft = ssae_rfft_new(cfg->n_fft, err))) return -1;
  if (!pow2) {
    b->fft = kiss_fftr_alloc(cfg->n_fft, 0, NULL, NULL);
    b->fframe = malloc(sizeof *b->fframe * (size_t)b->n_fft);
    b->spec = malloc(sizeof *b->spec * (size_t)b->n_bins);
  }
  b->win = malloc(sizeof *b->win * (size_t)b->n_fft);
  b->gather = malloc(sizeof *b->gather * SSAE_LANES * (size_t)b->n_fft);
  b->power = aligned_alloc(64, sizeof *b->power * (size_t)b->n_bins);
  b->mel = malloc(sizeof *b->mel * (size_t)b->n_mels);
  if ((!pow2 && (!b->fft || !b->fframe || !b->spec)) || !b->win || !b->gather || !b->power ||
      !b->mel)
    return ssae_err_set(err, "out of memory for the log-mel front end");
  if (ssae_melbank_init(&b->bank, cfg, err)) return -1;
  /* cos(2 pi i/N) = cos(2 pi (N-i)/N): half the libm calls, or none with
   * the FFT's table (set-up time counts for short offline files). */
  for (int i = 0; i <= b->half; i++) {
    double c = b->dfft ? ssae_rfft_cos(b->dfft, i) : cos(2.0 * M_PI * i / b->n_fft);
    b->win[i] = 0.5 - 0.5 * c;
    if (i > 0 && i < b->half) b->win[b->n_fft - i] = b->win[i];
  }
  /* kiss_fftr fills only the lanes of its frames. */
  memset(b->power, 0, sizeof *b->power * (size_t)b->n_bins);
  return 0;
}

/* power != 2: |X|^p from |X|^2. */
static void apply_power(double *p, size_t n, double pw) {
  if (pw != 2.0)
    for (size_t i = 0; i < n; i++) p[i] = pw == 1.0 ? sqrt(p[i]) : pow(p[i], 0.5 * pw);
}

/* The batch's power spectra (b->power) to dB mel bands, for its first
 * b->n frames. */
SSAE_LANES_CLONES
static void mel_db_lanes(ssae_lmbatch *b) {
  const ssae_melbank *bank = &b->bank;
  apply_power((double *)b->power, (size_t)b->n_bins * SSAE_LANES, b->cfg.power);
  const int n = b->n;
  for (int m = 0; m < bank->n_mels; m++) {
    ssae_v8d s;
    mel_sum_8(bank, b->power, m, &s);
    ln_8(&s);
    s *= DB_PER_LN;
    for (int l = 0; l < n; l++) b->dst[l][m] = (float)s[l];
  }
}

/* The same for a batch of one frame, whose power spectrum is n_bins
 * doubles at b->power. */
SSAE_LANES_CLONES
static void mel_db_one(ssae_lmbatch *b) {
  const ssae_melbank *bank = &b->bank;
  const int n_mels = bank->n_mels;
  double *p = (double *)b->power, *restrict s = b->mel;
  float *restrict out = b->dst[0];
  apply_power(p, (size_t)b->n_bins, b->cfg.power);
  /* All sums first, then all logarithms: a loop the compiler vectorises
   * (across bands: the same operations on each). */
  for (int m = 0; m < n_mels; m++) mel_sum_1(bank, p, m, &s[m]);
  for (int m = 0; m < n_mels; m++) {
    double v = s[m];
    ln_1(&v);
    out[m] = (float)(v * DB_PER_LN);
  }
}

void ssae_lmbatch_run(ssae_lmbatch *b) {
  const int n = b->n;
  if (n == 0) return;
  /* A stream fed in small blocks completes one frame at a time: eight
   * lanes of work for it would cost several times the one-frame kernel, and
   * touch eight times the memory. */
  if (n == 1 && b->dfft) {
    ssae_rfft_power1(b->dfft, b->src[0], b->win, (double *)b->power);
    mel_db_one(b);
    b->n = 0;
    return;
  }
  if (b->dfft) {
    for (int l = n; l < SSAE_LANES; l++) b->src[l] = b->src[0];
    ssae_rfft_power(b->dfft, b->src, b->win, b->power);
  } else {
    double *pw = (double *)b->power;
    for (int l = 0; l < n; l++) {
      for (int i = 0; i < b->n_fft; i++) b->fframe[i] = (float)(b->src[l][i] * b->win[i]);
      kiss_fftr(b->fft, b->fframe, b->spec);
      for (int k = 0; k < b->n_bins; k++) {
        double re = b->spec[k].r, im = b->spec[k].i;
        pw[(size_t)k * SSAE_LANES + (size_t)l] = re * re + im * im;
      }
    }
  }
  mel_db_lanes(b);
  b->n = 0;
}

/* numpy's 'reflect' (no edge repeat), repeated for signals shorter than the
 * padding; torchaudio refuses those, librosa (numpy) reflects again. */
uint64_t ssae_lm_reflect_index(int64_t j, uint64_t n) {
  if (n == 1) return 0;
  int64_t period = 2 * (int64_t)(n - 1);
  int64_t m = j % period;
  if (m < 0) m += period;
  if (m >= (int64_t)n) m = period - m;
  return (uint64_t)m;
}

int ssae_lm_frame_ready(const ssae_lmbatch *b, uint64_t t, uint64_t n_total) {
  uint64_t reach = t * (uint64_t)b->hop + (uint64_t)(b->cfg.center ? b->half : b->n_fft);
  if (reach > n_total) return 0;
  /* The start reflection of a centred frame reads samples 1..n_fft/2. */
  if (b->cfg.center && b->cfg.pad_mode == SSAE_PAD_REFLECT &&
      t * (uint64_t)b->hop < (uint64_t)b->half && n_total <= (uint64_t)b->half)
    return 0;
  return 1;
}

uint64_t ssae_lm_total_frames(const ssae_lmbatch *b, uint64_t n) {
  if (b->cfg.center) return n ? 1 + n / (uint64_t)b->hop : 0;
  return n >= (uint64_t)b->n_fft ? 1 + (n - (uint64_t)b->n_fft) / (uint64_t)b->hop : 0;
}
