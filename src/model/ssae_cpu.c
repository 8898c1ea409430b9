/* The SSAE forward pass on the CPU (SPEC section 2).
 *
 * Float32 in and out, float64 inside: the CPU is the reference the other
 * backends are checked against, and at real log-mel scale (-100 ... +20 dB)
 * float32 sums over 64-320 terms lose too much to stay within 1e-6 of the
 * float64 module. Windows go through in blocks; each stage of a block is
 * one small matrix product over padded, pre-transposed weights so that the
 * inner loops run over output features with a fixed register tile. */
#include "ssae_cpu.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ssae_cpu_kernels.h"

/* Windows per block: large enough to reuse the weights from cache, small
 * enough that a block's activations stay in L2. */
#define BLOCK 16
/* Below this many windows per thread, waking threads costs more than it
 * saves. */
#define MIN_PER_THREAD 32

typedef struct {
  /* Activations of one block, padded like the weights. */
  double *xn;  /* [BLOCK*F][M]  */
  double *h;   /* [BLOCK][Cp]   */
  double *z;   /* [BLOCK][Lp]   */
  double *zp;  /* [BLOCK][Lp]   */
  double *r;   /* [BLOCK][Cp]   */
  double *y;   /* [BLOCK*F][Mp] */
} scratch;

typedef struct worker {
  struct ssae_cpu *c;
  pthread_t tid;
  int started;
  scratch s;
  /* The current job, set under the pool lock. */
  const float *x;
  size_t n;
  float *scores, *recon;
} worker;

struct ssae_cpu {
  int M, F, L, S, Mp, Sp, Lp, Cp;
  /* Weights in double, transposed to [in][out_padded] with zero padding. */
  double *ln1_w, *ln1_b;  /* [M] */
  double *encT, *enc_b;   /* [M][Sp], [Sp] */
  double *BT;             /* [Cp][Lp]: normalised basis, transposed */
  double *B;              /* [Lp][Cp] rows beyond L are zero */
  double *ln2_w, *ln2_b;  /* [L] */
  double *bnT, *bn_b;     /* [Lp][Lp], [Lp] */
  double *decT, *dec_b;   /* [Sp][Mp], [Mp] */
  double *weights;        /* the one allocation behind them */

  int nthreads;
  worker *w; /* w[0] is the calling thread */
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  int sync_ok;
  unsigned long generation;
  int pending, quit;
};

static size_t pad8(size_t n) { return (n + 7) & ~(size_t)7; }

static void layernorm(const float *x, size_t n, const double *w, const double *b, double *out) {
  double mean = 0, var = 0;
  for (size_t i = 0; i < n; i++) mean += x[i];
  mean /= (double)n;
  for (size_t i = 0; i < n; i++) {
    double d = x[i] - mean;
    var += d * d;
  }
  double inv = 1.0 / sqrt(var / (double)n + 1e-5);
  for (size_t i = 0; i < n; i++) out[i] = (x[i] - mean) * inv * w[i] + b[i];
}

static void layernorm_d(const double *x, size_t n, const double *w, const double *b,
                        double *out) {
  double mean = 0, var = 0;
  for (size_t i = 0; i < n; i++) mean += x[i];
  mean /= (double)n;
  for (size_t i = 0; i < n; i++) {
    double d = x[i] - mean;
    var += d * d;
  }
  double inv = 1.0 / sqrt(var / (double)n + 1e-5);
  for (size_t i = 0; i < n; i++) out[i] = (x[i] - mean) * inv * w[i] + b[i];
}

/* One block of nb windows. */
static void forward_block(const struct ssae_cpu *c, scratch *s, const float *x, size_t nb,
                          float *scores, float *recon) {
  size_t M = (size_t)c->M, F = (size_t)c->F, L = (size_t)c->L, S = (size_t)c->S;
  size_t Mp = (size_t)c->Mp, Sp = (size_t)c->Sp, Lp = (size_t)c->Lp, Cp = (size_t)c->Cp;
  size_t rows = nb * F;
  /* 1. slice encoder: LayerNorm, Linear, GELU. */
  for (size_t i = 0; i < rows; i++) layernorm(x + i * M, M, c->ln1_w, c->ln1_b, s->xn + i * M);
  ssae_gemm(s->xn, M, rows, M, c->encT, Sp, c->enc_b, s->h, Sp);
  ssae_gelu(s->h, rows * Sp);
  /* 2-4. latent z = B c (padded entries of h and B are zero). */
  ssae_gemm(s->h, Cp, nb, Cp, c->BT, Lp, NULL, s->z, Lp);
  /* 5. bottleneck. */
  for (size_t i = 0; i < nb; i++) {
    layernorm_d(s->z + i * Lp, L, c->ln2_w, c->ln2_b, s->zp + i * Lp);
    for (size_t k = L; k < Lp; k++) s->zp[i * Lp + k] = 0;
  }
  ssae_gemm(s->zp, Lp, nb, L, c->bnT, Lp, c->bn_b, s->z, Lp);
  ssae_gelu(s->z, nb * Lp);
  /* 6. reconstruction r = B^T z'. */
  ssae_gemm(s->z, Lp, nb, L, c->B, Cp, NULL, s->r, Cp);
  /* 7. slice decoder. */
  ssae_gemm(s->r, Sp, rows, S, c->decT, Mp, c->dec_b, s->y, Mp);
  /* 8. scores (and reconstructions). */
  for (size_t i = 0; i < nb; i++) {
    double acc = 0;
    for (size_t f = 0; f < F; f++) {
      const double *y = s->y + (i * F + f) * Mp;
      const float *xi = x + (i * F + f) * M;
      for (size_t m = 0; m < M; m++) {
        double d = y[m] - xi[m];
        acc += d * d;
      }
      if (recon)
        for (size_t m = 0; m < M; m++) recon[(i * F + f) * M + m] = (float)y[m];
    }
    scores[i] = (float)(acc / (double)(F * M));
  }
}

static void forward_range(struct ssae_cpu *c, scratch *s, const float *x, size_t n,
                          float *scores, float *recon) {
  size_t win = (size_t)c->F * (size_t)c->M;
  for (size_t i = 0; i < n; i += BLOCK) {
    size_t nb = n - i < BLOCK ? n - i : BLOCK;
    forward_block(c, s, x + i * win, nb, scores + i, recon ? recon + i * win : NULL);
  }
}

static void *worker_main(void *arg) {
  worker *w = arg;
  struct ssae_cpu *c = w->c;
  unsigned long seen = 0;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    while (!c->quit && c->generation == seen) pthread_cond_wait(&c->go, &c->mu);
    if (c->quit) break;
    seen = c->generation;
    pthread_mutex_unlock(&c->mu);
    if (w->n) forward_range(c, &w->s, w->x, w->n, w->scores, w->recon);
    pthread_mutex_lock(&c->mu);
    if (--c->pending == 0) pthread_cond_signal(&c->done);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

static int scratch_alloc(scratch *s, const struct ssae_cpu *c) {
  size_t F = (size_t)c->F;
  size_t need = BLOCK * F * (size_t)c->M + BLOCK * (size_t)c->Cp * 2 +
                BLOCK * (size_t)c->Lp * 2 + BLOCK * F * (size_t)c->Mp;
  double *p = calloc(need, sizeof *p);
  if (!p) return -1;
  s->xn = p, p += BLOCK * F * (size_t)c->M;
  s->h = p, p += BLOCK * (size_t)c->Cp;
  s->r = p, p += BLOCK * (size_t)c->Cp;
  s->z = p, p += BLOCK * (size_t)c->Lp;
  s->zp = p, p += BLOCK * (size_t)c->Lp;
  s->y = p;
  return 0;
}

static int ncpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 256 ? 256 : (int)n;
}

ssae_cpu *ssae_cpu_new(const ssae_model *m, int threads, ssae_err *err) {
  if (!m) {
    ssae_err_set(err, "no model");
    return NULL;
  }
  if (ssae_dims_check(&m->d, err)) return NULL;
  ssae_erf_init();
  ssae_cpu *c = calloc(1, sizeof *c);
  if (!c) {
    ssae_err_set(err, "out of memory for the CPU backend");
    return NULL;
  }
  size_t M = (size_t)m->d.n_mels, F = (size_t)m->d.frames, L = (size_t)m->d.latent,
         S = (size_t)m->d.slice_latent, C = F * S;
  size_t Mp = pad8(M), Sp = pad8(S), Lp = pad8(L), Cp = F * Sp;
  c->M = (int)M, c->F = (int)F, c->L = (int)L, c->S = (int)S;
  c->Mp = (int)Mp, c->Sp = (int)Sp, c->Lp = (int)Lp, c->Cp = (int)Cp;
  size_t total = 2 * M + M * Sp + Sp + Cp * Lp + Lp * Cp + 2 * L + Lp * Lp + Lp + Sp * Mp + Mp;
  double *p = calloc(total, sizeof *p);
  if (!p) {
    free(c);
    ssae_err_set(err, "out of memory for the CPU backend");
    return NULL;
  }
  c->weights = p;
  c->ln1_w = p, p += M;
  c->ln1_b = p, p += M;
  c->encT = p, p += M * Sp;
  c->enc_b = p, p += Sp;
  c->BT = p, p += Cp * Lp;
  c->B = p, p += Lp * Cp;
  c->ln2_w = p, p += L;
  c->ln2_b = p, p += L;
  c->bnT = p, p += Lp * Lp;
  c->bn_b = p, p += Lp;
  c->decT = p, p += Sp * Mp;
  c->dec_b = p;
  for (size_t i = 0; i < M; i++) c->ln1_w[i] = m->ln_enc_w[i], c->ln1_b[i] = m->ln_enc_b[i];
  for (size_t s = 0; s < S; s++) {
    c->enc_b[s] = m->enc_b[s];
    for (size_t i = 0; i < M; i++) c->encT[i * Sp + s] = m->enc_w[s * M + i];
  }
  /* The basis column index c = f*S + s maps to f*Sp + s in the padded
   * layout. */
  for (size_t l = 0; l < L; l++)
    for (size_t cc = 0; cc < C; cc++) {
      size_t pc = (cc / S) * Sp + cc % S;
      double v = m->basis_n[l * C + cc];
      c->BT[pc * Lp + l] = v;
      c->B[l * Cp + pc] = v;
    }
  for (size_t i = 0; i < L; i++) c->ln2_w[i] = m->ln_bn_w[i], c->ln2_b[i] = m->ln_bn_b[i];
  for (size_t o = 0; o < L; o++) {
    c->bn_b[o] = m->bn_b[o];
    for (size_t i = 0; i < L; i++) c->bnT[i * Lp + o] = m->bn_w[o * L + i];
  }
  for (size_t o = 0; o < M; o++) {
    c->dec_b[o] = m->dec_b[o];
    for (size_t i = 0; i < S; i++) c->decT[i * Mp + o] = m->dec_w[o * S + i];
  }

  c->nthreads = threads <= 0 ? ncpus() : threads > 256 ? 256 : threads;
  c->w = calloc((size_t)c->nthreads, sizeof *c->w);
  if (!c->w) goto oom;
  for (int i = 0; i < c->nthreads; i++) {
    c->w[i].c = c;
    if (scratch_alloc(&c->w[i].s, c)) goto oom;
  }
  if (c->nthreads > 1) {
    if (pthread_mutex_init(&c->mu, NULL)) goto oom;
    if (pthread_cond_init(&c->go, NULL)) {
      pthread_mutex_destroy(&c->mu);
      goto oom;
    }
    if (pthread_cond_init(&c->done, NULL)) {
      pthread_cond_destroy(&c->go);
      pthread_mutex_destroy(&c->mu);
      goto oom;
    }
    c->sync_ok = 1;
    for (int i = 1; i < c->nthreads; i++) {
      if (pthread_create(&c->w[i].tid, NULL, worker_main, &c->w[i])) {
        ssae_err_set(err, "cannot start CPU worker threads");
        ssae_cpu_free(c);
        return NULL;
      }
      c->w[i].started = 1;
    }
  }
  return c;
oom:
  ssae_err_set(err, "out of memory for the CPU backend");
  ssae_cpu_free(c);
  return NULL;
}

void ssae_cpu_free(ssae_cpu *c) {
  if (!c) return;
  if (c->sync_ok) {
    pthread_mutex_lock(&c->mu);
    c->quit = 1;
    pthread_cond_broadcast(&c->go);
    pthread_mutex_unlock(&c->mu);
    for (int i = 1; i < c->nthreads; i++)
      if (c->w[i].started) pthread_join(c->w[i].tid, NULL);
    pthread_cond_destroy(&c->go);
    pthread_cond_destroy(&c->done);
    pthread_mutex_destroy(&c->mu);
  }
  if (c->w)
    for (int i = 0; i < c->nthreads; i++) free(c->w[i].s.xn);
  free(c->w);
  free(c->weights);
  free(c);
}

int ssae_cpu_threads(const ssae_cpu *c) { return c->nthreads; }

int ssae_cpu_forward(ssae_cpu *c, const float *x, size_t n, float *scores, float *recon) {
  if (!c || (!x && n) || (!scores && n)) return -1;
  if (n == 0) return 0;
  size_t use = (size_t)c->nthreads;
  if (n / MIN_PER_THREAD < use) use = n / MIN_PER_THREAD;
  if (use <= 1) {
    forward_range(c, &c->w[0].s, x, n, scores, recon);
    return 0;
  }
  /* Contiguous shares, whole blocks each, so that every thread's windows
   * sit together in memory. */
  size_t win = (size_t)c->F * (size_t)c->M;
  size_t blocks = (n + BLOCK - 1) / BLOCK, per = (blocks + use - 1) / use, start = 0;
  pthread_mutex_lock(&c->mu);
  for (size_t i = 0; i < (size_t)c->nthreads; i++) {
    worker *w = &c->w[i];
    size_t len = 0;
    if (i < use && start < n) {
      len = per * BLOCK;
      if (len > n - start) len = n - start;
    }
    w->x = x + start * win;
    w->n = len;
    w->scores = scores + start;
    w->recon = recon ? recon + start * win : NULL;
    start += len;
  }
  c->pending = c->nthreads - 1;
  c->generation++;
  pthread_cond_broadcast(&c->go);
  pthread_mutex_unlock(&c->mu);
  worker *w0 = &c->w[0];
  if (w0->n) forward_range(c, &w0->s, w0->x, w0->n, w0->scores, w0->recon);
  pthread_mutex_lock(&c->mu);
  while (c->pending) pthread_cond_wait(&c->done, &c->mu);
  pthread_mutex_unlock(&c->mu);
  return 0;
}
