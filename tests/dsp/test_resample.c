/* The audio-thread resampler: pass band kept (a 1 kHz tone keeps its level
 * and frequency), stop band removed (a 10 kHz tone at 48 kHz would alias to
 * 6 kHz at 16 kHz: it must be >= 60 dB down), any block size gives the same
 * output, and the rates of the engine (44.1/48/8/22.05 kHz) are accepted. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_resample.h"

static double rms_tone(long in_rate, long out_rate, double f, size_t *zc,
                       size_t *nout, int blockmix) {
  ssae_err err;
  size_t n = (size_t)in_rate; /* 1 s */
  ssae_resampler *r = ssae_resampler_new(in_rate, out_rate, 4096, &err);
  if (!r) {
    fprintf(stderr, "%s\n", err.msg);
    exit(1);
  }
  float *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = (float)(0.5 * sin(2 * M_PI * f * (double)i / in_rate));
  float *y = malloc((ssae_resampler_max_out(r, 4096) + 8) * 400 * sizeof *y);
  size_t no = 0, off = 0;
  size_t sizes[] = {4096, 1, 333, 1000, 7};
  for (int k = 0; off < n; k++) {
    size_t b = blockmix ? sizes[k % 5] : 4096;
    if (b > n - off) b = n - off;
    size_t got = ssae_resampler_process(r, x + off, b, y + no);
    if (got > ssae_resampler_max_out(r, b)) {
      fprintf(stderr, "output %zu above the bound\n", got);
      exit(1);
    }
    no += got;
    off += b;
  }
  /* Skip the filter's start-up (0.1 s) and measure the rest. */
  size_t s0 = (size_t)out_rate / 10;
  double acc = 0;
  *zc = 0;
  for (size_t i = s0; i < no; i++) {
    acc += (double)y[i] * y[i];
    if (i > s0 && (y[i - 1] < 0) != (y[i] < 0)) (*zc)++;
  }
  *nout = no;
  static float prev[64000];
  static size_t prev_n;
  if (blockmix) {
    if (prev_n != no || memcmp(prev, y, no * sizeof *y)) {
      fprintf(stderr, "block sizes change the output\n");
      exit(1);
    }
  } else {
    memcpy(prev, y, no * sizeof *y);
    prev_n = no;
  }
  ssae_resampler_free(r);
  free(x);
  free(y);
  return sqrt(acc / (double)(no - s0));
}

int main(void) {
  size_t zc, no;
  double a = rms_tone(48000, 16000, 1000, &zc, &no, 0);
  rms_tone(48000, 16000, 1000, &zc, &no, 1);
  double want = 0.5 / sqrt(2);
  double f = (double)zc / 2 / 0.9;
  printf("48k->16k 1 kHz: rms %.5f (want %.5f), %.1f Hz, %zu samples\n", a, want, f, no);
  if (fabs(a - want) > 0.01 * want || fabs(f - 1000) > 5 || no < 15990 || no > 16010) return 1;
  double alias = rms_tone(48000, 16000, 10000, &zc, &no, 0);
  double db = 20 * log10(alias / want);
  printf("48k->16k 10 kHz (alias band): %.1f dB\n", db);
  if (db > -60) return 1;
  a = rms_tone(44100, 16000, 3000, &zc, &no, 0);
  printf("44.1k->16k 3 kHz: rms %.5f, %zu samples\n", a, no);
  if (fabs(a - want) > 0.01 * want || no < 15990 || no > 16010) return 1;
  a = rms_tone(8000, 16000, 1000, &zc, &no, 0);
  printf("8k->16k 1 kHz: rms %.5f, %zu samples\n", a, no);
  if (fabs(a - want) > 0.01 * want || no < 15990 || no > 16010) return 1;
  ssae_err err;
  ssae_resampler *r = ssae_resampler_new(22050, 16000, 512, &err);
  if (!r) return 1;
  ssae_resampler_free(r);
  if (ssae_resampler_new(0, 16000, 512, &err)) return 1;
  if (ssae_resampler_new(1000003, 16000, 512, &err)) return 1; /* prime: huge table */
  printf("rate checks OK\n");
  return 0;
}
