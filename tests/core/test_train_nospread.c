/* Training on data with no spread, and NaN through the training kernels.
 * - ssae_threshold_fit_scores: equal scores and zero scores (a model that
 *   reconstructs its data exactly) give no threshold (NAN, method "none")
 *   and a warning that says why; gamma-distributed scores give their
 *   quantile; a non-finite score (a diverged model) and a percentile
 *   outside (0, 1) are errors.
 * - The gradient and score kernels (src/train/ssae_grad.c, compiled into
 *   this test with -fsanitize=undefined when the compiler has it) take a
 *   window with a NaN without undefined behaviour (exp_neg(NaN) shifted a
 *   negative exponent): that window's score is NaN, the others are finite
 *   and equal to a run without it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_threshold.h"
#include "ssae_train.h"
#include "../ssae_test.h"

static void test_threshold(void) {
  ssae_threshold_fit fit;
  ssae_err err = {{0}};
  double eq[50], zero[50], g[400];
  for (int i = 0; i < 50; i++) eq[i] = 0.25, zero[i] = 0;
  CHECK(ssae_threshold_fit_scores(eq, 50, 0.9, 0, &fit, &err) == 1 && isnan(fit.threshold) &&
            !strcmp(fit.method, "none") && strstr(fit.warning, "none") &&
            strstr(fit.warning, "spread"),
        "equal scores: method %s, warning '%s'", fit.method, fit.warning);
  CHECK(ssae_threshold_fit_scores(zero, 50, 0.9, 1, &fit, &err) == 1 && isnan(fit.threshold) &&
            strstr(fit.warning, "50 window scores"),
        "zero scores: warning '%s'", fit.warning);
  CHECK(ssae_threshold_fit_scores(eq, 1, 0.9, 0, &fit, &err) == 1 && isnan(fit.threshold),
        "one score: warning '%s'", fit.warning);
  /* Gamma(k = 4, scale 0.5) draws as sums of 4 exponentials. */
  for (int i = 0; i < 400; i++) {
    double s = 0;
    for (int k = 0; k < 4; k++) s -= 0.5 * log(1 - urand());
    g[i] = s;
  }
  CHECK(ssae_threshold_fit_scores(g, 400, 0.9, 0, &fit, &err) == 0 && !fit.warning[0] &&
            !strcmp(fit.method, "gamma_mle_loc0_file_scores") && fit.shape > 3 &&
            fit.shape < 5.5 && fit.threshold > 2.5 && fit.threshold < 4.0,
        "gamma scores: threshold %g shape %g (%s)", fit.threshold, fit.shape, fit.warning);
  g[17] = NAN;
  CHECK(ssae_threshold_fit_scores(g, 400, 0.9, 1, &fit, &err) == -1 &&
            strstr(err.msg, "non-finite"),
        "NaN score: '%s'", err.msg);
  CHECK(ssae_threshold_fit_scores(eq, 50, 1.5, 0, &fit, &err) == -1 && strstr(err.msg, "1.5"),
        "percentile 1.5: '%s'", err.msg);
}

static void test_nan_window(void) {
  ssae_dims d = {.n_mels = 64, .frames = 5, .latent = 32, .slice_latent = 64};
  ssae_err err = {{0}};
  ssae_grad *g = ssae_grad_new(&d, 1, &err);
  if (!g) {
    CHECK(0, "grad: %s", err.msg);
    return;
  }
  size_t off[SSAE_N_TENSORS + 1];
  ssae_param_offsets(&d, off);
  float *p = malloc(sizeof *p * off[SSAE_N_TENSORS]);
  float *grad = malloc(sizeof *grad * off[SSAE_N_TENSORS]);
  ssae_param_init(&d, 7, p);
  const size_t n = 8, fm = 320;
  float *x = malloc(sizeof *x * n * fm);
  for (size_t i = 0; i < n * fm; i++) x[i] = (float)(-60 + 40 * urand());
  float clean[8], dirty[8];
  double sse = 0;
  CHECK(!ssae_grad_set_params(g, p, &err) && !ssae_grad_scores(g, x, n, clean, &err),
        "scores: %s", err.msg);
  x[3 * fm + 100] = NAN;
  CHECK(!ssae_grad_scores(g, x, n, dirty, &err), "scores with NaN: %s", err.msg);
  for (size_t i = 0; i < n; i++)
    CHECK(i == 3 ? isnan(dirty[i]) : dirty[i] == clean[i], "window %zu: %g (clean %g)", i,
          dirty[i], clean[i]);
  CHECK(!ssae_grad_compute(g, x, n, 1.0 / (double)(n * fm), &sse, grad, &err) && isnan(sse),
        "gradient with NaN: sse %g (%s)", sse, err.msg);
  free(x);
  free(p);
  free(grad);
  ssae_grad_free(g);
}

int main(void) {
  test_threshold();
  test_nan_window();
  return test_done("no-spread threshold and NaN kernels: all checks passed");
}
