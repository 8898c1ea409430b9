/* Parameter layout, initialisation, Adam, the CPU backend and the training
 * loop. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ssae_train.h"

const char *const ssae_tensor_names[SSAE_N_TENSORS] = {
    "slice_encoder.0.weight",  "slice_encoder.0.bias",
    "slice_encoder.1.weight",  "slice_encoder.1.bias",
    "global_basis",            "bottleneck_mlp.0.weight",
    "bottleneck_mlp.0.bias",   "bottleneck_mlp.1.weight",
    "bottleneck_mlp.1.bias",   "slice_decoder.0.weight",
    "slice_decoder.0.bias"};

void ssae_param_offsets(const ssae_dims *d, size_t off[SSAE_N_TENSORS + 1]) {
  size_t M = (size_t)d->n_mels, L = (size_t)d->latent,
         S = (size_t)d->slice_latent, C = (size_t)d->frames * S;
  size_t len[SSAE_N_TENSORS] = {M, M, S * M, S, L * C, L, L, L * L, L, M * S, M};
  off[0] = 0;
  for (int i = 0; i < SSAE_N_TENSORS; i++) off[i + 1] = off[i] + len[i];
}

/* ---- initialisation ----------------------------------------------------- */

static void fill_uniform(ssae_rng *r, float *p, size_t n, double bound) {
  for (size_t i = 0; i < n; i++)
    p[i] = (float)((2.0 * ssae_rng_uniform(r) - 1.0) * bound);
}

void ssae_param_init(const ssae_dims *d, uint64_t seed, float *p) {
  size_t off[SSAE_N_TENSORS + 1];
  ssae_param_offsets(d, off);
  size_t M = (size_t)d->n_mels, L = (size_t)d->latent,
         S = (size_t)d->slice_latent, C = (size_t)d->frames * S;
  ssae_rng r;
  ssae_rng_seed(&r, seed);
  for (size_t i = 0; i < M; i++) p[off[0] + i] = 1.0f, p[off[1] + i] = 0.0f;
  fill_uniform(&r, p + off[2], S * M, 1.0 / sqrt((double)M));
  fill_uniform(&r, p + off[3], S, 1.0 / sqrt((double)M));
  fill_uniform(&r, p + off[4], L * C, sqrt(6.0 / (double)(L + C)));
  for (size_t i = 0; i < L; i++) p[off[5] + i] = 1.0f, p[off[6] + i] = 0.0f;
  fill_uniform(&r, p + off[7], L * L, 1.0 / sqrt((double)L));
  fill_uniform(&r, p + off[8], L, 1.0 / sqrt((double)L));
  fill_uniform(&r, p + off[9], M * S, 1.0 / sqrt((double)S));
  fill_uniform(&r, p + off[10], M, 1.0 / sqrt((double)S));
}

/* ---- CPU backend -------------------------------------------------------- */

static int cpu_set_params(void *ctx, const float *p, ssae_err *err) {
  return ssae_grad_set_params(ctx, p, err);
}
static int cpu_grad(void *ctx, const float *x, size_t n, double scale,
                    double *sse, float *grad, ssae_err *err) {
  return ssae_grad_compute(ctx, x, n, scale, sse, grad, err);
}
static int cpu_grad_windows(void *ctx, const float *const *win, size_t n, double scale,
                            double *sse, float *grad, ssae_err *err) {
  return ssae_grad_compute_windows(ctx, win, n, scale, sse, grad, err);
}
static int cpu_scores(void *ctx, const float *x, size_t n, float *s,
                      ssae_err *err) {
  return ssae_grad_scores(ctx, x, n, s, err);
}
static void cpu_free(void *ctx) { ssae_grad_free(ctx); }

int ssae_train_backend_cpu(ssae_train_backend *be, const ssae_dims *d,
                           int threads, ssae_err *err) {
  memset(be, 0, sizeof *be);
  ssae_grad *g = ssae_grad_new(d, threads, err);
  if (!g) return -1;
  be->name = "cpu";
  be->ctx = g;
  be->set_params = cpu_set_params;
  be->grad = cpu_grad;
  be->grad_windows = cpu_grad_windows;
  be->scores = cpu_scores;
  be->free = cpu_free;
  return 0;
}

void ssae_train_backend_free(ssae_train_backend *be) {
  if (be && be->free && be->ctx) be->free(be->ctx);
  if (be) be->ctx = NULL;
}

/* ---- training loop ------------------------------------------------------ */

void ssae_train_cfg_default(ssae_train_cfg *c) {
  memset(c, 0, sizeof *c);
  c->epochs = 100;
  c->batch = 512;
  c->patience = 0;
  c->adam.lr = 1e-3;
  c->adam.beta1 = 0.9;
  c->adam.beta2 = 0.999;
  c->adam.eps = 1e-8;
  c->adam.weight_decay = 0;
  c->seed = 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const float *window_at(const ssae_window_set *w, size_t i, size_t fm) {
  return w->data + (w->off ? w->off[i] : i * fm);
}

/* Mean squared error over all windows; xb holds cap windows. */
static int mean_loss(const ssae_train_backend *be, const ssae_window_set *w,
                     size_t fm, float *xb, float *buf, size_t cap, double *out,
                     ssae_err *err) {
  double s = 0;
  for (size_t i = 0; i < w->n; i += cap) {
    size_t k = w->n - i < cap ? w->n - i : cap;
    for (size_t j = 0; j < k; j++)
      memcpy(xb + j * fm, window_at(w, i + j, fm), fm * sizeof(float));
    if (be->scores(be->ctx, xb, k, buf, err)) return -1;
    for (size_t j = 0; j < k; j++) s += buf[j];
  }
  *out = s / (double)w->n;
  return 0;
}

/* Per finished batch of a device epoch: the loss check and progress the
 * CPU loop does inline. */
typedef struct dev_batch_state {
  ssae_train_progress *pr;
  ssae_train_progress_fn progress;
  void *user;
  double sse, t0;
  size_t done, fm;
} dev_batch_state;

static int dev_batch_done(void *user, double sse, size_t nb, ssae_err *err) {
  dev_batch_state *st = user;
  if (!isfinite(sse))
    return ssae_err_set(err, "the loss is not finite in epoch %d (training "
                        "diverged; try a smaller --lr)", st->pr->epoch);
  st->sse += sse;
  st->done += nb;
  if (st->progress) {
    st->pr->done = st->done;
    st->pr->loss = st->sse / ((double)st->done * (double)st->fm);
    st->pr->elapsed = now_s() - st->t0;
    st->progress(st->pr, st->user);
  }
  return 0;
}

int ssae_train_run(const ssae_dims *d, const ssae_train_cfg *cfg,
                   const ssae_train_backend *be, float *params,
                   const ssae_window_set *train, const ssae_window_set *val,
                   volatile sig_atomic_t *stop,
                   ssae_train_progress_fn progress, void *user,
                   ssae_train_result *res, ssae_err *err) {
  size_t n_train = train->n, n_val = val ? val->n : 0;
  memset(res, 0, sizeof *res);
  res->val_loss = NAN;
  res->loss = NAN;
  if (n_train == 0) return ssae_err_set(err, "no training windows");
  if (cfg->epochs < 1 || cfg->batch < 1)
    return ssae_err_set(err, "epochs and batch must be at least 1");
  size_t off[SSAE_N_TENSORS + 1];
  ssae_param_offsets(d, off);
  size_t P = off[SSAE_N_TENSORS];
  size_t fm = (size_t)d->frames * (size_t)d->n_mels;
  size_t batch = (size_t)cfg->batch;
  if (batch > n_train) batch = n_train;
  const size_t score_cap = batch;

  int rc = -1;
  float *grad = malloc(P * sizeof(float));
  float *best = cfg->patience > 0 ? malloc(P * sizeof(float)) : NULL;
  float *xb = malloc(batch * fm * sizeof(float));
  float *sbuf = malloc(score_cap * sizeof(float));
  size_t *perm = malloc(n_train * sizeof(size_t));
  const float **wins = malloc(batch * sizeof *wins);
  ssae_adam *adam = ssae_adam_new(&cfg->adam, P, err);
  if (!adam) goto out;
  if (!grad || !xb || !sbuf || !perm || !wins || (cfg->patience > 0 && !best)) {
    ssae_err_set(err, "out of memory for the training buffers");
    goto out;
  }
  for (size_t i = 0; i < n_train; i++) perm[i] = i;
  ssae_rng rng;
  ssae_rng_seed(&rng, cfg->seed);
  const ssae_train_dev_ops *dev = be->dev;
  if (dev && dev->begin(be->ctx, train, val, params, &cfg->adam, err)) goto out;

  double t0 = now_s(), best_val = INFINITY;
  int since_best = 0;
  ssae_train_progress pr = {0};
  pr.epochs = cfg->epochs;
  pr.total = n_train;
  pr.val_loss = NAN;
  for (int ep = 1; ep <= cfg->epochs; ep++) {
    /* Fisher-Yates from the seeded generator: a new order every epoch */
    for (size_t i = n_train - 1; i > 0; i--) {
      size_t j = (size_t)ssae_rng_below(&rng, (uint64_t)i + 1);
      size_t t = perm[i];
      perm[i] = perm[j];
      perm[j] = t;
    }
    double sse = 0;
    size_t done = 0;
    pr.epoch = ep;
    pr.epoch_end = 0;
    if (dev) {
      dev_batch_state st = {&pr, progress, user, 0, t0, 0, fm};
      if (dev->epoch(be->ctx, perm, batch, stop, dev_batch_done, &st, err))
        goto out;
      sse = st.sse;
      done = st.done;
      if (stop && *stop) res->interrupted = 1;
    }
    for (size_t b = 0; !dev && b < n_train; b += batch) {
      size_t nb = n_train - b < batch ? n_train - b : batch;
      double s, scale = 1.0 / ((double)nb * (double)fm);
      if (be->set_params(be->ctx, params, err)) goto out;
      if (be->grad_windows) {
        /* the backend's threads gather the batch */
        for (size_t i = 0; i < nb; i++) wins[i] = window_at(train, perm[b + i], fm);
        if (be->grad_windows(be->ctx, wins, nb, scale, &s, grad, err)) goto out;
      } else {
        for (size_t i = 0; i < nb; i++)
          memcpy(xb + i * fm, window_at(train, perm[b + i], fm), fm * sizeof(float));
        if (be->grad(be->ctx, xb, nb, scale, &s, grad, err)) goto out;
      }
      if (!isfinite(s)) {
        ssae_err_set(err, "the loss is not finite in epoch %d (training "
                     "diverged; try a smaller --lr)", ep);
        goto out;
      }
      ssae_adam_step(adam, params, grad);
      sse += s;
      done += nb;
      if (progress) {
        pr.done = done;
        pr.loss = sse / ((double)done * (double)fm);
        pr.elapsed = now_s() - t0;
        progress(&pr, user);
      }
      if (stop && *stop) {
        res->interrupted = 1;
        break;
      }
    }
    res->epochs_run = ep;
    res->loss = sse / ((double)done * (double)fm);
    if (n_val && dev) {
      if (dev->val_loss(be->ctx, &res->val_loss, err)) goto out;
    } else if (n_val) {
      if (be->set_params(be->ctx, params, err)) goto out;
      if (mean_loss(be, val, fm, xb, sbuf, score_cap, &res->val_loss, err))
        goto out;
    }
    if (progress) {
      pr.done = done;
      pr.loss = res->loss;
      pr.val_loss = res->val_loss;
      pr.elapsed = now_s() - t0;
      pr.epoch_end = 1;
      progress(&pr, user);
    }
    if (res->interrupted) break;
    if (cfg->patience > 0) {
      double crit = n_val ? res->val_loss : res->loss;
      if (crit < best_val) {
        best_val = crit;
        res->best_epoch = ep;
        if (dev) {
          if (dev->get_params(be->ctx, best, err)) goto out;
        } else {
          memcpy(best, params, P * sizeof(float));
        }
        since_best = 0;
      } else if (++since_best >= cfg->patience) {
        res->early_stopped = 1;
        break;
      }
    }
  }
  if (dev && dev->get_params(be->ctx, params, err)) goto out;
  if (best && res->best_epoch > 0 && !res->interrupted) {
    memcpy(params, best, P * sizeof(float));
    if (n_val) res->val_loss = best_val;
  }
  res->seconds = now_s() - t0;
  rc = 0;
out:
  ssae_adam_free(adam);
  free(grad);
  free(best);
  free(xb);
  free(sbuf);
  free(perm);
  free(wins);
  return rc;
}

/* ---- backend self-test -------------------------------------------------- */

int ssae_train_backend_selftest(const ssae_train_backend *be,
                                const ssae_dims *d, ssae_err *err) {
  enum { N = 37 };
  size_t off[SSAE_N_TENSORS + 1];
  ssae_param_offsets(d, off);
  const size_t P = off[SSAE_N_TENSORS];
  const size_t fm = (size_t)d->frames * (size_t)d->n_mels;
  float *params = malloc(P * sizeof(float));
  float *x = malloc(N * fm * sizeof(float));
  float *g0 = malloc(P * sizeof(float)), *g1 = malloc(P * sizeof(float));
  float s0[N], s1[N];
  ssae_train_backend cpu;
  memset(&cpu, 0, sizeof cpu);
  int rc = -1;
  if (!params || !x || !g0 || !g1) {
    ssae_err_set(err, "out of memory for the self-test");
    goto out;
  }
  ssae_param_init(d, 0x5e1f7e57ULL, params);
  ssae_rng r;
  ssae_rng_seed(&r, 0x5e1f7e57ULL);
  /* log-mel scale: a level per window, a shape per band, noise */
  for (size_t i = 0; i < N; i++) {
    double level = -80.0 + 60.0 * ssae_rng_uniform(&r);
    for (size_t j = 0; j < fm; j++)
      x[i * fm + j] = (float)(level + 10.0 * sin(0.1 * (double)(j % (size_t)d->n_mels)) +
                              8.0 * (ssae_rng_uniform(&r) - 0.5));
  }
  if (ssae_train_backend_cpu(&cpu, d, 1, err)) goto out;
  double sse0, sse1, scale = 1.0 / ((double)N * (double)fm);
  if (cpu.set_params(cpu.ctx, params, err) ||
      cpu.grad(cpu.ctx, x, N, scale, &sse0, g0, err) ||
      cpu.scores(cpu.ctx, x, N, s0, err))
    goto out;
  if (be->set_params(be->ctx, params, err) ||
      be->grad(be->ctx, x, N, scale, &sse1, g1, err) ||
      be->scores(be->ctx, x, N, s1, err))
    goto out;
  if (!(fabs(sse1 - sse0) <= 1e-4 * sse0)) {
    ssae_err_set(err, "%s self-test: loss %.9g, the CPU's %.9g", be->name,
                 sse1 * scale, sse0 * scale);
    goto out;
  }
  for (size_t i = 0; i < N; i++)
    if (!(fabs((double)s1[i] - s0[i]) <= 1e-4 * s0[i])) {
      ssae_err_set(err, "%s self-test: window %zu scores %.9g, on the CPU %.9g",
                   be->name, i, s1[i], s0[i]);
      goto out;
    }
  for (int t = 0; t < SSAE_N_TENSORS; t++) {
    double dd = 0, nn = 0;
    for (size_t i = off[t]; i < off[t + 1]; i++) {
      double a = g1[i], b = g0[i];
      dd += (a - b) * (a - b);
      nn += b * b;
    }
    if (!(sqrt(dd) <= 1e-3 * sqrt(nn) + 1e-30)) {
      ssae_err_set(err, "%s self-test: gradient of %s differs from the CPU's by "
                   "%.3g (relative)", be->name, ssae_tensor_names[t],
                   nn > 0 ? sqrt(dd / nn) : sqrt(dd));
      goto out;
    }
  }
  rc = 0;
out:
  ssae_train_backend_free(&cpu);
  free(params);
  free(x);
  free(g0);
  free(g1);
  return rc;
}
