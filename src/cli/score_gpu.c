/* ssae score on the GPU front end (gpu/ssae_score_gpu.h; CUDA builds only):
 * whether a run takes it (--backend cuda, or auto for a large job), and its
 * results, which come back on the main thread in input order, a run's files
 * at a time; its decoding threads are its own. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "score_internal.h"
#include "ssae_cuda_frontend.h"
#include "ssae_model.h"
#include "ssae_outfile.h"
#include "ssae_score_gpu.h"

/* The GPU front end's results (ssae_score_gpu.h), printed as consume does. */
typedef struct {
  score_out *out;
  const ssae_model *m;
  int results; /* batches of results so far */
} gpu_out;

static void on_gpu_file(void *user, const ssae_scored_file *f) {
  gpu_out *g = user;
  if (f->error) {
    score_progress(g->out, 1);
    ssae_cli_error(SCORE_CMD, "%s", f->error);
    g->out->failed++;
  } else {
    score_emit(g->out, f->path, f->n_windows, f->scores);
    score_emit_windows(g->out, f->path, f->n_windows, f->scores, g->m);
  }
  g->out->done++;
  if (f->batch_end) {
    score_flush_results(g->out);
    /* Test hook: a signal after the first results (while other files are
     * on their way). */
    if (!g->results++) ssae_cli_test_pause(SCORE_CMD, "score-results", score_stop_flag());
  }
  score_progress(g->out, 0);
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
static int auto_picks_gpu(const score_opts *o, char *const *paths, size_t n) {
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
int score_on_gpu(const score_opts *o, const ssae_model *m, char *const *paths, size_t n,
                 FILE *of) {
  const int is_auto = !strcmp(o->backend, "auto");
  if (strcmp(o->backend, "cuda") && !(is_auto && auto_picks_gpu(o, paths, n))) return -1;
  /* Its decoders take no reader options: --strict goes the backend path. */
  if (o->strict) return -1;
  /* Without a device the backend path says why (and the test hook runs
   * the front end's CPU path). */
  const char *hook = getenv("SSAE_SCORE_GPU_ON_CPU");
  if (!ssae_cuda_fe_device_present() && !(hook && !strcmp(hook, "1"))) return -1;
  score_out out = {.json = !strcmp(o->format, "json"), .tty = ssae_cli_stderr_tty(),
                   .quiet = o->quiet, .threshold = m->threshold, .total = n, .t0 = score_now(),
                   .of = of};
  ssae_err err = {{0}}, note = {{0}};
  if (o->windows) {
    if (!(out.wf = ssae_outfile_open(o->windows, &err))) {
      ssae_cli_error(SCORE_CMD, "%s", err.msg);
      return SSAE_EXIT_INPUT;
    }
    ssae_outfile_printf(out.wf, "path\twindow\ttime\tscore\n");
    out.wfp = ssae_outfile_fp(out.wf);
  }
  gpu_out g = {.out = &out, .m = m};
  ssae_score_gpu_stats st = {0};
  /* Ctrl-C / SIGTERM: the files started are finished and printed. */
  ssae_score_gpu_opts go = {.channel = o->channel, .jobs = o->jobs, .device = o->device,
                            .stats = &st, .stop = score_stop_flag()};
  if (ssae_score_files_gpu(m, paths, n, &go, on_gpu_file, &g, &note, &err)) {
    if (!is_auto)
      ssae_cli_error(SCORE_CMD, "GPU front end unavailable, scoring with the backend: %s",
                     err.msg);
    if (out.wf) ssae_outfile_abort(out.wf);
    return -1;
  }
  score_progress(&out, 1);
  if (o->stats)
    fprintf(stderr,
            "ssae score: GPU front end: %llu runs of %d files x %zu samples, %.3f s wall: "
            "%.3f s making the front ends (the first files read meanwhile), %.3f s in the "
            "runs (upload, front end, model, scores back), %.3f s waiting for the %d "
            "decoding threads, %.3f s writing results; the decoding threads: %.3f s opening "
            "files, %.3f s reading samples (summed)\n",
            st.runs, st.files, st.block, st.wall_s, st.setup_s, st.gpu_s, st.wait_s, st.jobs,
            st.emit_s, st.open_s, st.read_s);
  if (note.msg[0]) ssae_cli_error(SCORE_CMD, "went on on the CPU: %s", note.msg);
  int status = out.failed ? SSAE_EXIT_INPUT : SSAE_EXIT_OK;
  /* Stopped (Ctrl-C, SIGTERM): the windows of the files done are kept. */
  const int interrupted = out.done < n;
  if (interrupted) ssae_cli_error(SCORE_CMD, "interrupted: %zu of %zu files done", out.done, n);
  if (out.wf && ssae_outfile_commit(out.wf, &err)) {
    ssae_cli_error(SCORE_CMD, "%s", err.msg);
    status = SSAE_EXIT_INPUT;
  }
  if (interrupted) status = 130;
  if (out.failed) ssae_cli_error(SCORE_CMD, "%zu of %zu files failed", out.failed, n);
  return status;
}
