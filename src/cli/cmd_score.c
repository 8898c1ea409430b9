/* ssae score: anomaly scores of audio files (SPEC section 4). This file:
 * the options, the inputs (every argument, or a shard's: ssae_shard_job.h),
 * and run, which scores them on the GPU front end (score_gpu.c) or on the
 * backend path (score_pipeline.c). Main thread; the command's other files
 * and their threads: score_internal.h. */
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_opts.h"
#include "score_internal.h"
#include "ssae_backend.h"
#include "ssae_config.h"
#include "ssae_model.h"
#include "ssae_outfile.h"
#if SSAE_HAVE_CUDA
#include "ssae_cuda_frontend.h"
#endif
#include "ssae_shard.h"
#include "ssae_shard_job.h"

static const char *const formats[] = {"tsv", "json", NULL};

static const ssae_cli_opt options[] = {
    {.kind = SSAE_CLI_STRING, .name = "--model", .offset = offsetof(score_opts, model),
     .metavar = "M", .help = "model file", .def = "the model built into ssae"},
    {.kind = SSAE_CLI_CHOICE, .name = "--backend", .offset = offsetof(score_opts, backend),
     .choices = ssae_cli_backends,
     .help = "where the model runs; cuda: the GPU front end (PCM in, scores out, many files "
             "per launch); auto: the GPU front end for jobs of at least 160 MB of input per "
             "CPU core when there is a GPU (where it pays back its start-up), else the CPU"},
    {.kind = SSAE_CLI_CUSTOM, .name = "--channel", .offset = offsetof(score_opts, channel),
     .metavar = "N|mix", .help = "channel index from 0, or the mean of all channels",
     .parse = ssae_cli_parse_channel, .show = ssae_cli_show_channel},
    {.kind = SSAE_CLI_STRING, .name = "--windows", .offset = offsetof(score_opts, windows),
     .metavar = "OUT.tsv",
     .help = "also write every window: path, window index, time in seconds of the window's "
             "centre (the centre of its middle frame), window score; first line a header",
     .def = ""},
    {.kind = SSAE_CLI_CHOICE, .name = "--format", .offset = offsetof(score_opts, format),
     .choices = formats,
     .help = "tsv: path, score, windows, verdict separated by tabs; json: one JSON object "
             "per line with keys path, score, windows, verdict"},
    {.kind = SSAE_CLI_INT, .name = "--jobs", .offset = offsetof(score_opts, jobs), .metavar = "N",
     .min = 1, .max = 256,
     .help = "decoding threads, which on the CPU also run the model", .def = "all cores"},
    {.kind = SSAE_CLI_FLAG, .name = "--quiet", .short_name = 'q',
     .offset = offsetof(score_opts, quiet), .help = "no progress line"},
    {.kind = SSAE_CLI_FLAG, .name = "--stats", .offset = offsetof(score_opts, stats),
     .help = "at the end, where the time went on stderr (the GPU front end: its runs, the "
             "time on the GPU and waiting for the decoding threads; the CPU: files, wall "
             "time, threads)"},
    {.kind = SSAE_CLI_FLAG, .name = "--strict", .offset = offsetof(score_opts, strict),
     .help = "a file whose data chunk is shorter than its header says is an error, not a "
             "warning"},
    {.kind = SSAE_CLI_INT, .name = "--device", .offset = offsetof(score_opts, device),
     .metavar = "N", .min = 0, .max = 255,
     .help = "CUDA device to run on: the GPU front end's and the CUDA backend's (one "
             "process per GPU scales)", .def = "0"},
    {.kind = SSAE_CLI_STRING, .name = "--output", .short_name = 'o',
     .offset = offsetof(score_opts, output), .metavar = "OUT",
     .help = "write the results to OUT (atomically; with --shard or --resume as OUT.partial, "
             "renamed to OUT when the shard is complete)",
     .def = "stdout"},
    {.kind = SSAE_CLI_HEADING,
     .help = "shards of an archive (Slurm job arrays, Kubernetes indexed jobs; ssae merge):"},
    {.kind = SSAE_CLI_STRING, .name = "--files-from", .offset = offsetof(score_opts, files_from),
     .metavar = "FILE|-",
     .help = "also score the paths listed in FILE, one a line ('-': stdin); directories are "
             "expanded",
     .def = ""},
    {.kind = SSAE_CLI_STRING, .name = "--shard", .offset = offsetof(score_opts, shard),
     .metavar = "I/N|auto",
     .help = "score only the I-th (from 0) of N parts of the sorted inputs, balanced by bytes "
             "on disk; the output starts with a line naming the shard and the input list's "
             "digest; auto: the part from a Slurm array (SLURM_ARRAY_TASK_ID) or a Kubernetes "
             "indexed job (JOB_COMPLETION_INDEX)",
     .def = ""},
    {.kind = SSAE_CLI_INT, .name = "--shard-count", .offset = offsetof(score_opts, shard_count),
     .metavar = "N", .min = 1, .max = SSAE_SHARD_MAX,
     .help = "the number of shards for --shard auto (a Kubernetes job's completions; with "
             "Slurm the array's task IDs are then the shard indices)",
     .def = "from the scheduler, or SSAE_SHARD_COUNT"},
    {.kind = SSAE_CLI_FLAG, .name = "--resume", .offset = offsetof(score_opts, resume),
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

static void on_fallback(void *user, const char *msg) {
  (void)user;
  ssae_cli_error(SCORE_CMD, "%s", msg);
}

/* Scores the n files of paths (the caller's) and writes them in order to
 * of (stdout, -o's file, or the shard's output of sj); 0, or 1 when some
 * failed. */
static int run(const score_opts *o, char *const *paths, size_t n, FILE *of, ssae_shard_job *sj) {
  ssae_err err = {{0}};
  ssae_model *m = ssae_model_open(o->model, &err);
  if (!m) {
    ssae_cli_error(SCORE_CMD, "%s", err.msg);
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
  ssae_backend *be = ssae_backend_new(m, backend, SCORE_BATCH_WINDOWS, &err);
  if (!be) {
    ssae_cli_error(SCORE_CMD, "%s", err.msg);
    ssae_model_free(m);
    return SSAE_EXIT_INPUT;
  }
  if (*ssae_backend_note(be)) ssae_cli_error(SCORE_CMD, "using the CPU: %s", ssae_backend_note(be));
  ssae_backend_set_fallback_cb(be, on_fallback, NULL);

  score_out out = {.json = !strcmp(o->format, "json"), .tty = ssae_cli_stderr_tty(),
                   .quiet = o->quiet, .threshold = m->threshold, .total = n, .t0 = score_now(),
                   .of = of, .sj = sj};
  if (sj) {
    out.wfp = ssae_shard_job_windows(sj);
  } else if (o->windows) {
    out.wf = ssae_outfile_open(o->windows, &err);
    if (!out.wf) {
      ssae_cli_error(SCORE_CMD, "%s", err.msg);
      ssae_backend_free(be);
      ssae_model_free(m);
      return SSAE_EXIT_INPUT;
    }
    ssae_outfile_printf(out.wf, "path\twindow\ttime\tscore\n");
    out.wfp = ssae_outfile_fp(out.wf);
  }

  int status = score_pipeline_run(o, m, be, paths, n, &out);
  /* After Ctrl-C the windows of the files done are kept: whole lines. */
  if (out.wf && ssae_outfile_commit(out.wf, &err)) {
    ssae_cli_error(SCORE_CMD, "%s", err.msg);
    status = SSAE_EXIT_INPUT;
  }
  if (out.interrupted) status = 130;
  if (out.failed) ssae_cli_error(SCORE_CMD, "%zu of %zu files failed", out.failed, n);
  /* A shard is complete when every file has its line (a failure record
   * counts); otherwise its .partial outputs stay for --resume. */
  if (sj && out.done == n && ssae_shard_job_finish(sj, &err)) {
    ssae_cli_error(SCORE_CMD, "%s", err.msg);
    status = SSAE_EXIT_INPUT;
  }
  ssae_backend_free(be);
  ssae_model_free(m);
  return status;
}

/* The inputs of a run without --shard: --files-from's paths, then the
 * arguments, directories expanded. */
static int collect_inputs(const score_opts *o, char *const *args, int n_args, char ***paths,
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
  if (rc) ssae_cli_error(SCORE_CMD, "%s", err.msg);
  free(all);
  ssae_paths_free(listed, nl);
  return rc;
}

/* Without --shard and --resume: every input, to stdout or -o's file. */
static int run_all(const score_opts *o, char *const *args, int n_args) {
  char **paths = NULL;
  size_t n = 0;
  if (collect_inputs(o, args, n_args, &paths, &n)) return SSAE_EXIT_INPUT;
  if (!n) {
    ssae_cli_error(SCORE_CMD, "no audio files found");
    return SSAE_EXIT_INPUT;
  }
  ssae_err err = {{0}};
  ssae_outfile *f = o->output ? ssae_outfile_open(o->output, &err) : NULL;
  int rc;
  if (o->output && !f) {
    ssae_cli_error(SCORE_CMD, "%s", err.msg);
    rc = SSAE_EXIT_INPUT;
  } else {
    rc = run(o, paths, n, f ? ssae_outfile_fp(f) : stdout, NULL);
    if (f && ssae_outfile_commit(f, &err)) {
      ssae_cli_error(SCORE_CMD, "%s", err.msg);
      rc = SSAE_EXIT_INPUT;
    }
  }
  ssae_paths_free(paths, n);
  return rc;
}

/* --shard (or --resume alone: shard 0/1): the files of this shard that no
 * earlier run completed, to its outputs (ssae_shard_job.h). */
static int run_shard(const score_opts *o, char *const *args, int n_args) {
  ssae_shard_job_opts jo = {.args = args, .n_args = (size_t)n_args,
                            .files_from = o->files_from, .shard = o->shard ? o->shard : "0/1",
                            .shard_count = (size_t)o->shard_count, .resume = o->resume,
                            .out = o->output, .windows = o->windows,
                            .json = !strcmp(o->format, "json")};
  ssae_err err = {{0}};
  ssae_shard_job *sj = ssae_shard_job_new(&jo, &err);
  if (!sj) {
    ssae_cli_error(SCORE_CMD, "%s", err.msg);
    return SSAE_EXIT_INPUT;
  }
  int rc = SSAE_EXIT_OK;
  size_t n;
  char *const *pending = ssae_shard_job_pending(sj, &n);
  const ssae_shard_spec *spec = ssae_shard_job_spec(sj);
  if (!ssae_shard_job_list(sj)->n) {
    ssae_cli_error(SCORE_CMD, "no audio files found");
    rc = SSAE_EXIT_INPUT;
  } else {
    if (ssae_shard_job_done_before(sj))
      ssae_cli_error(SCORE_CMD, "shard %zu/%zu: %zu of %zu files done already", spec->index,
                     spec->count, ssae_shard_job_done_before(sj), ssae_shard_job_files(sj));
    if (n) {
      rc = run(o, pending, n, ssae_shard_job_out(sj), sj);
    } else if (ssae_shard_job_finish(sj, &err)) { /* nothing (left) to do */
      ssae_cli_error(SCORE_CMD, "%s", err.msg);
      rc = SSAE_EXIT_INPUT;
    }
  }
  ssae_shard_job_free(sj);
  return rc;
}

int ssae_cmd_score(int argc, char **argv) {
  score_opts o = {.backend = "auto", .format = "tsv"};
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
    ssae_cli_error(SCORE_CMD, "%s", err.msg);
    rc = SSAE_EXIT_USAGE;
  } else if (o.shard_count && !o.shard) {
    rc = ssae_cli_usage_error(&command, "--shard-count goes with --shard");
  } else if (o.resume && !o.output) {
    rc = ssae_cli_usage_error(&command, "--resume needs -o, the output of the earlier run");
  } else if ((rc = ssae_cli_use_device(SCORE_CMD, o.device, o.backend)) != SSAE_EXIT_OK) {
    /* before any work (else the front end would fail and the job go on
     * elsewhere); the device is now this thread's, where run makes the
     * backend */
  } else {
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = score_on_signal;
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
