#include "ssae_fft.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A real FFT of size n is one complex FFT of size m = n/2 on
 * z[j] = x[2j] + i x[2j+1], then a split into the even and odd parts.
 * The complex FFT is decimation in frequency, in place: a radix-2 level
 * over the whole frame, fused with the load, then radix-4 levels (two
 * radix-2 levels per pass over memory) and, when the count of the remaining
 * radix-2 levels is odd, a last radix-2 level without twiddles. Its output
 * lands in bit-reversed order; its input is the frame as it is: z[2j] and
 * z[2j+1] (the real and imaginary vectors of point j) are samples 2j and
 * 2j+1 of the 8 frames. Every vector holds one value of each frame. */
#define MAX_LEVELS 32
/* Levels whose blocks are larger than this (in points; a point is 128
 * bytes) run over the whole array; smaller blocks run all their remaining
 * levels while they sit in the L1 cache. */
#define L1_POINTS 256

struct ssae_rfft {
  int n, m, n_levels;
  int radix[MAX_LEVELS], span[MAX_LEVELS]; /* block length of each level, points */
  size_t tw_off[MAX_LEVELS];
  int *rev;    /* bit reversal of 0..m-1 */
  double *tw;  /* per level: radix 2 (w^j), radix 4 (w^j, w^2j, w^3j), j < span/radix */
  double *sp;  /* split twiddles (cos, sin) of -2 pi k/n, k = 0..m/2 */
  double *c;   /* cos(2 pi k/n), k = 0..n/4 */
  ssae_v8d *z; /* work: 2m vectors, 64-byte aligned */
};

void ssae_rfft_free(ssae_rfft *f) {
  if (!f) return;
  free(f->rev);
  free(f->tw);
  free(f->sp);
  free(f->c);
  free(f->z);
  free(f);
}

/* cos and sin of -2 pi i/n from c[k] = cos(2 pi k/n), k = 0..n/4 (n a
 * multiple of 4): the symmetries of the circle, so that n/4 + 1 libm calls
 * give every twiddle (a plan is set up for every new front end). */
static void cis(const double *c, int n, long i, double *re, double *im) {
  const long q = n / 4;
  i %= n;
  long s = i - q < 0 ? i - q + n : i - q; /* sin(2 pi i/n) = cos(2 pi (i - n/4)/n) */
  double v[2];
  long idx[2] = {i, s};
  for (int t = 0; t < 2; t++) {
    long k = idx[t];
    v[t] = k <= q ? c[k] : k <= 2 * q ? -c[2 * q - k] : k <= 3 * q ? -c[k - 2 * q] : c[n - k];
  }
  *re = v[0];
  *im = -v[1];
}

ssae_rfft *ssae_rfft_new(int n, ssae_err *err) {
  if (n < 16 || n > (1 << 26) || (n & (n - 1))) {
    ssae_err_set(err, "FFT size %d is not a power of two from 16 to 2^26", n);
    return NULL;
  }
  ssae_rfft *f = calloc(1, sizeof *f);
  if (!f) {
    ssae_err_set(err, "out of memory for the FFT");
    return NULL;
  }
  f->n = n;
  f->m = n / 2;
  const size_t m = (size_t)f->m;
  int log2m = 0;
  while ((1 << log2m) < f->m) log2m++;
  size_t n_tw = 0;
  for (int span = f->m, rest = log2m; rest > 0;) {
    const int r = span == f->m || rest == 1 ? 2 : 4;
    f->radix[f->n_levels] = r;
    f->span[f->n_levels] = span;
    f->tw_off[f->n_levels++] = n_tw;
    n_tw += (size_t)(r == 2 ? span : 6 * (span / 4));
    span /= r;
    rest -= r / 2;
  }
  f->rev = malloc(sizeof *f->rev * m);
  f->tw = malloc(sizeof *f->tw * n_tw);
  f->sp = malloc(sizeof *f->sp * (m + 2));
  f->z = aligned_alloc(64, sizeof *f->z * 2 * m);
  double *c = f->c = malloc(sizeof *c * (size_t)(n / 4 + 1));
  if (!f->rev || !f->tw || !f->sp || !f->z || !c) {
    ssae_rfft_free(f);
    ssae_err_set(err, "out of memory for the FFT");
    return NULL;
  }
  for (int k = 0; k <= n / 4; k++) c[k] = cos(2.0 * M_PI * k / n);
  f->rev[0] = 0;
  for (int i = 1; i < f->m; i++) f->rev[i] = (f->rev[i >> 1] >> 1) | ((i & 1) << (log2m - 1));
  /* Level l with blocks of s points uses w = e^{-2 pi i/s} = e^{-2 pi i (n/s)/n}. */
  for (int l = 0; l < f->n_levels; l++) {
    double *t = f->tw + f->tw_off[l];
    const int s = f->span[l], r = f->radix[l];
    for (long j = 0; j < s / r; j++)
      for (long p = 1; p < r; p++, t += 2) cis(c, n, p * j * (n / s), t, t + 1);
  }
  for (int k = 0; k <= f->m / 2; k++) cis(c, n, k, f->sp + 2 * k, f->sp + 2 * k + 1);
  return f;
}

double ssae_rfft_cos(const ssae_rfft *f, int i) {
  double re, im;
  cis(f->c, f->n, i, &re, &im);
  return re;
}

#define INLINE static inline __attribute__((always_inline))

/* 8x8 transpose: d[l] holds 8 samples of frame l; afterwards d[i] holds
 * sample i of the 8 frames. */
INLINE void transpose8(ssae_v8d *d) {
#if defined(__has_builtin) && __has_builtin(__builtin_shufflevector)
#define SV __builtin_shufflevector
  ssae_v8d a[8], b[8];
  for (int i = 0; i < 8; i += 2) {
    a[i] = SV(d[i], d[i + 1], 0, 8, 2, 10, 4, 12, 6, 14);
    a[i + 1] = SV(d[i], d[i + 1], 1, 9, 3, 11, 5, 13, 7, 15);
  }
  for (int i = 0; i < 8; i += 4)
    for (int o = 0; o < 2; o++) {
      b[i + o] = SV(a[i + o], a[i + o + 2], 0, 1, 8, 9, 4, 5, 12, 13);
      b[i + o + 2] = SV(a[i + o], a[i + o + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    }
  for (int i = 0; i < 4; i++) {
    d[i] = SV(b[i], b[i + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    d[i + 4] = SV(b[i], b[i + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
#undef SV
#else
  ssae_v8d t[8];
  for (int i = 0; i < 8; i++)
    for (int l = 0; l < 8; l++) t[i][l] = d[l][i];
  for (int i = 0; i < 8; i++) d[i] = t[i];
#endif
}

/* Samples i..i+7 of the 8 frames, converted to double: d[u] holds sample
 * i+u of every frame. */
INLINE void load8(ssae_v8d *d, const float *const x[SSAE_LANES], int i) {
  for (int l = 0; l < 8; l++) {
    ssae_v8f v;
    memcpy(&v, x[l] + i, sizeof v);
    d[l] = __builtin_convertvector(v, ssae_v8d);
  }
  transpose8(d);
}

#define KV ssae_v8d
#define K(name) name##_8
#include "ssae_fft_kernel.h"
#undef KV
#undef K
#define KV double
#define K(name) name##_1
#include "ssae_fft_kernel.h"
#undef KV
#undef K

/* The first level (radix 2 over the whole frame: points j and j + m/2,
 * that is samples 2j, 2j+1 and 2j + n/2, 2j+1 + n/2) straight from the
 * frames and the window, so that the frames are read once. */
SSAE_LANES_CLONES
void ssae_rfft_power(ssae_rfft *f, const float *const x[SSAE_LANES], const double *win,
                     ssae_v8d *power) {
  const int half = f->n / 2;
  ssae_v8d *restrict z = f->z;
  for (int i = 0; i < half; i += 8) {
    ssae_v8d a[8], b[8];
    load8(a, x, i);
    load8(b, x, i + half);
    for (int u = 0; u < 8; u++) {
      a[u] *= win[i + u];
      b[u] *= win[i + half + u];
    }
    first_r2_8(z, z + half, a, b, i, f->tw);
  }
  rest_8(f, z, power);
}

/* No auto-vectorisation here: with FMA enabled (-march=x86-64-v3 and up)
 * GCC 12 turns the butterflies' complex products into fused multiply-adds
 * (vfmaddsub) even with -ffp-contract=off, which would change this frame's
 * bits against its lane in ssae_rfft_power. */
#if defined(__GNUC__) && !defined(__clang__)
#define NO_AUTO_VECTORS __attribute__((optimize("no-tree-vectorize")))
#else
#define NO_AUTO_VECTORS
#endif
SSAE_LANES_CLONES NO_AUTO_VECTORS
void ssae_rfft_power1(ssae_rfft *f, const float *x, const double *win, double *power) {
  const int half = f->n / 2;
  double *restrict z = (double *)f->z;
  for (int i = 0; i < half; i += 8) {
    double a[8], b[8];
    for (int u = 0; u < 8; u++) {
      a[u] = (double)x[i + u] * win[i + u];
      b[u] = (double)x[i + half + u] * win[i + half + u];
    }
    first_r2_1(z, z + half, a, b, i, f->tw);
  }
  rest_1(f, z, power);
}
