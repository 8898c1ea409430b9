/* The test host (see lv2_host.h). */
#define _XOPEN_SOURCE 700
#include "lv2_host.h"

#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lv2/atom/util.h>
#include <lv2/log/log.h>
#include <lv2/patch/patch.h>
#include <sndfile.h>

#include "../ssae_test_wav.h"
#include "ssae_logmel.h"
#include "ssae_model.h"

#define MODEL_URI "urn:ssae:lv2:model"

static LV2_URID map_uri(LV2_URID_Map_Handle handle, const char *uri) {
  lv2h *h = (lv2h *)handle;
  pthread_mutex_lock(&h->mu);
  for (size_t i = 0; i < h->n_uris; i++) {
    if (strcmp(h->uris[i], uri) == 0) {
      pthread_mutex_unlock(&h->mu);
      return (LV2_URID)(i + 1);
    }
  }
  char **u = (char **)realloc(h->uris, (h->n_uris + 1) * sizeof(char *));
  if (!u) abort();
  h->uris = u;
  h->uris[h->n_uris] = strdup(uri);
  LV2_URID id = (LV2_URID)++h->n_uris;
  pthread_mutex_unlock(&h->mu);
  return id;
}

static const char *unmap_uri(LV2_URID_Unmap_Handle handle, LV2_URID urid) {
  lv2h *h = (lv2h *)handle;
  pthread_mutex_lock(&h->mu);
  const char *s = urid >= 1 && urid <= h->n_uris ? h->uris[urid - 1] : NULL;
  pthread_mutex_unlock(&h->mu);
  return s;
}

static int log_vprintf(LV2_Log_Handle handle, LV2_URID type, const char *fmt,
                       va_list ap) {
  lv2h *h = (lv2h *)handle;
  char line[4096];
  int n = vsnprintf(line, sizeof(line), fmt, ap);
  const char *t = unmap_uri(h, type);
  int is_error = t && strcmp(t, LV2_LOG__Error) == 0;
  pthread_mutex_lock(&h->mu);
  size_t len = strlen(line);
  if (h->loglen + len + 1 < sizeof(h->logbuf)) {
    memcpy(h->logbuf + h->loglen, line, len + 1);
    h->loglen += len;
  }
  h->log_errors += is_error;
  pthread_mutex_unlock(&h->mu);
  if (!h->quiet) fprintf(stderr, "[plugin %s] %s", is_error ? "error" : "log", line);
  return n;
}

static int log_printf(LV2_Log_Handle handle, LV2_URID type, const char *fmt,
                      ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = log_vprintf(handle, type, fmt, ap);
  va_end(ap);
  return n;
}

static LV2_Worker_Status respond(LV2_Worker_Respond_Handle handle,
                                 uint32_t size, const void *data) {
  lv2h *h = (lv2h *)handle;
  LV2_Worker_Status st = LV2_WORKER_SUCCESS;
  pthread_mutex_lock(&h->mu);
  if (h->n_resp >= LV2H_MAX_RESP || size > sizeof(h->resp[0].data)) {
    st = LV2_WORKER_ERR_NO_SPACE;
  } else {
    h->resp[h->n_resp].size = size;
    memcpy(h->resp[h->n_resp].data, data, size);
    h->n_resp++;
  }
  pthread_mutex_unlock(&h->mu);
  return st;
}

static LV2_Worker_Status schedule_work(LV2_Worker_Schedule_Handle handle,
                                       uint32_t size, const void *data) {
  lv2h *h = (lv2h *)handle;
  if (!h->worker) return LV2_WORKER_ERR_UNKNOWN;
  if (!h->threaded) {
    /* Synchronous, as a freewheeling host: the data is only valid now. */
    return h->worker->work(lilv_instance_get_handle(h->inst), respond, h,
                           size, data);
  }
  LV2_Worker_Status st = LV2_WORKER_SUCCESS;
  pthread_mutex_lock(&h->mu);
  if (h->n_req >= LV2H_MAX_REQ || size > LV2H_REQ_SIZE) {
    st = LV2_WORKER_ERR_NO_SPACE;
  } else {
    h->req[h->n_req].size = size;
    memcpy(h->req[h->n_req].data, data, size);
    h->n_req++;
    pthread_cond_broadcast(&h->cv);
  }
  pthread_mutex_unlock(&h->mu);
  return st;
}

/* The host's worker thread: one request at a time, in order. The request
 * stays in the queue while it runs, so that "queue empty" means idle. */
static void *worker_main(void *arg) {
  lv2h *h = (lv2h *)arg;
  unsigned char *data = (unsigned char *)h->req_copy;
  pthread_mutex_lock(&h->mu);
  for (;;) {
    while (!h->stop && h->n_req == 0) pthread_cond_wait(&h->cv, &h->mu);
    if (h->n_req == 0) break;
    uint32_t size = h->req[0].size;
    memcpy(data, h->req[0].data, size);
    pthread_mutex_unlock(&h->mu);
    h->worker->work(lilv_instance_get_handle(h->inst), respond, h, size, data);
    pthread_mutex_lock(&h->mu);
    memmove(&h->req[0], &h->req[1], (size_t)(h->n_req - 1) * sizeof(h->req[0]));
    h->n_req--;
    pthread_cond_broadcast(&h->cv);
  }
  pthread_mutex_unlock(&h->mu);
  return NULL;
}

void lv2h_set_path(const char *dir) {
  char buf[8192], abs[4096];
  if (!realpath(dir, abs)) snprintf(abs, sizeof(abs), "%s", dir);
  snprintf(buf, sizeof(buf), "%s:/usr/lib/lv2:/usr/local/lib/lv2", abs);
  setenv("LV2_PATH", buf, 1);
}

int lv2h_open(lv2h *h, const char *plugin_uri, double rate, int threaded) {
  memset(h, 0, sizeof(*h));
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, NULL);
  h->rate = rate;
  h->map.handle = h;
  h->map.map = map_uri;
  h->unmap.handle = h;
  h->unmap.unmap = unmap_uri;
  h->log.handle = h;
  h->log.printf = log_printf;
  h->log.vprintf = log_vprintf;
  h->sched.handle = h;
  h->sched.schedule_work = schedule_work;
  h->f_map = (LV2_Feature){LV2_URID__map, &h->map};
  h->f_unmap = (LV2_Feature){LV2_URID__unmap, &h->unmap};
  h->f_log = (LV2_Feature){LV2_LOG__log, &h->log};
  h->f_sched = (LV2_Feature){LV2_WORKER__schedule, &h->sched};
  h->features[0] = &h->f_map;
  h->features[1] = &h->f_unmap;
  h->features[2] = &h->f_log;
  h->features[3] = &h->f_sched;
  h->features[4] = NULL;

  h->u_patch_Set = map_uri(h, LV2_PATCH__Set);
  h->u_patch_Get = map_uri(h, LV2_PATCH__Get);
  h->u_patch_property = map_uri(h, LV2_PATCH__property);
  h->u_patch_value = map_uri(h, LV2_PATCH__value);
  h->u_model = map_uri(h, MODEL_URI);
  h->u_backend = map_uri(h, "urn:ssae:lv2:backend");
  h->u_atom_Path = map_uri(h, LV2_ATOM__Path);
  h->u_atom_String = map_uri(h, LV2_ATOM__String);
  h->u_atom_Object = map_uri(h, LV2_ATOM__Object);
  h->u_atom_Sequence = map_uri(h, LV2_ATOM__Sequence);
  h->u_atom_Chunk = map_uri(h, LV2_ATOM__Chunk);
  lv2_atom_forge_init(&h->forge, &h->map);

  h->world = lilv_world_new();
  lilv_world_load_all(h->world);
  LilvNode *uri = lilv_new_uri(h->world, plugin_uri);
  h->plugin = lilv_plugins_get_by_uri(lilv_world_get_all_plugins(h->world), uri);
  lilv_node_free(uri);
  if (!h->plugin) {
    fprintf(stderr, "plugin <%s> not found (LV2_PATH=%s)\n", plugin_uri,
            getenv("LV2_PATH") ? getenv("LV2_PATH") : "(unset)");
    return -1;
  }
  h->n_ports = (int)lilv_plugin_get_num_ports(h->plugin);
  if (h->n_ports > LV2H_MAX_PORTS) {
    fprintf(stderr, "too many ports\n");
    return -1;
  }
  h->inst = lilv_plugin_instantiate(h->plugin, rate, h->features);
  if (!h->inst) {
    fprintf(stderr, "cannot instantiate <%s>\n", plugin_uri);
    return -1;
  }
  h->worker = (const LV2_Worker_Interface *)lilv_instance_get_extension_data(
      h->inst, LV2_WORKER__interface);

  float defaults[LV2H_MAX_PORTS];
  lilv_plugin_get_port_ranges_float(h->plugin, NULL, NULL, defaults);
  LilvNode *control = lilv_new_uri(h->world, LV2_CORE__ControlPort);
  LilvNode *atom = lilv_new_uri(h->world, LV2_ATOM__AtomPort);
  LilvNode *input = lilv_new_uri(h->world, LV2_CORE__InputPort);
  for (int i = 0; i < h->n_ports; i++) {
    const LilvPort *p = lilv_plugin_get_port_by_index(h->plugin, (uint32_t)i);
    if (lilv_port_is_a(h->plugin, p, control)) {
      h->ctl[i] = isnan(defaults[i]) ? 0.0f : defaults[i];
      lilv_instance_connect_port(h->inst, (uint32_t)i, &h->ctl[i]);
    } else if (lilv_port_is_a(h->plugin, p, atom)) {
      lilv_instance_connect_port(h->inst, (uint32_t)i,
                                 lilv_port_is_a(h->plugin, p, input)
                                     ? (void *)h->control_buf
                                     : (void *)h->notify_buf);
    }
  }
  lilv_node_free(control);
  lilv_node_free(atom);
  lilv_node_free(input);
  if (threaded && h->worker) {
    h->req = calloc(LV2H_MAX_REQ, sizeof(*h->req));
    h->req_copy = calloc(LV2H_REQ_SIZE / 8, 8);
    if (!h->req || !h->req_copy || pthread_create(&h->thread, NULL, worker_main, h) != 0) {
      fprintf(stderr, "cannot start the worker thread\n");
      return -1;
    }
    h->threaded = 1;
  }
  lilv_instance_activate(h->inst);
  return 0;
}

static void deliver_responses(lv2h *h) {
  for (;;) {
    pthread_mutex_lock(&h->mu);
    if (h->n_resp == 0) {
      pthread_mutex_unlock(&h->mu);
      return;
    }
    uint32_t size = h->resp[0].size;
    _Alignas(16) unsigned char data[256];
    memcpy(data, h->resp[0].data, size);
    memmove(&h->resp[0], &h->resp[1], (size_t)(h->n_resp - 1) * sizeof(h->resp[0]));
    h->n_resp--;
    pthread_mutex_unlock(&h->mu);
    /* It may schedule more work (freeing the old model). */
    h->worker->work_response(lilv_instance_get_handle(h->inst), size, data);
  }
}

void lv2h_close(lv2h *h) {
  if (h->inst) {
    lilv_instance_deactivate(h->inst);
    if (h->threaded) {
      /* Finish the queued work, then go synchronous for what its answers
       * schedule (freeing replaced models). */
      pthread_mutex_lock(&h->mu);
      h->stop = 1;
      pthread_cond_broadcast(&h->cv);
      pthread_mutex_unlock(&h->mu);
      pthread_join(h->thread, NULL);
      h->threaded = 0;
    }
    if (h->worker) deliver_responses(h);
    lilv_instance_free(h->inst);
  }
  free(h->req);
  free(h->req_copy);
  pthread_cond_destroy(&h->cv);
  if (h->world) lilv_world_free(h->world);
  for (size_t i = 0; i < h->n_uris; i++) free(h->uris[i]);
  free(h->uris);
  pthread_mutex_destroy(&h->mu);
}

uint32_t lv2h_port(lv2h *h, const char *symbol) {
  LilvNode *sym = lilv_new_string(h->world, symbol);
  const LilvPort *p = lilv_plugin_get_port_by_symbol(h->plugin, sym);
  lilv_node_free(sym);
  CHECK(p, "the plugin has no port '%s'", symbol);
  return lilv_port_get_index(h->plugin, p);
}

float *lv2h_ctl(lv2h *h, const char *symbol) {
  return &h->ctl[lv2h_port(h, symbol)];
}

void lv2h_connect(lv2h *h, const char *symbol, void *buf) {
  lilv_instance_connect_port(h->inst, lv2h_port(h, symbol), buf);
}

static void open_control(lv2h *h) {
  if (h->control_open) return;
  lv2_atom_forge_set_buffer(&h->forge, h->control_buf, sizeof(h->control_buf));
  lv2_atom_forge_sequence_head(&h->forge, &h->seq_frame, 0);
  h->control_open = 1;
}

void lv2h_send_set_raw(lv2h *h, LV2_URID property, LV2_URID type,
                       const void *body, uint32_t size) {
  open_control(h);
  LV2_Atom_Forge_Frame obj;
  lv2_atom_forge_frame_time(&h->forge, 0);
  lv2_atom_forge_object(&h->forge, &obj, 0, h->u_patch_Set);
  lv2_atom_forge_key(&h->forge, h->u_patch_property);
  lv2_atom_forge_urid(&h->forge, property);
  lv2_atom_forge_key(&h->forge, h->u_patch_value);
  lv2_atom_forge_atom(&h->forge, size, type);
  lv2_atom_forge_write(&h->forge, body, size);
  lv2_atom_forge_pop(&h->forge, &obj);
}

void lv2h_send_set_model(lv2h *h, const char *path) {
  open_control(h);
  LV2_Atom_Forge_Frame obj;
  lv2_atom_forge_frame_time(&h->forge, 0);
  lv2_atom_forge_object(&h->forge, &obj, 0, h->u_patch_Set);
  lv2_atom_forge_key(&h->forge, h->u_patch_property);
  lv2_atom_forge_urid(&h->forge, h->u_model);
  lv2_atom_forge_key(&h->forge, h->u_patch_value);
  lv2_atom_forge_path(&h->forge, path, (uint32_t)strlen(path));
  lv2_atom_forge_pop(&h->forge, &obj);
}

void lv2h_send_get_property(lv2h *h, LV2_URID property) {
  open_control(h);
  LV2_Atom_Forge_Frame obj;
  lv2_atom_forge_frame_time(&h->forge, 0);
  lv2_atom_forge_object(&h->forge, &obj, 0, h->u_patch_Get);
  if (property) {
    lv2_atom_forge_key(&h->forge, h->u_patch_property);
    lv2_atom_forge_urid(&h->forge, property);
  }
  lv2_atom_forge_pop(&h->forge, &obj);
}

void lv2h_send_get(lv2h *h) { lv2h_send_get_property(h, h->u_model); }

void lv2h_send_set_backend(lv2h *h, const char *value) {
  lv2h_send_set_raw(h, h->u_backend, h->u_atom_String, value, (uint32_t)strlen(value) + 1);
}

void lv2h_run(lv2h *h, uint32_t n) {
  open_control(h);
  lv2_atom_forge_pop(&h->forge, &h->seq_frame);
  LV2_Atom *notify = (LV2_Atom *)h->notify_buf;
  notify->size = sizeof(h->notify_buf) - sizeof(LV2_Atom);
  notify->type = h->u_atom_Chunk;
  lilv_instance_run(h->inst, n);
  h->control_open = 0;
  if (h->worker) deliver_responses(h);
}

void lv2h_wait_worker(lv2h *h) {
  for (int i = 0; i < 10000; i++) {
    pthread_mutex_lock(&h->mu);
    int busy = h->n_req > 0 || h->n_resp > 0;
    pthread_mutex_unlock(&h->mu);
    if (!busy) return;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
    lv2h_run(h, 0);
  }
}

/* The value of the last patch:Set <key> (of atom type vtype) in the notify
 * output of the last run, into buf. */
static int notified(lv2h *h, LV2_URID key, LV2_URID vtype, const char *what, char *buf,
                    size_t len) {
  const LV2_Atom_Sequence *seq = (const LV2_Atom_Sequence *)h->notify_buf;
  int found = 0;
  if (seq->atom.type != h->u_atom_Sequence) return 0;
  LV2_ATOM_SEQUENCE_FOREACH(seq, ev) {
    if (ev->body.type != h->u_atom_Object) continue;
    const LV2_Atom_Object *obj = (const LV2_Atom_Object *)&ev->body;
    if (obj->body.otype != h->u_patch_Set) continue;
    const LV2_Atom *prop = NULL, *value = NULL;
    lv2_atom_object_get(obj, h->u_patch_property, &prop, h->u_patch_value,
                        &value, 0);
    if (!prop || !value || ((const LV2_Atom_URID *)prop)->body != key)
      continue;
    CHECK(value->type == vtype, "patch:Set %s value of another type", what);
    snprintf(buf, len, "%.*s", (int)strnlen((const char *)LV2_ATOM_BODY_CONST(value),
                                            value->size),
             (const char *)LV2_ATOM_BODY_CONST(value));
    found = 1;
  }
  return found;
}

int lv2h_notified_model(lv2h *h, char *buf, size_t len) {
  return notified(h, h->u_model, h->u_atom_Path, "model", buf, len);
}

int lv2h_notified_backend(lv2h *h, char *buf, size_t len) {
  return notified(h, h->u_backend, h->u_atom_String, "backend", buf, len);
}

int lv2h_get_backend(lv2h *h, char *buf, size_t len) {
  lv2h_send_get_property(h, h->u_backend);
  lv2h_run(h, 0);
  return lv2h_notified_backend(h, buf, len);
}

int lv2h_get_model(lv2h *h, char *buf, size_t len) {
  lv2h_send_get(h);
  lv2h_run(h, 0);
  return lv2h_notified_model(h, buf, len);
}

/* run(0) until the plugin announces want through notified (up to 10 s).
 * 1 when it did. */
static int wait_announced(lv2h *h, int (*notified)(lv2h *, char *, size_t), const char *want) {
  char got[4096];
  for (int i = 0; i < 10000; i++) {
    /* The worker does it; installed after a run, announced in the next. */
    lv2h_run(h, 0);
    if (notified(h, got, sizeof(got)) && strcmp(got, want) == 0) return 1;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  return 0;
}

int lv2h_load_model(lv2h *h, const char *path) {
  lv2h_send_set_model(h, path);
  return wait_announced(h, lv2h_notified_model, path);
}

int lv2h_set_backend(lv2h *h, const char *value) {
  lv2h_send_set_backend(h, value);
  return wait_announced(h, lv2h_notified_backend, value);
}

void lv2h_log_take(lv2h *h, char *buf, size_t len, int *errors) {
  pthread_mutex_lock(&h->mu);
  snprintf(buf, len, "%s", h->loglen ? h->logbuf : "");
  h->loglen = 0;
  h->logbuf[0] = '\0';
  if (errors) *errors = h->log_errors;
  h->log_errors = 0;
  pthread_mutex_unlock(&h->mu);
}

/* ---- signals ---- */

uint32_t rnd_u32(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  *s = x;
  return (uint32_t)(x >> 32);
}

static double rnd_gauss(uint64_t *s) {
  double a = 0;
  for (int i = 0; i < 4; i++) a += (rnd_u32(s) + 0.5) / 4294967296.0;
  return (a - 2.0) * 1.7320508075688772; /* unit variance */
}

void sig_make(float *x, size_t n, double rate, uint64_t seed, int anomaly,
              double t0, double t1) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  const double tau = 6.283185307179586;
  double sweep_phase = 0;
  /* White noise with the same density per Hz at every rate, so that a
   * signal made at 48 kHz and resampled to 16 kHz looks like one made at
   * 16 kHz. */
  const double g = sqrt(rate / 16000.0);
  for (size_t i = 0; i < n; i++) {
    double t = (double)i / rate;
    /* The machine: a 120 Hz hum with harmonics, slow amplitude wobble. */
    double am = 1.0 + 0.1 * sin(tau * 0.5 * t);
    double v = am * (0.20 * sin(tau * 120 * t) + 0.10 * sin(tau * 240 * t + 1) +
                     0.05 * sin(tau * 360 * t + 2)) +
               0.03 * sin(tau * 1000 * t) + 0.03 * g * rnd_gauss(&s);
    if (anomaly && t >= t0 && t < t1) {
      /* A bearing squeal sweeping 2.5-4.5 kHz, and clicks every 80 ms. */
      double f = 3500 + 1000 * sin(tau * 2.0 * t);
      sweep_phase += tau * f / rate;
      v += 0.30 * sin(sweep_phase);
      double tc = fmod(t - t0, 0.08);
      if (tc < 0.002) v += 0.6 * g * exp(-tc / 0.0004) * rnd_gauss(&s);
    }
    if (v > 0.99) v = 0.99;
    if (v < -0.99) v = -0.99;
    x[i] = (float)v;
  }
}

int sig_write_wav(const char *path, float *x, size_t n, int rate) {
  if (test_write_sf(path, SF_FORMAT_WAV | SF_FORMAT_PCM_16, rate, 1, x, n)) return -1;
  SF_INFO info = {0};
  SNDFILE *f = sf_open(path, SFM_READ, &info);
  if (!f) return -1;
  sf_count_t r = sf_readf_float(f, x, (sf_count_t)n);
  sf_close(f);
  return r == (sf_count_t)n ? 0 : -1;
}

int make_template_model(const char *dir, char *path, size_t len) {
  ssae_err err;
  ssae_err_clear(&err);
  ssae_feat_cfg cfg;
  ssae_feat_cfg_default(&cfg);
  const size_t n = 16000 * 10;
  float *x = (float *)malloc(n * sizeof(float));
  float *frames = NULL;
  size_t n_frames = 0;
  if (!x) return -1;
  sig_make(x, n, 16000, 100, 0, 0, 0);
  int rc = ssae_logmel_compute(&cfg, x, n, &frames, &n_frames, &err);
  free(x);
  if (rc != 0 || n_frames == 0) {
    fprintf(stderr, "log-mel of the normal sound: %s\n", err.msg);
    free(frames);
    return -1;
  }
  ssae_dims d;
  ssae_dims_default(&d);
  ssae_model *m = ssae_model_new(&d, &err);
  if (!m) {
    fprintf(stderr, "ssae_model_new: %s\n", err.msg);
    free(frames);
    return -1;
  }
  ssae_model_init(m, 9);
  /* Encoder and bottleneck silenced: the output is the decoder's bias, set
   * to the mean log-mel spectrum of normal sound. */
  const int M = d.n_mels, S = d.slice_latent, L = d.latent;
  memset(m->enc_w, 0, (size_t)S * M * sizeof(float));
  memset(m->enc_b, 0, (size_t)S * sizeof(float));
  memset(m->bn_w, 0, (size_t)L * L * sizeof(float));
  memset(m->bn_b, 0, (size_t)L * sizeof(float));
  memset(m->dec_w, 0, (size_t)M * S * sizeof(float));
  for (int k = 0; k < M; k++) {
    double acc = 0;
    for (size_t t = 0; t < n_frames; t++) acc += frames[t * (size_t)M + (size_t)k];
    m->dec_b[k] = (float)(acc / (double)n_frames);
  }
  free(frames);
  m->threshold = NAN;
  snprintf(path, len, "%s/template.safetensors", dir);
  rc = ssae_model_update(m, &err) == 0 && ssae_model_save(m, path, &err) == 0 ? 0 : -1;
  if (rc != 0) fprintf(stderr, "template model: %s\n", err.msg);
  ssae_model_free(m);
  return rc;
}

static char *tmpdir_made;

static void remove_tmpdir(void) {
  rm_rf(tmpdir_made);
  free(tmpdir_made);
  tmpdir_made = NULL;
}

char *make_tmpdir(const char *tag) {
  const char *base = getenv("TMPDIR");
  if (!base || !*base) base = "/tmp";
  size_t n = strlen(base) + strlen(tag) + 32;
  char *d = (char *)malloc(n);
  if (!d) return NULL;
  snprintf(d, n, "%s/ssae-lv2-%s-XXXXXX", base, tag);
  if (!mkdtemp(d)) {
    free(d);
    return NULL;
  }
  /* Removed at exit, also when a check fails. */
  if (!tmpdir_made && (tmpdir_made = strdup(d)) != NULL) atexit(remove_tmpdir);
  return d;
}

char *lv2h_test_start(int argc, char **argv, const char *tag) {
  CHECK(argc == 2, "usage: %s DIR_WITH_SSAE_LV2", argv[0]);
  lv2h_set_path(argv[1]);
  char *dir = make_tmpdir(tag);
  CHECK(dir, "cannot make a temporary directory");
  return dir;
}

static int rm_one(const char *p, const struct stat *st, int flag,
                  struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(p);
}

void rm_rf(const char *path) {
  if (path) nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}
