/* The SSAE forward pass on the CPU (SPEC section 2).
 *
 * Float32 in and out, float64 inside: the CPU is the reference the other
 * backends are checked against. Measured against the float64 module on real
 * log-mel input (tools/ssae_torch.py, 2 s of tones, noise, digital silence
 * and a click): the slice encoder in float32 misses the SPEC's 1e-6 by far
 * (relative L2 1.3e-3 with the shipped model, 8e-4 with random weights:
 * LayerNorm of a nearly constant frame, such as silence at -156 dB, blows
 * up the float32 rounding of x - mean); the decoder alone in float32 stays
 * within 2.4e-8 / 5e-7 (reconstruction / scores), too little margin on the
 * scores of a trained model to be worth a second code path.
 *
 * The model algebra is folded once, in double, when the object is made:
 * - the LayerNorm gains and offsets go into the Linear after them
 *   (W diag(g), b + W beta), so a LayerNorm is only (x - mean) / sd;
 * - the basis transpose and the linear slice decoder are one matrix per
 *   slice, D_f = W_d B_f^T (M x L): y_f = D_f z' + b_d.
 * That is 42 k multiply-adds per window instead of 62.5 k. Scoring a run of
 * consecutive frames (ssae_cpu_score_frames) also encodes each frame once
 * instead of once per window it is in (F times): 26 k per window. So does
 * scoring the next window of each of many streams against the codes kept
 * from the stream's previous window (ssae_cpu_score_cached).
 *
 * Windows go through in blocks; each stage of a block is one small matrix
 * product over padded, pre-transposed weights so that the inner loops run
 * over output features with a fixed register tile (ssae_cpu_kernels.c). */
#include "ssae_cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ssae_cpu_kernels.h"
#include "ssae_pool.h"

/* Windows per block: large enough to reuse the weights from cache, small
 * enough that a block's activations stay in L1/L2. */
#define BLOCK 32
/* Below this many windows per thread, waking threads costs more than it
 * saves. */
#define MIN_PER_THREAD 64

typedef struct {
  /* Activations of one block, padded like the weights. */
  double *xn; /* [rows][M]  normalised slices, rows <= BLOCK*F */
  double *h;  /* [rows][Sp] slice codes */
  double *z;  /* [BLOCK][Lp] */
  double *zp; /* [BLOCK][Lp] */
  double *y;  /* [BLOCK][Yp] reconstructions, Yp = F*Mp */
  double *sums; /* [BLOCK] squared errors */
} scratch;

/* One job: nw windows whose slices are rows of M floats; window i starts at
 * row i*step (step F: separate windows, step 1: consecutive frames). */
typedef struct {
  const float *x;
  size_t nw, step;
  float *scores, *recon;
} job;

typedef struct worker {
  scratch s;
  job j; /* set by the calling thread before the run */
} worker;

struct ssae_cpu {
  int M, F, L, S, Mp, Sp, Lp, Cp, Yp;
  /* Folded weights in double, transposed to [in][out_padded], zero padded. */
  double *encT, *enc_b; /* [M][Sp], [Sp]: W_e diag(g1), b_e + W_e beta1 */
  double *BT;           /* [Cp][Lp]: normalised basis, transposed */
  double *bnT, *bn_b;   /* [Lp][Lp], [Lp]: W_b diag(g2), b_b + W_b beta2 */
  double *DT, *dec_b;   /* [Lp][Yp], [Yp]: D_f^T side by side; b_d per slice */
  double *weights;      /* the one allocation behind them */

  int nthreads; /* the calling thread and the pool's helpers */
  int n_w;      /* workers allocated (the threads asked for) */
  worker *w;    /* w[k]: the pool's slot k (0: the calling thread) */
  ssae_pool *pool;
};

static size_t padv(size_t n) { return (n + SSAE_CPU_PAD - 1) / SSAE_CPU_PAD * SSAE_CPU_PAD; }

/* The slice encoder's Linear and GELU on the first rows of s->xn (slices
 * already normalised) into the same rows of s->h. Every kernel computes a
 * row from that row alone, with the same operations whether it falls in a
 * register tile or in the remainder, so a slice gets the same code bits
 * whatever batch it is encoded in: ssae_cpu_score_cached relies on it. */
static void encode_rows(const struct ssae_cpu *c, scratch *s, size_t rows) {
  size_t M = (size_t)c->M, Sp = (size_t)c->Sp;
  ssae_gemm(s->xn, M, rows, M, c->encT, Sp, c->enc_b, s->h, Sp);
  ssae_gelu(s->h, rows * Sp);
}

/* Stages 2-8 of a block of nb windows whose codes are in s->h, window i's
 * F slice codes contiguous from row i*step on; x as for forward_block. */
static void score_block(const struct ssae_cpu *c, scratch *s, const float *x, size_t nb,
                        size_t step, float *scores, float *recon) {
  size_t M = (size_t)c->M, F = (size_t)c->F, L = (size_t)c->L;
  size_t Mp = (size_t)c->Mp, Sp = (size_t)c->Sp, Lp = (size_t)c->Lp, Cp = (size_t)c->Cp,
         Yp = (size_t)c->Yp;
  /* 2-4. latent z = B c (padded entries of h and B are zero). */
  ssae_gemm(s->h, step * Sp, nb, Cp, c->BT, Lp, NULL, s->z, Lp);
  /* 5. bottleneck. */
  ssae_normalise_d(s->z, Lp, nb, L, s->zp, Lp);
  ssae_gemm(s->zp, Lp, nb, L, c->bnT, Lp, c->bn_b, s->z, Lp);
  ssae_gelu(s->z, nb * Lp);
  /* 6-8. y_f = D_f z' + b_d for every slice at once, and the scores (one
   * code path for them, so that they do not depend on recon). */
  ssae_decode_score(s->z, Lp, nb, L, c->DT, Yp, c->dec_b, x, step * M, M, Mp, F, s->sums);
  for (size_t i = 0; i < nb; i++) scores[i] = (float)(s->sums[i] / (double)(F * M));
  if (!recon) return;
  ssae_gemm(s->z, Lp, nb, L, c->DT, Yp, c->dec_b, s->y, Yp);
  for (size_t i = 0; i < nb; i++)
    for (size_t f = 0; f < F; f++) {
      const double *y = s->y + i * Yp + f * Mp;
      for (size_t m = 0; m < M; m++) recon[(i * F + f) * M + m] = (float)y[m];
    }
}

/* One block of nb windows whose slices are rows of M floats; window i
 * starts at row i*step. */
static void forward_block(const struct ssae_cpu *c, scratch *s, const float *x, size_t nb,
                          size_t step, float *scores, float *recon) {
  size_t M = (size_t)c->M, rows = (nb - 1) * step + (size_t)c->F;
  /* 1. slice encoder: LayerNorm, Linear, GELU, once per slice row. */
  ssae_normalise_f(x, M, rows, M, s->xn, M);
  encode_rows(c, s, rows);
  score_block(c, s, x, nb, step, scores, recon);
}

/* One block of nb separate windows (ssae_cpu_score_cached): only the
 * slices missing from the caches are encoded. */
static void cached_block(const struct ssae_cpu *c, scratch *s, const float *x, size_t nb,
                         double *const *codes, const unsigned char *cont, float *scores) {
  size_t M = (size_t)c->M, F = (size_t)c->F, Sp = (size_t)c->Sp, win = F * M;
  /* The slices to encode, packed: a continued window's last one, every one
   * of the others; one call per run of windows of a kind (a run of
   * continued windows is rows win apart, the others' are contiguous). */
  size_t rows = 0;
  for (size_t i = 0, j; i < nb; i = j) {
    int k = cont && cont[i];
    for (j = i + 1; j < nb && (cont && cont[j]) == k; j++) {
    }
    size_t n = k ? j - i : (j - i) * F;
    ssae_normalise_f(x + i * win + (k ? F - 1 : 0) * M, k ? win : M, n, M, s->xn + rows * M, M);
    rows += n;
  }
  encode_rows(c, s, rows);
  /* Each cache takes its new codes, then goes to its window's place in s->h
   * for stages 2-8. Backwards, because the packed new codes of windows
   * before i end at row sum_{j<i} k_j <= i*F, where window i's place
   * starts: no window overwrites codes that are still to be read. */
  for (size_t i = nb; i-- > 0;) {
    double *k = codes[i];
    if (cont && cont[i]) {
      rows -= 1;
      memmove(k, k + Sp, (F - 1) * Sp * sizeof *k);
      memcpy(k + (F - 1) * Sp, s->h + rows * Sp, Sp * sizeof *k);
    } else {
      rows -= F;
      memcpy(k, s->h + rows * Sp, F * Sp * sizeof *k);
    }
    memcpy(s->h + i * F * Sp, k, F * Sp * sizeof *k);
  }
  score_block(c, s, x, nb, F, scores, NULL);
}

static void run_job(struct ssae_cpu *c, scratch *s, const job *j) {
  size_t M = (size_t)c->M, win = (size_t)c->F * M;
  for (size_t i = 0; i < j->nw; i += BLOCK) {
    size_t nb = j->nw - i < BLOCK ? j->nw - i : BLOCK;
    forward_block(c, s, j->x + i * j->step * M, nb, j->step, j->scores + i,
                  j->recon ? j->recon + i * win : NULL);
  }
}

/* One slot's share of a run: the job set for it. */
static void run_slot(void *arg, int slot) {
  struct ssae_cpu *c = arg;
  worker *w = &c->w[slot];
  if (w->j.nw) run_job(c, &w->s, &w->j);
}

static int scratch_alloc(scratch *s, const struct ssae_cpu *c) {
  size_t rows = BLOCK * (size_t)c->F;
  size_t need = rows * (size_t)c->M + rows * (size_t)c->Sp + BLOCK * (size_t)c->Lp * 2 +
                BLOCK * (size_t)c->Yp + BLOCK;
  double *p = calloc(need, sizeof *p);
  if (!p) return -1;
  s->xn = p, p += rows * (size_t)c->M;
  s->h = p, p += rows * (size_t)c->Sp;
  s->z = p, p += BLOCK * (size_t)c->Lp;
  s->zp = p, p += BLOCK * (size_t)c->Lp;
  s->y = p, p += BLOCK * (size_t)c->Yp;
  s->sums = p;
  return 0;
}

static int ncpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 256 ? 256 : (int)n;
}

/* The folded weights (see the top of the file), all in double from the
 * float32 tensors. -1: out of memory. */
static int fold(struct ssae_cpu *c, const ssae_model *m) {
  size_t M = (size_t)c->M, F = (size_t)c->F, L = (size_t)c->L, S = (size_t)c->S, C = F * S;
  size_t Mp = (size_t)c->Mp, Sp = (size_t)c->Sp, Lp = (size_t)c->Lp, Cp = (size_t)c->Cp,
         Yp = (size_t)c->Yp;
  for (size_t s = 0; s < S; s++) {
    double b = m->enc_b[s];
    for (size_t i = 0; i < M; i++) {
      double w = m->enc_w[s * M + i];
      c->encT[i * Sp + s] = w * m->ln_enc_w[i];
      b += w * m->ln_enc_b[i];
    }
    c->enc_b[s] = b;
  }
  /* The normalised basis in double, B_l = G_l / max(|G_l|, 1e-12), as the
   * float64 module computes it; column f*S + s goes to f*Sp + s. */
  for (size_t l = 0; l < L; l++) {
    const float *g = m->basis + l * C;
    double ss = 0;
    for (size_t cc = 0; cc < C; cc++) ss += (double)g[cc] * g[cc];
    double norm = sqrt(ss);
    if (norm < 1e-12) norm = 1e-12;
    for (size_t cc = 0; cc < C; cc++) c->BT[((cc / S) * Sp + cc % S) * Lp + l] = g[cc] / norm;
  }
  for (size_t o = 0; o < L; o++) {
    double b = m->bn_b[o];
    for (size_t i = 0; i < L; i++) {
      double w = m->bn_w[o * L + i];
      c->bnT[i * Lp + o] = w * m->ln_bn_w[i];
      b += w * m->ln_bn_b[i];
    }
    c->bn_b[o] = b;
  }
  /* D_f^T = B_f W_d^T (L x M), one matrix product per slice into the
   * columns f*Mp ... of DT, from B in [L][Cp] and W_d^T in [Sp][Mp]. */
  double *Bn = calloc(L * Cp + Sp * Mp, sizeof *Bn);
  if (!Bn) return -1;
  double *WdT = Bn + L * Cp;
  for (size_t l = 0; l < L; l++)
    for (size_t pc = 0; pc < Cp; pc++) Bn[l * Cp + pc] = c->BT[pc * Lp + l];
  for (size_t mm = 0; mm < M; mm++)
    for (size_t ss = 0; ss < S; ss++) WdT[ss * Mp + mm] = m->dec_w[mm * S + ss];
  for (size_t f = 0; f < F; f++)
    ssae_gemm(Bn + f * Sp, Cp, L, S, WdT, Mp, NULL, c->DT + f * Mp, Yp);
  free(Bn);
  for (size_t f = 0; f < F; f++)
    for (size_t mm = 0; mm < M; mm++) c->dec_b[f * Mp + mm] = m->dec_b[mm];
  return 0;
}

ssae_cpu *ssae_cpu_new(const ssae_model *m, int threads, ssae_err *err) {
  if (!m) {
    ssae_err_set(err, "no model");
    return NULL;
  }
  if (ssae_dims_check(&m->d, err)) return NULL;
  ssae_cpu_kernels_init();
  ssae_cpu *c = calloc(1, sizeof *c);
  if (!c) {
    ssae_err_set(err, "out of memory for the CPU backend");
    return NULL;
  }
  size_t M = (size_t)m->d.n_mels, F = (size_t)m->d.frames, L = (size_t)m->d.latent,
         S = (size_t)m->d.slice_latent;
  size_t Mp = padv(M), Sp = padv(S), Lp = padv(L), Cp = F * Sp, Yp = F * Mp;
  c->M = (int)M, c->F = (int)F, c->L = (int)L, c->S = (int)S;
  c->Mp = (int)Mp, c->Sp = (int)Sp, c->Lp = (int)Lp, c->Cp = (int)Cp, c->Yp = (int)Yp;
  size_t total = M * Sp + Sp + Cp * Lp + Lp * Lp + Lp + Lp * Yp + Yp;
  double *p = calloc(total, sizeof *p);
  if (!p) {
    free(c);
    ssae_err_set(err, "out of memory for the CPU backend");
    return NULL;
  }
  c->weights = p;
  c->encT = p, p += M * Sp;
  c->enc_b = p, p += Sp;
  c->BT = p, p += Cp * Lp;
  c->bnT = p, p += Lp * Lp;
  c->bn_b = p, p += Lp;
  c->DT = p, p += Lp * Yp;
  c->dec_b = p;
  if (fold(c, m)) goto oom;

  c->nthreads = threads <= 0 ? ncpus() : threads > 256 ? 256 : threads;
  c->w = calloc((size_t)c->nthreads, sizeof *c->w);
  if (!c->w) goto oom;
  c->n_w = c->nthreads;
  for (int i = 0; i < c->n_w; i++)
    if (scratch_alloc(&c->w[i].s, c)) goto oom;
  if (!(c->pool = ssae_pool_new(c->nthreads - 1))) goto oom;
  /* Fewer threads when the system refuses some: the windows are shared
   * among those there are (the scores do not depend on the split). */
  c->nthreads = ssae_pool_helpers(c->pool) + 1;
  return c;
oom:
  ssae_err_set(err, "out of memory for the CPU backend");
  ssae_cpu_free(c);
  return NULL;
}

int ssae_cpu_set_model(ssae_cpu *c, const ssae_model *m, ssae_err *err) {
  if (!m || m->d.n_mels != c->M || m->d.frames != c->F || m->d.latent != c->L ||
      m->d.slice_latent != c->S)
    return ssae_err_set(err, "the CPU backend's weights: a model of other dimensions");
  if (fold(c, m)) return ssae_err_set(err, "out of memory for the CPU backend");
  return 0;
}

void ssae_cpu_free(ssae_cpu *c) {
  if (!c) return;
  ssae_pool_free(c->pool);
  if (c->w)
    for (int i = 0; i < c->n_w; i++) free(c->w[i].s.xn);
  free(c->w);
  free(c->weights);
  free(c);
}

int ssae_cpu_threads(const ssae_cpu *c) { return c->nthreads; }

const char *ssae_cpu_isa(void) { return ssae_cpu_kernels_isa(); }

/* Runs nw windows (rows of M floats, window i from row i*step) on up to all
 * threads, in contiguous shares of whole blocks. */
static void run(ssae_cpu *c, const float *x, size_t nw, size_t step, float *scores,
                float *recon) {
  size_t use = (size_t)c->nthreads;
  if (nw / MIN_PER_THREAD < use) use = nw / MIN_PER_THREAD;
  job all = {x, nw, step, scores, recon};
  if (use <= 1) {
    run_job(c, &c->w[0].s, &all);
    return;
  }
  size_t M = (size_t)c->M, win = (size_t)c->F * M;
  size_t blocks = (nw + BLOCK - 1) / BLOCK, per = (blocks + use - 1) / use, start = 0;
  for (size_t i = 0; i < (size_t)c->nthreads; i++) {
    size_t len = 0;
    if (i < use && start < nw) {
      len = per * BLOCK;
      if (len > nw - start) len = nw - start;
    }
    c->w[i].j = (job){x + start * step * M, len, step, scores + start,
                      recon ? recon + start * win : NULL};
    start += len;
  }
  ssae_pool_run(c->pool, run_slot, c);
}

int ssae_cpu_forward(ssae_cpu *c, const float *x, size_t n, float *scores, float *recon) {
  if (!c || (!x && n) || (!scores && n)) return -1;
  if (n) run(c, x, n, (size_t)c->F, scores, recon);
  return 0;
}

size_t ssae_cpu_codes_len(const ssae_cpu *c) { return c ? (size_t)c->F * (size_t)c->Sp : 0; }

int ssae_cpu_score_cached(ssae_cpu *c, const float *x, size_t n, double *const *codes,
                          const unsigned char *cont, float *scores) {
  if (!c || (n && (!x || !codes || !scores))) return -1;
  for (size_t i = 0; i < n; i++)
    if (!codes[i]) return -1;
  /* Blocks as ssae_cpu_forward cuts them (from window 0, BLOCK each), so
   * that stages 2-8 see the same rows and give the same bits. */
  size_t win = (size_t)c->F * (size_t)c->M;
  for (size_t i = 0; i < n; i += BLOCK) {
    size_t nb = n - i < BLOCK ? n - i : BLOCK;
    cached_block(c, &c->w[0].s, x + i * win, nb, codes + i, cont ? cont + i : NULL, scores + i);
  }
  return 0;
}

int ssae_cpu_score_frames(ssae_cpu *c, const float *frames, size_t n_frames, float *scores) {
  if (!c || (!frames && n_frames) || (!scores && n_frames >= (size_t)c->F)) return -1;
  if (n_frames >= (size_t)c->F) run(c, frames, n_frames - (size_t)c->F + 1, 1, scores, NULL);
  return 0;
}
