/* The CPU forward and backward of a chunk of windows, shared by the
 * trainer's gradient (ssae_grad.c, for the MSE loss) and the vector-Jacobian
 * products (src/api/ssae_vjp.c, from an upstream gradient), on the folded
 * model (ssae_grad_fold.h). Included twice by each: first for the kernels,
 * the chunk's scratch, the folded weights and the LayerNorm's backward,
 * then, after the object's type is complete and GRAD_T names it, for the
 * functions on it. That type has the fields k (kernels), M, F, L, S, C, P,
 * off, params, bn, bn_t, gnorm, dec_t, fd (the folded weights), fold_stale
 * (D^T to make: set_derived sets it, fold_begin consumes it), the pieces
 * fold and sum, slice0 and n_slices (the final sum's slices) and acc (the
 * summed folded gradient, fd.off[FG_N] doubles). `exact` picks the VJP's
 * LayerNorm arithmetic (x - mean and the input gradient's means in double)
 * over the trainer's (those in float). */
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
  void (*mm_tn)(size_t, size_t, size_t, const float *, size_t, const float *, float *);
  void (*gelu_fwd)(size_t, const float *, float *, float *);
  void (*ln_fwd)(size_t, size_t, const float *, float *, float *, int);
} kernels;

/* The widest kernel set the CPU runs: AVX-512 (unless SSAE_NO_AVX512 is
 * set), AVX2 with FMA (unless SSAE_NO_AVX2 is set, which also rules out
 * AVX-512), else the portable one. */
static kernels pick_kernels(void) {
  kernels k = {mm_nn_base, mm_tn_base, gelu_fwd_base, ln_fwd_base};
#ifdef HAVE_AVX2_KERNELS
  __builtin_cpu_init();
  if (getenv("SSAE_NO_AVX2") || !__builtin_cpu_supports("avx2") ||
      !__builtin_cpu_supports("fma"))
    return k;
  k = (kernels){mm_nn_avx2, mm_tn_avx2, gelu_fwd_avx2, ln_fwd_avx2};
  if (!getenv("SSAE_NO_AVX512") && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw"))
    k = (kernels){mm_nn_avx512, mm_tn_avx512, gelu_fwd_avx512, ln_fwd_avx512};
#endif
  return k;
}

/* Activations and their gradients for one chunk (R = CHUNK F slice rows,
 * N = CHUNK windows). */
typedef struct work {
  float *buf;                                   /* the one allocation behind the others */
  float *xhat, *a, *h, *gd1, *rstd1;            /* slice encoder: [R x M], [R x S], [R] */
  float *z, *zhat, *p, *zp, *gd2, *rstd2;       /* bottleneck: [N x L], [N] */
  float *y, *dc, *dzp, *dzh, *dz, *dxh;         /* output, gradients */
} work;

/* Points *dst[i] at consecutive runs of len[i] floats from p; returns the
 * end. */
static float *carve(float *p, float **const dst[], const size_t len[], size_t n) {
  for (size_t i = 0; i < n; i++) {
    *dst[i] = p;
    p += len[i];
  }
  return p;
}

/* One zeroed allocation carved into the n runs (carve); NULL without
 * memory. */
static float *carve_alloc(float **const dst[], const size_t len[], size_t n) {
  size_t total = 0;
  for (size_t i = 0; i < n; i++) total += len[i];
  float *buf = calloc(total ? total : 1, sizeof(float));
  if (buf) carve(buf, dst, len, n);
  return buf;
}

static int work_alloc(work *w, size_t M, size_t F, size_t L, size_t S) {
  size_t R = (size_t)CHUNK * F, N = CHUNK;
  const size_t len[] = {R * M, R * S, R * S, R * S, R, N * L, N * L, N * L, N * L,
                        N * L, N,     R * M, R * S, N * L, N * L, N * L, R * M};
  float **const dst[] = {&w->xhat, &w->a,  &w->h,  &w->gd1, &w->rstd1, &w->z,
                         &w->zhat, &w->p,  &w->zp, &w->gd2, &w->rstd2, &w->y,
                         &w->dc,   &w->dzp, &w->dzh, &w->dz, &w->dxh};
  w->buf = carve_alloc(dst, len, sizeof len / sizeof *len);
  return w->buf ? 0 : -1;
}

#include "ssae_grad_fold.h"

/* The LayerNorm's input gradient from its output's, without its scale (the
 * chunks' LayerNorms have none: it is folded):
 * dx = rstd (dxh - mean(dxh) - xhat mean(dxh xhat)). */
static void ln_bwd(size_t R, size_t n, const float *dxh, const float *xhat, const float *rstd,
                   float *dx, int exact) {
  for (size_t i = 0; i < R; i++) {
    const float *dy = dxh + i * n, *xh = xhat + i * n;
    double s1 = 0, s2 = 0;
    for (size_t j = 0; j < n; j++) {
      s1 += dy[j];
      s2 += (double)dy[j] * xh[j];
    }
    float *o = dx + i * n;
    if (exact) {
      double m1 = s1 / (double)n, m2 = s2 / (double)n;
      for (size_t j = 0; j < n; j++) o[j] = (float)(rstd[i] * ((double)dy[j] - m1 - xh[j] * m2));
    } else {
      float m1 = (float)(s1 / (double)n), m2 = (float)(s2 / (double)n);
      for (size_t j = 0; j < n; j++) o[j] = rstd[i] * (dy[j] - m1 - xh[j] * m2);
    }
  }
}

#endif /* SSAE_GRAD_CHUNK_H */

#if defined(GRAD_T) && !defined(SSAE_GRAD_CHUNK_FUNCS)
#define SSAE_GRAD_CHUNK_FUNCS

#include "ssae_grad_fold.h"

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
 * normalised basis, its row norms and transpose, the decoder transposed,
 * and the folded LayerNorms (We', be', Wb', bb', bd repeated). D^T = B Wd^T
 * (655 k multiply-adds at the default dimensions) is left to the threads
 * of the next call's first phase: fold_begin, fold_piece. */
static void set_derived(GRAD_T *g, const float *params) {
  size_t M = g->M, L = g->L, S = g->S, C = g->C, F = g->F;
  folded *fd = &g->fd;
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
  const float *P = params;
  const size_t *off = g->off;
  fold_ln(S, M, P + off[2], P + off[3], P + off[0], P + off[1], fd->we, fd->we_t, fd->be);
  fold_ln(L, L, P + off[7], P + off[8], P + off[5], P + off[6], fd->wb, fd->wb_t, fd->bb);
  const float *wd = P + off[9];
  for (size_t s = 0; s < S; s++)
    for (size_t m = 0; m < M; m++) g->dec_t[s * M + m] = wd[m * S + s];
  for (size_t f = 0; f < F; f++) memcpy(fd->bd + f * M, P + off[10], M * sizeof(float));
  g->fold_stale = 1;
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

/* Slice [i0, i1) of the final sum (one of plan_slices'): the n parts'
 * folded gradients (Q floats each, at parts) added in part order in
 * double, SUM_LANES sums in registers across the parts (each part's row
 * read once), into g->acc and, as floats, g->fd.sum. Each sum's additions
 * are the same whoever sums which slice. */
static void sum_parts(const GRAD_T *g, const float *parts, size_t n, size_t i0, size_t i1) {
  const size_t Q = g->fd.off[FG_N];
  double *acc = g->acc;
  size_t i = i0;
  for (; i + SUM_LANES <= i1; i += SUM_LANES) {
    double a[SUM_LANES] = {0};
    for (size_t u = 0; u < n; u++) {
      const float *pu = parts + u * Q + i;
      for (size_t l = 0; l < SUM_LANES; l++) a[l] += pu[l];
    }
    for (size_t l = 0; l < SUM_LANES; l++) acc[i + l] = a[l];
  }
  for (; i < i1; i++) {
    double a = 0;
    for (size_t u = 0; u < n; u++) a += parts[u * Q + i];
    acc[i] = a;
  }
  for (i = i0; i < i1; i++) g->fd.sum[i] = (float)acc[i];
}

/* out[j] = sum over the R rows of a[i][j] (n columns), in row order. */
static void col_sums(size_t R, size_t n, const float *a, float *out) {
  for (size_t j = 0; j < n; j++) out[j] = 0.0f;
  for (size_t i = 0; i < R; i++)
    for (size_t j = 0; j < n; j++) out[j] += a[i * n + j];
}

/* Forward of nw windows at x (folded); y: where the output goes. */
static void chunk_forward(const GRAD_T *g, work *w, const float *x, size_t nw, float *y,
                          int exact) {
  const kernels *k = &g->k;
  const folded *fd = &g->fd;
  size_t M = g->M, F = g->F, L = g->L, S = g->S, C = g->C, R = nw * F;

  k->ln_fwd(R, M, x, w->xhat, w->rstd1, exact);
  k->mm_nn(R, M, S, w->xhat, fd->we_t, fd->be, w->a);
  k->gelu_fwd(R * S, w->a, w->h, w->gd1);
  /* h is also c: [nw x C] */
  k->mm_nn(nw, C, L, w->h, g->bn_t, NULL, w->z);
  k->ln_fwd(nw, L, w->z, w->zhat, w->rstd2, exact);
  k->mm_nn(nw, L, L, w->zhat, fd->wb_t, fd->bb, w->p);
  k->gelu_fwd(nw * L, w->p, w->zp, w->gd2);
  pieces_wait(&g->fold); /* D^T, made at the phase's start */
  k->mm_nn(nw, L, F * M, w->zp, fd->dt, fd->bd, y);
}

/* The backward of nw windows from the output gradient dy and the
 * activations in w into grad (the folded gradient, fd.off[FG_N] floats,
 * every one written here: each part by one product or one sum) and dx (or
 * NULL). */
static void chunk_backward(const GRAD_T *g, work *w, size_t nw, const float *dy, float *grad,
                           float *dx, int exact) {
  const kernels *k = &g->k;
  const folded *fd = &g->fd;
  size_t M = g->M, F = g->F, L = g->L, S = g->S, C = g->C, R = nw * F, FM = F * M;
  const size_t *fo = fd->off;

  /* y = z' D^T + bd */
  col_sums(R, M, dy, grad + fo[FG_BD]);
  k->mm_tn(nw, L, FM, w->zp, L, dy, grad + fo[FG_DT]);
  /* D, made at the phase's start: a backward from kept activations runs no
   * forward, and parameters set again since that forward make it again */
  pieces_wait(&g->fold);
  k->mm_nn(nw, FM, L, dy, fd->d, NULL, w->dzp);
  /* bottleneck GELU and Linear (Wb', bb'), LayerNorm 2 without its affine */
  for (size_t i = 0; i < nw * L; i++) w->dzp[i] *= w->gd2[i];
  col_sums(nw, L, w->dzp, grad + fo[FG_BB]);
  k->mm_tn(nw, L, L, w->dzp, L, w->zhat, grad + fo[FG_WB]);
  k->mm_nn(nw, L, L, w->dzp, fd->wb, NULL, w->dzh);
  ln_bwd(nw, L, w->dzh, w->zhat, w->rstd2, w->dz, exact);
  /* latent z = B c */
  k->mm_tn(nw, L, C, w->dz, L, w->h, grad + fo[FG_B]);
  k->mm_nn(nw, L, C, w->dz, g->bn, NULL, w->dc);
  /* slice encoder GELU and Linear (We', be'); LayerNorm 1 only for dx */
  float *da = w->dc;
  for (size_t i = 0; i < R * S; i++) da[i] *= w->gd1[i];
  col_sums(R, S, da, grad + fo[FG_BE]);
  k->mm_tn(R, S, M, da, S, w->xhat, grad + fo[FG_WE]);
  if (!dx) return;
  k->mm_nn(R, S, M, da, fd->we, NULL, w->dxh);
  ln_bwd(R, M, w->dxh, w->xhat, w->rstd1, dx, exact);
}

#endif
