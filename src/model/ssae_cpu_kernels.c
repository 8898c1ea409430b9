#include "ssae_cpu_kernels.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

/* AVX2/FMA and AVX-512 clones next to the baseline build; glibc's ifunc
 * picks one when the library loads. Contraction into FMA only makes the
 * float64 sums more exact. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define SSAE_CLONES                                                         \
  __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4"), \
                 optimize("fp-contract=fast")))
#else
#define SSAE_CLONES
#endif

#define TR 4 /* rows per register tile */
#define TC 8 /* columns per register tile */

SSAE_CLONES
void ssae_gemm(const double *A, size_t lda, size_t rows, size_t K, const double *B,
               size_t ldb, const double *bias, double *C, size_t ldc) {
  for (size_t j0 = 0; j0 < ldb; j0 += TC) {
    double b0[TC];
    for (int c = 0; c < TC; c++) b0[c] = bias ? bias[j0 + c] : 0.0;
    size_t i = 0;
    for (; i + TR <= rows; i += TR) {
      double acc[TR][TC];
      for (int r = 0; r < TR; r++)
        for (int c = 0; c < TC; c++) acc[r][c] = b0[c];
      const double *a = A + i * lda;
      for (size_t k = 0; k < K; k++) {
        const double *b = B + k * ldb + j0;
        for (int r = 0; r < TR; r++) {
          double av = a[r * lda + k];
          for (int c = 0; c < TC; c++) acc[r][c] += av * b[c];
        }
      }
      for (int r = 0; r < TR; r++) memcpy(C + (i + r) * ldc + j0, acc[r], sizeof acc[r]);
    }
    for (; i < rows; i++) {
      double acc[TC];
      for (int c = 0; c < TC; c++) acc[c] = b0[c];
      const double *a = A + i * lda;
      for (size_t k = 0; k < K; k++) {
        const double *b = B + k * ldb + j0;
        double av = a[k];
        for (int c = 0; c < TC; c++) acc[c] += av * b[c];
      }
      memcpy(C + i * ldc + j0, acc, sizeof acc);
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
