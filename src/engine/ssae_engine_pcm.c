/* The engine's input with the device front end (cfg.gpu_frontend): AUDIO
 * THREAD (one per input group; at most one thread inside a group at a
 * time), called by ssae_engine_frontend.c inside its pause protocol.
 *
 * Per block every channel's samples (resampled when the input rate
 * differs) are copied into the channel's row of the front end's
 * page-locked ring (ssae_cuda_fe_ring), in one pass that also notes
 * whether any is zero (the mark's bit for the channel: the worker scans
 * only those channels for digital silence) or not finite (rare: the copy
 * is then made again with NaN and Inf as 0, and counted); then one mark
 * (pcm_mark) per at most max_mark samples publishes them to the worker:
 * the mark ring's commit is the release that makes the samples before it
 * visible. That copy is all the audio thread does per sample; the frames,
 * windows and scores are made on the GPU by the worker
 * (ssae_engine_devfe.c).
 *
 * When the ring has no room (the worker is behind by about a quarter of a
 * second) the block is dropped whole: its windows are counted as dropped,
 * one per hop of audio per channel, and the next block restarts the
 * channels' streams (PCM_RESTART: the time axis jumps past the lost
 * audio). Nothing here allocates, locks, waits or makes a system call. */
#include <math.h>
#include <string.h>

#include "ssae_engine_internal.h"
#include "ssae_pcm_copy.h"

/* When a period over all the engine's channels (every group's block) is
 * at least pcm_in.stream_bytes, the rings are written with streaming
 * stores and the source of the channel PREFETCH_AHEAD on is prefetched
 * (ssae_pcm_copy.h). At thousands of channels neither the sources nor the
 * rows stay in any cache from one period to the next: through the cache
 * each 64-byte line of a row is first read for ownership, and one
 * channel's block is too short a stream for the hardware prefetchers, so
 * the copy waits on memory latency (8192 channels x 64 samples from cold
 * sources: about half the time of the cached copy on the H100 hosts' Xeons;
 * tools/bench/copy_bench.c, BENCHMARKS.md). Smaller periods may still find
 * the rows in cache for the reader: the cached copy. */
#define PREFETCH_AHEAD 4

/* Room for m more samples ahead of what the worker still needs (one load
 * of its position, and only when the last one says full). */
static int has_room(pcm_in *p, size_t m) {
  if (p->wpos + m - p->rpos_seen <= p->room) return 1;
  p->rpos_seen = atomic_load_explicit(&p->rpos, memory_order_acquire);
  return p->wpos + m - p->rpos_seen <= p->room;
}

/* m model-rate samples of every channel lost: the streams restart after
 * them, and each hop of them is a window dropped on every channel. */
static void lose(group *gr, uint64_t m) {
  ssae_engine *e = gr->e;
  pcm_in *p = &gr->pcm;
  p->axis += m;
  p->restart = 1;
  p->rs_fresh = 0;
  p->lost += m;
  const uint64_t hop = (uint64_t)e->feat.hop_length;
  if (p->lost < hop) return;
  const uint64_t k = p->lost / hop;
  p->lost %= hop;
  for (int i = 0; i < gr->nc; i++) add_relaxed(&e->fr[gr->c0 + i].dropped, k);
  add_relaxed(&gr->dropped_all, k * (uint64_t)gr->nc);
}

/* Model-rate samples that n input samples make (the time axis of a block
 * that is not analysed). */
static uint64_t model_samples(const ssae_engine *e, const front *f, size_t n) {
  return f->rs ? (uint64_t)llround((double)n * e->feat.sample_rate / e->in_rate) : n;
}

/* A restart about to be marked: the resamplers start afresh with it. */
static void restart_resamplers(group *gr) {
  for (int i = 0; i < gr->nc; i++) {
    front *f = &gr->e->fr[gr->c0 + i];
    if (f->rs) ssae_resampler_reset(f->rs);
  }
}

/* x[0 .. m) to ring row at position pos (it may wrap); 1 when any sample
 * written is zero. Non-finite samples are written as 0 and counted. The
 * copies are called directly, not through a pointer, so that they inline
 * into the channel loop. */
static inline unsigned ring_put(group *gr, float *row, size_t len, uint64_t pos,
                                const float *x, size_t m, int stream) {
  const size_t at = (size_t)(pos & (len - 1)), first = len - at < m ? len - at : m;
  unsigned f = stream ? ssae_pcm_copy_stream(row + at, x, first)
                      : ssae_pcm_copy_cached(row + at, x, first);
  if (first < m)
    f |= stream ? ssae_pcm_copy_stream(row, x + first, m - first)
                : ssae_pcm_copy_cached(row, x + first, m - first);
  if (!(f & 2)) return f & 1;
  const float *clean = engine_finite_input(gr, x, m);
  memcpy(row + at, clean, first * sizeof *x);
  if (first < m) memcpy(row, clean + first, (m - first) * sizeof *x);
  return 1;
}

static uint64_t *mark_bits(pcm_mark *mk) { return (uint64_t *)(void *)(mk + 1); }

/* Marks for the m samples just written, the first in slot mk (its bits
 * filled), one more per max_mark of them; a mark that finds no slot loses
 * its samples (and the rest of the block's). */
static void mark(group *gr, pcm_mark *mk, size_t m, uint32_t flags) {
  pcm_in *p = &gr->pcm;
  const pcm_mark *first = mk;
  size_t k = 0;
  do {
    const size_t piece = m - k < p->max_mark ? m - k : p->max_mark;
    const int last = k + piece == m;
    if (!mk) {
      mk = ssae_ring_write_slot(p->marks);
      if (mk) memcpy(mark_bits(mk), mark_bits((pcm_mark *)first), p->bits_words * 8);
    }
    if (!mk) {
      p->wpos += m - k;
      lose(gr, m - k);
      return;
    }
    p->wpos += piece;
    p->axis += piece;
    mk->ring_end = p->wpos;
    mk->axis_end = p->axis;
    mk->t_ns = gr->blk_t;
    mk->n = (uint32_t)piece;
    mk->flags = (p->restart ? PCM_RESTART : 0) | (last ? flags : 0);
    p->restart = 0;
    ssae_ring_commit(p->marks);
    add_relaxed(&p->pushed, 1);
    mk = NULL;
    k += piece;
  } while (k < m);
}

void engine_pcm_block(group *gr, const float *const *in, const float *il, size_t il_stride,
                      size_t n, size_t off) {
  ssae_engine *e = gr->e;
  pcm_in *p = &gr->pcm;
  front *f0 = &e->fr[gr->c0];
  /* The most samples the block can make: every channel makes the same
   * number (their resamplers run in step). */
  const size_t bound = f0->rs ? ssae_resampler_max_out(f0->rs, n) : n;
  pcm_mark *mk = has_room(p, bound) ? ssae_ring_write_slot(p->marks) : NULL;
  if (!mk) {
    lose(gr, model_samples(e, f0, n));
    return;
  }
  /* Once per restart: a block that makes no sample yet (a short one
   * through a resampler) leaves the restart pending, not the reset. */
  if (p->restart && !p->rs_fresh) {
    restart_resamplers(gr);
    p->rs_fresh = 1;
  }
  uint64_t *bits = mark_bits(mk);
  /* Per channel only its samples and its row are touched (its front end
   * state only when resampling): at thousands of channels a cache line
   * more per channel is a sizeable share of the block. What the loop reads
   * of the group is in locals (the resampler's calls would make the
   * compiler load it again each channel), and a channel's zero bit goes
   * into a register word, stored once per 64 channels. */
  const int resampling = f0->rs != NULL;
  const int stream = (size_t)e->C * bound * sizeof(float) >= p->stream_bytes;
  const int prefetch = stream && !il && in && !resampling;
  const int nc = gr->nc;
  float *const *rows = p->rows;
  const size_t len = p->len;
  const uint64_t wpos = p->wpos;
  uint64_t word = 0;
  size_t m = 0;
  for (int i = 0; i < nc; i++) {
    const float *src;
    if (prefetch && i + PREFETCH_AHEAD < nc && in[i + PREFETCH_AHEAD])
      ssae_pcm_prefetch(in[i + PREFETCH_AHEAD] + off, n);
    if (il) {
      const float *s = il + off * il_stride + (size_t)(gr->c0 + i);
      for (size_t k = 0; k < n; k++) gr->deint[k] = s[k * il_stride];
      src = gr->deint;
    } else if (in && in[i]) {
      src = in[i] + off;
    } else {
      src = gr->zeros;
    }
    m = n;
    if (resampling) {
      /* The resampler must not see NaN (it would spread). */
      m = ssae_resampler_process(e->fr[gr->c0 + i].rs, engine_finite_input(gr, src, n), n,
                                 gr->rs_out);
      src = gr->rs_out;
    }
    word |= (uint64_t)ring_put(gr, rows[i], len, wpos, src, m, stream) << (i & 63);
    if ((i & 63) == 63 || i == nc - 1) {
      bits[i >> 6] = word;
      word = 0;
    }
  }
  if (stream) ssae_pcm_stream_fence();
  if (m) mark(gr, mk, m, 0);
}

void engine_pcm_skip(group *gr, size_t n) {
  gr->pcm.axis += model_samples(gr->e, &gr->e->fr[gr->c0], n);
  engine_pcm_restart(gr);
}

void engine_pcm_flush(group *gr) {
  pcm_mark *mk = ssae_ring_write_slot(gr->pcm.marks);
  if (mk) {
    memset(mark_bits(mk), 0, gr->pcm.bits_words * 8);
    mark(gr, mk, 0, PCM_END);
  } else {
    /* No slot for the end: the streams restart with the next block
     * instead (their end padding's windows are not made). */
    engine_pcm_restart(gr);
  }
  /* The next stream starts afresh, the resamplers with it. */
  restart_resamplers(gr);
  gr->pcm.rs_fresh = 1;
}

void engine_pcm_restart(group *gr) {
  gr->pcm.restart = 1;
  gr->pcm.rs_fresh = 0;
}
