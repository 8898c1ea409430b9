/* Offline scoring of many files on the GPU front end (`ssae score
 * --backend cuda`): CPU threads decode (libsndfile, resampling, channel
 * selection: ssae_audio_read, the very samples of the CPU path) straight
 * into page-locked blocks, and everything else (log-mel frames, windows,
 * the model) runs on the GPU, many files per run, each file one stream of
 * the front end (gpu/ssae_cuda_frontend.h). Two sets of streams take turns:
 * while one set runs on the GPU the threads decode the next blocks of the
 * other, and each set's run is queued before the other's ends (the copy of
 * one overlaps the kernels of the other). Results come back in input
 * order.
 *
 * Test hook: SSAE_SCORE_GPU_ON_CPU=1 in the environment runs the front
 * end's CPU path (same pipeline, no GPU needed). */
#ifndef SSAE_SCORE_GPU_H
#define SSAE_SCORE_GPU_H

#include <signal.h>
#include <stddef.h>

#include "ssae_err.h"
#include "ssae_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ssae_scored_file {
  size_t index;         /* in paths */
  const char *path;
  const float *scores;  /* n_windows window scores (NULL on error) */
  size_t n_windows;
  const char *error;    /* NULL when scored; the message naming the file */
  int batch_end;        /* 1: the last result until the next run is done (the
                           place to flush an output stream: a flush per file
                           costs a system call each) */
} ssae_scored_file;

/* Called on the calling thread, in input order, a run's files at a time. */
typedef void (*ssae_scored_file_cb)(void *user, const ssae_scored_file *f);

/* Where the time went (ssae score --stats): the main thread runs one set of
 * files on the GPU while the decoding threads fill the other; gpu_s is the
 * main thread queuing runs and waiting for them (ssae_cuda_fe_submit and
 * ssae_cuda_fe_wait: upload, front end, model, scores back), wait_s
 * waiting for the decoding threads after that, setup_s until both
 * front ends are made (the first set's files opened and read meanwhile),
 * emit_s handing results to the callback; open_s and read_s: the decoding
 * threads' time opening files and reading samples, summed over the
 * threads. */
typedef struct ssae_score_gpu_stats {
  unsigned long long runs;
  double gpu_s, wait_s, wall_s, setup_s, emit_s, open_s, read_s;
  int files, jobs;
  size_t block;
} ssae_score_gpu_stats;

typedef struct ssae_score_gpu_opts {
  ssae_score_gpu_stats *stats; /* NULL, or filled on return */
  int channel; /* an index or SSAE_CHANNEL_MIX (ssae_audio.h) */
  int jobs;    /* decoding threads (0: all cores) */
  int device;  /* CUDA device */
  /* The runs' shape; 0: chosen from the files' lengths (a block that holds
   * most files whole, 65,536 to 1,048,576 samples; as many files as 2^24
   * samples a set allows, 16 to 256). */
  int files;    /* files per run in each set */
  size_t block; /* samples per file per run */
  /* NULL, or a flag (a signal handler's) that stops the job: from when it
   * is set no file is started, and the files started are finished and
   * reported (the callback's files are then the first of paths, in order,
   * and fewer than n when it stopped the job). */
  volatile sig_atomic_t *stop;
} ssae_score_gpu_opts;

/* Scores every path. -1 with err only when the GPU front end cannot be set
 * up (nothing was reported then: the caller can score on the CPU); a file
 * that fails is reported through cb with its error. *note: "" or why the
 * front end moved to the CPU part way (CUDA error; no file lost). */
int ssae_score_files_gpu(const ssae_model *m, char *const *paths, size_t n,
                         const ssae_score_gpu_opts *o, ssae_scored_file_cb cb, void *user,
                         ssae_err *note, ssae_err *err);


#ifdef __cplusplus
}
#endif
#endif
