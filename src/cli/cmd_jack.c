/* `ssae jack`: the monitor as a JACK client. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "ssae_config.h"
#include "ssae_engine.h"
#include "ssae_evsink.h"
#include "ssae_model.h"

#if SSAE_HAVE_JACK
#include "plugins/jack/ssae_io_jack_client.h"
#endif

static const char *const CMD = "jack";

static void usage(FILE *f) {
  fprintf(f,
          "usage: ssae jack [options]\n\n"
          "Runs the monitor as a JACK client: ports in_N (analysed), out_N\n"
          "(--passthrough), score_N (smoothed score) and alarm_N (alarm gate,\n"
          "0/1) as audio-rate control signals. Follows the server's sample rate\n"
          "and buffer size. Events as JSON lines (--events, and stdout when it\n"
          "is not a terminal). Ctrl-C, SIGTERM or the server going away end it\n"
          "cleanly with the events flushed.\n\n"
          "  --model M        model file (default: the built-in model)\n"
          "  --inputs N       input channels (default 1)\n"
          "  --clients K      split the inputs over K JACK clients NAME-1 ..\n"
          "                   NAME-K (ports keep their numbers), one input\n"
          "                   group of the engine each: the server runs them\n"
          "                   in parallel, so the feature work of many\n"
          "                   channels spreads over cores (default 1; at\n"
          "                   most 256 inputs per client)\n"
          "  --passthrough    copy each input to an output port\n"
          "  --connect PORT   connect PORT to the next input (repeatable; also\n"
          "                   several PORTs after one --connect)\n"
          "  --events FILE    write JSON-lines events to FILE\n"
          "  --name NAME      client name (default ssae)\n"
          "  --duration S     stop after S seconds\n"
          "  --threshold X    alarm threshold (default: the model's)\n"
          "  --smoothing S    smoothing time constant in seconds (default 0.1)\n"
          "  --on K / --off M alarm on after K smoothed scores above, off after\n"
          "                   M below (default 3 / 5)\n"
          "  --status S       status event every S seconds of audio (default 10)\n"
          "  --backend B      auto, cpu or cuda (default auto)\n");
}

#if SSAE_HAVE_JACK
static volatile sig_atomic_t interrupted;
static void on_sig(int sig) {
  (void)sig;
  interrupted = 1;
}
#endif

int ssae_cmd_jack(int argc, char **argv) {
  const char *model = NULL, *events = NULL, *name = "ssae", *backend = "auto";
  long inputs = 1, clients = 1, on = 3, off = 5;
  int passthrough = 0;
  double duration = 0, threshold = NAN, smoothing = 0.1, status = 10;
  const char **connect = calloc((size_t)argc + 1, sizeof *connect);
  int n_connect = 0;
  int rc = SSAE_EXIT_USAGE;
  if (!connect) return SSAE_EXIT_INPUT;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEEDV()                                       \
  do {                                                \
    if (!v) {                                         \
      ssae_cli_error(CMD, "%s needs a value", a);     \
      goto out;                                       \
    }                                                 \
    i++;                                              \
  } while (0)
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      rc = SSAE_EXIT_OK;
      goto out;
    } else if (!strcmp(a, "--model")) {
      NEEDV();
      model = v;
    } else if (!strcmp(a, "--inputs")) {
      NEEDV();
      if (ssae_cli_parse_int(CMD, a, v, 1, 4096, &inputs)) goto out;
    } else if (!strcmp(a, "--clients")) {
      NEEDV();
      if (ssae_cli_parse_int(CMD, a, v, 1, 64, &clients)) goto out;
    } else if (!strcmp(a, "--passthrough")) {
      passthrough = 1;
    } else if (!strcmp(a, "--connect")) {
      NEEDV();
      connect[n_connect++] = v;
      /* More ports may follow until the next option. */
      while (i + 1 < argc && strncmp(argv[i + 1], "--", 2))
        connect[n_connect++] = argv[++i];
    } else if (!strcmp(a, "--events")) {
      NEEDV();
      events = v;
    } else if (!strcmp(a, "--name")) {
      NEEDV();
      name = v;
    } else if (!strcmp(a, "--duration")) {
      NEEDV();
      if (ssae_cli_parse_double(CMD, a, v, 0.001, 1e9, &duration)) goto out;
    } else if (!strcmp(a, "--threshold")) {
      NEEDV();
      if (ssae_cli_parse_double(CMD, a, v, 1e-30, 1e30, &threshold)) goto out;
    } else if (!strcmp(a, "--smoothing")) {
      NEEDV();
      if (ssae_cli_parse_double(CMD, a, v, 0, 3600, &smoothing)) goto out;
    } else if (!strcmp(a, "--on")) {
      NEEDV();
      if (ssae_cli_parse_int(CMD, a, v, 1, 100000, &on)) goto out;
    } else if (!strcmp(a, "--off")) {
      NEEDV();
      if (ssae_cli_parse_int(CMD, a, v, 1, 100000, &off)) goto out;
    } else if (!strcmp(a, "--status")) {
      NEEDV();
      if (ssae_cli_parse_double(CMD, a, v, 0, 1e9, &status)) goto out;
    } else if (!strcmp(a, "--backend")) {
      NEEDV();
      if (strcmp(v, "auto") && strcmp(v, "cpu") && strcmp(v, "cuda")) {
        ssae_cli_error(CMD, "--backend must be auto, cpu or cuda (got '%s')", v);
        goto out;
      }
      backend = v;
    } else {
      ssae_cli_error(CMD, "unknown option '%s' (see ssae jack --help)", a);
      goto out;
    }
#undef NEEDV
  }
  if (clients > inputs) {
    ssae_cli_error(CMD, "--clients %ld needs at least %ld inputs (--inputs %ld)", clients,
                   clients, inputs);
    goto out;
  }
  if ((inputs + clients - 1) / clients > 256) {
    ssae_cli_error(CMD, "%ld inputs on %ld client(s): at most 256 per client (raise --clients)",
                   inputs, clients);
    goto out;
  }
  if (n_connect > inputs) {
    ssae_cli_error(CMD, "%d port(s) to --connect but only %ld input(s) (--inputs)",
                   n_connect, inputs);
    goto out;
  }
#if !SSAE_HAVE_JACK
  (void)model;
  (void)events;
  (void)name;
  (void)backend;
  (void)passthrough;
  (void)clients;
  (void)duration;
  (void)threshold;
  (void)smoothing;
  (void)status;
  (void)on;
  (void)off;
  ssae_cli_error(CMD, "this ssae was built without JACK (install the JACK "
                      "development files and rebuild)");
  rc = SSAE_EXIT_INPUT;
out:
  free(connect);
  return rc;
#else
  {
    ssae_err err;
    rc = SSAE_EXIT_INPUT;
    ssae_model *m = ssae_model_open(model, &err);
    if (!m) {
      ssae_cli_error(CMD, "%s", err.msg);
      goto out;
    }
    if (!isfinite(threshold) && !isfinite(m->threshold))
      fprintf(stderr, "ssae jack: the model has no threshold and none was "
                      "given (--threshold): no alarms, scores only\n");
    /* Client k: the engine's input group k (the same split as the
     * engine's, checked when the client starts). */
    const int K = (int)clients;
    ssae_io_jack **jc = calloc((size_t)K, sizeof *jc);
    if (!jc) {
      ssae_cli_error(CMD, "out of memory");
      ssae_model_free(m);
      goto out;
    }
    for (int k = 0; k < K; k++) {
      const int first = (int)((long long)k * inputs / K);
      const int count = (int)((long long)(k + 1) * inputs / K) - first;
      char cname[256];
      if (K == 1) snprintf(cname, sizeof cname, "%s", name);
      else snprintf(cname, sizeof cname, "%s-%d", name, k + 1);
      if (!(jc[k] = ssae_io_jack_new(cname, first, count, passthrough, &err))) {
        ssae_cli_error(CMD, "%s", err.msg);
        for (int q = 0; q < k; q++) ssae_io_jack_free(jc[q]);
        free(jc);
        ssae_model_free(m);
        goto out;
      }
    }
    ssae_io_jack *j = jc[0];
    ssae_evsink_cfg scfg;
    memset(&scfg, 0, sizeof scfg);
    scfg.events_path = events;
    scfg.events_stdout = !ssae_cli_stdout_tty();
    scfg.prog = "ssae jack";
    ssae_evsink *sink = ssae_evsink_new(&scfg, &err);
    if (!sink) {
      ssae_cli_error(CMD, "%s", err.msg);
      for (int k = 0; k < K; k++) ssae_io_jack_free(jc[k]);
      free(jc);
      ssae_model_free(m);
      goto out;
    }
    ssae_engine_cfg ecfg;
    ssae_engine_cfg_default(&ecfg);
    ecfg.channels = (int)inputs;
    ecfg.groups = K;
    ecfg.input_rate = ssae_io_jack_rate(j);
    ecfg.backend = backend;
    ecfg.status_every_s = status;
    ecfg.params.threshold = threshold;
    ecfg.params.smoothing_s = smoothing;
    ecfg.params.on_count = (int)on;
    ecfg.params.off_count = (int)off;
    ecfg.on_event = ssae_evsink_on_event;
    ecfg.user = sink;
    ssae_engine *e = ssae_engine_new(m, &ecfg, &err);
    int started = e != NULL;
    for (int k = 0; started && k < K; k++)
      started = !ssae_io_jack_start(jc[k], e, K == 1 ? -1 : k, &err);
    if (!started) {
      ssae_cli_error(CMD, "%s", err.msg);
      for (int k = 0; k < K; k++) ssae_io_jack_free(jc[k]);
      free(jc);
      ssae_engine_free(e);
      ssae_evsink_free(sink);
      ssae_model_free(m);
      goto out;
    }
    rc = SSAE_EXIT_OK;
    for (int i = 0; i < n_connect; i++) {
      /* The client whose group holds input i. */
      int k = 0, first = 0, count = 0;
      for (; k < K; k++) {
        ssae_engine_group_channels(e, k, &first, &count);
        if (i < first + count) break;
      }
      if (ssae_io_jack_connect(jc[k], connect[i], i - first, &err)) {
        ssae_cli_error(CMD, "%s", err.msg);
        rc = SSAE_EXIT_INPUT;
      }
    }
    if (K == 1)
      fprintf(stderr,
              "ssae jack: client '%s' running at %.0f Hz, buffer %u, %ld "
              "input(s) (Ctrl-C stops)\n",
              ssae_io_jack_name(j), ssae_io_jack_rate(j), ssae_io_jack_buffer_size(j), inputs);
    else
      fprintf(stderr,
              "ssae jack: clients '%s' .. '%s' running at %.0f Hz, buffer %u, %ld "
              "input(s) (Ctrl-C stops)\n",
              ssae_io_jack_name(jc[0]), ssae_io_jack_name(jc[K - 1]), ssae_io_jack_rate(j),
              ssae_io_jack_buffer_size(j), inputs);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sig;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int gone = -1; /* the client that saw the server go */
    while (!interrupted && gone < 0) {
      struct timespec d = {0, 20000000L};
      nanosleep(&d, NULL);
      for (int k = 0; k < K && gone < 0; k++) {
        int p = ssae_io_jack_poll(jc[k], &err);
        if (p == 1) gone = k;
        if (p < 0) ssae_cli_error(CMD, "%s", err.msg);
      }
      if (gone >= 0) break;
      clock_gettime(CLOCK_MONOTONIC, &now);
      double el = (double)(now.tv_sec - t0.tv_sec) +
                  (double)(now.tv_nsec - t0.tv_nsec) / 1e9;
      if (duration > 0 && el >= duration) break;
    }
    if (gone >= 0) {
      ssae_cli_error(CMD, "the JACK server went away (%s); stopping",
                     ssae_io_jack_shutdown_reason(jc[gone]));
      ssae_engine_stats s;
      ssae_engine_stats_get(e, &s);
      ssae_evsink_note(sink, s.audio_s, "server_shutdown",
                       ssae_io_jack_shutdown_reason(jc[gone]));
      rc = SSAE_EXIT_INPUT;
    }
    for (int k = 0; k < K; k++) ssae_io_jack_free(jc[k]);
    free(jc);
    ssae_engine_drain(e);
    ssae_engine_stats s;
    ssae_engine_stats_get(e, &s);
    fprintf(stderr,
            "ssae jack: %.1f s of audio, %llu windows, %llu scored, %llu "
            "dropped, backend %s, latency p50 %.3f ms p99 %.3f ms max %.3f ms, "
            "%llu alarm(s)\n",
            s.audio_s, (unsigned long long)s.windows,
            (unsigned long long)s.scored, (unsigned long long)s.dropped,
            s.backend, s.lat_p50_ms, s.lat_p99_ms, s.lat_max_ms,
            (unsigned long long)ssae_evsink_alarms(sink, -1));
    ssae_engine_free(e);
    if (ssae_evsink_free(sink)) {
      ssae_cli_error(CMD, "writing the events file failed");
      rc = SSAE_EXIT_INPUT;
    }
    ssae_model_free(m);
  }
out:
  free(connect);
  return rc;
#endif
}
