/* Alarm clips: for each alarm a sound file (FLAC or WAV, 16-bit, mono, the
 * input's rate) from a pre-roll before alarm_on to a post-roll after
 * alarm_off (capped at a maximum length), written atomically (a temporary
 * file in the target folder, fsync, rename) by a writer thread, with
 * retention by count, age and total size (oldest first).
 *
 * The audio thread fills a per-channel ring of the last (pre-roll + margin)
 * seconds (ssae_clips_feed*: no allocation, no lock, no system call; one
 * release store per channel per block); the writer thread copies from the
 * ring into the open clips as the audio arrives, so that an alarm of any
 * length needs no more memory than the ring.
 *
 * Audio time `t` (the engine's events: seconds of audio since the start)
 * maps to sample round(t * rate) of the samples fed since creation.
 *
 * Thread context: feed on the audio thread (one thread per channel at a
 * time); alarm_on/alarm_off from the engine's worker thread (a short
 * mutex); the files on the writer thread; new/free on the main thread. */
#ifndef SSAE_CLIPS_H
#define SSAE_CLIPS_H

#include <stddef.h>
#include <stdint.h>

#include "ssae_err.h"
#include "ssae_realtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ssae_clips ssae_clips;

/* A clip is finished: written (ok 1, path final) or failed (ok 0, msg).
 * Runs on the writer thread. */
typedef void (*ssae_clip_fn)(void *user, int channel, const char *id,
                             const char *path, double seconds, int ok,
                             const char *msg);

typedef struct ssae_clips_cfg {
  const char *dir;          /* created if missing (one level) */
  int channels;
  double rate;              /* samples per second fed per channel */
  const char *const *names; /* per channel, for file names; NULL: chN */
  int flac;                 /* 1: FLAC, 0: WAV */
  double pre_roll_s;        /* before alarm_on (5) */
  double post_roll_s;       /* after alarm_off (5) */
  double max_length_s;      /* a clip ends here at the latest (120) */
  int keep_count;           /* 0: no limit */
  double keep_age_s;        /* 0: no limit */
  uint64_t keep_bytes;      /* 0: no limit */
  double margin_s;          /* ring beyond the pre-roll, for the writer's
                               and the detector's delay (0: 3 s) */
  ssae_clip_fn on_clip;     /* may be NULL */
  void *user;
} ssae_clips_cfg;

ssae_clips *ssae_clips_new(const ssae_clips_cfg *cfg, ssae_err *err);
/* Finishes the open clips with the audio there is, stops the writer. */
void ssae_clips_free(ssae_clips *c);

/* ---- audio thread ---- */
void ssae_clips_feed(ssae_clips *c, const float *const *in, size_t n)
    SSAE_REALTIME;
void ssae_clips_feed_interleaved(ssae_clips *c, const float *in, size_t n)
    SSAE_REALTIME;
/* Channels first .. first+count-1 (input groups with their own threads). */
void ssae_clips_feed_channels(ssae_clips *c, int first, int count,
                              const float *const *in, size_t n) SSAE_REALTIME;

/* ---- a reader that can wait (a file played faster than real time) ----
 * Waits until feeding n more samples per channel overwrites nothing an
 * open or requested clip still needs (the writer copies meanwhile), so
 * that such a reader loses no clip sample. Call between feeds, from the
 * feeding thread, after the alarms of the audio fed so far have been
 * given (the engine drained). Not for the audio thread of a live input:
 * it may block. 0, or -1 after timeout_s (the writer is stuck: the
 * samples it misses are counted as lost). */
int ssae_clips_wait_room(ssae_clips *c, size_t n, double timeout_s);

/* ---- worker thread ---- */
/* Starts the clip of alarm `id` (its alarm_on at audio time t); writes the
 * path the clip will have into path. 0, or -1 (bad channel, no memory). */
int ssae_clips_alarm_on(ssae_clips *c, int channel, double t, const char *id,
                        char *path, size_t path_len);
/* Its alarm_off at audio time t: the clip ends post_roll later. */
int ssae_clips_alarm_off(ssae_clips *c, int channel, double t, const char *id);

/* New machine names for the clips that begin from now on (a reload).
 * Main thread. 0 or -1. */
int ssae_clips_set_names(ssae_clips *c, const char *const *names);

typedef struct ssae_clips_stats {
  uint64_t written, failed, deleted;
  uint64_t lost_samples; /* overwritten before the writer copied them
                            (a pre-roll the ring no longer held included) */
  int open;              /* clips being written */
} ssae_clips_stats;
void ssae_clips_stats_get(ssae_clips *c, ssae_clips_stats *s);
/* ssae_clips_free, with the final counts (the open clips finished). */
void ssae_clips_close(ssae_clips *c, ssae_clips_stats *final);

/* Applies the retention limits now (also done after each clip). */
int ssae_clips_retain(ssae_clips *c, ssae_err *err);

#ifdef __cplusplus
}
#endif
#endif
