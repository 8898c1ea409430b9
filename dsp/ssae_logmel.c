#include "ssae_logmel.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_logmel_batch.h"

struct ssae_logmel {
  /* Tables and the batch: frames are computed SSAE_LANES at a time
   * (ssae_logmel_batch.h); a batch's frames are read in place in the
   * caller's block or in hist, or gathered when they need padding or
   * straddle two blocks. */
  ssae_lmbatch b;
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
  ssae_lmbatch_release(&lm->b);
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
  if (ssae_lmbatch_init(&lm->b, cfg, err)) {
    ssae_logmel_free(lm);
    return NULL;
  }
  lm->cap = (size_t)cfg->n_fft + (cfg->n_fft > 8192 ? (size_t)cfg->n_fft : 8192);
  lm->hist = malloc(sizeof *lm->hist * lm->cap);
  if (!lm->hist) {
    ssae_err_set(err, "out of memory for the log-mel front end");
    ssae_logmel_free(lm);
    return NULL;
  }
  ssae_logmel_reset(lm);
  return lm;
}

void ssae_logmel_reset(ssae_logmel *lm) {
  if (!lm) return;
  lm->base = 0;
  lm->n_in = 0;
  lm->next_t = 0;
  lm->b.n = 0;
}

size_t ssae_logmel_max_frames(const ssae_logmel *lm, size_t n) {
  /* A call emits the frames whose last sample it brings, plus at most one
   * frame held back by the start reflection (process) or the frames that
   * wait for the end padding (flush: n = 0 gives that bound). */
  return (n + (size_t)lm->b.half) / (size_t)lm->b.hop + 2;
}

/* Sample j of the stream during a call that brought in[0..) as samples
 * from call_base on; older samples are in hist. */
static inline float sample_at(const ssae_logmel *lm, const float *in, uint64_t call_base,
                              int64_t j) {
  return (uint64_t)j >= call_base ? in[(uint64_t)j - call_base] : lm->hist[(uint64_t)j - lm->base];
}

/* Queues frame t, whose mel bands go to out. The stream has n samples so
 * far; `ended`: it is over, so samples past n are padding. A frame inside
 * the current block or in hist is read in place; the others are gathered.
 * The batch runs when full (and at the end of each call). */
static void emit_frame(ssae_logmel *lm, uint64_t t, const float *in, uint64_t call_base,
                       uint64_t n_total, int ended, float *out) {
  ssae_lmbatch *b = &lm->b;
  const int n_fft = b->n_fft;
  const int64_t start = ssae_lm_frame_start(b, t);
  const int64_t n = (int64_t)n_total;
  const float *src;
  if (start >= (int64_t)call_base && start + n_fft <= n) {
    src = in + ((uint64_t)start - call_base);
  } else if (start >= (int64_t)lm->base && start + n_fft <= (int64_t)call_base) {
    src = lm->hist + ((uint64_t)start - lm->base);
  } else if (in && start >= (int64_t)lm->base && start + n_fft <= n) {
    /* Straddles the end of hist and this block (a stream fed in small
     * blocks): two copies. */
    float *frame = ssae_lmbatch_gather(b);
    const size_t old = (size_t)((int64_t)call_base - start);
    memcpy(frame, lm->hist + ((uint64_t)start - lm->base), old * sizeof *frame);
    memcpy(frame + old, in, ((size_t)n_fft - old) * sizeof *frame);
    src = frame;
  } else {
    float *frame = ssae_lmbatch_gather(b);
    const int reflect = b->cfg.pad_mode == SSAE_PAD_REFLECT;
    for (int i = 0; i < n_fft; i++) {
      int64_t j = start + i;
      float v;
      if (j >= 0 && j < n) v = sample_at(lm, in, call_base, j);
      else if (!reflect) v = 0.0f;
      else if (!ended && j < 0) v = sample_at(lm, in, call_base, -j);
      else v = sample_at(lm, in, call_base, (int64_t)ssae_lm_reflect_index(j, n_total));
      frame[i] = v;
    }
    src = frame;
  }
  if (ssae_lmbatch_add(b, src, out)) ssae_lmbatch_run(b);
}

size_t ssae_logmel_process(ssae_logmel *lm, const float *in, size_t n, float *frames) {
  if (n == 0) return 0;
  const uint64_t call_base = lm->n_in, n_total = lm->n_in + n;
  const size_t n_mels = (size_t)lm->b.n_mels;
  size_t out = 0;
  while (ssae_lm_frame_ready(&lm->b, lm->next_t, n_total)) {
    emit_frame(lm, lm->next_t, in, call_base, n_total, 0, frames + out * n_mels);
    lm->next_t++;
    out++;
  }
  /* Before hist moves: the batch may read from it. */
  ssae_lmbatch_run(&lm->b);
  /* Keep the newest n_fft samples (all, while fewer): a frame not yet
   * emitted starts after n_total - n_fft, and the end reflection reaches
   * back n_fft/2 + 1. */
  const size_t keep = (size_t)lm->b.n_fft, used = (size_t)(lm->n_in - lm->base);
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

size_t ssae_logmel_flush(ssae_logmel *lm, float *frames) {
  size_t out = 0;
  const size_t n_mels = (size_t)lm->b.n_mels;
  uint64_t total = ssae_lm_total_frames(&lm->b, lm->n_in);
  for (; lm->next_t < total; lm->next_t++, out++)
    emit_frame(lm, lm->next_t, NULL, lm->n_in, lm->n_in, 1, frames + out * n_mels);
  ssae_lmbatch_run(&lm->b);
  ssae_logmel_reset(lm);
  return out;
}

/* ssae_logmel_cached keeps the front end of its last call, one per thread
 * (freed when the thread ends): a program that turns many files into
 * features or scores would otherwise set up the tables and touch fresh
 * memory (page faults) for every file, which costs as much as the frames of
 * a 10 s clip. */
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

ssae_logmel *ssae_logmel_cached(const ssae_feat_cfg *cfg, int *owned, ssae_err *err) {
  pthread_once(&cache_once, cache_init);
  ssae_logmel *lm = cache_ok ? pthread_getspecific(cache_key) : NULL;
  *owned = 0;
  if (lm && same_cfg(&lm->b.cfg, cfg)) {
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
  ssae_logmel *lm = ssae_logmel_cached(cfg, &owned, err);
  if (!lm) return -1;
  size_t total = (size_t)ssae_lm_total_frames(&lm->b, n);
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
