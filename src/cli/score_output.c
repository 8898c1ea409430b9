/* ssae score's outputs, on the main thread: a result line per file (tsv or
 * json), the --windows lines, the progress line on stderr, stdout checked
 * as it goes, and a shard's books per file. Both the backend path
 * (score_pipeline.c) and the GPU front end (score_gpu.c) write through
 * here. */
#include <math.h>
#include <stdio.h>
#include <time.h>

#include "cli.h"
#include "score_internal.h"
#include "ssae_model.h"
#include "ssae_outfile.h"
#include "ssae_shard_job.h"

double score_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

void score_progress(score_out *o, int final) {
  if (o->quiet || o->total < 2) return;
  double t = score_now(), el = t - o->t0;
  if (o->tty) {
    if (final) {
      fprintf(stderr, "\r\033[K");
      return;
    }
    if (t - o->last_log < 0.1) return;
    fprintf(stderr, "\r\033[Kssae score: %zu/%zu files, %.1f files/s", o->done, o->total,
            el > 0 ? (double)o->done / el : 0.0);
  } else {
    /* Plain lines, and only for long runs: the first 10 s after the start */
    if (final || t - (o->last_log > 0 ? o->last_log : o->t0) < 10.0) return;
    fprintf(stderr, "ssae score: %zu/%zu files, %.1f files/s\n", o->done, o->total,
            el > 0 ? (double)o->done / el : 0.0);
  }
  o->last_log = t;
}

/* stdout is checked as it goes, so that its failure is reported with the
 * reason when it happens (once; main's exit check makes the status 1). */
static void check_stdout(score_out *o) {
  ssae_err e = {{0}};
  /* -o's file and a shard's outputs are checked when they are committed. */
  if (o->of != stdout) return;
  if (!o->stdout_failed && ssae_stdout_check(&e)) {
    o->stdout_failed = 1;
    score_progress(o, 1);
    if (e.msg[0]) ssae_cli_error(SCORE_CMD, "%s", e.msg);
  }
}

void score_emit(score_out *o, const char *path, size_t nw, const float *scores) {
  double sum = 0;
  for (size_t k = 0; k < nw; k++) sum += scores[k];
  double score = sum / (double)nw;
  const char *verdict = isnan(o->threshold)    ? "unknown"
                        : score > o->threshold ? "anomaly"
                                               : "normal";
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
void score_flush_results(score_out *o) {
  check_stdout(o);
  if (!o->tty || o->quiet) fflush(o->of);
}

void score_emit_windows(score_out *o, const char *path, size_t nw, const float *scores,
                        const ssae_model *m) {
  if (!o->wfp) return;
  /* Frame t is centred on sample t*hop; a window's centre is its middle
   * frame's. */
  for (size_t k = 0; k < nw; k++) {
    double t = ((double)k + 0.5 * (m->d.frames - 1)) * m->feat.hop_length /
               m->feat.sample_rate;
    fprintf(o->wfp, "%s\t%zu\t%.6f\t%.9g\n", path, k, t, scores[k]);
  }
}

/* A shard's file is done (failed: msg, else NULL): its failure record, and
 * its lines reach the shard's outputs, so that a kill loses at most the
 * file in hand. */
int score_shard_file_done(score_out *o, const char *path, const char *msg) {
  ssae_err err = {{0}};
  if (msg) ssae_shard_job_failed(o->sj, path, msg[0] ? msg : "the model failed");
  if (ssae_shard_job_next(o->sj, &err) == 0) return 0;
  ssae_cli_error(SCORE_CMD, "%s", err.msg);
  return -1;
}
