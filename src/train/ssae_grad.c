/* Forward and backward pass of the SSAE for the MSE loss on the CPU.
 *
 * A batch is cut into chunks of CHUNK windows. Each chunk's gradient goes to
 * its own buffer and the buffers are summed in chunk order in double, so
 * the result is the same whatever the number of threads. Within a chunk the
 * work is batched matrix products over all slices (R = CHUNK*F rows). */
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

/* The kernels do not use floating-point exception flags; without
 * -ftrapping-math GCC if-converts the selects in the GELU loop and
 * vectorises it. */
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
  void (*mm_nn)(size_t, size_t, size_t, const float *, const float *,
                const float *, float *);
  void (*mm_tn_acc)(size_t, size_t, size_t, const float *, const float *,
                    float *);
  void (*gelu_fwd)(size_t, const float *, float *, float *);
} kernels;

/* Per-thread scratch for one chunk. */
typedef struct work {
  float *xhat, *u, *a, *h, *gd1; /* slice encoder: [R x M], [R x S] */
  float *rstd1;                  /* [R] */
  float *z, *zhat, *v, *p, *zp, *gd2, *rstd2; /* bottleneck: [CH x L] */
  float *r, *y;                  /* [R x S], [R x M] */
  float *dr, *dzp, *dv, *dz, *du; /* gradients w.r.t. activations */
} work;

typedef struct job {
  const float *x;
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
  float *enc_t, *bnw_t, *dec_t; /* transposed weights for the products */
  int threads;
  work *w;
  /* chunk gradient buffers and sse, grown on demand */
  float *cgrad;
  double *csse;
  size_t n_chunks_cap;
  double *acc;            /* double sum of the chunk gradients */
  /* thread pool */
  pthread_t *tid;
  int n_started;
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  int mu_ok;
  unsigned long gen;
  int pending;
  int quit;
  job cur;
  atomic_size_t next_chunk;
};

typedef struct worker_arg {
  ssae_grad *g;
  int index;
} worker_arg;

static void *xcalloc(size_t n, size_t size) {
  return n ? calloc(n, size) : calloc(1, 1);
}

/* ---- one chunk ---------------------------------------------------------- */

/* Layer normalisation of R rows of length n; statistics in double because
 * log-mel inputs sit far from zero (about -100 ... +20 dB). */
static void ln_fwd(size_t R, size_t n, const float *x, const float *gw,
                   const float *gb, float *xhat, float *out, float *rstd) {
  for (size_t i = 0; i < R; i++) {
    const float *xi = x + i * n;
    double s = 0;
    for (size_t j = 0; j < n; j++) s += xi[j];
    double mean = s / (double)n, ss = 0;
    for (size_t j = 0; j < n; j++) {
      double t = xi[j] - mean;
      ss += t * t;
    }
    double rs = 1.0 / sqrt(ss / (double)n + LN_EPS);
    float m = (float)mean, r = (float)rs;
    rstd[i] = r;
    float *xh = xhat + i * n, *o = out + i * n;
    for (size_t j = 0; j < n; j++) {
      xh[j] = (xi[j] - m) * r;
      o[j] = xh[j] * gw[j] + gb[j];
    }
  }
}

/* Gradients of the layer norm's weight and bias; with dx, also the input
 * gradient dx = rstd (dxh - mean(dxh) - xhat mean(dxh xhat)). */
static void ln_bwd(size_t R, size_t n, const float *dout, const float *xhat,
                   const float *rstd, const float *gw, float *dgw, float *dgb,
                   float *dx) {
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
    float m1 = (float)(s1 / (double)n), m2 = (float)(s2 / (double)n);
    float *o = dx + i * n;
    for (size_t j = 0; j < n; j++)
      o[j] = rstd[i] * (dy[j] * gw[j] - m1 - xh[j] * m2);
  }
}

/* Forward of nw windows; with grad, also the backward into grad (zeroed
 * here) and the sse. Without grad, window scores. */
static void chunk_run(ssae_grad *g, work *w, const float *x, size_t nw,
                      float scale, float *grad, double *sse, float *scores) {
  const kernels *k = &g->k;
  size_t M = g->M, F = g->F, L = g->L, S = g->S, C = g->C, R = nw * F;
  const float *P = g->params;
  const size_t *off = g->off;

  ln_fwd(R, M, x, P + off[0], P + off[1], w->xhat, w->u, w->rstd1);
  k->mm_nn(R, M, S, w->u, g->enc_t, P + off[3], w->a);
  k->gelu_fwd(R * S, w->a, w->h, w->gd1);
  /* h is also c: [nw x C] */
  k->mm_nn(nw, C, L, w->h, g->bn_t, NULL, w->z);
  ln_fwd(nw, L, w->z, P + off[5], P + off[6], w->zhat, w->v, w->rstd2);
  k->mm_nn(nw, L, L, w->v, g->bnw_t, P + off[8], w->p);
  k->gelu_fwd(nw * L, w->p, w->zp, w->gd2);
  k->mm_nn(nw, L, C, w->zp, g->bn, NULL, w->r);
  k->mm_nn(R, S, M, w->r, g->dec_t, P + off[10], w->y);

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
  float *dy = w->y;

  memset(grad, 0, g->P * sizeof *grad);
  float *g_lnw = grad + off[0], *g_lnb = grad + off[1];
  float *g_enc_w = grad + off[2], *g_enc_b = grad + off[3];
  float *g_bn = grad + off[4]; /* w.r.t. the normalised basis for now */
  float *g_lnbw = grad + off[5], *g_lnbb = grad + off[6];
  float *g_bnw = grad + off[7], *g_bnb = grad + off[8];
  float *g_dec_w = grad + off[9], *g_dec_b = grad + off[10];

  /* decoder */
  for (size_t i = 0; i < R; i++)
    for (size_t j = 0; j < M; j++) g_dec_b[j] += dy[i * M + j];
  k->mm_tn_acc(R, M, S, dy, w->r, g_dec_w);
  k->mm_nn(R, M, S, dy, P + off[9], NULL, w->dr);
  /* reconstruction r = z' B */
  k->mm_tn_acc(nw, L, C, w->zp, w->dr, g_bn);
  k->mm_nn(nw, C, L, w->dr, g->bn_t, NULL, w->dzp);
  /* bottleneck GELU and Linear */
  for (size_t i = 0; i < nw * L; i++) w->dzp[i] *= w->gd2[i];
  for (size_t i = 0; i < nw; i++)
    for (size_t j = 0; j < L; j++) g_bnb[j] += w->dzp[i * L + j];
  k->mm_tn_acc(nw, L, L, w->dzp, w->v, g_bnw);
  k->mm_nn(nw, L, L, w->dzp, P + off[7], NULL, w->dv);
  ln_bwd(nw, L, w->dv, w->zhat, w->rstd2, P + off[5], g_lnbw, g_lnbb, w->dz);
  /* z = B c */
  k->mm_tn_acc(nw, L, C, w->dz, w->h, g_bn);
  k->mm_nn(nw, L, C, w->dz, g->bn, NULL, w->dr); /* dc, into dr */
  /* slice encoder GELU, Linear, LayerNorm */
  float *da = w->dr;
  for (size_t i = 0; i < R * S; i++) da[i] *= w->gd1[i];
  for (size_t i = 0; i < R; i++)
    for (size_t j = 0; j < S; j++) g_enc_b[j] += da[i * S + j];
  k->mm_tn_acc(R, S, M, da, w->u, g_enc_w);
  k->mm_nn(R, S, M, da, P + off[2], NULL, w->du);
  ln_bwd(R, M, w->du, w->xhat, w->rstd1, P + off[0], g_lnw, g_lnb, NULL);
}

/* ---- threads ------------------------------------------------------------ */

static size_t n_chunks(size_t n) { return (n + CHUNK - 1) / CHUNK; }

/* Threads claim chunks one at a time, so a thread that the OS holds back
 * (a busy machine) does not hold up the batch; which thread runs a chunk
 * does not change its result. */
static void run_share(ssae_grad *g, int index) {
  const job *jb = &g->cur;
  size_t nc = n_chunks(jb->n);
  for (;;) {
    size_t c = atomic_fetch_add(&g->next_chunk, 1);
    if (c >= nc) break;
    size_t first = c * CHUNK;
    size_t nw = jb->n - first < CHUNK ? jb->n - first : CHUNK;
    const float *x = jb->x + first * g->F * g->M;
    if (jb->scores)
      chunk_run(g, &g->w[index], x, nw, 0, NULL, NULL, jb->scores + first);
    else
      chunk_run(g, &g->w[index], x, nw, jb->scale, g->cgrad + c * g->P,
                &g->csse[c], NULL);
  }
}

static void *worker(void *p) {
  worker_arg *a = p;
  ssae_grad *g = a->g;
  int index = a->index;
  free(a);
  unsigned long seen = 0;
  for (;;) {
    pthread_mutex_lock(&g->mu);
    while (!g->quit && g->gen == seen) pthread_cond_wait(&g->go, &g->mu);
    if (g->quit) {
      pthread_mutex_unlock(&g->mu);
      return NULL;
    }
    seen = g->gen;
    pthread_mutex_unlock(&g->mu);
    run_share(g, index);
    pthread_mutex_lock(&g->mu);
    if (--g->pending == 0) pthread_cond_signal(&g->done);
    pthread_mutex_unlock(&g->mu);
  }
}

static void run_job(ssae_grad *g) {
  atomic_store(&g->next_chunk, 0);
  if (g->threads > 1 && n_chunks(g->cur.n) > 1) {
    pthread_mutex_lock(&g->mu);
    g->pending = g->threads - 1;
    g->gen++;
    pthread_cond_broadcast(&g->go);
    pthread_mutex_unlock(&g->mu);
    run_share(g, 0);
    pthread_mutex_lock(&g->mu);
    while (g->pending) pthread_cond_wait(&g->done, &g->mu);
    pthread_mutex_unlock(&g->mu);
  } else {
    run_share(g, 0);
  }
}

/* ---- object ------------------------------------------------------------- */

static void work_free(work *w) {
  float **f[] = {&w->xhat, &w->u,  &w->a,   &w->h,  &w->gd1, &w->rstd1,
                 &w->z,    &w->zhat, &w->v, &w->p,  &w->zp,  &w->gd2,
                 &w->rstd2, &w->r, &w->y,   &w->dr, &w->dzp, &w->dv,
                 &w->dz,   &w->du};
  for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
    free(*f[i]);
    *f[i] = NULL;
  }
}

static int work_alloc(work *w, const ssae_grad *g) {
  size_t R = (size_t)CHUNK * g->F, N = CHUNK;
  w->xhat = xcalloc(R * g->M, sizeof(float));
  w->u = xcalloc(R * g->M, sizeof(float));
  w->a = xcalloc(R * g->S, sizeof(float));
  w->h = xcalloc(R * g->S, sizeof(float));
  w->gd1 = xcalloc(R * g->S, sizeof(float));
  w->rstd1 = xcalloc(R, sizeof(float));
  w->z = xcalloc(N * g->L, sizeof(float));
  w->zhat = xcalloc(N * g->L, sizeof(float));
  w->v = xcalloc(N * g->L, sizeof(float));
  w->p = xcalloc(N * g->L, sizeof(float));
  w->zp = xcalloc(N * g->L, sizeof(float));
  w->gd2 = xcalloc(N * g->L, sizeof(float));
  w->rstd2 = xcalloc(N, sizeof(float));
  w->r = xcalloc(R * g->S, sizeof(float));
  w->y = xcalloc(R * g->M, sizeof(float));
  w->dr = xcalloc(R * g->S, sizeof(float));
  w->dzp = xcalloc(N * g->L, sizeof(float));
  w->dv = xcalloc(N * g->L, sizeof(float));
  w->dz = xcalloc(N * g->L, sizeof(float));
  w->du = xcalloc(R * g->M, sizeof(float));
  return w->xhat && w->u && w->a && w->h && w->gd1 && w->rstd1 && w->z &&
                 w->zhat && w->v && w->p && w->zp && w->gd2 && w->rstd2 &&
                 w->r && w->y && w->dr && w->dzp && w->dv && w->dz && w->du
             ? 0
             : -1;
}

void ssae_grad_free(ssae_grad *g) {
  if (!g) return;
  if (g->mu_ok) {
    pthread_mutex_lock(&g->mu);
    g->quit = 1;
    pthread_cond_broadcast(&g->go);
    pthread_mutex_unlock(&g->mu);
    for (int i = 0; i < g->n_started; i++) pthread_join(g->tid[i], NULL);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->go);
    pthread_cond_destroy(&g->done);
  }
  free(g->tid);
  if (g->w)
    for (int i = 0; i < g->threads; i++) work_free(&g->w[i]);
  free(g->w);
  free(g->params);
  free(g->bn);
  free(g->bn_t);
  free(g->gnorm);
  free(g->enc_t);
  free(g->bnw_t);
  free(g->dec_t);
  free(g->cgrad);
  free(g->csse);
  free(g->acc);
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

  g->k.mm_nn = mm_nn_base;
  g->k.mm_tn_acc = mm_tn_acc_base;
  g->k.gelu_fwd = gelu_fwd_base;
#ifdef HAVE_AVX2_KERNELS
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      !getenv("SSAE_NO_AVX2")) {
    g->k.mm_nn = mm_nn_avx2;
    g->k.mm_tn_acc = mm_tn_acc_avx2;
    g->k.gelu_fwd = gelu_fwd_avx2;
  }
#endif

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
  g->enc_t = xcalloc(g->S * g->M, sizeof(float));
  g->bnw_t = xcalloc(g->L * g->L, sizeof(float));
  g->dec_t = xcalloc(g->M * g->S, sizeof(float));
  g->acc = xcalloc(g->P, sizeof(double));
  g->w = calloc((size_t)threads, sizeof(work));
  if (!g->params || !g->bn || !g->bn_t || !g->gnorm || !g->enc_t ||
      !g->bnw_t || !g->dec_t || !g->acc || !g->w)
    goto oom;
  for (int i = 0; i < threads; i++)
    if (work_alloc(&g->w[i], g)) goto oom;

  if (threads > 1) {
    if (pthread_mutex_init(&g->mu, NULL)) goto thr;
    if (pthread_cond_init(&g->go, NULL)) {
      pthread_mutex_destroy(&g->mu);
      goto thr;
    }
    if (pthread_cond_init(&g->done, NULL)) {
      pthread_cond_destroy(&g->go);
      pthread_mutex_destroy(&g->mu);
      goto thr;
    }
    g->mu_ok = 1;
    g->tid = calloc((size_t)threads, sizeof(pthread_t));
    if (!g->tid) goto oom;
    for (int i = 1; i < threads; i++) {
      worker_arg *a = malloc(sizeof *a);
      if (!a) goto oom;
      a->g = g;
      a->index = i;
      if (pthread_create(&g->tid[g->n_started], NULL, worker, a)) {
        free(a);
        goto thr;
      }
      g->n_started++;
    }
  }
  return g;
thr:
  ssae_err_set(err, "cannot start the training threads");
  ssae_grad_free(g);
  return NULL;
oom:
  ssae_err_set(err, "out of memory for the training buffers");
  ssae_grad_free(g);
  return NULL;
}

int ssae_grad_threads(const ssae_grad *g) { return g->threads; }

int ssae_grad_set_params(ssae_grad *g, const float *params, ssae_err *err) {
  size_t M = g->M, L = g->L, S = g->S, C = g->C;
  for (size_t i = 0; i < g->P; i++)
    if (!isfinite(params[i]))
      return ssae_err_set(err, "parameter %zu is not finite (training "
                          "diverged; try a smaller --lr)", i);
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
  const float *we = params + g->off[2], *wb = params + g->off[7],
              *wd = params + g->off[9];
  for (size_t s = 0; s < S; s++)
    for (size_t m = 0; m < M; m++) g->enc_t[m * S + s] = we[s * M + m];
  for (size_t i = 0; i < L; i++)
    for (size_t j = 0; j < L; j++) g->bnw_t[j * L + i] = wb[i * L + j];
  for (size_t m = 0; m < M; m++)
    for (size_t s = 0; s < S; s++) g->dec_t[s * M + m] = wd[m * S + s];
  return 0;
}

static int grow_chunks(ssae_grad *g, size_t nc, ssae_err *err) {
  if (nc <= g->n_chunks_cap) return 0;
  float *cg = realloc(g->cgrad, nc * g->P * sizeof(float));
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

int ssae_grad_compute(ssae_grad *g, const float *x, size_t n, double scale,
                      double *sse, float *grad, ssae_err *err) {
  if (n == 0) return ssae_err_set(err, "empty batch");
  size_t nc = n_chunks(n);
  if (grow_chunks(g, nc, err)) return -1;
  g->cur.x = x;
  g->cur.n = n;
  g->cur.scale = (float)scale;
  g->cur.scores = NULL;
  run_job(g);

  /* fixed-order reduction in double */
  size_t P = g->P;
  double total = 0;
  memset(g->acc, 0, P * sizeof(double));
  for (size_t c = 0; c < nc; c++) {
    const float *cg = g->cgrad + c * P;
    for (size_t i = 0; i < P; i++) g->acc[i] += cg[i];
    total += g->csse[c];
  }
  *sse = total;

  /* through B = G / max(|G|, eps): dG = (dB - B (B . dB)) / |G| */
  size_t L = g->L, C = g->C, o = g->off[4];
  for (size_t l = 0; l < L; l++) {
    double *dB = g->acc + o + l * C;
    double n = g->gnorm[l];
    if (n >= NORM_EPS) {
      const float *Gr = g->params + o + l * C;
      double dot = 0;
      for (size_t c = 0; c < C; c++) dot += dB[c] * (Gr[c] / n);
      for (size_t c = 0; c < C; c++) dB[c] = (dB[c] - (Gr[c] / n) * dot) / n;
    } else {
      for (size_t c = 0; c < C; c++) dB[c] /= NORM_EPS;
    }
  }
  for (size_t i = 0; i < P; i++) grad[i] = (float)g->acc[i];
  return 0;
}

int ssae_grad_scores(ssae_grad *g, const float *x, size_t n, float *scores,
                     ssae_err *err) {
  (void)err;
  if (n == 0) return 0;
  g->cur.x = x;
  g->cur.n = n;
  g->cur.scale = 0;
  g->cur.scores = scores;
  run_job(g);
  return 0;
}
