/* The CPU forward and backward of a chunk of windows, shared by the
 * trainer's gradient (ssae_grad.c, for the MSE loss) and the vector-Jacobian
 * products (src/api/ssae_vjp.c, from an upstream gradient). Included twice
 * by each: first for the kernels, the chunk's scratch and the LayerNorms,
 * then, after the object's type is complete and GRAD_T names it, for the
 * functions on it; that type has the fields k (kernels), M, F, L, S, C, P,
 * off, params, bn, bn_t, gnorm, enc_t, bnw_t, dec_t and acc (the summed
 * gradient, P doubles). `exact` picks the
 * VJP's LayerNorm arithmetic (x - mean and the input gradient's means in
 * double) over the trainer's (those in float); the trainer's results stay as
 * they were. */
#ifndef SSAE_GRAD_CHUNK_H
#define SSAE_GRAD_CHUNK_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK 32
#define LN_EPS 1e-5
#define NORM_EPS 1e-12

/* The kernels do not use floating-point exception flags; without
 * -ftrapping-math GCC if-converts the selects in the GELU loop and
 * vectorises it, also at -O2 (distributions' and meson's debugoptimized
 * builds) once its cost model is the -O3 one: -O2's alone leaves the GELUs
 * scalar, and a training step at half speed. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math", "tree-loop-vectorize", "vect-cost-model=dynamic")
#endif
#define KSFX(name) name##_base
#define KV kv4
#define KVL 4
#define KRT 4
#include "ssae_train_kern.h"
#undef KSFX
#undef KV
#undef KVL
#undef KRT
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define HAVE_AVX2_KERNELS 1
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#pragma GCC optimize("fp-contract=fast", "no-trapping-math", "tree-loop-vectorize", \
                     "vect-cost-model=dynamic")
#define KSFX(name) name##_avx2
#define KV kv8
#define KVL 8
#define KRT 4
#include "ssae_train_kern.h"
#undef KSFX
#undef KV
#undef KVL
#undef KRT
#pragma GCC pop_options

/* AVX-512 (F, DQ, VL, BW): vectors of 16 floats, 32 registers. */
#define HAVE_AVX512_KERNELS 1
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma", "prefer-vector-width=512")
#pragma GCC optimize("fp-contract=fast", "no-trapping-math", "tree-loop-vectorize", \
                     "vect-cost-model=dynamic")
#define KSFX(name) name##_avx512
#define KV kv16
#define KVL 16
#define KRT 8
#include "ssae_train_kern.h"
#undef KSFX
#undef KV
#undef KVL
#undef KRT
#pragma GCC pop_options
#endif

typedef struct kernels {
  void (*mm_nn)(size_t, size_t, size_t, const float *, const float *, const float *, float *);
  void (*mm_tn_acc)(size_t, size_t, size_t, const float *, const float *, float *);
  void (*gelu_fwd)(size_t, const float *, float *, float *);
  void (*ln_fwd)(size_t, size_t, const float *, const float *, const float *, float *, float *,
                 float *, int);
} kernels;

/* The widest kernel set the CPU runs: AVX-512 (unless SSAE_NO_AVX512 is
 * set), AVX2 with FMA (unless SSAE_NO_AVX2 is set, which also rules out
 * AVX-512), else the portable one. */
static kernels pick_kernels(void) {
  kernels k = {mm_nn_base, mm_tn_acc_base, gelu_fwd_base, ln_fwd_base};
#ifdef HAVE_AVX2_KERNELS
  __builtin_cpu_init();
  if (getenv("SSAE_NO_AVX2") || !__builtin_cpu_supports("avx2") ||
      !__builtin_cpu_supports("fma"))
    return k;
  k = (kernels){mm_nn_avx2, mm_tn_acc_avx2, gelu_fwd_avx2, ln_fwd_avx2};
  if (!getenv("SSAE_NO_AVX512") && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw"))
    k = (kernels){mm_nn_avx512, mm_tn_acc_avx512, gelu_fwd_avx512, ln_fwd_avx512};
#endif
  return k;
}

/* Activations and their gradients for one chunk. */
typedef struct work {
  float *buf; /* the one allocation behind the others */
  float *xhat, *u, *a, *h, *gd1, *rstd1;      /* slice encoder: [R x M], [R x S], [R] */
  float *z, *zhat, *v, *p, *zp, *gd2, *rstd2; /* bottleneck: [CHUNK x L], [CHUNK] */
  float *r, *y, *dr, *dzp, *dv, *dz, *du;     /* decoder, gradients */
} work;

/* dgw += dout xhat, dgb += dout; with dx, the input gradient
 * dx = rstd (dxh - mean(dxh) - xhat mean(dxh xhat)), dxh = dout gw. */
static void ln_bwd(size_t R, size_t n, const float *dout, const float *xhat, const float *rstd,
                   const float *gw, float *dgw, float *dgb, float *dx, int exact) {
  for (size_t i = 0; i < R; i++) {
    const float *dy = dout + i * n, *xh = xhat + i * n;
    for (size_t j = 0; j < n; j++) {
      dgw[j] += dy[j] * xh[j];
      dgb[j] += dy[j];
    }
    if (!dx) continue;
    double s1 = 0, s2 = 0;
    for (size_t j = 0; j < n; j++) {
      double t = (double)dy[j] * gw[j];
      s1 += t;
      s2 += t * xh[j];
    }
    float *o = dx + i * n;
    if (exact) {
      double m1 = s1 / (double)n, m2 = s2 / (double)n;
      for (size_t j = 0; j < n; j++)
        o[j] = (float)(rstd[i] * ((double)dy[j] * gw[j] - m1 - xh[j] * m2));
    } else {
      float m1 = (float)(s1 / (double)n), m2 = (float)(s2 / (double)n);
      for (size_t j = 0; j < n; j++) o[j] = rstd[i] * (dy[j] * gw[j] - m1 - xh[j] * m2);
    }
  }
}

#endif /* SSAE_GRAD_CHUNK_H */

#if defined(GRAD_T) && !defined(SSAE_GRAD_CHUNK_FUNCS)
#define SSAE_GRAD_CHUNK_FUNCS

static int work_alloc(work *w, const GRAD_T *g) {
  size_t R = (size_t)CHUNK * g->F, N = CHUNK, M = g->M, S = g->S, L = g->L;
  size_t len[] = {R * M, R * M, R * S, R * S, R * S, R, N * L, N * L, N * L, N * L,
                  N * L, N * L, N, R * S, R * M, R * S, N * L, N * L, N * L, R * M};
  float **dst[] = {&w->xhat, &w->u,  &w->a,   &w->h,  &w->gd1, &w->rstd1, &w->z,
                   &w->zhat, &w->v,  &w->p,   &w->zp, &w->gd2, &w->rstd2, &w->r,
                   &w->y,    &w->dr, &w->dzp, &w->dv, &w->dz,  &w->du};
  size_t total = 0;
  for (size_t i = 0; i < sizeof len / sizeof *len; i++) total += len[i];
  w->buf = calloc(total ? total : 1, sizeof(float));
  if (!w->buf) return -1;
  float *p = w->buf;
  for (size_t i = 0; i < sizeof len / sizeof *len; i++) {
    *dst[i] = p;
    p += len[i];
  }
  return 0;
}

/* Basis rows whose squared norms are summed side by side: each row's sum
 * in its own order, as one row at a time, with eight chains of additions
 * in flight instead of one (set on every training step). */
#define NORM_ROWS 8

/* Row l of the normalised basis from its sum of squares s. */
static void norm_row(GRAD_T *g, const float *G, size_t l, double s) {
  const size_t C = g->C;
  double n = sqrt(s);
  g->gnorm[l] = n;
  double div = n > NORM_EPS ? n : NORM_EPS;
  for (size_t c = 0; c < C; c++) g->bn[l * C + c] = (float)(G[l * C + c] / div);
}

/* params copied, and what the products use derived from them: the
 * normalised basis, its row norms and transpose, the weights transposed. */
static void set_derived(GRAD_T *g, const float *params) {
  size_t M = g->M, L = g->L, S = g->S, C = g->C;
  memcpy(g->params, params, g->P * sizeof(float));
  const float *G = params + g->off[4];
  size_t l = 0;
  for (; l + NORM_ROWS <= L; l += NORM_ROWS) {
    double s[NORM_ROWS] = {0};
    for (size_t c = 0; c < C; c++)
      for (size_t r = 0; r < NORM_ROWS; r++) {
        double v = G[(l + r) * C + c];
        s[r] += v * v;
      }
    for (size_t r = 0; r < NORM_ROWS; r++) norm_row(g, G, l + r, s[r]);
  }
  for (; l < L; l++) {
    double s = 0;
    for (size_t c = 0; c < C; c++) s += (double)G[l * C + c] * G[l * C + c];
    norm_row(g, G, l, s);
  }
  for (size_t c = 0; c < C; c++)
    for (size_t k = 0; k < L; k++) g->bn_t[c * L + k] = g->bn[k * C + c];
  const float *we = params + g->off[2], *wb = params + g->off[7], *wd = params + g->off[9];
  for (size_t m = 0; m < M; m++)
    for (size_t s = 0; s < S; s++) g->enc_t[m * S + s] = we[s * M + m];
  for (size_t j = 0; j < L; j++)
    for (size_t i = 0; i < L; i++) g->bnw_t[j * L + i] = wb[i * L + j];
  for (size_t s = 0; s < S; s++)
    for (size_t m = 0; m < M; m++) g->dec_t[s * M + m] = wd[m * S + s];
}

/* The index of the first of the n floats at p that is not finite, or n:
 * one pass over the bits (it vectorises) and the index only when there is
 * one (checked on every training step). */
static size_t first_nonfinite(const float *p, size_t n) {
  unsigned bad = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, p + i, sizeof u);
    bad |= (u & 0x7f800000u) == 0x7f800000u;
  }
  if (bad)
    for (size_t i = 0; i < n; i++)
      if (!isfinite(p[i])) return i;
  return n;
}

/* Rows l0 .. l1-1 of the summed gradient's basis part (w.r.t. the
 * normalised basis B, in g->acc) taken through B = G / max(|G|, eps):
 * dG = (dB - B (B . dB)) / |G|. */
static void basis_rows_back(const GRAD_T *g, size_t l0, size_t l1) {
  const size_t C = g->C, o = g->off[4];
  for (size_t l = l0; l < l1; l++) {
    double *dB = g->acc + o + l * C, nrm = g->gnorm[l];
    if (nrm >= NORM_EPS) {
      const float *Gr = g->params + o + l * C;
      double dot = 0;
      for (size_t c = 0; c < C; c++) dot += dB[c] * (Gr[c] / nrm);
      for (size_t c = 0; c < C; c++) dB[c] = (dB[c] - (Gr[c] / nrm) * dot) / nrm;
    } else {
      for (size_t c = 0; c < C; c++) dB[c] /= NORM_EPS;
    }
  }
}

/* Parameters per slice of a final sum, about (a tensor's last slice is
 * shorter; the basis is cut into whole rows), and how many are summed side
 * by side (a cache line of each part's floats). */
#define SUM_SLICE 1024
#define SUM_LANES 16

/* The final sum's slices, tensor by tensor: SUM_SLICE parameters each, the
 * basis's whole rows. Returns the *n + 1 bounds (malloc'd), or NULL
 * without memory. */
static size_t *plan_slices(const GRAD_T *g, size_t *n) {
  const size_t rows = SUM_SLICE / g->C ? SUM_SLICE / g->C : 1;
  size_t step[SSAE_N_TENSORS], count = 0;
  for (int t = 0; t < SSAE_N_TENSORS; t++) {
    step[t] = t == 4 ? rows * g->C : SUM_SLICE;
    count += (g->off[t + 1] - g->off[t] + step[t] - 1) / step[t];
  }
  size_t *b = malloc((count + 1) * sizeof *b), k = 0;
  if (!b) return NULL;
  for (int t = 0; t < SSAE_N_TENSORS; t++)
    for (size_t i = g->off[t]; i < g->off[t + 1]; i += step[t]) b[k++] = i;
  b[k] = g->off[SSAE_N_TENSORS];
  *n = k;
  return b;
}

/* Slice [i0, i1) of the final sum (one of plan_slices'): the n parts'
 * gradients (P floats each, at parts) added in part order in double,
 * SUM_LANES parameters' sums in registers across the parts (each part's
 * row read once), into g->acc; taken through the basis normalisation when
 * the slice is basis rows; written to out as floats. Each parameter's
 * additions are the same whoever sums which slice. */
static void sum_parts(const GRAD_T *g, const float *parts, size_t n, size_t i0, size_t i1,
                      float *out) {
  const size_t P = g->P, C = g->C, o = g->off[4];
  double *acc = g->acc;
  size_t i = i0;
  for (; i + SUM_LANES <= i1; i += SUM_LANES) {
    double a[SUM_LANES] = {0};
    for (size_t u = 0; u < n; u++) {
      const float *pu = parts + u * P + i;
      for (size_t l = 0; l < SUM_LANES; l++) a[l] += pu[l];
    }
    for (size_t l = 0; l < SUM_LANES; l++) acc[i + l] = a[l];
  }
  for (; i < i1; i++) {
    double a = 0;
    for (size_t u = 0; u < n; u++) a += parts[u * P + i];
    acc[i] = a;
  }
  if (i0 >= o && i1 <= o + g->L * C) basis_rows_back(g, (i0 - o) / C, (i1 - o) / C);
  for (i = i0; i < i1; i++) out[i] = (float)acc[i];
}

/* Forward of nw windows at x; y: where the output goes. */
static void chunk_forward(const GRAD_T *g, work *w, const float *x, size_t nw, float *y,
                          int exact) {
  const kernels *k = &g->k;
  size_t M = g->M, F = g->F, L = g->L, S = g->S, C = g->C, R = nw * F;
  const float *P = g->params;
  const size_t *off = g->off;

  k->ln_fwd(R, M, x, P + off[0], P + off[1], w->xhat, w->u, w->rstd1, exact);
  k->mm_nn(R, M, S, w->u, g->enc_t, P + off[3], w->a);
  k->gelu_fwd(R * S, w->a, w->h, w->gd1);
  /* h is also c: [nw x C] */
  k->mm_nn(nw, C, L, w->h, g->bn_t, NULL, w->z);
  k->ln_fwd(nw, L, w->z, P + off[5], P + off[6], w->zhat, w->v, w->rstd2, exact);
  k->mm_nn(nw, L, L, w->v, g->bnw_t, P + off[8], w->p);
  k->gelu_fwd(nw * L, w->p, w->zp, w->gd2);
  k->mm_nn(nw, L, C, w->zp, g->bn, NULL, w->r);
  k->mm_nn(R, S, M, w->r, g->dec_t, P + off[10], y);
}

/* The backward of nw windows from the output gradient dy and the
 * activations in w into grad (P floats, zeroed here) and dx (or NULL). */
static void chunk_backward(const GRAD_T *g, work *w, size_t nw, const float *dy, float *grad,
                           float *dx, int exact) {
  const kernels *k = &g->k;
  size_t M = g->M, F = g->F, L = g->L, S = g->S, C = g->C, R = nw * F;
  const float *P = g->params;
  const size_t *off = g->off;

  memset(grad, 0, g->P * sizeof *grad);
  float *g_bn = grad + off[4]; /* w.r.t. the normalised basis here */
  /* decoder y = r W_d^T + b_d */
  for (size_t i = 0; i < R; i++)
    for (size_t j = 0; j < M; j++) grad[off[10] + j] += dy[i * M + j];
  k->mm_tn_acc(R, M, S, dy, w->r, grad + off[9]);
  k->mm_nn(R, M, S, dy, P + off[9], NULL, w->dr);
  /* reconstruction r = z' B */
  k->mm_tn_acc(nw, L, C, w->zp, w->dr, g_bn);
  k->mm_nn(nw, C, L, w->dr, g->bn_t, NULL, w->dzp);
  /* bottleneck GELU, Linear, LayerNorm */
  for (size_t i = 0; i < nw * L; i++) w->dzp[i] *= w->gd2[i];
  for (size_t i = 0; i < nw; i++)
    for (size_t j = 0; j < L; j++) grad[off[8] + j] += w->dzp[i * L + j];
  k->mm_tn_acc(nw, L, L, w->dzp, w->v, grad + off[7]);
  k->mm_nn(nw, L, L, w->dzp, P + off[7], NULL, w->dv);
  ln_bwd(nw, L, w->dv, w->zhat, w->rstd2, P + off[5], grad + off[5], grad + off[6], w->dz,
         exact);
  /* latent z = B c */
  k->mm_tn_acc(nw, L, C, w->dz, w->h, g_bn);
  k->mm_nn(nw, L, C, w->dz, g->bn, NULL, w->dr); /* dc, into dr */
  /* slice encoder GELU, Linear, LayerNorm */
  float *da = w->dr;
  for (size_t i = 0; i < R * S; i++) da[i] *= w->gd1[i];
  for (size_t i = 0; i < R; i++)
    for (size_t j = 0; j < S; j++) grad[off[3] + j] += da[i * S + j];
  k->mm_tn_acc(R, S, M, da, w->u, grad + off[2]);
  k->mm_nn(R, S, M, da, P + off[2], NULL, w->du);
  ln_bwd(R, M, w->du, w->xhat, w->rstd1, P + off[0], grad + off[0], grad + off[1], dx, exact);
}

#endif
