/* Alarm clips (see the header).
 * Thread context: feed* on the audio thread; alarm_on/off on the worker;
 * the writer thread owns the jobs and the files. */
#include "ssae_clips.h"
#include "ssae_clip_pictures.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <sndfile.h>

#include "ssae_audio.h"

#define CHUNK 4096
#define PREFIX "ssae_"

/* Samples are relaxed atomics: the writer may read a slot the audio thread
 * is overwriting (it then discards what it read, see job_copy); relaxed
 * loads and stores are plain moves, and make that well defined. */
typedef struct ring {
  _Atomic int16_t *s;
  atomic_ullong pos; /* samples written so far (release by the feeder) */
} ring;

typedef struct req {
  int on; /* 1 alarm_on, 0 alarm_off */
  int channel;
  uint64_t sample;
  char id[40];
  char name[80]; /* the machine's name when the alarm began */
  char path[512];
} req;

typedef struct job {
  int channel;
  char id[40];
  char name[80];
  char path[512], tmp[512];
  int fd;
  SNDFILE *sf;
  uint64_t start, next, end, cap_end; /* end UINT64_MAX until alarm_off */
  char failed[300]; /* why writing failed ("" while it goes well) */
  struct job *link;
} job;

struct ssae_clips {
  ssae_clips_cfg cfg;
  char *dir;
  char **names;
  uint64_t cap; /* ring samples per channel */
  ring *rings;

  pthread_mutex_t mu;
  pthread_cond_t cv;
  int mu_ok, cv_ok;
  req *reqs;
  size_t n_reqs, cap_reqs;
  int stop;

  job *jobs; /* writer thread only */
  int16_t buf[CHUNK];
  pthread_t thread;
  int thread_ok;

  atomic_ullong written, failed, deleted, lost;
  atomic_int open;

  /* For ssae_clips_wait_room (a reader of a file, which can wait): per
   * channel, the oldest sample an open clip still needs (UINT64_MAX:
   * none), published by the writer under mu at the end of each round;
   * in_round while it holds requests it has taken but not yet turned into
   * jobs. */
  uint64_t *need;
  int in_round;
};

static inline int16_t to_s16(float x) {
  float v = x * 32768.0f;
  if (!(v > -32768.0f)) return -32768; /* NaN too */
  if (v >= 32767.0f) return 32767;
  return (int16_t)lrintf(v);
}

/* ---- audio thread ---- */

static inline void feed_one(ssae_clips *c, int ch, const float *x,
                            size_t stride, size_t n) {
  ring *r = &c->rings[ch];
  uint64_t p = atomic_load_explicit(&r->pos, memory_order_relaxed);
  uint64_t i0 = p % c->cap;
  for (size_t i = 0; i < n; i++) {
    atomic_store_explicit(&r->s[i0], x ? to_s16(x[i * stride]) : 0,
                          memory_order_relaxed);
    if (++i0 == c->cap) i0 = 0;
  }
  atomic_store_explicit(&r->pos, p + n, memory_order_release);
}

void ssae_clips_feed_channels(ssae_clips *c, int first, int count,
                              const float *const *in, size_t n) {
  if (!c) return;
  for (int k = 0; k < count && first + k < c->cfg.channels; k++)
    feed_one(c, first + k, in ? in[k] : NULL, 1, n);
}

void ssae_clips_feed(ssae_clips *c, const float *const *in, size_t n) {
  if (c) ssae_clips_feed_channels(c, 0, c->cfg.channels, in, n);
}

void ssae_clips_feed_interleaved(ssae_clips *c, const float *in, size_t n) {
  if (!c) return;
  for (int k = 0; k < c->cfg.channels; k++)
    feed_one(c, k, in + k, (size_t)c->cfg.channels, n);
}

/* ---- writer thread ---- */

static void fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

static void report(ssae_clips *c, const job *j, int ok, const char *msg) {
  if (c->cfg.on_clip)
    c->cfg.on_clip(c->cfg.user, j->channel, j->id, j->path,
                   (double)(j->next - j->start) / c->cfg.rate, ok, msg);
}

/* The first sample of the clip of an alarm at `sample`: its pre-roll. */
static uint64_t clip_start(const ssae_clips *c, uint64_t sample) {
  const uint64_t pre = (uint64_t)llround(c->cfg.pre_roll_s * c->cfg.rate);
  return sample > pre ? sample - pre : 0;
}

static void job_start(ssae_clips *c, const req *r) {
  job *j = calloc(1, sizeof *j);
  if (!j) {
    atomic_fetch_add(&c->failed, 1);
    return;
  }
  j->channel = r->channel;
  j->fd = -1;
  snprintf(j->id, sizeof j->id, "%s", r->id);
  snprintf(j->name, sizeof j->name, "%s", r->name);
  snprintf(j->path, sizeof j->path, "%s", r->path);
  j->start = clip_start(c, r->sample);
  j->next = j->start;
  j->end = UINT64_MAX;
  j->cap_end = j->start + (uint64_t)llround(c->cfg.max_length_s * c->cfg.rate);
  snprintf(j->tmp, sizeof j->tmp, "%s/.ssae_clip_XXXXXX", c->dir);
  /* A clip that cannot hold even its pre- and post-roll is refused before
   * the encoder starts: on a full disk libsndfile's FLAC writer prints its
   * failures on stdout, where the JSON events go. */
  struct statvfs vfs;
  const unsigned long long need =
      (unsigned long long)((c->cfg.pre_roll_s + c->cfg.post_roll_s) * c->cfg.rate) * 2 + 65536;
  if (statvfs(c->dir, &vfs) == 0 &&
      (unsigned long long)vfs.f_bavail * vfs.f_frsize < need) {
    char msg[700];
    snprintf(msg, sizeof msg, "no room for a clip in %s: %llu bytes free, a clip needs at "
                              "least %llu", c->dir,
             (unsigned long long)vfs.f_bavail * vfs.f_frsize, need);
    report(c, j, 0, msg);
    atomic_fetch_add(&c->failed, 1);
    free(j);
    return;
  }
  j->fd = mkstemp(j->tmp);
  SF_INFO info = {0};
  info.samplerate = (int)lround(c->cfg.rate);
  info.channels = 1;
  info.format = c->cfg.flac ? SF_FORMAT_FLAC | SF_FORMAT_PCM_16
                            : SF_FORMAT_WAV | SF_FORMAT_PCM_16;
  /* The reason of a failed open is this open's own: made under the audio
   * reader's open lock (libsndfile keeps it in process-wide variables). */
  char why[256] = "";
  if (j->fd < 0) snprintf(why, sizeof why, "%s", strerror(errno));
  else {
    fchmod(j->fd, 0644);
    j->sf = ssae_audio_sf_open_fd(j->fd, SFM_WRITE, &info, 0, why, sizeof why);
  }
  if (!j->sf) {
    char msg[700];
    snprintf(msg, sizeof msg, "cannot create a clip in %s: %s", c->dir, why);
    report(c, j, 0, msg);
    atomic_fetch_add(&c->failed, 1);
    if (j->fd >= 0) {
      close(j->fd);
      unlink(j->tmp);
    }
    free(j);
    return;
  }
  sf_set_string(j->sf, SF_STR_TITLE, j->name);
  sf_set_string(j->sf, SF_STR_COMMENT, j->id);
  sf_set_string(j->sf, SF_STR_SOFTWARE, "ssae");
  j->link = c->jobs;
  c->jobs = j;
  atomic_fetch_add(&c->open, 1);
}

static void job_finish(ssae_clips *c, job *j) {
  int ok = !j->failed[0] && sf_error(j->sf) == SF_ERR_NO_ERROR;
  char msg[700] = "";
  if (j->failed[0]) snprintf(msg, sizeof msg, "%s", j->failed);
  else if (!ok) snprintf(msg, sizeof msg, "%s", sf_strerror(j->sf));
  sf_write_sync(j->sf);
  if (sf_close(j->sf) != 0 && ok) {
    ok = 0;
    snprintf(msg, sizeof msg, "closing the clip failed");
  }
  if (fsync(j->fd) != 0 && ok) {
    ok = 0;
    snprintf(msg, sizeof msg, "fsync: %s", strerror(errno));
  }
  close(j->fd);
  if (ok && rename(j->tmp, j->path) != 0) {
    ok = 0;
    snprintf(msg, sizeof msg, "rename to %s: %s", j->path, strerror(errno));
  }
  if (!ok) unlink(j->tmp);
  fsync_dir(c->dir);
  atomic_fetch_add(ok ? &c->written : &c->failed, 1);
  atomic_fetch_sub(&c->open, 1);
  report(c, j, ok, ok ? NULL : msg);
  free(j);
}

/* k samples into the clip; the first failure (a full disk, an I/O error)
 * is kept, and nothing more is written: the clip is reported failed. */
static void write_checked(job *j, const int16_t *x, uint64_t k) {
  if (j->failed[0]) return;
  errno = 0;
  if (sf_write_short(j->sf, x, (sf_count_t)k) != (sf_count_t)k) {
    const char *sys = errno ? strerror(errno) : "", *why = sf_strerror(j->sf);
    /* libsndfile's text names a system error itself ("System error : ...") */
    snprintf(j->failed, sizeof j->failed, "writing the clip failed: %s%s%s", why,
             *sys && !strstr(why, sys) ? ": " : "", *sys && !strstr(why, sys) ? sys : "");
  }
}

/* Copies what has arrived into the clip; 1 when the clip is complete. */
static int job_copy(ssae_clips *c, job *j, int final) {
  ring *r = &c->rings[j->channel];
  uint64_t stop = j->end < j->cap_end ? j->end : j->cap_end;
  for (;;) {
    uint64_t avail = atomic_load_explicit(&r->pos, memory_order_acquire);
    uint64_t oldest = avail > c->cap ? avail - c->cap : 0;
    if (j->next < oldest) {
      /* Samples gone before they were copied: at the start (a late
       * alarm_on) the clip starts later; later on they become silence. */
      if (j->next == j->start) {
        atomic_fetch_add(&c->lost, oldest - j->start);
        j->start = j->next = oldest;
      } else {
        atomic_fetch_add(&c->lost, oldest - j->next);
        while (j->next < oldest) {
          uint64_t k = oldest - j->next < CHUNK ? oldest - j->next : CHUNK;
          memset(c->buf, 0, k * sizeof c->buf[0]);
          write_checked(j, c->buf, k);
          j->next += k;
        }
      }
    }
    uint64_t upto = avail < stop ? avail : stop;
    if (j->next >= upto) break;
    uint64_t k = upto - j->next < CHUNK ? upto - j->next : CHUNK;
    for (uint64_t i = 0; i < k; i++)
      c->buf[i] = atomic_load_explicit(&r->s[(j->next + i) % c->cap],
                                       memory_order_relaxed);
    /* Overwritten while copying? Those samples are not the clip's. */
    uint64_t now = atomic_load_explicit(&r->pos, memory_order_acquire);
    uint64_t valid_from = now > c->cap ? now - c->cap : 0;
    if (valid_from > j->next) {
      uint64_t bad = valid_from - j->next < k ? valid_from - j->next : k;
      memset(c->buf, 0, bad * sizeof c->buf[0]);
      atomic_fetch_add(&c->lost, bad);
    }
    write_checked(j, c->buf, k);
    j->next += k;
  }
  return j->next >= stop || final;
}

/* The outputs' threads yield to the audio and scoring threads when the
 * cores are busy: a nice of 10 for this thread alone (Linux threads have
 * their own nice value). Without the permission it stays as it is. */
static void run_in_background(void) {
  setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
}

/* What the open clips still need of each ring, for a waiting reader. */
static void publish_need(ssae_clips *c) {
  pthread_mutex_lock(&c->mu);
  for (int ch = 0; ch < c->cfg.channels; ch++) c->need[ch] = UINT64_MAX;
  for (const job *j = c->jobs; j; j = j->link)
    if (j->next < c->need[j->channel]) c->need[j->channel] = j->next;
  c->in_round = 0;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

static void *writer_main(void *arg) {
  run_in_background();
  ssae_clips *c = arg;
  for (;;) {
    pthread_mutex_lock(&c->mu);
    if (!c->stop && c->n_reqs == 0) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 50 * 1000000;
      if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
      pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    }
    int stop = c->stop;
    size_t n = c->n_reqs;
    req *rs = NULL;
    if (n) {
      rs = malloc(n * sizeof *rs);
      if (rs) memcpy(rs, c->reqs, n * sizeof *rs);
      c->n_reqs = 0;
      c->in_round = 1;
    }
    pthread_mutex_unlock(&c->mu);
    for (size_t i = 0; i < n && rs; i++) {
      if (rs[i].on) {
        job_start(c, &rs[i]);
        continue;
      }
      for (job *j = c->jobs; j; j = j->link) {
        if (strcmp(j->id, rs[i].id) == 0 && j->end == UINT64_MAX) {
          uint64_t post = (uint64_t)llround(c->cfg.post_roll_s * c->cfg.rate);
          j->end = rs[i].sample + post;
        }
      }
    }
    free(rs);
    int finished = 0;
    for (job **pj = &c->jobs; *pj;) {
      job *j = *pj;
      if (job_copy(c, j, stop)) {
        *pj = j->link;
        job_finish(c, j);
        finished = 1;
      } else {
        pj = &j->link;
      }
    }
    publish_need(c);
    if (finished) ssae_clips_retain(c, NULL);
    if (stop) break;
  }
  return NULL;
}

/* ---- retention ---- */

typedef struct entry {
  char *name;
  time_t mtime;
  uint64_t size;
} entry;

static int by_age(const void *a, const void *b) {
  const entry *x = a, *y = b;
  if (x->mtime != y->mtime) return x->mtime < y->mtime ? -1 : 1;
  return strcmp(x->name, y->name);
}

static int is_clip(const char *name) {
  size_t n = strlen(name);
  if (strncmp(name, PREFIX, strlen(PREFIX)) != 0) return 0;
  return (n > 5 && strcmp(name + n - 5, ".flac") == 0) ||
         (n > 4 && strcmp(name + n - 4, ".wav") == 0);
}

int ssae_clips_retain(ssae_clips *c, ssae_err *err) {
  DIR *d = opendir(c->dir);
  if (!d) return ssae_err_set(err, "clips: %s: %s", c->dir, strerror(errno));
  entry *e = NULL;
  size_t n = 0, cap = 0;
  uint64_t total = 0;
  struct dirent *de;
  /* A clip being written is touched at every chunk and lasts max_length_s
   * at most: a temporary file idle far longer is a killed process's (a
   * watchdog restart), which nothing else would ever remove. */
  const double stale_s = c->cfg.max_length_s + c->cfg.post_roll_s + 600;
  while ((de = readdir(d))) {
    if (!strncmp(de->d_name, ".ssae_clip_", 11)) {
      struct stat st;
      if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
          difftime(time(NULL), st.st_mtime) > stale_s)
        unlinkat(dirfd(d), de->d_name, 0);
      continue;
    }
    if (!is_clip(de->d_name)) continue;
    struct stat st;
    if (fstatat(dirfd(d), de->d_name, &st, 0) != 0 || !S_ISREG(st.st_mode))
      continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      entry *ne = realloc(e, cap * sizeof *e);
      if (!ne) break;
      e = ne;
    }
    e[n].name = strdup(de->d_name);
    if (!e[n].name) break;
    e[n].mtime = st.st_mtime;
    e[n].size = (uint64_t)st.st_size;
    total += e[n].size;
    n++;
  }
  if (n) qsort(e, n, sizeof *e, by_age); /* (NULL when the folder has none) */
  time_t now = time(NULL);
  /* Oldest first; the newest clip always stays. */
  size_t left = n;
  for (size_t i = 0; i + 1 < n; i++) {
    int over_count = c->cfg.keep_count > 0 && left > (size_t)c->cfg.keep_count;
    int over_age = c->cfg.keep_age_s > 0 &&
                   difftime(now, e[i].mtime) > c->cfg.keep_age_s;
    int over_size = c->cfg.keep_bytes > 0 && total > c->cfg.keep_bytes;
    if (!over_count && !over_age && !over_size) continue;
    if (unlinkat(dirfd(d), e[i].name, 0) == 0) {
      /* Its picture (clips.picture) goes with it. */
      char png[1024];
      if (!ssae_clip_picture_path(e[i].name, png, sizeof png)) unlinkat(dirfd(d), png, 0);
      atomic_fetch_add(&c->deleted, 1);
      total -= e[i].size;
      left--;
    }
  }
  for (size_t i = 0; i < n; i++) free(e[i].name);
  free(e);
  closedir(d);
  return 0;
}

/* ---- worker thread ---- */

static int push_req(ssae_clips *c, const req *r) {
  pthread_mutex_lock(&c->mu);
  if (c->n_reqs == c->cap_reqs) {
    size_t cap = c->cap_reqs ? 2 * c->cap_reqs : 64;
    req *nr = realloc(c->reqs, cap * sizeof *nr);
    if (!nr) {
      pthread_mutex_unlock(&c->mu);
      return -1;
    }
    c->reqs = nr;
    c->cap_reqs = cap;
  }
  c->reqs[c->n_reqs++] = *r;
  pthread_cond_broadcast(&c->cv); /* the writer, and a reader waiting for room */
  pthread_mutex_unlock(&c->mu);
  return 0;
}

int ssae_clips_alarm_on(ssae_clips *c, int channel, double t, const char *id,
                        char *path, size_t path_len) {
  if (!c || channel < 0 || channel >= c->cfg.channels || !id) return -1;
  req r = {0};
  r.on = 1;
  r.channel = channel;
  r.sample = t > 0 ? (uint64_t)llround(t * c->cfg.rate) : 0;
  snprintf(r.id, sizeof r.id, "%s", id);
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  char stamp[32];
  strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  pthread_mutex_lock(&c->mu); /* names change on a reload */
  snprintf(r.name, sizeof r.name, "%s", c->names[channel]);
  pthread_mutex_unlock(&c->mu);
  int w = snprintf(r.path, sizeof r.path, "%s/" PREFIX "%s_%s_%.8s.%s", c->dir,
                   r.name, stamp, id, c->cfg.flac ? "flac" : "wav");
  if (w < 0 || (size_t)w >= sizeof r.path) return -1;
  if (path && path_len) snprintf(path, path_len, "%s", r.path);
  return push_req(c, &r);
}

int ssae_clips_alarm_off(ssae_clips *c, int channel, double t, const char *id) {
  if (!c || channel < 0 || channel >= c->cfg.channels || !id) return -1;
  req r = {0};
  r.channel = channel;
  r.sample = t > 0 ? (uint64_t)llround(t * c->cfg.rate) : 0;
  snprintf(r.id, sizeof r.id, "%s", id);
  return push_req(c, &r);
}

int ssae_clips_set_names(ssae_clips *c, const char *const *names) {
  if (!c || !names) return -1;
  char **nn = calloc((size_t)c->cfg.channels, sizeof *nn);
  int oom = !nn;
  for (int i = 0; !oom && i < c->cfg.channels; i++)
    oom = !(nn[i] = strdup(names[i] ? names[i] : c->names[i]));
  if (oom) {
    for (int i = 0; nn && i < c->cfg.channels; i++) free(nn[i]);
    free(nn);
    return -1;
  }
  pthread_mutex_lock(&c->mu);
  char **old = c->names;
  c->names = nn;
  pthread_mutex_unlock(&c->mu);
  for (int i = 0; i < c->cfg.channels; i++) free(old[i]);
  free(old);
  return 0;
}

void ssae_clips_stats_get(ssae_clips *c, ssae_clips_stats *s) {
  memset(s, 0, sizeof *s);
  if (!c) return;
  s->written = atomic_load(&c->written);
  s->failed = atomic_load(&c->failed);
  s->deleted = atomic_load(&c->deleted);
  s->lost_samples = atomic_load(&c->lost);
  s->open = atomic_load(&c->open);
}

/* ---- a reader that can wait (a file) ---- */

/* The oldest sample channel ch's clips need, under mu: the writer's
 * published need and the starts of alarms not yet taken; -1 while the
 * writer holds requests it has not turned into clips. */
static int needed(const ssae_clips *c, int ch, uint64_t *oldest) {
  if (c->in_round) return -1;
  uint64_t need = c->need[ch];
  for (size_t i = 0; i < c->n_reqs; i++) {
    const req *r = &c->reqs[i];
    if (r->on && r->channel == ch && clip_start(c, r->sample) < need)
      need = clip_start(c, r->sample);
  }
  *oldest = need;
  return 0;
}

int ssae_clips_wait_room(ssae_clips *c, size_t n, double timeout_s) {
  if (!c || !c->thread_ok) return 0;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  double end = (double)until.tv_sec + until.tv_nsec * 1e-9 + timeout_s;
  pthread_mutex_lock(&c->mu);
  int rc = 0;
  for (;;) {
    int room = 1;
    for (int ch = 0; room && ch < c->cfg.channels; ch++) {
      uint64_t oldest;
      const uint64_t pos = atomic_load_explicit(&c->rings[ch].pos, memory_order_acquire);
      if (needed(c, ch, &oldest)) room = 0;
      else if (oldest != UINT64_MAX && pos + n > oldest + c->cap) room = 0;
    }
    if (room || c->stop) break;
    clock_gettime(CLOCK_REALTIME, &until);
    if ((double)until.tv_sec + until.tv_nsec * 1e-9 >= end) {
      rc = -1;
      break;
    }
    /* Wake the writer (it may be in its idle wait) and wait for its
     * round's end, or a millisecond. */
    pthread_cond_broadcast(&c->cv);
    until.tv_nsec += 1000000;
    if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&c->cv, &c->mu, &until);
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

/* ---- main thread ---- */

ssae_clips *ssae_clips_new(const ssae_clips_cfg *cfg, ssae_err *err) {
  if (!cfg || !cfg->dir || cfg->channels < 1 || !(cfg->rate > 0)) {
    ssae_err_set(err, "clips: need a folder, channels and a rate");
    return NULL;
  }
  if (cfg->pre_roll_s < 0 || cfg->post_roll_s < 0 || !(cfg->max_length_s > 0)) {
    ssae_err_set(err, "clips: pre/post-roll must be >= 0, max length > 0");
    return NULL;
  }
  ssae_clips *c = calloc(1, sizeof *c);
  if (!c) {
    ssae_err_set(err, "out of memory");
    return NULL;
  }
  c->cfg = *cfg;
  if (c->cfg.margin_s <= 0) c->cfg.margin_s = 3;
  c->dir = strdup(cfg->dir);
  c->names = calloc((size_t)cfg->channels, sizeof *c->names);
  c->rings = calloc((size_t)cfg->channels, sizeof *c->rings);
  c->need = malloc((size_t)cfg->channels * sizeof *c->need);
  c->mu_ok = pthread_mutex_init(&c->mu, NULL) == 0;
  c->cv_ok = pthread_cond_init(&c->cv, NULL) == 0;
  if (!c->dir || !c->names || !c->rings || !c->need || !c->mu_ok || !c->cv_ok) goto oom;
  for (int i = 0; i < cfg->channels; i++) c->need[i] = UINT64_MAX;
  size_t dl = strlen(c->dir);
  while (dl > 1 && c->dir[dl - 1] == '/') c->dir[--dl] = 0;
  if (mkdir(c->dir, 0755) != 0 && errno != EEXIST) {
    ssae_err_set(err, "clips: cannot create %s: %s", c->dir, strerror(errno));
    goto fail;
  }
  if (access(c->dir, W_OK) != 0) {
    ssae_err_set(err, "clips: cannot write in %s: %s", c->dir, strerror(errno));
    goto fail;
  }
  c->cap = (uint64_t)ceil((cfg->pre_roll_s + c->cfg.margin_s) * cfg->rate);
  for (int i = 0; i < cfg->channels; i++) {
    char nm[32];
    snprintf(nm, sizeof nm, "ch%d", i);
    c->names[i] = strdup(cfg->names && cfg->names[i] ? cfg->names[i] : nm);
    /* Touch every page now: the audio thread must not fault them in. */
    c->rings[i].s = calloc(c->cap, sizeof(_Atomic int16_t));
    if (!c->names[i] || !c->rings[i].s) goto oom;
    for (uint64_t k = 0; k < c->cap; k++) atomic_init(&c->rings[i].s[k], 0);
    atomic_init(&c->rings[i].pos, 0);
  }
  if (pthread_create(&c->thread, NULL, writer_main, c) != 0) {
    ssae_err_set(err, "clips: cannot start the writer thread");
    goto fail;
  }
  c->thread_ok = 1;
  return c;
oom:
  ssae_err_set(err, "out of memory");
fail:
  ssae_clips_free(c);
  return NULL;
}

void ssae_clips_free(ssae_clips *c) { ssae_clips_close(c, NULL); }

void ssae_clips_close(ssae_clips *c, ssae_clips_stats *final) {
  if (final) memset(final, 0, sizeof *final);
  if (!c) return;
  if (c->thread_ok) {
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
  }
  if (final) ssae_clips_stats_get(c, final);
  for (int i = 0; c->rings && i < c->cfg.channels; i++) free((void *)c->rings[i].s);
  for (int i = 0; c->names && i < c->cfg.channels; i++) free(c->names[i]);
  free(c->rings);
  free(c->need);
  free(c->names);
  free(c->reqs);
  free(c->dir);
  if (c->cv_ok) pthread_cond_destroy(&c->cv);
  if (c->mu_ok) pthread_mutex_destroy(&c->mu);
  free(c);
}
