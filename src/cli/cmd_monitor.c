/* `ssae monitor`: live monitor through PortAudio, or a file played through
 * the same real-time engine (--input). */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cli_opts.h"
#include "cli_service.h"
#include "ssae_audio.h"
#include "ssae_config.h"
#include "ssae_detector.h"
#include "ssae_engine.h"
#include "ssae_evsink.h"
#include "ssae_model.h"
#include "ssae_outfile.h"

#if SSAE_HAVE_PORTAUDIO
#include "ssae_io_portaudio.h"
#endif

static const char *const CMD = "monitor";

static volatile sig_atomic_t interrupted;
/* The plant service (--config and its flags); NULL without one. */
static ssae_cli_service *svc;
static void on_sigint(int sig) {
  (void)sig;
  interrupted = 1;
}

typedef struct opts {
  const char *model, *device, *input, *events, *windows, *backend;
  int list, channels, realtime, no_meter, channel, on, off, block, gpu_frontend, gpu;
  double rate, duration, threshold, smoothing, status;
  ssae_cli_service_args svc;
} opts;

#define O(f) .offset = offsetof(opts, f)

static const ssae_cli_opt options[] = {
    {.kind = SSAE_CLI_STRING, .name = "--model", O(model), .metavar = "M", .help = "model file",
     .def = "the built-in model"},
    {.kind = SSAE_CLI_STRING, .name = "--device", O(device), .metavar = "N|NAME",
     .help = "PortAudio input device (index or part of its name)", .def = "the default input"},
    {.kind = SSAE_CLI_FLAG, .name = "--list-devices", O(list),
     .help = "list input devices and exit"},
    {.kind = SSAE_CLI_INT, .name = "--channels", O(channels), .metavar = "N", .min = 1,
     .max = 256, .help = "input channels"},
    {.kind = SSAE_CLI_DOUBLE, .name = "--rate", O(rate), .metavar = "R", .min = 1000,
     .max = 768000, .help = "device sample rate; any rate is resampled to the model's",
     .def = "the device's"},
    {.kind = SSAE_CLI_STRING, .name = "--input", O(input), .metavar = "FILE",
     .help = "play FILE through the engine instead of a device", .def = ""},
    {.kind = SSAE_CLI_CUSTOM, .name = "--channel", O(channel), .metavar = "N|mix|all",
     .help = "channel of FILE", .parse = ssae_cli_parse_channel_all,
     .show = ssae_cli_show_channel},
    {.kind = SSAE_CLI_FLAG, .name = "--realtime", O(realtime),
     .help = "play FILE at real-time pace (default: as fast as possible)"},
    {.kind = SSAE_CLI_STRING, .name = "--events", O(events), .metavar = "FILE",
     .help = "write JSON-lines events to FILE", .def = ""},
    {.kind = SSAE_CLI_STRING, .name = "--windows", O(windows), .metavar = "OUT.tsv",
     .help = "every window's score: path, window, time, score", .def = ""},
    {.kind = SSAE_CLI_DOUBLE, .name = "--duration", O(duration), .metavar = "S", .min = 0.001,
     .max = 1e9, .help = "stop after S seconds of audio", .def = "until the end or Ctrl-C"},
    SSAE_CLI_DETECTOR_OPTIONS(opts),
    {.kind = SSAE_CLI_INT, .name = "--block", O(block), .metavar = "N", .min = 1, .max = 65536,
     .help = "samples per block for --input"},
    {.kind = SSAE_CLI_FLAG, .name = "--no-meter", O(no_meter),
     .help = "no live meter on the terminal"},
    {.kind = SSAE_CLI_FLAG, .name = "--gpu-frontend", O(gpu_frontend),
     .help = "the device front end: the audio thread only copies samples; the frames, "
             "windows and scores of every channel are made at once on the GPU (many "
             "channels; --backend cpu: the same path on the CPU)"},
    SSAE_CLI_SERVICE_KEEP_RUNNING(opts, svc),
    SSAE_CLI_SERVICE_OPTIONS(opts, svc),
    {0}};

static const ssae_cli_cmd command = {
    .name = "monitor",
    .usage = "usage: ssae monitor [options]\n"
             "       ssae monitor --input FILE [--realtime] [options]\n"
             "       ssae monitor --list-devices",
    .about = "Scores sound in real time: a live meter per channel on a terminal,\n"
             "alarm events as JSON lines (--events, and stdout when it is not a\n"
             "terminal). Ctrl-C stops with a summary.",
    .epilogue = "Exit status: 0 stopped normally, 1 the input failed (a file that cannot be\n"
                "read, a device that went away) or an output could not be written, 2 usage\n"
                "error.",
    .opts = options,
};

/* The values a service's config goes under when given. */
static ssae_cli_service_cmdvals cmdvals(const opts *o) {
  ssae_cli_service_cmdvals v = {o->model,     o->backend, o->events, o->threshold,
                                o->smoothing, o->status,  o->on,     o->off, o->gpu};
  return v;
}

/* What the summary says besides the engine's counters. */
typedef struct run_totals {
  int realtime;
  double max_lag; /* --realtime: most seconds behind real time */
} run_totals;

/* ---- live meter ---- */

static void meter_draw(ssae_engine *e, ssae_evsink *sink, int first, double t, int ch0) {
  int C = ssae_engine_channels(e);
  if (C > 16) C = 16;
  if (!first) fprintf(stderr, "\033[%dA", C + 1);
  ssae_engine_stats s;
  ssae_engine_stats_get(e, &s);
  fprintf(stderr,
          "\r\033[K%7.1f s  windows %llu  dropped %llu  xruns %llu  non-finite %llu  lost "
          "events %llu  backend %s  p99 %.2f ms\n",
          t, (unsigned long long)s.windows, (unsigned long long)s.dropped,
          (unsigned long long)s.xruns, (unsigned long long)s.nonfinite,
          (unsigned long long)ssae_evsink_lost(sink), s.backend, s.lat_p99_ms);
  for (int c = 0; c < C; c++) {
    ssae_channel_state st;
    ssae_engine_channel_get(e, c, &st);
    char bar[41];
    const int W = 40;
    /* The threshold sits at 3/4 of the bar. */
    double full = isfinite(st.threshold) && st.threshold > 0
                      ? st.threshold * 4.0 / 3.0
                      : (st.smoothed > 0 ? st.smoothed * 2.0 : 1.0);
    int fill = (int)lround(st.smoothed / full * W);
    if (fill < 0) fill = 0;
    if (fill > W) fill = W;
    int mark = isfinite(st.threshold) ? (int)lround(st.threshold / full * W) : -1;
    for (int i = 0; i < W; i++) bar[i] = i < fill ? '#' : ' ';
    if (mark >= 0 && mark < W) bar[mark] = '|';
    bar[W] = 0;
    fprintf(stderr, "\r\033[Kch %-2d [%s] %9.4g / %-9.4g %-5s drops %llu\n", c + ch0,
            bar, st.smoothed, st.threshold, st.alarm ? "ALARM" : "ok",
            (unsigned long long)st.dropped);
  }
  fflush(stderr);
}

/* The engine's last numbers, taken before it is freed (its final status
 * event goes out then): the summary follows that event, so that the lines
 * it counts as lost include it. */
typedef struct run_end {
  ssae_engine_stats s;
  int channels;
} run_end;

static run_end run_end_of(ssae_engine *e) {
  run_end r;
  ssae_engine_stats_get(e, &r.s);
  r.channels = ssae_engine_channels(e);
  return r;
}

static void summary(const run_end *end, ssae_evsink *sink, const run_totals *tot) {
  const ssae_engine_stats s = end->s;
  fprintf(stderr,
          "ssae monitor: %.1f s of audio, %d channel(s), %llu windows, "
          "%llu scored, %llu dropped, %llu xrun(s), %llu non-finite sample(s), %llu batches, "
          "backend %s, latency p50 %.3f ms p99 %.3f ms max %.3f ms, %llu alarm(s), %llu "
          "event line(s) lost\n",
          s.audio_s, end->channels, (unsigned long long)s.windows,
          (unsigned long long)s.scored, (unsigned long long)s.dropped,
          (unsigned long long)s.xruns, (unsigned long long)s.nonfinite,
          (unsigned long long)s.batches, s.backend, s.lat_p50_ms,
          s.lat_p99_ms, s.lat_max_ms,
          (unsigned long long)ssae_evsink_alarms(sink, -1),
          (unsigned long long)ssae_evsink_lost(sink));
  if (tot->realtime)
    fprintf(stderr, "ssae monitor: at most %.3f s behind real time\n",
            tot->max_lag > 0 ? tot->max_lag : 0.0);
  if (s.dropped)
    fprintf(stderr,
            "ssae monitor: %llu window(s) were dropped because scoring fell "
            "behind (try --backend cuda or fewer channels)\n",
            (unsigned long long)s.dropped);
  if (s.xruns)
    fprintf(stderr,
            "ssae monitor: the audio device overran %llu time(s): input was lost before "
            "it reached ssae (the machine is overloaded, or the buffer is too small)\n",
            (unsigned long long)s.xruns);
  if (s.nonfinite)
    fprintf(stderr,
            "ssae monitor: %llu NaN or infinite input sample(s) were taken as digital "
            "silence (scored, not judged)\n",
            (unsigned long long)s.nonfinite);
}

/* Closes the events; a failure is reported (once: stdout's own check at
 * the exit stays quiet then) and makes the exit status 1. */
static int close_sink(ssae_evsink *sink) {
  ssae_err err = {{0}};
  if (!ssae_evsink_close(sink, &err)) return 0;
  ssae_cli_error(CMD, "%s", err.msg[0] ? err.msg : "writing the events or windows failed");
  ssae_err quiet = {{0}};
  ssae_stdout_check(&quiet);
  return -1;
}

static void sleep_until(const struct timespec *t) {
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, t, NULL) == EINTR &&
         !interrupted) {
  }
}

/* ---- file input ---- */

static double ts_diff(const struct timespec *a, const struct timespec *b) {
  return (double)(a->tv_sec - b->tv_sec) + (double)(a->tv_nsec - b->tv_nsec) / 1e9;
}

/* After a write to the events failed: said once, monitoring goes on and
 * the lost lines are counted in the status line and the summary. */
static void note_sink_failure(ssae_evsink *sink, int *said) {
  ssae_err err = {{0}};
  if (*said || !ssae_evsink_check(sink, &err)) return;
  *said = 1;
  ssae_cli_error(CMD, "%s; monitoring goes on%s", err.msg,
                 strstr(err.msg, "windows TSV") ? "" : ", lost event lines are counted");
}

/* The file is read in blocks through the streaming reader (memory does
 * not grow with its length) and fed to the engine as a live input would
 * be: NaN or infinite samples are passed on, and the engine takes them as
 * digital silence and counts them. */
static int run_file(const opts *o, const ssae_model *m, ssae_engine_cfg *ecfg,
                    ssae_evsink_cfg *scfg, run_totals *tot) {
  ssae_err err;
  ssae_audio_opts ao = {.allow_nonfinite = 1};
  ssae_audio_stream *as = ssae_audio_open(o->input, o->channel, m->feat.sample_rate, &ao, &err);
  if (!as) {
    ssae_cli_error(CMD, "%s", err.msg);
    return SSAE_EXIT_INPUT;
  }
  const ssae_audio_info *ai = ssae_audio_stream_info(as);
  const int C = ai->channels;
  const double rate = ai->rate;
  if (ssae_audio_stream_warning(as)[0])
    ssae_cli_error(CMD, "warning: %s", ssae_audio_stream_warning(as));
  scfg->label = o->input;
  scfg->channel_offset = o->channel >= 0 ? o->channel : 0;
  scfg->channels = C;
  ssae_evsink *sink = ssae_evsink_new(scfg, &err);
  if (!sink) {
    ssae_cli_error(CMD, "%s", err.msg);
    ssae_audio_close(as);
    return SSAE_EXIT_INPUT;
  }
  ecfg->channels = C;
  ecfg->input_rate = rate;
  ecfg->on_event = ssae_evsink_on_event;
  ecfg->user = sink;
  ecfg->emit_windows = o->windows != NULL;
  if (ssae_cli_service_start(svc, C, rate, ecfg, ssae_evsink_on_event, sink,
                             o->windows != NULL)) {
    ssae_evsink_free(sink);
    ssae_audio_close(as);
    return SSAE_EXIT_INPUT;
  }
  /* As fast as possible: the ring must hold what the worker has not yet
   * scored; the file is fed no faster than the worker drains it below. */
  ssae_cli_engine_gpu(ecfg);
  ssae_engine *e = ssae_engine_new(ssae_cli_service_model(svc, m), ecfg, &err);
  size_t block = (size_t)o->block;
  float *buf = malloc(sizeof *buf * block * (size_t)C);
  const float **ptr = calloc((size_t)C, sizeof *ptr);
  if (!e || !buf || !ptr) {
    ssae_cli_error(CMD, "%s", e ? "out of memory" : err.msg);
    ssae_engine_free(e);
    ssae_evsink_free(sink);
    ssae_audio_close(as);
    free(buf);
    free(ptr);
    return SSAE_EXIT_INPUT;
  }
  ssae_cli_service_attach(svc, e);
  for (int c = 0; c < C; c++) ptr[c] = buf + (size_t)c * block;
  unsigned long long total = o->duration > 0 ? (unsigned long long)(o->duration * rate) : ~0ULL;
  int meter = !o->no_meter && o->realtime && ssae_cli_stderr_tty();
  struct timespec start, next;
  clock_gettime(CLOCK_MONOTONIC, &start);
  next = start;
  struct timespec last_draw = next;
  int first = 1, rc = SSAE_EXIT_OK, said = 0;
  double last_warn = -1e9;
  unsigned long long done = 0;
  /* As fast as possible, the worker scores what the rings hold in one
   * batch and looks at the status period once per batch, at its last
   * window: the first batch (all that was fed while the backend started,
   * up to the 256 windows below, some 8 s of one channel) put the first
   * STATUS event seconds of audio late, and a short --status lost periods
   * to large batches later on. Draining once the audio fed passes a
   * period's end ends a batch there; each block is drained until a window
   * timed after that end has surely been made (windows are a hop apart;
   * a second hop covers the resampler's delay). The period is the one at
   * start (a SIGHUP's new one only moves these drains). */
  const double status_every = ecfg->status_every_s;
  const double status_reach = 2.0 * m->feat.hop_length / m->feat.sample_rate;
  double next_status = status_every;
  while (done < total && !interrupted) {
    /* Whole blocks (the planar layout's stride is the size asked for);
     * --duration trims the last one. */
    long long got = ssae_audio_read(as, buf, block, &err);
    if (got < 0) {
      ssae_cli_error(CMD, "%s", err.msg);
      rc = SSAE_EXIT_INPUT;
      break;
    }
    if (got == 0) break;
    size_t n = (unsigned long long)got > total - done ? (size_t)(total - done) : (size_t)got;
    if (o->realtime) {
      long ns = (long)((double)n / rate * 1e9);
      next.tv_nsec += ns;
      while (next.tv_nsec >= 1000000000L) {
        next.tv_nsec -= 1000000000L;
        next.tv_sec++;
      }
      sleep_until(&next);
      /* How far behind real time the feeding is: the wall clock past the
       * moment this block's audio would have ended. */
      struct timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      double lag = ts_diff(&now, &next);
      if (lag > tot->max_lag) tot->max_lag = lag;
      double el = ts_diff(&now, &start);
      if (lag > 0.5 && el - last_warn > 5.0) {
        ssae_cli_error(CMD, "warning: %.2f s behind real time at %.1f s of audio (the "
                       "machine cannot keep up)", lag, (double)done / rate);
        last_warn = el;
        first = 1; /* the meter starts again under the warning */
      }
    }
    if (!o->realtime) ssae_cli_service_file_pace(svc, e, n); /* no clip sample lost */
    ssae_engine_process(e, ptr, n);
    ssae_cli_service_audio(svc, ptr, n);
    ssae_cli_service_poll(svc);
    done += n;
    note_sink_failure(sink, &said);
    if (!o->realtime) {
      /* Keep the ring from overflowing: a file has all the time it needs.
       * The device front end's ring holds samples, not windows: each block
       * is taken before the next goes in. */
      ssae_engine_stats s;
      ssae_engine_stats_get(e, &s);
      const double fed = (double)done / rate;
      const int at_status = status_every > 0 && fed >= next_status;
      if (ecfg->gpu_frontend || at_status || s.windows - s.scored - s.dropped > 256)
        ssae_engine_drain(e);
      if (at_status)
        while (next_status + status_reach <= fed) next_status += status_every;
    }
    if (meter) {
      struct timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      if (ts_diff(&now, &last_draw) > 0.1) {
        meter_draw(e, sink, first, (double)done / rate, scfg->channel_offset);
        first = 0;
        last_draw = now;
      }
    }
  }
  if (!interrupted) ssae_engine_flush(e);
  ssae_engine_drain(e);
  ssae_cli_service_keep_running(svc, &interrupted);
  if (meter) meter_draw(e, sink, first, (double)done / rate, scfg->channel_offset);
  tot->realtime = o->realtime;
  const run_end end = run_end_of(e);
  ssae_cli_service_detach(svc);
  ssae_engine_free(e); /* final status event */
  summary(&end, sink, tot);
  if (!interrupted && end.s.windows == 0) {
    /* as ssae score refuses such a file: nothing was judged */
    ssae_cli_error(CMD, "%s: too short: no window (a window needs %d frames)", o->input,
                   m->feat.frames);
    rc = SSAE_EXIT_INPUT;
  }
  free(buf);
  free(ptr);
  ssae_audio_close(as);
  if (close_sink(sink)) rc = SSAE_EXIT_INPUT;
  return rc;
}

/* ---- PortAudio ---- */

#if SSAE_HAVE_PORTAUDIO
static void print_device(const ssae_io_pa_device *d, void *user) {
  *(int *)user = 1;
  printf("%3d%s %s (%s), %d input channel(s), %.0f Hz\n", d->index, d->is_default ? "*" : " ",
         d->name, d->host_api, d->inputs, d->default_rate);
}

static int list_devices(void) {
  ssae_err err;
  int any = 0;
  if (ssae_io_pa_devices(print_device, &any, &err)) {
    ssae_cli_error(CMD, "%s", err.msg);
    return SSAE_EXIT_INPUT;
  }
  if (!any) printf("no input devices\n");
  return SSAE_EXIT_OK;
}

static int run_live(const opts *o, const ssae_model *m, ssae_engine_cfg *ecfg,
                    ssae_evsink_cfg *scfg) {
  ssae_err err;
  int bad_request;
  ssae_io_pa *pa = ssae_io_pa_new(o->device, o->channels, o->rate, &bad_request, &err);
  if (!pa) {
    ssae_cli_error(CMD, "%s", err.msg);
    return bad_request ? SSAE_EXIT_USAGE : SSAE_EXIT_INPUT;
  }
  const char *name = ssae_io_pa_name(pa);
  const double rate = ssae_io_pa_rate(pa);
  scfg->label = name;
  scfg->channels = o->channels;
  ssae_evsink *sink = ssae_evsink_new(scfg, &err);
  ssae_engine *e = NULL;
  if (sink) {
    ecfg->channels = o->channels;
    ecfg->input_rate = rate;
    ecfg->on_event = ssae_evsink_on_event;
    ecfg->user = sink;
    ecfg->emit_windows = o->windows != NULL;
    if (ssae_cli_service_start(svc, o->channels, rate, ecfg, ssae_evsink_on_event, sink,
                               o->windows != NULL))
      ssae_err_set(&err, "the service did not start");
    else {
      ssae_cli_engine_gpu(ecfg);
      e = ssae_engine_new(ssae_cli_service_model(svc, m), ecfg, &err);
    }
    if (e) ssae_io_pa_set_hook(pa, svc ? ssae_cli_service_hook : NULL, svc);
  }
  if (!e || ssae_io_pa_start(pa, e, &err)) {
    ssae_cli_error(CMD, "%s", err.msg);
    ssae_engine_free(e);
    ssae_evsink_free(sink);
    ssae_io_pa_free(pa);
    return SSAE_EXIT_INPUT;
  }
  ssae_cli_service_attach(svc, e);
  fprintf(stderr, "ssae monitor: listening on '%s', %d channel(s) at %.0f Hz "
                  "(Ctrl-C stops)\n", name, o->channels, rate);
  int meter = !o->no_meter && ssae_cli_stderr_tty();
  int first = 1, rc = SSAE_EXIT_OK, said = 0;
  uint64_t xruns_seen = 0;
  double xrun_said = -1e9;
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (!interrupted) {
    struct timespec d = {0, 100000000L};
    nanosleep(&d, NULL);
    clock_gettime(CLOCK_MONOTONIC, &now);
    double el = (double)(now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) / 1e9;
    ssae_cli_service_poll(svc);
    if (!ssae_io_pa_active(pa)) {
      /* The device went away (unplugged, server gone). */
      ssae_cli_error(CMD, "the input device '%s' stopped; ending", name);
      ssae_evsink_note(sink, el, "device_lost", "the input device stopped");
      rc = SSAE_EXIT_INPUT;
      break;
    }
    note_sink_failure(sink, &said);
    ssae_engine_stats s;
    ssae_engine_stats_get(e, &s);
    /* Without the meter, an overflow is said as it happens (at most every
     * 5 s); the meter shows the count. */
    if (s.xruns != xruns_seen && !meter && el - xrun_said >= 5.0) {
      ssae_cli_error(CMD, "warning: input overflow (%llu so far): audio was lost",
                     (unsigned long long)s.xruns);
      xruns_seen = s.xruns;
      xrun_said = el;
    }
    if (meter) {
      meter_draw(e, sink, first, el, 0);
      first = 0;
    }
    if (o->duration > 0 && el >= o->duration) break;
  }
  ssae_io_pa_stop(pa);
  ssae_engine_drain(e);
  run_totals tot = {0};
  const run_end end = run_end_of(e);
  ssae_cli_service_detach(svc);
  ssae_engine_free(e); /* final status event */
  summary(&end, sink, &tot);
  if (close_sink(sink)) rc = SSAE_EXIT_INPUT;
  /* The events are out; now PortAudio's own clean-up (bounded after a
   * device loss). */
  ssae_io_pa_free(pa);
  return rc;
}
#endif

/* Usage errors the table cannot express, and what this build lacks; -1
 * to go on. */
static int check(const opts *o, int channels_set) {
  if (o->events && !*o->events) {
    ssae_cli_error(CMD, "--events: an empty path (a file, or - for stdout)");
    return SSAE_EXIT_USAGE;
  }
  if (o->realtime && !o->input) {
    ssae_cli_error(CMD, "--realtime needs --input FILE");
    return SSAE_EXIT_USAGE;
  }
  if (o->input && (o->device || o->list || channels_set || o->rate > 0)) {
    ssae_cli_error(CMD, "--input cannot be combined with --device, "
                        "--list-devices, --channels or --rate");
    return SSAE_EXIT_USAGE;
  }
#if !SSAE_HAVE_PORTAUDIO
  if (o->list) {
    ssae_cli_error(CMD, "this ssae was built without PortAudio: no devices "
                        "(--input FILE still works)");
    return SSAE_EXIT_INPUT;
  }
  if (!o->input) {
    ssae_cli_error(CMD, "this ssae was built without PortAudio: live input is "
                        "not available (--input FILE still works)");
    return SSAE_EXIT_INPUT;
  }
#endif
  return -1;
}

/* The model, the engine's and the event sink's settings, then the file or
 * the device until the end. */
static int run(const opts *o) {
  ssae_model *m = ssae_cli_open_model(svc, CMD, o->model, o->threshold);
  if (!m) return SSAE_EXIT_INPUT;
  ssae_engine_cfg ecfg;
  ssae_engine_cfg_default(&ecfg);
  const ssae_cli_service_cmdvals v = cmdvals(o);
  ssae_cli_service_engine_cfg(&v, &ecfg);
  ecfg.gpu_frontend = o->gpu_frontend;
  ssae_evsink_cfg scfg;
  memset(&scfg, 0, sizeof scfg);
  scfg.events_path = ssae_cli_service_owns_events(svc) ? NULL : o->events;
  scfg.events_stdout = !ssae_cli_stdout_tty() && !ssae_cli_service_owns_stdout(svc);
  if (svc) {
    scfg.machine = ssae_cli_service_machine;
    scfg.clip = ssae_cli_service_clip;
    scfg.machine_user = svc;
  }
  scfg.windows_path = o->windows;
  scfg.hop_length = m->feat.hop_length;
  scfg.sample_rate = m->feat.sample_rate;
  scfg.frames = m->feat.frames;
  scfg.prog = "ssae monitor";

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sa.sa_flags = SA_RESTART; /* writes under way finish; the waits check the flag */
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);

  int rc = SSAE_EXIT_INPUT;
  run_totals tot = {0};
  if (o->input) rc = run_file(o, m, &ecfg, &scfg, &tot);
#if SSAE_HAVE_PORTAUDIO
  else rc = run_live(o, m, &ecfg, &scfg);
#endif
  ssae_model_free(m);
  return rc;
}

int ssae_cmd_monitor(int argc, char **argv) {
  opts o = {.channels = 1, .threshold = NAN, .smoothing = SSAE_DETECTOR_SMOOTHING_S,
            .status = 10, .on = SSAE_DETECTOR_ON_COUNT, .off = SSAE_DETECTOR_OFF_COUNT,
            .block = 512, .backend = "auto"};
  ssae_cli_args args;
  int rc = ssae_cli_parse(&command, argc, argv, &o, &args);
  if (rc != SSAE_CLI_CONTINUE) return rc;
  ssae_cli_service_note_given(&o.svc, &args);
  if ((rc = ssae_cli_check_gpu(CMD, &args, o.gpu, o.backend)) != SSAE_EXIT_OK) {
    ssae_cli_args_free(&args);
    return rc;
  }
  if (ssae_cli_service_wanted(&o.svc) && !o.list) {
    ssae_cli_service_cmdvals v = cmdvals(&o);
    if (!(svc = ssae_cli_service_load("ssae monitor", &o.svc, &v, &rc)) ||
        ssae_cli_service_monitor_input(svc, &o.input, &o.realtime, &o.device, &o.channels,
                                       ssae_cli_given(&args, "--channels"), &o.channel,
                                       ssae_cli_given(&args, "--channel"))) {
      if (svc) rc = SSAE_EXIT_INPUT;
      ssae_cli_args_free(&args);
      ssae_cli_service_free(svc);
      svc = NULL;
      return rc;
    }
  }
  if (o.svc.keep_running && (!svc || !o.input))
    rc = ssae_cli_usage_error(&command, "--keep-running is for a service (--config or its "
                                        "flags) playing a file (--input)");
  else
    rc = check(&o, ssae_cli_given(&args, "--channels"));
  ssae_cli_args_free(&args);
  if (rc < 0) {
#if SSAE_HAVE_PORTAUDIO
    if (o.list) return list_devices();
#endif
    rc = run(&o);
  }
  if (ssae_cli_service_free(svc) && rc == SSAE_EXIT_OK) rc = SSAE_EXIT_INPUT;
  svc = NULL;
  return rc;
}
