/* ssae features: log-mel frames of audio files as NumPy .npy arrays. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "ssae_audio.h"
#include "ssae_logmel.h"
#include "ssae_model.h"
#include "ssae_npy.h"

static const char *const CMD = "features";

static void usage(FILE *f) {
  fprintf(f,
          "usage: ssae features [options] FILE -o OUT.npy\n"
          "       ssae features [options] FILE|DIR... -o OUTDIR\n\n"
          "Writes the log-mel frames of each file (T x n_mels, float32, C order) as a\n"
          "NumPy .npy file: numpy.load(OUT) gives the array. With several inputs or a\n"
          "directory, OUTDIR (created when missing) gets one NAME.npy per input file.\n"
          "A file that gives fewer frames than one model window (--frames, 5: at least\n"
          "(frames-1)*hop samples, 0.128 s at the defaults) is refused as too short.\n\n"
          "options:\n"
          "  -o, --output PATH     output file (one input) or directory\n"
          "  --model M             take the feature settings of model M (the options\n"
          "                        below override them); without it, the SPEC defaults\n"
          "  --channel N|mix       channel index from 0 (default 0) or the mean of all\n"
          "  --sample-rate HZ      resample to this rate first (default 16000)\n"
          "  --n-fft N             frame length = FFT size (default 1024)\n"
          "  --hop N               samples between frames (default 512)\n"
          "  --n-mels N            mel bands (default 64)\n"
          "  --fmin HZ, --fmax HZ  band edges (default 0 and sample-rate/2)\n"
          "  --pad-mode reflect|constant   centre padding (default reflect)\n"
          "  --mel-scale slaney|htk        (default slaney)\n"
          "  --mel-norm slaney|none        (default slaney)\n"
          "  --frames N            frames per window, for the length check (default 5)\n"
          "  -h, --help            this text\n\n"
          "Exit status: 0 all files written, 1 some file failed (the others are still\n"
          "written), 2 usage error.\n");
}

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
static int one_file(const ssae_feat_cfg *cfg, int channel, const char *in, const char *out,
                    size_t *frames_out, ssae_err *err) {
  ssae_audio a;
  if (ssae_audio_load(in, channel, cfg->sample_rate, &a, err)) return -1;
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

static int parse_choice(const char *flag, const char *v, const char *a, const char *b, int *out) {
  if (!strcmp(v, a)) *out = 0;
  else if (!strcmp(v, b)) *out = 1;
  else {
    ssae_cli_error(CMD, "%s wants %s or %s, not '%s'", flag, a, b, v);
    return -1;
  }
  return 0;
}

int ssae_cmd_features(int argc, char **argv) {
  ssae_feat_cfg cfg;
  ssae_feat_cfg_default(&cfg);
  ssae_err err = {{0}};
  int channel = 0;
  const char *out = NULL;
  /* The model's settings first, so that the options below override them. */
  for (int i = 1; i + 1 < argc; i++) {
    if (!strcmp(argv[i], "--")) break;
    if (strcmp(argv[i], "--model")) continue;
    ssae_model *m = ssae_model_open(argv[i + 1], &err);
    if (!m) {
      ssae_cli_error(CMD, "--model %s: %s", argv[i + 1], err.msg);
      return SSAE_EXIT_INPUT;
    }
    cfg = m->feat;
    ssae_model_free(m);
  }
  char **inputs = calloc((size_t)argc + 1, sizeof *inputs);
  int n_in = 0;
  if (!inputs) {
    ssae_cli_error(CMD, "out of memory");
    return SSAE_EXIT_INPUT;
  }
#define USAGE_FAIL()          \
  do {                        \
    free(inputs);             \
    return SSAE_EXIT_USAGE;   \
  } while (0)
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      free(inputs);
      return SSAE_EXIT_OK;
    }
    if (a[0] != '-' || !strcmp(a, "-")) {
      inputs[n_in++] = argv[i];
      continue;
    }
    if (!strcmp(a, "--")) {
      while (++i < argc) inputs[n_in++] = argv[i];
      break;
    }
    static const char *const known[] = {"-o", "--output", "--model", "--channel", "--sample-rate",
                                        "--n-fft", "--hop", "--n-mels", "--frames", "--fmin",
                                        "--fmax", "--pad-mode", "--mel-scale", "--mel-norm",
                                        NULL};
    int is_known = 0;
    for (int k = 0; known[k]; k++) is_known |= !strcmp(a, known[k]);
    if (!is_known) {
      ssae_cli_error(CMD, "unknown option '%s' (ssae features --help)", a);
      USAGE_FAIL();
    }
    if (i + 1 >= argc) {
      ssae_cli_error(CMD, "%s needs a value (ssae features --help)", a);
      USAGE_FAIL();
    }
    const char *v = argv[++i];
    long l;
    double d;
    int c;
    if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
      out = v;
    } else if (!strcmp(a, "--model")) {
      /* read above */
    } else if (!strcmp(a, "--channel")) {
      if (ssae_audio_parse_channel(v, &channel, &err)) {
        ssae_cli_error(CMD, "--channel: %s", err.msg);
        USAGE_FAIL();
      }
      if (channel == SSAE_CHANNEL_ALL) {
        ssae_cli_error(CMD, "--channel all is not supported here: give an index or mix");
        USAGE_FAIL();
      }
    } else if (!strcmp(a, "--sample-rate")) {
      if (ssae_cli_parse_int(CMD, a, v, 1000, 768000, &l)) USAGE_FAIL();
      cfg.sample_rate = (int)l;
    } else if (!strcmp(a, "--n-fft")) {
      if (ssae_cli_parse_int(CMD, a, v, 16, 65536, &l)) USAGE_FAIL();
      cfg.n_fft = (int)l;
    } else if (!strcmp(a, "--hop")) {
      if (ssae_cli_parse_int(CMD, a, v, 1, 65536, &l)) USAGE_FAIL();
      cfg.hop_length = (int)l;
    } else if (!strcmp(a, "--n-mels")) {
      if (ssae_cli_parse_int(CMD, a, v, 1, 4096, &l)) USAGE_FAIL();
      cfg.n_mels = (int)l;
    } else if (!strcmp(a, "--frames")) {
      if (ssae_cli_parse_int(CMD, a, v, 1, 256, &l)) USAGE_FAIL();
      cfg.frames = (int)l;
    } else if (!strcmp(a, "--fmin")) {
      if (ssae_cli_parse_double(CMD, a, v, 0, 384000, &d)) USAGE_FAIL();
      cfg.fmin = d;
    } else if (!strcmp(a, "--fmax")) {
      if (ssae_cli_parse_double(CMD, a, v, 0, 384000, &d)) USAGE_FAIL();
      cfg.fmax = d;
    } else if (!strcmp(a, "--pad-mode")) {
      if (parse_choice(a, v, "reflect", "constant", &c)) USAGE_FAIL();
      cfg.pad_mode = c ? SSAE_PAD_CONSTANT : SSAE_PAD_REFLECT;
    } else if (!strcmp(a, "--mel-scale")) {
      if (parse_choice(a, v, "slaney", "htk", &c)) USAGE_FAIL();
      cfg.mel_scale = c ? SSAE_MEL_HTK : SSAE_MEL_SLANEY;
    } else if (!strcmp(a, "--mel-norm")) {
      if (parse_choice(a, v, "slaney", "none", &c)) USAGE_FAIL();
      cfg.mel_norm = c ? SSAE_MELNORM_NONE : SSAE_MELNORM_SLANEY;
    } else {
      ssae_cli_error(CMD, "unknown option '%s' (ssae features --help)", a);
      USAGE_FAIL();
    }
  }
  if (n_in == 0 || !out) {
    ssae_cli_error(CMD, "%s (ssae features --help)",
                   n_in == 0 ? "no input file given" : "no output given: -o OUT.npy");
    USAGE_FAIL();
  }
  if (ssae_feat_cfg_validate(&cfg, &err)) {
    ssae_cli_error(CMD, "%s", err.msg);
    USAGE_FAIL();
  }
  char **paths = NULL;
  size_t n_paths = 0;
  if (ssae_cli_collect(inputs, n_in, &paths, &n_paths, &err)) {
    ssae_cli_error(CMD, "%s", err.msg);
    free(inputs);
    return SSAE_EXIT_INPUT;
  }
  /* One plain input file writes OUT itself; anything else fills a folder. */
  int to_dir = n_in > 1 || is_dir(inputs[0]) || is_dir(out);
  free(inputs);
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
      if (!rc) rc = one_file(&cfg, channel, in, dst, &nf, &err);
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
#undef USAGE_FAIL
}
