#include "plot_common.h"

#include <cairo-svg.h>
#include <fontconfig/fontconfig.h>
#include <math.h>
#include <string.h>
#include <strings.h>

/* cairo writes through this into the output file (the output discipline:
 * temporary, checked, renamed at plot_close). */
static cairo_status_t to_outfile(void *closure, const unsigned char *data, unsigned int len) {
  return ssae_outfile_write(closure, data, len) ? CAIRO_STATUS_WRITE_ERROR : CAIRO_STATUS_SUCCESS;
}

int plot_open(plot_target *t, const char *path, int width, int height, ssae_err *err) {
  memset(t, 0, sizeof *t);
  t->path = path;
  const char *dot = strrchr(path, '.');
  int svg = dot && !strcasecmp(dot, ".svg");
  if (!svg && !(dot && !strcasecmp(dot, ".png")))
    return ssae_err_set(err, "%s: the picture's name must end in .png or .svg", path);
  if (!(t->out = ssae_outfile_open(path, err))) return -1;
  if (svg) {
    t->surface = cairo_svg_surface_create_for_stream(to_outfile, t->out, width, height);
  } else {
    t->png = 1;
    t->surface = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, width, height);
  }
  if (cairo_surface_status(t->surface) != CAIRO_STATUS_SUCCESS) {
    ssae_err_set(err, "%s: cannot create the picture: %s", path,
                 cairo_status_to_string(cairo_surface_status(t->surface)));
    cairo_surface_destroy(t->surface);
    ssae_outfile_abort(t->out);
    memset(t, 0, sizeof *t);
    return -1;
  }
  t->cr = cairo_create(t->surface);
  cairo_set_source_rgb(t->cr, 1, 1, 1);
  cairo_paint(t->cr);
  cairo_select_font_face(t->cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                         CAIRO_FONT_WEIGHT_NORMAL);
  return 0;
}

int plot_close(plot_target *t, int ok, ssae_err *err) {
  int rc = 0;
  if (t->cr) {
    if (ok && cairo_status(t->cr) != CAIRO_STATUS_SUCCESS)
      rc = ssae_err_set(err, "%s: drawing failed: %s", t->path,
                        cairo_status_to_string(cairo_status(t->cr)));
    cairo_destroy(t->cr);
  }
  if (t->surface) {
    if (ok && !rc && t->png) {
      cairo_status_t st = cairo_surface_write_to_png_stream(t->surface, to_outfile, t->out);
      if (st != CAIRO_STATUS_SUCCESS && !ssae_outfile_failed(t->out))
        rc = ssae_err_set(err, "%s: cannot write the picture: %s", t->path,
                          cairo_status_to_string(st));
    }
    cairo_surface_finish(t->surface);
    if (ok && !rc && cairo_surface_status(t->surface) != CAIRO_STATUS_SUCCESS &&
        !ssae_outfile_failed(t->out))
      rc = ssae_err_set(err, "%s: cannot write the picture: %s", t->path,
                        cairo_status_to_string(cairo_surface_status(t->surface)));
    cairo_surface_destroy(t->surface);
  }
  /* A failed write is reported by commit, with the file and the errno. */
  if (ok && !rc)
    rc = ssae_outfile_commit(t->out, err);
  else
    ssae_outfile_abort(t->out);
  memset(t, 0, sizeof *t);
  return rc;
}

void plot_text(cairo_t *cr, double x, double y, double ax, double ay, double size,
               const char *s) {
  cairo_text_extents_t e;
  cairo_set_font_size(cr, size);
  cairo_text_extents(cr, s, &e);
  /* Vertical anchor on the font size, not the ink, so that labels line up. */
  cairo_move_to(cr, x - ax * e.x_advance, y + (1.0 - ay) * size * 0.75 - ay * size * 0.25);
  cairo_show_text(cr, s);
}

void plot_text_vertical(cairo_t *cr, double x, double y, double size, const char *s) {
  cairo_save(cr);
  cairo_translate(cr, x, y);
  cairo_rotate(cr, -M_PI / 2);
  plot_text(cr, 0, 0, 0.5, 0.5, size, s);
  cairo_restore(cr);
}

int plot_size(int *width, int *height, int def_w, int def_h, ssae_err *err) {
  if (*width <= 0 || *height <= 0) {
    *width = def_w;
    *height = def_h;
  }
  if (*width < 400 || *height < 300 || *width > 16000 || *height > 16000)
    return ssae_err_set(err, "picture size %dx%d is out of range (400x300 .. 16000x16000)",
                        *width, *height);
  return 0;
}

double plot_tick_step(double span, int n) {
  if (!(span > 0)) return 1.0;
  double raw = span / (n > 0 ? n : 1), p = pow(10.0, floor(log10(raw))), f = raw / p;
  return (f < 1.5 ? 1.0 : f < 3.5 ? 2.0 : f < 7.5 ? 5.0 : 10.0) * p;
}

void plot_frame(cairo_t *cr, const ssae_rect *r) {
  cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
  cairo_set_line_width(cr, 1.0);
  cairo_rectangle(cr, floor(r->x) + 0.5, floor(r->y) + 0.5, floor(r->w), floor(r->h));
  cairo_stroke(cr);
}

void ssae_plot_cleanup(void) {
  cairo_debug_reset_static_data();
  FcFini();
}

void ssae_colormap(double v, double rgb[3]) {
  /* viridis at 0, 0.1, ..., 1 */
  static const unsigned char stops[11][3] = {
      {0x44, 0x01, 0x54}, {0x48, 0x24, 0x75}, {0x41, 0x44, 0x87}, {0x35, 0x5f, 0x8d},
      {0x2a, 0x78, 0x8e}, {0x21, 0x91, 0x8c}, {0x22, 0xa8, 0x84}, {0x44, 0xbf, 0x70},
      {0x7a, 0xd1, 0x51}, {0xbd, 0xdf, 0x26}, {0xfd, 0xe7, 0x25}};
  if (!(v > 0)) v = 0; /* NAN too */
  if (v > 1) v = 1;
  double p = v * 10.0;
  int i = (int)p;
  if (i > 9) i = 9;
  double f = p - i;
  for (int c = 0; c < 3; c++)
    rgb[c] = ((1.0 - f) * stops[i][c] + f * stops[i + 1][c]) / 255.0;
}
