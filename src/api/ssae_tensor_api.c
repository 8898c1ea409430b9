/* The flat C API (ssae_tensor_api.h) over the library's objects: a model
 * handle is an ssae_model with its ssae_backend; a net handle is the CPU
 * forward (ssae_cpu, rebuilt at the first forward after the parameters
 * changed), ssae_vjp (the training forward and the backward) and, once a
 * CUDA call made it, ssae_cuda_vjp. */
#include "ssae_config.h"
#if SSAE_HAVE_CUDA
#define SSAE_API_HAVE_CUDA_TENSORS 1
#endif
#include "ssae_tensor_api.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_audio.h"
#include "ssae_backend.h"
#include "ssae_cpu.h"
#include "ssae_filescore.h"
#include "ssae_logmel.h"
#include "ssae_model.h"
#include "ssae_train.h"
#include "ssae_vjp.h"
#if SSAE_HAVE_CUDA
#include "ssae_cuda_vjp.h"
#endif

int ssae_api_version(void) { return SSAE_API_VERSION; }

void ssae_api_free(void *p) { free(p); }

size_t ssae_api_backends(char *buf, size_t len) {
  size_t used = 0;
  if (buf && len) buf[0] = '\0';
  for (int i = 0; ssae_backends[i]; i++) {
    const ssae_backend_ops *o = ssae_backends[i];
    int k = snprintf(buf && used < len ? buf + used : NULL, buf && used < len ? len - used : 0,
                     "%s\t%d\n", o->name, o->available ? o->available() : 1);
    if (k > 0) used += (size_t)k;
  }
  return used;
}

static int put_text(const char *s, char *buf, size_t len) {
  if (!s) return SSAE_API_EARG;
  if (buf && len) snprintf(buf, len, "%s", s);
  return SSAE_API_OK;
}

/* ---- models ------------------------------------------------------------- */

struct ssae_api_model {
  ssae_model *m;
  ssae_backend *b;
  char fallback[SSAE_ERR_LEN + 64];
};

static void flat_to_model(const float *p, ssae_model *m);
static int dims_from(const int dims[4], ssae_dims *d, ssae_err *err);

static void on_fallback(void *user, const char *msg) {
  ssae_api_model *am = user;
  snprintf(am->fallback, sizeof am->fallback, "%s", msg);
}

ssae_api_model *ssae_api_model_open(const char *path, const char *backend, ssae_err *err) {
  ssae_api_model *am = calloc(1, sizeof *am);
  if (!am) {
    ssae_err_set(err, "out of memory");
    return NULL;
  }
  if (!(am->m = ssae_model_open(path, err)) ||
      !(am->b = ssae_backend_new(am->m, backend ? backend : "auto", 0, err))) {
    ssae_api_model_free(am);
    return NULL;
  }
  ssae_backend_set_fallback_cb(am->b, on_fallback, am);
  return am;
}

ssae_api_model *ssae_api_model_from_params(const int dims[4], const float *params, size_t n,
                                           const char *backend, ssae_err *err) {
  ssae_dims d;
  if (dims_from(dims, &d, err)) return NULL;
  const size_t want = ssae_model_param_count(&d);
  if (!params || n != want) {
    ssae_err_set(err, "parameters: %zu floats given, the model has %zu", n, want);
    return NULL;
  }
  ssae_api_model *am = calloc(1, sizeof *am);
  if (!am) {
    ssae_err_set(err, "out of memory");
    return NULL;
  }
  if (!(am->m = ssae_model_new(&d, err))) {
    ssae_api_model_free(am);
    return NULL;
  }
  flat_to_model(params, am->m);
  if (ssae_model_update(am->m, err) ||
      !(am->b = ssae_backend_new(am->m, backend ? backend : "auto", 0, err))) {
    ssae_api_model_free(am);
    return NULL;
  }
  ssae_backend_set_fallback_cb(am->b, on_fallback, am);
  return am;
}

int ssae_api_model_set_math(ssae_api_model *am, const char *math, ssae_err *err) {
  return ssae_backend_set_math(am->b, math, err) ? SSAE_API_EARG : SSAE_API_OK;
}

void ssae_api_model_free(ssae_api_model *am) {
  if (!am) return;
  ssae_backend_free(am->b);
  ssae_model_free(am->m);
  free(am);
}

void ssae_api_model_dims(const ssae_api_model *am, int dims[4]) {
  dims[0] = am->m->d.n_mels;
  dims[1] = am->m->d.frames;
  dims[2] = am->m->d.latent;
  dims[3] = am->m->d.slice_latent;
}

double ssae_api_model_threshold(const ssae_api_model *am) { return am->m->threshold; }

int ssae_api_model_feature(const ssae_api_model *am, const char *key, char *buf, size_t len) {
  char tmp[128];
  if (!key || ssae_feat_cfg_get(&am->m->feat, key, tmp, sizeof tmp)) return SSAE_API_EARG;
  return put_text(tmp, buf, len);
}

int ssae_api_model_meta(const ssae_api_model *am, const char *key, char *buf, size_t len) {
  return put_text(key ? ssae_model_meta_get(am->m, key) : NULL, buf, len);
}

size_t ssae_api_model_meta_keys(const ssae_api_model *am, char *buf, size_t len) {
  size_t used = 0;
  if (buf && len) buf[0] = '\0';
  for (size_t i = 0; i < am->m->n_meta; i++) {
    int k = snprintf(buf && used < len ? buf + used : NULL, buf && used < len ? len - used : 0,
                     "%s\n", am->m->meta[i].key);
    if (k > 0) used += (size_t)k;
  }
  return used;
}

static void model_to_flat(const ssae_model *m, float *out) {
  ssae_model_tensor t[SSAE_MODEL_N_TENSORS];
  ssae_model_tensor_list(m, t);
  for (int i = 0; i < SSAE_MODEL_N_TENSORS; i++) {
    size_t k = (size_t)t[i].shape[0] * (t[i].ndim == 2 ? (size_t)t[i].shape[1] : 1);
    memcpy(out, t[i].data, k * sizeof *out);
    out += k;
  }
}

static void flat_to_model(const float *p, ssae_model *m) {
  ssae_model_tensor t[SSAE_MODEL_N_TENSORS];
  ssae_model_tensor_list(m, t);
  for (int i = 0; i < SSAE_MODEL_N_TENSORS; i++) {
    size_t k = (size_t)t[i].shape[0] * (t[i].ndim == 2 ? (size_t)t[i].shape[1] : 1);
    memcpy(t[i].data, p, k * sizeof *p);
    p += k;
  }
}

static int dims_from(const int dims[4], ssae_dims *d, ssae_err *err) {
  if (!dims) return ssae_err_set(err, "dimensions: NULL");
  *d = (ssae_dims){dims[0], dims[1], dims[2], dims[3]};
  return ssae_dims_check(d, err);
}

size_t ssae_api_dims_param_count(const int dims[4]) {
  ssae_dims d;
  if (dims_from(dims, &d, NULL)) return 0;
  return ssae_model_param_count(&d);
}

int ssae_api_model_params(const ssae_api_model *am, float *out, size_t n, ssae_err *err) {
  size_t want = ssae_model_param_count(&am->m->d);
  if (!out || n != want)
    return ssae_err_set(err, "parameters: buffer of %zu floats, the model has %zu", n, want),
           SSAE_API_EARG;
  model_to_flat(am->m, out);
  return SSAE_API_OK;
}

const char *ssae_api_model_backend(const ssae_api_model *am) { return ssae_backend_name(am->b); }
const char *ssae_api_model_note(const ssae_api_model *am) { return ssae_backend_note(am->b); }
int ssae_api_model_fell_back(const ssae_api_model *am) { return ssae_backend_fell_back(am->b); }
const char *ssae_api_model_fallback_msg(const ssae_api_model *am) { return am->fallback; }
void ssae_api_model_fail_next(ssae_api_model *am) { ssae_backend_fail_next(am->b); }

int ssae_api_model_score(ssae_api_model *am, const float *x, size_t n, float *scores,
                         float *recon, ssae_err *err) {
  if (!n) return SSAE_API_OK;
  if (!x || !scores) return ssae_err_set(err, "score: NULL buffer"), SSAE_API_EARG;
  if (ssae_backend_run(am->b, x, n, scores, recon, err)) return SSAE_API_EBACKEND;
  return SSAE_API_OK;
}

int ssae_api_model_score_frames(ssae_api_model *am, const float *frames, size_t n_frames,
                                float *scores, ssae_err *err) {
  if (n_frames < (size_t)am->m->d.frames) return SSAE_API_OK;
  if (!frames || !scores) return ssae_err_set(err, "score_frames: NULL buffer"), SSAE_API_EARG;
  if (ssae_backend_run_frames(am->b, frames, n_frames, scores, err)) return SSAE_API_EBACKEND;
  return SSAE_API_OK;
}

int ssae_api_score_file(ssae_api_model *am, const char *path, int channel, double *file_score,
                        float **scores, size_t *n_windows, ssae_err *err) {
  if (!path || !file_score || !scores || !n_windows)
    return ssae_err_set(err, "score_file: NULL argument"), SSAE_API_EARG;
  if (channel < 0 && channel != SSAE_CHANNEL_MIX)
    return ssae_err_set(err, "score_file: channel %d (an index, or -1 for the mix)", channel),
           SSAE_API_EARG;
  ssae_file_scores fs;
  if (ssae_file_score(am->m, am->b, 0, path, channel, 0, &fs, err)) return SSAE_API_EIO;
  *file_score = fs.file_score;
  *scores = fs.scores;
  *n_windows = fs.n_windows;
  fs.scores = NULL;
  ssae_file_scores_release(&fs);
  return SSAE_API_OK;
}

/* ---- features ----------------------------------------------------------- */

/* Applies "key=value" lines to cfg (and, with m, other keys to m). */
static int apply_settings(const char *text, ssae_feat_cfg *cfg, ssae_model *m, ssae_err *err) {
  if (!text) return 0;
  char *copy = strdup(text);
  if (!copy) return ssae_err_set(err, "out of memory");
  int rc = 0;
  char *save = NULL;
  for (char *line = strtok_r(copy, "\n", &save); line && !rc;
       line = strtok_r(NULL, "\n", &save)) {
    if (!*line) continue;
    char *eq = strchr(line, '=');
    if (!eq || eq == line) {
      rc = ssae_err_set(err, "setting '%s' is not key=value", line);
      break;
    }
    *eq = '\0';
    const char *key = line, *val = eq + 1;
    int k = ssae_feat_cfg_set(cfg, key, val, err);
    if (k < 0) {
      rc = -1;
    } else if (k == 0) {
      if (!m) {
        rc = ssae_err_set(err, "'%s' is not a feature setting", key);
      } else if (!strcmp(key, "threshold")) {
        /* as the file reader: what a module read from a file saves again */
        rc = ssae_threshold_parse(val, &m->threshold, err);
      } else if (strcmp(key, "latent_dim") && strcmp(key, "slice_latent_dim")) {
        rc = ssae_model_meta_set(m, key, val, err);
      }
    }
  }
  free(copy);
  return rc;
}

int ssae_api_logmel(const char *settings, const float *x, size_t n, float **frames,
                    size_t *n_frames, int *n_mels, ssae_err *err) {
  if ((!x && n) || !frames || !n_frames || !n_mels)
    return ssae_err_set(err, "logmel: NULL argument"), SSAE_API_EARG;
  *frames = NULL;
  *n_frames = 0;
  ssae_feat_cfg cfg;
  ssae_feat_cfg_default(&cfg);
  if (apply_settings(settings, &cfg, NULL, err) || ssae_feat_cfg_validate(&cfg, err))
    return SSAE_API_EARG;
  *n_mels = cfg.n_mels;
  if (ssae_logmel_compute(&cfg, x, n, frames, n_frames, err)) return SSAE_API_EARG;
  return SSAE_API_OK;
}

/* ---- nets --------------------------------------------------------------- */

struct ssae_api_net {
  ssae_model *m; /* holds the parameters for the forward pass (from flat, when it runs) */
  ssae_cpu *cpu; /* made from m at the first forward after a change */
  ssae_vjp *vjp;
  float *flat;   /* the parameters last set (ssae_api_net_set_params_parts compares) */
  float *scores; /* the CPU forward's by-product */
  size_t scores_cap;
  /* cpu_stale: cpu's folded weights are older than flat; model_stale: so
   * is m (a training loop sets parameters every step and runs the training
   * forward, ssae_vjp, never the model's: m follows only when needed) */
  int threads, fail_next, have_params, cpu_stale, model_stale;
#if SSAE_HAVE_CUDA
  ssae_cuda_vjp *cuda; /* made by the first CUDA call */
#endif
};

ssae_api_net *ssae_api_net_new(const int dims[4], int threads, ssae_err *err) {
  ssae_dims d;
  if (dims_from(dims, &d, err)) return NULL;
  ssae_api_net *net = calloc(1, sizeof *net);
  if (!net) {
    ssae_err_set(err, "out of memory");
    return NULL;
  }
  net->threads = threads;
  if (!(net->m = ssae_model_new(&d, err)) || !(net->vjp = ssae_vjp_new(&d, threads, err))) {
    ssae_api_net_free(net);
    return NULL;
  }
  if (!(net->flat = malloc(sizeof(float) * ssae_vjp_param_count(net->vjp)))) {
    ssae_err_set(err, "out of memory");
    ssae_api_net_free(net);
    return NULL;
  }
  return net;
}

void ssae_api_net_free(ssae_api_net *net) {
  if (!net) return;
#if SSAE_HAVE_CUDA
  ssae_cuda_vjp_free(net->cuda);
#endif
  ssae_cpu_free(net->cpu);
  ssae_vjp_free(net->vjp);
  ssae_model_free(net->m);
  free(net->flat);
  free(net->scores);
  free(net);
}

int ssae_api_net_set_params(ssae_api_net *net, const float *params, size_t n, ssae_err *err) {
  size_t want = ssae_vjp_param_count(net->vjp);
  if (!params || n != want)
    return ssae_err_set(err, "parameters: %zu floats given, the model has %zu", n, want),
           SSAE_API_EARG;
  net->have_params = 0;
  if (params != net->flat) memcpy(net->flat, params, sizeof(float) * want);
  /* refuses non-finite values */
  if (ssae_vjp_set_params(net->vjp, params, err)) return SSAE_API_EARG;
  /* The model and the CPU forward's folded weights are made again only
   * when a forward needs them (its threads stay). */
  net->model_stale = 1;
  net->cpu_stale = 1;
  net->have_params = 1;
  return SSAE_API_OK;
}

int ssae_api_net_set_params_parts(ssae_api_net *net, const float *const *parts,
                                  const size_t *counts, size_t nparts, ssae_err *err) {
  const size_t want = ssae_vjp_param_count(net->vjp);
  if (!parts || !counts) return ssae_err_set(err, "parameters: NULL list"), SSAE_API_EARG;
  size_t total = 0;
  for (size_t i = 0; i < nparts; i++) {
    if (!parts[i] && counts[i])
      return ssae_err_set(err, "parameters: tensor %zu is NULL", i), SSAE_API_EARG;
    if (counts[i] > want - total)
      return ssae_err_set(err, "parameters: more than the model's %zu floats given", want),
             SSAE_API_EARG;
    total += counts[i];
  }
  if (total != want)
    return ssae_err_set(err, "parameters: %zu floats given, the model has %zu", total, want),
           SSAE_API_EARG;
  /* the same bits as those set: nothing to do (80 KB compared at the
   * default dimensions, ~3 us; setting them costs ~100 us) */
  int same = net->have_params;
  for (size_t i = 0, o = 0; same && i < nparts; o += counts[i], i++)
    same = !counts[i] || !memcmp(net->flat + o, parts[i], sizeof(float) * counts[i]);
  if (same) return SSAE_API_OK;
  for (size_t i = 0, o = 0; i < nparts; o += counts[i], i++)
    if (counts[i]) memcpy(net->flat + o, parts[i], sizeof(float) * counts[i]);
  return ssae_api_net_set_params(net, net->flat, want, err);
}

static int net_ready_hook(ssae_api_net *net, ssae_err *err) {
  if (net->fail_next) {
    net->fail_next = 0;
    return ssae_err_set(err, "failure forced by the test hook"), SSAE_API_EBACKEND;
  }
  return SSAE_API_OK;
}

static int net_ready(ssae_api_net *net, ssae_err *err) {
  if (!net->have_params) return ssae_err_set(err, "no parameters set"), SSAE_API_EARG;
  return net_ready_hook(net, err);
}

int ssae_api_net_forward(ssae_api_net *net, const float *x, size_t n, float *y,
                         ssae_err *err) {
  int rc = net_ready(net, err);
  if (rc) return rc;
  if (!n) return SSAE_API_OK;
  if (!x || !y) return ssae_err_set(err, "forward: NULL buffer"), SSAE_API_EARG;
  if (net->model_stale) {
    flat_to_model(net->flat, net->m);
    if (ssae_model_update(net->m, err)) return SSAE_API_EARG;
    net->model_stale = 0;
  }
  if (net->cpu && net->cpu_stale && ssae_cpu_set_model(net->cpu, net->m, err)) {
    ssae_cpu_free(net->cpu);
    net->cpu = NULL;
  }
  if (!net->cpu && !(net->cpu = ssae_cpu_new(net->m, net->threads, err)))
    return SSAE_API_ENOMEM;
  net->cpu_stale = 0;
  /* scores are a by-product, in a buffer kept for the largest batch: one
   * call for the whole batch, so that the threads share it all (blocks of
   * a few hundred windows left them waking more than working) */
  if (n > net->scores_cap) {
    float *sc = realloc(net->scores, n * sizeof(float));
    if (!sc) return ssae_err_set(err, "out of memory for %zu windows", n), SSAE_API_ENOMEM;
    net->scores = sc;
    net->scores_cap = n;
  }
  if (ssae_cpu_forward(net->cpu, x, n, net->scores, y))
    return ssae_err_set(err, "CPU forward failed"), SSAE_API_EBACKEND;
  return SSAE_API_OK;
}

int ssae_api_net_backward(ssae_api_net *net, const float *x, size_t n, const float *dy,
                          float *dparams, float *dx, ssae_err *err) {
  int rc = net_ready(net, err);
  if (rc) return rc;
  if (ssae_vjp_backward(net->vjp, x, n, dy, dparams, dx, err)) return SSAE_API_EARG;
  return SSAE_API_OK;
}

size_t ssae_api_net_act_floats(const ssae_api_net *net, size_t n) {
  return ssae_vjp_act_floats(net->vjp, n);
}

int ssae_api_net_forward_train(ssae_api_net *net, const float *x, size_t n, float *y, float *act,
                               size_t n_act, ssae_err *err) {
  int rc = net_ready(net, err);
  if (rc) return rc;
  if (!act && !n_act) /* nothing kept: the backward recomputes */
    return ssae_vjp_forward(net->vjp, x, n, y, err) ? SSAE_API_EARG : SSAE_API_OK;
  if (n_act != ssae_vjp_act_floats(net->vjp, n))
    return ssae_err_set(err, "forward_train: %zu floats of activations, %zu wanted", n_act,
                        ssae_vjp_act_floats(net->vjp, n)),
           SSAE_API_EARG;
  if (ssae_vjp_forward_save(net->vjp, x, n, y, act, err)) return SSAE_API_EARG;
  return SSAE_API_OK;
}

int ssae_api_net_backward_saved(ssae_api_net *net, const float *act, size_t n_act, size_t n,
                                const float *dy, float *dparams, float *dx, ssae_err *err) {
  int rc = net_ready(net, err);
  if (rc) return rc;
  if (n_act != ssae_vjp_act_floats(net->vjp, n))
    return ssae_err_set(err, "backward_saved: %zu floats of activations, %zu wanted", n_act,
                        ssae_vjp_act_floats(net->vjp, n)),
           SSAE_API_EARG;
  if (ssae_vjp_backward_saved(net->vjp, act, n, dy, dparams, dx, err)) return SSAE_API_EARG;
  return SSAE_API_OK;
}

int ssae_api_net_loss(ssae_api_net *net, const float *x, size_t n, double *loss,
                      float *dparams, ssae_err *err) {
  int rc = net_ready(net, err);
  if (rc) return rc;
  if (ssae_vjp_loss(net->vjp, x, n, loss, dparams, err)) return SSAE_API_EARG;
  return SSAE_API_OK;
}

void ssae_api_net_set_team(ssae_api_net *net, void *team, int threads) {
  /* a function pointer passed as data: POSIX guarantees the round trip */
  ssae_team_fn fn;
  memcpy(&fn, &team, sizeof fn);
  ssae_vjp_set_team(net->vjp, team ? fn : NULL, threads);
}

void ssae_api_net_fail_next(ssae_api_net *net) { net->fail_next = 1; }

/* ---- CUDA tensors ----------------------------------------------------------- */

#if SSAE_HAVE_CUDA
static _Atomic(const void *) last_device_input;

const void *ssae_api_last_device_input(void) { return atomic_load(&last_device_input); }

int ssae_api_model_score_cuda(ssae_api_model *am, const float *x_dev, size_t n,
                              float *scores_dev, float *recon_dev, void *stream, ssae_err *err) {
  if (!n) return SSAE_API_OK;
  if (!x_dev || !scores_dev) return ssae_err_set(err, "score: NULL buffer"), SSAE_API_EARG;
  int rc = ssae_backend_run_device(am->b, x_dev, n, scores_dev, recon_dev, stream, err);
  if (rc == 0) {
    atomic_store(&last_device_input, (const void *)x_dev);
    return SSAE_API_OK;
  }
  return rc == SSAE_BACKEND_NO_DEVICE ? SSAE_API_ENODEV : SSAE_API_EARG;
}

/* The net's CUDA object, made on the current device by the first call. */
static int net_cuda(ssae_api_net *net, ssae_err *err) {
  int rc = net_ready_hook(net, err);
  if (rc) return rc;
  if (!net->cuda) {
    ssae_dims d = net->m->d;
    if (!(net->cuda = ssae_cuda_vjp_new(&d, err))) return SSAE_API_EBACKEND;
  }
  return SSAE_API_OK;
}

int ssae_api_net_forward_cuda(ssae_api_net *net, const float *params_dev, const float *x_dev,
                              size_t n, float *y_dev, void *stream, ssae_err *err) {
  int rc = net_cuda(net, err);
  if (rc) return rc;
  if (ssae_cuda_vjp_forward(net->cuda, params_dev, x_dev, n, y_dev, stream, err))
    return SSAE_API_EBACKEND;
  if (n) atomic_store(&last_device_input, (const void *)x_dev);
  return SSAE_API_OK;
}

int ssae_api_net_forward_cuda_parts(ssae_api_net *net, const float *const *parts_dev,
                                    const size_t *counts, size_t nparts, const float *x_dev,
                                    size_t n, float *y_dev, void *stream, ssae_err *err) {
  if (nparts > SSAE_CUDA_VJP_MAX_PARTS)
    return ssae_err_set(err, "forward: %zu parameter pieces (at most %d)", nparts,
                        SSAE_CUDA_VJP_MAX_PARTS),
           SSAE_API_EARG;
  int rc = net_cuda(net, err);
  if (rc) return rc;
  if (ssae_cuda_vjp_forward_parts(net->cuda, parts_dev, counts, (int)nparts, x_dev, n, y_dev,
                                  stream, err))
    return SSAE_API_EBACKEND;
  if (n) atomic_store(&last_device_input, (const void *)x_dev);
  return SSAE_API_OK;
}

int ssae_api_net_backward_cuda(ssae_api_net *net, const float *params_dev, const float *x_dev,
                               size_t n, const float *dy_dev, float *dparams_dev,
                               float *dx_dev, void *stream, ssae_err *err) {
  int rc = net_cuda(net, err);
  if (rc) return rc;
  if (ssae_cuda_vjp_backward(net->cuda, params_dev, x_dev, n, dy_dev, dparams_dev, dx_dev,
                             stream, err))
    return SSAE_API_EBACKEND;
  if (n) atomic_store(&last_device_input, (const void *)x_dev);
  return SSAE_API_OK;
}

int ssae_api_net_loss_cuda(ssae_api_net *net, const float *params_dev, const float *x_dev,
                           size_t n, float *loss_dev, float *dparams_dev, void *stream,
                           ssae_err *err) {
  int rc = net_cuda(net, err);
  if (rc) return rc;
  if (ssae_cuda_vjp_loss(net->cuda, params_dev, x_dev, n, loss_dev, dparams_dev, stream, err))
    return SSAE_API_EBACKEND;
  if (n) atomic_store(&last_device_input, (const void *)x_dev);
  return SSAE_API_OK;
}
#endif

int ssae_api_save(const char *path, const int dims[4], const float *params, size_t n,
                  const char *metadata, ssae_err *err) {
  ssae_dims d;
  if (!path || !params) return ssae_err_set(err, "save: NULL argument"), SSAE_API_EARG;
  if (dims_from(dims, &d, err)) return SSAE_API_EARG;
  if (n != ssae_model_param_count(&d))
    return ssae_err_set(err, "save: %zu floats given, the model has %zu", n,
                        ssae_model_param_count(&d)),
           SSAE_API_EARG;
  ssae_model *m = ssae_model_new(&d, err);
  if (!m) return SSAE_API_ENOMEM;
  int rc = SSAE_API_OK;
  flat_to_model(params, m);
  if (apply_settings(metadata, &m->feat, m, err) || ssae_model_update(m, err))
    rc = SSAE_API_EARG;
  else if (ssae_model_save(m, path, err))
    rc = SSAE_API_EIO;
  ssae_model_free(m);
  return rc;
}
