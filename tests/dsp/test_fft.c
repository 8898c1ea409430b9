/* The lane-parallel double FFT (dsp/ssae_fft.c): power spectra of every
 * power-of-two size from 16 to 4096 (odd and even counts of radix-2 levels)
 * against a direct DFT in long double, for 8 different frames at once; and
 * a frame's bits do not depend on the lane it sits in, on the frames beside
 * it, nor on whether the one-frame kernel computes it (what makes streaming
 * bit-identical to whole-file passes). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SSAE_TEST_SEED 0x2545F4914F6CDD1DULL
#include "../ssae_test.h"
#include "ssae_fft.h"

static int same_bits(double a, double b) { return !memcmp(&a, &b, sizeof a); }

int main(void) {
  for (int n = 16; n <= 4096; n *= 2) {
    ssae_err err = {{0}};
    ssae_rfft *f = ssae_rfft_new(n, &err);
    if (!f) {
      fprintf(stderr, "FAIL n=%d: %s\n", n, err.msg);
      return 1;
    }
    const int bins = n / 2 + 1;
    float *x = malloc(sizeof *x * (size_t)n * 9);
    double *win = malloc(sizeof *win * (size_t)n);
    ssae_v8d *p = aligned_alloc(64, sizeof *p * (size_t)bins);
    ssae_v8d *q = aligned_alloc(64, sizeof *q * (size_t)bins);
    long double *ref = malloc(sizeof *ref * (size_t)bins);
    long double *cs = malloc(sizeof *cs * (size_t)n), *sn = malloc(sizeof *sn * (size_t)n);
    for (int i = 0; i < n; i++) {
      long double a = -2.0L * 3.14159265358979323846264338327950288L * i / n;
      cs[i] = cosl(a);
      sn[i] = sinl(a);
    }
    /* Lane 0 a tone, lane 1 an impulse, lane 2 silence, the others noise
     * of different levels; frame 8 is spare noise for the swap below. */
    for (int l = 0; l < 9; l++)
      for (int i = 0; i < n; i++) {
        float v = (float)((urand() - 0.5) * pow(10.0, -l / 2.0));
        if (l == 0) v = (float)(0.7 * sin(2 * M_PI * 3.3 * i / n));
        if (l == 1) v = i == n / 3 ? 1.0f : 0.0f;
        if (l == 2) v = 0.0f;
        x[(size_t)l * (size_t)n + (size_t)i] = v;
      }
    for (int i = 0; i < n; i++) win[i] = 0.5 - 0.5 * cos(2.0 * M_PI * i / n);
    const float *src[SSAE_LANES];
    for (int l = 0; l < SSAE_LANES; l++) src[l] = x + (size_t)l * (size_t)n;
    ssae_rfft_power(f, src, win, p);
    for (int l = 0; l < SSAE_LANES; l++) {
      long double peak = 0;
      for (int k = 0; k < bins; k++) {
        long double re = 0, im = 0;
        for (int i = 0; i < n; i++) {
          long double v = (long double)src[l][i] * win[i];
          size_t j = (size_t)((long long)k * i % n);
          re += v * cs[j];
          im += v * sn[j];
        }
        ref[k] = re * re + im * im;
        if (ref[k] > peak) peak = ref[k];
      }
      double worst = 0;
      for (int k = 0; k < bins; k++) {
        /* Relative to the frame's peak: the error floor of a double FFT. */
        double e = (double)fabsl((long double)p[k][l] - ref[k]) / (double)(peak > 0 ? peak : 1);
        if (e > worst) worst = e;
      }
      if (worst > 1e-13) {
        fprintf(stderr, "FAIL n=%d lane %d: power off by %.3g of the peak\n", n, l, worst);
        failures++;
      }
    }
    /* The same frames in other lanes, with other neighbours: the same bits. */
    const float *rot[SSAE_LANES];
    for (int l = 0; l < SSAE_LANES; l++) rot[l] = src[(l + 3) % SSAE_LANES];
    rot[5] = x + (size_t)8 * (size_t)n; /* frame 0 (was in lane 5) swapped for frame 8 */
    ssae_rfft_power(f, rot, win, q);
    for (int l = 0; l < SSAE_LANES; l++) {
      if (l == 5) continue;
      int from = (l + 3) % SSAE_LANES;
      for (int k = 0; k < bins; k++)
        if (!same_bits(q[k][l], p[k][from])) {
          fprintf(stderr, "FAIL n=%d: frame %d in lane %d differs from lane %d (bin %d)\n", n,
                  from, l, from, k);
          failures++;
          break;
        }
    }
    /* One frame alone (the kernel for streams fed in small blocks): the
     * bits of its lane. */
    double *one = malloc(sizeof *one * (size_t)bins);
    for (int l = 0; l < SSAE_LANES; l++) {
      ssae_rfft_power1(f, src[l], win, one);
      for (int k = 0; k < bins; k++)
        if (!same_bits(one[k], p[k][l])) {
          fprintf(stderr, "FAIL n=%d: frame %d alone differs from its lane (bin %d)\n", n, l, k);
          failures++;
          break;
        }
    }
    free(one);
    free(x);
    free(win);
    free(p);
    free(q);
    free(ref);
    free(cs);
    free(sn);
    ssae_rfft_free(f);
  }
  ssae_err err = {{0}};
  if (ssae_rfft_new(1000, &err) || ssae_rfft_new(8, &err)) {
    fprintf(stderr, "FAIL: sizes 1000 and 8 accepted\n");
    failures++;
  }
  return test_done("ok");
}
