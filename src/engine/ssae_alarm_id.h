/* Alarm identities and wall-clock times (SPEC section 4): what the engine
 * stamps on its alarm events, and the ISO 8601 text every event writer
 * uses. Any thread; none of it runs on the audio thread (a random id may
 * take a system call). */
#ifndef SSAE_ALARM_ID_H
#define SSAE_ALARM_ID_H

#include "ssae_engine.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SSAE_ISO_TIME_LEN 32

/* Wall clock (CLOCK_REALTIME) in Unix seconds. */
double ssae_wall_now(void);

/* Wall clock as "2026-11-24T06:21:16.123Z" (UTC, milliseconds truncated). */
void ssae_iso_time(double unix_s, char out[SSAE_ISO_TIME_LEN]);

/* A new version 4 UUID as text: unique across channels, hosts and
 * restarts (getrandom; before the kernel has entropy, the time and a
 * process-wide counter). */
void ssae_alarm_new_id(char out[SSAE_ALARM_ID_LEN]);

#ifdef __cplusplus
}
#endif
#endif
