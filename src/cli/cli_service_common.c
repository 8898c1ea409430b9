/* What `ssae monitor` and `ssae jack` share whether or not the plant
 * service is built (cli_service.h): log lines, the given flags, the engine
 * settings, the model and the GPU. The service itself: cli_service.c, or
 * cli_service_none.c in a build without its libraries. Main thread. */
#include "cli_service.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "ssae_cuda.h"

/* ---- logging (also without the service) ---- */

/* stderr is the journal when JOURNAL_STREAM names its device and inode
 * (systemd sets it for a unit's stdout/stderr). */
int ssae_cli_fd_is_journal(int fd) {
  const char *js = getenv("JOURNAL_STREAM");
  unsigned long long dev, ino;
  struct stat st;
  return js && sscanf(js, "%llu:%llu", &dev, &ino) == 2 && fstat(fd, &st) == 0 &&
         (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

int ssae_cli_stderr_is_journal(void) {
  static int known = -1;
  if (known < 0) known = ssae_cli_fd_is_journal(2);
  return known;
}


void ssae_cli_log(int prio, const char *prog, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* One event, one line: a newline inside a message (a YAML error quoting
   * the file) would split it in the journal. */
  for (char *p = msg; *p; p++)
    if (*p == '\n' || *p == '\r') *p = ' ';
  if (ssae_cli_stderr_is_journal())
    fprintf(stderr, "<%d>%s: %s\n", prio, prog, msg);
  else
    fprintf(stderr, "%s: %s\n", prog, msg);
  fflush(stderr);
}

void ssae_cli_service_note_given(ssae_cli_service_args *a, const ssae_cli_args *args) {
  a->given_model = ssae_cli_given(args, "--model");
  a->given_backend = ssae_cli_given(args, "--backend");
  a->given_gpu = ssae_cli_given(args, "--gpu");
  a->given_events = ssae_cli_given(args, "--events");
  a->given_threshold = ssae_cli_given(args, "--threshold");
  a->given_smoothing = ssae_cli_given(args, "--smoothing");
  a->given_on = ssae_cli_given(args, "--on");
  a->given_off = ssae_cli_given(args, "--off");
  a->given_status = ssae_cli_given(args, "--status");
}

void ssae_cli_service_engine_cfg(const ssae_cli_service_cmdvals *v, ssae_engine_cfg *c) {
  c->backend = v->backend;
  c->gpu = v->gpu;
  c->status_every_s = v->status_s;
  c->params.threshold = v->threshold;
  c->params.smoothing_s = v->smoothing_s;
  c->params.on_count = v->on_count;
  c->params.off_count = v->off_count;
}

int ssae_cli_check_gpu(const char *cmd, const ssae_cli_args *args, int gpu,
                       const char *backend) {
  return ssae_cli_given(args, "--gpu") ? ssae_cli_check_device(cmd, "--gpu", gpu, backend)
                                       : SSAE_EXIT_OK;
}

void ssae_cli_engine_gpu(const ssae_engine_cfg *ec) {
  if (strcmp(ec->backend, "cpu") && ec->gpu < ssae_cuda_device_count())
    ssae_cuda_use_device(ec->gpu, NULL);
}

ssae_model *ssae_cli_open_model(const ssae_cli_service *s, const char *cmd, const char *model,
                                double threshold) {
  ssae_err err;
  ssae_model *m = ssae_model_open(s ? ssae_cli_service_model_path(s) : model, &err);
  if (!m) {
    /* a config's model is named where the config says it (FILE:LINE:
     * machines[0].model: ...), as the start's check names the others */
    ssae_err named;
    ssae_cli_error(cmd, "%s",
                   s && ssae_cli_service_check_models(s, &named) ? named.msg : err.msg);
    return NULL;
  }
  if (!s && !isfinite(threshold) && !isfinite(m->threshold))
    fprintf(stderr, "ssae %s: the model has no threshold and none was given (--threshold): "
                    "no alarms, scores only\n", cmd);
  return m;
}

int ssae_cli_service_wanted(const ssae_cli_service_args *a) {
  return a->config || a->node || a->names || a->mqtt || a->metrics || a->clips ||
         a->clip_pictures;
}
