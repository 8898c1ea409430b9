/* `ssae monitor`: live monitor through PortAudio, or a file played through
 * the same real-time engine (--input). */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "ssae_audio.h"
#include "ssae_config.h"
#include "ssae_detector.h"
#include "ssae_engine.h"
#include "ssae_evsink.h"
#include "ssae_model.h"

#if SSAE_HAVE_PORTAUDIO
#include <portaudio.h>
#endif

static const char *const CMD = "monitor";

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig) {
  (void)sig;
  interrupted = 1;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: ssae monitor [options]\n"
          "       ssae monitor --input FILE [--realtime] [options]\n"
          "       ssae monitor --list-devices\n\n"
          "Scores sound in real time: a live meter per channel on a terminal,\n"
          "alarm events as JSON lines (--events, and stdout when it is not a\n"
          "terminal). Ctrl-C stops with a summary.\n\n"
          "  --model M          model file (default: the built-in model)\n"
          "  --device N|NAME    PortAudio input device (index or part of its name)\n"
          "  --list-devices     list input devices and exit\n"
          "  --channels N       input channels (default 1)\n"
          "  --rate R           device sample rate (default: the device's; any\n"
          "                     rate is resampled to the model's)\n"
          "  --input FILE       play FILE through the engine instead of a device\n"
          "  --channel N|mix|all  channel of FILE (default 0)\n"
          "  --realtime         play FILE at real-time pace (default: as fast as\n"
          "                     possible)\n"
          "  --events FILE      write JSON-lines events to FILE\n"
          "  --windows OUT.tsv  every window's score: path, window, time, score\n"
          "  --duration S       stop after S seconds of audio\n"
          "  --threshold X      alarm threshold (default: the model's)\n"
          "  --smoothing S      smoothing time constant in seconds (default "
          SSAE_DETECTOR_TEXT(SSAE_DETECTOR_SMOOTHING_S) ")\n"
          "  --on K / --off M   alarm on after K smoothed scores above the\n"
          "                     threshold, off after M below (default "
          SSAE_DETECTOR_TEXT(SSAE_DETECTOR_ON_COUNT) " / "
          SSAE_DETECTOR_TEXT(SSAE_DETECTOR_OFF_COUNT) ")\n"
          "  --status S         status event every S seconds of audio (default 10)\n"
          "  --backend B        auto, cpu or cuda (default auto)\n"
          "  --block N          samples per block for --input (default 512)\n"
          "  --no-meter         no live meter on the terminal\n");
}

typedef struct opts {
  const char *model, *device, *input, *events, *windows, *backend;
  int list, channels, realtime, meter, channel;
  double rate, duration, threshold, smoothing, status;
  long on, off, block;
} opts;

/* ---- live meter ---- */

static void meter_draw(ssae_engine *e, int first, double t) {
  int C = ssae_engine_channels(e);
  if (C > 16) C = 16;
  if (!first) fprintf(stderr, "\033[%dA", C + 1);
  ssae_engine_stats s;
  ssae_engine_stats_get(e, &s);
  fprintf(stderr,
          "\r\033[K%7.1f s  windows %llu  dropped %llu  backend %s  latency "
          "p99 %.2f ms\n",
          t, (unsigned long long)s.windows, (unsigned long long)s.dropped,
          s.backend, s.lat_p99_ms);
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
    fprintf(stderr, "\r\033[Kch %-2d [%s] %9.4g / %-9.4g %-5s drops %llu\n", c,
            bar, st.smoothed, st.threshold, st.alarm ? "ALARM" : "ok",
            (unsigned long long)st.dropped);
  }
  fflush(stderr);
}

static void summary(ssae_engine *e, ssae_evsink *sink) {
  ssae_engine_stats s;
  ssae_engine_stats_get(e, &s);
  fprintf(stderr,
          "ssae monitor: %.1f s of audio, %d channel(s), %llu windows, "
          "%llu scored, %llu dropped, %llu batches, backend %s, latency p50 "
          "%.3f ms p99 %.3f ms max %.3f ms, %llu alarm(s)\n",
          s.audio_s, ssae_engine_channels(e), (unsigned long long)s.windows,
          (unsigned long long)s.scored, (unsigned long long)s.dropped,
          (unsigned long long)s.batches, s.backend, s.lat_p50_ms,
          s.lat_p99_ms, s.lat_max_ms,
          (unsigned long long)ssae_evsink_alarms(sink, -1));
  if (s.dropped)
    fprintf(stderr,
            "ssae monitor: %llu window(s) were dropped because scoring fell "
            "behind (try --backend cuda or fewer channels)\n",
            (unsigned long long)s.dropped);
}

static void sleep_until(const struct timespec *t) {
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, t, NULL) == EINTR &&
         !interrupted) {
  }
}

/* ---- file input ---- */

static int run_file(const opts *o, const ssae_model *m, ssae_engine_cfg *ecfg,
                    ssae_evsink_cfg *scfg) {
  ssae_err err;
  ssae_audio a;
  if (ssae_audio_load(o->input, o->channel, m->feat.sample_rate, &a, &err)) {
    ssae_cli_error(CMD, "%s", err.msg);
    return SSAE_EXIT_INPUT;
  }
  scfg->label = o->input;
  ssae_evsink *sink = ssae_evsink_new(scfg, &err);
  if (!sink) {
    ssae_cli_error(CMD, "%s", err.msg);
    ssae_audio_release(&a);
    return SSAE_EXIT_INPUT;
  }
  ecfg->channels = a.channels;
  ecfg->input_rate = a.rate;
  ecfg->on_event = ssae_evsink_on_event;
  ecfg->user = sink;
  ecfg->emit_windows = o->windows != NULL;
  /* As fast as possible: the ring must hold what the worker has not yet
   * scored; the file is fed no faster than the worker drains it below. */
  ssae_engine *e = ssae_engine_new(m, ecfg, &err);
  if (!e) {
    ssae_cli_error(CMD, "%s", err.msg);
    ssae_evsink_free(sink);
    ssae_audio_release(&a);
    return SSAE_EXIT_INPUT;
  }
  size_t total = a.frames;
  if (o->duration > 0 && (size_t)(o->duration * a.rate) < total)
    total = (size_t)(o->duration * a.rate);
  size_t block = (size_t)o->block;
  const float **ptr = calloc((size_t)a.channels, sizeof *ptr);
  int meter = o->meter && o->realtime && ssae_cli_stderr_tty();
  struct timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  struct timespec last_draw = next;
  int first = 1;
  size_t done = 0;
  while (done < total && !interrupted) {
    size_t n = total - done < block ? total - done : block;
    for (int c = 0; c < a.channels; c++)
      ptr[c] = a.data + (size_t)c * a.frames + done;
    if (o->realtime) {
      long ns = (long)((double)n / a.rate * 1e9);
      next.tv_nsec += ns;
      while (next.tv_nsec >= 1000000000L) {
        next.tv_nsec -= 1000000000L;
        next.tv_sec++;
      }
      sleep_until(&next);
    }
    ssae_engine_process(e, ptr, n);
    done += n;
    if (!o->realtime) {
      /* Keep the ring from overflowing: a file has all the time it needs. */
      ssae_engine_stats s;
      ssae_engine_stats_get(e, &s);
      if (s.windows - s.scored - s.dropped > 256) ssae_engine_drain(e);
    }
    if (meter) {
      struct timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      if ((now.tv_sec - last_draw.tv_sec) * 1000000000L +
              (now.tv_nsec - last_draw.tv_nsec) >
          100000000L) {
        meter_draw(e, first, (double)done / a.rate);
        first = 0;
        last_draw = now;
      }
    }
  }
  if (!interrupted) ssae_engine_flush(e);
  ssae_engine_drain(e);
  if (meter) meter_draw(e, first, (double)done / a.rate);
  summary(e, sink);
  ssae_engine_free(e); /* final status event */
  free(ptr);
  int rc = SSAE_EXIT_OK;
  if (ssae_evsink_free(sink)) {
    ssae_cli_error(CMD, "writing the events or windows file failed");
    rc = SSAE_EXIT_INPUT;
  }
  ssae_audio_release(&a);
  return rc;
}

/* ---- PortAudio ---- */

#if SSAE_HAVE_PORTAUDIO
typedef struct live {
  ssae_engine *e;
  atomic_int closing; /* set before the engine goes away */
  atomic_int in_cb;   /* the callback is running */
} live;

static int pa_callback(const void *input, void *output, unsigned long frames,
                       const PaStreamCallbackTimeInfo *ti,
                       PaStreamCallbackFlags flags, void *user) {
  (void)output;
  (void)ti;
  (void)flags;
  live *l = user;
  atomic_store(&l->in_cb, 1);
  if (atomic_load(&l->closing)) {
    atomic_store(&l->in_cb, 0);
    return paAbort;
  }
  ssae_engine_process(l->e, (const float *const *)input, frames);
  atomic_store(&l->in_cb, 0);
  return paContinue;
}

/* PortAudio's clean-up after a device loss, on its own thread: with a JACK
 * server that went away it may block on the dead connection. */
typedef struct pa_cleanup {
  PaStream *st;
  atomic_int done;
} pa_cleanup;

static void *pa_cleanup_main(void *arg) {
  pa_cleanup *c = arg;
  Pa_AbortStream(c->st);
  Pa_CloseStream(c->st);
  Pa_Terminate();
  atomic_store(&c->done, 1);
  return NULL;
}

/* Runs the clean-up, waiting for it at most `ms`; 0 when it finished. The
 * events are written before this: a clean-up that hangs loses nothing, the
 * process just ends without it. */
static int pa_cleanup_bounded(PaStream *st, int ms) {
  static pa_cleanup c; /* outlives this call if the clean-up hangs */
  c.st = st;
  atomic_init(&c.done, 0);
  pthread_t th;
  if (pthread_create(&th, NULL, pa_cleanup_main, &c)) return -1;
  for (int k = 0; k < ms && !atomic_load(&c.done); k++) {
    struct timespec d = {0, 1000000L};
    nanosleep(&d, NULL);
  }
  if (atomic_load(&c.done)) {
    pthread_join(th, NULL);
    return 0;
  }
  pthread_detach(th);
  return -1;
}

static int pa_start(void) {
  /* PortAudio's host APIs (ALSA, JACK) print diagnostics on stderr while
   * probing devices; they are noise for the user, so stderr points to
   * /dev/null meanwhile (no other thread is running yet). */
  fflush(stderr);
  int saved = dup(2), devnull = open("/dev/null", O_WRONLY);
  if (saved >= 0 && devnull >= 0) dup2(devnull, 2);
  int rc = Pa_Initialize();
  if (saved >= 0 && devnull >= 0) dup2(saved, 2);
  if (saved >= 0) close(saved);
  if (devnull >= 0) close(devnull);
  if (rc != paNoError) {
    ssae_cli_error(CMD, "PortAudio: %s", Pa_GetErrorText(rc));
    return -1;
  }
  return 0;
}

static int list_devices(void) {
  if (pa_start()) return SSAE_EXIT_INPUT;
  int n = Pa_GetDeviceCount();
  int def = Pa_GetDefaultInputDevice();
  int any = 0;
  for (int i = 0; i < n; i++) {
    const PaDeviceInfo *d = Pa_GetDeviceInfo(i);
    if (!d || d->maxInputChannels < 1) continue;
    const PaHostApiInfo *h = Pa_GetHostApiInfo(d->hostApi);
    printf("%3d%s %s (%s), %d input channel(s), %.0f Hz\n", i,
           i == def ? "*" : " ", d->name, h ? h->name : "?",
           d->maxInputChannels, d->defaultSampleRate);
    any = 1;
  }
  if (!any) printf("no input devices\n");
  Pa_Terminate();
  return SSAE_EXIT_OK;
}

static int find_device(const char *spec) {
  int n = Pa_GetDeviceCount();
  if (!spec) return Pa_GetDefaultInputDevice();
  char *end;
  long idx = strtol(spec, &end, 10);
  if (*spec && !*end) {
    if (idx < 0 || idx >= n) return -2;
    const PaDeviceInfo *d = Pa_GetDeviceInfo((int)idx);
    return d && d->maxInputChannels > 0 ? (int)idx : -3;
  }
  for (int i = 0; i < n; i++) {
    const PaDeviceInfo *d = Pa_GetDeviceInfo(i);
    if (d && d->maxInputChannels > 0 && strstr(d->name, spec)) return i;
  }
  return -2;
}

static int run_live(const opts *o, const ssae_model *m, ssae_engine_cfg *ecfg,
                    ssae_evsink_cfg *scfg) {
  if (pa_start()) return SSAE_EXIT_INPUT;
  int dev = find_device(o->device);
  if (dev < 0) {
    if (dev == paNoDevice)
      ssae_cli_error(CMD, "no input device (see --list-devices)");
    else if (dev == -3)
      ssae_cli_error(CMD, "device %s has no inputs (see --list-devices)", o->device);
    else
      ssae_cli_error(CMD, "no input device '%s' (see --list-devices)", o->device);
    Pa_Terminate();
    return SSAE_EXIT_INPUT;
  }
  const PaDeviceInfo *di = Pa_GetDeviceInfo(dev);
  if (o->channels > di->maxInputChannels) {
    ssae_cli_error(CMD, "device '%s' has %d input channel(s), --channels %d asked",
                   di->name, di->maxInputChannels, o->channels);
    Pa_Terminate();
    return SSAE_EXIT_USAGE;
  }
  double rate = o->rate > 0 ? o->rate : di->defaultSampleRate;
  PaStreamParameters ip;
  memset(&ip, 0, sizeof ip);
  ip.device = dev;
  ip.channelCount = o->channels;
  ip.sampleFormat = paFloat32 | paNonInterleaved;
  ip.suggestedLatency = di->defaultLowInputLatency;
  PaError pe = Pa_IsFormatSupported(&ip, NULL, rate);
  if (pe != paFormatIsSupported) {
    ssae_cli_error(CMD, "device '%s' cannot record %d channel(s) at %.0f Hz: %s",
                   di->name, o->channels, rate, Pa_GetErrorText(pe));
    Pa_Terminate();
    return SSAE_EXIT_INPUT;
  }
  ssae_err err;
  scfg->label = di->name;
  ssae_evsink *sink = ssae_evsink_new(scfg, &err);
  if (!sink) {
    ssae_cli_error(CMD, "%s", err.msg);
    Pa_Terminate();
    return SSAE_EXIT_INPUT;
  }
  ecfg->channels = o->channels;
  ecfg->input_rate = rate;
  ecfg->on_event = ssae_evsink_on_event;
  ecfg->user = sink;
  ecfg->emit_windows = o->windows != NULL;
  /* Static: PortAudio's thread may call back once more after a device loss,
   * when this function has already returned. */
  static live l;
  atomic_init(&l.closing, 0);
  atomic_init(&l.in_cb, 0);
  l.e = ssae_engine_new(m, ecfg, &err);
  if (!l.e) {
    ssae_cli_error(CMD, "%s", err.msg);
    ssae_evsink_free(sink);
    Pa_Terminate();
    return SSAE_EXIT_INPUT;
  }
  PaStream *st = NULL;
  pe = Pa_OpenStream(&st, &ip, NULL, rate, paFramesPerBufferUnspecified,
                     paNoFlag, pa_callback, &l);
  if (pe == paNoError) pe = Pa_StartStream(st);
  if (pe != paNoError) {
    ssae_cli_error(CMD, "cannot start device '%s': %s", di->name,
                   Pa_GetErrorText(pe));
    if (st) Pa_CloseStream(st);
    ssae_engine_free(l.e);
    ssae_evsink_free(sink);
    Pa_Terminate();
    return SSAE_EXIT_INPUT;
  }
  fprintf(stderr, "ssae monitor: listening on '%s', %d channel(s) at %.0f Hz "
                  "(Ctrl-C stops)\n", di->name, o->channels, rate);
  int meter = o->meter && ssae_cli_stderr_tty();
  int first = 1, rc = SSAE_EXIT_OK, lost = 0;
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (!interrupted) {
    struct timespec d = {0, 100000000L};
    nanosleep(&d, NULL);
    clock_gettime(CLOCK_MONOTONIC, &now);
    double el = (double)(now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) / 1e9;
    if (Pa_IsStreamActive(st) != 1) {
      /* The device went away (unplugged, server gone). */
      ssae_cli_error(CMD, "the input device '%s' stopped; ending", di->name);
      ssae_evsink_note(sink, el, "device_lost", "the input device stopped");
      rc = SSAE_EXIT_INPUT;
      lost = 1;
      break;
    }
    if (meter) {
      meter_draw(l.e, first, el);
      first = 0;
    }
    if (o->duration > 0 && el >= o->duration) break;
  }
  if (!lost) {
    Pa_StopStream(st);
    Pa_CloseStream(st);
    Pa_Terminate();
  } else {
    /* After a device loss the callback must stop touching the engine
     * before it goes away (Dekker pair with in_cb, seq_cst). */
    atomic_store(&l.closing, 1);
    for (int k = 0; k < 100 && atomic_load(&l.in_cb); k++) {
      struct timespec d = {0, 1000000L};
      nanosleep(&d, NULL);
    }
  }
  ssae_engine_drain(l.e);
  summary(l.e, sink);
  ssae_engine_free(l.e);
  if (ssae_evsink_free(sink)) {
    ssae_cli_error(CMD, "writing the events or windows file failed");
    rc = SSAE_EXIT_INPUT;
  }
  /* The events are out; now PortAudio's own clean-up, bounded. */
  if (lost && !atomic_load(&l.in_cb)) pa_cleanup_bounded(st, 500);
  return rc;
}
#endif

int ssae_cmd_monitor(int argc, char **argv) {
  opts o;
  memset(&o, 0, sizeof o);
  o.channels = 1;
  o.meter = 1;
  o.threshold = NAN;
  o.smoothing = SSAE_DETECTOR_SMOOTHING_S;
  o.status = 10;
  o.on = SSAE_DETECTOR_ON_COUNT;
  o.off = SSAE_DETECTOR_OFF_COUNT;
  o.block = 512;
  o.backend = "auto";
  int channels_set = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEEDV()                                                   \
  do {                                                            \
    if (!v) {                                                     \
      ssae_cli_error(CMD, "%s needs a value", a);                 \
      return SSAE_EXIT_USAGE;                                     \
    }                                                             \
    i++;                                                          \
  } while (0)
    long lv;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return SSAE_EXIT_OK;
    } else if (!strcmp(a, "--model")) {
      NEEDV();
      o.model = v;
    } else if (!strcmp(a, "--device")) {
      NEEDV();
      o.device = v;
    } else if (!strcmp(a, "--list-devices")) {
      o.list = 1;
    } else if (!strcmp(a, "--channels")) {
      NEEDV();
      if (ssae_cli_parse_int(CMD, a, v, 1, 256, &lv)) return SSAE_EXIT_USAGE;
      o.channels = (int)lv;
      channels_set = 1;
    } else if (!strcmp(a, "--rate")) {
      NEEDV();
      if (ssae_cli_parse_double(CMD, a, v, 1000, 768000, &o.rate))
        return SSAE_EXIT_USAGE;
    } else if (!strcmp(a, "--input")) {
      NEEDV();
      o.input = v;
    } else if (!strcmp(a, "--channel")) {
      NEEDV();
      ssae_err err;
      if (ssae_audio_parse_channel(v, &o.channel, &err)) {
        ssae_cli_error(CMD, "--channel: %s", err.msg);
        return SSAE_EXIT_USAGE;
      }
    } else if (!strcmp(a, "--realtime")) {
      o.realtime = 1;
    } else if (!strcmp(a, "--events")) {
      NEEDV();
      o.events = v;
    } else if (!strcmp(a, "--windows")) {
      NEEDV();
      o.windows = v;
    } else if (!strcmp(a, "--duration")) {
      NEEDV();
      if (ssae_cli_parse_double(CMD, a, v, 0.001, 1e9, &o.duration))
        return SSAE_EXIT_USAGE;
    } else if (!strcmp(a, "--threshold")) {
      NEEDV();
      if (ssae_cli_parse_double(CMD, a, v, 1e-30, 1e30, &o.threshold))
        return SSAE_EXIT_USAGE;
    } else if (!strcmp(a, "--smoothing")) {
      NEEDV();
      if (ssae_cli_parse_double(CMD, a, v, 0, 3600, &o.smoothing))
        return SSAE_EXIT_USAGE;
    } else if (!strcmp(a, "--on")) {
      NEEDV();
      if (ssae_cli_parse_int(CMD, a, v, 1, 100000, &o.on)) return SSAE_EXIT_USAGE;
    } else if (!strcmp(a, "--off")) {
      NEEDV();
      if (ssae_cli_parse_int(CMD, a, v, 1, 100000, &o.off)) return SSAE_EXIT_USAGE;
    } else if (!strcmp(a, "--status")) {
      NEEDV();
      if (ssae_cli_parse_double(CMD, a, v, 0, 1e9, &o.status)) return SSAE_EXIT_USAGE;
    } else if (!strcmp(a, "--backend")) {
      NEEDV();
      if (strcmp(v, "auto") && strcmp(v, "cpu") && strcmp(v, "cuda")) {
        ssae_cli_error(CMD, "--backend must be auto, cpu or cuda (got '%s')", v);
        return SSAE_EXIT_USAGE;
      }
      o.backend = v;
    } else if (!strcmp(a, "--block")) {
      NEEDV();
      if (ssae_cli_parse_int(CMD, a, v, 1, 65536, &o.block)) return SSAE_EXIT_USAGE;
    } else if (!strcmp(a, "--no-meter")) {
      o.meter = 0;
    } else {
      ssae_cli_error(CMD, "unknown option '%s' (see ssae monitor --help)", a);
      return SSAE_EXIT_USAGE;
    }
#undef NEEDV
  }
  if (o.realtime && !o.input) {
    ssae_cli_error(CMD, "--realtime needs --input FILE");
    return SSAE_EXIT_USAGE;
  }
  if (o.input && (o.device || o.list || channels_set || o.rate > 0)) {
    ssae_cli_error(CMD, "--input cannot be combined with --device, "
                        "--list-devices, --channels or --rate");
    return SSAE_EXIT_USAGE;
  }
  if (o.list) {
#if SSAE_HAVE_PORTAUDIO
    return list_devices();
#else
    ssae_cli_error(CMD, "this ssae was built without PortAudio: no devices "
                        "(--input FILE still works)");
    return SSAE_EXIT_INPUT;
#endif
  }
#if !SSAE_HAVE_PORTAUDIO
  if (!o.input) {
    ssae_cli_error(CMD, "this ssae was built without PortAudio: live input is "
                        "not available (--input FILE still works)");
    return SSAE_EXIT_INPUT;
  }
#endif

  ssae_err err;
  ssae_model *m = ssae_model_open(o.model, &err);
  if (!m) {
    ssae_cli_error(CMD, "%s", err.msg);
    return SSAE_EXIT_INPUT;
  }
  if (!isfinite(o.threshold) && !isfinite(m->threshold))
    fprintf(stderr, "ssae monitor: the model has no threshold and none was "
                    "given (--threshold): no alarms, scores only\n");
  ssae_engine_cfg ecfg;
  ssae_engine_cfg_default(&ecfg);
  ecfg.backend = o.backend;
  ecfg.status_every_s = o.status;
  ecfg.params.threshold = o.threshold;
  ecfg.params.smoothing_s = o.smoothing;
  ecfg.params.on_count = (int)o.on;
  ecfg.params.off_count = (int)o.off;
  ssae_evsink_cfg scfg;
  memset(&scfg, 0, sizeof scfg);
  scfg.events_path = o.events;
  scfg.events_stdout = !ssae_cli_stdout_tty();
  scfg.windows_path = o.windows;
  scfg.hop_length = m->feat.hop_length;
  scfg.sample_rate = m->feat.sample_rate;
  scfg.frames = m->feat.frames;
  scfg.prog = "ssae monitor";

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);

  int rc;
  if (o.input)
    rc = run_file(&o, m, &ecfg, &scfg);
  else
#if SSAE_HAVE_PORTAUDIO
    rc = run_live(&o, m, &ecfg, &scfg);
#else
    rc = SSAE_EXIT_INPUT;
#endif
  ssae_model_free(m);
  return rc;
}
