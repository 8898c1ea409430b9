/* Events a plant can use (see the header). Thread context: the engine's
 * worker thread. */
#include "ssae_service_events.h"

#include "ssae_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

struct ssae_alarm_tracker {
  int channels;
  unsigned char *open;   /* per channel: an alarm is on */
  ssae_alarm_info *info; /* per channel: the open (or last) alarm */
  uint64_t seq;          /* fallback id source when getrandom fails */
};

ssae_alarm_tracker *ssae_alarm_tracker_new(int channels, ssae_err *err) {
  ssae_alarm_tracker *t = calloc(1, sizeof *t);
  if (t) {
    t->channels = channels;
    t->open = calloc((size_t)channels, 1);
    t->info = calloc((size_t)channels, sizeof *t->info);
  }
  if (!t || !t->open || !t->info || channels < 1) {
    ssae_alarm_tracker_free(t);
    ssae_err_set(err, channels < 1 ? "alarm tracker: no channels" : "out of memory");
    return NULL;
  }
  return t;
}

void ssae_alarm_tracker_free(ssae_alarm_tracker *t) {
  if (!t) return;
  free(t->open);
  free(t->info);
  free(t);
}

double ssae_wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void ssae_iso_time(double unix_s, char out[SSAE_ISO_TIME_LEN]) {
  time_t s = (time_t)floor(unix_s);
  int ms = (int)((unix_s - (double)s) * 1000.0);
  if (ms > 999) ms = 999;
  if (ms < 0) ms = 0;
  struct tm tm;
  gmtime_r(&s, &tm);
  char date[24];
  if (strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &tm) == 0) date[0] = 0;
  snprintf(out, SSAE_ISO_TIME_LEN, "%.20s.%03dZ", date, ms);
}

/* A version 4 UUID: unique across channels, nodes and restarts. */
static void new_id(ssae_alarm_tracker *t, char out[SSAE_ALARM_ID_LEN]) {
  unsigned char b[16];
  if (getrandom(b, sizeof b, GRND_NONBLOCK) != (ssize_t)sizeof b) {
    /* No entropy yet (early boot): time and a counter are unique enough. */
    uint64_t a = (uint64_t)(ssae_wall_now() * 1e6), c = ++t->seq;
    for (int i = 0; i < 8; i++) {
      b[i] = (unsigned char)(a >> (8 * i));
      b[8 + i] = (unsigned char)(c >> (8 * i));
    }
  }
  b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
  b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
  snprintf(out, SSAE_ALARM_ID_LEN,
           "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
           b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10],
           b[11], b[12], b[13], b[14], b[15]);
}

int ssae_alarm_tracker_update(ssae_alarm_tracker *t, const ssae_event *ev,
                              ssae_alarm_info *info) {
  int c = ev->channel;
  if (c < 0 || c >= t->channels) return 0;
  ssae_alarm_info *a = &t->info[c];
  switch (ev->type) {
  case SSAE_EVENT_WINDOW:
    if (t->open[c] && isfinite(ev->raw_score) && ev->raw_score > a->peak_score)
      a->peak_score = ev->raw_score;
    return 0;
  case SSAE_EVENT_ALARM_ON:
    memset(a, 0, sizeof *a);
    new_id(t, a->id);
    a->t_on = ev->t;
    a->wall_on = ssae_wall_now();
    a->peak_score = isfinite(ev->raw_score) ? ev->raw_score : 0;
    t->open[c] = 1;
    *info = *a;
    return 1;
  case SSAE_EVENT_ALARM_OFF:
    if (!t->open[c]) {
      /* An off without its on (cannot happen with the engine): still give
       * it an id so that consumers can key on it. */
      memset(a, 0, sizeof *a);
      new_id(t, a->id);
      a->t_on = ev->t;
      a->wall_on = ssae_wall_now();
    }
    if (isfinite(ev->raw_score) && ev->raw_score > a->peak_score)
      a->peak_score = ev->raw_score;
    a->duration_s = ev->t - a->t_on;
    if (a->duration_s < 0) a->duration_s = 0;
    t->open[c] = 0;
    *info = *a;
    return 1;
  default:
    return 0;
  }
}

const ssae_alarm_info *ssae_alarm_tracker_open(const ssae_alarm_tracker *t,
                                               int channel) {
  if (!t || channel < 0 || channel >= t->channels || !t->open[channel])
    return NULL;
  return &t->info[channel];
}

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

static int put_num(char *buf, size_t len, size_t used, const char *key,
                   double v) {
  int n = isfinite(v) ? snprintf(buf + used, len - used, ",\"%s\":%.9g", key, v)
                      : snprintf(buf + used, len - used, ",\"%s\":null", key);
  if (n < 0 || (size_t)n >= len - used) return -1;
  return (int)(used + (size_t)n);
}

int ssae_service_event_json(const ssae_event *ev, const char *node,
                            const char *machine, const ssae_alarm_info *info,
                            double wall, char *buf, size_t len) {
  int n = ssae_event_json(ev, buf, len);
  /* Today's line ends in "}\n": the added keys go before the brace. */
  if (n < 2 || buf[n - 2] != '}') return -1;
  int u = n - 2;
  char iso[SSAE_ISO_TIME_LEN];
  ssae_iso_time(wall, iso);
  if (node && (u = ssae_json_put_str(buf, len, (size_t)u, "node", node)) < 0)
    return -1;
  if (machine && ev->channel >= 0 &&
      (u = ssae_json_put_str(buf, len, (size_t)u, "machine", machine)) < 0)
    return -1;
  if ((u = ssae_json_put_str(buf, len, (size_t)u, "time", iso)) < 0) return -1;
  int alarm = ev->type == SSAE_EVENT_ALARM_ON || ev->type == SSAE_EVENT_ALARM_OFF;
  if (alarm && info) {
    if ((u = ssae_json_put_str(buf, len, (size_t)u, "id", info->id)) < 0) return -1;
    if (ev->type == SSAE_EVENT_ALARM_OFF) {
      if ((u = put_num(buf, len, (size_t)u, "duration_s", info->duration_s)) < 0 ||
          (u = put_num(buf, len, (size_t)u, "peak_score", info->peak_score)) < 0)
        return -1;
    }
    if (info->clip &&
        (u = ssae_json_put_str(buf, len, (size_t)u, "clip", info->clip)) < 0)
      return -1;
  }
  if ((size_t)u + 3 > len) return -1;
  buf[u++] = '}';
  buf[u++] = '\n';
  buf[u] = 0;
  return u;
}
