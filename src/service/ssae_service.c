/* The plant service (see ssae_service.h): engine events -> JSON lines,
 * MQTT, clips; audio -> clips' pre-roll and the heartbeat; systemd.
 *
 * Thread context: on_event on the engine's worker; audio* on the audio
 * thread; clip reports on the clips' writer thread; the rest on the main
 * thread. */
#include "ssae_service.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ssae_hass.h"
#include "ssae_sdnotify.h"
#include "ssae_service_impl.h"

#define LINE_MAX_BYTES 4096

static long long mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void ssae_service_opts_default(ssae_service_opts *o) {
  memset(o, 0, sizeof *o);
  o->input_rate = 16000;
  o->stale_s = 5;
}

/* ---- output of one line ---- */

static void write_line(ssae_service *s, const char *line, size_t len) {
  if (!s->events) return;
  pthread_mutex_lock(&s->file_mu);
  /* Flushed per line: a crash or a kill loses nothing already reported. */
  if (fwrite(line, 1, len, s->events) != len || fflush(s->events) != 0)
    atomic_fetch_add(&s->write_errors, 1);
  pthread_mutex_unlock(&s->file_mu);
}

static void publish_state(ssae_service *s, int c, double t) {
  ssae_engine *e = atomic_load(&s->ev_engine);
  if (!s->mqtt || !e) return;
  ssae_channel_state st;
  ssae_engine_channel_get(e, c, &st);
  char iso[SSAE_ISO_TIME_LEN], buf[768];
  ssae_iso_time(ssae_wall_now(), iso);
  int n = snprintf(buf, sizeof buf, "{\"t\":%.6f", t);
  n = ssae_json_put_str(buf, sizeof buf, (size_t)n, "machine", s->m[c].name);
  if (n < 0) return;
  n = ssae_json_put_str(buf, sizeof buf, (size_t)n, "time", iso);
  if (n < 0) return;
  /* The alarm as the events said it (the engine's latch may be a window
   * ahead or behind), with the open alarm's id. */
  const int open = s->m[c].alarm_open;
  if (open && (n = ssae_json_put_str(buf, sizeof buf, (size_t)n, "alarm_id",
                                     s->m[c].alarm_id)) < 0)
    return;
  char num[3][32];
  const float v[3] = {st.smoothed, st.score, st.threshold};
  for (int i = 0; i < 3; i++) {
    if (isfinite(v[i]))
      snprintf(num[i], sizeof num[i], "%.9g", (double)v[i]);
    else
      snprintf(num[i], sizeof num[i], "null");
  }
  int w = snprintf(buf + n, sizeof buf - (size_t)n,
                   ",\"score\":%s,\"window_score\":%s,\"alarm\":%s,"
                   "\"threshold\":%s,\"windows\":%llu,\"dropped\":%llu,"
                   "\"latency_ms\":%.3f}",
                   num[0], num[1], open ? "true" : "false", num[2],
                   (unsigned long long)st.windows,
                   (unsigned long long)st.dropped, (double)st.latency_ms);
  if (w < 0 || (size_t)w >= sizeof buf - (size_t)n) return;
  ssae_mqtt_set_retained(s->mqtt, c, s->m[c].state_topic, buf);
}

/* ---- the engine callback (worker thread) ---- */

void ssae_service_on_event(void *user, const ssae_event *ev) {
  ssae_service *s = user;
  atomic_fetch_add_explicit(&s->n_events, 1, memory_order_relaxed);
  int c = ev->channel;
  int known = c >= 0 && c < s->n;
  if (ev->type == SSAE_EVENT_WINDOW) {
    /* The state latched for this channel is its previous window's (the
     * engine publishes after the event): every window's latency is
     * counted once. */
    ssae_engine *e = atomic_load_explicit(&s->ev_engine, memory_order_acquire);
    if (known && e) {
      ssae_channel_state st;
      ssae_engine_channel_get(e, c, &st);
      if (st.windows > 0) ssae_prom_hist_observe(&s->latency, st.latency_ms * 1e-3);
    }
    if (s->opts.next && s->opts.forward_windows) s->opts.next(s->opts.next_user, ev);
    return;
  }
  const ssae_alarm_info *info = ev->alarm;
  int alarm = (ev->type == SSAE_EVENT_ALARM_ON || ev->type == SSAE_EVENT_ALARM_OFF) &&
              info && known;
  pthread_mutex_lock(&s->names_mu); /* names and topics change on a reload */
  if (alarm && ev->type == SSAE_EVENT_ALARM_ON) {
    atomic_fetch_add(&s->n_alarms, 1);
    atomic_fetch_add(&s->m[c].alarms, 1);
    memcpy(s->m[c].alarm_id, info->id, sizeof s->m[c].alarm_id);
    s->m[c].alarm_open = 1;
    free(s->m[c].clip);
    s->m[c].clip = NULL;
    char path[512];
    if (s->clips &&
        ssae_clips_alarm_on(s->clips, c, ev->t, info->id, path, sizeof path) == 0)
      s->m[c].clip = strdup(path);
  }
  if (alarm && ev->type == SSAE_EVENT_ALARM_OFF) {
    s->m[c].alarm_open = 0;
    if (s->clips) ssae_clips_alarm_off(s->clips, c, ev->t, info->id);
  }

  char line[LINE_MAX_BYTES];
  int len = ssae_service_event_json(ev, s->node, known ? s->m[c].name : NULL,
                                    alarm ? s->m[c].clip : NULL, ssae_wall_now(), line,
                                    sizeof line);
  if (len > 0) {
    write_line(s, line, (size_t)len);
    if (alarm && s->mqtt) {
      line[len - 1] = 0; /* MQTT payloads carry no newline */
      ssae_mqtt_publish(s->mqtt, s->m[c].event_topic, line, 1, 0);
    }
  }
  if (alarm) publish_state(s, c, ev->t);
  if (ev->type == SSAE_EVENT_STATUS)
    for (int i = 0; i < s->n; i++) publish_state(s, i, ev->t);
  pthread_mutex_unlock(&s->names_mu);
  if (s->opts.next) s->opts.next(s->opts.next_user, ev);
}

/* ---- clip reports (the clips' writer thread) and their pictures (the
 * picture thread) ---- */

/* One line: event, the machine, the alarm's id, the clip; picture and
 * seconds (NAN: none) where given; msg on failures. Under names_mu. */
static void clip_line(ssae_service *s, int channel, const char *event, const char *id,
                      const char *path, const char *picture, double seconds,
                      const char *msg) {
  char iso[SSAE_ISO_TIME_LEN], line[LINE_MAX_BYTES];
  ssae_iso_time(ssae_wall_now(), iso);
  /* SPEC section 4's keys first (no audio time, score or threshold of
   * its own: a clip is reported by the writer, seconds after its alarm). */
  int n = snprintf(line, sizeof line,
                   "{\"t\":null,\"channel\":%d,\"event\":\"%s\",\"score\":null,"
                   "\"threshold\":null",
                   channel, event);
  if ((n = ssae_json_put_str(line, sizeof line, (size_t)n, "node", s->node)) < 0 ||
      (n = ssae_json_put_str(line, sizeof line, (size_t)n, "machine",
                             s->m[channel].name)) < 0 ||
      (n = ssae_json_put_str(line, sizeof line, (size_t)n, "time", iso)) < 0 ||
      (n = ssae_json_put_str(line, sizeof line, (size_t)n, "id", id)) < 0 ||
      (n = ssae_json_put_str(line, sizeof line, (size_t)n, "clip", path)) < 0)
    return;
  if (picture &&
      (n = ssae_json_put_str(line, sizeof line, (size_t)n, "picture", picture)) < 0)
    return;
  if (msg && (n = ssae_json_put_str(line, sizeof line, (size_t)n, "message", msg)) < 0)
    return;
  int w = isnan(seconds) ? snprintf(line + n, sizeof line - (size_t)n, "}\n")
                         : snprintf(line + n, sizeof line - (size_t)n,
                                    ",\"seconds\":%.3f}\n", seconds);
  if (w < 0 || (size_t)w >= sizeof line - (size_t)n) return;
  n += w;
  write_line(s, line, (size_t)n);
  if (s->mqtt) {
    line[n - 1] = 0;
    ssae_mqtt_publish(s->mqtt, s->m[channel].event_topic, line, 1, 0);
  }
}

static void on_clip(void *user, int channel, const char *id, const char *path,
                    double seconds, int ok, const char *msg) {
  ssae_service *s = user;
  if (channel < 0 || channel >= s->n) return;
  pthread_mutex_lock(&s->names_mu);
  clip_line(s, channel, ok ? "clip" : "clip_failed", id, path, NULL, seconds, msg);
  pthread_mutex_unlock(&s->names_mu);
  if (ok) ssae_clip_pictures_add(s->pictures, channel, id, path);
}

/* The picture thread asks what machine `channel` is now. */
static int picture_machine(void *user, int channel, char **model_file,
                           ssae_detector_params *dp) {
  ssae_service *s = user;
  if (channel < 0 || channel >= s->n) return -1;
  pthread_mutex_lock(&s->names_mu);
  const char *mf = s->m[channel].model_file;
  *model_file = mf ? strdup(mf) : NULL;
  const ssae_engine_params *p = &s->params[channel];
  dp->threshold = isfinite(p->threshold) && p->threshold > 0 ? p->threshold : NAN;
  dp->smoothing_s = p->smoothing_s;
  dp->on_count = p->on_count;
  dp->off_count = p->off_count;
  pthread_mutex_unlock(&s->names_mu);
  return mf && !*model_file ? -1 : 0;
}

static void on_picture(void *user, int channel, const char *id, const char *clip,
                       const char *picture, const char *error) {
  ssae_service *s = user;
  if (channel < 0 || channel >= s->n) return;
  pthread_mutex_lock(&s->names_mu);
  clip_line(s, channel, picture ? "clip_picture" : "clip_picture_failed", id, clip, picture,
            NAN, error);
  pthread_mutex_unlock(&s->names_mu);
}

/* ---- audio thread ---- */

void ssae_service_audio(ssae_service *s, const float *const *in, size_t n) {
  ssae_clips_feed(s->clips, in, n);
  ssae_metrics_http_heartbeat(s->http);
  atomic_store_explicit(&s->audio_ns, mono_ns(), memory_order_relaxed);
}

void ssae_service_audio_channels(ssae_service *s, int first, int count,
                                 const float *const *in, size_t n) {
  ssae_clips_feed_channels(s->clips, first, count, in, n);
  ssae_metrics_http_heartbeat(s->http);
  atomic_store_explicit(&s->audio_ns, mono_ns(), memory_order_relaxed);
}

void ssae_service_audio_interleaved(ssae_service *s, const float *in, size_t n) {
  ssae_clips_feed_interleaved(s->clips, in, n);
  ssae_metrics_http_heartbeat(s->http);
  atomic_store_explicit(&s->audio_ns, mono_ns(), memory_order_relaxed);
}

/* ---- main thread ---- */

static char *topic(const char *prefix, const char *node, const char *machine,
                   const char *leaf) {
  char buf[512];
  if (ssae_topic_machine(prefix, node, machine, leaf, buf, sizeof buf)) return NULL;
  return strdup(buf);
}

static int start_mqtt(ssae_service *s, const ssae_config *c, ssae_err *err) {
  char status[300], client_id[128];
  ssae_topic_status(s->prefix, s->node, status, sizeof status);
  snprintf(client_id, sizeof client_id, "ssae-%s", s->node);
  ssae_mqtt_cfg mc = {0};
  mc.url = c->mqtt.url;
  mc.client_id = c->mqtt.client_id ? c->mqtt.client_id : client_id;
  mc.username = c->mqtt.username;
  mc.password = c->mqtt.password;
  mc.ca_file = c->mqtt.ca_file;
  mc.cert_file = c->mqtt.cert_file;
  mc.key_file = c->mqtt.key_file;
  mc.tls_insecure = c->mqtt.tls_insecure;
  mc.keepalive_s = c->mqtt.keepalive_s;
  mc.reconnect_min_s = c->mqtt.reconnect_min_s;
  mc.reconnect_max_s = c->mqtt.reconnect_max_s;
  mc.queue = c->mqtt.queue;
  mc.retained_slots = s->n;
  mc.status_topic = status;
  char resend[300];
  snprintf(resend, sizeof resend, "%s/status", s->discovery_prefix);
  mc.resend_topic = c->mqtt.discovery ? resend : NULL;
  s->mqtt = ssae_mqtt_new(&mc, err);
  if (!s->mqtt) return -1;
  s->discovery = c->mqtt.discovery;
  return ssae_service_births(s, err);
}

/* The Home Assistant discovery configs of the machines as they are named
 * now (under names_mu, or before any other thread runs). */
int ssae_service_births(ssae_service *s, ssae_err *err) {
  if (!s->mqtt || !s->discovery) return 0;
  int nb = s->n * SSAE_HASS_N_ENTITIES;
  char **topics = calloc((size_t)nb, sizeof *topics);
  char **payloads = calloc((size_t)nb, sizeof *payloads);
  int r = topics && payloads ? 0 : ssae_err_set(err, "out of memory");
  for (int i = 0; i < s->n && !r; i++) {
    ssae_hass_names hn = {s->discovery_prefix, s->prefix, s->node, s->m[i].name,
                          NULL};
    for (int e = 0; e < SSAE_HASS_N_ENTITIES && !r; e++) {
      int k = i * SSAE_HASS_N_ENTITIES + e;
      topics[k] = malloc(512);
      payloads[k] = malloc(2048);
      if (!topics[k] || !payloads[k] ||
          ssae_hass_config(&hn, (ssae_hass_entity)e, topics[k], 512, payloads[k],
                           2048))
        r = ssae_err_set(err, "mqtt: discovery config too long for '%s'",
                         s->m[i].name);
    }
  }
  if (!r && ssae_mqtt_set_births(s->mqtt, nb, (const char *const *)topics,
                                 (const char *const *)payloads))
    r = ssae_err_set(err, "out of memory");
  for (int k = 0; k < nb && topics && payloads; k++) {
    free(topics[k]);
    free(payloads[k]);
  }
  free(topics);
  free(payloads);
  return r;
}

ssae_service *ssae_service_new(const ssae_config *c, const ssae_service_opts *o,
                               ssae_err *err) {
  if (!c || c->n_machines < 1) {
    ssae_err_set(err, "service: no machines");
    return NULL;
  }
  ssae_service *s = calloc(1, sizeof *s);
  if (!s) {
    ssae_err_set(err, "out of memory");
    return NULL;
  }
  if (o)
    s->opts = *o;
  else
    ssae_service_opts_default(&s->opts);
  if (!(s->opts.input_rate > 0)) s->opts.input_rate = 16000;
  if (!(s->opts.stale_s > 0)) s->opts.stale_s = 5;
  s->n = c->n_machines;
  s->status_every_s = c->status_every_s;
  s->node = strdup(c->node);
  s->prefix = strdup(c->mqtt.prefix);
  s->discovery_prefix = strdup(c->mqtt.discovery_prefix);
  s->m = calloc((size_t)s->n, sizeof *s->m);
  s->file_mu_ok = pthread_mutex_init(&s->file_mu, NULL) == 0;
  s->names_mu_ok = pthread_mutex_init(&s->names_mu, NULL) == 0;
  s->eng_mu_ok = pthread_mutex_init(&s->eng_mu, NULL) == 0;
  if (!s->node || !s->prefix || !s->discovery_prefix || !s->m || !s->file_mu_ok ||
      !s->eng_mu_ok || !s->names_mu_ok)
    goto oom;
  static const double lat_bounds[] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02,
                                      0.05,   0.1,   0.2,   0.5,   1,    2,
                                      5};
  ssae_prom_hist_init(&s->latency, lat_bounds,
                      (int)(sizeof lat_bounds / sizeof lat_bounds[0]));
  s->params = calloc((size_t)s->n, sizeof *s->params);
  if (!s->params) goto oom;
  for (int i = 0; i < s->n; i++) ssae_service_machine_params(c, i, &s->params[i]);
  for (int i = 0; i < s->n; i++) {
    const ssae_config_machine *cm = &c->machines[i];
    svc_machine *m = &s->m[i];
    m->name = strdup(cm->name);
    m->model_file = cm->model ? strdup(cm->model) : NULL;
    m->state_topic = topic(s->prefix, s->node, cm->name, "state");
    m->event_topic = topic(s->prefix, s->node, cm->name, "event");
    if (!m->name || (cm->model && !m->model_file) || !m->state_topic ||
        !m->event_topic)
      goto oom;
    m->model_threshold = NAN;
    const ssae_model *md = s->opts.models ? s->opts.models[i] : NULL;
    if (md) {
      m->model_threshold = md->threshold;
      m->sample_rate = md->feat.sample_rate;
      m->n_mels = md->d.n_mels;
      m->frames = md->d.frames;
    }
  }
  s->opts.models = NULL; /* only read during new */
  s->restart_sig = ssae_service_restart_signature(c);
  if (!s->restart_sig) goto oom;
  if (c->events) {
    if (strcmp(c->events, "-") == 0) {
      s->events = stdout;
      s->events_is_stdout = 1;
    } else if (!(s->events = fopen(c->events, "a"))) {
      ssae_err_set(err, "events: cannot open %s", c->events);
      goto fail;
    }
  }
  if (c->mqtt.url && start_mqtt(s, c, err)) goto fail;
  if (c->clips.dir) {
    const char **names = calloc((size_t)s->n, sizeof *names);
    if (!names) goto oom;
    for (int i = 0; i < s->n; i++) names[i] = s->m[i].name;
    ssae_clips_cfg cc = {0};
    cc.dir = c->clips.dir;
    cc.channels = s->n;
    cc.rate = s->opts.input_rate;
    cc.names = names;
    cc.flac = c->clips.flac;
    cc.pre_roll_s = c->clips.pre_roll_s;
    cc.post_roll_s = c->clips.post_roll_s;
    cc.max_length_s = c->clips.max_length_s;
    cc.keep_count = c->clips.keep_count;
    cc.keep_age_s = c->clips.keep_age_s;
    cc.keep_bytes = c->clips.keep_bytes;
    cc.on_clip = on_clip;
    cc.user = s;
    s->clips = ssae_clips_new(&cc, err);
    free(names);
    if (!s->clips) goto fail;
    /* The limits, and a killed run's unfinished clips, from the start (not
     * only after the next clip). */
    ssae_clips_retain(s->clips, NULL);
    if (c->clips.picture) {
      ssae_clip_pictures_cfg pc = {.machine = picture_machine, .done = on_picture, .user = s};
      if (!(s->pictures = ssae_clip_pictures_new(&pc, err))) goto fail;
    }
  }
  if (c->metrics_host) {
    ssae_metrics_http_cfg hc = {c->metrics_host, c->metrics_port, s->opts.stale_s,
                                ssae_service_write_metrics, s};
    s->http = ssae_metrics_http_new(&hc, err);
    if (!s->http) goto fail;
  }
  return s;
oom:
  ssae_err_set(err, "out of memory");
fail:
  ssae_service_free(s);
  return NULL;
}

int ssae_service_engine_cfg(ssae_service *s, ssae_engine_cfg *ec,
                            ssae_err *err) {
  (void)err;
  ec->on_event = ssae_service_on_event;
  ec->user = s;
  ec->emit_windows = 1;
  ec->status_every_s = s->status_every_s;
  /* Machine 0's for the engine as a whole; every machine its own. */
  ec->params = s->params[0];
  ec->channel_params = s->params;
  return 0;
}

void ssae_service_attach(ssae_service *s, ssae_engine *e) {
  pthread_mutex_lock(&s->eng_mu);
  s->engine = e;
  pthread_mutex_unlock(&s->eng_mu);
  atomic_store(&s->ev_engine, e);
  atomic_store(&s->running, 1);
  ssae_metrics_http_set_running(s->http, 1);
  ssae_sd_ready(NULL);
  ssae_sd_status("monitoring %d machine%s", s->n, s->n == 1 ? "" : "s");
}

void ssae_service_detach(ssae_service *s) {
  if (!s) return;
  atomic_store(&s->running, 0);
  ssae_metrics_http_set_running(s->http, 0);
  pthread_mutex_lock(&s->eng_mu);
  s->engine = NULL;
  pthread_mutex_unlock(&s->eng_mu);
  ssae_sd_stopping();
}

void ssae_service_tick(ssae_service *s) {
  if (!s || !atomic_load(&s->running)) return;
  long long beat = atomic_load_explicit(&s->audio_ns, memory_order_relaxed);
  double age = beat ? (mono_ns() - beat) * 1e-9 : INFINITY;
  /* No audio, no ping: systemd's watchdog restarts a stalled input. */
  if (age <= s->opts.stale_s) ssae_sd_watchdog();
  if (!ssae_sd_available()) return;
  int on = 0;
  ssae_engine *e = atomic_load(&s->ev_engine);
  for (int i = 0; i < s->n && e; i++) {
    ssae_channel_state st;
    ssae_engine_channel_get(e, i, &st);
    on += st.alarm;
  }
  const char *mqtt = "";
  if (s->mqtt) {
    ssae_mqtt_stats ms;
    ssae_mqtt_stats_get(s->mqtt, &ms);
    mqtt = ms.connected ? ", MQTT connected" : ", MQTT disconnected";
  }
  ssae_sd_status("%d machine%s, %d in alarm, %llu alarms%s%s", s->n,
                 s->n == 1 ? "" : "s", on,
                 (unsigned long long)atomic_load(&s->n_alarms),
                 age > s->opts.stale_s ? ", NO AUDIO" : "", mqtt);
}

int ssae_service_metrics_port(const ssae_service *s) {
  return s ? ssae_metrics_http_port(s->http) : 0;
}

void ssae_service_stats_get(ssae_service *s, ssae_service_stats *st) {
  memset(st, 0, sizeof *st);
  if (!s) return;
  st->events = atomic_load(&s->n_events);
  st->alarms = atomic_load(&s->n_alarms);
  st->write_errors = atomic_load(&s->write_errors);
}

struct ssae_mqtt *ssae_service_mqtt(ssae_service *s) { return s ? s->mqtt : NULL; }
struct ssae_clips *ssae_service_clips(ssae_service *s) {
  return s ? s->clips : NULL;
}

const char *ssae_service_alarm_clip(ssae_service *s, int channel, const char *id, char *buf,
                                    size_t len) {
  if (!s || channel < 0 || channel >= s->n || !id || len == 0) return NULL;
  pthread_mutex_lock(&s->names_mu);
  const svc_machine *m = &s->m[channel];
  const int ours = m->clip && !strcmp(m->alarm_id, id);
  if (ours) snprintf(buf, len, "%s", m->clip);
  pthread_mutex_unlock(&s->names_mu);
  return ours ? buf : NULL;
}

void ssae_service_free(ssae_service *s) { ssae_service_close(s, NULL); }

void ssae_service_close(ssae_service *s, ssae_service_end *end) {
  if (end) memset(end, 0, sizeof *end);
  if (!s) return;
  /* HTTP first (it reads the rest), clips next (their reports go to the
   * file and MQTT), then the pictures of the last clips, MQTT last but one
   * (drains, says offline). */
  ssae_metrics_http_free(s->http);
  ssae_clips_stats cs;
  ssae_clips_close(s->clips, &cs);
  if (end) {
    end->clips_written = cs.written;
    end->clips_failed = cs.failed;
    end->clip_samples_lost = cs.lost_samples;
    end->event_write_errors = atomic_load(&s->write_errors);
  }
  ssae_clip_pictures_free(s->pictures); /* after the clips: it draws their last */
  free(s->params);
  ssae_mqtt_stats ms;
  ssae_mqtt_close(s->mqtt, &ms);
  if (end) end->mqtt_undelivered = ms.queued + ms.dropped;
  if (s->events && !s->events_is_stdout) fclose(s->events);
  if (s->events_is_stdout) fflush(stdout);
  for (int i = 0; s->m && i < s->n; i++) {
    free(s->m[i].name);
    free(s->m[i].model_file);
    free(s->m[i].state_topic);
    free(s->m[i].event_topic);
    free(s->m[i].clip);
  }
  free(s->m);
  free(s->node);
  free(s->prefix);
  free(s->discovery_prefix);
  if (s->file_mu_ok) pthread_mutex_destroy(&s->file_mu);
  if (s->eng_mu_ok) pthread_mutex_destroy(&s->eng_mu);
  if (s->names_mu_ok) pthread_mutex_destroy(&s->names_mu);
  free(s->restart_sig);
  free(s);
}
