/* Model files (SPEC section 3): safetensors with the state_dict tensors and
 * string metadata. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ssae_model.h"
#include "ssae_model_default.h"
#include "ssae_outfile.h"
#include "ssae_safetensors.h"

/* Far above any SSAE model; keeps a wrong path (a disk image, a video) from
 * being read into memory whole. */
#define MODEL_FILE_MAX ((size_t)1 << 31)

static const char *const dim_keys[] = {"latent_dim", "slice_latent_dim", NULL};

static int is_reserved_key(const char *key) {
  for (int i = 0; ssae_feat_keys[i]; i++)
    if (!strcmp(key, ssae_feat_keys[i])) return 1;
  for (int i = 0; dim_keys[i]; i++)
    if (!strcmp(key, dim_keys[i])) return 1;
  return !strcmp(key, "threshold");
}

static void shape_text(char *buf, size_t len, int ndim, const uint64_t *shape) {
  size_t n = 0;
  n += (size_t)snprintf(buf + n, len - n, "[");
  for (int k = 0; k < ndim && n < len; k++)
    n += (size_t)snprintf(buf + n, len - n, "%s%" PRIu64, k ? ", " : "", shape[k]);
  if (n < len) snprintf(buf + n, len - n, "]");
}

static int parse_dim(const char *key, const char *v, int *out, ssae_err *err) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || end == v || *end || x < 1 || x > 65536)
    return ssae_err_set(err, "metadata %s: '%s' is not a whole number from 1 to 65536", key, v);
  *out = (int)x;
  return 0;
}

/* "none" is the only way to say "no threshold" (SPEC section 3): a "nan"
 * (or an empty value) is what a broken calibration writes, and taking it
 * for "none" would hide that the model never alarms. */
int ssae_threshold_parse(const char *v, double *out, ssae_err *err) {
  if (!strcmp(v, "none")) {
    *out = NAN;
    return 0;
  }
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || *end || !isfinite(x) || x < 0)
    return ssae_err_set(err, "threshold '%s' is not a non-negative number (or \"none\" for "
                        "no threshold)", v);
  *out = x;
  return 0;
}

static const ssae_st_tensor *need(const ssae_st *st, const char *name, int ndim,
                                  ssae_err *err) {
  const ssae_st_tensor *t = ssae_st_find(st, name);
  if (!t) {
    ssae_err_set(err, "missing tensor %s", name);
    return NULL;
  }
  if (strcmp(t->dtype, "F32")) {
    ssae_err_set(err, "tensor %s has dtype %s; ssae models hold F32", name, t->dtype);
    return NULL;
  }
  if (t->ndim != ndim) {
    char s[160];
    shape_text(s, sizeof s, t->ndim, t->shape);
    ssae_err_set(err, "tensor %s has shape %s; it must have %d dimension%s", name, s, ndim,
                 ndim == 1 ? "" : "s");
    return NULL;
  }
  for (int k = 0; k < ndim; k++) {
    if (t->shape[k] < 1 || t->shape[k] > 65536 * 256) {
      char s[160];
      shape_text(s, sizeof s, t->ndim, t->shape);
      ssae_err_set(err, "tensor %s has shape %s, out of range", name, s);
      return NULL;
    }
  }
  return t;
}

/* Dimensions from the tensors' shapes: n_mels and slice_latent from the
 * slice encoder, latent and the combined width from the basis. */
static int dims_from_tensors(const ssae_st *st, ssae_dims *d, ssae_err *err) {
  const ssae_st_tensor *enc = need(st, "slice_encoder.1.weight", 2, err);
  if (!enc) return -1;
  const ssae_st_tensor *basis = need(st, "global_basis", 2, err);
  if (!basis) return -1;
  uint64_t S = enc->shape[0], M = enc->shape[1], L = basis->shape[0], C = basis->shape[1];
  if (M > 4096 || S > 65536 || L > 65536)
    return ssae_err_set(err, "dimensions out of range (n_mels=%" PRIu64 " slice_latent_dim=%"
                        PRIu64 " latent_dim=%" PRIu64 ")", M, S, L);
  if (C % S)
    return ssae_err_set(err, "global_basis has %" PRIu64 " columns, not a multiple of "
                        "slice_latent_dim %" PRIu64 " (from slice_encoder.1.weight)", C, S);
  d->n_mels = (int)M;
  d->slice_latent = (int)S;
  d->latent = (int)L;
  if (C / S > 256)
    return ssae_err_set(err, "global_basis has %" PRIu64 " columns: %" PRIu64
                        " frames, more than 256", C, C / S);
  d->frames = (int)(C / S);
  return ssae_dims_check(d, err);
}

static void copy_le_floats(float *dst, const unsigned char *src, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t u = (uint32_t)src[4 * i] | (uint32_t)src[4 * i + 1] << 8 |
                 (uint32_t)src[4 * i + 2] << 16 | (uint32_t)src[4 * i + 3] << 24;
    memcpy(&dst[i], &u, 4);
  }
}

static const char *const param_names[] = {
    "slice_encoder.0.weight", "slice_encoder.0.bias", "slice_encoder.1.weight",
    "slice_encoder.1.bias", "global_basis", "bottleneck_mlp.0.weight", "bottleneck_mlp.0.bias",
    "bottleneck_mlp.1.weight", "bottleneck_mlp.1.bias", "slice_decoder.0.weight",
    "slice_decoder.0.bias", NULL};

static int is_param_name(const char *name) {
  for (int i = 0; param_names[i]; i++)
    if (!strcmp(name, param_names[i])) return 1;
  return 0;
}

/* The tensors besides the parameters: F32 ones of one or two dimensions
 * are kept (ssae_model_extra); others belong to tools this program does
 * not know and are left out, as a reader that ignores them would. */
static int load_extras(const ssae_st *st, ssae_model *m, ssae_err *err) {
  for (size_t i = 0; i < st->n_tensors; i++) {
    const ssae_st_tensor *s = &st->tensors[i];
    if (is_param_name(s->name) || strcmp(s->dtype, "F32") || s->ndim < 1 || s->ndim > 2)
      continue;
    float *data = malloc((s->numel ? s->numel : 1) * sizeof *data);
    if (!data) return ssae_err_set(err, "out of memory for tensor %s", s->name);
    copy_le_floats(data, s->data, (size_t)s->numel);
    uint64_t shape[2] = {s->shape[0], s->ndim == 2 ? s->shape[1] : 0};
    int rc = ssae_model_extra_set(m, s->name, s->ndim, shape, data, err);
    free(data);
    if (rc) return -1;
  }
  return 0;
}

static ssae_model *from_st(const ssae_st *st, ssae_err *err) {
  ssae_dims d;
  if (dims_from_tensors(st, &d, err)) return NULL;
  /* Dimensions in the metadata must agree with the tensors. */
  int meta_frames = 0, meta_mels = 0;
  for (size_t i = 0; i < st->n_meta; i++) {
    const char *k = st->meta[i].key, *v = st->meta[i].value;
    int x = 0, *want = NULL;
    const char *what = NULL;
    if (!strcmp(k, "latent_dim")) want = &d.latent, what = "global_basis rows";
    else if (!strcmp(k, "slice_latent_dim"))
      want = &d.slice_latent, what = "slice_encoder.1.weight rows";
    else continue;
    if (parse_dim(k, v, &x, err)) return NULL;
    if (x != *want) {
      ssae_err_set(err, "metadata %s = %d but the tensors say %d (%s)", k, x, *want, what);
      return NULL;
    }
  }
  ssae_model *m = ssae_model_new(&d, err);
  if (!m) return NULL;
  for (size_t i = 0; i < st->n_meta; i++) {
    const char *k = st->meta[i].key, *v = st->meta[i].value;
    if (ssae_model_meta_set(m, k, v, err)) goto fail;
    if (!strcmp(k, "threshold")) {
      if (ssae_threshold_parse(v, &m->threshold, err)) {
        ssae_err_prefix(err, "metadata");
        goto fail;
      }
      continue;
    }
    int r = ssae_feat_cfg_set(&m->feat, k, v, err);
    if (r < 0) {
      ssae_err_prefix(err, "metadata");
      goto fail;
    }
    if (r > 0 && !strcmp(k, "n_mels")) meta_mels = 1;
    if (r > 0 && !strcmp(k, "frames")) meta_frames = 1;
  }
  if (meta_mels && m->feat.n_mels != d.n_mels) {
    ssae_err_set(err, "metadata n_mels = %d but the tensors have %d mel bands", m->feat.n_mels,
                 d.n_mels);
    goto fail;
  }
  if (meta_frames && m->feat.frames != d.frames) {
    ssae_err_set(err, "metadata frames = %d but global_basis has %d columns = %d frames of "
                 "slice_latent_dim %d", m->feat.frames, d.frames * d.slice_latent, d.frames,
                 d.slice_latent);
    goto fail;
  }
  m->feat.n_mels = d.n_mels;
  m->feat.frames = d.frames;
  if (ssae_feat_cfg_validate(&m->feat, err)) {
    ssae_err_prefix(err, "metadata");
    goto fail;
  }
  ssae_model_tensor t[SSAE_MODEL_N_TENSORS];
  ssae_model_tensor_list(m, t);
  for (int i = 0; i < SSAE_MODEL_N_TENSORS; i++) {
    const ssae_st_tensor *s = need(st, t[i].name, t[i].ndim, err);
    if (!s) goto fail;
    if (s->shape[0] != t[i].shape[0] || (t[i].ndim == 2 && s->shape[1] != t[i].shape[1])) {
      char got[160], want[160];
      shape_text(got, sizeof got, s->ndim, s->shape);
      shape_text(want, sizeof want, t[i].ndim, t[i].shape);
      ssae_err_set(err, "tensor %s has shape %s, expected %s (n_mels=%d frames=%d "
                   "latent_dim=%d slice_latent_dim=%d)", t[i].name, got, want, d.n_mels,
                   d.frames, d.latent, d.slice_latent);
      goto fail;
    }
    copy_le_floats(t[i].data, s->data, (size_t)s->numel);
  }
  if (load_extras(st, m, err)) goto fail;
  if (ssae_model_update(m, err)) goto fail;
  return m;
fail:
  ssae_model_free(m);
  return NULL;
}

ssae_model *ssae_model_load_mem(const void *buf, size_t len, const char *name, ssae_err *err) {
  if (!name) name = "model";
  if (!buf && len) {
    ssae_err_set(err, "%s: no data", name);
    return NULL;
  }
  ssae_st st;
  if (ssae_st_parse(buf ? buf : "", len, &st, err)) {
    ssae_err_prefix(err, "%s", name);
    return NULL;
  }
  ssae_model *m = from_st(&st, err);
  ssae_st_free(&st);
  if (!m) ssae_err_prefix(err, "%s", name);
  return m;
}

ssae_model *ssae_model_load(const char *path, ssae_err *err) {
  /* Opened without waiting: a FIFO (or a device) named as the model would
   * block a plain open until some writer came; it is refused below. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    ssae_err_set(err, "%s: cannot open model: %s", path, strerror(errno));
    return NULL;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    ssae_err_set(err, "%s: not a regular file", path);
    return NULL;
  }
  FILE *f = NULL;
  const int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0 || !(f = fdopen(fd, "rb"))) {
    ssae_err_set(err, "%s: cannot open model: %s", path, strerror(errno));
    close(fd);
    return NULL;
  }
  if ((uint64_t)sb.st_size > MODEL_FILE_MAX) {
    fclose(f);
    ssae_err_set(err, "%s: %lld bytes, too large for a model file", path, (long long)sb.st_size);
    return NULL;
  }
  size_t len = (size_t)sb.st_size;
  unsigned char *buf = malloc(len ? len : 1);
  if (!buf) {
    fclose(f);
    ssae_err_set(err, "%s: out of memory reading the model", path);
    return NULL;
  }
  size_t got = fread(buf, 1, len, f);
  int rerr = ferror(f);
  fclose(f);
  if (got != len || rerr) {
    free(buf);
    ssae_err_set(err, "%s: read error", path);
    return NULL;
  }
  ssae_model *m = ssae_model_load_mem(buf, len, path, err);
  free(buf);
  return m;
}

ssae_model *ssae_model_load_default(ssae_err *err) {
  return ssae_model_load_mem(ssae_default_model_data, ssae_default_model_size,
                             "built-in default model", err);
}

ssae_model *ssae_model_open(const char *path, ssae_err *err) {
  return path ? ssae_model_load(path, err) : ssae_model_load_default(err);
}

/* --- extra tensors --- */

const ssae_model_extra *ssae_model_extra_get(const ssae_model *m, const char *name) {
  for (size_t i = 0; i < m->n_extra; i++)
    if (!strcmp(m->extra[i].name, name)) return &m->extra[i];
  return NULL;
}

int ssae_model_extra_set(ssae_model *m, const char *name, int ndim, const uint64_t *shape,
                         const float *data, ssae_err *err) {
  if (!name || !*name) return ssae_err_set(err, "extra tensor: empty name");
  if (is_param_name(name))
    return ssae_err_set(err, "extra tensor %s: that is a parameter of the model", name);
  if (ndim < 1 || ndim > 2 || !shape[0] || (ndim == 2 && !shape[1]) ||
      shape[0] > ((uint64_t)1 << 28) || (ndim == 2 && shape[1] > ((uint64_t)1 << 28) / shape[0]))
    return ssae_err_set(err, "extra tensor %s: bad shape", name);
  size_t n = (size_t)shape[0] * (ndim == 2 ? (size_t)shape[1] : 1);
  ssae_model_extra e = {strdup(name), ndim, {shape[0], ndim == 2 ? shape[1] : 0},
                        malloc(n * sizeof(float))};
  if (!e.name || !e.data) {
    free(e.name);
    free(e.data);
    return ssae_err_set(err, "extra tensor %s: out of memory", name);
  }
  memcpy(e.data, data, n * sizeof(float));
  for (size_t i = 0; i < m->n_extra; i++)
    if (!strcmp(m->extra[i].name, name)) {
      free(m->extra[i].name);
      free(m->extra[i].data);
      m->extra[i] = e;
      return 0;
    }
  ssae_model_extra *v = realloc(m->extra, (m->n_extra + 1) * sizeof *v);
  if (!v) {
    free(e.name);
    free(e.data);
    return ssae_err_set(err, "extra tensor %s: out of memory", name);
  }
  m->extra = v;
  m->extra[m->n_extra++] = e;
  return 0;
}

void ssae_model_extra_clear(ssae_model *m) {
  for (size_t i = 0; i < m->n_extra; i++) {
    free(m->extra[i].name);
    free(m->extra[i].data);
  }
  free(m->extra);
  m->extra = NULL;
  m->n_extra = 0;
}

int ssae_model_extra_copy(ssae_model *dst, const ssae_model *src, ssae_err *err) {
  for (size_t i = 0; i < src->n_extra; i++) {
    const ssae_model_extra *e = &src->extra[i];
    if (ssae_model_extra_set(dst, e->name, e->ndim, e->shape, e->data, err)) return -1;
  }
  return 0;
}

/* --- writing --- */

static char *fmt_double(double v) {
  char buf[64];
  for (int prec = 6; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  return strdup(buf);
}

static char *fmt_int(int v) {
  char buf[32];
  snprintf(buf, sizeof buf, "%d", v);
  return strdup(buf);
}

int ssae_model_save(const ssae_model *m, const char *path, ssae_err *err) {
  if (m->feat.n_mels != m->d.n_mels || m->feat.frames != m->d.frames)
    return ssae_err_set(err, "%s: feature settings (n_mels %d, frames %d) do not match the "
                        "model (%d, %d)", path, m->feat.n_mels, m->feat.frames, m->d.n_mels,
                        m->d.frames);
  if (ssae_feat_cfg_validate(&m->feat, err)) return ssae_err_prefix(err, "%s", path);
  if (!isnan(m->threshold) && (!isfinite(m->threshold) || m->threshold < 0))
    return ssae_err_set(err, "%s: threshold %g is not a non-negative number", path, m->threshold);
  size_t n_feat = 0;
  while (ssae_feat_keys[n_feat]) n_feat++;
  size_t cap = n_feat + 3 + m->n_meta, n = 0;
  ssae_st_meta *meta = calloc(cap, sizeof *meta);
  ssae_st_out *o = NULL;
  char **owned = calloc(cap, sizeof *owned);
  int rc = -1;
  if (!meta || !owned) {
    ssae_err_set(err, "%s: out of memory", path);
    goto done;
  }
  for (size_t i = 0; i < n_feat; i++) {
    char buf[128];
    if (ssae_feat_cfg_get(&m->feat, ssae_feat_keys[i], buf, sizeof buf)) continue;
    if (!(owned[n] = strdup(buf))) goto oom;
    meta[n] = (ssae_st_meta){ssae_feat_keys[i], owned[n]};
    n++;
  }
  if (!(owned[n] = fmt_int(m->d.latent))) goto oom;
  meta[n] = (ssae_st_meta){"latent_dim", owned[n]};
  n++;
  if (!(owned[n] = fmt_int(m->d.slice_latent))) goto oom;
  meta[n] = (ssae_st_meta){"slice_latent_dim", owned[n]};
  n++;
  /* No threshold is written as the explicit "none". */
  if (!(owned[n] = isnan(m->threshold) ? strdup("none") : fmt_double(m->threshold))) goto oom;
  meta[n] = (ssae_st_meta){"threshold", owned[n]};
  n++;
  for (size_t i = 0; i < m->n_meta; i++)
    if (!is_reserved_key(m->meta[i].key))
      meta[n++] = (ssae_st_meta){m->meta[i].key, m->meta[i].value};

  ssae_model_tensor t[SSAE_MODEL_N_TENSORS];
  ssae_model_tensor_list(m, t);
  /* The parameters, then the extra tensors. */
  size_t n_out = SSAE_MODEL_N_TENSORS + m->n_extra;
  if (!(o = calloc(n_out, sizeof *o))) goto oom;
  for (int i = 0; i < SSAE_MODEL_N_TENSORS; i++) {
    o[i].name = t[i].name;
    o[i].ndim = t[i].ndim;
    o[i].shape[0] = t[i].shape[0];
    o[i].shape[1] = t[i].shape[1];
    o[i].data = t[i].data;
  }
  for (size_t i = 0; i < m->n_extra; i++) {
    ssae_st_out *x = &o[SSAE_MODEL_N_TENSORS + i];
    x->name = m->extra[i].name;
    x->ndim = m->extra[i].ndim;
    x->shape[0] = m->extra[i].shape[0];
    x->shape[1] = m->extra[i].shape[1];
    x->data = m->extra[i].data;
  }

  /* The output discipline: a reader never sees a half-written model, and a
   * failed write leaves the old one intact. */
  ssae_outfile *of = ssae_outfile_open(path, err);
  if (!of) goto done;
  if (ssae_st_write(ssae_outfile_fp(of), meta, n, o, n_out, err)) {
    /* The writer's own message, unless the file failed under it. */
    if (ssae_outfile_failed(of)) {
      ssae_outfile_commit(of, err);
    } else {
      ssae_outfile_abort(of);
      ssae_err_prefix(err, "%s", path);
    }
    goto done;
  }
  if (ssae_outfile_commit(of, err)) goto done;
  rc = 0;
  goto done;
oom:
  ssae_err_set(err, "%s: out of memory", path);
done:
  if (owned)
    for (size_t i = 0; i < cap; i++) free(owned[i]);
  free(owned);
  free(meta);
  free(o);
  return rc;
}
