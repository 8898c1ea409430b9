/* The report picture: size, panels where the layout says, the heat map's
 * colours on the right rows and columns, the threshold line's row, the alarm
 * shading; the evaluation plot's threshold column; SVG output. */
#include <cairo.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../ssae_test.h"
#include "ssae_detector.h"
#include "ssae_features.h"
#include "ssae_plot.h"
#include "ssae_silence.h"

typedef struct {
  cairo_surface_t *s;
  unsigned char *px;
  int stride, w, h;
} png;

static int png_load(png *p, const char *path) {
  p->s = cairo_image_surface_create_from_png(path);
  if (cairo_surface_status(p->s) != CAIRO_STATUS_SUCCESS) return -1;
  p->px = cairo_image_surface_get_data(p->s);
  p->stride = cairo_image_surface_get_stride(p->s);
  p->w = cairo_image_surface_get_width(p->s);
  p->h = cairo_image_surface_get_height(p->s);
  return 0;
}

static void pixel(const png *p, double x, double y, double rgb[3]) {
  int xi = (int)floor(x), yi = (int)floor(y);
  uint32_t v = *((uint32_t *)(p->px + (size_t)yi * p->stride) + xi);
  rgb[0] = ((v >> 16) & 255) / 255.0;
  rgb[1] = ((v >> 8) & 255) / 255.0;
  rgb[2] = (v & 255) / 255.0;
}

static int near(const double a[3], double r, double g, double b, double tol) {
  return fabs(a[0] - r) <= tol && fabs(a[1] - g) <= tol && fabs(a[2] - b) <= tol;
}

int main(void) {
  char dir[] = "/tmp/ssae-report-test-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char path[256], svg[256], evpath[256];
  snprintf(path, sizeof path, "%s/r.png", dir);
  snprintf(svg, sizeof svg, "%s/r.svg", dir);
  snprintf(evpath, sizeof evpath, "%s/e.png", dir);

  enum { M = 64, T = 313, F = 5, W = T - F + 1 };
  static float frames[T * M], scores[W], smoothed[W];
  static unsigned char alarm[W], silent[W];
  /* Low bands at -60 dB, high bands at 0 dB; frames 150..159 loud in the
   * low bands too. */
  for (int t = 0; t < T; t++)
    for (int m = 0; m < M; m++)
      frames[t * M + m] = (m >= M / 2 || (t >= 150 && t < 160)) ? 0.0f : -60.0f;
  /* Windows 260..269 touch digital silence: no smoothed score there. */
  for (int w = 0; w < W; w++) {
    scores[w] = (w >= 100 && w < 200) ? 0.2f : 0.01f;
    silent[w] = w >= 260 && w < 270;
  }
  double hop_s = 512.0 / 16000.0, thr = 0.05;
  ssae_detector_params dp;
  ssae_detector_params_default(&dp);
  dp.threshold = thr;
  ssae_detector_run(&dp, hop_s, scores, silent, W, smoothed, alarm);
  CHECK(!alarm[99] && alarm[110] && alarm[199] && !alarm[215], "detector spans");
  CHECK(!alarm[100] && !alarm[101], "alarm needs 3 smoothed scores above");
  CHECK(isnan(smoothed[265]) && isfinite(smoothed[270]), "no smoothed score in silence");
  size_t w_on = 0, w_off = 0;
  for (size_t w = 1; w < W; w++) {
    if (alarm[w] && !alarm[w - 1]) w_on = w;
    if (!alarm[w] && alarm[w - 1]) w_off = w;
  }
  ssae_feat_cfg feat;
  ssae_feat_cfg_default(&feat);

  ssae_report_data d = {0};
  d.name = "synthetic.wav";
  d.frames = frames;
  d.n_frames = T;
  d.n_mels = M;
  d.sample_rate = 16000;
  d.hop_length = 512;
  d.fmin = 0;
  d.fmax = 8000;
  d.seconds = 10.0;
  d.scores = scores;
  d.smoothed = smoothed;
  d.alarm = alarm;
  d.n_windows = W;
  d.frames_per_window = F;
  d.window_t0 = ssae_window_time(&feat, 0);
  d.threshold = thr;
  d.file_score = 0.07;
  d.subtitle = "model: test";
  ssae_report_layout l;
  ssae_err err;
  if (ssae_report_draw(&d, path, 0, 0, &l, &err)) {
    printf("FAIL draw: %s\n", err.msg);
    return 1;
  }
  png p;
  if (png_load(&p, path)) {
    printf("FAIL: cannot read %s back\n", path);
    return 1;
  }
  CHECK(p.w == 1200 && p.h == 800, "size %dx%d", p.w, p.h);
  /* Panels stacked: spectrogram above scores, same x extent. */
  CHECK(l.spec.y + l.spec.h < l.scores.y, "spectrogram above the score panel");
  CHECK(l.spec.x == l.scores.x && l.spec.w == l.scores.w, "shared time axis");
  CHECK(l.spec.h > 0.3 * p.h && l.scores.h > 0.15 * p.h, "panel sizes");

  double rgb[3], want[3];
  /* Heat map: a high band (0 dB = top of the colour scale) and a low band
   * (-60 dB, a quarter up the 80 dB scale), away from frames 150..159. */
  double x_quiet = ssae_report_time_x(&l, 100 * hop_s);
  double y_hi = l.spec.y + l.spec.h * (M - 1 - 50 + 0.5) / M;
  double y_lo = l.spec.y + l.spec.h * (M - 1 - 10 + 0.5) / M;
  ssae_colormap(1.0, want);
  pixel(&p, x_quiet, y_hi, rgb);
  CHECK(near(rgb, want[0], want[1], want[2], 0.02), "high band colour %.2f %.2f %.2f", rgb[0],
        rgb[1], rgb[2]);
  ssae_colormap((-60.0 - l.db_min) / (l.db_max - l.db_min), want);
  pixel(&p, x_quiet, y_lo, rgb);
  CHECK(near(rgb, want[0], want[1], want[2], 0.02), "low band colour %.2f %.2f %.2f", rgb[0],
        rgb[1], rgb[2]);
  /* The loud frames land at their time. */
  ssae_colormap(1.0, want);
  pixel(&p, ssae_report_time_x(&l, 155 * hop_s), y_lo, rgb);
  CHECK(near(rgb, want[0], want[1], want[2], 0.02), "loud frames at 155 hops");
  pixel(&p, ssae_report_time_x(&l, 145 * hop_s), y_lo, rgb);
  CHECK(!near(rgb, want[0], want[1], want[2], 0.1), "quiet frames at 145 hops");

  /* Threshold line: its row has the threshold colour across the panel; rows
   * 6 px away do not. */
  double ty = floor(ssae_report_score_y(&l, thr));
  int on = 0, off = 0, n = 0;
  for (double x = l.scores.x + 2; x < l.scores.x + l.scores.w - 2; x += 3, n++) {
    pixel(&p, x, ty, rgb);
    on += near(rgb, SSAE_PLOT_THRESHOLD_RGB, 0.02);
    pixel(&p, x, ty + 6, rgb);
    off += near(rgb, SSAE_PLOT_THRESHOLD_RGB, 0.02);
  }
  CHECK(on == n, "threshold row: %d of %d pixels", on, n);
  CHECK(off == 0, "row under the threshold line: %d threshold pixels", off);

  /* Alarm shading inside the span, white outside it (between the threshold
   * line and the low scores, where no line is drawn). */
  double ya = 0.5 * (ty + ssae_report_score_y(&l, 0.01));
  int shaded = 0, white = 0;
  for (int k = -3; k <= 3; k++) {
    pixel(&p, ssae_report_time_x(&l, 150 * hop_s), ya + k, rgb);
    shaded += near(rgb, SSAE_PLOT_ALARM_RGB, 0.02);
    pixel(&p, ssae_report_time_x(&l, 40 * hop_s), ya + k, rgb);
    white += near(rgb, 1, 1, 1, 0.02);
  }
  CHECK(shaded >= 5, "alarm shading: %d of 7", shaded);
  CHECK(white >= 5, "no shading outside the alarm: %d of 7", white);
  /* The shading runs from the time of the window that turned the alarm on
   * to that of the one that turned it off (the events' times). */
  double x_on = ssae_report_time_x(&l, ssae_window_time(&feat, w_on));
  double x_off = ssae_report_time_x(&l, ssae_window_time(&feat, w_off));
  int edges = 0;
  for (int k = -3; k <= 3; k++) {
    pixel(&p, x_on + 2, ya + k, rgb);
    edges += near(rgb, SSAE_PLOT_ALARM_RGB, 0.02);
    pixel(&p, x_on - 2, ya + k, rgb);
    edges += near(rgb, 1, 1, 1, 0.02);
    pixel(&p, x_off - 2, ya + k, rgb);
    edges += near(rgb, SSAE_PLOT_ALARM_RGB, 0.02);
    pixel(&p, x_off + 2, ya + k, rgb);
    edges += near(rgb, 1, 1, 1, 0.02);
  }
  CHECK(edges >= 24, "alarm span edges at windows %zu and %zu: %d of 28", w_on, w_off, edges);
  /* No smoothed line over the silent windows. */
  int gap_dark = 0;
  double xg = ssae_report_time_x(&l, (265 + 2) * hop_s);
  for (double y = l.scores.y + 1; y < l.scores.y + l.scores.h - 1; y++) {
    pixel(&p, xg, y, rgb);
    gap_dark += near(rgb, 0.08, 0.20, 0.50, 0.1);
  }
  CHECK(gap_dark == 0, "smoothed line drawn over digital silence (%d pixels)", gap_dark);
  /* The smoothed score's line is above the threshold in the span. */
  int dark = 0;
  double xs = ssae_report_time_x(&l, (150 + 2) * hop_s), ys = ssae_report_score_y(&l, 0.2);
  for (int k = -2; k <= 2; k++) {
    pixel(&p, xs, ys + k, rgb);
    dark += near(rgb, 0.08, 0.20, 0.50, 0.1);
  }
  CHECK(dark >= 1, "smoothed line at 0.2 in the alarm span");
  cairo_surface_destroy(p.s);

  /* Half size: the layout scales. */
  if (ssae_report_draw(&d, path, 600, 400, &l, &err)) {
    printf("FAIL draw small: %s\n", err.msg);
    failures++;
  } else if (png_load(&p, path) == 0) {
    CHECK(p.w == 600 && p.h == 400, "small size %dx%d", p.w, p.h);
    pixel(&p, l.scores.x + l.scores.w / 2, floor(ssae_report_score_y(&l, thr)), rgb);
    CHECK(near(rgb, SSAE_PLOT_THRESHOLD_RGB, 0.02), "small threshold row");
    cairo_surface_destroy(p.s);
  }

  /* SVG. */
  if (ssae_report_draw(&d, svg, 0, 0, NULL, &err)) {
    printf("FAIL svg: %s\n", err.msg);
    failures++;
  } else {
    FILE *f = fopen(svg, "r");
    char head[512] = {0};
    size_t got = f ? fread(head, 1, sizeof head - 1, f) : 0;
    if (f) fclose(f);
    CHECK(got > 100 && strstr(head, "<svg"), "svg header");
  }
  CHECK(ssae_report_draw(&d, "/tmp/x.jpg", 0, 0, NULL, &err) == -1 && strstr(err.msg, ".png"),
        "unknown extension refused");

  /* Evaluation plot: the threshold's column in the histogram panel. */
  double es[40];
  int el[40];
  for (int i = 0; i < 40; i++) {
    el[i] = i >= 20;
    es[i] = (el[i] ? 0.1 : 0.01) * (1.0 + 0.05 * (i % 20));
  }
  ssae_evalplot_section sec[2] = {{"synthetic", es, el, 40, 1.0, 1.0},
                                  {"again", es, el, 40, 1.0, 1.0}};
  ssae_evalplot_layout el_l;
  if (ssae_evalplot_draw(sec, 2, 0.03, 0.1, "eval test", evpath, 0, 0, &el_l, &err)) {
    printf("FAIL evalplot: %s\n", err.msg);
    failures++;
  } else if (png_load(&p, evpath) == 0) {
    CHECK(p.w == 1200 && p.h == 560, "eval plot size %dx%d", p.w, p.h);
    CHECK(el_l.roc.x + el_l.roc.w < el_l.hist.x, "ROC left of the histograms");
    double tx = floor(ssae_evalplot_score_x(&el_l, 0.03));
    int col = 0, cn = 0;
    for (double y = el_l.hist.y + 60; y < el_l.hist.y + el_l.hist.h - 2; y += 4, cn++) {
      pixel(&p, tx, y, rgb);
      col += near(rgb, SSAE_PLOT_THRESHOLD_RGB, 0.02);
    }
    CHECK(col == cn, "threshold column: %d of %d", col, cn);
    /* Perfect ROCs (two sections, drawn in two colours): they run up the
     * left edge... */
    pixel(&p, el_l.roc.x - 1, el_l.roc.y + el_l.roc.h * 0.5, rgb);
    CHECK(near(rgb, 0.08, 0.20, 0.50, 0.15) || near(rgb, 0.90, 0.45, 0.05, 0.15),
          "ROC up the left edge %.2f %.2f %.2f", rgb[0],
          rgb[1], rgb[2]);
    /* ... and nothing of it crosses the lower right (a stray line from the
     * legend, say): only background, grid and the dashed diagonal there. */
    int stray = 0;
    for (double f = 0.1; f < 0.95; f += 0.005)
      for (double t = 0.02; t < 0.5; t += 0.28) {
        pixel(&p, el_l.roc.x + el_l.roc.w * f, el_l.roc.y + el_l.roc.h * (1 - t), rgb);
        stray += (rgb[2] - rgb[0] > 0.2 && rgb[0] < 0.5) || (rgb[0] - rgb[2] > 0.4);
      }
    CHECK(stray == 0, "%d curve-coloured pixels in the lower right of the ROC", stray);
    cairo_surface_destroy(p.s);
  }

  if (getenv("SSAE_KEEP_PICTURES")) printf("pictures in %s\n", dir);
  else {
  unlink(path);
  unlink(svg);
  unlink(evpath);
  rmdir(dir);
  }
  ssae_plot_cleanup();
  return test_done("report plot: all checks passed");
}
