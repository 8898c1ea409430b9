/* Events a plant can use: the engine's alarm keys (SPEC section 4: machine,
 * time, id; alarm_off adds duration_s, peak_score and the reason) in every
 * writer's line; the service's line is the engine's with node, the wall
 * clock of other events and the clip path added, each key once; alarm ids
 * are version 4 UUIDs. (The engine's ids, durations and peaks per alarm:
 * tests/engine/test_engine_detector.c.) */
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

static int count(const char *json, const char *key) {
  char k[64];
  snprintf(k, sizeof k, "\"%s\":", key);
  int n = 0;
  for (const char *p = json; (p = strstr(p, k)); p++) n++;
  return n;
}

int main(void) {
  char id1[SSAE_ALARM_ID_LEN], id2[SSAE_ALARM_ID_LEN];
  ssae_alarm_new_id(id1);
  ssae_alarm_new_id(id2);
  CHECK(strlen(id1) == 36 && id1[8] == '-' && id1[13] == '-' && id1[14] == '4' &&
            strchr("89ab", id1[19]),
        "UUID v4: %s", id1);
  CHECK(strcmp(id1, id2) != 0, "two ids the same: %s", id1);

  ssae_alarm_info a;
  memset(&a, 0, sizeof a);
  memcpy(a.id, id1, sizeof a.id);
  a.t_on = 12.5;
  a.wall_on = 1795500000.0;
  a.wall = 1795500000.25;
  a.duration_s = 2.75;
  a.peak_score = 7.25;
  a.reason = "score";
  ssae_event off = {SSAE_EVENT_ALARM_OFF, 1, 15.25, 476, 1.0, 0.5, 2.0, NULL, NULL, &a};

  /* The engine's line: SPEC section 4's alarm keys, machine "ch1". */
  char line[2048], v[128];
  int n = ssae_event_json(&off, line, sizeof line);
  CHECK(n > 2 && line[n - 1] == '\n' && line[n - 2] == '}', "one line: %s", line);
  CHECK(find_str(line, "machine", v, sizeof v) && !strcmp(v, "ch1"), "machine: %s", line);
  CHECK(find_str(line, "id", v, sizeof v) && !strcmp(v, id1), "id: %s", line);
  CHECK(find_str(line, "time", v, sizeof v) && !strcmp(v, "2026-11-24T06:00:00.250Z"),
        "time: %s", line);
  CHECK(strstr(line, "\"duration_s\":2.75") && strstr(line, "\"peak_score\":7.25") &&
            strstr(line, "\"reason\":\"score\""),
        "duration, peak, reason: %s", line);
  CHECK(strstr(line, "\"t\":15.25") && strstr(line, "\"event\":\"alarm_off\"") &&
            strstr(line, "\"score\":1,") && strstr(line, "\"threshold\":2"),
        "today's keys: %s", line);
  printf("%s", line);

  /* alarm_on: id and time, no duration. */
  ssae_event on = {SSAE_EVENT_ALARM_ON, 1, 12.5, 390, 3.0, 3.5, 2.0, NULL, NULL, &a};
  a.reason = NULL;
  n = ssae_event_json(&on, line, sizeof line);
  CHECK(n > 0 && count(line, "id") == 1 && count(line, "time") == 1 &&
            !count(line, "duration_s") && !count(line, "reason"),
        "alarm_on: %s", line);

  /* The service's line: the engine's with the machine's name, node and
   * clip; the alarm's time once. */
  a.reason = "silence";
  const char *clip = "/var/lib/ssae/clips/ssae_pump_x.flac";
  char named[2048];
  int n0 = ssae_event_json_named(&off, "pump \"2\"", clip, named, sizeof named);
  n = ssae_service_event_json(&off, "hall-2", "pump \"2\"", clip, 0, line, sizeof line);
  CHECK(n0 > 2 && n > n0, "lengths %d %d", n0, n);
  CHECK(strncmp(line, named, (size_t)n0 - 2) == 0, "the engine's line is not the prefix:\n%s%s",
        named, line);
  CHECK(line[n - 1] == '\n' && line[n - 2] == '}', "one line");
  CHECK(find_str(line, "node", v, sizeof v) && strcmp(v, "hall-2") == 0, "node");
  CHECK(strstr(line, "\"machine\":\"pump \\\"2\\\"\"") && count(line, "machine") == 1,
        "machine escaped, once: %s", line);
  CHECK(count(line, "time") == 1 && find_str(line, "time", v, sizeof v) &&
            !strcmp(v, "2026-11-24T06:00:00.250Z"),
        "the alarm's time, once: %s", line);
  CHECK(count(line, "id") == 1 && strstr(line, "\"reason\":\"silence\""), "id, reason");
  CHECK(find_str(line, "clip", v, sizeof v) && strcmp(v, clip) == 0, "clip");
  printf("%s", line);

  /* A status event: no machine (channel null), node and the wall clock. */
  ssae_engine_stats st = {0};
  st.backend = "cpu";
  ssae_event s = {SSAE_EVENT_STATUS, -1, 20.0, 0, NAN, NAN, NAN, &st, NULL, NULL};
  n0 = ssae_event_json(&s, named, sizeof named);
  n = ssae_service_event_json(&s, "hall-2", NULL, NULL, ssae_wall_now(), line, sizeof line);
  CHECK(n > n0 && strncmp(line, named, (size_t)n0 - 2) == 0, "status prefix");
  CHECK(!strstr(line, "\"machine\"") && !strstr(line, "\"id\""), "status keys: %s", line);
  CHECK(find_str(line, "time", v, sizeof v) && iso_ok(v), "time %s", v);
  printf("%s", line);
  CHECK(ssae_service_event_json(&s, "hall-2", NULL, NULL, 0, line, 40) == -1,
        "a small buffer is refused");
  CHECK(ssae_event_json(&off, line, 120) == -1, "a small buffer is refused (engine)");
  return test_done("events: all checks passed");
}
