/* The plant service: takes the engine's events and fans them out to the
 * outputs of a config (ssae_service_config.h): JSON lines with machine
 * names, wall-clock times and alarm ids (ssae_service_events.h), MQTT with
 * Home Assistant discovery (ssae_mqtt.h, ssae_hass.h), Prometheus metrics
 * and /healthz (ssae_metrics_http.h), alarm clips (ssae_clips.h), and
 * systemd notification (ssae_sdnotify.h).
 *
 * Order of calls for a front end (`ssae monitor`, `ssae jack`):
 *   cfg = ssae_config_load(path) or ssae_config_new_default(channels);
 *   ssae_config_apply(cfg, &flags); ssae_config_set_channels(cfg, channels);
 *   ssae_config_check_models(cfg, models);
 *   s = ssae_service_new(cfg, &opts);            main thread
 *   ssae_engine_cfg_default(&ec); ...;
 *   ssae_service_engine_cfg(s, &ec);            sets on_event, user,
 *                                                emit_windows, status period,
 *                                                each machine's detector
 *                                                parameters
 *   ec.channel_models = models;                 one per machine
 *   e = ssae_engine_new(models[0], &ec);
 *   ssae_service_attach(s, e);                  metrics read e; READY=1
 *   audio thread: ssae_engine_process(e, in, n); ssae_service_audio(s, in, n);
 *   main thread, about once a second: ssae_service_tick(s);
 *   SIGHUP (main thread): load + apply flags + check models into cfg2;
 *     on error ssae_service_note(s, "config_rejected", err.msg); else
 *     ssae_service_reload(s, cfg2, models2, params, &err) (on error: note
 *     it, keep running), ssae_engine_set_channel_params(e, i, &params[i])
 *     per machine, swap changed models with ssae_engine_swap_models,
 *     ssae_service_note(s,
 *     "config_reloaded", NULL);
 *   on exit: ssae_service_detach(s); ssae_engine_free(e); ssae_service_free(s);
 *
 * Thread context: new/attach/tick/detach/free on the main thread;
 * ssae_service_on_event on the engine's worker thread (and on the thread
 * calling ssae_engine_free for the final status); ssae_service_audio* on
 * the audio thread (SSAE_REALTIME); the outputs' own threads inside. */
#ifndef SSAE_SERVICE_H
#define SSAE_SERVICE_H

#include <stddef.h>
#include <stdint.h>

#include "ssae_engine.h"
#include "ssae_err.h"
#include "ssae_model.h"
#include "ssae_realtime.h"
#include "ssae_service_config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ssae_service ssae_service;

typedef struct ssae_service_opts {
  double input_rate;          /* rate of the samples given to
                                 ssae_service_audio (clips); 0: 16000 */
  ssae_model *const *models;  /* per machine (metrics: model info); may be
                                 NULL; only read during new */
  ssae_event_fn next;         /* every event is also passed on here (the
                                 command line's evsink); may be NULL */
  void *next_user;
  int forward_windows;        /* 1: pass WINDOW events to next too */
  double stale_s;             /* no audio this long: /healthz 503, no
                                 watchdog pings (0: 5 s) */
} ssae_service_opts;

void ssae_service_opts_default(ssae_service_opts *o);

/* Opens the outputs the config names (events file, MQTT, metrics, clips).
 * The config is copied: it may be freed afterwards. */
ssae_service *ssae_service_new(const ssae_config *c, const ssae_service_opts *o,
                               ssae_err *err);
/* Finishes the clips, delivers queued MQTT messages and says "offline",
 * stops the HTTP server, closes the events file. Accepts NULL. */
void ssae_service_free(ssae_service *s);

/* What the outputs did, final once the service is closed. */
typedef struct ssae_service_end {
  uint64_t clips_written, clips_failed; /* failed: not written (a full disk, ...) */
  uint64_t clip_samples_lost;           /* written as silence: the writer fell behind */
  uint64_t event_write_errors;          /* event lines the events file did not take */
  uint64_t mqtt_undelivered;            /* MQTT messages never delivered (still queued
                                           at the end, or dropped from a full queue) */
} ssae_service_end;
/* ssae_service_free, with what the outputs did (end may be NULL). */
void ssae_service_close(ssae_service *s, ssae_service_end *end);

/* Fills the engine config's callback, window events, status period and
 * detector parameters from the config. The engine has one set of detector
 * parameters for all channels: -1 with a message when the machines'
 * thresholds, smoothing or hysteresis differ. */
int ssae_service_engine_cfg(ssae_service *s, ssae_engine_cfg *ec,
                            ssae_err *err);

/* The engine exists and runs: metrics read it, /healthz may say 200,
 * systemd hears READY=1. */
void ssae_service_attach(ssae_service *s, ssae_engine *e);
/* Before ssae_engine_free: metrics stop reading the engine, /healthz says
 * 503, systemd hears STOPPING=1. */
void ssae_service_detach(ssae_service *s);

/* The engine callback (cfg.on_event with the service as user). */
void ssae_service_on_event(void *user, const ssae_event *ev);

/* Audio thread, beside ssae_engine_process*: fills the clips' pre-roll
 * and beats the heart of /healthz and the watchdog. */
void ssae_service_audio(ssae_service *s, const float *const *in, size_t n)
    SSAE_REALTIME;
void ssae_service_audio_interleaved(ssae_service *s, const float *in, size_t n)
    SSAE_REALTIME;
/* One input group's channels (first .. first+count-1), beside
 * ssae_engine_process_group on that group's audio thread. */
void ssae_service_audio_channels(ssae_service *s, int first, int count,
                                 const float *const *in, size_t n) SSAE_REALTIME;

/* Main thread, about once a second (and at least twice per watchdog
 * period, ssae_sd_watchdog_usec): systemd watchdog ping while audio
 * arrives, and a STATUS line. */
void ssae_service_tick(ssae_service *s);

/* SIGHUP: a new config (loaded, flags applied, models checked by the
 * caller) for the running service. Machine names follow (topics, discovery,
 * metrics labels, clip names; the broker forgets the old names' retained
 * messages), model info is taken from `models` (may be NULL), and each
 * machine's detector parameters for ssae_engine_set_channel_params come
 * back in params[i] (NULL: not wanted; else one per machine). Changes that
 * need a restart (node, machine count, inputs, outputs) are refused: -1
 * with the reason, nothing changed. Swapping changed models is the
 * caller's (ssae_engine_swap_models). Main thread. */
int ssae_service_reload(ssae_service *s, const ssae_config *c,
                        ssae_model *const *models, ssae_engine_params *params,
                        ssae_err *err);

/* A note of the service's own ("config_reloaded", "config_rejected" with
 * the reason) as a JSON line in the events file and on
 * <prefix>/<node>/event. Main thread. */
void ssae_service_note(ssae_service *s, const char *event, const char *msg);

/* Port the metrics server listens on (0: none). */
int ssae_service_metrics_port(const ssae_service *s);

typedef struct ssae_service_stats {
  uint64_t events;      /* engine events seen */
  uint64_t alarms;      /* alarm_on events */
  uint64_t write_errors;/* events file */
} ssae_service_stats;
void ssae_service_stats_get(ssae_service *s, ssae_service_stats *st);

/* The outputs, for tests and for a front end's own reports (NULL when
 * not configured). */
struct ssae_mqtt *ssae_service_mqtt(ssae_service *s);
struct ssae_clips *ssae_service_clips(ssae_service *s);
/* The clip path of channel's alarm `id` (its alarm_on and alarm_off), copied
 * into buf; NULL when it has none. Any thread. */
const char *ssae_service_alarm_clip(ssae_service *s, int channel, const char *id, char *buf,
                                    size_t len);

#ifdef __cplusplus
}
#endif
#endif
