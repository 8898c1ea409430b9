/* The real-time engine (SPEC section 5).
 *
 * N channels of audio go in on the audio thread (PortAudio callback, JACK
 * process callback, LV2 run) through ssae_engine_process(), which does the
 * whole feature path: per channel resample (fixed-ratio polyphase, built at
 * creation) -> frame; the FFT and mel of the frames that complete in a block
 * are computed eight channels at a time (ssae_logmel_multi.h: bit-identical
 * to one channel alone); per channel -> 5-frame window -> push into an SPSC
 * lock-free ring. When the ring is full the newest window is dropped and
 * counted; the audio thread never waits.
 *
 * With input groups (cfg.groups) each share of the channels has its own
 * front end and ring and may be fed by its own audio thread
 * (ssae_engine_process_group).
 *
 * A worker thread (started by ssae_engine_new) drains the rings, batches
 * windows across channels (up to max_batch windows or batch_deadline_ms after
 * the oldest one arrived), runs the backend (ssae_backend: CUDA or CPU, with
 * fallback to the CPU; on the CPU each channel's slice codes are kept so
 * that a window's new frame is the only one encoded; on the GPU one batch is
 * scored while the next is taken from the rings, and the rings are
 * page-locked so that the GPU's copy engine reads the windows where they
 * lie: the worker copies only their headers), and runs the detector per
 * channel (ssae_detector.h, the one the plugin and the offline commands
 * use): exponential smoothing with a time constant, a threshold (the
 * model's or the user's) and hysteresis (alarm on after on_count smoothed
 * scores above the threshold, off after off_count below). Windows that
 * touch digital silence (a run of at least 64 exact zeros at the model's
 * rate: an unconnected port, the end of a stream, a muted device) are
 * scored but not judged: they reset the detector and end an alarm. Each
 * channel may have its own model (cfg.channel_models: one per machine,
 * features shared) and its own detector parameters
 * (ssae_engine_set_channel_params). Per-channel results are published lock-free,
 * one consistent set per window (ssae_engine_channel_get, audio-thread safe),
 * and as events through a callback that runs on the worker thread. */
#ifndef SSAE_ENGINE_H
#define SSAE_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "ssae_err.h"
#include "ssae_model.h"
#include "ssae_realtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ssae_engine ssae_engine;

/* Detector parameters. Changeable at any time, from any thread (the audio
 * thread included) with ssae_engine_set_params: lock-free. */
typedef struct ssae_engine_params {
  double threshold;   /* NAN (or <= 0): the model's threshold */
  double smoothing_s; /* EMA time constant in seconds of audio; 0: none */
  int on_count;       /* alarm on after this many smoothed scores above (>=1) */
  int off_count;      /* alarm off after this many below (>=1) */
  int enabled;        /* 0: analysis paused: the audio thread skips the
                         feature path; once the windows made before the pause
                         are judged, every alarm ends (an ALARM_OFF event,
                         alarm 0 in ssae_engine_channel_get) and the smoothing
                         starts afresh on resume */
} ssae_engine_params;

/* The detector's defaults (ssae_detector_params_default: threshold NAN,
 * smoothing 0.1 s, on 3, off 5), enabled. */
void ssae_engine_params_default(ssae_engine_params *p);

typedef enum ssae_event_type {
  SSAE_EVENT_ALARM_ON = 0,
  SSAE_EVENT_ALARM_OFF = 1,
  SSAE_EVENT_STATUS = 2,  /* periodic / final counters (channel -1) */
  SSAE_EVENT_WINDOW = 3,  /* every scored window (only with emit_windows) */
  SSAE_EVENT_BACKEND = 4, /* the backend fell back to the CPU; msg says why */
  SSAE_EVENT_DROP = 5     /* windows were dropped since the last report */
} ssae_event_type;

typedef struct ssae_engine_stats {
  uint64_t windows;   /* windows made by the audio thread (pushed + dropped) */
  uint64_t scored;    /* windows scored by the worker */
  uint64_t dropped;   /* windows dropped because the ring was full */
  uint64_t batches;   /* backend calls */
  double lat_p50_ms;  /* window's last sample -> its score published */
  double lat_p99_ms;
  double lat_max_ms;
  double audio_s;     /* seconds of audio processed (channel 0) */
  /* The worker's time so far in its three stages: taking windows out of
   * the rings, scoring them (the backend), judging and publishing them.
   * Their sum against audio_s says how busy the worker is. */
  double worker_take_s, worker_score_s, worker_publish_s;
  const char *backend; /* backend now in use: "cpu", "cuda" */
  uint64_t nonfinite;  /* NaN or infinite input samples, taken as digital
                          silence (0): their windows are scored, not judged */
  uint64_t xruns;      /* input overruns the audio adapter reported (JACK
                          xruns, PortAudio input overflows): audio lost
                          before it reached the engine */
} ssae_engine_stats;

/* An alarm's identity and extent (SPEC section 4), carried by its
 * ALARM_ON and ALARM_OFF events. */
#define SSAE_ALARM_ID_LEN 37 /* UUID text and its NUL */
typedef struct ssae_alarm_info {
  char id[SSAE_ALARM_ID_LEN]; /* a random (version 4) UUID, the same in the
                                 alarm's ALARM_ON and ALARM_OFF and new for
                                 the next alarm: unique across channels,
                                 hosts and restarts */
  double t_on;       /* audio time of its ALARM_ON (seconds since start) */
  double wall_on;    /* wall clock of its ALARM_ON (Unix seconds) */
  double wall;       /* wall clock of this event (Unix seconds) */
  double duration_s; /* ALARM_OFF: t - t_on (seconds of audio); 0 on ALARM_ON */
  double peak_score; /* the highest window score from the window that raised
                        the alarm to this event's window */
  const char *reason; /* ALARM_OFF: why it ended: "score" (the smoothed score
                         stayed at or below the threshold off_count windows),
                         "silence" (a window touched digital silence),
                         "paused" (analysis paused), "no_threshold" (the
                         threshold became unusable); NULL on ALARM_ON */
} ssae_alarm_info;

typedef struct ssae_event {
  ssae_event_type type;
  int channel;          /* -1 for engine-wide events */
  double t;             /* seconds of audio since start, at the window's end */
  uint64_t window;      /* window index in its channel (ALARM_*, WINDOW) */
  double score;         /* smoothed score (ALARM_*), raw score (WINDOW) */
  double raw_score;     /* the window's own score */
  double threshold;     /* threshold in use (NAN if none) */
  const ssae_engine_stats *stats; /* STATUS, DROP: counters; else NULL */
  const char *msg;      /* BACKEND: the reason; else NULL */
  const ssae_alarm_info *alarm; /* ALARM_ON, ALARM_OFF: the alarm (valid
                           during the callback); else NULL */
} ssae_event;

/* Runs on the worker thread (or, for the final STATUS, on the thread calling
 * ssae_engine_stop/free). May block briefly (write a file); never calls back
 * into the engine except the getters. */
typedef void (*ssae_event_fn)(void *user, const ssae_event *ev);

typedef struct ssae_engine_cfg {
  int channels;            /* >= 1 */
  int groups;              /* input groups (0 or 1: one): channels split
                              into this many contiguous shares, each fed by
                              its own audio thread through
                              ssae_engine_process_group, with its own front
                              end and ring; one worker scores them all. For
                              more channels than one core can turn into
                              features within the latency wanted (several
                              sound cards, JACK clients, network streams).
                              One thread may also feed every group in turn
                              through ssae_engine_process: with gpu_frontend
                              the worker then starts on each group's samples
                              while the next group's are still being copied
                              (thousands of channels: about 1024 a group). */
  double input_rate;       /* rate of the samples given to process(); 0 = the
                              model's rate. Resampled when it differs. */
  size_t max_block;        /* hint: largest block per process() call; larger
                              blocks are split internally (0: 8192) */
  const char *backend;     /* "auto" (default when NULL), "cpu", "cuda" */
  int cpu_threads;         /* threads of the CPU backend (and of the CPU
                              that takes over from a failed GPU): 0 = every
                              core; 1 = the worker thread alone, which leaves
                              the other cores to the audio thread */
  size_t ring_windows;     /* ring capacity in windows (0: 64 per channel,
                              at least 1024); with gpu_frontend, the PCM
                              ring's room beyond its least (about 0.25 s
                              at 16 kHz) in windows over all channels */
  size_t max_batch;        /* windows per backend call (0: 256) */
  double batch_deadline_ms;/* wait at most this long for a fuller batch
                              after the oldest window arrived (0: run what is
                              there) */
  double poll_ms;          /* worker's sleep when the ring is empty (0: 0.2) */
  double spin_ms;          /* after a window arrived, the worker keeps polling
                              without sleeping this long (0: 0.5; < 0: never):
                              the rest of the period's windows are due within
                              microseconds, sooner than a sleep returns */
  double status_every_s;   /* STATUS event period in seconds of audio
                              (0: none except the final one) */
  int emit_windows;        /* 1: a WINDOW event for every scored window */
  ssae_engine_params params;
  ssae_event_fn on_event;  /* may be NULL */
  void *user;
  /* Test hook: the worker sleeps this long before each backend call (an
   * overloaded backend). 0 in normal use. */
  unsigned slow_backend_us;
  /* 1: on the GPU the worker copies each window out of the rings into the
   * batch, instead of the copy engine reading them in place (page-locked
   * rings, the default); for comparison and tests. */
  int no_in_place;
  /* 1: the worker starts cold (no warm-up batch at creation); for
   * comparison only. */
  int no_warm;
  /* Several models on one engine (one per machine, e.g. a plant config):
   * channel c is scored by channel_models[c] (a NULL entry: the model given
   * to ssae_engine_new). Channels that share a model share its backend.
   * The models must compute the same features (rate, FFT, hop, mels,
   * frames...: one front end makes every channel's windows; else
   * ssae_engine_new fails naming the setting); latent sizes and thresholds
   * may differ, and each channel's default threshold is its model's. Read
   * during ssae_engine_new only; the models are borrowed like the main one.
   * NULL: every channel the main model. */
  const ssae_model *const *channel_models;
  /* 1: the device front end, for many channels on a GPU. The audio thread
   * only copies each block (resampled when the input rate differs) into a
   * page-locked PCM ring per input group, under the same rules (no
   * allocation, lock, wait or system call; a full ring drops the block and
   * counts the windows it would have made, one per hop per channel); the
   * worker runs the front end of every channel at once on the GPU (FFT,
   * mel, dB, windows, each frame encoded once, scores:
   * gpu/ssae_cuda_frontend.h), the copy engine taking the samples from
   * the rings. The windows, scores, times and silence flags are those of
   * the default path. A CUDA failure moves the front end and model to the
   * CPU for good, the failed step run again there: no window is lost (a
   * BACKEND event says why). backend "cpu": the same path on the worker's
   * CPU (the reference; hosts without a GPU); "auto": the GPU when there is
   * one. One model (channel_models all the same or NULL); no model swap
   * (restart the engine with the new model). */
  int gpu_frontend;
  /* NULL, or per channel its own detector parameters (as
   * ssae_engine_set_channel_params; `enabled` is the engine's, from
   * params). Read during ssae_engine_new only. */
  const ssae_engine_params *channel_params;
  /* The CUDA device of the CUDA backend and of the device front end (0:
   * the first GPU). ssae_engine_new and a model swap make them with it
   * current on the calling thread and then give that thread its own
   * current device back (a JACK or LV2 host's thread keeps its own); the
   * worker keeps it current. Giving back a device that had no CUDA context
   * yet starts one (device 0's, about 0.5 GB, for a thread that never used
   * CUDA): a program of its own thread selects the device first
   * (ssae_cuda_device_enter), as `ssae monitor` and `ssae jack` do. A
   * device the host lacks fails ssae_engine_new naming it and the host's
   * count, with "auto" too (a GPU asked for is not left for the CPU;
   * "auto" with 0 on a host without one takes the CPU as before); nonzero
   * with backend "cpu" fails too. */
  int gpu;
} ssae_engine_cfg;

/* channels 1, input_rate 0, defaults above. */
void ssae_engine_cfg_default(ssae_engine_cfg *cfg);

/* Builds everything (front ends, ring, backend) and starts the worker. The
 * model is borrowed: it must outlive the engine (or be swapped out). */
ssae_engine *ssae_engine_new(const ssae_model *m, const ssae_engine_cfg *cfg,
                             ssae_err *err);
/* Stops the worker after it has scored every window in the ring, emits the
 * final STATUS event, frees everything. Accepts NULL. */
void ssae_engine_free(ssae_engine *e);

SSAE_REALTIME int ssae_engine_channels(const ssae_engine *e);
/* The rate the front end runs at (the model's sample_rate). */
SSAE_REALTIME int ssae_engine_model_rate(const ssae_engine *e);
SSAE_REALTIME int ssae_engine_window_floats(const ssae_engine *e); /* F*M */

/* ---- audio thread ---- */

/* One block of n samples for every channel: in[c] points to channel c's
 * samples (in[c] may be NULL: silence). Audio-thread safe: no allocation,
 * no locks, no waiting, no system calls (one clock_gettime, which is a
 * vDSO call), bounded work. Never blocks: a full ring drops windows. */
SSAE_REALTIME void ssae_engine_process(ssae_engine *e, const float *const *in, size_t n);

/* Same with interleaved input (stride = channels). Audio-thread safe. */
SSAE_REALTIME void ssae_engine_process_interleaved(ssae_engine *e, const float *in,
                                                   size_t n);

/* Input groups (ssae_engine_cfg.groups). process() and flush() above do
 * every group on the calling thread; these do one, so that each group can
 * have its own audio thread (at most one thread per group at a time).
 * in[i] is channel first + i of the group. Audio-thread safe, like
 * process() and flush(). */
SSAE_REALTIME int ssae_engine_groups(const ssae_engine *e);
SSAE_REALTIME void ssae_engine_group_channels(const ssae_engine *e, int g, int *first,
                                              int *count);
SSAE_REALTIME void ssae_engine_process_group(ssae_engine *e, int g, const float *const *in,
                                             size_t n);
SSAE_REALTIME void ssae_engine_flush_group(ssae_engine *e, int g);

/* An audio adapter saw n input overruns (a JACK xrun, a PortAudio input
 * overflow): counted in ssae_engine_stats.xruns, the status line and the
 * STATUS events. Audio-thread safe (one relaxed atomic add); any thread. */
SSAE_REALTIME void ssae_engine_note_xrun(ssae_engine *e, uint64_t n);

/* End of input: emits the frames that need the end padding (SPEC: offline
 * and streaming are one path), so that a file played through the engine
 * gives exactly the windows of `ssae score`. Audio-thread safe; call it from
 * the thread that calls process(). The channels then start a new stream. */
SSAE_REALTIME void ssae_engine_flush(ssae_engine *e);

/* Per-channel state published by the worker. The fields are one consistent
 * set (score, smoothed, threshold, alarm, windows and latency of the same
 * window; a seqlock latch): never a mix of two windows. Lock-free and
 * audio-thread safe: a reader never waits for the worker. `dropped` is read
 * separately (the audio thread's own counter). */
typedef struct ssae_channel_state {
  float score;       /* last window's score */
  float smoothed;    /* smoothed score the detector uses */
  float threshold;   /* threshold in use (NAN when none) */
  int alarm;         /* 0/1 */
  uint64_t windows;  /* windows scored on this channel */
  uint64_t dropped;  /* windows of this channel dropped (ring full) */
  float latency_ms;  /* last window's last sample -> score */
} ssae_channel_state;
SSAE_REALTIME void ssae_engine_channel_get(const ssae_engine *e, int ch,
                                           ssae_channel_state *out);

/* Lock-free parameter update (any thread, audio thread included); the worker
 * applies it at its next batch. */
SSAE_REALTIME void ssae_engine_set_params(ssae_engine *e, const ssae_engine_params *p);
SSAE_REALTIME void ssae_engine_get_params(const ssae_engine *e, ssae_engine_params *p);
/* Channel ch's own detector parameters (threshold, smoothing, on/off
 * counts), used instead of the engine's from its next window on; p NULL:
 * the channel follows the engine's (ssae_engine_set_params) again.
 * `enabled` stays the engine's. Lock-free, any thread, the audio thread
 * included; a channel out of range is ignored. */
SSAE_REALTIME void ssae_engine_set_channel_params(ssae_engine *e, int ch,
                                                  const ssae_engine_params *p);
/* The parameters channel ch uses now (its own, or the engine's). */
SSAE_REALTIME void ssae_engine_get_channel_params(const ssae_engine *e, int ch,
                                                  ssae_engine_params *p);

/* ---- other threads (never the audio thread) ---- */

/* Blocks until every window pushed so far has been scored and its events
 * delivered (used when a file is played as fast as possible). */
void ssae_engine_drain(ssae_engine *e);

/* Counters and latency percentiles. Thread-safe; not for the audio thread. */
void ssae_engine_stats_get(ssae_engine *e, ssae_engine_stats *out);

/* Replaces the model (e.g. from an LV2 worker): builds the new backend on
 * the calling thread, hands it to the worker, and returns once the worker
 * uses it and has released the old model, which the caller may then free.
 * The new model must have the same features, mel bands and frames (the
 * audio thread's front end and windows are unchanged; else -1 with a
 * message); its latent sizes may differ. */
int ssae_engine_swap_model(ssae_engine *e, const ssae_model *m, ssae_err *err);
/* The same for an engine of several models: channel c is scored by
 * channel_models[c] from the swap on (C entries, none NULL; the models must
 * compute the running features). All channels' streams restart in the new
 * backends, between two batches: no window is lost. The old models may be
 * freed once this returns. */
int ssae_engine_swap_models(ssae_engine *e, const ssae_model *const *channel_models,
                            ssae_err *err);

/* Changes the input rate (JACK sample-rate callback): briefly pauses the
 * audio-thread path (process() returns without analysing while this runs;
 * it never waits), rebuilds the resamplers, resumes. The streams restart. */
int ssae_engine_set_input_rate(ssae_engine *e, double rate, ssae_err *err);

/* Formats an event as one JSON line (SPEC section 4), with "\n". Returns the
 * length, or -1 if buf is too small. Thread-safe, no allocation. Alarm
 * events carry "machine" ("ch" and the channel number), and with their
 * alarm info "id", "time" (the event's wall clock, ISO 8601 UTC with
 * milliseconds), on ALARM_OFF also "duration_s", "peak_score" and
 * "reason". */
int ssae_event_json(const ssae_event *ev, char *buf, size_t len);
/* The same with the channel's name as "machine" (every event of a
 * channel; NULL: as ssae_event_json) and, on alarm events, the alarm's
 * clip path as "clip" (NULL: none). */
int ssae_event_json_named(const ssae_event *ev, const char *machine, const char *clip,
                          char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
