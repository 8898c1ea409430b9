/* Schema check of a YAML document with line numbers (see the header).
 * Thread context: main thread (config load). */
#include "ssae_config_yaml.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

typedef struct walk {
  yaml_parser_t parser;
  const char *name;
  ssae_config_lines *lines;
  ssae_err *err;
  int depth;
} walk;

#define MAX_DEPTH 32

static int record(ssae_config_lines *l, const char *path, int line) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 64;
    char **p = realloc(l->paths, cap * sizeof *p);
    if (!p) return -1;
    l->paths = p;
    int *ln = realloc(l->lines, cap * sizeof *ln);
    if (!ln) return -1;
    l->lines = ln;
    l->cap = cap;
  }
  char *s = strdup(path);
  if (!s) return -1;
  l->paths[l->n] = s;
  l->lines[l->n] = line;
  l->n++;
  return 0;
}

int ssae_config_lines_find(const ssae_config_lines *l, const char *path) {
  if (!l) return 0;
  for (size_t i = 0; i < l->n; i++)
    if (strcmp(l->paths[i], path) == 0) return l->lines[i];
  return 0;
}

void ssae_config_lines_free(ssae_config_lines *l) {
  if (!l) return;
  for (size_t i = 0; i < l->n; i++) free(l->paths[i]);
  free(l->paths);
  free(l->lines);
  memset(l, 0, sizeof *l);
}

static int fail(walk *w, const yaml_event_t *ev, const char *path,
                const char *fmt, const char *a, const char *b) {
  char reason[256];
  snprintf(reason, sizeof reason, fmt, a ? a : "", b ? b : "");
  return ssae_err_set(w->err, "%s:%d: %s: %s", w->name,
                      (int)ev->start_mark.line + 1, path[0] ? path : "(top)",
                      reason);
}

static int next(walk *w, yaml_event_t *ev) {
  if (!yaml_parser_parse(&w->parser, ev)) {
    return ssae_err_set(w->err, "%s:%d: YAML syntax: %s", w->name,
                        (int)w->parser.problem_mark.line + 1,
                        w->parser.problem ? w->parser.problem : "error");
  }
  return 0;
}

static const char *kind_name(yaml_event_type_t t) {
  switch (t) {
  case YAML_SCALAR_EVENT: return "a single value";
  case YAML_SEQUENCE_START_EVENT: return "a list";
  case YAML_MAPPING_START_EVENT: return "a mapping";
  case YAML_ALIAS_EVENT: return "an alias";
  default: return "something else";
  }
}

static const char *type_name(cyaml_type_e t) {
  switch (t) {
  case CYAML_INT: return "an integer";
  case CYAML_UINT: return "a non-negative integer";
  case CYAML_BOOL: return "true or false";
  case CYAML_ENUM: return "one of the listed words";
  case CYAML_FLOAT: return "a number";
  case CYAML_STRING: return "a text";
  case CYAML_MAPPING: return "a mapping";
  case CYAML_SEQUENCE: return "a list";
  default: return "a value";
  }
}

/* The same words libcyaml reads as booleans, minus "1"/"0" ambiguity. */
static int parse_bool(const char *s) {
  static const char *const yes[] = {"true", "yes", "on", "enable"};
  static const char *const no[] = {"false", "no", "off", "disable"};
  for (size_t i = 0; i < 4; i++) {
    if (strcasecmp(s, yes[i]) == 0) return 1;
    if (strcasecmp(s, no[i]) == 0) return 0;
  }
  return -1;
}

static int check_scalar(walk *w, const cyaml_schema_value_t *sv,
                        const yaml_event_t *ev, const char *path) {
  const char *s = (const char *)ev->data.scalar.value;
  size_t n = ev->data.scalar.length;
  int plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
  if (plain && (n == 0 || strcmp(s, "~") == 0 || strcmp(s, "null") == 0))
    return fail(w, ev, path, "no value (expected %s)", type_name(sv->type),
                NULL);
  char *end = NULL;
  switch (sv->type) {
  case CYAML_INT:
  case CYAML_UINT: {
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno == ERANGE)
      return fail(w, ev, path, "'%s' is not %s", s, type_name(sv->type));
    if (sv->type == CYAML_UINT && v < 0)
      return fail(w, ev, path, "'%s' is negative", s, NULL);
    if (sv->data_size == 4 && (v > INT_MAX || v < INT_MIN))
      return fail(w, ev, path, "'%s' is out of range", s, NULL);
    return 0;
  }
  case CYAML_FLOAT: {
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v) || errno == ERANGE)
      return fail(w, ev, path, "'%s' is not a number", s, NULL);
    return 0;
  }
  case CYAML_BOOL:
    if (parse_bool(s) < 0)
      return fail(w, ev, path, "'%s' is not true or false", s, NULL);
    return 0;
  case CYAML_ENUM: {
    char list[200] = "";
    for (uint32_t i = 0; i < sv->enumeration.count; i++) {
      if (strcmp(s, sv->enumeration.strings[i].str) == 0) return 0;
      size_t u = strlen(list);
      snprintf(list + u, sizeof list - u, "%s%s", i ? ", " : "",
               sv->enumeration.strings[i].str);
    }
    return fail(w, ev, path, "'%s' is not one of: %s", s, list);
  }
  case CYAML_STRING:
    if (n < sv->string.min)
      return fail(w, ev, path, "empty text", NULL, NULL);
    if (sv->string.max != CYAML_UNLIMITED && n > sv->string.max)
      return fail(w, ev, path, "text too long", NULL, NULL);
    if (strlen(s) != n)
      return fail(w, ev, path, "text contains a NUL byte", NULL, NULL);
    return 0;
  default:
    return fail(w, ev, path, "unsupported schema type", NULL, NULL);
  }
}

static int walk_value(walk *w, const cyaml_schema_value_t *sv,
                      yaml_event_t *ev, const char *path);

static int walk_mapping(walk *w, const cyaml_schema_value_t *sv,
                        yaml_event_t *start, const char *path) {
  const cyaml_schema_field_t *f = sv->mapping.fields;
  size_t nf = 0;
  while (f[nf].key) nf++;
  unsigned char seen[64] = {0};
  if (nf > sizeof seen) return ssae_err_set(w->err, "schema too large");
  for (;;) {
    yaml_event_t ev;
    if (next(w, &ev)) return -1;
    if (ev.type == YAML_MAPPING_END_EVENT) {
      yaml_event_delete(&ev);
      break;
    }
    if (ev.type != YAML_SCALAR_EVENT) {
      int r = fail(w, &ev, path, "a key must be a word, not %s",
                   kind_name(ev.type), NULL);
      yaml_event_delete(&ev);
      return r;
    }
    const char *key = (const char *)ev.data.scalar.value;
    size_t i = 0;
    while (i < nf && strcmp(f[i].key, key) != 0) i++;
    char sub[512];
    snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", key);
    if (i == nf) {
      char list[400] = "";
      for (size_t k = 0; k < nf; k++) {
        size_t u = strlen(list);
        snprintf(list + u, sizeof list - u, "%s%s", k ? ", " : "", f[k].key);
      }
      int r = fail(w, &ev, sub, "unknown key (expected one of: %s)", list,
                   NULL);
      yaml_event_delete(&ev);
      return r;
    }
    if (seen[i]) {
      int r = fail(w, &ev, sub, "key given twice", NULL, NULL);
      yaml_event_delete(&ev);
      return r;
    }
    seen[i] = 1;
    if (record(w->lines, sub, (int)ev.start_mark.line + 1)) {
      yaml_event_delete(&ev);
      return ssae_err_set(w->err, "out of memory");
    }
    yaml_event_delete(&ev);
    yaml_event_t val;
    if (next(w, &val)) return -1;
    int r = walk_value(w, &f[i].value, &val, sub);
    yaml_event_delete(&val);
    if (r) return r;
  }
  for (size_t i = 0; i < nf; i++) {
    if (!seen[i] && !(f[i].value.flags & CYAML_FLAG_OPTIONAL))
      return fail(w, start, path, "missing key '%s'", f[i].key, NULL);
  }
  return 0;
}

static int walk_sequence(walk *w, const cyaml_schema_value_t *sv,
                         yaml_event_t *start, const char *path) {
  uint32_t count = 0;
  for (;;) {
    yaml_event_t ev;
    if (next(w, &ev)) return -1;
    if (ev.type == YAML_SEQUENCE_END_EVENT) {
      yaml_event_delete(&ev);
      break;
    }
    char sub[512];
    snprintf(sub, sizeof sub, "%s[%u]", path, count);
    if (record(w->lines, sub, (int)ev.start_mark.line + 1)) {
      yaml_event_delete(&ev);
      return ssae_err_set(w->err, "out of memory");
    }
    int r = walk_value(w, sv->sequence.entry, &ev, sub);
    yaml_event_delete(&ev);
    if (r) return r;
    count++;
  }
  char num[32];
  if (count < sv->sequence.min) {
    snprintf(num, sizeof num, "%u", sv->sequence.min);
    return fail(w, start, path, "needs at least %s entries", num, NULL);
  }
  if (sv->sequence.max != CYAML_UNLIMITED && count > sv->sequence.max) {
    snprintf(num, sizeof num, "%u", sv->sequence.max);
    return fail(w, start, path, "takes at most %s entries", num, NULL);
  }
  return 0;
}

static int walk_value(walk *w, const cyaml_schema_value_t *sv,
                      yaml_event_t *ev, const char *path) {
  if (ev->type == YAML_ALIAS_EVENT)
    return fail(w, ev, path, "aliases (*name) are not supported", NULL, NULL);
  if (++w->depth > MAX_DEPTH) return fail(w, ev, path, "nested too deep",
                                          NULL, NULL);
  int r;
  if (sv->type == CYAML_MAPPING) {
    r = ev->type == YAML_MAPPING_START_EVENT
            ? walk_mapping(w, sv, ev, path)
            : fail(w, ev, path, "expected a mapping (key: value lines), got %s",
                   kind_name(ev->type), NULL);
  } else if (sv->type == CYAML_SEQUENCE) {
    r = ev->type == YAML_SEQUENCE_START_EVENT
            ? walk_sequence(w, sv, ev, path)
            : fail(w, ev, path, "expected a list, got %s", kind_name(ev->type),
                   NULL);
  } else {
    r = ev->type == YAML_SCALAR_EVENT
            ? check_scalar(w, sv, ev, path)
            : fail(w, ev, path, "expected %s, got %s", type_name(sv->type),
                   kind_name(ev->type));
  }
  w->depth--;
  return r;
}

int ssae_config_yaml_check(const char *text, size_t len, const char *name,
                           const cyaml_schema_value_t *schema,
                           ssae_config_lines *lines, ssae_err *err) {
  walk w = {.name = name, .lines = lines, .err = err};
  if (!yaml_parser_initialize(&w.parser)) return ssae_err_set(err, "out of memory");
  yaml_parser_set_input_string(&w.parser, (const unsigned char *)text, len);
  int r = 0, docs = 0;
  for (;;) {
    yaml_event_t ev;
    if ((r = next(&w, &ev))) break;
    yaml_event_type_t t = ev.type;
    if (t == YAML_DOCUMENT_START_EVENT) {
      yaml_event_delete(&ev);
      if (docs++) {
        r = ssae_err_set(err, "%s:%d: only one YAML document is read", name,
                         (int)w.parser.mark.line + 1);
        break;
      }
      yaml_event_t root;
      if ((r = next(&w, &root))) break;
      r = walk_value(&w, schema, &root, "");
      yaml_event_delete(&root);
      if (r) break;
      continue;
    }
    yaml_event_delete(&ev);
    if (t == YAML_STREAM_END_EVENT) break;
  }
  if (!r && docs == 0) r = ssae_err_set(err, "%s:1: the file is empty", name);
  yaml_parser_delete(&w.parser);
  return r;
}
