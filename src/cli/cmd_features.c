/* ssae features: log-mel frames of audio files as NumPy .npy arrays. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "cli_opts.h"
#include "ssae_audio.h"
#include "ssae_logmel.h"
#include "ssae_model.h"
#include "ssae_npy.h"

static const char *const CMD = "features";

typedef struct opts {
  const char *output, *model;
  int channel, strict;
  ssae_feat_cfg feat;
} opts;

#define FEAT(flag, key, mv, text)                                                           \
  {.kind = SSAE_CLI_CUSTOM, .name = flag, .offset = offsetof(opts, feat), .metavar = mv,   \
   .help = text, .parse = ssae_cli_parse_feature, .show = ssae_cli_show_feature, .arg = key}

static const ssae_cli_opt options[] = {
    {.kind = SSAE_CLI_STRING, .name = "--output", .short_name = 'o',
     .offset = offsetof(opts, output),
     .metavar = "PATH", .help = "output file (one input) or directory", .def = ""},
    {.kind = SSAE_CLI_STRING, .name = "--model", .offset = offsetof(opts, model), .metavar = "M",
     .help = "take the feature settings of model M (the options below override them); "
             "without it, the SPEC's settings",
     .def = ""},
    {.kind = SSAE_CLI_CUSTOM, .name = "--channel", .offset = offsetof(opts, channel),
     .metavar = "N|mix", .help = "channel index from 0, or the mean of all channels",
     .parse = ssae_cli_parse_channel, .show = ssae_cli_show_channel},
    FEAT("--sample-rate", "sample_rate", "HZ", "resample to this rate first"),
    FEAT("--n-fft", "n_fft", "N", "frame length = FFT size"),
    FEAT("--hop", "hop_length", "N", "samples between frames"),
    FEAT("--n-mels", "n_mels", "N", "mel bands"),
    FEAT("--fmin", "fmin", "HZ", "lowest band edge"),
    {.kind = SSAE_CLI_CUSTOM, .name = "--fmax", .offset = offsetof(opts, feat), .metavar = "HZ",
     .help = "highest band edge", .def = "sample-rate/2", .parse = ssae_cli_parse_feature,
     .arg = "fmax"},
    FEAT("--pad-mode", "pad_mode", "reflect|constant", "centre padding"),
    FEAT("--mel-scale", "mel_scale", "slaney|htk", "mel scale"),
    FEAT("--mel-norm", "mel_norm", "slaney|none", "mel filter normalisation"),
    FEAT("--frames", "frames", "N", "frames per window, for the length check"),
    {.kind = SSAE_CLI_FLAG, .name = "--strict", .offset = offsetof(opts, strict),
     .help = "a file whose data chunk is shorter than its header says is an error, not a "
             "warning"},
    {0}};

static const ssae_cli_cmd command = {
    .name = "features",
    .usage = "usage: ssae features [options] FILE -o OUT.npy\n"
             "       ssae features [options] FILE|DIR... -o OUTDIR",
    .about = "Writes the log-mel frames of each file (T x n_mels, float32, C order) as a\n"
             "NumPy .npy file: numpy.load(OUT) gives the array. With several inputs or a\n"
             "directory, OUTDIR (created when missing) gets one NAME.npy per input file.\n"
             "A file that gives fewer frames than one model window (--frames, 5: at least\n"
             "(frames-1)*hop samples, 0.128 s at the defaults) is refused as too short.",
    .epilogue = "Exit status: 0 all files written, 1 some file failed (the others are still\n"
                "written), 2 usage error.",
    .opts = options,
    .positional = 1,
};

/* OUTDIR/NAME.npy where NAME is the input's file name without extension. */
static char *out_name(const char *dir, const char *in) {
  const char *base = strrchr(in, '/');
  base = base ? base + 1 : in;
  const char *dot = strrchr(base, '.');
  size_t stem = dot && dot != base ? (size_t)(dot - base) : strlen(base);
  size_t len = strlen(dir) + stem + 6;
  char *p = malloc(len);
  if (p) snprintf(p, len, "%s/%.*s.npy", dir, (int)stem, base);
  return p;
}

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Returns 0 when written, -1 with the reason in err. */
static int one_file(const ssae_feat_cfg *cfg, int channel, int strict, const char *in,
                    const char *out, size_t *frames_out, ssae_err *err) {
  ssae_audio a;
  ssae_audio_opts ao = {.strict = strict};
  if (ssae_audio_load_opts(in, channel, cfg->sample_rate, &ao, &a, err)) return -1;
  if (a.warning.msg[0]) ssae_cli_error(CMD, "warning: %s", a.warning.msg);
  float *f = NULL;
  size_t nf = 0;
  int rc = ssae_logmel_compute(cfg, a.data, a.frames, &f, &nf, err);
  if (rc) ssae_err_prefix(err, "%s", in);
  if (!rc && nf < (size_t)cfg->frames) {
    size_t need = (size_t)(cfg->frames - 1) * (size_t)cfg->hop_length +
                  (cfg->center ? 0 : (size_t)cfg->n_fft);
    if (need == 0) need = 1;
    rc = ssae_err_set(err,
                      "%s: file shorter than one window: %zu samples at %d Hz (%.3f s) give "
                      "%zu frame%s, a window needs %d (at least %zu samples, %.3f s)",
                      in, a.frames, a.rate, (double)a.frames / a.rate, nf, nf == 1 ? "" : "s",
                      cfg->frames, need, (double)need / a.rate);
  }
  if (!rc) {
    size_t shape[2] = {nf, (size_t)cfg->n_mels};
    rc = ssae_npy_write_f32(out, f, shape, 2, err);
  }
  free(f);
  ssae_audio_release(&a);
  *frames_out = nf;
  return rc;
}

/* Features of every input; 0, or 1 when some file failed. */
static int run(const opts *o, char **inputs, int n_in) {
  ssae_err err = {{0}};
  const ssae_feat_cfg *cfg = &o->feat;
  const char *out = o->output;
  if (n_in == 0 || !out)
    return ssae_cli_usage_error(&command, "%s",
                                n_in == 0 ? "no input file given" : "no output given: -o OUT.npy");
  if (ssae_feat_cfg_validate(cfg, &err)) {
    ssae_cli_error(CMD, "%s", err.msg);
    return SSAE_EXIT_USAGE;
  }
  ssae_cli_warn_empty_bands(CMD, cfg);
  char **paths = NULL;
  size_t n_paths = 0;
  if (ssae_cli_collect(inputs, n_in, &paths, &n_paths, &err)) {
    ssae_cli_error(CMD, "%s", err.msg);
    return SSAE_EXIT_INPUT;
  }
  /* One plain input file writes OUT itself; anything else fills a folder. */
  int to_dir = n_in > 1 || is_dir(inputs[0]) || is_dir(out);
  if (n_paths == 0) {
    ssae_cli_error(CMD, "no audio files found in the given directories");
    ssae_cli_free_paths(paths, n_paths);
    return SSAE_EXIT_INPUT;
  }
  if (to_dir && !is_dir(out) && mkdir(out, 0777) != 0) {
    ssae_cli_error(CMD, "%s: cannot create the output directory: %s", out, strerror(errno));
    ssae_cli_free_paths(paths, n_paths);
    return SSAE_EXIT_INPUT;
  }
  const int tty = ssae_cli_stderr_tty(), chatty = n_paths > 1;
  char **written = calloc(n_paths, sizeof *written);
  size_t failed = 0;
  for (size_t i = 0; i < n_paths && written; i++) {
    const char *in = paths[i];
    char *dst = to_dir ? out_name(out, in) : strdup(out);
    size_t nf = 0;
    int rc;
    if (!dst) {
      rc = ssae_err_set(&err, "%s: out of memory", in);
    } else {
      rc = 0;
      for (size_t j = 0; j < i && !rc; j++)
        if (written[j] && !strcmp(written[j], dst))
          rc = ssae_err_set(&err, "%s: output %s was already written for %s; rename one of "
                                  "the inputs", in, dst, paths[j]);
      if (!rc) rc = one_file(cfg, o->channel, o->strict, in, dst, &nf, &err);
    }
    if (tty && chatty) fprintf(stderr, "\r\033[K");
    if (rc) {
      ssae_cli_error(CMD, "%s", err.msg);
      failed++;
      free(dst);
    } else {
      written[i] = dst;
      if (chatty && !tty)
        fprintf(stderr, "ssae features: [%zu/%zu] %s -> %s (%zu frames)\n", i + 1, n_paths,
                in, dst, nf);
    }
    if (tty && chatty) fprintf(stderr, "ssae features: %zu/%zu files", i + 1, n_paths);
  }
  if (tty && chatty) fprintf(stderr, "\r\033[K");
  if (!written) {
    ssae_cli_error(CMD, "out of memory");
    failed = n_paths;
  }
  if (chatty)
    fprintf(stderr, "ssae features: %zu of %zu files written%s\n", n_paths - failed, n_paths,
            failed ? ", some failed (see above)" : "");
  for (size_t i = 0; written && i < n_paths; i++) free(written[i]);
  free(written);
  ssae_cli_free_paths(paths, n_paths);
  return failed ? SSAE_EXIT_INPUT : SSAE_EXIT_OK;
}

/* The options; with --model, the model's feature settings are the
 * defaults that the other options override, wherever --model stands. */
static int parse(int argc, char **argv, opts *o, ssae_cli_args *args) {
  memset(o, 0, sizeof *o);
  ssae_feat_cfg_default(&o->feat);
  int rc = ssae_cli_parse(&command, argc, argv, o, args);
  if (rc != SSAE_CLI_CONTINUE || !o->model) return rc;
  ssae_err err = {{0}};
  ssae_model *m = ssae_model_open(o->model, &err);
  ssae_cli_args_free(args);
  if (!m) {
    ssae_cli_error(CMD, "--model %s: %s", o->model, err.msg);
    return SSAE_EXIT_INPUT;
  }
  memset(o, 0, sizeof *o);
  o->feat = m->feat;
  ssae_model_free(m);
  return ssae_cli_parse(&command, argc, argv, o, args);
}

int ssae_cmd_features(int argc, char **argv) {
  opts o;
  ssae_cli_args args;
  int rc = parse(argc, argv, &o, &args);
  if (rc != SSAE_CLI_CONTINUE) return rc;
  rc = run(&o, args.pos, args.n_pos);
  ssae_cli_args_free(&args);
  return rc;
}
