/* The engine's front end: AUDIO THREAD (one per input group; at most one
 * thread inside a group at a time). Per channel: resample (dsp/
 * ssae_resample.h) -> scan for digital silence -> log-mel frames (eight
 * channels at a time, ssae_logmel_multi.h) -> 5-frame window -> push into
 * the group's SPSC ring with a header (channel, index, end sample, arrival
 * time, silence flag). A full ring drops the window and counts it; nothing
 * here allocates, locks or waits.
 *
 * The pause protocol (enter/leave against shared pause_req): the control
 * thread (ssae_engine_set_input_rate) raises pause_req and waits until no
 * audio thread is inside; an audio thread that finds it raised returns at
 * once. The functions at the end (build, warm) run on the control thread
 * while the audio threads are held out that way, or before they start. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_engine_internal.h"

/* Channel i of group gr. */
void engine_stream_restart(group *gr, int i) {
  ssae_engine *e = gr->e;
  front *f = &e->fr[gr->c0 + i];
  if (e->cfg.gpu_frontend) {
    /* The worker restarts the streams at the next block's mark, which
     * resets the resamplers. */
    engine_pcm_restart(gr);
    return;
  }
  if (f->rs) ssae_resampler_reset(f->rs);
  ssae_logmel_multi_reset(gr->lmm, i);
  ssae_window_reset(f->win);
  /* Continue the time axis where the samples are. */
  f->frame_base = f->samples / (uint64_t)e->feat.hop_length;
  f->sil_shift = engine_sil_shift(f->frame_base, e->feat.hop_length, f->samples);
  f->frames = 0;
}

/* A channel's next frame, from the multi-channel front end (audio thread,
 * inside feed, flush or run): into its window; a full window goes into the
 * ring, or is dropped and counted when the ring is full. */
void engine_on_frame(void *user, int i, const float *frame) {
  group *gr = user;
  ssae_engine *e = gr->e;
  const int ch = gr->c0 + i;
  front *f = &e->fr[ch];
  if (gr->warming) {
    ssae_window_push(f->win, frame, gr->scratch_win);
    return;
  }
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
  /* The window's samples on the time axis (its first frame's index). */
  uint64_t first;
  ssae_window_samples(&e->feat, f->frame_base + f->frames - (uint64_t)e->feat.frames, &first,
                      &h->end_sample);
  h->flags = engine_window_silent(&f->sil, first, h->end_sample, f->sil_shift) ? ITEM_GAP : 0;
  h->t_ns = gr->blk_t;
  ssae_ring_commit(gr->ring);
}

/* NaN or infinite samples must not reach the features (one NaN spoils
 * every frame it touches, and the detector's smoothing after it): they
 * become 0, digital silence, so their windows are scored and not judged,
 * and are counted. The cleaned copy goes into deint (free in the planar
 * path; in the interleaved path src is deint itself). */
const float *engine_finite_input(group *gr, const float *src, size_t n) {
  size_t k = 0;
  while (k < n && isfinite(src[k])) k++;
  if (k == n) return src;
  float *dst = gr->deint;
  if (dst != src) memcpy(dst, src, k * sizeof *dst);
  uint64_t bad = 0;
  for (; k < n; k++) {
    int ok = isfinite(src[k]);
    bad += !ok;
    dst[k] = ok ? src[k] : 0.0f;
  }
  atomic_store_explicit(&gr->nonfinite,
                        atomic_load_explicit(&gr->nonfinite, memory_order_relaxed) + bad,
                        memory_order_relaxed);
  return dst;
}

void ssae_engine_note_xrun(ssae_engine *e, uint64_t n) {
  if (e) atomic_fetch_add_explicit(&e->sh.xruns, n, memory_order_relaxed);
}

/* One channel's part of a block: resampled, scanned for silence, fed to
 * the front end, whose frames come back through on_frame (eight channels
 * at a time; the caller runs the rest at the end of the block). The gap
 * scan comes first: a frame completed by this block sees its zeros. */
static void channel_block(group *gr, int i, const float *src, size_t n) {
  front *f = &gr->e->fr[gr->c0 + i];
  const float *feed = src ? src : gr->zeros;
  if (src) feed = engine_finite_input(gr, src, n);
  size_t m = n;
  if (f->rs) {
    m = ssae_resampler_process(f->rs, feed, n, gr->rs_out);
    feed = gr->rs_out;
  }
  ssae_silence_scan(&f->sil, f->samples, feed, m);
  f->samples += m;
  ssae_logmel_multi_feed(gr->lmm, i, feed, m);
}

/* While analysis is paused the time axis keeps moving. */
static void skip_block(group *gr, size_t n) {
  ssae_engine *e = gr->e;
  if (e->cfg.gpu_frontend) {
    engine_pcm_skip(gr, n);
    return;
  }
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
  if (atomic_load(&gr->e->sh.pause_req)) {
    atomic_store(&gr->in_process, 0);
    return -1;
  }
  return 0;
}
static void leave(group *gr) { atomic_store(&gr->in_process, 0); }

static int check_enabled(group *gr) {
  int en = atomic_load_explicit(&gr->e->sh.p_enabled, memory_order_relaxed);
  if (en && !gr->was_enabled)
    for (int i = 0; i < gr->nc; i++) engine_stream_restart(gr, i);
  gr->was_enabled = en;
  return en;
}

/* in[i]: channel c0 + i of the group; interleaved (in_stride > 0): channel
 * c0 + i at in[0] + i + k * in_stride. t: when the block came (the start of
 * the process call: one call that feeds every group in turn gives them all
 * its own start, so a later group's latency counts the earlier ones). */
static void process_group(group *gr, const float *const *in, const float *il,
                          size_t il_stride, size_t n, int64_t t) {
  if (enter(gr)) return;
  ssae_engine *e = gr->e;
  int en = check_enabled(gr);
  gr->blk_t = t;
  for (size_t off = 0; off < n;) {
    size_t len = n - off < e->max_block ? n - off : e->max_block;
    if (!en) {
      skip_block(gr, len);
    } else if (e->cfg.gpu_frontend) {
      engine_pcm_block(gr, in, il, il_stride, len, off);
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
  const int64_t t = now_ns();
  for (int g = 0; g < e->G; g++)
    process_group(&e->g[g], in ? in + e->g[g].c0 : NULL, NULL, 0, n, t);
}

void ssae_engine_process_group(ssae_engine *e, int g, const float *const *in,
                               size_t n) {
  if (g >= 0 && g < e->G) process_group(&e->g[g], in, NULL, 0, n, now_ns());
}

void ssae_engine_process_interleaved(ssae_engine *e, const float *in,
                                     size_t n) {
  if (!in) {
    ssae_engine_process(e, NULL, n);
    return;
  }
  const int64_t t = now_ns();
  for (int g = 0; g < e->G; g++) process_group(&e->g[g], NULL, in, (size_t)e->C, n, t);
}

static void flush_group(group *gr) {
  if (enter(gr)) return;
  ssae_engine *e = gr->e;
  gr->blk_t = now_ns();
  if (e->cfg.gpu_frontend) {
    engine_pcm_flush(gr);
    leave(gr);
    return;
  }
  for (int i = 0; i < gr->nc; i++) ssae_logmel_multi_flush(gr->lmm, i);
  ssae_logmel_multi_run(gr->lmm);
  for (int i = 0; i < gr->nc; i++) {
    front *f = &e->fr[gr->c0 + i];
    /* The next stream's frames continue this one's numbering. */
    uint64_t next = f->frame_base + f->frames;
    engine_stream_restart(gr, i);
    f->frame_base = next;
    f->sil_shift = engine_sil_shift(next, e->feat.hop_length, f->samples);
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
/* built and warmed by the control thread (no audio thread inside)     */

int engine_build_resamplers(ssae_engine *e, double rate, ssae_err *err) {
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
  if (e->cfg.gpu_frontend && cap > engine_devfe_room(e)) {
    for (int c = 0; c < e->C; c++) ssae_resampler_free(rs[c]);
    free(rs);
    return ssae_err_set(err, "engine: input at %ld Hz makes up to %zu samples a block at the "
                             "model's %ld Hz; the device front end's ring takes %zu (a higher "
                             "input rate)", in, cap, out, engine_devfe_room(e));
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

void engine_warm_fronts(ssae_engine *e) {
  if (e->cfg.gpu_frontend) return; /* the front end's ring is zeroed (touched) at creation */
  for (int g = 0; g < e->G; g++) warm_group(&e->g[g]);
}

