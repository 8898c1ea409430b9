#include "ssae_model.h"
#include "ssae_rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


/* Large enough for any model worth running, small enough that sizes never
 * overflow and a hostile file cannot ask for absurd memory. */
#define DIM_MAX 65536
#define PARAMS_MAX ((size_t)1 << 28)

void ssae_dims_default(ssae_dims *d) {
  d->n_mels = 64;
  d->frames = 5;
  d->latent = 32;
  d->slice_latent = 64;
}

size_t ssae_model_param_count(const ssae_dims *d) {
  size_t M = (size_t)d->n_mels, F = (size_t)d->frames, L = (size_t)d->latent,
         S = (size_t)d->slice_latent, C = F * S;
  return 2 * M + S * M + S + L * C + 2 * L + L * L + L + M * S + M;
}

int ssae_dims_check(const ssae_dims *d, ssae_err *err) {
  if (d->n_mels < 1 || d->n_mels > 4096)
    return ssae_err_set(err, "n_mels %d is out of range (1 to 4096)", d->n_mels);
  if (d->frames < 1 || d->frames > 256)
    return ssae_err_set(err, "frames %d is out of range (1 to 256)", d->frames);
  if (d->latent < 1 || d->latent > DIM_MAX)
    return ssae_err_set(err, "latent_dim %d is out of range (1 to %d)", d->latent, DIM_MAX);
  if (d->slice_latent < 1 || d->slice_latent > DIM_MAX)
    return ssae_err_set(err, "slice_latent_dim %d is out of range (1 to %d)", d->slice_latent,
                        DIM_MAX);
  if ((size_t)d->frames * (size_t)d->slice_latent * (size_t)d->latent > PARAMS_MAX ||
      ssae_model_param_count(d) > PARAMS_MAX)
    return ssae_err_set(err, "dimensions n_mels=%d frames=%d latent_dim=%d "
                        "slice_latent_dim=%d give too many weights", d->n_mels, d->frames,
                        d->latent, d->slice_latent);
  return 0;
}

ssae_model *ssae_model_new(const ssae_dims *d, ssae_err *err) {
  ssae_dims dd;
  if (!d) {
    ssae_dims_default(&dd);
    d = &dd;
  }
  if (ssae_dims_check(d, err)) return NULL;
  ssae_model *m = calloc(1, sizeof *m);
  if (!m) {
    ssae_err_set(err, "out of memory for a model");
    return NULL;
  }
  m->d = *d;
  size_t M = (size_t)d->n_mels, L = (size_t)d->latent, S = (size_t)d->slice_latent,
         C = (size_t)d->frames * S;
  float *p = calloc(ssae_model_param_count(d) + L * C, sizeof *p);
  if (!p) {
    free(m);
    ssae_err_set(err, "out of memory for the model weights");
    return NULL;
  }
  /* The order of the file's tensors, so that one block is the whole
   * state_dict. */
  m->ln_enc_w = p, p += M;
  m->ln_enc_b = p, p += M;
  m->enc_w = p, p += S * M;
  m->enc_b = p, p += S;
  m->basis = p, p += L * C;
  m->ln_bn_w = p, p += L;
  m->ln_bn_b = p, p += L;
  m->bn_w = p, p += L * L;
  m->bn_b = p, p += L;
  m->dec_w = p, p += M * S;
  m->dec_b = p, p += M;
  m->basis_n = p;
  ssae_feat_cfg_default(&m->feat);
  m->feat.n_mels = d->n_mels;
  m->feat.frames = d->frames;
  m->threshold = NAN;
  return m;
}

void ssae_model_free(ssae_model *m) {
  if (!m) return;
  for (size_t i = 0; i < m->n_meta; i++) {
    free(m->meta[i].key);
    free(m->meta[i].value);
  }
  free(m->meta);
  ssae_model_extra_clear(m);
  free(m->ln_enc_w);
  free(m);
}

int ssae_model_tensor_list(const ssae_model *m, ssae_model_tensor out[SSAE_MODEL_N_TENSORS]) {
  uint64_t M = (uint64_t)m->d.n_mels, L = (uint64_t)m->d.latent, S = (uint64_t)m->d.slice_latent,
           C = (uint64_t)m->d.frames * S;
  ssae_model_tensor t[SSAE_MODEL_N_TENSORS] = {
      {"slice_encoder.0.weight", 1, {M, 0}, m->ln_enc_w},
      {"slice_encoder.0.bias", 1, {M, 0}, m->ln_enc_b},
      {"slice_encoder.1.weight", 2, {S, M}, m->enc_w},
      {"slice_encoder.1.bias", 1, {S, 0}, m->enc_b},
      {"global_basis", 2, {L, C}, m->basis},
      {"bottleneck_mlp.0.weight", 1, {L, 0}, m->ln_bn_w},
      {"bottleneck_mlp.0.bias", 1, {L, 0}, m->ln_bn_b},
      {"bottleneck_mlp.1.weight", 2, {L, L}, m->bn_w},
      {"bottleneck_mlp.1.bias", 1, {L, 0}, m->bn_b},
      {"slice_decoder.0.weight", 2, {M, S}, m->dec_w},
      {"slice_decoder.0.bias", 1, {M, 0}, m->dec_b},
  };
  memcpy(out, t, sizeof t);
  return SSAE_MODEL_N_TENSORS;
}

static void fill_uniform(ssae_rng *r, float *p, size_t n, double bound) {
  for (size_t i = 0; i < n; i++) {
    double u = ssae_rng_uniform(r);
    p[i] = (float)((2.0 * u - 1.0) * bound);
  }
}

void ssae_model_init(ssae_model *m, uint64_t seed) {
  ssae_rng r;
  ssae_rng_seed(&r, seed);
  size_t M = (size_t)m->d.n_mels, L = (size_t)m->d.latent, S = (size_t)m->d.slice_latent,
         C = (size_t)m->d.frames * S;
  for (size_t i = 0; i < M; i++) m->ln_enc_w[i] = 1.0f, m->ln_enc_b[i] = 0.0f;
  for (size_t i = 0; i < L; i++) m->ln_bn_w[i] = 1.0f, m->ln_bn_b[i] = 0.0f;
  /* nn.Linear: kaiming_uniform(a=sqrt(5)) gives bound 1/sqrt(fan_in) for the
   * weights, and the bias uses the same bound. */
  fill_uniform(&r, m->enc_w, S * M, 1.0 / sqrt((double)M));
  fill_uniform(&r, m->enc_b, S, 1.0 / sqrt((double)M));
  fill_uniform(&r, m->basis, L * C, sqrt(6.0 / (double)(L + C)));
  fill_uniform(&r, m->bn_w, L * L, 1.0 / sqrt((double)L));
  fill_uniform(&r, m->bn_b, L, 1.0 / sqrt((double)L));
  fill_uniform(&r, m->dec_w, M * S, 1.0 / sqrt((double)S));
  fill_uniform(&r, m->dec_b, M, 1.0 / sqrt((double)S));
  ssae_model_update(m, NULL);
}

int ssae_model_update(ssae_model *m, ssae_err *err) {
  ssae_model_tensor t[SSAE_MODEL_N_TENSORS];
  ssae_model_tensor_list(m, t);
  for (int i = 0; i < SSAE_MODEL_N_TENSORS; i++) {
    size_t n = (size_t)t[i].shape[0] * (t[i].ndim == 2 ? (size_t)t[i].shape[1] : 1);
    for (size_t k = 0; k < n; k++)
      if (!isfinite(t[i].data[k]))
        return ssae_err_set(err, "tensor %s holds %s at index %zu", t[i].name,
                            isnan(t[i].data[k]) ? "NaN" : "Inf", k);
  }
  /* In double, so that basis_n is the float64 result rounded once. */
  size_t L = (size_t)m->d.latent, C = (size_t)m->d.frames * (size_t)m->d.slice_latent;
  for (size_t l = 0; l < L; l++) {
    const float *g = m->basis + l * C;
    double ss = 0;
    for (size_t c = 0; c < C; c++) ss += (double)g[c] * g[c];
    double norm = sqrt(ss);
    if (norm < 1e-12) norm = 1e-12;
    for (size_t c = 0; c < C; c++) m->basis_n[l * C + c] = (float)(g[c] / norm);
  }
  return 0;
}

const char *ssae_model_meta_get(const ssae_model *m, const char *key) {
  for (size_t i = 0; i < m->n_meta; i++)
    if (!strcmp(m->meta[i].key, key)) return m->meta[i].value;
  return NULL;
}

int ssae_model_meta_set(ssae_model *m, const char *key, const char *value, ssae_err *err) {
  if (!key || !*key) return ssae_err_set(err, "metadata key is empty");
  if (!value) value = "";
  char *v = strdup(value);
  if (!v) return ssae_err_set(err, "out of memory for metadata");
  for (size_t i = 0; i < m->n_meta; i++) {
    if (!strcmp(m->meta[i].key, key)) {
      free(m->meta[i].value);
      m->meta[i].value = v;
      return 0;
    }
  }
  char *k = strdup(key);
  ssae_meta_entry *e = realloc(m->meta, (m->n_meta + 1) * sizeof *e);
  if (!k || !e) {
    free(k);
    free(v);
    if (e) m->meta = e;
    return ssae_err_set(err, "out of memory for metadata");
  }
  m->meta = e;
  m->meta[m->n_meta].key = k;
  m->meta[m->n_meta].value = v;
  m->n_meta++;
  return 0;
}

ssae_model *ssae_model_clone(const ssae_model *m, ssae_err *err) {
  ssae_model *c = ssae_model_new(&m->d, err);
  if (!c) return NULL;
  size_t L = (size_t)m->d.latent, C = (size_t)m->d.frames * (size_t)m->d.slice_latent;
  memcpy(c->ln_enc_w, m->ln_enc_w, (ssae_model_param_count(&m->d) + L * C) * sizeof(float));
  c->feat = m->feat;
  c->threshold = m->threshold;
  for (size_t i = 0; i < m->n_meta; i++) {
    if (ssae_model_meta_set(c, m->meta[i].key, m->meta[i].value, err)) {
      ssae_model_free(c);
      return NULL;
    }
  }
  if (ssae_model_extra_copy(c, m, err)) {
    ssae_model_free(c);
    return NULL;
  }
  return c;
}
