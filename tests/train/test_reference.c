/* The spectrum-only reference (ssae_reference.h) and the model's extra
 * tensors (ssae_model.h): the fit against a direct two-pass computation,
 * the variance floor, window and file scores against their definition,
 * the tensors through save, load and clone, models without them, and
 * unusable ones refused with a reason. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ssae_model.h"
#include "ssae_reference.h"
#include "../ssae_test.h"

enum { M = 64, F = 5, NF = 40 };

int main(void) {
  ssae_err err = {{0}};
  /* Frames of one recording: band m's level 10*sin(m) plus noise; band 7
   * constant (its variance is floored). Windows overlap in place. */
  static float frames[NF * M];
  for (int t = 0; t < NF; t++)
    for (int m = 0; m < M; m++)
      frames[t * M + m] = m == 7 ? -80.0f
                                 : (float)(10 * sin(m) + (double)(rnd() % 1000) / 100.0);
  size_t nw = NF - F + 1, off[NF];
  for (size_t w = 0; w < nw; w++) off[w] = w * M;
  ssae_window_set ws = {frames, off, nw};
  ssae_reference r;
  CHECK(ssae_reference_fit(&ws, M, F, &r, &err) == 0, "fit: %s", err.msg);
  for (int m = 0; m < M; m++) {
    double mu = 0, v = 0;
    for (size_t w = 0; w < nw; w++) {
      double x = 0;
      for (int f = 0; f < F; f++) x += frames[(w + (size_t)f) * M + (size_t)m];
      mu += x / F;
    }
    mu /= (double)nw;
    for (size_t w = 0; w < nw; w++) {
      double x = 0;
      for (int f = 0; f < F; f++) x += frames[(w + (size_t)f) * M + (size_t)m];
      v += (x / F - mu) * (x / F - mu);
    }
    v /= (double)(nw - 1);
    if (v < SSAE_REFERENCE_VAR_FLOOR) v = SSAE_REFERENCE_VAR_FLOOR;
    CHECK(fabs(r.mean[m] - mu) <= 1e-5 * fmax(1, fabs(mu)), "band %d mean %g, want %g", m,
          r.mean[m], mu);
    CHECK(fabs(r.var[m] - v) <= 1e-4 * v, "band %d var %g, want %g", m, r.var[m], v);
  }
  CHECK(r.var[7] == (float)SSAE_REFERENCE_VAR_FLOOR, "constant band floored: %g", r.var[7]);

  /* Scores: the definition, window by window; the file's is their mean. */
  float sc[NF];
  double file = ssae_reference_file_score(&r, frames, NF, sc), sum = 0;
  for (size_t w = 0; w < nw; w++) {
    double s = 0;
    for (int m = 0; m < M; m++) {
      double x = 0;
      for (int f = 0; f < F; f++) x += frames[(w + (size_t)f) * M + (size_t)m];
      s += (x / F - r.mean[m]) * (x / F - r.mean[m]) / r.var[m];
    }
    s /= M;
    CHECK(fabs(sc[w] - s) <= 1e-5 * fmax(1, s), "window %zu score %g, want %g", w, sc[w], s);
    sum += s;
  }
  CHECK(fabs(file - sum / (double)nw) <= 1e-9 * fmax(1, file), "file score %g", file);
  CHECK(isnan(ssae_reference_file_score(&r, frames, F - 1, NULL)), "no window: NAN");
  ssae_window_set one = {frames, off, 1};
  ssae_reference bad;
  CHECK(ssae_reference_fit(&one, M, F, &bad, &err) != 0 && strstr(err.msg, "2 at least"),
        "one window refused: %s", err.msg);

  /* Into a model, through a file, back. */
  ssae_model *m = ssae_model_new(NULL, &err);
  ssae_reference back;
  CHECK(m && ssae_reference_from_model(m, &back, &err) == 1, "a model without: 1");
  CHECK(ssae_reference_to_model(&r, m, &err) == 0, "to model: %s", err.msg);
  uint64_t shp[2] = {3, 0};
  float other[3] = {1, 2, 3};
  CHECK(ssae_model_extra_set(m, "other.mode", 1, shp, other, &err) == 0, "another extra");
  CHECK(ssae_model_extra_set(m, "global_basis", 1, shp, other, &err) != 0,
        "a parameter's name is refused");
  ssae_model_update(m, &err);
  char path[] = "/tmp/ssae-reference-test-XXXXXX";
  int fd = mkstemp(path);
  close(fd);
  CHECK(ssae_model_save(m, path, &err) == 0, "save: %s", err.msg);
  ssae_model *l = ssae_model_load(path, &err);
  CHECK(l != NULL, "load: %s", err.msg);
  ssae_model *c = l ? ssae_model_clone(l, &err) : NULL;
  CHECK(c && c->n_extra == 3, "clone keeps the extra tensors");
  CHECK(c && ssae_reference_from_model(c, &back, &err) == 0, "from model: %s", err.msg);
  if (c) {
    CHECK(!memcmp(back.mean, r.mean, M * sizeof(float)) &&
              !memcmp(back.var, r.var, M * sizeof(float)),
          "the reference survives save, load, clone");
    const ssae_model_extra *e = ssae_model_extra_get(c, "other.mode");
    CHECK(e && e->shape[0] == 3 && e->data[2] == 3.0f, "an unknown extra tensor survives");
    ssae_reference_release(&back);
    /* A variance that is not positive: refused with the band. */
    float v0[M];
    memcpy(v0, r.var, sizeof v0);
    v0[5] = 0;
    uint64_t sm[2] = {M, 0};
    ssae_model_extra_set(c, SSAE_REFERENCE_VAR, 1, sm, v0, &err);
    CHECK(ssae_reference_from_model(c, &back, &err) == -1 && strstr(err.msg, "band 5"),
          "a zero variance refused: %s", err.msg);
    uint64_t s3[2] = {3, 0};
    ssae_model_extra_set(c, SSAE_REFERENCE_VAR, 1, s3, other, &err);
    CHECK(ssae_reference_from_model(c, &back, &err) == -1, "a wrong length refused");
  }
  unlink(path);
  ssae_model_free(c);
  ssae_model_free(l);
  ssae_model_free(m);
  ssae_reference_release(&r);
  if (!failures) printf("reference: pass\n");
  return failures ? 1 : 0;
}
