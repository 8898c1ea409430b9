/* Model loading for the ssae LV2 plugin: the worker (load in work(), install
 * in work_response(), free the old slot back on the worker) and the state
 * (the model path, mapped through the host's map-path feature).
 *
 * A new model gets a new engine: its feature settings (sample rate, mels,
 * frames) may differ from the old one's, and building the front end
 * allocates, which only a non-audio thread may do. The analysis stream
 * restarts with the new engine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lv2/atom/util.h>
#include <lv2/core/lv2_util.h>

#include "ssae_lv2.h"

static char *dup_path(const char *s) {
  size_t n = strlen(s);
  char *d = (char *)malloc(n + 1);
  if (d) memcpy(d, s, n + 1);
  return d;
}

void ssae_lv2_slot_free(ssae_lv2_slot *slot) {
  if (!slot) return;
  /* The engine borrows the model: stop the engine first. */
  ssae_engine_free(slot->engine);
  ssae_model_free(slot->model);
  free(slot->path);
  free(slot);
}

ssae_lv2_slot *ssae_lv2_slot_new(ssae_lv2 *self, const char *path) {
  ssae_err err;
  ssae_err_clear(&err);
  ssae_lv2_slot *slot = (ssae_lv2_slot *)calloc(1, sizeof(*slot));
  if (!slot) {
    lv2_log_error(&self->logger, "ssae: out of memory\n");
    return NULL;
  }
  char *file = NULL;
  if (!path || !*path) {
    /* The bundle's model file; the copy built into the plugin when the
     * bundle lacks it. */
    slot->is_default = 1;
    const char *b = self->bundle_path;
    size_t n = strlen(b) + 1 + sizeof(SSAE_LV2_DEFAULT_MODEL);
    file = (char *)malloc(n);
    if (file) {
      int sep = *b && b[strlen(b) - 1] != '/';
      snprintf(file, n, "%s%s%s", b, sep ? "/" : "", SSAE_LV2_DEFAULT_MODEL);
      if (access(file, R_OK) != 0) {
        free(file);
        file = dup_path("");
      }
    }
  } else {
    file = dup_path(path);
  }
  if (!file) {
    lv2_log_error(&self->logger, "ssae: out of memory\n");
    free(slot);
    return NULL;
  }
  slot->path = file;
  slot->path_len = (uint32_t)strlen(file);
  slot->model = *file ? ssae_model_load(file, &err) : ssae_model_load_default(&err);
  if (!slot->model) {
    /* The loader's message names the file. */
    lv2_log_error(&self->logger, "ssae: cannot load the model%s: %s\n",
                  *file ? "" : " (built in)", err.msg);
    ssae_lv2_slot_free(slot);
    return NULL;
  }
  ssae_engine_cfg cfg;
  ssae_engine_cfg_default(&cfg);
  cfg.channels = self->channels;
  cfg.input_rate = self->rate;
  cfg.backend = self->backend;
  cfg.gpu = self->gpu;
  slot->engine = ssae_engine_new(slot->model, &cfg, &err);
  if (!slot->engine) {
    lv2_log_error(&self->logger,
                  "ssae: cannot start the analysis for the model '%s': %s\n",
                  file, err.msg);
    ssae_lv2_slot_free(slot);
    return NULL;
  }
  return slot;
}

void ssae_lv2_read_env(ssae_lv2 *self) {
  self->backend = "auto";
  self->gpu = 0;
  /* The engine keeps the name: one of these, not the environment's copy. */
  static const char *const backends[] = {"auto", "cpu", "cuda"};
  const char *b = getenv("SSAE_LV2_BACKEND");
  if (b && *b) {
    const char *found = NULL;
    for (size_t i = 0; i < sizeof backends / sizeof *backends; i++)
      if (!strcmp(b, backends[i])) found = backends[i];
    if (found)
      self->backend = found;
    else
      lv2_log_error(&self->logger,
                    "ssae: SSAE_LV2_BACKEND='%s': use auto, cpu or cuda (auto used)\n", b);
  }
  const char *g = getenv("SSAE_LV2_GPU");
  if (g && *g) {
    char *end;
    long v = strtol(g, &end, 10);
    if (*end || v < 0 || v > 255)
      lv2_log_error(&self->logger,
                    "ssae: SSAE_LV2_GPU='%s': a CUDA device index 0..255 (0 used)\n", g);
    else
      self->gpu = (int)v;
  }
}

/* The path of a patch:Set <model> message into buf; -1 (logged) when the
 * message is not one. */
static int set_message_path(ssae_lv2 *self, const LV2_Atom_Object *obj,
                            char *buf, size_t len) {
  const ssae_lv2_uris *u = &self->uris;
  const LV2_Atom *property = NULL, *value = NULL;
  lv2_atom_object_get(obj, u->patch_property, &property, u->patch_value,
                      &value, 0);
  if (!property || property->type != u->atom_URID) {
    lv2_log_error(&self->logger,
                  "ssae: patch:Set without a patch:property URID\n");
    return -1;
  }
  if (((const LV2_Atom_URID *)property)->body != u->model) {
    lv2_log_error(&self->logger,
                  "ssae: patch:Set of a property the plugin does not have "
                  "(only <" SSAE_LV2_URI_MODEL "> is writable)\n");
    return -1;
  }
  if (!value || value->type != u->atom_Path) {
    lv2_log_error(&self->logger,
                  "ssae: the model must be set with an atom:Path value\n");
    return -1;
  }
  const char *s = (const char *)LV2_ATOM_BODY_CONST(value);
  size_t n = strnlen(s, value->size);
  if (n >= len) {
    lv2_log_error(&self->logger, "ssae: model path longer than %zu bytes\n",
                  len - 1);
    return -1;
  }
  memcpy(buf, s, n);
  buf[n] = '\0';
  return 0;
}

LV2_Worker_Status ssae_lv2_work(LV2_Handle instance,
                                LV2_Worker_Respond_Function respond,
                                LV2_Worker_Respond_Handle handle,
                                uint32_t size, const void *data) {
  ssae_lv2 *self = (ssae_lv2 *)instance;
  const ssae_lv2_uris *u = &self->uris;
  const LV2_Atom *atom = (const LV2_Atom *)data;
  if (size < sizeof(LV2_Atom) || size < lv2_atom_total_size(atom)) {
    lv2_log_error(&self->logger, "ssae: truncated worker message\n");
    return LV2_WORKER_ERR_UNKNOWN;
  }
  if (atom->type == u->free_slot && size >= sizeof(ssae_lv2_free_msg)) {
    const ssae_lv2_free_msg *msg = (const ssae_lv2_free_msg *)data;
    pthread_mutex_lock(&self->slot_lock);
    ssae_lv2_slot_free(msg->slot);
    pthread_mutex_unlock(&self->slot_lock);
    return LV2_WORKER_SUCCESS;
  }

  char path[SSAE_LV2_PATH_MAX + 1];
  if (atom->type == u->atom_Path) {
    /* From restore(): the body is the path ("" for the default model). */
    size_t n = strnlen((const char *)LV2_ATOM_BODY_CONST(atom), atom->size);
    if (n > SSAE_LV2_PATH_MAX) {
      lv2_log_error(&self->logger, "ssae: model path too long\n");
      return LV2_WORKER_ERR_UNKNOWN;
    }
    memcpy(path, LV2_ATOM_BODY_CONST(atom), n);
    path[n] = '\0';
  } else if ((atom->type == u->atom_Object || atom->type == u->atom_Blank) &&
             ((const LV2_Atom_Object *)atom)->body.otype == u->patch_Set) {
    if (set_message_path(self, (const LV2_Atom_Object *)atom, path,
                         sizeof(path)) != 0)
      return LV2_WORKER_ERR_UNKNOWN;
  } else {
    lv2_log_error(&self->logger, "ssae: unknown worker message\n");
    return LV2_WORKER_ERR_UNKNOWN;
  }

  /* On failure the error is logged and the model in use stays. */
  ssae_lv2_slot *slot = ssae_lv2_slot_new(self, path);
  if (!slot) return LV2_WORKER_ERR_UNKNOWN;
  if (respond(handle, sizeof(slot), &slot) != LV2_WORKER_SUCCESS) {
    lv2_log_error(&self->logger,
                  "ssae: the host's worker queue is full; model '%s' not "
                  "installed\n", path);
    ssae_lv2_slot_free(slot);
    return LV2_WORKER_ERR_NO_SPACE;
  }
  return LV2_WORKER_SUCCESS;
}

LV2_Worker_Status ssae_lv2_work_response(LV2_Handle instance, uint32_t size,
                                         const void *data) {
  ssae_lv2 *self = (ssae_lv2 *)instance;
  if (size != sizeof(ssae_lv2_slot *)) return LV2_WORKER_ERR_UNKNOWN;
  ssae_lv2_slot *slot;
  memcpy(&slot, data, sizeof(slot));
  ssae_lv2_slot *old =
      atomic_exchange_explicit(&self->cur, slot, memory_order_acq_rel);
  self->params_valid = 0;
  self->announce = 1;
  ssae_lv2_free_msg msg = {{sizeof(ssae_lv2_slot *), self->uris.free_slot},
                           old};
  if (self->schedule->schedule_work(self->schedule->handle, sizeof(msg),
                                    &msg) == LV2_WORKER_SUCCESS)
    return LV2_WORKER_SUCCESS;
  /* The worker queue is full: run() retries. */
  for (int i = 0; i < SSAE_LV2_ORPHANS; i++) {
    if (!self->orphans[i]) {
      self->orphans[i] = old;
      break;
    }
  }
  return LV2_WORKER_SUCCESS;
}

/* Frees a path the host's mapPath made: with its freePath where it has
 * one, else free() (the state extension's rule). */
static void free_host_path(LV2_State_Free_Path *free_path, char *p) {
  if (free_path)
    free_path->free_path(free_path->handle, p);
  else
    free(p);
}

LV2_State_Status ssae_lv2_save(LV2_Handle instance,
                               LV2_State_Store_Function store,
                               LV2_State_Handle handle, uint32_t flags,
                               const LV2_Feature *const *features) {
  (void)flags;
  ssae_lv2 *self = (ssae_lv2 *)instance;
  pthread_mutex_lock(&self->slot_lock);
  const ssae_lv2_slot *slot = atomic_load(&self->cur);
  char *path = slot->is_default ? NULL : dup_path(slot->path);
  int is_default = slot->is_default;
  pthread_mutex_unlock(&self->slot_lock);
  /* The default model is not saved: restoring such a state goes back to
   * the default of the bundle installed then. */
  if (is_default) return LV2_STATE_SUCCESS;
  if (!path) return LV2_STATE_ERR_UNKNOWN;

  LV2_State_Map_Path *map_path =
      (LV2_State_Map_Path *)lv2_features_data(features, LV2_STATE__mapPath);
  LV2_State_Free_Path *free_path =
      (LV2_State_Free_Path *)lv2_features_data(features, LV2_STATE__freePath);
  if (!map_path) {
    lv2_log_error(&self->logger,
                  "ssae: cannot save the model path: the host lacks <"
                  LV2_STATE__mapPath ">\n");
    free(path);
    return LV2_STATE_ERR_NO_FEATURE;
  }
  char *apath = map_path->abstract_path(map_path->handle, path);
  free(path);
  if (!apath) return LV2_STATE_ERR_UNKNOWN;
  LV2_State_Status st =
      store(handle, self->uris.model, apath, strlen(apath) + 1,
            self->uris.atom_Path, LV2_STATE_IS_POD | LV2_STATE_IS_PORTABLE);
  free_host_path(free_path, apath);
  return st;
}

static void install_now(ssae_lv2 *self, ssae_lv2_slot *slot) {
  pthread_mutex_lock(&self->slot_lock);
  ssae_lv2_slot *old = atomic_exchange(&self->cur, slot);
  pthread_mutex_unlock(&self->slot_lock);
  ssae_lv2_slot_free(old);
  self->params_valid = 0;
  self->announce = 1;
}

LV2_State_Status ssae_lv2_restore(LV2_Handle instance,
                                  LV2_State_Retrieve_Function retrieve,
                                  LV2_State_Handle handle, uint32_t flags,
                                  const LV2_Feature *const *features) {
  (void)flags;
  ssae_lv2 *self = (ssae_lv2 *)instance;
  LV2_State_Map_Path *map_path = NULL;
  LV2_State_Free_Path *free_path = NULL;
  LV2_Worker_Schedule *schedule = NULL;
  lv2_features_query(features, LV2_STATE__mapPath, &map_path, false,
                     LV2_STATE__freePath, &free_path, false,
                     LV2_WORKER__schedule, &schedule, false, NULL);

  size_t size = 0;
  uint32_t type = 0, vflags = 0;
  const void *value = retrieve(handle, self->uris.model, &size, &type, &vflags);
  char *path = NULL; /* NULL: the state was saved with the default model */
  if (value) {
    if (type != self->uris.atom_Path) {
      lv2_log_error(&self->logger, "ssae: the saved model is not a path\n");
      return LV2_STATE_ERR_BAD_TYPE;
    }
    if (size == 0 || ((const char *)value)[size - 1] != '\0') {
      lv2_log_error(&self->logger, "ssae: the saved model path is malformed\n");
      return LV2_STATE_ERR_BAD_TYPE;
    }
    if (map_path) {
      char *abs = map_path->absolute_path(map_path->handle, (const char *)value);
      if (abs) {
        path = dup_path(abs);
        free_host_path(free_path, abs);
      }
    } else {
      path = dup_path((const char *)value);
    }
    if (!path) return LV2_STATE_ERR_UNKNOWN;
  }

  LV2_State_Status st = LV2_STATE_SUCCESS;
  if (self->activated && schedule) {
    /* The audio may be running: load on the worker like a patch:Set. */
    size_t n = path ? strlen(path) : 0;
    LV2_Atom *msg = (LV2_Atom *)malloc(sizeof(LV2_Atom) + n + 1);
    if (!msg) {
      st = LV2_STATE_ERR_UNKNOWN;
    } else {
      msg->size = (uint32_t)(n + 1);
      msg->type = self->uris.atom_Path;
      memcpy(msg + 1, path ? path : "", n + 1);
      if (schedule->schedule_work(schedule->handle,
                                  (uint32_t)lv2_atom_total_size(msg),
                                  msg) != LV2_WORKER_SUCCESS)
        st = LV2_STATE_ERR_UNKNOWN;
      free(msg);
    }
  } else {
    /* Instantiation threading class: run() is not running. */
    ssae_lv2_slot *slot = ssae_lv2_slot_new(self, path);
    if (slot)
      install_now(self, slot);
    else
      st = LV2_STATE_ERR_UNKNOWN; /* logged; the old model stays */
  }
  free(path);
  return st;
}
