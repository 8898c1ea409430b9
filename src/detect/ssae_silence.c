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

void ssae_silence_scan(ssae_silence *s, uint64_t pos, const float *x, size_t n) {
  /* Real signals have no exact zeros: a block without any (checked without
   * branches, so it vectorises) only ends the current run. */
  int any = 0;
  for (size_t i = 0; i < n; i++) any |= x[i] == 0.0f;
  if (!any) {
    if (n) s->zrun = 0;
    return;
  }
  uint64_t z = s->zrun;
  for (size_t i = 0; i < n; i++) {
    if (x[i] == 0.0f) {
      if (++z >= SSAE_SILENCE_MIN_ZEROS) s->gap_end = pos + i + 1;
    } else {
      z = 0;
    }
  }
  s->zrun = z;
}

void ssae_silence_windows(const ssae_feat_cfg *f, const float *x, size_t n, size_t n_windows,
                          unsigned char *silent) {
  ssae_silence s = {0, 0};
  uint64_t scanned = 0;
  for (size_t w = 0; w < n_windows; w++) {
    uint64_t first, end;
    ssae_window_samples(f, w, &first, &end);
    if (end > n) end = n;
    if (end > scanned) {
      ssae_silence_scan(&s, scanned, x + scanned, (size_t)(end - scanned));
      scanned = end;
    }
    silent[w] = (unsigned char)ssae_silence_since(&s, first);
  }
}
