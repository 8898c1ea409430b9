/* ssae train: trains a model on recordings of a machine running normally,
 * calibrates the decision threshold, writes the model file.
 *
 * parse (the option table) -> gather (features of every file, validation
 * split) -> train (ssae_train_run on the backend ssae_train_backend_new
 * picks) -> calibrate (gamma fit of the training files' scores) -> save
 * (provenance, ssae_model_save). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "cli_opts.h"
#include "ssae_audio.h"
#include "ssae_config.h"
#include "ssae_logmel.h"
#include "ssae_model.h"
#include "ssae_threshold.h"
#include "ssae_reference.h"
#include "ssae_train.h"

static const char *const CMD = "train";

/* ---- options ------------------------------------------------------------ */

typedef struct opts {
  const char *output, *backend;
  int epochs, batch, patience, threads, quiet, latent, slice_latent, channel, strict, device;
  double lr, weight_decay, val, percentile;
  uint64_t seed;
  ssae_feat_cfg feat;
} opts;

static int parse_seed(const ssae_cli_opt *o, const char *v, void *dest, ssae_err *err) {
  (void)o;
  char *end;
  errno = 0;
  unsigned long long s = strtoull(v, &end, 10);
  if (errno || end == v || *end || v[0] == '-')
    return ssae_err_set(err, "'%s' is not a whole number >= 0", v);
  *(uint64_t *)dest = (uint64_t)s;
  return 0;
}

static void show_seed(const ssae_cli_opt *o, const void *dest, char *buf, size_t len) {
  (void)o;
  snprintf(buf, len, "%llu", (unsigned long long)*(const uint64_t *)dest);
}

#define O(f) .offset = offsetof(opts, f)
#define FEAT(flag, key, mv, text)                                                   \
  {.kind = SSAE_CLI_CUSTOM, .name = flag, O(feat), .metavar = mv, .help = text,    \
   .parse = ssae_cli_parse_feature, .show = ssae_cli_show_feature, .arg = key}

static const ssae_cli_opt options[] = {
    {.kind = SSAE_CLI_HEADING, .help = "training:"},
    {.kind = SSAE_CLI_STRING, .name = "--output", .short_name = 'o', O(output),
     .metavar = "MODEL", .help = "model file to write (checked before training)", .def = ""},
    {.kind = SSAE_CLI_INT, .name = "--epochs", O(epochs), .metavar = "N", .min = 1,
     .max = 1000000, .help = "passes over the training windows"},
    {.kind = SSAE_CLI_INT, .name = "--batch", O(batch), .metavar = "N", .min = 1,
     .max = 1 << 20, .help = "windows per Adam step"},
    {.kind = SSAE_CLI_DOUBLE, .name = "--lr", O(lr), .metavar = "X", .min = 1e-12, .max = 10,
     .help = "Adam learning rate"},
    {.kind = SSAE_CLI_DOUBLE, .name = "--weight-decay", O(weight_decay), .metavar = "X",
     .min = 0, .max = 10, .help = "L2 penalty added to the gradient, as torch"},
    {.kind = SSAE_CLI_CUSTOM, .name = "--seed", O(seed), .metavar = "N",
     .help = "initialisation, validation split, shuffling", .parse = parse_seed,
     .show = show_seed},
    {.kind = SSAE_CLI_DOUBLE, .name = "--val", O(val), .metavar = "FRAC", .min = 0, .max = 0.9,
     .help = "fraction of the files held out for validation"},
    {.kind = SSAE_CLI_INT, .name = "--patience", O(patience), .metavar = "N", .min = 0,
     .max = 1000000,
     .help = "stop after N epochs without a better validation loss and keep the best "
             "weights; 0: off"},
    {.kind = SSAE_CLI_DOUBLE, .name = "--percentile", O(percentile), .metavar = "P",
     .min = 1e-6, .max = 1 - 1e-9, .help = "threshold at this quantile of the fitted gamma"},
    {.kind = SSAE_CLI_CHOICE, .name = "--backend", O(backend), .choices = ssae_cli_backends,
     .help = "where to train; auto: CUDA when a device is present and passes a start-up "
             "self-test against the CPU, else cpu"},
    {.kind = SSAE_CLI_INT, .name = "--device", O(device), .metavar = "N", .min = 0, .max = 255,
     .help = "CUDA device to train on (--backend cuda or auto; one process per GPU)",
     .def = "0"},
    {.kind = SSAE_CLI_INT, .name = "--threads", O(threads), .metavar = "N", .min = 0,
     .max = 256, .help = "CPU threads; 0: all cores"},
    {.kind = SSAE_CLI_FLAG, .name = "--quiet", .short_name = 'q', O(quiet),
     .help = "no progress output"},
    {.kind = SSAE_CLI_FLAG, .name = "--strict", O(strict),
     .help = "a file whose data chunk is shorter than its header says is an error (it is "
             "left out), not a warning"},
    {.kind = SSAE_CLI_HEADING, .help = "model:"},
    {.kind = SSAE_CLI_INT, .name = "--latent", O(latent), .metavar = "N", .min = 1, .max = 4096,
     .help = "latent dimension L"},
    {.kind = SSAE_CLI_INT, .name = "--slice-latent", O(slice_latent), .metavar = "N", .min = 1,
     .max = 4096, .help = "per-slice latent dimension S"},
    {.kind = SSAE_CLI_HEADING,
     .help = "features (stored in the model, used by everything that loads it):"},
    {.kind = SSAE_CLI_CUSTOM, .name = "--channel", O(channel), .metavar = "N|mix",
     .help = "channel index from 0, or the mean of all channels",
     .parse = ssae_cli_parse_channel, .show = ssae_cli_show_channel},
    FEAT("--sample-rate", "sample_rate", "HZ", "resample to this rate"),
    FEAT("--n-fft", "n_fft", "N", "frame length = FFT size"),
    FEAT("--hop", "hop_length", "N", "samples between frames"),
    FEAT("--n-mels", "n_mels", "N", "mel bands"),
    FEAT("--frames", "frames", "N", "frames per window"),
    FEAT("--fmin", "fmin", "HZ", "lowest band edge"),
    {.kind = SSAE_CLI_CUSTOM, .name = "--fmax", O(feat), .metavar = "HZ",
     .help = "highest band edge", .def = "sample-rate/2", .parse = ssae_cli_parse_feature,
     .arg = "fmax"},
    FEAT("--pad-mode", "pad_mode", "reflect|constant", "centre padding"),
    FEAT("--mel-scale", "mel_scale", "slaney|htk", "mel scale"),
    FEAT("--mel-norm", "mel_norm", "slaney|none", "mel filter normalisation"),
    FEAT("--power", "power", "X", "spectrum exponent"),
    {0}};

static const ssae_cli_cmd command = {
    .name = "train",
    .usage = "usage: ssae train -o MODEL [options] FILE|DIR...",
    .about = "Trains a model on recordings of a machine running normally (directories are\n"
             "searched recursively), sets the decision threshold from a gamma fit of the\n"
             "training files' scores, and writes MODEL (safetensors) for score, monitor,\n"
             "jack and the LV2 plugin. Ctrl-C (or SIGTERM) stops after the current batch\n"
             "and still writes a valid model, marked interrupted; a second Ctrl-C waits\n"
             "for the model file.",
    .epilogue = "Exit status: 0 model written, 1 some input failed (a model is still written\n"
                "from the usable files when there are any), 2 usage error.",
    .opts = options,
    .positional = 1,
    .unquoted_unknown = 1,
};

/* ---- Ctrl-C, SIGTERM ------------------------------------------------------ */

/* One handler for the whole command: a signal only sets the flag, which
 * stops the feature loading or the training loop; calibration and the save
 * always run to the end, so a second Ctrl-C during the save waits for it
 * (the model is never left as a temporary file). */
static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
  (void)sig;
  if (g_stop) {
    static const char msg[] = "\nssae train: finishing the model file before stopping\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
  }
  g_stop = 1;
}

static void catch_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  /* Writes under way finish (the model's save above all). */
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

/* Test hook (ssae_cli_test_pause): SSAE_TEST_PAUSE_AT=save (or features). */
static void test_pause(const char *phase) { ssae_cli_test_pause("train", phase, &g_stop); }

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
  ssae_err warning; /* the reader's (a cut data chunk) */
} clip;

typedef struct loader {
  clip *clips;
  size_t n;
  const ssae_feat_cfg *feat;
  int channel;
  ssae_audio_opts audio;
  pthread_mutex_t mu;
  size_t next;
} loader;

static void load_one(const loader *ld, clip *c) {
  ssae_audio a;
  memset(&a, 0, sizeof a);
  if (ssae_audio_load_opts(c->path, ld->channel, ld->feat->sample_rate, &ld->audio, &a,
                           &c->err))
    return;
  c->warning = a.warning;
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
    if (i >= ld->n || g_stop) return NULL;
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

/* ---- data: features of every file, validation split ---------------------- */

typedef struct train_data {
  char **paths;
  size_t n_paths;
  clip *clips;
  size_t *order;           /* usable clips: training files, then validation files */
  size_t n_train_files, n_val_files;
  float *frames;           /* every usable file's frames, end to end */
  size_t *train_off, *val_off;
  ssae_window_set train, val;
  uint64_t hash;           /* FNV-1a of the training frames */
} train_data;

static void data_free(train_data *td) {
  if (td->clips)
    for (size_t i = 0; i < td->n_paths; i++) free(td->clips[i].frames);
  free(td->clips);
  free(td->order);
  free(td->frames);
  free(td->train_off);
  free(td->val_off);
  ssae_cli_free_paths(td->paths, td->n_paths);
  memset(td, 0, sizeof *td);
}

/* The usable clips in order: drawn from the seed into training and
 * validation files, each part back in path order so that the data do not
 * depend on the draw's order. */
static int split(const opts *o, train_data *td, size_t n_ok) {
  size_t *order = td->order = malloc(n_ok * sizeof *order);
  if (!order) return -1;
  size_t k = 0;
  for (size_t i = 0; i < td->n_paths; i++)
    if (td->clips[i].ok) order[k++] = i;
  ssae_rng rng;
  ssae_rng_seed(&rng, o->seed ^ 0x76616c6964617465ULL);
  for (size_t i = n_ok - 1; i > 0; i--) {
    size_t j = (size_t)ssae_rng_below(&rng, (uint64_t)i + 1), t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  size_t n_val = (size_t)floor(o->val * (double)n_ok + 0.5);
  if (o->val > 0 && n_val == 0 && n_ok >= 2) n_val = 1;
  if (n_val >= n_ok) n_val = n_ok - 1;
  td->n_val_files = n_val;
  td->n_train_files = n_ok - n_val;
  for (size_t a = 0; a < 2; a++) {
    size_t lo = a ? td->n_train_files : 0, hi = a ? n_ok : td->n_train_files;
    for (size_t i = lo + 1; i < hi; i++)
      for (size_t j = i; j > lo && order[j - 1] > order[j]; j--) {
        size_t t = order[j];
        order[j] = order[j - 1];
        order[j - 1] = t;
      }
  }
  return 0;
}

/* All frames end to end and the window offsets of both sets. */
static int lay_out(const opts *o, train_data *td) {
  const size_t M = (size_t)o->feat.n_mels, n_ok = td->n_train_files + td->n_val_files;
  size_t total_frames = 0, n_train_w = 0, n_val_w = 0;
  for (size_t i = 0; i < n_ok; i++) {
    const clip *c = &td->clips[td->order[i]];
    total_frames += c->n_frames;
    if (i < td->n_train_files) n_train_w += c->n_windows;
    else n_val_w += c->n_windows;
  }
  td->frames = malloc(total_frames * M * sizeof *td->frames);
  td->train_off = malloc((n_train_w ? n_train_w : 1) * sizeof *td->train_off);
  td->val_off = malloc((n_val_w ? n_val_w : 1) * sizeof *td->val_off);
  if (!td->frames || !td->train_off || !td->val_off) return -1;
  uint64_t hash = 0xcbf29ce484222325ULL;
  size_t pos = 0, tw = 0, vw = 0;
  for (size_t i = 0; i < n_ok; i++) {
    clip *c = &td->clips[td->order[i]];
    memcpy(td->frames + pos * M, c->frames, c->n_frames * M * sizeof *td->frames);
    if (i < td->n_train_files) hash = fnv1a(hash, c->frames, c->n_frames * M * sizeof(float));
    free(c->frames);
    c->frames = NULL;
    for (size_t w = 0; w < c->n_windows; w++) {
      if (i < td->n_train_files) td->train_off[tw++] = (pos + w) * M;
      else td->val_off[vw++] = (pos + w) * M;
    }
    pos += c->n_frames;
  }
  td->hash = hash;
  td->train = (ssae_window_set){td->frames, td->train_off, n_train_w};
  td->val = (ssae_window_set){td->frames, td->val_off, n_val_w};
  return 0;
}

/* Features of every file (in parallel), the split, the window sets. Bad
 * files are reported and left out (*status 1). Returns 0, or -1 after
 * printing why nothing can be trained. */
static int gather(const opts *o, int threads, train_data *td, int *status) {
  const size_t n_paths = td->n_paths;
  if (!o->quiet)
    fprintf(stderr, "computing features of %zu file%s...\n", n_paths, n_paths == 1 ? "" : "s");
  if (!(td->clips = calloc(n_paths, sizeof *td->clips))) goto oom;
  loader ld = {td->clips, n_paths, &o->feat, o->channel, {.strict = o->strict},
               PTHREAD_MUTEX_INITIALIZER, 0};
  for (size_t i = 0; i < n_paths; i++) td->clips[i].path = td->paths[i];
  test_pause("features");
  load_all(&ld, threads);
  if (g_stop) {
    ssae_cli_error(CMD, "interrupted while computing features: no model written");
    return -1;
  }
  size_t n_ok = 0;
  for (size_t i = 0; i < n_paths; i++) {
    if (td->clips[i].warning.msg[0]) ssae_cli_error(CMD, "warning: %s", td->clips[i].warning.msg);
    if (td->clips[i].ok) n_ok++;
    else {
      ssae_cli_error(CMD, "%s", td->clips[i].err.msg);
      *status = SSAE_EXIT_INPUT;
    }
  }
  if (n_ok == 0) {
    ssae_cli_error(CMD, "no usable training files (%zu given)", n_paths);
    return -1;
  }
  if (split(o, td, n_ok) || lay_out(o, td)) goto oom;
  if (!o->quiet)
    fprintf(stderr, "%zu training file%s (%zu windows), %zu validation file%s (%zu windows)\n",
            td->n_train_files, td->n_train_files == 1 ? "" : "s", td->train.n,
            td->n_val_files, td->n_val_files == 1 ? "" : "s", td->val.n);
  return 0;
oom:
  ssae_cli_error(CMD, "out of memory");
  return -1;
}

/* ---- training ------------------------------------------------------------ */

/* Trains params (the model's initial weights) in place; Ctrl-C stops after
 * the current batch (the handler is catch_signals'). */
static int train(const opts *o, const ssae_dims *dims, const ssae_train_cfg *tc,
                 const ssae_train_backend *be, const train_data *td, float *params,
                 ssae_train_result *res, ssae_err *err) {
  progress pg = {ssae_cli_stderr_tty(), o->quiet, -1, 0, 0};
  int rc = ssae_train_run(dims, tc, be, params, &td->train, &td->val, &g_stop, on_progress,
                          &pg, res, err);
  progress_end(&pg);
  if (rc) return -1;
  if (res->interrupted && !o->quiet)
    fprintf(stderr, "interrupted in epoch %d: writing the model trained so far\n",
            res->epochs_run);
  if (res->early_stopped && !o->quiet)
    fprintf(stderr, "early stop after epoch %d: keeping the weights of epoch %d\n",
            res->epochs_run, res->best_epoch);
  return 0;
}

/* ---- threshold ------------------------------------------------------------ */

typedef ssae_threshold_fit calibration;

/* Mean scores of the windows [first, first + n) of the training set, in
 * batches of cap (xb: cap windows, scores: cap floats). */
static int score_windows(const ssae_train_backend *be, const train_data *td, size_t fm,
                         size_t first, size_t n, size_t cap, float *xb, float *scores,
                         double *out, ssae_err *err) {
  for (size_t i = 0; i < n; i += cap) {
    size_t k = n - i < cap ? n - i : cap;
    for (size_t j = 0; j < k; j++)
      memcpy(xb + j * fm, td->frames + td->train_off[first + i + j], fm * sizeof *xb);
    if (be->scores(be->ctx, xb, k, scores, err)) return -1;
    for (size_t j = 0; j < k; j++) out[i + j] = scores[j];
  }
  return 0;
}

/* The threshold: a gamma fit (location 0) of the training files' mean
 * scores, or of their window scores when that fit fails (one training
 * file, or identical scores), at the percentile; "none" with the reason in
 * cal->warning when neither gives one (data with no spread). be holds the
 * weights. */
static int calibrate(const opts *o, const ssae_train_backend *be, const train_data *td,
                     int batch, calibration *cal, ssae_err *err) {
  const size_t fm = (size_t)o->feat.n_mels * (size_t)o->feat.frames, cap = (size_t)batch;
  size_t max_w = td->train.n;
  float *scores = malloc(cap * sizeof *scores), *xb = malloc(cap * fm * sizeof *xb);
  double *file_scores = malloc(td->n_train_files * sizeof *file_scores);
  double *win = malloc((max_w ? max_w : 1) * sizeof *win);
  int rc = -1;
  if (!scores || !xb || !file_scores || !win) {
    ssae_err_set(err, "out of memory");
    goto done;
  }
  size_t wi = 0;
  for (size_t f = 0; f < td->n_train_files; f++) {
    size_t nw = td->clips[td->order[f]].n_windows;
    if (score_windows(be, td, fm, wi, nw, cap, xb, scores, win, err)) goto done;
    double s = 0;
    for (size_t j = 0; j < nw; j++) s += win[j];
    file_scores[f] = s / (double)nw;
    wi += nw;
  }
  int fit = ssae_threshold_fit_scores(file_scores, td->n_train_files, o->percentile, 0, cal,
                                      err);
  if (fit == 1) {
    if (score_windows(be, td, fm, 0, td->train.n, cap, xb, scores, win, err)) goto done;
    fit = ssae_threshold_fit_scores(win, td->train.n, o->percentile, 1, cal, err);
  }
  if (fit < 0) {
    ssae_err_prefix(err, "threshold");
    goto done;
  }
  rc = 0;
done:
  free(scores);
  free(xb);
  free(file_scores);
  free(win);
  return rc;
}

/* ---- the spectrum-only reference ----------------------------------------- */

/* On the same training windows as the network: what ssae eval compares
 * the network with (ssae_reference.h). */
static int fit_reference(const opts *o, const train_data *td, ssae_model *model,
                         ssae_err *err) {
  ssae_reference ref;
  if (ssae_reference_fit(&td->train, o->feat.n_mels, o->feat.frames, &ref, err)) return -1;
  int rc = ssae_reference_to_model(&ref, model, err);
  ssae_reference_release(&ref);
  return rc;
}

/* ---- the model file ------------------------------------------------------- */

/* Threshold and provenance into the model's metadata, then the file. */
static int save(const opts *o, const ssae_train_cfg *tc, const train_data *td,
                const ssae_train_result *res, const calibration *cal, const char *backend,
                ssae_model *model, ssae_err *err) {
  model->threshold = cal->threshold;
  char date[32];
  time_t now = time(NULL);
  struct tm tmv;
  gmtime_r(&now, &tmv);
  strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tmv);
  char hbuf[24], seedbuf[24], ibuf[32];
  snprintf(ibuf, sizeof ibuf, "epoch %d", res->epochs_run);
  snprintf(hbuf, sizeof hbuf, "%016llx", (unsigned long long)td->hash);
  snprintf(seedbuf, sizeof seedbuf, "%llu", (unsigned long long)tc->seed);
  if (ssae_model_meta_set(model, "threshold_method", cal->method, err) ||
      meta_num(model, "threshold_percentile", o->percentile, err) ||
      (!isnan(cal->shape) && (meta_num(model, "gamma_shape", cal->shape, err) ||
                              meta_num(model, "gamma_loc", 0.0, err) ||
                              meta_num(model, "gamma_scale", cal->scale, err))) ||
      meta_int(model, "train_files", (long long)td->n_train_files, err) ||
      meta_int(model, "val_files", (long long)td->n_val_files, err) ||
      meta_int(model, "train_windows", (long long)td->train.n, err) ||
      meta_int(model, "val_windows", (long long)td->val.n, err) ||
      ssae_model_meta_set(model, "train_data_fnv1a64", hbuf, err) ||
      meta_int(model, "epochs", (long long)res->epochs_run, err) ||
      meta_int(model, "epochs_requested", (long long)tc->epochs, err) ||
      meta_int(model, "batch", (long long)tc->batch, err) ||
      meta_num(model, "lr", tc->adam.lr, err) ||
      meta_num(model, "weight_decay", tc->adam.weight_decay, err) ||
      ssae_model_meta_set(model, "optimizer", "adam(0.9,0.999,1e-8)", err) ||
      ssae_model_meta_set(model, "seed", seedbuf, err) ||
      meta_num(model, "final_loss", res->loss, err) ||
      (td->val.n && meta_num(model, "val_loss", res->val_loss, err)) ||
      /* with --patience the weights (and val_loss) are this epoch's, final_loss the last's */
      (tc->patience > 0 && !res->interrupted && res->best_epoch > 0 &&
       meta_int(model, "best_epoch", (long long)res->best_epoch, err)) ||
      ssae_model_meta_set(model, "train_backend", backend, err) ||
      ssae_model_meta_set(model, "train_stopped",
                          res->interrupted ? "interrupted"
                          : res->early_stopped ? "early_stop" : "completed", err) ||
      (res->interrupted && ssae_model_meta_set(model, "interrupted", ibuf, err)) ||
      ssae_model_meta_set(model, "ssae_version", SSAE_VERSION, err) ||
      ssae_model_meta_set(model, "train_date", date, err))
    return -1;
  return ssae_model_save(model, o->output, err);
}

/* ---- the command ---------------------------------------------------------- */

/* The training backend before the features, so that a missing GPU is
 * reported at once. */
static int open_backend(const opts *o, const ssae_dims *dims, int threads,
                        ssae_train_backend *be, ssae_err *err) {
  ssae_err note = {{0}};
  if (ssae_train_backend_new(be, o->backend, dims, threads, &note, err)) {
    if (!strcmp(o->backend, "cuda")) ssae_err_prefix(err, "--backend cuda");
    return -1;
  }
  if (!o->quiet && !strcmp(be->name, "cuda")) fprintf(stderr, "training on the GPU (CUDA)\n");
  if (!o->quiet && note.msg[0]) fprintf(stderr, "training on the CPU: %s\n", note.msg);
  return 0;
}

static int run(const opts *o, char **inputs, int n_inputs) {
  ssae_train_cfg tc;
  ssae_train_cfg_default(&tc);
  tc.epochs = o->epochs;
  tc.batch = o->batch;
  tc.patience = o->patience;
  tc.seed = o->seed;
  tc.adam.lr = o->lr;
  tc.adam.weight_decay = o->weight_decay;
  ssae_dims dims;
  ssae_dims_default(&dims);
  dims.latent = o->latent;
  dims.slice_latent = o->slice_latent;
  dims.n_mels = o->feat.n_mels;
  dims.frames = o->feat.frames;
  int threads = o->threads;
  if (threads == 0) {
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    threads = nc > 0 ? (int)nc : 1;
  }
  if (check_output(o->output)) return SSAE_EXIT_INPUT;
  catch_signals();

  ssae_err err = {{0}};
  train_data td;
  memset(&td, 0, sizeof td);
  if (ssae_cli_collect(inputs, n_inputs, &td.paths, &td.n_paths, &err)) {
    ssae_cli_error(CMD, "%s", err.msg);
    return SSAE_EXIT_INPUT;
  }
  if (td.n_paths == 0) {
    ssae_cli_error(CMD, "no audio files found in the given directories (looked for .wav, "
                        ".flac, .ogg, .aiff, ...)");
    data_free(&td);
    return SSAE_EXIT_INPUT;
  }
  int status = SSAE_EXIT_OK;
  ssae_train_backend be;
  memset(&be, 0, sizeof be);
  ssae_model *model = NULL;
  float *params = NULL;
  if (open_backend(o, &dims, threads, &be, &err)) goto fail;
  if (gather(o, threads, &td, &status)) {
    status = g_stop ? 130 : SSAE_EXIT_INPUT;
    goto done;
  }
  /* the model and its initial weights */
  if (!(model = ssae_model_new(&dims, &err))) goto fail;
  model->feat = o->feat;
  ssae_model_init(model, tc.seed);
  size_t off[SSAE_N_TENSORS + 1];
  ssae_param_offsets(&dims, off);
  if (!(params = malloc(off[SSAE_N_TENSORS] * sizeof *params))) {
    ssae_err_set(&err, "out of memory");
    goto fail;
  }
  params_from_model(model, off, params);
  ssae_train_result res;
  calibration cal;
  if (train(o, &dims, &tc, &be, &td, params, &res, &err)) goto fail;
  params_to_model(model, off, params);
  if (ssae_model_update(model, &err) || be.set_params(be.ctx, params, &err) ||
      calibrate(o, &be, &td, tc.batch, &cal, &err) || fit_reference(o, &td, model, &err))
    goto fail;
  if (cal.warning[0]) ssae_cli_error(CMD, "warning: %s", cal.warning);
  test_pause("save");
  if (save(o, &tc, &td, &res, &cal, be.name, model, &err)) goto fail;
  char vbuf[32] = "-", tbuf[128] = "none";
  if (td.val.n) snprintf(vbuf, sizeof vbuf, "%.6g", res.val_loss);
  if (!isnan(cal.threshold))
    snprintf(tbuf, sizeof tbuf, "%.6g (gamma shape %.4g scale %.4g, p %.3g)", cal.threshold,
             cal.shape, cal.scale, o->percentile);
  printf("%s: %zu files, %zu windows, %d epoch%s%s, loss %.6g, val loss %s, threshold %s\n",
         o->output, td.n_train_files, td.train.n, res.epochs_run,
         res.epochs_run == 1 ? "" : "s", res.interrupted ? " (interrupted)" : "", res.loss,
         vbuf, tbuf);
  goto done;
fail:
  ssae_cli_error(CMD, "%s", err.msg);
  status = SSAE_EXIT_INPUT;
done:
  ssae_train_backend_free(&be);
  ssae_model_free(model);
  free(params);
  data_free(&td);
  return status;
}

int ssae_cmd_train(int argc, char **argv) {
  ssae_train_cfg tc;
  ssae_train_cfg_default(&tc);
  ssae_dims dims;
  ssae_dims_default(&dims);
  opts o = {.backend = "auto", .epochs = tc.epochs, .batch = tc.batch, .patience = tc.patience,
            .seed = tc.seed, .lr = tc.adam.lr, .weight_decay = tc.adam.weight_decay,
            .val = 0.1, .percentile = 0.9, .latent = dims.latent,
            .slice_latent = dims.slice_latent};
  ssae_feat_cfg_default(&o.feat);
  ssae_cli_args args;
  int rc = ssae_cli_parse(&command, argc, argv, &o, &args);
  if (rc != SSAE_CLI_CONTINUE) return rc;
  ssae_err err = {{0}};
  if (!o.output) {
    ssae_cli_error(CMD, "no output: give the model file with -o MODEL (ssae train --help)");
    rc = SSAE_EXIT_USAGE;
  } else if (args.n_pos == 0) {
    ssae_cli_error(CMD, "no input: give recordings of normal operation (FILE|DIR...)");
    rc = SSAE_EXIT_USAGE;
  } else if (ssae_feat_cfg_validate(&o.feat, &err)) {
    ssae_cli_error(CMD, "feature settings: %s", err.msg);
    rc = SSAE_EXIT_USAGE;
  } else if (!ssae_train_backend_built(o.backend)) {
    ssae_cli_error(CMD, "--backend %s: CUDA training is not built into this ssae; use "
                        "--backend cpu (or auto)", o.backend);
    rc = SSAE_EXIT_USAGE;
  } else if ((rc = ssae_cli_use_device(CMD, o.device, o.backend)) != SSAE_EXIT_OK) {
    /* before the features are computed; the trainer is made on this thread */
  } else {
    ssae_cli_warn_empty_bands(CMD, &o.feat);
    rc = run(&o, args.pos, args.n_pos);
  }
  ssae_cli_args_free(&args);
  return rc;
}
