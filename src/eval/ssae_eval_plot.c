/* `ssae eval --plot`: ROC curves (left) and score histograms (right). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot_common.h"
#include "ssae_plot.h"

double ssae_evalplot_score_x(const ssae_evalplot_layout *l, double score) {
  double v = score > 0 ? log10(score) : l->hist_lo;
  return l->hist.x + l->hist.w * (v - l->hist_lo) / (l->hist_hi - l->hist_lo);
}

static const double curve_rgb[6][3] = {{0.08, 0.20, 0.50}, {0.90, 0.45, 0.05},
                                       {0.15, 0.55, 0.20}, {0.55, 0.25, 0.65},
                                       {0.55, 0.35, 0.20}, {0.30, 0.30, 0.30}};

static void draw_roc(cairo_t *cr, const ssae_evalplot_section *sec, size_t n_sec,
                     double max_fpr, const ssae_rect *r, double s) {
  /* The partial-AUC region. */
  cairo_set_source_rgb(cr, 0.93, 0.93, 0.97);
  cairo_rectangle(cr, r->x, r->y, r->w * max_fpr, r->h);
  cairo_fill(cr);
  char buf[128];
  cairo_set_line_width(cr, 1.0);
  for (int i = 0; i <= 10; i += 2) {
    double f = i / 10.0, x = floor(r->x + r->w * f) + 0.5, y = floor(r->y + r->h * (1 - f)) + 0.5;
    cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
    cairo_move_to(cr, x, r->y);
    cairo_line_to(cr, x, r->y + r->h);
    cairo_move_to(cr, r->x, y);
    cairo_line_to(cr, r->x + r->w, y);
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    snprintf(buf, sizeof buf, "%g", f);
    plot_text(cr, x, r->y + r->h + 6 * s, 0.5, 0.0, 12 * s, buf);
    plot_text(cr, r->x - 6 * s, y, 1.0, 0.5, 12 * s, buf);
  }
  cairo_set_source_rgb(cr, 0.6, 0.6, 0.6);
  double dash[1] = {4 * s};
  cairo_set_dash(cr, dash, 1, 0);
  cairo_move_to(cr, r->x, r->y + r->h);
  cairo_line_to(cr, r->x + r->w, r->y);
  cairo_stroke(cr);
  cairo_set_dash(cr, NULL, 0, 0);
  for (size_t k = 0; k < n_sec; k++) {
    ssae_roc roc;
    if (ssae_roc_compute(sec[k].scores, sec[k].labels, sec[k].n, &roc, NULL)) continue;
    const double *c = curve_rgb[k % 6];
    cairo_set_source_rgb(cr, c[0], c[1], c[2]);
    cairo_set_line_width(cr, 2.0 * s);
    cairo_new_path(cr); /* the legend's text left a current point */
    for (size_t i = 0; i < roc.n; i++)
      cairo_line_to(cr, r->x + r->w * roc.fpr[i], r->y + r->h * (1 - roc.tpr[i]));
    cairo_stroke(cr);
    ssae_roc_free(&roc);
    double ly = r->y + r->h - (18.0 * (double)(n_sec - k) + 4) * s;
    cairo_move_to(cr, r->x + r->w * 0.42, ly);
    cairo_line_to(cr, r->x + r->w * 0.42 + 18 * s, ly);
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    snprintf(buf, sizeof buf, "%s  AUC %.3f  pAUC %.3f", sec[k].name ? sec[k].name : "",
             sec[k].auc, sec[k].pauc);
    plot_text(cr, r->x + r->w * 0.42 + 22 * s, ly, 0.0, 0.5, 11 * s, buf);
  }
  cairo_set_line_width(cr, 1.0);
  plot_frame(cr, r);
  plot_text(cr, r->x + r->w / 2, r->y + r->h + 26 * s, 0.5, 0.0, 13 * s, "false positive rate");
  plot_text_vertical(cr, r->x - 44 * s, r->y + r->h / 2, 13 * s, "true positive rate");
  snprintf(buf, sizeof buf, "ROC (shaded: FPR <= %g, the pAUC region)", max_fpr);
  plot_text(cr, r->x, r->y - 8 * s, 0.0, 1.0, 13 * s, buf);
}

static void draw_hist(cairo_t *cr, const ssae_evalplot_section *sec, size_t n_sec,
                      double threshold, const ssae_evalplot_layout *l, double s) {
  const ssae_rect *r = &l->hist;
  enum { BINS = 30 };
  size_t count[2][BINS] = {{0}}, peak = 1;
  double bw = (l->hist_hi - l->hist_lo) / BINS;
  for (size_t k = 0; k < n_sec; k++)
    for (size_t i = 0; i < sec[k].n; i++) {
      double v = sec[k].scores[i] > 0 ? log10(sec[k].scores[i]) : l->hist_lo;
      int b = (int)floor((v - l->hist_lo) / bw);
      if (b < 0) b = 0;
      if (b >= BINS) b = BINS - 1;
      size_t c = ++count[sec[k].labels[i] ? 1 : 0][b];
      if (c > peak) peak = c;
    }
  static const double rgb[2][3] = {{0.20, 0.40, 0.80}, {0.95, 0.50, 0.10}};
  for (int cls = 0; cls < 2; cls++) {
    cairo_set_source_rgba(cr, rgb[cls][0], rgb[cls][1], rgb[cls][2], 0.55);
    for (int b = 0; b < BINS; b++) {
      if (!count[cls][b]) continue;
      double h = r->h * 0.92 * (double)count[cls][b] / (double)peak;
      cairo_rectangle(cr, r->x + r->w * b / BINS, r->y + r->h - h, r->w / BINS, h);
      cairo_fill(cr);
    }
  }
  char buf[64];
  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  /* Decades, and 2 and 5 between them when the axis spans little. */
  int dense = l->hist_hi - l->hist_lo < 2.5;
  for (int e = (int)floor(l->hist_lo); e <= (int)ceil(l->hist_hi); e++) {
    static const double mant[3] = {1, 2, 5};
    for (int k = 0; k < (dense ? 3 : 1); k++) {
      double v = mant[k] * pow(10.0, e), lv = log10(v);
      if (lv < l->hist_lo || lv > l->hist_hi) continue;
      double x = ssae_evalplot_score_x(l, v);
      cairo_move_to(cr, floor(x) + 0.5, r->y + r->h);
      cairo_line_to(cr, floor(x) + 0.5, r->y + r->h + 5 * s);
      cairo_stroke(cr);
      snprintf(buf, sizeof buf, "%g", v);
      plot_text(cr, x, r->y + r->h + 8 * s, 0.5, 0.0, 12 * s, buf);
    }
  }
  double step = plot_tick_step((double)peak / 0.92, 5);
  for (double c = 0; c <= (double)peak / 0.92; c += step) {
    double y = floor(r->y + r->h - r->h * 0.92 * c / (double)peak) + 0.5;
    cairo_move_to(cr, r->x, y);
    cairo_line_to(cr, r->x - 5 * s, y);
    cairo_stroke(cr);
    snprintf(buf, sizeof buf, "%g", c);
    plot_text(cr, r->x - 8 * s, y, 1.0, 0.5, 12 * s, buf);
  }
  if (isfinite(threshold)) {
    double x = floor(ssae_evalplot_score_x(l, threshold)), lw = fmax(2.0, floor(2 * s));
    cairo_set_source_rgb(cr, SSAE_PLOT_THRESHOLD_RGB);
    cairo_rectangle(cr, x - floor(lw / 2), r->y, lw, r->h);
    cairo_fill(cr);
  }
  plot_frame(cr, r);
  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  plot_text(cr, r->x + r->w / 2, r->y + r->h + 26 * s, 0.5, 0.0, 13 * s,
            "file score (log scale)");
  plot_text_vertical(cr, r->x - 44 * s, r->y + r->h / 2, 13 * s, "files");
  plot_text(cr, r->x, r->y - 8 * s, 0.0, 1.0, 13 * s, "score histograms");
  const char *names[3] = {"normal", "anomalous", "threshold"};
  double x = r->x + r->w - 120 * s, y = r->y + 14 * s;
  for (int i = 0; i < 3; i++) {
    if (i < 2) cairo_set_source_rgba(cr, rgb[i][0], rgb[i][1], rgb[i][2], 0.55);
    else cairo_set_source_rgb(cr, SSAE_PLOT_THRESHOLD_RGB);
    cairo_rectangle(cr, x, y + i * 18 * s - 5 * s, 16 * s, 10 * s);
    cairo_fill(cr);
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    plot_text(cr, x + 22 * s, y + i * 18 * s, 0.0, 0.5, 12 * s, names[i]);
  }
}

int ssae_evalplot_draw(const ssae_evalplot_section *sec, size_t n_sec, double threshold,
                       double max_fpr, const char *title, const char *path, int width,
                       int height, ssae_evalplot_layout *layout, ssae_err *err) {
  if (plot_size(&width, &height, 1200, 560, err)) return -1;
  ssae_evalplot_layout l;
  memset(&l, 0, sizeof l);
  l.width = width;
  l.height = height;
  double s = height / 560.0, top = 80 * s, bottom = 64 * s;
  double side = fmin(height - top - bottom, width * 0.5 - 110 * s);
  l.roc = (ssae_rect){floor(70 * s), floor(top), floor(side), floor(side)};
  double hx = l.roc.x + l.roc.w + 100 * s;
  l.hist = (ssae_rect){floor(hx), floor(top), floor(width - hx - 30 * s), floor(side)};
  double lo = INFINITY, hi = -INFINITY;
  for (size_t k = 0; k < n_sec; k++)
    for (size_t i = 0; i < sec[k].n; i++)
      if (sec[k].scores[i] > 0 && isfinite(sec[k].scores[i])) {
        lo = fmin(lo, sec[k].scores[i]);
        hi = fmax(hi, sec[k].scores[i]);
      }
  if (threshold > 0 && isfinite(threshold)) {
    lo = fmin(lo, threshold);
    hi = fmax(hi, threshold);
  }
  if (!isfinite(lo)) lo = hi = 1.0;
  l.hist_lo = log10(lo) - 0.1;
  l.hist_hi = log10(hi) + 0.1;
  if (l.hist_hi - l.hist_lo < 0.5) {
    double c = 0.5 * (l.hist_lo + l.hist_hi);
    l.hist_lo = c - 0.25;
    l.hist_hi = c + 0.25;
  }
  plot_target t;
  if (plot_open(&t, path, width, height, err)) return -1;
  cairo_set_source_rgb(t.cr, 0.1, 0.1, 0.1);
  cairo_select_font_face(t.cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_BOLD);
  plot_text(t.cr, l.roc.x, 26 * s, 0.0, 0.5, 17 * s, title ? title : "ssae eval");
  cairo_select_font_face(t.cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  draw_roc(t.cr, sec, n_sec, max_fpr, &l.roc, s);
  draw_hist(t.cr, sec, n_sec, threshold, &l, s);
  if (plot_close(&t, 1, err)) return -1;
  if (layout) *layout = l;
  return 0;
}
