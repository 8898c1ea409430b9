/* The service config: every class of bad config is refused with the file,
 * the LINE and the reason (unknown key, wrong type, bad value, YAML syntax,
 * missing required key, missing model file, duplicate machine name, models
 * whose feature settings disagree, unset password variable, a password file
 * that is a FIFO or a folder); a good file
 * loads with its values and defaults; flags go over the file; the engine's
 * GPU (engine.gpu, --gpu): refused out of range, as text and with the CPU
 * backend, and a reload that changes it is refused as needing a restart;
 * the example config in tools/ loads. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../ssae_test.h"
#include "ssae_model.h"
#include "ssae_service.h"
#include "ssae_service_config.h"

static char dir[256];

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) {
    perror(path);
    exit(1);
  }
  fputs(text, f);
  fclose(f);
}

/* Loads `text` (and checks its models when `models`): must fail with a
 * message that contains "FILE:LINE:" and every one of the words. */
static void refused(const char *what, const char *text, int line, int models,
                    const char *w1, const char *w2) {
  char path[300];
  snprintf(path, sizeof path, "%s/bad.yaml", dir);
  write_file(path, text);
  ssae_err err = {{0}};
  ssae_config *c = ssae_config_load(path, &err);
  int r = c ? (models ? ssae_config_check_models(c, NULL, &err) : 0) : -1;
  ssae_config_free(c);
  CHECK(r != 0, "%s: accepted", what);
  if (r == 0) return;
  char where[320];
  snprintf(where, sizeof where, "%s:%d:", path, line);
  CHECK(strstr(err.msg, where) != NULL, "%s: message lacks '%s': %s", what,
        where, err.msg);
  CHECK(!w1 || strstr(err.msg, w1), "%s: message lacks '%s': %s", what, w1,
        err.msg);
  CHECK(!w2 || strstr(err.msg, w2), "%s: message lacks '%s': %s", what, w2,
        err.msg);
  printf("ok  %-28s %s\n", what, err.msg);
}

/* Files that must be refused: what, the file, the line the message names,
 * whether the models are checked too, and words the message must have. */
static const struct {
  const char *what, *text;
  int line, models;
  const char *w1, *w2;
} refusals[] = {
    {"unknown key", "node: a\nmachines:\n  - name: m1\n    colour: red\n",
     4, 0, "machines[0].colour", "unknown key"},
    {"unknown top key", "node: a\n\nbogus: 1\n",
     3, 0, "bogus", "unknown key"},
    {"int with junk", "machines:\n  - name: m\n    hysteresis: {on: 3x}\n",
     3, 0, "hysteresis.on", "not an integer"},
    {"number as text", "machines:\n  - name: m\n    threshold: high\n",
     3, 0, "machines[0].threshold", "not a number"},
    {"list for a number", "machines:\n  - name: m\n    smoothing: [1]\n",
     3, 0, "machines[0].smoothing", "expected a number"},
    {"mapping for a list", "node: n\nmachines: {name: m}\n",
     2, 0, "machines", "expected a list"},
    {"bool",
     "outputs:\n  mqtt:\n    url: mqtt://h\n    homeassistant:\n      discovery: maybe\n",
     5, 0, "discovery", "not true or false"},
    {"enum", "outputs:\n  clips:\n    dir: /tmp\n    format: mp3\n",
     4, 0, "format", "flac, wav"},
    {"missing required", "machines:\n  - model: x\n",
     2, 0, "machines[0]", "missing key 'name'"},
    {"yaml syntax", "node: a\nmachines:\n  - name: m\n   bad: : x\n",
     4, 0, "YAML syntax", NULL},
    {"key twice", "node: a\nnode: b\n",
     2, 0, "node", "twice"},
    {"negative threshold", "machines:\n  - name: m\n\n    threshold: -2\n",
     4, 0, "machines[0].threshold", "> 0"},
    {"hysteresis zero", "machines:\n  - name: m\n    hysteresis:\n      off: 0\n",
     4, 0, "hysteresis.off", "1.."},
    {"bad name", "machines:\n  - name: m\n  - name: \"pump/2\"\n",
     3, 0, "machines[1].name", "letters"},
    {"duplicate name", "machines:\n  - name: press\n  - name: pump\n  - name: press\n",
     4, 0, "machines[2].name", "used twice"},
    {"bad url", "outputs:\n  mqtt:\n    url: http://broker\n",
     3, 0, "outputs.mqtt.url", "mqtt://"},
    {"bad port", "outputs:\n  metrics:\n    listen: 127.0.0.1:99999\n",
     3, 0, "outputs.metrics.listen", "port must be"},
    {"channels vs machines",
     "machines:\n  - name: a\n  - name: b\ninput:\n  portaudio:\n    channels: [0]\n",
     6, 0, "channels", "2 machines"},
    {"two inputs", "input:\n  jack: {ports: [a]}\n  file: {path: x.wav}\n",
     1, 0, "input", "one of"},
    {"password env unset",
     "outputs:\n  mqtt:\n    url: mqtt://h\n    username: u\n"
     "    password_env: SSAE_TEST_SURELY_UNSET\n",
     5, 0, "SSAE_TEST_SURELY_UNSET", "not set"},
    {"gpu negative", "node: a\nengine:\n  gpu: -1\n",
     3, 0, "engine.gpu", "0..255"},
    {"gpu as text", "engine:\n  gpu: x\n",
     2, 0, "engine.gpu", "not an integer"},
    {"gpu with the cpu", "engine:\n  backend: cpu\n  gpu: 1\n",
     3, 0, "engine.gpu", "not with engine.backend cpu"},
    {"missing model file",
     "machines:\n  - name: a\n  - name: b\n    model: /nonexistent/m.safetensors\n",
     4, 1, "machines[1].model", "No such file"},
};

static void bad_configs(const char *model_a, const char *model_b) {
  char t[2048];
  for (size_t i = 0; i < sizeof refusals / sizeof *refusals; i++)
    refused(refusals[i].what, refusals[i].text, refusals[i].line, refusals[i].models,
            refusals[i].w1, refusals[i].w2);
  snprintf(t, sizeof t,
           "machines:\n  - name: a\n    model: %s\n  - name: b\n    model: %s\n",
           model_a, model_b);
  refused("features disagree", t, 5, 1, "machines[1].model", "hop_length");
  /* A secret from a FIFO (or a terminal, a device) would hold the start-up
   * until somebody writes to it: refused at once. */
  char fifo[300];
  snprintf(fifo, sizeof fifo, "%s/secret.fifo", dir);
  unlink(fifo);
  if (mkfifo(fifo, 0600) == 0) {
    snprintf(t, sizeof t,
             "outputs:\n  mqtt:\n    url: mqtt://h\n    username: u\n"
             "    password_file: %s\n",
             fifo);
    refused("password from a fifo", t, 5, 0, "password_file", "not a regular file");
    unlink(fifo);
  } else {
    CHECK(0, "mkfifo %s: %s", fifo, strerror(errno));
  }
  snprintf(t, sizeof t,
           "outputs:\n  mqtt:\n    url: mqtt://h\n    username: u\n"
           "    password_file: %s\n",
           dir);
  refused("password from a folder", t, 5, 0, "password_file", "not a regular file");
}

static void good_config(const char *model_a) {
  char path[300], t[2048], secret[300];
  snprintf(secret, sizeof secret, "%s/secret", dir);
  write_file(secret, "s3cret\n");
  snprintf(path, sizeof path, "%s/good.yaml", dir);
  snprintf(t, sizeof t,
           "node: line-3\n"
           "engine: {backend: cpu, status_every: 0.5}\n"
           "machines:\n"
           "  - name: press-1\n"
           "    model: %s\n"
           "    threshold: 12.5\n"
           "    hysteresis: {on: 2, off: 4}\n"
           "  - name: pump.2\n"
           "    model: a.safetensors\n"
           "input:\n  jack:\n    ports: [system:capture_1, system:capture_2]\n"
           "outputs:\n"
           "  events: /tmp/ev.jsonl\n"
           "  mqtt:\n"
           "    url: mqtt://127.0.0.1:1884\n"
           "    prefix: plant/ssae\n"
           "    username: ssae\n"
           "    password_file: %s\n"
           "    homeassistant: {discovery: off}\n"
           "  metrics: {listen: \"0.0.0.0:9464\"}\n"
           "  clips:\n    dir: /tmp/clips\n    format: wav\n    pre_roll: 2\n"
           "    keep: {count: 10, size_mb: 1}\n",
           model_a, secret);
  write_file(path, t);
  ssae_err err = {{0}};
  ssae_config *c = ssae_config_load(path, &err);
  CHECK(c != NULL, "good config refused: %s", err.msg);
  if (!c) return;
  CHECK(strcmp(c->node, "line-3") == 0, "node");
  CHECK(c->n_machines == 2, "machines %d", c->n_machines);
  CHECK(strcmp(c->machines[1].name, "pump.2") == 0, "name 1");
  CHECK(c->machines[0].threshold == 12.5 && isnan(c->machines[1].threshold),
        "thresholds");
  CHECK(c->machines[0].on_count == 2 && c->machines[0].off_count == 4 &&
            c->machines[1].on_count == 3 && c->machines[1].off_count == 5,
        "hysteresis and its defaults");
  char beside[320];
  snprintf(beside, sizeof beside, "%s/a.safetensors", dir);
  CHECK(c->machines[1].model && strcmp(c->machines[1].model, beside) == 0,
        "relative model path taken beside the config: %s", c->machines[1].model);
  CHECK(c->status_every_s == 0.5 && strcmp(c->backend, "cpu") == 0 && c->gpu == 0,
        "engine");
  CHECK(c->input.kind == SSAE_CONFIG_INPUT_JACK && c->input.n_ports == 2 &&
            strcmp(c->input.ports[1], "system:capture_2") == 0,
        "jack ports");
  CHECK(c->mqtt.password && strcmp(c->mqtt.password, "s3cret") == 0,
        "password from file");
  CHECK(!c->mqtt.discovery && strcmp(c->mqtt.prefix, "plant/ssae") == 0, "mqtt");
  CHECK(c->metrics_host && strcmp(c->metrics_host, "0.0.0.0") == 0 &&
            c->metrics_port == 9464,
        "metrics");
  CHECK(!c->clips.flac && c->clips.pre_roll_s == 2 && c->clips.post_roll_s == 5 &&
            c->clips.keep_count == 10 && c->clips.keep_bytes == 1048576,
        "clips");
  CHECK(ssae_config_line(c, "machines[1].name") == 8, "line of machines[1].name: %d",
        ssae_config_line(c, "machines[1].name"));
  /* Models: machine 1's file does not exist beside the config. */
  CHECK(ssae_config_check_models(c, NULL, &err) != 0 &&
            strstr(err.msg, ":9:") != NULL,
        "missing relative model: %s", err.msg);

  /* Flags over the file. */
  ssae_config_overrides o = {0};
  o.node = "line-4";
  o.names = "left,right";
  o.mqtt_url = "mqtts://broker.example:8883";
  o.metrics = "9100";
  o.clips_dir = "/tmp/other";
  o.model = model_a;
  CHECK(ssae_config_apply(c, &o, &err) == 0, "apply: %s", err.msg);
  CHECK(strcmp(c->node, "line-4") == 0 && strcmp(c->machines[0].name, "left") == 0 &&
            strcmp(c->machines[1].name, "right") == 0,
        "node and names from flags");
  CHECK(strcmp(c->mqtt.url, "mqtts://broker.example:8883") == 0, "mqtt url flag");
  CHECK(strcmp(c->metrics_host, "127.0.0.1") == 0 && c->metrics_port == 9100,
        "metrics flag: a port alone binds 127.0.0.1");
  CHECK(strcmp(c->clips.dir, "/tmp/other") == 0, "clips flag");
  ssae_model *models[2] = {0};
  CHECK(ssae_config_check_models(c, models, &err) == 0, "models: %s", err.msg);
  CHECK(models[0] && models[0] == models[1], "one load for one file");
  ssae_config_free_models(models, 2);
  o = (ssae_config_overrides){0};
  o.names = "a,b,c";
  CHECK(ssae_config_apply(c, &o, &err) != 0 && strstr(err.msg, "--names"),
        "three names for two machines refused: %s", err.msg);
  o.names = "a,a";
  CHECK(ssae_config_apply(c, &o, &err) != 0 && strstr(err.msg, "twice"),
        "duplicate names from flags refused: %s", err.msg);
  ssae_config_free(c);

  /* Machines and input channels. */
  c = ssae_config_load_mem("node: x\n", 8, "mem.yaml", &err);
  CHECK(c && ssae_config_set_channels(c, 3, &err) == 0 && c->n_machines == 3 &&
            strcmp(c->machines[1].name, "ch1") == 0,
        "a config without machines takes the input's channels: %s", err.msg);
  CHECK(c && ssae_config_set_channels(c, 2, &err) != 0 &&
            strstr(err.msg, "3 machines for 2 input channels"),
        "machine count vs channels: %s", err.msg);
  ssae_config_free(c);

  /* No file: flags only. */
  c = ssae_config_new_default(3, &err);
  CHECK(c && c->n_machines == 3 && strcmp(c->machines[2].name, "ch2") == 0,
        "default config");
  o = (ssae_config_overrides){0};
  o.mqtt_url = "ftp://x";
  CHECK(c && ssae_config_apply(c, &o, &err) != 0 && strstr(err.msg, "--mqtt"),
        "bad --mqtt refused: %s", err.msg);
  ssae_config_free(c);
}

/* engine.gpu and --gpu; a reload that changes the GPU needs a restart
 * (as the backend does): the service refuses it naming the key. */
static void gpu_key(void) {
  ssae_err err = {{0}};
  const char *text = "engine: {backend: cuda, gpu: 3}\nmachines:\n  - name: m\n";
  ssae_config *c = ssae_config_load_mem(text, strlen(text), "gpu.yaml", &err);
  CHECK(c && c->gpu == 3 && !strcmp(c->backend, "cuda"), "engine.gpu 3: %s", err.msg);
  ssae_config_overrides o = {0};
  const int one = 1;
  o.gpu = &one;
  CHECK(c && ssae_config_apply(c, &o, &err) == 0 && c->gpu == 1, "--gpu 1 over the file: %s",
        err.msg);
  o = (ssae_config_overrides){0};
  o.backend = "cpu";
  CHECK(c && ssae_config_apply(c, &o, &err) != 0 && strstr(err.msg, "engine.gpu") &&
            strstr(err.msg, "backend cpu"),
        "--backend cpu over a file's GPU 1 refused: %s", err.msg);
  ssae_config_free(c);

  /* The reload. */
  const char *a = "engine: {gpu: 0}\nmachines:\n  - name: m\n";
  const char *b = "engine: {gpu: 1}\nmachines:\n  - name: m\n";
  ssae_config *ca = ssae_config_load_mem(a, strlen(a), "a.yaml", &err);
  ssae_config *cb = ssae_config_load_mem(b, strlen(b), "b.yaml", &err);
  ssae_service_opts so;
  ssae_service_opts_default(&so);
  ssae_service *s = ca ? ssae_service_new(ca, &so, &err) : NULL;
  CHECK(s && cb, "service from engine.gpu 0: %s", err.msg);
  if (s && cb) {
    CHECK(ssae_service_reload(s, ca, NULL, NULL, &err) == 0, "reload unchanged: %s", err.msg);
    CHECK(ssae_service_reload(s, cb, NULL, NULL, &err) != 0 &&
              strstr(err.msg, "engine.gpu changed") && strstr(err.msg, "restart"),
          "reload to GPU 1 not refused as needing a restart: %s", err.msg);
    printf("ok  %-28s %s\n", "reload of engine.gpu", err.msg);
  }
  ssae_service_free(s);
  ssae_config_free(ca);
  ssae_config_free(cb);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/ssae_test_config_XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  ssae_err err = {{0}};
  ssae_model *m = ssae_model_load_default(&err);
  if (!m) {
    fprintf(stderr, "default model: %s\n", err.msg);
    return 1;
  }
  char a[300], b[300];
  snprintf(a, sizeof a, "%s/model_a.safetensors", dir);
  snprintf(b, sizeof b, "%s/model_b.safetensors", dir);
  int r = ssae_model_save(m, a, &err);
  m->feat.hop_length = 256;
  r |= ssae_model_save(m, b, &err);
  ssae_model_free(m);
  if (r) {
    fprintf(stderr, "saving models: %s\n", err.msg);
    return 1;
  }
  bad_configs(a, b);
  good_config(a);
  gpu_key();

  /* The example config that ships loads (its models need not exist). */
  const char *root = getenv("SSAE_SOURCE_ROOT");
  char ex[512];
  snprintf(ex, sizeof ex, "%s/tools/ssae.example.yaml", root ? root : ".");
  setenv("SSAE_MQTT_PASSWORD", "x", 1);
  ssae_config *c = ssae_config_load(ex, &err);
  CHECK(c != NULL, "example config: %s", err.msg);
  CHECK(c && c->n_machines == 2 && c->mqtt.discovery && c->clips.flac,
        "example config values");
  ssae_config_free(c);

  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return test_done("config: all checks passed");
}
