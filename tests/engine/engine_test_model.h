/* The engine tests' model: default dimensions, weights drawn from a seed
 * (ssae_model_init), the given threshold. NULL (the reason printed) when it
 * cannot be made. */
#ifndef ENGINE_TEST_MODEL_H
#define ENGINE_TEST_MODEL_H

#include <stdint.h>
#include <stdio.h>

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

#endif
