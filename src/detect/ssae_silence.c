#include "ssae_silence.h"

void ssae_window_samples(const ssae_feat_cfg *f, uint64_t w, uint64_t *first, uint64_t *end) {
  const uint64_t hop = (uint64_t)f->hop_length;
  /* A centred frame t covers t * hop - n_fft / 2 .. t * hop + n_fft / 2;
   * an uncentred one t * hop .. t * hop + n_fft. */
  const uint64_t tail = f->center ? (uint64_t)f->n_fft / 2 : (uint64_t)f->n_fft;
  const uint64_t span = (uint64_t)(f->frames - 1) * hop + (f->center ? 2 * tail : tail);
  const uint64_t e = (w + (uint64_t)f->frames - 1) * hop + tail;
  *end = e;
  *first = e > span ? e - span : 0;
}

double ssae_window_time(const ssae_feat_cfg *f, uint64_t w) {
  uint64_t first, end;
  ssae_window_samples(f, w, &first, &end);
  return (double)end / f->sample_rate;
}

void ssae_silence_reset(ssae_silence *s) {
  s->zrun = 0;
  s->next = 0;
  s->n = 0;
}

/* Sample p is a qualifying zero: onto the newest span or a new one. */
static void add_zero(ssae_silence *s, uint64_t p) {
  if (s->n && s->end[s->n - 1] == p) {
    s->end[s->n - 1] = p + 1;
    return;
  }
  if (s->n == SSAE_SILENCE_SPANS) {
    /* Full: the two oldest become one. */
    s->end[0] = s->end[1];
    for (int i = 1; i + 1 < SSAE_SILENCE_SPANS; i++) {
      s->start[i] = s->start[i + 1];
      s->end[i] = s->end[i + 1];
    }
    s->n--;
  }
  s->start[s->n] = p;
  s->end[s->n] = p + 1;
  s->n++;
}

void ssae_silence_scan(ssae_silence *s, uint64_t pos, const float *x, size_t n) {
  if (!n) return;
  /* A gap in the positions (analysis paused) ends the run. */
  if (pos != s->next) s->zrun = 0;
  s->next = pos + n;
  /* Real signals have no exact zeros: a block without any (checked without
   * branches, so it vectorises) only ends the current run. */
  int any = 0;
  for (size_t i = 0; i < n; i++) any |= x[i] == 0.0f;
  if (!any) {
    s->zrun = 0;
    return;
  }
  uint64_t z = s->zrun;
  for (size_t i = 0; i < n; i++) {
    if (x[i] != 0.0f) {
      z = 0;
    } else if (++z >= SSAE_SILENCE_MIN_ZEROS) {
      add_zero(s, pos + i);
    }
  }
  s->zrun = z;
}

void ssae_silence_scan_nonzero(ssae_silence *s, uint64_t pos, size_t n) {
  if (!n) return;
  s->next = pos + n;
  s->zrun = 0;
}

int ssae_silence_touches(const ssae_silence *s, uint64_t first, uint64_t end) {
  for (int i = s->n - 1; i >= 0; i--) {
    if (s->end[i] <= first) return 0; /* older spans end earlier still */
    if (s->start[i] < end) return 1;
  }
  return 0;
}

void ssae_silence_flag_windows(const ssae_silence *s, const ssae_feat_cfg *f, uint64_t w0,
                               size_t n, unsigned char *silent) {
  for (size_t k = 0; k < n; k++) {
    uint64_t first, end;
    ssae_window_samples(f, w0 + k, &first, &end);
    silent[k] = (unsigned char)ssae_silence_touches(s, first, end);
  }
}

void ssae_silence_windows(const ssae_feat_cfg *f, const float *x, size_t n, size_t n_windows,
                          unsigned char *silent) {
  ssae_silence s;
  ssae_silence_reset(&s);
  uint64_t scanned = 0;
  for (size_t w = 0; w < n_windows; w++) {
    uint64_t first, end;
    ssae_window_samples(f, w, &first, &end);
    uint64_t to = end < n ? end : n;
    if (to > scanned) {
      ssae_silence_scan(&s, scanned, x + scanned, (size_t)(to - scanned));
      scanned = to;
    }
    ssae_silence_flag_windows(&s, f, w, 1, silent + w);
  }
}
