/* Events a plant can use: every engine event as JSON with the machine's
 * name, the node, the audio time `t` and a wall-clock time (ISO 8601 UTC,
 * milliseconds). The alarm keys of SPEC section 4 (id, time, duration_s,
 * peak_score) come from the engine (ssae_alarm_info), with the clip path
 * when clips are written. The JSON is ssae_event_json_named's with keys
 * added: nothing is renamed.
 *
 * Thread context: the engine's worker thread (ssae_event_fn callbacks). No
 * call here runs on the audio thread. */
#ifndef SSAE_SERVICE_EVENTS_H
#define SSAE_SERVICE_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "ssae_alarm_id.h"
#include "ssae_engine.h"
#include "ssae_err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One JSON line (with "\n") for an event: ssae_event_json_named's keys
 * (machine: the channel's name, given for channel >= 0; alarms' id, time,
 * duration_s, peak_score and reason from the engine, and clip when not
 * NULL) plus "node" and "time" for the other events (wall clock `wall`).
 * Returns the length, or -1 when buf is too small. No allocation. */
int ssae_service_event_json(const ssae_event *ev, const char *node, const char *machine,
                            const char *clip, double wall, char *buf, size_t len);

/* Appends ,"key":"value" with JSON escaping; helper for the other
 * formatters of the service. Returns the new length or -1 (too small). */
int ssae_json_put_str(char *buf, size_t len, size_t used, const char *key,
                      const char *value);

#ifdef __cplusplus
}
#endif
#endif
