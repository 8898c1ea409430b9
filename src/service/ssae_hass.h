/* Home Assistant MQTT discovery: per machine a device with a binary_sensor
 * (device_class problem: the alarm) and a sensor (the smoothed anomaly
 * score), both read from the machine's retained state topic and available
 * while the node's status topic says "online".
 *
 * Thread context: any thread (pure formatting, no allocation). */
#ifndef SSAE_HASS_H
#define SSAE_HASS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ssae_hass_entity {
  SSAE_HASS_ALARM = 0, /* binary_sensor, device_class problem */
  SSAE_HASS_SCORE = 1, /* sensor, the smoothed score */
  SSAE_HASS_N_ENTITIES = 2
} ssae_hass_entity;

typedef struct ssae_hass_names {
  const char *discovery_prefix; /* "homeassistant" */
  const char *prefix;           /* "ssae" */
  const char *node;
  const char *machine;
  const char *model;            /* shown as the device's model; may be NULL */
} ssae_hass_names;

/* Topic and JSON payload of one entity's config. 0, or -1 when a buffer
 * is too small. */
int ssae_hass_config(const ssae_hass_names *n, ssae_hass_entity e, char *topic,
                     size_t topic_len, char *payload, size_t payload_len);

/* "<prefix>/<node>/status", "<prefix>/<node>/<machine>/state" and
 * ".../event". 0 or -1 (too small). */
int ssae_topic_status(const char *prefix, const char *node, char *out,
                      size_t len);
int ssae_topic_machine(const char *prefix, const char *node,
                       const char *machine, const char *leaf, char *out,
                       size_t len);

#ifdef __cplusplus
}
#endif
#endif
