#include "ssae_safetensors.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const struct {
  const char *name;
  size_t size;
} dtypes[] = {
    {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
    {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
    {"U16", 2}, {"U8", 1},  {"BOOL", 1},
};

static uint64_t read_le64(const unsigned char *b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | b[i];
  return v;
}

static int has_nul(const char *s, size_t n) { return memchr(s, '\0', n) != NULL; }

static const ssae_json_node *node(const ssae_st *st, size_t i) { return &st->json.nodes[i]; }

static int parse_tensor(ssae_st *st, const ssae_json_node *obj, ssae_st_tensor *t,
                        const unsigned char *data, uint64_t data_len, ssae_err *err) {
  const char *name = obj->key;
  if (obj->type != SSAE_JSON_OBJECT)
    return ssae_err_set(err, "tensor \"%.100s\": entry is not a JSON object", name);
  const ssae_json_node *dtype = NULL, *shape = NULL, *offs = NULL;
  size_t c = obj->first;
  for (size_t k = 0; k < obj->count; k++, c = node(st, c)->next) {
    const ssae_json_node *m = node(st, c);
    if (!strcmp(m->key, "dtype")) dtype = m;
    else if (!strcmp(m->key, "shape")) shape = m;
    else if (!strcmp(m->key, "data_offsets")) offs = m;
    else
      return ssae_err_set(err, "tensor \"%.100s\": unknown field \"%.100s\"", name, m->key);
  }
  if (!dtype) return ssae_err_set(err, "tensor \"%.100s\": no dtype", name);
  if (!shape) return ssae_err_set(err, "tensor \"%.100s\": no shape", name);
  if (!offs) return ssae_err_set(err, "tensor \"%.100s\": no data_offsets", name);
  if (dtype->type != SSAE_JSON_STRING)
    return ssae_err_set(err, "tensor \"%.100s\": dtype is not a string", name);
  t->name = name;
  t->dtype = dtype->str;
  t->elem_size = 0;
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
    if (!strcmp(dtype->str, dtypes[i].name)) t->elem_size = dtypes[i].size;
  if (!t->elem_size)
    return ssae_err_set(err, "tensor \"%.100s\": unknown dtype \"%.40s\"", name, dtype->str);
  if (shape->type != SSAE_JSON_ARRAY)
    return ssae_err_set(err, "tensor \"%.100s\": shape is not an array", name);
  if (shape->count > SSAE_ST_MAX_DIMS)
    return ssae_err_set(err, "tensor \"%.100s\": %zu dimensions (at most %d)", name,
                        shape->count, SSAE_ST_MAX_DIMS);
  t->ndim = (int)shape->count;
  t->numel = 1;
  c = shape->first;
  for (int k = 0; k < t->ndim; k++, c = node(st, c)->next) {
    const ssae_json_node *d = node(st, c);
    if (d->type != SSAE_JSON_NUMBER || !d->is_uint)
      return ssae_err_set(err, "tensor \"%.100s\": shape holds something other than a "
                          "non-negative integer", name);
    t->shape[k] = d->uint_val;
    if (d->uint_val && t->numel > UINT64_MAX / d->uint_val)
      return ssae_err_set(err, "tensor \"%.100s\": shape too large", name);
    t->numel *= d->uint_val;
  }
  if (offs->type != SSAE_JSON_ARRAY || offs->count != 2)
    return ssae_err_set(err, "tensor \"%.100s\": data_offsets is not a pair [begin, end]", name);
  const ssae_json_node *b = node(st, offs->first), *e = node(st, b->next);
  if (b->type != SSAE_JSON_NUMBER || !b->is_uint || e->type != SSAE_JSON_NUMBER || !e->is_uint)
    return ssae_err_set(err, "tensor \"%.100s\": data_offsets are not non-negative integers",
                        name);
  uint64_t begin = b->uint_val, end = e->uint_val;
  if (begin > end)
    return ssae_err_set(err, "tensor \"%.100s\": data_offsets [%" PRIu64 ", %" PRIu64
                        "] end before they begin", name, begin, end);
  if (end > data_len)
    return ssae_err_set(err, "tensor \"%.100s\": data_offsets [%" PRIu64 ", %" PRIu64
                        "] run past the end of the data section (%" PRIu64
                        " bytes): file truncated?", name, begin, end, data_len);
  if (t->numel > UINT64_MAX / t->elem_size || t->numel * t->elem_size != end - begin)
    return ssae_err_set(err, "tensor \"%.100s\": shape and dtype %s need %" PRIu64
                        " bytes but data_offsets hold %" PRIu64, name, t->dtype,
                        t->numel <= UINT64_MAX / t->elem_size ? t->numel * t->elem_size
                                                              : UINT64_MAX,
                        end - begin);
  t->data = data + begin;
  t->nbytes = (size_t)(end - begin);
  return 0;
}

static int cmp_begin(const void *a, const void *b) {
  const ssae_st_tensor *x = *(ssae_st_tensor *const *)a, *y = *(ssae_st_tensor *const *)b;
  return (x->data > y->data) - (x->data < y->data);
}

static int check_overlap(ssae_st *st, ssae_err *err) {
  if (st->n_tensors < 2) return 0;
  ssae_st_tensor **v = malloc(st->n_tensors * sizeof *v);
  if (!v) return ssae_err_set(err, "out of memory reading the header");
  size_t n = 0;
  for (size_t i = 0; i < st->n_tensors; i++)
    if (st->tensors[i].nbytes) v[n++] = &st->tensors[i];
  if (n > 1) qsort(v, n, sizeof *v, cmp_begin);
  int rc = 0;
  for (size_t i = 1; i < n && rc == 0; i++)
    if (v[i - 1]->data + v[i - 1]->nbytes > v[i]->data)
      rc = ssae_err_set(err, "tensors \"%.100s\" and \"%.100s\" overlap in the data section",
                        v[i - 1]->name, v[i]->name);
  free(v);
  return rc;
}

int ssae_st_parse(const void *buf, size_t len, ssae_st *out, ssae_err *err) {
  memset(out, 0, sizeof *out);
  const unsigned char *b = buf;
  if (len < 8)
    return ssae_err_set(err, "%zu bytes: too short for a safetensors file (needs an 8-byte "
                        "header length)", len);
  uint64_t n = read_le64(b);
  if (n > SSAE_ST_MAX_HEADER)
    return ssae_err_set(err, "header length %" PRIu64 " is above the 100 MB limit: not a "
                        "safetensors file?", n);
  if (n > len - 8)
    return ssae_err_set(err, "header length %" PRIu64 " runs past the end of the file (%zu "
                        "bytes): truncated or not a safetensors file", n, len);
  if (n < 2 || b[8] != '{')
    return ssae_err_set(err, "header does not start with a JSON object");
  if (ssae_json_parse((const char *)b + 8, (size_t)n, &out->json, err))
    return ssae_err_prefix(err, "header is not valid JSON");
  const ssae_json_node *root = &out->json.nodes[0];
  if (root->type != SSAE_JSON_OBJECT) {
    ssae_st_free(out);
    return ssae_err_set(err, "header is not a JSON object");
  }
  const unsigned char *data = b + 8 + n;
  uint64_t data_len = len - 8 - n;
  out->tensors = calloc(root->count ? root->count : 1, sizeof *out->tensors);
  if (!out->tensors) goto oom;
  size_t c = root->first;
  for (size_t k = 0; k < root->count; k++, c = node(out, c)->next) {
    const ssae_json_node *m = node(out, c);
    if (has_nul(m->key, m->key_len)) {
      ssae_err_set(err, "a tensor name holds a NUL character");
      goto fail;
    }
    if (!strcmp(m->key, "__metadata__")) {
      if (m->type != SSAE_JSON_OBJECT) {
        ssae_err_set(err, "__metadata__ is not a JSON object");
        goto fail;
      }
      out->meta = calloc(m->count ? m->count : 1, sizeof *out->meta);
      if (!out->meta) goto oom;
      size_t e = m->first;
      for (size_t i = 0; i < m->count; i++, e = node(out, e)->next) {
        const ssae_json_node *v = node(out, e);
        if (v->type != SSAE_JSON_STRING) {
          ssae_err_set(err, "__metadata__ value of \"%.100s\" is not a string", v->key);
          goto fail;
        }
        if (has_nul(v->key, v->key_len) || has_nul(v->str, v->str_len)) {
          ssae_err_set(err, "__metadata__ entry \"%.100s\" holds a NUL character", v->key);
          goto fail;
        }
        out->meta[out->n_meta++] = (ssae_st_meta){v->key, v->str};
      }
      continue;
    }
    if (parse_tensor(out, m, &out->tensors[out->n_tensors], data, data_len, err)) goto fail;
    out->n_tensors++;
  }
  if (check_overlap(out, err)) goto fail;
  return 0;
oom:
  ssae_err_set(err, "out of memory reading the header");
fail:
  ssae_st_free(out);
  return -1;
}

void ssae_st_free(ssae_st *st) {
  if (!st) return;
  ssae_json_free(&st->json);
  free(st->tensors);
  free(st->meta);
  memset(st, 0, sizeof *st);
}

const ssae_st_tensor *ssae_st_find(const ssae_st *st, const char *name) {
  for (size_t i = 0; i < st->n_tensors; i++)
    if (!strcmp(st->tensors[i].name, name)) return &st->tensors[i];
  return NULL;
}

/* --- writing --- */

typedef struct {
  char *s;
  size_t n, cap;
  int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->n + n + 1) cap *= 2;
    char *p = realloc(b->s, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->s = p;
    b->cap = cap;
  }
  memcpy(b->s + b->n, s, n);
  b->n += n;
  b->s[b->n] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_json_string(sbuf *b, const char *s) {
  sb_put(b, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    char esc[8];
    if (c == '"') sb_put(b, "\\\"", 2);
    else if (c == '\\') sb_put(b, "\\\\", 2);
    else if (c < 0x20) {
      snprintf(esc, sizeof esc, "\\u%04x", c);
      sb_put(b, esc, 6);
    } else
      sb_put(b, (const char *)&c, 1);
  }
  sb_put(b, "\"", 1);
}

static int host_is_le(void) {
  const uint16_t one = 1;
  unsigned char c;
  memcpy(&c, &one, 1);
  return c == 1;
}

int ssae_st_write(FILE *f, const ssae_st_meta *meta, size_t n_meta,
                  const ssae_st_out *t, size_t n_t, ssae_err *err) {
  sbuf h = {0};
  char num[64];
  sb_str(&h, "{");
  if (n_meta) {
    sb_str(&h, "\"__metadata__\":{");
    for (size_t i = 0; i < n_meta; i++) {
      if (i) sb_str(&h, ",");
      sb_json_string(&h, meta[i].key);
      sb_str(&h, ":");
      sb_json_string(&h, meta[i].value);
    }
    sb_str(&h, "}");
  }
  uint64_t off = 0;
  for (size_t i = 0; i < n_t; i++) {
    uint64_t numel = 1;
    if (n_meta || i) sb_str(&h, ",");
    sb_json_string(&h, t[i].name);
    sb_str(&h, ":{\"dtype\":\"F32\",\"shape\":[");
    for (int k = 0; k < t[i].ndim; k++) {
      snprintf(num, sizeof num, "%s%" PRIu64, k ? "," : "", t[i].shape[k]);
      sb_str(&h, num);
      numel *= t[i].shape[k];
    }
    snprintf(num, sizeof num, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off,
             off + 4 * numel);
    sb_str(&h, num);
    off += 4 * numel;
  }
  sb_str(&h, "}");
  /* Pad with spaces so that the data section starts 8-byte aligned, as the
   * reference writer does. */
  while (h.n % 8) sb_str(&h, " ");
  if (h.oom) {
    free(h.s);
    return ssae_err_set(err, "out of memory writing the header");
  }
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.n >> (8 * i));
  int bad = fwrite(len8, 1, 8, f) != 8 || fwrite(h.s, 1, h.n, f) != h.n;
  free(h.s);
  int le = host_is_le();
  for (size_t i = 0; i < n_t && !bad; i++) {
    uint64_t numel = 1;
    for (int k = 0; k < t[i].ndim; k++) numel *= t[i].shape[k];
    if (le) {
      bad = fwrite(t[i].data, 4, (size_t)numel, f) != (size_t)numel;
    } else {
      for (uint64_t k = 0; k < numel && !bad; k++) {
        uint32_t u;
        unsigned char o[4];
        memcpy(&u, &t[i].data[k], 4);
        for (int j = 0; j < 4; j++) o[j] = (unsigned char)(u >> (8 * j));
        bad = fwrite(o, 1, 4, f) != 4;
      }
    }
  }
  if (bad) return ssae_err_set(err, "write failed");
  return 0;
}
