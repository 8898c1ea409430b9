/* ssae train: trains a model on recordings of a machine running normally,
 * calibrates the decision threshold, writes the model file. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "ssae_audio.h"
#include "ssae_config.h"
#include "ssae_logmel.h"
#include "ssae_model.h"
#include "ssae_train.h"
#if SSAE_HAVE_CUDA
#include "ssae_cuda_train.h"
#endif

static const char *const CMD = "train";

static void usage(FILE *f) {
  fprintf(f,
"usage: ssae train -o MODEL [options] FILE|DIR...\n\n"
"Trains a model on recordings of a machine running normally (directories are\n"
"searched recursively), sets the decision threshold from a gamma fit of the\n"
"training files' scores, and writes MODEL (safetensors) for score, monitor,\n"
"jack and the LV2 plugin. Ctrl-C stops after the current batch and still\n"
"writes a valid model.\n\n"
"training:\n"
"  -o, --output MODEL      model file to write (checked before training)\n"
"  --epochs N              passes over the training windows (default 100)\n"
"  --batch N               windows per Adam step (default 512)\n"
"  --lr X                  Adam learning rate (default 0.001)\n"
"  --weight-decay X        L2 penalty added to the gradient, as torch (default 0)\n"
"  --seed N                initialisation, validation split, shuffling (default 0)\n"
"  --val FRAC              fraction of the files held out for validation (default 0.1)\n"
"  --patience N            stop after N epochs without a better validation loss\n"
"                          and keep the best weights (default 0: off)\n"
"  --percentile P          threshold at this quantile of the fitted gamma (default 0.9)\n"
"  --backend auto|cpu|cuda where to train (default auto: CUDA when a device is\n"
"                          present and passes a start-up self-test against the\n"
"                          CPU, else cpu)\n"
"  --threads N             CPU threads (default 0 = all cores)\n"
"  -q, --quiet             no progress output\n"
"model:\n"
"  --latent N              latent dimension L (default 32)\n"
"  --slice-latent N        per-slice latent dimension S (default 64)\n"
"features (stored in the model, used by everything that loads it):\n"
"  --channel N|mix         channel index from 0 (default 0) or the mean of all\n"
"  --sample-rate HZ        resample to this rate (default 16000)\n"
"  --n-fft N               frame length = FFT size (default 1024)\n"
"  --hop N                 samples between frames (default 512)\n"
"  --n-mels N              mel bands (default 64)\n"
"  --frames N              frames per window (default 5)\n"
"  --fmin HZ, --fmax HZ    band edges (default 0 and sample-rate/2)\n"
"  --pad-mode reflect|constant   centre padding (default reflect)\n"
"  --mel-scale slaney|htk  (default slaney)\n"
"  --mel-norm slaney|none  (default slaney)\n"
"  --power X               spectrum exponent (default 2)\n"
"  -h, --help              this text\n\n"
"Exit status: 0 model written, 1 some input failed (a model is still written\n"
"from the usable files when there are any), 2 usage error.\n");
}

/* ---- Ctrl-C ------------------------------------------------------------- */

static volatile sig_atomic_t g_stop;

static void on_sigint(int sig) {
  (void)sig;
  g_stop = 1;
  /* a second Ctrl-C ends the program at once */
  signal(SIGINT, SIG_DFL);
}

/* ---- progress ----------------------------------------------------------- */

typedef struct progress {
  int tty, quiet;
  double last_draw;
  int drawn;
  size_t windows_before; /* windows of earlier epochs */
} progress;

static void fmt_time(char *buf, size_t len, double s) {
  if (!isfinite(s) || s < 0) s = 0;
  long t = (long)(s + 0.5);
  if (t >= 3600)
    snprintf(buf, len, "%ldh%02ldm", t / 3600, t / 60 % 60);
  else if (t >= 60)
    snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
  else
    snprintf(buf, len, "%lds", t);
}

static void on_progress(const ssae_train_progress *p, void *user) {
  progress *pg = user;
  if (pg->quiet) return;
  size_t all = (size_t)(p->epoch - 1) * p->total + p->done;
  double rate = p->elapsed > 0 ? (double)all / p->elapsed : 0;
  double left = rate > 0 ? (double)((size_t)p->epochs * p->total - all) / rate : 0;
  char eta[32], val[48];
  fmt_time(eta, sizeof eta, left);
  if (isnan(p->val_loss))
    snprintf(val, sizeof val, "val -");
  else
    snprintf(val, sizeof val, "val %.5g", p->val_loss);
  if (pg->tty) {
    if (!p->epoch_end && p->elapsed - pg->last_draw < 0.1) return;
    pg->last_draw = p->elapsed;
    fprintf(stderr, "\r\033[Kepoch %d/%d %3.0f%%  loss %.5g  %s  %.0f windows/s  ETA %s",
            p->epoch, p->epochs, 100.0 * (double)p->done / (double)p->total, p->loss,
            val, rate, eta);
    pg->drawn = 1;
    if (p->epoch_end && p->epoch == p->epochs) {
      fputc('\n', stderr);
      pg->drawn = 0;
    }
    fflush(stderr);
  } else if (p->epoch_end) {
    fprintf(stderr, "epoch %d/%d loss %.6g %s %.0f windows/s ETA %s\n", p->epoch,
            p->epochs, p->loss, val, rate, eta);
  }
}

static void progress_end(progress *pg) {
  if (pg->tty && pg->drawn) fputc('\n', stderr);
  pg->drawn = 0;
}

/* ---- features of every file, in parallel -------------------------------- */

typedef struct clip {
  const char *path;
  float *frames;   /* T x n_mels */
  size_t n_frames;
  size_t n_windows;
  int ok;
  ssae_err err;
} clip;

typedef struct loader {
  clip *clips;
  size_t n;
  const ssae_feat_cfg *feat;
  int channel;
  pthread_mutex_t mu;
  size_t next;
} loader;

static void load_one(const loader *ld, clip *c) {
  ssae_audio a;
  memset(&a, 0, sizeof a);
  if (ssae_audio_load(c->path, ld->channel, ld->feat->sample_rate, &a, &c->err)) return;
  if (ssae_logmel_compute(ld->feat, a.data, a.frames, &c->frames, &c->n_frames, &c->err)) {
    ssae_err_prefix(&c->err, "%s", c->path);
    ssae_audio_release(&a);
    return;
  }
  ssae_audio_release(&a);
  if (c->n_frames < (size_t)ld->feat->frames) {
    ssae_err_set(&c->err, "%s: too short for one window (%zu frame%s; a window of %d frames "
                 "needs at least %.3f s of audio)", c->path, c->n_frames,
                 c->n_frames == 1 ? "" : "s", ld->feat->frames,
                 (double)(ld->feat->frames - 1) * ld->feat->hop_length / ld->feat->sample_rate);
    free(c->frames);
    c->frames = NULL;
    return;
  }
  c->n_windows = c->n_frames - (size_t)ld->feat->frames + 1;
  c->ok = 1;
}

static void *load_worker(void *arg) {
  loader *ld = arg;
  for (;;) {
    pthread_mutex_lock(&ld->mu);
    size_t i = ld->next++;
    pthread_mutex_unlock(&ld->mu);
    if (i >= ld->n) return NULL;
    load_one(ld, &ld->clips[i]);
  }
}

static void load_all(loader *ld, int threads) {
  pthread_t tid[64];
  int started = 0;
  if (threads > 64) threads = 64;
  if ((size_t)threads > ld->n) threads = (int)ld->n;
  for (int i = 1; i < threads; i++)
    if (pthread_create(&tid[started], NULL, load_worker, ld) == 0) started++;
  load_worker(ld);
  for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
  pthread_mutex_destroy(&ld->mu);
}

/* ---- output check ------------------------------------------------------- */

/* Fails early (before an hour of training) when MODEL cannot be written:
 * creates and removes a file next to it, where the model's temporary file
 * will go. */
static int check_output(const char *path) {
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    ssae_cli_error(CMD, "%s: is a directory; -o takes the model file's name", path);
    return -1;
  }
  size_t len = strlen(path) + 32;
  char *probe = malloc(len);
  if (!probe) return -1;
  snprintf(probe, len, "%s.ssae-write-check-%ld", path, (long)getpid());
  int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) {
    ssae_cli_error(CMD, "cannot write the model %s: %s", path, strerror(errno));
    free(probe);
    return -1;
  }
  close(fd);
  unlink(probe);
  free(probe);
  return 0;
}

/* ---- helpers ------------------------------------------------------------ */

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
  return h;
}

static int meta_num(ssae_model *m, const char *key, double v, ssae_err *err) {
  char buf[64];
  snprintf(buf, sizeof buf, "%.9g", v);
  return ssae_model_meta_set(m, key, buf, err);
}

static int meta_int(ssae_model *m, const char *key, long long v, ssae_err *err) {
  char buf[32];
  snprintf(buf, sizeof buf, "%lld", v);
  return ssae_model_meta_set(m, key, buf, err);
}

/* Flat parameter vector <-> the model's tensors. */
static void model_tensors(ssae_model *m, float *t[SSAE_N_TENSORS]) {
  float *v[SSAE_N_TENSORS] = {m->ln_enc_w, m->ln_enc_b, m->enc_w,   m->enc_b,
                              m->basis,    m->ln_bn_w,  m->ln_bn_b, m->bn_w,
                              m->bn_b,     m->dec_w,    m->dec_b};
  memcpy(t, v, sizeof v);
}

static void params_from_model(ssae_model *m, const size_t *off, float *p) {
  float *t[SSAE_N_TENSORS];
  model_tensors(m, t);
  for (int i = 0; i < SSAE_N_TENSORS; i++)
    memcpy(p + off[i], t[i], (off[i + 1] - off[i]) * sizeof(float));
}

static void params_to_model(ssae_model *m, const size_t *off, const float *p) {
  float *t[SSAE_N_TENSORS];
  model_tensors(m, t);
  for (int i = 0; i < SSAE_N_TENSORS; i++)
    memcpy(t[i], p + off[i], (off[i + 1] - off[i]) * sizeof(float));
}

typedef struct feat_flag {
  const char *flag, *key;
} feat_flag;

static const feat_flag feat_flags[] = {
    {"--sample-rate", "sample_rate"}, {"--n-fft", "n_fft"},   {"--hop", "hop_length"},
    {"--n-mels", "n_mels"},           {"--frames", "frames"}, {"--fmin", "fmin"},
    {"--fmax", "fmax"},               {"--pad-mode", "pad_mode"},
    {"--mel-scale", "mel_scale"},     {"--mel-norm", "mel_norm"},
    {"--power", "power"},             {NULL, NULL}};

/* The training backend: cpu, cuda (an error without a device), or auto:
 * CUDA when a device is there and its gradients and scores agree with the
 * CPU's on a test batch, else the CPU (saying why). */
static int open_backend(ssae_train_backend *be, const char *which, const ssae_dims *dims,
                        int threads, int quiet, ssae_err *err) {
#if SSAE_HAVE_CUDA
  if (!strcmp(which, "cuda") || (!strcmp(which, "auto") && ssae_cuda_train_available())) {
    if (ssae_train_backend_cuda(be, dims, err) == 0 &&
        ssae_train_backend_selftest(be, dims, err) == 0) {
      if (!quiet) fprintf(stderr, "training on the GPU (CUDA)\n");
      return 0;
    }
    ssae_train_backend_free(be);
    if (!strcmp(which, "cuda")) return ssae_err_prefix(err, "--backend cuda");
    if (!quiet) fprintf(stderr, "training on the CPU: %s\n", err->msg);
  }
#endif
  (void)quiet;
  (void)which;
  return ssae_train_backend_cpu(be, dims, threads, err);
}

/* ---- the command -------------------------------------------------------- */

int ssae_cmd_train(int argc, char **argv) {
  ssae_train_cfg tc;
  ssae_train_cfg_default(&tc);
  ssae_feat_cfg feat;
  ssae_feat_cfg_default(&feat);
  ssae_dims dims;
  ssae_dims_default(&dims);
  const char *out = NULL, *backend = "auto";
  double val_frac = 0.1, percentile = 0.9;
  long threads = 0;
  int quiet = 0, channel = 0;
  char **inputs = calloc((size_t)argc + 1, sizeof *inputs);
  int n_inputs = 0;
  ssae_err err = {{0}};
  if (!inputs) return SSAE_EXIT_INPUT;

  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      free(inputs);
      return SSAE_EXIT_OK;
    }
    if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
      quiet = 1;
      continue;
    }
    if (a[0] != '-' || !strcmp(a, "-")) {
      inputs[n_inputs++] = argv[i];
      continue;
    }
    if (!strcmp(a, "--")) {
      while (++i < argc) inputs[n_inputs++] = argv[i];
      break;
    }
    /* every other option takes a value: --flag V or --flag=V */
    char flag[64];
    const char *v;
    const char *eq = strchr(a, '=');
    if (eq && eq - a < (long)sizeof flag) {
      snprintf(flag, sizeof flag, "%.*s", (int)(eq - a), a);
      v = eq + 1;
    } else {
      snprintf(flag, sizeof flag, "%s", a);
      if (i + 1 >= argc) {
        ssae_cli_error(CMD, "%s needs a value (ssae train --help)", a);
        goto usage_fail;
      }
      v = argv[++i];
    }
    long n;
    int bad = 0;
    if (!strcmp(flag, "-o") || !strcmp(flag, "--output")) out = v;
    else if (!strcmp(flag, "--epochs")) {
      bad = ssae_cli_parse_int(CMD, flag, v, 1, 1000000, &n);
      tc.epochs = (int)n;
    } else if (!strcmp(flag, "--batch")) {
      bad = ssae_cli_parse_int(CMD, flag, v, 1, 1 << 20, &n);
      tc.batch = (int)n;
    } else if (!strcmp(flag, "--patience")) {
      bad = ssae_cli_parse_int(CMD, flag, v, 0, 1000000, &n);
      tc.patience = (int)n;
    } else if (!strcmp(flag, "--seed")) {
      char *end;
      errno = 0;
      unsigned long long s = strtoull(v, &end, 10);
      if (errno || end == v || *end || v[0] == '-') {
        ssae_cli_error(CMD, "--seed: '%s' is not a whole number >= 0", v);
        bad = -1;
      }
      tc.seed = (uint64_t)s;
    } else if (!strcmp(flag, "--lr"))
      bad = ssae_cli_parse_double(CMD, flag, v, 1e-12, 10, &tc.adam.lr);
    else if (!strcmp(flag, "--weight-decay"))
      bad = ssae_cli_parse_double(CMD, flag, v, 0, 10, &tc.adam.weight_decay);
    else if (!strcmp(flag, "--val"))
      bad = ssae_cli_parse_double(CMD, flag, v, 0, 0.9, &val_frac);
    else if (!strcmp(flag, "--percentile")) {
      bad = ssae_cli_parse_double(CMD, flag, v, 1e-6, 1 - 1e-9, &percentile);
    } else if (!strcmp(flag, "--threads"))
      bad = ssae_cli_parse_int(CMD, flag, v, 0, 256, &threads);
    else if (!strcmp(flag, "--latent")) {
      bad = ssae_cli_parse_int(CMD, flag, v, 1, 4096, &n);
      dims.latent = (int)n;
    } else if (!strcmp(flag, "--slice-latent")) {
      bad = ssae_cli_parse_int(CMD, flag, v, 1, 4096, &n);
      dims.slice_latent = (int)n;
    } else if (!strcmp(flag, "--backend")) {
      if (strcmp(v, "auto") && strcmp(v, "cpu") && strcmp(v, "cuda")) {
        ssae_cli_error(CMD, "--backend: '%s' is not auto, cpu or cuda", v);
        bad = -1;
      }
      backend = v;
    } else if (!strcmp(flag, "--channel")) {
      if (ssae_audio_parse_channel(v, &channel, &err) || channel == SSAE_CHANNEL_ALL) {
        ssae_cli_error(CMD, "--channel: %s", channel == SSAE_CHANNEL_ALL
                                                 ? "'all' is not for training; give an index or mix"
                                                 : err.msg);
        bad = -1;
      }
    } else {
      const feat_flag *ff = feat_flags;
      while (ff->flag && strcmp(ff->flag, flag)) ff++;
      if (!ff->flag) {
        ssae_cli_error(CMD, "unknown option %s (ssae train --help)", flag);
        goto usage_fail;
      }
      if (ssae_feat_cfg_set(&feat, ff->key, v, &err) != 1) {
        ssae_cli_error(CMD, "%s: %s", flag, err.msg);
        bad = -1;
      }
    }
    if (bad) goto usage_fail;
  }
  if (!out) {
    ssae_cli_error(CMD, "no output: give the model file with -o MODEL (ssae train --help)");
    goto usage_fail;
  }
  if (n_inputs == 0) {
    ssae_cli_error(CMD, "no input: give recordings of normal operation (FILE|DIR...)");
    goto usage_fail;
  }
  if (ssae_feat_cfg_validate(&feat, &err)) {
    ssae_cli_error(CMD, "feature settings: %s", err.msg);
    goto usage_fail;
  }
#if !SSAE_HAVE_CUDA
  if (!strcmp(backend, "cuda")) {
    ssae_cli_error(CMD, "--backend cuda: CUDA training is not built into this ssae; use "
                        "--backend cpu (or auto)");
    goto usage_fail;
  }
#endif
  dims.n_mels = feat.n_mels;
  dims.frames = feat.frames;
  if (check_output(out)) {
    free(inputs);
    return SSAE_EXIT_INPUT;
  }
  int status = SSAE_EXIT_OK;
  char **paths = NULL;
  size_t n_paths = 0;
  if (ssae_cli_collect(inputs, n_inputs, &paths, &n_paths, &err)) {
    ssae_cli_error(CMD, "%s", err.msg);
    free(inputs);
    return SSAE_EXIT_INPUT;
  }
  free(inputs);
  if (n_paths == 0) {
    ssae_cli_error(CMD, "no audio files found in the given directories (looked for .wav, "
                        ".flac, .ogg, .aiff, ...)");
    ssae_cli_free_paths(paths, n_paths);
    return SSAE_EXIT_INPUT;
  }

  int tty = ssae_cli_stderr_tty();
  if (threads == 0) {
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    threads = nc > 0 ? nc : 1;
  }
  clip *clips = calloc(n_paths, sizeof *clips);
  ssae_model *model = NULL;
  float *params = NULL, *scores = NULL, *xb = NULL;
  size_t *train_off = NULL, *val_off = NULL, *order = NULL;
  float *frames = NULL;
  double *file_scores = NULL;
  ssae_train_backend be;
  memset(&be, 0, sizeof be);
  if (!clips) goto oom;
  /* before the features: a missing GPU is reported at once */
  if (open_backend(&be, backend, &dims, (int)threads, quiet, &err)) goto fail;
  if (!quiet) fprintf(stderr, "computing features of %zu file%s...\n", n_paths, n_paths == 1 ? "" : "s");
  loader ld = {clips, n_paths, &feat, channel, PTHREAD_MUTEX_INITIALIZER, 0};
  for (size_t i = 0; i < n_paths; i++) clips[i].path = paths[i];
  load_all(&ld, (int)threads);

  /* usable files; the bad ones are reported and left out */
  size_t n_ok = 0;
  for (size_t i = 0; i < n_paths; i++) {
    if (clips[i].ok) n_ok++;
    else {
      ssae_cli_error(CMD, "%s", clips[i].err.msg);
      status = SSAE_EXIT_INPUT;
    }
  }
  if (n_ok == 0) {
    ssae_cli_error(CMD, "no usable training files (%zu given)", n_paths);
    status = SSAE_EXIT_INPUT;
    goto done;
  }

  /* validation split by file, drawn from the seed */
  order = malloc(n_paths * sizeof *order);
  if (!order) goto oom;
  size_t k = 0;
  for (size_t i = 0; i < n_paths; i++)
    if (clips[i].ok) order[k++] = i;
  ssae_rng rng;
  ssae_rng_seed(&rng, tc.seed ^ 0x76616c6964617465ULL);
  for (size_t i = n_ok - 1; i > 0; i--) {
    size_t j = (size_t)ssae_rng_below(&rng, (uint64_t)i + 1), t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  size_t n_val_files = (size_t)floor(val_frac * (double)n_ok + 0.5);
  if (val_frac > 0 && n_val_files == 0 && n_ok >= 2) n_val_files = 1;
  if (n_val_files >= n_ok) n_val_files = n_ok - 1;
  /* train files first (in path order), then validation files */
  size_t n_train_files = n_ok - n_val_files;
  {
    /* sort each part back into path order so the data do not depend on the split's draw order */
    for (size_t a = 0; a < 2; a++) {
      size_t lo = a ? n_train_files : 0, hi = a ? n_ok : n_train_files;
      for (size_t i = lo + 1; i < hi; i++)
        for (size_t j = i; j > lo && order[j - 1] > order[j]; j--) {
          size_t t = order[j];
          order[j] = order[j - 1];
          order[j - 1] = t;
        }
    }
  }
  size_t M = (size_t)feat.n_mels, Fw = (size_t)feat.frames, fm = M * Fw;
  size_t total_frames = 0, n_train_w = 0, n_val_w = 0;
  for (size_t i = 0; i < n_ok; i++) {
    total_frames += clips[order[i]].n_frames;
    if (i < n_train_files) n_train_w += clips[order[i]].n_windows;
    else n_val_w += clips[order[i]].n_windows;
  }
  frames = malloc(total_frames * M * sizeof *frames);
  train_off = malloc((n_train_w ? n_train_w : 1) * sizeof *train_off);
  val_off = malloc((n_val_w ? n_val_w : 1) * sizeof *val_off);
  if (!frames || !train_off || !val_off) goto oom;
  uint64_t hash = 0xcbf29ce484222325ULL;
  size_t pos = 0, tw = 0, vw = 0;
  for (size_t i = 0; i < n_ok; i++) {
    clip *c = &clips[order[i]];
    memcpy(frames + pos * M, c->frames, c->n_frames * M * sizeof *frames);
    if (i < n_train_files) hash = fnv1a(hash, c->frames, c->n_frames * M * sizeof *frames);
    free(c->frames);
    c->frames = NULL;
    for (size_t w = 0; w < c->n_windows; w++) {
      if (i < n_train_files) train_off[tw++] = (pos + w) * M;
      else val_off[vw++] = (pos + w) * M;
    }
    pos += c->n_frames;
  }
  ssae_window_set train = {frames, train_off, n_train_w}, val = {frames, val_off, n_val_w};
  if (!quiet)
    fprintf(stderr, "%zu training file%s (%zu windows), %zu validation file%s (%zu windows)\n",
            n_train_files, n_train_files == 1 ? "" : "s", n_train_w, n_val_files,
            n_val_files == 1 ? "" : "s", n_val_w);

  /* model and initial weights */
  if (!(model = ssae_model_new(&dims, &err))) goto fail;
  model->feat = feat;
  ssae_model_init(model, tc.seed);
  size_t off[SSAE_N_TENSORS + 1];
  ssae_param_offsets(&dims, off);
  params = malloc(off[SSAE_N_TENSORS] * sizeof *params);
  if (!params) goto oom;
  params_from_model(model, off, params);


  struct sigaction sa, old_sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  g_stop = 0;
  sigaction(SIGINT, &sa, &old_sa);
  progress pg = {tty, quiet, -1, 0, 0};
  ssae_train_result res;
  int trc = ssae_train_run(&dims, &tc, &be, params, &train, &val, &g_stop, on_progress, &pg,
                           &res, &err);
  progress_end(&pg);
  sigaction(SIGINT, &old_sa, NULL);
  if (trc) goto fail;
  if (res.interrupted && !quiet)
    fprintf(stderr, "interrupted in epoch %d: writing the model trained so far\n", res.epochs_run);
  if (res.early_stopped && !quiet)
    fprintf(stderr, "early stop after epoch %d: keeping the weights of epoch %d\n",
            res.epochs_run, res.best_epoch);

  /* threshold: gamma fit to the training files' scores */
  params_to_model(model, off, params);
  if (ssae_model_update(model, &err)) goto fail;
  if (be.set_params(be.ctx, params, &err)) goto fail;
  size_t cap = (size_t)tc.batch;
  scores = malloc(cap * sizeof *scores);
  xb = malloc(cap * fm * sizeof *xb);
  file_scores = malloc(n_train_files * sizeof *file_scores);
  if (!scores || !xb || !file_scores) goto oom;
  double *win_scores = NULL;
  size_t n_win_scores = 0;
  size_t wi = 0;
  for (size_t f = 0; f < n_train_files; f++) {
    size_t nw = clips[order[f]].n_windows;
    double s = 0;
    for (size_t i = 0; i < nw; i += cap) {
      size_t kk = nw - i < cap ? nw - i : cap;
      for (size_t j = 0; j < kk; j++)
        memcpy(xb + j * fm, frames + train_off[wi + i + j], fm * sizeof *xb);
      if (be.scores(be.ctx, xb, kk, scores, &err)) goto fail;
      for (size_t j = 0; j < kk; j++) s += scores[j];
    }
    wi += nw;
    file_scores[f] = s / (double)nw;
  }
  double shape = NAN, scale = NAN, threshold;
  const char *method = "gamma_mle_loc0_file_scores";
  if (ssae_gamma_fit(file_scores, n_train_files, &shape, &scale, &err)) {
    /* one training file (or identical scores): fit its window scores */
    method = "gamma_mle_loc0_window_scores";
    win_scores = malloc(n_train_w * sizeof *win_scores);
    if (!win_scores) goto oom;
    for (size_t i = 0; i < n_train_w; i += cap) {
      size_t kk = n_train_w - i < cap ? n_train_w - i : cap;
      for (size_t j = 0; j < kk; j++)
        memcpy(xb + j * fm, frames + train_off[i + j], fm * sizeof *xb);
      if (be.scores(be.ctx, xb, kk, scores, &err)) {
        free(win_scores);
        goto fail;
      }
      for (size_t j = 0; j < kk; j++) win_scores[n_win_scores++] = scores[j];
    }
    int frc = ssae_gamma_fit(win_scores, n_win_scores, &shape, &scale, &err);
    free(win_scores);
    if (frc) {
      ssae_err_prefix(&err, "threshold");
      goto fail;
    }
  }
  threshold = scale * ssae_gamma_p_inv(shape, percentile);
  model->threshold = threshold;

  /* provenance */
  char date[32];
  time_t now = time(NULL);
  struct tm tmv;
  gmtime_r(&now, &tmv);
  strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tmv);
  char hbuf[24], seedbuf[24];
  snprintf(hbuf, sizeof hbuf, "%016llx", (unsigned long long)hash);
  snprintf(seedbuf, sizeof seedbuf, "%llu", (unsigned long long)tc.seed);
  if (ssae_model_meta_set(model, "threshold_method", method, &err) ||
      meta_num(model, "threshold_percentile", percentile, &err) ||
      meta_num(model, "gamma_shape", shape, &err) ||
      meta_num(model, "gamma_loc", 0.0, &err) ||
      meta_num(model, "gamma_scale", scale, &err) ||
      meta_int(model, "train_files", (long long)n_train_files, &err) ||
      meta_int(model, "val_files", (long long)n_val_files, &err) ||
      meta_int(model, "train_windows", (long long)n_train_w, &err) ||
      meta_int(model, "val_windows", (long long)n_val_w, &err) ||
      ssae_model_meta_set(model, "train_data_fnv1a64", hbuf, &err) ||
      meta_int(model, "epochs", (long long)res.epochs_run, &err) ||
      meta_int(model, "epochs_requested", (long long)tc.epochs, &err) ||
      meta_int(model, "batch", (long long)tc.batch, &err) ||
      meta_num(model, "lr", tc.adam.lr, &err) ||
      meta_num(model, "weight_decay", tc.adam.weight_decay, &err) ||
      ssae_model_meta_set(model, "optimizer", "adam(0.9,0.999,1e-8)", &err) ||
      ssae_model_meta_set(model, "seed", seedbuf, &err) ||
      meta_num(model, "final_loss", res.loss, &err) ||
      (n_val_w && meta_num(model, "val_loss", res.val_loss, &err)) ||
      ssae_model_meta_set(model, "train_backend", be.name, &err) ||
      ssae_model_meta_set(model, "train_stopped",
                          res.interrupted ? "interrupted"
                          : res.early_stopped ? "early_stop" : "completed", &err) ||
      ssae_model_meta_set(model, "ssae_version", SSAE_VERSION, &err) ||
      ssae_model_meta_set(model, "train_date", date, &err))
    goto fail;
  if (ssae_model_save(model, out, &err)) goto fail;
  char vbuf[32] = "-";
  if (n_val_w) snprintf(vbuf, sizeof vbuf, "%.6g", res.val_loss);
  printf("%s: %zu files, %zu windows, %d epoch%s, loss %.6g, val loss %s, threshold %.6g "
         "(gamma shape %.4g scale %.4g, p %.3g)\n",
         out, n_train_files, n_train_w, res.epochs_run, res.epochs_run == 1 ? "" : "s", res.loss,
         vbuf, threshold, shape, scale, percentile);
  goto done;

oom:
  ssae_err_set(&err, "out of memory");
fail:
  ssae_cli_error(CMD, "%s", err.msg);
  status = SSAE_EXIT_INPUT;
done:
  ssae_train_backend_free(&be);
  ssae_model_free(model);
  if (clips)
    for (size_t i = 0; i < n_paths; i++) free(clips[i].frames);
  free(clips);
  free(params);
  free(scores);
  free(xb);
  free(file_scores);
  free(train_off);
  free(val_off);
  free(order);
  free(frames);
  ssae_cli_free_paths(paths, n_paths);
  return status;

usage_fail:
  free(inputs);
  return SSAE_EXIT_USAGE;
}
