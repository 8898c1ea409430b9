#include "ssae_resample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Zero crossings of the sinc on each side at the narrower of the two rates:
 * enough for a transition band of a few percent, which is inside the mel
 * filterbank's resolution. */
#define RS_ZEROS 16
#define RS_MAX_TABLE (1u << 22) /* floats in the polyphase table */

struct ssae_resampler {
  long L, M;      /* out/in = L/M, reduced */
  size_t taps;    /* taps per phase */
  float *h;       /* [L][taps], phase-major, taps reversed for a dot product */
  float *buf;     /* history (taps-1) + one block */
  size_t max_in;
  size_t hist;    /* valid samples at the start of buf */
  size_t pos;     /* input index (in buf) of the next output */
  long phase;     /* its phase, 0..L-1 */
};

static long gcd(long a, long b) {
  while (b) {
    long t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* Modified Bessel function of the first kind, order 0 (Kaiser window). */
static double bessel_i0(double x) {
  double sum = 1.0, term = 1.0, q = x * x / 4.0;
  for (int k = 1; k < 64; k++) {
    term *= q / ((double)k * k);
    sum += term;
    if (term < sum * 1e-17) break;
  }
  return sum;
}

ssae_resampler *ssae_resampler_new(long in_rate, long out_rate, size_t max_in,
                                   ssae_err *err) {
  if (in_rate <= 0 || out_rate <= 0) {
    ssae_err_set(err, "resampler: rates must be positive (got %ld -> %ld)",
                 in_rate, out_rate);
    return NULL;
  }
  if (max_in == 0) max_in = 1;
  long g = gcd(in_rate, out_rate);
  long L = out_rate / g, M = in_rate / g;
  double wider = M > L ? (double)M / L : 1.0; /* downsampling widens the filter */
  size_t half = (size_t)ceil(RS_ZEROS * wider);
  size_t taps = 2 * half;
  if ((double)L * taps > RS_MAX_TABLE) {
    ssae_err_set(err,
                 "resampler: %ld Hz -> %ld Hz needs a %ld-phase filter, too "
                 "large; use a common rate (8000, 16000, 22050, 32000, "
                 "44100, 48000, 96000)",
                 in_rate, out_rate, L);
    return NULL;
  }
  ssae_resampler *r = calloc(1, sizeof *r);
  if (!r) goto oom;
  r->L = L;
  r->M = M;
  r->taps = taps;
  r->max_in = max_in;
  r->h = malloc((size_t)L * taps * sizeof *r->h);
  r->buf = malloc((taps - 1 + max_in) * sizeof *r->buf);
  if (!r->h || !r->buf) goto oom;

  /* Prototype lowpass at the upsampled rate in*L, cutoff at 0.95 of the
   * lower Nyquist, length L*taps, centred; gain L so that each phase sums
   * to about 1. */
  double fc = 0.5 / (double)(L > M ? L : M) * 0.95; /* cycles/sample */
  double beta = 8.6;
  double len = (double)L * taps;
  double centre = (len - 1) / 2.0;
  double i0b = bessel_i0(beta);
  for (long p = 0; p < L; p++) {
    for (size_t k = 0; k < taps; k++) {
      /* tap k of phase p is prototype index k*L + p; stored reversed so
       * that output = sum_j h[p][j] * x[pos - taps + 1 + j] */
      double idx = (double)k * L + p;
      double x = idx - centre;
      double s = x == 0 ? 2 * fc : sin(2 * M_PI * fc * x) / (M_PI * x);
      double wr = (idx - centre) / (len / 2.0);
      double w = fabs(wr) >= 1 ? 0 : bessel_i0(beta * sqrt(1 - wr * wr)) / i0b;
      r->h[(size_t)p * taps + (taps - 1 - k)] = (float)(s * w * L);
    }
  }
  ssae_resampler_reset(r);
  return r;
oom:
  ssae_resampler_free(r);
  ssae_err_set(err, "resampler: out of memory");
  return NULL;
}

void ssae_resampler_free(ssae_resampler *r) {
  if (!r) return;
  free(r->h);
  free(r->buf);
  free(r);
}

size_t ssae_resampler_max_out(const ssae_resampler *r, size_t n) {
  return (size_t)(((double)n * r->L) / r->M) + 2;
}

void ssae_resampler_reset(ssae_resampler *r) {
  memset(r->buf, 0, (r->taps - 1 + r->max_in) * sizeof *r->buf);
  r->hist = r->taps - 1; /* zeros before the stream */
  r->pos = r->taps - 1;
  r->phase = 0;
}

size_t ssae_resampler_process(ssae_resampler *r, const float *in, size_t n,
                              float *out) {
  if (n > r->max_in) n = r->max_in;
  memcpy(r->buf + r->hist, in, n * sizeof *in);
  size_t avail = r->hist + n;
  size_t no = 0;
  const size_t taps = r->taps;
  while (r->pos < avail) {
    const float *h = r->h + (size_t)r->phase * taps;
    const float *x = r->buf + r->pos - (taps - 1);
    float acc = 0;
    for (size_t j = 0; j < taps; j++) acc += h[j] * x[j];
    out[no++] = acc;
    r->phase += r->M;
    r->pos += (size_t)(r->phase / r->L);
    r->phase %= r->L;
  }
  /* Keep the last taps-1 samples as history. */
  size_t keep = taps - 1;
  memmove(r->buf, r->buf + avail - keep, keep * sizeof *r->buf);
  r->pos -= avail - keep;
  r->hist = keep;
  return no;
}
