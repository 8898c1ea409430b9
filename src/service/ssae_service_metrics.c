/* The /metrics text of the service: per machine (smoothed and window score,
 * alarm, threshold, windows, drops, alarms, model), engine (counters,
 * latency histogram and percentiles, backend), MQTT (queue, drops,
 * connection) and clips. Names follow Prometheus' conventions (base units,
 * counters end in _total) so that `promtool check metrics` passes.
 *
 * Thread context: libmicrohttpd's thread; reads the engine under eng_mu
 * (ssae_service_detach clears it before the engine goes away). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ssae_config.h" /* the build's: SSAE_VERSION */
#include "ssae_service_impl.h"

/* Label values escape backslash, quote and newline. */
static void label_value(char *out, size_t len, const char *v) {
  size_t u = 0;
  for (; v && *v && u + 3 < len; v++) {
    if (*v == '\\' || *v == '"') {
      out[u++] = '\\';
      out[u++] = *v;
    } else if (*v == '\n') {
      out[u++] = '\\';
      out[u++] = 'n';
    } else {
      out[u++] = *v;
    }
  }
  out[u] = 0;
}

typedef struct {
  const char *name, *type, *help;
} prom_fam;

/* One sample of each of n families, all with the same labels. */
static void write_families(ssae_textbuf *b, const prom_fam *f, const double *v, size_t n,
                           const char *labels) {
  for (size_t k = 0; k < n; k++) {
    ssae_prom_family(b, f[k].name, f[k].type, f[k].help);
    ssae_prom_sample(b, f[k].name, labels, v[k]);
  }
}

/* node="...",machine="...": node escaped already, the machine's name here. */
static void machine_labels(char *out, size_t len, const char *node, const char *machine) {
  char mach[160];
  label_value(mach, sizeof mach, machine);
  snprintf(out, len, "node=\"%s\",machine=\"%s\"", node, mach);
}

typedef enum { M_SCORE, M_WSCORE, M_ALARM, M_THR, M_WIN, M_DROP, M_ALARMS, M_N } mkind;

static const prom_fam fam[M_N] = {
    {"ssae_machine_score", "gauge", "Smoothed anomaly score the detector judges."},
    {"ssae_machine_window_score", "gauge", "Anomaly score of the last window."},
    {"ssae_machine_alarm", "gauge", "1 while the machine is in alarm."},
    {"ssae_machine_threshold", "gauge", "Decision threshold in use."},
    {"ssae_machine_windows_total", "counter", "Windows scored."},
    {"ssae_machine_dropped_windows_total", "counter",
     "Windows dropped because the engine's ring was full."},
    {"ssae_machine_alarms_total", "counter", "Alarms raised (alarm_on events)."},
};

void ssae_service_write_metrics(void *user, ssae_textbuf *b) {
  ssae_service *s = user;
  char node[160];
  label_value(node, sizeof node, s->node);
  pthread_mutex_lock(&s->eng_mu);
  ssae_engine *e = s->engine;
  ssae_channel_state *st = NULL;
  ssae_engine_stats es;
  memset(&es, 0, sizeof es);
  if (e) {
    st = calloc((size_t)s->n, sizeof *st);
    for (int i = 0; st && i < s->n; i++) ssae_engine_channel_get(e, i, &st[i]);
    ssae_engine_stats_get(e, &es);
  }
  pthread_mutex_unlock(&s->eng_mu);

  pthread_mutex_lock(&s->names_mu);
  ssae_prom_family(b, "ssae_up", "gauge", "1 while the engine runs.");
  ssae_prom_sample(b, "ssae_up", NULL, e ? 1 : 0);
  for (int k = 0; k < M_N && st; k++) {
    ssae_prom_family(b, fam[k].name, fam[k].type, fam[k].help);
    for (int i = 0; i < s->n; i++) {
      char labels[400];
      machine_labels(labels, sizeof labels, node, s->m[i].name);
      double v = 0;
      switch ((mkind)k) {
      case M_SCORE: v = st[i].smoothed; break;
      case M_WSCORE: v = st[i].score; break;
      case M_ALARM: v = st[i].alarm; break;
      case M_THR: v = st[i].threshold; break;
      case M_WIN: v = (double)st[i].windows; break;
      case M_DROP: v = (double)st[i].dropped; break;
      case M_ALARMS: v = (double)atomic_load(&s->m[i].alarms); break;
      case M_N: break;
      }
      ssae_prom_sample(b, fam[k].name, labels, v);
    }
  }
  ssae_prom_family(b, "ssae_model_info", "gauge",
                   "The model of each machine (value 1; labels say which).");
  for (int i = 0; i < s->n; i++) {
    char labels[1200], mach[160], file[800];
    label_value(mach, sizeof mach, s->m[i].name);
    label_value(file, sizeof file, s->m[i].model_file ? s->m[i].model_file : "built-in");
    snprintf(labels, sizeof labels,
             "node=\"%s\",machine=\"%s\",file=\"%s\",sample_rate=\"%d\","
             "n_mels=\"%d\",frames=\"%d\"",
             node, mach, file, s->m[i].sample_rate, s->m[i].n_mels,
             s->m[i].frames);
    ssae_prom_sample(b, "ssae_model_info", labels, 1);
  }
  ssae_prom_family(b, "ssae_model_threshold", "gauge",
                   "Threshold stored in each machine's model (NaN: none).");
  for (int i = 0; i < s->n; i++) {
    char labels[400];
    machine_labels(labels, sizeof labels, node, s->m[i].name);
    ssae_prom_sample(b, "ssae_model_threshold", labels, s->m[i].model_threshold);
  }
  pthread_mutex_unlock(&s->names_mu);

  if (e) {
    char labels[400], backend[64];
    label_value(backend, sizeof backend, es.backend ? es.backend : "");
    snprintf(labels, sizeof labels, "node=\"%s\",backend=\"%s\",version=\"%s\"",
             node, backend, SSAE_VERSION);
    ssae_prom_family(b, "ssae_engine_info", "gauge",
                     "Backend in use and program version (value 1).");
    ssae_prom_sample(b, "ssae_engine_info", labels, 1);
    static const prom_fam ef[] = {
        {"ssae_engine_windows_total", "counter", "Windows made by the audio thread."},
        {"ssae_engine_scored_windows_total", "counter", "Windows scored by the worker."},
        {"ssae_engine_dropped_windows_total", "counter", "Windows dropped (ring full)."},
        {"ssae_engine_batches_total", "counter", "Backend calls."},
        {"ssae_engine_audio_seconds_total", "counter", "Seconds of audio processed."},
        {"ssae_engine_latency_p50_seconds", "gauge", "Median window-to-score latency."},
        {"ssae_engine_latency_p99_seconds", "gauge", "99th percentile window-to-score latency."},
        {"ssae_engine_latency_max_seconds", "gauge", "Largest window-to-score latency."},
        {"ssae_engine_xruns_total", "counter",
         "Input overruns the audio adapter reported (JACK xruns, PortAudio overflows)."},
        {"ssae_engine_nonfinite_samples_total", "counter",
         "NaN or infinite input samples (taken as digital silence)."},
    };
    const double ev[] = {(double)es.windows,  (double)es.scored,  (double)es.dropped,
                         (double)es.batches,  es.audio_s,         es.lat_p50_ms * 1e-3,
                         es.lat_p99_ms * 1e-3, es.lat_max_ms * 1e-3, (double)es.xruns,
                         (double)es.nonfinite};
    snprintf(labels, sizeof labels, "node=\"%s\"", node);
    write_families(b, ef, ev, sizeof ev / sizeof ev[0], labels);
  }
  char nl[200];
  snprintf(nl, sizeof nl, "node=\"%s\"", node);
  ssae_prom_hist_write(b, "ssae_engine_latency_seconds",
                       "Window's last sample to its score published.", nl,
                       &s->latency);
  ssae_prom_family(b, "ssae_audio_age_seconds", "gauge",
                   "Seconds since audio last arrived (NaN: none yet).");
  long long beat = atomic_load(&s->audio_ns);
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  double now = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
  ssae_prom_sample(b, "ssae_audio_age_seconds", nl, beat ? now - beat * 1e-9 : NAN);

  if (s->mqtt) {
    ssae_mqtt_stats ms;
    ssae_mqtt_stats_get(s->mqtt, &ms);
    static const prom_fam mf[] = {
        {"ssae_mqtt_connected", "gauge", "1 while connected to the broker."},
        {"ssae_mqtt_queue_messages", "gauge", "Messages waiting to be sent."},
        {"ssae_mqtt_queue_capacity_messages", "gauge", "Capacity of the queue."},
        {"ssae_mqtt_dropped_messages_total", "counter",
         "Messages dropped because the queue was full."},
        {"ssae_mqtt_published_messages_total", "counter",
         "Messages handed to the broker connection."},
        {"ssae_mqtt_unacked_messages", "gauge",
         "QoS 1 messages awaiting the broker's acknowledgement."},
        {"ssae_mqtt_connects_total", "counter", "Successful connections."},
    };
    const double mv[] = {ms.connected, (double)ms.queued, (double)ms.capacity,
                         (double)ms.dropped, (double)ms.published,
                         (double)ms.unacked, (double)ms.connects};
    write_families(b, mf, mv, sizeof mv / sizeof mv[0], nl);
  }
  if (s->clips) {
    ssae_clips_stats cs;
    ssae_clips_stats_get(s->clips, &cs);
    static const prom_fam cf[] = {
        {"ssae_clips_written_total", "counter", "Alarm clips written."},
        {"ssae_clips_failed_total", "counter", "Alarm clips that failed."},
        {"ssae_clips_deleted_total", "counter", "Clips deleted by retention."},
        {"ssae_clips_lost_samples_total", "counter",
         "Samples overwritten before the writer copied them."},
        {"ssae_clips_open", "gauge", "Clips being written."},
    };
    const double cv[] = {(double)cs.written, (double)cs.failed,
                         (double)cs.deleted, (double)cs.lost_samples, cs.open};
    write_families(b, cf, cv, sizeof cv / sizeof cv[0], nl);
  }
  ssae_prom_family(b, "ssae_events_write_errors_total", "counter",
                   "Event lines that could not be written.");
  ssae_prom_sample(b, "ssae_events_write_errors_total", nl,
                   (double)atomic_load(&s->write_errors));
  free(st);
}
