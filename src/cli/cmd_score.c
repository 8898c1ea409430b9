/* ssae score: anomaly scores of audio files (SPEC section 4).
 *
 * Worker threads decode files and compute their features (in parallel, a
 * bounded distance ahead); the main thread prints results in input order.
 * On the CPU each worker also scores its files, on a one-thread CPU
 * backend of its own (the frames are still in its cache, and no thread
 * waits for another); for other backends the main thread puts the frames
 * of the files that are ready end to end into batches. Decoding, features
 * and scoring are ssae_filescore's, as in ssae eval and ssae report. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "cli_opts.h"
#include "ssae_audio.h"
#include "ssae_backend.h"
#include "ssae_config.h"
#include "ssae_filescore.h"
#include "ssae_model.h"
#include "ssae_outfile.h"
#if SSAE_HAVE_CUDA
#include "ssae_cuda_frontend.h"
#include "ssae_score_gpu.h"
#endif
#include "ssae_shard.h"
#include "ssae_shard_job.h"

static const char *const CMD = "score";

/* Windows per backend call: big batches for a GPU, and the CPU splits them
 * over its threads. */
#define BATCH_WINDOWS 8192

typedef struct opts {
  const char *model, *backend, *windows, *format;
  int channel, jobs, quiet, strict, device, stats;
  /* Archives in shards (ssae_shard_job.h). */
  const char *output, *files_from, *shard;
  int shard_count, resume;
} opts;

static const char *const formats[] = {"tsv", "json", NULL};

static const ssae_cli_opt options[] = {
    {.kind = SSAE_CLI_STRING, .name = "--model", .offset = offsetof(opts, model), .metavar = "M",
     .help = "model file", .def = "the model built into ssae"},
    {.kind = SSAE_CLI_CHOICE, .name = "--backend", .offset = offsetof(opts, backend),
     .choices = ssae_cli_backends,
     .help = "where the model runs; cuda: the GPU front end (PCM in, scores out, many files "
             "per launch); auto: the GPU front end for jobs of at least 160 MB of input per "
             "CPU core when there is a GPU (where it pays back its start-up), else the CPU"},
    {.kind = SSAE_CLI_CUSTOM, .name = "--channel", .offset = offsetof(opts, channel),
     .metavar = "N|mix", .help = "channel index from 0, or the mean of all channels",
     .parse = ssae_cli_parse_channel, .show = ssae_cli_show_channel},
    {.kind = SSAE_CLI_STRING, .name = "--windows", .offset = offsetof(opts, windows),
     .metavar = "OUT.tsv",
     .help = "also write every window: path, window index, time in seconds of the window's "
             "centre (the centre of its middle frame), window score; first line a header",
     .def = ""},
    {.kind = SSAE_CLI_CHOICE, .name = "--format", .offset = offsetof(opts, format),
     .choices = formats,
     .help = "tsv: path, score, windows, verdict separated by tabs; json: one JSON object "
             "per line with keys path, score, windows, verdict"},
    {.kind = SSAE_CLI_INT, .name = "--jobs", .offset = offsetof(opts, jobs), .metavar = "N",
     .min = 1, .max = 256,
     .help = "decoding threads, which on the CPU also run the model", .def = "all cores"},
    {.kind = SSAE_CLI_FLAG, .name = "--quiet", .short_name = 'q', .offset = offsetof(opts, quiet),
     .help = "no progress line"},
    {.kind = SSAE_CLI_FLAG, .name = "--stats", .offset = offsetof(opts, stats),
     .help = "at the end, where the time went on stderr (the GPU front end: its runs, the "
             "time on the GPU and waiting for the decoding threads; the CPU: files, wall "
             "time, threads)"},
    {.kind = SSAE_CLI_FLAG, .name = "--strict", .offset = offsetof(opts, strict),
     .help = "a file whose data chunk is shorter than its header says is an error, not a "
             "warning"},
    {.kind = SSAE_CLI_INT, .name = "--device", .offset = offsetof(opts, device), .metavar = "N",
     .min = 0, .max = 255,
     .help = "CUDA device to run on: the GPU front end's and the CUDA backend's (one "
             "process per GPU scales)", .def = "0"},
    {.kind = SSAE_CLI_STRING, .name = "--output", .short_name = 'o',
     .offset = offsetof(opts, output), .metavar = "OUT",
     .help = "write the results to OUT (atomically; with --shard or --resume as OUT.partial, "
             "renamed to OUT when the shard is complete)",
     .def = "stdout"},
    {.kind = SSAE_CLI_HEADING,
     .help = "shards of an archive (Slurm job arrays, Kubernetes indexed jobs; ssae merge):"},
    {.kind = SSAE_CLI_STRING, .name = "--files-from", .offset = offsetof(opts, files_from),
     .metavar = "FILE|-",
     .help = "also score the paths listed in FILE, one a line ('-': stdin); directories are "
             "expanded",
     .def = ""},
    {.kind = SSAE_CLI_STRING, .name = "--shard", .offset = offsetof(opts, shard),
     .metavar = "I/N|auto",
     .help = "score only the I-th (from 0) of N parts of the sorted inputs, balanced by bytes "
             "on disk; the output starts with a line naming the shard and the input list's "
             "digest; auto: the part from a Slurm array (SLURM_ARRAY_TASK_ID) or a Kubernetes "
             "indexed job (JOB_COMPLETION_INDEX)",
     .def = ""},
    {.kind = SSAE_CLI_INT, .name = "--shard-count", .offset = offsetof(opts, shard_count),
     .metavar = "N", .min = 1, .max = SSAE_SHARD_MAX,
     .help = "the number of shards for --shard auto (a Kubernetes job's completions; with "
             "Slurm the array's task IDs are then the shard indices)",
     .def = "from the scheduler, or SSAE_SHARD_COUNT"},
    {.kind = SSAE_CLI_FLAG, .name = "--resume", .offset = offsetof(opts, resume),
     .help = "keep the files an earlier run of the same shard and input list completed in OUT "
             "or OUT.partial and score only the rest (needs -o); without --shard the run is "
             "shard 0/1, and its output starts with the shard line"},
    {0}};

static const ssae_cli_cmd command = {
    .name = "score",
    .usage = "usage: ssae score [options] FILE|DIR...\n"
             "       ssae score [options] --files-from LIST|- [--shard I/N|auto [--resume -o OUT]]",
    .about = "Scores audio files with the model: one line per file with the path, the\n"
             "file score (mean of its window scores), the number of windows and the\n"
             "verdict: 'anomaly' when the file score is above the model's threshold,\n"
             "'normal' otherwise, 'unknown' when the model has no threshold. A window\n"
             "score is the mean squared error of the model's reconstruction of one\n"
             "window of log-mel frames. Directories are searched recursively for audio\n"
             "files, in sorted order.",
    .epilogue = "A file that cannot be read, has NaN or infinite samples or is shorter than\n"
                "one window is reported on stderr and the rest are still scored (with --shard\n"
                "it is also recorded in the shard's output, and tried again by --resume).\n"
                "Ctrl-C stops after the current file: every output ends with a whole line.\n"
                "Exit status: 0 all files scored, 1 some file failed (or an output could\n"
                "not be written), 2 usage error, 130 interrupted.",
    .opts = options,
    .positional = 1,
};

typedef struct {
  int state; /* 0 pending, 1 ready, 2 failed */
  /* Frames (batched on the main thread), or window scores when the worker
   * scored the file itself. */
  ssae_file_scores fs;
  char *error;
} slot;

typedef struct {
  char **paths;
  size_t n;
  slot *slots;
  const ssae_model *m;
  int channel;
  ssae_audio_opts audio;
  int score_in_workers;
  size_t next;     /* next file for a worker */
  size_t consumed; /* files done by the main thread */
  size_t ahead;    /* how far workers may run ahead */
  int stop;
  pthread_mutex_t mu;
  pthread_cond_t ready, room;
} job;

static void *worker(void *arg) {
  job *j = arg;
  ssae_err start_err = {{0}};
  /* One thread each: the workers already keep every core busy. */
  ssae_backend *cpu =
      j->score_in_workers ? ssae_backend_new_threads(j->m, "cpu", 0, 1, &start_err) : NULL;
  pthread_mutex_lock(&j->mu);
  for (;;) {
    while (!j->stop && j->next < j->n && j->next >= j->consumed + j->ahead)
      pthread_cond_wait(&j->room, &j->mu);
    if (j->stop || j->next >= j->n) break;
    size_t i = j->next++;
    pthread_mutex_unlock(&j->mu);
    slot s = {0};
    ssae_err err = {{0}};
    int rc;
    if (j->score_in_workers && !cpu) {
      err = start_err;
      rc = -1;
    } else if (cpu) { /* scored here while the frames are in this core's cache */
      rc = ssae_file_score_opts(j->m, cpu, BATCH_WINDOWS, j->paths[i], j->channel, 0,
                                &j->audio, &s.fs, &err);
    } else {
      rc = ssae_file_frames_opts(j->m, j->paths[i], j->channel, &j->audio, &s.fs, &err);
    }
    if (rc) s.error = strdup(err.msg[0] ? err.msg : "failed");
    pthread_mutex_lock(&j->mu);
    s.state = rc ? 2 : 1;
    j->slots[i] = s;
    pthread_cond_broadcast(&j->ready);
  }
  pthread_mutex_unlock(&j->mu);
  ssae_backend_free(cpu);
  return NULL;
}

static void on_fallback(void *user, const char *msg) {
  (void)user;
  ssae_cli_error(CMD, "%s", msg);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

typedef struct {
  int json, tty, quiet;
  double threshold;
  ssae_outfile *wf;   /* --windows without --shard */
  FILE *of;          /* results: stdout, -o's file, or the shard's output */
  FILE *wfp;         /* windows: wf, or the shard's windows output */
  ssae_shard_job *sj; /* --shard / --resume; NULL otherwise */
  size_t done, failed, total;
  double t0, last_log;
  int interrupted, stdout_failed;
  int abandoned; /* interrupted while a reader was busy: it is not joined */
} out_state;

/* Ctrl-C / SIGTERM: the files being scored are finished and printed, then
 * the command stops (exit 130), every output ending with a whole line. */
static volatile sig_atomic_t g_stop;
static void on_signal(int sig) {
  (void)sig;
  g_stop = 1;
}

/* stdout is checked as it goes, so that its failure is reported with the
 * reason when it happens (once; main's exit check makes the status 1). */
static void progress(out_state *o, int final);
static void check_stdout(out_state *o) {
  ssae_err e = {{0}};
  /* -o's file and a shard's outputs are checked when they are committed. */
  if (o->of != stdout) return;
  if (!o->stdout_failed && ssae_stdout_check(&e)) {
    o->stdout_failed = 1;
    progress(o, 1);
    if (e.msg[0]) ssae_cli_error(CMD, "%s", e.msg);
  }
}

static void progress(out_state *o, int final) {
  if (o->quiet || o->total < 2) return;
  double t = now(), el = t - o->t0;
  if (o->tty) {
    if (final) {
      fprintf(stderr, "\r\033[K");
      return;
    }
    if (t - o->last_log < 0.1) return;
    fprintf(stderr, "\r\033[Kssae score: %zu/%zu files, %.1f files/s", o->done, o->total,
            el > 0 ? (double)o->done / el : 0.0);
  } else {
    /* Plain lines, and only for long runs. */
    if (final || t - o->last_log < 10.0) return;
    fprintf(stderr, "ssae score: %zu/%zu files, %.1f files/s\n", o->done, o->total,
            el > 0 ? (double)o->done / el : 0.0);
  }
  o->last_log = t;
}

static void emit(out_state *o, const char *path, const slot *s, const float *scores) {
  double sum = 0;
  size_t nw = s->fs.n_windows;
  for (size_t k = 0; k < nw; k++) sum += scores[k];
  double score = sum / (double)nw;
  const char *verdict = isnan(o->threshold) ? "unknown" : score > o->threshold ? "anomaly" : "normal";
  if (o->json) {
    fputs("{\"path\":", o->of);
    ssae_cli_json_str(o->of, path);
    fprintf(o->of, ",\"score\":%.9g,\"windows\":%zu,\"verdict\":\"%s\"}\n", score, nw,
            verdict);
  } else {
    fprintf(o->of, "%s\t%.9g\t%zu\t%s\n", path, score, nw, verdict);
  }
}

/* After a batch of results (the CPU path's consumed files, a GPU run's):
 * its lines reach a pipe together as they come (a flush per line cost a
 * system call each: ~20 ms of a 10,000-file GPU job), and a failed write
 * is seen here with its reason. */
static void flush_results(out_state *o) {
  check_stdout(o);
  if (!o->tty || o->quiet) fflush(o->of);
}

static void emit_windows(out_state *o, const char *path, const slot *s, const float *scores,
                         const ssae_model *m) {
  if (!o->wfp) return;
  /* Frame t is centred on sample t*hop; a window's centre is its middle
   * frame's. */
  for (size_t k = 0; k < s->fs.n_windows; k++) {
    double t = ((double)k + 0.5 * (m->d.frames - 1)) * m->feat.hop_length /
               m->feat.sample_rate;
    fprintf(o->wfp, "%s\t%zu\t%.6f\t%.9g\n", path, k, t, scores[k]);
  }
}

/* A shard's file is done (failed: msg, else NULL): its failure record, and
 * its lines reach the shard's outputs, so that a kill loses at most the
 * file in hand. */
static int shard_file_done(out_state *o, const char *path, const char *msg) {
  ssae_err err = {{0}};
  if (msg) ssae_shard_job_failed(o->sj, path, msg[0] ? msg : "the model failed");
  if (ssae_shard_job_next(o->sj, &err) == 0) return 0;
  ssae_cli_error(CMD, "%s", err.msg);
  return -1;
}

/* The main thread's side: waits for the files in input order, scores in
 * batches the ones their worker did not score, prints every result, and
 * lets the workers run ahead. Returns 0, or -1 when some file failed. */
static int consume(job *j, ssae_backend *be, out_state *out) {
  const size_t n = j->n;
  ssae_err err = {{0}};
  float *batch = NULL, *scores = NULL;
  size_t batch_cap = 0;
  int status = 0;
  size_t i = 0;
  while (i < n) {
    /* Files [i, e) that are ready, up to a batch's worth of windows. */
    pthread_mutex_lock(&j->mu);
    /* After Ctrl-C / SIGTERM a file still being read is not waited for: its
     * reader may be stuck (a FIFO, a dead network mount), and a scheduler
     * that sent SIGTERM wants the process gone. */
    while (j->slots[i].state == 0 && !g_stop) {
      struct timespec until;
      clock_gettime(CLOCK_REALTIME, &until);
      until.tv_nsec += 100000000L;
      if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
      }
      pthread_cond_timedwait(&j->ready, &j->mu, &until);
    }
    if (j->slots[i].state == 0) {
      pthread_mutex_unlock(&j->mu);
      progress(out, 1);
      ssae_cli_error(CMD, "interrupted: %zu of %zu files done", i, n);
      out->interrupted = 1;
      out->abandoned = 1;
      break;
    }
    size_t e = i, total = 0;
    while (e < n && j->slots[e].state != 0 &&
           (e == i || total + j->slots[e].fs.n_windows <= BATCH_WINDOWS)) {
      total += j->slots[e].fs.n_windows;
      e++;
    }
    pthread_mutex_unlock(&j->mu);

    /* Files that still need scores (not scored by their worker): their
     * frames end to end, one run of frames for the backend, which reads
     * every window in place. The F-1 windows that straddle two files are
     * scored too and skipped (about 1 % more work). */
    size_t M = (size_t)j->m->d.n_mels, nfr = 0;
    for (size_t k = i; k < e; k++)
      if (j->slots[k].state == 1 && !j->slots[k].fs.scores) nfr += j->slots[k].fs.n_frames;
    if (nfr > batch_cap) {
      free(batch);
      free(scores);
      batch = malloc(nfr * M * sizeof *batch);
      scores = malloc(nfr * sizeof *scores);
      batch_cap = nfr;
      if (!batch || !scores) {
        ssae_cli_error(CMD, "out of memory for %zu frames", nfr);
        status = -1;
        break;
      }
    }
    size_t off = 0;
    for (size_t k = i; k < e; k++) {
      const ssae_file_scores *fs = &j->slots[k].fs;
      if (j->slots[k].state != 1 || fs->scores) continue;
      memcpy(batch + off * M, fs->frames, fs->n_frames * M * sizeof *batch);
      off += fs->n_frames;
    }
    int run_failed = off && ssae_backend_run_frames(be, batch, off, scores, &err);
    if (run_failed) ssae_cli_error(CMD, "the model failed: %s", err.msg);
    off = 0;
    for (size_t k = i; k < e; k++) {
      slot *s = &j->slots[k];
      if (s->state == 1 && s->fs.warning.msg[0]) {
        progress(out, 1);
        ssae_cli_error(CMD, "warning: %s", s->fs.warning.msg);
      }
      int failed = s->state == 2 || (run_failed && !s->fs.scores);
      if (failed) {
        progress(out, 1);
        if (s->state == 2) ssae_cli_error(CMD, "%s", s->error);
        status = -1;
        out->failed++;
      } else if (s->fs.scores) {
        /* Windows first: a shard's result line then always has its
         * windows written (what --resume relies on). */
        emit_windows(out, j->paths[k], s, s->fs.scores, j->m);
        emit(out, j->paths[k], s, s->fs.scores);
      } else {
        emit_windows(out, j->paths[k], s, scores + off, j->m);
        emit(out, j->paths[k], s, scores + off);
        off += s->fs.n_frames;
      }
      if (out->sj && shard_file_done(out, j->paths[k], failed ? s->error ? s->error
                                                                         : err.msg
                                                              : NULL))
        status = -1;
      ssae_file_scores_release(&s->fs);
      free(s->error);
      s->error = NULL;
      out->done++;
    }
    flush_results(out);
    pthread_mutex_lock(&j->mu);
    j->consumed = e;
    pthread_cond_broadcast(&j->room);
    pthread_mutex_unlock(&j->mu);
    i = e;
    progress(out, 0);
    if (g_stop && i < n) {
      progress(out, 1);
      ssae_cli_error(CMD, "interrupted: %zu of %zu files done", i, n);
      out->interrupted = 1;
      break;
    }
  }
  free(batch);
  free(scores);
  return status;
}

#if SSAE_HAVE_CUDA
/* The GPU front end's results (ssae_score_gpu.h), printed as consume does. */
typedef struct {
  out_state *out;
  const ssae_model *m;
  int failed;
} gpu_out;

static void on_gpu_file(void *user, const ssae_scored_file *f) {
  gpu_out *g = user;
  if (f->error) {
    progress(g->out, 1);
    ssae_cli_error(CMD, "%s", f->error);
    g->failed = 1;
    g->out->failed++;
  } else {
    slot s = {.state = 1};
    s.fs.n_windows = f->n_windows;
    emit(g->out, f->path, &s, f->scores);
    emit_windows(g->out, f->path, &s, f->scores, g->m);
  }
  g->out->done++;
  if (f->batch_end) flush_results(g->out);
  progress(g->out, 0);
}

/* `auto` takes the GPU front end for a job of at least this many bytes of
 * input per CPU core the CPU path would use, the CPU path below it. The
 * GPU path pays 0.3-0.4 s before and after its work (driver, context,
 * page-locked memory; H100 host, BENCHMARKS.md) and then scores ~10x
 * faster than 16 cores: it breaks even near 60 MB of 16-bit audio per
 * core; over twice that leaves room for hosts and files that differ. A rule on
 * the input's size, read before any CUDA call (which would itself cost
 * the small job its start-up). */
#define AUTO_GPU_BYTES_PER_CORE (160ull << 20)

/* Whether auto should run this job on the GPU front end: its files'
 * bytes (regular files, counted until enough) against the rule above;
 * SSAE_AUTO_GPU_MIN_BYTES overrides the threshold (tests). */
static int auto_picks_gpu(const opts *o, char *const *paths, size_t n) {
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  unsigned long long cores = o->jobs > 0 ? (unsigned long long)o->jobs
                             : ncpu < 1  ? 1
                             : ncpu > 64 ? 64
                                         : (unsigned long long)ncpu;
  unsigned long long need = cores * AUTO_GPU_BYTES_PER_CORE, have = 0;
  const char *env = getenv("SSAE_AUTO_GPU_MIN_BYTES");
  if (env && *env) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(env, &end, 10);
    if (!errno && !*end) need = v;
  }
  for (size_t i = 0; i < n && have < need; i++) {
    struct stat st;
    if (!stat(paths[i], &st) && S_ISREG(st.st_mode)) have += (unsigned long long)st.st_size;
  }
  return have >= need;
}

/* Everything but decoding on the GPU, many files per launch: with
 * --backend cuda, and with auto for large jobs (auto_picks_gpu). Returns
 * the exit status, or -1 when the GPU front end cannot start (the caller
 * goes on with the backend path). */
static int score_on_gpu(const opts *o, const ssae_model *m, char *const *paths, size_t n,
                        FILE *of) {
  const int is_auto = !strcmp(o->backend, "auto");
  if (strcmp(o->backend, "cuda") && !(is_auto && auto_picks_gpu(o, paths, n))) return -1;
  /* Its decoders take no reader options: --strict goes the backend path. */
  if (o->strict) return -1;
  /* Without a device the backend path says why (and the test hook runs
   * the front end's CPU path). */
  const char *hook = getenv("SSAE_SCORE_GPU_ON_CPU");
  if (!ssae_cuda_fe_device_present() && !(hook && !strcmp(hook, "1"))) return -1;
  out_state out = {.json = !strcmp(o->format, "json"), .tty = ssae_cli_stderr_tty(),
                   .quiet = o->quiet, .threshold = m->threshold, .total = n, .t0 = now(),
                   .of = of};
  ssae_err err = {{0}}, note = {{0}};
  if (o->windows) {
    if (!(out.wf = ssae_outfile_open(o->windows, &err))) {
      ssae_cli_error(CMD, "%s", err.msg);
      return SSAE_EXIT_INPUT;
    }
    ssae_outfile_printf(out.wf, "path\twindow\ttime\tscore\n");
    out.wfp = ssae_outfile_fp(out.wf);
  }
  gpu_out g = {.out = &out, .m = m};
  ssae_score_gpu_stats st = {0};
  ssae_score_gpu_opts go = {.channel = o->channel, .jobs = o->jobs, .device = o->device,
                            .stats = &st};
  if (ssae_score_files_gpu(m, paths, n, &go, on_gpu_file, &g, &note, &err)) {
    if (!is_auto)
      ssae_cli_error(CMD, "GPU front end unavailable, scoring with the backend: %s", err.msg);
    if (out.wf) ssae_outfile_abort(out.wf);
    return -1;
  }
  progress(&out, 1);
  if (o->stats)
    fprintf(stderr,
            "ssae score: GPU front end: %llu runs of %d files x %zu samples, %.3f s wall: "
            "%.3f s making the front ends (the first files read meanwhile), %.3f s in the "
            "runs (upload, front end, model, scores back), %.3f s waiting for the %d "
            "decoding threads, %.3f s writing results; the decoding threads: %.3f s opening "
            "files, %.3f s reading samples (summed)\n",
            st.runs, st.files, st.block, st.wall_s, st.setup_s, st.gpu_s, st.wait_s, st.jobs,
            st.emit_s, st.open_s, st.read_s);
  if (note.msg[0]) ssae_cli_error(CMD, "went on on the CPU: %s", note.msg);
  int status = g.failed ? SSAE_EXIT_INPUT : SSAE_EXIT_OK;
  if (out.wf && ssae_outfile_commit(out.wf, &err)) {
    ssae_cli_error(CMD, "%s", err.msg);
    status = SSAE_EXIT_INPUT;
  }
  if (out.failed) ssae_cli_error(CMD, "%zu of %zu files failed", out.failed, n);
  return status;
}
#endif

/* Scores the n files of paths (the caller's) and writes them in order to
 * of (stdout, -o's file, or the shard's output of sj); 0, or 1 when some
 * failed. */
static int run(const opts *o, char *const *paths, size_t n, FILE *of, ssae_shard_job *sj) {
  ssae_err err = {{0}};
  ssae_model *m = ssae_model_open(o->model, &err);
  if (!m) {
    ssae_cli_error(CMD, "%s", err.msg);
    return SSAE_EXIT_INPUT;
  }
#if SSAE_HAVE_CUDA
  /* Shards keep their books per file through the backend path. */
  int gpu_status = sj ? -1 : score_on_gpu(o, m, paths, n, of);
  if (gpu_status >= 0) {
    ssae_model_free(m);
    return gpu_status;
  }
  /* auto, when the job is too small for the GPU front end (or it could not
   * start): the CPU path (the CUDA backend with the front end on the CPU
   * is slower than it end to end). */
  const char *backend = strcmp(o->backend, "auto") ? o->backend : "cpu";
#else
  const char *backend = o->backend;
#endif
  /* CUDA: on --device's GPU, current on this thread (ssae_cli_use_device) */
  ssae_backend *be = ssae_backend_new(m, backend, BATCH_WINDOWS, &err);
  if (!be) {
    ssae_cli_error(CMD, "%s", err.msg);
    ssae_model_free(m);
    return SSAE_EXIT_INPUT;
  }
  if (*ssae_backend_note(be)) ssae_cli_error(CMD, "using the CPU: %s", ssae_backend_note(be));
  ssae_backend_set_fallback_cb(be, on_fallback, NULL);

  out_state out = {.json = !strcmp(o->format, "json"), .tty = ssae_cli_stderr_tty(),
                   .quiet = o->quiet, .threshold = m->threshold, .total = n, .t0 = now(),
                   .of = of, .sj = sj};
  int status = SSAE_EXIT_OK;
  if (sj) {
    out.wfp = ssae_shard_job_windows(sj);
  } else if (o->windows) {
    out.wf = ssae_outfile_open(o->windows, &err);
    if (!out.wf) {
      ssae_cli_error(CMD, "%s", err.msg);
      ssae_backend_free(be);
      ssae_model_free(m);
      return SSAE_EXIT_INPUT;
    }
    ssae_outfile_printf(out.wf, "path\twindow\ttime\tscore\n");
    out.wfp = ssae_outfile_fp(out.wf);
  }

  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int nw = o->jobs ? o->jobs : ncpu < 1 ? 1 : ncpu > 64 ? 64 : (int)ncpu;
  if ((size_t)nw > n) nw = (int)n;
  job j = {.paths = (char **)paths, .n = n, .m = m, .channel = o->channel,
           .audio = {.strict = o->strict},
           .ahead = (size_t)nw * 4 + 8,
           /* On the CPU each worker scores its own files, right after their
            * features, on one thread: no batch copies, no hand-over. */
           .score_in_workers = ssae_backend_cpu_direct(be)};
  j.slots = calloc(n, sizeof *j.slots);
  pthread_t *tids = calloc((size_t)nw, sizeof *tids);
  int started = 0;
  if (!j.slots || !tids || pthread_mutex_init(&j.mu, NULL)) {
    ssae_cli_error(CMD, "out of memory");
    status = SSAE_EXIT_INPUT;
    goto done;
  }
  pthread_cond_init(&j.ready, NULL);
  pthread_cond_init(&j.room, NULL);
  for (; started < nw; started++)
    if (pthread_create(&tids[started], NULL, worker, &j)) break;
  if (!started) {
    ssae_cli_error(CMD, "cannot start worker threads");
    status = SSAE_EXIT_INPUT;
    goto joined;
  }

  if (consume(&j, be, &out)) status = SSAE_EXIT_INPUT;
  progress(&out, 1);
  if (o->stats)
    fprintf(stderr, "ssae score: %s backend: %zu files in %.3f s wall on %d threads (decoding, "
            "features and the model in each)\n", ssae_backend_name(be), n, now() - out.t0, started);

joined:
  pthread_mutex_lock(&j.mu);
  j.stop = 1;
  pthread_cond_broadcast(&j.room);
  pthread_mutex_unlock(&j.mu);
  if (out.abandoned) {
    /* A reader may never return: it keeps the job's memory (the process
     * exits right after the outputs are closed). */
    j.slots = NULL;
    tids = NULL;
    goto outputs;
  }
  for (int t = 0; t < started; t++) pthread_join(tids[t], NULL);
  pthread_cond_destroy(&j.ready);
  pthread_cond_destroy(&j.room);
  pthread_mutex_destroy(&j.mu);
done:
  if (j.slots)
    for (size_t k = 0; k < n; k++) {
      ssae_file_scores_release(&j.slots[k].fs);
      free(j.slots[k].error);
    }
  free(j.slots);
  free(tids);
outputs:
  /* After Ctrl-C the windows of the files done are kept: whole lines. */
  if (out.wf && ssae_outfile_commit(out.wf, &err)) {
    ssae_cli_error(CMD, "%s", err.msg);
    status = SSAE_EXIT_INPUT;
  }
  if (out.interrupted) status = 130;
  if (out.failed) ssae_cli_error(CMD, "%zu of %zu files failed", out.failed, n);
  /* A shard is complete when every file has its line (a failure record
   * counts); otherwise its .partial outputs stay for --resume. */
  if (sj && out.done == n && ssae_shard_job_finish(sj, &err)) {
    ssae_cli_error(CMD, "%s", err.msg);
    status = SSAE_EXIT_INPUT;
  }
  ssae_backend_free(be);
  ssae_model_free(m);
  return status;
}

/* The inputs of a run without --shard: --files-from's paths, then the
 * arguments, directories expanded. */
static int collect_inputs(const opts *o, char *const *args, int n_args, char ***paths,
                          size_t *n) {
  ssae_err err = {{0}};
  char **listed = NULL, **all = NULL;
  size_t nl = 0;
  int rc = -1;
  if (o->files_from && ssae_paths_read_list(o->files_from, &listed, &nl, &err)) goto done;
  if (!(all = malloc((nl + (size_t)n_args + 1) * sizeof *all))) {
    ssae_err_set(&err, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < nl; i++) all[i] = listed[i];
  for (int i = 0; i < n_args; i++) all[nl + (size_t)i] = args[i];
  rc = ssae_paths_expand(all, nl + (size_t)n_args, paths, n, &err);
done:
  if (rc) ssae_cli_error(CMD, "%s", err.msg);
  free(all);
  ssae_paths_free(listed, nl);
  return rc;
}

/* Without --shard and --resume: every input, to stdout or -o's file. */
static int run_all(const opts *o, char *const *args, int n_args) {
  char **paths = NULL;
  size_t n = 0;
  if (collect_inputs(o, args, n_args, &paths, &n)) return SSAE_EXIT_INPUT;
  if (!n) {
    ssae_cli_error(CMD, "no audio files found");
    return SSAE_EXIT_INPUT;
  }
  ssae_err err = {{0}};
  ssae_outfile *f = o->output ? ssae_outfile_open(o->output, &err) : NULL;
  int rc;
  if (o->output && !f) {
    ssae_cli_error(CMD, "%s", err.msg);
    rc = SSAE_EXIT_INPUT;
  } else {
    rc = run(o, paths, n, f ? ssae_outfile_fp(f) : stdout, NULL);
    if (f && ssae_outfile_commit(f, &err)) {
      ssae_cli_error(CMD, "%s", err.msg);
      rc = SSAE_EXIT_INPUT;
    }
  }
  ssae_paths_free(paths, n);
  return rc;
}

/* --shard (or --resume alone: shard 0/1): the files of this shard that no
 * earlier run completed, to its outputs (ssae_shard_job.h). */
static int run_shard(const opts *o, char *const *args, int n_args) {
  ssae_shard_job_opts jo = {.args = args, .n_args = (size_t)n_args,
                            .files_from = o->files_from, .shard = o->shard ? o->shard : "0/1",
                            .shard_count = (size_t)o->shard_count, .resume = o->resume,
                            .out = o->output, .windows = o->windows,
                            .json = !strcmp(o->format, "json")};
  ssae_err err = {{0}};
  ssae_shard_job *sj = ssae_shard_job_new(&jo, &err);
  if (!sj) {
    ssae_cli_error(CMD, "%s", err.msg);
    return SSAE_EXIT_INPUT;
  }
  int rc = SSAE_EXIT_OK;
  size_t n;
  char *const *pending = ssae_shard_job_pending(sj, &n);
  const ssae_shard_spec *spec = ssae_shard_job_spec(sj);
  if (!ssae_shard_job_list(sj)->n) {
    ssae_cli_error(CMD, "no audio files found");
    rc = SSAE_EXIT_INPUT;
  } else {
    if (ssae_shard_job_done_before(sj))
      ssae_cli_error(CMD, "shard %zu/%zu: %zu of %zu files done already", spec->index,
                     spec->count, ssae_shard_job_done_before(sj), ssae_shard_job_files(sj));
    if (n) {
      rc = run(o, pending, n, ssae_shard_job_out(sj), sj);
    } else if (ssae_shard_job_finish(sj, &err)) { /* nothing (left) to do */
      ssae_cli_error(CMD, "%s", err.msg);
      rc = SSAE_EXIT_INPUT;
    }
  }
  ssae_shard_job_free(sj);
  return rc;
}

int ssae_cmd_score(int argc, char **argv) {
  opts o = {.backend = "auto", .format = "tsv"};
  ssae_cli_args args;
  int rc = ssae_cli_parse(&command, argc, argv, &o, &args);
  if (rc != SSAE_CLI_CONTINUE) return rc;
  ssae_shard_spec spec;
  ssae_err err = {{0}};
  ssae_cli_one_cuda_queue(o.backend);
  if (!args.n_pos && !o.files_from) {
    rc = ssae_cli_usage_error(&command, "no input files");
  } else if (o.shard && ssae_shard_spec_parse(o.shard, (size_t)o.shard_count, &spec, &err)) {
    /* A bad I/N, or auto outside a scheduler: the command line is wrong. */
    ssae_cli_error(CMD, "%s", err.msg);
    rc = SSAE_EXIT_USAGE;
  } else if (o.shard_count && !o.shard) {
    rc = ssae_cli_usage_error(&command, "--shard-count goes with --shard");
  } else if (o.resume && !o.output) {
    rc = ssae_cli_usage_error(&command, "--resume needs -o, the output of the earlier run");
  } else if ((rc = ssae_cli_use_device(CMD, o.device, o.backend)) != SSAE_EXIT_OK) {
    /* before any work (else the front end would fail and the job go on
     * elsewhere); the device is now this thread's, where run makes the
     * backend */
  } else {
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    /* Writes under way finish: a line is never cut by the signal. */
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
#if SSAE_HAVE_CUDA
    /* The driver and the context start while the files are listed and the
     * model read (auto decides by the files' sizes, so not before). */
    const int warm = !strcmp(o.backend, "cuda");
    if (warm) ssae_cuda_fe_warm_up(o.device);
#endif
    rc = o.shard || o.resume ? run_shard(&o, args.pos, args.n_pos)
                             : run_all(&o, args.pos, args.n_pos);
#if SSAE_HAVE_CUDA
    if (warm) ssae_cuda_fe_warm_up_end();
#endif
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
  }
  ssae_cli_args_free(&args);
  return rc;
}
