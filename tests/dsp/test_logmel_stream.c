/* Streaming log-mel: blocks of random sizes (1 ... 8192) give frames
 * bit-identical to one whole-signal pass, for both pad modes, short
 * streams, resets; windows match ssae_windows_from_frames; settings text
 * round-trips. Process, flush and reset allocate nothing (the test is
 * linked with --wrap for malloc, calloc and realloc, which counts every
 * call made from the library). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_features.h"
#include "ssae_logmel.h"
#define SSAE_TEST_COUNT_ALLOCS
#include "../ssae_test.h"

/* Feeds x in random blocks; returns the frame count. */
static size_t stream(ssae_logmel *lm, const float *x, size_t n, size_t max_block, float *out,
                     int n_mels) {
  size_t got = 0, i = 0;
  float *tmp = malloc(sizeof *tmp * ssae_logmel_max_frames(lm, max_block) * (size_t)n_mels);
  while (i < n) {
    size_t b = 1 + (size_t)(rnd() % max_block);
    if (b > n - i) b = n - i;
    size_t k = ssae_logmel_process(lm, x + i, b, tmp);
    CHECK(k <= ssae_logmel_max_frames(lm, b), "process gave %zu frames for %zu samples", k, b);
    memcpy(out + got * (size_t)n_mels, tmp, k * (size_t)n_mels * sizeof *tmp);
    got += k;
    i += b;
  }
  size_t k = ssae_logmel_flush(lm, tmp);
  CHECK(k <= ssae_logmel_max_frames(lm, 0), "flush gave %zu frames", k);
  memcpy(out + got * (size_t)n_mels, tmp, k * (size_t)n_mels * sizeof *tmp);
  free(tmp);
  return got + k;
}

static void check_stream(ssae_feat_cfg *cfg, const float *x, size_t n, const char *what) {
  ssae_err err = {{0}};
  float *ref;
  size_t nref;
  if (ssae_logmel_compute(cfg, x, n, &ref, &nref, &err)) {
    CHECK(0, "%s: compute: %s", what, err.msg);
    return;
  }
  size_t expect = cfg->center ? (n ? 1 + n / (size_t)cfg->hop_length : 0)
                              : (n >= (size_t)cfg->n_fft
                                     ? 1 + (n - (size_t)cfg->n_fft) / (size_t)cfg->hop_length
                                     : 0);
  CHECK(nref == expect, "%s: %zu frames, expected %zu", what, nref, expect);
  ssae_logmel *lm = ssae_logmel_new(cfg, &err);
  CHECK(lm != NULL, "%s: new: %s", what, err.msg);
  if (!lm) return;
  float *out = malloc(sizeof *out * (nref + 8) * (size_t)cfg->n_mels);
  const size_t blocks[] = {1, 7, 512, 1000, 8192};
  for (int r = 0; r < 5; r++) {
    size_t before = n_allocs;
    size_t got = stream(lm, x, n, blocks[r], out, cfg->n_mels);
    /* stream() itself allocates its one scratch buffer. */
    CHECK(n_allocs - before == 1, "%s: %zu allocations while streaming", what,
          n_allocs - before - 1);
    CHECK(got == nref, "%s: max block %zu: %zu frames, whole pass %zu", what, blocks[r], got, nref);
    if (got == nref && nref)
      CHECK(!memcmp(out, ref, nref * (size_t)cfg->n_mels * sizeof *out),
            "%s: max block %zu: frames differ from the whole pass", what, blocks[r]);
    for (size_t i = 0; i < got * (size_t)cfg->n_mels; i++)
      if (!isfinite(out[i])) {
        CHECK(0, "%s: non-finite value", what);
        break;
      }
  }
  /* A reset in the middle of a stream forgets it. */
  float *tmp = malloc(sizeof *tmp * ssae_logmel_max_frames(lm, n) * (size_t)cfg->n_mels);
  ssae_logmel_process(lm, x, n / 2, tmp);
  ssae_logmel_reset(lm);
  size_t got = stream(lm, x, n, 4096, out, cfg->n_mels);
  CHECK(got == nref && (!nref || !memcmp(out, ref, nref * (size_t)cfg->n_mels * sizeof *out)),
        "%s: frames after a reset differ", what);
  free(tmp);
  free(out);
  free(ref);
  ssae_logmel_free(lm);
}

static void check_windows(void) {
  ssae_err err = {{0}};
  const int M = 64, F = 5;
  size_t T = 40;
  float *frames = malloc(sizeof *frames * T * (size_t)M);
  for (size_t i = 0; i < T * (size_t)M; i++) frames[i] = (float)i;
  float *wins;
  size_t nw;
  CHECK(!ssae_windows_from_frames(frames, T, M, F, &wins, &nw, &err), "windows: %s", err.msg);
  CHECK(nw == T - F + 1, "windows: %zu, expected %zu", nw, T - F + 1);
  ssae_window *w = ssae_window_new(M, F, &err);
  float *one = malloc(sizeof *one * (size_t)(M * F));
  size_t t = 0;
  for (size_t f = 0; f < T; f++)
    if (ssae_window_push(w, frames + f * (size_t)M, one)) {
      /* SPEC: x[n_mels*k + m] = logmel[t+k][m]. */
      for (int k = 0; k < F; k++)
        for (int m = 0; m < M; m++)
          if (one[M * k + m] != frames[(t + (size_t)k) * (size_t)M + (size_t)m]) {
            CHECK(0, "window %zu element (%d,%d) wrong", t, k, m);
            k = F;
            break;
          }
      CHECK(!memcmp(one, wins + t * (size_t)(M * F), sizeof *one * (size_t)(M * F)),
            "pushed window %zu differs from ssae_windows_from_frames", t);
      t++;
    }
  CHECK(t == nw, "pushed %zu windows, expected %zu", t, nw);
  ssae_window_reset(w);
  CHECK(!ssae_window_push(w, frames, one), "window after reset came too early");
  float *none;
  size_t nn;
  CHECK(!ssae_windows_from_frames(frames, 4, M, F, &none, &nn, &err) && nn == 0 && !none,
        "4 frames gave windows");
  ssae_window_free(w);
  free(one);
  free(wins);
  free(frames);
}

static void check_cfg_text(void) {
  ssae_feat_cfg a, b;
  ssae_err err = {{0}};
  ssae_feat_cfg_default(&a);
  a.pad_mode = SSAE_PAD_CONSTANT;
  a.mel_scale = SSAE_MEL_HTK;
  a.mel_norm = SSAE_MELNORM_NONE;
  a.fmin = 20.5;
  a.fmax = 7000.1;
  a.power = 1.0;
  a.n_mels = 128;
  a.frames = 7;
  a.center = 0;
  ssae_feat_cfg_default(&b);
  for (int i = 0; ssae_feat_keys[i]; i++) {
    char buf[128];
    CHECK(!ssae_feat_cfg_get(&a, ssae_feat_keys[i], buf, sizeof buf), "get %s", ssae_feat_keys[i]);
    CHECK(ssae_feat_cfg_set(&b, ssae_feat_keys[i], buf, &err) == 1, "set %s=%s: %s",
          ssae_feat_keys[i], buf, err.msg);
  }
  CHECK(a.sample_rate == b.sample_rate && a.n_fft == b.n_fft && a.hop_length == b.hop_length &&
            a.center == b.center && a.pad_mode == b.pad_mode && a.n_mels == b.n_mels &&
            a.fmin == b.fmin && a.fmax == b.fmax && a.mel_scale == b.mel_scale &&
            a.mel_norm == b.mel_norm && a.power == b.power && a.frames == b.frames,
        "settings do not round-trip through their text");
  CHECK(ssae_feat_cfg_set(&b, "threshold", "1", &err) == 0, "non-feature key accepted");
  CHECK(ssae_feat_cfg_set(&b, "window", "hamming", &err) == -1 && strstr(err.msg, "window"),
        "window hamming accepted");
  CHECK(ssae_feat_cfg_set(&b, "n_fft", "10x", &err) == -1 && strstr(err.msg, "n_fft"),
        "bad n_fft accepted");
  CHECK(ssae_feat_cfg_set(&b, "log", "10\xc2\xb7log10(mel + 2.220446049250313e-16)", &err) == 1,
        "SPEC log text refused");
  ssae_feat_cfg_default(&b);
  b.n_fft = 1023;
  CHECK(ssae_feat_cfg_validate(&b, &err) && strstr(err.msg, "n_fft"), "odd n_fft accepted");
  ssae_feat_cfg_default(&b);
  b.fmax = 9000;
  CHECK(ssae_feat_cfg_validate(&b, &err) && strstr(err.msg, "fmax"), "fmax > nyquist accepted");
  CHECK(ssae_logmel_new(&b, &err) == NULL, "logmel_new accepted bad settings");
}

int main(void) {
  const size_t n = 16000 * 10;
  float *x = malloc(sizeof *x * n);
  for (size_t i = 0; i < n; i++)
    x[i] = (float)(0.4 * sin(2 * M_PI * 440.0 * (double)i / 16000) + 0.2 * (urand() - 0.5));
  ssae_feat_cfg cfg;
  ssae_feat_cfg_default(&cfg);
  ssae_err err = {{0}};
  float *f;
  size_t nf;
  CHECK(!ssae_logmel_compute(&cfg, x, n, &f, &nf, &err) && nf == 313, "10 s: %zu frames", nf);
  float *w;
  size_t nw;
  CHECK(!ssae_windows_from_frames(f, nf, 64, 5, &w, &nw, &err) && nw == 309, "10 s: %zu windows",
        nw);
  free(f);
  free(w);
  const size_t lens[] = {n, 1, 2, 100, 511, 512, 513, 1024, 1025, 5000, 16000 * 3 + 17};
  for (int pad = 0; pad < 2; pad++)
    for (int center = 1; center >= 0; center--)
      for (size_t l = 0; l < sizeof lens / sizeof *lens; l++) {
        ssae_feat_cfg c = cfg;
        c.pad_mode = pad ? SSAE_PAD_CONSTANT : SSAE_PAD_REFLECT;
        c.center = center;
        char what[96];
        snprintf(what, sizeof what, "%s center=%d n=%zu", pad ? "constant" : "reflect", center,
                 lens[l]);
        check_stream(&c, x, lens[l], what);
      }
  ssae_feat_cfg odd = cfg;
  odd.n_fft = 400;
  odd.hop_length = 160;
  odd.power = 1.0;
  check_stream(&odd, x, 16000 * 2 + 3, "n_fft 400 (kiss_fftr), power 1");
  ssae_feat_cfg big = cfg;
  big.n_fft = 4096;
  big.hop_length = 1000;
  big.n_mels = 128;
  check_stream(&big, x, 16000 * 3 + 5, "n_fft 4096 hop 1000");
  check_stream(&big, x, 1500, "n_fft 4096, stream shorter than n_fft/2");
  ssae_feat_cfg tiny = cfg;
  tiny.n_fft = 16;
  tiny.hop_length = 16;
  tiny.n_mels = 4;
  check_stream(&tiny, x, 16000, "n_fft 16 hop 16");
  check_windows();
  check_cfg_text();
  free(x);
  return test_done("ok");
}
