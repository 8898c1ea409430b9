/* Private to `ssae score`: what its files call in each other. The command
 * is four files:
 *
 *   cmd_score.c       main thread: the options, the inputs (every argument,
 *                     or a shard's), the model, and run: the GPU front end
 *                     or the backend path; the signal handlers' setup
 *   score_pipeline.c  the backend path: the decoding worker threads (worker:
 *                     decoding, features, and on the CPU the scores) and the
 *                     main thread's consume (input order, batches for the
 *                     other backends, the results); the signal handler
 *   score_gpu.c       main thread, CUDA builds only: the GPU front end
 *                     (gpu/ssae_score_gpu.h, whose decoding threads are its
 *                     own) and its results as they come back
 *   score_output.c    main thread: the result and window lines, the
 *                     progress line, stdout's checks, a shard's books
 *
 * Data path: worker threads -> (slots, in input order) -> main thread ->
 * backend -> score_output.c; or the GPU front end -> score_output.c. */
#ifndef SSAE_CLI_SCORE_INTERNAL_H
#define SSAE_CLI_SCORE_INTERNAL_H

#include <signal.h>
#include <stddef.h>
#include <stdio.h>

#include "ssae_backend.h"
#include "ssae_config.h"
#include "ssae_model.h"
#include "ssae_outfile.h"
#include "ssae_shard_job.h"

/* The command's name in its messages (ssae_cli_error). */
#define SCORE_CMD "score"

/* Windows per backend call: big batches for a GPU, and the CPU splits them
 * over its threads. */
#define SCORE_BATCH_WINDOWS 8192

/* The command line (cmd_score.c's option table). */
typedef struct score_opts {
  const char *model, *backend, *windows, *format;
  int channel, jobs, quiet, strict, device, stats;
  /* Archives in shards (ssae_shard_job.h). */
  const char *output, *files_from, *shard;
  int shard_count, resume;
} score_opts;

/* The outputs of a run and its counts; the main thread's. */
typedef struct score_out {
  int json, tty, quiet;
  double threshold;
  ssae_outfile *wf;    /* --windows without --shard */
  FILE *of;            /* results: stdout, -o's file, or the shard's output */
  FILE *wfp;           /* windows: wf, or the shard's windows output */
  ssae_shard_job *sj;  /* --shard / --resume; NULL otherwise */
  size_t done, failed, total;
  double t0, last_log;
  int interrupted, stdout_failed;
  int abandoned; /* interrupted while a reader was busy: it is not joined */
} score_out;

/* ---- score_output.c ---- */
/* Seconds on the monotonic clock (the progress line, --stats). */
double score_now(void);
/* The progress line on stderr; final: clear it (before a message, at the
 * end). */
void score_progress(score_out *o, int final);
/* A file's result line: nw window scores. */
void score_emit(score_out *o, const char *path, size_t nw, const float *scores);
/* Its --windows lines (nothing without --windows). */
void score_emit_windows(score_out *o, const char *path, size_t nw, const float *scores,
                        const ssae_model *m);
/* After a batch of results: stdout checked, the lines flushed. */
void score_flush_results(score_out *o);
/* A shard's file is done (failed: msg, else NULL); -1 when the shard's
 * outputs failed. */
int score_shard_file_done(score_out *o, const char *path, const char *msg);

/* ---- score_pipeline.c ---- */
/* SIGINT / SIGTERM (cmd_score.c installs it): consume stops after the files
 * in hand. */
void score_on_signal(int sig);
/* The flag it sets (the GPU front end's stop). */
volatile sig_atomic_t *score_stop_flag(void);
/* The backend path: the n files of paths (the caller's), decoded by o->jobs
 * worker threads and scored with be (on the CPU: by the workers, each on a
 * one-thread backend of its own), their results written in input order to
 * out. SSAE_EXIT_OK, or SSAE_EXIT_INPUT when some file failed or the
 * threads could not start. Main thread. */
int score_pipeline_run(const score_opts *o, const ssae_model *m, ssae_backend *be,
                       char *const *paths, size_t n, score_out *out);

#if SSAE_HAVE_CUDA
/* ---- score_gpu.c ---- */
/* The GPU front end, when this run takes it: the exit status, or -1 (the
 * caller goes on with the backend path). */
int score_on_gpu(const score_opts *o, const ssae_model *m, char *const *paths, size_t n,
                 FILE *of);
#endif

#endif
