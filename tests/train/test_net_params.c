/* ssae_api_net_set_params_parts (src/api/ssae_tensor_api.h): parameters
 * given as the pieces a caller holds (a module's tensors) reach the forward
 * at every call, a change of one value made in place included (the case a
 * cache keyed by the tensors misses); the same bits set twice do nothing
 * observable; a model made from the same vector (ssae_api_model_from_params)
 * reconstructs alike; refusals name the problem and leave the net without
 * parameters rather than with half of them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_tensor_api.h"
#include "../ssae_test.h"

enum { M = 64, F = 5, L = 32, S = 64, NW = 7, FM = F * M };

static int same(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof *a); }

int main(void) {
  const int dims[4] = {M, F, L, S};
  const size_t P = ssae_api_dims_param_count(dims);
  /* the pieces in state_dict order */
  const size_t counts[11] = {M, M, (size_t)S * M, S, (size_t)L * F * S, L, L,
                             (size_t)L * L, L, (size_t)M * S, M};
  size_t total = 0;
  for (int i = 0; i < 11; i++) total += counts[i];
  if (total != P) FAIL("the pieces hold %zu floats, the model %zu", total, P);
  float *flat = malloc(P * sizeof *flat);
  float *x = malloc(NW * FM * sizeof *x), *y1 = malloc(NW * FM * sizeof *y1);
  float *y2 = malloc(NW * FM * sizeof *y2), *y3 = malloc(NW * FM * sizeof *y3);
  if (!flat || !x || !y1 || !y2 || !y3) FAIL("out of memory");
  for (size_t i = 0; i < P; i++) flat[i] = (float)(urand() - 0.5) * 0.2f;
  for (size_t i = 0; i < M; i++) flat[i] = 1.0f + (float)(urand() - 0.5) * 0.2f; /* LN weight */
  for (size_t i = 0; i < (size_t)NW * FM; i++) x[i] = (float)(urand() * 80 - 90);
  /* the pieces as separate buffers, as a module's tensors are */
  float *part[11];
  const float *parts[11];
  for (size_t i = 0, o = 0; i < 11; o += counts[i], i++) {
    if (!(part[i] = malloc(counts[i] * sizeof(float)))) FAIL("out of memory");
    memcpy(part[i], flat + o, counts[i] * sizeof(float));
    parts[i] = part[i];
  }
  ssae_err err = {{0}};
  ssae_api_net *net = ssae_api_net_new(dims, 1, &err);
  if (!net) FAIL("net: %s", err.msg);
  CHECK(ssae_api_net_forward(net, x, NW, y1, &err) == SSAE_API_EARG &&
            strstr(err.msg, "no parameters"),
        "a forward before any parameters: %s", err.msg);

  CHECK(ssae_api_net_set_params_parts(net, parts, counts, 11, &err) == SSAE_API_OK, "set: %s",
        err.msg);
  CHECK(ssae_api_net_forward(net, x, NW, y1, &err) == SSAE_API_OK, "forward: %s", err.msg);
  /* the same bits again: nothing changes */
  CHECK(ssae_api_net_set_params_parts(net, parts, counts, 11, &err) == SSAE_API_OK, "again: %s",
        err.msg);
  CHECK(ssae_api_net_forward(net, x, NW, y2, &err) == SSAE_API_OK && same(y1, y2, NW * FM),
        "the same parameters set twice changed the forward");

  /* one value changed in place (the decoder's bias): the next call sees it,
   * and equals the flat vector set directly */
  part[10][3] += 0.25f;
  flat[P - M + 3] += 0.25f;
  CHECK(ssae_api_net_set_params_parts(net, parts, counts, 11, &err) == SSAE_API_OK, "set: %s",
        err.msg);
  CHECK(ssae_api_net_forward(net, x, NW, y2, &err) == SSAE_API_OK && !same(y1, y2, NW * FM),
        "a value changed in place did not reach the forward");
  ssae_api_net *ref = ssae_api_net_new(dims, 1, &err);
  if (!ref) FAIL("net: %s", err.msg);
  CHECK(ssae_api_net_set_params(ref, flat, P, &err) == SSAE_API_OK, "flat: %s", err.msg);
  CHECK(ssae_api_net_forward(ref, x, NW, y3, &err) == SSAE_API_OK && same(y2, y3, NW * FM),
        "pieces and the flat vector of the same values differ");
  /* one piece holding everything (a caller's own concatenation) */
  const float *one[1] = {flat};
  const size_t n_one[1] = {P};
  CHECK(ssae_api_net_set_params_parts(net, one, n_one, 1, &err) == SSAE_API_OK, "one: %s",
        err.msg);
  CHECK(ssae_api_net_forward(net, x, NW, y1, &err) == SSAE_API_OK && same(y1, y3, NW * FM),
        "one piece of the same values differs");
  /* a model made from the same flat vector scores with the same weights:
   * its reconstructions are the net's forward, bit for bit (both the CPU
   * backend) */
  ssae_api_model *am = ssae_api_model_from_params(dims, flat, P, "cpu", &err);
  if (!am) FAIL("model from parameters: %s", err.msg);
  float scores[NW];
  CHECK(ssae_api_model_score(am, x, NW, scores, y3, &err) == SSAE_API_OK &&
            same(y3, y1, NW * FM),
        "the model from the same parameters reconstructs otherwise: %s", err.msg);
  for (int w = 0; w < NW; w++) {
    double e = 0;
    for (int i = 0; i < FM; i++) e += ((double)y3[w * FM + i] - x[w * FM + i]) *
                                      ((double)y3[w * FM + i] - x[w * FM + i]);
    CHECK(fabs(scores[w] - e / FM) <= 1e-5 * (e / FM), "window %d: score %g, error %g", w,
          scores[w], e / FM);
  }
  ssae_api_model_free(am);
  CHECK(ssae_api_model_from_params(dims, flat, P - 1, "cpu", &err) == NULL &&
            strstr(err.msg, "floats given"),
        "a short vector: %s", err.msg);

  /* set_params keeps what set_params_parts compares with: after a flat set
   * of other values, the pieces' values are set again */
  flat[P - 1] += 1.0f;
  CHECK(ssae_api_net_set_params(net, flat, P, &err) == SSAE_API_OK, "flat: %s", err.msg);
  CHECK(ssae_api_net_set_params_parts(net, parts, counts, 11, &err) == SSAE_API_OK, "set: %s",
        err.msg);
  CHECK(ssae_api_net_forward(net, x, NW, y1, &err) == SSAE_API_OK && same(y1, y2, NW * FM),
        "the pieces after a flat set of other values were not set again");

  /* refusals */
  size_t bad[11];
  memcpy(bad, counts, sizeof bad);
  bad[4] -= 1;
  CHECK(ssae_api_net_set_params_parts(net, parts, bad, 11, &err) == SSAE_API_EARG &&
            strstr(err.msg, "floats given"),
        "a short piece: %s", err.msg);
  bad[4] = (size_t)-1;
  CHECK(ssae_api_net_set_params_parts(net, parts, bad, 11, &err) == SSAE_API_EARG &&
            strstr(err.msg, "more than"),
        "a piece larger than the model: %s", err.msg);
  const float *holes[11];
  memcpy(holes, parts, sizeof holes);
  holes[2] = NULL;
  CHECK(ssae_api_net_set_params_parts(net, holes, counts, 11, &err) == SSAE_API_EARG &&
            strstr(err.msg, "tensor 2 is NULL"),
        "a NULL piece: %s", err.msg);
  CHECK(ssae_api_net_set_params_parts(net, NULL, counts, 11, &err) == SSAE_API_EARG,
        "a NULL list");
  part[2][5] = NAN;
  CHECK(ssae_api_net_set_params_parts(net, parts, counts, 11, &err) == SSAE_API_EARG &&
            strstr(err.msg, "not finite"),
        "a NaN: %s", err.msg);
  CHECK(ssae_api_net_forward(net, x, NW, y1, &err) == SSAE_API_EARG,
        "a forward after refused parameters ran");
  part[2][5] = 0.0f;
  CHECK(ssae_api_net_set_params_parts(net, parts, counts, 11, &err) == SSAE_API_OK, "set: %s",
        err.msg);
  CHECK(ssae_api_net_forward(net, x, NW, y1, &err) == SSAE_API_OK, "forward: %s", err.msg);

  ssae_api_net_free(net);
  ssae_api_net_free(ref);
  for (int i = 0; i < 11; i++) free(part[i]);
  free(flat);
  free(x);
  free(y1);
  free(y2);
  free(y3);
  if (failures) return 1;
  printf("net parameters: pieces, in-place changes and refusals OK\n");
  return 0;
}
