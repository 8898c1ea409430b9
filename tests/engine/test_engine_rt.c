/* Real-time safety: the test's own "audio thread" drives the engine while
 * malloc, calloc, realloc, free, pthread_mutex_lock, nanosleep, usleep,
 * clock_nanosleep, sleep and write are interposed (tests/ssae_rt_interpose.h:
 * this executable defines them, which takes precedence over libc for every
 * library in the process).
 * A call from a thread marked as the audio thread while it is inside the
 * engine fails the test. Covers: resampling (48 kHz input), blocks of 1 to
 * 8192 samples, interleaved input, flush, parameter changes and state reads
 * from the audio thread, a full ring (drops) with a slow backend, and many
 * channels (frames of eight channels computed side by side; channel counts
 * that are not a multiple of eight). */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine_test_model.h"
#include "ssae_engine.h"

#include "../ssae_rt_interpose.h"

#ifndef SSAE_RT_SANITIZED

static atomic_ullong events_seen;
static void on_event(void *user, const ssae_event *ev) {
  (void)user;
  char line[1024];
  /* The worker may format and print: not the audio thread. */
  if (ssae_event_json(ev, line, sizeof line) > 0) atomic_fetch_add(&events_seen, 1);
}

typedef struct run {
  ssae_engine *e;
  int channels;
  double seconds, rate;
  int interleaved;
  int group; /* -1: every channel (process); else this group's audio thread */
} run;

static _Thread_local uint64_t rng = 88172645463325252ULL;
static uint32_t next_u32(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)rng;
}

static void *audio_thread(void *arg) {
  run *r = arg;
  const size_t maxb = 8192;
  size_t total = (size_t)(r->seconds * r->rate);
  float *buf = __libc_malloc(maxb * (size_t)r->channels * sizeof(float));
  const float *ptrs[64];
  for (size_t i = 0; i < maxb * (size_t)r->channels; i++)
    buf[i] = (float)((double)next_u32() / 4294967296.0 - 0.5) * 0.2f;
  for (int c = 0; c < r->channels; c++) ptrs[c] = buf + (size_t)c * maxb;
  int c0 = 0, nc = r->channels;
  if (r->group >= 0) ssae_engine_group_channels(r->e, r->group, &c0, &nc);
  ssae_engine_params p;
  ssae_channel_state st;
  size_t done = 0;
  int k = 0;
  while (done < total) {
    size_t n = (k % 7 == 0) ? 1 + next_u32() % maxb : 1 + next_u32() % 1024;
    if (n > total - done) n = total - done;
    in_audio = 1;
    if (r->group >= 0)
      ssae_engine_process_group(r->e, r->group, ptrs + c0, n);
    else if (r->interleaved)
      ssae_engine_process_interleaved(r->e, buf, n);
    else
      ssae_engine_process(r->e, ptrs, n);
    ssae_engine_get_params(r->e, &p);
    p.smoothing_s = (k & 1) ? 0.05 : 0.2;
    p.threshold = (k & 2) ? 0.5 : NAN;
    ssae_engine_set_params(r->e, &p);
    for (int c = c0; c < c0 + nc; c++) ssae_engine_channel_get(r->e, c, &st);
    in_audio = 0;
    done += n;
    k++;
  }
  in_audio = 1;
  if (r->group >= 0)
    ssae_engine_flush_group(r->e, r->group);
  else
    ssae_engine_flush(r->e);
  in_audio = 0;
  __libc_free(buf);
  return NULL;
}

static int one(const char *what, const ssae_model *m, int channels, double rate,
               int interleaved, unsigned slow_us, size_t ring, int expect_drops, int groups) {
  ssae_engine_cfg cfg;
  ssae_engine_cfg_default(&cfg);
  cfg.channels = channels;
  cfg.input_rate = rate;
  cfg.backend = "cpu";
  cfg.on_event = on_event;
  cfg.status_every_s = 1.0;
  cfg.emit_windows = 1;
  cfg.slow_backend_us = slow_us;
  cfg.ring_windows = ring;
  cfg.max_batch = slow_us ? 4 : 0;
  cfg.max_block = 2048; /* larger blocks are split */
  cfg.groups = groups;
  ssae_err err;
  ssae_engine *e = ssae_engine_new(m, &cfg, &err);
  if (!e) {
    fprintf(stderr, "%s: %s\n", what, err.msg);
    return 1;
  }
  /* One audio thread, or one per input group. */
  run r[8];
  pthread_t th[8];
  const int nt = groups > 1 ? groups : 1;
  for (int g = 0; g < nt; g++) {
    r[g] = (run){e, channels, 6.0, rate, interleaved, groups > 1 ? g : -1};
    pthread_create(&th[g], NULL, audio_thread, &r[g]);
  }
  for (int g = 0; g < nt; g++) pthread_join(th[g], NULL);
  ssae_engine_drain(e);
  ssae_engine_stats s;
  ssae_engine_stats_get(e, &s);
  ssae_engine_free(e);
  printf("%s: windows %llu scored %llu dropped %llu batches %llu\n", what,
         (unsigned long long)s.windows, (unsigned long long)s.scored,
         (unsigned long long)s.dropped, (unsigned long long)s.batches);
  /* 6 s at 16 kHz = 188 frames -> 184 windows per channel after flush. */
  uint64_t per = 184;
  if (s.windows < per * (uint64_t)channels - 2 * (uint64_t)channels ||
      s.windows > per * (uint64_t)channels + 2 * (uint64_t)channels) {
    fprintf(stderr, "%s: expected about %llu windows, got %llu\n", what,
            (unsigned long long)(per * channels), (unsigned long long)s.windows);
    return 1;
  }
  if (s.scored + s.dropped != s.windows) {
    fprintf(stderr, "%s: scored + dropped != windows\n", what);
    return 1;
  }
  if (expect_drops && s.dropped == 0) {
    fprintf(stderr, "%s: the slow backend did not make the ring overflow\n", what);
    return 1;
  }
  if (!expect_drops && s.dropped) {
    fprintf(stderr, "%s: unexpected drops\n", what);
    return 1;
  }
  return 0;
}

int main(void) {
  ssae_model *m = engine_test_model(1, 100.0);
  if (!m) return 1;
  int bad = 0;
  /* The audio threads run flat out, not at real-time pace: the cases that
   * expect no drop have rings that hold every window (up to 37 x 184), so
   * that a worker starved by other work on the machine (a GPU test's CPU
   * reference on every core, say) cannot drop one. */
  const size_t all = 8192;
  bad |= one("16 kHz planar, 2 ch", m, 2, 16000, 0, 0, all, 0, 1);
  bad |= one("48 kHz planar (resampled), 3 ch", m, 3, 48000, 0, 0, all, 0, 1);
  bad |= one("44.1 kHz interleaved (resampled), 2 ch", m, 2, 44100, 1, 0, all, 0, 1);
  bad |= one("slow backend, full ring", m, 2, 16000, 0, 20000, 16, 1, 1);
  bad |= one("16 kHz planar, 37 ch", m, 37, 16000, 0, 0, all, 0, 1);
  bad |= one("48 kHz interleaved (resampled), 19 ch", m, 19, 48000, 1, 0, all, 0, 1);
  bad |= one("slow backend, full ring, 64 ch", m, 64, 16000, 0, 20000, 64, 1, 1);
  /* Several audio threads run flat out on few cores here: the same. */
  bad |= one("16 kHz planar, 37 ch in 4 groups, an audio thread each", m, 37, 16000, 0, 0,
             4096, 0, 4);
  bad |= one("48 kHz planar (resampled), 19 ch in 3 groups, a thread each", m, 19, 48000, 0,
             0, 4096, 0, 3);
  bad |= one("slow backend, full rings, 64 ch in 8 groups", m, 64, 16000, 0, 20000, 64, 1, 8);
  ssae_model_free(m);
  int v = atomic_load(&violations);
  if (v) {
    fprintf(stderr, "FAIL: %d forbidden calls on the audio thread (first: %s)\n",
            v, atomic_load(&first_violation));
    return 1;
  }
  if (!atomic_load(&events_seen)) {
    fprintf(stderr, "FAIL: no events\n");
    return 1;
  }
  printf("no allocation, lock, sleep or write on the audio thread\n");
  return bad;
}
#endif /* SSAE_RT_SANITIZED */
