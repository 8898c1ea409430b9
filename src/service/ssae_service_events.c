/* Events a plant can use (see the header). Thread context: the engine's
 * worker thread. */
#include "ssae_service_events.h"

#include "ssae_json.h"

#include <stdio.h>

int ssae_json_put_str(char *buf, size_t len, size_t used, const char *key,
                      const char *value) {
  int n = snprintf(buf + used, len - used, ",\"%s\":\"", key);
  if (n < 0 || (size_t)n >= len - used) return -1;
  used += (size_t)n;
  n = ssae_json_escape(buf, len, used, value);
  if (n < 0) return -1;
  used = (size_t)n;
  if (used + 2 > len) return -1;
  buf[used++] = '"';
  buf[used] = 0;
  return (int)used;
}

int ssae_service_event_json(const ssae_event *ev, const char *node, const char *machine,
                            const char *clip, double wall, char *buf, size_t len) {
  int n = ssae_event_json_named(ev, machine, clip, buf, len);
  /* The line ends in "}\n": the added keys go before the brace. */
  if (n < 2 || buf[n - 2] != '}') return -1;
  int u = n - 2;
  const int alarm = ev->type == SSAE_EVENT_ALARM_ON || ev->type == SSAE_EVENT_ALARM_OFF;
  if (node && (u = ssae_json_put_str(buf, len, (size_t)u, "node", node)) < 0) return -1;
  if (!(alarm && ev->alarm)) { /* an alarm's time is the engine's */
    char iso[SSAE_ISO_TIME_LEN];
    ssae_iso_time(wall, iso);
    if ((u = ssae_json_put_str(buf, len, (size_t)u, "time", iso)) < 0) return -1;
  }
  if ((size_t)u + 3 > len) return -1;
  buf[u++] = '}';
  buf[u++] = '\n';
  buf[u] = 0;
  return u;
}
