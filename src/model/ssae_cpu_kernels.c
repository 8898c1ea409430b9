#include "ssae_cpu_kernels.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* One generic body per kernel, instantiated for the baseline and, on x86-64
 * with GCC or clang, for AVX2/FMA and AVX-512 with register tiles that fit
 * each register file; ssae_cpu_kernels_init() picks one for the CPU it runs
 * on. Plain function pointers, not target_clones: no ifunc resolver runs
 * before main (ThreadSanitizer dies on those), and the tile shape can
 * differ per instruction set. Contraction into FMA only makes the float64
 * sums more exact. */
#if !defined(__SANITIZE_THREAD__) && defined(__x86_64__) && defined(__GNUC__) && \
    defined(__linux__)
#define SSAE_X86_DISPATCH 1
#else
#define SSAE_X86_DISPATCH 0
#endif

#if SSAE_X86_DISPATCH
#include <immintrin.h>
#endif

/* GCC contracts a*b + c into FMA across statements only when told; clang
 * does within one expression by default, which is all the kernels need. */
#if defined(__clang__)
#define CONTRACT
#define TARGET_V3 __attribute__((target("avx2,fma,bmi,bmi2,f16c,lzcnt,movbe")))
#define TARGET_V4 \
  __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx512cd,avx2,fma,bmi,bmi2," \
                        "f16c,lzcnt,movbe")))
#else
#define CONTRACT __attribute__((optimize("fp-contract=fast")))
#define TARGET_V3 __attribute__((target("arch=x86-64-v3")))
#define TARGET_V4 __attribute__((target("arch=x86-64-v4")))
#endif

/* GCC and clang vector extensions. Wider types than the target's registers
 * are split by the compiler, so the generic build stays correct anywhere. */
typedef double v4d __attribute__((vector_size(32)));
typedef double v8d __attribute__((vector_size(64)));

/* Unaligned loads and stores of vectors. */
#define VLOAD(v, p) memcpy(&(v), (p), sizeof(v))
#define VSTORE(p, v) memcpy((p), &(v), sizeof(v))

/* The matrix product with a register tile of RT rows by NV vectors of type
 * VT (VW doubles each). B is streamed once per column strip and row tile;
 * the A scalars are broadcast. */
#define GEMM_BODY(VT, VW, RT, NV)                                               \
  for (size_t j0 = 0; j0 < ldb; j0 += (VW) * (NV)) {                            \
    VT bv[NV];                                                                  \
    for (int v = 0; v < (NV); v++) {                                            \
      if (bias) VLOAD(bv[v], bias + j0 + (size_t)v * (VW));                     \
      else memset(&bv[v], 0, sizeof bv[v]);                                     \
    }                                                                           \
    size_t i = 0;                                                               \
    for (; i + (RT) <= rows; i += (RT)) {                                       \
      VT acc[RT][NV];                                                           \
      _Pragma("GCC unroll 16") for (int r = 0; r < (RT); r++)                   \
          _Pragma("GCC unroll 4") for (int v = 0; v < (NV); v++) acc[r][v] = bv[v]; \
      const double *a = A + i * lda, *b = B + j0;                               \
      for (size_t k = 0; k < K; k++, b += ldb) {                                \
        VT w[NV];                                                               \
        _Pragma("GCC unroll 4") for (int v = 0; v < (NV); v++)                  \
            VLOAD(w[v], b + (size_t)v * (VW));                                  \
        _Pragma("GCC unroll 16") for (int r = 0; r < (RT); r++) {               \
          double s = a[(size_t)r * lda + k];                                    \
          _Pragma("GCC unroll 4") for (int v = 0; v < (NV); v++) acc[r][v] += s * w[v]; \
        }                                                                       \
      }                                                                         \
      _Pragma("GCC unroll 16") for (int r = 0; r < (RT); r++)                   \
          _Pragma("GCC unroll 4") for (int v = 0; v < (NV); v++)                \
              VSTORE(C + (i + (size_t)r) * ldc + j0 + (size_t)v * (VW), acc[r][v]); \
    }                                                                           \
    for (; i < rows; i++) {                                                     \
      VT acc[NV];                                                               \
      for (int v = 0; v < (NV); v++) acc[v] = bv[v];                            \
      const double *a = A + i * lda, *b = B + j0;                               \
      for (size_t k = 0; k < K; k++, b += ldb) {                                \
        _Pragma("GCC unroll 4") for (int v = 0; v < (NV); v++) {                \
          VT w;                                                                 \
          VLOAD(w, b + (size_t)v * (VW));                                       \
          acc[v] += a[k] * w;                                                   \
        }                                                                       \
      }                                                                         \
      for (int v = 0; v < (NV); v++) VSTORE(C + i * ldc + j0 + (size_t)v * (VW), acc[v]); \
    }                                                                           \
  }

#define GEMM_ARGS                                                                  \
  const double *A, size_t lda, size_t rows, size_t K, const double *B, size_t ldb, \
      const double *bias, double *C, size_t ldc

typedef void gemm_fn(GEMM_ARGS);
typedef void gelu_fn(double *x, size_t n);

/* erf on [0, 6) from a table of Taylor polynomials, one per interval of
 * width 3/8 around its centre: degree 13 leaves a remainder below 3e-15,
 * and beyond 6 erf is 1 in float64. libm's erf costs more than the matrix
 * products of a window; this is a few multiply-adds per value with no
 * branch. The table is coefficient-major: with 16 intervals, one
 * coefficient of every interval fits two AVX-512 registers, and a
 * two-register permute looks up 8 values at once (gathers are slow). */
#define ERF_NI 16
#define ERF_W (6.0 / ERF_NI)
#define ERF_NC 14 /* coefficients: degree 13 */
static double erf_tab[ERF_NC][ERF_NI];

#define GELU_BODY                                                        \
  for (size_t i = 0; i < n; i++) {                                       \
    double v = x[i], t = v * M_SQRT1_2, a = fabs(t);                     \
    a = a < 5.999 ? a : 5.999;                                           \
    int k = (int)(a * (1.0 / ERF_W));                                    \
    double d = a - ((double)k + 0.5) * ERF_W;                            \
    double p = erf_tab[ERF_NC - 1][k];                                  \
    for (int j = ERF_NC - 2; j >= 0; j--) p = p * d + erf_tab[j][k];    \
    x[i] = 0.5 * v * (1.0 + copysign(p, t));                             \
  }

/* (x - mean) / sqrt(var + eps) of each row of n values: the LayerNorm
 * without its affine part. Several partial sums, so that the compiler can
 * vectorise the reductions (reassociation of a handful of float64 sums:
 * far below the accuracy asked). */
#define NORM_BODY(T)                                                        \
  for (size_t r = 0; r < rows; r++) {                                      \
    const T *xr = x + r * ldx;                                             \
    double *o = out + r * ldo;                                             \
    double s8[8] = {0, 0, 0, 0, 0, 0, 0, 0}, mean = 0, var = 0;            \
    size_t i = 0;                                                          \
    for (; i + 8 <= n; i += 8)                                             \
      for (int u = 0; u < 8; u++) s8[u] += (double)xr[i + (size_t)u];      \
    for (; i < n; i++) mean += (double)xr[i];                              \
    for (int u = 0; u < 8; u++) mean += s8[u], s8[u] = 0;                  \
    mean /= (double)n;                                                     \
    for (i = 0; i + 8 <= n; i += 8)                                        \
      for (int u = 0; u < 8; u++) {                                        \
        double d = (double)xr[i + (size_t)u] - mean;                       \
        o[i + (size_t)u] = d;                                              \
        s8[u] += d * d;                                                    \
      }                                                                    \
    for (; i < n; i++) {                                                   \
      double d = (double)xr[i] - mean;                                     \
      o[i] = d;                                                            \
      var += d * d;                                                        \
    }                                                                      \
    for (int u = 0; u < 8; u++) var += s8[u];                              \
    double inv = 1.0 / sqrt(var / (double)n + 1e-5);                       \
    for (i = 0; i < n; i++) o[i] *= inv;                                   \
  }

#define NORMF_ARGS const float *x, size_t ldx, size_t rows, size_t n, double *out, size_t ldo
#define NORMD_ARGS const double *x, size_t ldx, size_t rows, size_t n, double *out, size_t ldo

/* The slice decoder and the score together, without writing the
 * reconstruction: sums[i] = sum over f < F, m < M of
 * (bias[f*Mp+m] + sum_{k<K} Z[i*ldz+k] DT[k*ldd+f*Mp+m] - x[i*xs+f*M+m])^2.
 * Column strips of VW*NV that run past M (M not a multiple of it) take a
 * scalar tail. */
#define DEC_BODY(VT, FT, VW, RT, NV)                                                \
  double part[RT];                                                                   \
  size_t i = 0;                                                                      \
  for (; i < rows; i += (RT)) {                                                      \
    size_t nr = rows - i < (RT) ? rows - i : (RT);                                   \
    for (int r = 0; r < (RT); r++) part[r] = 0;                                      \
    for (size_t f = 0; f < F; f++)                                                   \
      for (size_t m0 = 0; m0 < M; m0 += (VW) * (NV)) {                               \
        size_t j0 = f * Mp + m0;                                                     \
        VT acc[RT][NV], bv[NV];                                                      \
        for (int v = 0; v < (NV); v++) VLOAD(bv[v], bias + j0 + (size_t)v * (VW));   \
        _Pragma("GCC unroll 16") for (int r = 0; r < (RT); r++)                      \
            _Pragma("GCC unroll 4") for (int v = 0; v < (NV); v++) acc[r][v] = bv[v]; \
        const double *b = DT + j0;                                                   \
        if (nr == (RT)) {                                                            \
          const double *a = Z + i * ldz;                                             \
          for (size_t k = 0; k < K; k++, b += ldd) {                                 \
            VT w[NV];                                                                \
            _Pragma("GCC unroll 4") for (int v = 0; v < (NV); v++)                   \
                VLOAD(w[v], b + (size_t)v * (VW));                                   \
            _Pragma("GCC unroll 16") for (int r = 0; r < (RT); r++) {                \
              double sc = a[(size_t)r * ldz + k];                                    \
              _Pragma("GCC unroll 4") for (int v = 0; v < (NV); v++) acc[r][v] += sc * w[v]; \
            }                                                                        \
          }                                                                          \
        } else {                                                                     \
          for (size_t r = 0; r < nr; r++) {                                          \
            const double *a = Z + (i + r) * ldz, *bb = b;                            \
            for (size_t k = 0; k < K; k++, bb += ldd)                                \
              for (int v = 0; v < (NV); v++) {                                       \
                VT w;                                                                \
                VLOAD(w, bb + (size_t)v * (VW));                                     \
                acc[r][v] += a[k] * w;                                               \
              }                                                                      \
          }                                                                          \
        }                                                                            \
        if (m0 + (VW) * (NV) <= M) {                                                 \
          for (size_t r = 0; r < nr; r++) {                                          \
            const float *xr = x + (i + r) * xs + f * M + m0;                         \
            VT sq;                                                                   \
            memset(&sq, 0, sizeof sq);                                               \
            _Pragma("GCC unroll 4") for (int v = 0; v < (NV); v++) {                 \
              FT xf;                                                                 \
              VLOAD(xf, xr + (size_t)v * (VW));                                      \
              VT d = acc[r][v] - __builtin_convertvector(xf, VT);                    \
              sq += d * d;                                                           \
            }                                                                        \
            double t = 0;                                                            \
            for (int u = 0; u < (VW); u++) t += sq[u];                               \
            part[r] += t;                                                            \
          }                                                                          \
        } else {                                                                     \
          for (size_t r = 0; r < nr; r++) {                                          \
            const float *xr = x + (i + r) * xs + f * M + m0;                         \
            double y[(VW) * (NV)];                                                   \
            memcpy(y, acc[r], sizeof y);                                             \
            for (size_t u = 0; u < M - m0; u++) {                                    \
              double d = y[u] - (double)xr[u];                                       \
              part[r] += d * d;                                                      \
            }                                                                        \
          }                                                                          \
        }                                                                            \
      }                                                                              \
    for (size_t r = 0; r < nr; r++) sums[i + r] = part[r];                           \
  }

#define DEC_ARGS                                                                        \
  const double *Z, size_t ldz, size_t rows, size_t K, const double *DT, size_t ldd,       \
      const double *bias, const float *x, size_t xs, size_t M, size_t Mp, size_t F,       \
      double *sums

typedef float v4f __attribute__((vector_size(16)));
typedef float v8f __attribute__((vector_size(32)));
typedef void normf_fn(NORMF_ARGS);
typedef void normd_fn(NORMD_ARGS);
typedef void dec_fn(DEC_ARGS);

CONTRACT static void gemm_generic(GEMM_ARGS) {
  GEMM_BODY(v4d, 4, 4, 2)
}
CONTRACT static void gelu_generic(double *x, size_t n) {
  GELU_BODY
}
static void normf_generic(NORMF_ARGS) { NORM_BODY(float) }
static void normd_generic(NORMD_ARGS) { NORM_BODY(double) }
CONTRACT static void dec_generic(DEC_ARGS) {
  DEC_BODY(v4d, v4f, 4, 4, 2)
}

#if SSAE_X86_DISPATCH
/* AVX2: 16 registers of 4 doubles: a 6 x 8 tile is 12 accumulators. */
TARGET_V3 CONTRACT static void
gemm_avx2(GEMM_ARGS) {
  GEMM_BODY(v4d, 4, 6, 2)
}
TARGET_V3 CONTRACT static void
gelu_avx2(double *x, size_t n) {
  GELU_BODY
}
static void normf_avx2(NORMF_ARGS) TARGET_V3;
static void normf_avx2(NORMF_ARGS) { NORM_BODY(float) }
static void normd_avx2(NORMD_ARGS) TARGET_V3;
static void normd_avx2(NORMD_ARGS) { NORM_BODY(double) }
TARGET_V3 CONTRACT static void
dec_avx2(DEC_ARGS) {
  DEC_BODY(v4d, v4f, 4, 6, 2)
}
/* AVX-512: 32 registers of 8 doubles: an 8 x 16 tile is 16 accumulators. */
TARGET_V4 CONTRACT static void
gemm_avx512(GEMM_ARGS) {
  GEMM_BODY(v8d, 8, 8, 2)
}
TARGET_V4 CONTRACT static void
gelu_avx512(double *x, size_t n0) {
  const __m512d s2 = _mm512_set1_pd(M_SQRT1_2), lim = _mm512_set1_pd(5.999),
                sc = _mm512_set1_pd(1.0 / ERF_W), w = _mm512_set1_pd(ERF_W),
                half = _mm512_set1_pd(0.5), one = _mm512_set1_pd(1.0),
                sign = _mm512_set1_pd(-0.0);
  size_t j = 0;
  for (; j + 8 <= n0; j += 8) {
    __m512d v = _mm512_loadu_pd(x + j), t = _mm512_mul_pd(v, s2);
    __m512d a = _mm512_min_pd(_mm512_andnot_pd(sign, t), lim);
    __m512i k = _mm512_cvttpd_epi64(_mm512_mul_pd(a, sc));
    __m512d d = _mm512_sub_pd(a, _mm512_mul_pd(_mm512_add_pd(_mm512_cvtepi64_pd(k), half), w));
    __m512d p = _mm512_permutex2var_pd(_mm512_loadu_pd(erf_tab[ERF_NC - 1]), k,
                                       _mm512_loadu_pd(erf_tab[ERF_NC - 1] + 8));
    for (int c = ERF_NC - 2; c >= 0; c--)
      p = _mm512_fmadd_pd(p, d, _mm512_permutex2var_pd(_mm512_loadu_pd(erf_tab[c]), k,
                                                       _mm512_loadu_pd(erf_tab[c] + 8)));
    __m512d e = _mm512_or_pd(_mm512_andnot_pd(sign, p), _mm512_and_pd(sign, t));
    _mm512_storeu_pd(x + j, _mm512_mul_pd(_mm512_mul_pd(half, v), _mm512_add_pd(one, e)));
  }
  x += j;
  size_t n = n0 - j;
  GELU_BODY
}
static void normf_avx512(NORMF_ARGS) TARGET_V4;
static void normf_avx512(NORMF_ARGS) { NORM_BODY(float) }
static void normd_avx512(NORMD_ARGS) TARGET_V4;
static void normd_avx512(NORMD_ARGS) { NORM_BODY(double) }
TARGET_V4 CONTRACT static void
dec_avx512(DEC_ARGS) {
  DEC_BODY(v8d, v8f, 8, 8, 2)
}
#endif

static gemm_fn *gemm_impl = gemm_generic;
static gelu_fn *gelu_impl = gelu_generic;
static normf_fn *normf_impl = normf_generic;
static normd_fn *normd_impl = normd_generic;
static dec_fn *dec_impl = dec_generic;
static const char *isa_name = "generic";
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void init(void) {
  for (int i = 0; i < ERF_NI; i++) {
    double c = (i + 0.5) * ERF_W, e = exp(-c * c);
    /* d^n/dx^n erf(c) = 2/sqrt(pi) (-1)^(n-1) H_(n-1)(c) exp(-c^2), H the
     * physicists' Hermite polynomials. */
    double h_prev = 0.0, h = 1.0, fact = 1.0; /* H_(n-2), H_(n-1) */
    erf_tab[0][i] = erf(c);
    for (int n = 1; n < ERF_NC; n++) {
      fact *= n;
      erf_tab[n][i] = M_2_SQRTPI * (n % 2 ? 1.0 : -1.0) * h * e / fact;
      double next = 2.0 * c * h - 2.0 * (n - 1) * h_prev; /* H_n */
      h_prev = h;
      h = next;
    }
  }
#if SSAE_X86_DISPATCH
  /* SSAE_CPU_KERNELS=generic|avx2 caps the choice, so that tests check
   * every kernel set on one machine. */
  const char *cap = getenv("SSAE_CPU_KERNELS");
  int max = !cap || !*cap ? 2 : !strcmp(cap, "avx2") ? 1 : !strcmp(cap, "generic") ? 0 : 2;
  __builtin_cpu_init();
  if (max >= 2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    gemm_impl = gemm_avx512;
    gelu_impl = gelu_avx512;
    normf_impl = normf_avx512;
    normd_impl = normd_avx512;
    dec_impl = dec_avx512;
    isa_name = "avx512";
  } else if (max >= 1 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("bmi2")) {
    gemm_impl = gemm_avx2;
    gelu_impl = gelu_avx2;
    normf_impl = normf_avx2;
    normd_impl = normd_avx2;
    dec_impl = dec_avx2;
    isa_name = "avx2";
  }
#endif
}

void ssae_cpu_kernels_init(void) { pthread_once(&init_once, init); }

const char *ssae_cpu_kernels_isa(void) {
  ssae_cpu_kernels_init();
  return isa_name;
}

void ssae_gemm(GEMM_ARGS) { gemm_impl(A, lda, rows, K, B, ldb, bias, C, ldc); }

void ssae_gelu(double *x, size_t n) { gelu_impl(x, n); }

void ssae_normalise_f(NORMF_ARGS) { normf_impl(x, ldx, rows, n, out, ldo); }

void ssae_normalise_d(NORMD_ARGS) { normd_impl(x, ldx, rows, n, out, ldo); }

void ssae_decode_score(DEC_ARGS) {
  dec_impl(Z, ldz, rows, K, DT, ldd, bias, x, xs, M, Mp, F, sums);
}
