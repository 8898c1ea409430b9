/* Real-time safety of the audio thread with every service output on: MQTT
 * (its thread reconnecting to a broker that is not there), metrics (a
 * client thread fetching /metrics and /healthz all the time), alarm clips
 * (a threshold so low that every channel alarms, so the clip writer streams
 * files while the audio runs) and the events file. malloc, calloc, realloc,
 * free, pthread_mutex_lock, the sleeps and write are interposed
 * (tests/ssae_rt_interpose.h); a call from the test's audio thread while it
 * is inside ssae_engine_process or ssae_service_audio(_channels) fails the
 * test. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ssae_clips.h"
#include "ssae_engine.h"
#include "ssae_service.h"
#include "service_test.h"

#include "../ssae_rt_interpose.h"

#ifndef SSAE_RT_SANITIZED

static atomic_int stop_client;
static atomic_int fetches;

/* Fetches /metrics and /healthz over and over (the HTTP thread works while
 * the audio runs). */
static void *client_main(void *arg) {
  int port = *(int *)arg;
  char buf[65536];
  while (!atomic_load(&stop_client)) {
    for (int k = 0; k < 2; k++) {
      int fd = socket(AF_INET, SOCK_STREAM, 0);
      struct sockaddr_in a = {0};
      a.sin_family = AF_INET;
      a.sin_port = htons((uint16_t)port);
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
        const char *req = k ? "GET /healthz HTTP/1.0\r\n\r\n"
                            : "GET /metrics HTTP/1.0\r\n\r\n";
        if (send(fd, req, strlen(req), 0) > 0) {
          while (recv(fd, buf, sizeof buf, 0) > 0) {
          }
          atomic_fetch_add(&fetches, 1);
        }
      }
      if (fd >= 0) close(fd);
    }
    struct timespec ts = {0, 20 * 1000000};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

int main(void) {
  char dir[] = "/tmp/ssae_service_rt_XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char clips[300], events[300];
  snprintf(clips, sizeof clips, "%s/clips", dir);
  snprintf(events, sizeof events, "%s/events.jsonl", dir);
  enum { C = 4 };
  ssae_err err = {{0}};
  ssae_config *cfg = ssae_config_new_default(C, &err);
  /* A port nothing listens on: the MQTT thread keeps reconnecting. */
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  bind(s, (struct sockaddr *)&a, sizeof a);
  getsockname(s, (struct sockaddr *)&a, &al);
  char url[64];
  snprintf(url, sizeof url, "mqtt://127.0.0.1:%d", ntohs(a.sin_port));
  close(s);
  ssae_config_overrides o = {0};
  o.mqtt_url = url;
  o.metrics = "0";
  o.clips_dir = clips;
  o.events = events;
  o.threshold = 1e-9; /* every channel alarms: clips stream while audio runs */
  if (!cfg || ssae_config_apply(cfg, &o, &err)) {
    fprintf(stderr, "config: %s\n", err.msg);
    return 1;
  }
  cfg->clips.pre_roll_s = 1;
  cfg->clips.post_roll_s = 0.5;
  cfg->mqtt.reconnect_min_s = 0.05;
  cfg->mqtt.reconnect_max_s = 0.1;
  ssae_model *models[C] = {0};
  if (ssae_config_check_models(cfg, models, &err)) {
    fprintf(stderr, "models: %s\n", err.msg);
    return 1;
  }
  const double rate = 48000; /* resampled by the engine */
  ssae_service_opts so;
  ssae_service_opts_default(&so);
  so.input_rate = rate;
  so.models = models;
  ssae_service *svc = ssae_service_new(cfg, &so, &err);
  if (!svc) {
    fprintf(stderr, "service: %s\n", err.msg);
    return 1;
  }
  ssae_engine *e = service_test_engine(svc, models[0], C, rate, NULL, NULL);
  if (!e) return 1;
  ssae_service_attach(svc, e);
  int port = ssae_service_metrics_port(svc);
  pthread_t client;
  pthread_create(&client, NULL, client_main, &port);

  /* 4 s of audio at 4x real time, blocks of 480. */
  enum { BLOCK = 480 };
  static float buf[C][BLOCK];
  const float *in[C] = {buf[0], buf[1], buf[2], buf[3]};
  uint64_t r = 88172645463325252ULL;
  for (int blk = 0; blk < (int)(4 * rate / BLOCK); blk++) {
    for (int c = 0; c < C; c++)
      for (int i = 0; i < BLOCK; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        buf[c][i] = (float)((double)(r >> 11) / 9007199254740992.0 - 0.5) * 0.2f;
      }
    in_audio = 1;
    ssae_engine_process(e, in, BLOCK);
    /* Every other block the way the PortAudio and JACK adapters' hook
     * feeds the service (ssae_cli_service_hook: their channels first ..
     * first+count-1); `ssae monitor --input` feeds it as above. */
    if (blk & 1)
      ssae_service_audio_channels(svc, 0, C, in, BLOCK);
    else
      ssae_service_audio(svc, in, BLOCK);
    in_audio = 0;
    struct timespec ts = {0, (long)(BLOCK / rate / 4 * 1e9)};
    nanosleep(&ts, NULL);
    if (blk % 50 == 0) ssae_service_tick(svc);
  }
  ssae_engine_drain(e);
  atomic_store(&stop_client, 1);
  pthread_join(client, NULL);
  ssae_service_stats st;
  ssae_service_stats_get(svc, &st);
  ssae_engine_stats es;
  ssae_engine_stats_get(e, &es);
  ssae_clips_stats cs;
  ssae_clips_stats_get(ssae_service_clips(svc), &cs);
  int open_clips = cs.open;
  ssae_service_detach(svc);
  ssae_engine_free(e);
  ssae_service_free(svc);
  ssae_clips_stats_get(NULL, &cs);
  ssae_config_free_models(models, C);
  ssae_config_free(cfg);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);

  int fail = 0;
  if (atomic_load(&violations)) {
    fprintf(stderr, "FAIL: %d real-time violations on the audio thread (first: %s)\n",
            atomic_load(&violations), atomic_load(&first_violation));
    fail = 1;
  }
  if (st.alarms < C || open_clips < 1 || atomic_load(&fetches) < 10) {
    fprintf(stderr, "FAIL: the outputs did not work during the run: alarms %llu, "
                    "clips open %d, HTTP fetches %d\n",
            (unsigned long long)st.alarms, open_clips, atomic_load(&fetches));
    fail = 1;
  }
  if (es.dropped) {
    fprintf(stderr, "FAIL: %llu windows dropped\n", (unsigned long long)es.dropped);
    fail = 1;
  }
  printf("%s: %llu windows, %llu alarms, %d HTTP fetches, clips open %d, "
         "violations %d\n",
         fail ? "FAIL" : "ok", (unsigned long long)es.windows,
         (unsigned long long)st.alarms, atomic_load(&fetches), open_clips,
         atomic_load(&violations));
  return fail;
}
#endif /* SSAE_RT_SANITIZED */
