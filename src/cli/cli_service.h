/* The plant service (src/service) behind `ssae monitor` and `ssae jack`:
 * --config FILE and the flags that go over it (--node, --names, --mqtt,
 * --metrics, --clips, and the commands' own --model, --backend, --gpu,
 * --events, --threshold, --smoothing, --on, --off, --status), turned into
 * a running ssae_service beside the command's engine; the SIGHUP reload (the signal
 * handler only sets a flag, ssae_cli_service_poll does the work on the main
 * thread); the once-a-second tick; log lines fit for journald.
 *
 * Order of calls in a command:
 *   parse; ssae_cli_service_note_given(&o.svc, &args);
 *   if (ssae_cli_service_wanted(&o.svc)) svc = ssae_cli_service_load(...);
 *   ssae_cli_service_input(svc, ...)          what the config says of the
 *                                              input, for the flags left unset
 *   open the input; ssae_cli_service_start(svc, channels, rate, &ecfg, ...)
 *   e = ssae_engine_new(ssae_cli_service_model(svc, m), &ecfg);
 *   ssae_cli_service_attach(svc, e);
 *   audio thread: ssae_cli_service_audio (or the adapters' hook);
 *   main loop: ssae_cli_service_poll(svc) every few tens of ms;
 *   at the end: ssae_cli_service_detach(svc); ssae_engine_free(e);
 *               ssae_cli_service_free(svc).
 * Every function accepts a NULL service (no service: nothing to do).
 *
 * Thread context: main thread, except ssae_cli_service_audio and
 * ssae_cli_service_hook (the audio thread: SSAE_REALTIME). */
#ifndef SSAE_CLI_SERVICE_H
#define SSAE_CLI_SERVICE_H

#include <signal.h>
#include <stddef.h>

#include "cli_opts.h"
#include "ssae_engine.h"
#include "ssae_err.h"
#include "ssae_model.h"
#include "ssae_realtime.h"

/* The service's own flags, a member of a command's options struct. */
typedef struct ssae_cli_service_args {
  const char *config, *node, *names, *mqtt, *metrics, *clips;
  int keep_running; /* monitor --input: stay up after the file's end */
  int clip_pictures; /* --clip-pictures */
  /* Which of the command's own options were on the command line (they go
   * over the file; the others leave the file's value). */
  int given_model, given_backend, given_gpu, given_events, given_threshold,
      given_smoothing, given_on, given_off, given_status;
} ssae_cli_service_args;

/* The option-table entries of the service's flags for a command whose
 * options struct `type` has a ssae_cli_service_args member `member`. */
#define SSAE_CLI_SERVICE_OPTIONS(type, member)                                       \
  {.kind = SSAE_CLI_HEADING,                                                         \
   .help = "\nplant service (tools/ssae.example.yaml is the commented reference):"}, \
  {.kind = SSAE_CLI_STRING, .name = "--config", .offset = offsetof(type, member.config), \
   .metavar = "FILE", .def = "",                                                     \
   .help = "service config (YAML): machines, inputs, MQTT, metrics, clips; the "     \
           "flags below and --model, --backend, --gpu, --events, --threshold, "    \
           "--smoothing, --on, --off, --status go over it; SIGHUP re-reads it"},     \
  {.kind = SSAE_CLI_STRING, .name = "--node", .offset = offsetof(type, member.node),  \
   .metavar = "NAME", .def = "", .help = "this host's name in MQTT topics and metrics"}, \
  {.kind = SSAE_CLI_STRING, .name = "--names", .offset = offsetof(type, member.names), \
   .metavar = "A,B,...", .def = "", .help = "one machine name per input channel"},   \
  {.kind = SSAE_CLI_STRING, .name = "--mqtt", .offset = offsetof(type, member.mqtt),  \
   .metavar = "URL", .def = "",                                                      \
   .help = "publish events, state and Home Assistant discovery to "                  \
           "mqtt[s]://HOST[:PORT] (credentials only in the config)"},                \
  {.kind = SSAE_CLI_STRING, .name = "--metrics", .offset = offsetof(type, member.metrics), \
   .metavar = "HOST:PORT", .def = "",                                                \
   .help = "serve GET /metrics (Prometheus) and /healthz there (PORT alone: "        \
           "127.0.0.1)"},                                                            \
  {.kind = SSAE_CLI_STRING, .name = "--clips", .offset = offsetof(type, member.clips), \
   .metavar = "DIR", .def = "", .help = "write a sound clip of every alarm into DIR"}, \
  {.kind = SSAE_CLI_FLAG, .name = "--clip-pictures",                                 \
   .offset = offsetof(type, member.clip_pictures),                                   \
   .help = "beside each clip a `ssae report` picture (.png) of it"}

/* The monitor's --keep-running (file input only). */
#define SSAE_CLI_SERVICE_KEEP_RUNNING(type, member)                                  \
  {.kind = SSAE_CLI_FLAG, .name = "--keep-running",                                  \
   .offset = offsetof(type, member.keep_running),                                    \
   .help = "with --input and a service: after the end of FILE keep the outputs up "  \
           "(MQTT online, /healthz 503: no audio) until Ctrl-C or SIGTERM"}

/* The detector's options of the live commands (monitor, jack): the ones a
 * service's config goes under when given (ssae_cli_service_note_given,
 * ssae_cli_service_cmdvals). `type` has the fields threshold, smoothing,
 * on, off, status, backend and gpu. */
#define SSAE_CLI_DETECTOR_OPTIONS(type)                                              \
  {.kind = SSAE_CLI_DOUBLE, .name = "--threshold", .offset = offsetof(type, threshold), \
   .metavar = "X", .min = SSAE_CLI_THRESHOLD_MIN, .max = SSAE_CLI_THRESHOLD_MAX,     \
   .help = "(above 0) alarm threshold", .def = "the model's"},                        \
  {.kind = SSAE_CLI_DOUBLE, .name = "--smoothing", .offset = offsetof(type, smoothing), \
   .metavar = "S", .min = 0, .max = 3600, .help = "smoothing time constant in seconds"}, \
  {.kind = SSAE_CLI_INT, .name = "--on", .offset = offsetof(type, on), .metavar = "K",  \
   .min = 1, .max = 100000, .help = "alarm on after K smoothed scores above the threshold"}, \
  {.kind = SSAE_CLI_INT, .name = "--off", .offset = offsetof(type, off), .metavar = "M", \
   .min = 1, .max = 100000, .help = "alarm off after M smoothed scores below it"},    \
  {.kind = SSAE_CLI_DOUBLE, .name = "--status", .offset = offsetof(type, status),     \
   .metavar = "S", .min = 0, .max = 1e9,                                             \
   .help = "status event every S seconds of audio (0: none; with a service: "        \
           "0 < S <= 3600)"},                                                         \
  {.kind = SSAE_CLI_CHOICE, .name = "--backend", .offset = offsetof(type, backend),   \
   .choices = ssae_cli_backends, .help = "where the model runs"},                    \
  {.kind = SSAE_CLI_INT, .name = "--gpu", .offset = offsetof(type, gpu), .metavar = "N", \
   .min = 0, .max = 255,                                                              \
   .help = "CUDA device of the CUDA backend and the device front end (--backend cuda " \
           "or auto; a multi-GPU host: one process per GPU)", .def = "0"}

typedef struct ssae_cli_service ssae_cli_service;

/* Records which of the command's own options were given. */
void ssae_cli_service_note_given(ssae_cli_service_args *a, const ssae_cli_args *args);

/* 1 when the service is asked for: --config or any of its flags. */
int ssae_cli_service_wanted(const ssae_cli_service_args *a);

/* The command's own values that go over the file when given. */
typedef struct ssae_cli_service_cmdvals {
  const char *model, *backend, *events;
  double threshold, smoothing_s, status_s;
  int on_count, off_count, gpu;
} ssae_cli_service_cmdvals;

/* The engine's backend, GPU, status period and detector from the command's
 * values (a service's config goes over them in ssae_cli_service_start). */
void ssae_cli_service_engine_cfg(const ssae_cli_service_cmdvals *v, ssae_engine_cfg *c);

/* A live command's --gpu N, when given (args): SSAE_EXIT_OK when this host
 * has GPU N; else says why (with --backend cpu, a device this host lacks,
 * a build without CUDA) and returns SSAE_EXIT_USAGE, before any work.
 * Selects nothing: the engine makes its CUDA objects on N itself. */
int ssae_cli_check_gpu(const char *cmd, const ssae_cli_args *args, int gpu,
                       const char *backend);

/* Right before ssae_engine_new on the command's main thread: the engine's
 * GPU (ec->gpu: --gpu or the config's) made current there for good. The
 * engine gives the thread that makes it its own current device back; were
 * that another GPU, restoring it would start a CUDA context there (GPU 0's
 * memory taken by a process that runs on GPU 1). Nothing with the CPU
 * backend, on a host without GPUs, or for a device the host lacks (the
 * engine then says why). */
void ssae_cli_engine_gpu(const ssae_engine_cfg *ec);

/* Reads the config (or the defaults) and applies the flags; installs the
 * SIGHUP handler. `prog` ("ssae monitor") starts log lines. NULL after
 * printing why (exit status in *rc: usage 2, a bad file 1). */
ssae_cli_service *ssae_cli_service_load(const char *prog, const ssae_cli_service_args *a,
                                        const ssae_cli_service_cmdvals *v, int *rc);

/* What the config says of the input. kind: 0 none, 1 PortAudio, 2 JACK,
 * 3 file (ssae_config_input_kind). channels: machines in the config (0:
 * none there). The strings belong to the service. */
typedef struct ssae_cli_service_input {
  int kind;
  const char *device;   /* PortAudio */
  const int *device_channels; /* PortAudio: device channel of machine i */
  int n_device_channels;
  const char *const *ports; /* JACK: port of machine i */
  int n_ports;
  const char *file;
  int realtime;
  int machines;
} ssae_cli_service_input;
void ssae_cli_service_input_get(const ssae_cli_service *s, ssae_cli_service_input *in);

/* `ssae monitor`'s input settings from the config where the command line
 * left them unset: a file (path, realtime), or a PortAudio device and its
 * channel count; more than one machine on a file reads all its channels
 * unless --channel was given. -1 after printing why (a JACK input, device
 * channels that are not 0..N-1). given_*: the option was on the command
 * line. */
int ssae_cli_service_monitor_input(const ssae_cli_service *s, const char **input,
                                   int *realtime, const char **device, int *channels,
                                   int given_channels, int *channel, int given_channel);

/* `ssae jack`'s input settings from the config where the command line left
 * them unset: the ports to connect (input.jack.ports) and the input count
 * (the ports', else the machines'). -1 after printing why (a PortAudio or
 * file input in the config). */
int ssae_cli_service_jack_input(const ssae_cli_service *s, int *inputs, int given_inputs,
                                ssae_cli_list *connect);

/* The model file the engine's features come from (machines[0]'s, NULL: the
 * built-in one), for opening the input at the model's rate. */
const char *ssae_cli_service_model_path(const ssae_cli_service *s);
/* Every machine's model file loads and their features agree; -1 with the
 * config's FILE:LINE: KEY: reason otherwise. */
int ssae_cli_service_check_models(const ssae_cli_service *s, ssae_err *err);

/* The model a command opens first (the service's machines[0]'s, else the
 * command's --model path `model`), for the input's rate; NULL after
 * printing why. Without a service and without a threshold (the model's or
 * --threshold `threshold`), says that no alarm can be raised. `cmd`:
 * "monitor", "jack". */
ssae_model *ssae_cli_open_model(const ssae_cli_service *s, const char *cmd, const char *model,
                                double threshold);

/* The input has `channels` channels at `rate`: machines, models (one per
 * machine: machines naming one file share it; models that compute other
 * features are refused), the service's outputs, and the engine config
 * (callback, status period, each machine's detector settings and model).
 * `next` receives every event after the service (the command's evsink);
 * `windows` 1 forwards the window events to it too. -1 after printing why. */
int ssae_cli_service_start(ssae_cli_service *s, int channels, double rate,
                           ssae_engine_cfg *ec, ssae_event_fn next, void *next_user,
                           int windows);
/* The model for ssae_engine_new: the service's, or `fallback` without one. */
const ssae_model *ssae_cli_service_model(ssae_cli_service *s, const ssae_model *fallback);
/* 1 when the service writes the events file / JSON lines to stdout itself
 * (the command's evsink then does not). */
int ssae_cli_service_owns_events(const ssae_cli_service *s);
int ssae_cli_service_owns_stdout(const ssae_cli_service *s);

void ssae_cli_service_attach(ssae_cli_service *s, ssae_engine *e);

/* Audio thread, beside ssae_engine_process. */
void ssae_cli_service_audio(ssae_cli_service *s, const float *const *in, size_t n)
    SSAE_REALTIME;
/* The same as an adapter hook (user: the ssae_cli_service): channels
 * first .. first+count-1 of the engine. */
void ssae_cli_service_hook(void *user, int first, int count, const float *const *in,
                           size_t n) SSAE_REALTIME;

/* A file played faster than real time, before each block of n samples
 * goes in (the feeding thread, which may wait): with alarm clips, drains
 * the engine (the alarms so far reach the clips) and waits until the clip
 * writer has room for n samples, so that no clip loses a sample.
 * Nothing without clips. */
void ssae_cli_service_file_pace(ssae_cli_service *s, ssae_engine *e, size_t n);

/* Main thread, every few tens of ms (cheap when there is nothing to do):
 * a pending SIGHUP reload, and the service's tick once a second. */
void ssae_cli_service_poll(ssae_cli_service *s);

/* --keep-running: polls until *stop is set (Ctrl-C, SIGTERM). */
void ssae_cli_service_keep_running(ssae_cli_service *s, volatile sig_atomic_t *stop);
int ssae_cli_service_keeps_running(const ssae_cli_service *s);

/* Before ssae_engine_free. */
void ssae_cli_service_detach(ssae_cli_service *s);
/* After ssae_engine_free: the outputs finish (clips, MQTT offline). 1
 * when an output failed (a clip not written, event lines the events file
 * did not take: said on stderr; the command's exit status is then 1),
 * else 0. */
int ssae_cli_service_free(ssae_cli_service *s);

/* Machine `channel`'s name now (user: the ssae_cli_service), copied into
 * buf: for the command's evsink (ssae_evsink_cfg.machine), so that its
 * stdout lines name machines as MQTT and the events file do. NULL
 * without a service or name. Any thread. */
const char *ssae_cli_service_machine(void *user, int channel, char *buf, size_t len);
/* The clip path of machine `channel`'s alarm `id` (ssae_evsink_cfg.clip):
 * the evsink's alarm lines carry it as the service's do. NULL: none. */
const char *ssae_cli_service_clip(void *user, int channel, const char *id, char *buf,
                                  size_t len);

/* A log line on stderr: "PROG: msg", with the syslog priority prefix
 * "<N>" when stderr is the journal (JOURNAL_STREAM), so journald keeps
 * the level. prio: 3 error, 4 warning, 6 info. */
void ssae_cli_log(int prio, const char *prog, const char *fmt, ...) SSAE_PRINTF(3, 4);
/* Whether fd is the journal (JOURNAL_STREAM names its device and inode:
 * systemd sets it for a unit's stdout and stderr); stderr's, asked once. */
int ssae_cli_fd_is_journal(int fd);
int ssae_cli_stderr_is_journal(void);

#endif
