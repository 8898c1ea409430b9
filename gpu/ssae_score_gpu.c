/* Offline scoring on the GPU front end (ssae_score_gpu.h).
 *
 * Each set ("lane") is one front end of `files` streams; a stream slot
 * holds one open file at a time and gets its next `block` samples each run.
 * A file's stream ends on the run whose read meets its end; the slot then
 * takes the next file. Two lanes: the decoding threads fill one while the
 * other runs, and each lane's run is queued before the other's is waited
 * for (each front end has its own stream: one run's copy in overlaps the
 * other's kernels), so decoding, copies and kernels overlap. */
#include "ssae_score_gpu.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ssae_audio.h"
#include "ssae_cuda_frontend.h"
#include "ssae_pool.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
  long long file; /* index into paths, -1: free */
  ssae_audio_stream *as;
  char *error;
  float *scores;
  size_t n_scores, cap;
  unsigned long long samples; /* read so far */
} stream_slot;

typedef struct {
  ssae_cuda_fe *fe;
  stream_slot *s;
  size_t *n;
  unsigned char *end;
} lane;

typedef struct {
  size_t n_windows;
  float *scores;
  char *error;
  int done;
} result;

typedef struct {
  const ssae_model *m;
  char *const *paths;
  const ssae_score_gpu_opts *o;
  lane *l;
  int files;
  int open_only; /* open the slots' files, read nothing (the lane has no front end yet) */
} fill_job;

/* One decoding thread's time, since the last fill_wait. */
typedef struct {
  double open_s, read_s;
} fill_time;

/* Reads channel c's next block (opening its file first): n and end. */
static void fill_slot(const fill_job *j, int c, fill_time *t) {
  lane *l = j->l;
  stream_slot *s = &l->s[c];
  l->n[c] = 0;
  l->end[c] = 0;
  if (s->file < 0) return;
  if (s->error) {
    l->end[c] = 1;
    return;
  }
  ssae_err err = {{0}};
  if (!s->as) {
    const double t_open = now_s();
    s->as = ssae_audio_open(j->paths[s->file], j->o->channel, j->m->feat.sample_rate, NULL, &err);
    t->open_s += now_s() - t_open;
    if (!s->as) {
      s->error = strdup(err.msg[0] ? err.msg : "cannot open");
      l->end[c] = 1;
      return;
    }
  }
  if (j->open_only) return;
  const double t_read = now_s();
  float *blk = ssae_cuda_fe_block(l->fe, c);
  /* 16-bit files as they are: no conversion to float and back. */
  const int i16 = ssae_audio_stream_i16(s->as);
  size_t got = 0;
  while (got < j->o->block) {
    long long k = i16 ? ssae_audio_read_i16(s->as, (int16_t *)(void *)blk + got,
                                            j->o->block - got, &err)
                      : ssae_audio_read(s->as, blk + got, j->o->block - got, &err);
    if (k < 0) {
      s->error = strdup(err.msg[0] ? err.msg : "read failed");
      l->end[c] = 1;
      got = 0;
      break;
    }
    if (k == 0) {
      l->end[c] = 1;
      break;
    }
    got += (size_t)k;
  }
  l->n[c] = got;
  s->samples += got;
  t->read_s += now_s() - t_read;
  /* 16-bit files cross PCIe as 16 bits. */
  if (got && i16) ssae_cuda_fe_set_i16(l->fe, c);
  else if (got) ssae_cuda_fe_pack_i16(l->fe, c, got);
}

/* The decoding threads, a pool started once: each fill wakes them, they
 * take the lane's channels one at a time (a channel whose file is opened
 * costs more than one only read) while this thread goes on, and fill_wait
 * waits for the last one. */
typedef struct filler {
  ssae_pool *pool; /* NULL: this thread fills alone */
  fill_job job;
  atomic_int next;
  fill_time time[257]; /* [slot]; 0: this thread */
} filler;

static void fill_share(void *arg, int slot) {
  filler *f = arg;
  for (;;) {
    int c = atomic_fetch_add(&f->next, 1);
    if (c >= f->job.files) break;
    fill_slot(&f->job, c, &f->time[slot]);
  }
}

/* jobs threads (fewer when the system refuses some, none without memory
 * for the pool: this thread then fills alone). */
static void filler_init(filler *f, int jobs) {
  f->pool = ssae_pool_new(jobs > 256 ? 256 : jobs);
}

static void filler_free(filler *f) { ssae_pool_free(f->pool); }

/* Starts filling the job's lane on the decoding threads (on this one when
 * there are none: then it is done on return). */
static void fill_start(filler *f, fill_job job) {
  f->job = job;
  atomic_store(&f->next, 0);
  if (f->pool) ssae_pool_start(f->pool, fill_share, f);
  else fill_share(f, 0);
}

static void fill_wait(filler *f, ssae_score_gpu_stats *st) {
  if (f->pool) ssae_pool_wait(f->pool);
  const int n = ssae_pool_helpers(f->pool);
  for (int k = 0; k <= n; k++) {
    st->open_s += f->time[k].open_s;
    st->read_s += f->time[k].read_s;
    f->time[k] = (fill_time){0, 0};
  }
}

static int add_scores(stream_slot *s, const float *v, size_t k) {
  if (s->n_scores + k > s->cap) {
    size_t nc = s->cap ? s->cap * 2 : 1024;
    while (nc < s->n_scores + k) nc *= 2;
    float *p = realloc(s->scores, nc * sizeof *p);
    if (!p) return -1;
    s->scores = p;
    s->cap = nc;
  }
  memcpy(s->scores + s->n_scores, v, k * sizeof *v);
  s->n_scores += k;
  return 0;
}

static int lane_busy(const lane *l, int files) {
  for (int c = 0; c < files; c++)
    if (l->s[c].file >= 0) return 1;
  return 0;
}

/* Every file not yet done fails with the reason (a run that not even the
 * CPU path could make: no memory). */
static void fail_rest(result *res, size_t n, char *const *paths, const ssae_err *why) {
  for (size_t i = 0; i < n; i++)
    if (!res[i].done) {
      char msg[2 * SSAE_ERR_LEN];
      snprintf(msg, sizeof msg, "%s: %s", paths[i], why->msg);
      res[i].error = strdup(msg);
      res[i].done = 1;
    }
}

/* After lane l's run (run_rc: its wait's result): each slot's new scores
 * kept; a file whose stream ended becomes its result (waiting for its turn
 * to be emitted) and its slot takes the next file (none once stopping). */
static void take_results(lane *l, int files, int run_rc, const ssae_err *rerr, result *res,
                         char *const *paths, const ssae_model *m, size_t n, size_t *next,
                         int stopping) {
  for (int c = 0; c < files; c++) {
    stream_slot *s = &l->s[c];
    if (s->file < 0) continue;
    const float *v;
    size_t k = run_rc ? 0 : ssae_cuda_fe_scores(l->fe, c, &v);
    if (run_rc && !s->error) s->error = strdup(rerr->msg);
    if (k && !s->error && add_scores(s, v, k)) s->error = strdup("out of memory for scores");
    if (!l->end[c] && !run_rc) continue;
    /* The file is done: its result waits for its turn. */
    result *r = &res[s->file];
    if (s->error) {
      char msg[SSAE_ERR_LEN + 64];
      const char *p = paths[s->file];
      /* Reader messages already name the file. */
      if (strstr(s->error, p)) snprintf(msg, sizeof msg, "%s", s->error);
      else snprintf(msg, sizeof msg, "%s: %s", p, s->error);
      r->error = strdup(msg);
    } else if (!s->n_scores) {
      /* The message of ssae_file_frames, with the frames the stream had. */
      const unsigned long long ns = s->samples, hop = (unsigned long long)m->feat.hop_length,
                               nfft = (unsigned long long)m->feat.n_fft;
      const unsigned long long nf = m->feat.center ? (ns ? 1 + ns / hop : 0)
                                    : ns >= nfft   ? 1 + (ns - nfft) / hop
                                                   : 0;
      char msg[SSAE_ERR_LEN];
      snprintf(msg, sizeof msg, "%s: too short: %llu frames, a window needs %d (%.3f s)",
               paths[s->file], nf, m->d.frames,
               (double)(m->d.frames - 1) * m->feat.hop_length / m->feat.sample_rate);
      r->error = strdup(msg);
    } else {
      r->scores = s->scores;
      r->n_windows = s->n_scores;
      s->scores = NULL;
      s->cap = 0;
    }
    r->done = 1;
    ssae_audio_close(s->as);
    free(s->error);
    free(s->scores);
    memset(s, 0, sizeof *s);
    s->file = *next < n && !stopping ? (long long)(*next)++ : -1;
  }
}

static void free_lane(lane *l, int files) {
  ssae_cuda_fe_free(l->fe);
  if (l->s)
    for (int c = 0; c < files; c++) {
      ssae_audio_close(l->s[c].as);
      free(l->s[c].error);
      free(l->s[c].scores);
    }
  free(l->s);
  free(l->n);
  free(l->end);
}

/* Samples a set takes per run (files x block): 64 MiB of floats a set. */
#define SET_SAMPLES ((size_t)256 * 65536)
#define SHAPE_FILES 256 /* files whose sizes choose the block */

static int cmp_ull(const void *a, const void *b) {
  const unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
  return x < y ? -1 : x > y;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Samples the files give per byte of file (at the model's rate, the one
 * stream scored): the median over up to SHAPE_OPEN of the k files at[] of
 * sizes sz[], from their headers (1/2 for 16-bit mono WAV at the model's
 * rate, more for compressed files, less for higher rates or more
 * channels); 1/2 when no header says. Opening a few files costs well under
 * the CUDA context this overlaps (ssae_cuda_fe_warm_up). */
#define SHAPE_OPEN 16
static double samples_per_byte(char *const *paths, const size_t *at,
                               const unsigned long long *sz, size_t k, int channel, int rate) {
  double r[SHAPE_OPEN];
  size_t got = 0;
  const size_t step = k > SHAPE_OPEN ? k / SHAPE_OPEN : 1;
  for (size_t j = 0; j < k && got < SHAPE_OPEN; j += step) {
    if (!sz[j]) continue;
    ssae_err err = {{0}};
    ssae_audio_stream *as = ssae_audio_open(paths[at[j]], channel, rate, NULL, &err);
    if (!as) continue;
    const ssae_audio_info *info = ssae_audio_stream_info(as);
    if (info->header_frames > 0 && info->file_rate > 0)
      r[got++] = (double)info->header_frames * info->rate / info->file_rate / (double)sz[j];
    ssae_audio_close(as);
  }
  if (!got) return 0.5;
  qsort(r, got, sizeof *r, cmp_double);
  return r[got / 2];
}

/* The runs' shape where the caller leaves it 0: a block long enough for
 * most files whole (the median size of the first SHAPE_FILES regular files
 * in samples, samples_per_byte, rounded up to 16,384; 65,536 to
 * 1,048,576), so that a file is opened, read and closed in one fill:
 * hundreds of files open at once, each read a piece at a time, cost the
 * decoding threads several times their time (BENCHMARKS.md); then as many
 * files as SET_SAMPLES holds (16 to 256). */
static void choose_shape(ssae_score_gpu_opts *o, char *const *paths, size_t n, int rate) {
  if (!o->block) {
    unsigned long long sz[SHAPE_FILES];
    size_t at[SHAPE_FILES], k = 0;
    for (size_t i = 0; i < n && k < SHAPE_FILES; i++) {
      struct stat st;
      if (!stat(paths[i], &st) && S_ISREG(st.st_mode)) {
        sz[k] = (unsigned long long)st.st_size;
        at[k++] = i;
      }
    }
    unsigned long long b = 65536;
    if (k) {
      const double per_byte = samples_per_byte(paths, at, sz, k, o->channel, rate);
      qsort(sz, k, sizeof *sz, cmp_ull);
      const double samples = (double)sz[k / 2] * per_byte;
      b = samples >= 1048576.0 ? 1048576 : ((unsigned long long)samples + 16383) / 16384 * 16384;
    }
    o->block = b < 65536 ? 65536 : (size_t)b;
  }
  if (o->files <= 0) {
    const size_t f = SET_SAMPLES / o->block;
    o->files = f < 16 ? 16 : f > 256 ? 256 : (int)f;
  }
}

/* Lane 1's front end, made on a thread of its own beside lane 0's. */
typedef struct {
  const ssae_model *m;
  const ssae_cuda_fe_cfg *cfg;
  ssae_cuda_fe *fe; /* NULL: err says why */
  ssae_err err;
} fe_maker;

static void *make_fe(void *p) {
  fe_maker *k = p;
  k->fe = ssae_cuda_fe_new(k->m, k->cfg, &k->err);
  return NULL;
}

int ssae_score_files_gpu(const ssae_model *m, char *const *paths, size_t n,
                         const ssae_score_gpu_opts *opts, ssae_scored_file_cb cb, void *user,
                         ssae_err *note, ssae_err *err) {
  ssae_score_gpu_opts o = *opts;
  ssae_score_gpu_stats st = {0};
  const double t_start = now_s();
  if (note) note->msg[0] = 0;
  if (o.channel == SSAE_CHANNEL_ALL)
    return ssae_err_set(err, "scoring needs one stream: a channel index or mix");
  choose_shape(&o, paths, n, m->feat.sample_rate);
  if ((size_t)o.files > n) o.files = n ? (int)n : 1;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int jobs = o.jobs > 0 ? o.jobs : ncpu < 1 ? 1 : (int)ncpu;
  if (jobs > 256) jobs = 256;
  if (jobs > o.files) jobs = o.files;
  /* Test hook: the front end's CPU path, so that the pipeline (threads,
   * lanes, order, errors) is tested on hosts without a GPU. */
  const char *hook = getenv("SSAE_SCORE_GPU_ON_CPU");
  const int cpu_hook = hook && !strcmp(hook, "1");
  lane lanes[2];
  memset(lanes, 0, sizeof lanes);
  result *res = calloc(n ? n : 1, sizeof *res);
  filler *f = calloc(1, sizeof *f);
  if (!res || !f) {
    free(res);
    free(f);
    return ssae_err_set(err, "out of memory for %zu files", n);
  }
  /* The decoding threads open lane 0's files while this thread makes its
   * front end (the CUDA context first) and a thread of its own makes lane
   * 1's (a front end, its page-locked memory included, takes as long as
   * several runs: made one after the other, the second was on the job's
   * path); then they fill lane 0. */
  int rc = 0, filling = 0, maker = 0;
  size_t next = 0, emitted = 0;
  fill_job proto = {.m = m, .paths = paths, .o = &o, .files = o.files};
  const ssae_cuda_fe_cfg cfg = {.channels = o.files, .max_block = o.block,
                                .pcm = SSAE_FE_PCM_F32, .device = o.device, .cpu = cpu_hook};
  fe_maker mk = {.m = m, .cfg = &cfg};
  pthread_t maker_tid;
  for (int i = 0; i < 2 && !rc; i++) {
    lane *l = &lanes[i];
    l->s = calloc((size_t)o.files, sizeof *l->s);
    l->n = calloc((size_t)o.files, sizeof *l->n);
    l->end = calloc((size_t)o.files, 1);
    if (!l->s || !l->n || !l->end) {
      rc = ssae_err_set(err, "out of memory");
      break;
    }
    for (int c = 0; c < o.files; c++) l->s[c].file = next < n ? (long long)next++ : -1;
  }
  if (!rc) {
    filler_init(f, jobs);
    proto.l = &lanes[0];
    proto.open_only = 1;
    fill_start(f, proto);
    filling = 1;
    maker = !pthread_create(&maker_tid, NULL, make_fe, &mk);
    if (!(lanes[0].fe = ssae_cuda_fe_new(m, &cfg, err))) rc = -1;
    fill_wait(f, &st);
    filling = 0;
    if (!maker) make_fe(&mk); /* no thread: here, after lane 0's */
    else pthread_join(maker_tid, NULL);
    lanes[1].fe = mk.fe;
    if (!rc && !mk.fe) rc = ssae_err_set(err, "%s", mk.err.msg);
    if (!rc) {
      proto.open_only = 0;
      fill_start(f, proto);
      filling = 1;
    }
  }
  if (filling) fill_wait(f, &st);
  st.setup_s = now_s() - t_start;
  if (rc) {
    filler_free(f);
    free(f);
    free_lane(&lanes[0], o.files);
    free_lane(&lanes[1], o.files);
    free(res);
    return -1;
  }
  /* Lane cur is filled: its run is queued while the other lane's may
   * still be on the device (their copies and kernels overlap); then the
   * other lane's run is ended, its results are taken, and the decoding
   * threads fill its slots again while cur runs and this thread writes
   * the results that are ready. After a run that not even the CPU path
   * could make (no memory), every file not yet scored fails with the
   * reason, and the run still queued is only waited for. */
  int cur = 0, other_queued = 0, failed = 0;
  for (;;) {
    lane *l = &lanes[cur], *other = &lanes[1 - cur];
    const int busy = !failed && lane_busy(l, o.files);
    if (!busy && !other_queued) break;
    int queued = 0;
    double t_run = now_s();
    if (busy) {
      ssae_err serr = {{0}};
      if (ssae_cuda_fe_submit(l->fe, l->n, l->end, &serr)) {
        fail_rest(res, n, paths, &serr);
        failed = 1;
      } else {
        queued = 1;
      }
    }
    if (other_queued) {
      ssae_err werr = {{0}};
      const int run_rc = ssae_cuda_fe_wait(other->fe, &werr);
      st.runs++;
      if (note && !note->msg[0] && *ssae_cuda_fe_note(other->fe))
        ssae_err_set(note, "%s", ssae_cuda_fe_note(other->fe));
      if (!failed) {
        take_results(other, o.files, run_rc, &werr, res, paths, m, n, &next,
                     o.stop && *o.stop);
        if (run_rc) {
          fail_rest(res, n, paths, &werr);
          failed = 1;
        }
      }
    }
    st.gpu_s += now_s() - t_run;
    const int refill = !failed && lane_busy(other, o.files);
    if (refill) {
      proto.l = other;
      fill_start(f, proto);
    }
    const double t_emit = now_s();
    for (; emitted < n && res[emitted].done; emitted++) {
      result *r = &res[emitted];
      ssae_scored_file sf = {.index = emitted, .path = paths[emitted], .scores = r->scores,
                             .n_windows = r->n_windows, .error = r->error,
                             .batch_end = emitted + 1 == n || !res[emitted + 1].done};
      cb(user, &sf);
      free(r->scores);
      free(r->error);
      r->scores = NULL;
      r->error = NULL;
    }
    st.emit_s += now_s() - t_emit;
    if (refill) {
      const double t_wait = now_s();
      fill_wait(f, &st);
      st.wait_s += now_s() - t_wait;
    }
    other_queued = queued;
    cur = 1 - cur;
  }
  filler_free(f);
  free(f);
  free_lane(&lanes[0], o.files);
  free_lane(&lanes[1], o.files);
  free(res);
  if (o.stats) {
    st.wall_s = now_s() - t_start;
    st.files = o.files;
    st.jobs = jobs;
    st.block = o.block;
    *o.stats = st;
  }
  return 0;
}
