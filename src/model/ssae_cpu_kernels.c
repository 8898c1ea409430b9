#include "ssae_cpu_kernels.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

/* AVX2/FMA and AVX-512 clones next to the baseline build; glibc's ifunc
 * picks one when the library loads. Contraction into FMA only makes the
 * float64 sums more exact. */
/* Not under ThreadSanitizer: glibc runs ifunc resolvers before TSan is
 * initialised, and the process dies at start. */
#if !defined(__SANITIZE_THREAD__) && defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define SSAE_CLONES                                                         \
  __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4"), \
                 optimize("fp-contract=fast")))
#else
#define SSAE_CLONES
#endif

#define TR 4 /* rows per register tile */
#define TC 8 /* columns per register tile: two vectors of 4 */

/* GCC and clang vector extensions: 4 doubles, split into SSE2 halves on
 * the baseline build and one AVX register on the others. */
typedef double v4d __attribute__((vector_size(32)));

/* Macros, not functions: a v4d return value would be ABI-dependent. */
#define LOAD4(v, p) memcpy(&(v), (p), sizeof(v4d))
#define store4(p, v)              \
  do {                            \
    v4d t_ = (v);                 \
    memcpy((p), &t_, sizeof t_);  \
  } while (0)

SSAE_CLONES
void ssae_gemm(const double *A, size_t lda, size_t rows, size_t K, const double *B,
               size_t ldb, const double *bias, double *C, size_t ldc) {
  const v4d zero = {0, 0, 0, 0};
  for (size_t j0 = 0; j0 < ldb; j0 += TC) {
    v4d b0 = zero, b1 = zero;
    if (bias) {
      LOAD4(b0, bias + j0);
      LOAD4(b1, bias + j0 + 4);
    }
    size_t i = 0;
    for (; i + TR <= rows; i += TR) {
      v4d c00 = b0, c01 = b1, c10 = b0, c11 = b1, c20 = b0, c21 = b1, c30 = b0, c31 = b1;
      const double *a0 = A + i * lda, *a1 = a0 + lda, *a2 = a1 + lda, *a3 = a2 + lda;
      const double *b = B + j0;
      for (size_t k = 0; k < K; k++, b += ldb) {
        v4d w0, w1;
        LOAD4(w0, b);
        LOAD4(w1, b + 4);
        c00 += a0[k] * w0;
        c01 += a0[k] * w1;
        c10 += a1[k] * w0;
        c11 += a1[k] * w1;
        c20 += a2[k] * w0;
        c21 += a2[k] * w1;
        c30 += a3[k] * w0;
        c31 += a3[k] * w1;
      }
      double *o = C + i * ldc + j0;
      store4(o, c00);
      store4(o + 4, c01);
      store4(o + ldc, c10);
      store4(o + ldc + 4, c11);
      store4(o + 2 * ldc, c20);
      store4(o + 2 * ldc + 4, c21);
      store4(o + 3 * ldc, c30);
      store4(o + 3 * ldc + 4, c31);
    }
    for (; i < rows; i++) {
      v4d c0 = b0, c1 = b1;
      const double *a = A + i * lda, *b = B + j0;
      for (size_t k = 0; k < K; k++, b += ldb) {
        v4d w0, w1;
        LOAD4(w0, b);
        LOAD4(w1, b + 4);
        c0 += a[k] * w0;
        c1 += a[k] * w1;
      }
      store4(C + i * ldc + j0, c0);
      store4(C + i * ldc + j0 + 4, c1);
    }
  }
}

/* erf on [0, 6) from a table of Taylor polynomials, one per interval of
 * width 1/8 around its centre: degree 9 leaves a remainder below 1e-14, and
 * beyond 6 erf is 1 in float64. libm's erf costs more than the matrix
 * products of a window; this runs at a few multiply-adds per value. */
#define ERF_SCALE 8
#define ERF_N (6 * ERF_SCALE)
#define ERF_DEG 10
static double erf_tab[ERF_N][ERF_DEG];
static pthread_once_t erf_once = PTHREAD_ONCE_INIT;

static void erf_init(void) {
  for (int i = 0; i < ERF_N; i++) {
    double c = (i + 0.5) / ERF_SCALE, e = exp(-c * c);
    /* d^n/dx^n erf(c) = 2/sqrt(pi) (-1)^(n-1) H_(n-1)(c) exp(-c^2), H the
     * physicists' Hermite polynomials. */
    double h_prev = 0.0, h = 1.0, fact = 1.0; /* H_(n-2), H_(n-1) */
    erf_tab[i][0] = erf(c);
    for (int n = 1; n < ERF_DEG; n++) {
      fact *= n;
      erf_tab[i][n] = M_2_SQRTPI * (n % 2 ? 1.0 : -1.0) * h * e / fact;
      double next = 2.0 * c * h - 2.0 * (n - 1) * h_prev; /* H_n */
      h_prev = h;
      h = next;
    }
  }
}

void ssae_erf_init(void) { pthread_once(&erf_once, erf_init); }

SSAE_CLONES
void ssae_gelu(double *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    double v = x[i], t = v * M_SQRT1_2, a = fabs(t);
    a = a < 5.999 ? a : 5.999;
    int k = (int)(a * ERF_SCALE);
    double d = a - (k + 0.5) / ERF_SCALE;
    const double *c = erf_tab[k];
    double p = c[9];
    for (int j = 8; j >= 0; j--) p = p * d + c[j];
    double e = t < 0 ? -p : p;
    x[i] = 0.5 * v * (1.0 + e);
  }
}
