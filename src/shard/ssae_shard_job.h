/* One shard's run, as `ssae score --shard` does it, in one object: the
 * input list (--files-from and arguments, directories expanded), the
 * shard (I/N or from the scheduler), the files still to do (--resume),
 * and the outputs (header first, written to PATH.partial as it goes,
 * renamed when complete). The caller scores the files of pending in order
 * and writes each one's lines, in this order:
 *   its windows to ssae_shard_job_windows() (when asked for),
 *   its result line to ssae_shard_job_out(), or ssae_shard_job_failed(),
 *   ssae_shard_job_next() (so a kill loses at most the file in hand);
 * then ssae_shard_job_finish(). Not for the audio thread. */
#ifndef SSAE_SHARD_JOB_H
#define SSAE_SHARD_JOB_H

#include <stdio.h>

#include "ssae_shard.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ssae_shard_job_opts {
  char *const *args; /* FILE|DIR arguments */
  size_t n_args;
  const char *files_from;   /* one path a line, "-": stdin; NULL: none */
  const char *shard;        /* "I/N" or "auto" */
  size_t shard_count;       /* --shard-count; 0: not given */
  int resume;               /* keep what a previous run of this shard did */
  const char *out;          /* the shard's output; NULL: stdout (no resume) */
  const char *windows;      /* --windows output; NULL: none */
  int json;                 /* results as JSON lines, else TSV */
} ssae_shard_job_opts;

typedef struct ssae_shard_job ssae_shard_job;

ssae_shard_job *ssae_shard_job_new(const ssae_shard_job_opts *o, ssae_err *err);

/* The files to score, in order, and how many the shard has in all. */
char *const *ssae_shard_job_pending(const ssae_shard_job *j, size_t *n);
size_t ssae_shard_job_files(const ssae_shard_job *j);
/* Which shard and what a resume kept (for a progress message). */
const ssae_shard_spec *ssae_shard_job_spec(const ssae_shard_job *j);
size_t ssae_shard_job_done_before(const ssae_shard_job *j);
const ssae_shard_list *ssae_shard_job_list(const ssae_shard_job *j);

FILE *ssae_shard_job_out(ssae_shard_job *j);
FILE *ssae_shard_job_windows(ssae_shard_job *j); /* NULL when not asked for */
/* A file that could not be scored: its failure record. */
int ssae_shard_job_failed(ssae_shard_job *j, const char *path, const char *msg);
/* After each file: its lines reach the files (windows first). */
int ssae_shard_job_next(ssae_shard_job *j, ssae_err *err);
/* All files done: the outputs renamed into place (windows first). */
int ssae_shard_job_finish(ssae_shard_job *j, ssae_err *err);
/* Without finish the .partial files stay for --resume. */
void ssae_shard_job_free(ssae_shard_job *j);

#ifdef __cplusplus
}
#endif
#endif
