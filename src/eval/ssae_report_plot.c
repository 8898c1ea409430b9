/* `ssae report`: the spectrogram over time and, under it on the same time
 * axis, the window scores, their smoothed line, the threshold and the alarm
 * spans. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot_common.h"
#include "ssae_plot.h"

/* Mel scales (SPEC section 1) for the frequency axis. */
static double hz_to_mel(double f, int htk) {
  if (htk) return 2595.0 * log10(1.0 + f / 700.0);
  const double f_sp = 200.0 / 3, min_log_hz = 1000.0, min_log_mel = min_log_hz / f_sp,
               logstep = log(6.4) / 27.0;
  return f < min_log_hz ? f / f_sp : min_log_mel + log(f / min_log_hz) / logstep;
}

double ssae_report_score_y(const ssae_report_layout *l, double score) {
  double v = score > 0 ? log10(score) : l->score_lo;
  double f = (v - l->score_lo) / (l->score_hi - l->score_lo);
  if (f < 0) f = 0;
  if (f > 1) f = 1;
  return l->scores.y + l->scores.h * (1.0 - f);
}

double ssae_report_time_x(const ssae_report_layout *l, double t) {
  return l->spec.x + l->spec.w * (t - l->t0) / (l->t1 - l->t0);
}

static void layout_compute(const ssae_report_data *d, int w, int h, ssae_report_layout *l) {
  memset(l, 0, sizeof *l);
  l->width = w;
  l->height = h;
  double s = h / 800.0, left = 92 * s, right = 100 * s, top = 66 * s, bottom = 64 * s,
         gap = 40 * s;
  double avail = h - top - bottom - gap;
  l->spec = (ssae_rect){floor(left), floor(top), floor(w - left - right), floor(avail * 0.6)};
  l->scores = (ssae_rect){l->spec.x, floor(top + avail * 0.6 + gap), l->spec.w,
                          floor(avail * 0.4)};
  l->colorbar = (ssae_rect){floor(l->spec.x + l->spec.w + 14 * s), l->spec.y,
                            floor(16 * s), l->spec.h};
  double hop_s = (double)d->hop_length / d->sample_rate;
  l->t0 = 0.0;
  l->t1 = d->seconds > 0 ? d->seconds : (double)d->n_frames * hop_s;
  if (!(l->t1 > 0)) l->t1 = 1.0;

  float top_db = -INFINITY;
  for (size_t i = 0; i < d->n_frames * (size_t)d->n_mels; i++)
    if (isfinite(d->frames[i]) && d->frames[i] > top_db) top_db = d->frames[i];
  if (!isfinite(top_db)) top_db = 0;
  /* 80 dB of range below the loudest band, as spectrogram displays usually
   * show (librosa's top_db). */
  l->db_max = ceil(top_db / 10.0) * 10.0;
  l->db_min = l->db_max - 80.0;

  double lo = INFINITY, hi = -INFINITY;
  for (size_t i = 0; i < d->n_windows; i++) {
    double v = d->scores[i];
    if (v > 0 && isfinite(v)) {
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  }
  if (d->threshold > 0 && isfinite(d->threshold)) {
    if (d->threshold < lo) lo = d->threshold;
    if (d->threshold > hi) hi = d->threshold;
  }
  if (!isfinite(lo)) lo = hi = 1.0;
  l->score_lo = log10(lo) - 0.15;
  l->score_hi = log10(hi) + 0.15;
  if (l->score_hi - l->score_lo < 1.0) {
    double c = 0.5 * (l->score_lo + l->score_hi);
    l->score_lo = c - 0.5;
    l->score_hi = c + 0.5;
  }
}

/* The heat map as an image, one column per frame (or per group of frames
 * for long files: cairo images are at most 32767 pixels wide). */
static cairo_surface_t *heat_image(const ssae_report_data *d, const ssae_report_layout *l,
                                   size_t *cols_out, size_t *group_out) {
  size_t group = 1, max_cols = (size_t)(2 * l->spec.w) + 1;
  while (d->n_frames / group > max_cols) group++;
  size_t cols = (d->n_frames + group - 1) / group;
  if (!cols) cols = 1;
  cairo_surface_t *img = cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)cols, d->n_mels);
  if (cairo_surface_status(img) != CAIRO_STATUS_SUCCESS) return img;
  cairo_surface_flush(img);
  unsigned char *px = cairo_image_surface_get_data(img);
  int stride = cairo_image_surface_get_stride(img);
  for (size_t c = 0; c < cols; c++) {
    for (int m = 0; m < d->n_mels; m++) {
      double sum = 0;
      size_t cnt = 0;
      for (size_t t = c * group; t < (c + 1) * group && t < d->n_frames; t++, cnt++)
        sum += d->frames[t * (size_t)d->n_mels + (size_t)m];
      double v = cnt ? sum / cnt : l->db_min, rgb[3];
      ssae_colormap((v - l->db_min) / (l->db_max - l->db_min), rgb);
      uint32_t *p = (uint32_t *)(px + (size_t)(d->n_mels - 1 - m) * (size_t)stride) + c;
      *p = (uint32_t)lround(rgb[0] * 255) << 16 | (uint32_t)lround(rgb[1] * 255) << 8 |
           (uint32_t)lround(rgb[2] * 255);
    }
  }
  cairo_surface_mark_dirty(img);
  *cols_out = cols;
  *group_out = group;
  return img;
}

static void draw_spectrogram(cairo_t *cr, const ssae_report_data *d,
                             const ssae_report_layout *l, double s) {
  const ssae_rect *r = &l->spec;
  double hop_s = (double)d->hop_length / d->sample_rate;
  size_t cols = 0, group = 1;
  cairo_surface_t *img = heat_image(d, l, &cols, &group);
  if (cairo_surface_status(img) == CAIRO_STATUS_SUCCESS && d->n_frames) {
    cairo_save(cr);
    cairo_rectangle(cr, r->x, r->y, r->w, r->h);
    cairo_clip(cr);
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_paint(cr);
    /* Frame t is centred on t*hop: column c starts half a hop earlier. */
    double px_per_s = r->w / (l->t1 - l->t0);
    cairo_translate(cr, ssae_report_time_x(l, -0.5 * hop_s), r->y);
    cairo_scale(cr, px_per_s * hop_s * (double)group, r->h / d->n_mels);
    cairo_set_source_surface(cr, img, 0, 0);
    cairo_pattern_set_filter(cairo_get_source(cr), CAIRO_FILTER_NEAREST);
    cairo_paint(cr);
    cairo_restore(cr);
  }
  cairo_surface_destroy(img);
  plot_frame(cr, r);

  /* Frequency ticks at their mel positions. The image's rows are the bands,
   * band m centred on mel point m+1 of n_mels+2 equally spaced points. */
  double fmax = d->fmax > 0 ? d->fmax : d->sample_rate / 2.0;
  double m0 = hz_to_mel(d->fmin, d->htk), m1 = hz_to_mel(fmax, d->htk);
  double step = (m1 - m0) / (d->n_mels + 1);
  double lo = m0 + 0.5 * step, hi = m0 + (d->n_mels + 0.5) * step;
  static const double ticks[] = {0, 50, 100, 200, 300, 500, 1000, 1500, 2000, 3000, 4000,
                                 5000, 6000, 8000, 10000, 12000, 16000, 20000, 24000};
  double last_y = 1e9;
  char buf[32];
  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  for (size_t i = 0; i < sizeof ticks / sizeof ticks[0]; i++) {
    double mel = hz_to_mel(ticks[i], d->htk);
    if (mel < lo || mel > hi) continue;
    double y = r->y + r->h * (1.0 - (mel - lo) / (hi - lo));
    if (last_y - y < 16 * s) continue;
    last_y = y;
    cairo_move_to(cr, r->x, floor(y) + 0.5);
    cairo_line_to(cr, r->x - 5 * s, floor(y) + 0.5);
    cairo_stroke(cr);
    if (ticks[i] >= 1000) snprintf(buf, sizeof buf, "%gk", ticks[i] / 1000);
    else snprintf(buf, sizeof buf, "%g", ticks[i]);
    plot_text(cr, r->x - 8 * s, y, 1.0, 0.5, 12 * s, buf);
  }
  plot_text_vertical(cr, r->x - 62 * s, r->y + r->h / 2, 13 * s, "frequency (Hz, mel scale)");

  /* Colour bar in dB. */
  const ssae_rect *cb = &l->colorbar;
  for (int y = 0; y < (int)cb->h; y++) {
    double rgb[3];
    ssae_colormap(1.0 - (y + 0.5) / cb->h, rgb);
    cairo_set_source_rgb(cr, rgb[0], rgb[1], rgb[2]);
    cairo_rectangle(cr, cb->x, cb->y + y, cb->w, 1);
    cairo_fill(cr);
  }
  plot_frame(cr, cb);
  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  for (double v = l->db_min; v <= l->db_max + 1e-9; v += 20) {
    double y = cb->y + cb->h * (1.0 - (v - l->db_min) / (l->db_max - l->db_min));
    cairo_move_to(cr, cb->x + cb->w, floor(y) + 0.5);
    cairo_line_to(cr, cb->x + cb->w + 4 * s, floor(y) + 0.5);
    cairo_stroke(cr);
    snprintf(buf, sizeof buf, "%g", v);
    plot_text(cr, cb->x + cb->w + 6 * s, y, 0.0, 0.5, 11 * s, buf);
  }
  plot_text(cr, cb->x + cb->w / 2, cb->y - 6 * s, 0.5, 1.0, 12 * s, "dB");
}

static void time_ticks(cairo_t *cr, const ssae_report_layout *l, const ssae_rect *r,
                       int labels, double s) {
  double step = plot_tick_step(l->t1 - l->t0, 10);
  char buf[32];
  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  cairo_set_line_width(cr, 1.0);
  for (double t = ceil(l->t0 / step) * step; t <= l->t1 + 1e-9; t += step) {
    double x = floor(ssae_report_time_x(l, t)) + 0.5;
    cairo_move_to(cr, x, r->y + r->h);
    cairo_line_to(cr, x, r->y + r->h + 5 * s);
    cairo_stroke(cr);
    if (labels) {
      snprintf(buf, sizeof buf, "%g", fabs(t) < 1e-9 ? 0.0 : t);
      plot_text(cr, x, r->y + r->h + 8 * s, 0.5, 0.0, 12 * s, buf);
    }
  }
}

/* The score axis's ticks in turn (log scale): the decades inside the axis,
 * and 2 and 5 times them when it spans little. *step starts at 0; returns
 * 0 after the last tick. */
static int next_score_tick(const ssae_report_layout *l, int *step, double *v) {
  static const double mant[3] = {1, 2, 5};
  const int per = l->score_hi - l->score_lo < 2.5 ? 3 : 1;
  const int e0 = (int)floor(l->score_lo), e1 = (int)ceil(l->score_hi);
  while (e0 + *step / per <= e1) {
    int e = e0 + *step / per, k = *step % per;
    (*step)++;
    *v = mant[k] * pow(10.0, e);
    double lv = log10(*v);
    if (lv >= l->score_lo && lv <= l->score_hi) return 1;
  }
  return 0;
}

/* The next alarm span from window *i on: its pixel columns (clamped to the
 * panels), from the time of the window that turned the alarm on to that of
 * the window that turned it off, or of the last window when none did (the
 * detector's time convention, as in the monitor's events). Returns 0 when
 * no span is left. */
static int next_alarm_span(const ssae_report_data *d, const ssae_report_layout *l, size_t *i,
                           double *x0, double *x1) {
  double hop_s = (double)d->hop_length / d->sample_rate;
  size_t k = *i;
  while (k < d->n_windows && !d->alarm[k]) k++;
  if (k == d->n_windows) return 0;
  size_t j = k;
  while (j < d->n_windows && d->alarm[j]) j++;
  double t_on = d->window_t0 + (double)k * hop_s;
  double t_off = d->window_t0 + (double)(j < d->n_windows ? j : d->n_windows - 1) * hop_s;
  *x0 = fmax(ssae_report_time_x(l, t_on), l->spec.x);
  *x1 = fmin(ssae_report_time_x(l, t_off), l->spec.x + l->spec.w);
  *i = j;
  return 1;
}

static void draw_scores(cairo_t *cr, const ssae_report_data *d, const ssae_report_layout *l,
                        double s) {
  const ssae_rect *r = &l->scores;
  double hop_s = (double)d->hop_length / d->sample_rate;
  /* A window's score belongs to the middle of its frames. */
  double centre = 0.5 * (d->frames_per_window - 1) * hop_s;

  cairo_save(cr);
  cairo_rectangle(cr, r->x, r->y, r->w, r->h);
  cairo_clip(cr);
  /* Alarm spans: shaded in the score panel and marked by a bar over the
   * spectrogram. */
  double x0, x1;
  for (size_t i = 0; next_alarm_span(d, l, &i, &x0, &x1);) {
    cairo_set_source_rgb(cr, SSAE_PLOT_ALARM_RGB);
    cairo_rectangle(cr, x0, r->y, x1 - x0, r->h);
    cairo_fill(cr);
  }
  /* Grid at the score ticks. */
  char buf[32];
  double v;
  for (int step = 0; next_score_tick(l, &step, &v);) {
    double y = floor(ssae_report_score_y(l, v)) + 0.5;
    cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
    cairo_move_to(cr, r->x, y);
    cairo_line_to(cr, r->x + r->w, y);
    cairo_stroke(cr);
  }
  if (d->n_windows) {
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    cairo_set_source_rgb(cr, 0.60, 0.70, 0.88);
    cairo_set_line_width(cr, 1.0 * s);
    cairo_new_path(cr);
    for (size_t i = 0; i < d->n_windows; i++)
      cairo_line_to(cr, ssae_report_time_x(l, i * hop_s + centre),
                    ssae_report_score_y(l, d->scores[i]));
    cairo_stroke(cr);
    /* The smoothed line breaks where the detector has no evidence (digital
     * silence) and starts afresh after it. */
    cairo_set_source_rgb(cr, 0.08, 0.20, 0.50);
    cairo_set_line_width(cr, 2.0 * s);
    for (size_t i = 0; i < d->n_windows; i++) {
      if (!isfinite(d->smoothed[i])) {
        cairo_new_sub_path(cr);
        continue;
      }
      cairo_line_to(cr, ssae_report_time_x(l, i * hop_s + centre),
                    ssae_report_score_y(l, d->smoothed[i]));
    }
    cairo_stroke(cr);
  }
  cairo_restore(cr);
  if (isfinite(d->threshold)) {
    /* Whole pixel rows, so that the line has one clean colour. */
    double y = floor(ssae_report_score_y(l, d->threshold)), lw = fmax(2.0, floor(2 * s));
    cairo_set_source_rgb(cr, SSAE_PLOT_THRESHOLD_RGB);
    cairo_rectangle(cr, r->x, y - floor(lw / 2), r->w, lw);
    cairo_fill(cr);
  }
  plot_frame(cr, r);

  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  for (int step = 0; next_score_tick(l, &step, &v);) {
    double y = floor(ssae_report_score_y(l, v)) + 0.5;
    cairo_move_to(cr, r->x, y);
    cairo_line_to(cr, r->x - 5 * s, y);
    cairo_stroke(cr);
    snprintf(buf, sizeof buf, "%g", v);
    plot_text(cr, r->x - 8 * s, y, 1.0, 0.5, 11 * s, buf);
  }
  plot_text_vertical(cr, r->x - 62 * s, r->y + r->h / 2, 13 * s, "window score");
  time_ticks(cr, l, r, 1, s);
  time_ticks(cr, l, &l->spec, 0, s);
  plot_text(cr, r->x + r->w / 2, r->y + r->h + 28 * s, 0.5, 0.0, 13 * s, "time (s)");

  /* Legend under the panel, right-aligned. */
  double y = r->y + r->h + 46 * s, x = r->x + r->w, adv[4];
  struct {
    double rgb[3];
    double lw;
    const char *txt;
  } items[4] = {{{0.60, 0.70, 0.88}, 1.5, "window score"},
                {{0.08, 0.20, 0.50}, 2.5, "smoothed"},
                {{SSAE_PLOT_THRESHOLD_RGB}, 2.5, "threshold"},
                {{SSAE_PLOT_ALARM_RGB}, 9.0, "alarm"}};
  cairo_set_font_size(cr, 12 * s);
  for (int i = 0; i < 4; i++) {
    cairo_text_extents_t e;
    cairo_text_extents(cr, items[i].txt, &e);
    adv[i] = 27 * s + e.x_advance + 18 * s;
    x -= adv[i];
  }
  for (int i = 0; i < 4; i++) {
    cairo_set_source_rgb(cr, items[i].rgb[0], items[i].rgb[1], items[i].rgb[2]);
    cairo_set_line_width(cr, items[i].lw * s);
    cairo_move_to(cr, x, y);
    cairo_line_to(cr, x + 22 * s, y);
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    plot_text(cr, x + 27 * s, y, 0.0, 0.5, 12 * s, items[i].txt);
    x += adv[i];
  }
  cairo_set_line_width(cr, 1.0);
}

static void draw_alarm_bar(cairo_t *cr, const ssae_report_data *d, const ssae_report_layout *l,
                           double s) {
  double x0, x1;
  for (size_t i = 0; next_alarm_span(d, l, &i, &x0, &x1);) {
    cairo_set_source_rgb(cr, SSAE_PLOT_THRESHOLD_RGB);
    cairo_rectangle(cr, x0, l->spec.y - 7 * s, x1 - x0, 5 * s);
    cairo_fill(cr);
  }
}

static void draw_title(cairo_t *cr, const ssae_report_data *d, const ssae_report_layout *l,
                       double s) {
  size_t spans = 0;
  for (size_t i = 0; i < d->n_windows; i++) {
    if (d->alarm[i] && (i == 0 || !d->alarm[i - 1])) spans++;
  }
  int anomalous = isfinite(d->threshold) && d->file_score > d->threshold;
  const char *verdict = !isfinite(d->threshold) ? "no threshold"
                        : anomalous             ? "ANOMALY"
                        : spans                 ? "normal overall, with alarms"
                                                : "normal";
  char head[512], tail[256];
  snprintf(head, sizeof head, "%s: ", d->name ? d->name : "");
  if (isfinite(d->threshold))
    snprintf(tail, sizeof tail, "   file score %.4g (threshold %.4g), %zu alarm span%s",
             d->file_score, d->threshold, spans, spans == 1 ? "" : "s");
  else
    snprintf(tail, sizeof tail, "   file score %.4g", d->file_score);
  cairo_text_extents_t e1, e2;
  cairo_set_font_size(cr, 17 * s);
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_BOLD);
  cairo_text_extents(cr, head, &e1);
  cairo_text_extents(cr, verdict, &e2);
  double x = l->spec.x, y = 24 * s;
  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  plot_text(cr, x, y, 0, 0.5, 17 * s, head);
  if (anomalous || spans) cairo_set_source_rgb(cr, 0.80, 0.05, 0.10);
  else if (!isfinite(d->threshold)) cairo_set_source_rgb(cr, 0.45, 0.45, 0.45);
  else cairo_set_source_rgb(cr, 0.05, 0.50, 0.15);
  plot_text(cr, x + e1.x_advance, y, 0, 0.5, 17 * s, verdict);
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  plot_text(cr, x + e1.x_advance + e2.x_advance, y, 0, 0.5, 14 * s, tail);
  if (d->subtitle) {
    cairo_set_source_rgb(cr, 0.35, 0.35, 0.35);
    plot_text(cr, x, y + 22 * s, 0, 0.5, 12 * s, d->subtitle);
  }
}

int ssae_report_draw(const ssae_report_data *d, const char *path, int width, int height,
                     ssae_report_layout *layout, ssae_err *err) {
  if (plot_size(&width, &height, 1200, 800, err)) return -1;
  if (d->n_mels < 1 || d->sample_rate < 1 || d->hop_length < 1 || d->frames_per_window < 1)
    return ssae_err_set(err, "report: bad feature settings");
  if (d->n_windows && (!d->scores || !d->smoothed || !d->alarm))
    return ssae_err_set(err, "report: window scores missing");
  ssae_report_layout l;
  layout_compute(d, width, height, &l);
  plot_target t;
  if (plot_open(&t, path, width, height, err)) return -1;
  double s = height / 800.0;
  cairo_set_line_width(t.cr, 1.0);
  draw_title(t.cr, d, &l, s);
  draw_spectrogram(t.cr, d, &l, s);
  draw_alarm_bar(t.cr, d, &l, s);
  draw_scores(t.cr, d, &l, s);
  if (plot_close(&t, 1, err)) return -1;
  if (layout) *layout = l;
  return 0;
}
