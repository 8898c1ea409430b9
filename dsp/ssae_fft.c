#include "ssae_fft.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Four doubles at a time (GCC/Clang vector extension): the compiler does
 * not vectorise these loops by itself. Without AVX it splits each vector in
 * two SSE2 (or NEON) halves; with AVX (the clone below) one register each.
 * Both give the same bits: plain IEEE adds and multiplies, no contraction
 * into FMA (ISO C mode). */
typedef double v4d __attribute__((vector_size(32)));
/* Macros, not functions: a function passing 32-byte vectors would have a
 * different ABI with and without AVX. */
#define LD(v, p) memcpy(&(v), (p), sizeof(v4d))
#define ST(p, v)                    \
  do {                              \
    v4d st_ = (v);                  \
    memcpy((p), &st_, sizeof st_);  \
  } while (0)
/* Not under ThreadSanitizer: glibc runs ifunc resolvers before TSan is
 * initialised, and the process dies at start. */
#if !defined(__SANITIZE_THREAD__) && defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define SSAE_FFT_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define SSAE_FFT_CLONES
#endif

/* A real FFT of size n is one complex FFT of size m = n/2 on
 * z[j] = x[2j] + i x[2j+1], then a split into the even and odd parts. The
 * complex FFT is iterative radix-2 on split re/im arrays, with one
 * contiguous twiddle table per stage so that the inner loops vectorise. */
struct ssae_rfft {
  int n, m, log2m;
  int *rev;            /* bit reversal of 0..m-1 */
  double *tw_re, *tw_im; /* stage tables, m-1 entries in all */
  double *sp_re, *sp_im; /* split twiddles e^{-2 pi i k/n}, k = 0..m */
  double *re, *im;       /* work, m each */
};

void ssae_rfft_free(ssae_rfft *f) {
  if (!f) return;
  free(f->rev);
  free(f->tw_re);
  free(f->tw_im);
  free(f->sp_re);
  free(f->sp_im);
  free(f->re);
  free(f->im);
  free(f);
}

ssae_rfft *ssae_rfft_new(int n, ssae_err *err) {
  if (n < 8 || (n & (n - 1))) {
    ssae_err_set(err, "FFT size %d is not a power of two of at least 8", n);
    return NULL;
  }
  ssae_rfft *f = calloc(1, sizeof *f);
  if (!f) {
    ssae_err_set(err, "out of memory for the FFT");
    return NULL;
  }
  f->n = n;
  f->m = n / 2;
  while ((1 << f->log2m) < f->m) f->log2m++;
  size_t m = (size_t)f->m;
  f->rev = malloc(sizeof *f->rev * m);
  f->tw_re = malloc(sizeof *f->tw_re * m);
  f->tw_im = malloc(sizeof *f->tw_im * m);
  f->sp_re = malloc(sizeof *f->sp_re * (m + 1));
  f->sp_im = malloc(sizeof *f->sp_im * (m + 1));
  f->re = malloc(sizeof *f->re * m);
  f->im = malloc(sizeof *f->im * m);
  if (!f->rev || !f->tw_re || !f->tw_im || !f->sp_re || !f->sp_im || !f->re || !f->im) {
    ssae_rfft_free(f);
    ssae_err_set(err, "out of memory for the FFT");
    return NULL;
  }
  for (int i = 0; i < f->m; i++) {
    int r = 0;
    for (int b = 0; b < f->log2m; b++) r |= ((i >> b) & 1) << (f->log2m - 1 - b);
    f->rev[i] = r;
  }
  /* Stage with butterflies of half-length h uses e^{-2 pi i j/(2h)}, j < h,
   * stored from offset h-1. */
  for (int h = 1; h < f->m; h *= 2)
    for (int j = 0; j < h; j++) {
      double a = -M_PI * j / h;
      f->tw_re[h - 1 + j] = cos(a);
      f->tw_im[h - 1 + j] = sin(a);
    }
  for (int k = 0; k <= f->m; k++) {
    double a = -2.0 * M_PI * k / n;
    f->sp_re[k] = cos(a);
    f->sp_im[k] = sin(a);
  }
  return f;
}

SSAE_FFT_CLONES
void ssae_rfft_power(ssae_rfft *f, const float *x, const double *win, double *power) {
  const int m = f->m;
  double *restrict re = f->re, *restrict im = f->im;
  /* Bit-reversed load, with the window, fused with the first two radix-2 stages (twiddles
   * 1 and -i only): a quarter of the passes, none of the short loops. */
  for (int b = 0; b < m; b += 4) {
    const int r0 = 2 * f->rev[b], r1 = 2 * f->rev[b + 1];
    const int r2 = 2 * f->rev[b + 2], r3 = 2 * f->rev[b + 3];
    const double x0r = x[r0] * win[r0], x0i = x[r0 + 1] * win[r0 + 1];
    const double x1r = x[r1] * win[r1], x1i = x[r1 + 1] * win[r1 + 1];
    const double x2r = x[r2] * win[r2], x2i = x[r2 + 1] * win[r2 + 1];
    const double x3r = x[r3] * win[r3], x3i = x[r3 + 1] * win[r3 + 1];
    double t0r = x0r + x1r, t0i = x0i + x1i;
    double t1r = x0r - x1r, t1i = x0i - x1i;
    double t2r = x2r + x3r, t2i = x2i + x3i;
    double t3r = x2r - x3r, t3i = x2i - x3i;
    re[b] = t0r + t2r;
    im[b] = t0i + t2i;
    re[b + 2] = t0r - t2r;
    im[b + 2] = t0i - t2i;
    re[b + 1] = t1r + t3i;
    im[b + 1] = t1i - t3r;
    re[b + 3] = t1r - t3i;
    im[b + 3] = t1i + t3r;
  }
  /* Two radix-2 stages at a time (half-lengths q and 2q): half the passes
   * over the arrays; a last single stage when log2(m) is odd. */
  int q = 4;
  for (; 4 * q <= m; q *= 4) {
    const double *restrict w1r = f->tw_re + q - 1, *restrict w1i = f->tw_im + q - 1;
    const double *restrict w2r = f->tw_re + 2 * q - 1, *restrict w2i = f->tw_im + 2 * q - 1;
    for (int b = 0; b < m; b += 4 * q) {
      double *restrict ar = re + b, *restrict ai = im + b;
      double *restrict br = ar + q, *restrict bi = ai + q;
      double *restrict cr = br + q, *restrict ci = bi + q;
      double *restrict dr = cr + q, *restrict di = ci + q;
      for (int j = 0; j < q; j += 4) {
        v4d u1r, u1i, u2r, u2i;
        LD(u1r, w1r + j);
        LD(u1i, w1i + j);
        LD(u2r, w2r + j);
        LD(u2i, w2i + j);
        v4d Ar, Ai, Br, Bi;
        LD(Ar, ar + j);
        LD(Ai, ai + j);
        LD(Br, br + j);
        LD(Bi, bi + j);
        v4d Cr, Ci, Dr, Di;
        LD(Cr, cr + j);
        LD(Ci, ci + j);
        LD(Dr, dr + j);
        LD(Di, di + j);
        v4d xr = Br * u1r - Bi * u1i, xi = Br * u1i + Bi * u1r;
        v4d a1r = Ar + xr, a1i = Ai + xi, b1r = Ar - xr, b1i = Ai - xi;
        v4d yr = Dr * u1r - Di * u1i, yi = Dr * u1i + Di * u1r;
        v4d c1r = Cr + yr, c1i = Ci + yi, d1r = Cr - yr, d1i = Ci - yi;
        v4d c2r = c1r * u2r - c1i * u2i, c2i = c1r * u2i + c1i * u2r;
        /* e^{-i pi (j+q)/(2q)} = -i e^{-i pi j/(2q)} */
        v4d tr = d1r * u2r - d1i * u2i, ti = d1r * u2i + d1i * u2r;
        ST(ar + j, a1r + c2r);
        ST(ai + j, a1i + c2i);
        ST(cr + j, a1r - c2r);
        ST(ci + j, a1i - c2i);
        ST(br + j, b1r + ti);
        ST(bi + j, b1i - tr);
        ST(dr + j, b1r - ti);
        ST(di + j, b1i + tr);
      }
    }
  }
  for (int h = q; h < m; h *= 2) {
    const double *restrict wr = f->tw_re + h - 1, *restrict wi = f->tw_im + h - 1;
    for (int b = 0; b < m; b += 2 * h) {
      double *restrict ar = re + b, *restrict ai = im + b;
      double *restrict br = re + b + h, *restrict bi = im + b + h;
      for (int j = 0; j < h; j += 4) {
        v4d Wr, Wi;
        LD(Wr, wr + j);
        LD(Wi, wi + j);
        v4d Br, Bi, Ar, Ai;
        LD(Br, br + j);
        LD(Bi, bi + j);
        LD(Ar, ar + j);
        LD(Ai, ai + j);
        v4d tr = Br * Wr - Bi * Wi, ti = Br * Wi + Bi * Wr;
        ST(br + j, Ar - tr);
        ST(bi + j, Ai - ti);
        ST(ar + j, Ar + tr);
        ST(ai + j, Ai + ti);
      }
    }
  }
  /* X[k] = E[k] + w^k O[k], E = (Z[k] + conj Z[m-k])/2,
   * O = (Z[k] - conj Z[m-k])/(2i). Since w^(m-k) = -conj(w^k),
   * X[m-k] = conj(E[k] - w^k O[k]): one pass over the pairs (k, m-k). */
  power[0] = (re[0] + im[0]) * (re[0] + im[0]);
  power[m] = (re[0] - im[0]) * (re[0] - im[0]);
  for (int k = 1; k <= m / 2; k++) {
    double zr = re[k], zi = im[k], cr = re[m - k], ci = -im[m - k];
    double er = 0.5 * (zr + cr), ei = 0.5 * (zi + ci);
    double or_ = 0.5 * (zi - ci), oi = -0.5 * (zr - cr);
    double wr = f->sp_re[k], wi = f->sp_im[k];
    double pr = or_ * wr - oi * wi, pi = or_ * wi + oi * wr;
    double ar = er + pr, ai = ei + pi, br = er - pr, bi = ei - pi;
    power[k] = ar * ar + ai * ai;
    if (k != m - k) power[m - k] = br * br + bi * bi;
  }
}
