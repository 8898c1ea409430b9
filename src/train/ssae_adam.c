/* torch.optim.Adam on the CPU (ssae_train.h), for the trainer's CPU
 * backend: one update of every parameter after each batch.
 *
 * torch.optim.Adam (torch 1.13) in float32 as torch does for float32
 * parameters, operation for operation: the Python scalars become floats in
 * the kernels, add(alpha=) and addcmul are fused multiply-adds in torch's
 * vectorised CPU kernels, addcdiv is p + (value * m) / denom, the bias
 * corrections are computed in double. The result matches torch bit for
 * bit. Every operation is an IEEE one with a single rounding (fma, sqrt,
 * division), so the AVX2 loop below gives the same bits as the portable
 * one; it exists because without the FMA instruction fmaf is a library
 * call (an update of the 19,872 default parameters took 120-140 us, as
 * long as the rest of a 512-window batch on 16 cores). */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "ssae_train.h"

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#include <immintrin.h>
#define HAVE_ADAM_AVX2 1
#endif

/* The step's scalars, as floats (the bias corrections' from double). */
typedef struct adam_k {
  float b1, b2, one_b1, one_b2, wd, neg_step, bc2_sqrt, eps;
} adam_k;

/* Parameters [i0, n): the portable loop (also the vector loop's tail). */
static void adam_scalar(const adam_k *k, size_t i0, size_t n, float *p, float *m, float *v,
                        const float *grad) {
  for (size_t i = i0; i < n; i++) {
    float g = grad[i];
    if (k->wd != 0.0f) g = fmaf(p[i], k->wd, g);
    m[i] = fmaf(g, k->one_b1, m[i] * k->b1);
    v[i] = fmaf(k->one_b2 * g, g, v[i] * k->b2);
    float denom = sqrtf(v[i]) / k->bc2_sqrt + k->eps;
    /* addcdiv's order: p + (value * m) / denom */
    p[i] = p[i] + (k->neg_step * m[i]) / denom;
  }
}

#ifdef HAVE_ADAM_AVX2
/* The same operations eight parameters at a time. */
__attribute__((target("avx2,fma"))) static void adam_avx2(const adam_k *k, size_t n, float *p,
                                                          float *m, float *v,
                                                          const float *grad) {
  const __m256 b1 = _mm256_set1_ps(k->b1), b2 = _mm256_set1_ps(k->b2);
  const __m256 one_b1 = _mm256_set1_ps(k->one_b1), one_b2 = _mm256_set1_ps(k->one_b2);
  const __m256 wd = _mm256_set1_ps(k->wd), neg_step = _mm256_set1_ps(k->neg_step);
  const __m256 bc2_sqrt = _mm256_set1_ps(k->bc2_sqrt), eps = _mm256_set1_ps(k->eps);
  const int decay = k->wd != 0.0f;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 g = _mm256_loadu_ps(grad + i), pi = _mm256_loadu_ps(p + i);
    if (decay) g = _mm256_fmadd_ps(pi, wd, g);
    __m256 mi = _mm256_fmadd_ps(g, one_b1, _mm256_mul_ps(_mm256_loadu_ps(m + i), b1));
    __m256 vi = _mm256_fmadd_ps(_mm256_mul_ps(one_b2, g), g,
                                _mm256_mul_ps(_mm256_loadu_ps(v + i), b2));
    __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2_sqrt), eps);
    pi = _mm256_add_ps(pi, _mm256_div_ps(_mm256_mul_ps(neg_step, mi), denom));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    _mm256_storeu_ps(p + i, pi);
  }
  adam_scalar(k, i, n, p, m, v, grad);
}

/* Asked once (optimisers on several threads may ask at once: the same
 * answer, stored atomically). */
static int adam_has_avx2(void) {
  static atomic_int has = -1;
  int h = atomic_load_explicit(&has, memory_order_relaxed);
  if (h < 0) {
    __builtin_cpu_init();
    h = !getenv("SSAE_NO_AVX2") && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("fma");
    atomic_store_explicit(&has, h, memory_order_relaxed);
  }
  return h;
}
#endif

ssae_adam *ssae_adam_new(const ssae_adam_cfg *cfg, size_t n, ssae_err *err) {
  ssae_adam *a = calloc(1, sizeof *a);
  if (a) {
    a->cfg = *cfg;
    a->n = n;
    a->m = calloc(n ? n : 1, sizeof(float));
    a->v = calloc(n ? n : 1, sizeof(float));
  }
  if (!a || !a->m || !a->v) {
    ssae_adam_free(a);
    ssae_err_set(err, "out of memory for the optimiser state");
    return NULL;
  }
  return a;
}

void ssae_adam_free(ssae_adam *a) {
  if (!a) return;
  free(a->m);
  free(a->v);
  free(a);
}

void ssae_adam_step(ssae_adam *a, float *params, float *grad) {
  a->step++;
  const ssae_adam_cfg *c = &a->cfg;
  double bc1 = 1.0 - pow(c->beta1, (double)a->step);
  double bc2 = 1.0 - pow(c->beta2, (double)a->step);
  const adam_k k = {(float)c->beta1,          (float)c->beta2,
                    (float)(1.0 - c->beta1),  (float)(1.0 - c->beta2),
                    (float)c->weight_decay,   (float)(-(c->lr / bc1)),
                    (float)sqrt(bc2),         (float)c->eps};
#ifdef HAVE_ADAM_AVX2
  if (adam_has_avx2()) {
    adam_avx2(&k, a->n, params, a->m, a->v, grad);
    return;
  }
#endif
  adam_scalar(&k, 0, a->n, params, a->m, a->v, grad);
}
