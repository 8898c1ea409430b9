/* The folded model of the CPU chunks (ssae_grad_chunk.h, which includes
 * this file in both of its parts): the folded weights' type and its
 * making from the parameters, and the turning of the summed folded
 * gradient into the parameters' gradient. Included twice, as
 * ssae_grad_chunk.h is: first for the types and the helpers on plain
 * arrays, then, with GRAD_T naming the object's type, for the functions
 * on it.
 *
 * The chunks run the model with its LayerNorms' scale and shift folded into
 * the Linears after them and the slice decoder folded into the basis (as
 * the CUDA backward kernel does, doc/gpu-kernels.md):
 *   We' = We diag(g1), be' = be + We b1; Wb' = Wb diag(g2), bb' = bb + Wb b2;
 *   D^T_f = B_f Wd^T (L x M for each slice f), y_f = z' D^T_f + bd,
 * which takes a window's products from 167 k to 105 k multiply-adds (no
 * reconstruction codes, no LayerNorm 1 backward unless dx is wanted). The
 * chunks' gradients are the folded weights'; the final sum turns them into
 * the parameters' once (unfold_linear, unfold_rows). What the folding adds
 * per call (D^T's product, and the unfolding's two products of the same
 * size) is shared among the threads of the call's phases: on one thread it
 * would take what the folding saves at 512 windows on 16. D^T is made in
 * pieces at the start of the chunk phase, and each chunk waits for them
 * only before its last product; the unfolding is done group by group by
 * whichever thread sums a group's last slice, so no thread waits on
 * another there (waiting threads spin, which costs most where threads
 * outnumber free cores). */
#ifndef SSAE_GRAD_FOLD_H
#define SSAE_GRAD_FOLD_H

#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Work at the start of a parallel phase cut into n pieces that the phase's
 * threads claim one at a time (pieces_claim_run), with a count of those
 * done that a thread waits on (pieces_wait) only where it first needs
 * their results. */
typedef struct pieces {
  atomic_size_t next, done;
  size_t n;
} pieces;

static void pieces_reset(pieces *p, size_t n) {
  p->n = n;
  atomic_store_explicit(&p->next, 0, memory_order_relaxed);
  atomic_store_explicit(&p->done, 0, memory_order_relaxed);
}

/* Waits until every piece of p is done: claimed pieces are being run by
 * threads that are running, so the wait ends however many of the phase's
 * threads the system started. */
static void pieces_wait(const pieces *p) {
  for (unsigned spin = 0; atomic_load_explicit(&p->done, memory_order_acquire) < p->n; spin++)
    if (spin > 1000) sched_yield();
}

/* Basis rows per group of the final sum's unfolding (unfold_rows). */
#define UNFOLD_ROWS 4

/* The folded gradient's parts, in its vector's order: We' [S x M], be' [S],
 * the normalised basis B [L x C], Wb' [L x L], bb' [L], D^T [L x F M],
 * bd [M]. */
enum { FG_WE, FG_BE, FG_B, FG_WB, FG_BB, FG_DT, FG_BD, FG_N };

/* The folded weights the chunks run on (made from the parameters by
 * set_derived), where the final sum's floats go, and the unfolding's
 * scratch. */
typedef struct folded {
  size_t off[FG_N + 1]; /* the folded gradient's parts; off[FG_N] = Q, its length */
  float *buf;
  float *we, *we_t, *be;  /* We' [S x M] and transposed, be' [S] */
  float *wb, *wb_t, *bb;  /* Wb' [L x L] and transposed, bb' [L] */
  float *dt, *d, *bd;     /* D^T [L x F M], D [F M x L], bd repeated F times [F M] */
  float *sum;             /* the summed folded gradient, as floats [Q] */
  float *db;              /* the decoder's part of the basis gradient [L x C] */
  float *wdp;             /* dWd's part from each group of basis rows [groups x M x S] */
  double *ln;             /* the unfolding's column sums [2 max(M, L)] */
  /* The final sum's dependencies (final_sum_reset): for each group of
   * UNFOLD_ROWS basis rows, its two slices (of dB' and of dD^T) not yet
   * summed; the other parts' slices not yet summed; the groups whose dWd
   * part is not yet made. Whoever brings a count to zero does what
   * waited on it, so no thread waits. */
  atomic_size_t *rows_left, lin_left, wd_left;
  size_t lin_slices;
  size_t groups; /* groups of UNFOLD_ROWS basis rows */
} folded;

static int folded_alloc(folded *fd, size_t M, size_t F, size_t L, size_t S) {
  const size_t FM = F * M, C = F * S;
  const size_t part[FG_N] = {S * M, S, L * C, L * L, L, L * FM, M};
  fd->off[0] = 0;
  for (int i = 0; i < FG_N; i++) fd->off[i + 1] = fd->off[i] + part[i];
  const size_t Q = fd->off[FG_N], groups = (L + UNFOLD_ROWS - 1) / UNFOLD_ROWS;
  fd->groups = groups;
  const size_t len[] = {S * M, S * M, S,  L * L, L * L, L,
                        L * FM, FM * L, FM, Q, L * C, groups * M * S};
  float **const dst[] = {&fd->we, &fd->we_t, &fd->be, &fd->wb,  &fd->wb_t, &fd->bb,
                         &fd->dt, &fd->d,    &fd->bd, &fd->sum, &fd->db,  &fd->wdp};
  fd->buf = carve_alloc(dst, len, sizeof len / sizeof *len);
  fd->ln = calloc(2 * (M > L ? M : L), sizeof(double));
  fd->rows_left = calloc(groups, sizeof *fd->rows_left);
  return fd->buf && fd->ln && fd->rows_left ? 0 : -1;
}

/* Accepts a half-made one (zeroed before folded_alloc). */
static void folded_free(folded *fd) {
  free(fd->buf);
  free(fd->ln);
  free(fd->rows_left);
}

/* W' = W diag(g) and b' = bias + W b for a Linear of `out` rows of n after
 * a LayerNorm (g, b) of n, and W' transposed. W b in double, eight partial
 * sums a row added in a fixed order (set on every training step). */
static void fold_ln(size_t out, size_t n, const float *W, const float *bias, const float *g,
                    const float *b, float *wf, float *wf_t, float *bf) {
  for (size_t o = 0; o < out; o++) {
    const float *wr = W + o * n;
    double part[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int k = 0; k < 8; k++) part[k] += (double)wr[i + k] * b[i + k];
    for (; i < n; i++) part[0] += (double)wr[i] * b[i];
    double s = bias[o];
    for (int k = 0; k < 8; k++) s += part[k];
    bf[o] = (float)s;
    for (i = 0; i < n; i++) {
      wf[o * n + i] = wr[i] * g[i];
      wf_t[i * out + o] = wf[o * n + i];
    }
  }
}

/* dg = colsum(W o dW'), db = W^T dbias', dW = dW' diag(g) + dbias' b^T,
 * dbias = dbias': a Linear's folded gradients (dW' [out x n], dbias' [out],
 * in double) turned into its own and its LayerNorm's. The column sums run
 * along W's rows, n sums side by side in sg and sb (n doubles each). */
static void unfold_ln(size_t out, size_t n, const float *W, const float *g, const float *b,
                      const double *dwf, const double *dbf, float *dg, float *db, float *dw,
                      float *dbias, double *sg, double *sb) {
  for (size_t i = 0; i < n; i++) sg[i] = sb[i] = 0;
  for (size_t o = 0; o < out; o++) {
    const float *wr = W + o * n;
    const double *dr = dwf + o * n, bo = dbf[o];
    for (size_t i = 0; i < n; i++) {
      sg[i] += (double)wr[i] * dr[i];
      sb[i] += (double)wr[i] * bo;
      dw[o * n + i] = (float)(dr[i] * g[i] + bo * b[i]);
    }
    dbias[o] = (float)bo;
  }
  for (size_t i = 0; i < n; i++) {
    dg[i] = (float)sg[i];
    db[i] = (float)sb[i];
  }
}

#endif /* SSAE_GRAD_FOLD_H */

#if defined(GRAD_T) && !defined(SSAE_GRAD_FOLD_FUNCS)
#define SSAE_GRAD_FOLD_FUNCS

/* Runs fn(g, k) for each piece k of p this thread claims, counting each
 * done; returns when none is left to claim (pieces_wait waits for the
 * others'). */
static void pieces_claim_run(pieces *p, GRAD_T *g, void (*fn)(GRAD_T *, size_t)) {
  for (;;) {
    size_t k = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
    if (k >= p->n) break;
    fn(g, k);
    atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
  }
}

/* Rows of the basis taken as L F rows of S (row (l, f) is B_f's row l) per
 * piece of D^T's making. */
#define FOLD_ROWS 16

/* Before a phase that runs chunks: the pieces of D^T its threads make at
 * its start (a chunk waits for them where it first uses D^T or D), none
 * when the parameters have not changed since a phase last made them. */
static void fold_begin(GRAD_T *g) {
  pieces_reset(&g->fold, g->fold_stale ? (g->L * g->F + FOLD_ROWS - 1) / FOLD_ROWS : 0);
  g->fold_stale = 0;
}

/* Piece k of D^T = B Wd^T: rows (l, f) of the basis times Wd^T give D^T's
 * rows (l, f) of M (D^T is L rows of F M); and D's columns from them. */
static void fold_piece(GRAD_T *g, size_t k) {
  const size_t M = g->M, L = g->L, S = g->S, F = g->F;
  const size_t r0 = k * FOLD_ROWS, r1 = r0 + FOLD_ROWS < L * F ? r0 + FOLD_ROWS : L * F;
  float *dt = g->fd.dt, *d = g->fd.d;
  g->k.mm_nn(r1 - r0, S, M, g->bn + r0 * S, g->dec_t, NULL, dt + r0 * M);
  for (size_t r = r0; r < r1; r++) {
    const size_t l = r / F, f = r % F;
    for (size_t m = 0; m < M; m++) d[(f * M + m) * L + l] = dt[r * M + m];
  }
}

/* Rows l0 .. l1-1 of the basis gradient (w.r.t. the normalised basis B,
 * rows of C doubles at g->acc's part FG_B) taken through
 * B = G / max(|G|, eps): dG = (dB - B (B . dB)) / |G|. The dot product in
 * eight partial sums, added in a fixed order (one chain of additions was
 * most of a small batch's final sum). */
static void basis_rows_back(const GRAD_T *g, size_t l0, size_t l1) {
  const size_t C = g->C, o = g->off[4];
  for (size_t l = l0; l < l1; l++) {
    double *dB = g->acc + g->fd.off[FG_B] + l * C, nrm = g->gnorm[l];
    if (nrm >= NORM_EPS) {
      const float *Gr = g->params + o + l * C;
      const double inv = 1.0 / nrm;
      double part[8] = {0};
      size_t c = 0;
      for (; c + 8 <= C; c += 8)
        for (int k = 0; k < 8; k++) part[k] += dB[c + k] * (Gr[c + k] * inv);
      for (; c < C; c++) part[0] += dB[c] * (Gr[c] * inv);
      double dot = 0;
      for (int k = 0; k < 8; k++) dot += part[k];
      for (c = 0; c < C; c++) dB[c] = (dB[c] - (Gr[c] * inv) * dot) * inv;
    } else {
      for (size_t c = 0; c < C; c++) dB[c] /= NORM_EPS;
    }
  }
}

/* Parameters per slice of a final sum, about (a part's last slice is
 * shorter; the basis's and D^T's slices are groups of UNFOLD_ROWS rows),
 * and how many are summed side by side (a cache line of each part's
 * floats). */
#define SUM_SLICE 1024
#define SUM_LANES 16

/* The final sum's slices of the folded gradient, part by part. Returns the
 * *n + 1 bounds (malloc'd), or NULL without memory; counts the slices
 * that are not basis or D^T rows into g->fd.lin_slices. */
static size_t *plan_slices(GRAD_T *g, size_t *n) {
  const size_t *fo = g->fd.off;
  size_t step[FG_N], count = 0;
  g->fd.lin_slices = 0;
  for (int t = 0; t < FG_N; t++) {
    step[t] = t == FG_B ? UNFOLD_ROWS * g->C
              : t == FG_DT ? UNFOLD_ROWS * g->F * g->M
                           : SUM_SLICE;
    size_t k = (fo[t + 1] - fo[t] + step[t] - 1) / step[t];
    count += k;
    if (t != FG_B && t != FG_DT) g->fd.lin_slices += k;
  }
  size_t *b = malloc((count + 1) * sizeof *b), k = 0;
  if (!b) return NULL;
  for (int t = 0; t < FG_N; t++)
    for (size_t i = fo[t]; i < fo[t + 1]; i += step[t]) b[k++] = i;
  b[k] = fo[FG_N];
  *n = k;
  return b;
}

/* Before a final sum: its slices to claim, every dependency count full. */
static void final_sum_reset(GRAD_T *g) {
  folded *fd = &g->fd;
  pieces_reset(&g->sum, g->n_slices);
  for (size_t r = 0; r < fd->groups; r++)
    atomic_store_explicit(&fd->rows_left[r], 2, memory_order_relaxed);
  atomic_store_explicit(&fd->lin_left, fd->lin_slices, memory_order_relaxed);
  atomic_store_explicit(&fd->wd_left, fd->groups, memory_order_relaxed);
}

/* The Linears', LayerNorms' and bd's gradients from the summed dWe', dbe',
 * dWb', dbb', dbd (unfold_ln), into out (P floats). */
static void unfold_linear(GRAD_T *g, float *out) {
  const size_t M = g->M, L = g->L, S = g->S;
  const size_t *off = g->off, *fo = g->fd.off;
  const float *P = g->params;
  const double *A = g->acc;
  unfold_ln(S, M, P + off[2], P + off[0], P + off[1], A + fo[FG_WE], A + fo[FG_BE],
            out + off[0], out + off[1], out + off[2], out + off[3], g->fd.ln, g->fd.ln + M);
  unfold_ln(L, L, P + off[7], P + off[5], P + off[6], A + fo[FG_WB], A + fo[FG_BB],
            out + off[5], out + off[6], out + off[7], out + off[8], g->fd.ln, g->fd.ln + L);
  for (size_t m = 0; m < M; m++) out[off[10] + m] = (float)A[fo[FG_BD] + m];
}

/* Group r of basis rows, once its dB' and dD^T rows are summed:
 *   dB = dB' + dD^T Wd (row (l, f): dD^T_f's row l times Wd), then through
 *   the basis normalisation, into out;
 *   its part of dWd = sum_f (dD^T_f)^T B_f (one product over the group's
 *   L F rows of both), into fd.wdp; the group that makes the last part
 *   adds them all, in group order, into out. */
static void unfold_rows(GRAD_T *g, size_t r, float *out) {
  const size_t M = g->M, L = g->L, S = g->S, C = g->C, F = g->F, FM = F * M;
  const size_t *off = g->off, *fo = g->fd.off;
  const float *P = g->params, *ddt = g->fd.sum + fo[FG_DT];
  const size_t l0 = r * UNFOLD_ROWS, l1 = l0 + UNFOLD_ROWS < L ? l0 + UNFOLD_ROWS : L;
  float *db = g->fd.db + l0 * C;
  g->k.mm_nn((l1 - l0) * F, M, S, ddt + l0 * FM, P + off[9], NULL, db);
  double *dB = g->acc + fo[FG_B] + l0 * C;
  for (size_t i = 0; i < (l1 - l0) * C; i++) dB[i] += db[i];
  basis_rows_back(g, l0, l1);
  for (size_t i = 0; i < (l1 - l0) * C; i++) out[off[4] + l0 * C + i] = (float)dB[i];
  const size_t MS = M * S;
  g->k.mm_tn((l1 - l0) * F, M, S, ddt + l0 * FM, M, g->bn + l0 * C, g->fd.wdp + r * MS);
  if (atomic_fetch_sub_explicit(&g->fd.wd_left, 1, memory_order_acq_rel) != 1) return;
  float *dwd = out + off[9];
  memcpy(dwd, g->fd.wdp, MS * sizeof(float));
  for (size_t q = 1; q < g->fd.groups; q++)
    for (size_t i = 0; i < MS; i++) dwd[i] += g->fd.wdp[q * MS + i];
}

/* After slice k of the final sum (plan_slices') is summed: what waited on
 * it, when it was the last thing that did. out: the parameters' gradient
 * (P floats). Each result is the same whoever does it. */
static void final_sum_slice_done(GRAD_T *g, size_t k, float *out) {
  const size_t i0 = g->slice0[k], *fo = g->fd.off;
  folded *fd = &g->fd;
  size_t r;
  if (i0 >= fo[FG_B] && i0 < fo[FG_B + 1])
    r = (i0 - fo[FG_B]) / (UNFOLD_ROWS * g->C);
  else if (i0 >= fo[FG_DT] && i0 < fo[FG_DT + 1])
    r = (i0 - fo[FG_DT]) / (UNFOLD_ROWS * g->F * g->M);
  else {
    if (atomic_fetch_sub_explicit(&fd->lin_left, 1, memory_order_acq_rel) == 1)
      unfold_linear(g, out);
    return;
  }
  if (atomic_fetch_sub_explicit(&fd->rows_left[r], 1, memory_order_acq_rel) == 1)
    unfold_rows(g, r, out);
}

#endif
