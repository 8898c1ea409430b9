/* The trainer's gradient on a batch given as pointers to its windows where
 * they lie (ssae_grad_compute_windows: how `ssae train` hands a shuffled
 * batch of a recording's overlapping windows to the CPU backend, each
 * thread gathering its own chunk) is the gradient of the same windows
 * copied one after another (ssae_grad_compute), bit for bit, on one thread
 * and on three, for a batch of one chunk, of several and with a short last
 * chunk. */
#include <stdlib.h>
#include <string.h>

#include "ssae_model.h"
#include "ssae_train.h"
#include "../ssae_test.h"

enum { M = 64, F = 5, FM = F * M, FRAMES = 400 };

int main(void) {
  ssae_err err = {{0}};
  const ssae_dims d = {.n_mels = M, .frames = F, .latent = 32, .slice_latent = 64};
  size_t off[SSAE_N_TENSORS + 1];
  ssae_param_offsets(&d, off);
  const size_t P = off[SSAE_N_TENSORS];
  float *params = malloc(P * sizeof *params), *frames = malloc((size_t)FRAMES * M * sizeof(float));
  float *xb = malloc((size_t)FRAMES * FM * sizeof(float));
  float *g1 = malloc(P * sizeof(float)), *g2 = malloc(P * sizeof(float));
  const float **win = malloc(FRAMES * sizeof *win);
  if (!params || !frames || !xb || !g1 || !g2 || !win) FAIL("out of memory");
  for (size_t i = 0; i < P; i++) params[i] = (float)(0.2 * (urand() - 0.5));
  for (size_t t = 0; t < SSAE_N_TENSORS; t++)
    if (t == 0 || t == 5) /* the LayerNorm weights near 1 */
      for (size_t i = off[t]; i < off[t + 1]; i++) params[i] += 1.0f;
  /* a recording's frames: window k is frames k .. k+F-1, overlapping */
  for (size_t i = 0; i < (size_t)FRAMES * M; i++)
    frames[i] = (float)(-50 + 30 * (urand() - 0.5) - 0.2 * (double)(i % M));
  const int threads[] = {1, 3};
  const size_t sizes[] = {20, 96, 333};
  for (int t = 0; t < 2; t++) {
    ssae_grad *g = ssae_grad_new(&d, threads[t], &err);
    if (!g) FAIL("ssae_grad_new: %s", err.msg);
    CHECK(ssae_grad_set_params(g, params, &err) == 0, "set_params: %s", err.msg);
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
      size_t n = sizes[s];
      /* a shuffled draw of windows, as an epoch's batch */
      for (size_t i = 0; i < n; i++) {
        size_t k = (size_t)(urand() * (FRAMES - F + 1));
        if (k > FRAMES - F) k = FRAMES - F;
        win[i] = frames + k * M;
        memcpy(xb + i * FM, win[i], FM * sizeof(float));
      }
      double sse1 = 0, sse2 = 0, scale = 1.0 / ((double)n * FM);
      CHECK(ssae_grad_compute(g, xb, n, scale, &sse1, g1, &err) == 0, "compute: %s", err.msg);
      CHECK(ssae_grad_compute_windows(g, win, n, scale, &sse2, g2, &err) == 0,
            "compute_windows: %s", err.msg);
      CHECK(sse1 == sse2 && !memcmp(g1, g2, P * sizeof(float)),
            "%d thread(s), %zu windows: the gradient from the windows where they lie differs "
            "(sse %.17g against %.17g)", threads[t], n, sse2, sse1);
    }
    ssae_grad_free(g);
  }
  free(params);
  free(frames);
  free(xb);
  free(g1);
  free(g2);
  free(win);
  return test_done("grad windows: the same bits as the batch copied together");
}
