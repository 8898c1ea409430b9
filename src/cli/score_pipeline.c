/* ssae score's backend path: the files scored with a backend
 * (ssae_backend.h), which is every run but the GPU front end's (score_gpu.c).
 *
 * Worker threads (worker) decode files and compute their features (in
 * parallel, a bounded distance ahead); the main thread (consume) prints
 * results in input order. On the CPU each worker also scores its files, on
 * a one-thread CPU backend of its own (the frames are still in its cache,
 * and no thread waits for another); for other backends the main thread puts
 * the frames of the files that are ready end to end into batches. Decoding,
 * features and scoring are ssae_filescore's, as in ssae eval and ssae
 * report. score_pipeline_run starts and joins the workers, on the main
 * thread; score_on_signal runs on whichever thread takes the signal. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "score_internal.h"
#include "ssae_audio.h"
#include "ssae_backend.h"
#include "ssae_filescore.h"
#include "ssae_model.h"

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

/* Ctrl-C / SIGTERM: the files being scored are finished and printed, then
 * the command stops (exit 130), every output ending with a whole line. */
static volatile sig_atomic_t g_stop;
void score_on_signal(int sig) {
  (void)sig;
  g_stop = 1;
}

volatile sig_atomic_t *score_stop_flag(void) { return &g_stop; }

/* A worker thread: takes the next file, decodes it (and scores it when the
 * workers score), and leaves the result in its slot. */
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
      rc = ssae_file_score_opts(j->m, cpu, SCORE_BATCH_WINDOWS, j->paths[i], j->channel, 0,
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

/* The main thread's side: waits for the files in input order, scores in
 * batches the ones their worker did not score, prints every result, and
 * lets the workers run ahead. Returns 0, or -1 when some file failed. */
static int consume(job *j, ssae_backend *be, score_out *out) {
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
      score_progress(out, 1);
      ssae_cli_error(SCORE_CMD, "interrupted: %zu of %zu files done", i, n);
      out->interrupted = 1;
      out->abandoned = 1;
      break;
    }
    size_t e = i, total = 0;
    while (e < n && j->slots[e].state != 0 &&
           (e == i || total + j->slots[e].fs.n_windows <= SCORE_BATCH_WINDOWS)) {
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
        ssae_cli_error(SCORE_CMD, "out of memory for %zu frames", nfr);
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
    if (run_failed) ssae_cli_error(SCORE_CMD, "the model failed: %s", err.msg);
    off = 0;
    for (size_t k = i; k < e; k++) {
      slot *s = &j->slots[k];
      if (s->state == 1 && s->fs.warning.msg[0]) {
        score_progress(out, 1);
        ssae_cli_error(SCORE_CMD, "warning: %s", s->fs.warning.msg);
      }
      int failed = s->state == 2 || (run_failed && !s->fs.scores);
      if (failed) {
        score_progress(out, 1);
        if (s->state == 2) ssae_cli_error(SCORE_CMD, "%s", s->error);
        status = -1;
        out->failed++;
      } else if (s->fs.scores) {
        /* Windows first: a shard's result line then always has its
         * windows written (what --resume relies on). */
        score_emit_windows(out, j->paths[k], s->fs.n_windows, s->fs.scores, j->m);
        score_emit(out, j->paths[k], s->fs.n_windows, s->fs.scores);
      } else {
        score_emit_windows(out, j->paths[k], s->fs.n_windows, scores + off, j->m);
        score_emit(out, j->paths[k], s->fs.n_windows, scores + off);
        off += s->fs.n_frames;
      }
      if (out->sj && score_shard_file_done(out, j->paths[k], failed ? s->error ? s->error
                                                                               : err.msg
                                                                    : NULL))
        status = -1;
      ssae_file_scores_release(&s->fs);
      free(s->error);
      s->error = NULL;
      out->done++;
    }
    score_flush_results(out);
    pthread_mutex_lock(&j->mu);
    j->consumed = e;
    pthread_cond_broadcast(&j->room);
    pthread_mutex_unlock(&j->mu);
    i = e;
    score_progress(out, 0);
    if (g_stop && i < n) {
      score_progress(out, 1);
      ssae_cli_error(SCORE_CMD, "interrupted: %zu of %zu files done", i, n);
      out->interrupted = 1;
      break;
    }
  }
  free(batch);
  free(scores);
  return status;
}

int score_pipeline_run(const score_opts *o, const ssae_model *m, ssae_backend *be,
                       char *const *paths, size_t n, score_out *out) {
  int status = SSAE_EXIT_OK;
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
    ssae_cli_error(SCORE_CMD, "out of memory");
    status = SSAE_EXIT_INPUT;
    goto done;
  }
  pthread_cond_init(&j.ready, NULL);
  pthread_cond_init(&j.room, NULL);
  for (; started < nw; started++)
    if (pthread_create(&tids[started], NULL, worker, &j)) break;
  if (!started) {
    ssae_cli_error(SCORE_CMD, "cannot start worker threads");
    status = SSAE_EXIT_INPUT;
    goto joined;
  }

  if (consume(&j, be, out)) status = SSAE_EXIT_INPUT;
  score_progress(out, 1);
  if (o->stats)
    fprintf(stderr, "ssae score: %s backend: %zu files in %.3f s wall on %d threads (decoding, "
            "features and the model in each)\n", ssae_backend_name(be), n,
            score_now() - out->t0, started);

joined:
  pthread_mutex_lock(&j.mu);
  j.stop = 1;
  pthread_cond_broadcast(&j.room);
  pthread_mutex_unlock(&j.mu);
  /* A reader may never return: it keeps the job's memory (the process
   * exits right after the outputs are closed). */
  if (out->abandoned) return status;
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
  return status;
}
