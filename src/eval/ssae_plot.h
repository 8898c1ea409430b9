/* Pictures (cairo): the report of one file and the evaluation plot.
 *
 * The format follows the output name: .png or .svg. Both functions return
 * the layout they drew with, so that callers (and tests) know where each
 * panel is. Only built when cairo is found (SSAE_HAVE_CAIRO). Not for the
 * audio thread. */
#ifndef SSAE_PLOT_H
#define SSAE_PLOT_H

#include <stddef.h>

#include "ssae_err.h"
#include "ssae_metrics.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Perceptually uniform colormap (viridis), v in [0, 1] (clamped). */
void ssae_colormap(double v, double rgb[3]);

/* Colours the tests look for. */
#define SSAE_PLOT_THRESHOLD_RGB 0.85, 0.10, 0.15
#define SSAE_PLOT_ALARM_RGB 1.00, 0.84, 0.84

/* ---- `ssae report` ---- */

typedef struct ssae_report_data {
  const char *name;       /* file name for the title */
  /* Log-mel frames in dB, n_frames x n_mels, frame-major. */
  const float *frames;
  size_t n_frames;
  int n_mels;
  int sample_rate, hop_length;
  double fmin, fmax;      /* band edges in Hz */
  int htk;                /* 1: HTK mel scale, 0: Slaney */
  double seconds;         /* length of the audio */
  /* Window scores, their smoothed line (NAN where the detector has no
   * evidence: digital silence) and alarm flags (n_windows each), from
   * ssae_detector_run; window w spans frames w .. w + frames_per_window - 1
   * and its scores are drawn at the middle of those frames. */
  const float *scores, *smoothed;
  const unsigned char *alarm;
  size_t n_windows;
  int frames_per_window;
  /* Window 0's time (ssae_window_time): window w's is window_t0 + w hops.
   * An alarm span is drawn from the time of the window that turned the
   * alarm on to that of the window that turned it off (the end of the
   * last window when none did), as the monitor's events time it. */
  double window_t0;
  double threshold;       /* NAN: none */
  double file_score;      /* mean window score */
  const char *subtitle;   /* model / channel line; may be NULL */
} ssae_report_data;

typedef struct ssae_rect {
  double x, y, w, h;
} ssae_rect;

typedef struct ssae_report_layout {
  int width, height;
  ssae_rect spec;     /* the heat map */
  ssae_rect colorbar;
  ssae_rect scores;   /* the score panel */
  double t0, t1;      /* seconds at the left and right edges of both panels */
  double db_min, db_max;
  double score_lo, score_hi; /* score axis range (log10 scale) */
} ssae_report_layout;

/* Pixel row of a score in the score panel, and pixel column of a time. */
double ssae_report_score_y(const ssae_report_layout *l, double score);
double ssae_report_time_x(const ssae_report_layout *l, double t);

/* Draws the report into path (.png or .svg), width x height pixels (0: 1200
 * x 800). layout may be NULL. */
int ssae_report_draw(const ssae_report_data *d, const char *path, int width,
                     int height, ssae_report_layout *layout, ssae_err *err);

/* ---- `ssae eval --plot` ---- */

typedef struct ssae_evalplot_section {
  const char *name;
  const double *scores;
  const int *labels; /* 1 anomalous, 0 normal */
  size_t n;
  double auc, pauc;
} ssae_evalplot_section;

typedef struct ssae_evalplot_layout {
  int width, height;
  ssae_rect roc;    /* fpr 0..1 left to right, tpr 0..1 bottom to top */
  ssae_rect hist;   /* log10(score) from hist_lo to hist_hi */
  double hist_lo, hist_hi;
} ssae_evalplot_layout;

double ssae_evalplot_score_x(const ssae_evalplot_layout *l, double score);

/* ROC curves (one per section, the max-FPR region shaded) and histograms of
 * all normal and anomalous scores with the threshold. */
int ssae_evalplot_draw(const ssae_evalplot_section *s, size_t n_sections,
                       double threshold, double max_fpr, const char *title,
                       const char *path, int width, int height,
                       ssae_evalplot_layout *layout, ssae_err *err);

/* Frees cairo's and fontconfig's process-wide caches (fonts); call once at
 * exit, after the last picture, so that leak checkers see a clean exit. */
void ssae_plot_cleanup(void);

#ifdef __cplusplus
}
#endif
#endif
