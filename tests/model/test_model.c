/* Model files, the CPU forward pass and the backend table, in C (so that
 * the sanitizer builds run them):
 * - save/load round trip (weights bit for bit, features, threshold,
 *   provenance), the built-in default model;
 * - every kind of malformed file is refused with its own message;
 * - the forward pass gives the same results on 1 and 3 threads, with and
 *   without reconstructions, for batch sizes around the block size;
 * - runs of consecutive frames score exactly as their windows one by one;
 * - the GELU kernel is within 1e-14 of libm's erf formula;
 * (each also with the kernels capped at AVX2 and at the baseline: argv[1]);
 * - the backend falls back to the CPU when its device fails (test hook),
 *   reports it once and loses no window. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ssae_backend.h"
#include "ssae_cpu.h"
#include "ssae_cpu_kernels.h"
#include "ssae_model.h"
#include "../ssae_test.h"

/* --- composing safetensors files by hand --- */

enum { M = 8, F = 2, L = 3, S = 4, C = F * S };

typedef struct {
  char name[64];
  char dtype[16];
  char shape[64];       /* JSON array text */
  long begin, end;      /* -1: packed automatically */
  size_t n;             /* floats of data */
  float data[M * S * 4];
} tspec;

typedef struct {
  tspec t[16];
  int nt;
  char meta[1024]; /* JSON object text of __metadata__, or "" */
  char extra[256]; /* raw JSON members appended to the header */
} fspec;

static void add(fspec *f, const char *name, const char *shape, size_t n) {
  tspec *t = &f->t[f->nt++];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  snprintf(t->dtype, sizeof t->dtype, "F32");
  snprintf(t->shape, sizeof t->shape, "%s", shape);
  t->begin = t->end = -1;
  t->n = n;
  for (size_t i = 0; i < n; i++)
    t->data[i] = (float)(0.01 * (double)((i * 7 + strlen(name)) % 13) - 0.05);
  if (strstr(name, "0.weight") && !strchr(shape, ',')) /* LayerNorm gains */
    for (size_t i = 0; i < n; i++) t->data[i] = 1.0f;
}

/* The model's tensors in file order: a name and its shape (rows, and
 * columns or 0 for a vector). */
static const struct {
  const char *name;
  int rows, cols;
} valid_tensors[] = {
    {"slice_encoder.0.weight", M, 0}, {"slice_encoder.0.bias", M, 0},
    {"slice_encoder.1.weight", S, M}, {"slice_encoder.1.bias", S, 0},
    {"global_basis", L, C},           {"bottleneck_mlp.0.weight", L, 0},
    {"bottleneck_mlp.0.bias", L, 0},  {"bottleneck_mlp.1.weight", L, L},
    {"bottleneck_mlp.1.bias", L, 0},  {"slice_decoder.0.weight", M, S},
    {"slice_decoder.0.bias", M, 0},
};

static void valid(fspec *f) {
  memset(f, 0, sizeof *f);
  for (size_t i = 0; i < sizeof valid_tensors / sizeof *valid_tensors; i++) {
    int r = valid_tensors[i].rows, c = valid_tensors[i].cols;
    char sh[64];
    if (c)
      snprintf(sh, sizeof sh, "[%d,%d]", r, c);
    else
      snprintf(sh, sizeof sh, "[%d]", r);
    add(f, valid_tensors[i].name, sh, (size_t)r * (size_t)(c ? c : 1));
  }
  snprintf(f->meta, sizeof f->meta, "{\"n_mels\":\"%d\",\"frames\":\"%d\",\"seed\":\"7\"}", M, F);
}

static tspec *find(fspec *f, const char *name) {
  for (int i = 0; i < f->nt; i++)
    if (!strcmp(f->t[i].name, name)) return &f->t[i];
  return NULL;
}

static void drop(fspec *f, const char *name) {
  tspec *t = find(f, name);
  int i = (int)(t - f->t);
  memmove(&f->t[i], &f->t[i + 1], (size_t)(f->nt - i - 1) * sizeof *t);
  f->nt--;
}

/* The whole file in a new buffer. */
static unsigned char *compose(const fspec *f, size_t *len) {
  static char h[16384];
  size_t n = 0, off = 0;
  n += (size_t)snprintf(h + n, sizeof h - n, "{");
  if (f->meta[0]) n += (size_t)snprintf(h + n, sizeof h - n, "\"__metadata__\":%s", f->meta);
  for (int i = 0; i < f->nt; i++) {
    const tspec *t = &f->t[i];
    long b = t->begin >= 0 ? t->begin : (long)off, e = t->end >= 0 ? t->end : b + 4 * (long)t->n;
    n += (size_t)snprintf(h + n, sizeof h - n,
                          "%s\"%s\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%ld,%ld]}",
                          (f->meta[0] || i) ? "," : "", t->name, t->dtype, t->shape, b, e);
    off += 4 * t->n;
  }
  n += (size_t)snprintf(h + n, sizeof h - n, "%s}", f->extra);
  unsigned char *buf = malloc(8 + n + off + 1);
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)n >> (8 * i));
  memcpy(buf + 8, h, n);
  off = 0;
  for (int i = 0; i < f->nt; i++) {
    memcpy(buf + 8 + n + off, f->t[i].data, 4 * f->t[i].n);
    off += 4 * f->t[i].n;
  }
  *len = 8 + n + off;
  return buf;
}

/* Loads the bytes; a NULL `want` means the file must load. */
static void expect(const char *what, const unsigned char *buf, size_t len, const char *want) {
  ssae_err err = {{0}};
  ssae_model *m = ssae_model_load_mem(buf, len, "case.safetensors", &err);
  if (!want) {
    CHECK(m != NULL, "%s: should load, got: %s", what, err.msg);
  } else {
    CHECK(m == NULL, "%s: should be refused", what);
    CHECK(!strncmp(err.msg, "case.safetensors: ", 18), "%s: message does not name the file: %s",
          what, err.msg);
    CHECK(strstr(err.msg, want) != NULL, "%s: message '%s' lacks '%s'", what, err.msg, want);
    printf("  %-34s -> %s\n", what, err.msg);
  }
  ssae_model_free(m);
}

static void expect_spec(const char *what, const fspec *f, const char *want) {
  size_t len;
  unsigned char *b = compose(f, &len);
  expect(what, b, len, want);
  free(b);
}

/* Files that differ from the valid one in a header field: a tensor's
 * dtype or shape (M = 8, F = 2, L = 3, S = 4), the metadata, or members
 * added to the header; and what the refusal must say. */
typedef struct {
  const char *what;
  const char *tensor, *dtype, *shape;
  const char *meta, *extra;
  const char *want;
} header_edit;

static const header_edit header_edits[] = {
    {"wrong dtype (I32)", "global_basis", "I32", NULL, NULL, NULL,
     "has dtype I32; ssae models hold F32"},
    {"unknown dtype", "global_basis", "F33", NULL, NULL, NULL, "unknown dtype \"F33\""},
    {"wrong shape (transposed)", "slice_decoder.0.weight", NULL, "[4,8]", NULL, NULL,
     "slice_decoder.0.weight has shape [4, 8], expected [8, 4]"},
    {"wrong number of dimensions", "bottleneck_mlp.1.bias", NULL, "[3,1]", NULL, NULL,
     "bottleneck_mlp.1.bias has shape [3, 1]; it must have 1 dimension"},
    {"basis width not frames*S", "global_basis", NULL, "[8,3]", NULL, NULL,
     "not a multiple of slice_latent_dim"},
    {"shape vs byte size", "slice_encoder.1.bias", NULL, "[5]", NULL, NULL,
     "need 20 bytes but data_offsets hold 16"},
    {"negative dimension", "slice_encoder.1.bias", NULL, "[-4]", NULL, NULL,
     "shape holds something other than a non-negative integer"},
    {"metadata value not a string", NULL, NULL, NULL, "{\"seed\":7}", NULL,
     "value of \"seed\" is not a string"},
    {"metadata n_mels vs tensors", NULL, NULL, NULL, "{\"n_mels\":\"16\"}", NULL,
     "metadata n_mels = 16 but the tensors have 8"},
    {"metadata frames vs tensors", NULL, NULL, NULL, "{\"frames\":\"3\"}", NULL,
     "metadata frames = 3 but global_basis"},
    {"metadata latent_dim vs tensors", NULL, NULL, NULL, "{\"latent_dim\":\"5\"}", NULL,
     "metadata latent_dim = 5 but the tensors say 3"},
    {"bad feature setting", NULL, NULL, NULL, "{\"sample_rate\":\"fast\"}", NULL,
     "sample_rate"},
    {"bad threshold", NULL, NULL, NULL, "{\"threshold\":\"-3\"}", NULL,
     "metadata: threshold '-3'"},
    {"duplicate metadata key", NULL, NULL, NULL, "{\"seed\":\"1\",\"seed\":\"2\"}", NULL,
     "duplicate name \"seed\""},
    {"duplicate tensor", NULL, NULL, NULL, NULL,
     ",\"global_basis\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}",
     "duplicate name \"global_basis\""},
    {"unknown tensor field", NULL, NULL, NULL, NULL,
     ",\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"crc\":1}",
     "tensor \"x\": unknown field \"crc\""},
};

static void test_malformed(void) {
  printf("malformed model files:\n");
  fspec f;
  size_t len;
  valid(&f);
  unsigned char *good = compose(&f, &len);
  expect("valid file", good, len, NULL);

  expect("empty file", good, 0, "too short");
  expect("cut inside the header", good, 40, "runs past the end of the file");
  expect("cut inside the data", good, len - 10, "run past the end of the data section");
  unsigned char *big = malloc(len);
  memcpy(big, good, len);
  big[5] = 1; /* header length 2^40 + ... */
  expect("header length absurd", big, len, "above the 100 MB limit");
  memcpy(big, good, len);
  big[8] = '[';
  expect("header not an object", big, len, "does not start with a JSON object");
  memcpy(big, good, len);
  big[9] = 'x';
  expect("header not JSON", big, len, "header is not valid JSON: expected a quoted name at byte 1");
  memcpy(big, good, len);
  const char *junk = "\xff\xfe";
  size_t hl = good[0] | (size_t)good[1] << 8;
  char *q = memchr(big + 8, 's', hl); /* inside "seed" */
  memcpy(q, junk, 2);
  expect("invalid UTF-8 in header", big, len, "invalid UTF-8");
  free(big);
  free(good);

  for (size_t i = 0; i < sizeof header_edits / sizeof *header_edits; i++) {
    const header_edit *e = &header_edits[i];
    valid(&f);
    if (e->dtype) snprintf(find(&f, e->tensor)->dtype, sizeof f.t[0].dtype, "%s", e->dtype);
    if (e->shape) snprintf(find(&f, e->tensor)->shape, sizeof f.t[0].shape, "%s", e->shape);
    if (e->meta) snprintf(f.meta, sizeof f.meta, "%s", e->meta);
    if (e->extra) snprintf(f.extra, sizeof f.extra, "%s", e->extra);
    expect_spec(e->what, &f, e->want);
  }
  valid(&f);
  find(&f, "slice_decoder.0.bias")->begin = 100000;
  find(&f, "slice_decoder.0.bias")->end = 100000 + 4 * M;
  expect_spec("offsets outside the file", &f, "run past the end of the data section");
  valid(&f);
  find(&f, "slice_decoder.0.bias")->begin = 40;
  find(&f, "slice_decoder.0.bias")->end = 8;
  expect_spec("offsets reversed", &f, "end before they begin");
  valid(&f);
  find(&f, "slice_encoder.0.bias")->begin = 16;
  find(&f, "slice_encoder.0.bias")->end = 16 + 4 * M;
  expect_spec("overlapping tensors", &f, "overlap in the data section");
  valid(&f);
  find(&f, "bottleneck_mlp.1.weight")->data[4] = NAN;
  expect_spec("NaN weight", &f, "bottleneck_mlp.1.weight holds NaN at index 4");
  valid(&f);
  find(&f, "slice_encoder.1.weight")->data[0] = -INFINITY;
  expect_spec("Inf weight", &f, "slice_encoder.1.weight holds Inf at index 0");
  valid(&f);
  drop(&f, "bottleneck_mlp.0.bias");
  expect_spec("missing tensor", &f, "missing tensor bottleneck_mlp.0.bias");
  valid(&f);
  drop(&f, "global_basis");
  expect_spec("missing basis", &f, "missing tensor global_basis");

  /* Extra tensors are allowed (other scoring modes), of any dtype. */
  valid(&f);
  add(&f, "extra.scale", "[2]", 2);
  snprintf(f.t[f.nt - 1].dtype, 16, "I32");
  expect_spec("extra tensor (allowed)", &f, NULL);
  /* Metadata is optional: missing means the defaults. */
  valid(&f);
  f.meta[0] = '\0';
  expect_spec("no metadata (allowed)", &f, NULL);
}

static int same_floats(const float *a, const float *b, size_t n) {
  return memcmp(a, b, n * sizeof *a) == 0;
}

static void test_roundtrip(const char *dir) {
  ssae_err err = {{0}};
  ssae_dims d = {40, 3, 13, 21};
  ssae_model *m = ssae_model_new(&d, &err);
  CHECK(m, "model_new: %s", err.msg);
  if (!m) return;
  ssae_model_init(m, 42);
  m->threshold = 12.375;
  m->feat.pad_mode = SSAE_PAD_CONSTANT;
  m->feat.sample_rate = 22050;
  CHECK(!ssae_model_meta_set(m, "threshold_method", "quantile 0.99 of training scores", &err),
        "%s", err.msg);
  CHECK(!ssae_model_meta_set(m, "train_files", "a \"quoted\"\\path\n\x01 \xc3\xa9", &err),
        "%s", err.msg);
  char path[512];
  snprintf(path, sizeof path, "%s/roundtrip.safetensors", dir);
  CHECK(!ssae_model_save(m, path, &err), "save: %s", err.msg);
  ssae_model *r = ssae_model_load(path, &err);
  CHECK(r, "load: %s", err.msg);
  if (r) {
    CHECK(!memcmp(&r->d, &m->d, sizeof d), "dims differ");
    size_t n = ssae_model_param_count(&d);
    CHECK(same_floats(r->ln_enc_w, m->ln_enc_w, n), "weights differ after the round trip");
    CHECK(same_floats(r->basis_n, m->basis_n, (size_t)(d.latent * d.frames * d.slice_latent)),
          "normalised basis differs");
    CHECK(r->threshold == 12.375, "threshold %g", r->threshold);
    CHECK(r->feat.pad_mode == SSAE_PAD_CONSTANT && r->feat.sample_rate == 22050 &&
              r->feat.n_mels == 40 && r->feat.frames == 3, "feature settings lost");
    const char *v = ssae_model_meta_get(r, "train_files");
    CHECK(v && !strcmp(v, "a \"quoted\"\\path\n\x01 \xc3\xa9"), "metadata not kept: %s",
          v ? v : "(none)");
    v = ssae_model_meta_get(r, "threshold_method");
    CHECK(v && !strcmp(v, "quantile 0.99 of training scores"), "threshold_method lost");
    v = ssae_model_meta_get(r, "latent_dim");
    CHECK(v && !strcmp(v, "13"), "latent_dim metadata");
    ssae_model *c = ssae_model_clone(r, &err);
    CHECK(c && same_floats(c->ln_enc_w, r->ln_enc_w, n) && c->n_meta == r->n_meta, "clone");
    ssae_model_free(c);
  }
  /* Same seed, same weights; another seed, other weights. */
  ssae_model *m2 = ssae_model_new(&d, &err);
  ssae_model_init(m2, 42);
  CHECK(same_floats(m2->enc_w, m->enc_w, (size_t)(d.slice_latent * d.n_mels)),
        "init not reproducible");
  ssae_model_init(m2, 43);
  CHECK(!same_floats(m2->enc_w, m->enc_w, (size_t)(d.slice_latent * d.n_mels)), "seed ignored");
  m2->dec_b[3] = NAN;
  CHECK(ssae_model_update(m2, &err) == -1 && strstr(err.msg, "slice_decoder.0.bias holds NaN"),
        "update accepted NaN: %s", err.msg);
  ssae_model_free(m2);
  /* A failed save leaves no temp file and names the path. */
  char bad[600];
  snprintf(bad, sizeof bad, "%s/no/such/dir/m.safetensors", dir);
  CHECK(ssae_model_save(m, bad, &err) == -1 && strstr(err.msg, bad), "save to a missing dir: %s",
        err.msg);
  CHECK(ssae_model_load(bad, &err) == NULL && strstr(err.msg, "cannot open model"),
        "load missing: %s", err.msg);
  unlink(path);
  ssae_model_free(r);
  ssae_model_free(m);

  ssae_model *def = ssae_model_load_default(&err);
  CHECK(def, "default model: %s", err.msg);
  ssae_model *def2 = ssae_model_open(NULL, &err);
  CHECK(def2 && def && def2->d.n_mels == def->d.n_mels, "open(NULL)");
  ssae_model_free(def);
  ssae_model_free(def2);
}

static void fill_input(float *x, size_t n, size_t win, unsigned seed) {
  for (size_t i = 0; i < n * win; i++) {
    seed = seed * 1103515245u + 12345u;
    x[i] = -100.0f + 120.0f * (float)((seed >> 8) & 0xFFFF) / 65535.0f;
  }
}

static void test_cpu(void) {
  ssae_err err = {{0}};
  ssae_dims d = {64, 5, 32, 64};
  ssae_model *m = ssae_model_new(&d, &err);
  ssae_model_init(m, 3);
  size_t win = 320, nmax = 300;
  float *x = malloc(nmax * win * sizeof *x), *r1 = malloc(nmax * win * sizeof *r1),
        *r3 = malloc(nmax * win * sizeof *r3), *s1 = malloc(nmax * sizeof *s1),
        *s3 = malloc(nmax * sizeof *s3), *s0 = malloc(nmax * sizeof *s0);
  fill_input(x, nmax, win, 9);
  ssae_cpu *c1 = ssae_cpu_new(m, 1, &err), *c3 = ssae_cpu_new(m, 3, &err);
  CHECK(c1 && c3, "cpu_new: %s", err.msg);
  CHECK(ssae_cpu_threads(c3) == 3, "threads");
  static const size_t sizes[] = {0, 1, 3, 15, 16, 17, 33, 95, 96, 97, 300};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    size_t n = sizes[k];
    CHECK(!ssae_cpu_forward(c1, x, n, s1, r1), "forward");
    CHECK(!ssae_cpu_forward(c3, x, n, s3, r3), "forward");
    CHECK(!ssae_cpu_forward(c3, x, n, s0, NULL), "scores only");
    CHECK(same_floats(s1, s3, n) && same_floats(r1, r3, n * win), "1 vs 3 threads differ (n=%zu)",
          n);
    CHECK(same_floats(s1, s0, n), "score-only path differs (n=%zu)", n);
    for (size_t i = 0; i < n; i++) {
      double e = 0;
      for (size_t j = 0; j < win; j++)
        e += ((double)r1[i * win + j] - x[i * win + j]) *
             ((double)r1[i * win + j] - x[i * win + j]);
      e /= (double)win;
      CHECK(fabs(e - s1[i]) <= 1e-4 * e, "score %zu is not the MSE of its reconstruction", i);
    }
  }
  /* A window alone gives what it gives inside a batch. */
  CHECK(!ssae_cpu_forward(c1, x + 17 * win, 1, s0, NULL), "single");
  CHECK(s0[0] == s1[17], "window 17 alone %.9g, in a batch %.9g", s0[0], s1[17]);
  ssae_cpu_free(c1);
  ssae_cpu_free(c3);
  free(x);
  free(r1);
  free(r3);
  free(s1);
  free(s3);
  free(s0);
  ssae_model_free(m);
}

/* Runs of consecutive frames score exactly as their windows laid out one by
 * one, across block and thread boundaries, on non-default dimensions too. */
static void test_frames(void) {
  static const ssae_dims dims[] = {{64, 5, 32, 64}, {40, 7, 13, 21}};
  for (size_t di = 0; di < sizeof dims / sizeof *dims; di++) {
    ssae_err err = {{0}};
    ssae_model *m = ssae_model_new(&dims[di], &err);
    ssae_model_init(m, 21 + di);
    size_t M = (size_t)dims[di].n_mels, F = (size_t)dims[di].frames, win = M * F;
    size_t nmax = 700;
    float *fr = malloc((nmax + F) * M * sizeof *fr), *w = malloc(nmax * win * sizeof *w),
          *sw = malloc(nmax * sizeof *sw), *sf = malloc(nmax * sizeof *sf);
    fill_input(fr, nmax + F, M, 31);
    for (size_t t = 0; t < nmax; t++) memcpy(w + t * win, fr + t * M, win * sizeof *w);
    ssae_cpu *c1 = ssae_cpu_new(m, 1, &err), *c2 = ssae_cpu_new(m, 2, &err);
    CHECK(c1 && c2, "cpu_new: %s", err.msg);
    static const size_t nfr[] = {0, 1, 4, 5, 6, 7, 36, 37, 38, 100, 133, 134, 701};
    for (size_t k = 0; c1 && c2 && k < sizeof nfr / sizeof *nfr; k++) {
      size_t n = nfr[k], nw = n >= F ? n - F + 1 : 0;
      for (int t = 0; t < 2; t++) {
        memset(sf, 0xff, nmax * sizeof *sf);
        CHECK(!ssae_cpu_score_frames(t ? c2 : c1, fr, n, sf), "score_frames");
        CHECK(!ssae_cpu_forward(t ? c2 : c1, w, nw, sw, NULL), "forward");
        CHECK(same_floats(sf, sw, nw), "%zu frames (F %zu, %d threads): frames and windows differ",
              n, F, t + 1);
        uint32_t u;
        memcpy(&u, sf + nw, sizeof u);
        CHECK(u == 0xffffffffu, "%zu frames: wrote past the %zu scores", n, nw);
      }
    }
    CHECK(ssae_cpu_score_frames(c1, fr, F - 1, NULL) == 0, "fewer frames than a window");
    CHECK(ssae_cpu_score_frames(c1, NULL, 3, sf) == -1, "no frames");
    CHECK(ssae_cpu_score_frames(NULL, fr, 10, sf) == -1, "no object");
    /* The backend entry: the CPU in place, or through a forced fall back. */
    ssae_backend *b = ssae_backend_new(m, "cpu", 0, &err);
    CHECK(b, "backend: %s", err.msg);
    if (b) {
      CHECK(!ssae_backend_run_frames(b, fr, 300, sf, &err), "run_frames: %s", err.msg);
      CHECK(!ssae_cpu_forward(c1, w, 300 - F + 1, sw, NULL), "forward");
      CHECK(same_floats(sf, sw, 300 - F + 1), "backend run_frames differs");
      ssae_backend_fail_next(b);
      memset(sf, 0, nmax * sizeof *sf);
      CHECK(!ssae_backend_run_frames(b, fr, 300, sf, &err), "run_frames after a failure: %s",
            err.msg);
      CHECK(ssae_backend_fell_back(b) && same_floats(sf, sw, 300 - F + 1),
            "run_frames through the fall back");
      ssae_backend_free(b);
    }
    ssae_cpu_free(c1);
    ssae_cpu_free(c2);
    free(fr);
    free(w);
    free(sw);
    free(sf);
    ssae_model_free(m);
  }
}

/* The GELU kernel against libm's erf over the range activations reach, and
 * beyond it (erf saturates). */
static void test_gelu(void) {
  size_t n = 200003;
  double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
  for (size_t i = 0; i < n; i++) x[i] = -14.0 + 28.0 * (double)i / (double)(n - 1);
  x[0] = 0.0, x[1] = -0.0, x[2] = 1e-300, x[3] = -1e-12, x[4] = 40.0, x[5] = -40.0;
  memcpy(y, x, n * sizeof *y);
  ssae_cpu_kernels_init();
  ssae_gelu(y, n);
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    double ref = 0.5 * x[i] * (1.0 + erf(x[i] * M_SQRT1_2));
    double e = fabs(y[i] - ref) / fmax(fabs(x[i]), 1e-300);
    if (e > worst) worst = e, at = i;
  }
  CHECK(worst <= 1e-14, "GELU (%s kernels) off by %.3g (relative to |x|) at x = %.17g",
        ssae_cpu_isa(), worst, x[at]);
  free(x);
  free(y);
}

static int cb_calls;
static char cb_msg[1024];
static void on_fallback(void *user, const char *msg) {
  (void)user;
  cb_calls++;
  snprintf(cb_msg, sizeof cb_msg, "%s", msg);
}

static void test_backend(void) {
  ssae_err err = {{0}};
  ssae_model *m = ssae_model_load_default(&err);
  CHECK(m, "default: %s", err.msg);
  if (!m) return;
  int n_be = 0;
  while (ssae_backends[n_be]) n_be++;
  CHECK(n_be >= 1 && !strcmp(ssae_backends[n_be - 1]->name, "cpu"), "CPU must be the last backend");
  CHECK(ssae_backend_new(m, "tpu", 0, &err) == NULL && strstr(err.msg, "unknown backend 'tpu'"),
        "unknown backend: %s", err.msg);
  size_t n = 50, win = 320;
  float *x = malloc(n * win * sizeof *x), *s_ref = malloc(n * sizeof *s_ref),
        *s = malloc(n * sizeof *s), *r = malloc(n * win * sizeof *r);
  fill_input(x, n, win, 5);
  ssae_backend *b = ssae_backend_new(m, "cpu", 0, &err);
  CHECK(b && !strcmp(ssae_backend_name(b), "cpu"), "cpu backend: %s", err.msg);
  CHECK(!ssae_backend_run(b, x, n, s_ref, NULL, &err), "run");
  ssae_backend_set_fallback_cb(b, on_fallback, NULL);
  ssae_backend_fail_next(b);
  memset(s, 0, n * sizeof *s);
  CHECK(!ssae_backend_run(b, x, n, s, r, &err), "run after a forced failure: %s", err.msg);
  CHECK(cb_calls == 1 && strstr(cb_msg, "switched to the CPU"), "fallback reported %d times: %s",
        cb_calls, cb_msg);
  CHECK(same_floats(s, s_ref, n), "the failed batch was not recomputed");
  CHECK(ssae_backend_fell_back(b), "fell_back");
  CHECK(!ssae_backend_run(b, x, n, s, NULL, &err) && cb_calls == 1, "reported twice");
  ssae_backend_free(b);

  /* Windows where they lie (the engine's rings): runs at a pitch wider than
   * a window, one of one window, one laid out contiguously; the CPU scores
   * them at collect, the same as a laid-out batch. */
  b = ssae_backend_new(m, "cpu", 0, &err);
  CHECK(b, "cpu backend: %s", err.msg);
  const size_t P = win + 16;
  float *slots = malloc(20 * P * sizeof *slots);
  for (size_t i = 0; i < 20 * P; i++) slots[i] = NAN;
  for (size_t i = 0; i < 20; i++) memcpy(slots + i * P + 8, x + i * win, win * sizeof *x);
  const ssae_span sp[3] = {{slots + 8, 19, P}, {slots + 19 * P + 8, 1, P}, {x + 20 * win, 30, win}};
  const ssae_span overlap = {slots + 8, 2, win - 1};
  const ssae_backend_ops *pin = NULL;
  CHECK(!ssae_backend_spans_direct(b), "the CPU reads spans itself?");
  CHECK(ssae_backend_host_register(b, slots, 20 * P * sizeof *slots, &pin) == -1 && !pin,
        "the CPU page-locks memory?");
  CHECK(ssae_backend_submit_spans(b, 0, sp, 3, 49, &err) == -1 && strstr(err.msg, "not 49"),
        "a wrong total: %s", err.msg);
  CHECK(ssae_backend_submit_spans(b, 0, &overlap, 1, 2, &err) == -1 &&
            strstr(err.msg, "overlaps"),
        "overlapping rows: %s", err.msg);
  memset(s, 0, n * sizeof *s);
  CHECK(!ssae_backend_submit_spans(b, 1, sp, 3, 50, &err), "submit_spans: %s", err.msg);
  CHECK(!ssae_backend_collect(b, 1, s, &err), "collect: %s", err.msg);
  CHECK(same_floats(s, s_ref, n), "scores of windows in place differ from the batch's");
  /* A failure of the backend at that step: still scored, from the spans. */
  ssae_backend_fail_next(b);
  memset(s, 0, n * sizeof *s);
  CHECK(!ssae_backend_submit_spans(b, 0, sp, 3, 50, &err) && !ssae_backend_collect(b, 0, s, &err),
        "spans after a forced failure: %s", err.msg);
  CHECK(same_floats(s, s_ref, n), "spans after a forced failure differ");
  free(slots);
  ssae_backend_free(b);

  /* The environment hook fails the 2nd run. */
  setenv("SSAE_BACKEND_FAIL_AT", "2", 1);
  cb_calls = 0;
  b = ssae_backend_new(m, "auto", 64, &err);
  unsetenv("SSAE_BACKEND_FAIL_AT");
  CHECK(b != NULL, "auto: %s", err.msg);
  ssae_backend_set_fallback_cb(b, on_fallback, NULL);
  CHECK(!ssae_backend_run(b, x, n, s, NULL, &err) && cb_calls == 0, "1st run");
  CHECK(!ssae_backend_run(b, x, n, s, NULL, &err) && cb_calls == 1, "2nd run should fall back");
  CHECK(same_floats(s, s_ref, n), "results after the env-forced fallback");
  ssae_backend_free(b);
  free(x);
  free(s_ref);
  free(s);
  free(r);
  ssae_model_free(m);
}

int main(int argc, char **argv) {
  /* test_model [avx2|generic]: caps the kernels' instruction set. */
  if (argc > 1) setenv("SSAE_CPU_KERNELS", argv[1], 1);
  const char *tmp = getenv("TMPDIR");
  char dir[256];
  snprintf(dir, sizeof dir, "%s/ssae_test_model_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_malformed();
  test_roundtrip(dir);
  test_cpu();
  test_frames();
  test_gelu();
  test_backend();
  rmdir(dir);
  return test_done("all checks passed");
}
