/* `ssae jack`: the monitor as a JACK client. */
#include <math.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cli_opts.h"
#include "cli_service.h"
#include "ssae_config.h"
#include "ssae_detector.h"
#include "ssae_engine.h"
#include "ssae_evsink.h"
#include "ssae_model.h"
#include "ssae_outfile.h"

#if SSAE_HAVE_JACK
#include "ssae_io_jack.h"
#endif

static const char *const CMD = "jack";

typedef struct opts {
  const char *model, *events, *name, *backend;
  int inputs, clients, passthrough, on, off, gpu_frontend, gpu;
  ssae_cli_list connect;
  double duration, threshold, smoothing, status, watchdog;
  ssae_cli_service_args svc;
} opts;

#define O(f) .offset = offsetof(opts, f)

static const ssae_cli_opt options[] = {
    {.kind = SSAE_CLI_STRING, .name = "--model", O(model), .metavar = "M", .help = "model file",
     .def = "the built-in model"},
    {.kind = SSAE_CLI_INT, .name = "--inputs", O(inputs), .metavar = "N", .min = 1, .max = 4096,
     .help = "input channels"},
    {.kind = SSAE_CLI_INT, .name = "--clients", O(clients), .metavar = "K", .min = 1, .max = 64,
     .help = "split the inputs over K JACK clients NAME-1 .. NAME-K (ports keep their "
             "numbers), one input group of the engine each: the server runs them in "
             "parallel, so the feature work of many channels spreads over cores; at most 256 "
             "inputs per client"},
    {.kind = SSAE_CLI_FLAG, .name = "--passthrough", O(passthrough),
     .help = "copy each input to an output port"},
    {.kind = SSAE_CLI_FLAG, .name = "--gpu-frontend", O(gpu_frontend),
     .help = "the device front end: the audio thread only copies samples; the frames, "
             "windows and scores of every channel are made at once on the GPU (many "
             "channels; --backend cpu: the same path on the CPU)"},
    {.kind = SSAE_CLI_LIST, .name = "--connect", O(connect), .metavar = "PORT", .greedy = 1,
     .help = "connect PORT to the next input (repeatable; also several PORTs after one "
             "--connect)", .def = ""},
    {.kind = SSAE_CLI_STRING, .name = "--events", O(events), .metavar = "FILE",
     .help = "write JSON-lines events to FILE", .def = ""},
    {.kind = SSAE_CLI_STRING, .name = "--name", O(name), .metavar = "NAME",
     .help = "client name"},
    {.kind = SSAE_CLI_DOUBLE, .name = "--duration", O(duration), .metavar = "S", .min = 0.001,
     .max = 1e9, .help = "stop after S seconds", .def = "until stopped"},
    {.kind = SSAE_CLI_DOUBLE, .name = "--watchdog", O(watchdog), .metavar = "S", .min = 0,
     .max = 3600,
     .help = "take the server as gone when it has run no process cycle of the client for S "
             "seconds (a server that hung, or died without notice); 0: never"},
    SSAE_CLI_DETECTOR_OPTIONS(opts),
    SSAE_CLI_SERVICE_OPTIONS(opts, svc),
    {0}};

static const ssae_cli_cmd command = {
    .name = "jack",
    .usage = "usage: ssae jack [options]",
    .about = "Runs the monitor as a JACK client: ports in_N (analysed), out_N\n"
             "(--passthrough), score_N (smoothed score) and alarm_N (alarm gate,\n"
             "0/1) as audio-rate control signals. Follows the server's sample rate\n"
             "and buffer size. Events as JSON lines (--events, and stdout when it\n"
             "is not a terminal). Ctrl-C, SIGTERM or the server going away end it\n"
             "cleanly with the events flushed; a server that stops running the client\n"
             "counts as gone (--watchdog), and a JACK client that cannot be closed is\n"
             "left behind after a few seconds, with a message.",
    .epilogue = "Exit status: 0 stopped normally, 1 no JACK server, a port that could not be\n"
                "connected, the server going away, a JACK client that could not be closed,\n"
                "or an unwritable events file, 2 usage error.",
    .opts = options,
};

/* Checks the table cannot make; 0 when the options fit together. */
static int check(const opts *o) {
  if (o->events && !*o->events) {
    ssae_cli_error(CMD, "--events: an empty path (a file, or - for stdout)");
    return SSAE_EXIT_USAGE;
  }
#if SSAE_HAVE_JACK
  /* With several clients the names get "-K" appended. */
  size_t suffix = o->clients > 1 ? (o->clients >= 10 ? 3 : 2) : 0;
  if (!*o->name || strlen(o->name) + suffix > (size_t)ssae_io_jack_name_max()) {
    ssae_cli_error(CMD, "--name: a JACK client name has 1 to %d bytes%s (got %zu)",
                   ssae_io_jack_name_max(), suffix ? " with the -K suffix of --clients" : "",
                   strlen(o->name) + suffix);
    return SSAE_EXIT_USAGE;
  }
  /* JACK names ports CLIENT:PORT: a colon in the client's name would make
   * its ports' names ambiguous to every other client. */
  if (strchr(o->name, ':')) {
    ssae_cli_error(CMD, "--name '%s': a JACK client name cannot contain ':' (it separates the "
                        "client from the port in port names)", o->name);
    return SSAE_EXIT_USAGE;
  }
#endif
  if (o->clients > o->inputs) {
    ssae_cli_error(CMD, "--clients %d needs at least %d inputs (--inputs %d)", o->clients,
                   o->clients, o->inputs);
    return SSAE_EXIT_USAGE;
  }
  if ((o->inputs + o->clients - 1) / o->clients > 256) {
    ssae_cli_error(CMD, "%d inputs on %d client(s): at most 256 per client (raise --clients)",
                   o->inputs, o->clients);
    return SSAE_EXIT_USAGE;
  }
  if (o->connect.n > o->inputs) {
    ssae_cli_error(CMD, "%d port(s) to --connect but only %d input(s) (--inputs)",
                   o->connect.n, o->inputs);
    return SSAE_EXIT_USAGE;
  }
  return 0;
}

#if SSAE_HAVE_JACK
/* The plant service (--config and its flags); NULL without one. */
static ssae_cli_service *svc;

/* The values a service's config goes under when given. */
static ssae_cli_service_cmdvals cmdvals(const opts *o) {
  ssae_cli_service_cmdvals v = {o->model,     o->backend, o->events, o->threshold,
                                o->smoothing, o->status,  o->on,     o->off, o->gpu};
  return v;
}

static volatile sig_atomic_t interrupted;
static void on_sig(int sig) {
  (void)sig;
  interrupted = 1;
}
#endif

#if SSAE_HAVE_JACK
/* Client k gets the engine's input group k (the same split as the
 * engine's, checked when the client starts): ports first+1 .. first+count.
 * Returns the K clients, or NULL after printing why. */
static ssae_io_jack **open_clients(const opts *o) {
  const int K = o->clients;
  ssae_err err;
  ssae_io_jack **jc = calloc((size_t)K, sizeof *jc);
  if (!jc) {
    ssae_cli_error(CMD, "out of memory");
    return NULL;
  }
  for (int k = 0; k < K; k++) {
    const int first = (int)((long long)k * o->inputs / K);
    const int count = (int)((long long)(k + 1) * o->inputs / K) - first;
    char cname[256];
    if (K == 1) snprintf(cname, sizeof cname, "%s", o->name);
    else snprintf(cname, sizeof cname, "%s-%d", o->name, k + 1);
    if (!(jc[k] = ssae_io_jack_new(cname, first, count, o->passthrough, &err))) {
      ssae_cli_error(CMD, "%s", err.msg);
      for (int q = 0; q < k; q++) ssae_io_jack_free(jc[q]);
      free(jc);
      return NULL;
    }
  }
  return jc;
}

/* Stops and closes the clients within SSAE_IO_JACK_CLOSE_S (libjack can
 * block for good once the server has gone: such a client is left open, with
 * a message). Returns 0, or -1 when a client was left. *engine_ok is set
 * to 0 when a client's callbacks may still use the engine (it must stay). */
static int free_clients(ssae_io_jack **jc, int K, int *engine_ok) {
  if (!jc) return 0;
  for (int k = 0; k < K; k++)
    if (ssae_io_jack_stop(jc[k])) {
      ssae_cli_error(CMD, "client '%s': the JACK process callback did not return within 2 s",
                     ssae_io_jack_name(jc[k]));
      if (engine_ok) *engine_ok = 0;
    }
  ssae_err err = {{0}};
  int rc = ssae_io_jack_close(jc, K, SSAE_IO_JACK_CLOSE_S, &err);
  if (rc) ssae_cli_error(CMD, "%s", err.msg);
  free(jc);
  return rc;
}

/* --connect: port i to input i, on the client whose group holds it. */
static int connect_inputs(const opts *o, ssae_engine *e, ssae_io_jack **jc) {
  ssae_err err;
  int rc = SSAE_EXIT_OK;
  for (int i = 0; i < o->connect.n; i++) {
    int k = 0, first = 0, count = 0;
    for (; k < o->clients; k++) {
      ssae_engine_group_channels(e, k, &first, &count);
      if (i < first + count) break;
    }
    if (ssae_io_jack_connect(jc[k], o->connect.v[i], i - first, &err)) {
      ssae_cli_error(CMD, "%s", err.msg);
      rc = SSAE_EXIT_INPUT;
    }
  }
  return rc;
}

/* Main-thread housekeeping until Ctrl-C, SIGTERM, --duration or the server
 * going away; returns the client that saw the server go, or -1. */
static int wait_for_end(const opts *o, ssae_io_jack **jc, ssae_engine *e, ssae_evsink *sink) {
  ssae_err err;
  int said = 0;
  uint64_t xruns_seen = 0;
  double xrun_said = -1e9;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sig;
  sa.sa_flags = SA_RESTART; /* writes under way finish; the waits check the flag */
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (!interrupted) {
    struct timespec d = {0, 20000000L};
    nanosleep(&d, NULL);
    for (int k = 0; k < o->clients; k++) {
      int p = ssae_io_jack_poll(jc[k], &err);
      if (p == 1) return k;
      if (p < 0) ssae_cli_error(CMD, "%s", err.msg);
    }
    ssae_cli_service_poll(svc);
    clock_gettime(CLOCK_MONOTONIC, &now);
    double el = (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) / 1e9;
    /* An event write that failed is said once (the monitor goes on and
     * counts the lost lines); xruns as they come, at most every 5 s. */
    ssae_err serr = {{0}};
    if (!said && ssae_evsink_check(sink, &serr)) {
      said = 1;
      ssae_cli_error(CMD, "%s; monitoring goes on%s", serr.msg,
                     strstr(serr.msg, "windows TSV") ? "" : ", lost event lines are counted");
    }
    ssae_engine_stats s;
    ssae_engine_stats_get(e, &s);
    if (s.xruns != xruns_seen && el - xrun_said >= 5.0) {
      ssae_cli_error(CMD, "warning: %llu JACK xrun(s) so far: audio was lost",
                     (unsigned long long)s.xruns);
      xruns_seen = s.xruns;
      xrun_said = el;
    }
    if (o->duration > 0 && el >= o->duration) break;
  }
  return -1;
}

/* After the engine's final status event (s taken before it went; the
 * backend's name is a static string), so that the lost lines include it. */
static void summary(const ssae_engine_stats *end, ssae_evsink *sink) {
  const ssae_engine_stats s = *end;
  fprintf(stderr,
          "ssae jack: %.1f s of audio, %llu windows, %llu scored, %llu "
          "dropped, %llu xrun(s), %llu non-finite sample(s), backend %s, latency p50 %.3f "
          "ms p99 %.3f ms max %.3f ms, %llu alarm(s), %llu event line(s) lost\n",
          s.audio_s, (unsigned long long)s.windows,
          (unsigned long long)s.scored, (unsigned long long)s.dropped,
          (unsigned long long)s.xruns, (unsigned long long)s.nonfinite,
          s.backend, s.lat_p50_ms, s.lat_p99_ms, s.lat_max_ms,
          (unsigned long long)ssae_evsink_alarms(sink, -1),
          (unsigned long long)ssae_evsink_lost(sink));
  if (s.xruns)
    fprintf(stderr, "ssae jack: the JACK server reported %llu xrun(s): audio was lost "
                    "(the machine is overloaded, or the period is too short)\n",
            (unsigned long long)s.xruns);
}

/* Clients, engine and events until the end; then the summary. */
static int run(const opts *o) {
  ssae_err err;
  ssae_model *m = ssae_cli_open_model(svc, CMD, o->model, o->threshold);
  if (!m) return SSAE_EXIT_INPUT;
  const int K = o->clients;
  ssae_io_jack **jc = open_clients(o);
  ssae_evsink *sink = NULL;
  ssae_engine *e = NULL;
  if (jc) {
    ssae_evsink_cfg scfg;
    memset(&scfg, 0, sizeof scfg);
    scfg.events_path = ssae_cli_service_owns_events(svc) ? NULL : o->events;
    scfg.events_stdout = !ssae_cli_stdout_tty() && !ssae_cli_service_owns_stdout(svc);
    if (svc) {
      scfg.machine = ssae_cli_service_machine;
      scfg.clip = ssae_cli_service_clip;
      scfg.machine_user = svc;
    }
    scfg.prog = "ssae jack";
    sink = ssae_evsink_new(&scfg, &err);
  }
  if (sink) {
    ssae_engine_cfg ecfg;
    ssae_engine_cfg_default(&ecfg);
    ecfg.channels = o->inputs;
    ecfg.groups = K;
    ecfg.input_rate = ssae_io_jack_rate(jc[0]);
    const ssae_cli_service_cmdvals v = cmdvals(o);
    ssae_cli_service_engine_cfg(&v, &ecfg);
    ecfg.gpu_frontend = o->gpu_frontend;
    ecfg.on_event = ssae_evsink_on_event;
    ecfg.user = sink;
    if (ssae_cli_service_start(svc, o->inputs, ecfg.input_rate, &ecfg, ssae_evsink_on_event,
                               sink, 0))
      ssae_err_set(&err, "the service did not start");
    else {
      ssae_cli_engine_gpu(&ecfg);
      e = ssae_engine_new(ssae_cli_service_model(svc, m), &ecfg, &err);
    }
  }
  int started = e != NULL;
  for (int k = 0; started && k < K; k++) {
    ssae_io_jack_set_hook(jc[k], svc ? ssae_cli_service_hook : NULL, svc);
    started = !ssae_io_jack_start(jc[k], e, K == 1 ? -1 : k, &err);
  }
  if (!started) {
    if (jc) ssae_cli_error(CMD, "%s", err.msg);
    int engine_ok = 1;
    free_clients(jc, K, &engine_ok);
    if (engine_ok) ssae_engine_free(e);
    ssae_evsink_free(sink);
    ssae_model_free(m);
    return SSAE_EXIT_INPUT;
  }
  ssae_cli_service_attach(svc, e);
  for (int k = 0; k < K; k++) ssae_io_jack_set_watchdog(jc[k], o->watchdog);
  int rc = connect_inputs(o, e, jc);
  ssae_io_jack *j = jc[0];
  if (K == 1)
    fprintf(stderr,
            "ssae jack: client '%s' running at %.0f Hz, buffer %u, %d "
            "input(s) (Ctrl-C stops)\n",
            ssae_io_jack_name(j), ssae_io_jack_rate(j), ssae_io_jack_buffer_size(j), o->inputs);
  else
    fprintf(stderr,
            "ssae jack: clients '%s' .. '%s' running at %.0f Hz, buffer %u, %d "
            "input(s) (Ctrl-C stops)\n",
            ssae_io_jack_name(jc[0]), ssae_io_jack_name(jc[K - 1]), ssae_io_jack_rate(j),
            ssae_io_jack_buffer_size(j), o->inputs);
  int gone = wait_for_end(o, jc, e, sink);
  if (gone >= 0) {
    const char *why = ssae_io_jack_shutdown_reason(jc[gone]);
    ssae_cli_error(CMD, "the JACK server went away (%s); stopping", why);
    ssae_engine_stats s;
    ssae_engine_stats_get(e, &s);
    ssae_evsink_note(sink, s.audio_s, "server_shutdown", why);
    rc = SSAE_EXIT_INPUT;
  }
  /* The callbacks leave the engine before it goes: the clients are
   * detached, then closed within a bound (after a server shutdown, or with
   * a server that does not answer, libjack can block in the close: the
   * client is then left behind, and the outputs are written all the
   * same). */
  int engine_ok = 1;
  if (free_clients(jc, K, &engine_ok)) rc = SSAE_EXIT_INPUT;
  jc = NULL;
  if (engine_ok) ssae_engine_drain(e);
  ssae_engine_stats end;
  ssae_engine_stats_get(e, &end);
  ssae_cli_service_detach(svc);
  if (engine_ok) ssae_engine_free(e); /* final status event */
  summary(&end, sink);
  ssae_err cerr = {{0}};
  if (ssae_evsink_close(sink, &cerr)) {
    ssae_cli_error(CMD, "%s", cerr.msg[0] ? cerr.msg : "writing the events file failed");
    ssae_err quiet = {{0}};
    ssae_stdout_check(&quiet); /* reported once, here */
    rc = SSAE_EXIT_INPUT;
  }
  ssae_model_free(m);
  return rc;
}
#endif

int ssae_cmd_jack(int argc, char **argv) {
  opts o = {.name = "ssae", .backend = "auto", .inputs = 1, .clients = 1,
            .on = SSAE_DETECTOR_ON_COUNT, .off = SSAE_DETECTOR_OFF_COUNT, .threshold = NAN,
            .smoothing = SSAE_DETECTOR_SMOOTHING_S, .status = 10, .watchdog = 10};
  ssae_cli_args args;
  int rc = ssae_cli_parse(&command, argc, argv, &o, &args);
  if (rc != SSAE_CLI_CONTINUE) return rc;
  ssae_cli_service_note_given(&o.svc, &args);
  if ((rc = ssae_cli_check_gpu(CMD, &args, o.gpu, o.backend)) != SSAE_EXIT_OK) {
    ssae_cli_args_free(&args);
    return rc;
  }
#if SSAE_HAVE_JACK
  if (ssae_cli_service_wanted(&o.svc)) {
    ssae_cli_service_cmdvals v = cmdvals(&o);
    if (!(svc = ssae_cli_service_load("ssae jack", &o.svc, &v, &rc)) ||
        ssae_cli_service_jack_input(svc, &o.inputs, ssae_cli_given(&args, "--inputs"),
                                    &o.connect)) {
      if (svc) rc = SSAE_EXIT_INPUT;
      ssae_cli_service_free(svc);
      svc = NULL;
      ssae_cli_args_free(&args);
      return rc;
    }
  }
#endif
  rc = check(&o);
#if SSAE_HAVE_JACK
  if (!rc) rc = run(&o);
  if (ssae_cli_service_free(svc) && rc == SSAE_EXIT_OK) rc = SSAE_EXIT_INPUT;
  svc = NULL;
#else
  if (!rc) {
    ssae_cli_error(CMD, "this ssae was built without JACK (install the JACK "
                        "development files and rebuild)");
    rc = SSAE_EXIT_INPUT;
  }
#endif
  ssae_cli_args_free(&args);
  return rc;
}
