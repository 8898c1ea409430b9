/* Numeric kernels of the CPU trainer and of the VJPs, written so that GCC
 * vectorises them. Included by ssae_grad_chunk.h once per kernel set: the
 * baseline ISA, target("avx2,fma") and AVX-512, each with a name suffix,
 * one picked at run time (pick_kernels). KSFX(name) appends the suffix.
 * Everything is static. */

/* KV is a vector of KVL floats in GCC's vector extension (16 bytes for the
 * baseline, 32 under AVX2, 64 under AVX-512), chosen by the includer with
 * KRT, the rows of a product's register tile (as many as the register file
 * holds): the tiles' accumulators are variables of it, so they live in
 * registers. */
typedef float KV __attribute__((vector_size(KVL * 4)));
/* Half a vector of floats and the doubles it widens to (one register):
 * the LayerNorm statistics' partial sums, one per lane. */
typedef float KSFX(kvh) __attribute__((vector_size(KVL * 2)));
typedef double KSFX(kvd) __attribute__((vector_size(KVL * 4)));
#define KVH KSFX(kvh)
#define KVD KSFX(kvd)
#define KVHL (KVL / 2)

#ifndef KLD8
/* unaligned load / store; macros, since passing these vectors to functions
 * would depend on the ISA's ABI */
#define KLD8(v, p) memcpy(&(v), (p), sizeof(v))
#define KST8(p, v) memcpy((p), &(v), sizeof(v))
#endif

/* C[R x N] = A[R x K] * B[K x N] (+ bias[N]). Register tiles of KRT rows
 * (the includer's: as many as the register file holds) by 2 KVL columns;
 * each output is its bias plus the products in k order, whatever the tile. */
static void KSFX(mm_nn)(size_t R, size_t K, size_t N, const float *restrict A,
                        const float *restrict B, const float *restrict bias,
                        float *restrict C) {
  const size_t N2 = N & ~(size_t)(2 * KVL - 1), RT = R - R % KRT;
  for (size_t i = 0; i < RT; i += KRT) {
    const float *a = A + i * K;
    for (size_t j = 0; j < N2; j += 2 * KVL) {
      KV b0 = {0}, b1 = {0};
      if (bias) {
        KLD8(b0, bias + j);
        KLD8(b1, bias + j + KVL);
      }
      KV c0[KRT], c1[KRT];
      _Pragma("GCC unroll 16") for (int r = 0; r < KRT; r++) {
        c0[r] = b0;
        c1[r] = b1;
      }
      for (size_t k = 0; k < K; k++) {
        const float *b = B + k * N + j;
        KV v0, v1;
        KLD8(v0, b);
        KLD8(v1, b + KVL);
        _Pragma("GCC unroll 16") for (int r = 0; r < KRT; r++) {
          const float x = a[(size_t)r * K + k];
          c0[r] += x * v0;
          c1[r] += x * v1;
        }
      }
      _Pragma("GCC unroll 16") for (int r = 0; r < KRT; r++) {
        KST8(C + (i + (size_t)r) * N + j, c0[r]);
        KST8(C + (i + (size_t)r) * N + j + KVL, c1[r]);
      }
    }
    for (size_t r = i; r < i + KRT; r++)
      for (size_t j = N2; j < N; j++) {
        float s = bias ? bias[j] : 0.0f;
        for (size_t k = 0; k < K; k++) s += A[r * K + k] * B[k * N + j];
        C[r * N + j] = s;
      }
  }
  for (size_t r = RT; r < R; r++) {
    float *c = C + r * N;
    for (size_t j = 0; j < N; j++) c[j] = bias ? bias[j] : 0.0f;
    for (size_t k = 0; k < K; k++) {
      float x = A[r * K + k];
      const float *b = B + k * N;
      for (size_t j = 0; j < N; j++) c[j] += x * b[j];
    }
  }
}

/* G[P x N] = A[R x P]^T * B[R x N]: the weight gradients, summed over the
 * R rows in order; A's rows lda floats apart (P columns of a wider matrix
 * give G's rows of a piece). Tiles of KRT rows of G by 2 KVL columns. G is written,
 * not added to: zeroing a gradient first (glibc's memset streams past the
 * caches above a size) would cost as much as a product. */
static void KSFX(mm_tn)(size_t R, size_t P, size_t N, const float *restrict A, size_t lda,
                        const float *restrict B, float *restrict G) {
  const size_t N2 = N & ~(size_t)(2 * KVL - 1), PT = P - P % KRT;
  for (size_t p = 0; p < PT; p += KRT) {
    for (size_t j = 0; j < N2; j += 2 * KVL) {
      KV g0[KRT], g1[KRT];
      _Pragma("GCC unroll 16") for (int q = 0; q < KRT; q++) {
        g0[q] = (KV){0};
        g1[q] = (KV){0};
      }
      for (size_t i = 0; i < R; i++) {
        const float *b = B + i * N + j;
        const float *a = A + i * lda + p;
        KV v0, v1;
        KLD8(v0, b);
        KLD8(v1, b + KVL);
        _Pragma("GCC unroll 16") for (int q = 0; q < KRT; q++) {
          const float x = a[q];
          g0[q] += x * v0;
          g1[q] += x * v1;
        }
      }
      _Pragma("GCC unroll 16") for (int q = 0; q < KRT; q++) {
        KST8(G + (p + (size_t)q) * N + j, g0[q]);
        KST8(G + (p + (size_t)q) * N + j + KVL, g1[q]);
      }
    }
    for (size_t pp = p; pp < p + KRT; pp++)
      for (size_t j = N2; j < N; j++) {
        float s = 0.0f;
        for (size_t i = 0; i < R; i++) s += A[i * lda + pp] * B[i * N + j];
        G[pp * N + j] = s;
      }
  }
  for (size_t pp = PT; pp < P; pp++) {
    float *g = G + pp * N;
    for (size_t j = 0; j < N; j++) g[j] = 0.0f;
    for (size_t i = 0; i < R; i++) {
      float x = A[i * lda + pp];
      const float *b = B + i * N;
      for (size_t j = 0; j < N; j++) g[j] += x * b[j];
    }
  }
}

/* exp(x) for x <= 0 (clamped at -87, where float underflows): Cody-Waite
 * range reduction and a degree-6 Taylor polynomial, relative error about
 * 2e-7; branch-free so that it vectorises. */
static inline float KSFX(exp_neg)(float x) {
  /* Written so that NaN takes the clamp too: the exponent below is then a
   * small positive integer instead of (int32_t)NaN shifted (undefined
   * behaviour, UBSan's negative left shift). A NaN input still gives a NaN
   * GELU: its callers multiply by the input or by a NaN factor. */
  x = x > -87.0f ? x : -87.0f;
  float t = x * 1.44269504088896341f;
  /* round to nearest through the float mantissa (|t| < 2^22) */
  float n = (t + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693145751953125f;
  r = r - n * 1.428606765330187e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  uint32_t e = (uint32_t)((int32_t)n + 127) << 23;
  float s;
  memcpy(&s, &e, sizeof s);
  return p * s;
}

/* Exact GELU, 0.5 a (1 + erf(a / sqrt 2)) = a Phi(a), with its derivative
 * Phi(a) + a phi(a). Phi comes from erfc (Numerical Recipes' Chebyshev fit,
 * fractional error < 1.2e-7 everywhere), so the negative tail keeps its
 * relative accuracy instead of cancelling in 1 + erf. */
static void KSFX(gelu_fwd)(size_t n, const float *restrict a,
                           float *restrict h, float *restrict d) {
  for (size_t i = 0; i < n; i++) {
    float x = a[i];
    float z = (x < 0 ? -x : x) * 0.70710678118654752f;
    z = z > 10.0f ? 10.0f : z;
    float t = 1.0f / (1.0f + 0.5f * z);
    float q = 0.17087277f;
    q = q * t - 0.82215223f;
    q = q * t + 1.48851587f;
    q = q * t - 1.13520398f;
    q = q * t + 0.27886807f;
    q = q * t - 0.18628806f;
    q = q * t + 0.09678418f;
    q = q * t + 0.37409196f;
    q = q * t + 1.00002368f;
    q = q * t - 1.26551223f;
    float erfc = t * KSFX(exp_neg)(q - z * z);
    float half = 0.5f * erfc;
    float phi_cdf = x < 0 ? half : 1.0f - half;
    float pdf = 0.39894228040143268f * KSFX(exp_neg)(-0.5f * x * x);
    h[i] = x * phi_cdf;
    d[i] = phi_cdf + x * pdf;
  }
}

/* Layer normalisation of R rows of length n, without its scale and shift
 * (the chunks fold those into the Linears after them): xhat and 1/std. The
 * statistics in double (log-mel inputs sit far from zero, about -100 ...
 * +20 dB), KVL/2 partial sums a row, added in lane order. exact: xhat from
 * x - mean in double (the VJP's), else in float (the trainer's). */
static void KSFX(ln_fwd)(size_t R, size_t n, const float *restrict x,
                         float *restrict xhat, float *restrict rstd, int exact) {
  const size_t nv = n & ~(size_t)(KVHL - 1);
  for (size_t i = 0; i < R; i++) {
    const float *xi = x + i * n;
    KVD sv = {0};
    for (size_t j = 0; j < nv; j += KVHL) {
      KVH v;
      KLD8(v, xi + j);
      sv += __builtin_convertvector(v, KVD);
    }
    double s = 0;
    for (int l = 0; l < KVHL; l++) s += sv[l];
    for (size_t j = nv; j < n; j++) s += xi[j];
    const double mean = s / (double)n;
    KVD qv = {0};
    for (size_t j = 0; j < nv; j += KVHL) {
      KVH v;
      KLD8(v, xi + j);
      KVD t = __builtin_convertvector(v, KVD) - mean;
      qv += t * t;
    }
    double ss = 0;
    for (int l = 0; l < KVHL; l++) ss += qv[l];
    for (size_t j = nv; j < n; j++) {
      double t = xi[j] - mean;
      ss += t * t;
    }
    const double rs = 1.0 / sqrt(ss / (double)n + LN_EPS);
    const float m = (float)mean, r = (float)rs;
    rstd[i] = r;
    float *xh = xhat + i * n;
    for (size_t j = 0; j < nv; j += KVHL) {
      KVH v, h;
      KLD8(v, xi + j);
      if (exact)
        h = __builtin_convertvector((__builtin_convertvector(v, KVD) - mean) * (double)r, KVH);
      else
        h = (v - m) * r;
      KST8(xh + j, h);
    }
    for (size_t j = nv; j < n; j++)
      xh[j] = exact ? (float)((xi[j] - mean) * r) : (xi[j] - m) * r;
  }
}
#undef KVD
#undef KVH
#undef KVHL
