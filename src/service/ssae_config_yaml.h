/* Checks a YAML document against a libcyaml schema with libyaml's events,
 * which carry line numbers (libcyaml 1.3's own messages point at the
 * enclosing mapping, not at the offending line, and it takes "3x" for an
 * int). Records the line of every key it meets, so that checks made after
 * loading can name the line too. Private to ssae_config.c.
 *
 * Thread context: main thread (config load). */
#ifndef SSAE_CONFIG_YAML_H
#define SSAE_CONFIG_YAML_H

#include <stddef.h>

#include <cyaml/cyaml.h>

#include "ssae_err.h"

typedef struct ssae_config_lines {
  char **paths; /* "outputs.mqtt.url", "machines[1].name" */
  int *lines;   /* 1-based */
  size_t n, cap;
} ssae_config_lines;

/* 0 when the document matches the schema; else -1 with
 * "NAME:LINE: PATH: reason". Fills `lines` either way. */
int ssae_config_yaml_check(const char *text, size_t len, const char *name,
                           const cyaml_schema_value_t *schema,
                           ssae_config_lines *lines, ssae_err *err);

int ssae_config_lines_find(const ssae_config_lines *l, const char *path);
void ssae_config_lines_free(ssae_config_lines *l);

#endif
