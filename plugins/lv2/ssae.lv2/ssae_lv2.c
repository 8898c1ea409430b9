/* The ssae LV2 plugin: descriptor, ports and run().
 *
 * run() follows SPEC section 5: it hands the audio to the engine (whose
 * feature path is audio-thread safe), copies input to output, reads the
 * scores the engine's worker published, and answers patch:Get from the
 * control port. It never allocates, locks, waits, logs or makes a system
 * call: a patch:Set of the model or the backend goes to the host's worker
 * unchanged and is checked (and any error logged) there. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <lv2/atom/util.h>
#include <lv2/core/lv2_util.h>
#include <lv2/patch/patch.h>

#include "ssae_detector.h"
#include "ssae_lv2.h"

static void map_uris(LV2_URID_Map *map, ssae_lv2_uris *u) {
  u->atom_Path = map->map(map->handle, LV2_ATOM__Path);
  u->atom_URID = map->map(map->handle, LV2_ATOM__URID);
  u->atom_Object = map->map(map->handle, LV2_ATOM__Object);
  u->atom_Blank = map->map(map->handle, LV2_ATOM__Blank);
  u->patch_Get = map->map(map->handle, LV2_PATCH__Get);
  u->patch_Set = map->map(map->handle, LV2_PATCH__Set);
  u->patch_property = map->map(map->handle, LV2_PATCH__property);
  u->patch_value = map->map(map->handle, LV2_PATCH__value);
  u->atom_String = map->map(map->handle, LV2_ATOM__String);
  u->model = map->map(map->handle, SSAE_LV2_URI_MODEL);
  u->backend = map->map(map->handle, SSAE_LV2_URI_BACKEND);
  u->free_slot = map->map(map->handle, SSAE_LV2_URI_FREE);
  u->load = map->map(map->handle, SSAE_LV2_URI_LOAD);
}

static void cleanup(LV2_Handle instance) {
  ssae_lv2 *self = (ssae_lv2 *)instance;
  if (!self) return;
  ssae_lv2_slot_free(atomic_load(&self->cur));
  for (int i = 0; i < SSAE_LV2_ORPHANS; i++) ssae_lv2_slot_free(self->orphans[i]);
  pthread_mutex_destroy(&self->slot_lock);
  free(self->bundle_path);
  free(self);
}

static LV2_Handle instantiate(const LV2_Descriptor *descriptor, double rate,
                              const char *bundle_path,
                              const LV2_Feature *const *features) {
  ssae_lv2 *self = (ssae_lv2 *)calloc(1, sizeof(*self));
  if (!self) return NULL;
  const char *missing = lv2_features_query(
      features, LV2_LOG__log, &self->logger.log, false, LV2_URID__map,
      &self->map, true, LV2_WORKER__schedule, &self->schedule, true, NULL);
  lv2_log_logger_set_map(&self->logger, self->map);
  if (missing) {
    lv2_log_error(&self->logger, "ssae: the host lacks the feature <%s>\n",
                  missing);
    free(self);
    return NULL;
  }
  map_uris(self->map, &self->uris);
  lv2_atom_forge_init(&self->forge, self->map);
  pthread_mutex_init(&self->slot_lock, NULL);
  self->channels = strcmp(descriptor->URI, SSAE_LV2_URI_STEREO) == 0 ? 2 : 1;
  self->rate = rate;
  self->bundle_path = strdup(bundle_path ? bundle_path : "");
  ssae_lv2_read_env(self);
  ssae_lv2_slot *slot =
      self->bundle_path ? ssae_lv2_slot_new(self, NULL, &self->env_where) : NULL;
  atomic_init(&self->cur, slot);
  if (!slot) {
    cleanup(self);
    return NULL;
  }
  self->announce = 1;
  return (LV2_Handle)self;
}

static void connect_port(LV2_Handle instance, uint32_t port, void *data) {
  ssae_lv2 *self = (ssae_lv2 *)instance;
  switch (port) {
  case SSAE_LV2_CONTROL: self->control = (const LV2_Atom_Sequence *)data; return;
  case SSAE_LV2_NOTIFY: self->notify = (LV2_Atom_Sequence *)data; return;
  case SSAE_LV2_THRESHOLD: self->threshold = (const float *)data; return;
  case SSAE_LV2_SMOOTHING: self->smoothing = (const float *)data; return;
  case SSAE_LV2_ALARM_ON: self->alarm_on = (const float *)data; return;
  case SSAE_LV2_ALARM_OFF: self->alarm_off = (const float *)data; return;
  case SSAE_LV2_ENABLE: self->enable = (const float *)data; return;
  case SSAE_LV2_SCORE: self->score = (float *)data; return;
  case SSAE_LV2_WINDOW_SCORE: self->window_score = (float *)data; return;
  case SSAE_LV2_ALARM: self->alarm = (float *)data; return;
  case SSAE_LV2_THRESHOLD_USED: self->threshold_used = (float *)data; return;
  case SSAE_LV2_DROPS: self->drops = (float *)data; return;
  case SSAE_LV2_LATENCY: self->latency = (float *)data; return;
  case SSAE_LV2_WINDOWS: self->windows = (float *)data; return;
  default: break;
  }
  uint32_t a = port - SSAE_LV2_AUDIO;
  if (port < SSAE_LV2_AUDIO || a >= 2u * (uint32_t)self->channels) return;
  if (a < (uint32_t)self->channels)
    self->in[a] = (const float *)data;
  else
    self->out[a - (uint32_t)self->channels] = (float *)data;
}

static void activate(LV2_Handle instance) {
  ((ssae_lv2 *)instance)->activated = 1;
}

static void deactivate(LV2_Handle instance) {
  ((ssae_lv2 *)instance)->activated = 0;
}

/* Writes patch:Set KEY VALUE at frame time: the model (an atom:Path) or
 * the backend (an atom:String: auto, cpu, cuda, with ":N" for a device
 * other than 0), as the slot has them. Audio-thread safe (the forge
 * writes into the host's buffer and stops cleanly when it is full). */
static void forge_set(ssae_lv2 *self, const ssae_lv2_slot *slot, LV2_URID key,
                      int64_t time) {
  LV2_Atom_Forge *f = &self->forge;
  const int model = key == self->uris.model;
  const char *v = model ? slot->path : slot->where_text;
  LV2_Atom_Forge_Frame frame;
  lv2_atom_forge_frame_time(f, time);
  if (!lv2_atom_forge_object(f, &frame, 0, self->uris.patch_Set)) return;
  lv2_atom_forge_key(f, self->uris.patch_property);
  lv2_atom_forge_urid(f, key);
  lv2_atom_forge_key(f, self->uris.patch_value);
  lv2_atom_forge_typed_string(f, model ? self->uris.atom_Path : self->uris.atom_String, v,
                              model ? slot->path_len : (uint32_t)strlen(v));
  lv2_atom_forge_pop(f, &frame);
}

static void handle_event(ssae_lv2 *self, const ssae_lv2_slot *slot,
                         const LV2_Atom_Event *ev) {
  const ssae_lv2_uris *u = &self->uris;
  if (ev->body.type != u->atom_Object && ev->body.type != u->atom_Blank)
    return;
  const LV2_Atom_Object *obj = (const LV2_Atom_Object *)&ev->body;
  if (obj->body.otype == u->patch_Set) {
    /* The worker checks the message and loads the model; when its queue
     * is full the request is lost, as a host would lose any event. */
    self->schedule->schedule_work(self->schedule->handle,
                                  lv2_atom_total_size(&ev->body), &ev->body);
  } else if (obj->body.otype == u->patch_Get) {
    /* one property, or without patch:property all of them */
    const LV2_Atom *property = NULL;
    lv2_atom_object_get(obj, u->patch_property, &property, 0);
    LV2_URID key = 0;
    if (property) {
      if (property->type != u->atom_URID) return;
      key = ((const LV2_Atom_URID *)property)->body;
      if (key != u->model && key != u->backend) return;
    }
    if (!self->notify) return;
    if (key != u->backend) forge_set(self, slot, u->model, ev->time.frames);
    if (key != u->model) forge_set(self, slot, u->backend, ev->time.frames);
  }
}

static int same_params(const ssae_engine_params *a,
                       const ssae_engine_params *b) {
  int thr = (isnan(a->threshold) && isnan(b->threshold)) ||
            a->threshold == b->threshold;
  return thr && a->smoothing_s == b->smoothing_s &&
         a->on_count == b->on_count && a->off_count == b->off_count &&
         a->enabled == b->enabled;
}

static float port_value(const float *port, float fallback, float lo, float hi) {
  float v = port ? *port : fallback;
  if (!isfinite(v)) v = fallback;
  return v < lo ? lo : v > hi ? hi : v;
}

/* The engine judges the scores with the detector (ssae_detector.h); an
 * unconnected port means its default, the same as ssae.ttl's lv2:default
 * and `ssae monitor`'s. */
static void update_params(ssae_lv2 *self, ssae_engine *engine) {
  ssae_engine_params p;
  float thr = port_value(self->threshold, 0.0f, 0.0f, 1e30f);
  p.threshold = thr > 0.0f ? (double)thr : NAN;
  p.smoothing_s = port_value(self->smoothing, (float)SSAE_DETECTOR_SMOOTHING_S, 0.0f, 60.0f);
  p.on_count =
      (int)lrintf(port_value(self->alarm_on, (float)SSAE_DETECTOR_ON_COUNT, 1.0f, 1000.0f));
  p.off_count =
      (int)lrintf(port_value(self->alarm_off, (float)SSAE_DETECTOR_OFF_COUNT, 1.0f, 1000.0f));
  p.enabled = port_value(self->enable, 1.0f, 0.0f, 1.0f) > 0.5f;
  if (self->params_valid && same_params(&p, &self->params)) return;
  ssae_engine_set_params(engine, &p);
  self->params = p;
  self->params_valid = 1;
}

static void set_output(float *port, float v) {
  if (port) *port = v;
}

static void publish(ssae_lv2 *self, const ssae_engine *engine) {
  float score = 0.0f, window = 0.0f, threshold = 0.0f, latency_ms = 0.0f;
  float drops = 0.0f, windows = 0.0f;
  int alarm = 0;
  for (int c = 0; c < self->channels; c++) {
    ssae_channel_state st;
    ssae_engine_channel_get(engine, c, &st);
    drops += (float)st.dropped;
    if (c == 0) {
      windows = (float)st.windows;
      if (isfinite(st.threshold)) threshold = st.threshold;
    }
    if (st.windows == 0) continue;
    if (c == 0 || st.smoothed > score) score = st.smoothed;
    if (c == 0 || st.score > window) window = st.score;
    if (st.latency_ms > latency_ms) latency_ms = st.latency_ms;
    alarm |= st.alarm != 0;
  }
  set_output(self->score, score);
  set_output(self->window_score, window);
  /* Disabled: no windows reach the detector, so its last alarm state would
   * stay published; the port says "off" (as documented) right away. */
  if (!self->params.enabled) alarm = 0;
  set_output(self->alarm, alarm ? 1.0f : 0.0f);
  set_output(self->threshold_used, threshold);
  set_output(self->drops, drops);
  set_output(self->latency, rintf(latency_ms * 1e-3f * (float)self->rate));
  set_output(self->windows, windows);
}

/* A slot whose free request did not fit into the worker queue waits here
 * for the next run(). */
static void retry_orphans(ssae_lv2 *self) {
  for (int i = 0; i < SSAE_LV2_ORPHANS; i++) {
    if (!self->orphans[i]) continue;
    ssae_lv2_free_msg msg = {{sizeof(ssae_lv2_slot *), self->uris.free_slot},
                             self->orphans[i]};
    if (self->schedule->schedule_work(self->schedule->handle, sizeof(msg),
                                      &msg) == LV2_WORKER_SUCCESS)
      self->orphans[i] = NULL;
  }
}

static void run(LV2_Handle instance, uint32_t n) {
  ssae_lv2 *self = (ssae_lv2 *)instance;
  ssae_lv2_slot *slot = atomic_load_explicit(&self->cur, memory_order_acquire);

  LV2_Atom_Forge_Frame seq;
  int forging = 0;
  if (self->notify) {
    lv2_atom_forge_set_buffer(&self->forge, (uint8_t *)self->notify,
                              self->notify->atom.size);
    forging = lv2_atom_forge_sequence_head(&self->forge, &seq, 0) != 0;
  }
  if (forging && self->announce) {
    forge_set(self, slot, self->uris.model, 0);
    forge_set(self, slot, self->uris.backend, 0);
    self->announce = 0;
  }
  if (self->control) {
    LV2_ATOM_SEQUENCE_FOREACH(self->control, ev) {
      handle_event(self, slot, ev);
    }
  }
  if (forging) lv2_atom_forge_pop(&self->forge, &seq);
  retry_orphans(self);

  update_params(self, slot->engine);
  /* Analyse first: in-place hosts give the same buffer for in and out. */
  ssae_engine_process(slot->engine, self->in, n);
  for (int c = 0; c < self->channels; c++) {
    if (!self->out[c] || self->out[c] == self->in[c]) continue;
    if (self->in[c])
      memmove(self->out[c], self->in[c], n * sizeof(float));
    else
      memset(self->out[c], 0, n * sizeof(float));
  }
  publish(self, slot->engine);
}

static const void *extension_data(const char *uri) {
  static const LV2_Worker_Interface worker = {ssae_lv2_work,
                                              ssae_lv2_work_response, NULL};
  static const LV2_State_Interface state = {ssae_lv2_save, ssae_lv2_restore};
  if (strcmp(uri, LV2_WORKER__interface) == 0) return &worker;
  if (strcmp(uri, LV2_STATE__interface) == 0) return &state;
  return NULL;
}

static const LV2_Descriptor descriptors[] = {
    {SSAE_LV2_URI_MONO, instantiate, connect_port, activate, run, deactivate,
     cleanup, extension_data},
    {SSAE_LV2_URI_STEREO, instantiate, connect_port, activate, run, deactivate,
     cleanup, extension_data},
};

LV2_SYMBOL_EXPORT const LV2_Descriptor *lv2_descriptor(uint32_t index) {
  return index < sizeof(descriptors) / sizeof(descriptors[0])
             ? &descriptors[index]
             : NULL;
}
