/* ssae report: one picture of one recording, read at a glance. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_opts.h"
#include "ssae_audio.h"
#include "ssae_backend.h"
#include "ssae_config.h"
#include "ssae_detector.h"
#include "ssae_filescore.h"
#include "ssae_model.h"
#include "ssae_plot.h"
#include "ssae_reference.h"
#include "ssae_report.h"
#include "ssae_silence.h"

static const char *const CMD = "report";

typedef struct opts {
  const char *output, *model, *backend;
  int channel, on, off, strict, device;
  int reference; /* also the spectrum-only reference's scores */
  int size[2]; /* width, height */
  double threshold, smoothing;
} opts;

static int parse_size(const ssae_cli_opt *o, const char *v, void *dest, ssae_err *err) {
  (void)o;
  int *wh = dest;
  char tail;
  if (sscanf(v, "%dx%d%c", &wh[0], &wh[1], &tail) != 2 || wh[0] < 400 || wh[1] < 300 ||
      wh[0] > 16000 || wh[1] > 16000)
    return ssae_err_set(err, "wants WxH from 400x300 to 16000x16000, not '%s'", v);
  return 0;
}

static void show_size(const ssae_cli_opt *o, const void *dest, char *buf, size_t len) {
  (void)o;
  const int *wh = dest;
  snprintf(buf, len, "%dx%d", wh[0], wh[1]);
}

static const ssae_cli_opt options[] = {
    {.kind = SSAE_CLI_STRING, .name = "--output", .short_name = 'o',
     .offset = offsetof(opts, output), .metavar = "OUT",
     .help = "picture to write; .png or .svg", .def = ""},
    {.kind = SSAE_CLI_STRING, .name = "--model", .offset = offsetof(opts, model), .metavar = "M",
     .help = "model file", .def = "the model that ships with ssae"},
    {.kind = SSAE_CLI_CUSTOM, .name = "--channel", .offset = offsetof(opts, channel),
     .metavar = "N|mix", .help = "channel of a multi-channel file",
     .parse = ssae_cli_parse_channel, .show = ssae_cli_show_channel},
    {.kind = SSAE_CLI_CHOICE, .name = "--backend", .offset = offsetof(opts, backend),
     .choices = ssae_cli_backends, .help = "where the model runs"},
    {.kind = SSAE_CLI_INT, .name = "--device", .offset = offsetof(opts, device), .metavar = "N",
     .min = 0, .max = 255, .help = "CUDA device of the CUDA backend (--backend cuda or auto)",
     .def = "0"},
    {.kind = SSAE_CLI_DOUBLE, .name = "--threshold", .offset = offsetof(opts, threshold),
     .metavar = "X", .min = SSAE_CLI_THRESHOLD_MIN,
     .max = SSAE_CLI_THRESHOLD_MAX,
     .help = "(above 0) use X instead of the model's threshold", .def = "the model's"},
    {.kind = SSAE_CLI_DOUBLE, .name = "--smoothing", .offset = offsetof(opts, smoothing),
     .metavar = "S", .min = 0, .max = 3600, .help = "smoothing time constant in seconds"},
    {.kind = SSAE_CLI_INT, .name = "--on", .offset = offsetof(opts, on), .metavar = "N",
     .min = 1, .max = 100000, .help = "alarm on after N smoothed scores above the threshold"},
    {.kind = SSAE_CLI_INT, .name = "--off", .offset = offsetof(opts, off), .metavar = "N",
     .min = 1, .max = 100000, .help = "alarm off after N smoothed scores below it"},
    {.kind = SSAE_CLI_CUSTOM, .name = "--size", .offset = offsetof(opts, size), .metavar = "WxH",
     .help = "picture size in pixels", .parse = parse_size, .show = show_size},
    {.kind = SSAE_CLI_FLAG, .name = "--strict", .offset = offsetof(opts, strict),
     .help = "a file whose data chunk is shorter than its header says is an error, not a "
             "warning"},
    {.kind = SSAE_CLI_FLAG, .name = "--reference", .offset = offsetof(opts, reference),
     .help = "also print the spectrum-only reference's file score and its highest window "
             "(a Gaussian of the window's mean spectrum that ssae train stores in the model; "
             "about 1 on recordings like the training ones)"},
    {0}};

static const ssae_cli_cmd command = {
    .name = "report",
    .usage = "usage: ssae report [options] FILE -o OUT.png|OUT.svg",
    .about = "Draws one recording: its log-mel spectrogram as a heat map over time\n"
             "(frequency in Hz at the mel positions, colour in dB), and under it on the same\n"
             "time axis the window scores, their smoothed line, the threshold and the alarm\n"
             "spans, as the live monitor would raise them (same smoothing and hysteresis).\n"
             "The title gives the file, the verdict (file score > threshold), the scores and\n"
             "the number of alarm spans; the same summary goes to stdout.",
    .epilogue = "Exit status: 0 written, 1 the file or model could not be read or the picture\n"
                "not written, 2 usage error.",
    .opts = options,
    .positional = 1,
};

#if SSAE_HAVE_CAIRO
static const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}
#endif

#if SSAE_HAVE_CAIRO
/* --reference: the reference's file score and its highest window, as a
 * second line under the network's verdict. */
static void print_reference(const ssae_model *m, const ssae_file_scores *fs) {
  ssae_reference ref;
  ssae_err err;
  int r = ssae_reference_from_model(m, &ref, &err);
  if (r) {
    printf("  reference: %s\n", r > 0 ? "none in this model (made before ssae train stored one, "
                                        "or elsewhere)" : err.msg);
    return;
  }
  float *w = malloc((fs->n_windows ? fs->n_windows : 1) * sizeof *w);
  double file = ssae_reference_file_score(&ref, fs->frames, fs->n_frames, w);
  size_t top = 0;
  for (size_t i = 1; w && i < fs->n_windows; i++)
    if (w[i] > w[top]) top = i;
  if (w)
    printf("  reference (spectrum only): file score %.6g, highest window %.6g at %.6f s "
           "(window %zu)\n", file, w[top], ssae_window_time(&m->feat, top), top);
  free(w);
  ssae_reference_release(&ref);
}
#endif

/* Scores the file, draws the picture, prints the summary. */
static int run(const opts *o, const char *in) {
  const char *out = o->output;
  const char *dot = strrchr(out, '.');
  if (!dot || (strcmp(dot, ".png") && strcmp(dot, ".svg") && strcmp(dot, ".PNG") &&
               strcmp(dot, ".SVG"))) {
    ssae_cli_error(CMD, "%s: the picture's name must end in .png or .svg", out);
    return SSAE_EXIT_USAGE;
  }
#if !SSAE_HAVE_CAIRO
  (void)in;
  ssae_cli_error(CMD, "this ssae was built without cairo (libcairo2-dev), so it cannot draw "
                      "pictures; install it and rebuild (meson setup --reconfigure)");
  return SSAE_EXIT_INPUT;
#else
  const char *model_path = o->model, *backend_name = o->backend;
  int channel = o->channel, width = o->size[0], height = o->size[1];
  long on = o->on, off = o->off;
  double threshold = o->threshold, smoothing = o->smoothing;
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
  ssae_report_opts ro = {.channel = channel, .audio = {.strict = o->strict},
                        .detector = {threshold, smoothing, (int)on, (int)off},
                        .width = width, .height = height,
                        .model_name = model_path ? base_name(model_path) : "default"};
  ssae_report rep;
  int rc = SSAE_EXIT_OK;
  if (ssae_report_make(m, b, in, out, &ro, &rep, &err)) {
    ssae_cli_error(CMD, "%s", err.msg);
    rc = SSAE_EXIT_INPUT;
  } else {
    const ssae_file_scores *fs = &rep.fs;
    const unsigned char *alarm = rep.alarm;
    threshold = rep.threshold;
    if (fs->warning.msg[0]) ssae_cli_error(CMD, "warning: %s", fs->warning.msg);
    /* The summary: verdict and the alarm spans in seconds, as the
     * monitor's events time them (doc/SPEC.md, section 4): from the
     * window that turned the alarm on to the one that turned it off. */
    int anomalous = isfinite(threshold) && fs->file_score > threshold;
    printf("%s: %s (file score %.6g, threshold %.6g)\n", in,
           isfinite(threshold) ? (anomalous ? "anomaly" : "normal") : "no threshold",
           fs->file_score, threshold);
    if (o->reference) print_reference(m, fs);
    size_t spans = 0;
    for (size_t i = 0; i < fs->n_windows;) {
      if (!alarm[i]) {
        i++;
        continue;
      }
      size_t j = i;
      while (j < fs->n_windows && alarm[j]) j++;
      if (j < fs->n_windows)
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
  ssae_report_release(&rep);
  ssae_backend_free(b);
  ssae_model_free(m);
  ssae_plot_cleanup();
  return rc;
#endif
}

int ssae_cmd_report(int argc, char **argv) {
  opts o = {.backend = "auto", .on = SSAE_DETECTOR_ON_COUNT, .off = SSAE_DETECTOR_OFF_COUNT,
            .size = {1200, 800}, .threshold = NAN, .smoothing = SSAE_DETECTOR_SMOOTHING_S};
  ssae_cli_args args;
  int rc = ssae_cli_parse(&command, argc, argv, &o, &args);
  if (rc != SSAE_CLI_CONTINUE) return rc;
  ssae_cli_one_cuda_queue(o.backend);
  if (args.n_pos > 1)
    rc = ssae_cli_usage_error(&command, "one FILE at a time ('%s' and '%s')", args.pos[0],
                              args.pos[1]);
  else if (!args.n_pos || !o.output)
    rc = ssae_cli_usage_error(&command, "give one FILE and -o OUT.png");
  else if ((rc = ssae_cli_use_device(CMD, o.device, o.backend)) == SSAE_EXIT_OK)
    rc = run(&o, args.pos[0]);
  ssae_cli_args_free(&args);
  return rc;
}
