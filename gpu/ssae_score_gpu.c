/* Offline scoring on the GPU front end (ssae_score_gpu.h).
 *
 * Each set ("lane") is one front end of `files` streams; a stream slot
 * holds one open file at a time and gets its next `block` samples each run.
 * A file's stream ends on the run whose read meets its end; the slot then
 * takes the next file. The main thread runs one lane on the GPU while the
 * decoding threads fill the other lane's blocks, so decoding and the GPU
 * overlap. */
#include "ssae_score_gpu.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ssae_audio.h"
#include "ssae_cuda_frontend.h"

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
  int files, jobs, k;
} fill_job;

/* Reads channel c's next block (opening its file first): n and end. */
static void fill_slot(const fill_job *j, int c) {
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
    s->as = ssae_audio_open(j->paths[s->file], j->o->channel, j->m->feat.sample_rate, NULL, &err);
    if (!s->as) {
      s->error = strdup(err.msg[0] ? err.msg : "cannot open");
      l->end[c] = 1;
      return;
    }
  }
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
  /* 16-bit files cross PCIe as 16 bits. */
  if (got && i16) ssae_cuda_fe_set_i16(l->fe, c);
  else if (got) ssae_cuda_fe_pack_i16(l->fe, c, got);
}

static void *fill_thread(void *arg) {
  const fill_job *j = arg;
  for (int c = j->k; c < j->files; c += j->jobs) fill_slot(j, c);
  return NULL;
}

typedef struct {
  pthread_t tid[256];
  fill_job jobs[256];
  int started;
} filler;

/* Starts filling lane l on the decoding threads (the first on this one
 * when no thread starts). */
static void fill_start(filler *f, fill_job proto) {
  f->started = 0;
  for (int k = 0; k < proto.jobs; k++) {
    f->jobs[k] = proto;
    f->jobs[k].k = k;
  }
  for (int k = 0; k < proto.jobs; k++) {
    if (pthread_create(&f->tid[k], NULL, fill_thread, &f->jobs[k])) {
      /* Fewer threads: this one does the rest. */
      for (int r = k; r < proto.jobs; r++) fill_thread(&f->jobs[r]);
      break;
    }
    f->started++;
  }
}

static void fill_wait(filler *f) {
  for (int k = 0; k < f->started; k++) pthread_join(f->tid[k], NULL);
  f->started = 0;
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

int ssae_score_files_gpu(const ssae_model *m, char *const *paths, size_t n,
                         const ssae_score_gpu_opts *opts, ssae_scored_file_cb cb, void *user,
                         ssae_err *note, ssae_err *err) {
  ssae_score_gpu_opts o = *opts;
  ssae_score_gpu_stats st = {0};
  const double t_start = now_s();
  if (note) note->msg[0] = 0;
  if (o.channel == SSAE_CHANNEL_ALL)
    return ssae_err_set(err, "scoring needs one stream: a channel index or mix");
  if (o.files <= 0) o.files = 256;
  if (!o.block) o.block = 65536;
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
  int rc = 0;
  if (!res) return ssae_err_set(err, "out of memory for %zu files", n);
  for (int i = 0; i < 2; i++) {
    ssae_cuda_fe_cfg cfg = {.channels = o.files, .max_block = o.block, .pcm = SSAE_FE_PCM_F32,
                            .device = o.device, .cpu = cpu_hook};
    lane *l = &lanes[i];
    if (!(l->fe = ssae_cuda_fe_new(m, &cfg, err))) rc = -1;
    l->s = calloc((size_t)o.files, sizeof *l->s);
    l->n = calloc((size_t)o.files, sizeof *l->n);
    l->end = calloc((size_t)o.files, 1);
    if (!rc && (!l->s || !l->n || !l->end)) rc = ssae_err_set(err, "out of memory");
    if (l->s)
      for (int c = 0; c < o.files; c++) l->s[c].file = -1;
  }
  if (rc) {
    free_lane(&lanes[0], o.files);
    free_lane(&lanes[1], o.files);
    free(res);
    return -1;
  }
  size_t next = 0, emitted = 0;
  filler *f = calloc(1, sizeof *f);
  if (!f) {
    free_lane(&lanes[0], o.files);
    free_lane(&lanes[1], o.files);
    free(res);
    return ssae_err_set(err, "out of memory");
  }
  /* Free slots take the next files; then the lane's blocks are filled. */
  fill_job proto = {.m = m, .paths = paths, .o = &o, .files = o.files, .jobs = jobs};
  int cur = 0;
  for (int i = 0; i < 2; i++)
    for (int c = 0; c < o.files && next < n; c++) lanes[i].s[c].file = (long long)next++;
  proto.l = &lanes[cur];
  fill_start(f, proto);
  fill_wait(f);
  for (;;) {
    lane *l = &lanes[cur], *other = &lanes[1 - cur];
    int busy = 0, other_busy = 0;
    for (int c = 0; c < o.files; c++) {
      busy |= l->s[c].file >= 0;
      other_busy |= other->s[c].file >= 0;
    }
    if (!busy && !other_busy) break;
    /* The other lane decodes while this one runs. */
    proto.l = other;
    if (other_busy) fill_start(f, proto);
    ssae_err rerr = {{0}};
    const double t_run = now_s();
    int run_rc = busy ? ssae_cuda_fe_run(l->fe, l->n, l->end, &rerr) : 0;
    st.gpu_s += now_s() - t_run;
    st.runs += busy != 0;
    if (note && !note->msg[0] && *ssae_cuda_fe_note(l->fe))
      ssae_err_set(note, "%s", ssae_cuda_fe_note(l->fe));
    for (int c = 0; busy && c < o.files; c++) {
      stream_slot *s = &l->s[c];
      if (s->file < 0) continue;
      const float *v;
      size_t k = run_rc ? 0 : ssae_cuda_fe_scores(l->fe, c, &v);
      if (run_rc && !s->error) s->error = strdup(rerr.msg);
      if (k && !s->error && add_scores(s, v, k)) s->error = strdup("out of memory for scores");
      if (!l->end[c]) continue;
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
      s->file = next < n ? (long long)next++ : -1;
    }
    const double t_wait = now_s();
    fill_wait(f);
    st.wait_s += now_s() - t_wait;
    if (run_rc) {
      /* Not even the CPU path could go on (no memory): every file not yet
       * scored fails with the reason. */
      for (size_t i = emitted; i < n; i++)
        if (!res[i].done) {
          char msg[2 * SSAE_ERR_LEN];
          snprintf(msg, sizeof msg, "%s: %s", paths[i], rerr.msg);
          res[i].error = strdup(msg);
          res[i].done = 1;
        }
    }
    for (; emitted < n && res[emitted].done; emitted++) {
      result *r = &res[emitted];
      ssae_scored_file sf = {.index = emitted, .path = paths[emitted], .scores = r->scores,
                             .n_windows = r->n_windows, .error = r->error};
      cb(user, &sf);
      free(r->scores);
      free(r->error);
      r->scores = NULL;
      r->error = NULL;
    }
    if (run_rc) break;
    cur = 1 - cur;
  }
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
