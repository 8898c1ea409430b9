/* Forward and backward pass of the SSAE for the MSE loss on the CPU.
 *
 * A batch is cut into chunks of CHUNK windows. Each chunk's gradient goes to
 * its own buffer and the buffers are summed in chunk order in double, a
 * slice of the parameters at a time by whichever thread takes it, so the
 * result is the same whatever the number of threads. Within a chunk the
 * work is batched matrix products over all slices (R = CHUNK*F rows). */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ssae_train.h"

#include "ssae_grad_chunk.h"
#include "ssae_pool.h"

typedef struct job {
  const float *x;
  const float *const *win; /* instead of x: window i at win[i] */
  size_t n;
  float scale;
  float *scores; /* forward-only jobs */
} job;

struct ssae_grad {
  ssae_dims d;
  size_t M, F, L, S, C, P;
  size_t off[SSAE_N_TENSORS + 1];
  kernels k;
  float *params;           /* copy of the parameters */
  float *bn, *bn_t;        /* normalised basis [L x C] and its transpose */
  double *gnorm;           /* row norms of global_basis */
  float *dec_t;            /* the decoder's weight transposed */
  folded fd;               /* the folded weights the chunks run on */
  int threads; /* the calling thread and the pool's helpers */
  int n_w;     /* work buffers allocated (the threads asked for) */
  work *w;     /* w[k]: the pool's slot k */
  float *xg;   /* slot k's chunk of windows gathered from job.win, at k*CHUNK*F*M */
  /* chunk gradient buffers (folded, fd.off[FG_N] floats each) and sse,
   * grown on demand */
  float *cgrad;
  double *csse;
  size_t n_chunks_cap;
  double *acc;            /* double sum of the chunk gradients (folded) */
  size_t *slice0, n_slices; /* the final sum's slices: [slice0[k], slice0[k+1]) */
  ssae_pool *pool;
  job cur;
  atomic_size_t next_chunk;
  /* D^T to make before the next job's chunks (the parameters changed),
   * and its pieces */
  int fold_stale;
  pieces fold;
  /* the final sum under way: how many chunks' gradients, its slices,
   * where the gradient goes */
  size_t sum_n;
  pieces sum;
  float *sum_out;
};

static void *xcalloc(size_t n, size_t size) {
  return n ? calloc(n, size) : calloc(1, 1);
}

#define GRAD_T ssae_grad
#include "ssae_grad_chunk.h"

/* ---- one chunk ---------------------------------------------------------- */

/* Forward of nw windows; with grad, also the backward into grad (zeroed
 * here) and the sse. Without grad, window scores. */
static void chunk_run(ssae_grad *g, work *w, const float *x, size_t nw,
                      float scale, float *grad, double *sse, float *scores) {
  size_t M = g->M, F = g->F, R = nw * F;
  chunk_forward(g, w, x, nw, w->y, 0);

  size_t FM = F * M;
  if (!grad) {
    for (size_t i = 0; i < nw; i++) {
      const float *xi = x + i * FM, *yi = w->y + i * FM;
      double s = 0;
      for (size_t j = 0; j < FM; j++) {
        double t = (double)yi[j] - xi[j];
        s += t * t;
      }
      scores[i] = (float)(s / (double)FM);
    }
    return;
  }

  /* dy = 2 (y - x) scale, in place of y */
  double total = 0;
  float s2 = 2.0f * scale;
  for (size_t i = 0; i < R; i++) {
    float *yi = w->y + i * M;
    const float *xi = x + i * M;
    double s = 0;
    for (size_t j = 0; j < M; j++) {
      float t = yi[j] - xi[j];
      s += (double)t * t;
      yi[j] = s2 * t;
    }
    total += s;
  }
  *sse = total;
  chunk_backward(g, w, nw, w->y, grad, NULL, 0);
}

/* ---- threads ------------------------------------------------------------ */

static size_t n_chunks(size_t n) { return (n + CHUNK - 1) / CHUNK; }

/* Threads claim chunks one at a time, so a thread that the OS holds back
 * (a busy machine) does not hold up the batch; which thread runs a chunk
 * does not change its result. */
static void run_share(void *arg, int index) {
  ssae_grad *g = arg;
  const job *jb = &g->cur;
  size_t nc = n_chunks(jb->n);
  pieces_claim_run(&g->fold, g, fold_piece);
  for (;;) {
    size_t c = atomic_fetch_add(&g->next_chunk, 1);
    if (c >= nc) break;
    size_t first = c * CHUNK, fm = g->F * g->M;
    size_t nw = jb->n - first < CHUNK ? jb->n - first : CHUNK;
    const float *x = jb->x ? jb->x + first * fm : NULL;
    if (jb->win) { /* the chunk's windows, gathered by this thread */
      float *xg = g->xg + (size_t)index * CHUNK * fm;
      for (size_t i = 0; i < nw; i++) memcpy(xg + i * fm, jb->win[first + i], fm * sizeof(float));
      x = xg;
    }
    if (jb->scores)
      chunk_run(g, &g->w[index], x, nw, 0, NULL, NULL, jb->scores + first);
    else
      chunk_run(g, &g->w[index], x, nw, jb->scale, g->cgrad + c * g->fd.off[FG_N],
                &g->csse[c], NULL);
  }
}

static void run_job(ssae_grad *g) {
  atomic_store(&g->next_chunk, 0);
  fold_begin(g);
  if (n_chunks(g->cur.n) > 1) ssae_pool_run(g->pool, run_share, g);
  else run_share(g, 0);
}

/* Slice k of the final sum, and what waited on it. */
static void sum_piece(ssae_grad *g, size_t k) {
  sum_parts(g, g->cgrad, g->sum_n, g->slice0[k], g->slice0[k + 1]);
  final_sum_slice_done(g, k, g->sum_out);
}

/* The final sum's slices, claimed one at a time. */
static void sum_share(void *arg, int index) {
  ssae_grad *g = arg;
  (void)index;
  pieces_claim_run(&g->sum, g, sum_piece);
}

/* Chunks from which the final sum is shared among the threads (below, it
 * is less work than waking them). */
#define SUM_SHARED_FROM 4

/* ---- object ------------------------------------------------------------- */

void ssae_grad_free(ssae_grad *g) {
  if (!g) return;
  ssae_pool_free(g->pool);
  if (g->w)
    for (int i = 0; i < g->n_w; i++) free(g->w[i].buf);
  free(g->w);
  free(g->params);
  free(g->bn);
  free(g->bn_t);
  free(g->gnorm);
  free(g->dec_t);
  folded_free(&g->fd);
  free(g->cgrad);
  free(g->csse);
  free(g->acc);
  free(g->slice0);
  free(g->xg);
  free(g);
}

ssae_grad *ssae_grad_new(const ssae_dims *d, int threads, ssae_err *err) {
  if (d->n_mels < 1 || d->frames < 1 || d->latent < 1 || d->slice_latent < 1 ||
      d->n_mels > 4096 || d->frames > 1024 || d->latent > 4096 ||
      d->slice_latent > 4096) {
    ssae_err_set(err, "model dimensions out of range (n_mels %d, frames %d, "
                 "latent %d, slice_latent %d)", d->n_mels, d->frames,
                 d->latent, d->slice_latent);
    return NULL;
  }
  ssae_grad *g = calloc(1, sizeof *g);
  if (!g) {
    ssae_err_set(err, "out of memory");
    return NULL;
  }
  g->d = *d;
  g->M = (size_t)d->n_mels;
  g->F = (size_t)d->frames;
  g->L = (size_t)d->latent;
  g->S = (size_t)d->slice_latent;
  g->C = g->F * g->S;
  ssae_param_offsets(d, g->off);
  g->P = g->off[SSAE_N_TENSORS];

  g->k = pick_kernels();

  if (threads <= 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    threads = n > 0 ? (int)n : 1;
  }
  if (threads > 256) threads = 256;
  g->threads = threads;

  g->params = xcalloc(g->P, sizeof(float));
  g->bn = xcalloc(g->L * g->C, sizeof(float));
  g->bn_t = xcalloc(g->L * g->C, sizeof(float));
  g->gnorm = xcalloc(g->L, sizeof(double));
  g->dec_t = xcalloc(g->M * g->S, sizeof(float));
  if (folded_alloc(&g->fd, g->M, g->F, g->L, g->S)) goto oom;
  g->acc = xcalloc(g->fd.off[FG_N], sizeof(double));
  g->slice0 = plan_slices(g, &g->n_slices);
  g->xg = xcalloc((size_t)threads * CHUNK * g->F * g->M, sizeof(float));
  g->w = calloc((size_t)threads, sizeof(work));
  g->n_w = g->w ? threads : 0;
  if (!g->params || !g->bn || !g->bn_t || !g->gnorm || !g->dec_t || !g->acc ||
      !g->slice0 || !g->xg || !g->w)
    goto oom;
  for (int i = 0; i < threads; i++)
    if (work_alloc(&g->w[i], g->M, g->F, g->L, g->S)) goto oom;

  if (!(g->pool = ssae_pool_new(threads - 1))) goto oom;
  /* Fewer threads when the system refuses some: the chunks are shared
   * among those there are (the result does not depend on who runs them). */
  g->threads = ssae_pool_helpers(g->pool) + 1;
  return g;
oom:
  ssae_err_set(err, "out of memory for the training buffers");
  ssae_grad_free(g);
  return NULL;
}

int ssae_grad_threads(const ssae_grad *g) { return g->threads; }

int ssae_grad_set_params(ssae_grad *g, const float *params, ssae_err *err) {
  size_t bad = first_nonfinite(params, g->P);
  if (bad < g->P)
    return ssae_err_set(err, "parameter %zu is not finite (training "
                        "diverged; try a smaller --lr)", bad);
  set_derived(g, params);
  return 0;
}

static int grow_chunks(ssae_grad *g, size_t nc, ssae_err *err) {
  if (nc <= g->n_chunks_cap) return 0;
  float *cg = realloc(g->cgrad, nc * g->fd.off[FG_N] * sizeof(float));
  if (!cg) return ssae_err_set(err, "out of memory for a batch of %zu windows",
                               nc * CHUNK);
  g->cgrad = cg;
  double *cs = realloc(g->csse, nc * sizeof(double));
  if (!cs) return ssae_err_set(err, "out of memory for a batch of %zu windows",
                               nc * CHUNK);
  g->csse = cs;
  g->n_chunks_cap = nc;
  return 0;
}

/* The gradient of the current job (x or win set): the chunks, then the
 * fixed-order reductions. */
static int grad_job(ssae_grad *g, size_t n, double scale, double *sse, float *grad,
                    ssae_err *err) {
  if (n == 0) return ssae_err_set(err, "empty batch");
  size_t nc = n_chunks(n);
  if (grow_chunks(g, nc, err)) return -1;
  g->cur.n = n;
  g->cur.scale = (float)scale;
  g->cur.scores = NULL;
  run_job(g);

  /* fixed-order reductions in double */
  double total = 0;
  for (size_t c = 0; c < nc; c++) total += g->csse[c];
  *sse = total;
  g->sum_n = nc;
  g->sum_out = grad;
  final_sum_reset(g);
  if (nc >= SUM_SHARED_FROM) ssae_pool_run(g->pool, sum_share, g);
  else sum_share(g, 0);
  return 0;
}

int ssae_grad_compute(ssae_grad *g, const float *x, size_t n, double scale,
                      double *sse, float *grad, ssae_err *err) {
  g->cur.x = x;
  g->cur.win = NULL;
  return grad_job(g, n, scale, sse, grad, err);
}

int ssae_grad_compute_windows(ssae_grad *g, const float *const *win, size_t n, double scale,
                              double *sse, float *grad, ssae_err *err) {
  g->cur.x = NULL;
  g->cur.win = win;
  return grad_job(g, n, scale, sse, grad, err);
}

int ssae_grad_scores(ssae_grad *g, const float *x, size_t n, float *scores,
                     ssae_err *err) {
  (void)err;
  if (n == 0) return 0;
  g->cur.x = x;
  g->cur.win = NULL;
  g->cur.n = n;
  g->cur.scale = 0;
  g->cur.scores = scores;
  run_job(g);
  return 0;
}
