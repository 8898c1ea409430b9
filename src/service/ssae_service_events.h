/* Events a plant can use: every engine event as JSON with the machine's
 * name, the node, the audio time `t` (as today) and a wall-clock time
 * (ISO 8601 UTC, milliseconds); each alarm gets a unique `id` (a random
 * UUID) shared by its alarm_on and alarm_off; alarm_off adds the alarm's
 * duration and peak window score; alarm events carry the clip path when
 * clips are written. The JSON is ssae_event_json's (today's keys, SPEC
 * section 4) with these keys added: nothing is renamed.
 *
 * Thread context: the engine's worker thread (ssae_event_fn callbacks); a
 * tracker is used by one thread at a time. No call here runs on the audio
 * thread. */
#ifndef SSAE_SERVICE_EVENTS_H
#define SSAE_SERVICE_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "ssae_engine.h"
#include "ssae_err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SSAE_ALARM_ID_LEN 37 /* UUID text and its NUL */
#define SSAE_ISO_TIME_LEN 32

/* What an alarm event adds to the engine's event. */
typedef struct ssae_alarm_info {
  char id[SSAE_ALARM_ID_LEN];
  double t_on;       /* audio time of its alarm_on */
  double wall_on;    /* wall clock of its alarm_on (Unix seconds) */
  double duration_s; /* alarm_off: t - t_on (seconds of audio) */
  double peak_score; /* alarm_off: highest window score of the alarm */
  const char *clip;  /* clip file of the alarm, NULL when none */
} ssae_alarm_info;

typedef struct ssae_alarm_tracker ssae_alarm_tracker;

ssae_alarm_tracker *ssae_alarm_tracker_new(int channels, ssae_err *err);
void ssae_alarm_tracker_free(ssae_alarm_tracker *t);

/* Follows one engine event. For ALARM_ON and ALARM_OFF fills *info and
 * returns 1 (a new id on ALARM_ON; the same id on its ALARM_OFF); WINDOW
 * events raise the peak of an open alarm (the engine sends them with
 * cfg.emit_windows = 1; without them the peak is the larger of the
 * alarm_on and alarm_off windows' scores); others return 0. */
int ssae_alarm_tracker_update(ssae_alarm_tracker *t, const ssae_event *ev,
                              ssae_alarm_info *info);

/* The open alarm of a channel (id, t_on) or NULL. */
const ssae_alarm_info *ssae_alarm_tracker_open(const ssae_alarm_tracker *t,
                                               int channel);

/* Wall clock as "2026-11-24T06:21:16.123Z". */
void ssae_iso_time(double unix_s, char out[SSAE_ISO_TIME_LEN]);
double ssae_wall_now(void);

/* One JSON line (with "\n") for an event: ssae_event_json's keys plus
 * "node", "machine" (channel >= 0), "time" (wall clock `wall`), and for
 * alarms "id", "clip" (when info->clip), on alarm_off "duration_s" and
 * "peak_score". Returns the length, or -1 when buf is too small. No
 * allocation. */
int ssae_service_event_json(const ssae_event *ev, const char *node,
                            const char *machine, const ssae_alarm_info *info,
                            double wall, char *buf, size_t len);

/* Appends ,"key":"value" with JSON escaping; helper for the other
 * formatters of the service. Returns the new length or -1 (too small). */
int ssae_json_put_str(char *buf, size_t len, size_t used, const char *key,
                      const char *value);

#ifdef __cplusplus
}
#endif
#endif
