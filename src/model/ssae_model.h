/* The SpectralShapeAutoencoder's weights and settings (SPEC sections 2, 3).
 *
 * A model is one safetensors file: the PyTorch state_dict tensors (F32,
 * PyTorch shapes) and string metadata (feature settings, dimensions,
 * threshold, provenance). Loading validates everything and refuses a bad
 * file with a message naming the problem. */
#ifndef SSAE_MODEL_H
#define SSAE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "ssae_err.h"
#include "ssae_features.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ssae_dims {
  int n_mels;       /* M, 64 */
  int frames;       /* F, 5 */
  int latent;       /* L, 32 */
  int slice_latent; /* S, 64; combined C = F*S */
} ssae_dims;

void ssae_dims_default(ssae_dims *d);

typedef struct ssae_meta_entry {
  char *key;
  char *value;
} ssae_meta_entry;

/* A tensor of the file beyond the 11 parameters (SPEC section 3 allows
 * them: other scoring modes, such as the spectrum-only reference of
 * ssae_reference.h). F32, one or two dimensions; kept through load, clone
 * and save. */
typedef struct ssae_model_extra {
  char *name;
  int ndim;
  uint64_t shape[2]; /* shape[1] is 0 for vectors */
  float *data;
} ssae_model_extra;

typedef struct ssae_model {
  ssae_dims d;
  ssae_feat_cfg feat;
  /* Decision threshold on window and file scores; NAN when none is set. */
  double threshold;
  /* Weights in PyTorch layout ([out, in] for Linear), one allocation. */
  float *ln_enc_w, *ln_enc_b; /* slice_encoder.0.{weight,bias}  [M]   */
  float *enc_w, *enc_b;       /* slice_encoder.1.{weight,bias}  [S,M] [S] */
  float *basis;               /* global_basis                   [L,C] */
  float *ln_bn_w, *ln_bn_b;   /* bottleneck_mlp.0.{weight,bias} [L]   */
  float *bn_w, *bn_b;         /* bottleneck_mlp.1.{weight,bias} [L,L] [L] */
  float *dec_w, *dec_b;       /* slice_decoder.0.{weight,bias}  [M,S] [M] */
  /* Row-wise L2-normalised basis, B_l = G_l / max(|G_l|, 1e-12). Depends
   * only on the weights: ssae_model_update() computes it. */
  float *basis_n;             /* [L,C] */
  /* Every metadata entry of the file, feature keys included. */
  ssae_meta_entry *meta;
  size_t n_meta;
  /* Extra tensors, in file order (none in most models). */
  ssae_model_extra *extra;
  size_t n_extra;
} ssae_model;

/* Number of floats of all 11 parameter tensors together. */
size_t ssae_model_param_count(const ssae_dims *d);

/* A model with zeroed weights and default features (d NULL: default
 * dimensions). */
ssae_model *ssae_model_new(const ssae_dims *d, ssae_err *err);
void ssae_model_free(ssae_model *m);

/* PyTorch's default initialisation (Linear: kaiming-uniform weights and
 * uniform bias; basis: xavier-uniform; LayerNorm ones/zeros), from a seed. */
void ssae_model_init(ssae_model *m, uint64_t seed);

/* Recomputes basis_n after the weights changed; refuses non-finite weights. */
int ssae_model_update(ssae_model *m, ssae_err *err);

ssae_model *ssae_model_load(const char *path, ssae_err *err);
ssae_model *ssae_model_load_mem(const void *buf, size_t len, const char *name,
                                ssae_err *err);
/* The model that ships with the program (built in). */
ssae_model *ssae_model_load_default(ssae_err *err);
/* path NULL means the default model. */
ssae_model *ssae_model_open(const char *path, ssae_err *err);

/* Writes a safetensors file (atomically: temp file, then rename), metadata
 * refreshed from d, feat and threshold. */
int ssae_model_save(const ssae_model *m, const char *path, ssae_err *err);
/* A threshold as model files write it: a non-negative number, or "none"
 * (NaN: no threshold); -1 with a reason otherwise (a "nan" is refused: it
 * is what a broken calibration writes). */
int ssae_threshold_parse(const char *v, double *out, ssae_err *err);

/* Checks dimensions for range and size; names the bad one. */
int ssae_dims_check(const ssae_dims *d, ssae_err *err);

/* The 11 parameter tensors in file order, with their PyTorch names and
 * shapes (shape[1] is 0 for vectors); data points into the model. */
#define SSAE_MODEL_N_TENSORS 11
typedef struct ssae_model_tensor {
  const char *name;
  int ndim;
  uint64_t shape[2];
  float *data;
} ssae_model_tensor;
int ssae_model_tensor_list(const ssae_model *m,
                           ssae_model_tensor out[SSAE_MODEL_N_TENSORS]);

/* A deep copy (weights, features, threshold, metadata). */
ssae_model *ssae_model_clone(const ssae_model *m, ssae_err *err);

/* Extra tensors by name: NULL when absent. set replaces one of the same
 * name (a copy of data is kept); a name of the 11 parameters is refused. */
const ssae_model_extra *ssae_model_extra_get(const ssae_model *m, const char *name);
int ssae_model_extra_set(ssae_model *m, const char *name, int ndim, const uint64_t *shape,
                         const float *data, ssae_err *err);
/* Drops them all (ssae_model_free does). */
void ssae_model_extra_clear(ssae_model *m);
/* Copies src's extra tensors into dst (ssae_model_clone does). */
int ssae_model_extra_copy(ssae_model *dst, const ssae_model *src, ssae_err *err);

const char *ssae_model_meta_get(const ssae_model *m, const char *key);
int ssae_model_meta_set(ssae_model *m, const char *key, const char *value,
                        ssae_err *err);

#ifdef __cplusplus
}
#endif
#endif
