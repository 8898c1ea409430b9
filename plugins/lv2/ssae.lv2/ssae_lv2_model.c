/* Model loading for the ssae LV2 plugin: the worker (load in work(), install
 * in work_response(), free the old slot back on the worker) and the state
 * (the model path, mapped through the host's map-path feature, and the
 * backend when the parameter chose it). A slot is a model and its engine
 * where the backend parameter (or the environment) says: a new model keeps
 * the backend in use, a new backend the model.
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

/* The engine keeps the backend's name: one of these, never a copy. */
static const char *const backends[] = {"auto", "cpu", "cuda"};

int ssae_lv2_parse_where(const char *text, size_t n, ssae_lv2_where *w) {
  n = strnlen(text, n);
  for (int b = 0; b < 3; b++) {
    const size_t k = strlen(backends[b]);
    if (n < k || memcmp(text, backends[b], k)) continue;
    int gpu = 0;
    if (n > k) {
      /* ":N", N a device index 0..255 written plainly */
      if (text[k] != ':' || n == k + 1 || n > k + 4) return -1;
      for (size_t i = k + 1; i < n; i++) {
        if (text[i] < '0' || text[i] > '9') return -1;
        gpu = gpu * 10 + (text[i] - '0');
      }
      if (gpu > 255 || (text[k + 1] == '0' && n > k + 2)) return -1;
    }
    w->backend = b;
    w->gpu = gpu;
    w->set = 1;
    return 0;
  }
  return -1;
}

static void where_text(const ssae_lv2_where *w, char *buf, size_t len) {
  if (w->gpu)
    snprintf(buf, len, "%s:%d", backends[w->backend], (int)w->gpu);
  else
    snprintf(buf, len, "%s", backends[w->backend]);
}

ssae_lv2_slot *ssae_lv2_slot_new(ssae_lv2 *self, const char *path,
                                 const ssae_lv2_where *where) {
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
  slot->where = *where;
  where_text(where, slot->where_text, sizeof(slot->where_text));
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
  cfg.backend = backends[where->backend];
  cfg.gpu = where->gpu;
  slot->engine = ssae_engine_new(slot->model, &cfg, &err);
  if (!slot->engine) {
    lv2_log_error(&self->logger,
                  "ssae: cannot start the analysis (backend %s) for the model '%s': %s\n",
                  slot->where_text, file, err.msg);
    ssae_lv2_slot_free(slot);
    return NULL;
  }
  return slot;
}

void ssae_lv2_read_env(ssae_lv2 *self) {
  ssae_lv2_where *w = &self->env_where;
  w->backend = 0;
  w->gpu = 0;
  w->set = 0;
  const char *b = getenv("SSAE_LV2_BACKEND");
  if (b && *b) {
    int found = -1;
    for (int i = 0; i < 3; i++)
      if (!strcmp(b, backends[i])) found = i;
    if (found >= 0)
      w->backend = found;
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
      w->gpu = (int)v;
  }
}

/* What a patch:Set message asks: a model path into buf (returns 1), or a
 * place to run into *where (returns 2); -1 (logged) when the message is
 * neither. */
static int set_message(ssae_lv2 *self, const LV2_Atom_Object *obj, char *buf,
                       size_t len, ssae_lv2_where *where) {
  const ssae_lv2_uris *u = &self->uris;
  const LV2_Atom *property = NULL, *value = NULL;
  lv2_atom_object_get(obj, u->patch_property, &property, u->patch_value,
                      &value, 0);
  if (!property || property->type != u->atom_URID) {
    lv2_log_error(&self->logger,
                  "ssae: patch:Set without a patch:property URID\n");
    return -1;
  }
  const LV2_URID key = ((const LV2_Atom_URID *)property)->body;
  if (key == u->backend) {
    if (!value || value->type != u->atom_String) {
      lv2_log_error(&self->logger,
                    "ssae: the backend must be set with an atom:String value\n");
      return -1;
    }
    const char *s = (const char *)LV2_ATOM_BODY_CONST(value);
    if (ssae_lv2_parse_where(s, value->size, where) != 0) {
      lv2_log_error(&self->logger,
                    "ssae: backend '%.*s': use auto, cpu or cuda, or cuda:N for CUDA "
                    "device N (0..255)\n",
                    (int)strnlen(s, value->size < 64 ? value->size : 64), s);
      return -1;
    }
    return 2;
  }
  if (key != u->model) {
    lv2_log_error(&self->logger,
                  "ssae: patch:Set of a property the plugin does not have "
                  "(<" SSAE_LV2_URI_MODEL "> and <" SSAE_LV2_URI_BACKEND
                  "> are writable)\n");
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
  return 1;
}

/* The slot in use's model path into buf ("" for the default) and where it
 * runs. Worker thread: slots are freed on it, so cur stays valid; the
 * lock as save() takes it. */
static void current(ssae_lv2 *self, char *buf, size_t len, ssae_lv2_where *where) {
  pthread_mutex_lock(&self->slot_lock);
  const ssae_lv2_slot *cur = atomic_load(&self->cur);
  snprintf(buf, len, "%s", cur->is_default ? "" : cur->path);
  *where = cur->where;
  pthread_mutex_unlock(&self->slot_lock);
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
  ssae_lv2_where where;
  if (atom->type == u->load && size >= sizeof(ssae_lv2_load_msg)) {
    /* From restore(): where, then the path ("" for the default model). */
    const ssae_lv2_load_msg *msg = (const ssae_lv2_load_msg *)data;
    size_t n = strnlen(msg->path, size - sizeof(ssae_lv2_load_msg));
    if (n > SSAE_LV2_PATH_MAX) {
      lv2_log_error(&self->logger, "ssae: model path too long\n");
      return LV2_WORKER_ERR_UNKNOWN;
    }
    memcpy(path, msg->path, n);
    path[n] = '\0';
    where = msg->where;
  } else if ((atom->type == u->atom_Object || atom->type == u->atom_Blank) &&
             ((const LV2_Atom_Object *)atom)->body.otype == u->patch_Set) {
    /* a model keeps the backend in use, a backend the model */
    ssae_lv2_where asked;
    const int what = set_message(self, (const LV2_Atom_Object *)atom, path,
                                 sizeof(path), &asked);
    if (what < 0) return LV2_WORKER_ERR_UNKNOWN;
    char in_use[SSAE_LV2_PATH_MAX + 1];
    current(self, in_use, sizeof(in_use), &where);
    if (what == 2) {
      memcpy(path, in_use, sizeof(path));
      where = asked;
    }
  } else {
    lv2_log_error(&self->logger, "ssae: unknown worker message\n");
    return LV2_WORKER_ERR_UNKNOWN;
  }

  /* On failure the error is logged and the model in use stays. */
  ssae_lv2_slot *slot = ssae_lv2_slot_new(self, path, &where);
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
  char where[SSAE_LV2_WHERE_MAX + 1] = "";
  if (slot->where.set) memcpy(where, slot->where_text, sizeof(where));
  pthread_mutex_unlock(&self->slot_lock);
  /* The backend is saved when the parameter chose it: a state saved under
   * the environment's choice follows the environment it is restored in. */
  if (*where) {
    LV2_State_Status st =
        store(handle, self->uris.backend, where, strlen(where) + 1,
              self->uris.atom_String, LV2_STATE_IS_POD | LV2_STATE_IS_PORTABLE);
    if (st != LV2_STATE_SUCCESS) {
      free(path);
      return st;
    }
  }
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

  /* Where to run: the saved backend, else the environment's choice. A
   * saved value that is not one is logged and the environment's used. */
  ssae_lv2_where where = self->env_where;
  const void *wv = retrieve(handle, self->uris.backend, &size, &type, &vflags);
  if (wv) {
    ssae_lv2_where w;
    if (type != self->uris.atom_String || ssae_lv2_parse_where((const char *)wv, size, &w)) {
      char env[SSAE_LV2_WHERE_MAX + 1];
      where_text(&self->env_where, env, sizeof(env));
      lv2_log_error(&self->logger,
                    "ssae: the saved backend is not auto, cpu, cuda or cuda:N; "
                    "the environment's (%s) used\n", env);
    } else {
      where = w;
    }
  }

  LV2_State_Status st = LV2_STATE_SUCCESS;
  if (self->activated && schedule) {
    /* The audio may be running: load on the worker like a patch:Set. */
    size_t n = path ? strlen(path) : 0;
    ssae_lv2_load_msg *msg = (ssae_lv2_load_msg *)malloc(sizeof(*msg) + n + 1);
    if (!msg) {
      st = LV2_STATE_ERR_UNKNOWN;
    } else {
      msg->atom.size = (uint32_t)(sizeof(*msg) - sizeof(LV2_Atom) + n + 1);
      msg->atom.type = self->uris.load;
      msg->where = where;
      memcpy(msg->path, path ? path : "", n + 1);
      if (schedule->schedule_work(schedule->handle,
                                  (uint32_t)lv2_atom_total_size(&msg->atom),
                                  msg) != LV2_WORKER_SUCCESS)
        st = LV2_STATE_ERR_UNKNOWN;
      free(msg);
    }
  } else {
    /* Instantiation threading class: run() is not running. */
    ssae_lv2_slot *slot = ssae_lv2_slot_new(self, path, &where);
    if (slot)
      install_now(self, slot);
    else
      st = LV2_STATE_ERR_UNKNOWN; /* logged; the old model stays */
  }
  free(path);
  return st;
}
