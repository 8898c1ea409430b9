#include "ssae_evsink.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_json.h"
#include "ssae_outfile.h"

#define SINK_MAX_CH 4096

/* Events go to checked streams, flushed line by line, because others read
 * them while they grow (a file being tailed, a pipe): a write that fails is
 * counted as a lost line and the first failure is kept for the report. The
 * window TSV is a result file: written through the output discipline and
 * committed when the sink closes. */
struct ssae_evsink {
  ssae_evsink_cfg cfg;
  FILE *events_fp;      /* the events file we opened (not stdout) */
  ssae_stream events;   /* the events file or stdout; fp NULL: none */
  ssae_stream out;      /* stdout beside an events file (events_stdout) */
  ssae_outfile *windows;
  pthread_mutex_t mu;
  int windows_failed;
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
      ssae_stream_init(&s->events, stdout, "stdout", 1);
    } else if (!(s->events_fp = fopen(cfg->events_path, "w"))) {
      ssae_err_set(err, "%s: cannot write the events file: %s", cfg->events_path,
                   strerror(errno));
      ssae_evsink_free(s);
      return NULL;
    } else {
      ssae_stream_init(&s->events, s->events_fp, cfg->events_path, 1);
    }
  }
  if (cfg->events_stdout && s->events.fp != stdout) ssae_stream_init(&s->out, stdout, "stdout", 1);
  if (cfg->windows_path) {
    if (!(s->windows = ssae_outfile_open(cfg->windows_path, err))) {
      ssae_evsink_free(s);
      return NULL;
    }
    ssae_outfile_printf(s->windows, cfg->channels > 1 ? "path\twindow\ttime\tscore\tchannel\n"
                                                      : "path\twindow\ttime\tscore\n");
  }
  return s;
}

/* The failure of the event streams, with the lines lost so far. */
static int stream_failure(const ssae_evsink *s, ssae_err *err) {
  const ssae_stream *st = s->events.failed ? &s->events : s->out.failed ? &s->out : NULL;
  if (!st) return 0;
  return ssae_err_set(err, "%s: write failed: %s (%llu event line%s lost)", st->name,
                      strerror(st->err_no), (unsigned long long)st->lost,
                      st->lost == 1 ? "" : "s");
}

int ssae_evsink_check(ssae_evsink *s, ssae_err *err) {
  pthread_mutex_lock(&s->mu);
  int rc = stream_failure(s, err);
  if (!rc && s->windows_failed)
    rc = ssae_err_set(err, "%s: write failed: the windows TSV stays incomplete",
                      s->cfg.windows_path);
  pthread_mutex_unlock(&s->mu);
  return rc;
}

uint64_t ssae_evsink_lost(ssae_evsink *s) {
  pthread_mutex_lock(&s->mu);
  uint64_t n = s->events.lost + s->out.lost;
  pthread_mutex_unlock(&s->mu);
  return n;
}

int ssae_evsink_close(ssae_evsink *s, ssae_err *err) {
  if (!s) return 0;
  ssae_err e = {{0}}, closing = {{0}};
  /* Flushes whatever is buffered; a failure shows in the stream's state. */
  if (s->events.fp) ssae_stream_check(&s->events, &e);
  if (s->out.fp) ssae_stream_check(&s->out, &e);
  int rc = stream_failure(s, err);
  if (s->events_fp && fclose(s->events_fp) != 0 && !rc)
    rc = ssae_err_set(err, "%s: write failed: %s", s->cfg.events_path, strerror(errno));
  if (s->windows && ssae_outfile_commit(s->windows, &closing) && !rc)
    rc = ssae_err_set(err, "%s (the windows TSV)", closing.msg);
  pthread_mutex_destroy(&s->mu);
  free(s);
  return rc;
}

int ssae_evsink_free(ssae_evsink *s) { return ssae_evsink_close(s, NULL); }

static void out_line(ssae_evsink *s, const char *line, int n) {
  if (s->events.fp) ssae_stream_write(&s->events, line, (size_t)n);
  if (s->out.fp) ssae_stream_write(&s->out, line, (size_t)n);
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
      int rc = s->cfg.channels > 1
                   ? ssae_outfile_printf(s->windows, "%s\t%llu\t%.6f\t%.9g\t%d\n", s->cfg.label,
                                         (unsigned long long)ev->window, t, ev->raw_score,
                                         ev->channel + s->cfg.channel_offset)
                   : ssae_outfile_printf(s->windows, "%s\t%llu\t%.6f\t%.9g\n", s->cfg.label,
                                         (unsigned long long)ev->window, t, ev->raw_score);
      if (rc) s->windows_failed = 1;
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
  ssae_event shown = *ev;
  if (shown.channel >= 0) shown.channel += s->cfg.channel_offset;
  char name[256];
  const char *machine = s->cfg.machine && ev->channel >= 0
                            ? s->cfg.machine(s->cfg.machine_user, ev->channel, name, sizeof name)
                            : NULL;
  char path[1024];
  const char *clip = ev->alarm && s->cfg.clip ? s->cfg.clip(s->cfg.machine_user, ev->channel,
                                                            ev->alarm->id, path, sizeof path)
                                              : NULL;
  int n = ssae_event_json_named(&shown, machine, clip, line, sizeof line);
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
  /* The message escaped (invalid UTF-8 as U+FFFD: the line stays JSON),
   * shortened at a character boundary until it fits. */
  char raw[1024];
  snprintf(raw, sizeof raw, "%s", msg ? msg : "");
  size_t rl = strlen(raw);
  int k;
  while ((k = ssae_json_escape(line, sizeof line - 4, used, raw)) < 0 && rl > 0) {
    rl = rl > 64 ? rl - 64 : 0;
    while (rl && ((unsigned char)raw[rl] & 0xc0) == 0x80) rl--;
    raw[rl] = 0;
  }
  if (k >= 0) used = (size_t)k;
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
