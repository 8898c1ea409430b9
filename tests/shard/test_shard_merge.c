/* ssae_merge: shard outputs into one result in input order; missing,
 * duplicated, incomplete and failed inputs; mixed lists refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../ssae_test.h"
#include "ssae_merge.h"
#include "ssae_shard.h"

int test_merge(const char *dir);

static char notes[8192];

static void on_note(void *user, const char *msg) {
  (void)user;
  size_t n = strlen(notes);
  snprintf(notes + n, sizeof notes - n, "%s\n", msg);
}

/* The result line of list input i, as a part holds it. */
static void result_line(char *buf, size_t cap, const ssae_shard_list *l, size_t i,
                        ssae_shard_format fmt) {
  if (fmt == SSAE_SHARD_JSON) {
    char esc[256], *e = esc; /* the paths hold a '"' */
    for (const char *c = l->paths[i]; *c && e < esc + sizeof esc - 3; c++) {
      if (*c == '"') *e++ = '\\';
      *e++ = *c;
    }
    *e = '\0';
    snprintf(buf, cap, "{\"path\":\"%s\",\"score\":%zu.5,\"windows\":3,\"verdict\":\"normal\"}\n",
             esc, i);
  }
  else if (fmt == SSAE_SHARD_WINDOWS)
    snprintf(buf, cap, "%s\t0\t0.08\t%zu\n%s\t1\t0.112\t%zu\n", l->paths[i], i, l->paths[i], i);
  else
    snprintf(buf, cap, "%s\t%zu.5\t3\tnormal\n", l->paths[i], i);
}

/* Writes the parts of l cut in count; fail: the input written as failed
 * (-1: none), drop: the input left out (-1: none). */
static void write_parts(const char *dir, const ssae_shard_list *l, size_t count,
                        ssae_shard_format fmt, long fail, long drop, char names[][512]) {
  ssae_err err = {{0}};
  for (size_t s = 0; s < count; s++) {
    size_t *m = NULL, nm = 0;
    ssae_shard_members(l, s, count, &m, &nm, &err);
    ssae_shard_header h;
    ssae_shard_header_init(&h, l, s, count, nm);
    if (snprintf(names[s], 512, "%s/part-%zu.%s", dir, s,
                 fmt == SSAE_SHARD_JSON ? "json" : "tsv") >= 512) {
      fprintf(stderr, "%s: path too long\n", dir);
      exit(1);
    }
    ssae_shard_out *o = ssae_shard_out_new(names[s], fmt, &h, NULL, 0, &err);
    FILE *f = o ? ssae_shard_out_file(o) : NULL;
    for (size_t k = 0; f && k < nm; k++) {
      char line[1024];
      if ((long)m[k] == drop) continue;
      if ((long)m[k] == fail) {
        ssae_shard_write_failed(f, fmt, l->paths[m[k]], "not audio");
        continue;
      }
      result_line(line, sizeof line, l, m[k], fmt);
      fputs(line, f);
    }
    if (o) ssae_shard_out_commit(o, &err);
    ssae_shard_out_free(o);
    free(m);
  }
}

static int merge(char names[][512], size_t n, const char *out, const ssae_shard_list *l,
                 ssae_err *err) {
  notes[0] = '\0';
  char *v[16];
  for (size_t i = 0; i < n; i++) v[i] = names[i];
  ssae_merge_opts o = {.list = l, .note = on_note};
  return ssae_merge(v, n, out, &o, err);
}

int test_merge(const char *dir) {
  enum { N = 10, C = 3 };
  char *p[N];
  uint64_t sz[N];
  for (int i = 0; i < N; i++) {
    char b[64];
    snprintf(b, sizeof b, "m%d/c\"%02d.wav", i % 3, (i * 7) % N);
    p[i] = strdup(b);
    sz[i] = 1000 + (uint64_t)(i % 4) * 300;
  }
  ssae_err err = {{0}};
  ssae_shard_list *l = ssae_shard_list_new_sized(p, sz, N, &err);
  char names[C + 2][512], out[512], expect[8192];
  snprintf(out, sizeof out, "%s/merged", dir);

  ssae_shard_format fmts[] = {SSAE_SHARD_TSV, SSAE_SHARD_JSON, SSAE_SHARD_WINDOWS};
  for (int f = 0; f < 3; f++) {
    write_parts(dir, l, C, fmts[f], -1, -1, names);
    expect[0] = '\0';
    if (fmts[f] == SSAE_SHARD_WINDOWS) strcat(expect, "path\twindow\ttime\tscore\n");
    for (size_t i = 0; i < l->n; i++) {
      char line[1024];
      result_line(line, sizeof line, l, i, fmts[f]);
      strcat(expect, line);
    }
    /* Parts in any order, with or without the list: the result in list order. */
    char rev[C][512];
    for (int s = 0; s < C; s++) memcpy(rev[s], names[C - 1 - s], 512);
    unlink(out);
    CHECK(merge(rev, C, out, f == 0 ? l : NULL, &err) == 0, "merge %d: %s\n%s", f, err.msg,
          notes);
    char *got = test_slurp(out);
    CHECK(got && !strcmp(got, expect), "merged %d:\n%s\nwanted:\n%s", f, got, expect);
    free(got);
  }

  /* A missing shard, a shard twice: named, nothing written. */
  write_parts(dir, l, C, SSAE_SHARD_TSV, -1, -1, names);
  unlink(out);
  CHECK(merge(names, C - 1, out, NULL, &err) < 0 && strstr(notes, "shard 2/3 missing") &&
            access(out, F_OK) != 0, "missing shard: %s / %s", err.msg, notes);
  memcpy(names[C], names[1], 512);
  CHECK(merge(names, C + 1, out, NULL, &err) < 0 && strstr(notes, "shard 1/3 given twice") &&
            !strstr(notes, "appears twice") && access(out, F_OK) != 0,
        "shard twice: %s / %s", err.msg, notes);

  /* An input left out of its part: named when the list is given. */
  write_parts(dir, l, C, SSAE_SHARD_TSV, -1, 4, names);
  char want[600];
  snprintf(want, sizeof want, "%s missing", l->paths[4]);
  CHECK(merge(names, C, out, l, &err) < 0 && strstr(notes, want) && strstr(notes, "holds"),
        "dropped input: %s / %s", err.msg, notes);
  CHECK(merge(names, C, out, NULL, &err) < 0 && strstr(err.msg, "1 of 10 inputs missing"),
        "dropped input, no list: %s / %s", err.msg, notes);

  /* An input twice (in two parts). */
  write_parts(dir, l, C, SSAE_SHARD_TSV, -1, -1, names);
  FILE *fp = fopen(names[0], "a");
  char line[1024];
  size_t *m1 = NULL, n1 = 0;
  ssae_shard_members(l, 1, C, &m1, &n1, &err);
  result_line(line, sizeof line, l, m1[0], SSAE_SHARD_TSV);
  if (fp) fputs(line, fp), fclose(fp);
  snprintf(want, sizeof want, "%s appears twice", l->paths[m1[0]]);
  CHECK(merge(names, C, out, NULL, &err) < 0 && strstr(notes, want), "input twice: %s", notes);
  /* ... and, given the list, the part it does not belong in is named. */
  snprintf(want, sizeof want, "%s is in %s (shard 0/3) but belongs to shard 1", l->paths[m1[0]],
           names[0]);
  CHECK(merge(names, C, out, l, &err) < 0 && strstr(notes, want), "wrong shard: %s", notes);
  free(m1);

  /* A part cut short mid-line. */
  write_parts(dir, l, C, SSAE_SHARD_TSV, -1, -1, names);
  fp = fopen(names[2], "a");
  if (fp) fputs("m9/half", fp), fclose(fp);
  CHECK(merge(names, C, out, NULL, &err) < 0 && strstr(err.msg, "cut short"), "cut: %s",
        err.msg);

  /* A failed input: the rest written, exit 1, the input named. */
  write_parts(dir, l, C, SSAE_SHARD_TSV, 6, -1, names);
  unlink(out);
  CHECK(merge(names, C, out, l, &err) == 1 && strstr(notes, l->paths[6]) &&
            strstr(notes, "failed"), "failed input: %s / %s", err.msg, notes);
  char *got = test_slurp(out);
  CHECK(got && !strstr(got, l->paths[6]) && strstr(got, l->paths[7]), "rest written: %s", got);
  free(got);

  /* Another list (a file grew): refused, naming both digests. */
  sz[0] += 1;
  ssae_shard_list *l2 = ssae_shard_list_new_sized(p, sz, N, &err);
  char other[C][512], odir[512];
  write_parts(dir, l, C, SSAE_SHARD_TSV, -1, -1, names);
  char mixed[C][512];
  memcpy(mixed[0], names[0], 512);
  snprintf(odir, 512, "%s/other", dir);
  CHECK(mkdir(odir, 0755) == 0, "mkdir %s", odir);
  write_parts(odir, l2, C, SSAE_SHARD_TSV, -1, -1, other);
  memcpy(mixed[1], other[1], 512);
  memcpy(mixed[2], other[2], 512);
  CHECK(merge(mixed, C, out, NULL, &err) < 0 && strstr(err.msg, l->digest) &&
            strstr(err.msg, l2->digest), "mixed lists: %s", err.msg);
  CHECK(merge(names, C, out, l2, &err) < 0 && strstr(err.msg, l2->digest),
        "list given differs: %s", err.msg);
  /* A cut of the same list into another count. */
  char four[4][512];
  write_parts(odir, l, 4, SSAE_SHARD_TSV, -1, -1, four);
  memcpy(mixed[1], four[1], 512);
  CHECK(merge(mixed, 2, out, NULL, &err) < 0 && strstr(err.msg, "1/4"), "two cuts: %s",
        err.msg);
  ssae_shard_list_free(l2);
  ssae_shard_list_free(l);
  for (int i = 0; i < N; i++) free(p[i]);
  return failures;
}
