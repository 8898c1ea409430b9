/* The service configuration: one YAML file (libcyaml schema, checked with
 * the file, line and reason of the first problem), command-line flags merged
 * over it, and the checks that need more than the file (model files that
 * load, machine names that are unique, models whose feature settings agree).
 *
 * (Not named ssae_config.h: the build writes a header of that name.)
 *
 * Thread context: main thread only (start-up and SIGHUP reload). A loaded
 * ssae_config is read-only afterwards and may be read from any thread. */
#ifndef SSAE_SERVICE_CONFIG_H
#define SSAE_SERVICE_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "ssae_err.h"
#include "ssae_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One machine per engine channel, in channel order. */
typedef struct ssae_config_machine {
  char *name;         /* MQTT topic level and metrics label: [A-Za-z0-9_.-]+ */
  char *model;        /* model file; NULL: the built-in model */
  double threshold;   /* NAN: the model's */
  double smoothing_s; /* EMA time constant, seconds of audio (0.1) */
  int on_count;       /* hysteresis: alarm after this many above (3) */
  int off_count;      /* ... and ends after this many below (5) */
} ssae_config_machine;

typedef enum ssae_config_input_kind {
  SSAE_CONFIG_INPUT_NONE = 0, /* none in the file: the command line says */
  SSAE_CONFIG_INPUT_PORTAUDIO,
  SSAE_CONFIG_INPUT_JACK,
  SSAE_CONFIG_INPUT_FILE
} ssae_config_input_kind;

typedef struct ssae_config_input {
  ssae_config_input_kind kind;
  char *device;   /* PortAudio device name or index; NULL: the default */
  int *channels;  /* PortAudio: device channel of machine i; NULL: 0..n-1 */
  int n_channels;
  char **ports;   /* JACK: port connected to machine i's input */
  int n_ports;
  char *file;     /* a recording played through the engine */
  int realtime;   /* file: 1 paced at its own rate (default 1) */
} ssae_config_input;

typedef struct ssae_config_mqtt {
  char *url;            /* mqtt://HOST[:PORT] or mqtts://...; NULL: off */
  char *prefix;         /* "ssae" */
  char *client_id;      /* NULL: "ssae-<node>" */
  char *username;       /* NULL: none */
  char *password;       /* resolved from password_env or password_file */
  char *ca_file, *cert_file, *key_file; /* TLS (mqtts://) */
  int tls_insecure;     /* 1: do not check the broker's host name */
  int discovery;        /* Home Assistant discovery (default 1) */
  char *discovery_prefix; /* "homeassistant" */
  int queue;            /* bounded event queue, messages (4096) */
  int keepalive_s;      /* 30 */
  double reconnect_min_s, reconnect_max_s; /* backoff 0.5 .. 30 s */
} ssae_config_mqtt;

typedef struct ssae_config_clips {
  char *dir;            /* NULL: no clips */
  int flac;             /* 1: FLAC (default), 0: WAV */
  double pre_roll_s;    /* 5 */
  double post_roll_s;   /* 5 */
  double max_length_s;  /* 120: a long alarm's clip ends here */
  int keep_count;       /* 0: unlimited (default 500) */
  double keep_age_s;    /* 0: unlimited (default 30 days) */
  uint64_t keep_bytes;  /* 0: unlimited (default 2 GiB) */
  int picture;          /* 1: a `ssae report` picture (.png) beside each clip */
} ssae_config_clips;

typedef struct ssae_config {
  char *path;           /* the file read; NULL when built from flags */
  char *node;           /* "ssae" unless set: MQTT topic level, HA device */
  ssae_config_machine *machines;
  int n_machines;
  char *backend;        /* "auto" */
  int gpu;              /* engine.gpu: the CUDA device (0: the first) */
  double status_every_s; /* state cadence, seconds of audio (1) */
  ssae_config_input input;
  char *events;         /* JSON-lines file; NULL: none; "-": stdout */
  ssae_config_mqtt mqtt;
  char *metrics_host;   /* NULL: no HTTP endpoint */
  int metrics_port;     /* 0: any free one (ssae_service_metrics_port) */
  ssae_config_clips clips;
  struct ssae_config_lines *lines; /* where each key was (for messages) */
} ssae_config;

/* Reads and checks a file: schema (unknown keys, types, values), then the
 * secrets (password_env / password_file). Errors read
 * "FILE:LINE: KEY: reason". Models are not opened here: see
 * ssae_config_check_models. */
ssae_config *ssae_config_load(const char *path, ssae_err *err);
/* Parses YAML text; `name` stands for the file in messages. */
ssae_config *ssae_config_load_mem(const char *text, size_t len,
                                  const char *name, ssae_err *err);
/* Defaults with `channels` machines named ch0, ch1, ... (no file). */
ssae_config *ssae_config_new_default(int channels, ssae_err *err);
void ssae_config_free(ssae_config *c);

/* engine.status_every's range, (0, MAX] seconds: the machines' state (MQTT,
 * metrics) comes at that cadence. */
#define SSAE_CONFIG_STATUS_EVERY_MAX 3600.0

/* The command-line flags that go over the file; NULL/0 fields leave the
 * file's value. Secrets have no flag (never on a command line). */
typedef struct ssae_config_overrides {
  const char *node;      /* --node NAME */
  const char *names;     /* --names A,B,...: one per channel */
  const char *mqtt_url;  /* --mqtt mqtt[s]://HOST:PORT */
  const char *metrics;   /* --metrics HOST:PORT or PORT */
  const char *clips_dir; /* --clips DIR */
  int clip_pictures;     /* --clip-pictures: 1 sets clips.picture */
  const char *events;    /* --events FILE */
  const char *model;     /* --model M: every machine's model */
  const char *backend;   /* --backend */
  const int *gpu;        /* --gpu N */
  double threshold;      /* --threshold X (0: keep) */
} ssae_config_overrides;

/* Applies the flags. --names sets the machine count when the file has no
 * machines, else must name each one. Re-runs the value checks. */
int ssae_config_apply(ssae_config *c, const ssae_config_overrides *o,
                      ssae_err *err);

/* The input has `channels` channels: a config without machines gets
 * ch0..chN-1 (defaults), one with machines must name exactly that many
 * (else -1 with both counts). Call after ssae_config_apply. */
int ssae_config_set_channels(ssae_config *c, int channels, ssae_err *err);

/* Loads every machine's model (NULL path: the built-in one) and checks that
 * their feature settings, mel bands and frames agree (one engine front end
 * serves them all). models_out (n_machines entries, may be NULL) receives
 * them, else they are freed. Messages name the file and line of the machine
 * whose model failed or disagrees. */
int ssae_config_check_models(const ssae_config *c, ssae_model **models_out,
                             ssae_err *err);
/* Frees what check_models gave (machines with the same model file share
 * one model: each is freed once). */
void ssae_config_free_models(ssae_model **models, int n);

/* Line of a key path ("machines[1].model", "outputs.mqtt.url") in the
 * file, 0 when it was not in the file. */
int ssae_config_line(const ssae_config *c, const char *key_path);

/* Parses HOST:PORT (or PORT, host 127.0.0.1; port 0: any free one). 0 or
 * -1. */
int ssae_config_parse_hostport(const char *s, char **host, int *port,
                               ssae_err *err);

#ifdef __cplusplus
}
#endif
#endif
