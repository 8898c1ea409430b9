/* The plant service's calls in a build without its libraries (libcyaml,
 * libyaml, libmosquitto, libmicrohttpd): a service is refused with the
 * reason, and the rest does nothing (cli_service.h). */
#include "cli_service.h"

#include <stdlib.h>
#include <string.h>

#include "cli.h"

struct ssae_cli_service {
  int unused;
};

ssae_cli_service *ssae_cli_service_load(const char *prog, const ssae_cli_service_args *a,
                                        const ssae_cli_service_cmdvals *v, int *rc) {
  (void)a;
  (void)v;
  ssae_cli_log(3, prog, "this ssae was built without the plant service (libcyaml, "
                        "libyaml, libmosquitto, libmicrohttpd): --config, --node, "
                        "--names, --mqtt, --metrics and --clips are not available");
  *rc = SSAE_EXIT_INPUT;
  return NULL;
}
void ssae_cli_service_input_get(const ssae_cli_service *s, ssae_cli_service_input *in) {
  (void)s;
  memset(in, 0, sizeof *in);
}
int ssae_cli_service_monitor_input(const ssae_cli_service *s, const char **input,
                                   int *realtime, const char **device, int *channels,
                                   int given_channels, int *channel, int given_channel) {
  (void)s, (void)input, (void)realtime, (void)device, (void)channels, (void)given_channels;
  (void)channel, (void)given_channel;
  return 0;
}
int ssae_cli_service_jack_input(const ssae_cli_service *s, int *inputs, int given_inputs,
                                ssae_cli_list *connect) {
  (void)s, (void)inputs, (void)given_inputs, (void)connect;
  return 0;
}
const char *ssae_cli_service_model_path(const ssae_cli_service *s) {
  (void)s;
  return NULL;
}
int ssae_cli_service_check_models(const ssae_cli_service *s, ssae_err *err) {
  (void)s, (void)err;
  return 0;
}
int ssae_cli_service_start(ssae_cli_service *s, int channels, double rate,
                           ssae_engine_cfg *ec, ssae_event_fn next, void *next_user,
                           int windows) {
  (void)s, (void)channels, (void)rate, (void)ec, (void)next, (void)next_user, (void)windows;
  return 0;
}
const ssae_model *ssae_cli_service_model(ssae_cli_service *s, const ssae_model *fallback) {
  (void)s;
  return fallback;
}
int ssae_cli_service_owns_events(const ssae_cli_service *s) { return s != NULL; }
int ssae_cli_service_owns_stdout(const ssae_cli_service *s) {
  (void)s;
  return 0;
}
void ssae_cli_service_attach(ssae_cli_service *s, ssae_engine *e) { (void)s, (void)e; }
void ssae_cli_service_audio(ssae_cli_service *s, const float *const *in, size_t n) {
  (void)s, (void)in, (void)n;
}
void ssae_cli_service_hook(void *user, int first, int count, const float *const *in,
                           size_t n) {
  (void)user, (void)first, (void)count, (void)in, (void)n;
}
void ssae_cli_service_file_pace(ssae_cli_service *s, ssae_engine *e, size_t n) {
  (void)s, (void)e, (void)n;
}
void ssae_cli_service_poll(ssae_cli_service *s) { (void)s; }
int ssae_cli_service_keeps_running(const ssae_cli_service *s) {
  (void)s;
  return 0;
}
void ssae_cli_service_keep_running(ssae_cli_service *s, volatile sig_atomic_t *stop) {
  (void)s, (void)stop;
}
void ssae_cli_service_detach(ssae_cli_service *s) { (void)s; }
int ssae_cli_service_free(ssae_cli_service *s) {
  free(s);
  return 0;
}
const char *ssae_cli_service_machine(void *user, int channel, char *buf, size_t len) {
  (void)user, (void)channel, (void)buf, (void)len;
  return NULL;
}
const char *ssae_cli_service_clip(void *user, int channel, const char *id, char *buf,
                                  size_t len) {
  (void)user, (void)channel, (void)id, (void)buf, (void)len;
  return NULL;
}
