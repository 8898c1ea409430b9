/* The model parameter of the plugin: patch:Get answers with the model in
 * use (the bundle's default at first); a bad path, a corrupt file or a
 * malformed patch:Set is reported through the log feature and the old model
 * keeps running; a good path is loaded by the worker, announced on the
 * notify port and used (its threshold shows on threshold_used); the state
 * saves the path through the host's map-path feature and restores it, both
 * directly and through the worker; enable = 0 pauses the analysis; the
 * backend parameter moves one instance's analysis (bad values logged, the
 * old engine kept) and is saved and restored with the state; by default
 * the backend and GPU come from SSAE_LV2_BACKEND and SSAE_LV2_GPU, a bad
 * value logged. The host runs its worker on a thread, as a live host does. */
#define _XOPEN_SOURCE 700
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lv2/atom/atom.h>
#include <lv2/state/state.h>

#include "lv2_host.h"
#include "ssae_detector.h"
#include "ssae_model.h"

#define RATE 16000
#define OTHER_THRESHOLD 123.5f

static float noise[RATE];

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Feeds `seconds` of normal sound and waits until windows were scored. */
static void feed(lv2h *h, double seconds) {
  float *in = (float *)malloc(512 * sizeof(float));
  float *out = (float *)malloc(512 * sizeof(float));
  lv2h_connect(h, "in", in);
  lv2h_connect(h, "out", out);
  size_t blocks = (size_t)(seconds * RATE / 512);
  for (size_t b = 0; b < blocks; b++) {
    memcpy(in, noise + (b * 512) % (RATE - 512), 512 * sizeof(float));
    lv2h_run(h, 512);
    if (b % 8 == 0) sleep_ms(1);
  }
  for (int i = 0; i < 1000 && *lv2h_ctl(h, "windows") < 1; i++) {
    lv2h_run(h, 0);
    sleep_ms(2);
  }
  /* Let the worker finish what was fed. */
  float last = -1;
  for (int i = 0; i < 1000 && *lv2h_ctl(h, "windows") != last; i++) {
    last = *lv2h_ctl(h, "windows");
    sleep_ms(5);
    lv2h_run(h, 0);
  }
  lv2h_connect(h, "in", NULL);
  lv2h_connect(h, "out", NULL);
  free(in);
  free(out);
}

/* Where the engine scores, from the host's environment at instantiation
 * (NULL: unset): the plugin opens (opens) or refuses to, scores when it
 * opens, and logs an error holding needle (NULL: no error). */
static void env_case(const char *backend, const char *gpu, int opens, const char *needle) {
  if (backend) setenv("SSAE_LV2_BACKEND", backend, 1);
  else unsetenv("SSAE_LV2_BACKEND");
  if (gpu) setenv("SSAE_LV2_GPU", gpu, 1);
  else unsetenv("SSAE_LV2_GPU");
  char what[128], text[8192];
  snprintf(what, sizeof(what), "SSAE_LV2_BACKEND=%s SSAE_LV2_GPU=%s", backend ? backend : "",
           gpu ? gpu : "");
  lv2h h;
  const int r = lv2h_open(&h, "urn:ssae:lv2:mono", RATE, 0);
  h.quiet = 1;
  if (r == 0) feed(&h, 0.5);
  int errors;
  lv2h_log_take(&h, text, sizeof(text), &errors);
  CHECK((r == 0) == opens, "%s: the plugin %s", what, opens ? "did not open" : "opened");
  CHECK(!opens || *lv2h_ctl(&h, "windows") > 0, "%s: no windows scored", what);
  if (needle)
    CHECK(errors >= 1 && strstr(text, needle), "%s: the log lacks '%s': %s", what, needle,
          text);
  else
    CHECK(errors == 0, "%s: errors logged: %s", what, text);
  fprintf(stderr, "%s: %s, logged: %s", what, r == 0 ? "opened" : "refused",
          *text ? text : "nothing\n");
  lv2h_close(&h);
  unsetenv("SSAE_LV2_BACKEND");
  unsetenv("SSAE_LV2_GPU");
}

static void expect_error(lv2h *h, const char *what, const char *needle) {
  char text[8192];
  int errors;
  lv2h_wait_worker(h);
  lv2h_log_take(h, text, sizeof(text), &errors);
  CHECK(errors >= 1, "%s: no error was logged", what);
  CHECK(strstr(text, needle), "%s: the log does not mention '%s': %s", what,
        needle, text);
  fprintf(stderr, "%s: logged: %s", what, text);
}

static void expect_model(lv2h *h, const char *want, const char *what) {
  char got[PATH_MAX];
  lv2h_wait_worker(h);
  lv2h_run(h, 0); /* an answer installed by the last run is announced now */
  CHECK(lv2h_get_model(h, got, sizeof(got)), "%s: no answer to patch:Get", what);
  CHECK(strcmp(got, want) == 0, "%s: model is '%s', expected '%s'", what, got,
        want);
}

static const void *get_port_value(const char *symbol, void *user,
                                  uint32_t *size, uint32_t *type) {
  lv2h *h = (lv2h *)user;
  *size = sizeof(float);
  *type = h->map.map(h->map.handle, LV2_ATOM__Float);
  return lv2h_ctl(h, symbol);
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  CHECK(f, "cannot open %s", path);
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

int main(int argc, char **argv) {
  char *dir = lv2h_test_start(argc, argv, "model");
  sig_make(noise, RATE, RATE, 3, 0, 0, 0);

  /* A second valid model (random weights) with its own threshold, and a
   * file that is not a model. */
  char other[PATH_MAX], corrupt[PATH_MAX], missing[PATH_MAX], save_dir[PATH_MAX];
  snprintf(other, sizeof(other), "%s/other.safetensors", dir);
  snprintf(corrupt, sizeof(corrupt), "%s/corrupt.safetensors", dir);
  snprintf(missing, sizeof(missing), "%s/missing.safetensors", dir);
  snprintf(save_dir, sizeof(save_dir), "%s/state.lv2", dir);
  ssae_err err;
  ssae_dims d;
  ssae_dims_default(&d);
  ssae_model *m = ssae_model_new(&d, &err);
  CHECK(m, "ssae_model_new: %s", err.msg);
  ssae_model_init(m, 5);
  m->threshold = OTHER_THRESHOLD;
  CHECK(ssae_model_update(m, &err) == 0, "%s", err.msg);
  CHECK(ssae_model_save(m, other, &err) == 0, "ssae_model_save: %s", err.msg);
  ssae_model_free(m);
  FILE *f = fopen(corrupt, "wb");
  CHECK(f, "cannot write %s", corrupt);
  /* A header length of 64, then 12 bytes of broken JSON. */
  static const char bad[] = "\x40\0\0\0\0\0\0\0{\"x\": 1, \"y";
  fwrite(bad, 1, sizeof(bad) - 1, f);
  fclose(f);

  lv2h h;
  CHECK(lv2h_open(&h, "urn:ssae:lv2:mono", RATE, 1) == 0, "cannot load the plugin");
  h.quiet = 1;
  /* The host starts the ports at ssae.ttl's defaults: the detector's. */
  CHECK(*lv2h_ctl(&h, "smoothing") == (float)SSAE_DETECTOR_SMOOTHING_S &&
            *lv2h_ctl(&h, "alarm_on") == SSAE_DETECTOR_ON_COUNT &&
            *lv2h_ctl(&h, "alarm_off") == SSAE_DETECTOR_OFF_COUNT,
        "mono port defaults %g %g %g are not the detector's", *lv2h_ctl(&h, "smoothing"),
        *lv2h_ctl(&h, "alarm_on"), *lv2h_ctl(&h, "alarm_off"));
  *lv2h_ctl(&h, "threshold") = 0.0f; /* the model's */

  /* The default model, from the bundle. */
  char p0[PATH_MAX];
  lv2h_run(&h, 0);
  CHECK(lv2h_notified_model(&h, p0, sizeof(p0)),
        "the first run does not announce the model");
  fprintf(stderr, "default model: '%s'\n", p0);
  CHECK(strstr(p0, "ssae.lv2/default.safetensors"),
        "the default model is not the bundle's: '%s'", p0);
  feed(&h, 1.0);
  float w0 = *lv2h_ctl(&h, "windows");
  float thr0 = *lv2h_ctl(&h, "threshold_used");
  CHECK(w0 > 0, "no windows scored");

  /* Bad models: logged, the old one keeps running (its window count goes
   * on: a new engine would start again from zero). */
  lv2h_send_set_model(&h, missing);
  lv2h_run(&h, 0);
  expect_error(&h, "missing file", "missing.safetensors");
  expect_model(&h, p0, "after a missing file");

  lv2h_send_set_model(&h, corrupt);
  lv2h_run(&h, 0);
  expect_error(&h, "corrupt file", "corrupt.safetensors");
  expect_model(&h, p0, "after a corrupt file");

  int32_t not_a_path = 7;
  lv2h_send_set_raw(&h, h.u_model, h.map.map(h.map.handle, LV2_ATOM__Int),
                    &not_a_path, sizeof(not_a_path));
  lv2h_run(&h, 0);
  expect_error(&h, "Int value", "atom:Path");

  lv2h_send_set_raw(&h, h.map.map(h.map.handle, "urn:ssae:lv2:nothing"),
                    h.u_atom_Path, other, (uint32_t)strlen(other) + 1);
  lv2h_run(&h, 0);
  expect_error(&h, "unknown property", "does not have");
  expect_model(&h, p0, "after malformed messages");

  feed(&h, 0.5);
  CHECK(*lv2h_ctl(&h, "windows") > w0,
        "the old model stopped (windows %g, before %g)",
        *lv2h_ctl(&h, "windows"), w0);
  CHECK(*lv2h_ctl(&h, "threshold_used") == thr0, "threshold changed");

  /* enable = 0 pauses the analysis (audio still passes); 1 resumes it. */
  *lv2h_ctl(&h, "enable") = 0.0f;
  lv2h_run(&h, 0);
  feed(&h, 0.2); /* windows of audio fed before the switch finish here */
  float paused = *lv2h_ctl(&h, "windows");
  feed(&h, 0.5);
  CHECK(*lv2h_ctl(&h, "windows") == paused,
        "windows scored while disabled (%g, then %g)", paused,
        *lv2h_ctl(&h, "windows"));
  CHECK(*lv2h_ctl(&h, "alarm") == 0.0f, "alarm on while disabled");
  *lv2h_ctl(&h, "enable") = 1.0f;
  feed(&h, 0.5);
  CHECK(*lv2h_ctl(&h, "windows") > paused, "the analysis did not resume");

  /* A good model: loaded, announced, used. */
  char got[PATH_MAX];
  CHECK(lv2h_load_model(&h, other), "the new model was not announced");
  feed(&h, 0.5);
  CHECK(*lv2h_ctl(&h, "threshold_used") == OTHER_THRESHOLD,
        "threshold in use %g, the new model's is %g",
        *lv2h_ctl(&h, "threshold_used"), OTHER_THRESHOLD);
  expect_model(&h, other, "after loading a model");
  int errors;
  lv2h_log_take(&h, got, sizeof(got), &errors);
  CHECK(errors == 0, "errors logged while loading a good model: %s", got);

  /* The backend parameter: the environment's (auto) until set; set per
   * instance, it restarts the analysis there and keeps the model; a value
   * that is not one, a GPU with the CPU, a device the host lacks (the
   * engine's reason: no GPU, or no CUDA in the build) are logged and the
   * instance goes on where it was; a new model keeps the backend. */
  char be[64];
  CHECK(lv2h_get_backend(&h, be, sizeof(be)) && strcmp(be, "auto") == 0,
        "backend '%s' before any set, expected auto", be);
  CHECK(lv2h_set_backend(&h, "cpu"), "the backend cpu was not announced");
  expect_model(&h, other, "after setting the backend");
  feed(&h, 0.5);
  CHECK(*lv2h_ctl(&h, "threshold_used") == OTHER_THRESHOLD,
        "the model changed with the backend (threshold %g)", *lv2h_ctl(&h, "threshold_used"));
  static const char *const bad_backends[][2] = {
      {"gpu-please", "backend 'gpu-please': use auto, cpu or cuda"},
      {"cuda:x", "backend 'cuda:x'"},
      {"cuda:256", "backend 'cuda:256'"},
      {"cpu:1", "gpu 1: not with backend cpu"},
      {"cuda:255", "(backend cuda:255)"}};
  for (size_t i = 0; i < sizeof(bad_backends) / sizeof(bad_backends[0]); i++) {
    float before = *lv2h_ctl(&h, "windows");
    lv2h_send_set_backend(&h, bad_backends[i][0]);
    lv2h_run(&h, 0);
    expect_error(&h, bad_backends[i][0], bad_backends[i][1]);
    CHECK(lv2h_get_backend(&h, be, sizeof(be)) && strcmp(be, "cpu") == 0,
          "backend '%s' after '%s', expected cpu", be, bad_backends[i][0]);
    feed(&h, 0.2);
    CHECK(*lv2h_ctl(&h, "windows") > before, "the analysis stopped after '%s'",
          bad_backends[i][0]);
  }
  int32_t not_a_string = 1;
  lv2h_send_set_raw(&h, h.u_backend, h.map.map(h.map.handle, LV2_ATOM__Int), &not_a_string,
                    sizeof(not_a_string));
  lv2h_run(&h, 0);
  expect_error(&h, "Int backend", "atom:String");
  CHECK(lv2h_load_model(&h, p0), "the default model's file was not announced");
  CHECK(lv2h_get_backend(&h, be, sizeof(be)) && strcmp(be, "cpu") == 0,
        "backend '%s' after a new model, expected cpu", be);
  CHECK(lv2h_load_model(&h, other), "the model was not announced");
  /* patch:Get without a property: both */
  lv2h_send_get_property(&h, 0);
  lv2h_run(&h, 0);
  CHECK(lv2h_notified_model(&h, got, sizeof(got)) && strcmp(got, other) == 0 &&
            lv2h_notified_backend(&h, be, sizeof(be)) && strcmp(be, "cpu") == 0,
        "patch:Get of every property: model '%s', backend '%s'", got, be);
  lv2h_log_take(&h, got, sizeof(got), &errors);
  CHECK(errors == 0, "errors logged while changing models: %s", got);

  /* Save: the path goes through the host's map-path (lilv links external
   * files into the state directory and stores a relative path). */
  LilvState *st = lilv_state_new_from_instance(
      h.plugin, h.inst, &h.map, NULL, save_dir, save_dir, save_dir,
      get_port_value, &h, LV2_STATE_IS_POD | LV2_STATE_IS_PORTABLE, h.features);
  CHECK(st, "cannot save the state");
  CHECK(lilv_state_save(h.world, &h.map, &h.unmap, st, NULL, save_dir,
                        "state.ttl") == 0,
        "cannot write the state");
  lilv_state_free(st);
  char ttl_path[PATH_MAX + 16];
  snprintf(ttl_path, sizeof(ttl_path), "%s/state.ttl", save_dir);
  const char *ttl = slurp(ttl_path);
  CHECK(strstr(ttl, "urn:ssae:lv2:model"), "the state lacks the model: %s", ttl);
  CHECK(!strstr(ttl, other), "the state holds the unmapped path: %s", ttl);
  CHECK(strstr(ttl, "urn:ssae:lv2:backend") && strstr(ttl, "\"cpu\""),
        "the state lacks the backend: %s", ttl);

  /* Restore into a new instance (instantiation class: loaded at once). */
  lv2h h2;
  CHECK(lv2h_open(&h2, "urn:ssae:lv2:mono", RATE, 1) == 0, "cannot load the plugin");
  h2.quiet = 1;
  LilvState *st2 =
      lilv_state_new_from_file(h2.world, &h2.map, NULL, ttl_path);
  CHECK(st2, "cannot read the saved state");
  const LV2_Feature *no_worker[] = {&h2.f_map, &h2.f_unmap, &h2.f_log, NULL};
  lilv_state_restore(st2, h2.inst, NULL, NULL, 0, no_worker);
  lilv_state_free(st2);
  CHECK(lv2h_get_model(&h2, got, sizeof(got)), "no answer after restore");
  char real_got[PATH_MAX], real_other[PATH_MAX];
  CHECK(realpath(got, real_got) && realpath(other, real_other) &&
            strcmp(real_got, real_other) == 0,
        "restored model '%s' is not '%s'", got, other);
  CHECK(lv2h_get_backend(&h2, be, sizeof(be)) && strcmp(be, "cpu") == 0,
        "restored backend '%s', saved cpu", be);
  feed(&h2, 0.5);
  CHECK(*lv2h_ctl(&h2, "threshold_used") == OTHER_THRESHOLD,
        "the restored instance does not use the saved model");

  /* A state saved with the default model brings the default back; restored
   * while running, through the worker. */
  char save_dir2[PATH_MAX + 8];
  snprintf(save_dir2, sizeof(save_dir2), "%s.def", save_dir);
  lv2h h3;
  CHECK(lv2h_open(&h3, "urn:ssae:lv2:mono", RATE, 0) == 0, "cannot load the plugin");
  LilvState *st3 = lilv_state_new_from_instance(
      h3.plugin, h3.inst, &h3.map, NULL, save_dir2, save_dir2, save_dir2,
      get_port_value, &h3, 0, h3.features);
  CHECK(st3, "cannot save the default state");
  char *s3 = lilv_state_to_string(h3.world, &h3.map, &h3.unmap, st3,
                                  "urn:ssae:test:default-state", NULL);
  lilv_state_free(st3);
  lv2h_close(&h3);
  LilvState *st4 = lilv_state_new_from_string(h2.world, &h2.map, s3);
  CHECK(st4, "cannot read the default state back");
  lilv_free(s3);
  lilv_state_restore(st4, h2.inst, NULL, NULL, 0, h2.features);
  lilv_state_free(st4);
  expect_model(&h2, p0, "after restoring the default state");
  CHECK(lv2h_get_backend(&h2, be, sizeof(be)) && strcmp(be, "auto") == 0,
        "backend '%s' after restoring a state without one, expected the environment's",
        be);
  lv2h_log_take(&h2, got, sizeof(got), &errors);
  CHECK(errors == 0, "errors logged during restore: %s", got);

  /* A saved backend that is not one: logged, the environment's used, the
   * saved model restored. */
  char bad_ttl[PATH_MAX + 16];
  snprintf(bad_ttl, sizeof(bad_ttl), "%s/bad.ttl", save_dir);
  {
    char *text = strdup(slurp(ttl_path));
    char *at = strstr(text, "\"cpu\"");
    CHECK(at, "no backend value in the state: %s", text);
    FILE *bf = fopen(bad_ttl, "w");
    CHECK(bf, "cannot write %s", bad_ttl);
    fprintf(bf, "%.*s\"quantum\"%s", (int)(at - text), text, at + 5);
    fclose(bf);
    free(text);
  }
  LilvState *st5 = lilv_state_new_from_file(h2.world, &h2.map, NULL, bad_ttl);
  CHECK(st5, "cannot read %s", bad_ttl);
  lilv_state_restore(st5, h2.inst, NULL, NULL, 0, no_worker);
  lilv_state_free(st5);
  lv2h_log_take(&h2, got, sizeof(got), &errors);
  CHECK(errors == 1 && strstr(got, "the saved backend is not auto, cpu, cuda or cuda:N; "
                                   "the environment's (auto) used"),
        "a bad saved backend: %s", got);
  CHECK(lv2h_get_backend(&h2, be, sizeof(be)) && strcmp(be, "auto") == 0,
        "backend '%s' after a bad saved one", be);
  CHECK(lv2h_get_model(&h2, got, sizeof(got)) && realpath(got, real_got) &&
            strcmp(real_got, real_other) == 0,
        "model '%s' after a state with a bad backend", got);

  lv2h_close(&h2);
  lv2h_close(&h);

  /* SSAE_LV2_BACKEND and SSAE_LV2_GPU: the CPU on request; a value that is
   * not one is logged and the default kept; a GPU with the CPU backend
   * refused by the engine, naming both. */
  env_case("cpu", NULL, 1, NULL);
  env_case("cpu", "0", 1, NULL);
  env_case("gpu-please", NULL, 1, "SSAE_LV2_BACKEND='gpu-please'");
  env_case(NULL, "first", 1, "SSAE_LV2_GPU='first'");
  env_case("cpu", "1", 0, "gpu 1: not with backend cpu");
  free(dir);
  fprintf(stderr, "ok\n");
  return 0;
}
