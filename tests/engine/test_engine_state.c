/* The per-channel state a reader gets from ssae_engine_channel_get while the
 * worker publishes, and pausing analysis.
 *
 * 1. Consistency: a reader thread hammers ssae_engine_channel_get while the
 *    engine scores a stream whose loudness changes every block (so that
 *    successive windows score differently). Every set it sees must be one
 *    window's: its score equals the score the WINDOW event gave for window
 *    `windows - 1` of that channel, and (smoothing 0) its smoothed score
 *    equals its score. A torn read (score of one window, count or smoothed
 *    score of another) fails.
 * 2. Pause: with an alarm on, enabled = 0 ends it (alarm 0 in the state, an
 *    alarm_off event) although no window arrives any more; on resume the
 *    analysis goes on.
 * 3. Backend failure mid-stream (the backend's test hook fails its third
 *    batch): one backend event, the stats name the CPU, and every window is
 *    scored, with a finite score, none lost. */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ssae_backend.h"
#include "engine_test_model.h"
#include "../ssae_test.h"
#include "ssae_engine.h"

#define C 4
#define MAXW 2048

typedef struct rec {
  pthread_mutex_t mu;
  float score[C][MAXW];
  int have[C][MAXW];
  int alarm_on, alarm_off, backend;
  int off_paused; /* alarm_off events whose reason is "paused" */
} rec;

static void on_event(void *user, const ssae_event *ev) {
  rec *r = user;
  pthread_mutex_lock(&r->mu);
  if (ev->type == SSAE_EVENT_WINDOW && ev->channel >= 0 && ev->channel < C &&
      ev->window < MAXW) {
    r->score[ev->channel][ev->window] = (float)ev->raw_score;
    r->have[ev->channel][ev->window] = 1;
  }
  if (ev->type == SSAE_EVENT_ALARM_ON) r->alarm_on++;
  if (ev->type == SSAE_EVENT_ALARM_OFF) r->alarm_off++;
  if (ev->type == SSAE_EVENT_ALARM_OFF && ev->alarm && ev->alarm->reason &&
      !strcmp(ev->alarm->reason, "paused"))
    r->off_paused++;
  if (ev->type == SSAE_EVENT_BACKEND) r->backend++;
  pthread_mutex_unlock(&r->mu);
}

typedef struct seen {
  int ch;
  uint64_t windows;
  float score, smoothed;
} seen;

#define MAXSEEN 200000
typedef struct reader {
  ssae_engine *e;
  atomic_int stop;
  seen *s;
  size_t n;
  _Atomic uint64_t looks;
} reader;

static void *reader_main(void *arg) {
  reader *rd = arg;
  uint64_t last[C] = {0};
  while (!atomic_load(&rd->stop)) {
    for (int c = 0; c < C; c++) {
      ssae_channel_state st;
      ssae_engine_channel_get(rd->e, c, &st);
      atomic_fetch_add(&rd->looks, 1);
      if (st.windows == 0 || st.windows == last[c] || rd->n >= MAXSEEN) continue;
      last[c] = st.windows;
      rd->s[rd->n++] = (seen){c, st.windows, st.score, st.smoothed};
    }
  }
  return NULL;
}

static ssae_model *model(void) {
  ssae_model *m = engine_test_model(11, NAN);
  if (!m) exit(1);
  return m;
}

static void sleep_ms(double ms) {
  struct timespec ts = {(time_t)(ms / 1e3), (long)(fmod(ms, 1e3) * 1e6)};
  nanosleep(&ts, NULL);
}

/* The backend under test: "cpu", or "cuda" (argv[1]; exits 77 when no
 * device can run it), so that the GPU worker path (windows read in place
 * from the page-locked rings by the copy engine, fall back mid-stream: the
 * CPU scores them there) is tested on the GPU; "cuda-copy": the same with
 * the windows copied into the backend's pinned buffers instead. */
static int no_in_place; /* "cuda-copy": the worker copies windows out of the rings */
static const char *pick_backend(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "cpu")) return "cpu";
  const char *name = argv[1];
  if (!strcmp(name, "cuda-copy")) {
    no_in_place = 1;
    name = "cuda";
  }
  for (int i = 0; ssae_backends[i]; i++)
    if (!strcmp(ssae_backends[i]->name, name) && ssae_backends[i]->available())
      return name;
  printf("backend %s: not in this build or no device: skipped\n", argv[1]);
  exit(77);
}

int main(int argc, char **argv) {
  const char *backend = pick_backend(argc, argv);
  ssae_model *m = model();
  rec *r = calloc(1, sizeof *r);
  pthread_mutex_init(&r->mu, NULL);
  ssae_engine_cfg cfg;
  ssae_engine_cfg_default(&cfg);
  cfg.channels = C;
  cfg.backend = backend;
  cfg.no_in_place = no_in_place;
  cfg.cpu_threads = 1;
  cfg.emit_windows = 1;
  cfg.on_event = on_event;
  cfg.user = r;
  cfg.max_batch = 3; /* many small batches: many publications */
  cfg.params.smoothing_s = 0;
  cfg.params.on_count = 1;
  cfg.params.off_count = 1;
  ssae_err err;
  ssae_engine *e = ssae_engine_new(m, &cfg, &err);
  if (!e) FAIL("%s", err.msg);

  /* 1. consistency */
  const size_t B = 512, blocks = 16000 * 30 / 512; /* 30 s */
  float *buf = malloc(B * C * sizeof *buf);
  const float *ptr[C];
  uint32_t x = 99;
  reader rd = {e, 0, malloc(MAXSEEN * sizeof(seen)), 0, 0};
  pthread_t th;
  if (pthread_create(&th, NULL, reader_main, &rd)) FAIL("pthread_create");
  for (size_t b = 0; b < blocks; b++) {
    for (size_t i = 0; i < B * C; i++) {
      x = x * 1664525u + 1013904223u;
      float amp = 0.001f * (float)(1 + (b * 7 + i / B) % 13);
      buf[i] = amp * ((float)(x >> 8) / 16777216.0f - 0.5f);
    }
    for (int c = 0; c < C; c++) ptr[c] = buf + (size_t)c * B;
    ssae_engine_process(e, ptr, B);
    /* Let the worker keep up (no drops), while the reader looks on. */
    if (b % 8 == 7) {
      ssae_engine_drain(e);
      /* On a loaded machine the reader may not run at all while the
       * producer races through the stream: wait for one full pass of it
       * over the settled states, so it sees many publications every run. */
      uint64_t l0 = atomic_load(&rd.looks);
      while (atomic_load(&rd.looks) < l0 + 2 * C) sched_yield();
    }
  }
  ssae_engine_drain(e);
  atomic_store(&rd.stop, 1);
  pthread_join(th, NULL);
  ssae_engine_stats s;
  ssae_engine_stats_get(e, &s);
  if (s.dropped) FAIL("%llu windows dropped", (unsigned long long)s.dropped);
  size_t distinct_scores = 0;
  for (size_t i = 0; i < rd.n; i++) {
    const seen *v = &rd.s[i];
    uint64_t w = v->windows - 1;
    if (w >= MAXW || !r->have[v->ch][w])
      FAIL("reader saw %llu windows on channel %d: no such window scored",
           (unsigned long long)v->windows, v->ch);
    float want = r->score[v->ch][w];
    if (v->score != want)
      FAIL("torn read: channel %d, windows %llu with score %.9g; window %llu "
           "scored %.9g",
           v->ch, (unsigned long long)v->windows, v->score,
           (unsigned long long)w, want);
    if (fabsf(v->smoothed - v->score) > 1e-6f * fabsf(v->score))
      FAIL("torn read: channel %d, windows %llu: smoothed %.9g, score %.9g "
           "(no smoothing)",
           v->ch, (unsigned long long)v->windows, v->smoothed, v->score);
    if (w > 0 && r->score[v->ch][w - 1] != want) distinct_scores++;
  }
  if (rd.n < 50) FAIL("the reader saw only %zu publications", rd.n);
  if (distinct_scores < rd.n / 2)
    FAIL("test signal: successive windows score alike (%zu of %zu)",
         distinct_scores, rd.n);
  printf("consistency: %llu looks, %zu distinct sets seen, each one window's\n",
         (unsigned long long)atomic_load(&rd.looks), rd.n);

  /* 2. pause ends an alarm */
  ssae_engine_params p;
  ssae_engine_get_params(e, &p);
  p.threshold = 1e-12; /* every window above: alarm on */
  ssae_engine_set_params(e, &p);
  for (size_t b = 0; b < 32; b++) ssae_engine_process(e, ptr, B);
  ssae_engine_drain(e);
  ssae_channel_state st;
  ssae_engine_channel_get(e, 0, &st);
  if (!st.alarm) FAIL("no alarm with a threshold of 1e-12");
  pthread_mutex_lock(&r->mu);
  int on0 = r->alarm_on, off0 = r->alarm_off;
  pthread_mutex_unlock(&r->mu);
  if (on0 < C) FAIL("%d alarm_on events for %d channels", on0, C);
  p.enabled = 0;
  ssae_engine_set_params(e, &p);
  uint64_t windows_before = st.windows;
  /* The worker notices the pause on its own (no window comes): wait for it,
   * feeding blocks that must not be analysed meanwhile. */
  int cleared = 0;
  for (int k = 0; k < 400 && !cleared; k++) {
    ssae_engine_process(e, ptr, B);
    sleep_ms(5);
    cleared = 1;
    for (int c = 0; c < C; c++) {
      ssae_engine_channel_get(e, c, &st);
      if (st.alarm) cleared = 0;
    }
  }
  if (!cleared) FAIL("alarms still on 2 s after enabled = 0");
  ssae_engine_channel_get(e, 0, &st);
  if (st.windows != windows_before)
    FAIL("windows analysed while paused (%llu -> %llu)",
         (unsigned long long)windows_before, (unsigned long long)st.windows);
  pthread_mutex_lock(&r->mu);
  int off1 = r->alarm_off, paused = r->off_paused;
  pthread_mutex_unlock(&r->mu);
  if (off1 - off0 != C)
    FAIL("%d alarm_off events on pause, expected %d", off1 - off0, C);
  if (paused != C) FAIL("%d of %d alarm_off events on pause say reason \"paused\"", paused, C);
  /* Resume: analysis and alarms come back. */
  p.enabled = 1;
  ssae_engine_set_params(e, &p);
  for (size_t b = 0; b < 32; b++) ssae_engine_process(e, ptr, B);
  ssae_engine_drain(e);
  ssae_engine_channel_get(e, 0, &st);
  if (st.windows <= windows_before || !st.alarm)
    FAIL("after resume: windows %llu (before %llu), alarm %d",
         (unsigned long long)st.windows, (unsigned long long)windows_before,
         st.alarm);
  printf("pause: %d alarms ended by enabled = 0, analysis resumed\n", C);

  ssae_engine_free(e);

  /* 3. backend failure mid-stream */
  pthread_mutex_destroy(&r->mu);
  memset(r, 0, sizeof *r);
  pthread_mutex_init(&r->mu, NULL);
  setenv("SSAE_BACKEND_FAIL_AT", "3", 1);
  e = ssae_engine_new(m, &cfg, &err);
  unsetenv("SSAE_BACKEND_FAIL_AT");
  if (!e) FAIL("%s", err.msg);
  for (size_t b = 0; b < 64; b++) {
    ssae_engine_process(e, ptr, B);
    if (b % 8 == 7) ssae_engine_drain(e);
  }
  ssae_engine_flush(e);
  ssae_engine_drain(e);
  ssae_engine_stats_get(e, &s);
  if (s.dropped || s.scored != s.windows || s.batches < 3)
    FAIL("fallback: windows %llu scored %llu dropped %llu batches %llu",
         (unsigned long long)s.windows, (unsigned long long)s.scored,
         (unsigned long long)s.dropped, (unsigned long long)s.batches);
  if (strcmp(s.backend, "cpu")) FAIL("fallback: backend %s", s.backend);
  pthread_mutex_lock(&r->mu);
  int nback = r->backend;
  uint64_t per = s.windows / C;
  for (int c = 0; c < C; c++)
    for (uint64_t w = 0; w < per; w++)
      if (!r->have[c][w] || !isfinite(r->score[c][w]))
        FAIL("fallback: channel %d window %llu lost or not scored", c,
             (unsigned long long)w);
  pthread_mutex_unlock(&r->mu);
  if (nback != 1) FAIL("fallback: %d backend events, expected 1", nback);
  ssae_engine_free(e);
  printf("fallback: the third batch failed, %llu windows all scored on the "
         "CPU, reported once\n", (unsigned long long)s.windows);

  ssae_model_free(m);
  pthread_mutex_destroy(&r->mu);
  free(r);
  free(buf);
  free(rd.s);
  return 0;
}
