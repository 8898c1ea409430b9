#include "ssae_evsink.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SINK_MAX_CH 4096

struct ssae_evsink {
  ssae_evsink_cfg cfg;
  FILE *events;
  int events_is_stdout;
  FILE *windows;
  pthread_mutex_t mu;
  int write_failed;
  uint64_t alarms_total;
  uint64_t alarms[SINK_MAX_CH];
};

ssae_evsink *ssae_evsink_new(const ssae_evsink_cfg *cfg, ssae_err *err) {
  ssae_evsink *s = calloc(1, sizeof *s);
  if (!s) {
    ssae_err_set(err, "out of memory");
    return NULL;
  }
  s->cfg = *cfg;
  if (!s->cfg.prog) s->cfg.prog = "ssae";
  if (!s->cfg.label) s->cfg.label = "-";
  pthread_mutex_init(&s->mu, NULL);
  if (cfg->events_path) {
    if (!strcmp(cfg->events_path, "-")) {
      s->events = stdout;
      s->events_is_stdout = 1;
    } else if (!(s->events = fopen(cfg->events_path, "w"))) {
      ssae_err_set(err, "cannot write events file %s", cfg->events_path);
      ssae_evsink_free(s);
      return NULL;
    }
  }
  if (cfg->windows_path) {
    if (!(s->windows = fopen(cfg->windows_path, "w"))) {
      ssae_err_set(err, "cannot write windows file %s", cfg->windows_path);
      ssae_evsink_free(s);
      return NULL;
    }
    fprintf(s->windows, "path\twindow\ttime\tscore\n");
  }
  return s;
}

int ssae_evsink_free(ssae_evsink *s) {
  if (!s) return 0;
  int rc = s->write_failed ? -1 : 0;
  if (s->events && !s->events_is_stdout && fclose(s->events)) rc = -1;
  if (s->windows && fclose(s->windows)) rc = -1;
  if (s->cfg.events_stdout || s->events_is_stdout) fflush(stdout);
  pthread_mutex_destroy(&s->mu);
  free(s);
  return rc;
}

static void out_line(ssae_evsink *s, const char *line, int n) {
  if (s->events) {
    if (fwrite(line, 1, (size_t)n, s->events) != (size_t)n || fflush(s->events))
      s->write_failed = 1;
  }
  if (s->cfg.events_stdout && !s->events_is_stdout) {
    fwrite(line, 1, (size_t)n, stdout);
    fflush(stdout);
  }
}

void ssae_evsink_on_event(void *user, const ssae_event *ev) {
  ssae_evsink *s = user;
  char line[2048];
  pthread_mutex_lock(&s->mu);
  if (ev->type == SSAE_EVENT_WINDOW) {
    if (s->windows) {
      double t = s->cfg.sample_rate > 0
                     ? (double)(ev->window + (uint64_t)(s->cfg.frames / 2)) *
                           s->cfg.hop_length / s->cfg.sample_rate
                     : 0;
      if (fprintf(s->windows, "%s\t%llu\t%.6f\t%.9g\n", s->cfg.label,
                  (unsigned long long)ev->window, t, ev->raw_score) < 0)
        s->write_failed = 1;
    }
    pthread_mutex_unlock(&s->mu);
    return;
  }
  if (ev->type == SSAE_EVENT_ALARM_ON) {
    s->alarms_total++;
    if (ev->channel >= 0 && ev->channel < SINK_MAX_CH) s->alarms[ev->channel]++;
  }
  if (ev->type == SSAE_EVENT_BACKEND && ev->msg)
    fprintf(stderr, "%s: backend: %s\n", s->cfg.prog, ev->msg);
  int n = ssae_event_json(ev, line, sizeof line);
  if (n > 0) out_line(s, line, n);
  pthread_mutex_unlock(&s->mu);
}

void ssae_evsink_note(ssae_evsink *s, double t, const char *event,
                      const char *msg) {
  char line[2048];
  size_t used = 0;
  int n = snprintf(line, sizeof line,
                   "{\"t\":%.6f,\"channel\":null,\"event\":\"%s\",\"score\":null,"
                   "\"threshold\":null,\"message\":\"",
                   t, event);
  if (n < 0) return;
  used = (size_t)n;
  for (const char *p = msg; p && *p && used + 8 < sizeof line; p++) {
    unsigned char c = (unsigned char)*p;
    if (c == '"' || c == '\\') {
      line[used++] = '\\';
      line[used++] = (char)c;
    } else if (c < 0x20) {
      used += (size_t)snprintf(line + used, sizeof line - used, "\\u%04x", c);
    } else {
      line[used++] = (char)c;
    }
  }
  n = snprintf(line + used, sizeof line - used, "\"}\n");
  if (n > 0) used += (size_t)n;
  pthread_mutex_lock(&s->mu);
  out_line(s, line, (int)used);
  pthread_mutex_unlock(&s->mu);
}

uint64_t ssae_evsink_alarms(const ssae_evsink *s, int c) {
  if (c < 0) return s->alarms_total;
  return c < SINK_MAX_CH ? s->alarms[c] : 0;
}
