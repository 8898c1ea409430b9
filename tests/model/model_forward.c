/* Test helper: runs the CPU forward pass on raw float32 windows.
 *   model_forward MODEL IN.f32 SCORES.f32 RECON.f32 [THREADS]
 * IN holds n windows of frames*n_mels floats (n from the file size). */
#include <stdio.h>
#include <stdlib.h>

#include "ssae_cpu.h"
#include "ssae_model.h"

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: model_forward MODEL IN.f32 SCORES.f32 RECON.f32 [THREADS]\n");
    return 2;
  }
  ssae_err err = {{0}};
  ssae_model *m = ssae_model_load(argv[1], &err);
  if (!m) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  size_t win = (size_t)m->d.frames * (size_t)m->d.n_mels;
  FILE *f = fopen(argv[2], "rb");
  if (!f) return 1;
  fseek(f, 0, SEEK_END);
  size_t n = (size_t)ftell(f) / (4 * win);
  fseek(f, 0, SEEK_SET);
  float *x = malloc(n * win * 4 + 4), *r = malloc(n * win * 4 + 4), *s = malloc(n * 4 + 4);
  if (fread(x, 4 * win, n, f) != n) return 1;
  fclose(f);
  ssae_cpu *c = ssae_cpu_new(m, argc > 5 ? atoi(argv[5]) : 0, &err);
  if (!c || ssae_cpu_forward(c, x, n, s, r)) {
    fprintf(stderr, "forward failed: %s\n", err.msg);
    return 1;
  }
  f = fopen(argv[3], "wb");
  fwrite(s, 4, n, f);
  fclose(f);
  f = fopen(argv[4], "wb");
  fwrite(r, 4 * win, n, f);
  fclose(f);
  ssae_cpu_free(c);
  ssae_model_free(m);
  free(x);
  free(r);
  free(s);
  return 0;
}
