#include "ssae_cpu_kernels.h"

#include <math.h>
#include <string.h>

/* AVX2/FMA and AVX-512 clones next to the baseline build; glibc's ifunc
 * picks one when the library loads. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define SSAE_CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
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

void ssae_gelu(double *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = 0.5 * x[i] * (1.0 + erf(x[i] * M_SQRT1_2));
}
