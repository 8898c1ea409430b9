/* The multi-channel front end (ssae_logmel_multi.h) gives every channel
 * exactly the frames, bit for bit, of a single-stream ssae_logmel fed the
 * same blocks: different signals per channel, 1 to 21 channels (multiples
 * of 8 and not), blocks of odd sizes (1 ... 9000, more than one internal
 * chunk), all channels with the same block sizes (an engine's period) or
 * each its own, run at the end of every round or only when the batch is
 * full, flushes and resets in the middle, both pad modes, uncentred
 * frames, kiss_fftr sizes, power 1. Feed, run, flush and reset allocate
 * nothing (malloc, calloc, realloc are wrapped and counted). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_features.h"
#include "ssae_logmel.h"
#include "ssae_logmel_multi.h"
#define SSAE_TEST_SEED 0x2545F4914F6CDD1Dull
#define SSAE_TEST_COUNT_ALLOCS
#include "../ssae_test.h"

#define MAXC 21

/* Frames as they arrive, per channel (the callback's side). */
typedef struct sink {
  int n_mels;
  float *frames[MAXC];
  size_t count[MAXC], cap;
  int overflow, order;
} sink;

static void on_frame(void *user, int c, const float *frame) {
  sink *s = user;
  if (c < 0 || c >= MAXC) {
    s->order = 1;
    return;
  }
  if (s->count[c] >= s->cap) {
    s->overflow = 1;
    return;
  }
  memcpy(s->frames[c] + s->count[c] * (size_t)s->n_mels, frame, sizeof *frame * (size_t)s->n_mels);
  s->count[c]++;
}

/* One scenario: C channels of length len each; `same`: every channel gets
 * the round's block size; `run_each`: the caller runs the object after
 * every round (as the engine does after each period). */
static void scenario(const ssae_feat_cfg *cfg, int C, size_t len, size_t max_block, int same,
                     int run_each, const char *what) {
  ssae_err err = {{0}};
  const size_t M = (size_t)cfg->n_mels;
  float *x[MAXC], *ref[MAXC];
  ssae_logmel *lm[MAXC];
  size_t pos[MAXC], nref[MAXC];
  sink s;
  memset(&s, 0, sizeof s);
  s.n_mels = cfg->n_mels;
  /* Flushes restart streams: at most a few streams' worth of frames. */
  s.cap = 4 * (len / (size_t)cfg->hop_length + 8) + 64;
  float *tmp = malloc(sizeof *tmp * M * (s.cap + 8));
  for (int c = 0; c < C; c++) {
    x[c] = malloc(sizeof *x[c] * len);
    /* Different signals: tone, noise level and a stretch of zeros per
     * channel. */
    const double f = 110.0 * (c + 1) + 37.0 * urand(), a = 0.05 + 0.05 * (c % 5);
    for (size_t i = 0; i < len; i++)
      x[c][i] = (float)(0.3 * sin(2 * M_PI * f * (double)i / cfg->sample_rate) +
                        a * (urand() - 0.5));
    if (c % 4 == 3 && len > 3000)
      memset(x[c] + 1000 + 100 * (size_t)c, 0, sizeof *x[c] * 900);
    ref[c] = malloc(sizeof *ref[c] * M * s.cap);
    s.frames[c] = malloc(sizeof *s.frames[c] * M * s.cap);
    lm[c] = ssae_logmel_new(cfg, &err);
    CHECK(lm[c] != NULL, "%s: logmel_new: %s", what, err.msg);
    pos[c] = nref[c] = 0;
  }
  ssae_logmel_multi *mm = ssae_logmel_multi_new(cfg, C, on_frame, &s, &err);
  CHECK(mm != NULL, "%s: multi_new: %s", what, err.msg);
  if (!mm) goto out;
  CHECK(ssae_logmel_multi_channels(mm) == C, "%s: channel count", what);
  size_t allocs = 0;
  for (int done = 0; !done;) {
    done = 1;
    const size_t round_b = 1 + (size_t)(rnd() % max_block);
    for (int c = 0; c < C; c++) {
      if (pos[c] >= len) continue;
      done = 0;
      size_t b = same ? round_b : 1 + (size_t)(rnd() % max_block);
      if (b > len - pos[c]) b = len - pos[c];
      size_t before = n_allocs;
      size_t q = ssae_logmel_multi_feed(mm, c, x[c] + pos[c], b);
      allocs += n_allocs - before;
      size_t k = ssae_logmel_process(lm[c], x[c] + pos[c], b, tmp);
      CHECK(q == k, "%s: channel %d queued %zu frames, the single stream made %zu", what, c, q, k);
      if (nref[c] + k <= s.cap) memcpy(ref[c] + nref[c] * M, tmp, sizeof *tmp * M * k);
      nref[c] += k;
      pos[c] += b;
      /* Now and then the stream ends (flush) or is forgotten (reset) and a
       * new one starts with the rest of the signal. */
      const uint64_t r = rnd() % 97;
      before = n_allocs;
      if (r == 0) {
        size_t qf = ssae_logmel_multi_flush(mm, c);
        size_t kf = ssae_logmel_flush(lm[c], tmp);
        CHECK(qf == kf, "%s: flush queued %zu, single %zu", what, qf, kf);
        if (nref[c] + kf <= s.cap) memcpy(ref[c] + nref[c] * M, tmp, sizeof *tmp * M * kf);
        nref[c] += kf;
      } else if (r == 1) {
        ssae_logmel_multi_reset(mm, c);
        ssae_logmel_reset(lm[c]);
      }
      allocs += n_allocs - before;
    }
    size_t before = n_allocs;
    if (run_each) ssae_logmel_multi_run(mm);
    allocs += n_allocs - before;
  }
  size_t before = n_allocs;
  for (int c = 0; c < C; c++) {
    ssae_logmel_multi_flush(mm, c);
    size_t kf = ssae_logmel_flush(lm[c], tmp);
    if (nref[c] + kf <= s.cap) memcpy(ref[c] + nref[c] * M, tmp, sizeof *tmp * M * kf);
    nref[c] += kf;
  }
  ssae_logmel_multi_run(mm);
  allocs += n_allocs - before;
  CHECK(allocs == 0, "%s: %zu allocations in feed, run, flush or reset", what, allocs);
  CHECK(!s.overflow && !s.order, "%s: callback overflow or bad channel", what);
  for (int c = 0; c < C; c++) {
    CHECK(nref[c] <= s.cap, "%s: test buffer too small", what);
    CHECK(s.count[c] == nref[c], "%s: channel %d: %zu frames, single stream %zu", what, c,
          s.count[c], nref[c]);
    if (s.count[c] == nref[c] && nref[c] <= s.cap && nref[c])
      CHECK(!memcmp(s.frames[c], ref[c], sizeof *ref[c] * M * nref[c]),
            "%s: channel %d: frames differ from the single stream", what, c);
  }
out:
  ssae_logmel_multi_free(mm);
  for (int c = 0; c < C; c++) {
    free(x[c]);
    free(ref[c]);
    free(s.frames[c]);
    ssae_logmel_free(lm[c]);
  }
  free(tmp);
}

static void check_cfg(const ssae_feat_cfg *cfg, size_t len, const char *name) {
  const int chans[] = {1, 3, 8, 13, 21};
  const size_t blocks[] = {1, 7, 300, 1023, 9000};
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 5; j++) {
      /* Blocks of 1 sample on 21 channels: a shorter signal will do. */
      size_t l = blocks[j] == 1 ? len / 4 : len;
      for (int mode = 0; mode < 3; mode++) {
        char what[160];
        snprintf(what, sizeof what, "%s, %d channels, blocks up to %zu, %s", name, chans[i],
                 blocks[j], mode == 0 ? "same blocks, run each round"
                            : mode == 1 ? "own blocks, run each round"
                                        : "same blocks, run when full");
        scenario(cfg, chans[i], l, blocks[j], mode != 1, mode != 2, what);
      }
    }
}

int main(void) {
  ssae_feat_cfg cfg;
  ssae_feat_cfg_default(&cfg);
  check_cfg(&cfg, 16000 * 2 + 333, "default");
  ssae_feat_cfg c = cfg;
  c.pad_mode = SSAE_PAD_CONSTANT;
  check_cfg(&c, 16000 + 17, "constant pad");
  c = cfg;
  c.center = 0;
  check_cfg(&c, 16000 + 5, "not centred");
  c = cfg;
  c.n_fft = 400;
  c.hop_length = 160;
  c.power = 1.0;
  check_cfg(&c, 8000 + 3, "n_fft 400 (kiss_fftr), power 1");
  c = cfg;
  c.n_fft = 16;
  c.hop_length = 16;
  c.n_mels = 4;
  check_cfg(&c, 3000, "n_fft 16 hop 16");
  /* Short streams (the start reflection held back, reflected again). */
  scenario(&cfg, 13, 300, 7, 1, 1, "short streams of 300 samples");
  ssae_err err = {{0}};
  CHECK(ssae_logmel_multi_new(&cfg, 0, on_frame, NULL, &err) == NULL, "0 channels accepted");
  CHECK(ssae_logmel_multi_new(&cfg, 2, NULL, NULL, &err) == NULL, "no callback accepted");
  ssae_logmel_multi_free(NULL);
  return test_done("ok");
}
