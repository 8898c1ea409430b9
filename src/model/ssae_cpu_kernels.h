/* Inner loops of the CPU forward pass, built for several instruction sets
 * and picked once at start-up where the compiler supports it. Internal. */
#ifndef SSAE_CPU_KERNELS_H
#define SSAE_CPU_KERNELS_H

#include <stddef.h>

/* Every padded dimension (ldb of ssae_gemm) is a multiple of this: two
 * AVX-512 vectors of doubles, the widest register tile. */
#define SSAE_CPU_PAD 16

/* Picks the kernels for this CPU and fills the erf table; must have run
 * once before the others (thread-safe, cheap after the first call). */
void ssae_cpu_kernels_init(void);

/* Name of the kernel set in use: "avx512", "avx2" or "generic". */
const char *ssae_cpu_kernels_isa(void);

/* C[i][j] = bias[j] + sum_{k<K} A[i*lda+k] * B[k*ldb+j] for i < rows,
 * j < ldb. ldb is a multiple of SSAE_CPU_PAD (padded, zero where unused);
 * bias has ldb entries or is NULL. Rows of A may overlap (lda < K). */
void ssae_gemm(const double *A, size_t lda, size_t rows, size_t K, const double *B,
               size_t ldb, const double *bias, double *C, size_t ldc);

/* x = 0.5 x (1 + erf(x / sqrt 2)), in place; within 1e-14 |x| of the
 * same formula with libm's erf. */
void ssae_gelu(double *x, size_t n);

/* LayerNorm without its affine part (folded into the next Linear):
 * out[r*ldo+i] = (x[r*ldx+i] - mean_r) / sqrt(var_r + 1e-5), biased
 * variance, for r < rows, i < n. */
void ssae_normalise_f(const float *x, size_t ldx, size_t rows, size_t n, double *out,
                      size_t ldo);
void ssae_normalise_d(const double *x, size_t ldx, size_t rows, size_t n, double *out,
                      size_t ldo);

/* The linear slice decoder and the window score in one pass, without
 * writing the reconstruction. For i < rows:
 *   sums[i] = sum_{f<F, m<M} (y[i][f*Mp+m] - x[i*xs + f*M + m])^2,
 *   y[i][j] = bias[j] + sum_{k<K} Z[i*ldz+k] DT[k*ldd+j].
 * Mp is a multiple of SSAE_CPU_PAD. */
void ssae_decode_score(const double *Z, size_t ldz, size_t rows, size_t K, const double *DT,
                       size_t ldd, const double *bias, const float *x, size_t xs, size_t M,
                       size_t Mp, size_t F, double *sums);

#endif
