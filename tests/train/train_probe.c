/* Exposes the trainer's pieces to the python oracle tests: reads raw float32
 * files, writes raw float32 results. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_config.h"
#include "ssae_train.h"
#if SSAE_HAVE_CUDA
#include "ssae_cuda.h"
#include "ssae_cuda_train.h"
#endif

static float *read_f32(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  float *p = malloc(len > 0 ? (size_t)len : 1);
  if (p && fread(p, 1, (size_t)len, f) != (size_t)len) {
    free(p);
    p = NULL;
  }
  fclose(f);
  *n = (size_t)len / sizeof(float);
  return p;
}

static int write_f32(const char *path, const float *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t w = fwrite(p, sizeof(float), n, f);
  return fclose(f) || w != n ? -1 : 0;
}

static int dims(char **a, ssae_dims *d) {
  d->n_mels = atoi(a[0]);
  d->frames = atoi(a[1]);
  d->latent = atoi(a[2]);
  d->slice_latent = atoi(a[3]);
  return 0;
}

static void on_epoch(const ssae_train_progress *p, void *user) {
  (void)user;
  if (p->epoch_end) printf("epoch %d loss %.17g\n", p->epoch, p->loss);
}

/* A backend by name: cpu (THREADS threads), cuda, or cuda:A:B (made on
 * device A, then device B made current on this thread for its calls: they
 * must run on A and leave B current). */
static int open_be(const char *name, const ssae_dims *d, int threads, ssae_train_backend *be,
                   ssae_err *err) {
  if (!strcmp(name, "cpu")) return ssae_train_backend_cpu(be, d, threads, err);
#if SSAE_HAVE_CUDA
  if (!strcmp(name, "cuda")) return ssae_train_backend_cuda(be, d, err);
  int made, called;
  if (sscanf(name, "cuda:%d:%d", &made, &called) == 2)
    return ssae_cuda_use_device(made, err) || ssae_train_backend_cuda(be, d, err) ||
                   ssae_cuda_use_device(called, err)
               ? -1
               : 0;
#endif
  (void)threads;
  return ssae_err_set(err, "backend %s is not built in", name);
}

/* What the model commands read: the dimensions M F L S, the parameters
 * and the windows (float32 files). */
typedef struct {
  ssae_dims d;
  float *p, *x;
  size_t np; /* parameters */
  size_t fm; /* floats of a window */
  size_t n;  /* windows */
} inputs;

static int read_inputs(char **dimv, const char *params, const char *windows, inputs *in) {
  dims(dimv, &in->d);
  size_t nx, off[SSAE_N_TENSORS + 1];
  ssae_param_offsets(&in->d, off);
  in->p = read_f32(params, &in->np);
  in->x = read_f32(windows, &nx);
  if (!in->p || !in->x || in->np != off[SSAE_N_TENSORS]) {
    fprintf(stderr, "bad inputs\n");
    return -1;
  }
  in->fm = (size_t)in->d.frames * (size_t)in->d.n_mels;
  in->n = nx / in->fm;
  return 0;
}

/* The end of a model command: frees the inputs, says why it failed. */
static int inputs_done(inputs *in, int rc, const ssae_err *err) {
  free(in->p);
  free(in->x);
  if (rc) fprintf(stderr, "failed: %s\n", err->msg);
  return rc ? 1 : 0;
}

typedef int (*grad_fn)(void *ctx, const float *x, size_t n, double scale, double *sse,
                       float *grad, ssae_err *err);
typedef int (*scores_fn)(void *ctx, const float *x, size_t n, float *scores, ssae_err *err);

/* Writes to OUT the gradient of the mean squared error over the windows
 * (then the loss), or with GRAD 0 the windows' scores: of the backend
 * table or of ssae_grad directly. */
static int grad_or_scores(int grad, grad_fn gf, scores_fn sf, void *ctx, const inputs *in,
                          const char *out, ssae_err *err) {
  int rc;
  if (grad) {
    float *gr = malloc((in->np + 2) * sizeof(float));
    double sse, count = (double)in->n * (double)in->fm;
    rc = gf(ctx, in->x, in->n, 1.0 / count, &sse, gr, err);
    gr[in->np] = (float)(sse / count);
    if (!rc) rc = write_f32(out, gr, in->np + 1);
    free(gr);
  } else {
    float *s = malloc(in->n * sizeof(float));
    rc = sf(ctx, in->x, in->n, s, err);
    if (!rc) rc = write_f32(out, s, in->n);
    free(s);
  }
  return rc;
}

static int grad_compute(void *g, const float *x, size_t n, double scale, double *sse,
                        float *grad, ssae_err *err) {
  return ssae_grad_compute(g, x, n, scale, sse, grad, err);
}
static int grad_scores(void *g, const float *x, size_t n, float *scores, ssae_err *err) {
  return ssae_grad_scores(g, x, n, scores, err);
}

/* adam and cuda_adam: LR B1 B2 EPS WD STEPS PARAMS GRADS(steps x P). */
static int read_adam(char **a, ssae_adam_cfg *c, int *steps, float **p, size_t *np, float **g) {
  *c = (ssae_adam_cfg){atof(a[0]), atof(a[1]), atof(a[2]), atof(a[3]), atof(a[4])};
  *steps = atoi(a[5]);
  size_t ng;
  *p = read_f32(a[6], np);
  *g = read_f32(a[7], &ng);
  return *p && *g && ng == *np * (size_t)*steps ? 0 : -1;
}

int main(int argc, char **argv) {
  ssae_err err = {{0}};
  if (argc == 2 && !strcmp(argv[1], "cuda_devices")) {
#if SSAE_HAVE_CUDA
    printf("%d\n", ssae_cuda_device_count());
#else
    printf("0\n");
#endif
    return 0;
  }
  if (argc == 2 && !strcmp(argv[1], "cuda_available")) {
#if SSAE_HAVE_CUDA
    return ssae_cuda_train_available() ? 0 : 77;
#else
    return 77;
#endif
  }
  if (argc == 11 && (!strcmp(argv[1], "be_grad") || !strcmp(argv[1], "be_scores"))) {
    /* be_grad|be_scores BACKEND M F L S THREADS PARAMS X OUT: through the
     * backend table (the CUDA backend's host-batch path) */
    inputs in;
    if (read_inputs(argv + 3, argv[8], argv[9], &in)) return 1;
    ssae_train_backend be;
    if (open_be(argv[2], &in.d, atoi(argv[7]), &be, &err) ||
        be.set_params(be.ctx, in.p, &err)) {
      fprintf(stderr, "%s\n", err.msg);
      return 1;
    }
    int rc = grad_or_scores(!strcmp(argv[1], "be_grad"), be.grad, be.scores, be.ctx, &in,
                            argv[10], &err);
    ssae_train_backend_free(&be);
#if SSAE_HAVE_CUDA
    int made, called;
    if (!rc && sscanf(argv[2], "cuda:%d:%d", &made, &called) == 2 &&
        ssae_cuda_current_device() != called)
      rc = ssae_err_set(&err, "the trainer left device %d current, not the caller's %d",
                        ssae_cuda_current_device(), called);
#endif
    return inputs_done(&in, rc, &err);
  }
  if (argc == 14 && !strcmp(argv[1], "train")) {
    /* train BACKEND M F L S EPOCHS BATCH SEED PATIENCE PARAMS X OUT: the
     * training loop on windows X (the last tenth is the validation set when
     * PATIENCE > 0); OUT gets the final parameters, stdout the losses */
    inputs in;
    if (read_inputs(argv + 3, argv[11], argv[12], &in)) return 1;
    size_t fm = in.fm, n = in.n;
    ssae_train_cfg c;
    ssae_train_cfg_default(&c);
    c.epochs = atoi(argv[7]);
    c.batch = atoi(argv[8]);
    c.seed = strtoull(argv[9], NULL, 10);
    c.patience = atoi(argv[10]);
    size_t nv = c.patience > 0 ? n / 10 : 0;
    ssae_window_set tr = {in.x, NULL, n - nv}, va = {in.x + (n - nv) * fm, NULL, nv};
    ssae_train_backend be;
    ssae_train_result res;
    int rc = open_be(argv[2], &in.d, 2, &be, &err);
    if (!rc) rc = ssae_train_run(&in.d, &c, &be, in.p, &tr, &va, NULL, on_epoch, NULL, &res, &err);
    if (!rc) rc = write_f32(argv[13], in.p, in.np);
    if (!rc) printf("result epochs %d loss %.17g val %.17g best %d\n", res.epochs_run, res.loss,
                    res.val_loss, res.best_epoch);
    ssae_train_backend_free(&be);
    return inputs_done(&in, rc, &err);
  }
#if SSAE_HAVE_CUDA
  if (argc == 11 && !strcmp(argv[1], "cuda_adam")) {
    /* cuda_adam: as adam, on the device */
    ssae_adam_cfg c;
    int steps;
    size_t np;
    float *p, *g;
    if (read_adam(argv + 2, &c, &steps, &p, &np, &g)) return 1;
    int rc = ssae_cuda_adam_steps(&c, np, p, g, steps, &err);
    if (!rc) rc = write_f32(argv[10], p, np);
    else fprintf(stderr, "%s\n", err.msg);
    free(p);
    free(g);
    return rc ? 1 : 0;
  }
#endif
  if (argc >= 10 && (!strcmp(argv[1], "grad") || !strcmp(argv[1], "scores"))) {
    /* grad|scores M F L S THREADS PARAMS X OUT */
    inputs in;
    if (read_inputs(argv + 2, argv[7], argv[8], &in)) return 1;
    ssae_grad *g = ssae_grad_new(&in.d, atoi(argv[6]), &err);
    if (!g || ssae_grad_set_params(g, in.p, &err)) {
      fprintf(stderr, "%s\n", err.msg);
      return 1;
    }
    int rc = grad_or_scores(!strcmp(argv[1], "grad"), grad_compute, grad_scores, g, &in, argv[9],
                            &err);
    ssae_grad_free(g);
    return inputs_done(&in, rc, &err);
  }
  if (argc == 11 && !strcmp(argv[1], "adam")) {
    /* adam LR B1 B2 EPS WD STEPS PARAMS GRADS(steps x P) OUT */
    ssae_adam_cfg c;
    int steps;
    size_t np;
    float *p, *g;
    if (read_adam(argv + 2, &c, &steps, &p, &np, &g)) return 1;
    ssae_adam *a = ssae_adam_new(&c, np, &err);
    for (int s = 0; s < steps; s++) ssae_adam_step(a, p, g + (size_t)s * np);
    int rc = write_f32(argv[10], p, np);
    ssae_adam_free(a);
    free(p);
    free(g);
    return rc ? 1 : 0;
  }
  if (argc == 4 && !strcmp(argv[1], "gamma_inv")) {
    printf("%.17g\n", ssae_gamma_p_inv(atof(argv[2]), atof(argv[3])));
    return 0;
  }
  if (argc >= 3 && !strcmp(argv[1], "gamma_fit")) {
    size_t n = (size_t)argc - 2;
    double *v = malloc(n * sizeof(double)), k, s;
    for (size_t i = 0; i < n; i++) v[i] = atof(argv[2 + i]);
    int rc = ssae_gamma_fit(v, n, &k, &s, &err);
    free(v);
    if (rc) {
      fprintf(stderr, "%s\n", err.msg);
      return 1;
    }
    printf("%.17g %.17g\n", k, s);
    return 0;
  }
  if (argc == 7 && !strcmp(argv[1], "init")) {
    ssae_dims d;
    dims(argv + 2, &d);
    size_t off[SSAE_N_TENSORS + 1];
    ssae_param_offsets(&d, off);
    float *p = malloc(off[SSAE_N_TENSORS] * sizeof(float));
    ssae_param_init(&d, 1234, p);
    int rc = write_f32(argv[6], p, off[SSAE_N_TENSORS]);
    free(p);
    return rc ? 1 : 0;
  }
  fprintf(stderr, "usage: train_probe grad|scores|be_grad|be_scores|train|adam|cuda_adam|gamma_inv|"
                  "gamma_fit|init|cuda_available ...\n");
  return 2;
}
