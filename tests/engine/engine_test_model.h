/* The engine tests' model: default dimensions, weights drawn from a seed
 * (ssae_model_init), the given threshold. NULL (the reason printed) when it
 * cannot be made. And their audio: channel c a tone of its own and noise of
 * its own. */
#ifndef ENGINE_TEST_MODEL_H
#define ENGINE_TEST_MODEL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ssae_engine.h"
#include "ssae_model.h"

static inline ssae_model *engine_test_model(uint64_t seed, double threshold) {
  ssae_err err = {{0}};
  ssae_dims d;
  ssae_dims_default(&d);
  ssae_model *m = ssae_model_new(&d, &err);
  if (m) {
    ssae_model_init(m, seed);
    if (ssae_model_update(m, &err)) {
      ssae_model_free(m);
      m = NULL;
    }
  }
  if (!m) {
    fprintf(stderr, "model: %s\n", err.msg);
    return NULL;
  }
  m->threshold = threshold;
  return m;
}

/* A WINDOW event into score/seen (arrays of channels x max_windows, row
 * per channel): 1 when taken, 0 for another event, -1 for a window out of
 * range or seen twice (every window comes once). */
static inline int engine_test_take_window(const ssae_event *ev, int channels, size_t max_windows,
                                          float *score, int *seen) {
  if (ev->type != SSAE_EVENT_WINDOW) return 0;
  if (ev->channel < 0 || ev->channel >= channels || ev->window >= max_windows) return -1;
  const size_t i = (size_t)ev->channel * max_windows + ev->window;
  if (seen[i]) return -1;
  score[i] = (float)ev->score;
  seen[i] = 1;
  return 1;
}

/* n samples at rate: a tone at 200 + 150 c Hz and uniform noise seeded by c. */
static inline void engine_test_audio(float *x, size_t n, int c, double rate) {
  uint64_t s = 0x9E3779B97F4A7C15ull * (uint64_t)(c + 1);
  for (size_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double u = (double)(s >> 11) * 0x1.0p-53 - 0.5;
    x[i] = (float)(0.3 * sin(2 * M_PI * (200.0 + 150.0 * c) * (double)i / rate) + 0.1 * u);
  }
}

#endif
