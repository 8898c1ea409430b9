/* systemd notification through libsystemd's sd_notify, received on a
 * datagram socket of the test's own standing in for systemd
 * ($NOTIFY_SOCKET, $WATCHDOG_USEC): READY=1 when the service is attached
 * to a running engine, WATCHDOG=1 from ssae_service_tick while audio
 * arrives and none once it stops, STATUS= lines, STOPPING=1 on detach.
 * Exit 77 when the build has no libsystemd. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../ssae_test.h"
#include "ssae_engine.h"
#include "ssae_sdnotify.h"
#include "ssae_service.h"
#include "ssae_service_conf.h"
#include "service_test.h"

static int sock = -1;

/* Every datagram that arrived, joined by '|'. */
static void drain(char *out, size_t len) {
  out[0] = 0;
  char buf[1024];
  ssize_t n;
  usleep(20000);
  while ((n = recv(sock, buf, sizeof buf - 1, MSG_DONTWAIT)) > 0) {
    buf[n] = 0;
    size_t u = strlen(out);
    snprintf(out + u, len - u, "%s%s", u ? "|" : "", buf);
  }
}

int main(void) {
#if !SSAE_HAVE_SYSTEMD
  printf("SKIP: built without libsystemd (apt-get install libsystemd-dev)\n");
  return 77;
#else
  char path[] = "/tmp/ssae_notify_XXXXXX";
  if (!mkdtemp(path)) return 1;
  char sockpath[96];
  snprintf(sockpath, sizeof sockpath, "%s/notify", path);
  sock = socket(AF_UNIX, SOCK_DGRAM, 0);
  struct sockaddr_un a = {0};
  a.sun_family = AF_UNIX;
  snprintf(a.sun_path, sizeof a.sun_path, "%s", sockpath);
  if (sock < 0 || bind(sock, (struct sockaddr *)&a, sizeof a) != 0) {
    perror("notify socket");
    return 1;
  }
  setenv("NOTIFY_SOCKET", sockpath, 1);
  char pid[32];
  snprintf(pid, sizeof pid, "%d", (int)getpid());
  setenv("WATCHDOG_PID", pid, 1);
  setenv("WATCHDOG_USEC", "2000000", 1);
  CHECK(ssae_sd_available(), "NOTIFY_SOCKET seen");
  CHECK(ssae_sd_watchdog_usec() == 2000000, "watchdog period %llu",
        (unsigned long long)ssae_sd_watchdog_usec());

  ssae_err err = {{0}};
  ssae_config *cfg = ssae_config_new_default(2, &err);
  ssae_model *models[2] = {0};
  if (!cfg || ssae_config_check_models(cfg, models, &err)) {
    fprintf(stderr, "config: %s\n", err.msg);
    return 1;
  }
  ssae_service_opts so;
  ssae_service_opts_default(&so);
  so.stale_s = 0.3;
  ssae_service *svc = ssae_service_new(cfg, &so, &err);
  if (!svc) {
    fprintf(stderr, "service: %s\n", err.msg);
    return 1;
  }
  ssae_engine *e = service_test_engine(svc, models[0], 2, 0, NULL, NULL);
  if (!e) return 1;
  char got[4096];
  drain(got, sizeof got);
  CHECK(got[0] == 0, "nothing before attach: %s", got);
  ssae_service_attach(svc, e);
  drain(got, sizeof got);
  CHECK(strstr(got, "READY=1") != NULL, "READY=1 on attach: %s", got);
  CHECK(strstr(got, "STATUS=monitoring 2 machines") != NULL, "STATUS: %s", got);

  /* No audio yet: no watchdog ping. */
  ssae_service_tick(svc);
  drain(got, sizeof got);
  CHECK(!strstr(got, "WATCHDOG=1"), "a ping without audio: %s", got);
  static float z[2][512];
  const float *in[2] = {z[0], z[1]};
  ssae_engine_process(e, in, 512);
  ssae_service_audio(svc, in, 512);
  ssae_service_tick(svc);
  drain(got, sizeof got);
  CHECK(strstr(got, "WATCHDOG=1") != NULL, "ping while audio arrives: %s", got);
  CHECK(strstr(got, "STATUS=2 machines, 0 in alarm") != NULL, "tick STATUS: %s", got);
  usleep(400000);
  ssae_service_tick(svc);
  drain(got, sizeof got);
  CHECK(!strstr(got, "WATCHDOG=1"), "a ping after the audio stopped: %s", got);
  CHECK(strstr(got, "NO AUDIO") != NULL, "STATUS says no audio: %s", got);
  ssae_service_detach(svc);
  drain(got, sizeof got);
  CHECK(strstr(got, "STOPPING=1") != NULL, "STOPPING=1: %s", got);
  ssae_engine_free(e);
  ssae_service_free(svc);
  ssae_config_free_models(models, 2);
  ssae_config_free(cfg);
  close(sock);
  unlink(sockpath);
  rmdir(path);
  return test_done("sdnotify: all checks passed");
#endif
}
