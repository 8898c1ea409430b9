/* Overload: a deliberately slow backend (the engine's test hook) makes the
 * ring overflow. The newest windows are dropped and counted (per channel and
 * in total), a "dropped" event and the final status report them, and the
 * audio thread never waits: every process() call stays far below the
 * backend's delay. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_test_model.h"
#include "ssae_engine.h"

static atomic_ullong drop_events, last_status_dropped, status_events;

static void on_event(void *user, const ssae_event *ev) {
  (void)user;
  if (ev->type == SSAE_EVENT_DROP) atomic_fetch_add(&drop_events, 1);
  if (ev->type == SSAE_EVENT_STATUS && ev->stats) {
    atomic_fetch_add(&status_events, 1);
    atomic_store(&last_status_dropped, ev->stats->dropped);
    char line[1024];
    if (ssae_event_json(ev, line, sizeof line) < 0 || !strstr(line, "\"dropped\":")) {
      fprintf(stderr, "status line lacks the drop counter: %s\n", line);
      exit(1);
    }
  }
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int main(void) {
  ssae_err err;
  ssae_model *m = engine_test_model(3, NAN);
  if (!m) return 1;

  const int C = 4;
  const unsigned slow_us = 50000; /* 50 ms per batch of 2 windows */
  ssae_engine_cfg cfg;
  ssae_engine_cfg_default(&cfg);
  cfg.channels = C;
  cfg.backend = "cpu";
  cfg.ring_windows = 32;
  cfg.max_batch = 2;
  cfg.slow_backend_us = slow_us;
  cfg.status_every_s = 0.5;
  cfg.on_event = on_event;
  ssae_engine *e = ssae_engine_new(m, &cfg, &err);
  if (!e) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  const size_t B = 256;
  float *buf = calloc(B * (size_t)C, sizeof(float));
  const float *ptr[4];
  uint32_t x = 12345;
  for (size_t i = 0; i < B * (size_t)C; i++) {
    x = x * 1664525u + 1013904223u;
    buf[i] = (float)(x >> 8) / 16777216.0f - 0.5f;
  }
  for (int c = 0; c < C; c++) ptr[c] = buf + (size_t)c * B;
  /* 4 s of audio at 8x real time: 2000 windows against a backend that
   * manages 40 windows/s. */
  double worst = 0;
  size_t blocks = 4 * 16000 / B;
  for (size_t b = 0; b < blocks; b++) {
    double t0 = now_ms();
    ssae_engine_process(e, ptr, B);
    double dt = now_ms() - t0;
    if (dt > worst) worst = dt;
    struct timespec pace = {0, (long)(B * 1e9 / 16000 / 8)};
    nanosleep(&pace, NULL);
  }
  ssae_engine_drain(e);
  ssae_engine_stats s;
  ssae_engine_stats_get(e, &s);
  uint64_t per_ch = 0;
  for (int c = 0; c < C; c++) {
    ssae_channel_state st;
    ssae_engine_channel_get(e, c, &st);
    per_ch += st.dropped;
  }
  ssae_engine_free(e);
  ssae_model_free(m);
  free(buf);
  printf("windows %llu scored %llu dropped %llu (per channel sum %llu), drop "
         "events %llu, final status dropped %llu, slowest process() %.3f ms "
         "(backend delay %.0f ms)\n",
         (unsigned long long)s.windows, (unsigned long long)s.scored,
         (unsigned long long)s.dropped, (unsigned long long)per_ch,
         (unsigned long long)atomic_load(&drop_events),
         (unsigned long long)atomic_load(&last_status_dropped), worst,
         slow_us / 1000.0);
  int bad = 0;
  if (s.dropped == 0) bad = fprintf(stderr, "FAIL: no drops\n");
  if (s.scored + s.dropped != s.windows)
    bad = fprintf(stderr, "FAIL: scored + dropped != windows\n");
  if (per_ch != s.dropped) bad = fprintf(stderr, "FAIL: per-channel drops differ\n");
  if (!atomic_load(&drop_events)) bad = fprintf(stderr, "FAIL: no dropped event\n");
  if (atomic_load(&last_status_dropped) != s.dropped)
    bad = fprintf(stderr, "FAIL: the final status does not report the drops\n");
  /* The audio thread never waits for the backend: a block's work is a few
   * FFTs, far below one 50 ms backend call even on a loaded machine. */
  if (worst > 25.0)
    bad = fprintf(stderr, "FAIL: a process() call took %.1f ms\n", worst);
  return bad ? 1 : 0;
}
