/* The config file's libcyaml schema and the structs libcyaml loads it into
 * (every optional key a pointer, NULL when absent, so that defaults are
 * applied in one place: ssae_config.c). Private to src/service.
 *
 * Thread context: main thread (config load). */
#ifndef SSAE_CONFIG_SCHEMA_H
#define SSAE_CONFIG_SCHEMA_H

#include <stdbool.h>

#include <cyaml/cyaml.h>

typedef struct cfg_hyst {
  int *on, *off;
} cfg_hyst;

typedef struct cfg_machine {
  char *name, *model;
  double *threshold, *smoothing;
  cfg_hyst *hysteresis;
} cfg_machine;

typedef struct cfg_engine {
  char *backend;
  int *gpu;
  double *status_every;
} cfg_engine;

typedef struct cfg_portaudio {
  char *device;
  int *channels;
  unsigned channels_count;
} cfg_portaudio;

typedef struct cfg_jack {
  char **ports;
  unsigned ports_count;
} cfg_jack;

typedef struct cfg_file {
  char *path;
  bool *realtime;
} cfg_file;

typedef struct cfg_input {
  cfg_portaudio *portaudio;
  cfg_jack *jack;
  cfg_file *file;
} cfg_input;

typedef struct cfg_tls {
  char *ca_file, *cert_file, *key_file;
  bool *insecure;
} cfg_tls;

typedef struct cfg_hass {
  bool *discovery;
  char *prefix;
} cfg_hass;

typedef struct cfg_mqtt {
  char *url, *prefix, *client_id, *username, *password_env, *password_file;
  cfg_tls *tls;
  cfg_hass *homeassistant;
  int *queue, *keepalive;
  double *reconnect_min, *reconnect_max;
} cfg_mqtt;

typedef struct cfg_metrics {
  char *listen;
} cfg_metrics;

typedef struct cfg_keep {
  int *count;
  double *age_days, *size_mb;
} cfg_keep;

typedef enum cfg_clip_format { CFG_CLIP_FLAC = 0, CFG_CLIP_WAV = 1 } cfg_clip_format;

typedef struct cfg_clips {
  char *dir;
  cfg_clip_format *format;
  double *pre_roll, *post_roll, *max_length;
  cfg_keep *keep;
  bool *picture;
} cfg_clips;

typedef struct cfg_outputs {
  char *events;
  cfg_mqtt *mqtt;
  cfg_metrics *metrics;
  cfg_clips *clips;
} cfg_outputs;

typedef struct cfg_top {
  char *node;
  cfg_engine *engine;
  cfg_machine *machines;
  unsigned machines_count;
  cfg_input *input;
  cfg_outputs *outputs;
} cfg_top;

extern const cyaml_schema_value_t ssae_config_schema;

#endif
