/* Vector-Jacobian products of the SSAE forward pass on the CPU (see
 * ssae_vjp.h). The chunk's forward and backward, the kernels and the
 * LayerNorms are the trainer's (ssae_grad_chunk.h, with the VJP's exact
 * LayerNorm arithmetic). A batch is cut into chunks of CHUNK windows and
 * the chunks into at most MAX_UNITS units of consecutive chunks (how many
 * per unit depends on the batch size only); a unit's parameter gradient is
 * its chunks' summed in chunk order into the unit's own buffer, and the
 * buffers are summed in unit order in double, each parameter by whichever
 * thread takes its slice: the result does not depend on the number of
 * threads, nor on whose threads they are (ssae_vjp_set_team). */
#include "ssae_vjp.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ssae_pool.h"
#include "ssae_train.h"

#include "ssae_grad_chunk.h"

/* What a call asks of every chunk: the forward (dy NULL; y written, and
 * with act the activations kept there), or the backward from dy (after the
 * forward again, or from act when the forward kept them). */
typedef struct job {
  const float *x, *dy;
  size_t n;
  float *y, *dx;
  float *act;
  /* the fused MSE loss instead of a given dy: dy = 2 (y - x) / (n F M)
   * made from each chunk's forward, each chunk's sum of squared errors
   * into csse[chunk] */
  int loss;
  double *csse;
  float *dparams; /* the backward's result, written by its last phase */
} job;

/* Most units per batch: enough to share among the threads of a large
 * machine, few enough that their gradient buffers stay small (about 20 MB
 * at the default dimensions) and cheap to sum. */
#define MAX_UNITS 256
struct ssae_vjp {
  size_t M, F, L, S, C, P;
  size_t off[SSAE_N_TENSORS + 1];
  kernels k;
  float *params, *bn, *bn_t, *dec_t;
  folded fd;             /* the folded weights the chunks run on */
  int fold_stale;        /* D^T to make before the next call's chunks */
  pieces fold, sum;      /* its making, the final sum's slices */
  double *gnorm, *acc;   /* acc: the final sum, folded (fd.off[FG_N] doubles) */
  size_t *slice0, n_slices; /* the final sum's slices: [slice0[k], slice0[k+1]) */
  int threads;
  work *w;
  float *ugrad; /* one folded gradient per unit, grown on demand */
  double *csse; /* the fused loss: each chunk's squared errors, grown too */
  size_t cap_chunks;
  float *tgrad; /* per thread: a chunk's gradient before it joins its unit's */
  size_t cap_units;
  job cur;
  size_t unit_chunks, n_units; /* this job's units */
  /* What a parallel phase runs on each thread (slot: which scratch), and
   * the work it claims, one unit or slice at a time. */
  void (*share)(struct ssae_vjp *g, int slot);
  atomic_size_t next;
  /* A host's team (ssae_vjp_set_team) instead of the threads below:
   * each of its threads takes a scratch slot on entry. */
  ssae_team_fn team;
  int team_threads;
  atomic_int team_slot;
  /* Otherwise the pool's helpers (slots 1 .. threads-1, fewer when the
   * system refused some) beside the calling thread (slot 0). */
  ssae_pool *pool;
};

#define GRAD_T struct ssae_vjp
#include "ssae_grad_chunk.h"

/* Floats of activations the backward needs, per window: xhat (F*M), h,
 * gd1 (F*S each), rstd1 (F), zhat, zp, gd2 (L each), rstd2. A chunk keeps
 * CHUNK windows' worth (the last one too). */
static size_t act_per_window(const ssae_vjp *g) {
  return g->F * g->M + 2 * g->F * g->S + g->F + 3 * g->L + 1;
}

/* w with its kept activations in act (a chunk's block) instead of the
 * thread's scratch. */
static work with_act(const ssae_vjp *g, const work *scratch, float *act) {
  work w = *scratch;
  const size_t R = (size_t)CHUNK * g->F, N = CHUNK;
  float **const dst[] = {&w.xhat, &w.h, &w.gd1, &w.rstd1, &w.zhat, &w.zp, &w.gd2, &w.rstd2};
  const size_t len[] = {R * g->M, R * g->S, R * g->S, R, N * g->L, N * g->L, N * g->L, N};
  carve(act, dst, len, sizeof len / sizeof *len);
  return w;
}

static size_t n_chunks(size_t n) { return (n + CHUNK - 1) / CHUNK; }

/* The units of a batch of n windows: unit_chunks chunks each (the last may
 * have fewer). */
static void plan_units(ssae_vjp *g, size_t n) {
  size_t nc = n_chunks(n);
  g->unit_chunks = (nc + MAX_UNITS - 1) / MAX_UNITS;
  if (!g->unit_chunks) g->unit_chunks = 1;
  g->n_units = (nc + g->unit_chunks - 1) / g->unit_chunks;
}

/* The MSE loss's output gradient in place of the chunk's output y, as
 * torch makes it (d = y - x, then d * (2 / numel) in float); returns the
 * chunk's sum of squared errors, in double. */
static double chunk_loss_grad(const float *x, float *y, size_t len, size_t numel) {
  const float scale = (float)(2.0 / (double)numel);
  /* eight partial sums, added in a fixed order: one running sum would
   * make the loop wait on each addition's latency */
  double part[8] = {0};
  size_t i = 0;
  for (; i + 8 <= len; i += 8)
    for (int k = 0; k < 8; k++) {
      float d = y[i + k] - x[i + k];
      part[k] += (double)d * d;
      y[i + k] = d * scale;
    }
  for (; i < len; i++) {
    float d = y[i] - x[i];
    part[0] += (double)d * d;
    y[i] = d * scale;
  }
  double sse = 0;
  for (int k = 0; k < 8; k++) sse += part[k];
  return sse;
}

/* Units are claimed one at a time; which thread runs one does not change
 * its result. */
static void chunks_share(ssae_vjp *g, int slot) {
  const job *jb = &g->cur;
  work *w = &g->w[slot];
  pieces_claim_run(&g->fold, g, fold_piece);
  const size_t nc = n_chunks(jb->n), win = g->F * g->M, Q = g->fd.off[FG_N];
  float *tmp = g->tgrad + (size_t)slot * Q;
  for (;;) {
    size_t u = atomic_fetch_add(&g->next, 1);
    if (u >= g->n_units) break;
    size_t c0 = u * g->unit_chunks, c1 = c0 + g->unit_chunks < nc ? c0 + g->unit_chunks : nc;
    float *ug = g->ugrad + u * Q;
    for (size_t c = c0; c < c1; c++) {
      size_t first = c * CHUNK, nw = jb->n - first < CHUNK ? jb->n - first : CHUNK;
      work kept = jb->act ? with_act(g, w, jb->act + c * CHUNK * act_per_window(g)) : *w;
      if (jb->loss) {
        chunk_forward(g, &kept, jb->x + first * win, nw, kept.y, 1);
        jb->csse[c] = chunk_loss_grad(jb->x + first * win, kept.y, nw * win, jb->n * win);
        chunk_backward(g, &kept, nw, kept.y, c == c0 ? ug : tmp, NULL, 1);
        if (c != c0)
          for (size_t i = 0; i < Q; i++) ug[i] += tmp[i];
        continue;
      }
      if (!jb->dy) {
        chunk_forward(g, &kept, jb->x + first * win, nw, jb->y + first * win, 1);
        continue;
      }
      /* the forward again, into scratch, unless it was kept */
      if (!jb->act) chunk_forward(g, &kept, jb->x + first * win, nw, kept.y, 1);
      chunk_backward(g, &kept, nw, jb->dy + first * win, c == c0 ? ug : tmp,
                     jb->dx ? jb->dx + first * win : NULL, 1);
      if (c != c0)
        for (size_t i = 0; i < Q; i++) ug[i] += tmp[i];
    }
  }
}

/* Slice k of the final sum, and what waited on it. */
static void sum_piece(ssae_vjp *g, size_t k) {
  sum_parts(g, g->ugrad, g->n_units, g->slice0[k], g->slice0[k + 1]);
  final_sum_slice_done(g, k, g->cur.dparams);
}

/* The units' folded gradients summed in unit order, in double, a slice at
 * a time, each part of the parameters' gradients made as soon as what it
 * needs is summed: the whole end of a backward in one parallel phase. */
static void sum_share(ssae_vjp *g, int slot) {
  (void)slot;
  pieces_claim_run(&g->sum, g, sum_piece);
}

static void pool_body(void *p, int slot) {
  ssae_vjp *g = p;
  g->share(g, slot);
}

/* One thread of a host's team: a scratch slot of its own, or nothing to do
 * when the team is larger than the slots. */
static void team_body(void *p) {
  ssae_vjp *g = p;
  int slot = atomic_fetch_add(&g->team_slot, 1);
  if (slot < g->threads) g->share(g, slot);
}

/* Runs share on the calling thread and the workers (the host's team when
 * one is set); a phase of one piece of work runs on the calling thread
 * alone. */
static void run_phase(ssae_vjp *g, void (*share)(ssae_vjp *, int), size_t pieces) {
  g->share = share;
  atomic_store(&g->next, 0);
  if (pieces <= 1 || (!g->team && !ssae_pool_helpers(g->pool))) {
    share(g, 0);
    return;
  }
  if (g->team) {
    atomic_store(&g->team_slot, 0);
    unsigned n = (unsigned)(pieces < (size_t)g->team_threads ? pieces : (size_t)g->team_threads);
    g->team(team_body, g, n, 0);
    return;
  }
  ssae_pool_run(g->pool, pool_body, g);
}

/* The chunks of the current job, after D^T's pieces when the parameters
 * changed. */
static void run_chunks(ssae_vjp *g) {
  fold_begin(g);
  run_phase(g, chunks_share, g->n_units);
}

static void run_job(ssae_vjp *g) {
  plan_units(g, g->cur.n);
  run_chunks(g);
}

void ssae_vjp_set_team(ssae_vjp *g, ssae_team_fn team, int threads) {
  g->team = threads > 1 ? team : NULL;
  g->team_threads = threads > g->threads ? g->threads : threads;
}

static void *xcalloc(size_t n, size_t size) { return calloc(n ? n : 1, size); }

void ssae_vjp_free(ssae_vjp *g) {
  if (!g) return;
  ssae_pool_free(g->pool);
  if (g->w)
    for (int i = 0; i < g->threads; i++) free(g->w[i].buf);
  free(g->w);
  free(g->params);
  free(g->bn);
  free(g->bn_t);
  free(g->dec_t);
  folded_free(&g->fd);
  free(g->gnorm);
  free(g->acc);
  free(g->slice0);
  free(g->ugrad);
  free(g->csse);
  free(g->tgrad);
  free(g);
}

ssae_vjp *ssae_vjp_new(const ssae_dims *d, int threads, ssae_err *err) {
  if (ssae_dims_check(d, err)) return NULL;
  ssae_vjp *g = calloc(1, sizeof *g);
  if (!g) {
    ssae_err_set(err, "out of memory");
    return NULL;
  }
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
  g->threads = threads > 256 ? 256 : threads;
  g->params = xcalloc(g->P, sizeof(float));
  g->bn = xcalloc(g->L * g->C, sizeof(float));
  g->bn_t = xcalloc(g->L * g->C, sizeof(float));
  g->dec_t = xcalloc(g->M * g->S, sizeof(float));
  g->gnorm = xcalloc(g->L, sizeof(double));
  int ok = !folded_alloc(&g->fd, g->M, g->F, g->L, g->S);
  const size_t Q = g->fd.off[FG_N];
  g->acc = xcalloc(Q, sizeof(double));
  g->w = calloc((size_t)g->threads, sizeof(work));
  g->tgrad = xcalloc((size_t)g->threads * Q, sizeof(float));
  g->slice0 = ok ? plan_slices(g, &g->n_slices) : NULL;
  ok = ok && g->params && g->bn && g->bn_t && g->dec_t && g->gnorm && g->acc && g->w &&
       g->tgrad && g->slice0;
  for (int i = 0; ok && i < g->threads; i++) ok = !work_alloc(&g->w[i], g->M, g->F, g->L, g->S);
  if (!ok) {
    ssae_err_set(err, "out of memory for the gradient buffers");
    ssae_vjp_free(g);
    return NULL;
  }
  /* Fewer helpers than asked when the system refuses some: the units
   * are shared among the threads there are. */
  if (!(g->pool = ssae_pool_new(g->threads - 1))) {
    ssae_err_set(err, "out of memory for the gradient threads");
    ssae_vjp_free(g);
    return NULL;
  }
  return g;
}

size_t ssae_vjp_param_count(const ssae_vjp *g) { return g->P; }

int ssae_vjp_set_params(ssae_vjp *g, const float *params, ssae_err *err) {
  size_t bad = first_nonfinite(params, g->P);
  if (bad < g->P) {
    size_t t = 0;
    while (bad >= g->off[t + 1]) t++;
    return ssae_err_set(err, "parameter %s[%zu] is not finite", ssae_tensor_names[t],
                        bad - g->off[t]);
  }
  set_derived(g, params);
  return 0;
}

int ssae_vjp_forward(ssae_vjp *g, const float *x, size_t n, float *y, ssae_err *err) {
  if (n && (!x || !y)) return ssae_err_set(err, "forward: NULL buffer");
  if (!n) return 0;
  g->cur = (job){x, NULL, n, y, NULL, NULL, 0, NULL, NULL};
  run_job(g);
  return 0;
}

size_t ssae_vjp_act_floats(const ssae_vjp *g, size_t n) {
  return n_chunks(n) * CHUNK * act_per_window(g);
}

int ssae_vjp_forward_save(ssae_vjp *g, const float *x, size_t n, float *y, float *act,
                          ssae_err *err) {
  if (n && (!x || !y || !act)) return ssae_err_set(err, "forward: NULL buffer");
  if (!n) return 0;
  g->cur = (job){x, NULL, n, y, NULL, act, 0, NULL, NULL};
  run_job(g);
  return 0;
}

static int backward_job(ssae_vjp *g, const float *x, float *act, size_t n, const float *dy,
                        int loss, float *dparams, float *dx, ssae_err *err);

int ssae_vjp_backward(ssae_vjp *g, const float *x, size_t n, const float *dy, float *dparams,
                      float *dx, ssae_err *err) {
  if (!dparams || (n && (!x || !dy))) return ssae_err_set(err, "backward: NULL buffer");
  return backward_job(g, x, NULL, n, dy, 0, dparams, dx, err);
}

int ssae_vjp_backward_saved(ssae_vjp *g, const float *act, size_t n, const float *dy,
                            float *dparams, float *dx, ssae_err *err) {
  if (!dparams || (n && (!act || !dy))) return ssae_err_set(err, "backward: NULL buffer");
  /* act is only read (the job's pointer is not const for the forward's
   * sake) */
  return backward_job(g, NULL, (float *)act, n, dy, 0, dparams, dx, err);
}

int ssae_vjp_loss(ssae_vjp *g, const float *x, size_t n, double *loss, float *dparams,
                  ssae_err *err) {
  if (!dparams || !loss || (n && !x)) return ssae_err_set(err, "loss: NULL buffer");
  size_t nc = n_chunks(n);
  if (nc > g->cap_chunks) {
    double *c = realloc(g->csse, nc * sizeof *c);
    if (!c) return ssae_err_set(err, "out of memory for a batch of %zu windows", n);
    g->csse = c;
    g->cap_chunks = nc;
  }
  if (backward_job(g, x, NULL, n, NULL, 1, dparams, NULL, err)) return -1;
  double sse = 0;
  for (size_t c = 0; c < nc; c++) sse += g->csse[c];
  *loss = n ? sse / ((double)n * (double)(g->F * g->M)) : NAN;
  return 0;
}

static int backward_job(ssae_vjp *g, const float *x, float *act, size_t n, const float *dy,
                        int loss, float *dparams, float *dx, ssae_err *err) {
  plan_units(g, n);
  if (g->n_units > g->cap_units) {
    float *ug = realloc(g->ugrad, g->n_units * g->fd.off[FG_N] * sizeof(float));
    if (!ug) return ssae_err_set(err, "out of memory for a batch of %zu windows", n);
    g->ugrad = ug;
    g->cap_units = g->n_units;
  }
  if (n) {
    g->cur = (job){x, dy, n, NULL, dx, act, loss, g->csse, dparams};
    run_chunks(g);
    final_sum_reset(g);
    run_phase(g, sum_share, g->n_slices);
  } else {
    memset(dparams, 0, g->P * sizeof *dparams);
  }
  return 0;
}
