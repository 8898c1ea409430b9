#include "ssae_logmel.h"

#include <kiss_fftr.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_fft.h"
#include "ssae_lanes.h"
#include "ssae_melbank.h"

/* float64 machine epsilon: the floor of the dB scale (SPEC section 1). */
#define SSAE_LOG_EPS 2.220446049250313e-16

struct ssae_logmel {
  ssae_feat_cfg cfg;
  int n_fft, hop, half, n_bins, n_mels;
  /* Power-of-two sizes (the default 1024) take the double FFT; other even
   * sizes take kiss_fftr in float (see ssae_fft.h). */
  ssae_rfft *dfft;
  kiss_fftr_cfg fft;
  double *win;       /* periodic Hann, n_fft */
  float *fframe;     /* windowed frame for kiss_fftr */
  kiss_fft_cpx *spec;
  ssae_melbank bank;
  /* Frames are computed SSAE_LANES at a time (ssae_lanes.h): a batch holds
   * each frame's samples (in place in the caller's block or in hist, or
   * gathered into `gather` when it needs padding or straddles two blocks)
   * and where its mel bands go. */
  const float *src[SSAE_LANES];
  float *dst[SSAE_LANES];
  int n_batch;
  float *gather;     /* SSAE_LANES frames of n_fft */
  ssae_v8d *power;   /* n_bins vectors: bin k of the batch's frames */
  double *mel;       /* n_mels: a single frame's band sums */
  /* The last samples of the stream: hist[i] is sample base + i. Frames
   * inside a block are read from the caller's block in place; hist keeps the
   * newest n_fft samples for the frames that straddle blocks and for the
   * end padding. The room beyond n_fft (at least 8192) keeps small blocks
   * from moving it often. */
  float *hist;
  size_t cap;
  uint64_t base, n_in, next_t;
};

void ssae_logmel_free(ssae_logmel *lm) {
  if (!lm) return;
  ssae_rfft_free(lm->dfft);
  kiss_fftr_free(lm->fft);
  free(lm->win);
  free(lm->fframe);
  free(lm->spec);
  free(lm->gather);
  free(lm->power);
  free(lm->mel);
  ssae_melbank_release(&lm->bank);
  free(lm->hist);
  free(lm);
}

ssae_logmel *ssae_logmel_new(const ssae_feat_cfg *cfg, ssae_err *err) {
  if (ssae_feat_cfg_validate(cfg, err)) return NULL;
  ssae_logmel *lm = calloc(1, sizeof *lm);
  if (!lm) {
    ssae_err_set(err, "out of memory for the log-mel front end");
    return NULL;
  }
  lm->cfg = *cfg;
  lm->n_fft = cfg->n_fft;
  lm->hop = cfg->hop_length;
  lm->half = cfg->n_fft / 2;
  lm->n_bins = cfg->n_fft / 2 + 1;
  lm->n_mels = cfg->n_mels;
  lm->cap = (size_t)cfg->n_fft + (cfg->n_fft > 8192 ? (size_t)cfg->n_fft : 8192);
  const int pow2 = (cfg->n_fft & (cfg->n_fft - 1)) == 0;
  if (pow2 && !(lm->dfft = ssae_rfft_new(cfg->n_fft, err))) {
    ssae_logmel_free(lm);
    return NULL;
  }
  if (!pow2) {
    lm->fft = kiss_fftr_alloc(cfg->n_fft, 0, NULL, NULL);
    lm->fframe = malloc(sizeof *lm->fframe * (size_t)lm->n_fft);
    lm->spec = malloc(sizeof *lm->spec * (size_t)lm->n_bins);
  }
  lm->win = malloc(sizeof *lm->win * (size_t)lm->n_fft);
  lm->gather = malloc(sizeof *lm->gather * SSAE_LANES * (size_t)lm->n_fft);
  lm->power = aligned_alloc(64, sizeof *lm->power * (size_t)lm->n_bins);
  lm->mel = malloc(sizeof *lm->mel * (size_t)lm->n_mels);
  lm->hist = malloc(sizeof *lm->hist * lm->cap);
  if ((!pow2 && (!lm->fft || !lm->fframe || !lm->spec)) || !lm->win || !lm->gather ||
      !lm->power || !lm->mel || !lm->hist) {
    ssae_err_set(err, "out of memory for the log-mel front end");
    ssae_logmel_free(lm);
    return NULL;
  }
  if (ssae_melbank_init(&lm->bank, cfg, err)) {
    ssae_logmel_free(lm);
    return NULL;
  }
  /* cos(2 pi i/N) = cos(2 pi (N-i)/N): half the libm calls, or none with
   * the FFT's table (set-up time counts for short offline files). */
  for (int i = 0; i <= lm->half; i++) {
    double c = lm->dfft ? ssae_rfft_cos(lm->dfft, i) : cos(2.0 * M_PI * i / lm->n_fft);
    lm->win[i] = 0.5 - 0.5 * c;
    if (i > 0 && i < lm->half) lm->win[lm->n_fft - i] = lm->win[i];
  }
  /* kiss_fftr fills only the lanes of its frames. */
  memset(lm->power, 0, sizeof *lm->power * (size_t)lm->n_bins);
  ssae_logmel_reset(lm);
  return lm;
}

void ssae_logmel_reset(ssae_logmel *lm) {
  if (!lm) return;
  lm->base = 0;
  lm->n_in = 0;
  lm->next_t = 0;
  lm->n_batch = 0;
}

size_t ssae_logmel_max_frames(const ssae_logmel *lm, size_t n) {
  /* A call emits the frames whose last sample it brings, plus at most one
   * frame held back by the start reflection (process) or the frames that
   * wait for the end padding (flush: n = 0 gives that bound). */
  return (n + (size_t)lm->half) / (size_t)lm->hop + 2;
}

/* numpy's 'reflect' (no edge repeat), repeated for signals shorter than the
 * padding; torchaudio refuses those, librosa (numpy) reflects again. */
static uint64_t reflect_index(int64_t j, uint64_t n) {
  if (n == 1) return 0;
  int64_t period = 2 * (int64_t)(n - 1);
  int64_t m = j % period;
  if (m < 0) m += period;
  if (m >= (int64_t)n) m = period - m;
  return (uint64_t)m;
}

/* Sample j of the stream during a call that brought in[0..) as samples
 * from call_base on; older samples are in hist. */
static inline float sample_at(const ssae_logmel *lm, const float *in, uint64_t call_base,
                              int64_t j) {
  return (uint64_t)j >= call_base ? in[(uint64_t)j - call_base] : lm->hist[(uint64_t)j - lm->base];
}

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

/* power != 2: |X|^p from |X|^2. */
static void apply_power(double *p, size_t n, double pw) {
  if (pw != 2.0)
    for (size_t i = 0; i < n; i++) p[i] = pw == 1.0 ? sqrt(p[i]) : pow(p[i], 0.5 * pw);
}

/* The batch's power spectra (lm->power) to dB mel bands, for its first
 * n_batch frames. */
SSAE_LANES_CLONES
static void mel_db_lanes(ssae_logmel *lm) {
  const ssae_melbank *b = &lm->bank;
  apply_power((double *)lm->power, (size_t)lm->n_bins * SSAE_LANES, lm->cfg.power);
  const int n = lm->n_batch;
  for (int m = 0; m < b->n_mels; m++) {
    ssae_v8d s;
    mel_sum_8(b, lm->power, m, &s);
    ln_8(&s);
    s *= DB_PER_LN;
    for (int l = 0; l < n; l++) lm->dst[l][m] = (float)s[l];
  }
}

/* The same for a batch of one frame, whose power spectrum is n_bins
 * doubles at lm->power. */
SSAE_LANES_CLONES
static void mel_db_one(ssae_logmel *lm) {
  const ssae_melbank *b = &lm->bank;
  const int n_mels = b->n_mels;
  double *p = (double *)lm->power, *restrict s = lm->mel;
  float *restrict out = lm->dst[0];
  apply_power(p, (size_t)lm->n_bins, lm->cfg.power);
  /* All sums first, then all logarithms: a loop the compiler vectorises
   * (across bands: the same operations on each). */
  for (int m = 0; m < n_mels; m++) mel_sum_1(b, p, m, &s[m]);
  for (int m = 0; m < n_mels; m++) {
    double v = s[m];
    ln_1(&v);
    out[m] = (float)(v * DB_PER_LN);
  }
}

static void run_batch(ssae_logmel *lm) {
  const int n = lm->n_batch;
  if (n == 0) return;
  /* A stream fed in small blocks completes one frame at a time: eight
   * lanes of work for it would cost several times the one-frame kernel, and
   * touch eight times the memory. */
  if (n == 1 && lm->dfft) {
    ssae_rfft_power1(lm->dfft, lm->src[0], lm->win, (double *)lm->power);
    mel_db_one(lm);
    lm->n_batch = 0;
    return;
  }
  if (lm->dfft) {
    for (int l = n; l < SSAE_LANES; l++) lm->src[l] = lm->src[0];
    ssae_rfft_power(lm->dfft, lm->src, lm->win, lm->power);
  } else {
    double *pw = (double *)lm->power;
    for (int l = 0; l < n; l++) {
      for (int i = 0; i < lm->n_fft; i++) lm->fframe[i] = (float)(lm->src[l][i] * lm->win[i]);
      kiss_fftr(lm->fft, lm->fframe, lm->spec);
      for (int k = 0; k < lm->n_bins; k++) {
        double re = lm->spec[k].r, im = lm->spec[k].i;
        pw[(size_t)k * SSAE_LANES + (size_t)l] = re * re + im * im;
      }
    }
  }
  mel_db_lanes(lm);
  lm->n_batch = 0;
}

/* Queues frame t, whose mel bands go to out. The stream has n samples so
 * far; `ended`: it is over, so samples past n are padding. A frame inside
 * the current block or in hist is read in place; the others are gathered.
 * The batch runs when full (and at the end of each call: run_batch). */
static void emit_frame(ssae_logmel *lm, uint64_t t, const float *in, uint64_t call_base,
                       uint64_t n_total, int ended, float *out) {
  const int n_fft = lm->n_fft;
  const int64_t start = (int64_t)(t * (uint64_t)lm->hop) - (lm->cfg.center ? lm->half : 0);
  const int64_t n = (int64_t)n_total;
  const float *src;
  if (start >= (int64_t)call_base && start + n_fft <= n) {
    src = in + ((uint64_t)start - call_base);
  } else if (start >= (int64_t)lm->base && start + n_fft <= (int64_t)call_base) {
    src = lm->hist + ((uint64_t)start - lm->base);
  } else if (in && start >= (int64_t)lm->base && start + n_fft <= n) {
    /* Straddles the end of hist and this block (a stream fed in small
     * blocks): two copies. */
    float *frame = lm->gather + (size_t)lm->n_batch * (size_t)n_fft;
    const size_t old = (size_t)((int64_t)call_base - start);
    memcpy(frame, lm->hist + ((uint64_t)start - lm->base), old * sizeof *frame);
    memcpy(frame + old, in, ((size_t)n_fft - old) * sizeof *frame);
    src = frame;
  } else {
    float *frame = lm->gather + (size_t)lm->n_batch * (size_t)n_fft;
    const int reflect = lm->cfg.pad_mode == SSAE_PAD_REFLECT;
    for (int i = 0; i < n_fft; i++) {
      int64_t j = start + i;
      float v;
      if (j >= 0 && j < n) v = sample_at(lm, in, call_base, j);
      else if (!reflect) v = 0.0f;
      else if (!ended && j < 0) v = sample_at(lm, in, call_base, -j);
      else v = sample_at(lm, in, call_base, (int64_t)reflect_index(j, n_total));
      frame[i] = v;
    }
    src = frame;
  }
  lm->src[lm->n_batch] = src;
  lm->dst[lm->n_batch] = out;
  if (++lm->n_batch == SSAE_LANES) run_batch(lm);
}

static int frame_ready(const ssae_logmel *lm, uint64_t t, uint64_t n_total) {
  uint64_t reach = t * (uint64_t)lm->hop + (uint64_t)(lm->cfg.center ? lm->half : lm->n_fft);
  if (reach > n_total) return 0;
  /* The start reflection of a centred frame reads samples 1..n_fft/2. */
  if (lm->cfg.center && lm->cfg.pad_mode == SSAE_PAD_REFLECT &&
      t * (uint64_t)lm->hop < (uint64_t)lm->half && n_total <= (uint64_t)lm->half)
    return 0;
  return 1;
}

size_t ssae_logmel_process(ssae_logmel *lm, const float *in, size_t n, float *frames) {
  if (n == 0) return 0;
  const uint64_t call_base = lm->n_in, n_total = lm->n_in + n;
  size_t out = 0;
  while (frame_ready(lm, lm->next_t, n_total)) {
    emit_frame(lm, lm->next_t, in, call_base, n_total, 0, frames + out * (size_t)lm->n_mels);
    lm->next_t++;
    out++;
  }
  /* Before hist moves: the batch may read from it. */
  run_batch(lm);
  /* Keep the newest n_fft samples (all, while fewer): a frame not yet
   * emitted starts after n_total - n_fft, and the end reflection reaches
   * back n_fft/2 + 1. */
  const size_t keep = (size_t)lm->n_fft, used = (size_t)(lm->n_in - lm->base);
  if (n >= keep) {
    memcpy(lm->hist, in + (n - keep), keep * sizeof *in);
    lm->base = n_total - keep;
  } else if (used + n <= lm->cap) {
    memcpy(lm->hist + used, in, n * sizeof *in);
  } else {
    size_t old = keep - n;
    memmove(lm->hist, lm->hist + (used - old), old * sizeof *lm->hist);
    memcpy(lm->hist + old, in, n * sizeof *in);
    lm->base = n_total - keep;
  }
  lm->n_in = n_total;
  return out;
}

/* Frames of a stream of n samples (torch.stft's count). */
static uint64_t total_frames(const ssae_logmel *lm, uint64_t n) {
  if (lm->cfg.center) return n ? 1 + n / (uint64_t)lm->hop : 0;
  return n >= (uint64_t)lm->n_fft ? 1 + (n - (uint64_t)lm->n_fft) / (uint64_t)lm->hop : 0;
}

size_t ssae_logmel_flush(ssae_logmel *lm, float *frames) {
  size_t out = 0;
  uint64_t total = total_frames(lm, lm->n_in);
  for (; lm->next_t < total; lm->next_t++, out++)
    emit_frame(lm, lm->next_t, NULL, lm->n_in, lm->n_in, 1, frames + out * (size_t)lm->n_mels);
  run_batch(lm);
  ssae_logmel_reset(lm);
  return out;
}

/* ssae_logmel_compute keeps the front end of its last call, one per
 * thread (freed when the thread ends): a program that turns many files into
 * features would otherwise set up the tables and touch fresh memory (page
 * faults) for every file, which costs as much as the frames of a 10 s clip. */
static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static int cache_ok;

static void cache_release(void *lm) { ssae_logmel_free(lm); }
static void cache_init(void) { cache_ok = pthread_key_create(&cache_key, cache_release) == 0; }

#if defined(__GNUC__)
/* When the library is unloaded (a plugin host's dlclose) the key must go
 * with it, or a thread ending later would call cache_release in unmapped
 * code. The calling thread's front end is freed; other live threads' are
 * left behind. */
__attribute__((destructor)) static void cache_unload(void) {
  if (!cache_ok) return;
  cache_release(pthread_getspecific(cache_key));
  pthread_setspecific(cache_key, NULL);
  pthread_key_delete(cache_key);
  cache_ok = 0;
}
#endif

static int same_cfg(const ssae_feat_cfg *a, const ssae_feat_cfg *b) {
  return a->sample_rate == b->sample_rate && a->n_fft == b->n_fft &&
         a->hop_length == b->hop_length && a->center == b->center &&
         a->pad_mode == b->pad_mode && a->n_mels == b->n_mels && a->fmin == b->fmin &&
         a->fmax == b->fmax && a->mel_scale == b->mel_scale && a->mel_norm == b->mel_norm &&
         a->power == b->power && a->frames == b->frames;
}

/* The thread's front end for cfg, reset; *owned: the caller frees it (no
 * thread-specific storage). */
static ssae_logmel *cached_front_end(const ssae_feat_cfg *cfg, int *owned, ssae_err *err) {
  pthread_once(&cache_once, cache_init);
  ssae_logmel *lm = cache_ok ? pthread_getspecific(cache_key) : NULL;
  *owned = 0;
  if (lm && same_cfg(&lm->cfg, cfg)) {
    ssae_logmel_reset(lm);
    return lm;
  }
  if (lm) {
    pthread_setspecific(cache_key, NULL);
    ssae_logmel_free(lm);
  }
  if (!(lm = ssae_logmel_new(cfg, err))) return NULL;
  if (!cache_ok || pthread_setspecific(cache_key, lm)) *owned = 1;
  return lm;
}

int ssae_logmel_compute(const ssae_feat_cfg *cfg, const float *x, size_t n, float **out,
                        size_t *n_frames, ssae_err *err) {
  *out = NULL;
  *n_frames = 0;
  int owned;
  ssae_logmel *lm = cached_front_end(cfg, &owned, err);
  if (!lm) return -1;
  size_t total = (size_t)total_frames(lm, n);
  if (total == 0) {
    if (owned) ssae_logmel_free(lm);
    return 0;
  }
  float *f = malloc(sizeof *f * total * (size_t)cfg->n_mels);
  if (!f) {
    if (owned) ssae_logmel_free(lm);
    return ssae_err_set(err, "out of memory for %zu log-mel frames", total);
  }
  /* Blocks keep the bound of ssae_logmel_max_frames inside the array even
   * for the frames that process holds back. */
  size_t got = 0;
  const size_t block = 1 << 16;
  for (size_t i = 0; i < n; i += block) {
    size_t len = n - i < block ? n - i : block;
    got += ssae_logmel_process(lm, x + i, len, f + got * (size_t)cfg->n_mels);
  }
  got += ssae_logmel_flush(lm, f + got * (size_t)cfg->n_mels);
  if (owned) ssae_logmel_free(lm);
  if (got != total) {
    free(f);
    return ssae_err_set(err, "internal error: %zu log-mel frames instead of %zu", got, total);
  }
  *out = f;
  *n_frames = total;
  return 0;
}

struct ssae_window {
  int n_mels, frames, count;
  float *buf;
};

ssae_window *ssae_window_new(int n_mels, int frames, ssae_err *err) {
  if (n_mels < 1 || frames < 1) {
    ssae_err_set(err, "window of %d frames of %d mel bands is not possible", frames, n_mels);
    return NULL;
  }
  ssae_window *w = calloc(1, sizeof *w);
  if (w) w->buf = malloc(sizeof *w->buf * (size_t)n_mels * (size_t)frames);
  if (!w || !w->buf) {
    ssae_window_free(w);
    ssae_err_set(err, "out of memory for a feature window");
    return NULL;
  }
  w->n_mels = n_mels;
  w->frames = frames;
  return w;
}

void ssae_window_free(ssae_window *w) {
  if (!w) return;
  free(w->buf);
  free(w);
}

int ssae_window_push(ssae_window *w, const float *frame, float *out) {
  size_t m = (size_t)w->n_mels;
  if (w->count < w->frames) {
    memcpy(w->buf + (size_t)w->count * m, frame, m * sizeof *frame);
    w->count++;
  } else {
    memmove(w->buf, w->buf + m, (size_t)(w->frames - 1) * m * sizeof *w->buf);
    memcpy(w->buf + (size_t)(w->frames - 1) * m, frame, m * sizeof *frame);
  }
  if (w->count < w->frames) return 0;
  memcpy(out, w->buf, (size_t)w->frames * m * sizeof *out);
  return 1;
}

void ssae_window_reset(ssae_window *w) {
  if (w) w->count = 0;
}

int ssae_windows_from_frames(const float *frames, size_t n_frames, int n_mels,
                             int frames_per_window, float **out, size_t *n_windows,
                             ssae_err *err) {
  *out = NULL;
  *n_windows = 0;
  if (n_mels < 1 || frames_per_window < 1)
    return ssae_err_set(err, "window of %d frames of %d mel bands is not possible",
                        frames_per_window, n_mels);
  if (n_frames < (size_t)frames_per_window) return 0;
  size_t nw = n_frames - (size_t)frames_per_window + 1;
  size_t len = (size_t)n_mels * (size_t)frames_per_window;
  float *w = malloc(sizeof *w * nw * len);
  if (!w) return ssae_err_set(err, "out of memory for %zu feature windows", nw);
  /* Frames are frame-major, so window t is one contiguous run. */
  for (size_t t = 0; t < nw; t++)
    memcpy(w + t * len, frames + t * (size_t)n_mels, len * sizeof *w);
  *out = w;
  *n_windows = nw;
  return 0;
}
