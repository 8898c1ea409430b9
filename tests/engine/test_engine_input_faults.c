/* What the engine does with faults at its input (issue 18):
 * 1. NaN and infinite samples are taken as digital silence: the channel
 *    fed them gets finite scores and raises no alarm (its windows are
 *    scored, not judged), a clean channel beside it is unaffected (it
 *    alarms at a tiny threshold), and every bad sample is counted in
 *    ssae_engine_stats.nonfinite, through the planar and the interleaved
 *    paths alike.
 * 2. ssae_engine_note_xrun counts what an audio adapter reports
 *    (stats.xruns), and the STATUS event's JSON carries both counters. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_test_model.h"
#include "ssae_engine.h"

#define FAIL(...)                 \
  do {                            \
    fprintf(stderr, "FAIL: ");    \
    fprintf(stderr, __VA_ARGS__); \
    fprintf(stderr, "\n");        \
    exit(1);                      \
  } while (0)

#define N 16000 /* one second at the model's rate */
#define BLOCK 500

typedef struct rec {
  pthread_mutex_t mu;
  int alarm_on[2];
  char status[2048];
} rec;

static void on_event(void *user, const ssae_event *ev) {
  rec *r = user;
  pthread_mutex_lock(&r->mu);
  if (ev->type == SSAE_EVENT_ALARM_ON && ev->channel >= 0 && ev->channel < 2)
    r->alarm_on[ev->channel]++;
  if (ev->type == SSAE_EVENT_STATUS) ssae_event_json(ev, r->status, sizeof r->status);
  pthread_mutex_unlock(&r->mu);
}

static void run(int interleaved) {
  ssae_model *m = engine_test_model(7, 1e-9);
  if (!m) exit(1);
  rec r = {PTHREAD_MUTEX_INITIALIZER, {0, 0}, ""};
  ssae_engine_cfg cfg;
  ssae_engine_cfg_default(&cfg);
  cfg.channels = 2;
  cfg.backend = "cpu";
  cfg.cpu_threads = 1;
  cfg.on_event = on_event;
  cfg.user = &r;
  ssae_err err = {{0}};
  ssae_engine *e = ssae_engine_new(m, &cfg, &err);
  if (!e) FAIL("engine: %s", err.msg);
  /* Channel 0: a tone; channel 1: NaN, +Inf and -Inf in turn. */
  static float ch[2][N], il[2 * N];
  const float bad[3] = {NAN, INFINITY, -INFINITY};
  for (int k = 0; k < N; k++) {
    ch[0][k] = 0.3f * sinf(0.05f * (float)k);
    ch[1][k] = bad[k % 3];
    il[2 * k] = ch[0][k];
    il[2 * k + 1] = ch[1][k];
  }
  for (int off = 0; off < N; off += BLOCK) {
    if (interleaved) {
      ssae_engine_process_interleaved(e, il + 2 * off, BLOCK);
    } else {
      const float *in[2] = {ch[0] + off, ch[1] + off};
      ssae_engine_process(e, in, BLOCK);
    }
  }
  ssae_engine_flush(e);
  ssae_engine_note_xrun(e, 2);
  ssae_engine_note_xrun(e, 1);
  ssae_engine_drain(e);
  ssae_engine_stats s;
  ssae_engine_stats_get(e, &s);
  ssae_channel_state st0, st1;
  ssae_engine_channel_get(e, 0, &st0);
  ssae_engine_channel_get(e, 1, &st1);
  const char *how = interleaved ? "interleaved" : "planar";
  if (s.nonfinite != N) FAIL("%s: %llu non-finite samples counted, %d fed", how,
                             (unsigned long long)s.nonfinite, N);
  if (s.xruns != 3) FAIL("%s: %llu xruns counted, 3 noted", how, (unsigned long long)s.xruns);
  if (st1.windows == 0 || st1.windows != st0.windows)
    FAIL("%s: windows scored: %llu on the clean channel, %llu on the NaN one", how,
         (unsigned long long)st0.windows, (unsigned long long)st1.windows);
  if (!isfinite(st1.score) || !isfinite(st1.smoothed))
    FAIL("%s: the NaN channel's score is %g (smoothed %g)", how, st1.score, st1.smoothed);
  pthread_mutex_lock(&r.mu);
  int on0 = r.alarm_on[0], on1 = r.alarm_on[1];
  pthread_mutex_unlock(&r.mu);
  if (on0 == 0 || on1 != 0)
    FAIL("%s: alarms: %d on the clean channel (want some), %d on the NaN one (want none)",
         how, on0, on1);
  ssae_engine_free(e); /* the final STATUS event */
  char want[64];
  snprintf(want, sizeof want, "\"xruns\":3,\"nonfinite\":%d", N);
  if (!strstr(r.status, want)) FAIL("%s: the final status event lacks %s: %s", how, want, r.status);
  ssae_model_free(m);
  printf("ok %s: %d non-finite samples as silence, 3 xruns, status event %s", how, N, r.status);
}

int main(void) {
  run(0);
  run(1);
  return 0;
}
