/* Inner loops of the CPU forward pass, built for several instruction sets
 * and picked at load time where the compiler supports it. Internal. */
#ifndef SSAE_CPU_KERNELS_H
#define SSAE_CPU_KERNELS_H

#include <stddef.h>

/* C[i][j] = bias[j] + sum_{k<K} A[i*lda+k] * B[k*ldb+j] for i < rows,
 * j < ldb. ldb is a multiple of 8 (padded, zero where unused); bias has
 * ldb entries or is NULL. */
void ssae_gemm(const double *A, size_t lda, size_t rows, size_t K, const double *B,
               size_t ldb, const double *bias, double *C, size_t ldc);

/* x = 0.5 x (1 + erf(x / sqrt 2)), in place; exact to about 1e-15.
 * ssae_erf_init() must have run once before (it is thread-safe). */
void ssae_erf_init(void);
void ssae_gelu(double *x, size_t n);

#endif
