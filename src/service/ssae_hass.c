/* Home Assistant discovery payloads (see the header). Thread context: any
 * thread. */
#include "ssae_hass.h"

#include <stdio.h>
#include <string.h>

#include "ssae_config.h" /* the build's: SSAE_VERSION */

/* Discovery ids allow [a-zA-Z0-9_-]; machine and node names also allow '.'. */
static void id_part(const char *s, char *out, size_t len) {
  size_t i = 0;
  for (; s && s[i] && i + 1 < len; i++)
    out[i] = s[i] == '.' ? '_' : s[i];
  out[i] = 0;
}

static int fits(int n, size_t len) { return n >= 0 && (size_t)n < len; }

int ssae_topic_status(const char *prefix, const char *node, char *out,
                      size_t len) {
  return fits(snprintf(out, len, "%s/%s/status", prefix, node), len) ? 0 : -1;
}

int ssae_topic_machine(const char *prefix, const char *node,
                       const char *machine, const char *leaf, char *out,
                       size_t len) {
  return fits(snprintf(out, len, "%s/%s/%s/%s", prefix, node, machine, leaf),
              len)
             ? 0
             : -1;
}

int ssae_hass_config(const ssae_hass_names *n, ssae_hass_entity e, char *topic,
                     size_t topic_len, char *payload, size_t payload_len) {
  char node[80], machine[80], state[400], status[300];
  id_part(n->node, node, sizeof node);
  id_part(n->machine, machine, sizeof machine);
  if (ssae_topic_machine(n->prefix, n->node, n->machine, "state", state,
                         sizeof state) ||
      ssae_topic_status(n->prefix, n->node, status, sizeof status))
    return -1;
  const char *component = e == SSAE_HASS_ALARM ? "binary_sensor" : "sensor";
  const char *object = e == SSAE_HASS_ALARM ? "alarm" : "score";
  if (!fits(snprintf(topic, topic_len, "%s/%s/ssae_%s/%s_%s/config",
                     n->discovery_prefix, component, node, machine, object),
            topic_len))
    return -1;
  const char *specific =
      e == SSAE_HASS_ALARM
          ? "\"name\":\"Anomaly\",\"device_class\":\"problem\","
            "\"value_template\":\"{{ 'ON' if value_json.alarm else 'OFF' }}\","
          : "\"name\":\"Anomaly score\",\"state_class\":\"measurement\","
            "\"value_template\":\"{{ value_json.score }}\","
            "\"suggested_display_precision\":3,";
  int w = snprintf(
      payload, payload_len,
      "{%s\"unique_id\":\"ssae_%s_%s_%s\",\"object_id\":\"ssae_%s_%s_%s\","
      "\"state_topic\":\"%s\",\"json_attributes_topic\":\"%s\","
      "\"availability_topic\":\"%s\",\"payload_available\":\"online\","
      "\"payload_not_available\":\"offline\","
      "\"device\":{\"identifiers\":[\"ssae_%s_%s\"],\"name\":\"%s\","
      "\"manufacturer\":\"ssae\",\"model\":\"%s\",\"sw_version\":\"%s\"}}",
      specific, node, machine, object, node, machine, object, state, state,
      status, node, machine, n->machine,
      n->model ? n->model : "SpectralShapeAutoencoder", SSAE_VERSION);
  return fits(w, payload_len) ? 0 : -1;
}
