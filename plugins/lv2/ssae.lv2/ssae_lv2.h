/* The ssae LV2 plugin: one instance, shared by the audio-thread code
 * (ssae_lv2.c) and the model loading code (ssae_lv2_model.c).
 *
 * Threads: run() and work_response() run on the audio thread; work() on the
 * host's worker thread; save()/restore() on a host thread that is not the
 * audio thread. The engine's own worker thread scores the windows. */
#ifndef SSAE_LV2_H
#define SSAE_LV2_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <lv2/atom/forge.h>
#include <lv2/core/lv2.h>
#include <lv2/log/logger.h>
#include <lv2/state/state.h>
#include <lv2/urid/urid.h>
#include <lv2/worker/worker.h>

#include "ssae_engine.h"
#include "ssae_model.h"

#define SSAE_LV2_URI_MONO "urn:ssae:lv2:mono"
#define SSAE_LV2_URI_STEREO "urn:ssae:lv2:stereo"
#define SSAE_LV2_URI_MODEL "urn:ssae:lv2:model"
/* Where this instance's engine scores: "auto", "cpu", "cuda", each with an
 * optional ":N" (CUDA device N), an atom:String parameter. */
#define SSAE_LV2_URI_BACKEND "urn:ssae:lv2:backend"
/* Private worker messages: free a slot that is no longer in use; load a
 * model where a restored state says (ssae_lv2_load_msg). */
#define SSAE_LV2_URI_FREE "urn:ssae:lv2:freeSlot"
#define SSAE_LV2_URI_LOAD "urn:ssae:lv2:load"

/* Name of the default model file inside the bundle. */
#define SSAE_LV2_DEFAULT_MODEL "default.safetensors"
/* Longest model path accepted (bytes, without the terminating NUL). */
#define SSAE_LV2_PATH_MAX 4095

enum {
  SSAE_LV2_CONTROL = 0,
  SSAE_LV2_NOTIFY = 1,
  SSAE_LV2_THRESHOLD = 2,
  SSAE_LV2_SMOOTHING = 3,
  SSAE_LV2_ALARM_ON = 4,
  SSAE_LV2_ALARM_OFF = 5,
  SSAE_LV2_ENABLE = 6,
  SSAE_LV2_SCORE = 7,
  SSAE_LV2_WINDOW_SCORE = 8,
  SSAE_LV2_ALARM = 9,
  SSAE_LV2_THRESHOLD_USED = 10,
  SSAE_LV2_DROPS = 11,
  SSAE_LV2_LATENCY = 12,
  SSAE_LV2_WINDOWS = 13,
  SSAE_LV2_AUDIO = 14 /* inputs, then outputs */
};

#define SSAE_LV2_MAX_CHANNELS 2
/* Replaced slots waiting for room in the host's worker queue. */
#define SSAE_LV2_ORPHANS 8

typedef struct ssae_lv2_uris {
  LV2_URID atom_Path;
  LV2_URID atom_URID;
  LV2_URID atom_Object;
  LV2_URID atom_Blank;
  LV2_URID patch_Get;
  LV2_URID patch_Set;
  LV2_URID patch_property;
  LV2_URID patch_value;
  LV2_URID atom_String;
  LV2_URID model;
  LV2_URID backend;
  LV2_URID free_slot;
  LV2_URID load;
} ssae_lv2_uris;

/* Where an engine scores: backend 0 auto, 1 cpu, 2 cuda (ssae_engine_cfg's
 * names), the CUDA device, and whether the backend parameter chose it (then
 * it is saved with the state) or the host's environment did. */
typedef struct ssae_lv2_where {
  int32_t backend;
  int32_t gpu;
  int32_t set;
} ssae_lv2_where;

/* Longest backend value: "cuda:255". */
#define SSAE_LV2_WHERE_MAX 15

/* A loaded model with the engine that runs it. Built on a non-audio thread,
 * installed by the audio thread, freed on a non-audio thread. */
typedef struct ssae_lv2_slot {
  ssae_model *model;
  ssae_engine *engine;
  char *path; /* absolute path of the model file; "" for the built-in one */
  uint32_t path_len;
  int is_default; /* the bundle's (or built-in) default: not saved */
  ssae_lv2_where where; /* where its engine scores */
  char where_text[SSAE_LV2_WHERE_MAX + 1]; /* as the backend parameter says it */
} ssae_lv2_slot;

/* Worker message that hands a slot back to the worker to be freed. */
typedef struct ssae_lv2_free_msg {
  LV2_Atom atom;
  ssae_lv2_slot *slot;
} ssae_lv2_free_msg;

/* Worker message of restore() while the audio runs: the model's path
 * (NUL-terminated; "" for the default) after where to run it. */
typedef struct ssae_lv2_load_msg {
  LV2_Atom atom;
  ssae_lv2_where where;
  char path[];
} ssae_lv2_load_msg;

typedef struct ssae_lv2 {
  LV2_URID_Map *map;
  LV2_Worker_Schedule *schedule;
  LV2_Log_Logger logger;
  ssae_lv2_uris uris;
  LV2_Atom_Forge forge;

  int channels;
  double rate;
  char *bundle_path;
  /* Where the engine scores unless the backend parameter says otherwise,
   * from the host process's environment at instantiation
   * (ssae_lv2_read_env): SSAE_LV2_BACKEND (auto, cpu or cuda; default
   * auto) and SSAE_LV2_GPU (the CUDA device, default 0). */
  ssae_lv2_where env_where;

  /* Ports. */
  const LV2_Atom_Sequence *control;
  LV2_Atom_Sequence *notify;
  const float *threshold, *smoothing, *alarm_on, *alarm_off, *enable;
  float *score, *window_score, *alarm, *threshold_used, *drops, *latency,
      *windows;
  const float *in[SSAE_LV2_MAX_CHANNELS];
  float *out[SSAE_LV2_MAX_CHANNELS];

  /* The slot in use. Written only by the audio thread (work_response) or in
   * the instantiation class (restore without a worker); save() reads it
   * under slot_lock, which also guards freeing a slot. */
  _Atomic(ssae_lv2_slot *) cur;
  pthread_mutex_t slot_lock;
  int activated;

  /* Audio thread only. */
  ssae_engine_params params; /* last values given to the engine */
  int params_valid;
  int announce; /* send patch:Set model and backend on the next run() */
  ssae_lv2_slot *orphans[SSAE_LV2_ORPHANS];
} ssae_lv2;

/* ---- ssae_lv2_model.c ---- */

/* Loads the model at path (NULL or "": the default model of the bundle, or
 * the built-in one) and starts an engine for it where `where` says. Not for
 * the audio thread. Errors go to the log. */
ssae_lv2_slot *ssae_lv2_slot_new(ssae_lv2 *self, const char *path,
                                 const ssae_lv2_where *where);
/* self->env_where from the environment; a value that is not one of them is
 * logged, naming the variable, and the default kept. Instantiation only. */
void ssae_lv2_read_env(ssae_lv2 *self);
/* A backend parameter's value ("cpu", "cuda:1"; n bytes, NUL not needed)
 * into *w (set); -1 when it is not one. */
int ssae_lv2_parse_where(const char *text, size_t n, ssae_lv2_where *w);
void ssae_lv2_slot_free(ssae_lv2_slot *slot);

LV2_Worker_Status ssae_lv2_work(LV2_Handle instance,
                                LV2_Worker_Respond_Function respond,
                                LV2_Worker_Respond_Handle handle,
                                uint32_t size, const void *data);
LV2_Worker_Status ssae_lv2_work_response(LV2_Handle instance, uint32_t size,
                                         const void *data);
LV2_State_Status ssae_lv2_save(LV2_Handle instance,
                               LV2_State_Store_Function store,
                               LV2_State_Handle handle, uint32_t flags,
                               const LV2_Feature *const *features);
LV2_State_Status ssae_lv2_restore(LV2_Handle instance,
                                  LV2_State_Retrieve_Function retrieve,
                                  LV2_State_Handle handle, uint32_t flags,
                                  const LV2_Feature *const *features);

#endif
