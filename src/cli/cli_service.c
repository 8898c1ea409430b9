/* The plant service behind `ssae monitor` and `ssae jack` (see
 * cli_service.h), in a build with its libraries. Thread context: main
 * thread, except the audio calls. */
#include "cli_service.h"

#include <errno.h>
#include <pthread.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "ssae_cuda.h"

#include "ssae_audio.h"
#include "ssae_clips.h"
#include "ssae_mqtt.h"
#include "ssae_service.h"

struct ssae_cli_service {
  const char *prog;
  ssae_cli_service_args args;
  ssae_cli_service_cmdvals vals;
  ssae_config *cfg;     /* the running config */
  ssae_config *loaded;  /* the first reading: the command's input settings
                           point into it, so it lives to the end */
  ssae_model **models; /* cfg->n_machines (machines naming one file share
                          one model) */
  struct stat *model_st; /* per machine its model's file (reload: changed?) */
  int *have_model_st;
  int channels;
  ssae_service *svc;
  ssae_engine *engine;
  struct timespec last_tick;
  int mqtt_said; /* the broker's state last logged: 0 nothing yet, 1 connected, 2 not */
  int clips_stuck_said; /* the clip writer's stall was logged (file_pace) */
  int mqtt_silent_s;    /* seconds without a connection or an error, at start */
  /* Under systemd (stderr is the journal) alarms are also log lines, and
   * the JSON lines stay out of the journal (MQTT and the events file carry
   * them). names: per machine, for those lines (a reload renames). */
  int journal;
  ssae_event_fn next;
  void *next_user;
  pthread_mutex_t names_mu;
  int names_mu_ok;
  char **names;
  int n_names;
};

/* Under systemd stdout is the journal too (the same stream): the JSON
 * lines of every status event would flood it. */
static int stdout_is_journal(void) {
  static int known = -1;
  if (known < 0) known = ssae_cli_fd_is_journal(1);
  return known;
}

static volatile sig_atomic_t hup;
static void on_sighup(int sig) {
  (void)sig;
  hup = 1;
}

/* The command's own options that were given, over the file's values. */
static void apply_cmdvals(ssae_config *c, const ssae_cli_service_args *a,
                          const ssae_cli_service_cmdvals *v) {
  if (a->given_status) c->status_every_s = v->status_s;
  for (int i = 0; i < c->n_machines; i++) {
    if (a->given_smoothing) c->machines[i].smoothing_s = v->smoothing_s;
    if (a->given_on) c->machines[i].on_count = v->on_count;
    if (a->given_off) c->machines[i].off_count = v->off_count;
  }
}

/* The file (or the defaults) with the flags over it; machines for
 * `channels` inputs when channels > 0. */
static ssae_config *build_config(const ssae_cli_service *s, int channels, ssae_err *err) {
  const ssae_cli_service_args *a = &s->args;
  ssae_config *c = a->config ? ssae_config_load(a->config, err)
                             : ssae_config_new_default(1, err);
  if (!c) return NULL;
  if (!a->config) {
    /* The defaults' one machine is a placeholder: --names or the input's
     * channels say how many there are. */
    ssae_config_free(c);
    int n = channels > 0 ? channels : 1;
    if (a->names) {
      n = 1;
      for (const char *p = a->names; *p; p++) n += *p == ',';
    }
    if (!(c = ssae_config_new_default(n, err))) return NULL;
  }
  ssae_config_overrides o = {0};
  o.node = a->node;
  o.names = a->names;
  o.mqtt_url = a->mqtt;
  o.metrics = a->metrics;
  o.clips_dir = a->clips;
  o.clip_pictures = a->clip_pictures;
  o.events = a->given_events ? s->vals.events : NULL;
  o.model = a->given_model ? s->vals.model : NULL;
  o.backend = a->given_backend ? s->vals.backend : NULL;
  o.gpu = a->given_gpu ? &s->vals.gpu : NULL;
  o.threshold = a->given_threshold ? s->vals.threshold : 0;
  if (ssae_config_apply(c, &o, err)) {
    ssae_config_free(c);
    return NULL;
  }
  apply_cmdvals(c, a, &s->vals);
  if (channels > 0 && ssae_config_set_channels(c, channels, err)) {
    ssae_config_free(c);
    return NULL;
  }
  return c;
}

ssae_cli_service *ssae_cli_service_load(const char *prog, const ssae_cli_service_args *a,
                                        const ssae_cli_service_cmdvals *v, int *rc) {
  ssae_cli_service *s = calloc(1, sizeof *s);
  if (!s) {
    ssae_cli_log(3, prog, "out of memory");
    *rc = SSAE_EXIT_INPUT;
    return NULL;
  }
  s->prog = prog;
  s->names_mu_ok = pthread_mutex_init(&s->names_mu, NULL) == 0;
  if (!s->names_mu_ok) {
    ssae_cli_log(3, prog, "cannot create a mutex");
    *rc = SSAE_EXIT_INPUT;
    free(s);
    return NULL;
  }
  s->args = *a;
  s->vals = *v;
  ssae_err err = {{0}};
  /* The service publishes each machine's state (MQTT, metrics) at the
   * status cadence: engine.status_every's range holds for the flag too
   * (alone, --status 0 means no status events). */
  if (a->given_status && !(v->status_s > 0 && v->status_s <= SSAE_CONFIG_STATUS_EVERY_MAX)) {
    ssae_cli_log(3, prog, "--status %g: the service publishes each machine's state at the "
                          "status cadence; give a period in (0, %g] seconds", v->status_s,
                 SSAE_CONFIG_STATUS_EVERY_MAX);
    *rc = SSAE_EXIT_USAGE;
    pthread_mutex_destroy(&s->names_mu);
    free(s);
    return NULL;
  }
  /* Machines are fixed once the input's channels are known (start); this
   * reading checks the file and gives the input's settings. */
  s->cfg = s->loaded = build_config(s, 0, &err);
  if (!s->cfg) {
    ssae_cli_log(3, prog, "%s", err.msg);
    *rc = a->config ? SSAE_EXIT_INPUT : SSAE_EXIT_USAGE;
    pthread_mutex_destroy(&s->names_mu);
    free(s);
    return NULL;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sighup;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGHUP, &sa, NULL);
  return s;
}

void ssae_cli_service_input_get(const ssae_cli_service *s, ssae_cli_service_input *in) {
  memset(in, 0, sizeof *in);
  if (!s) return;
  const ssae_config_input *ci = &s->loaded->input;
  in->kind = (int)ci->kind;
  in->device = ci->device;
  in->device_channels = ci->channels;
  in->n_device_channels = ci->n_channels;
  in->ports = (const char *const *)ci->ports;
  in->n_ports = ci->n_ports;
  in->file = ci->file;
  in->realtime = ci->realtime;
  in->machines = s->args.config || s->args.names ? s->loaded->n_machines : 0;
}

int ssae_cli_service_monitor_input(const ssae_cli_service *s, const char **input,
                                   int *realtime, const char **device, int *channels,
                                   int given_channels, int *channel, int given_channel) {
  if (!s) return 0;
  ssae_cli_service_input in;
  ssae_cli_service_input_get(s, &in);
  if (!*input && !*device) {
    if (in.kind == SSAE_CONFIG_INPUT_JACK) {
      ssae_cli_log(3, s->prog, "%s: input.jack: a JACK input is for `ssae jack --config`",
                   s->args.config ? s->args.config : "config");
      return -1;
    }
    if (in.kind == SSAE_CONFIG_INPUT_FILE) {
      *input = in.file;
      *realtime = *realtime || in.realtime;
    }
    if (in.kind == SSAE_CONFIG_INPUT_PORTAUDIO) *device = in.device;
  }
  if (!*input && !given_channels) {
    for (int i = 0; i < in.n_device_channels; i++)
      if (in.device_channels[i] != i) {
        ssae_cli_log(3, s->prog,
                     "%s: input.portaudio.channels: device channel %d for machine %d: "
                     "this ssae records the device's first channels in order "
                     "(0, 1, ..., N-1), one per machine",
                     s->args.config ? s->args.config : "config", in.device_channels[i], i);
        return -1;
      }
    if (in.n_device_channels > 0) *channels = in.n_device_channels;
    else if (in.machines > 0) *channels = in.machines;
  }
  if (*input && !given_channel && in.machines > 1) *channel = SSAE_CHANNEL_ALL;
  return 0;
}

int ssae_cli_service_jack_input(const ssae_cli_service *s, int *inputs, int given_inputs,
                                ssae_cli_list *connect) {
  if (!s) return 0;
  ssae_cli_service_input in;
  ssae_cli_service_input_get(s, &in);
  if (in.kind == SSAE_CONFIG_INPUT_PORTAUDIO || in.kind == SSAE_CONFIG_INPUT_FILE) {
    ssae_cli_log(3, s->prog, "%s: input.%s is for `ssae monitor --config`; `ssae jack` "
                 "takes input.jack (or no input section)",
                 s->args.config ? s->args.config : "config",
                 in.kind == SSAE_CONFIG_INPUT_FILE ? "file" : "portaudio");
    return -1;
  }
  if (in.kind == SSAE_CONFIG_INPUT_JACK && connect->n == 0 && in.n_ports > 0) {
    connect->v = (char **)in.ports;
    connect->n = in.n_ports;
  }
  if (!given_inputs) {
    if (in.n_ports > 0) *inputs = in.n_ports;
    else if (in.machines > 0) *inputs = in.machines;
  }
  return 0;
}

const char *ssae_cli_service_model_path(const ssae_cli_service *s) {
  return s && s->cfg->n_machines > 0 ? s->cfg->machines[0].model : NULL;
}

int ssae_cli_service_check_models(const ssae_cli_service *s, ssae_err *err) {
  return ssae_config_check_models(s->cfg, NULL, err);
}

/* Each machine's model file as loaded (a reload swaps the models whose
 * files changed). */
static int remember_model_files(ssae_cli_service *s) {
  const int n = s->cfg->n_machines;
  struct stat *st = calloc((size_t)n, sizeof *st);
  int *have = calloc((size_t)n, sizeof *have);
  if (!st || !have) {
    free(st);
    free(have);
    return -1;
  }
  for (int i = 0; i < n; i++) {
    const char *p = s->cfg->machines[i].model;
    have[i] = p && stat(p, &st[i]) == 0;
  }
  free(s->model_st);
  free(s->have_model_st);
  s->model_st = st;
  s->have_model_st = have;
  return 0;
}

/* The machine names for the journal's alarm lines (start, reload). */
static int set_names(ssae_cli_service *s, const ssae_config *c) {
  char **nv = calloc((size_t)c->n_machines, sizeof *nv);
  int oom = !nv;
  for (int i = 0; !oom && i < c->n_machines; i++) oom = !(nv[i] = strdup(c->machines[i].name));
  if (oom) {
    for (int i = 0; nv && i < c->n_machines; i++) free(nv[i]);
    free(nv);
    return -1;
  }
  pthread_mutex_lock(&s->names_mu);
  char **old = s->names;
  int n_old = s->n_names;
  s->names = nv;
  s->n_names = c->n_machines;
  pthread_mutex_unlock(&s->names_mu);
  for (int i = 0; i < n_old; i++) free(old[i]);
  free(old);
  return 0;
}

/* The engine's events after the service (worker thread): an alarm, a
 * backend fallback or dropped windows as one log line when stderr is the
 * journal; then the command's evsink. */
static void log_and_forward(void *user, const ssae_event *ev) {
  ssae_cli_service *s = user;
  if (s->journal && (ev->type == SSAE_EVENT_ALARM_ON || ev->type == SSAE_EVENT_ALARM_OFF)) {
    pthread_mutex_lock(&s->names_mu);
    const char *name = ev->channel >= 0 && ev->channel < s->n_names ? s->names[ev->channel]
                                                                     : "?";
    ssae_cli_log(ev->type == SSAE_EVENT_ALARM_ON ? 4 : 5, s->prog,
                 "%s: machine %s (channel %d) at %.3f s, smoothed score %.4g, threshold "
                 "%.4g", ev->type == SSAE_EVENT_ALARM_ON ? "alarm on" : "alarm off", name,
                 ev->channel, ev->t, ev->score, ev->threshold);
    pthread_mutex_unlock(&s->names_mu);
  } else if (s->journal && ev->type == SSAE_EVENT_BACKEND) {
    ssae_cli_log(4, s->prog, "backend: %s", ev->msg ? ev->msg : "changed");
  } else if (s->journal && ev->type == SSAE_EVENT_DROP && ev->stats) {
    ssae_cli_log(4, s->prog, "%llu window(s) dropped so far: scoring falls behind",
                 (unsigned long long)ev->stats->dropped);
  }
  if (s->next) s->next(s->next_user, ev);
}

/* SIGHUP is for the main thread, whose loop does the reload: the threads
 * started from here to attach (the outputs', the engine's, the audio
 * adapter's) inherit a mask that blocks it, so that it never interrupts
 * their system calls; attach unblocks it on the main thread (one that came
 * meanwhile is delivered then). */
static void block_sighup(int block) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(block ? SIG_BLOCK : SIG_UNBLOCK, &set, NULL);
}

int ssae_cli_service_start(ssae_cli_service *s, int channels, double rate,
                           ssae_engine_cfg *ec, ssae_event_fn next, void *next_user,
                           int windows) {
  if (!s) return 0;
  block_sighup(1);
  ssae_err err = {{0}};
  ssae_config *c = build_config(s, channels, &err);
  ssae_model **models = c ? calloc((size_t)c->n_machines, sizeof *models) : NULL;
  if (!c || !models || ssae_config_check_models(c, models, &err)) {
    if (c && !models) ssae_err_set(&err, "out of memory");
    ssae_cli_log(3, s->prog, "%s", err.msg);
    free(models);
    ssae_config_free(c);
    block_sighup(0);
    return -1;
  }
  if (s->cfg != s->loaded) ssae_config_free(s->cfg);
  s->cfg = c;
  s->models = models;
  s->channels = channels;
  if (remember_model_files(s)) {
    ssae_cli_log(3, s->prog, "out of memory");
    block_sighup(0);
    return -1;
  }
  s->next = next;
  s->next_user = next_user;
  s->journal = ssae_cli_stderr_is_journal();
  if (set_names(s, c)) {
    ssae_cli_log(3, s->prog, "out of memory");
    block_sighup(0);
    return -1;
  }
  ssae_service_opts so;
  ssae_service_opts_default(&so);
  so.input_rate = rate;
  so.models = models;
  so.next = log_and_forward;
  so.next_user = s;
  so.forward_windows = windows;
  s->svc = ssae_service_new(c, &so, &err);
  if (!s->svc || ssae_service_engine_cfg(s->svc, ec, &err)) {
    ssae_cli_log(3, s->prog, "%s", err.msg);
    block_sighup(0);
    return -1;
  }
  ec->backend = c->backend;
  ec->gpu = c->gpu;
  /* One model per machine: machines that name one file share it. */
  ec->channel_models = (const ssae_model *const *)models;
  char outs[1024];
  int n = snprintf(outs, sizeof outs, "node %s, %d machine%s (%s%s)", c->node,
                   c->n_machines, c->n_machines == 1 ? "" : "s", c->machines[0].name,
                   c->n_machines > 1 ? ", ..." : "");
  if (c->mqtt.url && n < (int)sizeof outs)
    n += snprintf(outs + n, sizeof outs - (size_t)n, ", MQTT %s", c->mqtt.url);
  if (c->metrics_host && n < (int)sizeof outs)
    n += snprintf(outs + n, sizeof outs - (size_t)n, ", metrics http://%s:%d/metrics",
                  c->metrics_host, ssae_service_metrics_port(s->svc));
  if (c->clips.dir && n < (int)sizeof outs)
    n += snprintf(outs + n, sizeof outs - (size_t)n, ", clips in %s", c->clips.dir);
  if (c->events && n < (int)sizeof outs)
    snprintf(outs + n, sizeof outs - (size_t)n, ", events to %s", c->events);
  ssae_cli_log(6, s->prog, "service: %s", outs);
  return 0;
}

const ssae_model *ssae_cli_service_model(ssae_cli_service *s, const ssae_model *fallback) {
  return s && s->models ? s->models[0] : fallback;
}

int ssae_cli_service_owns_events(const ssae_cli_service *s) { return s != NULL; }

int ssae_cli_service_owns_stdout(const ssae_cli_service *s) {
  return s && ((s->cfg->events && strcmp(s->cfg->events, "-") == 0) ||
               stdout_is_journal());
}

void ssae_cli_service_attach(ssae_cli_service *s, ssae_engine *e) {
  if (!s || !s->svc) return;
  s->engine = e;
  ssae_service_attach(s->svc, e);
  clock_gettime(CLOCK_MONOTONIC, &s->last_tick);
  block_sighup(0);
}

void ssae_cli_service_audio(ssae_cli_service *s, const float *const *in, size_t n) {
  if (s && s->svc) ssae_service_audio(s->svc, in, n);
}

void ssae_cli_service_file_pace(ssae_cli_service *s, ssae_engine *e, size_t n) {
  struct ssae_clips *c = s && s->svc ? ssae_service_clips(s->svc) : NULL;
  if (!c) return;
  /* The alarms of the audio fed so far reach the clips before more audio
   * goes into their rings; then the writer takes what it needs. */
  ssae_engine_drain(e);
  if (ssae_clips_wait_room(c, n, 10.0) && !s->clips_stuck_said) {
    ssae_cli_log(4, s->prog, "alarm clips: the writer did not keep up for 10 s (a slow or "
                             "full disk?): samples may be lost");
    s->clips_stuck_said = 1;
  }
}

void ssae_cli_service_hook(void *user, int first, int count, const float *const *in,
                           size_t n) {
  ssae_cli_service *s = user;
  if (s && s->svc) ssae_service_audio_channels(s->svc, first, count, in, n);
}

/* ---- SIGHUP ---- */

/* Whether machine i's model is path's, the file unchanged since it was
 * loaded (a retrained model written over the old one is a new model). */
static int same_model_file(const ssae_cli_service *s, int i, const char *path) {
  const char *old = s->cfg->machines[i].model;
  if (!old && !path) return 1;
  if (!old || !path || !s->have_model_st[i]) return 0;
  struct stat st;
  const struct stat *was = &s->model_st[i];
  return stat(path, &st) == 0 && st.st_dev == was->st_dev && st.st_ino == was->st_ino &&
         st.st_size == was->st_size && st.st_mtim.tv_sec == was->st_mtim.tv_sec &&
         st.st_mtim.tv_nsec == was->st_mtim.tv_nsec;
}

static void reject(ssae_cli_service *s, const char *why) {
  ssae_cli_log(3, s->prog, "reload: the new config is refused, the running one stays: %s",
               why);
  ssae_service_note(s->svc, "config_rejected", why);
}

static void reload(ssae_cli_service *s) {
  ssae_err err = {{0}};
  ssae_cli_log(6, s->prog, "reload: reading %s", s->args.config ? s->args.config
                                                                : "the command line");
  ssae_config *c = build_config(s, s->channels, &err);
  const int n = c ? c->n_machines : 0;
  ssae_model **m = c ? calloc((size_t)n, sizeof *m) : NULL;
  ssae_engine_params *p = c ? calloc((size_t)n, sizeof *p) : NULL;
  if (!c || !m || !p || ssae_config_check_models(c, m, &err)) {
    if (c && (!m || !p)) ssae_err_set(&err, "out of memory");
    reject(s, err.msg);
    free(m);
    free(p);
    ssae_config_free(c);
    return;
  }
  /* The machines whose model changed, named for the log. */
  char swapped[512] = "";
  size_t used = 0;
  for (int i = 0; i < n; i++)
    if (!same_model_file(s, i, c->machines[i].model) && used < sizeof swapped)
      used += (size_t)snprintf(swapped + used, sizeof swapped - used, "%s%s (%s)",
                               used ? ", " : "", c->machines[i].name,
                               c->machines[i].model ? c->machines[i].model : "built-in");
  const int swap = used > 0;
  /* The models first: a swap that fails (features that differ from the
   * running models') changes nothing; the service's reload, which may
   * still refuse, is undone by swapping back. */
  if (swap && ssae_engine_swap_models(s->engine, (const ssae_model *const *)m, &err))
    goto refused;
  if (ssae_service_reload(s->svc, c, m, p, &err)) {
    ssae_err e2 = {{0}};
    if (swap &&
        ssae_engine_swap_models(s->engine, (const ssae_model *const *)s->models, &e2))
      ssae_cli_log(3, s->prog, "reload: the old models could not be restored: %s", e2.msg);
    goto refused;
  }
  for (int i = 0; i < n; i++) ssae_engine_set_channel_params(s->engine, i, &p[i]);
  if (set_names(s, c)) ssae_cli_log(4, s->prog, "reload: out of memory for the log's names");
  ssae_model **keep = swap ? m : s->models, **drop = swap ? s->models : m;
  ssae_config_free_models(drop, n);
  free(drop);
  s->models = keep;
  if (s->cfg != s->loaded) ssae_config_free(s->cfg);
  s->cfg = c;
  if (swap && remember_model_files(s))
    ssae_cli_log(4, s->prog, "reload: out of memory: the next reload swaps every model");
  /* One line for the detector settings when the machines share them (the
   * usual case), else machine 0's and a word that they differ. */
  int same = 1;
  for (int i = 1; i < n; i++)
    same &= ((isnan(p[i].threshold) && isnan(p[0].threshold)) ||
             p[i].threshold == p[0].threshold) &&
            p[i].smoothing_s == p[0].smoothing_s && p[i].on_count == p[0].on_count &&
            p[i].off_count == p[0].off_count;
  char thr[32];
  if (isfinite(p[0].threshold) && p[0].threshold > 0)
    snprintf(thr, sizeof thr, "%.6g", p[0].threshold);
  else
    snprintf(thr, sizeof thr, "the model's (%.6g)", (double)s->models[0]->threshold);
  ssae_cli_log(6, s->prog,
               "reload: config applied%s%s, %s%s: threshold %s, smoothing %.3g s, on %d, "
               "off %d%s",
               swap ? ", model swapped for " : "", swapped, same ? "every machine" : "machine ",
               same ? "" : c->machines[0].name, thr, p[0].smoothing_s, p[0].on_count,
               p[0].off_count, same ? "" : " (the other machines' settings differ: /metrics "
                                           "shows each machine's threshold)");
  free(p);
  ssae_service_note(s->svc, "config_reloaded", NULL);
  return;
refused:
  reject(s, err.msg);
  ssae_config_free_models(m, n);
  free(m);
  free(p);
  ssae_config_free(c);
}

/* The broker's reachability, said once per change: events are queued
 * meanwhile, but a service that silently never delivers looks healthy. */
static void mqtt_watch(ssae_cli_service *s) {
  struct ssae_mqtt *mq = ssae_service_mqtt(s->svc);
  if (!mq) return;
  ssae_mqtt_stats ms;
  ssae_mqtt_stats_get(mq, &ms);
  const char *url = s->cfg->mqtt.url ? s->cfg->mqtt.url : "the broker";
  if (ms.connected && s->mqtt_said != 1) {
    if (s->mqtt_said == 2) ssae_cli_log(6, s->prog, "MQTT: connected to %s again", url);
    s->mqtt_said = 1;
  } else if (!ms.connected && s->mqtt_said != 2 && ms.last_error[0]) {
    ssae_cli_log(4, s->prog, "MQTT: %s %s (%s): retrying; messages wait in the queue (%llu now)",
                 s->mqtt_said == 1 ? "lost" : "cannot reach", url, ms.last_error,
                 (unsigned long long)ms.queued);
    s->mqtt_said = 2;
  } else if (!ms.connected && s->mqtt_said == 0 && ++s->mqtt_silent_s == 5) {
    /* No error and no connection: a handshake that never ends (mqtts:// on a
     * plain port, or mqtt:// on a TLS one), a firewall that drops packets. */
    ssae_cli_log(4, s->prog, "MQTT: no answer from %s after 5 s (%s?): retrying; messages "
                             "wait in the queue (%llu now)",
                 url, strncmp(url, "mqtts://", 8) ? "a TLS port, or a firewall dropping packets"
                                                  : "a port without TLS, or a firewall",
                 (unsigned long long)ms.queued);
    s->mqtt_said = 2;
  }
}

void ssae_cli_service_poll(ssae_cli_service *s) {
  if (!s || !s->svc || !s->engine) return;
  if (hup) {
    hup = 0;
    reload(s);
  }
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  if ((now.tv_sec - s->last_tick.tv_sec) * 1000000000LL +
          (now.tv_nsec - s->last_tick.tv_nsec) >=
      1000000000LL) {
    s->last_tick = now;
    ssae_service_tick(s->svc);
    mqtt_watch(s);
  }
}

int ssae_cli_service_keeps_running(const ssae_cli_service *s) {
  return s && s->args.keep_running;
}

void ssae_cli_service_keep_running(ssae_cli_service *s, volatile sig_atomic_t *stop) {
  if (!ssae_cli_service_keeps_running(s)) return;
  ssae_cli_log(6, s->prog, "the input ended; the outputs stay up until stopped (--keep-running)");
  while (!*stop) {
    struct timespec d = {0, 50000000L};
    nanosleep(&d, NULL);
    ssae_cli_service_poll(s);
  }
}

void ssae_cli_service_detach(ssae_cli_service *s) {
  if (s && s->svc) ssae_service_detach(s->svc);
}

const char *ssae_cli_service_machine(void *user, int channel, char *buf, size_t len) {
  ssae_cli_service *s = user;
  if (!s || channel < 0 || len == 0) return NULL;
  pthread_mutex_lock(&s->names_mu); /* a reload renames */
  const int known = channel < s->n_names && s->names[channel];
  if (known) snprintf(buf, len, "%s", s->names[channel]);
  pthread_mutex_unlock(&s->names_mu);
  return known ? buf : NULL;
}

const char *ssae_cli_service_clip(void *user, int channel, const char *id, char *buf,
                                  size_t len) {
  ssae_cli_service *s = user;
  return s && s->svc ? ssae_service_alarm_clip(s->svc, channel, id, buf, len) : NULL;
}

int ssae_cli_service_free(ssae_cli_service *s) {
  if (!s) return 0;
  /* No audio comes any more: what the clip writer lost to the input is
   * final. Said, not only counted in /metrics (a file played faster than
   * real time outruns the writer's ring). */
  struct ssae_mqtt *mq = s->svc ? ssae_service_mqtt(s->svc) : NULL;
  uint64_t ms_connects = 0; /* whether the broker was ever reached */
  if (mq) {
    ssae_mqtt_stats ms;
    ssae_mqtt_stats_get(mq, &ms);
    ms_connects = ms.connects;
    if (!ms.connects)
      ssae_cli_log(4, s->prog,
                   "MQTT: never connected to %s (%s): nothing was delivered (%llu event "
                   "message(s) queued, %llu dropped)",
                   s->cfg->mqtt.url ? s->cfg->mqtt.url : "the broker",
                   ms.last_error[0] ? ms.last_error : "no answer",
                   (unsigned long long)ms.queued, (unsigned long long)ms.dropped);
  }
  ssae_service_end end;
  ssae_service_close(s->svc, &end); /* the open clips finish here */
  if (end.clip_samples_lost)
    ssae_cli_log(4, s->prog,
                 "alarm clips: %llu sample(s) lost (written as silence): the clip writer fell "
                 "behind the input (a disk too slow?)",
                 (unsigned long long)end.clip_samples_lost);
  if (end.clips_failed)
    ssae_cli_log(3, s->prog,
                 "alarm clips: %llu of %llu not written (the clip_failed events say why: a "
                 "full disk?)",
                 (unsigned long long)end.clips_failed,
                 (unsigned long long)(end.clips_failed + end.clips_written));
  if (end.event_write_errors)
    ssae_cli_log(3, s->prog, "events: %llu line(s) could not be written to %s",
                 (unsigned long long)end.event_write_errors,
                 s->cfg->events ? s->cfg->events : "the events file");
  if (end.mqtt_undelivered && ms_connects)
    ssae_cli_log(3, s->prog, "MQTT: %llu message(s) not delivered to %s (the broker was away "
                             "at the end, or the queue overflowed)",
                 (unsigned long long)end.mqtt_undelivered,
                 s->cfg->mqtt.url ? s->cfg->mqtt.url : "the broker");
  const int failed = end.clips_failed || end.event_write_errors || end.mqtt_undelivered;
  if (s->models) ssae_config_free_models(s->models, s->cfg->n_machines);
  free(s->models);
  if (s->cfg != s->loaded) ssae_config_free(s->cfg);
  ssae_config_free(s->loaded);
  for (int i = 0; i < s->n_names; i++) free(s->names[i]);
  free(s->names);
  free(s->model_st);
  free(s->have_model_st);
  if (s->names_mu_ok) pthread_mutex_destroy(&s->names_mu);
  free(s);
  return failed;
}
