/* Numeric kernels of the CPU trainer, written so that GCC vectorises them.
 * Included twice by ssae_grad.c: once for the baseline ISA and once under
 * target("avx2,fma") with a name suffix, picked at run time. KSFX(name)
 * appends the suffix. Everything is static. */

/* KV is a vector of KVL floats in GCC's vector extension (16 bytes for the
 * baseline, 32 under AVX2), chosen by the includer: the tiles' accumulators
 * are named variables of it, so they live in registers. */
typedef float KV __attribute__((vector_size(KVL * 4)));

#ifndef KLD8
/* unaligned load / store; macros, since passing these vectors to functions
 * would depend on the ISA's ABI */
#define KLD8(v, p) memcpy(&(v), (p), sizeof(v))
#define KST8(p, v) memcpy((p), &(v), sizeof(v))
#endif

/* C[R x N] = A[R x K] * B[K x N] (+ bias[N]). Register tiles of 4 rows by
 * 2 KVL columns. */
static void KSFX(mm_nn)(size_t R, size_t K, size_t N, const float *restrict A,
                        const float *restrict B, const float *restrict bias,
                        float *restrict C) {
  size_t N16 = N & ~(size_t)(2 * KVL - 1), R4 = R & ~(size_t)3;
  for (size_t i = 0; i < R4; i += 4) {
    const float *a0 = A + i * K, *a1 = a0 + K, *a2 = a1 + K, *a3 = a2 + K;
    for (size_t j = 0; j < N16; j += 2 * KVL) {
      KV b0 = {0}, b1 = {0};
      if (bias) {
        KLD8(b0, bias + j);
        KLD8(b1, bias + j + KVL);
      }
      KV c00 = b0, c01 = b1, c10 = b0, c11 = b1, c20 = b0, c21 = b1, c30 = b0, c31 = b1;
      for (size_t k = 0; k < K; k++) {
        const float *b = B + k * N + j;
        KV v0, v1;
        KLD8(v0, b);
        KLD8(v1, b + KVL);
        float x0 = a0[k], x1 = a1[k], x2 = a2[k], x3 = a3[k];
        c00 += x0 * v0;
        c01 += x0 * v1;
        c10 += x1 * v0;
        c11 += x1 * v1;
        c20 += x2 * v0;
        c21 += x2 * v1;
        c30 += x3 * v0;
        c31 += x3 * v1;
      }
      float *c = C + i * N + j;
      KST8(c, c00);
      KST8(c + KVL, c01);
      KST8(c + N, c10);
      KST8(c + N + KVL, c11);
      KST8(c + 2 * N, c20);
      KST8(c + 2 * N + KVL, c21);
      KST8(c + 3 * N, c30);
      KST8(c + 3 * N + KVL, c31);
    }
    for (size_t r = i; r < i + 4; r++)
      for (size_t j = N16; j < N; j++) {
        float s = bias ? bias[j] : 0.0f;
        for (size_t k = 0; k < K; k++) s += A[r * K + k] * B[k * N + j];
        C[r * N + j] = s;
      }
  }
  for (size_t r = R4; r < R; r++) {
    float *c = C + r * N;
    for (size_t j = 0; j < N; j++) c[j] = bias ? bias[j] : 0.0f;
    for (size_t k = 0; k < K; k++) {
      float x = A[r * K + k];
      const float *b = B + k * N;
      for (size_t j = 0; j < N; j++) c[j] += x * b[j];
    }
  }
}

/* G[P x N] += A[R x P]^T * B[R x N]: the weight gradients, summed over the
 * R rows in order. */
static void KSFX(mm_tn_acc)(size_t R, size_t P, size_t N,
                            const float *restrict A, const float *restrict B,
                            float *restrict G) {
  size_t N16 = N & ~(size_t)(2 * KVL - 1), P4 = P & ~(size_t)3;
  for (size_t p = 0; p < P4; p += 4) {
    for (size_t j = 0; j < N16; j += 2 * KVL) {
      float *g = G + p * N + j;
      KV g00, g01, g10, g11, g20, g21, g30, g31;
      KLD8(g00, g);
      KLD8(g01, g + KVL);
      KLD8(g10, g + N);
      KLD8(g11, g + N + KVL);
      KLD8(g20, g + 2 * N);
      KLD8(g21, g + 2 * N + KVL);
      KLD8(g30, g + 3 * N);
      KLD8(g31, g + 3 * N + KVL);
      for (size_t i = 0; i < R; i++) {
        const float *b = B + i * N + j;
        const float *a = A + i * P + p;
        KV v0, v1;
        KLD8(v0, b);
        KLD8(v1, b + KVL);
        float x0 = a[0], x1 = a[1], x2 = a[2], x3 = a[3];
        g00 += x0 * v0;
        g01 += x0 * v1;
        g10 += x1 * v0;
        g11 += x1 * v1;
        g20 += x2 * v0;
        g21 += x2 * v1;
        g30 += x3 * v0;
        g31 += x3 * v1;
      }
      KST8(g, g00);
      KST8(g + KVL, g01);
      KST8(g + N, g10);
      KST8(g + N + KVL, g11);
      KST8(g + 2 * N, g20);
      KST8(g + 2 * N + KVL, g21);
      KST8(g + 3 * N, g30);
      KST8(g + 3 * N + KVL, g31);
    }
    for (size_t pp = p; pp < p + 4; pp++)
      for (size_t j = N16; j < N; j++) {
        float s = G[pp * N + j];
        for (size_t i = 0; i < R; i++) s += A[i * P + pp] * B[i * N + j];
        G[pp * N + j] = s;
      }
  }
  for (size_t pp = P4; pp < P; pp++)
    for (size_t i = 0; i < R; i++) {
      float x = A[i * P + pp];
      const float *b = B + i * N;
      float *g = G + pp * N;
      for (size_t j = 0; j < N; j++) g[j] += x * b[j];
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
