/* The mel and dB kernel (internal to dsp/ssae_logmel.c), included once per
 * width: KV holds one value of every frame (ssae_v8d: 8 frames in SIMD
 * lanes; double: one frame), KI the integer of the same width, MASK(c) a
 * comparison as all ones or zero, K(name) the functions of that width.
 * Both widths run this very code, so a frame's bits are the same whichever
 * width computes it (ssae_lanes.h). */

/* v = ln(v) for v > 0 (NaN and infinity pass through): the exponent and a
 * mantissa m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh(s) with
 * s = (m-1)/(m+1), |s| < 0.172, by its series to s^13 (error below 1e-13;
 * the dB values are then rounded to float). Plain IEEE arithmetic, the same
 * in every lane and every clone, unlike a vector libm. */
INLINE void K(ln)(KV *v) {
  const long long mant_mask = 0x000FFFFFFFFFFFFFLL, one = 0x3FF0000000000000LL;
  const long long sqrt2 = 0x3FF6A09E667F3BCDLL, two52 = 0x4330000000000000LL;
  KI bits, finite, big;
  memcpy(&bits, v, sizeof bits);
  finite = (KI)MASK(*v <= 1.7976931348623157e308);
  KI mant = (bits & mant_mask) | one;
  big = (KI)MASK(mant > sqrt2);
  mant -= big & (1LL << 52);
  KI ex = ((bits >> 52) & 0x7FF) - big; /* biased exponent, plus 1 when halved */
  ex |= two52;
  KV m, e;
  memcpy(&m, &mant, sizeof m);
  memcpy(&e, &ex, sizeof e);
  e -= 4503599627370496.0 + 1023.0; /* exact: the unbiased exponent */
  KV f = m - 1.0;
  KV s = f / (f + 2.0), z = s * s;
  KV p = z * (1.0 / 13) + 1.0 / 11;
  p = p * z + 1.0 / 9;
  p = p * z + 1.0 / 7;
  p = p * z + 1.0 / 5;
  p = p * z + 1.0 / 3;
  p = p * z * s + s;
  KV r = e * 0.69314718055994531 + 2.0 * p;
  KI rb;
  memcpy(&rb, &r, sizeof rb);
  rb = (rb & finite) | (bits & ~finite);
  memcpy(v, &rb, sizeof rb);
}

/* The power (n_bins values) in band m: sum_k w[m][k] power[k] + eps. */
INLINE void K(mel_sum)(const ssae_melbank *b, const KV *power, int m, KV *out) {
  const double *w = b->w + b->off[m];
  const KV *p = power + b->start[m];
  /* Two sums (even and odd bins): half the chain of dependent adds. */
  KV s = {0}, s1 = {0};
  const int len = b->len[m];
  int k = 0;
  for (; k + 1 < len; k += 2) {
    s += w[k] * p[k];
    s1 += w[k + 1] * p[k + 1];
  }
  if (k < len) s += w[k] * p[k];
  s += s1;
  *out = s + SSAE_LOG_EPS;
}
