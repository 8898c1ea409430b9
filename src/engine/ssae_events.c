/* JSON-lines events (SPEC section 4). snprintf only: no allocation, so the
 * worker can format an event for every window. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include "ssae_alarm_id.h"
#include "ssae_engine.h"
#include "ssae_json.h"

typedef struct jbuf {
  char *p;
  size_t len, used;
  int overflow;
} jbuf;

static void put(jbuf *b, const char *fmt, ...) SSAE_PRINTF(2, 3);
static void put(jbuf *b, const char *fmt, ...) {
  if (b->overflow) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(b->p + b->used, b->len - b->used, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= b->len - b->used) {
    b->overflow = 1;
    return;
  }
  b->used += (size_t)n;
}

static void put_num(jbuf *b, const char *key, double v) {
  if (isfinite(v))
    put(b, ",\"%s\":%.9g", key, v);
  else
    put(b, ",\"%s\":null", key);
}

/* A string value escaped as the other JSON writers do (invalid UTF-8 as
 * U+FFFD: the line stays JSON whatever a name holds). */
static void put_str(jbuf *b, const char *key, const char *s) {
  put(b, ",\"%s\":\"", key);
  if (b->overflow) return;
  int n = ssae_json_escape(b->p, b->len, b->used, s ? s : "");
  if (n < 0) {
    b->overflow = 1;
    return;
  }
  b->used = (size_t)n;
  put(b, "\"");
}

static const char *event_name(ssae_event_type t) {
  switch (t) {
  case SSAE_EVENT_ALARM_ON: return "alarm_on";
  case SSAE_EVENT_ALARM_OFF: return "alarm_off";
  case SSAE_EVENT_STATUS: return "status";
  case SSAE_EVENT_WINDOW: return "window";
  case SSAE_EVENT_BACKEND: return "backend_fallback";
  case SSAE_EVENT_DROP: return "dropped";
  }
  return "unknown";
}

int ssae_event_json(const ssae_event *ev, char *buf, size_t len) {
  return ssae_event_json_named(ev, NULL, NULL, buf, len);
}

int ssae_event_json_named(const ssae_event *ev, const char *machine, const char *clip,
                          char *buf, size_t len) {
  if (!buf || len == 0) return -1;
  jbuf b = {buf, len, 0, 0};
  put(&b, "{\"t\":%.6f", isfinite(ev->t) ? ev->t : 0.0);
  if (ev->channel >= 0)
    put(&b, ",\"channel\":%d", ev->channel);
  else
    put(&b, ",\"channel\":null");
  put(&b, ",\"event\":\"%s\"", event_name(ev->type));
  put_num(&b, "score", ev->score);
  put_num(&b, "threshold", ev->threshold);
  if (ev->type == SSAE_EVENT_ALARM_ON || ev->type == SSAE_EVENT_ALARM_OFF ||
      ev->type == SSAE_EVENT_WINDOW) {
    put(&b, ",\"window\":%llu", (unsigned long long)ev->window);
    put_num(&b, "window_score", ev->raw_score);
  }
  if (ev->stats) {
    const ssae_engine_stats *s = ev->stats;
    put(&b,
        ",\"windows\":%llu,\"scored\":%llu,\"dropped\":%llu,\"batches\":%llu",
        (unsigned long long)s->windows, (unsigned long long)s->scored,
        (unsigned long long)s->dropped, (unsigned long long)s->batches);
    put(&b, ",\"xruns\":%llu,\"nonfinite\":%llu", (unsigned long long)s->xruns,
        (unsigned long long)s->nonfinite);
    put_str(&b, "backend", s->backend ? s->backend : "");
    put(&b, ",\"latency_ms\":{\"p50\":%.4f,\"p99\":%.4f,\"max\":%.4f}",
        s->lat_p50_ms, s->lat_p99_ms, s->lat_max_ms);
  }
  if (ev->msg) put_str(&b, "message", ev->msg);
  const int alarm = ev->type == SSAE_EVENT_ALARM_ON || ev->type == SSAE_EVENT_ALARM_OFF;
  if (machine && ev->channel >= 0) {
    put_str(&b, "machine", machine);
  } else if (alarm && ev->channel >= 0) {
    char name[24];
    snprintf(name, sizeof name, "ch%d", ev->channel);
    put_str(&b, "machine", name);
  }
  if (alarm && ev->alarm) {
    const ssae_alarm_info *a = ev->alarm;
    char iso[SSAE_ISO_TIME_LEN];
    ssae_iso_time(a->wall, iso);
    put_str(&b, "id", a->id);
    put_str(&b, "time", iso);
    if (ev->type == SSAE_EVENT_ALARM_OFF) {
      put_num(&b, "duration_s", a->duration_s);
      put_num(&b, "peak_score", a->peak_score);
      if (a->reason) put_str(&b, "reason", a->reason);
    }
  }
  if (alarm && clip) put_str(&b, "clip", clip);
  put(&b, "}\n");
  if (b.overflow) return -1;
  return (int)b.used;
}
