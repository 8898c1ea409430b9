/* The engine's device front end (ssae_engine_cfg.gpu_frontend): the audio
 * thread only copies PCM into the page-locked rings; the worker makes the
 * frames, windows and scores of every channel at once. The default path
 * (the front end on the audio thread, the CPU backend) is the reference:
 * the same audio in the same random block sizes through both engines must
 * give the same windows (index, time, score), the same alarms (so the same
 * silence flags: a channel fed NULL for a while, NaN samples), across a
 * mid-stream flush, a pause of the analysis, two input groups and a
 * resampled input rate; each once with the rings written through the cache
 * and once with streaming stores (SSAE_PCM_STREAM_BYTES=0: what blocks of
 * thousands of channels take); silence after a flush off the hop with a
 * worker that takes several blocks a run. Then: a worker too slow for the audio drops blocks
 * (counted; the windows after a drop carry on at the right times), and the
 * refusals (several models, a model swap).
 *
 * Argument: none: the device front end's CPU path (any host); "cuda": on
 * the GPU (exit 77 without one), scores within 1e-5; "cuda-fail": a CUDA
 * error injected after three runs (SSAE_CUDA_FAIL_AFTER): one BACKEND
 * event, no window lost or changed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_test_model.h"
#include "ssae_cuda_frontend.h"
#include "ssae_engine.h"
#include "../ssae_test.h"

#define C 5
#define MAXW 1024
#define MAXA 4096
#define SECONDS 6

typedef struct alarm_ev {
  int type, channel;
  uint64_t window;
} alarm_ev;

typedef struct got {
  float score[C][MAXW];
  double t[C][MAXW];
  int seen[C][MAXW];
  alarm_ev alarms[MAXA];
  int n_alarms, backend_events, bad;
} got;

static void on_event(void *user, const ssae_event *ev) {
  got *g = user;
  if (ev->type == SSAE_EVENT_BACKEND) g->backend_events++;
  if (ev->type == SSAE_EVENT_ALARM_ON || ev->type == SSAE_EVENT_ALARM_OFF) {
    if (g->n_alarms < MAXA)
      g->alarms[g->n_alarms++] = (alarm_ev){(int)ev->type, ev->channel, ev->window};
    return;
  }
  const int r = engine_test_take_window(ev, C, MAXW, &g->score[0][0], &g->seen[0][0]);
  if (r < 0) g->bad = 1;
  else if (r) g->t[ev->channel][ev->window] = ev->t;
}

/* Channel c's audio: a tone and noise of its own; channel 3 carries NaN
 * and Inf samples, channel 4 exact zeros for a while (digital silence),
 * channel 1 short runs of zeros (just digital silence, each inside a block
 * or two: a zero the copy fails to note changes its windows' flags). */
static void make_audio(float *x, size_t n, int c, double rate) {
  engine_test_audio(x, n, c, rate);
  if (c == 3)
    for (size_t i = n / 3; i < n / 3 + 40; i += 7) x[i] = i % 2 ? NAN : INFINITY;
  if (c == 4)
    for (size_t i = n / 5; i < n / 5 + n / 10; i++) x[i] = 0.0f;
  if (c == 1)
    for (size_t i = 3001; i + 80 < n; i += 7919)
      for (size_t k = 0; k < 80; k++) x[i + k] = 0.0f;
}

static const char *mode = "cpu";
static double input_rate = 16000;

static void cfg_for(ssae_engine_cfg *cfg, got *g, int device) {
  ssae_engine_cfg_default(cfg);
  cfg->channels = C;
  cfg->groups = 2;
  cfg->input_rate = input_rate;
  cfg->backend = device && strcmp(mode, "cpu") ? "cuda" : "cpu";
  cfg->gpu_frontend = device;
  cfg->emit_windows = 1;
  cfg->ring_windows = 8192;
  cfg->params.threshold = 1e-9; /* every judged window above: alarms follow the silence */
  cfg->params.smoothing_s = 0;
  cfg->on_event = on_event;
  cfg->user = g;
}

static void pause_ms(int ms) {
  struct timespec ts = {0, (long)ms * 1000000L};
  nanosleep(&ts, NULL);
}

/* The audio in random block sizes (the same for both engines: one seed),
 * channel 2 given as NULL (silence) for a stretch; a flush at a third, a
 * pause of the analysis at two thirds, a flush at the end. */
static void play(ssae_engine *e, float *const *audio, size_t n) {
  uint64_t s = 12345;
  int paused = 0;
  for (size_t i = 0; i < n;) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    size_t k = 1 + (size_t)((s >> 33) % 1500);
    if (k > n - i) k = n - i;
    const float *in[C];
    for (int c = 0; c < C; c++) in[c] = audio[c] + i;
    if (i > n / 2 && i < n / 2 + n / 12) in[2] = NULL;
    const int want_pause = i > 2 * n / 3 && i < 2 * n / 3 + n / 10;
    if (want_pause != paused) {
      /* Every window before the pause judged, then the pause cleared
       * (the alarms end) in both engines alike. */
      ssae_engine_drain(e);
      ssae_engine_params p;
      ssae_engine_get_params(e, &p);
      p.enabled = !want_pause;
      ssae_engine_set_params(e, &p);
      paused = want_pause;
      if (paused) pause_ms(50);
    }
    ssae_engine_process(e, in, k);
    i += k;
    if (i >= n / 3 && i - k < n / 3) ssae_engine_flush(e);
  }
  ssae_engine_flush(e);
  ssae_engine_drain(e);
}

static int run(const ssae_model *m, int device, got *g, float *const *audio, size_t n,
               ssae_engine_stats *st, int slow_us) {
  ssae_engine_cfg cfg;
  cfg_for(&cfg, g, device);
  cfg.slow_backend_us = slow_us;
  ssae_err err = {{0}};
  ssae_engine *e = ssae_engine_new(m, &cfg, &err);
  CHECK(e != NULL, "engine (device front end %d): %s", device, err.msg);
  if (!e) return -1;
  play(e, audio, n);
  ssae_engine_stats_get(e, st);
  ssae_engine_free(e);
  return 0;
}

static int close_to(float a, float b) {
  if (!strcmp(mode, "cpu")) return fabsf(a - b) <= 1e-6f * fabsf(b) + 1e-12f;
  return fabsf(a - b) <= 1e-5f * fabsf(b) + 1e-12f;
}

static int by_channel_window(const void *pa, const void *pb) {
  const alarm_ev *a = pa, *b = pb;
  if (a->channel != b->channel) return a->channel < b->channel ? -1 : 1;
  if (a->window != b->window) return a->window < b->window ? -1 : 1;
  return a->type - b->type;
}

/* Every window of the reference, the same in the device front end's run. */
static void compare(const got *ref, const got *dev, const char *what, size_t min_windows,
                    int min_alarms) {
  int fails = 0;
  size_t windows = 0;
  double worst = 0;
  for (int c = 0; c < C; c++)
    for (int w = 0; w < MAXW; w++) {
      if (ref->seen[c][w] != dev->seen[c][w]) {
        if (fails++ < 5)
          fprintf(stderr, "%s: channel %d window %d: seen %d, reference %d\n", what, c, w,
                  dev->seen[c][w], ref->seen[c][w]);
        continue;
      }
      if (!ref->seen[c][w]) continue;
      windows++;
      const double d = fabs((double)dev->score[c][w] - ref->score[c][w]) / ref->score[c][w];
      if (d > worst) worst = d;
      if (!close_to(dev->score[c][w], ref->score[c][w]) || dev->t[c][w] != ref->t[c][w]) {
        if (fails++ < 5)
          fprintf(stderr, "%s: channel %d window %d: %.9g at %.6f s, reference %.9g at %.6f s\n",
                  what, c, w, (double)dev->score[c][w], dev->t[c][w], (double)ref->score[c][w],
                  ref->t[c][w]);
      }
    }
  printf("%s: %zu windows, largest relative difference %.3g\n", what, windows, worst);
  CHECK(windows > min_windows, "%s: only %zu windows", what, windows);
  CHECK(fails == 0, "%s: %d windows differ", what, fails);
  /* Each channel's alarms in the same order; across channels the order
   * follows the batches, which differ. */
  static alarm_ev a[MAXA], b[MAXA];
  memcpy(a, ref->alarms, sizeof a);
  memcpy(b, dev->alarms, sizeof b);
  qsort(a, (size_t)ref->n_alarms, sizeof *a, by_channel_window);
  qsort(b, (size_t)dev->n_alarms, sizeof *b, by_channel_window);
  int same = ref->n_alarms == dev->n_alarms;
  for (int i = 0; same && i < ref->n_alarms; i++)
    same = a[i].type == b[i].type && a[i].channel == b[i].channel && a[i].window == b[i].window;
  CHECK(same, "%s: %d alarm events against the reference's %d, or others", what, dev->n_alarms,
        ref->n_alarms);
  CHECK(ref->n_alarms >= min_alarms, "%s: the reference raised only %d alarm events", what,
        ref->n_alarms);
}

/* Silence after a flush that is not on a hop: the next stream's frames keep
 * the numbering of the one before (a window's place on the frame axis is
 * up to a hop past its samples), and a worker that sleeps before each run
 * takes several blocks a run (as on a loaded host). Runs of 80 zeros every
 * 5237 samples on channel 1, blocks of 700, a flush at sample 20010: each
 * window's silence flag is the reference's. (The device front end once
 * judged windows over their frame-axis range, which reached into the next
 * block of the same run: engine_devfe failed on loaded hosts.) */
static void flush_shift(const ssae_model *m) {
  static got ref, dev;
  const size_t n = 96000, at = 20010, blk = 700;
  float *audio[C];
  for (int c = 0; c < C; c++) {
    audio[c] = malloc(n * sizeof(float));
    if (!audio[c]) FAIL("out of memory");
    make_audio(audio[c], n, c == 1 ? 0 : c, 16000);
    if (c == 1)
      for (size_t i = 500; i + 80 < n; i += 5237)
        for (size_t k = 0; k < 80; k++) audio[c][i + k] = 0.0f;
  }
  for (int device = 0; device < 2; device++) {
    got *g = device ? &dev : &ref;
    memset(g, 0, sizeof *g);
    ssae_engine_cfg cfg;
    cfg_for(&cfg, g, device);
    cfg.input_rate = 16000;
    cfg.slow_backend_us = device ? 3000 : 0;
    ssae_err err = {{0}};
    ssae_engine *e = ssae_engine_new(m, &cfg, &err);
    CHECK(e != NULL, "flush off the hop: %s", err.msg);
    if (!e) break;
    for (size_t i = 0; i < n;) {
      size_t k = blk;
      if (i < at && i + k > at) k = at - i;
      if (k > n - i) k = n - i;
      const float *in[C];
      for (int c = 0; c < C; c++) in[c] = audio[c] + i;
      ssae_engine_process(e, in, k);
      i += k;
      if (i == at) ssae_engine_flush(e);
    }
    ssae_engine_flush(e);
    ssae_engine_drain(e);
    ssae_engine_stats st;
    ssae_engine_stats_get(e, &st);
    ssae_engine_free(e);
    CHECK(st.dropped == 0, "flush off the hop: %llu windows dropped",
          (unsigned long long)st.dropped);
  }
  CHECK(!ref.bad && !dev.bad, "flush off the hop: a window seen twice or out of range");
  compare(&ref, &dev, "a flush off the hop, a sleeping worker", (size_t)C * 150, 20);
  for (int c = 0; c < C; c++) free(audio[c]);
}

/* A worker far slower than the audio: blocks are dropped and counted, and
 * the windows after each drop carry on at the right times. */
static void overload(const ssae_model *m, float *const *audio, size_t n) {
  static got g;
  memset(&g, 0, sizeof g);
  ssae_engine_cfg cfg;
  cfg_for(&cfg, &g, 1);
  cfg.groups = 1;
  cfg.input_rate = 0;
  cfg.slow_backend_us = 20000;
  cfg.ring_windows = 0; /* the least ring: about 0.25 s */
  ssae_err err = {{0}};
  ssae_engine *e = ssae_engine_new(m, &cfg, &err);
  CHECK(e != NULL, "slow engine: %s", err.msg);
  if (!e) return;
  for (size_t i = 0; i + 256 <= n; i += 256) {
    const float *in[C];
    for (int c = 0; c < C; c++) in[c] = audio[c] + i;
    ssae_engine_process(e, in, 256);
    /* A third of the audio at ten times its speed (the worker, asleep 20
     * ms before each run of at most 2048 samples, keeps up with six at
     * most), the rest no faster than the worker takes it (whatever its
     * speed: a sanitizer slows it down a lot). */
    if (i % 4096 == 0) {
      if (i < n / 3) pause_ms(25);
      else ssae_engine_drain(e);
    }
  }
  ssae_engine_drain(e);
  ssae_engine_stats st;
  ssae_engine_stats_get(e, &st);
  ssae_engine_free(e);
  printf("overload: %llu windows, %llu scored, %llu dropped\n", (unsigned long long)st.windows,
         (unsigned long long)st.scored, (unsigned long long)st.dropped);
  CHECK(st.dropped > 0, "the slow worker dropped nothing");
  CHECK(st.scored > 0, "the slow worker scored nothing");
  CHECK(st.windows == st.scored + st.dropped, "windows %llu != scored %llu + dropped %llu",
        (unsigned long long)st.windows, (unsigned long long)st.scored,
        (unsigned long long)st.dropped);
  /* Up to one window per hop of audio per channel, made or dropped (a
   * stream restarted after a drop has no window until its fifth frame). */
  const double want = (double)C * (double)n / 512.0;
  CHECK(st.windows > 0.6 * want && st.windows < 1.01 * want, "windows %llu, about %.0f expected",
        (unsigned long long)st.windows, want);
  for (int c = 0; c < C; c++) {
    double last = -1;
    for (int w = 0; w < MAXW; w++) {
      if (!g.seen[c][w]) continue;
      CHECK(g.t[c][w] > last && isfinite(g.score[c][w]), "channel %d window %d at %.4f s", c,
            w, g.t[c][w]);
      last = g.t[c][w];
    }
    CHECK(last > 0.6 * (double)n / 16000.0, "channel %d's last window at %.3f s of %.3f", c,
          last, (double)n / 16000.0);
  }
}

static void refusals(const ssae_model *a, const ssae_model *b) {
  ssae_engine_cfg cfg;
  static got g;
  cfg_for(&cfg, &g, 1);
  cfg.input_rate = 0;
  const ssae_model *mix[C] = {a, b, a, b, a};
  cfg.channel_models = mix;
  ssae_err err = {{0}};
  ssae_engine *e = ssae_engine_new(a, &cfg, &err);
  CHECK(!e && strstr(err.msg, "one model"), "two models: %s", e ? "accepted" : err.msg);
  ssae_engine_free(e);
  cfg.channel_models = NULL;
  e = ssae_engine_new(a, &cfg, &err);
  CHECK(e != NULL, "engine: %s", err.msg);
  if (!e) return;
  CHECK(ssae_engine_swap_model(e, b, &err) != 0 && strstr(err.msg, "restart"),
        "swap: %s", err.msg);
  ssae_engine_free(e);
}

int main(int argc, char **argv) {
  if (argc > 1) mode = argv[1];
  if (strcmp(mode, "cpu")) {
    if (!ssae_cuda_fe_device_present()) {
      fprintf(stderr, "SKIP: no CUDA device here\n");
      return 77;
    }
    if (!strcmp(mode, "cuda-fail")) setenv("SSAE_CUDA_FAIL_AFTER", "3", 1);
  }
  ssae_model *m = engine_test_model(7, 1.0), *m2 = engine_test_model(8, 1.0);
  if (!m || !m2) FAIL("no model");
  static got ref, dev;
  float *audio[C];
  /* At the model's rate, then at 48 kHz through the resamplers; then both
   * again with streaming stores into the rings. */
  for (int pass = 0; pass < 4; pass++) {
    input_rate = pass % 2 ? 48000 : 16000;
    setenv("SSAE_PCM_STREAM_BYTES", pass < 2 ? "" : "0", 1);
    const size_t n = (size_t)(SECONDS * input_rate);
    for (int c = 0; c < C; c++) {
      audio[c] = malloc(n * sizeof(float));
      if (!audio[c]) FAIL("out of memory");
      make_audio(audio[c], n, c, input_rate);
    }
    memset(&ref, 0, sizeof ref);
    memset(&dev, 0, sizeof dev);
    ssae_engine_stats sr, sd;
    if (run(m, 0, &ref, audio, n, &sr, 0) || run(m, 1, &dev, audio, n, &sd, 0)) return 1;
    CHECK(!ref.bad && !dev.bad, "a window seen twice or out of range");
    static const char *what[4] = {"16 kHz input", "48 kHz input", "16 kHz input, streaming stores",
                                  "48 kHz input, streaming stores"};
    compare(&ref, &dev, what[pass], (size_t)C * 120, 2 * C);
    CHECK(sd.dropped == 0 && sd.windows == sd.scored && sd.scored == sr.scored,
          "device front end: %llu windows, %llu scored, %llu dropped; reference %llu scored",
          (unsigned long long)sd.windows, (unsigned long long)sd.scored,
          (unsigned long long)sd.dropped, (unsigned long long)sr.scored);
    CHECK(sd.nonfinite == sr.nonfinite && sd.nonfinite > 0,
          "non-finite samples %llu, reference %llu",
          (unsigned long long)sd.nonfinite, (unsigned long long)sr.nonfinite);
    if (!strcmp(mode, "cuda-fail")) {
      CHECK(dev.backend_events == 1 && !strcmp(sd.backend, "cpu"),
            "%d BACKEND events, backend %s after the failure", dev.backend_events, sd.backend);
    } else {
      CHECK(dev.backend_events == 0, "%d BACKEND events", dev.backend_events);
      CHECK(!strcmp(sd.backend, strcmp(mode, "cpu") ? "cuda" : "cpu"), "backend %s", sd.backend);
    }
    if (pass == 0) {
      flush_shift(m);
      overload(m, audio, n);
    }
    for (int c = 0; c < C; c++) free(audio[c]);
  }
  refusals(m, m2);
  ssae_model_free(m);
  ssae_model_free(m2);
  if (failures) return 1;
  printf("OK\n");
  return 0;
}
