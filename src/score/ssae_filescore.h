/* One file scored the way `ssae score`, `ssae eval` and `ssae report` need
 * it (one pipeline for all three): its log-mel frames (for the picture),
 * every window's score and the file score (mean of the window scores, SPEC
 * section 2). Not for the audio thread. */
#ifndef SSAE_FILESCORE_H
#define SSAE_FILESCORE_H

#include <stddef.h>

#include "ssae_audio.h"
#include "ssae_backend.h"
#include "ssae_err.h"
#include "ssae_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ssae_file_scores {
  float *frames;     /* n_frames x n_mels log-mel dB; NULL unless asked for */
  size_t n_frames;
  int n_mels;
  float *scores;     /* n_windows window scores */
  unsigned char *silent; /* n_windows flags: 1 where the window touches
                            digital silence (ssae_silence.h), as the engine
                            flags it; for ssae_detector_run */
  size_t n_windows;
  double file_score; /* mean of the window scores */
  double seconds;    /* audio length at the model's rate */
  int file_rate, file_channels;
  ssae_err warning;  /* empty, or the reader's warning naming the file (a
                        data chunk shorter than its header says) */
} ssae_file_scores;

/* Loads path (channel: an index or SSAE_CHANNEL_MIX), resamples to the
 * model's rate, computes the model's features and scores every window on
 * the backend, batch_max windows per call (the backend's max_batch, 0:
 * 256). keep_frames: also return the frames. Messages name the file. */
int ssae_file_score(const ssae_model *m, ssae_backend *b, size_t batch_max,
                    const char *path, int channel, int keep_frames,
                    ssae_file_scores *out, ssae_err *err);
/* The same with the reader's options (ao: NULL for the defaults; strict
 * makes a cut data chunk an error). */
int ssae_file_score_opts(const ssae_model *m, ssae_backend *b, size_t batch_max,
                         const char *path, int channel, int keep_frames,
                         const ssae_audio_opts *ao, ssae_file_scores *out, ssae_err *err);
void ssae_file_scores_release(ssae_file_scores *s);

/* The first half of ssae_file_score: loads path and computes its log-mel
 * frames, without scoring: frames (always), silent, n_frames, n_mels,
 * n_windows, seconds, file_rate, file_channels; scores NULL. A file shorter than one
 * window is an error. For callers that batch many files (ssae score on a
 * GPU). */
int ssae_file_frames(const ssae_model *m, const char *path, int channel,
                     ssae_file_scores *out, ssae_err *err);
int ssae_file_frames_opts(const ssae_model *m, const char *path, int channel,
                          const ssae_audio_opts *ao, ssae_file_scores *out, ssae_err *err);

#ifdef __cplusplus
}
#endif
#endif
