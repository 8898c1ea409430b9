/* The FFT kernel (internal to dsp/ssae_fft.c), included once per width:
 * KV is the type of one value of every frame (ssae_v8d: 8 frames in SIMD
 * lanes; double: one frame) and K(name) names the functions of that width.
 * Both widths run this very code, so a frame's bits are the same whichever
 * width computes it (ssae_lanes.h; tests/dsp/test_fft.c checks it). */

/* The first level's butterflies for samples i..i+7 (a) and i+n/2.. (b),
 * already windowed: points j = (i+u)/2 and j + m/2. */
INLINE void K(first_r2)(KV *restrict z, KV *restrict c, const KV *a, const KV *b, int i,
                        const double *restrict tw) {
  for (int u = 0; u < 8; u += 2) {
    const int j = (i + u) / 2;
    const double wr = tw[2 * j], wi = tw[2 * j + 1];
    KV dr = a[u] - b[u], di = a[u + 1] - b[u + 1];
    z[i + u] = a[u] + b[u];
    z[i + u + 1] = a[u + 1] + b[u + 1];
    c[i + u] = dr * wr - di * wi;
    c[i + u + 1] = dr * wi + di * wr;
  }
}

/* Radix-2 DIF level on blocks of `span` points: a' = a + c,
 * c' = (a - c) w^j; span 2 (the last level) has only w^0 = 1. The twiddle
 * test is outside the loops, so that the compiler can vectorise them. */
#define R2(j, wt)                                               \
  do {                                                          \
    KV ar = a[2 * (j)], ai = a[2 * (j) + 1];                    \
    KV cr = c[2 * (j)], ci = c[2 * (j) + 1];                    \
    KV dr = ar - cr, di = ai - ci;                              \
    a[2 * (j)] = ar + cr;                                       \
    a[2 * (j) + 1] = ai + ci;                                   \
    if (wt) {                                                   \
      const double wr = tw[2 * (j)], wi = tw[2 * (j) + 1];      \
      c[2 * (j)] = dr * wr - di * wi;                           \
      c[2 * (j) + 1] = dr * wi + di * wr;                       \
    } else {                                                    \
      c[2 * (j)] = dr;                                          \
      c[2 * (j) + 1] = di;                                      \
    }                                                           \
  } while (0)

INLINE void K(level_r2)(KV *restrict z, int span, int blocks, const double *restrict tw) {
  const int h = span / 2;
  for (int b = 0; b < blocks; b++) {
    KV *a = z + 2 * (size_t)b * (size_t)span, *c = a + 2 * h;
    if (h == 1)
      R2(0, 0);
    else
      for (int j = 0; j < h; j++) R2(j, 1);
  }
}
#undef R2

/* Radix-4 DIF level (two radix-2 levels in one pass) on blocks of `span`
 * points, quarters A B C D, w = e^{-2 pi i/span}:
 *   A' = (A+C) + (B+D)            B' = ((A+C) - (B+D)) w^2j
 *   C' = ((A-C) - i(B-D)) w^j     D' = ((A-C) + i(B-D)) w^3j
 * which leaves the outputs in the bit-reversed order of two radix-2 levels.
 * span 4 has only j = 0, whose twiddles are 1. */
#define R4(j, wt)                                                            \
  do {                                                                       \
    KV ar = A[2 * (j)], ai = A[2 * (j) + 1], br = B[2 * (j)], bi = B[2 * (j) + 1]; \
    KV cr = C[2 * (j)], ci = C[2 * (j) + 1], dr = D[2 * (j)], di = D[2 * (j) + 1]; \
    KV t0r = ar + cr, t0i = ai + ci, t1r = ar - cr, t1i = ai - ci;           \
    KV t2r = br + dr, t2i = bi + di, t3r = br - dr, t3i = bi - di;           \
    KV ur = t0r - t2r, ui = t0i - t2i;                                       \
    KV vr = t1r + t3i, vi = t1i - t3r;                                       \
    KV xr = t1r - t3i, xi = t1i + t3r;                                       \
    A[2 * (j)] = t0r + t2r;                                                  \
    A[2 * (j) + 1] = t0i + t2i;                                              \
    if (wt) {                                                                \
      const double *w = tw + 6 * (j);                                        \
      B[2 * (j)] = ur * w[2] - ui * w[3];                                    \
      B[2 * (j) + 1] = ur * w[3] + ui * w[2];                                \
      C[2 * (j)] = vr * w[0] - vi * w[1];                                    \
      C[2 * (j) + 1] = vr * w[1] + vi * w[0];                                \
      D[2 * (j)] = xr * w[4] - xi * w[5];                                    \
      D[2 * (j) + 1] = xr * w[5] + xi * w[4];                                \
    } else {                                                                 \
      B[2 * (j)] = ur;                                                       \
      B[2 * (j) + 1] = ui;                                                   \
      C[2 * (j)] = vr;                                                       \
      C[2 * (j) + 1] = vi;                                                   \
      D[2 * (j)] = xr;                                                       \
      D[2 * (j) + 1] = xi;                                                   \
    }                                                                        \
  } while (0)

INLINE void K(level_r4)(KV *restrict z, int span, int blocks, const double *restrict tw) {
  const int q = span / 4;
  for (int b = 0; b < blocks; b++) {
    KV *A = z + 2 * (size_t)b * (size_t)span, *B = A + 2 * q, *C = B + 2 * q, *D = C + 2 * q;
    if (q == 1)
      R4(0, 0);
    else
      for (int j = 0; j < q; j++) R4(j, 1);
  }
}
#undef R4

INLINE void K(level)(const ssae_rfft *f, int l, KV *z, int points) {
  if (f->radix[l] == 2)
    K(level_r2)(z, f->span[l], points / f->span[l], f->tw + f->tw_off[l]);
  else
    K(level_r4)(z, f->span[l], points / f->span[l], f->tw + f->tw_off[l]);
}

/* The levels after the first, then the split into the power spectrum. */
INLINE void K(rest)(const ssae_rfft *f, KV *restrict z, KV *restrict power) {
  const int m = f->m;
  int l = 1;
  for (; l < f->n_levels && f->span[l] > L1_POINTS; l++) K(level)(f, l, z, m);
  if (l < f->n_levels)
    for (int b = 0; b < m; b += f->span[l])
      for (int k = l; k < f->n_levels; k++) K(level)(f, k, z + 2 * b, f->span[l]);
  /* X[k] = E[k] + w^k O[k], E = (Z[k] + conj Z[m-k])/2,
   * O = (Z[k] - conj Z[m-k])/(2i). Since w^(m-k) = -conj(w^k),
   * X[m-k] = conj(E[k] - w^k O[k]): one pass over the pairs (k, m-k).
   * Z[k] sits at z[2 rev[k]]. */
  const int *rev = f->rev;
  const double *sp = f->sp;
  KV s0 = z[0] + z[1], d0 = z[0] - z[1];
  power[0] = s0 * s0;
  power[m] = d0 * d0;
  for (int k = 1; k <= m / 2; k++) {
    const KV *p = z + 2 * rev[k], *c = z + 2 * rev[m - k];
    KV zr = p[0], zi = p[1], cr = c[0], ci = -c[1];
    KV er = 0.5 * (zr + cr), ei = 0.5 * (zi + ci);
    KV or_ = 0.5 * (zi - ci), oi = -0.5 * (zr - cr);
    const double wr = sp[2 * k], wi = sp[2 * k + 1];
    KV pr = or_ * wr - oi * wi, pi = or_ * wi + oi * wr;
    KV ar = er + pr, ai = ei + pi, br = er - pr, bi = ei - pi;
    power[k] = ar * ar + ai * ai;
    if (k != m - k) power[m - k] = br * br + bi * bi;
  }
}
