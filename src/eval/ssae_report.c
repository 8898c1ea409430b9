/* One recording to one picture (ssae_report.h). */
#include "ssae_report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_plot.h"
#include "ssae_silence.h"

static const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

void ssae_report_release(ssae_report *r) {
  if (!r) return;
  ssae_file_scores_release(&r->fs);
  free(r->smoothed);
  free(r->alarm);
  memset(r, 0, sizeof *r);
}

int ssae_report_make(const ssae_model *m, ssae_backend *b, const char *in, const char *out,
                     const ssae_report_opts *o, ssae_report *r, ssae_err *err) {
  ssae_report own;
  if (!r) r = &own;
  memset(r, 0, sizeof *r);
  const ssae_detector_params *dp = &o->detector;
  r->threshold = isnan(dp->threshold) ? m->threshold : dp->threshold;
  int rc = 0;
  if (ssae_file_score_opts(m, b, 256, in, o->channel, 1, &o->audio, &r->fs, err)) {
    rc = -1;
  } else if (!(r->smoothed = malloc((r->fs.n_windows ? r->fs.n_windows : 1) *
                                    sizeof *r->smoothed)) ||
             !(r->alarm = malloc(r->fs.n_windows ? r->fs.n_windows : 1))) {
    rc = ssae_err_set(err, "out of memory for the report of %s", in);
  } else {
    const ssae_file_scores *fs = &r->fs;
    const double hop_s = (double)m->feat.hop_length / m->feat.sample_rate;
    ssae_detector_params used = *dp;
    used.threshold = r->threshold;
    ssae_detector_run(&used, hop_s, fs->scores, fs->silent, fs->n_windows, r->smoothed,
                      r->alarm);
    char sub[512], ch[32];
    if (o->channel == SSAE_CHANNEL_MIX)
      snprintf(ch, sizeof ch, "mix of %d", fs->file_channels);
    else
      snprintf(ch, sizeof ch, "%d of %d", o->channel, fs->file_channels);
    snprintf(sub, sizeof sub,
             "model: %s   channel %s   %d Hz file, %.2f s   backend %s   smoothing %g s, "
             "alarm on after %d, off after %d windows",
             o->model_name ? o->model_name : "default", ch, fs->file_rate, fs->seconds,
             ssae_backend_name(b), dp->smoothing_s, dp->on_count, dp->off_count);
    ssae_report_data d = {0};
    d.name = base_name(in);
    d.frames = fs->frames;
    d.n_frames = fs->n_frames;
    d.n_mels = fs->n_mels;
    d.sample_rate = m->feat.sample_rate;
    d.hop_length = m->feat.hop_length;
    d.fmin = m->feat.fmin;
    d.fmax = m->feat.fmax > 0 ? m->feat.fmax : m->feat.sample_rate / 2.0;
    d.htk = m->feat.mel_scale == SSAE_MEL_HTK;
    d.seconds = fs->seconds;
    d.scores = fs->scores;
    d.smoothed = r->smoothed;
    d.alarm = r->alarm;
    d.n_windows = fs->n_windows;
    d.frames_per_window = m->d.frames;
    d.window_t0 = ssae_window_time(&m->feat, 0);
    d.threshold = r->threshold;
    d.file_score = fs->file_score;
    d.subtitle = sub;
    if (ssae_report_draw(&d, out, o->width, o->height, NULL, err)) rc = -1;
  }
  if (r == &own) ssae_report_release(r);
  return rc;
}
