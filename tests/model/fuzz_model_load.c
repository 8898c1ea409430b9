/* Fuzz target for the model loader (libFuzzer entry point; fuzz_replay.c
 * replays a corpus through it in ordinary builds). A file that loads is
 * also run through the CPU forward pass, which must cope with whatever
 * dimensions the file declares. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_cpu.h"
#include "ssae_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ssae_err err = {{0}};
  ssae_model *m = ssae_model_load_mem(data, size, "fuzz", &err);
  if (!m) {
    /* Every refusal says why. */
    if (!err.msg[0]) abort();
    return 0;
  }
  size_t win = (size_t)m->d.frames * (size_t)m->d.n_mels;
  if (ssae_model_param_count(&m->d) < 200000 && win < 20000) {
    ssae_cpu *c = ssae_cpu_new(m, 1, &err);
    float *x = calloc(3 * win, sizeof *x), *r = calloc(3 * win, sizeof *r), s[3];
    if (c && x && r) {
      for (size_t i = 0; i < 3 * win; i++) x[i] = (float)((int)(i % 97) - 60);
      if (ssae_cpu_forward(c, x, 3, s, r)) abort();
    }
    free(x);
    free(r);
    ssae_cpu_free(c);
  }
  ssae_model_free(m);
  return 0;
}
