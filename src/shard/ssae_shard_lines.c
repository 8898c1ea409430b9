/* The lines of a shard's output: its header, failure records, and the
 * path of each result line (TSV, JSON lines, windows TSV), whose values are
 * checked to be what ssae score writes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_shard.h"

static const char WINDOW_COLUMNS[] = "path\twindow\ttime\tscore";

void ssae_shard_header_init(ssae_shard_header *h, const ssae_shard_list *l, size_t index,
                            size_t count, size_t files) {
  memset(h, 0, sizeof *h);
  h->index = index;
  h->count = count;
  h->inputs = l->n;
  h->files = files;
  memcpy(h->digest, l->digest, sizeof h->digest);
}

int ssae_shard_header_format(const ssae_shard_header *h, ssae_shard_format fmt, char *buf,
                             size_t cap) {
  int n = fmt == SSAE_SHARD_JSON
              ? snprintf(buf, cap,
                         "{\"ssae_shard\":\"%zu/%zu\",\"inputs\":%zu,\"files\":%zu,"
                         "\"digest\":\"%s\"}\n",
                         h->index, h->count, h->inputs, h->files, h->digest)
              : snprintf(buf, cap, "# ssae-shard %zu/%zu inputs=%zu files=%zu digest=%s\n",
                         h->index, h->count, h->inputs, h->files, h->digest);
  return n < 0 || (size_t)n >= cap ? -1 : n;
}

int ssae_shard_header_parse(const char *line, ssae_shard_header *h, int *json, ssae_err *err) {
  memset(h, 0, sizeof *h);
  int is_json = line[0] == '{';
  int got = is_json ? sscanf(line,
                             "{\"ssae_shard\":\"%zu/%zu\",\"inputs\":%zu,\"files\":%zu,"
                             "\"digest\":\"%16[0-9a-f]\"}",
                             &h->index, &h->count, &h->inputs, &h->files, h->digest)
                    : sscanf(line, "# ssae-shard %zu/%zu inputs=%zu files=%zu digest=%16[0-9a-f]",
                             &h->index, &h->count, &h->inputs, &h->files, h->digest);
  /* Strict: the line must be exactly what ssae_shard_header_format writes. */
  char again[256];
  size_t len = strcspn(line, "\n");
  if (got != 5 || strlen(h->digest) != SSAE_SHARD_DIGEST_HEX ||
      ssae_shard_header_format(h, is_json, again, sizeof again) < 0 ||
      strlen(again) != len + 1 || strncmp(again, line, len) || !h->count ||
      h->index >= h->count || h->files > h->inputs)
    return ssae_err_set(err, "not a shard header (an output of ssae score --shard): '%.*s'",
                        (int)(len > 120 ? 120 : len), line);
  if (json) *json = is_json;
  return 0;
}

void ssae_json_write_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

int ssae_shard_write_failed(FILE *f, ssae_shard_format fmt, const char *path, const char *msg) {
  if (fmt == SSAE_SHARD_JSON) {
    fputs("{\"path\":", f);
    ssae_json_write_str(f, path);
    fputs(",\"error\":", f);
    ssae_json_write_str(f, msg);
    fputs("}\n", f);
  } else {
    fprintf(f, "# ssae-failed\t%s\t", path);
    for (const char *p = msg; *p; p++) fputc(*p == '\t' || *p == '\n' || *p == '\r' ? ' ' : *p, f);
    fputc('\n', f);
  }
  return ferror(f) ? -1 : 0;
}

static int hexval(int c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                        : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The JSON string at s (after its opening quote) into a new string; *end:
 * just past the closing quote. */
static char *json_str(const char *s, const char *lim, const char **end) {
  char *out = malloc((size_t)(lim - s) * 3 + 1), *o = out;
  if (!out) return NULL;
  while (s < lim && *s != '"') {
    if (*s != '\\') {
      *o++ = *s++;
      continue;
    }
    if (++s >= lim) break;
    char c = *s++;
    switch (c) {
      case 'n': *o++ = '\n'; break;
      case 't': *o++ = '\t'; break;
      case 'r': *o++ = '\r'; break;
      case 'b': *o++ = '\b'; break;
      case 'f': *o++ = '\f'; break;
      case '"': case '\\': case '/': *o++ = c; break;
      case 'u': {
        unsigned v = 0;
        for (int k = 0; k < 4; k++) {
          int h = s < lim ? hexval(*s++) : -1;
          if (h < 0) goto bad;
          v = v * 16 + (unsigned)h;
        }
        if (!v) goto bad; /* a NUL cannot be part of a path */
        if (v < 0x80) {
          *o++ = (char)v;
        } else if (v < 0x800) {
          *o++ = (char)(0xc0 | v >> 6);
          *o++ = (char)(0x80 | (v & 0x3f));
        } else {
          *o++ = (char)(0xe0 | v >> 12);
          *o++ = (char)(0x80 | ((v >> 6) & 0x3f));
          *o++ = (char)(0x80 | (v & 0x3f));
        }
        break;
      }
      default: goto bad;
    }
  }
  if (s >= lim) goto bad;
  *o = '\0';
  *end = s + 1;
  return out;
bad:
  free(out);
  return NULL;
}

/* [s, lim) is a number as ssae score prints one (printf's %g or %f: NaN
 * and infinities included). */
static int is_number(const char *s, const char *lim) {
  if (s == lim || lim - s > 64) return 0;
  char buf[65], *end;
  memcpy(buf, s, (size_t)(lim - s));
  buf[lim - s] = '\0';
  errno = 0;
  (void)strtod(buf, &end);
  return *end == '\0' && !(buf[0] == ' ' || buf[0] == '\t' || buf[0] == '\n');
}

/* [s, lim) is a count: decimal digits, no sign, below 2^63. */
static int is_count(const char *s, const char *lim) {
  if (s == lim || lim - s > 18) return 0;
  for (const char *c = s; c < lim; c++)
    if (*c < '0' || *c > '9') return 0;
  return 1;
}

static int is_verdict(const char *s, const char *lim) {
  static const char *const v[] = {"normal", "anomaly", "unknown"};
  for (size_t i = 0; i < sizeof v / sizeof *v; i++)
    if ((size_t)(lim - s) == strlen(v[i]) && !memcmp(s, v[i], (size_t)(lim - s))) return 1;
  return 0;
}

/* A value of a result line: its name, and the check of its text. */
typedef struct value_kind {
  const char *name;
  int (*ok)(const char *s, const char *lim);
} value_kind;

/* ssae score's values after the path: file score, windows, verdict (its
 * result lines, TSV or JSON); window, time, score (--windows). */
static const value_kind RESULT_VALUES[3] = {
    {"file score", is_number}, {"windows", is_count}, {"verdict", is_verdict}};
static const value_kind WINDOW_VALUES[3] = {
    {"window", is_count}, {"time", is_number}, {"score", is_number}};

static int value_check(const value_kind *v, const char *s, const char *lim, ssae_err *err) {
  if (v->ok(s, lim)) return 0;
  return ssae_err_set(err, "%s '%.*s' is not one ssae score writes", v->name,
                      (int)(lim - s > 40 ? 40 : lim - s), s);
}

/* The values after a TSV result line's path, the three fields at its end
 * (a path may hold a tab; the values cannot). *path_end: where the path
 * ends. 0 when they are what ssae score writes. */
static int tsv_values(const char *p, const char *lim, ssae_shard_format fmt,
                      const char **path_end, ssae_err *err) {
  const value_kind *kinds = fmt == SSAE_SHARD_WINDOWS ? WINDOW_VALUES : RESULT_VALUES;
  const char *end = lim;
  for (int k = 2; k >= 0; k--) {
    const char *c = end;
    while (c > p && c[-1] != '\t') c--;
    if (c == p)
      return ssae_err_set(err, "%d fields, not the 4 of a result line of ssae score", 3 - k);
    if (value_check(&kinds[k], c, end, err)) return -1;
    end = c - 1;
  }
  *path_end = end;
  return 0;
}

/* After a JSON result line's path: ,"score":N,"windows":N,"verdict":"V"} */
static int json_values(const char *s, const char *lim, ssae_err *err) {
  static const char *const keys[3] = {",\"score\":", ",\"windows\":", ",\"verdict\":\""};
  static const char ends[3] = {',', ',', '"'};
  const char *c = s;
  for (int k = 0; k < 3; k++) {
    const size_t kl = strlen(keys[k]);
    if ((size_t)(lim - c) < kl || memcmp(c, keys[k], kl)) goto bad;
    const char *v = c += kl;
    while (c < lim && *c != ends[k]) c++;
    if (value_check(&RESULT_VALUES[k], v, c, err)) return -1;
  }
  if (lim - c == 2 && !memcmp(c, "\"}", 2)) return 0;
bad:
  return ssae_err_set(err, "not the score, windows and verdict of ssae score --format json");
}

int ssae_shard_line_parse(const char *line, size_t len, ssae_shard_format fmt,
                          ssae_line_kind *kind, char **path, ssae_err *err) {
  *path = NULL;
  const char *lim = line + len;
  if (memchr(line, '\0', len)) return ssae_err_set(err, "a line holds a NUL byte");
  if (fmt == SSAE_SHARD_JSON) {
    static const char key[] = "{\"path\":\"";
    const char *end;
    if (len < sizeof key || memcmp(line, key, sizeof key - 1) ||
        !(*path = json_str(line + sizeof key - 1, lim, &end)))
      return ssae_err_set(err, "not a result line of ssae score --format json: '%.*s'",
                          (int)(len > 120 ? 120 : len), line);
    static const char fail[] = ",\"error\":";
    *kind = (size_t)(lim - end) >= sizeof fail - 1 && !memcmp(end, fail, sizeof fail - 1)
                ? SSAE_LINE_FAILED : SSAE_LINE_RESULT;
    if (*kind == SSAE_LINE_RESULT && json_values(end, lim, err)) {
      free(*path);
      *path = NULL;
      return -1;
    }
    return 0;
  }
  static const char failed[] = "# ssae-failed\t";
  const char *p = line;
  *kind = SSAE_LINE_RESULT;
  if (fmt == SSAE_SHARD_WINDOWS && len == sizeof WINDOW_COLUMNS - 1 &&
      !memcmp(line, WINDOW_COLUMNS, len)) {
    *kind = SSAE_LINE_COLUMNS;
  } else if (len >= sizeof failed - 1 && !memcmp(line, failed, sizeof failed - 1)) {
    *kind = SSAE_LINE_FAILED;
    p += sizeof failed - 1;
  } else if (len >= 2 && line[0] == '#' && line[1] == ' ') {
    return ssae_err_set(err, "a header or comment inside the results (two outputs joined?): "
                             "'%.*s'", (int)(len > 120 ? 120 : len), line);
  }
  const char *tab = memchr(p, '\t', (size_t)(lim - p));
  if (!tab || tab == p)
    return ssae_err_set(err, "not a result line of ssae score: '%.*s'",
                        (int)(len > 120 ? 120 : len), line);
  if (*kind == SSAE_LINE_RESULT && tsv_values(p, lim, fmt, &tab, err))
    return ssae_err_prefix(err, "'%.*s'", (int)(len > 120 ? 120 : len), line);
  if (tab == p)
    return ssae_err_set(err, "a result line without a path: '%.*s'",
                        (int)(len > 120 ? 120 : len), line);
  if (!(*path = strndup(p, (size_t)(tab - p)))) return ssae_err_set(err, "out of memory");
  return 0;
}
