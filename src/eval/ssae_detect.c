#include <math.h>

#include "ssae_plot.h"

void ssae_detect(const float *scores, size_t n, double hop_s, double smoothing_s,
                 double threshold, int on_count, int off_count, float *smoothed,
                 unsigned char *alarm) {
  /* The engine's exponential smoothing: a time constant in seconds of audio,
   * whatever the hop. */
  double a = smoothing_s > 0 ? 1.0 - exp(-hop_s / smoothing_s) : 1.0;
  double s = 0.0;
  int on = 0, run = 0;
  if (on_count < 1) on_count = 1;
  if (off_count < 1) off_count = 1;
  for (size_t i = 0; i < n; i++) {
    s = i == 0 ? scores[0] : s + a * (scores[i] - s);
    smoothed[i] = (float)s;
    int above = !isnan(threshold) && s > threshold;
    if (above != on) {
      if (++run >= (on ? off_count : on_count)) {
        on = above;
        run = 0;
      }
    } else {
      run = 0;
    }
    alarm[i] = (unsigned char)on;
  }
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
