/* The engine's worker: WORKER THREAD (one per engine), except
 * engine_worker_setup/free (control thread, before the worker starts and
 * after it stopped).
 *
 * One path for every backend: take windows out of the groups' rings into
 * a batch (copied into the batch's buffer, or, when the device reads them
 * in place, only their headers, the windows staying in the page-locked
 * rings), tell the backend each window's channel and whether it follows
 * the channel's previous window (ssae_span), submit the batch to a slot
 * (ssae_backend_stream_submit, through ssae_engine_scorer.c: each
 * channel's windows to its model's backend), collect its scores,
 * hand them to ssae_engine_publish.c. With a backend that scores while the
 * worker goes on (the GPU) one batch is in flight while the next is taken;
 * on the CPU the collect does the scoring, through the CPU's per-channel
 * code caches, right after the submit. A model swap takes effect here,
 * between batches. */
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_engine_internal.h"

/* A model swap (ssae_engine_swap_model[s]) takes effect: between
 * batches, none in flight (the pending windows may sit in the old
 * backends' buffers). The new backends' streams start every channel
 * afresh, and so does each detector's smoothing: the old model's scores
 * (another scale) averaged with the new one's against the new threshold
 * raised false alarms. An alarm on stays on until the new scores end it
 * (off_count windows at or below the threshold). */
static void take_swap(ssae_engine *e) {
  engine_scorer *nsc = atomic_load(&e->swap.pending);
  if (!nsc) return;
  pthread_mutex_lock(&e->swap.mu);
  engine_scorer *old = e->w.sc;
  e->w.sc = nsc;
  atomic_store_explicit(&e->sh.backend_name, engine_scorer_name(nsc),
                        memory_order_relaxed);
  atomic_store(&e->swap.pending, NULL);
  pthread_cond_broadcast(&e->swap.cv);
  pthread_mutex_unlock(&e->swap.mu);
  engine_scorer_free(old);
  for (int c = 0; c < e->C; c++) ssae_detector_restart(&e->w.ch[c].det);
}

/* Whether the window follows its channel's previous one by one frame
 * (the backend may then reuse that window's work); taken in order. */
static unsigned char follows(ssae_engine *e, const item_hdr *h) {
  chan_work *k = &e->w.ch[h->channel];
  const unsigned char c =
      k->last_end && h->end_sample == k->last_end + (uint64_t)e->feat.hop_length;
  k->last_end = h->end_sample;
  return c;
}

/* Batch b started on the backend (sp[b]: laid out in bx[b], or in place
 * in the rings); its collect is finish_batch. */
static void submit_batch(ssae_engine *e, int b, size_t n, int in_place) {
  worker_state *w = &e->w;
  if (e->cfg.slow_backend_us) sleep_ns((int64_t)e->cfg.slow_backend_us * 1000);
  const int64_t t0 = now_ns();
  if (!in_place) {
    w->spans[b][0] = (ssae_span){w->bx[b], n, (size_t)e->wf};
    w->nsp[b] = 1;
  }
  /* Only bad arguments fail here; a backend failure comes out of collect. */
  w->submit_err[b].msg[0] = 0;
  w->submit_rc[b] = engine_scorer_submit(w->sc, b, w->spans[b], w->nsp[b], n, w->chan[b],
                                         w->cont[b], (size_t)e->wf, &w->submit_err[b]);
  add_ns(&e->sh.t_score, now_ns() - t0);
}

static void finish_batch(ssae_engine *e, int b, size_t n) {
  worker_state *w = &e->w;
  const int64_t t0 = now_ns();
  ssae_err err;
  err.msg[0] = 0;
  int rc = -1;
  if (w->submit_rc[b])
    err = w->submit_err[b];
  else
    rc = engine_scorer_collect(w->sc, b, w->batch_scores[b], &err);
  /* Scored (or scored again on the CPU, in place): the slots may go. */
  for (int g = 0; w->rel[b] && g < e->G; g++)
    if (w->rel[b][g]) {
      ssae_ring_release_n(e->g[g].ring, w->rel[b][g]);
      w->taken[g] -= w->rel[b][g];
      w->rel[b][g] = 0;
    }
  w->nsp[b] = 0;
  add_ns(&e->sh.t_score, now_ns() - t0);
  engine_publish_batch(e, b, n, rc, &err);
}

/* Batch cur grows by group g's windows, up to lim in all, copied out of
 * the ring into bx[cur]. */
static size_t take_copy(ssae_engine *e, int g, int cur, size_t n, size_t lim) {
  worker_state *w = &e->w;
  ssae_ring *ring = e->g[g].ring;
  while (n < lim) {
    const unsigned char *slot = ssae_ring_read_slot(ring);
    if (!slot) break;
    item_hdr *h = &w->batch_hdr[cur][n];
    memcpy(h, slot, sizeof(item_hdr));
    memcpy(w->bx[cur] + n * (size_t)e->wf, slot + ITEM_HDR, (size_t)e->wf * sizeof(float));
    ssae_ring_release(ring);
    w->chan[cur][n] = h->channel;
    w->cont[cur][n] = follows(e, h);
    n++;
  }
  return n;
}

/* Batch cur grows by group g's windows, up to lim in all, in place (the
 * headers copied, each window added to the current run of slots). */
static size_t take_in_place(ssae_engine *e, int g, int cur, size_t n, size_t lim) {
  worker_state *w = &e->w;
  ssae_ring *ring = e->g[g].ring;
  size_t stride = 0;
  ssae_ring_memory(ring, NULL, &stride);
  const size_t pitch = stride / sizeof(float);
  ssae_span *sp = w->spans[cur];
  while (n < lim) {
    const unsigned char *slot = ssae_ring_peek(ring, w->taken[g]);
    if (!slot) break;
    item_hdr *h = &w->batch_hdr[cur][n];
    memcpy(h, slot, sizeof(item_hdr));
    w->chan[cur][n] = h->channel;
    w->cont[cur][n] = follows(e, h);
    const float *x = (const float *)(slot + ITEM_HDR);
    ssae_span *last = w->nsp[cur] ? &sp[w->nsp[cur] - 1] : NULL;
    if (last && last->x + last->n * pitch == x) {
      last->n++;
    } else {
      sp[w->nsp[cur]++] = (ssae_span){x, 1, pitch};
    }
    w->taken[g]++;
    w->rel[cur][g]++;
    n++;
  }
  return n;
}

/* While a batch is on the GPU, the next one is cut at this many windows,
 * so that the one in flight is published soon after it is done. */
#define FLIGHT_BATCH 512

void *engine_worker_main(void *arg) {
  ssae_engine *e = arg;
  worker_state *w = &e->w;
  /* Scores are due within a millisecond or so: run above the ordinary
   * threads when the system allows it (lowest real-time priority, below any
   * audio thread). Without the permission this is a no-op. */
  struct sched_param sp;
  memset(&sp, 0, sizeof sp);
  sp.sched_priority = sched_get_priority_min(SCHED_FIFO);
  pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
  engine_gpu_adopt(e);
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
      const int can = engine_scorer_async(w->sc, w->max_batch);
      if (fly < 0) {
        async = can;
        /* Every slot released (no batch in flight, none being filled). */
        in_place = async && w->in_place && engine_scorer_spans_direct(w->sc);
      }
      /* A batch is laid out in the slot's own buffer (the GPU's pinned
       * memory: no staging copy) when the backend has one. */
      for (int s = 0; s < 2; s++)
        w->bx[s] = can ? engine_scorer_input_buffer(w->sc, s) : w->batch_x[s];
    }
    int stopping = atomic_load(&e->sh.stop);
    size_t n0 = n;
    const size_t lim = fly >= 0 && w->max_batch > FLIGHT_BATCH ? FLIGHT_BATCH : w->max_batch;
    const int64_t tt = now_ns();
    for (int k = 0; k < e->G && n < lim; k++)
      n = in_place ? take_in_place(e, (first + k) % e->G, cur, n, lim)
                   : take_copy(e, (first + k) % e->G, cur, n, lim);
    if (++first >= e->G) first = 0;
    if (n > n0) add_ns(&e->sh.t_take, now_ns() - tt);
    if (n > n0 && spin) last_item = now_ns();
    if (fly >= 0 && (n == 0 || atomic_load(&e->swap.pending))) {
      /* Nothing new (or a model swap waits for a moment with no batch in
       * flight): the batch in flight is the next thing to publish. */
      finish_batch(e, fly, fly_n);
      fly = -1;
      continue;
    }
    if (n == 0) {
      if (stopping) break;
      if (!atomic_load_explicit(&e->sh.p_enabled, memory_order_relaxed)) {
        if (!w->cleared) engine_clear_alarms(e);
        w->cleared = 1;
      } else {
        w->cleared = 0;
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
    if (n < w->max_batch && deadline > 0 && !stopping &&
        now_ns() - w->batch_hdr[cur][0].t_ns < deadline) {
      if (fly >= 0) {
        finish_batch(e, fly, fly_n);
        fly = -1;
      }
      sleep_ns(poll < deadline ? poll : deadline);
      continue;
    }
    submit_batch(e, cur, n, in_place);
    if (!async) {
      finish_batch(e, cur, n); /* the collect scores it (the CPU) */
    } else {
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
/* control thread: before the worker starts, after it stopped          */

/* The in-place path when the backend reads spans itself: every ring
 * page-locked (else its copies would go through the driver's staging,
 * on this thread, which is the copy this path avoids). Nonzero only when
 * out of memory; without page-locking the worker copies as before. */
static int setup_in_place(ssae_engine *e) {
  worker_state *w = &e->w;
  w->in_place = 0;
  if (!engine_scorer_spans_direct(w->sc) || e->cfg.no_in_place) return 0;
  w->taken = calloc((size_t)e->G, sizeof *w->taken);
  w->rel[0] = calloc((size_t)e->G, sizeof *w->rel[0]);
  w->rel[1] = calloc((size_t)e->G, sizeof *w->rel[1]);
  w->pin_ops = calloc((size_t)e->G, sizeof *w->pin_ops);
  if (!w->taken || !w->rel[0] || !w->rel[1] || !w->pin_ops) return -1;
  for (int g = 0; g < e->G; g++) {
    size_t bytes = 0;
    void *mem = ssae_ring_memory(e->g[g].ring, &bytes, NULL);
    if (ssae_backend_host_register(w->sc->b[0], mem, bytes, &w->pin_ops[g])) return 0;
  }
  w->in_place = 1;
  return 0;
}

/* Like engine_warm_fronts, for the worker, before it starts: its first
 * batch would touch the batch buffers, the channels' code caches and the
 * backend's scratch for the first time (page faults: at 256 channels on
 * the CPU the first period's windows waited 4-4.5 ms instead of 0.4). One
 * batch goes through the backend and its stream path as the first
 * period's windows will; nothing of it is published. */
static void warm_worker(ssae_engine *e) {
  worker_state *w = &e->w;
  const size_t wf = (size_t)e->wf;
  for (int b = 0; b < 2; b++) {
    for (size_t i = 0; i < w->max_batch * wf; i++) w->batch_x[b][i] = -60.0f + (float)(i % 61);
    memset(w->batch_scores[b], 0, w->max_batch * sizeof *w->batch_scores[b]);
    memset(w->batch_hdr[b], 0, w->max_batch * sizeof *w->batch_hdr[b]);
    memset(w->chan[b], 0, w->max_batch * sizeof *w->chan[b]);
    memset(w->cont[b], 0, w->max_batch);
    memset(w->spans[b], 0, w->max_batch * sizeof *w->spans[b]);
  }
  engine_scorer_warm(w->sc, w->batch_x[0], w->max_batch, w->batch_scores[0]);
}

int engine_worker_setup(ssae_engine *e, ssae_err *err) {
  worker_state *w = &e->w;
  w->ch = calloc((size_t)e->C, sizeof *w->ch);
  w->alarm = calloc((size_t)e->C, sizeof *w->alarm);
  if (!w->ch || !w->alarm) return ssae_err_set(err, "engine: out of memory");
  for (int c = 0; c < e->C; c++) { /* written now: no page faults later */
    ssae_detector_reset(&w->ch[c].det);
    w->ch[c].last_end = 0;
  }
  for (int b = 0; b < 2; b++) {
    w->batch_x[b] = calloc(w->max_batch * (size_t)e->wf, sizeof(float));
    w->batch_scores[b] = calloc(w->max_batch, sizeof(float));
    w->batch_hdr[b] = calloc(w->max_batch, sizeof(item_hdr));
    w->chan[b] = calloc(w->max_batch, sizeof *w->chan[b]);
    w->cont[b] = calloc(w->max_batch, 1);
    w->spans[b] = calloc(w->max_batch, sizeof *w->spans[b]);
    if (!w->batch_x[b] || !w->batch_scores[b] || !w->batch_hdr[b] || !w->chan[b] ||
        !w->cont[b] || !w->spans[b])
      return ssae_err_set(err, "engine: out of memory");
  }
  if (setup_in_place(e)) return ssae_err_set(err, "engine: out of memory");
  if (!e->cfg.no_warm) warm_worker(e);
  return 0;
}

void engine_worker_free(ssae_engine *e) {
  worker_state *w = &e->w;
  for (int g = 0; w->pin_ops && g < e->G; g++)
    if (w->pin_ops[g])
      ssae_backend_host_unregister(w->pin_ops[g], ssae_ring_memory(e->g[g].ring, NULL, NULL));
  free(w->taken);
  free(w->rel[0]);
  free(w->rel[1]);
  free(w->pin_ops);
  for (int b = 0; b < 2; b++) {
    free(w->batch_x[b]);
    free(w->batch_scores[b]);
    free(w->batch_hdr[b]);
    free(w->chan[b]);
    free(w->cont[b]);
    free(w->spans[b]);
  }
  free(w->ch);
  free(w->alarm);
  engine_scorer_free(w->sc);
  engine_scorer_free(atomic_load(&e->swap.pending));
}
