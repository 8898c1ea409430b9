/* The service object's insides, shared by ssae_service.c (events, outputs)
 * and ssae_service_metrics.c (the /metrics text). Private to src/service.
 *
 * Thread context: see ssae_service.h; fields say who writes them. */
#ifndef SSAE_SERVICE_IMPL_H
#define SSAE_SERVICE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "ssae_clip_pictures.h"
#include "ssae_clips.h"
#include "ssae_metrics_http.h"
#include "ssae_mqtt.h"
#include "ssae_service.h"
#include "ssae_service_events.h"

typedef struct svc_machine {
  char *name;
  char *model_file;     /* NULL: built in */
  double model_threshold;
  int sample_rate, n_mels, frames;
  char *state_topic, *event_topic;
  char *clip;           /* open alarm's clip path (worker thread) */
  char alarm_id[SSAE_ALARM_ID_LEN]; /* the open (or last) alarm's id and */
  int alarm_open;                   /* whether it is on (worker thread) */
  atomic_ullong alarms; /* alarm_on events */
} svc_machine;

struct ssae_service {
  char *node, *prefix, *discovery_prefix;
  int n;
  svc_machine *m;
  ssae_service_opts opts;

  FILE *events;               /* under file_mu: worker and clip writer */
  int events_is_stdout;
  pthread_mutex_t file_mu;
  int file_mu_ok;

  /* Machine names and topics: read by the worker, the clip writer and the
   * metrics thread, replaced by a reload. */
  pthread_mutex_t names_mu;
  int names_mu_ok;
  char *restart_sig; /* what a reload may not change (see reload.c) */
  int discovery;

  ssae_mqtt *mqtt;
  ssae_clips *clips;
  ssae_clip_pictures *pictures; /* NULL unless clips.picture */
  ssae_metrics_http *http;

  /* The engine for the metrics thread, under eng_mu (cleared by detach);
   * ev_engine for the worker's callbacks (valid until the engine is
   * freed, which is after its last callback). */
  pthread_mutex_t eng_mu;
  int eng_mu_ok;
  ssae_engine *engine;
  ssae_engine *_Atomic ev_engine; /* set by attach; events may come first */
  atomic_int running;

  ssae_prom_hist latency; /* window's last sample -> score, seconds */
  atomic_llong audio_ns;  /* last ssae_service_audio (monotonic) */
  atomic_ullong n_events, n_alarms, write_errors;
  double status_every_s;
  /* Per machine (channel) its detector parameters: the engine's
   * channel_params at creation. */
  ssae_engine_params *params;
};

/* Sends the discovery configs of the current names (ssae_service.c). */
int ssae_service_births(ssae_service *s, ssae_err *err);
/* Machine i's detector parameters from a config (ssae_service_reload.c). */
void ssae_service_machine_params(const ssae_config *c, int i, ssae_engine_params *p);
/* The settings a reload cannot change, as one text (ssae_service_reload.c). */
char *ssae_service_restart_signature(const ssae_config *c);

/* The /metrics text (ssae_service_metrics.c). */
void ssae_service_write_metrics(void *user, ssae_textbuf *out);

#endif
