#include "ssae_json.h"

#include <stdlib.h>
#include <string.h>

/* Deep nesting has no use in a safetensors header and would only let a
 * hostile file exhaust the stack. */
#define JSON_MAX_DEPTH 64

typedef struct {
  const char *s;
  size_t len, pos;
  ssae_json *j;
  size_t cap;
  char *sb;
  size_t sb_pos;
  ssae_err *err;
} parser;

static int fail(parser *p, const char *what) {
  return ssae_err_set(p->err, "%s at byte %zu of the JSON header", what, p->pos);
}

static void skip_ws(parser *p) {
  while (p->pos < p->len) {
    char c = p->s[p->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->pos++;
  }
}

static int new_node(parser *p, ssae_json_type t, size_t *idx) {
  if (p->j->n_nodes == p->cap) {
    size_t cap = p->cap ? p->cap * 2 : 32;
    ssae_json_node *n = realloc(p->j->nodes, cap * sizeof *n);
    if (!n) return ssae_err_set(p->err, "out of memory parsing the JSON header");
    p->j->nodes = n;
    p->cap = cap;
  }
  *idx = p->j->n_nodes++;
  memset(&p->j->nodes[*idx], 0, sizeof p->j->nodes[*idx]);
  p->j->nodes[*idx].type = t;
  return 0;
}

static void put_utf8(parser *p, uint32_t cp) {
  char *o = p->sb + p->sb_pos;
  if (cp < 0x80) {
    o[0] = (char)cp;
    p->sb_pos += 1;
  } else if (cp < 0x800) {
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    p->sb_pos += 2;
  } else if (cp < 0x10000) {
    o[0] = (char)(0xE0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    p->sb_pos += 3;
  } else {
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    p->sb_pos += 4;
  }
}

static int hex4(parser *p, uint32_t *out) {
  if (p->len - p->pos < 4) return fail(p, "truncated \\u escape");
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p->s[p->pos + i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
    else return fail(p, "bad \\u escape");
  }
  p->pos += 4;
  *out = v;
  return 0;
}

/* Length of the valid UTF-8 sequence at s (no overlongs, no surrogates, at
 * most U+10FFFF), or 0. */
static size_t utf8_len(const unsigned char *s, size_t avail) {
  unsigned c = s[0];
  size_t n;
  uint32_t cp, min;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) n = 2, cp = c & 0x1F, min = 0x80;
  else if ((c & 0xF0) == 0xE0) n = 3, cp = c & 0x0F, min = 0x800;
  else if ((c & 0xF8) == 0xF0) n = 4, cp = c & 0x07, min = 0x10000;
  else return 0;
  if (avail < n) return 0;
  for (size_t i = 1; i < n; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

/* At the opening quote; decodes into the string buffer. */
static int parse_string(parser *p, const char **out, size_t *out_len) {
  p->pos++;
  char *start = p->sb + p->sb_pos;
  for (;;) {
    if (p->pos >= p->len) return fail(p, "unterminated string");
    unsigned char c = (unsigned char)p->s[p->pos];
    if (c == '"') {
      p->pos++;
      break;
    }
    if (c < 0x20) return fail(p, "control character inside a string");
    if (c == '\\') {
      p->pos++;
      if (p->pos >= p->len) return fail(p, "unterminated string");
      char e = p->s[p->pos++];
      switch (e) {
        case '"': p->sb[p->sb_pos++] = '"'; break;
        case '\\': p->sb[p->sb_pos++] = '\\'; break;
        case '/': p->sb[p->sb_pos++] = '/'; break;
        case 'b': p->sb[p->sb_pos++] = '\b'; break;
        case 'f': p->sb[p->sb_pos++] = '\f'; break;
        case 'n': p->sb[p->sb_pos++] = '\n'; break;
        case 'r': p->sb[p->sb_pos++] = '\r'; break;
        case 't': p->sb[p->sb_pos++] = '\t'; break;
        case 'u': {
          uint32_t cp;
          if (hex4(p, &cp)) return -1;
          if (cp >= 0xDC00 && cp <= 0xDFFF) return fail(p, "lone low surrogate in \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t lo;
            if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
              return fail(p, "lone high surrogate in \\u escape");
            p->pos += 2;
            if (hex4(p, &lo)) return -1;
            if (lo < 0xDC00 || lo > 0xDFFF) return fail(p, "bad surrogate pair in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          /* Escapes are at least 6 bytes for at most 4 of output. */
          put_utf8(p, cp);
          break;
        }
        default:
          p->pos--;
          return fail(p, "bad escape in string");
      }
      continue;
    }
    size_t n = utf8_len((const unsigned char *)p->s + p->pos, p->len - p->pos);
    if (!n) return fail(p, "invalid UTF-8 in string");
    memcpy(p->sb + p->sb_pos, p->s + p->pos, n);
    p->sb_pos += n;
    p->pos += n;
  }
  *out = start;
  *out_len = (size_t)(p->sb + p->sb_pos - start);
  p->sb[p->sb_pos++] = '\0';
  return 0;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int parse_number(parser *p, size_t idx) {
  size_t start = p->pos;
  int simple = 1;
  if (p->s[p->pos] == '-') {
    simple = 0;
    p->pos++;
  }
  if (p->pos >= p->len || !is_digit(p->s[p->pos])) return fail(p, "bad number");
  if (p->s[p->pos] == '0') {
    p->pos++;
  } else {
    while (p->pos < p->len && is_digit(p->s[p->pos])) p->pos++;
  }
  size_t int_end = p->pos;
  if (p->pos < p->len && p->s[p->pos] == '.') {
    simple = 0;
    p->pos++;
    if (p->pos >= p->len || !is_digit(p->s[p->pos])) return fail(p, "bad number");
    while (p->pos < p->len && is_digit(p->s[p->pos])) p->pos++;
  }
  if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
    simple = 0;
    p->pos++;
    if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
    if (p->pos >= p->len || !is_digit(p->s[p->pos])) return fail(p, "bad number");
    while (p->pos < p->len && is_digit(p->s[p->pos])) p->pos++;
  }
  ssae_json_node *n = &p->j->nodes[idx];
  if (simple) {
    uint64_t v = 0;
    int fits = 1;
    for (size_t i = start; i < int_end; i++) {
      unsigned d = (unsigned)(p->s[i] - '0');
      if (v > (UINT64_MAX - d) / 10) {
        fits = 0;
        break;
      }
      v = v * 10 + d;
    }
    n->is_uint = fits;
    n->uint_val = fits ? v : 0;
  }
  return 0;
}

typedef struct {
  ssae_json_node *nodes;
  size_t idx;
} keyref;

static int cmp_keyref(const void *a, const void *b) {
  const keyref *x = a, *y = b;
  const ssae_json_node *nx = &x->nodes[x->idx], *ny = &y->nodes[y->idx];
  size_t n = nx->key_len < ny->key_len ? nx->key_len : ny->key_len;
  int c = memcmp(nx->key, ny->key, n);
  if (c) return c;
  return (nx->key_len > ny->key_len) - (nx->key_len < ny->key_len);
}

static int check_duplicates(parser *p, size_t obj) {
  size_t count = p->j->nodes[obj].count;
  if (count < 2) return 0;
  keyref *v = malloc(count * sizeof *v);
  if (!v) return ssae_err_set(p->err, "out of memory parsing the JSON header");
  size_t k = 0;
  for (size_t c = p->j->nodes[obj].first; k < count; c = p->j->nodes[c].next)
    v[k++] = (keyref){p->j->nodes, c};
  qsort(v, count, sizeof *v, cmp_keyref);
  for (size_t i = 1; i < count; i++) {
    if (cmp_keyref(&v[i - 1], &v[i]) == 0) {
      const char *key = p->j->nodes[v[i].idx].key;
      ssae_err_set(p->err, "duplicate name \"%.100s\" in a JSON object", key);
      free(v);
      return -1;
    }
  }
  free(v);
  return 0;
}

static int parse_value(parser *p, int depth, size_t *out);

static int parse_container(parser *p, int depth, size_t idx, int is_obj) {
  char close = is_obj ? '}' : ']';
  p->pos++;
  skip_ws(p);
  if (p->pos < p->len && p->s[p->pos] == close) {
    p->pos++;
    return 0;
  }
  size_t last = 0;
  for (;;) {
    const char *key = NULL;
    size_t key_len = 0;
    skip_ws(p);
    if (is_obj) {
      if (p->pos >= p->len || p->s[p->pos] != '"') return fail(p, "expected a quoted name");
      if (parse_string(p, &key, &key_len)) return -1;
      skip_ws(p);
      if (p->pos >= p->len || p->s[p->pos] != ':') return fail(p, "expected ':'");
      p->pos++;
    }
    size_t child;
    if (parse_value(p, depth + 1, &child)) return -1;
    ssae_json_node *c = &p->j->nodes[child];
    c->key = key;
    c->key_len = key_len;
    ssae_json_node *self = &p->j->nodes[idx];
    if (self->count == 0) self->first = child;
    else p->j->nodes[last].next = child;
    self->count++;
    last = child;
    skip_ws(p);
    if (p->pos >= p->len) return fail(p, is_obj ? "unterminated object" : "unterminated array");
    if (p->s[p->pos] == ',') {
      p->pos++;
      continue;
    }
    if (p->s[p->pos] == close) {
      p->pos++;
      break;
    }
    return fail(p, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
  }
  return is_obj ? check_duplicates(p, idx) : 0;
}

static int literal(parser *p, const char *word) {
  size_t n = strlen(word);
  if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
    return fail(p, "unexpected character");
  p->pos += n;
  return 0;
}

static int parse_value(parser *p, int depth, size_t *out) {
  if (depth > JSON_MAX_DEPTH) return fail(p, "nesting too deep");
  skip_ws(p);
  if (p->pos >= p->len) return fail(p, "unexpected end");
  char c = p->s[p->pos];
  size_t idx;
  switch (c) {
    case '{':
    case '[':
      if (new_node(p, c == '{' ? SSAE_JSON_OBJECT : SSAE_JSON_ARRAY, &idx)) return -1;
      if (parse_container(p, depth, idx, c == '{')) return -1;
      break;
    case '"': {
      const char *s;
      size_t n;
      if (new_node(p, SSAE_JSON_STRING, &idx)) return -1;
      if (parse_string(p, &s, &n)) return -1;
      p->j->nodes[idx].str = s;
      p->j->nodes[idx].str_len = n;
      break;
    }
    case 't':
      if (new_node(p, SSAE_JSON_TRUE, &idx) || literal(p, "true")) return -1;
      break;
    case 'f':
      if (new_node(p, SSAE_JSON_FALSE, &idx) || literal(p, "false")) return -1;
      break;
    case 'n':
      if (new_node(p, SSAE_JSON_NULL, &idx) || literal(p, "null")) return -1;
      break;
    default:
      if (c != '-' && !is_digit(c)) return fail(p, "unexpected character");
      if (new_node(p, SSAE_JSON_NUMBER, &idx) || parse_number(p, idx)) return -1;
      break;
  }
  *out = idx;
  return 0;
}

int ssae_json_parse(const char *text, size_t len, ssae_json *out, ssae_err *err) {
  memset(out, 0, sizeof *out);
  parser p = {.s = text, .len = len, .j = out, .err = err};
  /* Decoded strings never outgrow their JSON text (quotes make room for the
   * terminating NULs). */
  out->strbuf = malloc(len + 1);
  if (!out->strbuf) return ssae_err_set(err, "out of memory parsing the JSON header");
  p.sb = out->strbuf;
  size_t root;
  if (parse_value(&p, 0, &root)) goto fail;
  skip_ws(&p);
  if (p.pos != len) {
    fail(&p, "trailing data after the JSON value");
    goto fail;
  }
  return 0;
fail:
  ssae_json_free(out);
  return -1;
}

void ssae_json_free(ssae_json *j) {
  if (!j) return;
  free(j->nodes);
  free(j->strbuf);
  memset(j, 0, sizeof *j);
}
