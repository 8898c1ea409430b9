#include "ssae_engine.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ssae_backend.h"
#include "ssae_logmel.h"
#include "ssae_logmel_multi.h"
#include "ssae_resample.h"
#include "ssae_ring.h"

/* Header of a ring item; the window's F*M floats follow at ITEM_HDR. */
#define ITEM_GAP 1u /* the window touches digital silence */
typedef struct item_hdr {
  uint32_t channel;
  uint32_t flags;
  uint64_t window;     /* index in its channel since the engine started */
  uint64_t end_sample; /* model-rate sample position of the window's end */
  int64_t t_ns;        /* CLOCK_MONOTONIC when its last sample arrived */
} item_hdr;
#define ITEM_HDR 32

/* Audio-thread side of a channel. The counters are written only by the
 * audio thread (relaxed stores) and read elsewhere. */
typedef struct front {
  ssae_resampler *rs; /* NULL when the input runs at the model's rate */
  ssae_window *win;
  uint64_t frame_base;  /* frames before the current stream */
  uint64_t frames;      /* frames of the current stream */
  uint64_t samples;     /* model-rate samples fed since the engine started */
  uint64_t next_window; /* window index */
  uint64_t zrun;        /* exact zeros in a row at the end of the input */
  uint64_t gap_end;     /* sample after the latest run of >= GAP_MIN zeros
                           (0: none yet) */
  _Atomic uint64_t made;
  _Atomic uint64_t dropped;
} front;

/* One published set of a channel's results. The fields are atomics (relaxed)
 * only so that a reader racing the writer is defined behaviour; the latch
 * below is what makes a reader's set consistent. */
typedef struct pub {
  _Atomic float score, smoothed, threshold, latency_ms;
  _Atomic int alarm;
  _Atomic uint64_t scored;
} pub;

/* Worker side of a channel: detector state and published results.
 *
 * The results go out through a latch (two copies and a sequence counter, as
 * Linux's seqcount_latch): the writer bumps seq to odd and rewrites copy 0
 * while readers use copy 1, then bumps seq to even and rewrites copy 1 while
 * readers use copy 0. A reader never sees a torn set and never waits for a
 * writer that is preempted mid-update: it retries only when the writer has
 * finished a copy in the meantime. */
typedef struct chan {
  double ema;
  int have_ema;
  int above, below;
  int alarm_w;          /* worker's alarm state */
  uint64_t scored_w;    /* worker's count of scored windows */
  uint64_t last_window; /* index of the last window scored */
  double last_t;        /* its time (seconds of audio) */
  _Atomic uint32_t seq;
  pub copy[2];
} chan;

/* One input group: the channels one audio thread feeds, with everything
 * that thread writes (front end, scratch, ring, counters), so that several
 * audio threads (sound cards, JACK clients) can feed one engine without
 * sharing anything but the worker. */
typedef struct group {
  ssae_engine *e;
  int c0, nc; /* channels c0 .. c0 + nc - 1 */
  /* The group's log-mel streams, one set of tables: the frames that
   * complete in a block are computed eight channels at a time, and each
   * comes back through on_frame. */
  ssae_logmel_multi *lmm;
  ssae_ring *ring;
  int64_t blk_t; /* now_ns() of the block being processed */
  int warming;   /* warm_fronts: frames only fill the windows */
  int was_enabled;
  float *rs_out, *scratch_win, *deint, *zeros;
  size_t rs_cap;
  _Atomic int in_process; /* Dekker pair with pause_req (seq_cst) */
  /* The group's drops together, for the worker's drop report after each
   * batch: one load instead of one per channel (at thousands of channels,
   * thousands of cache lines that the audio thread writes). */
  _Atomic uint64_t dropped_all;
  char pad[64]; /* the next group's audio thread writes the next one */
} group;

#define LAT_FINE 10000  /* 1 us buckets up to 10 ms */
#define LAT_COARSE 9900 /* 100 us buckets from 10 ms to 1 s */

struct ssae_engine {
  ssae_engine_cfg cfg;
  const ssae_model *model;
  ssae_feat_cfg feat;
  int C, wf; /* channels, floats per window */
  double in_rate;
  size_t max_block;

  /* audio threads */
  front *fr;
  group *g;
  int G;
  int cleared; /* worker: alarms cleared since analysis was paused */
  _Atomic int pause_req;

  /* parameters (any thread) */
  _Atomic double p_threshold, p_smoothing;
  _Atomic int p_on, p_off, p_enabled;

  /* worker */
  pthread_t thread;
  int thread_started;
  _Atomic int stop;
  ssae_backend *backend;
  double model_threshold;
  chan *ch;
  /* Two batches, so that the GPU scores one while the worker takes the
   * next out of the rings. bx[s]: where batch s is laid out: the backend's
   * own input buffer of slot s when it has one (the GPU's pinned memory: no
   * staging copy), else batch_x[s]. */
  float *batch_x[2], *batch_scores[2], *bx[2];
  item_hdr *batch_hdr[2];
  size_t max_batch;
  /* In place (the GPU, rings page-locked): the worker copies only each
   * window's header; the device's copy engine reads the windows out of the
   * rings (ssae_backend_submit_spans), and their slots are released when
   * the batch's scores are in. spans[s]/nsp[s]: batch s's runs of
   * consecutive slots; taken[g]: group g's slots taken but not released;
   * rel[s][g]: those of batch s. Copying 4096 windows per period out of
   * the rings cost the worker ~1 ms (BENCHMARKS.md, engine round 6). */
  int in_place;
  ssae_span *spans[2];
  int nsp[2];
  size_t *taken, *rel[2];
  const ssae_backend_ops **pin_ops; /* per group: who page-locked its ring */
  /* On the CPU a channel's window shares F-1 frames with its previous one:
   * the worker keeps each channel's slice codes (ssae_backend_score_cached)
   * and encodes only the new frame. codes_end[c]: end_sample of the window
   * whose codes are in channel c's cache (0: none); codes_gen: which call
   * of a batch a channel's window went to (one window per channel and call). */
  double *codes;
  size_t codes_len;
  uint64_t *codes_end;
  uint32_t *codes_gen, gen;
  double **batch_codes;
  unsigned char *batch_cont;
  int codes_valid;
  _Atomic uint64_t scored_total;
  _Atomic uint64_t batches;
  _Atomic uint64_t t_take, t_score, t_publish; /* ns, worker stages */
  uint64_t dropped_reported;
  uint64_t status_scored, status_dropped; /* counters of the last STATUS */
  int status_sent;
  double next_status_t;
  double last_t;             /* worker's; published as audio_s */
  _Atomic double audio_s;
  /* ssae_backend_name() of the backend in use: a static string, so that a
   * reader may keep the pointer after the backend changes. */
  _Atomic(const char *) backend_name;

  /* latency histogram: shared with stats readers */
  pthread_mutex_t stats_mu;
  int mu_ok;
  uint64_t lat_hist[LAT_FINE + LAT_COARSE + 1];
  uint64_t lat_n;
  double lat_max_ms;

  /* model swap (swapper thread <-> worker) */
  pthread_mutex_t swap_mu;
  pthread_cond_t swap_cv;
  int swap_ok;
  _Atomic(ssae_backend *) pending_backend;
  const ssae_model *pending_model;
};

void ssae_engine_params_default(ssae_engine_params *p) {
  p->threshold = NAN;
  p->smoothing_s = 0.1;
  p->on_count = 3;
  p->off_count = 5;
  p->enabled = 1;
}

void ssae_engine_cfg_default(ssae_engine_cfg *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->channels = 1;
  cfg->backend = "auto";
  ssae_engine_params_default(&cfg->params);
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static void sleep_ns(int64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
  }
}

/* ------------------------------------------------------------------ */
/* front end (audio thread)                                            */

static int build_resamplers(ssae_engine *e, double rate, ssae_err *err) {
  long in = lround(rate), out = e->feat.sample_rate;
  size_t cap = e->max_block;
  ssae_resampler **rs = calloc((size_t)e->C, sizeof *rs);
  if (!rs) return ssae_err_set(err, "engine: out of memory");
  if (in != out) {
    for (int c = 0; c < e->C; c++) {
      rs[c] = ssae_resampler_new(in, out, e->max_block, err);
      if (!rs[c]) {
        for (int k = 0; k < c; k++) ssae_resampler_free(rs[k]);
        free(rs);
        return -1;
      }
    }
    cap = ssae_resampler_max_out(rs[0], e->max_block);
  }
  float **ro = calloc((size_t)e->G, sizeof *ro);
  int ok = ro != NULL;
  for (int g = 0; ok && g < e->G; g++) {
    ro[g] = malloc(cap * sizeof **ro);
    if (ro[g]) memset(ro[g], 0, cap * sizeof **ro);
    else ok = 0;
  }
  if (!ok) {
    for (int g = 0; ro && g < e->G; g++) free(ro[g]);
    free(ro);
    for (int c = 0; c < e->C; c++) ssae_resampler_free(rs[c]);
    free(rs);
    return ssae_err_set(err, "engine: out of memory");
  }
  for (int c = 0; c < e->C; c++) {
    ssae_resampler_free(e->fr[c].rs);
    e->fr[c].rs = rs[c];
  }
  free(rs);
  for (int g = 0; g < e->G; g++) {
    free(e->g[g].rs_out);
    e->g[g].rs_out = ro[g];
    e->g[g].rs_cap = cap;
  }
  free(ro);
  e->in_rate = (double)in;
  return 0;
}

/* The first blocks of a stream would touch the front ends' buffers for the
 * first time (history, FFT scratch, resampler state, window): page faults
 * on the audio thread. Silence goes through every channel's whole path now,
 * on the thread that builds the engine, and the streams start afresh; the
 * counters and the ring are not touched (on_frame only fills the windows). */
static void warm_group(group *gr) {
  ssae_engine *e = gr->e;
  memset(gr->zeros, 0, e->max_block * sizeof *gr->zeros);
  memset(gr->deint, 0, e->max_block * sizeof *gr->deint);
  memset(gr->scratch_win, 0, (size_t)e->wf * sizeof *gr->scratch_win);
  gr->warming = 1;
  /* A large block first (several frames per channel), then blocks of a
   * hop (one frame per channel, as a live stream goes), until the windows
   * are full, then the end padding. */
  const size_t hop = (size_t)e->feat.hop_length;
  for (int k = 0, frames = 0; k < 64 && (k < 4 || frames <= e->feat.frames + 1); k++) {
    size_t len = k == 0 ? 4096 : hop;
    if (len > e->max_block) len = e->max_block;
    for (int i = 0; i < gr->nc; i++) {
      front *f = &e->fr[gr->c0 + i];
      const float *feed = gr->zeros;
      size_t m = len;
      if (f->rs) {
        m = ssae_resampler_process(f->rs, gr->zeros, len, gr->rs_out);
        feed = gr->rs_out;
      }
      size_t nfr = ssae_logmel_multi_feed(gr->lmm, i, feed, m);
      if (i == 0) frames += (int)nfr;
    }
    ssae_logmel_multi_run(gr->lmm);
  }
  for (int i = 0; i < gr->nc; i++) ssae_logmel_multi_flush(gr->lmm, i);
  ssae_logmel_multi_run(gr->lmm);
  for (int i = 0; i < gr->nc; i++) {
    front *f = &e->fr[gr->c0 + i];
    if (f->rs) ssae_resampler_reset(f->rs);
    ssae_logmel_multi_reset(gr->lmm, i);
    ssae_window_reset(f->win);
  }
  gr->warming = 0;
}

static void warm_fronts(ssae_engine *e) {
  for (int g = 0; g < e->G; g++) warm_group(&e->g[g]);
}

/* Digital silence: this many exact zeros in a row (4 ms at 16 kHz). Real
 * signals, even quiet 16-bit ones, do not have them; unconnected ports,
 * ended streams and muted devices do. */
#define GAP_MIN 64

static void scan_gaps(front *f, const float *x, size_t n) {
  /* Real signals have no exact zeros: a block without any (checked without
   * branches, so it vectorises) only ends the current run. */
  int any = 0;
  for (size_t i = 0; i < n; i++) any |= x[i] == 0.0f;
  if (!any) {
    f->zrun = 0;
    return;
  }
  uint64_t z = f->zrun;
  for (size_t i = 0; i < n; i++) {
    if (x[i] == 0.0f) {
      if (++z >= GAP_MIN) f->gap_end = f->samples + i + 1;
    } else {
      z = 0;
    }
  }
  f->zrun = z;
}

/* Channel i of group gr. */
static void stream_restart(group *gr, int i) {
  ssae_engine *e = gr->e;
  front *f = &e->fr[gr->c0 + i];
  if (f->rs) ssae_resampler_reset(f->rs);
  ssae_logmel_multi_reset(gr->lmm, i);
  ssae_window_reset(f->win);
  /* Continue the time axis where the samples are. */
  f->frame_base = f->samples / (uint64_t)e->feat.hop_length;
  f->frames = 0;
}

/* A channel's next frame, from the multi-channel front end (audio thread,
 * inside feed, flush or run): into its window; a full window goes into the
 * ring, or is dropped and counted when the ring is full. */
static void on_frame(void *user, int i, const float *frame) {
  group *gr = user;
  ssae_engine *e = gr->e;
  const int ch = gr->c0 + i;
  front *f = &e->fr[ch];
  if (gr->warming) {
    ssae_window_push(f->win, frame, gr->scratch_win);
    return;
  }
  const uint64_t hop = (uint64_t)e->feat.hop_length;
  const uint64_t tail = e->feat.center ? (uint64_t)e->feat.n_fft / 2
                                       : (uint64_t)e->feat.n_fft;
  unsigned char *slot = ssae_ring_write_slot(gr->ring);
  float *dst = slot ? (float *)(slot + ITEM_HDR) : gr->scratch_win;
  f->frames++;
  if (!ssae_window_push(f->win, frame, dst)) return;
  uint64_t w = f->next_window++;
  atomic_store_explicit(&f->made, atomic_load_explicit(&f->made, memory_order_relaxed) + 1,
                        memory_order_relaxed);
  if (!slot) {
    atomic_store_explicit(
        &f->dropped,
        atomic_load_explicit(&f->dropped, memory_order_relaxed) + 1,
        memory_order_relaxed);
    atomic_store_explicit(
        &gr->dropped_all,
        atomic_load_explicit(&gr->dropped_all, memory_order_relaxed) + 1,
        memory_order_relaxed);
    return;
  }
  item_hdr *h = (item_hdr *)slot;
  h->channel = (uint32_t)ch;
  h->window = w;
  uint64_t last_frame = f->frame_base + f->frames - 1;
  h->end_sample = last_frame * hop + tail;
  uint64_t span = (uint64_t)(e->feat.frames - 1) * hop + (e->feat.center ? 2 * tail : tail);
  uint64_t first = h->end_sample > span ? h->end_sample - span : 0;
  h->flags = f->gap_end > first ? ITEM_GAP : 0;
  h->t_ns = gr->blk_t;
  ssae_ring_commit(gr->ring);
}

/* One channel's part of a block: resampled, scanned for silence, fed to
 * the front end, whose frames come back through on_frame (eight channels
 * at a time; the caller runs the rest at the end of the block). The gap
 * scan comes first: a frame completed by this block sees its zeros. */
static void channel_block(group *gr, int i, const float *src, size_t n) {
  front *f = &gr->e->fr[gr->c0 + i];
  const float *feed = src ? src : gr->zeros;
  size_t m = n;
  if (f->rs) {
    m = ssae_resampler_process(f->rs, feed, n, gr->rs_out);
    feed = gr->rs_out;
  }
  scan_gaps(f, feed, m);
  f->samples += m;
  ssae_logmel_multi_feed(gr->lmm, i, feed, m);
}

/* While analysis is paused the time axis keeps moving. */
static void skip_block(group *gr, size_t n) {
  ssae_engine *e = gr->e;
  for (int c = gr->c0; c < gr->c0 + gr->nc; c++)
    e->fr[c].samples +=
        e->fr[c].rs
            ? (uint64_t)llround((double)n * e->feat.sample_rate / e->in_rate)
            : n;
}

/* Returns 0 when the caller may touch the front end; the caller must then
 * call leave(). Never waits. */
static int enter(group *gr) {
  atomic_store(&gr->in_process, 1);
  if (atomic_load(&gr->e->pause_req)) {
    atomic_store(&gr->in_process, 0);
    return -1;
  }
  return 0;
}
static void leave(group *gr) { atomic_store(&gr->in_process, 0); }

static int check_enabled(group *gr) {
  int en = atomic_load_explicit(&gr->e->p_enabled, memory_order_relaxed);
  if (en && !gr->was_enabled)
    for (int i = 0; i < gr->nc; i++) stream_restart(gr, i);
  gr->was_enabled = en;
  return en;
}

/* in[i]: channel c0 + i of the group; interleaved (in_stride > 0): channel
 * c0 + i at in[0] + i + k * in_stride. */
static void process_group(group *gr, const float *const *in, const float *il,
                          size_t il_stride, size_t n) {
  if (enter(gr)) return;
  ssae_engine *e = gr->e;
  int en = check_enabled(gr);
  gr->blk_t = now_ns();
  for (size_t off = 0; off < n;) {
    size_t len = n - off < e->max_block ? n - off : e->max_block;
    if (!en) {
      skip_block(gr, len);
    } else if (il) {
      for (int i = 0; i < gr->nc; i++) {
        const float *s = il + off * il_stride + (size_t)(gr->c0 + i);
        for (size_t k = 0; k < len; k++) gr->deint[k] = s[k * il_stride];
        channel_block(gr, i, gr->deint, len);
      }
      ssae_logmel_multi_run(gr->lmm);
    } else {
      for (int i = 0; i < gr->nc; i++)
        channel_block(gr, i, in && in[i] ? in[i] + off : NULL, len);
      ssae_logmel_multi_run(gr->lmm);
    }
    off += len;
  }
  leave(gr);
}

void ssae_engine_process(ssae_engine *e, const float *const *in, size_t n) {
  for (int g = 0; g < e->G; g++)
    process_group(&e->g[g], in ? in + e->g[g].c0 : NULL, NULL, 0, n);
}

void ssae_engine_process_group(ssae_engine *e, int g, const float *const *in,
                               size_t n) {
  if (g >= 0 && g < e->G) process_group(&e->g[g], in, NULL, 0, n);
}

void ssae_engine_process_interleaved(ssae_engine *e, const float *in,
                                     size_t n) {
  if (!in) {
    ssae_engine_process(e, NULL, n);
    return;
  }
  for (int g = 0; g < e->G; g++) process_group(&e->g[g], NULL, in, (size_t)e->C, n);
}

static void flush_group(group *gr) {
  if (enter(gr)) return;
  ssae_engine *e = gr->e;
  gr->blk_t = now_ns();
  for (int i = 0; i < gr->nc; i++) ssae_logmel_multi_flush(gr->lmm, i);
  ssae_logmel_multi_run(gr->lmm);
  for (int i = 0; i < gr->nc; i++) {
    front *f = &e->fr[gr->c0 + i];
    /* The next stream's frames continue this one's numbering. */
    uint64_t next = f->frame_base + f->frames;
    stream_restart(gr, i);
    f->frame_base = next;
  }
  leave(gr);
}

void ssae_engine_flush(ssae_engine *e) {
  for (int g = 0; g < e->G; g++) flush_group(&e->g[g]);
}

void ssae_engine_flush_group(ssae_engine *e, int g) {
  if (g >= 0 && g < e->G) flush_group(&e->g[g]);
}

int ssae_engine_groups(const ssae_engine *e) { return e->G; }

void ssae_engine_group_channels(const ssae_engine *e, int g, int *first, int *count) {
  int ok = g >= 0 && g < e->G;
  if (first) *first = ok ? e->g[g].c0 : 0;
  if (count) *count = ok ? e->g[g].nc : 0;
}

/* ------------------------------------------------------------------ */
/* parameters                                                          */

void ssae_engine_set_params(ssae_engine *e, const ssae_engine_params *p) {
  atomic_store_explicit(&e->p_threshold, p->threshold, memory_order_relaxed);
  atomic_store_explicit(&e->p_smoothing, p->smoothing_s < 0 ? 0 : p->smoothing_s,
                        memory_order_relaxed);
  atomic_store_explicit(&e->p_on, p->on_count < 1 ? 1 : p->on_count,
                        memory_order_relaxed);
  atomic_store_explicit(&e->p_off, p->off_count < 1 ? 1 : p->off_count,
                        memory_order_relaxed);
  atomic_store_explicit(&e->p_enabled, p->enabled ? 1 : 0,
                        memory_order_relaxed);
}

void ssae_engine_get_params(const ssae_engine *e, ssae_engine_params *p) {
  ssae_engine *m = (ssae_engine *)e;
  p->threshold = atomic_load_explicit(&m->p_threshold, memory_order_relaxed);
  p->smoothing_s = atomic_load_explicit(&m->p_smoothing, memory_order_relaxed);
  p->on_count = atomic_load_explicit(&m->p_on, memory_order_relaxed);
  p->off_count = atomic_load_explicit(&m->p_off, memory_order_relaxed);
  p->enabled = atomic_load_explicit(&m->p_enabled, memory_order_relaxed);
}

static void pub_read(pub *p, ssae_channel_state *out) {
  out->score = atomic_load_explicit(&p->score, memory_order_relaxed);
  out->smoothed = atomic_load_explicit(&p->smoothed, memory_order_relaxed);
  out->threshold = atomic_load_explicit(&p->threshold, memory_order_relaxed);
  out->alarm = atomic_load_explicit(&p->alarm, memory_order_relaxed);
  out->windows = atomic_load_explicit(&p->scored, memory_order_relaxed);
  out->latency_ms = atomic_load_explicit(&p->latency_ms, memory_order_relaxed);
}

static void pub_write(pub *p, const ssae_channel_state *v) {
  atomic_store_explicit(&p->score, v->score, memory_order_relaxed);
  atomic_store_explicit(&p->smoothed, v->smoothed, memory_order_relaxed);
  atomic_store_explicit(&p->threshold, v->threshold, memory_order_relaxed);
  atomic_store_explicit(&p->alarm, v->alarm, memory_order_relaxed);
  atomic_store_explicit(&p->scored, v->windows, memory_order_relaxed);
  atomic_store_explicit(&p->latency_ms, v->latency_ms, memory_order_relaxed);
}

/* Worker only (the one writer). Each seq store is a release (the copy
 * written before it is complete for a reader that sees it) followed by a
 * release fence (a reader that sees any write of the copy after it also
 * sees the new seq, and retries). */
static void publish(chan *k, const ssae_channel_state *v) {
  uint32_t s = atomic_load_explicit(&k->seq, memory_order_relaxed);
  atomic_store_explicit(&k->seq, s + 1, memory_order_release);
  atomic_thread_fence(memory_order_release);
  pub_write(&k->copy[0], v);
  atomic_store_explicit(&k->seq, s + 2, memory_order_release);
  atomic_thread_fence(memory_order_release);
  pub_write(&k->copy[1], v);
}

void ssae_engine_channel_get(const ssae_engine *e, int ch,
                             ssae_channel_state *out) {
  ssae_engine *m = (ssae_engine *)e;
  memset(out, 0, sizeof *out);
  if (ch < 0 || ch >= m->C) return;
  chan *k = &m->ch[ch];
  uint32_t s0, s1;
  do {
    s0 = atomic_load_explicit(&k->seq, memory_order_acquire);
    pub_read(&k->copy[s0 & 1], out);
    atomic_thread_fence(memory_order_acquire); /* the reads before seq */
    s1 = atomic_load_explicit(&k->seq, memory_order_relaxed);
  } while (s0 != s1);
  out->dropped = atomic_load_explicit(&m->fr[ch].dropped, memory_order_relaxed);
}

int ssae_engine_channels(const ssae_engine *e) { return e->C; }
int ssae_engine_model_rate(const ssae_engine *e) { return e->feat.sample_rate; }
int ssae_engine_window_floats(const ssae_engine *e) { return e->wf; }

/* ------------------------------------------------------------------ */
/* stats                                                               */

static double lat_bucket_ms(size_t b) {
  if (b < LAT_FINE) return (b + 0.5) / 1000.0;
  if (b < LAT_FINE + LAT_COARSE) return 10.0 + (b - LAT_FINE + 0.5) / 10.0;
  return 1000.0;
}

static void lat_add(ssae_engine *e, double ms) {
  size_t b;
  if (ms < 0) ms = 0;
  if (ms < 10.0)
    b = (size_t)(ms * 1000.0);
  else if (ms < 1000.0)
    b = LAT_FINE + (size_t)((ms - 10.0) * 10.0);
  else
    b = LAT_FINE + LAT_COARSE;
  e->lat_hist[b]++;
  e->lat_n++;
  if (ms > e->lat_max_ms) e->lat_max_ms = ms;
}

static double lat_pct(const ssae_engine *e, double q) {
  if (!e->lat_n) return 0;
  uint64_t want = (uint64_t)ceil(q * (double)e->lat_n);
  if (want < 1) want = 1;
  uint64_t acc = 0;
  for (size_t b = 0; b <= LAT_FINE + LAT_COARSE; b++) {
    acc += e->lat_hist[b];
    if (acc >= want) {
      double v = lat_bucket_ms(b);
      return v > e->lat_max_ms ? e->lat_max_ms : v;
    }
  }
  return e->lat_max_ms;
}

static void stats_fill(ssae_engine *e, ssae_engine_stats *s) {
  memset(s, 0, sizeof *s);
  for (int c = 0; c < e->C; c++) {
    s->windows += atomic_load_explicit(&e->fr[c].made, memory_order_relaxed);
    s->dropped += atomic_load_explicit(&e->fr[c].dropped, memory_order_relaxed);
  }
  s->scored = atomic_load(&e->scored_total);
  s->batches = atomic_load(&e->batches);
  s->lat_p50_ms = lat_pct(e, 0.50);
  s->lat_p99_ms = lat_pct(e, 0.99);
  s->lat_max_ms = e->lat_max_ms;
  s->audio_s = atomic_load_explicit(&e->audio_s, memory_order_relaxed);
  s->worker_take_s = (double)atomic_load_explicit(&e->t_take, memory_order_relaxed) / 1e9;
  s->worker_score_s = (double)atomic_load_explicit(&e->t_score, memory_order_relaxed) / 1e9;
  s->worker_publish_s =
      (double)atomic_load_explicit(&e->t_publish, memory_order_relaxed) / 1e9;
  s->backend = atomic_load_explicit(&e->backend_name, memory_order_relaxed);
}

void ssae_engine_stats_get(ssae_engine *e, ssae_engine_stats *out) {
  pthread_mutex_lock(&e->stats_mu);
  stats_fill(e, out);
  pthread_mutex_unlock(&e->stats_mu);
}

/* ------------------------------------------------------------------ */
/* worker                                                              */

static void emit(ssae_engine *e, const ssae_event *ev) {
  if (e->cfg.on_event) e->cfg.on_event(e->cfg.user, ev);
}

static void emit_counters(ssae_engine *e, ssae_event_type type, double t) {
  ssae_engine_stats s;
  ssae_engine_stats_get(e, &s);
  ssae_event ev = {0};
  ev.type = type;
  ev.channel = -1;
  ev.t = t;
  ev.score = NAN;
  ev.raw_score = NAN;
  ev.threshold = isfinite(e->model_threshold) ? e->model_threshold : NAN;
  double ut = atomic_load_explicit(&e->p_threshold, memory_order_relaxed);
  if (isfinite(ut) && ut > 0) ev.threshold = ut;
  ev.stats = &s;
  if (type == SSAE_EVENT_STATUS) {
    e->status_sent = 1;
    e->status_scored = s.scored;
    e->status_dropped = s.dropped;
  }
  emit(e, &ev);
}

static void on_fallback(void *user, const char *msg) {
  ssae_engine *e = user;
  /* The backend has fallen back: from now on it runs the CPU. */
  atomic_store_explicit(&e->backend_name, ssae_backend_cpu.name,
                        memory_order_relaxed);
  ssae_event ev = {0};
  ev.type = SSAE_EVENT_BACKEND;
  ev.channel = -1;
  ev.t = e->last_t;
  ev.score = NAN;
  ev.raw_score = NAN;
  ev.threshold = NAN;
  ev.msg = msg;
  emit(e, &ev);
}

/* A window that touches digital silence (an unconnected port, the end of a
 * stream, a muted device) says nothing about the machine: its frames are
 * partly or wholly made of zeros. The detector does not judge it. */
static void detect(ssae_engine *e, const item_hdr *h, float score,
                   double lat) {
  chan *k = &e->ch[h->channel];
  double t = (double)h->end_sample / e->feat.sample_rate;
  if (t > e->last_t) {
    e->last_t = t;
    atomic_store_explicit(&e->audio_s, t, memory_order_relaxed);
  }
  double thr = atomic_load_explicit(&e->p_threshold, memory_order_relaxed);
  if (!(isfinite(thr) && thr > 0)) thr = e->model_threshold;
  double tau = atomic_load_explicit(&e->p_smoothing, memory_order_relaxed);
  int on = atomic_load_explicit(&e->p_on, memory_order_relaxed);
  int off = atomic_load_explicit(&e->p_off, memory_order_relaxed);
  int en = atomic_load_explicit(&e->p_enabled, memory_order_relaxed);
  double dt = (double)e->feat.hop_length / e->feat.sample_rate;
  double alpha = tau > 0 ? 1.0 - exp(-dt / tau) : 1.0;
  const int gap = (h->flags & ITEM_GAP) != 0;
  if (!isfinite(score) || gap) {
    /* A failed batch (the CPU failed too): the window carries no
     * evidence either way. */
  } else if (!k->have_ema) {
    k->ema = score;
    k->have_ema = 1;
  } else {
    k->ema += alpha * (score - k->ema);
  }
  if (e->cfg.emit_windows) {
    ssae_event ev = {SSAE_EVENT_WINDOW, (int)h->channel, t, h->window,
                     score, score, thr, NULL, NULL};
    emit(e, &ev);
  }
  int was = k->alarm_w;
  if (gap) {
    k->have_ema = 0;
    k->above = k->below = 0;
    k->alarm_w = 0;
  } else if (!en || !isfinite(thr)) {
    k->above = k->below = 0;
    k->alarm_w = 0;
  } else if (isfinite(score)) {
    if (k->ema > thr) {
      k->above++;
      k->below = 0;
      if (!k->alarm_w && k->above >= on) k->alarm_w = 1;
    } else {
      k->below++;
      k->above = 0;
      if (k->alarm_w && k->below >= off) k->alarm_w = 0;
    }
  }
  k->scored_w++;
  k->last_window = h->window;
  k->last_t = t;
  ssae_channel_state v = {score, (float)k->ema, (float)thr, k->alarm_w,
                          k->scored_w, 0, (float)lat};
  publish(k, &v);
  if (was != k->alarm_w) {
    ssae_event ev = {k->alarm_w ? SSAE_EVENT_ALARM_ON : SSAE_EVENT_ALARM_OFF,
                     (int)h->channel, t, h->window, k->ema, score, thr,
                     NULL, NULL};
    emit(e, &ev);
  }
}

/* Analysis paused (enabled = 0): the audio thread makes no windows, so the
 * detector would never see an alarm end. Once the windows made before the
 * pause are judged, the worker ends every alarm (an alarm_off event) and
 * forgets the smoothing, so that the channel starts afresh on resume. */
static void clear_alarms(ssae_engine *e) {
  for (int c = 0; c < e->C; c++) {
    chan *k = &e->ch[c];
    int was = k->alarm_w;
    k->have_ema = 0;
    k->above = k->below = 0;
    k->alarm_w = 0;
    if (!was) continue;
    ssae_channel_state v;
    pub_read(&k->copy[1], &v); /* the writer's own, complete copy */
    v.alarm = 0;
    publish(k, &v);
    ssae_event ev = {SSAE_EVENT_ALARM_OFF, c, k->last_t, k->last_window,
                     v.smoothed, v.score, v.threshold, NULL, NULL};
    emit(e, &ev);
  }
}

static void take_swap(ssae_engine *e) {
  ssae_backend *nb = atomic_load(&e->pending_backend);
  if (!nb) return;
  pthread_mutex_lock(&e->swap_mu);
  ssae_backend *old = e->backend;
  e->backend = nb;
  e->model = e->pending_model;
  e->model_threshold = e->model->threshold;
  atomic_store_explicit(&e->backend_name, ssae_backend_name(nb),
                        memory_order_relaxed);
  atomic_store(&e->pending_backend, NULL);
  e->codes_valid = 0; /* the old model's codes */
  pthread_cond_broadcast(&e->swap_cv);
  pthread_mutex_unlock(&e->swap_mu);
  ssae_backend_free(old);
}

/* Channel caches for codes of len doubles each (0: none), touched now:
 * the first windows after a change of size would otherwise take the page
 * faults. On failure the old caches stay (unused: their size differs). */
static int codes_alloc(ssae_engine *e, size_t len) {
  double *p = NULL;
  if (len) {
    p = malloc((size_t)e->C * len * sizeof *p);
    if (!p) return -1;
    memset(p, 0, (size_t)e->C * len * sizeof *p);
  }
  free(e->codes);
  e->codes = p;
  e->codes_len = len;
  e->codes_valid = 0;
  return 0;
}

/* The cached CPU path (see codes above); nonzero when it did not apply
 * (another backend, no memory for the caches) or failed, and the caller
 * runs the batch through the backend. */
static int score_cached(ssae_engine *e, int b, size_t n, ssae_err *err) {
  const item_hdr *hdr = e->batch_hdr[b];
  if (!ssae_backend_cpu_direct(e->backend)) {
    e->codes_valid = 0;
    return 1;
  }
  /* A swapped-in model of other latent sizes, or the CPU taking over from
   * a GPU that failed, needs caches of another size. */
  const size_t len = ssae_backend_codes_len(e->backend);
  if (!len || (len != e->codes_len && codes_alloc(e, len))) return 1;
  if (!e->codes_valid) {
    memset(e->codes_end, 0, (size_t)e->C * sizeof *e->codes_end);
    e->codes_valid = 1;
  }
  const uint64_t hop = (uint64_t)e->feat.hop_length;
  const size_t wf = (size_t)e->wf;
  size_t start = 0;
  e->gen++;
  for (size_t i = 0; i <= n; i++) {
    /* A call ends at the batch's end or before a channel's second window. */
    uint32_t c = i < n ? hdr[i].channel : 0;
    if (i == n || e->codes_gen[c] == e->gen) {
      if (ssae_backend_score_cached(e->backend, e->bx[b] + start * wf, i - start,
                                    e->batch_codes + start, e->batch_cont + start,
                                    e->batch_scores[b] + start, err)) {
        e->codes_valid = 0;
        return -1;
      }
      start = i;
      e->gen++;
      if (i == n) break;
    }
    const uint64_t end = hdr[i].end_sample;
    e->codes_gen[c] = e->gen;
    e->batch_codes[i] = e->codes + (size_t)c * e->codes_len;
    e->batch_cont[i] = e->codes_end[c] && end == e->codes_end[c] + hop;
    e->codes_end[c] = end;
  }
  return 0;
}

/* Like warm_fronts, for the worker, before it starts: its first batch
 * would touch the batch buffers, the channels' caches and the backend's
 * scratch for the first time (page faults: at 256 channels on the CPU the
 * first period's windows waited 4-4.5 ms instead of 0.4). One batch goes
 * through the backend and, on the CPU, through the caches as the first
 * period's windows will; nothing of it is published. */
static void warm_worker(ssae_engine *e) {
  const size_t wf = (size_t)e->wf;
  for (int b = 0; b < 2; b++) {
    for (size_t i = 0; i < e->max_batch * wf; i++) e->batch_x[b][i] = -60.0f + (float)(i % 61);
    memset(e->batch_scores[b], 0, e->max_batch * sizeof *e->batch_scores[b]);
    memset(e->batch_hdr[b], 0, e->max_batch * sizeof *e->batch_hdr[b]);
  }
  memset(e->codes_end, 0, (size_t)e->C * sizeof *e->codes_end);
  memset(e->codes_gen, 0, (size_t)e->C * sizeof *e->codes_gen);
  memset(e->batch_codes, 0, e->max_batch * sizeof *e->batch_codes);
  memset(e->batch_cont, 0, e->max_batch);
  ssae_backend_warm(e->backend, e->batch_x[0], e->max_batch, e->batch_scores[0]);
  const size_t n = e->max_batch < (size_t)e->C ? e->max_batch : (size_t)e->C;
  for (size_t i = 0; i < n; i++) e->batch_hdr[0][i].channel = (uint32_t)i;
  e->bx[0] = e->batch_x[0]; /* the worker sets bx[] again when it starts */
  ssae_err err;
  (void)score_cached(e, 0, n, &err);
  memset(e->batch_hdr[0], 0, e->max_batch * sizeof *e->batch_hdr[0]);
  e->codes_valid = 0;
}

/* Worker only (the one writer). */
static void add_ns(_Atomic uint64_t *a, int64_t ns) {
  atomic_store_explicit(a, atomic_load_explicit(a, memory_order_relaxed) + (uint64_t)ns,
                        memory_order_relaxed);
}

/* Batch b's scores (rc: how scoring went) to the detector and the
 * counters. */
static void publish_batch(ssae_engine *e, int b, size_t n, int rc, const ssae_err *err) {
  const item_hdr *hdr = e->batch_hdr[b];
  float *scores = e->batch_scores[b];
  if (rc != 0) {
    for (size_t i = 0; i < n; i++) scores[i] = NAN;
    ssae_event ev = {SSAE_EVENT_BACKEND, -1, e->last_t, 0, NAN, NAN, NAN,
                     NULL, err->msg};
    emit(e, &ev);
  }
  atomic_fetch_add(&e->batches, 1);
  int64_t t1 = now_ns();
  pthread_mutex_lock(&e->stats_mu);
  for (size_t i = 0; i < n; i++) lat_add(e, (double)(t1 - hdr[i].t_ns) / 1e6);
  pthread_mutex_unlock(&e->stats_mu);
  for (size_t i = 0; i < n; i++)
    detect(e, &hdr[i], scores[i], (double)(t1 - hdr[i].t_ns) / 1e6);
  atomic_fetch_add(&e->scored_total, n);
  add_ns(&e->t_publish, now_ns() - t1);

  uint64_t dropped = 0;
  for (int g = 0; g < e->G; g++)
    dropped += atomic_load_explicit(&e->g[g].dropped_all, memory_order_relaxed);
  if (dropped != e->dropped_reported && e->last_t >= e->next_status_t - 1e-9) {
    e->dropped_reported = dropped;
    emit_counters(e, SSAE_EVENT_DROP, e->last_t);
  }
  if (e->cfg.status_every_s > 0 && e->last_t >= e->next_status_t) {
    emit_counters(e, SSAE_EVENT_STATUS, e->last_t);
    while (e->next_status_t <= e->last_t) e->next_status_t += e->cfg.status_every_s;
  }
}

/* Batch b, scored now: the CPU (each channel's codes kept) or the backend. */
static void run_batch(ssae_engine *e, int b, size_t n) {
  if (e->cfg.slow_backend_us) sleep_ns((int64_t)e->cfg.slow_backend_us * 1000);
  const int64_t t0 = now_ns();
  ssae_err err;
  err.msg[0] = 0;
  int rc = score_cached(e, b, n, &err);
  if (rc != 0)
    rc = ssae_backend_run(e->backend, e->bx[b], n, e->batch_scores[b], NULL, &err);
  add_ns(&e->t_score, now_ns() - t0);
  publish_batch(e, b, n, rc, &err);
}

/* Batch b started on the backend (the GPU), collected by finish_batch:
 * laid out in bx[b], or in place (the device reads the windows from the
 * rings: spans[b]). */
static void submit_batch(ssae_engine *e, int b, size_t n, int in_place) {
  if (e->cfg.slow_backend_us) sleep_ns((int64_t)e->cfg.slow_backend_us * 1000);
  const int64_t t0 = now_ns();
  ssae_err err;
  err.msg[0] = 0;
  e->codes_valid = 0;
  /* Only bad arguments fail here; a backend failure comes out of collect. */
  if (in_place)
    (void)ssae_backend_submit_spans(e->backend, b, e->spans[b], e->nsp[b], n, &err);
  else
    (void)ssae_backend_submit(e->backend, b, e->bx[b], n, &err);
  add_ns(&e->t_score, now_ns() - t0);
}

static void finish_batch(ssae_engine *e, int b, size_t n) {
  const int64_t t0 = now_ns();
  ssae_err err;
  err.msg[0] = 0;
  int rc = ssae_backend_collect(e->backend, b, e->batch_scores[b], &err);
  /* Scored (or scored again on the CPU, in place): the slots may go. */
  for (int g = 0; e->rel[b] && g < e->G; g++)
    if (e->rel[b][g]) {
      ssae_ring_release_n(e->g[g].ring, e->rel[b][g]);
      e->taken[g] -= e->rel[b][g];
      e->rel[b][g] = 0;
    }
  e->nsp[b] = 0;
  add_ns(&e->t_score, now_ns() - t0);
  publish_batch(e, b, n, rc, &err);
}

/* Batch cur grows by group g's windows, up to lim in all, in place (the
 * headers copied, each window added to the current run of slots). */
static size_t take_in_place(ssae_engine *e, int g, int cur, size_t n, size_t lim) {
  ssae_ring *ring = e->g[g].ring;
  size_t stride = 0;
  ssae_ring_memory(ring, NULL, &stride);
  const size_t pitch = stride / sizeof(float);
  ssae_span *sp = e->spans[cur];
  while (n < lim) {
    const unsigned char *slot = ssae_ring_peek(ring, e->taken[g]);
    if (!slot) break;
    memcpy(&e->batch_hdr[cur][n], slot, sizeof(item_hdr));
    const float *w = (const float *)(slot + ITEM_HDR);
    ssae_span *last = e->nsp[cur] ? &sp[e->nsp[cur] - 1] : NULL;
    if (last && last->x + last->n * pitch == w) {
      last->n++;
    } else {
      sp[e->nsp[cur]++] = (ssae_span){w, 1, pitch};
    }
    e->taken[g]++;
    e->rel[cur][g]++;
    n++;
  }
  return n;
}

/* While a batch is on the GPU, the next one is cut at this many windows,
 * so that the one in flight is published soon after it is done. */
#define FLIGHT_BATCH 512

static void *worker_main(void *arg) {
  ssae_engine *e = arg;
  /* Scores are due within a millisecond or so: run above the ordinary
   * threads when the system allows it (lowest real-time priority, below any
   * audio thread). Without the permission this is a no-op. */
  struct sched_param sp;
  memset(&sp, 0, sizeof sp);
  sp.sched_priority = sched_get_priority_min(SCHED_FIFO);
  pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
  const int64_t poll = (int64_t)(e->cfg.poll_ms * 1e6);
  const int64_t deadline = (int64_t)(e->cfg.batch_deadline_ms * 1e6);
  const int64_t spin = e->cfg.spin_ms > 0 ? (int64_t)(e->cfg.spin_ms * 1e6) : 0;
  int64_t last_item = 0;
  size_t n = 0, fly_n = 0;
  int first = 0; /* the group whose ring is drained first, in turn */
  int cur = 0;   /* the batch being filled */
  int fly = -1;  /* the batch on the GPU, or -1 */
  int async = 0; /* the backend scores batches while the worker goes on */
  int in_place = 0; /* async, the device reading the windows in the rings */
  for (;;) {
    if (n == 0) {
      /* Between batches only (the pending windows may sit in the old
       * backend's buffers). */
      if (fly < 0) take_swap(e);
      size_t cap0 = 0, cap1 = 0;
      float *b0 = ssae_backend_input_buffer(e->backend, 0, &cap0);
      float *b1 = ssae_backend_input_buffer(e->backend, 1, &cap1);
      const int can = b0 && b1 && cap0 >= e->max_batch && cap1 >= e->max_batch;
      if (fly < 0) {
        async = can;
        /* Every slot released (no batch in flight, none being filled). */
        in_place = async && e->in_place && ssae_backend_spans_direct(e->backend);
      }
      e->bx[0] = can ? b0 : e->batch_x[0];
      e->bx[1] = can ? b1 : e->batch_x[1];
    }
    int stopping = atomic_load(&e->stop);
    size_t n0 = n;
    const size_t lim = fly >= 0 && e->max_batch > FLIGHT_BATCH ? FLIGHT_BATCH : e->max_batch;
    const int64_t tt = now_ns();
    for (int k = 0; k < e->G && n < lim; k++) {
      if (in_place) {
        n = take_in_place(e, (first + k) % e->G, cur, n, lim);
        continue;
      }
      ssae_ring *ring = e->g[(first + k) % e->G].ring;
      while (n < lim) {
        const unsigned char *slot = ssae_ring_read_slot(ring);
        if (!slot) break;
        memcpy(&e->batch_hdr[cur][n], slot, sizeof(item_hdr));
        memcpy(e->bx[cur] + n * (size_t)e->wf, slot + ITEM_HDR,
               (size_t)e->wf * sizeof(float));
        ssae_ring_release(ring);
        n++;
      }
    }
    if (++first >= e->G) first = 0;
    if (n > n0) add_ns(&e->t_take, now_ns() - tt);
    if (n > n0 && spin) last_item = now_ns();
    if (fly >= 0 && (n == 0 || atomic_load(&e->pending_backend))) {
      /* Nothing new (or a model swap waits for a moment with no batch in
       * flight): the batch in flight is the next thing to publish. */
      finish_batch(e, fly, fly_n);
      fly = -1;
      continue;
    }
    if (n == 0) {
      if (stopping) break;
      if (!atomic_load_explicit(&e->p_enabled, memory_order_relaxed)) {
        if (!e->cleared) clear_alarms(e);
        e->cleared = 1;
      } else {
        e->cleared = 0;
      }
      /* The windows of one period arrive over the audio thread's whole
       * feature pass (one channel after another): right after one came,
       * the next is due within microseconds, sooner than a sleep returns
       * (timer slack). Keep polling for a while, then sleep. */
      if (spin && now_ns() - last_item < spin) {
        cpu_relax();
        continue;
      }
      sleep_ns(poll);
      continue;
    }
    if (n < e->max_batch && deadline > 0 && !stopping &&
        now_ns() - e->batch_hdr[cur][0].t_ns < deadline) {
      if (fly >= 0) {
        finish_batch(e, fly, fly_n);
        fly = -1;
      }
      sleep_ns(poll < deadline ? poll : deadline);
      continue;
    }
    if (!async) {
      run_batch(e, cur, n);
    } else {
      submit_batch(e, cur, n, in_place);
      if (fly >= 0) finish_batch(e, fly, fly_n);
      fly = cur;
      fly_n = n;
      cur ^= 1;
    }
    n = 0;
  }
  return NULL;
}

/* ------------------------------------------------------------------ */
/* life cycle                                                          */

static int same_features(const ssae_feat_cfg *a, const ssae_feat_cfg *b) {
  return a->sample_rate == b->sample_rate && a->n_fft == b->n_fft &&
         a->hop_length == b->hop_length && a->center == b->center &&
         a->pad_mode == b->pad_mode && a->n_mels == b->n_mels &&
         a->fmin == b->fmin && a->fmax == b->fmax &&
         a->mel_scale == b->mel_scale && a->mel_norm == b->mel_norm &&
         a->power == b->power && a->frames == b->frames;
}

/* The in-place path when the backend reads spans itself: every ring
 * page-locked (else its copies would go through the driver's staging,
 * on this thread, which is the copy this path avoids). Nonzero only when
 * out of memory; without page-locking the worker copies as before. */
static int setup_in_place(ssae_engine *e) {
  e->in_place = 0;
  if (!ssae_backend_spans_direct(e->backend) || e->cfg.no_in_place) return 0;
  e->taken = calloc((size_t)e->G, sizeof *e->taken);
  e->rel[0] = calloc((size_t)e->G, sizeof *e->rel[0]);
  e->rel[1] = calloc((size_t)e->G, sizeof *e->rel[1]);
  e->pin_ops = calloc((size_t)e->G, sizeof *e->pin_ops);
  e->spans[0] = calloc(e->max_batch, sizeof *e->spans[0]);
  e->spans[1] = calloc(e->max_batch, sizeof *e->spans[1]);
  if (!e->taken || !e->rel[0] || !e->rel[1] || !e->pin_ops || !e->spans[0] || !e->spans[1])
    return -1;
  for (int g = 0; g < e->G; g++) {
    size_t bytes = 0;
    void *mem = ssae_ring_memory(e->g[g].ring, &bytes, NULL);
    if (ssae_backend_host_register(e->backend, mem, bytes, &e->pin_ops[g])) return 0;
  }
  e->in_place = 1;
  return 0;
}

ssae_engine *ssae_engine_new(const ssae_model *m, const ssae_engine_cfg *cfg,
                             ssae_err *err) {
  ssae_engine_cfg def;
  if (!cfg) {
    ssae_engine_cfg_default(&def);
    cfg = &def;
  }
  if (!m) {
    ssae_err_set(err, "engine: no model");
    return NULL;
  }
  if (cfg->channels < 1 || cfg->channels > 65536) {
    ssae_err_set(err, "engine: channels must be 1..65536 (got %d)",
                 cfg->channels);
    return NULL;
  }
  if (cfg->groups < 0 || cfg->groups > cfg->channels) {
    ssae_err_set(err, "engine: input groups must be 1..channels (got %d for %d channels)",
                 cfg->groups, cfg->channels);
    return NULL;
  }
  if (cfg->input_rate < 0 || cfg->input_rate > 1e6) {
    ssae_err_set(err, "engine: input rate %g Hz out of range", cfg->input_rate);
    return NULL;
  }
  if (m->feat.frames != m->d.frames || m->feat.n_mels != m->d.n_mels) {
    ssae_err_set(err, "engine: model features (%d frames x %d mels) do not "
                      "match its dimensions (%d x %d)",
                 m->feat.frames, m->feat.n_mels, m->d.frames, m->d.n_mels);
    return NULL;
  }
  ssae_engine *e = calloc(1, sizeof *e);
  if (!e) {
    ssae_err_set(err, "engine: out of memory");
    return NULL;
  }
  e->cfg = *cfg;
  if (!e->cfg.backend) e->cfg.backend = "auto";
  if (e->cfg.poll_ms <= 0) e->cfg.poll_ms = 0.2;
  if (e->cfg.spin_ms == 0) e->cfg.spin_ms = 0.5;
  e->model = m;
  e->feat = m->feat;
  e->C = cfg->channels;
  e->wf = m->feat.n_mels * m->feat.frames;
  e->max_block = cfg->max_block ? cfg->max_block : 8192;
  e->max_batch = cfg->max_batch ? cfg->max_batch : 256;
  e->model_threshold = m->threshold;
  e->next_status_t = cfg->status_every_s > 0 ? cfg->status_every_s : 0;
  atomic_init(&e->pause_req, 0);
  atomic_init(&e->stop, 0);
  atomic_init(&e->pending_backend, NULL);
  atomic_init(&e->scored_total, 0);
  atomic_init(&e->batches, 0);
  atomic_init(&e->t_take, 0);
  atomic_init(&e->t_score, 0);
  atomic_init(&e->t_publish, 0);
  atomic_init(&e->backend_name, "");
  atomic_init(&e->audio_s, 0.0);
  ssae_engine_set_params(e, &cfg->params);
  if (pthread_mutex_init(&e->stats_mu, NULL) == 0) e->mu_ok |= 1;
  if (pthread_mutex_init(&e->swap_mu, NULL) == 0) e->mu_ok |= 2;
  if (pthread_cond_init(&e->swap_cv, NULL) == 0) e->mu_ok |= 4;
  if (e->mu_ok != 7) {
    ssae_err_set(err, "engine: cannot create a mutex");
    goto fail;
  }

  e->G = cfg->groups > 0 ? cfg->groups : 1;
  e->fr = calloc((size_t)e->C, sizeof *e->fr);
  e->ch = calloc((size_t)e->C, sizeof *e->ch);
  e->g = calloc((size_t)e->G, sizeof *e->g);
  if (!e->fr || !e->ch || !e->g) goto oom;
  for (int g = 0; g < e->G; g++) {
    group *gr = &e->g[g];
    gr->e = e;
    gr->c0 = (int)((long long)g * e->C / e->G);
    gr->nc = (int)((long long)(g + 1) * e->C / e->G) - gr->c0;
    gr->was_enabled = 1;
    atomic_init(&gr->in_process, 0);
    atomic_init(&gr->dropped_all, 0);
    gr->lmm = ssae_logmel_multi_new(&e->feat, gr->nc, on_frame, gr, err);
    if (!gr->lmm) goto fail;
  }
  for (int c = 0; c < e->C; c++) {
    e->fr[c].win = ssae_window_new(e->feat.n_mels, e->feat.frames, err);
    if (!e->fr[c].win) goto fail;
    atomic_init(&e->fr[c].made, 0);
    atomic_init(&e->fr[c].dropped, 0);
    atomic_init(&e->ch[c].seq, 0);
    for (int k = 0; k < 2; k++) {
      pub *p = &e->ch[c].copy[k];
      atomic_init(&p->score, 0.0f);
      atomic_init(&p->smoothed, 0.0f);
      atomic_init(&p->threshold, (float)m->threshold);
      atomic_init(&p->latency_ms, 0.0f);
      atomic_init(&p->alarm, 0);
      atomic_init(&p->scored, 0);
    }
  }
  double rate = cfg->input_rate > 0 ? cfg->input_rate : e->feat.sample_rate;
  if (build_resamplers(e, rate, err)) goto fail;
  for (int g = 0; g < e->G; g++) {
    group *gr = &e->g[g];
    gr->scratch_win = calloc((size_t)e->wf, sizeof(float));
    gr->deint = calloc(e->max_block, sizeof(float));
    gr->zeros = calloc(e->max_block, sizeof(float));
    if (!gr->scratch_win || !gr->deint || !gr->zeros) goto oom;
    size_t cap = cfg->ring_windows;
    if (!cap) {
      cap = (size_t)gr->nc * 64;
      if (cap < 1024) cap = 1024;
    }
    gr->ring = ssae_ring_new(cap, ITEM_HDR + (size_t)e->wf * sizeof(float), err);
    if (!gr->ring) goto fail;
  }
  warm_fronts(e);

  for (int b = 0; b < 2; b++) {
    e->batch_x[b] = calloc(e->max_batch * (size_t)e->wf, sizeof(float));
    e->batch_scores[b] = calloc(e->max_batch, sizeof(float));
    e->batch_hdr[b] = calloc(e->max_batch, sizeof(item_hdr));
    if (!e->batch_x[b] || !e->batch_scores[b] || !e->batch_hdr[b]) goto oom;
  }
  e->codes_end = calloc((size_t)e->C, sizeof *e->codes_end);
  e->codes_gen = calloc((size_t)e->C, sizeof *e->codes_gen);
  e->batch_codes = calloc(e->max_batch, sizeof *e->batch_codes);
  e->batch_cont = calloc(e->max_batch, 1);
  if (!e->codes_end || !e->codes_gen || !e->batch_codes || !e->batch_cont) goto oom;

  e->backend = ssae_backend_new_threads(m, e->cfg.backend, e->max_batch,
                                       e->cfg.cpu_threads, err);
  if (!e->backend) goto fail;
  ssae_backend_set_fallback_cb(e->backend, on_fallback, e);
  atomic_store_explicit(&e->backend_name, ssae_backend_name(e->backend),
                        memory_order_relaxed);
  if (setup_in_place(e)) goto oom;
  if (codes_alloc(e, ssae_backend_codes_len(e->backend))) goto oom;
  if (!e->cfg.no_warm) warm_worker(e);

  if (pthread_create(&e->thread, NULL, worker_main, e) != 0) {
    ssae_err_set(err, "engine: cannot start the worker thread");
    goto fail;
  }
  e->thread_started = 1;
  return e;
oom:
  ssae_err_set(err, "engine: out of memory");
fail:
  ssae_engine_free(e);
  return NULL;
}

void ssae_engine_drain(ssae_engine *e) {
  for (;;) {
    uint64_t pushed = 0;
    for (int c = 0; c < e->C; c++)
      pushed += atomic_load_explicit(&e->fr[c].made, memory_order_relaxed) -
                atomic_load_explicit(&e->fr[c].dropped, memory_order_relaxed);
    if (atomic_load(&e->scored_total) >= pushed) return;
    sleep_ns(100000);
  }
}

void ssae_engine_free(ssae_engine *e) {
  if (!e) return;
  if (e->thread_started) {
    atomic_store(&e->stop, 1);
    pthread_join(e->thread, NULL);
    e->thread_started = 0;
    /* The final counters, unless the last periodic status said it all. */
    ssae_engine_stats s;
    ssae_engine_stats_get(e, &s);
    if (!e->status_sent || s.scored != e->status_scored ||
        s.dropped != e->status_dropped)
      emit_counters(e, SSAE_EVENT_STATUS, e->last_t);
  }
  if (e->fr)
    for (int c = 0; c < e->C; c++) {
      ssae_resampler_free(e->fr[c].rs);
      ssae_window_free(e->fr[c].win);
    }
  free(e->fr);
  free(e->ch);
  if (e->g)
    for (int g = 0; g < e->G; g++) {
      group *gr = &e->g[g];
      ssae_logmel_multi_free(gr->lmm);
      free(gr->rs_out);
      free(gr->scratch_win);
      free(gr->deint);
      free(gr->zeros);
      if (e->pin_ops && e->pin_ops[g])
        ssae_backend_host_unregister(e->pin_ops[g], ssae_ring_memory(gr->ring, NULL, NULL));
      ssae_ring_free(gr->ring);
    }
  free(e->g);
  free(e->taken);
  free(e->rel[0]);
  free(e->rel[1]);
  free(e->pin_ops);
  free(e->spans[0]);
  free(e->spans[1]);
  for (int b = 0; b < 2; b++) {
    free(e->batch_x[b]);
    free(e->batch_scores[b]);
    free(e->batch_hdr[b]);
  }
  free(e->codes);
  free(e->codes_end);
  free(e->codes_gen);
  free(e->batch_codes);
  free(e->batch_cont);
  ssae_backend_free(e->backend);
  ssae_backend_free(atomic_load(&e->pending_backend));
  if (e->mu_ok & 1) pthread_mutex_destroy(&e->stats_mu);
  if (e->mu_ok & 2) pthread_mutex_destroy(&e->swap_mu);
  if (e->mu_ok & 4) pthread_cond_destroy(&e->swap_cv);
  free(e);
}

int ssae_engine_swap_model(ssae_engine *e, const ssae_model *m, ssae_err *err) {
  if (!m) return ssae_err_set(err, "engine: no model to swap in");
  if (!same_features(&m->feat, &e->feat) || m->d.n_mels != e->feat.n_mels ||
      m->d.frames != e->feat.frames)
    return ssae_err_set(err,
                        "engine: the new model's features differ from the "
                        "running one's (rate, FFT, mels or frames); restart "
                        "with it instead");
  ssae_backend *nb = ssae_backend_new_threads(m, e->cfg.backend, e->max_batch,
                                              e->cfg.cpu_threads, err);
  if (!nb) return -1;
  ssae_backend_set_fallback_cb(nb, on_fallback, e);
  pthread_mutex_lock(&e->swap_mu);
  e->pending_model = m;
  atomic_store(&e->pending_backend, nb);
  while (atomic_load(&e->pending_backend) && e->thread_started)
    pthread_cond_wait(&e->swap_cv, &e->swap_mu);
  pthread_mutex_unlock(&e->swap_mu);
  return 0;
}

int ssae_engine_set_input_rate(ssae_engine *e, double rate, ssae_err *err) {
  if (!(rate > 0 && rate <= 1e6))
    return ssae_err_set(err, "engine: input rate %g Hz out of range", rate);
  if (lround(rate) == lround(e->in_rate)) return 0;
  atomic_store(&e->pause_req, 1);
  for (int g = 0; g < e->G; g++)
    while (atomic_load(&e->g[g].in_process)) sleep_ns(100000);
  int rc = build_resamplers(e, rate, err);
  if (rc == 0) warm_fronts(e);
  for (int g = 0; g < e->G; g++)
    for (int i = 0; i < e->g[g].nc; i++) stream_restart(&e->g[g], i);
  atomic_store(&e->pause_req, 0);
  return rc;
}
