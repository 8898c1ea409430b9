#include "ssae_logmel_multi.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_logmel_batch.h"

/* A channel's history is a ring of R samples (a power of two, at least
 * 4 n_fft) followed by a copy of its first n_fft samples: sample j is at
 * ring[j mod R], and when j mod R < n_fft also at ring[R + j mod R]. Every
 * frame in the ring is then one contiguous run that the FFT reads in place,
 * with no copy and no moving of the history (a history that moves, as the
 * single-stream one does, moves in every channel in the same period: a
 * spike on the audio thread). A feed writes at most R - n_fft samples
 * before its frames run (`chunk`): the frames it completes start after the
 * newest n_fft samples before it, so they are all still in the ring. */
typedef struct mchan {
  uint64_t n_in;   /* samples of the current stream */
  uint64_t next_t; /* its next frame */
  int queued;      /* its frames waiting in the batch */
} mchan;

struct ssae_logmel_multi {
  ssae_lmbatch b;
  int C;
  size_t R, chunk, stride;
  float *hist; /* channel c: hist + c * stride */
  mchan *ch;
  int q_chan[SSAE_LANES]; /* channel of each queued frame */
  float *out;             /* SSAE_LANES frames of n_mels */
  ssae_logmel_frame_fn fn;
  void *user;
};

void ssae_logmel_multi_free(ssae_logmel_multi *mm) {
  if (!mm) return;
  ssae_lmbatch_release(&mm->b);
  free(mm->hist);
  free(mm->ch);
  free(mm->out);
  free(mm);
}

ssae_logmel_multi *ssae_logmel_multi_new(const ssae_feat_cfg *cfg, int channels,
                                         ssae_logmel_frame_fn fn, void *user,
                                         ssae_err *err) {
  if (ssae_feat_cfg_validate(cfg, err)) return NULL;
  if (channels < 1 || channels > (1 << 20) || !fn) {
    ssae_err_set(err, "multi-channel front end: %d channels%s", channels,
                 fn ? " is not 1 .. 2^20" : " and no frame callback");
    return NULL;
  }
  ssae_logmel_multi *mm = calloc(1, sizeof *mm);
  if (!mm) {
    ssae_err_set(err, "out of memory for the multi-channel front end");
    return NULL;
  }
  if (ssae_lmbatch_init(&mm->b, cfg, err)) {
    ssae_logmel_multi_free(mm);
    return NULL;
  }
  mm->C = channels;
  mm->fn = fn;
  mm->user = user;
  size_t R = 64;
  while (R < 4 * (size_t)cfg->n_fft) R *= 2;
  mm->R = R;
  mm->chunk = R - (size_t)cfg->n_fft;
  /* 64 bytes more than the ring and its copy: channels read at the same
   * offset in the same period, and rows of a multiple of 4 KB would put
   * those reads in the same cache sets. */
  mm->stride = (R + (size_t)cfg->n_fft + 15) / 16 * 16 + 16;
  const size_t bytes = sizeof(float) * mm->stride * (size_t)channels;
  mm->hist = aligned_alloc(64, bytes);
  mm->ch = calloc((size_t)channels, sizeof *mm->ch);
  mm->out = malloc(sizeof *mm->out * SSAE_LANES * (size_t)cfg->n_mels);
  if (!mm->hist || !mm->ch || !mm->out) {
    ssae_err_set(err, "out of memory for the multi-channel front end (%d channels)", channels);
    ssae_logmel_multi_free(mm);
    return NULL;
  }
  memset(mm->hist, 0, bytes);
  memset(mm->out, 0, sizeof *mm->out * SSAE_LANES * (size_t)cfg->n_mels);
  return mm;
}

int ssae_logmel_multi_channels(const ssae_logmel_multi *mm) { return mm->C; }

void ssae_logmel_multi_run(ssae_logmel_multi *mm) {
  const int n = mm->b.n;
  if (n == 0) return;
  ssae_lmbatch_run(&mm->b);
  const size_t M = (size_t)mm->b.n_mels;
  for (int l = 0; l < n; l++) mm->ch[mm->q_chan[l]].queued = 0;
  for (int l = 0; l < n; l++) mm->fn(mm->user, mm->q_chan[l], mm->out + (size_t)l * M);
}

/* Queues frame t of channel c, whose stream has n_total samples; `ended`:
 * the stream is over, samples past n_total are padding. Frames inside the
 * stream are read in place in the ring; the others (padding) gathered. */
static void queue_frame(ssae_logmel_multi *mm, int c, uint64_t t, uint64_t n_total, int ended) {
  ssae_lmbatch *b = &mm->b;
  const float *ring = mm->hist + (size_t)c * mm->stride;
  const uint64_t mask = mm->R - 1;
  const int n_fft = b->n_fft;
  const int64_t start = ssae_lm_frame_start(b, t), n = (int64_t)n_total;
  const float *src;
  if (start >= 0 && start + n_fft <= n) {
    src = ring + ((uint64_t)start & mask);
  } else {
    float *frame = ssae_lmbatch_gather(b);
    const int reflect = b->cfg.pad_mode == SSAE_PAD_REFLECT;
    for (int i = 0; i < n_fft; i++) {
      int64_t j = start + i;
      float v;
      if (j >= 0 && j < n) v = ring[(uint64_t)j & mask];
      else if (!reflect) v = 0.0f;
      else if (!ended && j < 0) v = ring[(uint64_t)-j & mask];
      else v = ring[ssae_lm_reflect_index(j, n_total) & mask];
      frame[i] = v;
    }
    src = frame;
  }
  mm->q_chan[b->n] = c;
  mm->ch[c].queued++;
  if (ssae_lmbatch_add(b, src, mm->out + (size_t)b->n * (size_t)b->n_mels))
    ssae_logmel_multi_run(mm);
}

/* Samples pos .. pos+n of a stream into its ring (n <= R). */
static void ring_write(float *ring, size_t R, size_t n_fft, uint64_t pos, const float *x,
                       size_t n) {
  while (n) {
    const size_t p = (size_t)(pos & (R - 1)), len = R - p < n ? R - p : n;
    memcpy(ring + p, x, len * sizeof *x);
    if (p < n_fft) memcpy(ring + R + p, x, (n_fft - p < len ? n_fft - p : len) * sizeof *x);
    pos += len;
    x += len;
    n -= len;
  }
}

size_t ssae_logmel_multi_feed(ssae_logmel_multi *mm, int c, const float *in, size_t n) {
  mchan *s = &mm->ch[c];
  float *ring = mm->hist + (size_t)c * mm->stride;
  size_t out = 0;
  while (n) {
    const size_t len = n < mm->chunk ? n : mm->chunk;
    /* Its queued frames read the part of the ring about to be written. */
    if (s->queued) ssae_logmel_multi_run(mm);
    ring_write(ring, mm->R, (size_t)mm->b.n_fft, s->n_in, in, len);
    const uint64_t n_total = s->n_in + len;
    for (; ssae_lm_frame_ready(&mm->b, s->next_t, n_total); s->next_t++, out++)
      queue_frame(mm, c, s->next_t, n_total, 0);
    s->n_in = n_total;
    in += len;
    n -= len;
  }
  return out;
}

size_t ssae_logmel_multi_flush(ssae_logmel_multi *mm, int c) {
  mchan *s = &mm->ch[c];
  size_t out = 0;
  const uint64_t total = ssae_lm_total_frames(&mm->b, s->n_in);
  for (; s->next_t < total; s->next_t++, out++) queue_frame(mm, c, s->next_t, s->n_in, 1);
  ssae_logmel_multi_reset(mm, c);
  return out;
}

void ssae_logmel_multi_reset(ssae_logmel_multi *mm, int c) {
  mm->ch[c].n_in = 0;
  mm->ch[c].next_t = 0;
}
