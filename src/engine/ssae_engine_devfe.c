/* The engine's worker with the device front end (cfg.gpu_frontend): WORKER
 * THREAD (engine_devfe_main), except new/setup/free (control thread,
 * before the worker starts and after it stopped).
 *
 * Each run takes what the audio threads marked in the groups' PCM rings
 * (ssae_engine_pcm.c; at most RUN_MAX samples per channel) and runs the
 * front end on those channels at once (ssae_cuda_fe_submit_ring: the copy
 * engine takes the samples from the page-locked rings, and the device
 * makes the frames, each frame's codes once, and every window's score).
 * While it runs, the worker collects the run before it: each window gets
 * its header: index, place on the time axis (as the default path's front
 * end numbers them: ssae_window_samples), silence flag (ssae_silence,
 * scanned here over the same samples) and arrival time (the mark of the
 * block that brought its last sample; only the channels whose blocks had a
 * zero, as the audio thread noted in the marks, are scanned sample by
 * sample); the windows go to the detector and the published results as one
 * batch (engine_publish_batch), and the ring positions go back to the
 * audio threads. Up to two runs are on the device at once, in order: while
 * the oldest still runs, the worker queues the samples of other groups
 * that came meanwhile behind it rather than wait (ssae_cuda_fe_ready), and
 * waits for it (ssae_cuda_fe_wait) only when there are none; a run done is
 * collected next time round. A run takes no group of a run in flight or
 * waiting to be collected, and none on both sides of their channels, so
 * that the channels' results stay apart.
 *
 * The front end keeps each stream's state on the device; a CUDA error
 * moves it to the CPU for good and the failed run is made again there from
 * the rings (no window lost): the BACKEND event says why, once. */
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_engine_internal.h"

/* Samples per channel per run, at most: a mark never holds more. */
#define RUN_MAX 2048
/* Marks taken from a group per run, at most (their arrival times are kept
 * for the windows). */
#define RUN_MARKS 256
/* Periods (every group's block together) from this size on go into the
 * rings with streaming stores (ssae_engine_pcm.c says why).
 * SSAE_PCM_STREAM_BYTES sets another size: the tests take every block that
 * way with 0. */
#define STREAM_BYTES ((size_t)1 << 20)
/* Channels ahead whose state the worker's passes over a group prefetch: a
 * run of thousands of channels takes each once, from arrays larger than
 * the core's L2. */
#define SCAN_AHEAD 4

typedef struct devfe_chan {
  ssae_silence sil;     /* digital silence on the time axis */
  uint64_t frame_base;  /* the stream's frame 0 on the time axis */
  uint64_t frames;      /* frames of the current stream */
  uint64_t windows;     /* windows of the current stream */
  uint64_t next_window; /* window index since the engine started (the
                           dropped ones counted, as on the default path) */
  uint64_t dropped_seen;/* the audio thread's drop count when last looked at */
  size_t nflag;         /* this run's first windows whose silence flag is in flag[] */
  int64_t sil_shift;    /* frame_base * hop less the stream's first sample
                           (engine_window_silent) */
} devfe_chan;

/* Where a group's taken marks are (devfe_group.run). */
enum { RUN_NONE = 0, RUN_IN_FLIGHT, RUN_DONE };

typedef struct devfe_group {
  int run;        /* RUN_*: none taken, in a run in flight, run done and
                     waiting to be collected */
  uint64_t seq;   /* RUN_IN_FLIGHT: the run's number (the worker's submits) */
  uint64_t next;  /* ring position after the last run's samples */
  size_t nm;      /* marks taken this run */
  size_t n;       /* samples taken this run (per channel) */
  uint64_t pos0;  /* ring position of the first */
  uint64_t axis0; /* its place on the time axis */
  int end;        /* the streams end after them */
  int restart;    /* the next run's first mark restarts the streams (a run failed) */
  uint64_t *zero; /* the marks' channel bits together: a zero among the samples */
  uint64_t mark_axis[RUN_MARKS];
  int64_t mark_t[RUN_MARKS];
} devfe_group;

struct devfe {
  ssae_cuda_fe *fe;
  const ssae_model *m;
  size_t ring_len, keep;
  int on_gpu;
  uint64_t *pos;      /* C: this run's first ring positions */
  size_t *n;          /* C: this run's samples */
  unsigned char *end; /* C */
  devfe_chan *ch;     /* C */
  devfe_group *g;     /* G */
  size_t cap;         /* windows per run, at most (batch_hdr[0] / batch_scores[0]) */
  unsigned char *flag;/* C x flag_cap: silence flags of a run's windows (scan_blocks) */
  size_t flag_cap;
};

/* ------------------------------------------------------------------ */
/* worker                                                              */

/* Channel c's samples of this run (ring row `row`), block by block (its
 * marks), each window's silence flag taken once the block that brings its
 * last sample is scanned, as the default path's front end does. A run can
 * take many blocks (a loaded host), and the scan keeps only the latest
 * SSAE_SILENCE_SPANS runs of zeros: scanned all at once, more runs of zeros
 * than that after a window could merge over it where the default path's
 * would not. The windows that reach past the last sample (a stream's end)
 * are flagged in collect. */
static void scan_blocks(ssae_engine *e, const devfe_group *dg, int c, const float *row) {
  devfe *d = e->w.dfe;
  devfe_chan *k = &d->ch[c];
  ssae_silence *s = &k->sil;
  unsigned char *fl = d->flag + (size_t)c * d->flag_cap;
  const size_t mask = d->ring_len - 1;
  const uint64_t w0 = k->frame_base + k->windows;
  uint64_t a = dg->axis0;
  for (size_t mi = 0; mi < dg->nm; mi++) {
    const uint64_t b = dg->mark_axis[mi];
    const size_t n = (size_t)(b - a), at = (size_t)((dg->pos0 + (a - dg->axis0)) & mask);
    const size_t first = d->ring_len - at < n ? d->ring_len - at : n;
    ssae_silence_scan(s, a, row + at, first);
    if (first < n) ssae_silence_scan(s, a + first, row, n - first);
    a = b;
    while (k->nflag < d->flag_cap) {
      uint64_t wf, we;
      ssae_window_samples(&e->feat, w0 + k->nflag, &wf, &we);
      if ((int64_t)we - k->sil_shift > (int64_t)b) break; /* its last sample comes later */
      fl[k->nflag++] = (unsigned char)engine_window_silent(s, wf, we, k->sil_shift);
    }
  }
}

/* Group g's marks for this run: in order, up to RUN_MAX samples; a
 * restart only as the run's first mark of the group (it applies before
 * its samples), an end as its last. allow 0: none (the group sits this run
 * out; its channels bring nothing). */
static void take_group(ssae_engine *e, int g, int allow) {
  devfe *d = e->w.dfe;
  devfe_group *dg = &d->g[g];
  group *gr = &e->g[g];
  dg->nm = dg->n = 0;
  dg->end = 0;
  dg->pos0 = dg->next; /* a run without marks: the channels' next position */
  const size_t words = gr->pcm.bits_words;
  memset(dg->zero, 0, words * sizeof *dg->zero);
  while (allow && dg->nm < RUN_MARKS) {
    const pcm_mark *mk = ssae_ring_peek(gr->pcm.marks, dg->nm);
    if (!mk) break;
    if ((mk->flags & PCM_RESTART) && dg->nm) break;
    if (dg->n + mk->n > RUN_MAX) break;
    if (dg->nm == 0) {
      dg->pos0 = mk->ring_end - mk->n;
      dg->axis0 = mk->axis_end - mk->n;
    }
    if ((mk->flags & PCM_RESTART) || (dg->nm == 0 && dg->restart)) {
      dg->restart = 0;
      const uint64_t hop = (uint64_t)e->feat.hop_length;
      for (int i = 0; i < gr->nc; i++) {
        const int c = gr->c0 + i;
        ssae_cuda_fe_reset(d->fe, c);
        devfe_chan *k = &d->ch[c];
        k->frame_base = dg->axis0 / hop; /* the time axis goes on where the samples are */
        k->sil_shift = engine_sil_shift(k->frame_base, e->feat.hop_length, dg->axis0);
        k->frames = k->windows = 0;
        /* The windows dropped before this restart (counted before its mark
         * was committed) keep their indices. */
        const uint64_t dr = atomic_load_explicit(&e->fr[c].dropped, memory_order_relaxed);
        k->next_window += dr - k->dropped_seen;
        k->dropped_seen = dr;
      }
    }
    const uint64_t *bits = (const uint64_t *)(const void *)(mk + 1);
    for (size_t k = 0; k < words; k++) dg->zero[k] |= bits[k];
    dg->mark_axis[dg->nm] = mk->axis_end;
    dg->mark_t[dg->nm] = mk->t_ns;
    dg->nm++;
    dg->n += mk->n;
    if (mk->flags & PCM_END) {
      dg->end = 1;
      break;
    }
  }
  /* No marks: the channels bring nothing (their counts and end flags were
   * cleared after their last run, and the front end reads no position of
   * a channel that brings nothing and does not end): no pass over them.
   * Else one pass: the run's positions and the silence scan over the
   * samples taken, on the time axis. */
  if (!dg->nm) return;
  for (int i = 0; i < gr->nc; i++) {
    const int c = gr->c0 + i;
    if (i + SCAN_AHEAD < gr->nc) __builtin_prefetch(&d->ch[c + SCAN_AHEAD], 1);
    d->pos[c] = dg->pos0;
    d->n[c] = dg->n;
    d->end[c] = (unsigned char)dg->end;
    d->ch[c].nflag = 0;
    if (!dg->n) continue;
    if (!(dg->zero[i >> 6] >> (i & 63) & 1))
      ssae_silence_scan_nonzero(&d->ch[c].sil, dg->axis0, dg->n);
    else
      scan_blocks(e, dg, c, gr->pcm.rows[i]);
  }
}

/* The arrival time of the block that brought sample `end` of the time axis
 * (the last one taken when the window reaches past them: the end padding). */
static int64_t arrival(const devfe_group *dg, uint64_t end) {
  size_t k = 0;
  while (k + 1 < dg->nm && dg->mark_axis[k] < end) k++;
  return dg->mark_t[k];
}

/* The done run's windows into batch 0's headers and scores, in channel
 * order; returns how many. */
static size_t collect(ssae_engine *e) {
  devfe *d = e->w.dfe;
  worker_state *w = &e->w;
  size_t nb = 0;
  for (int g = 0; g < e->G; g++) {
    const devfe_group *dg = &d->g[g];
    /* A group whose marks brought no sample (a resampled block can make
     * none) and no end made nothing; its channels may lie outside the run
     * (ssae_cuda_fe_submit_ring) and still show their last run's windows. */
    if (dg->run != RUN_DONE || (!dg->n && !dg->end)) continue;
    const group *gr = &e->g[g];
    for (int i = 0; i < gr->nc; i++) {
      const int c = gr->c0 + i;
      if (i + SCAN_AHEAD < gr->nc) {
        __builtin_prefetch(&d->ch[c + SCAN_AHEAD], 1);
        __builtin_prefetch(&e->fr[c + SCAN_AHEAD], 1);
      }
      devfe_chan *k = &d->ch[c];
      const float *sc;
      const size_t ns = ssae_cuda_fe_scores(d->fe, c, &sc);
      for (size_t j = 0; j < ns && nb < d->cap; j++, nb++) {
        item_hdr *h = &w->batch_hdr[0][nb];
        uint64_t first;
        h->channel = (uint32_t)c;
        h->window = k->next_window++;
        ssae_window_samples(&e->feat, k->frame_base + k->windows++, &first, &h->end_sample);
        const int silent =
            j < k->nflag ? d->flag[(size_t)c * d->flag_cap + j]
                         : engine_window_silent(&k->sil, first, h->end_sample, k->sil_shift);
        h->flags = silent ? ITEM_GAP : 0;
        h->t_ns = arrival(dg, h->end_sample);
        w->batch_scores[0][nb] = sc[j];
      }
      atomic_store_explicit(
          &e->fr[c].made, atomic_load_explicit(&e->fr[c].made, memory_order_relaxed) + ns,
          memory_order_relaxed);
      k->frames += ssae_cuda_fe_new_frames(d->fe, c);
      if (dg->end) {
        /* The next stream's frames continue this one's numbering; its
         * first sample is the one after this run's. */
        k->frame_base += k->frames;
        k->frames = k->windows = 0;
        k->sil_shift =
            engine_sil_shift(k->frame_base, e->feat.hop_length, dg->mark_axis[dg->nm - 1]);
      }
    }
  }
  return nb;
}

/* The marks of the groups in state `run` go back: their positions are
 * free for the audio thread (all but the history the CPU path may still
 * read). */
static void release(ssae_engine *e, int run) {
  devfe *d = e->w.dfe;
  for (int g = 0; g < e->G; g++) {
    devfe_group *dg = &d->g[g];
    if (dg->run != run) continue;
    dg->run = RUN_NONE;
    if (!dg->nm) continue;
    pcm_in *p = &e->g[g].pcm;
    ssae_ring_release_n(p->marks, dg->nm);
    dg->next = dg->pos0 + dg->n;
    atomic_store_explicit(&p->rpos, dg->next, memory_order_release);
    atomic_store_explicit(&p->done,
                          atomic_load_explicit(&p->done, memory_order_relaxed) + dg->nm,
                          memory_order_release);
    dg->nm = 0;
  }
}

/* The channels of the groups in a run or waiting to be collected: busy,
 * and the span from the first such channel to the last (lo .. hi-1). */
typedef struct busy_span {
  int any, lo, hi;
} busy_span;

static busy_span busy_groups(const ssae_engine *e) {
  const devfe *d = e->w.dfe;
  busy_span b = {0, e->C, 0};
  for (int g = 0; g < e->G; g++)
    if (d->g[g].run != RUN_NONE) {
      b.any = 1;
      if (e->g[g].c0 < b.lo) b.lo = e->g[g].c0;
      if (e->g[g].c0 + e->g[g].nc > b.hi) b.hi = e->g[g].c0 + e->g[g].nc;
    }
  return b;
}

/* Group g may join the next run: its channels lie after the busy span (a
 * run spans its first to its last channel, and must not take in those of
 * a run in flight or waiting to be collected, whose results stay apart);
 * before_ok: before the span will do too. */
static int may_take(const ssae_engine *e, int g, busy_span b, int before_ok) {
  return !b.any || e->g[g].c0 >= b.hi || (before_ok && e->g[g].c0 + e->g[g].nc <= b.lo);
}

/* A group that may join a run brought samples (the oldest run in flight
 * is then worth not waiting for yet). */
static int samples_waiting(const ssae_engine *e) {
  const devfe *d = e->w.dfe;
  const busy_span b = busy_groups(e);
  for (int g = 0; g < e->G; g++)
    if (d->g[g].run == RUN_NONE && may_take(e, g, b, 1) && ssae_ring_peek(e->g[g].pcm.marks, 0))
      return 1;
  return 0;
}

void *engine_devfe_main(void *arg) {
  ssae_engine *e = arg;
  devfe *d = e->w.dfe;
  struct sched_param sp;
  memset(&sp, 0, sizeof sp);
  sp.sched_priority = sched_get_priority_min(SCHED_FIFO);
  pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
  engine_gpu_adopt(e);
  const int64_t poll = (int64_t)(e->cfg.poll_ms * 1e6);
  const int64_t spin = e->cfg.spin_ms > 0 ? (int64_t)(e->cfg.spin_ms * 1e6) : 0;
  int64_t last_item = 0;
  uint64_t submitted = 0, waited = 0; /* runs */
  for (;;) {
    const int stopping = atomic_load(&e->sh.stop);
    const int64_t tt = now_ns();
    /* Up to two runs on the device, in order, while the worker collects
     * the one done before them: the next run takes no group of those, and
     * none on both sides of their channels. */
    int pend = 0;
    for (int g = 0; g < e->G; g++) pend |= d->g[g].run == RUN_DONE;
    const busy_span b = busy_groups(e);
    size_t marks = 0;
    if (ssae_cuda_fe_in_flight(d->fe) < SSAE_CUDA_FE_IN_FLIGHT) {
      for (int g = 0; g < e->G; g++)
        if (d->g[g].run == RUN_NONE) {
          take_group(e, g, may_take(e, g, b, 0));
          marks += d->g[g].nm;
        }
      if (b.any && !marks)
        for (int g = 0; g < e->G; g++)
          if (d->g[g].run == RUN_NONE && may_take(e, g, b, 1)) {
            take_group(e, g, 1);
            marks += d->g[g].nm;
          }
    }
    if (!marks && !b.any) {
      if (stopping) break;
      if (!atomic_load_explicit(&e->sh.p_enabled, memory_order_relaxed)) {
        if (!e->w.cleared) engine_clear_alarms(e);
        e->w.cleared = 1;
      } else {
        e->w.cleared = 0;
      }
      /* The next block is due within the period; right after one came,
       * the other groups' are due within microseconds. */
      if (spin && now_ns() - last_item < spin) {
        cpu_relax();
        continue;
      }
      sleep_ns(poll);
      continue;
    }
    ssae_err err;
    err.msg[0] = 0;
    int rc = 0;
    if (marks) {
      if (spin) last_item = now_ns();
      add_ns(&e->sh.t_take, now_ns() - tt);
      if (e->cfg.slow_backend_us) sleep_ns((int64_t)e->cfg.slow_backend_us * 1000);
      for (int g = 0; g < e->G; g++)
        if (d->g[g].nm && d->g[g].run == RUN_NONE) {
          d->g[g].run = RUN_IN_FLIGHT;
          d->g[g].seq = submitted;
        }
      const int64_t t0 = now_ns();
      rc = ssae_cuda_fe_submit_ring(d->fe, d->pos, d->n, d->end, &err);
      add_ns(&e->sh.t_score, now_ns() - t0);
      /* The front end has read them: the run's channels bring nothing to
       * the next run unless taken again. */
      for (int g = 0; g < e->G; g++)
        if (d->g[g].run == RUN_IN_FLIGHT && d->g[g].seq == submitted) {
          const group *gr = &e->g[g];
          memset(d->n + gr->c0, 0, (size_t)gr->nc * sizeof *d->n);
          memset(d->end + gr->c0, 0, (size_t)gr->nc);
        }
      if (rc == 0) submitted++;
    }
    if (pend) {
      const ssae_err none = {{0}};
      engine_publish_batch(e, 0, collect(e), 0, &none);
      release(e, RUN_DONE);
    }
    if (rc == 0) {
      if (waited == submitted) continue;
      /* The oldest run is not waited for while it still runs and another
       * group's samples can be queued behind it. */
      if (ssae_cuda_fe_in_flight(d->fe) < SSAE_CUDA_FE_IN_FLIGHT) {
        int more = 0;
        while (!ssae_cuda_fe_ready(d->fe) && !(more = samples_waiting(e))) cpu_relax();
        if (more) continue;
      }
      const int64_t t0 = now_ns();
      rc = ssae_cuda_fe_wait(d->fe, &err);
      add_ns(&e->sh.t_score, now_ns() - t0);
      if (d->on_gpu && !ssae_cuda_fe_on_gpu(d->fe)) {
        d->on_gpu = 0;
        engine_on_fallback(e, ssae_cuda_fe_note(d->fe));
      }
      if (rc == 0) {
        for (int g = 0; g < e->G; g++)
          if (d->g[g].run == RUN_IN_FLIGHT && d->g[g].seq == waited) d->g[g].run = RUN_DONE;
        waited++;
        continue;
      }
    }
    /* A run could not be made, not even on the CPU (out of memory): the
     * runs still in flight are ended and every stream restarts with the
     * next samples, where the time axis is then; the windows of the runs
     * not collected are lost, and said so. */
    ssae_err more_err;
    while (ssae_cuda_fe_in_flight(d->fe)) ssae_cuda_fe_wait(d->fe, &more_err);
    waited = submitted;
    for (int c = 0; c < e->C; c++) ssae_cuda_fe_reset(d->fe, c);
    for (int g = 0; g < e->G; g++) d->g[g].restart = 1;
    engine_publish_batch(e, 0, 0, rc, &err);
    release(e, RUN_IN_FLIGHT);
  }
  return NULL;
}

/* ------------------------------------------------------------------ */
/* control thread                                                      */

double engine_devfe_threshold(const ssae_engine *e) { return e->w.dfe->m->threshold; }

size_t engine_devfe_room(const ssae_engine *e) { return e->w.dfe->ring_len - e->w.dfe->keep; }

const char *engine_devfe_name(const ssae_engine *e) {
  return e->w.dfe && e->w.dfe->on_gpu ? "cuda" : "cpu";
}

int engine_devfe_idle(ssae_engine *e) {
  for (int g = 0; g < e->G; g++) {
    const pcm_in *p = &e->g[g].pcm;
    if (atomic_load_explicit(&p->done, memory_order_acquire) !=
        atomic_load_explicit(&p->pushed, memory_order_relaxed))
      return 0;
  }
  return 1;
}

int engine_devfe_new(ssae_engine *e, const ssae_model *m, ssae_err *err) {
  const ssae_engine_cfg *cfg = &e->cfg;
  for (int c = 0; cfg->channel_models && c < e->C; c++)
    if (cfg->channel_models[c] && cfg->channel_models[c] != m)
      return ssae_err_set(err, "engine: the device front end scores every channel with one "
                               "model (channel %d has its own)", c);
  const char *which = cfg->backend ? cfg->backend : "auto";
  if (strcmp(which, "auto") && strcmp(which, "cpu") && strcmp(which, "cuda"))
    return ssae_err_set(err, "unknown backend '%s' (auto, cpu or cuda)", which);
  devfe *d = calloc(1, sizeof *d);
  if (!d) return ssae_err_set(err, "engine: out of memory");
  e->w.dfe = d;
  d->m = m;
  const size_t C = (size_t)e->C;
  d->pos = calloc(C, sizeof *d->pos);
  d->n = calloc(C, sizeof *d->n);
  d->end = calloc(C, 1);
  d->ch = calloc(C, sizeof *d->ch);
  d->g = calloc((size_t)e->G, sizeof *d->g);
  /* a run's windows per channel: RUN_MAX samples' frames and the ones
   * they complete */
  d->flag_cap = RUN_MAX / (size_t)m->feat.hop_length + (size_t)m->feat.frames + 2;
  d->flag = calloc(C, d->flag_cap);
  if (!d->pos || !d->n || !d->end || !d->ch || !d->g || !d->flag)
    return ssae_err_set(err, "engine: out of memory");
  /* The ring: the history the CPU path may read, a run in the worker's
   * hands, and room for the audio threads: by default about a quarter of
   * a second at 16 kHz before blocks are dropped (32 KB a channel: 256 MB
   * of page-locked memory at 8192 channels); cfg.ring_windows asks for
   * room for that many windows over all channels. */
  const size_t keep = (size_t)m->feat.n_fft + (size_t)(m->feat.frames - 1) * m->feat.hop_length;
  const size_t extra = cfg->ring_windows / C * (size_t)m->feat.hop_length;
  size_t len = 1;
  while (len < keep + 2 * (size_t)RUN_MAX + extra) len <<= 1;
  d->ring_len = len;
  ssae_cuda_fe_cfg fc = {.channels = e->C, .max_block = RUN_MAX, .pcm = SSAE_FE_PCM_F32,
                         .device = cfg->gpu, .cpu = 0, .keep_frames = 0, .ring_len = len};
  const int want_gpu = strcmp(which, "cpu") != 0;
  ssae_err gerr = {{0}};
  if (want_gpu && ssae_cuda_fe_device_present()) d->fe = ssae_cuda_fe_new(m, &fc, &gerr);
  if (!d->fe && !strcmp(which, "cuda"))
    return ssae_err_set(err, "backend cuda: %s",
                        gerr.msg[0] ? gerr.msg : "no CUDA device for the device front end");
  if (!d->fe) {
    fc.cpu = 1;
    if (!(d->fe = ssae_cuda_fe_new(m, &fc, err))) return -1;
  }
  d->on_gpu = ssae_cuda_fe_on_gpu(d->fe);
  d->keep = ssae_cuda_fe_ring_keep(d->fe);
  return 0;
}

/* The groups' PCM input (after the front ends: the resamplers say how many
 * samples a block makes) and the run's windows. */
int engine_devfe_setup(ssae_engine *e, ssae_err *err) {
  devfe *d = e->w.dfe;
  worker_state *w = &e->w;
  const char *sb = getenv("SSAE_PCM_STREAM_BYTES");
  const size_t stream_bytes = sb && *sb ? (size_t)strtoull(sb, NULL, 10) : STREAM_BYTES;
  for (int g = 0; g < e->G; g++) {
    group *gr = &e->g[g];
    pcm_in *p = &gr->pcm;
    p->len = d->ring_len;
    p->room = engine_devfe_room(e);
    p->max_mark = RUN_MAX;
    p->stream_bytes = stream_bytes;
    p->bits_words = ((size_t)gr->nc + 63) / 64;
    if (!(d->g[g].zero = calloc(p->bits_words, sizeof *d->g[g].zero)))
      return ssae_err_set(err, "engine: out of memory");
    p->rows = calloc((size_t)gr->nc, sizeof *p->rows);
    if (!p->rows) return ssae_err_set(err, "engine: out of memory");
    for (int i = 0; i < gr->nc; i++) p->rows[i] = ssae_cuda_fe_ring(d->fe, gr->c0 + i);
    /* A mark per block: at least a second of 64-sample blocks. */
    if (!(p->marks = ssae_ring_new(512, sizeof(pcm_mark) + p->bits_words * 8, err))) return -1;
    atomic_init(&p->pushed, 0);
    atomic_init(&p->rpos, 0);
    atomic_init(&p->done, 0);
  }
  for (int c = 0; c < e->C; c++) ssae_silence_reset(&d->ch[c].sil);
  w->ch = calloc((size_t)e->C, sizeof *w->ch); /* the detectors */
  w->alarm = calloc((size_t)e->C, sizeof *w->alarm);
  if (!w->ch || !w->alarm) return ssae_err_set(err, "engine: out of memory");
  for (int c = 0; c < e->C; c++) ssae_detector_reset(&w->ch[c].det);
  d->cap = (size_t)e->C * ssae_cuda_fe_max_frames(d->fe);
  w->batch_hdr[0] = calloc(d->cap, sizeof(item_hdr));
  w->batch_scores[0] = calloc(d->cap, sizeof(float));
  if (!w->batch_hdr[0] || !w->batch_scores[0]) return ssae_err_set(err, "engine: out of memory");
  /* The first run would touch the device's buffers and load its kernels:
   * one run over silence now, every stream ended after it (nothing of it
   * is published), so the first block's windows do not wait for that. */
  if (!e->cfg.no_warm) {
    const size_t n = (size_t)e->feat.n_fft + (size_t)e->feat.frames * e->feat.hop_length;
    for (int c = 0; c < e->C; c++) {
      d->pos[c] = 0;
      d->n[c] = n < RUN_MAX ? n : RUN_MAX;
      d->end[c] = 1;
    }
    if (ssae_cuda_fe_run_ring(d->fe, d->pos, d->n, d->end, err)) return -1;
    d->on_gpu = ssae_cuda_fe_on_gpu(d->fe);
    memset(d->n, 0, (size_t)e->C * sizeof *d->n);
    memset(d->end, 0, (size_t)e->C);
  }
  return 0;
}

void engine_devfe_free(ssae_engine *e) {
  devfe *d = e->w.dfe;
  if (!d) return;
  if (e->g)
    for (int g = 0; g < e->G; g++) {
      free(e->g[g].pcm.rows);
      ssae_ring_free(e->g[g].pcm.marks);
      if (d->g) free(d->g[g].zero);
    }
  ssae_cuda_fe_free(d->fe);
  free(d->pos);
  free(d->n);
  free(d->end);
  free(d->ch);
  free(d->g);
  free(d->flag);
  free(d);
  e->w.dfe = NULL;
}
