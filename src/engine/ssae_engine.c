/* The engine's life cycle: CONTROL THREAD (the one that creates, frees,
 * swaps models and changes the input rate; never the audio thread, except
 * the lock-free parameter calls and getters marked SSAE_REALTIME in
 * ssae_engine.h).
 *
 * Creation builds the front ends (ssae_engine_frontend.c), the published
 * results and the worker's batches and backend (ssae_engine_worker.c),
 * warms them, and starts the worker. A model swap builds the new backend
 * here and hands it to the worker (swap_state), which takes it between
 * batches. An input-rate change pauses the audio threads' path (the pause
 * protocol, ssae_engine_frontend.c), rebuilds the resamplers and resumes. */
#include "ssae_engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_cuda.h"
#include "ssae_engine_internal.h"

void ssae_engine_params_default(ssae_engine_params *p) {
  ssae_detector_params d;
  ssae_detector_params_default(&d);
  p->threshold = d.threshold;
  p->smoothing_s = d.smoothing_s;
  p->on_count = d.on_count;
  p->off_count = d.off_count;
  p->enabled = 1;
}

void ssae_engine_cfg_default(ssae_engine_cfg *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->channels = 1;
  cfg->backend = "auto";
  ssae_engine_params_default(&cfg->params);
}

/* ------------------------------------------------------------------ */
/* parameters and getters (any thread, lock-free)                      */

void ssae_engine_set_params(ssae_engine *e, const ssae_engine_params *p) {
  atomic_store_explicit(&e->sh.p_threshold, p->threshold, memory_order_relaxed);
  atomic_store_explicit(&e->sh.p_smoothing, p->smoothing_s < 0 ? 0 : p->smoothing_s,
                        memory_order_relaxed);
  atomic_store_explicit(&e->sh.p_on, p->on_count < 1 ? 1 : p->on_count,
                        memory_order_relaxed);
  atomic_store_explicit(&e->sh.p_off, p->off_count < 1 ? 1 : p->off_count,
                        memory_order_relaxed);
  atomic_store_explicit(&e->sh.p_enabled, p->enabled ? 1 : 0,
                        memory_order_relaxed);
}

void ssae_engine_get_params(const ssae_engine *e, ssae_engine_params *p) {
  ssae_engine *m = (ssae_engine *)e;
  p->threshold = atomic_load_explicit(&m->sh.p_threshold, memory_order_relaxed);
  p->smoothing_s = atomic_load_explicit(&m->sh.p_smoothing, memory_order_relaxed);
  p->on_count = atomic_load_explicit(&m->sh.p_on, memory_order_relaxed);
  p->off_count = atomic_load_explicit(&m->sh.p_off, memory_order_relaxed);
  p->enabled = atomic_load_explicit(&m->sh.p_enabled, memory_order_relaxed);
}

void ssae_engine_set_channel_params(ssae_engine *e, int ch, const ssae_engine_params *p) {
  if (ch < 0 || ch >= e->C) return;
  chan_params *cp = &e->sh.cp[ch];
  if (!p) {
    atomic_store_explicit(&cp->own, 0, memory_order_release);
    return;
  }
  atomic_store_explicit(&cp->threshold, p->threshold, memory_order_relaxed);
  atomic_store_explicit(&cp->smoothing, p->smoothing_s < 0 ? 0 : p->smoothing_s,
                        memory_order_relaxed);
  atomic_store_explicit(&cp->on, p->on_count < 1 ? 1 : p->on_count, memory_order_relaxed);
  atomic_store_explicit(&cp->off, p->off_count < 1 ? 1 : p->off_count, memory_order_relaxed);
  atomic_store_explicit(&cp->own, 1, memory_order_release);
}

void ssae_engine_get_channel_params(const ssae_engine *e, int ch, ssae_engine_params *p) {
  ssae_engine_get_params(e, p);
  if (ch < 0 || ch >= e->C) return;
  chan_params *cp = &((ssae_engine *)e)->sh.cp[ch];
  if (!atomic_load_explicit(&cp->own, memory_order_acquire)) return;
  p->threshold = atomic_load_explicit(&cp->threshold, memory_order_relaxed);
  p->smoothing_s = atomic_load_explicit(&cp->smoothing, memory_order_relaxed);
  p->on_count = atomic_load_explicit(&cp->on, memory_order_relaxed);
  p->off_count = atomic_load_explicit(&cp->off, memory_order_relaxed);
}

int ssae_engine_channels(const ssae_engine *e) { return e->C; }
int ssae_engine_model_rate(const ssae_engine *e) { return e->feat.sample_rate; }
int ssae_engine_window_floats(const ssae_engine *e) { return e->wf; }

/* ------------------------------------------------------------------ */
/* the CUDA device                                                     */

int engine_gpu_enter(const ssae_engine *e, int *prev, ssae_err *err) {
  *prev = -1;
  if (e->gpu_dev < 0) return 0;
  if (ssae_cuda_device_enter(e->gpu_dev, prev, err)) {
    *prev = -1;
    return -1;
  }
  return 0;
}

void engine_gpu_leave(int prev) {
  if (prev >= 0) ssae_cuda_device_leave(prev);
}

void engine_gpu_adopt(const ssae_engine *e) {
  /* For good, the thread being the engine's: the CUDA objects' calls then
   * find their device current (no switch and back per call, and no
   * context made on another GPU for this thread). Were it refused, each
   * call would still select its device itself. */
  if (e->gpu_dev >= 0) ssae_cuda_use_device(e->gpu_dev, NULL);
}

/* ------------------------------------------------------------------ */
/* life cycle                                                          */

/* The audio side: groups, channels' front ends, rings; warmed. */
static int fronts_new(ssae_engine *e, ssae_err *err) {
  const ssae_engine_cfg *cfg = &e->cfg;
  e->fr = calloc((size_t)e->C, sizeof *e->fr);
  e->g = calloc((size_t)e->G, sizeof *e->g);
  if (!e->fr || !e->g) return ssae_err_set(err, "engine: out of memory");
  /* The device front end makes the frames and windows on the worker. */
  const int feature_path = !cfg->gpu_frontend;
  for (int g = 0; g < e->G; g++) {
    group *gr = &e->g[g];
    gr->e = e;
    gr->c0 = (int)((long long)g * e->C / e->G);
    gr->nc = (int)((long long)(g + 1) * e->C / e->G) - gr->c0;
    gr->was_enabled = 1;
    atomic_init(&gr->in_process, 0);
    atomic_init(&gr->dropped_all, 0);
    atomic_init(&gr->nonfinite, 0);
    if (!feature_path) continue;
    gr->lmm = ssae_logmel_multi_new(&e->feat, gr->nc, engine_on_frame, gr, err);
    if (!gr->lmm) return -1;
  }
  for (int c = 0; c < e->C; c++) {
    atomic_init(&e->fr[c].made, 0);
    atomic_init(&e->fr[c].dropped, 0);
    if (!feature_path) continue;
    e->fr[c].win = ssae_window_new(e->feat.n_mels, e->feat.frames, err);
    if (!e->fr[c].win) return -1;
  }
  double rate = cfg->input_rate > 0 ? cfg->input_rate : e->feat.sample_rate;
  if (engine_build_resamplers(e, rate, err)) return -1;
  for (int g = 0; g < e->G; g++) {
    group *gr = &e->g[g];
    gr->scratch_win = calloc((size_t)e->wf, sizeof(float));
    gr->deint = calloc(e->max_block, sizeof(float));
    gr->zeros = calloc(e->max_block, sizeof(float));
    if (!gr->scratch_win || !gr->deint || !gr->zeros)
      return ssae_err_set(err, "engine: out of memory");
    if (!feature_path) continue;
    size_t cap = cfg->ring_windows;
    if (!cap) {
      cap = (size_t)gr->nc * 64;
      if (cap < 1024) cap = 1024;
    }
    gr->ring = ssae_ring_new(cap, ITEM_HDR + (size_t)e->wf * sizeof(float), err);
    if (!gr->ring) return -1;
  }
  engine_warm_fronts(e);
  return 0;
}

/* What may touch the GPU: the backend or device front end, the rings
 * (page-locked for the GPU), the worker's setup and warm-up; with the
 * engine's device current (ssae_engine_new). */
static int build(ssae_engine *e, const ssae_model *m, ssae_err *err) {
  const ssae_engine_cfg *cfg = &e->cfg;
  if (cfg->gpu_frontend ? engine_devfe_new(e, m, err)
                        : !(e->w.sc = engine_scorer_new(e, cfg->channel_models, m, err)))
    return -1;
  engine_publish_init(e);
  if (fronts_new(e, err)) return -1;
  return cfg->gpu_frontend ? engine_devfe_setup(e, err) : engine_worker_setup(e, err);
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
  const int cpu_only = cfg->backend && !strcmp(cfg->backend, "cpu");
  if (cfg->gpu < 0) {
    ssae_err_set(err, "engine: gpu %d: a CUDA device index is 0 or more", cfg->gpu);
    return NULL;
  }
  if (cpu_only && cfg->gpu) {
    ssae_err_set(err, "engine: gpu %d: not with backend cpu", cfg->gpu);
    return NULL;
  }
  ssae_engine *e = calloc(1, sizeof *e);
  if (!e) {
    ssae_err_set(err, "engine: out of memory");
    return NULL;
  }
  e->cfg = *cfg;
  if (!e->cfg.backend) e->cfg.backend = "auto";
  /* A GPU named is a GPU required (its absence fails below); device 0
   * only where there is one: "auto" takes the CPU on a host without, and
   * "cuda" fails there with the backend's own reason. */
  e->gpu_dev = !cpu_only && (cfg->gpu || ssae_cuda_device_count() > 0) ? cfg->gpu : -1;
  if (e->cfg.poll_ms <= 0) e->cfg.poll_ms = 0.2;
  if (e->cfg.spin_ms == 0) e->cfg.spin_ms = 0.5;
  e->feat = m->feat;
  e->C = cfg->channels;
  e->G = cfg->groups > 0 ? cfg->groups : 1;
  e->wf = m->feat.n_mels * m->feat.frames;
  e->max_block = cfg->max_block ? cfg->max_block : 8192;
  /* The device front end: the PCM of a block must fit one of its runs. */
  if (cfg->gpu_frontend && e->max_block > 1024) e->max_block = 1024;
  e->w.max_batch = cfg->max_batch ? cfg->max_batch : 256;
  e->w.next_status_t = cfg->status_every_s > 0 ? cfg->status_every_s : 0;
  atomic_init(&e->sh.pause_req, 0);
  atomic_init(&e->sh.stop, 0);
  atomic_init(&e->sh.scored_total, 0);
  atomic_init(&e->sh.xruns, 0);
  atomic_init(&e->sh.batches, 0);
  atomic_init(&e->sh.t_take, 0);
  atomic_init(&e->sh.t_score, 0);
  atomic_init(&e->sh.t_publish, 0);
  atomic_init(&e->sh.backend_name, "");
  atomic_init(&e->sh.audio_s, 0.0);
  atomic_init(&e->swap.pending, NULL);
  ssae_engine_set_params(e, &cfg->params);
  e->sh.cp = calloc((size_t)e->C, sizeof *e->sh.cp);
  if (!e->sh.cp) {
    ssae_err_set(err, "engine: out of memory");
    goto fail;
  }
  for (int c = 0; c < e->C; c++) {
    atomic_init(&e->sh.cp[c].own, 0);
    if (cfg->channel_params) ssae_engine_set_channel_params(e, c, &cfg->channel_params[c]);
  }
  if (pthread_mutex_init(&e->lat.mu, NULL) == 0) e->mu_ok |= 1;
  if (pthread_mutex_init(&e->swap.mu, NULL) == 0) e->mu_ok |= 2;
  if (pthread_cond_init(&e->swap.cv, NULL) == 0) e->mu_ok |= 4;
  if (e->mu_ok != 7) {
    ssae_err_set(err, "engine: cannot create a mutex");
    goto fail;
  }
  e->pub = calloc((size_t)e->C, sizeof *e->pub);
  if (!e->pub) {
    ssae_err_set(err, "engine: out of memory");
    goto fail;
  }
  int prev;
  if (engine_gpu_enter(e, &prev, err)) {
    ssae_err_prefix(err, "engine");
    e->gpu_dev = -1;
    goto fail;
  }
  const int built = build(e, m, err);
  engine_gpu_leave(prev);
  if (built) goto fail;
  atomic_store_explicit(&e->sh.backend_name,
                        cfg->gpu_frontend ? engine_devfe_name(e) : engine_scorer_name(e->w.sc),
                        memory_order_relaxed);

  if (pthread_create(&e->w.thread, NULL, cfg->gpu_frontend ? engine_devfe_main : engine_worker_main,
                     e) != 0) {
    ssae_err_set(err, "engine: cannot start the worker thread");
    goto fail;
  }
  e->w.thread_started = 1;
  return e;
fail:
  ssae_engine_free(e);
  return NULL;
}

void ssae_engine_drain(ssae_engine *e) {
  if (e->cfg.gpu_frontend) {
    while (!engine_devfe_idle(e)) sleep_ns(100000);
    return;
  }
  for (;;) {
    uint64_t pushed = 0;
    for (int c = 0; c < e->C; c++)
      pushed += atomic_load_explicit(&e->fr[c].made, memory_order_relaxed) -
                atomic_load_explicit(&e->fr[c].dropped, memory_order_relaxed);
    if (atomic_load(&e->sh.scored_total) >= pushed) return;
    sleep_ns(100000);
  }
}

void ssae_engine_free(ssae_engine *e) {
  if (!e) return;
  if (e->w.thread_started) {
    atomic_store(&e->sh.stop, 1);
    pthread_join(e->w.thread, NULL);
    e->w.thread_started = 0;
    /* The final counters, unless the last periodic status said it all. */
    ssae_engine_stats s;
    ssae_engine_stats_get(e, &s);
    if (!e->w.status_sent || s.scored != e->w.status_scored ||
        s.dropped != e->w.status_dropped)
      engine_emit_counters(e, SSAE_EVENT_STATUS, e->w.last_t);
  }
  /* The CUDA objects go with their device current, as they came. */
  int prev;
  engine_gpu_enter(e, &prev, NULL);
  engine_worker_free(e); /* before the rings: it unpins them */
  engine_devfe_free(e);
  engine_gpu_leave(prev);
  if (e->fr)
    for (int c = 0; c < e->C; c++) {
      ssae_resampler_free(e->fr[c].rs);
      ssae_window_free(e->fr[c].win);
    }
  free(e->fr);
  free(e->pub);
  free(e->sh.cp);
  if (e->g)
    for (int g = 0; g < e->G; g++) {
      group *gr = &e->g[g];
      ssae_logmel_multi_free(gr->lmm);
      free(gr->rs_out);
      free(gr->scratch_win);
      free(gr->deint);
      free(gr->zeros);
      ssae_ring_free(gr->ring);
    }
  free(e->g);
  if (e->mu_ok & 1) pthread_mutex_destroy(&e->lat.mu);
  if (e->mu_ok & 2) pthread_mutex_destroy(&e->swap.mu);
  if (e->mu_ok & 4) pthread_cond_destroy(&e->swap.cv);
  free(e);
}

/* ------------------------------------------------------------------ */
/* model swap and input rate (control thread)                          */

/* The new models' backends, built here, go to the worker, which takes
 * them between batches (take_swap in ssae_engine_worker.c). */
static int swap_in(ssae_engine *e, const ssae_model *const *chan_models, const ssae_model *m,
                   ssae_err *err) {
  if (e->cfg.gpu_frontend)
    return ssae_err_set(err, "engine: the device front end cannot swap models while it runs "
                             "(its streams live on the device); restart with the new model");
  for (int c = 0; c < e->C; c++) {
    const ssae_model *mc = chan_models ? chan_models[c] : m;
    if (!mc) return ssae_err_set(err, "engine: no model to swap in for channel %d", c);
    const char *d = engine_feature_diff(mc, e->w.sc->model[0]);
    if (*d)
      return ssae_err_set(err,
                          "engine: the new model%s computes other features than the "
                          "running one (%s differs); restart with it instead",
                          chan_models ? " of a channel" : "", d);
  }
  int prev;
  if (engine_gpu_enter(e, &prev, err)) return ssae_err_prefix(err, "engine");
  engine_scorer *nsc = engine_scorer_new(e, chan_models, m, err);
  engine_gpu_leave(prev);
  if (!nsc) return -1;
  pthread_mutex_lock(&e->swap.mu);
  atomic_store(&e->swap.pending, nsc);
  while (atomic_load(&e->swap.pending) && e->w.thread_started)
    pthread_cond_wait(&e->swap.cv, &e->swap.mu);
  pthread_mutex_unlock(&e->swap.mu);
  return 0;
}

int ssae_engine_swap_model(ssae_engine *e, const ssae_model *m, ssae_err *err) {
  if (!m) return ssae_err_set(err, "engine: no model to swap in");
  return swap_in(e, NULL, m, err);
}

int ssae_engine_swap_models(ssae_engine *e, const ssae_model *const *channel_models,
                            ssae_err *err) {
  if (!channel_models) return ssae_err_set(err, "engine: no models to swap in");
  return swap_in(e, channel_models, NULL, err);
}

int ssae_engine_set_input_rate(ssae_engine *e, double rate, ssae_err *err) {
  if (!(rate > 0 && rate <= 1e6))
    return ssae_err_set(err, "engine: input rate %g Hz out of range", rate);
  if (lround(rate) == lround(e->in_rate)) return 0;
  atomic_store(&e->sh.pause_req, 1);
  for (int g = 0; g < e->G; g++)
    while (atomic_load(&e->g[g].in_process)) sleep_ns(100000);
  int rc = engine_build_resamplers(e, rate, err);
  if (rc == 0) engine_warm_fronts(e);
  for (int g = 0; g < e->G; g++)
    for (int i = 0; i < e->g[g].nc; i++) engine_stream_restart(&e->g[g], i);
  atomic_store(&e->sh.pause_req, 0);
  return rc;
}
