/* Several models on one engine (ssae_engine_cfg.channel_models: one per
 * machine). Channels 0, 2, 4 ... run model A, 1, 3, 5 ... model B; the
 * same audio through an engine of A alone and one of B alone is the
 * reference: every window of the mixed engine must carry its channel's
 * model's score (the very float on the CPU; within 1e-5 on the GPU, whose
 * batches differ in size). Then: each channel's default threshold is its
 * own model's, a channel's own detector parameters apply to it alone and
 * can be taken back; ssae_engine_swap_models in mid-stream turns the
 * mapping round between two batches with no window lost or scored twice;
 * models whose features differ are refused with the setting named.
 *
 * Argument: "cuda" runs the engines on the GPU (exit 77 without one). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_test_model.h"
#include "ssae_backend.h"
#include "ssae_engine.h"
#include "../ssae_test.h"

#define C 6
#define MAXW 512
#define SECONDS 3

typedef struct got {
  float score[C][MAXW];
  int seen[C][MAXW];
  int alarms_on[C];
  int bad;
} got;

static void on_event(void *user, const ssae_event *ev) {
  got *g = user;
  if (ev->type == SSAE_EVENT_ALARM_ON && ev->channel >= 0 && ev->channel < C)
    g->alarms_on[ev->channel]++;
  if (engine_test_take_window(ev, C, MAXW, &g->score[0][0], &g->seen[0][0]) < 0) g->bad = 1;
}

static const char *backend = "cpu";

static void cfg_for(ssae_engine_cfg *cfg, got *g) {
  ssae_engine_cfg_default(cfg);
  cfg->channels = C;
  cfg->backend = backend;
  cfg->emit_windows = 1;
  cfg->ring_windows = 4096;
  cfg->on_event = on_event;
  cfg->user = g;
}

/* Plays the audio through e (blocks of 512, then flush); when swap_to is
 * given, swaps to those models after half the audio. */
static int play(ssae_engine *e, float *const *audio, size_t n,
                const ssae_model *const *swap_to) {
  for (size_t i = 0; i < n; i += 512) {
    if (swap_to && i == (n / 2 / 512) * 512) {
      ssae_err err = {{0}};
      if (ssae_engine_swap_models(e, swap_to, &err)) {
        fprintf(stderr, "swap: %s\n", err.msg);
        return -1;
      }
    }
    const float *in[C];
    size_t k = n - i < 512 ? n - i : 512;
    for (int c = 0; c < C; c++) in[c] = audio[c] + i;
    ssae_engine_process(e, in, k);
  }
  ssae_engine_flush(e);
  ssae_engine_drain(e);
  return 0;
}

static int close_to(float a, float b) {
  if (!strcmp(backend, "cpu")) return memcmp(&a, &b, sizeof a) == 0;
  return fabsf(a - b) <= 1e-5f * fabsf(b) + 1e-12f;
}

int main(int argc, char **argv) {
  if (argc > 1) backend = argv[1];
  if (!strcmp(backend, "cuda")) {
    ssae_err e = {{0}};
    ssae_model *probe = engine_test_model(1, 1.0);
    ssae_backend *b = probe ? ssae_backend_new(probe, "cuda", 0, &e) : NULL;
    if (!b) {
      fprintf(stderr, "SKIP: no CUDA backend here: %s\n", e.msg);
      ssae_model_free(probe);
      return 77;
    }
    ssae_backend_free(b);
    ssae_model_free(probe);
  }
  int fails = 0;
  ssae_model *A = engine_test_model(11, 0.125), *B = engine_test_model(22, 0.5);
  ssae_model *D = engine_test_model(33, 0.25);
  CHECK(A && B && D, "A && B && D");
  if (!A || !B || !D) return 1;
  const size_t n = (size_t)SECONDS * 16000;
  float *audio[C];
  for (int c = 0; c < C; c++) {
    audio[c] = malloc(n * sizeof(float));
    CHECK(audio[c] != NULL, "audio[c] != NULL");
    if (!audio[c]) return 1;
    engine_test_audio(audio[c], n, c, 16000);
  }
  static got ga, gb, gm, gs;
  ssae_engine_cfg cfg;
  ssae_err err = {{0}};

  /* The references: every channel on A, every channel on B. */
  cfg_for(&cfg, &ga);
  ssae_engine *e = ssae_engine_new(A, &cfg, &err);
  CHECK(e != NULL, "engine A: %s", err.msg);
  if (!e) return 1;
  play(e, audio, n, NULL);
  ssae_engine_free(e);
  cfg_for(&cfg, &gb);
  e = ssae_engine_new(B, &cfg, &err);
  CHECK(e != NULL, "engine B: %s", err.msg);
  if (!e) return 1;
  play(e, audio, n, NULL);
  ssae_engine_free(e);

  /* Mixed: even channels A, odd B; channel 1 with its own (tiny)
   * threshold, every other channel the engine's (none: its model's). */
  const ssae_model *mix[C], *swapped[C];
  for (int c = 0; c < C; c++) {
    mix[c] = c % 2 ? B : A;
    swapped[c] = c % 2 ? A : B;
  }
  ssae_engine_params own[C];
  cfg_for(&cfg, &gm);
  for (int c = 0; c < C; c++) own[c] = cfg.params;
  own[1].threshold = 1e-12;
  cfg.channel_models = mix;
  cfg.params.threshold = NAN;
  e = ssae_engine_new(D, &cfg, &err); /* every channel has its own: D unused */
  CHECK(e != NULL, "mixed engine: %s", err.msg);
  if (!e) return 1;
  ssae_channel_state st;
  ssae_engine_channel_get(e, 0, &st);
  CHECK(fabsf(st.threshold - 0.125f) < 1e-7f, "channel 0's threshold %g, not A's",
            (double)st.threshold);
  ssae_engine_channel_get(e, 1, &st);
  CHECK(fabsf(st.threshold - 0.5f) < 1e-7f, "channel 1's threshold %g, not B's",
            (double)st.threshold);
  ssae_engine_set_channel_params(e, 1, &own[1]);
  ssae_engine_params p;
  ssae_engine_get_channel_params(e, 1, &p);
  CHECK(p.threshold == 1e-12, "p.threshold == 1e-12");
  play(e, audio, n, NULL);
  ssae_engine_channel_get(e, 1, &st);
  CHECK(st.threshold == (float)1e-12 && st.alarm == 1,
            "channel 1: threshold %g alarm %d", (double)st.threshold, st.alarm);
  CHECK(gm.alarms_on[1] == 1, "channel 1 raised %d alarms", gm.alarms_on[1]);
  ssae_engine_channel_get(e, 3, &st);
  CHECK(fabsf(st.threshold - 0.5f) < 1e-7f, "channel 3 threshold %g",
            (double)st.threshold);
  ssae_engine_set_channel_params(e, 1, NULL);
  ssae_engine_get_channel_params(e, 1, &p);
  CHECK(isnan(p.threshold), "isnan(p.threshold)");
  ssae_engine_stats stats;
  ssae_engine_stats_get(e, &stats);
  ssae_engine_free(e);
  CHECK(!ga.bad && !gb.bad && !gm.bad, "!ga.bad && !gb.bad && !gm.bad");
  CHECK(stats.dropped == 0, "stats.dropped == 0");
  size_t windows = 0;
  for (int c = 0; c < C; c++)
    for (int w = 0; w < MAXW; w++) {
      if (!ga.seen[c][w]) continue;
      windows++;
      const float want = c % 2 ? gb.score[c][w] : ga.score[c][w];
      if (!gm.seen[c][w] || !close_to(gm.score[c][w], want)) {
        if (fails++ < 5)
          fprintf(stderr, "channel %d window %d: %.9g, its model's %.9g (seen %d)\n", c, w,
                  (double)gm.score[c][w], (double)want, gm.seen[c][w]);
      }
    }
  CHECK(windows > (size_t)C * 50, "only %zu windows", windows);
  CHECK(fails == 0, "%d windows not scored by their channel's model", fails);

  /* The swap: each channel's windows follow the first mapping, then the
   * other, switching once; every window scored once. */
  cfg_for(&cfg, &gs);
  cfg.channel_models = mix;
  e = ssae_engine_new(A, &cfg, &err);
  CHECK(e != NULL, "swap engine: %s", err.msg);
  if (!e) return 1;
  CHECK(play(e, audio, n, swapped) == 0, "play(e, audio, n, swapped) == 0");
  ssae_engine_stats_get(e, &stats);
  ssae_engine_free(e);
  CHECK(stats.dropped == 0 && stats.scored == stats.windows,
            "swap: %llu made, %llu scored, %llu dropped",
            (unsigned long long)stats.windows, (unsigned long long)stats.scored,
            (unsigned long long)stats.dropped);
  for (int c = 0; c < C; c++) {
    int phase = 0, last = -1; /* 0: old models, 1: new */
    for (int w = 0; w < MAXW; w++) {
      if (!ga.seen[c][w]) continue;
      last = w;
      CHECK(gs.seen[c][w], "swap: channel %d window %d lost", c, w);
      const float old = c % 2 ? gb.score[c][w] : ga.score[c][w];
      const float now = c % 2 ? ga.score[c][w] : gb.score[c][w];
      if (phase == 0 && !close_to(gs.score[c][w], old)) phase = 1;
      CHECK(close_to(gs.score[c][w], phase ? now : old),
                "swap: channel %d window %d: %.9g is neither model's in order", c, w,
                (double)gs.score[c][w]);
    }
    CHECK(phase == 1 && last > 0, "swap: channel %d never changed model", c);
  }
  CHECK(!gs.bad, "!gs.bad");

  /* Features that differ are refused, naming the setting. */
  D->feat.hop_length = 256;
  const ssae_model *bad[C];
  for (int c = 0; c < C; c++) bad[c] = c == 4 ? D : A;
  static got gx;
  cfg_for(&cfg, &gx);
  cfg.channel_models = bad;
  err.msg[0] = 0;
  e = ssae_engine_new(A, &cfg, &err);
  CHECK(e == NULL && strstr(err.msg, "channel 4") && strstr(err.msg, "hop_length"),
            "different features: %s", err.msg);
  ssae_engine_free(e);
  cfg.channel_models = NULL;
  e = ssae_engine_new(A, &cfg, &err);
  CHECK(e != NULL, "e != NULL");
  err.msg[0] = 0;
  CHECK(e && ssae_engine_swap_models(e, bad, &err) != 0 && strstr(err.msg, "hop_length"),
            "swap to different features: %s", err.msg);
  ssae_engine_free(e);

  for (int c = 0; c < C; c++) free(audio[c]);
  ssae_model_free(A);
  ssae_model_free(B);
  ssae_model_free(D);
  return failures ? 1 : 0;
}
