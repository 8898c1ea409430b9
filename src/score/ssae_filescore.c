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

/* ---- reading: the file streamed through the model's front end ----
 *
 * The audio comes in blocks (ssae_audio_read) and goes through the
 * streaming log-mel front end, which gives the same frames for any block
 * sizes (SPEC section 1), so memory holds the frames (or, when only the
 * scores are wanted, one batch of them), never the signal: a 1-hour file
 * costs its 28 MB of frames or less, not 700 MB of samples. The front end
 * is the thread's, kept for its next file (ssae_logmel_cached). */

#define PCM_BLOCK 16384

typedef struct frame_reader {
  ssae_audio_stream *as;
  ssae_logmel *lm;
  int lm_owned;
  int n_mels;
  float *pcm;    /* PCM_BLOCK samples */
  float *frames; /* the frames one process or flush call can give */
  size_t samples;
  int flushed;
  ssae_silence sil; /* digital silence in what was read */
  size_t flagged;   /* windows with a silent flag in out->silent */
  size_t silent_cap;
} frame_reader;

/* out: where the reader's warning goes (NULL: dropped). */
static void reader_close(frame_reader *r, ssae_file_scores *out) {
  if (out && r->as && ssae_audio_stream_warning(r->as)[0])
    ssae_err_set(&out->warning, "%s", ssae_audio_stream_warning(r->as));
  ssae_audio_close(r->as);
  if (r->lm_owned) ssae_logmel_free(r->lm);
  free(r->pcm);
  free(r->frames);
  memset(r, 0, sizeof *r);
}

static int reader_open(frame_reader *r, const ssae_model *m, const char *path, int channel,
                       const ssae_audio_opts *ao, ssae_file_scores *out, ssae_err *err) {
  memset(r, 0, sizeof *r);
  if (channel == SSAE_CHANNEL_ALL)
    return ssae_err_set(err, "%s: scoring needs one stream: a channel index or mix", path);
  if (!(r->as = ssae_audio_open(path, channel, m->feat.sample_rate, ao, err))) return -1;
  const ssae_audio_info *ai = ssae_audio_stream_info(r->as);
  out->file_rate = ai->file_rate;
  out->file_channels = ai->file_channels;
  r->n_mels = m->feat.n_mels;
  if (!(r->lm = ssae_logmel_cached(&m->feat, &r->lm_owned, err))) {
    reader_close(r, NULL);
    return ssae_err_prefix(err, "%s", path);
  }
  size_t most = ssae_logmel_max_frames(r->lm, PCM_BLOCK), fl = ssae_logmel_max_frames(r->lm, 0);
  if (fl > most) most = fl;
  r->pcm = malloc(sizeof *r->pcm * PCM_BLOCK);
  r->frames = malloc(sizeof *r->frames * most * (size_t)r->n_mels);
  if (!r->pcm || !r->frames) {
    reader_close(r, NULL);
    return ssae_err_set(err, "%s: out of memory", path);
  }
  return 0;
}

/* The next frames into r->frames: their count, 0 at the end, -1. */
static long reader_next(frame_reader *r, ssae_err *err) {
  for (;;) {
    if (r->flushed) return 0;
    long long got = ssae_audio_read(r->as, r->pcm, PCM_BLOCK, err);
    if (got < 0) return -1;
    size_t nf;
    if (got == 0) {
      r->flushed = 1;
      nf = ssae_logmel_flush(r->lm, r->frames);
    } else {
      ssae_silence_scan(&r->sil, r->samples, r->pcm, (size_t)got);
      r->samples += (size_t)got;
      nf = ssae_logmel_process(r->lm, r->pcm, (size_t)got, r->frames);
    }
    if (nf) return (long)nf;
  }
}

/* The silent flags of the windows that total frames complete, as the
 * engine flags them (ssae_silence.h): the samples up to their ends are
 * scanned (or all of them, after the flush). */
static int flag_windows(frame_reader *r, const ssae_model *m, const char *path, size_t total,
                        ssae_file_scores *out, ssae_err *err) {
  const size_t F = (size_t)m->d.frames;
  if (total < F || total - F + 1 <= r->flagged) return 0;
  size_t n = total - F + 1;
  if (n > r->silent_cap) {
    size_t nc = r->silent_cap ? 2 * r->silent_cap : 1024;
    while (nc < n) nc *= 2;
    unsigned char *p = realloc(out->silent, nc);
    if (!p) return ssae_err_set(err, "%s: out of memory for %zu window flags", path, nc);
    out->silent = p;
    r->silent_cap = nc;
  }
  ssae_silence_flag_windows(&r->sil, &m->feat, r->flagged, n - r->flagged,
                            out->silent + r->flagged);
  r->flagged = n;
  return 0;
}

static int too_short(const ssae_model *m, const char *path, size_t nf, ssae_err *err) {
  return ssae_err_set(err, "%s: too short: %zu frames, a window needs %d (%.3f s)", path, nf,
                      m->d.frames,
                      (double)(m->d.frames - 1) * m->feat.hop_length / m->feat.sample_rate);
}

int ssae_file_frames(const ssae_model *m, const char *path, int channel,
                     ssae_file_scores *out, ssae_err *err) {
  return ssae_file_frames_opts(m, path, channel, NULL, out, err);
}

int ssae_file_frames_opts(const ssae_model *m, const char *path, int channel,
                          const ssae_audio_opts *ao, ssae_file_scores *out, ssae_err *err) {
  memset(out, 0, sizeof *out);
  frame_reader r;
  if (reader_open(&r, m, path, channel, ao, out, err)) return -1;
  const size_t M = (size_t)r.n_mels;
  size_t cap = 0;
  long k;
  while ((k = reader_next(&r, err)) > 0) {
    if (out->n_frames + (size_t)k > cap) {
      size_t nc = cap ? 2 * cap : 4096;
      while (nc < out->n_frames + (size_t)k) nc *= 2;
      float *f = realloc(out->frames, sizeof *f * nc * M);
      if (!f) {
        k = ssae_err_set(err, "%s: out of memory for %zu log-mel frames", path, nc);
        break;
      }
      out->frames = f;
      cap = nc;
    }
    memcpy(out->frames + out->n_frames * M, r.frames, sizeof *r.frames * (size_t)k * M);
    out->n_frames += (size_t)k;
    if (flag_windows(&r, m, path, out->n_frames, out, err)) {
      k = -1;
      break;
    }
  }
  out->seconds = (double)r.samples / m->feat.sample_rate;
  reader_close(&r, out);
  if (k < 0) {
    ssae_file_scores_release(out);
    return -1;
  }
  if (out->n_frames < (size_t)m->d.frames) {
    size_t nf = out->n_frames;
    ssae_file_scores_release(out);
    return too_short(m, path, nf, err);
  }
  out->n_mels = m->d.n_mels;
  out->n_windows = out->n_frames - (size_t)m->d.frames + 1;
  return 0;
}

/* Appends the scores of the n windows of frames (n + F - 1 frames). */
static int score_batch(const ssae_model *m, ssae_backend *b, const char *path,
                       const float *frames, size_t n, ssae_file_scores *out, size_t *cap,
                       ssae_err *err) {
  if (out->n_windows + n > *cap) {
    size_t nc = *cap ? 2 * *cap : 1024;
    while (nc < out->n_windows + n) nc *= 2;
    float *s = realloc(out->scores, sizeof *s * nc);
    if (!s) return ssae_err_set(err, "%s: out of memory for %zu window scores", path, nc);
    out->scores = s;
    *cap = nc;
  }
  if (ssae_backend_run_frames(b, frames, n + (size_t)m->d.frames - 1,
                              out->scores + out->n_windows, err))
    return ssae_err_prefix(err, "%s", path);
  out->n_windows += n;
  return 0;
}

/* Scores while reading, batch_max windows per call as the whole-file loop
 * did (the same batches, so the same scores), keeping one batch of frames. */
static int score_streaming(const ssae_model *m, ssae_backend *b, size_t batch_max,
                           const char *path, int channel, const ssae_audio_opts *ao,
                           ssae_file_scores *out, ssae_err *err) {
  memset(out, 0, sizeof *out);
  frame_reader r;
  if (reader_open(&r, m, path, channel, ao, out, err)) return -1;
  const size_t M = (size_t)r.n_mels, F = (size_t)m->d.frames, span = batch_max + F - 1;
  float *buf = malloc(sizeof *buf * span * M);
  size_t have = 0, total = 0, cap = 0;
  long k = buf ? 0 : ssae_err_set(err, "%s: out of memory", path);
  while (buf && (k = reader_next(&r, err)) > 0) {
    total += (size_t)k;
    if (flag_windows(&r, m, path, total, out, err)) {
      k = -1;
      break;
    }
    const float *p = r.frames;
    while (k > 0) {
      size_t take = span - have < (size_t)k ? span - have : (size_t)k;
      memcpy(buf + have * M, p, sizeof *buf * take * M);
      have += take;
      p += take * M;
      k -= (long)take;
      if (have == span) {
        if (score_batch(m, b, path, buf, batch_max, out, &cap, err)) {
          k = -1;
          break;
        }
        memmove(buf, buf + batch_max * M, sizeof *buf * (F - 1) * M);
        have = F - 1;
      }
    }
    if (k < 0) break;
  }
  out->seconds = (double)r.samples / m->feat.sample_rate;
  reader_close(&r, out);
  if (k == 0 && total < F) k = too_short(m, path, total, err);
  if (k == 0 && have >= F && score_batch(m, b, path, buf, have - F + 1, out, &cap, err)) k = -1;
  free(buf);
  if (k < 0) {
    ssae_file_scores_release(out);
    return -1;
  }
  out->n_frames = total;
  out->n_mels = m->d.n_mels;
  return 0;
}

int ssae_file_score(const ssae_model *m, ssae_backend *b, size_t batch_max, const char *path,
                    int channel, int keep_frames, ssae_file_scores *out, ssae_err *err) {
  return ssae_file_score_opts(m, b, batch_max, path, channel, keep_frames, NULL, out, err);
}

int ssae_file_score_opts(const ssae_model *m, ssae_backend *b, size_t batch_max,
                         const char *path, int channel, int keep_frames,
                         const ssae_audio_opts *ao, ssae_file_scores *out, ssae_err *err) {
  if (!batch_max) batch_max = 256;
  size_t n_win;
  if (!keep_frames) {
    if (score_streaming(m, b, batch_max, path, channel, ao, out, err)) return -1;
    n_win = out->n_windows;
  } else {
    if (ssae_file_frames_opts(m, path, channel, ao, out, err)) return -1;
    size_t F = (size_t)m->d.frames;
    n_win = out->n_windows;
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
