/* Reloading the config of a running service (SIGHUP): machine names follow
 * (topics, Home Assistant discovery, metrics labels, clip names; the old
 * names' retained state and discovery configs are cleared from the broker),
 * detector settings and model info are taken over; what needs a restart
 * (node, machine count, the engine's settings: backend, GPU, status
 * period; inputs, outputs) is refused with the key that changed. The
 * service's own notes ("config_reloaded", "config_rejected") go to the
 * events file and to <prefix>/<node>/event.
 *
 * Thread context: main thread (reload, note); takes names_mu against the
 * worker, the clip writer and the metrics thread. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_hass.h"
#include "ssae_service_impl.h"

/* FNV-1a: a changed password is seen without keeping it in the text. */
static unsigned long long hash(const char *s) {
  unsigned long long h = 1469598103934665603ull;
  for (; s && *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return s ? h : 0;
}

#define S(x) ((x) ? (x) : "")

char *ssae_service_restart_signature(const ssae_config *c) {
  ssae_textbuf b = {0};
  const ssae_config_mqtt *q = &c->mqtt;
  const ssae_config_clips *k = &c->clips;
  const ssae_config_input *in = &c->input;
  ssae_textbuf_printf(&b, "node=%s\nmachines (their count)=%d\nengine.backend=%s\n"
                          "engine.gpu=%d\nengine.status_every=%.17g\noutputs.events=%s\n",
                      c->node, c->n_machines, c->backend, c->gpu, c->status_every_s,
                      S(c->events));
  ssae_textbuf_printf(&b, "outputs.mqtt.url=%s\noutputs.mqtt.prefix=%s\n"
                          "outputs.mqtt.client_id=%s\noutputs.mqtt.username=%s\n"
                          "outputs.mqtt password=%llx\noutputs.mqtt.tls=%s,%s,%s,%d\n"
                          "outputs.mqtt.homeassistant=%d,%s\n"
                          "outputs.mqtt.queue=%d\noutputs.mqtt.keepalive=%d\n"
                          "outputs.mqtt.reconnect=%.17g,%.17g\n",
                      S(q->url), S(q->prefix), S(q->client_id), S(q->username),
                      hash(q->password), S(q->ca_file), S(q->cert_file),
                      S(q->key_file), q->tls_insecure, q->discovery,
                      S(q->discovery_prefix), q->queue, q->keepalive_s,
                      q->reconnect_min_s, q->reconnect_max_s);
  ssae_textbuf_printf(&b, "outputs.metrics=%s:%d\noutputs.clips=%s,%d,%.17g,%.17g,"
                          "%.17g,%d,%.17g,%llu\n",
                      S(c->metrics_host), c->metrics_port, S(k->dir), k->flac,
                      k->pre_roll_s, k->post_roll_s, k->max_length_s,
                      k->keep_count, k->keep_age_s,
                      (unsigned long long)k->keep_bytes);
  ssae_textbuf_printf(&b, "input=%d,%s,%s,%d\ninput channels/ports=", in->kind,
                      S(in->device), S(in->file), in->realtime);
  for (int i = 0; i < in->n_channels; i++)
    ssae_textbuf_printf(&b, "%d,", in->channels[i]);
  for (int i = 0; i < in->n_ports; i++) ssae_textbuf_printf(&b, "%s,", in->ports[i]);
  ssae_textbuf_printf(&b, "\n");
  if (b.oom) {
    ssae_textbuf_free(&b);
    return NULL;
  }
  return b.p;
}

/* The key of the first line in which two signatures differ. */
static void first_change(const char *a, const char *b, char *out, size_t len) {
  while (*a && *b) {
    size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
    if (la != lb || memcmp(a, b, la) != 0) {
      size_t key = strcspn(a, "=");
      snprintf(out, len, "%.*s", (int)(key < la ? key : la), a);
      return;
    }
    a += la + (a[la] != 0);
    b += lb + (b[lb] != 0);
  }
  snprintf(out, len, "the inputs or outputs");
}

void ssae_service_machine_params(const ssae_config *c, int i, ssae_engine_params *p) {
  ssae_engine_params_default(p);
  const ssae_config_machine *m = &c->machines[i];
  p->threshold = m->threshold;
  p->smoothing_s = m->smoothing_s;
  p->on_count = m->on_count;
  p->off_count = m->off_count;
}

void ssae_service_note(ssae_service *s, const char *event, const char *msg) {
  if (!s) return;
  char iso[SSAE_ISO_TIME_LEN], line[2048];
  ssae_iso_time(ssae_wall_now(), iso);
  int n = snprintf(line, sizeof line, "{\"t\":null,\"channel\":null");
  if ((n = ssae_json_put_str(line, sizeof line, (size_t)n, "event", event)) < 0 ||
      (n += snprintf(line + n, sizeof line - (size_t)n, ",\"score\":null,\"threshold\":null"),
       n >= (int)sizeof line) ||
      (n = ssae_json_put_str(line, sizeof line, (size_t)n, "node", s->node)) < 0 ||
      (n = ssae_json_put_str(line, sizeof line, (size_t)n, "time", iso)) < 0 ||
      (msg && (n = ssae_json_put_str(line, sizeof line, (size_t)n, "message", msg)) < 0) ||
      (size_t)n + 3 > sizeof line)
    return;
  line[n++] = '}';
  line[n++] = '\n';
  line[n] = 0;
  if (s->events) {
    pthread_mutex_lock(&s->file_mu);
    if (fwrite(line, 1, (size_t)n, s->events) != (size_t)n || fflush(s->events))
      atomic_fetch_add(&s->write_errors, 1);
    pthread_mutex_unlock(&s->file_mu);
  }
  if (s->mqtt) {
    char topic[300];
    snprintf(topic, sizeof topic, "%s/%s/event", s->prefix, s->node);
    line[n - 1] = 0;
    ssae_mqtt_publish(s->mqtt, topic, line, 1, 0);
  }
}

typedef struct names {
  char *name, *state, *event, *model;
} names;

static void names_free(names *v, int n) {
  for (int i = 0; v && i < n; i++) {
    free(v[i].name);
    free(v[i].state);
    free(v[i].event);
    free(v[i].model);
  }
  free(v);
}

int ssae_service_reload(ssae_service *s, const ssae_config *c,
                        ssae_model *const *models, ssae_engine_params *params,
                        ssae_err *err) {
  char *sig = ssae_service_restart_signature(c);
  if (!sig) return ssae_err_set(err, "out of memory");
  if (strcmp(sig, s->restart_sig) != 0) {
    char key[96];
    first_change(s->restart_sig, sig, key, sizeof key);
    free(sig);
    return ssae_err_set(err, "%s changed: restart ssae to apply it (a reload "
                             "takes names, models, thresholds, smoothing and "
                             "hysteresis)",
                        key);
  }
  free(sig);
  names *nv = calloc((size_t)s->n, sizeof *nv);
  int oom = !nv;
  for (int i = 0; !oom && i < s->n; i++) {
    char t[512];
    nv[i].name = strdup(c->machines[i].name);
    oom |= !nv[i].name;
    if (!ssae_topic_machine(s->prefix, s->node, c->machines[i].name, "state", t,
                            sizeof t))
      oom |= !(nv[i].state = strdup(t));
    if (!ssae_topic_machine(s->prefix, s->node, c->machines[i].name, "event", t,
                            sizeof t))
      oom |= !(nv[i].event = strdup(t));
    oom |= !nv[i].state || !nv[i].event;
    if (c->machines[i].model) oom |= !(nv[i].model = strdup(c->machines[i].model));
  }
  if (oom) {
    names_free(nv, s->n);
    return ssae_err_set(err, "out of memory");
  }
  /* The retained messages of names that go away are cleared afterwards. */
  char **gone = calloc((size_t)s->n * (1 + SSAE_HASS_N_ENTITIES), sizeof *gone);
  int n_gone = 0;
  pthread_mutex_lock(&s->names_mu);
  for (int i = 0; i < s->n; i++) {
    svc_machine *m = &s->m[i];
    if (strcmp(m->name, nv[i].name) != 0 && gone) {
      gone[n_gone++] = m->state_topic;
      m->state_topic = NULL;
      ssae_hass_names hn = {s->discovery_prefix, s->prefix, s->node, m->name, NULL};
      for (int e = 0; s->discovery && e < SSAE_HASS_N_ENTITIES; e++) {
        char topic[512], payload[2048];
        if (!ssae_hass_config(&hn, (ssae_hass_entity)e, topic, sizeof topic, payload,
                              sizeof payload))
          gone[n_gone++] = strdup(topic);
      }
    }
    /* Swap: the old strings go into nv and are freed below. */
    char *t;
    t = m->name, m->name = nv[i].name, nv[i].name = t;
    t = m->state_topic, m->state_topic = nv[i].state, nv[i].state = t;
    t = m->event_topic, m->event_topic = nv[i].event, nv[i].event = t;
    t = m->model_file, m->model_file = nv[i].model, nv[i].model = t;
    const ssae_model *md = models ? models[i] : NULL;
    if (md) {
      m->model_threshold = md->threshold;
      m->sample_rate = md->feat.sample_rate;
      m->n_mels = md->d.n_mels;
      m->frames = md->d.frames;
    }
  }
  int r = ssae_service_births(s, err);
  for (int i = 0; i < s->n; i++) ssae_service_machine_params(c, i, &s->params[i]);
  pthread_mutex_unlock(&s->names_mu);
  names_free(nv, s->n);
  for (int i = 0; i < n_gone; i++) {
    if (gone[i] && s->mqtt) ssae_mqtt_publish(s->mqtt, gone[i], "", 1, 1);
    free(gone[i]);
  }
  free(gone);
  if (s->clips) {
    const char **nm = calloc((size_t)s->n, sizeof *nm);
    pthread_mutex_lock(&s->names_mu);
    for (int i = 0; nm && i < s->n; i++) nm[i] = s->m[i].name;
    if (!nm || ssae_clips_set_names(s->clips, nm)) r = ssae_err_set(err, "out of memory");
    pthread_mutex_unlock(&s->names_mu);
    free(nm);
  }
  if (params)
    for (int i = 0; i < s->n; i++) params[i] = s->params[i];
  return r;
}
