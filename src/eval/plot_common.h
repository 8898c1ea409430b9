/* Helpers shared by the pictures (internal). */
#ifndef SSAE_PLOT_COMMON_H
#define SSAE_PLOT_COMMON_H

#include <cairo.h>

#include "ssae_err.h"
#include "ssae_outfile.h"
#include "ssae_plot.h"

typedef struct plot_target {
  cairo_surface_t *surface;
  cairo_t *cr;
  const char *path;
  ssae_outfile *out; /* the file being written (committed by plot_close) */
  int png;
} plot_target;

/* The picture's size: *width x *height, or def_w x def_h where either is 0
 * or less; -1 (the reason in err) outside 400x300 .. 16000x16000. */
int plot_size(int *width, int *height, int def_w, int def_h, ssae_err *err);

/* Surface for path by extension (.png, .svg); a white background. */
int plot_open(plot_target *t, const char *path, int width, int height, ssae_err *err);
/* Writes the file (PNG) or finishes it (SVG) and frees everything. With
 * ok = 0 it only frees. */
int plot_close(plot_target *t, int ok, ssae_err *err);

/* Text anchored at (x, y): ax, ay in 0..1 pick the point of the text's
 * box (0, 0 top left; 0.5, 0.5 centre). */
void plot_text(cairo_t *cr, double x, double y, double ax, double ay, double size,
               const char *s);
void plot_text_vertical(cairo_t *cr, double x, double y, double size, const char *s);

/* "Nice" tick step (1, 2, 5 x 10^k) for about n ticks over span. */
double plot_tick_step(double span, int n);

void plot_frame(cairo_t *cr, const ssae_rect *r);

#endif
