/* ssae report: one picture of one recording, read at a glance. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ssae_audio.h"
#include "ssae_backend.h"
#include "ssae_config.h"
#include "ssae_detector.h"
#include "ssae_filescore.h"
#include "ssae_model.h"
#include "ssae_plot.h"
#include "ssae_silence.h"

static const char *const CMD = "report";

static void usage(FILE *f) {
  fprintf(f,
          "usage: ssae report [options] FILE -o OUT.png|OUT.svg\n\n"
          "Draws one recording: its log-mel spectrogram as a heat map over time\n"
          "(frequency in Hz at the mel positions, colour in dB), and under it on the same\n"
          "time axis the window scores, their smoothed line, the threshold and the alarm\n"
          "spans, as the live monitor would raise them (same smoothing and hysteresis).\n"
          "The title gives the file, the verdict (file score > threshold), the scores and\n"
          "the number of alarm spans; the same summary goes to stdout.\n\n"
          "options:\n"
          "  -o, --output OUT   picture to write; .png or .svg\n"
          "  --model M          model file (default: the model that ships with ssae)\n"
          "  --channel N|mix    channel of a multi-channel file (default 0)\n"
          "  --backend auto|cpu|cuda  (default auto)\n"
          "  --threshold X      use X instead of the model's threshold\n"
          "  --smoothing S      smoothing time constant in seconds (default "
          SSAE_DETECTOR_TEXT(SSAE_DETECTOR_SMOOTHING_S) ")\n"
          "  --on N, --off N    alarm on after N smoothed scores above the threshold,\n"
          "                     off after N below (defaults "
          SSAE_DETECTOR_TEXT(SSAE_DETECTOR_ON_COUNT) " and "
          SSAE_DETECTOR_TEXT(SSAE_DETECTOR_OFF_COUNT) ")\n"
          "  --size WxH         picture size in pixels (default 1200x800)\n"
          "  -h, --help         this text\n\n"
          "Exit status: 0 written, 1 the file or model could not be read or the picture\n"
          "not written, 2 usage error.\n");
}

#if SSAE_HAVE_CAIRO
static const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}
#endif

int ssae_cmd_report(int argc, char **argv) {
  const char *in = NULL, *out = NULL, *model_path = NULL, *backend_name = "auto";
  int channel = 0, width = 1200, height = 800;
  long on = SSAE_DETECTOR_ON_COUNT, off = SSAE_DETECTOR_OFF_COUNT;
  double threshold = NAN, smoothing = SSAE_DETECTOR_SMOOTHING_S;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return SSAE_EXIT_OK;
    }
    if (a[0] != '-' || !strcmp(a, "-")) {
      if (in) {
        ssae_cli_error(CMD, "one FILE at a time ('%s' and '%s')", in, a);
        return SSAE_EXIT_USAGE;
      }
      in = a;
      continue;
    }
    if (i + 1 >= argc) {
      ssae_cli_error(CMD, "%s: unknown option or missing value (see ssae report --help)", a);
      return SSAE_EXIT_USAGE;
    }
    const char *v = argv[++i];
    ssae_err err;
    if (!strcmp(a, "-o") || !strcmp(a, "--output")) out = v;
    else if (!strcmp(a, "--model")) model_path = v;
    else if (!strcmp(a, "--backend")) backend_name = v;
    else if (!strcmp(a, "--channel")) {
      if (ssae_audio_parse_channel(v, &channel, &err) || channel == SSAE_CHANNEL_ALL) {
        ssae_cli_error(CMD, "--channel wants a channel index from 0 or mix, not '%s'", v);
        return SSAE_EXIT_USAGE;
      }
    } else if (!strcmp(a, "--threshold")) {
      if (ssae_cli_parse_double(CMD, a, v, 1e-30, INFINITY, &threshold)) return SSAE_EXIT_USAGE;
    } else if (!strcmp(a, "--smoothing")) {
      if (ssae_cli_parse_double(CMD, a, v, 0, 3600, &smoothing)) return SSAE_EXIT_USAGE;
    } else if (!strcmp(a, "--on")) {
      if (ssae_cli_parse_int(CMD, a, v, 1, 100000, &on)) return SSAE_EXIT_USAGE;
    } else if (!strcmp(a, "--off")) {
      if (ssae_cli_parse_int(CMD, a, v, 1, 100000, &off)) return SSAE_EXIT_USAGE;
    } else if (!strcmp(a, "--size")) {
      if (sscanf(v, "%dx%d", &width, &height) != 2 || width < 400 || height < 300 ||
          width > 16000 || height > 16000) {
        ssae_cli_error(CMD, "--size wants WxH from 400x300 to 16000x16000, not '%s'", v);
        return SSAE_EXIT_USAGE;
      }
    } else {
      ssae_cli_error(CMD, "unknown option '%s' (see ssae report --help)", a);
      return SSAE_EXIT_USAGE;
    }
  }
  if (!in || !out) {
    ssae_cli_error(CMD, "give one FILE and -o OUT.png (see ssae report --help)");
    return SSAE_EXIT_USAGE;
  }
  const char *dot = strrchr(out, '.');
  if (!dot || (strcmp(dot, ".png") && strcmp(dot, ".svg") && strcmp(dot, ".PNG") &&
               strcmp(dot, ".SVG"))) {
    ssae_cli_error(CMD, "%s: the picture's name must end in .png or .svg", out);
    return SSAE_EXIT_USAGE;
  }
#if !SSAE_HAVE_CAIRO
  (void)model_path;
  (void)backend_name;
  ssae_cli_error(CMD, "this ssae was built without cairo (libcairo2-dev), so it cannot draw "
                      "pictures; install it and rebuild (meson setup --reconfigure)");
  return SSAE_EXIT_INPUT;
#else
  ssae_err err;
  ssae_model *m = ssae_model_open(model_path, &err);
  if (!m) {
    ssae_cli_error(CMD, "%s", err.msg);
    return SSAE_EXIT_INPUT;
  }
  ssae_backend *b = ssae_backend_new(m, backend_name, 256, &err);
  if (!b) {
    ssae_cli_error(CMD, "%s", err.msg);
    ssae_model_free(m);
    return SSAE_EXIT_INPUT;
  }
  if (isnan(threshold)) threshold = m->threshold;
  ssae_file_scores fs;
  int rc = SSAE_EXIT_OK;
  float *smoothed = NULL;
  unsigned char *alarm = NULL;
  if (ssae_file_score(m, b, 256, in, channel, 1, &fs, &err)) {
    ssae_cli_error(CMD, "%s", err.msg);
    rc = SSAE_EXIT_INPUT;
  } else if (!(smoothed = malloc(fs.n_windows * sizeof *smoothed)) ||
             !(alarm = malloc(fs.n_windows))) {
    ssae_cli_error(CMD, "out of memory");
    rc = SSAE_EXIT_INPUT;
  } else {
    double hop_s = (double)m->feat.hop_length / m->feat.sample_rate;
    ssae_detector_params dp = {threshold, smoothing, (int)on, (int)off};
    ssae_detector_run(&dp, hop_s, fs.scores, fs.silent, fs.n_windows, smoothed, alarm);
    char sub[512], ch[32];
    if (channel == SSAE_CHANNEL_MIX) snprintf(ch, sizeof ch, "mix of %d", fs.file_channels);
    else snprintf(ch, sizeof ch, "%d of %d", channel, fs.file_channels);
    snprintf(sub, sizeof sub,
             "model: %s   channel %s   %d Hz file, %.2f s   backend %s   smoothing %g s, "
             "alarm on after %ld, off after %ld windows",
             model_path ? base_name(model_path) : "default", ch, fs.file_rate, fs.seconds,
             ssae_backend_name(b), smoothing, on, off);
    ssae_report_data d = {0};
    d.name = base_name(in);
    d.frames = fs.frames;
    d.n_frames = fs.n_frames;
    d.n_mels = fs.n_mels;
    d.sample_rate = m->feat.sample_rate;
    d.hop_length = m->feat.hop_length;
    d.fmin = m->feat.fmin;
    d.fmax = m->feat.fmax > 0 ? m->feat.fmax : m->feat.sample_rate / 2.0;
    d.htk = m->feat.mel_scale == SSAE_MEL_HTK;
    d.seconds = fs.seconds;
    d.scores = fs.scores;
    d.smoothed = smoothed;
    d.alarm = alarm;
    d.n_windows = fs.n_windows;
    d.frames_per_window = m->d.frames;
    d.window_t0 = ssae_window_time(&m->feat, 0);
    d.threshold = threshold;
    d.file_score = fs.file_score;
    d.subtitle = sub;
    if (ssae_report_draw(&d, out, width, height, NULL, &err)) {
      ssae_cli_error(CMD, "%s", err.msg);
      rc = SSAE_EXIT_INPUT;
    } else {
      /* The summary: verdict and the alarm spans in seconds, as the
       * monitor's events time them (doc/SPEC.md, section 4): from the
       * window that turned the alarm on to the one that turned it off. */
      int anomalous = isfinite(threshold) && fs.file_score > threshold;
      printf("%s: %s (file score %.6g, threshold %.6g)\n", in,
             isfinite(threshold) ? (anomalous ? "anomaly" : "normal") : "no threshold",
             fs.file_score, threshold);
      size_t spans = 0;
      for (size_t i = 0; i < fs.n_windows;) {
        if (!alarm[i]) {
          i++;
          continue;
        }
        size_t j = i;
        while (j < fs.n_windows && alarm[j]) j++;
        if (j < fs.n_windows)
          printf("  alarm %.6f s .. %.6f s (windows %zu .. %zu)\n",
                 ssae_window_time(&m->feat, i), ssae_window_time(&m->feat, j), i, j);
        else
          printf("  alarm %.6f s .. end of file (windows %zu ..)\n",
                 ssae_window_time(&m->feat, i), i);
        spans++;
        i = j;
      }
      if (!spans) printf("  no alarm\n");
      printf("picture: %s\n", out);
    }
  }
  free(smoothed);
  free(alarm);
  ssae_file_scores_release(&fs);
  ssae_backend_free(b);
  ssae_model_free(m);
  ssae_plot_cleanup();
  return rc;
#endif
}
