/* The engine's results: WORKER THREAD, the writer side of everything other
 * threads read about the windows, and those readers' getters.
 *
 * Writer (worker only): per window, the detector (ssae_detector_step on the
 * channel's state), the per-channel results published through a latch
 * (chan_pub in ssae_engine_internal.h), the latency histogram and the
 * events (on_event runs on the worker). Readers: ssae_engine_channel_get
 * (any thread, the audio thread included: lock-free, never waits) and
 * ssae_engine_stats_get (any thread but the audio thread: takes the
 * histogram's mutex). */
#include <math.h>
#include <string.h>

#include "ssae_alarm_id.h"
#include "ssae_engine_internal.h"

/* Channel c's model's threshold. */
static double model_threshold(const ssae_engine *e, int c) {
  return e->w.sc ? engine_scorer_threshold(e->w.sc, c) : engine_devfe_threshold(e);
}

/* ------------------------------------------------------------------ */
/* per-channel results: the latch                                      */

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
static void publish(chan_pub *k, const ssae_channel_state *v) {
  uint32_t s = atomic_load_explicit(&k->seq, memory_order_relaxed);
  atomic_store_explicit(&k->seq, s + 1, memory_order_release);
  atomic_thread_fence(memory_order_release);
  pub_write(&k->copy[0], v);
  atomic_store_explicit(&k->seq, s + 2, memory_order_release);
  atomic_thread_fence(memory_order_release);
  pub_write(&k->copy[1], v);
}

/* Control thread, at creation: every channel's results before its first
 * window. */
void engine_publish_init(ssae_engine *e) {
  for (int c = 0; c < e->C; c++) {
    const double threshold = model_threshold(e, c);
    atomic_init(&e->pub[c].seq, 0);
    for (int k = 0; k < 2; k++) {
      pub *p = &e->pub[c].copy[k];
      atomic_init(&p->score, 0.0f);
      atomic_init(&p->smoothed, 0.0f);
      atomic_init(&p->threshold, (float)threshold);
      atomic_init(&p->latency_ms, 0.0f);
      atomic_init(&p->alarm, 0);
      atomic_init(&p->scored, 0);
    }
  }
}

/* Reader side: any thread. */
void ssae_engine_channel_get(const ssae_engine *e, int ch,
                             ssae_channel_state *out) {
  ssae_engine *m = (ssae_engine *)e;
  memset(out, 0, sizeof *out);
  if (ch < 0 || ch >= m->C) return;
  chan_pub *k = &m->pub[ch];
  uint32_t s0, s1;
  do {
    s0 = atomic_load_explicit(&k->seq, memory_order_acquire);
    pub_read(&k->copy[s0 & 1], out);
    atomic_thread_fence(memory_order_acquire); /* the reads before seq */
    s1 = atomic_load_explicit(&k->seq, memory_order_relaxed);
  } while (s0 != s1);
  out->dropped = atomic_load_explicit(&m->fr[ch].dropped, memory_order_relaxed);
}

/* ------------------------------------------------------------------ */
/* latency statistics                                                  */

static double lat_bucket_ms(size_t b) {
  if (b < LAT_FINE) return (b + 0.5) / 1000.0;
  if (b < LAT_FINE + LAT_COARSE) return 10.0 + (b - LAT_FINE + 0.5) / 10.0;
  return 1000.0;
}

/* Worker, under lat.mu. */
static void lat_add(lat_stats *l, double ms) {
  size_t b;
  if (ms < 0) ms = 0;
  if (ms < 10.0)
    b = (size_t)(ms * 1000.0);
  else if (ms < 1000.0)
    b = LAT_FINE + (size_t)((ms - 10.0) * 10.0);
  else
    b = LAT_FINE + LAT_COARSE;
  l->hist[b]++;
  l->n++;
  if (ms > l->max_ms) l->max_ms = ms;
}

static double lat_pct(const lat_stats *l, double q) {
  if (!l->n) return 0;
  uint64_t want = (uint64_t)ceil(q * (double)l->n);
  if (want < 1) want = 1;
  uint64_t acc = 0;
  for (size_t b = 0; b <= LAT_FINE + LAT_COARSE; b++) {
    acc += l->hist[b];
    if (acc >= want) {
      double v = lat_bucket_ms(b);
      return v > l->max_ms ? l->max_ms : v;
    }
  }
  return l->max_ms;
}

/* Reader side, under lat.mu. */
static void stats_fill(ssae_engine *e, ssae_engine_stats *s) {
  memset(s, 0, sizeof *s);
  for (int c = 0; c < e->C; c++) {
    s->windows += atomic_load_explicit(&e->fr[c].made, memory_order_relaxed);
    s->dropped += atomic_load_explicit(&e->fr[c].dropped, memory_order_relaxed);
  }
  /* The device front end's windows are made by the worker, which never
   * sees the dropped ones. */
  if (e->cfg.gpu_frontend) s->windows += s->dropped;
  s->scored = atomic_load(&e->sh.scored_total);
  s->batches = atomic_load(&e->sh.batches);
  s->lat_p50_ms = lat_pct(&e->lat, 0.50);
  s->lat_p99_ms = lat_pct(&e->lat, 0.99);
  s->lat_max_ms = e->lat.max_ms;
  s->audio_s = atomic_load_explicit(&e->sh.audio_s, memory_order_relaxed);
  s->worker_take_s = (double)atomic_load_explicit(&e->sh.t_take, memory_order_relaxed) / 1e9;
  s->worker_score_s = (double)atomic_load_explicit(&e->sh.t_score, memory_order_relaxed) / 1e9;
  s->worker_publish_s =
      (double)atomic_load_explicit(&e->sh.t_publish, memory_order_relaxed) / 1e9;
  s->backend = atomic_load_explicit(&e->sh.backend_name, memory_order_relaxed);
  for (int g = 0; g < e->G; g++)
    s->nonfinite += atomic_load_explicit(&e->g[g].nonfinite, memory_order_relaxed);
  s->xruns = atomic_load_explicit(&e->sh.xruns, memory_order_relaxed);
}

void ssae_engine_stats_get(ssae_engine *e, ssae_engine_stats *out) {
  pthread_mutex_lock(&e->lat.mu);
  stats_fill(e, out);
  pthread_mutex_unlock(&e->lat.mu);
}

/* ------------------------------------------------------------------ */
/* events (worker; the final STATUS from the control thread once the   */
/* worker has stopped)                                                 */

static void emit(ssae_engine *e, const ssae_event *ev) {
  if (e->cfg.on_event) e->cfg.on_event(e->cfg.user, ev);
}

void engine_emit_counters(ssae_engine *e, ssae_event_type type, double t) {
  ssae_engine_stats s;
  ssae_engine_stats_get(e, &s);
  ssae_event ev = {0};
  ev.type = type;
  ev.channel = -1;
  ev.t = t;
  ev.score = NAN;
  ev.raw_score = NAN;
  const double mt = model_threshold(e, 0);
  ev.threshold = isfinite(mt) ? mt : NAN;
  double ut = atomic_load_explicit(&e->sh.p_threshold, memory_order_relaxed);
  if (isfinite(ut) && ut > 0) ev.threshold = ut;
  ev.stats = &s;
  if (type == SSAE_EVENT_STATUS) {
    e->w.status_sent = 1;
    e->w.status_scored = s.scored;
    e->w.status_dropped = s.dropped;
  }
  emit(e, &ev);
}

/* The backend's fall back to the CPU (ssae_backend_set_fallback_cb): on the
 * worker, inside a collect. */
void engine_on_fallback(void *user, const char *msg) {
  ssae_engine *e = user;
  /* The backend has fallen back: from now on it runs the CPU. */
  atomic_store_explicit(&e->sh.backend_name, ssae_backend_cpu.name,
                        memory_order_relaxed);
  ssae_event ev = {0};
  ev.type = SSAE_EVENT_BACKEND;
  ev.channel = -1;
  ev.t = e->w.last_t;
  ev.score = NAN;
  ev.raw_score = NAN;
  ev.threshold = NAN;
  ev.msg = msg;
  emit(e, &ev);
}

/* ------------------------------------------------------------------ */
/* the detector                                                        */

/* Channel c's alarm starts (at audio time t, its window's score) or ends
 * (why; score NAN when the window says nothing about the machine, as a
 * silent one): its id, times, duration and peak, for the event. */
static const ssae_alarm_info *alarm_start(ssae_engine *e, int c, double t, double score) {
  ssae_alarm_info *a = &e->w.alarm[c];
  ssae_alarm_new_id(a->id);
  a->t_on = t;
  a->wall_on = a->wall = ssae_wall_now();
  a->duration_s = 0;
  a->peak_score = isfinite(score) ? score : 0;
  a->reason = NULL;
  e->w.ch[c].alarm_peak = a->peak_score;
  return a;
}

static const ssae_alarm_info *alarm_end(ssae_engine *e, int c, double t, double score,
                                        const char *why) {
  ssae_alarm_info *a = &e->w.alarm[c];
  const double peak = e->w.ch[c].alarm_peak;
  a->wall = ssae_wall_now();
  a->duration_s = t > a->t_on ? t - a->t_on : 0;
  a->peak_score = isfinite(score) && score > peak ? score : peak;
  a->reason = why;
  return a;
}

/* Windows ahead whose channel's state engine_publish_batch prefetches. */
#define JUDGE_AHEAD 8

/* One window's score to its channel's detector (ssae_detector_step), the
 * published results and the events. A window that touches digital silence
 * (an unconnected port, the end of a stream, a muted device) says nothing
 * about the machine: it resets the detector. A non-finite score (a failed
 * batch: the CPU failed too) carries no evidence either way. While
 * analysis is paused, the windows made before the pause are smoothed but
 * not judged (no threshold): the alarm ends. */
static void judge(ssae_engine *e, const item_hdr *h, float score, double lat) {
  chan_work *k = &e->w.ch[h->channel];
  double t = (double)h->end_sample / e->feat.sample_rate;
  if (t > e->w.last_t) {
    e->w.last_t = t;
    atomic_store_explicit(&e->sh.audio_s, t, memory_order_relaxed);
  }
  /* The channel's own parameters, else the engine's; its model's
   * threshold unless one is given. */
  const chan_params *cp = &e->sh.cp[h->channel];
  const int own = atomic_load_explicit(&cp->own, memory_order_acquire);
  double thr = own ? atomic_load_explicit(&cp->threshold, memory_order_relaxed)
                   : atomic_load_explicit(&e->sh.p_threshold, memory_order_relaxed);
  if (!(isfinite(thr) && thr > 0)) thr = model_threshold(e, (int)h->channel);
  double tau = own ? atomic_load_explicit(&cp->smoothing, memory_order_relaxed)
                   : atomic_load_explicit(&e->sh.p_smoothing, memory_order_relaxed);
  int on = own ? atomic_load_explicit(&cp->on, memory_order_relaxed)
               : atomic_load_explicit(&e->sh.p_on, memory_order_relaxed);
  int off = own ? atomic_load_explicit(&cp->off, memory_order_relaxed)
                : atomic_load_explicit(&e->sh.p_off, memory_order_relaxed);
  int en = atomic_load_explicit(&e->sh.p_enabled, memory_order_relaxed);
  worker_state *w = &e->w;
  if (!w->have_alpha || tau != w->alpha_tau) {
    w->alpha = ssae_detector_alpha((double)e->feat.hop_length / e->feat.sample_rate, tau);
    w->alpha_tau = tau;
    w->have_alpha = 1;
  }
  const int silent = (h->flags & ITEM_GAP) != 0;
  const int change = ssae_detector_step(&k->det, score, silent, w->alpha, en ? thr : NAN, on,
                                        off);
  if (k->det.alarm && isfinite(score) && score > k->alarm_peak) k->alarm_peak = score;
  if (k->det.have_smoothed) k->shown = k->det.smoothed;
  if (e->cfg.emit_windows) {
    ssae_event ev = {SSAE_EVENT_WINDOW, (int)h->channel, t, h->window,
                     score, score, thr, NULL, NULL, NULL};
    emit(e, &ev);
  }
  k->scored++;
  k->last_window = h->window;
  k->last_t = t;
  ssae_channel_state v = {score, (float)k->shown, (float)thr, k->det.alarm,
                          k->scored, 0, (float)lat};
  publish(&e->pub[h->channel], &v);
  if (change != SSAE_DETECTOR_NO_CHANGE) {
    const int c = (int)h->channel;
    const char *why = silent ? "silence" : !en ? "paused" : !isfinite(thr) ? "no_threshold"
                                                                         : "score";
    const ssae_alarm_info *a =
        k->det.alarm ? alarm_start(e, c, t, score) : alarm_end(e, c, t, silent ? NAN : score, why);
    ssae_event ev = {k->det.alarm ? SSAE_EVENT_ALARM_ON : SSAE_EVENT_ALARM_OFF,
                     c, t, h->window, k->shown, score, thr, NULL, NULL, a};
    emit(e, &ev);
  }
}

/* Analysis paused (enabled = 0): the audio thread makes no windows, so the
 * detector would never see an alarm end. Once the windows made before the
 * pause are judged, the worker ends every alarm (an alarm_off event) and
 * forgets the smoothing, so that the channel starts afresh on resume. */
void engine_clear_alarms(ssae_engine *e) {
  for (int c = 0; c < e->C; c++) {
    chan_work *k = &e->w.ch[c];
    int was = k->det.alarm;
    ssae_detector_reset(&k->det);
    if (!was) continue;
    ssae_channel_state v;
    pub_read(&e->pub[c].copy[1], &v); /* the writer's own, complete copy */
    v.alarm = 0;
    publish(&e->pub[c], &v);
    ssae_event ev = {SSAE_EVENT_ALARM_OFF, c, k->last_t, k->last_window,
                     v.smoothed, v.score, v.threshold, NULL, NULL,
                     alarm_end(e, c, k->last_t, NAN, "paused")};
    emit(e, &ev);
  }
}

/* Batch b's scores (rc: how scoring went) to the detector and the
 * counters. */
void engine_publish_batch(ssae_engine *e, int b, size_t n, int rc, const ssae_err *err) {
  worker_state *w = &e->w;
  const item_hdr *hdr = w->batch_hdr[b];
  float *scores = w->batch_scores[b];
  if (rc != 0) {
    for (size_t i = 0; i < n; i++) scores[i] = NAN;
    ssae_event ev = {SSAE_EVENT_BACKEND, -1, w->last_t, 0, NAN, NAN, NAN,
                     NULL, err->msg, NULL};
    emit(e, &ev);
  }
  atomic_fetch_add(&e->sh.batches, 1);
  int64_t t1 = now_ns();
  pthread_mutex_lock(&e->lat.mu);
  for (size_t i = 0; i < n; i++) lat_add(&e->lat, (double)(t1 - hdr[i].t_ns) / 1e6);
  pthread_mutex_unlock(&e->lat.mu);
  for (size_t i = 0; i < n; i++) {
    /* A few windows ahead, the channel's detector, parameters and results
     * towards the cache: a run of thousands of channels takes each once,
     * from arrays larger than the core's L2. */
    if (i + JUDGE_AHEAD < n) {
      const uint32_t c = hdr[i + JUDGE_AHEAD].channel;
      __builtin_prefetch(&w->ch[c], 1);
      __builtin_prefetch(&e->sh.cp[c], 0);
      __builtin_prefetch(&e->pub[c], 1);
    }
    judge(e, &hdr[i], scores[i], (double)(t1 - hdr[i].t_ns) / 1e6);
  }
  atomic_fetch_add(&e->sh.scored_total, n);
  add_ns(&e->sh.t_publish, now_ns() - t1);

  uint64_t dropped = 0;
  for (int g = 0; g < e->G; g++)
    dropped += atomic_load_explicit(&e->g[g].dropped_all, memory_order_relaxed);
  if (dropped != w->dropped_reported && w->last_t >= w->next_status_t - 1e-9) {
    w->dropped_reported = dropped;
    engine_emit_counters(e, SSAE_EVENT_DROP, w->last_t);
  }
  if (e->cfg.status_every_s > 0 && w->last_t >= w->next_status_t) {
    engine_emit_counters(e, SSAE_EVENT_STATUS, w->last_t);
    while (w->next_status_t <= w->last_t) w->next_status_t += e->cfg.status_every_s;
  }
}
