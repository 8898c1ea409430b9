/* A small front end for the service tests: a config (file and/or flags),
 * the service, a real engine (CPU) fed with quiet noise by an "audio
 * thread" at twice real time, and commands on stdin that the test scripts
 * send:
 *   on | off     raise / end an alarm of machine 0 through the engine's
 *                own detector: its threshold far below its scores, then
 *                back to the config's (a huge one, so that these are the
 *                only alarms); prints "alarm on" / "alarm off" once the
 *                engine's state says so
 *   flush        wait for the MQTT queue to empty and every QoS 1 message
 *                to be acknowledged; prints "flushed 0" (or -1)
 *   audio off|on stop / resume the audio (heartbeat, windows)
 *   stats        one line of counters
 *   reload FILE  SIGHUP's work: load FILE, apply the same flags, check the
 *                models, ssae_service_reload, set the engine's parameters;
 *                prints "reloaded" or "reload rejected: REASON" (and the
 *                service notes it)
 *   quit         clean exit (engine drained, clips finished, MQTT offline)
 * Prints "ready metrics_port=N" once running. */
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ssae_clips.h"
#include "ssae_engine.h"
#include "ssae_mqtt.h"
#include "ssae_service.h"
#include "service_test.h"

typedef struct helper {
  ssae_service *svc;
  ssae_engine *eng;
  atomic_int audio_on, stop;
  double rate;
  int channels;
} helper;

static void on_event(void *user, const ssae_event *ev) {
  helper *h = user;
  ssae_service_on_event(h->svc, ev);
}

/* Machine 0's alarm on (threshold far below its scores) or off (the
 * config's threshold again), waited for in the engine's state (5 s at
 * most). Returns 0 once it holds. */
static int set_alarm(helper *h, int on, const ssae_engine_params *config) {
  ssae_engine_params p = *config;
  if (on) p.threshold = 1e-9;
  ssae_engine_set_channel_params(h->eng, 0, &p);
  for (int k = 0; k < 5000; k++) {
    ssae_channel_state st;
    ssae_engine_channel_get(h->eng, 0, &st);
    if (st.alarm == on) return 0;
    usleep(1000);
  }
  return -1;
}

static void *audio_main(void *arg) {
  helper *h = arg;
  enum { BLOCK = 512 };
  float *buf = malloc(sizeof(float) * BLOCK * (size_t)h->channels);
  const float **in = malloc(sizeof(float *) * (size_t)h->channels);
  if (!buf || !in) return NULL;
  uint64_t r = 12345;
  struct timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  long period_ns = (long)(BLOCK / h->rate / 2 * 1e9); /* twice real time */
  while (!atomic_load(&h->stop)) {
    next.tv_nsec += period_ns;
    while (next.tv_nsec >= 1000000000) next.tv_sec++, next.tv_nsec -= 1000000000;
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
    if (!atomic_load(&h->audio_on)) continue;
    for (size_t i = 0; i < (size_t)BLOCK * (size_t)h->channels; i++) {
      r ^= r << 13, r ^= r >> 7, r ^= r << 17;
      buf[i] = (float)((double)(r >> 11) / 9007199254740992.0 - 0.5) * 0.1f;
    }
    for (int c = 0; c < h->channels; c++) in[c] = buf + (size_t)c * BLOCK;
    ssae_engine_process(h->eng, in, BLOCK);
    ssae_service_audio(h->svc, in, BLOCK);
  }
  free(buf);
  free(in);
  return NULL;
}

static const char *arg(int argc, char **argv, const char *name) {
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], name) == 0) return argv[i + 1];
  return NULL;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  ssae_err err = {{0}};
  const char *cfg_path = arg(argc, argv, "--config");
  const char *names = arg(argc, argv, "--names");
  ssae_config *cfg = cfg_path ? ssae_config_load(cfg_path, &err)
                              : ssae_config_new_default(1, &err);
  if (!cfg) {
    fprintf(stderr, "config: %s\n", err.msg);
    return 2;
  }
  ssae_config_overrides o = {0};
  o.node = arg(argc, argv, "--node");
  o.names = names;
  o.mqtt_url = arg(argc, argv, "--mqtt");
  o.metrics = arg(argc, argv, "--metrics");
  o.clips_dir = arg(argc, argv, "--clips");
  o.events = arg(argc, argv, "--events");
  o.threshold = 1e30; /* the engine's own detector stays silent */
  if (!cfg_path && names) {
    /* ssae_config_new_default made one machine; --names sets the count. */
    ssae_config_free(cfg);
    int n = 1;
    for (const char *p = names; *p; p++) n += *p == ',';
    cfg = ssae_config_new_default(n, &err);
  }
  if (!cfg || ssae_config_apply(cfg, &o, &err)) {
    fprintf(stderr, "config: %s\n", err.msg);
    return 2;
  }
  ssae_model **models = calloc((size_t)cfg->n_machines, sizeof *models);
  if (!models || ssae_config_check_models(cfg, models, &err)) {
    fprintf(stderr, "models: %s\n", err.msg);
    return 2;
  }
  helper h = {0};
  h.rate = 16000;
  h.channels = cfg->n_machines;
  ssae_service_opts so;
  ssae_service_opts_default(&so);
  so.input_rate = h.rate;
  so.models = models;
  const char *stale = arg(argc, argv, "--stale");
  if (stale) so.stale_s = atof(stale);
  h.svc = ssae_service_new(cfg, &so, &err);
  if (!h.svc) {
    fprintf(stderr, "service: %s\n", err.msg);
    return 1;
  }
  h.eng = service_test_engine(h.svc, models[0], h.channels, 0, on_event, &h);
  if (!h.eng) return 1;
  ssae_service_attach(h.svc, h.eng);
  atomic_store(&h.audio_on, 1);
  pthread_t audio;
  pthread_create(&audio, NULL, audio_main, &h);
  printf("ready metrics_port=%d\n", ssae_service_metrics_port(h.svc));

  char line[256];
  ssae_engine_params machine0; /* machine 0's parameters before "on" */
  ssae_engine_get_channel_params(h.eng, 0, &machine0);
  for (;;) {
    struct pollfd p = {0, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) {
      ssae_service_tick(h.svc);
      continue;
    }
    if (!fgets(line, sizeof line, stdin)) break;
    line[strcspn(line, "\n")] = 0;
    if (strcmp(line, "on") == 0 || strcmp(line, "off") == 0) {
      const int on = line[1] == 'n';
      ssae_engine_params config;
      if (on) ssae_engine_get_channel_params(h.eng, 0, &machine0);
      config = machine0;
      printf(set_alarm(&h, on, &config) ? "alarm %s: timed out\n" : "alarm %s\n", line);
    } else if (strcmp(line, "flush") == 0) {
      printf("flushed %d\n", ssae_mqtt_flush(ssae_service_mqtt(h.svc), 30));
    } else if (strcmp(line, "audio off") == 0) {
      atomic_store(&h.audio_on, 0);
      printf("audio off\n");
    } else if (strcmp(line, "audio on") == 0) {
      atomic_store(&h.audio_on, 1);
      printf("audio on\n");
    } else if (strcmp(line, "stats") == 0) {
      ssae_engine_stats es;
      ssae_engine_stats_get(h.eng, &es);
      ssae_mqtt_stats ms;
      ssae_mqtt_stats_get(ssae_service_mqtt(h.svc), &ms);
      printf("stats windows=%llu scored=%llu dropped=%llu mqtt_dropped=%llu "
             "mqtt_queued=%llu connects=%llu connected=%d error=%s\n",
             (unsigned long long)es.windows, (unsigned long long)es.scored,
             (unsigned long long)es.dropped, (unsigned long long)ms.dropped,
             (unsigned long long)ms.queued, (unsigned long long)ms.connects,
             ms.connected, ms.last_error);
    } else if (strncmp(line, "reload ", 7) == 0) {
      ssae_config *c2 = ssae_config_load(line + 7, &err);
      ssae_model **m2 = calloc((size_t)h.channels, sizeof *m2);
      ssae_engine_params *params = calloc((size_t)h.channels, sizeof *params);
      int r = !c2 || !m2 || !params || ssae_config_apply(c2, &o, &err);
      if (!r && c2->n_machines != h.channels)
        r = ssae_err_set(&err, "the machine count changed: restart ssae");
      if (!r) r = ssae_config_check_models(c2, m2, &err) != 0;
      if (!r) r = ssae_service_reload(h.svc, c2, m2, params, &err) != 0;
      if (r) {
        ssae_service_note(h.svc, "config_rejected", err.msg);
        printf("reload rejected: %s\n", err.msg);
      } else {
        for (int i = 0; i < h.channels; i++)
          ssae_engine_set_channel_params(h.eng, i, &params[i]);
        ssae_service_note(h.svc, "config_reloaded", NULL);
        printf("reloaded\n");
      }
      ssae_config_free_models(m2, h.channels);
      free(m2);
      free(params);
      ssae_config_free(c2);
    } else if (strcmp(line, "quit") == 0) {
      break;
    }
  }
  atomic_store(&h.stop, 1);
  pthread_join(audio, NULL);
  ssae_engine_drain(h.eng);
  ssae_engine_stats es;
  ssae_engine_stats_get(h.eng, &es);
  ssae_service_detach(h.svc);
  ssae_engine_free(h.eng);
  ssae_service_free(h.svc);
  ssae_config_free_models(models, cfg->n_machines);
  free(models);
  ssae_config_free(cfg);
  printf("bye windows=%llu dropped=%llu\n", (unsigned long long)es.windows,
         (unsigned long long)es.dropped);
  return 0;
}
