/* The engine computes the frames of up to eight channels side by side
 * (ssae_logmel_multi.h); each channel must still get exactly the windows of
 * its own single-stream front end. Different signals per channel (tones,
 * noise, stretches of digital silence, a NULL channel now and then), 1 to
 * 20 channels (multiples of 8 and not), blocks of odd sizes (1 ... 3000,
 * split by the engine at max_block), planar and interleaved input, 16 kHz
 * and resampled 48 / 44.1 kHz, a flush in the middle and at the end; the
 * channels in one input group or split into several, each group fed by its
 * own thread (ssae_engine_process_group) as separate sound cards would. The
 * reference for channel c: a resampler fed the same pieces, a ssae_logmel,
 * a ssae_window, then the CPU backend scoring the windows; every WINDOW
 * event of the engine must carry the very float score of the reference's
 * window with the same index (equal windows give equal bits; a window that
 * differs in any bit would almost surely not). */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_backend.h"
#include "engine_test_model.h"
#include "ssae_engine.h"
#include "ssae_logmel.h"
#include "ssae_resample.h"
#include "../ssae_test.h"

#define MAXC 20
#define MAXW 4096

/* WINDOW events, by channel and window index (worker thread; read after
 * the engine is freed). */
typedef struct got {
  float score[MAXC][MAXW];
  int seen[MAXC][MAXW];
  int bad;
} got;

static void on_event(void *user, const ssae_event *ev) {
  got *g = user;
  if (ev->type != SSAE_EVENT_WINDOW) return;
  if (ev->channel < 0 || ev->channel >= MAXC || ev->window >= MAXW ||
      g->seen[ev->channel][ev->window]) {
    g->bad = 1;
    return;
  }
  g->score[ev->channel][ev->window] = (float)ev->score;
  g->seen[ev->channel][ev->window] = 1;
}

/* The single-channel path for one channel: resampler (when the rate
 * differs), front end, window; windows appended to *w. */
typedef struct ref {
  ssae_resampler *rs;
  ssae_logmel *lm;
  ssae_window *win;
  float *rs_out, *frames, *w;
  size_t nw;
} ref;

static void ref_frames(ref *r, size_t nf, int wf) {
  for (size_t k = 0; k < nf; k++)
    if (r->nw < MAXW && ssae_window_push(r->win, r->frames + k * 64, r->w + r->nw * (size_t)wf))
      r->nw++;
}

static void ref_block(ref *r, const float *x, size_t n, int wf) {
  size_t m = n;
  if (r->rs) {
    m = ssae_resampler_process(r->rs, x, n, r->rs_out);
    x = r->rs_out;
  }
  ref_frames(r, ssae_logmel_process(r->lm, x, m, r->frames), wf);
}

static void ref_flush(ref *r, int wf) {
  ref_frames(r, ssae_logmel_flush(r->lm, r->frames), wf);
  if (r->rs) ssae_resampler_reset(r->rs);
  ssae_window_reset(r->win);
}

/* The block sizes of a run, and where the mid-stream flush comes. */
#define MAXBLOCKS 4096
#define FLUSH_AT 40
typedef struct plan {
  size_t n[MAXBLOCKS];
  int blocks;
} plan;

/* Channel 1 is absent (NULL: silence) in every 11th block. */
static int absent(int c, int k) { return c == 1 && k % 11 == 5; }

/* One input group's audio thread. */
typedef struct feeder {
  ssae_engine *e;
  int g;
  const float *x;
  size_t len;
  const plan *p;
} feeder;

static void *feed_group(void *arg) {
  feeder *f = arg;
  int c0, nc;
  ssae_engine_group_channels(f->e, f->g, &c0, &nc);
  const float *ptr[MAXC];
  size_t pos = 0;
  for (int k = 0; k < f->p->blocks; k++) {
    for (int i = 0; i < nc; i++)
      ptr[i] = absent(c0 + i, k) ? NULL : f->x + (size_t)(c0 + i) * f->len + pos;
    ssae_engine_process_group(f->e, f->g, ptr, f->p->n[k]);
    pos += f->p->n[k];
    if (k == FLUSH_AT) ssae_engine_flush_group(f->e, f->g);
  }
  ssae_engine_flush_group(f->e, f->g);
  return NULL;
}

static void run(const ssae_model *m, ssae_backend *be, int C, long rate, int interleaved,
                int groups, const char *what) {
  const size_t max_block = 1024, len = (size_t)(2.5 * (double)rate);
  const int wf = m->feat.n_mels * m->feat.frames;
  static got g;
  memset(&g, 0, sizeof g);
  ssae_engine_cfg cfg;
  ssae_engine_cfg_default(&cfg);
  cfg.channels = C;
  cfg.input_rate = (double)rate;
  cfg.backend = "cpu";
  cfg.cpu_threads = 1;
  cfg.emit_windows = 1;
  cfg.on_event = on_event;
  cfg.user = &g;
  cfg.max_block = max_block;
  cfg.ring_windows = (size_t)C * MAXW; /* no drops: every window compared */
  cfg.groups = groups;
  ssae_err err = {{0}};
  ssae_engine *e = ssae_engine_new(m, &cfg, &err);
  CHECK(e != NULL, "%s: engine: %s", what, err.msg);
  if (!e) return;
  /* Signals: a tone per channel, noise of a level per channel, and in
   * some channels a stretch of exact zeros (a gap). */
  float *x = malloc(sizeof *x * len * (size_t)C), *inter = malloc(sizeof *x * 3000 * (size_t)C);
  for (int c = 0; c < C; c++) {
    const double f = 150.0 + 97.0 * c, a = 0.02 + 0.01 * (c % 7);
    float *xc = x + (size_t)c * len;
    for (size_t i = 0; i < len; i++)
      xc[i] = (float)(0.25 * sin(2 * M_PI * f * (double)i / (double)rate) + a * (urand() - 0.5));
    if (c % 3 == 2) memset(xc + len / 3, 0, sizeof *xc * (size_t)rate / 10);
  }
  ref r[MAXC];
  memset(r, 0, sizeof r);
  float *zeros = calloc(max_block, sizeof *zeros);
  for (int c = 0; c < C; c++) {
    if (rate != m->feat.sample_rate) {
      r[c].rs = ssae_resampler_new(rate, m->feat.sample_rate, max_block, &err);
      r[c].rs_out = malloc(sizeof(float) * ssae_resampler_max_out(r[c].rs, max_block));
    }
    r[c].lm = ssae_logmel_new(&m->feat, &err);
    r[c].win = ssae_window_new(m->feat.n_mels, m->feat.frames, &err);
    r[c].frames = malloc(sizeof(float) * 64 * ssae_logmel_max_frames(r[c].lm, max_block));
    r[c].w = malloc(sizeof(float) * (size_t)wf * MAXW);
  }
  static plan p;
  p.blocks = 0;
  for (size_t pos = 0; pos < len && p.blocks < MAXBLOCKS; p.blocks++) {
    size_t n = 1 + (size_t)(rnd() % (p.blocks % 5 == 0 ? 3000 : 700));
    if (n > len - pos) n = len - pos;
    p.n[p.blocks] = n;
    pos += n;
  }
  CHECK(ssae_engine_groups(e) == (groups > 1 ? groups : 1), "%s: %d groups", what,
        ssae_engine_groups(e));
  if (groups > 1 && !interleaved) {
    pthread_t th[MAXC];
    feeder fd[MAXC];
    for (int g = 0; g < groups; g++) {
      fd[g] = (feeder){e, g, x, len, &p};
      CHECK(pthread_create(&th[g], NULL, feed_group, &fd[g]) == 0, "%s: thread", what);
    }
    for (int g = 0; g < groups; g++) pthread_join(th[g], NULL);
  } else {
    const float *ptr[MAXC];
    size_t pos = 0;
    for (int k = 0; k < p.blocks; k++) {
      const size_t n = p.n[k];
      if (interleaved) {
        for (size_t i = 0; i < n; i++)
          for (int c = 0; c < C; c++)
            inter[i * (size_t)C + (size_t)c] = x[(size_t)c * len + pos + i];
        ssae_engine_process_interleaved(e, inter, n);
      } else {
        for (int c = 0; c < C; c++) ptr[c] = absent(c, k) ? NULL : x + (size_t)c * len + pos;
        ssae_engine_process(e, ptr, n);
      }
      pos += n;
      if (k == FLUSH_AT) ssae_engine_flush(e);
    }
    ssae_engine_flush(e);
  }
  /* The reference, channel by channel. The engine splits blocks at
   * max_block; so does the reference. */
  for (int c = 0; c < C; c++) {
    size_t pos = 0;
    for (int k = 0; k < p.blocks; k++) {
      const size_t n = p.n[k];
      const int silent = !interleaved && absent(c, k);
      for (size_t off = 0; off < n; off += max_block) {
        const size_t piece = n - off < max_block ? n - off : max_block;
        ref_block(&r[c], silent ? zeros : x + (size_t)c * len + pos + off, piece, wf);
      }
      pos += n;
      if (k == FLUSH_AT) ref_flush(&r[c], wf);
    }
    ref_flush(&r[c], wf);
  }
  ssae_engine_drain(e);
  ssae_engine_stats st;
  ssae_engine_stats_get(e, &st);
  ssae_engine_free(e);
  CHECK(!g.bad, "%s: a WINDOW event out of range or repeated", what);
  CHECK(st.dropped == 0, "%s: %llu windows dropped", what, (unsigned long long)st.dropped);
  float *scores = malloc(sizeof *scores * MAXW);
  size_t total = 0;
  for (int c = 0; c < C; c++) {
    total += r[c].nw;
    CHECK(r[c].nw > 50 && r[c].nw < MAXW, "%s: channel %d: %zu reference windows", what, c,
          r[c].nw);
    /* The reference windows in batches of another size than the engine's. */
    for (size_t i = 0; i < r[c].nw; i += 100) {
      size_t b = r[c].nw - i < 100 ? r[c].nw - i : 100;
      if (ssae_backend_run(be, r[c].w + i * (size_t)wf, b, scores + i, NULL, &err))
        CHECK(0, "%s: backend: %s", what, err.msg);
    }
    size_t missing = 0, differ = 0, extra = 0;
    for (size_t w = 0; w < r[c].nw; w++) {
      if (!g.seen[c][w]) missing++;
      else if (memcmp(&g.score[c][w], &scores[w], sizeof *scores)) differ++;
    }
    for (size_t w = r[c].nw; w < MAXW; w++) extra += (size_t)g.seen[c][w];
    CHECK(!missing && !differ && !extra,
          "%s: channel %d: of %zu windows %zu missing, %zu with another score, %zu extra", what,
          c, r[c].nw, missing, differ, extra);
  }
  CHECK(st.windows == total, "%s: engine made %llu windows, reference %zu", what,
        (unsigned long long)st.windows, total);
  printf("%s: %zu windows, each channel's equal to its single-stream windows\n", what, total);
  free(scores);
  for (int c = 0; c < C; c++) {
    ssae_resampler_free(r[c].rs);
    ssae_logmel_free(r[c].lm);
    ssae_window_free(r[c].win);
    free(r[c].rs_out);
    free(r[c].frames);
    free(r[c].w);
  }
  free(zeros);
  free(x);
  free(inter);
}

int main(void) {
  ssae_err err = {{0}};
  ssae_model *m = engine_test_model(3, 1e30);
  if (!m) return 1;
  ssae_backend *be = ssae_backend_new_threads(m, "cpu", 100, 1, &err);
  if (!be) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  const int chans[] = {1, 5, 8, 13, 20};
  for (int i = 0; i < 5; i++) {
    char what[64];
    snprintf(what, sizeof what, "16 kHz planar, %d channels", chans[i]);
    run(m, be, chans[i], 16000, 0, 1, what);
  }
  run(m, be, 11, 48000, 0, 1, "48 kHz planar (resampled), 11 channels");
  run(m, be, 9, 44100, 1, 1, "44.1 kHz interleaved (resampled), 9 channels");
  run(m, be, 16, 16000, 1, 1, "16 kHz interleaved, 16 channels");
  run(m, be, 20, 16000, 0, 3, "16 kHz planar, 20 channels in 3 groups, a thread each");
  run(m, be, 13, 48000, 0, 13,
      "48 kHz planar (resampled), 13 channels in 13 groups, a thread each");
  run(m, be, 10, 16000, 1, 4, "16 kHz interleaved, 10 channels in 4 groups, one thread");
  ssae_backend_free(be);
  ssae_model_free(m);
  return test_done("ok");
}
