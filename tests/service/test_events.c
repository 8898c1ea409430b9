/* Events a plant can use: every line keeps today's JSON (ssae_event_json's
 * text is its prefix, byte for byte) and adds node, machine, a wall-clock
 * time in ISO 8601 UTC with milliseconds; an alarm's id is a UUID shared by
 * its alarm_on and alarm_off and new for the next alarm; alarm_off adds the
 * duration in audio seconds and the peak window score (window events
 * included); the clip path goes into both. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../ssae_test.h"
#include "ssae_service_events.h"

static int iso_ok(const char *s) {
  /* 2026-11-24T06:21:16.123Z */
  const char *pat = "dddd-dd-ddTdd:dd:dd.dddZ";
  if (strlen(s) != strlen(pat)) return 0;
  for (size_t i = 0; pat[i]; i++)
    if (pat[i] == 'd' ? (s[i] < '0' || s[i] > '9') : s[i] != pat[i]) return 0;
  return 1;
}

static const char *find_str(const char *json, const char *key, char *out,
                            size_t len) {
  char k[64];
  snprintf(k, sizeof k, "\"%s\":\"", key);
  const char *p = strstr(json, k);
  if (!p) return NULL;
  p += strlen(k);
  size_t n = strcspn(p, "\"");
  if (n >= len) return NULL;
  memcpy(out, p, n);
  out[n] = 0;
  return out;
}

int main(void) {
  ssae_err err = {{0}};
  ssae_alarm_tracker *t = ssae_alarm_tracker_new(2, &err);
  CHECK(t != NULL, "tracker: %s", err.msg);
  if (!t) return 1;
  ssae_event on = {SSAE_EVENT_ALARM_ON, 1, 12.5, 390, 3.0, 3.5, 2.0, NULL, NULL};
  ssae_event win = {SSAE_EVENT_WINDOW, 1, 13.0, 405, 7.25, 7.25, 2.0, NULL, NULL};
  ssae_event win0 = {SSAE_EVENT_WINDOW, 0, 13.0, 405, 99.0, 99.0, 2.0, NULL, NULL};
  ssae_event off = {SSAE_EVENT_ALARM_OFF, 1, 15.25, 476, 1.0, 0.5, 2.0, NULL, NULL};
  ssae_alarm_info a, b;
  CHECK(ssae_alarm_tracker_update(t, &on, &a) == 1, "alarm_on");
  CHECK(ssae_alarm_tracker_open(t, 1) && !ssae_alarm_tracker_open(t, 0), "open");
  CHECK(ssae_alarm_tracker_update(t, &win, &b) == 0, "window");
  CHECK(ssae_alarm_tracker_update(t, &win0, &b) == 0, "other channel's window");
  CHECK(ssae_alarm_tracker_update(t, &off, &b) == 1, "alarm_off");
  CHECK(strcmp(a.id, b.id) == 0, "one id for on and off: %s %s", a.id, b.id);
  CHECK(strlen(a.id) == 36 && a.id[8] == '-' && a.id[14] == '4', "UUID v4: %s", a.id);
  CHECK(fabs(b.duration_s - 2.75) < 1e-12, "duration %g", b.duration_s);
  CHECK(b.peak_score == 7.25, "peak %g (the other channel's 99 must not count)",
        b.peak_score);
  CHECK(!ssae_alarm_tracker_open(t, 1), "closed");
  ssae_alarm_info c;
  ssae_alarm_tracker_update(t, &on, &c);
  CHECK(strcmp(c.id, a.id) != 0, "next alarm, new id");

  /* JSON: today's line is the prefix; keys added. */
  char today[1024], line[2048], v[128];
  b.clip = "/var/lib/ssae/clips/ssae_pump_x.flac";
  int n0 = ssae_event_json(&off, today, sizeof today);
  int n = ssae_service_event_json(&off, "hall-2", "pump \"2\"", &b,
                                  1795500000.25, line, sizeof line);
  CHECK(n0 > 2 && n > n0, "lengths %d %d", n0, n);
  CHECK(strncmp(line, today, (size_t)n0 - 2) == 0,
        "today's keys are not the prefix:\n%s%s", today, line);
  CHECK(line[n - 1] == '\n' && line[n - 2] == '}', "one line");
  CHECK(find_str(line, "node", v, sizeof v) && strcmp(v, "hall-2") == 0, "node");
  CHECK(strstr(line, "\"machine\":\"pump \\\"2\\\"\""), "machine escaped: %s", line);
  CHECK(find_str(line, "time", v, sizeof v) && iso_ok(v), "time %s", v);
  CHECK(strcmp(v, "2026-11-24T06:00:00.250Z") == 0, "wall clock: %s", v);
  CHECK(find_str(line, "id", v, sizeof v) && strcmp(v, a.id) == 0, "id");
  CHECK(strstr(line, "\"duration_s\":2.75") && strstr(line, "\"peak_score\":7.25"),
        "duration and peak: %s", line);
  CHECK(find_str(line, "clip", v, sizeof v) && strcmp(v, b.clip) == 0, "clip");
  printf("%s", line);

  /* A status event: no machine (channel null), still node and time. */
  ssae_engine_stats st = {0};
  st.backend = "cpu";
  ssae_event s = {SSAE_EVENT_STATUS, -1, 20.0, 0, NAN, NAN, NAN, &st, NULL};
  n0 = ssae_event_json(&s, today, sizeof today);
  n = ssae_service_event_json(&s, "hall-2", NULL, NULL, ssae_wall_now(), line,
                              sizeof line);
  CHECK(n > n0 && strncmp(line, today, (size_t)n0 - 2) == 0, "status prefix");
  CHECK(!strstr(line, "\"machine\"") && !strstr(line, "\"id\""), "status keys: %s",
        line);
  printf("%s", line);
  CHECK(ssae_service_event_json(&s, "hall-2", NULL, NULL, 0, line, 40) == -1,
        "a small buffer is refused");
  ssae_alarm_tracker_free(t);
  return test_done("events: all checks passed");
}
