#include "ssae_merge.h"

#include "ssae_outfile.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  char *name;
  char *text; /* whole file */
  size_t len;
  ssae_shard_header h;
  int json, windows;
  size_t records; /* results and failure records (windows: files) */
} part;

typedef struct {
  char *path;
  const char *line; /* into its part's text, '\n' included */
  size_t len;
  size_t part, seq;
  int failed;
} record;

static void note(const ssae_merge_opts *o, const char *fmt, ...) SSAE_PRINTF(2, 3);
static void note(const ssae_merge_opts *o, const char *fmt, ...) {
  if (!o || !o->note) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  o->note(o->user, msg);
}

static int cmp_record(const void *a, const void *b) {
  const record *x = a, *y = b;
  int c = ssae_path_cmp(x->path, y->path);
  if (c) return c;
  if (x->part != y->part) return x->part < y->part ? -1 : 1;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int read_all(const char *name, char **text, size_t *len, ssae_err *err) {
  FILE *f = fopen(name, "rb");
  if (!f) return ssae_err_set(err, "%s: cannot read: %s", name, strerror(errno));
  size_t cap = 1 << 16, n = 0;
  char *b = malloc(cap);
  for (;;) {
    if (!b) break;
    n += fread(b + n, 1, cap - n - 1, f);
    if (n < cap - 1) break;
    char *nb = realloc(b, cap *= 2);
    if (!nb) free(b);
    b = nb;
  }
  int bad = ferror(f);
  fclose(f);
  if (!b || bad) {
    free(b);
    return ssae_err_set(err, "%s: %s", name, b ? "read failed" : "out of memory");
  }
  b[n] = '\0';
  *text = b;
  *len = n;
  return 0;
}

/* Writes the result; out NULL or "-": stdout, else through ssae_outfile
 * (a temporary file beside out, synced, renamed over it). */
static int write_result(const char *out, const record *r, size_t n,
                        int windows, ssae_err *err) {
  if (!out || !strcmp(out, "-")) {
    if (windows) fputs("path\twindow\ttime\tscore\n", stdout);
    for (size_t i = 0; i < n; i++)
      if (!r[i].failed) fwrite(r[i].line, 1, r[i].len, stdout);
    return fflush(stdout) == 0 && !ferror(stdout) ? 0
                                                  : ssae_err_set(err, "stdout: write failed");
  }
  ssae_outfile *f = ssae_outfile_open(out, err);
  if (!f) return -1;
  if (windows) ssae_outfile_printf(f, "path\twindow\ttime\tscore\n");
  for (size_t i = 0; i < n; i++)
    if (!r[i].failed) ssae_outfile_write(f, r[i].line, r[i].len);
  return ssae_outfile_commit(f, err);
}

/* Splits each part into records after checking its header. */
static int load_part(part *p, size_t pi, record **recs, size_t *nrec, size_t *rcap,
                     ssae_err *err) {
  if (read_all(p->name, &p->text, &p->len, err)) return -1;
  if (p->len && p->text[p->len - 1] != '\n')
    return ssae_err_set(err, "%s: the last line is cut short (a task still writing, or "
                             "killed?)", p->name);
  char *nl = memchr(p->text, '\n', p->len);
  if (!nl) return ssae_err_set(err, "%s: empty, not an output of ssae score --shard", p->name);
  *nl = '\0';
  int hr = ssae_shard_header_parse(p->text, &p->h, &p->json, err);
  *nl = '\n';
  if (hr) return ssae_err_prefix(err, "%s", p->name);
  const char *s = nl + 1, *end = p->text + p->len;
  size_t lineno = 1;
  const char *cols = "path\twindow\ttime\tscore\n";
  if (!p->json && (size_t)(end - s) >= strlen(cols) && !memcmp(s, cols, strlen(cols))) {
    p->windows = 1;
    s += strlen(cols);
    lineno++;
  }
  ssae_shard_format fmt = p->json ? SSAE_SHARD_JSON : p->windows ? SSAE_SHARD_WINDOWS
                                                                  : SSAE_SHARD_TSV;
  char *last_path = NULL;
  while (s < end) {
    const char *e = memchr(s, '\n', (size_t)(end - s));
    lineno++;
    ssae_line_kind kind;
    char *path;
    if (ssae_shard_line_parse(s, (size_t)(e - s), fmt, &kind, &path, err)) {
      free(last_path);
      return ssae_err_prefix(err, "%s line %zu", p->name, lineno);
    }
    if (kind == SSAE_LINE_COLUMNS) {
      free(path);
      free(last_path);
      return ssae_err_set(err, "%s line %zu: a column line inside the results", p->name, lineno);
    }
    if (*nrec == *rcap) {
      size_t c = *rcap ? *rcap * 2 : 1024;
      record *nr = realloc(*recs, c * sizeof *nr);
      if (!nr) {
        free(path);
        free(last_path);
        return ssae_err_set(err, "out of memory");
      }
      *recs = nr;
      *rcap = c;
    }
    if (!p->windows || !last_path || strcmp(last_path, path)) p->records++;
    if (p->windows) {
      free(last_path);
      last_path = strdup(path);
    }
    (*recs)[(*nrec)++] = (record){path, s, (size_t)(e - s) + 1, pi, *nrec,
                                  kind == SSAE_LINE_FAILED};
    s = e + 1;
  }
  free(last_path);
  return 0;
}

/* With the input list: every record in it, every input present, each in
 * the shard the partition gives it (a task of another ssae version could
 * cut differently). */
static int list_check(const ssae_merge_opts *o, const part *parts, const record *recs,
                      size_t nrec, size_t count) {
  const ssae_shard_list *l = o->list;
  int rc = 0;
  size_t *of = malloc((l->n ? l->n : 1) * sizeof *of);
  if (!of || ssae_shard_partition(l, count, of, NULL)) {
    free(of);
    of = NULL;
  }
  size_t j = 0;
  for (size_t i = 0; i < l->n; i++) {
    while (j < nrec && ssae_path_cmp(recs[j].path, l->paths[i]) < 0) {
      note(o, "%s is not in the input list", recs[j].path);
      rc = -1;
      j++;
    }
    int found = 0;
    for (; j < nrec && !ssae_path_cmp(recs[j].path, l->paths[i]); j++) {
      const part *p = &parts[recs[j].part];
      if (!found && of && of[i] != p->h.index) {
        note(o, "%s is in %s (shard %zu/%zu) but belongs to shard %zu", l->paths[i], p->name,
             p->h.index, count, of[i]);
        rc = -1;
      }
      found = 1;
    }
    if (!found && !parts[0].windows) {
      note(o, "%s missing", l->paths[i]);
      rc = -1;
    }
  }
  for (; j < nrec; j++) {
    if (j && !ssae_path_cmp(recs[j].path, recs[j - 1].path)) continue;
    note(o, "%s is not in the input list", recs[j].path);
    rc = -1;
  }
  free(of);
  return rc;
}

int ssae_merge(char *const *names, size_t n_parts, const char *out, const ssae_merge_opts *o,
               ssae_err *err) {
  if (!n_parts) return ssae_err_set(err, "no shard outputs to merge");
  part *parts = calloc(n_parts, sizeof *parts);
  record *recs = NULL;
  size_t nrec = 0, rcap = 0, *by_index = NULL;
  int rc = 0;
  if (!parts) return ssae_err_set(err, "out of memory");
  for (size_t i = 0; i < n_parts && !rc; i++) {
    parts[i].name = names[i];
    rc = load_part(&parts[i], i, &recs, &nrec, &rcap, err);
  }
  if (rc) goto done;

  /* One list, one count, one kind of output. */
  const part *p0 = &parts[0];
  for (size_t i = 1; i < n_parts && !rc; i++) {
    const part *p = &parts[i];
    if (strcmp(p->h.digest, p0->h.digest) || p->h.inputs != p0->h.inputs)
      rc = ssae_err_set(err, "%s is from a list of %zu inputs (digest %s), %s from %zu (digest "
                        "%s): not mixing them", p->name, p->h.inputs, p->h.digest, p0->name,
                        p0->h.inputs, p0->h.digest);
    else if (p->h.count != p0->h.count)
      rc = ssae_err_set(err, "%s is shard %zu/%zu, %s shard %zu/%zu: one list cut two ways",
                        p->name, p->h.index, p->h.count, p0->name, p0->h.index, p0->h.count);
    else if (p->json != p0->json || p->windows != p0->windows)
      rc = ssae_err_set(err, "%s and %s are different kinds of output (TSV, JSON, windows)",
                        p->name, p0->name);
  }
  if (rc) goto done;
  if (o && o->list && strcmp(o->list->digest, p0->h.digest)) {
    rc = ssae_err_set(err, "the parts are from a list of %zu inputs (digest %s), not the one "
                      "given (%zu inputs, digest %s)", p0->h.inputs, p0->h.digest, o->list->n,
                      o->list->digest);
    goto done;
  }

  /* Every shard exactly once, each complete. */
  size_t count = p0->h.count, missing = 0, twice = 0;
  if (!(by_index = calloc(count, sizeof *by_index))) {
    rc = ssae_err_set(err, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < n_parts; i++) {
    size_t k = parts[i].h.index;
    if (by_index[k]) {
      note(o, "shard %zu/%zu given twice: %s and %s", k, count, parts[by_index[k] - 1].name,
           parts[i].name);
      twice++;
      rc = -1;
    }
    by_index[k] = i + 1;
    if (!parts[i].windows && parts[i].records != parts[i].h.files) {
      note(o, "%s holds %zu results for the %zu inputs of shard %zu/%zu%s", parts[i].name,
           parts[i].records, parts[i].h.files, k, count,
           parts[i].records < parts[i].h.files ? " (a task that did not finish?)" : "");
      rc = -1;
    }
  }
  for (size_t k = 0; k < count; k++)
    if (!by_index[k]) {
      note(o, "shard %zu/%zu missing", k, count);
      missing++;
      rc = -1;
    }

  /* Every input once, in canonical order. */
  qsort(recs, nrec, sizeof *recs, cmp_record);
  size_t distinct = 0, dups = 0, failed = 0;
  for (size_t i = 0; i < nrec; i++) {
    if (i && !ssae_path_cmp(recs[i].path, recs[i - 1].path)) {
      const part *pa = &parts[recs[i - 1].part], *pb = &parts[recs[i].part];
      if (p0->windows && pa == pb) continue;
      /* A shard given twice was named already, not each of its inputs. */
      if (pa->h.index != pb->h.index)
        note(o, "%s appears twice: in %s and %s", recs[i].path, pa->name, pb->name);
      dups++;
      continue;
    }
    distinct++;
    failed += (size_t)recs[i].failed;
  }
  if (o && o->list && list_check(o, parts, recs, nrec, count)) rc = -1;
  if (dups) rc = -1;
  if (!p0->windows && distinct != p0->h.inputs) rc = -1;
  if (rc) {
    if (twice)
      ssae_err_set(err, "%zu shard%s given twice", twice, twice > 1 ? "s" : "");
    else if (dups)
      ssae_err_set(err, "%zu inputs appear more than once", dups);
    else if (missing)
      ssae_err_set(err, "%zu of %zu shards missing", missing, count);
    else if (!p0->windows && distinct != p0->h.inputs)
      ssae_err_set(err, "%zu of %zu inputs missing", p0->h.inputs - distinct, p0->h.inputs);
    else
      ssae_err_set(err, "the parts do not add up to one result");
    goto done;
  }
  if (write_result(out, recs, nrec, p0->windows, err)) {
    rc = -1;
    goto done;
  }
  for (size_t i = 0; failed && i < nrec; i++)
    if (recs[i].failed)
      note(o, "%s: failed in shard %zu/%zu (%s)", recs[i].path, parts[recs[i].part].h.index,
           count, parts[recs[i].part].name);
  if (failed) {
    ssae_err_set(err, "%zu of %zu inputs failed", failed, p0->h.inputs);
    rc = 1;
  }
done:
  for (size_t i = 0; i < nrec; i++) free(recs[i].path);
  free(recs);
  for (size_t i = 0; i < n_parts; i++) free(parts[i].text);
  free(parts);
  free(by_index);
  return rc;
}
