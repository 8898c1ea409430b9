/* The engine's CUDA device (ssae_engine_cfg.gpu).
 *
 * Argument: none (any host): the refusals: a device the host lacks with
 * backend "cuda" and with "auto" (a GPU asked for is not left for the
 * CPU), a nonzero device with backend "cpu", each with a message naming
 * the device and the host's count (or that the build has no CUDA); device
 * 0 with the CPU scores as before, and "auto" with device 0 runs where
 * there is no GPU.
 *
 * "cuda" (exit 77 on a host of fewer than two GPUs): the same audio
 * through engines on GPU 0 and on GPU 1, on the default path and with the
 * device front end: the same windows, scores within 1e-5 relative; the
 * creating thread's current device is the same after ssae_engine_new,
 * after a model swap and after ssae_engine_free as before, whichever of
 * the two GPUs was current on it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_test_model.h"
#include "ssae_config.h"
#include "ssae_cuda.h"
#include "ssae_engine.h"
#include "../ssae_test.h"

#define C 3
#define MAXW 256
#define RATE 16000
#define SECONDS 3
#define BLOCK 512

typedef struct got {
  float score[C][MAXW];
  int seen[C][MAXW];
  int n, bad;
} got;

static void on_event(void *user, const ssae_event *ev) {
  got *g = user;
  const int r = engine_test_take_window(ev, C, MAXW, &g->score[0][0], &g->seen[0][0]);
  if (r < 0) g->bad = 1;
  else g->n += r;
}

static void cfg_for(ssae_engine_cfg *cfg, got *g, const char *backend, int gpu, int devfe) {
  ssae_engine_cfg_default(cfg);
  cfg->channels = C;
  cfg->input_rate = RATE;
  cfg->backend = backend;
  cfg->gpu = gpu;
  cfg->gpu_frontend = devfe;
  cfg->emit_windows = 1;
  cfg->ring_windows = 4096;
  cfg->on_event = on_event;
  cfg->user = g;
}

static void play(ssae_engine *e, float *const *audio, size_t n) {
  for (size_t i = 0; i < n; i += BLOCK) {
    const size_t k = n - i < BLOCK ? n - i : BLOCK;
    const float *in[C];
    for (int c = 0; c < C; c++) in[c] = audio[c] + i;
    ssae_engine_process(e, in, k);
    ssae_engine_drain(e); /* no drops: every window compared */
  }
  ssae_engine_flush(e);
  ssae_engine_drain(e);
}

/* ssae_engine_new refuses cfg; the message has both words. */
static void refused(const ssae_model *m, const char *backend, int gpu, const char *w1,
                    const char *w2) {
  got g;
  memset(&g, 0, sizeof g);
  ssae_engine_cfg cfg;
  cfg_for(&cfg, &g, backend, gpu, 0);
  ssae_err err = {{0}};
  ssae_engine *e = ssae_engine_new(m, &cfg, &err);
  CHECK(!e, "backend %s, gpu %d: accepted", backend, gpu);
  ssae_engine_free(e);
  if (e) return;
  CHECK(strstr(err.msg, w1) && (!w2 || strstr(err.msg, w2)),
        "backend %s, gpu %d: message lacks '%s' / '%s': %s", backend, gpu, w1,
        w2 ? w2 : "", err.msg);
  printf("ok  backend %s, gpu %d refused: %s\n", backend, gpu, err.msg);
}

/* Runs an engine over the audio; 0, or -1 after a failed check. */
static int run(const ssae_model *m, const char *backend, int gpu, int devfe, got *g,
               float *const *audio, size_t n, char *backend_used, size_t len) {
  memset(g, 0, sizeof *g);
  ssae_engine_cfg cfg;
  cfg_for(&cfg, g, backend, gpu, devfe);
  ssae_err err = {{0}};
  ssae_engine *e = ssae_engine_new(m, &cfg, &err);
  CHECK(e != NULL, "backend %s, gpu %d%s: %s", backend, gpu, devfe ? ", device front end" : "",
        err.msg);
  if (!e) return -1;
  play(e, audio, n);
  ssae_engine_stats s;
  ssae_engine_stats_get(e, &s);
  snprintf(backend_used, len, "%s", s.backend);
  CHECK(s.dropped == 0 && s.scored == s.windows && g->n > 0 && !g->bad,
        "backend %s, gpu %d: %llu windows, %llu scored, %llu dropped, %d seen%s", backend, gpu,
        (unsigned long long)s.windows, (unsigned long long)s.scored,
        (unsigned long long)s.dropped, g->n, g->bad ? ", some twice" : "");
  ssae_engine_free(e);
  return 0;
}

static void refusals(const ssae_model *m, float *const *audio, size_t n) {
  /* A device index this host lacks, whatever its count. */
  const int count = ssae_cuda_device_count(), missing = count + 5;
  char dev[32];
  snprintf(dev, sizeof dev, "CUDA device %d", missing);
  const char *why = SSAE_HAVE_CUDA ? "this host has" : "no CUDA";
  refused(m, "cuda", missing, dev, why);
  refused(m, "auto", missing, dev, why);
  refused(m, "cpu", 1, "gpu 1", "not with backend cpu");
  refused(m, "cuda", -1, "gpu -1", "0 or more");
  static got g;
  char used[16];
  if (!run(m, "cpu", 0, 0, &g, audio, n, used, sizeof used))
    CHECK(!strcmp(used, "cpu"), "backend cpu, gpu 0: ran on %s", used);
  if (!count && !run(m, "auto", 0, 0, &g, audio, n, used, sizeof used))
    CHECK(!strcmp(used, "cpu"), "backend auto, gpu 0, no GPU: ran on %s", used);
  printf("ok  gpu 0 with the CPU backend, and auto without a GPU\n");
}

/* Makes dev current on this thread (it stays: the caller's device under
 * test). */
static void make_current(int dev) {
  int prev;
  ssae_err err = {{0}};
  if (ssae_cuda_device_enter(dev, &prev, &err)) FAIL("%s", err.msg);
}

/* The same windows, scores within 1e-5 relative. */
static void compare(const got *a, const got *b, const char *what) {
  int diff = 0;
  double worst = 0;
  for (int c = 0; c < C; c++)
    for (int w = 0; w < MAXW; w++) {
      if (a->seen[c][w] != b->seen[c][w]) {
        diff++;
        continue;
      }
      if (!a->seen[c][w]) continue;
      const double x = a->score[c][w], y = b->score[c][w];
      const double rel = fabs(x - y) / fmax(fmax(fabs(x), fabs(y)), 1e-30);
      if (rel > worst) worst = rel;
    }
  CHECK(a->n == b->n && !diff && worst <= 1e-5,
        "%s: %d windows on GPU 0, %d on GPU 1, %d not on both, worst relative score "
        "difference %.3g",
        what, a->n, b->n, diff, worst);
  printf("ok  %s: %d windows alike on GPU 0 and GPU 1 (worst relative difference %.3g)\n",
         what, a->n, worst);
}

/* The caller's current device stays `own` through new, a swap, free. */
static void caller_device_kept(const ssae_model *m, const ssae_model *m2, int own, int gpu,
                               int devfe) {
  make_current(own);
  static got g;
  memset(&g, 0, sizeof g);
  ssae_engine_cfg cfg;
  cfg_for(&cfg, &g, "cuda", gpu, devfe);
  ssae_err err = {{0}};
  ssae_engine *e = ssae_engine_new(m, &cfg, &err);
  CHECK(e != NULL, "gpu %d: %s", gpu, err.msg);
  if (!e) return;
  const char *path = devfe ? "device front end" : "default path";
  CHECK(ssae_cuda_current_device() == own, "%s, gpu %d: ssae_engine_new left device %d "
        "current on its caller, which had %d", path, gpu, ssae_cuda_current_device(), own);
  if (!devfe) {
    CHECK(ssae_engine_swap_model(e, m2, &err) == 0, "swap: %s", err.msg);
    CHECK(ssae_cuda_current_device() == own, "%s, gpu %d: the model swap left device %d "
          "current on its caller, which had %d", path, gpu, ssae_cuda_current_device(), own);
  }
  ssae_engine_free(e);
  CHECK(ssae_cuda_current_device() == own, "%s, gpu %d: ssae_engine_free left device %d "
        "current on its caller, which had %d", path, gpu, ssae_cuda_current_device(), own);
  printf("ok  %s on GPU %d: the caller's device %d kept\n", path, gpu, own);
}

static void two_gpus(const ssae_model *m, const ssae_model *m2, float *const *audio, size_t n) {
  static got on0, on1;
  char used[16];
  for (int devfe = 0; devfe < 2; devfe++) {
    const char *what = devfe ? "device front end" : "default path";
    make_current(0);
    if (run(m, "cuda", 0, devfe, &on0, audio, n, used, sizeof used) ||
        run(m, "cuda", 1, devfe, &on1, audio, n, used, sizeof used))
      continue;
    CHECK(!strcmp(used, "cuda"), "%s on GPU 1: ran on %s", what, used);
    compare(&on0, &on1, what);
    caller_device_kept(m, m2, 0, 1, devfe);
    caller_device_kept(m, m2, 1, 0, devfe);
  }
  /* "auto" takes GPU 1 when asked for it. */
  make_current(0);
  if (!run(m, "auto", 1, 0, &on1, audio, n, used, sizeof used))
    CHECK(!strcmp(used, "cuda") && ssae_cuda_current_device() == 0,
          "auto on GPU 1: ran on %s, caller's device %d", used, ssae_cuda_current_device());
}

int main(int argc, char **argv) {
  const int cuda = argc > 1 && !strcmp(argv[1], "cuda");
  if (cuda && ssae_cuda_device_count() < 2) {
    printf("fewer than two CUDA devices here (%d): skipped\n", ssae_cuda_device_count());
    return 77;
  }
  ssae_model *m = engine_test_model(7, 1.0), *m2 = engine_test_model(8, 1.0);
  if (!m || !m2) FAIL("no model");
  const size_t n = (size_t)SECONDS * RATE;
  float *audio[C];
  for (int c = 0; c < C; c++) {
    if (!(audio[c] = malloc(n * sizeof(float)))) FAIL("out of memory");
    engine_test_audio(audio[c], n, c, RATE);
  }
  if (cuda) two_gpus(m, m2, audio, n);
  else refusals(m, audio, n);
  for (int c = 0; c < C; c++) free(audio[c]);
  ssae_model_free(m);
  ssae_model_free(m2);
  if (failures) return 1;
  printf("OK\n");
  return 0;
}
