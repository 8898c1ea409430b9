/* Vector-Jacobian products of the SSAE forward pass on the CPU (see
 * ssae_vjp.h). The matrix products and the GELU are the trainer's kernels
 * (ssae_train_kern.h, picked at run time like ssae_grad.c does); a batch is
 * cut into chunks of CHUNK windows, each chunk's parameter gradient goes to
 * its own buffer and the buffers are summed in chunk order in double, so
 * the result does not depend on the number of threads. */
#include "ssae_vjp.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ssae_train.h"

#define CHUNK 32
#define LN_EPS 1e-5
#define NORM_EPS 1e-12

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")
#endif
#define KSFX(name) name##_base
#define KV kv4
#define KVL 4
#include "ssae_train_kern.h"
#undef KSFX
#undef KV
#undef KVL
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define HAVE_AVX2_KERNELS 1
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#pragma GCC optimize("fp-contract=fast", "no-trapping-math")
#define KSFX(name) name##_avx2
#define KV kv8
#define KVL 8
#include "ssae_train_kern.h"
#undef KSFX
#undef KV
#undef KVL
#pragma GCC pop_options
#endif

typedef struct kernels {
  void (*mm_nn)(size_t, size_t, size_t, const float *, const float *, const float *, float *);
  void (*mm_tn_acc)(size_t, size_t, size_t, const float *, const float *, float *);
  void (*gelu_fwd)(size_t, const float *, float *, float *);
} kernels;

/* Activations and their gradients for one chunk. */
typedef struct work {
  float *buf; /* the one allocation behind the others */
  float *xhat, *u, *a, *h, *gd1, *rstd1;           /* slice encoder */
  float *z, *zhat, *v, *p, *zp, *gd2, *rstd2;      /* bottleneck */
  float *r, *y, *dr, *dzp, *dv, *dz, *du;           /* decoder, gradients */
} work;

/* What a call asks of every chunk: the forward (dy NULL; y written, and
 * with act the activations kept there), or the backward from dy (after the
 * forward again, or from act when the forward kept them). */
typedef struct job {
  const float *x, *dy;
  size_t n;
  float *y, *dx;
  float *act;
} job;

typedef struct helper {
  struct ssae_vjp *g;
  work *w;
} helper;

struct ssae_vjp {
  size_t M, F, L, S, C, P;
  size_t off[SSAE_N_TENSORS + 1];
  kernels k;
  float *params, *bn, *bn_t, *enc_t, *bnw_t, *dec_t;
  double *gnorm, *acc;
  int threads;
  work *w;
  float *cgrad; /* one parameter gradient per chunk, grown on demand */
  size_t cap_chunks;
  job cur;
  atomic_size_t next_chunk;
  /* Worker threads 1 .. threads-1, started once and kept: each call wakes
   * them (gen), runs its share on the calling thread and waits until
   * every worker is done (pending). */
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  unsigned long gen;
  int pending, quit, pool_ok, started;
  pthread_t tid[256];
  helper hp[256];
};

static void ln_fwd(size_t R, size_t n, const float *x, const float *gw, const float *gb,
                   float *xhat, float *out, float *rstd) {
  for (size_t i = 0; i < R; i++) {
    const float *xi = x + i * n;
    double s = 0;
    for (size_t j = 0; j < n; j++) s += xi[j];
    double mean = s / (double)n, ss = 0;
    for (size_t j = 0; j < n; j++) {
      double t = xi[j] - mean;
      ss += t * t;
    }
    float r = (float)(1.0 / sqrt(ss / (double)n + LN_EPS));
    rstd[i] = r;
    float *xh = xhat + i * n, *o = out + i * n;
    for (size_t j = 0; j < n; j++) {
      /* x - mean in double: log-mel rows sit far from zero */
      xh[j] = (float)((xi[j] - mean) * r);
      o[j] = xh[j] * gw[j] + gb[j];
    }
  }
}

/* dgw += dout xhat, dgb += dout; with dx, the input gradient
 * dx = rstd (dxh - mean(dxh) - xhat mean(dxh xhat)), dxh = dout gw. */
static void ln_bwd(size_t R, size_t n, const float *dout, const float *xhat, const float *rstd,
                   const float *gw, float *dgw, float *dgb, float *dx) {
  for (size_t i = 0; i < R; i++) {
    const float *dy = dout + i * n, *xh = xhat + i * n;
    double s1 = 0, s2 = 0;
    for (size_t j = 0; j < n; j++) {
      dgw[j] += dy[j] * xh[j];
      dgb[j] += dy[j];
      double t = (double)dy[j] * gw[j];
      s1 += t;
      s2 += t * xh[j];
    }
    if (!dx) continue;
    double m1 = s1 / (double)n, m2 = s2 / (double)n;
    float *o = dx + i * n;
    for (size_t j = 0; j < n; j++)
      o[j] = (float)(rstd[i] * ((double)dy[j] * gw[j] - m1 - xh[j] * m2));
  }
}

/* Floats of activations the backward needs, per window: xhat, u (F*M
 * each), h, gd1, r (F*S each), rstd1 (F), zhat, v, zp, gd2 (L each),
 * rstd2. A chunk keeps CHUNK windows' worth (the last one too). */
static size_t act_per_window(const ssae_vjp *g) {
  return 2 * g->F * g->M + 3 * g->F * g->S + g->F + 4 * g->L + 1;
}

/* w with its kept activations in act (a chunk's block) instead of the
 * thread's scratch. */
static work with_act(const ssae_vjp *g, const work *scratch, float *act) {
  work w = *scratch;
  const size_t R = (size_t)CHUNK * g->F, N = CHUNK;
  float **dst[] = {&w.xhat, &w.u, &w.h, &w.gd1, &w.r, &w.rstd1,
                   &w.zhat, &w.v, &w.zp, &w.gd2, &w.rstd2};
  const size_t len[] = {R * g->M, R * g->M, R * g->S, R * g->S, R * g->S, R,
                        N * g->L, N * g->L, N * g->L, N * g->L, N};
  for (size_t i = 0; i < sizeof len / sizeof *len; i++) {
    *dst[i] = act;
    act += len[i];
  }
  return w;
}

/* Forward of nw windows; y: where the output goes. */
static void chunk_forward(const ssae_vjp *g, work *w, const float *x, size_t nw, float *y) {
  const kernels *k = &g->k;
  size_t M = g->M, F = g->F, L = g->L, S = g->S, C = g->C, R = nw * F;
  const float *P = g->params;
  const size_t *off = g->off;

  ln_fwd(R, M, x, P + off[0], P + off[1], w->xhat, w->u, w->rstd1);
  k->mm_nn(R, M, S, w->u, g->enc_t, P + off[3], w->a);
  k->gelu_fwd(R * S, w->a, w->h, w->gd1);
  k->mm_nn(nw, C, L, w->h, g->bn_t, NULL, w->z);
  ln_fwd(nw, L, w->z, P + off[5], P + off[6], w->zhat, w->v, w->rstd2);
  k->mm_nn(nw, L, L, w->v, g->bnw_t, P + off[8], w->p);
  k->gelu_fwd(nw * L, w->p, w->zp, w->gd2);
  k->mm_nn(nw, L, C, w->zp, g->bn, NULL, w->r);
  k->mm_nn(R, S, M, w->r, g->dec_t, P + off[10], y);
}

/* The backward of nw windows from the activations in w into grad (P
 * floats, zeroed here) and dx (or NULL). */
static void chunk_backward(const ssae_vjp *g, work *w, size_t nw, const float *dy, float *grad,
                           float *dx) {
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
  ln_bwd(nw, L, w->dv, w->zhat, w->rstd2, P + off[5], grad + off[5], grad + off[6], w->dz);
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
  ln_bwd(R, M, w->du, w->xhat, w->rstd1, P + off[0], grad + off[0], grad + off[1], dx);
}

static size_t n_chunks(size_t n) { return (n + CHUNK - 1) / CHUNK; }

/* Chunks are claimed one at a time; which thread runs one does not change
 * its result. */
static void run_share(ssae_vjp *g, work *w) {
  const job *jb = &g->cur;
  size_t nc = n_chunks(jb->n), win = g->F * g->M;
  for (;;) {
    size_t c = atomic_fetch_add(&g->next_chunk, 1);
    if (c >= nc) break;
    size_t first = c * CHUNK, nw = jb->n - first < CHUNK ? jb->n - first : CHUNK;
    work kept = jb->act ? with_act(g, w, jb->act + c * CHUNK * act_per_window(g)) : *w;
    if (jb->dy) {
      /* the forward again, into scratch, unless it was kept */
      if (!jb->act) chunk_forward(g, &kept, jb->x + first * win, nw, kept.y);
      chunk_backward(g, &kept, nw, jb->dy + first * win, g->cgrad + c * g->P,
                     jb->dx ? jb->dx + first * win : NULL);
    } else {
      chunk_forward(g, &kept, jb->x + first * win, nw, jb->y + first * win);
    }
  }
}

static void *worker_main(void *p) {
  helper *h = p;
  ssae_vjp *g = h->g;
  unsigned long seen = 0;
  pthread_mutex_lock(&g->mu);
  for (;;) {
    while (!g->quit && g->gen == seen) pthread_cond_wait(&g->go, &g->mu);
    if (g->quit) break;
    seen = g->gen;
    pthread_mutex_unlock(&g->mu);
    run_share(g, h->w);
    pthread_mutex_lock(&g->mu);
    if (--g->pending == 0) pthread_cond_signal(&g->done);
  }
  pthread_mutex_unlock(&g->mu);
  return NULL;
}

/* The workers take chunks beside the calling thread; a call of one chunk
 * runs on the calling thread alone. */
static void run_job(ssae_vjp *g) {
  atomic_store(&g->next_chunk, 0);
  if (!g->started || n_chunks(g->cur.n) <= 1) {
    run_share(g, &g->w[0]);
    return;
  }
  pthread_mutex_lock(&g->mu);
  g->pending = g->started;
  g->gen++;
  pthread_cond_broadcast(&g->go);
  pthread_mutex_unlock(&g->mu);
  run_share(g, &g->w[0]);
  pthread_mutex_lock(&g->mu);
  while (g->pending) pthread_cond_wait(&g->done, &g->mu);
  pthread_mutex_unlock(&g->mu);
}

static void *xcalloc(size_t n, size_t size) { return calloc(n ? n : 1, size); }

void ssae_vjp_free(ssae_vjp *g) {
  if (!g) return;
  if (g->pool_ok) {
    pthread_mutex_lock(&g->mu);
    g->quit = 1;
    pthread_cond_broadcast(&g->go);
    pthread_mutex_unlock(&g->mu);
    for (int i = 1; i <= g->started; i++) pthread_join(g->tid[i], NULL);
    pthread_cond_destroy(&g->go);
    pthread_cond_destroy(&g->done);
    pthread_mutex_destroy(&g->mu);
  }
  if (g->w)
    for (int i = 0; i < g->threads; i++) free(g->w[i].buf);
  free(g->w);
  free(g->params);
  free(g->bn);
  free(g->bn_t);
  free(g->enc_t);
  free(g->bnw_t);
  free(g->dec_t);
  free(g->gnorm);
  free(g->acc);
  free(g->cgrad);
  free(g);
}

static int work_alloc(work *w, const ssae_vjp *g) {
  size_t R = (size_t)CHUNK * g->F, N = CHUNK, M = g->M, S = g->S, L = g->L;
  size_t len[] = {R * M, R * M, R * S, R * S, R * S, R, N * L, N * L, N * L, N * L,
                  N * L, N * L, N, R * S, R * M, R * S, N * L, N * L, N * L, R * M};
  float **dst[] = {&w->xhat, &w->u,  &w->a,   &w->h,  &w->gd1, &w->rstd1, &w->z,
                   &w->zhat, &w->v,  &w->p,   &w->zp, &w->gd2, &w->rstd2, &w->r,
                   &w->y,    &w->dr, &w->dzp, &w->dv, &w->dz,  &w->du};
  size_t total = 0;
  for (size_t i = 0; i < sizeof len / sizeof *len; i++) total += len[i];
  w->buf = xcalloc(total, sizeof(float));
  if (!w->buf) return -1;
  float *p = w->buf;
  for (size_t i = 0; i < sizeof len / sizeof *len; i++) {
    *dst[i] = p;
    p += len[i];
  }
  return 0;
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
  g->k = (kernels){mm_nn_base, mm_tn_acc_base, gelu_fwd_base};
#ifdef HAVE_AVX2_KERNELS
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      !getenv("SSAE_NO_AVX2"))
    g->k = (kernels){mm_nn_avx2, mm_tn_acc_avx2, gelu_fwd_avx2};
#endif
  if (threads <= 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    threads = n > 0 ? (int)n : 1;
  }
  g->threads = threads > 256 ? 256 : threads;
  g->params = xcalloc(g->P, sizeof(float));
  g->bn = xcalloc(g->L * g->C, sizeof(float));
  g->bn_t = xcalloc(g->L * g->C, sizeof(float));
  g->enc_t = xcalloc(g->S * g->M, sizeof(float));
  g->bnw_t = xcalloc(g->L * g->L, sizeof(float));
  g->dec_t = xcalloc(g->M * g->S, sizeof(float));
  g->gnorm = xcalloc(g->L, sizeof(double));
  g->acc = xcalloc(g->P, sizeof(double));
  g->w = calloc((size_t)g->threads, sizeof(work));
  int ok = g->params && g->bn && g->bn_t && g->enc_t && g->bnw_t && g->dec_t && g->gnorm &&
           g->acc && g->w;
  for (int i = 0; ok && i < g->threads; i++) ok = !work_alloc(&g->w[i], g);
  if (!ok) {
    ssae_err_set(err, "out of memory for the gradient buffers");
    ssae_vjp_free(g);
    return NULL;
  }
  if (g->threads > 1) {
    if (pthread_mutex_init(&g->mu, NULL)) return g; /* runs on the calling thread */
    if (pthread_cond_init(&g->go, NULL)) {
      pthread_mutex_destroy(&g->mu);
      return g;
    }
    if (pthread_cond_init(&g->done, NULL)) {
      pthread_cond_destroy(&g->go);
      pthread_mutex_destroy(&g->mu);
      return g;
    }
    g->pool_ok = 1;
    /* Fewer workers than asked when the system refuses some: the chunks
     * are shared among those there are. */
    for (int i = 1; i < g->threads; i++) {
      g->hp[i] = (helper){g, &g->w[i]};
      if (pthread_create(&g->tid[i], NULL, worker_main, &g->hp[i])) break;
      g->started = i;
    }
  }
  return g;
}

size_t ssae_vjp_param_count(const ssae_vjp *g) { return g->P; }

int ssae_vjp_set_params(ssae_vjp *g, const float *params, ssae_err *err) {
  size_t M = g->M, L = g->L, S = g->S, C = g->C;
  for (size_t t = 0; t < SSAE_N_TENSORS; t++)
    for (size_t i = g->off[t]; i < g->off[t + 1]; i++)
      if (!isfinite(params[i]))
        return ssae_err_set(err, "parameter %s[%zu] is not finite", ssae_tensor_names[t],
                            i - g->off[t]);
  memcpy(g->params, params, g->P * sizeof(float));
  const float *G = params + g->off[4];
  for (size_t l = 0; l < L; l++) {
    double s = 0;
    for (size_t c = 0; c < C; c++) s += (double)G[l * C + c] * G[l * C + c];
    double n = sqrt(s);
    g->gnorm[l] = n;
    double div = n > NORM_EPS ? n : NORM_EPS;
    for (size_t c = 0; c < C; c++) {
      float b = (float)(G[l * C + c] / div);
      g->bn[l * C + c] = b;
      g->bn_t[c * L + l] = b;
    }
  }
  const float *we = params + g->off[2], *wb = params + g->off[7], *wd = params + g->off[9];
  for (size_t s = 0; s < S; s++)
    for (size_t m = 0; m < M; m++) g->enc_t[m * S + s] = we[s * M + m];
  for (size_t i = 0; i < L; i++)
    for (size_t j = 0; j < L; j++) g->bnw_t[j * L + i] = wb[i * L + j];
  for (size_t m = 0; m < M; m++)
    for (size_t s = 0; s < S; s++) g->dec_t[s * M + m] = wd[m * S + s];
  return 0;
}

int ssae_vjp_forward(ssae_vjp *g, const float *x, size_t n, float *y, ssae_err *err) {
  if (n && (!x || !y)) return ssae_err_set(err, "forward: NULL buffer");
  if (!n) return 0;
  g->cur = (job){x, NULL, n, y, NULL, NULL};
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
  g->cur = (job){x, NULL, n, y, NULL, act};
  run_job(g);
  return 0;
}

static int backward_job(ssae_vjp *g, const float *x, float *act, size_t n, const float *dy,
                        float *dparams, float *dx, ssae_err *err);

int ssae_vjp_backward(ssae_vjp *g, const float *x, size_t n, const float *dy, float *dparams,
                      float *dx, ssae_err *err) {
  if (!dparams || (n && (!x || !dy))) return ssae_err_set(err, "backward: NULL buffer");
  return backward_job(g, x, NULL, n, dy, dparams, dx, err);
}

int ssae_vjp_backward_saved(ssae_vjp *g, const float *act, size_t n, const float *dy,
                            float *dparams, float *dx, ssae_err *err) {
  if (!dparams || (n && (!act || !dy))) return ssae_err_set(err, "backward: NULL buffer");
  /* act is only read (the job's pointer is not const for the forward's
   * sake) */
  return backward_job(g, NULL, (float *)act, n, dy, dparams, dx, err);
}

static int backward_job(ssae_vjp *g, const float *x, float *act, size_t n, const float *dy,
                        float *dparams, float *dx, ssae_err *err) {
  size_t P = g->P, nc = n_chunks(n);
  if (nc > g->cap_chunks) {
    float *cg = realloc(g->cgrad, nc * P * sizeof(float));
    if (!cg) return ssae_err_set(err, "out of memory for a batch of %zu windows", n);
    g->cgrad = cg;
    g->cap_chunks = nc;
  }
  if (n) {
    g->cur = (job){x, dy, n, NULL, dx, act};
    run_job(g);
  }
  memset(g->acc, 0, P * sizeof(double));
  for (size_t c = 0; c < nc; c++) {
    const float *cg = g->cgrad + c * P;
    for (size_t i = 0; i < P; i++) g->acc[i] += cg[i];
  }
  /* through B = G / max(|G|, eps): dG = (dB - B (B . dB)) / |G| */
  size_t L = g->L, C = g->C, o = g->off[4];
  for (size_t l = 0; l < L; l++) {
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
  for (size_t i = 0; i < P; i++) dparams[i] = (float)g->acc[i];
  return 0;
}
