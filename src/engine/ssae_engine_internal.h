/* Private to the engine: its state, split by the thread that writes it,
 * and the functions its files call in each other. The engine is four
 * files, one per thread:
 *
 *   ssae_engine.c           control thread: life cycle, configuration,
 *                           the public getters, parameters, model swap
 *                           request, input-rate change (pause protocol)
 *   ssae_engine_frontend.c  audio thread(s): resample, log-mel, window,
 *                           silence scan, ring push (one thread per group)
 *   ssae_engine_worker.c    worker thread: take from the rings, batch,
 *                           submit to the backend, collect; model swap
 *                           taking effect
 *   ssae_engine_scorer.c    worker thread: the channels' models, one
 *                           backend per distinct model (built by the
 *                           control thread)
 *   ssae_engine_publish.c   worker thread, writer side of what others
 *                           read: detector, lock-free per-channel
 *                           results, events, latency statistics; and
 *                           the readers' getters (any thread)
 *
 * With the device front end (cfg.gpu_frontend) two files take the places
 * of the front end and the worker's batches:
 *
 *   ssae_engine_pcm.c       audio thread(s): resample, copy the samples
 *                           into the group's page-locked PCM ring, mark
 *                           the block (one thread per group)
 *   ssae_engine_devfe.c     worker thread: take the marked samples of
 *                           every group, run the GPU front end on all
 *                           channels at once (gpu/ssae_cuda_frontend.h:
 *                           frames, codes, scores), make the windows'
 *                           headers (time, silence, arrival)
 *
 * Data path: audio thread -> (ring per group) -> worker -> backend ->
 * worker -> detector -> published results and events; with the device
 * front end: audio thread -> (PCM ring per group) -> worker -> GPU front
 * end -> worker -> detector -> published results and events. */
#ifndef SSAE_ENGINE_INTERNAL_H
#define SSAE_ENGINE_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "ssae_silence.h"
#include "ssae_backend.h"
#include "ssae_cuda_frontend.h"
#include "ssae_detector.h"
#include "ssae_engine.h"
#include "ssae_logmel.h"
#include "ssae_logmel_multi.h"
#include "ssae_resample.h"
#include "ssae_ring.h"

/* Header of a ring item; the window's F*M floats follow at ITEM_HDR.
 * Written by the audio thread, read by the worker. */
#define ITEM_GAP 1u /* the window touches digital silence */
typedef struct item_hdr {
  uint32_t channel;
  uint32_t flags;
  uint64_t window;     /* index in its channel since the engine started */
  uint64_t end_sample; /* model-rate sample position of the window's end */
  int64_t t_ns;        /* CLOCK_MONOTONIC when its last sample arrived */
} item_hdr;
#define ITEM_HDR 32

/* Whether the window whose samples are [first, end) on the frame axis
 * (ssae_window_samples) touches digital silence in s, which scans the
 * sample axis. The two differ by shift = frame_base * hop less the
 * stream's first sample: a stream after a flush continues the frame
 * numbering of the one before (the window times), but its frames start at
 * its first sample. Without this a window's range reached up to a hop past
 * its last sample, and its flag depended on how far the scan had gone when
 * it was judged. */
static inline int engine_window_silent(const ssae_silence *s, uint64_t first, uint64_t end,
                                       int64_t shift) {
  const int64_t f = (int64_t)first - shift, t = (int64_t)end - shift;
  return ssae_silence_touches(s, f > 0 ? (uint64_t)f : 0, t > 0 ? (uint64_t)t : 0);
}

/* That shift for a stream whose frame 0 is frame_base on the frame axis
 * and whose first sample is sample `first` of the sample axis. */
static inline int64_t engine_sil_shift(uint64_t frame_base, int hop, uint64_t first) {
  return (int64_t)(frame_base * (uint64_t)hop) - (int64_t)first;
}

/* ---- front end: one channel. Written by its group's audio thread only
 * (and by the control thread while the pause protocol holds the audio
 * thread out: creation, set_input_rate). made/dropped are also read by
 * the worker, drain and stats readers (relaxed). */
typedef struct front {
  ssae_resampler *rs; /* NULL when the input runs at the model's rate */
  ssae_window *win;
  uint64_t frame_base;  /* frames before the current stream */
  uint64_t frames;      /* frames of the current stream */
  uint64_t samples;     /* model-rate samples fed since the engine started */
  uint64_t next_window; /* window index */
  ssae_silence sil;     /* digital silence in the samples fed */
  int64_t sil_shift;    /* frame_base * hop less the stream's first sample */
  _Atomic uint64_t made;
  _Atomic uint64_t dropped;
} front;

/* ---- device front end: one block of a group's samples in its PCM ring
 * (ssae_engine_pcm.c -> ssae_engine_devfe.c). Every channel of the group
 * got n samples at ring positions ring_end - n ... ring_end - 1, which are
 * model-rate samples axis_end - n ... axis_end - 1 on the engine's time
 * axis. */
#define PCM_RESTART 1u /* the channels' streams restart before this block
                          (samples were dropped, analysis paused, rate
                          changed): the time axis jumps */
#define PCM_END 2u     /* the streams end after it (ssae_engine_flush) */
typedef struct pcm_mark {
  uint64_t ring_end, axis_end;
  int64_t t_ns; /* now_ns() when the block's process() call began */
  uint32_t n, flags;
  /* Followed by the group's bits (pcm_in.bits_words 64-bit words): bit i
   * set when channel c0 + i has a zero among the block's samples. */
} pcm_mark;

/* ---- device front end: a group's side of the PCM ring. The samples are
 * rows of the front end's ring (ssae_cuda_fe_ring: page-locked, read by
 * the device where they lie); the marks are an SPSC ring of pcm_mark,
 * whose commit publishes the samples before it. Written by the group's
 * audio thread, except rpos and done (the worker). */
typedef struct pcm_in {
  float **rows;      /* nc rows of ring_len floats */
  size_t len, room;  /* ring_len; positions writable ahead of rpos (len - keep) */
  size_t max_mark;   /* samples per mark at most (the worker's run) */
  size_t bits_words; /* 64-bit words of a mark's channel bits */
  size_t stream_bytes; /* blocks of this size and more: streaming stores */
  uint64_t wpos;     /* ring position of the next sample */
  uint64_t axis;     /* model-rate samples since the engine started */
  uint64_t rpos_seen;/* rpos when last loaded (one load per full ring) */
  uint64_t lost;     /* dropped samples not yet counted as windows */
  int restart;       /* the next mark restarts the streams */
  int rs_fresh;      /* the resamplers were reset for that restart */
  ssae_ring *marks;
  _Atomic uint64_t pushed; /* marks committed */
  char pad0[64];
  _Atomic uint64_t rpos;   /* worker: every position before it is consumed */
  _Atomic uint64_t done;   /* worker: marks whose windows are published */
  char pad1[64];
} pcm_in;

/* ---- front end: one input group, the channels one audio thread feeds,
 * with everything that thread writes (scratch, ring, counters), so that
 * several audio threads (sound cards, JACK clients) can feed one engine
 * without sharing anything but the worker. Written by that audio thread;
 * the ring's consumer side and dropped_all belong to the worker;
 * in_process is the audio thread's half of the pause protocol. */
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
  /* Non-finite input samples (NaN, Inf) replaced by 0 (digital silence:
   * their windows are scored, not judged); written by this audio thread. */
  _Atomic uint64_t nonfinite;
  pcm_in pcm; /* the device front end's input (cfg.gpu_frontend) */
  char pad[64]; /* the next group's audio thread writes the next one */
} group;

/* ---- published: one channel's results. Written by the worker only
 * (publish), read by any thread (ssae_engine_channel_get, the audio
 * thread included) without waiting.
 *
 * The results go out through a latch (two copies and a sequence counter, as
 * Linux's seqcount_latch): the writer bumps seq to odd and rewrites copy 0
 * while readers use copy 1, then bumps seq to even and rewrites copy 1 while
 * readers use copy 0. A reader never sees a torn set and never waits for a
 * writer that is preempted mid-update: it retries only when the writer has
 * finished a copy in the meantime. The fields are atomics (relaxed) only so
 * that a reader racing the writer is defined behaviour; the latch is what
 * makes a reader's set consistent. */
typedef struct pub {
  _Atomic float score, smoothed, threshold, latency_ms;
  _Atomic int alarm;
  _Atomic uint64_t scored;
} pub;
typedef struct chan_pub {
  _Atomic uint32_t seq;
  pub copy[2];
} chan_pub;

/* ---- worker: one channel's detector and bookkeeping. Written and read
 * by the worker only. */
typedef struct chan_work {
  ssae_detector det;
  double shown;         /* smoothed score published: the detector's, kept
                           through a reset until the next evidence */
  uint64_t scored;      /* windows scored */
  uint64_t last_window; /* index of the last window scored */
  double last_t;        /* its time (seconds of audio) */
  uint64_t last_end;    /* end_sample of the last window taken (0: none):
                           the continuity the backend is told */
  double alarm_peak;    /* while an alarm is on: its highest window score */
} chan_work;

#define LAT_FINE 10000  /* 1 us buckets up to 10 ms */
#define LAT_COARSE 9900 /* 100 us buckets from 10 ms to 1 s */

/* ---- worker: the models, one backend per distinct model
 * (ssae_engine_scorer.c). Built by the control thread, then the worker's
 * alone (handed over at a swap). */
typedef struct engine_scorer {
  int K;                     /* distinct models */
  const ssae_model **model;  /* K (borrowed) */
  ssae_backend **b;          /* K, a stream each over its channels */
  int *chan_model;           /* C: channel -> k */
  uint32_t *chan_local;      /* C: channel -> its number in model k's stream */
  /* K > 1, per slot: the batch laid out by model (model k's windows at
   * [off[k-1], off[k]) of px once submitted), their stream channels,
   * continuity, place in the batch and scores; psp: the span of each. */
  float *px[2], *psc[2];
  uint32_t *pch[2], *ppos[2];
  unsigned char *pcont[2];
  size_t *off[2];
  ssae_span *psp[2];
  size_t n[2];
} engine_scorer;

/* ---- worker: the device front end (ssae_engine_devfe.c). Built by the
 * control thread, then the worker's alone. */
typedef struct devfe devfe;

/* ---- worker: the batches and the backend. Written and read by the
 * worker only, except where a field says otherwise. */
typedef struct worker_state {
  pthread_t thread;
  int thread_started; /* control thread */
  engine_scorer *sc;  /* NULL with the device front end */
  devfe *dfe;         /* NULL without it */
  chan_work *ch;
  /* C: each channel's open (or last) alarm, for its events. Apart from
   * ch: touched only when an alarm starts or ends. */
  ssae_alarm_info *alarm;
  /* Two batches, so that the GPU scores one while the worker takes the
   * next out of the rings. bx[s]: where batch s is laid out: the backend's
   * own input buffer of slot s when it has one (the GPU's pinned memory: no
   * staging copy), else batch_x[s]. chan[s]/cont[s]: each window's channel
   * and continuity, for the backend (ssae_span). */
  float *batch_x[2], *batch_scores[2], *bx[2];
  item_hdr *batch_hdr[2];
  uint32_t *chan[2];
  unsigned char *cont[2];
  size_t max_batch;
  /* spans[s]/nsp[s]: batch s as the backend gets it: one run laid out in
   * bx[s], or in place (the GPU, rings page-locked) runs of consecutive
   * ring slots that the device's copy engine reads where they lie; the
   * worker copies only each window's header, and the slots are released
   * when the batch's scores are in. taken[g]: group g's slots taken but
   * not released; rel[s][g]: those of batch s. Copying 4096 windows per
   * period out of the rings cost the worker ~1 ms (BENCHMARKS.md, engine
   * round 6). */
  int in_place;
  ssae_span *spans[2];
  int nsp[2];
  int submit_rc[2]; /* batch s's submit (bad arguments: its collect is skipped) */
  ssae_err submit_err[2];
  size_t *taken, *rel[2];
  const ssae_backend_ops **pin_ops; /* per group: who page-locked its ring
                                       (control thread) */
  int cleared; /* alarms cleared since analysis was paused */
  uint64_t dropped_reported;
  uint64_t status_scored, status_dropped; /* counters of the last STATUS
                                             (the control thread's after
                                             the worker stopped) */
  int status_sent;
  double next_status_t;
  double last_t; /* latest window time; published as audio_s */
  /* The detector's smoothing factor for alpha_tau (have_alpha): one exp()
   * per smoothing time, not per window. */
  int have_alpha;
  double alpha_tau, alpha;
} worker_state;

/* ---- shared atomics: lock-free, any thread. */
typedef struct shared_state {
  _Atomic int stop;      /* control -> worker */
  _Atomic int pause_req; /* control -> audio threads (pause protocol) */
  /* Detector parameters: written by any thread (set_params, the audio
   * thread included), read by the worker at each window and by the audio
   * threads (enabled). */
  _Atomic double p_threshold, p_smoothing;
  _Atomic int p_on, p_off, p_enabled;
  /* A channel's own detector parameters (ssae_engine_set_channel_params),
   * C of them: used instead of the ones above while own is 1. */
  struct chan_params *cp;
  /* Counters written by the worker, read by stats readers and drain. */
  _Atomic uint64_t scored_total;
  _Atomic uint64_t batches;
  _Atomic uint64_t t_take, t_score, t_publish; /* ns, worker stages */
  _Atomic double audio_s;
  /* Input overruns the audio adapters report (JACK xruns, PortAudio input
   * overflows): ssae_engine_note_xrun, any thread. */
  _Atomic uint64_t xruns;
  /* ssae_backend_name() of the backend in use (worker): a static string,
   * so that a reader may keep the pointer after the backend changes. */
  _Atomic(const char *) backend_name;
} shared_state;

typedef struct chan_params {
  _Atomic double threshold, smoothing;
  _Atomic int on, off, own;
} chan_params;

/* ---- latency histogram: written by the worker, read by stats readers,
 * both under mu. */
typedef struct lat_stats {
  pthread_mutex_t mu;
  uint64_t hist[LAT_FINE + LAT_COARSE + 1];
  uint64_t n;
  double max_ms;
} lat_stats;

/* ---- model swap: the swapping thread hands the new models' backends to
 * the worker under mu; the worker takes them between batches and signals
 * cv. */
typedef struct swap_state {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  _Atomic(engine_scorer *) pending;
} swap_state;

struct ssae_engine {
  /* Set at creation (control thread), read-only afterwards except in_rate
   * (set_input_rate, under the pause protocol). */
  ssae_engine_cfg cfg;
  ssae_feat_cfg feat;
  int C, wf; /* channels, floats per window */
  int G;     /* input groups */
  double in_rate;
  size_t max_block;
  int mu_ok; /* which of the mutexes and the condition exist */
  /* cfg.gpu when the engine made its backend or front end with that CUDA
   * device current (engine_gpu_enter), -1 when it touches no device (the
   * CPU backend, "auto" on a host without one). */
  int gpu_dev;

  front *fr; /* C, audio threads */
  group *g;  /* G, audio threads */
  chan_pub *pub; /* C, worker -> any thread */
  worker_state w;
  shared_state sh;
  lat_stats lat;
  swap_state swap;
};

/* ---- small helpers ---- */

static inline int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void sleep_ns(int64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
  }
}

/* A busy wait's pause (the worker polling a ring it expects to fill
 * within microseconds). */
static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* A counter that one thread adds to and others read: a relaxed load and
 * store (no read-modify-write: there is one writer). */
static inline void add_relaxed(_Atomic uint64_t *a, uint64_t v) {
  atomic_store_explicit(a, atomic_load_explicit(a, memory_order_relaxed) + v,
                        memory_order_relaxed);
}
static inline void add_ns(_Atomic uint64_t *a, int64_t ns) { add_relaxed(a, (uint64_t)ns); }

/* ---- ssae_engine_frontend.c: built and warmed by the control thread
 * while no audio thread is inside (creation, set_input_rate) ---- */
int engine_build_resamplers(ssae_engine *e, double rate, ssae_err *err);
void engine_warm_fronts(ssae_engine *e);
void engine_on_frame(void *user, int i, const float *frame);
/* Channel i of group gr starts a new stream. */
void engine_stream_restart(group *gr, int i);
/* src with NaN and Inf replaced by 0 and counted (into gr->deint when
 * there are any; src may be gr->deint itself). */
const float *engine_finite_input(group *gr, const float *src, size_t n);

/* ---- ssae_engine_pcm.c: the audio thread with the device front end.
 * One block of at most max_block input samples per channel. */
void engine_pcm_block(group *gr, const float *const *in, const float *il, size_t il_stride,
                      size_t n, size_t off);
void engine_pcm_skip(group *gr, size_t n);
void engine_pcm_flush(group *gr);
void engine_pcm_restart(group *gr);

/* ---- ssae_engine_devfe.c: new/setup/free on the control thread, main on
 * the worker. */
int engine_devfe_new(ssae_engine *e, const ssae_model *m, ssae_err *err);
int engine_devfe_setup(ssae_engine *e, ssae_err *err);
void engine_devfe_free(ssae_engine *e);
/* Model-rate samples a group's ring takes ahead of the worker (while the
 * engine is built: the resamplers are refused when one block makes more). */
size_t engine_devfe_room(const ssae_engine *e);
void *engine_devfe_main(void *arg);
double engine_devfe_threshold(const ssae_engine *e);
const char *engine_devfe_name(const ssae_engine *e);
/* 1 once every block the audio threads marked so far has its windows
 * published (drain). */
int engine_devfe_idle(ssae_engine *e);

/* ---- ssae_engine.c: the engine's CUDA device (e->gpu_dev) current on a
 * thread. The control thread enters it around whatever makes or frees the
 * engine's CUDA objects, and leaves it (its own device back: *prev); the
 * worker enters it once, its thread being the engine's own. Nothing to do
 * (0, *prev -1) when the engine touches no device. */
int engine_gpu_enter(const ssae_engine *e, int *prev, ssae_err *err);
void engine_gpu_leave(int prev);
/* The worker's start (ssae_engine_worker.c, ssae_engine_devfe.c). */
void engine_gpu_adopt(const ssae_engine *e);

/* ---- ssae_engine_worker.c ---- */
void *engine_worker_main(void *arg);
/* Control thread, before the worker starts. */
int engine_worker_setup(ssae_engine *e, ssae_err *err);
void engine_worker_free(ssae_engine *e);

/* ---- ssae_engine_scorer.c: new/free on the control thread, the rest on
 * the worker. chan_models: C models (NULL entries, or NULL: m). */
const char *engine_feature_diff(const ssae_model *a, const ssae_model *b);
engine_scorer *engine_scorer_new(ssae_engine *e, const ssae_model *const *chan_models,
                                 const ssae_model *m, ssae_err *err);
void engine_scorer_free(engine_scorer *sc);
int engine_scorer_async(const engine_scorer *sc, size_t n);
int engine_scorer_spans_direct(const engine_scorer *sc);
float *engine_scorer_input_buffer(engine_scorer *sc, int slot);
const char *engine_scorer_name(const engine_scorer *sc);
void engine_scorer_warm(engine_scorer *sc, const float *x, size_t n, float *scores);
int engine_scorer_submit(engine_scorer *sc, int slot, const ssae_span *sp, int nsp, size_t n,
                         const uint32_t *chan, const unsigned char *cont, size_t wf,
                         ssae_err *err);
int engine_scorer_collect(engine_scorer *sc, int slot, float *scores, ssae_err *err);
double engine_scorer_threshold(const engine_scorer *sc, int ch);

/* ---- ssae_engine_publish.c (worker thread) ---- */
void engine_publish_init(ssae_engine *e);
void engine_publish_batch(ssae_engine *e, int b, size_t n, int rc, const ssae_err *err);
void engine_clear_alarms(ssae_engine *e);
void engine_emit_counters(ssae_engine *e, ssae_event_type type, double t);
void engine_on_fallback(void *user, const char *msg);

#endif
