#include "ssae_filescore.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_audio.h"
#include "ssae_logmel.h"
#include "ssae_silence.h"

void ssae_file_scores_release(ssae_file_scores *s) {
  if (!s) return;
  free(s->frames);
  free(s->scores);
  free(s->silent);
  memset(s, 0, sizeof *s);
}

int ssae_file_frames(const ssae_model *m, const char *path, int channel,
                     ssae_file_scores *out, ssae_err *err) {
  memset(out, 0, sizeof *out);
  if (channel == SSAE_CHANNEL_ALL)
    return ssae_err_set(err, "%s: scoring needs one stream: a channel index or mix", path);
  ssae_audio a;
  if (ssae_audio_load(path, channel, m->feat.sample_rate, &a, err)) return -1;
  out->file_rate = a.file_rate;
  out->file_channels = a.file_channels;
  out->seconds = (double)a.frames / a.rate;
  int rc = ssae_logmel_compute(&m->feat, a.data, a.frames, &out->frames, &out->n_frames, err);
  if (rc) {
    ssae_audio_release(&a);
    return ssae_err_prefix(err, "%s", path);
  }
  if (out->n_frames < (size_t)m->d.frames) {
    size_t nf = out->n_frames;
    ssae_audio_release(&a);
    ssae_file_scores_release(out);
    return ssae_err_set(err, "%s: too short: %zu frames, a window needs %d (%.3f s)", path, nf,
                        m->d.frames,
                        (double)(m->d.frames - 1) * m->feat.hop_length / m->feat.sample_rate);
  }
  out->n_mels = m->d.n_mels;
  out->n_windows = out->n_frames - (size_t)m->d.frames + 1;
  out->silent = malloc(out->n_windows);
  if (!out->silent) {
    ssae_audio_release(&a);
    ssae_file_scores_release(out);
    return ssae_err_set(err, "%s: out of memory", path);
  }
  ssae_silence_windows(&m->feat, a.data, a.frames, out->n_windows, out->silent);
  ssae_audio_release(&a);
  return 0;
}

int ssae_file_score(const ssae_model *m, ssae_backend *b, size_t batch_max, const char *path,
                    int channel, int keep_frames, ssae_file_scores *out, ssae_err *err) {
  if (ssae_file_frames(m, path, channel, out, err)) return -1;
  if (!batch_max) batch_max = 256;
  size_t F = (size_t)m->d.frames, n_win = out->n_windows;
  out->scores = malloc(n_win * sizeof *out->scores);
  if (!out->scores) {
    ssae_file_scores_release(out);
    return ssae_err_set(err, "%s: out of memory for %zu window scores", path, n_win);
  }
  /* The backend reads the windows from the frames in place; batch_max
   * windows per call are batch_max + F - 1 frames. */
  for (size_t i = 0; i < n_win; i += batch_max) {
    size_t n = n_win - i < batch_max ? n_win - i : batch_max;
    if (ssae_backend_run_frames(b, out->frames + i * (size_t)m->d.n_mels, n + F - 1,
                                out->scores + i, err)) {
      ssae_file_scores_release(out);
      return ssae_err_prefix(err, "%s", path);
    }
  }
  double sum = 0.0;
  for (size_t i = 0; i < n_win; i++) sum += out->scores[i];
  out->file_score = sum / (double)n_win;
  if (!keep_frames) {
    free(out->frames);
    out->frames = NULL;
  }
  if (!isfinite(out->file_score)) {
    ssae_file_scores_release(out);
    return ssae_err_set(err, "%s: the model gave a non-finite score", path);
  }
  return 0;
}
