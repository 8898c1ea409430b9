/* Shards of an input list: canonical order equals the directory walk,
 * partition determinism and balance, --shard parsing and the scheduler's
 * environment, the list digest, resuming a killed shard. Merging is in
 * test_shard_merge.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <math.h>

#include "../ssae_test.h"
#include "ssae_shard.h"
#include "ssae_sha256.h"

int test_merge(const char *dir);
int test_job(const char *dir);

static char tmp[256];

static void put(const char *rel, const char *text) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", tmp, rel);
  FILE *f = fopen(p, "w");
  if (f) fputs(text, f), fclose(f);
}

static void test_order(void) {
  /* Names where a plain strcmp of whole paths would disagree with the walk. */
  char d[512];
  const char *dirs[] = {"w", "w/b", "w/b/c", "w/a"};
  for (int i = 0; i < 4; i++) {
    snprintf(d, sizeof d, "%s/%s", tmp, dirs[i]);
    CHECK(mkdir(d, 0755) == 0, "mkdir %s", d);
  }
  const char *files[] = {"w/b.wav", "w/b-1.wav", "w/b/x.wav", "w/b/c/y.flac", "w/b/c.wav",
                         "w/a/z.wav", "w/a.wav", "w/B.WAV", "w/notes.txt"};
  for (int i = 0; i < 9; i++) put(files[i], "x");
  snprintf(d, sizeof d, "%s/w", tmp);
  char *arg = d, **walked = NULL;
  size_t nw = 0;
  ssae_err err = {{0}};
  CHECK(ssae_paths_expand(&arg, 1, &walked, &nw, &err) == 0, "expand: %s", err.msg);
  CHECK(nw == 8, "8 audio files, not %zu", nw);
  /* Shuffled, and with a repeat, the list comes back in walk order, once each. */
  char *shuffled[9];
  for (size_t i = 0; i < nw; i++) shuffled[i] = walked[(i * 5 + 3) % nw];
  shuffled[8] = walked[2];
  ssae_shard_list *l = ssae_shard_list_new(shuffled, nw + 1, &err);
  CHECK(l && l->n == nw, "list of %zu", l ? l->n : 0);
  for (size_t i = 0; l && i < nw && i < l->n; i++)
    CHECK(!strcmp(l->paths[i], walked[i]), "order %zu: %s, walk has %s", i, l->paths[i],
          walked[i]);
  for (size_t i = 0; l && i < l->n; i++)
    CHECK(ssae_shard_list_find(l, walked[i]) == (long)i, "find");
  CHECK(l && ssae_shard_list_find(l, "nope") == -1, "find a stranger");
  CHECK(ssae_path_cmp("a/b/x", "a/b.x") < 0 && ssae_path_cmp("a/b.x", "a/b/x") > 0 &&
            ssae_path_cmp("a/b", "a/b/x") < 0 && ssae_path_cmp("x", "x") == 0,
        "canonical compare");
  ssae_shard_list_free(l);
  ssae_paths_free(walked, nw);

  /* --files-from: CRLF, empty lines, spaces kept. */
  put("list.txt", "w/b.wav\r\n\n w/a.wav\nlast\n");
  snprintf(d, sizeof d, "%s/list.txt", tmp);
  char **lines = NULL;
  size_t nl = 0;
  CHECK(ssae_paths_read_list(d, &lines, &nl, &err) == 0, "read list: %s", err.msg);
  CHECK(nl == 3 && !strcmp(lines[0], "w/b.wav") && !strcmp(lines[1], " w/a.wav") &&
            !strcmp(lines[2], "last"), "list lines");
  ssae_paths_free(lines, nl);
  CHECK(ssae_paths_read_list("/nonexistent/list", &lines, &nl, &err) < 0 &&
            strstr(err.msg, "/nonexistent/list"), "a missing list is named: %s", err.msg);
}

static void test_partition(void) {
  /* Mixed recordings: 1 s to 10 min, log-uniform, 16 kHz 16-bit mono. */
  enum { N = 600 };
  char *names[N];
  uint64_t sizes[N];
  for (int i = 0; i < N; i++) {
    char b[64];
    snprintf(b, sizeof b, "m%03d/clip%04d.wav", i % 37, i);
    names[i] = strdup(b);
    double sec = exp(log(1.0) + urand() * (log(600.0) - log(1.0)));
    sizes[i] = 44 + (uint64_t)(sec * 32000);
  }
  /* Some equal sizes, for the tie-break. */
  for (int i = 0; i < 40; i++) sizes[i] = sizes[N - 1 - i];
  ssae_err err = {{0}};
  ssae_shard_list *l = ssae_shard_list_new_sized(names, sizes, N, &err);
  CHECK(l != NULL, "list: %s", err.msg);
  if (!l) return;
  size_t counts[] = {1, 2, 3, 4, 8, 16};
  for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
    size_t n = counts[c], *of = malloc(N * sizeof *of), *again = malloc(N * sizeof *again);
    CHECK(ssae_shard_partition(l, n, of, &err) == 0, "partition %zu", n);
    CHECK(ssae_shard_partition(l, n, again, &err) == 0 && !memcmp(of, again, N * sizeof *of),
          "partition %zu twice: the same", n);
    double load[16] = {0}, total = 0, largest = 0;
    for (int i = 0; i < N; i++) load[of[i]] += (double)l->sizes[i], total += (double)l->sizes[i];
    for (size_t s = 0; s < n; s++) largest = load[s] > largest ? load[s] : largest;
    double ratio = largest / (total / (double)n);
    printf("%zu shards of %d mixed 1 s-10 min files: largest/mean %.4f\n", n, N, ratio);
    CHECK(ratio <= 1.05, "%zu shards: largest/mean %.4f > 1.05", n, ratio);
    /* Members: every input in exactly one shard, ascending. */
    size_t seen = 0;
    for (size_t s = 0; s < n; s++) {
      size_t *m = NULL, nm = 0;
      CHECK(ssae_shard_members(l, s, n, &m, &nm, &err) == 0, "members");
      for (size_t k = 0; k < nm; k++) {
        CHECK(of[m[k]] == s, "member %zu of shard %zu", m[k], s);
        CHECK(!k || m[k] > m[k - 1], "ascending");
      }
      seen += nm;
      free(m);
    }
    CHECK(seen == N, "%zu shards hold %zu of %d", n, seen, N);
    free(of);
    free(again);
  }
  /* The same files listed in another order: the same shards. */
  char *rev[N];
  uint64_t rsz[N];
  for (int i = 0; i < N; i++) rev[i] = names[N - 1 - i], rsz[i] = sizes[N - 1 - i];
  ssae_shard_list *r = ssae_shard_list_new_sized(rev, rsz, N, &err);
  size_t a[N], b[N];
  CHECK(r && !ssae_shard_partition(l, 7, a, &err) && !ssae_shard_partition(r, 7, b, &err) &&
            !memcmp(a, b, sizeof a) && !strcmp(l->digest, r->digest),
        "order of listing does not matter");
  /* More shards than files: some are empty, none fails. */
  size_t *m = NULL, nm = 9;
  CHECK(ssae_shard_members(l, 999, 1000, &m, &nm, &err) == 0 && nm == 0 && !m, "empty shard");
  CHECK(ssae_shard_members(l, 4, 4, &m, &nm, &err) < 0, "index past the count refused");
  ssae_shard_list_free(r);
  ssae_shard_list_free(l);
  for (int i = 0; i < N; i++) free(names[i]);
}

static void clear_env(void) {
  const char *v[] = {"SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX",
                     "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_STEP", "SLURM_JOB_ID",
                     "JOB_COMPLETION_INDEX", "SSAE_SHARD_COUNT"};
  for (size_t i = 0; i < sizeof v / sizeof *v; i++) unsetenv(v[i]);
}

static int spec(const char *s, size_t count, size_t *i, size_t *n, ssae_err *err) {
  ssae_shard_spec sp;
  int rc = ssae_shard_spec_parse(s, count, &sp, err);
  *i = sp.index, *n = sp.count;
  return rc;
}

static void test_spec(void) {
  ssae_err err = {{0}};
  size_t i = 0, n = 0;
  clear_env();
  CHECK(spec("2/5", 0, &i, &n, &err) == 0 && i == 2 && n == 5, "2/5");
  CHECK(spec("0/1", 1, &i, &n, &err) == 0 && i == 0 && n == 1, "0/1");
  const char *bad[] = {"5/5", "1/0", "-1/4", "a/4", "1/", "/4", "1", "1/4x", ""};
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++)
    CHECK(spec(bad[k], 0, &i, &n, &err) < 0, "'%s' refused", bad[k]);
  CHECK(spec("1/4", 3, &i, &n, &err) < 0, "1/4 with --shard-count 3 refused");

  /* Neither scheduler. */
  CHECK(spec("auto", 0, &i, &n, &err) < 0 && strstr(err.msg, "SLURM_ARRAY_TASK_ID") &&
            strstr(err.msg, "JOB_COMPLETION_INDEX"), "neither: %s", err.msg);
  setenv("SLURM_JOB_ID", "77", 1);
  CHECK(spec("auto", 0, &i, &n, &err) < 0 && strstr(err.msg, "not a job array"),
        "a Slurm job without an array: %s", err.msg);
  /* Slurm, MIN/MAX form (an array from 1). */
  setenv("SLURM_ARRAY_TASK_ID", "3", 1);
  setenv("SLURM_ARRAY_TASK_MIN", "1", 1);
  setenv("SLURM_ARRAY_TASK_MAX", "4", 1);
  CHECK(spec("auto", 0, &i, &n, &err) == 0 && i == 2 && n == 4, "Slurm min/max: %s", err.msg);
  /* With --shard-count the task ID is the index (a resubmitted subset). */
  CHECK(spec("auto", 5, &i, &n, &err) == 0 && i == 3 && n == 5, "Slurm, --shard-count");
  CHECK(spec("auto", 3, &i, &n, &err) < 0 && strstr(err.msg, "0 to 2"),
        "Slurm, ID past --shard-count: %s", err.msg);
  setenv("SLURM_ARRAY_TASK_COUNT", "4", 1);
  CHECK(spec("auto", 0, &i, &n, &err) == 0 && i == 2 && n == 4, "Slurm, all variables");
  /* A list like --array=1,3,4,9: COUNT disagrees with the range. */
  setenv("SLURM_ARRAY_TASK_MAX", "9", 1);
  CHECK(spec("auto", 0, &i, &n, &err) < 0 && strstr(err.msg, "--array=0-3"), "list: %s",
        err.msg);
  /* Steps: --array=0-12:4. */
  setenv("SLURM_ARRAY_TASK_MIN", "0", 1);
  setenv("SLURM_ARRAY_TASK_MAX", "12", 1);
  setenv("SLURM_ARRAY_TASK_STEP", "4", 1);
  setenv("SLURM_ARRAY_TASK_ID", "8", 1);
  CHECK(spec("auto", 0, &i, &n, &err) == 0 && i == 2 && n == 4, "step: %s", err.msg);
  /* COUNT form (no MIN/MAX). */
  clear_env();
  setenv("SLURM_ARRAY_TASK_ID", "0", 1);
  setenv("SLURM_ARRAY_TASK_COUNT", "3", 1);
  CHECK(spec("auto", 0, &i, &n, &err) == 0 && i == 0 && n == 3, "Slurm count: %s", err.msg);
  setenv("SLURM_ARRAY_TASK_ID", "3", 1);
  CHECK(spec("auto", 0, &i, &n, &err) < 0, "id past the count");
  setenv("SLURM_ARRAY_TASK_ID", "x", 1);
  CHECK(spec("auto", 0, &i, &n, &err) < 0 && strstr(err.msg, "'x'"), "bad id: %s", err.msg);
  /* Only the task ID: SSAE_SHARD_COUNT (or --shard-count) gives the count,
   * a disagreement between them is refused, and without either the
   * message says what to give. */
  clear_env();
  setenv("SLURM_ARRAY_TASK_ID", "2", 1);
  CHECK(spec("auto", 0, &i, &n, &err) < 0 && strstr(err.msg, "give --shard-count N"),
        "Slurm ID alone: %s", err.msg);
  setenv("SSAE_SHARD_COUNT", "4", 1);
  CHECK(spec("auto", 0, &i, &n, &err) == 0 && i == 2 && n == 4, "Slurm + SSAE_SHARD_COUNT: %s",
        err.msg);
  CHECK(spec("auto", 5, &i, &n, &err) < 0 && strstr(err.msg, "SSAE_SHARD_COUNT is 4"),
        "Slurm, --shard-count against SSAE_SHARD_COUNT: %s", err.msg);
  setenv("SSAE_SHARD_COUNT", "2", 1);
  CHECK(spec("auto", 0, &i, &n, &err) < 0 && strstr(err.msg, "0 to 1"),
        "Slurm ID past SSAE_SHARD_COUNT: %s", err.msg);
  unsetenv("SSAE_SHARD_COUNT");
  unsetenv("SLURM_ARRAY_TASK_COUNT");
  setenv("SLURM_ARRAY_TASK_ID", "1", 1);
  CHECK(spec("auto", 0, &i, &n, &err) < 0 && strstr(err.msg, "SLURM_ARRAY_TASK_COUNT"),
        "id alone: %s", err.msg);

  /* Kubernetes indexed job. */
  clear_env();
  setenv("JOB_COMPLETION_INDEX", "5", 1);
  CHECK(spec("auto", 0, &i, &n, &err) < 0 && strstr(err.msg, "SSAE_SHARD_COUNT") &&
            strstr(err.msg, "--shard-count"), "k8s without a count: %s", err.msg);
  CHECK(spec("auto", 8, &i, &n, &err) == 0 && i == 5 && n == 8, "k8s with --shard-count");
  setenv("SSAE_SHARD_COUNT", "6", 1);
  CHECK(spec("auto", 0, &i, &n, &err) == 0 && i == 5 && n == 6, "k8s with SSAE_SHARD_COUNT");
  CHECK(spec("auto", 8, &i, &n, &err) < 0, "k8s, two counts disagree");
  setenv("SSAE_SHARD_COUNT", "5", 1);
  CHECK(spec("auto", 0, &i, &n, &err) < 0, "index past the count");
  clear_env();
}

static void test_digest(void) {
  ssae_sha256 s;
  unsigned char d[32];
  ssae_sha256_init(&s);
  ssae_sha256_update(&s, "abc", 3);
  ssae_sha256_final(&s, d);
  CHECK(d[0] == 0xba && d[1] == 0x78 && d[31] == 0xad, "SHA-256 of abc");
  /* 1,000,000 'a' in uneven pieces: cdc76e5c...c7112cd0. */
  ssae_sha256_init(&s);
  char a[997];
  memset(a, 'a', sizeof a);
  size_t left = 1000000;
  while (left) {
    size_t k = left < sizeof a ? left : sizeof a;
    ssae_sha256_update(&s, a, k);
    left -= k;
  }
  ssae_sha256_final(&s, d);
  CHECK(d[0] == 0xcd && d[1] == 0xc7 && d[31] == 0xd0, "SHA-256 of a million a");

  /* The documented serialization; the value is Python's hashlib. */
  char *p[] = {"c.wav", "a/b.wav", "a/b/x.wav"};
  uint64_t sz[] = {SSAE_SIZE_MISSING, 100, 5};
  ssae_err err = {{0}};
  ssae_shard_list *l = ssae_shard_list_new_sized(p, sz, 3, &err);
  CHECK(l && !strcmp(l->digest, "557cfbe9115fb3f0"), "digest %s", l ? l->digest : "");
  ssae_shard_list *e = ssae_shard_list_new_sized(NULL, NULL, 0, &err);
  CHECK(e && !strcmp(e->digest, "e3b0c44298fc1c14"), "empty list digest %s", e ? e->digest : "");
  sz[1] = 101;
  ssae_shard_list *m = ssae_shard_list_new_sized(p, sz, 3, &err);
  CHECK(m && l && strcmp(m->digest, l->digest), "a size change changes the digest");

  /* Headers both ways. */
  ssae_shard_header h, g;
  ssae_shard_header_init(&h, l, 1, 4, 2);
  char buf[256];
  int json = 9;
  CHECK(ssae_shard_header_format(&h, SSAE_SHARD_TSV, buf, sizeof buf) > 0 &&
            !strcmp(buf, "# ssae-shard 1/4 inputs=3 files=2 digest=557cfbe9115fb3f0\n"),
        "tsv header: %s", buf);
  CHECK(ssae_shard_header_parse(buf, &g, &json, &err) == 0 && !json && g.index == 1 &&
            g.count == 4 && g.inputs == 3 && g.files == 2 && !strcmp(g.digest, h.digest),
        "tsv header back");
  CHECK(ssae_shard_header_format(&h, SSAE_SHARD_JSON, buf, sizeof buf) > 0 &&
            !strcmp(buf, "{\"ssae_shard\":\"1/4\",\"inputs\":3,\"files\":2,"
                         "\"digest\":\"557cfbe9115fb3f0\"}\n"), "json header: %s", buf);
  CHECK(ssae_shard_header_parse(buf, &g, &json, &err) == 0 && json && g.files == 2,
        "json header back");
  const char *bad[] = {"# ssae-shard 4/4 inputs=3 files=2 digest=557cfbe9115fb3f0",
                       "# ssae-shard 1/4 inputs=3 files=2 digest=557cfbe9115fb3f",
                       "# ssae-shard 1/4 inputs=3 files=2 digest=557cfbe9115fb3f0 x",
                       "# ssae-shard 1/4 inputs=+3 files=2 digest=557cfbe9115fb3f0",
                       "a.wav\t1\t2\tnormal"};
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++)
    CHECK(ssae_shard_header_parse(bad[k], &g, &json, &err) < 0, "bad header %zu taken", k);
  ssae_shard_list_free(l);
  ssae_shard_list_free(e);
  ssae_shard_list_free(m);
}

static void test_resume(void) {
  char *p[] = {"r/a.wav", "r/b.wav", "r/c.wav", "r/d.wav", "r/e.wav", "r/f.wav"};
  uint64_t sz[] = {10, 10, 10, 10, 10, 10};
  ssae_err err = {{0}};
  ssae_shard_list *l = ssae_shard_list_new_sized(p, sz, 6, &err);
  size_t *m = NULL, nm = 0;
  CHECK(ssae_shard_members(l, 0, 2, &m, &nm, &err) == 0 && nm == 3, "3 members");
  ssae_shard_header h;
  ssae_shard_header_init(&h, l, 0, 2, nm);
  char out[512], partial[600];
  snprintf(out, sizeof out, "%s/part-0.tsv", tmp);
  ssae_shard_partial_path(out, partial, sizeof partial);

  /* First run: nothing there, nothing done. */
  ssae_shard_resume r;
  CHECK(ssae_shard_resume_read(out, SSAE_SHARD_TSV, &h, l, m, nm, NULL, &r, &err) == 0 &&
            r.n_done == 0 && !r.from[0], "nothing to resume: %s", err.msg);
  ssae_shard_resume_release(&r);

  /* A run killed after one result, one failure, and half a line. */
  ssae_shard_out *o = ssae_shard_out_new(out, SSAE_SHARD_TSV, &h, NULL, 0, &err);
  CHECK(o != NULL, "out: %s", err.msg);
  if (!o) return;
  FILE *f = ssae_shard_out_file(o);
  fprintf(f, "%s\t0.5\t10\tnormal\n", l->paths[m[0]]);
  ssae_shard_write_failed(f, SSAE_SHARD_TSV, l->paths[m[1]], "cannot\tread");
  fprintf(f, "%s\t0.7", l->paths[m[2]]);
  ssae_shard_out_free(o); /* killed: no commit */
  CHECK(access(out, F_OK) != 0 && access(partial, F_OK) == 0, "only the .partial exists");

  CHECK(ssae_shard_resume_read(out, SSAE_SHARD_TSV, &h, l, m, nm, NULL, &r, &err) == 0,
        "resume: %s", err.msg);
  CHECK(r.n_done == 1 && r.done[0] && !r.done[1] && !r.done[2],
        "done: the complete result only (%zu)", r.n_done);
  CHECK(!strcmp(r.from, partial), "read from %s", r.from);
  char want[256];
  snprintf(want, sizeof want, "%s\t0.5\t10\tnormal\n", l->paths[m[0]]);
  CHECK(r.kept && !strcmp(r.kept, want), "kept '%s'", r.kept ? r.kept : "");

  /* The rerun: the kept line first, then the rest, committed. */
  o = ssae_shard_out_new(out, SSAE_SHARD_TSV, &h, r.kept, r.kept_len, &err);
  f = o ? ssae_shard_out_file(o) : NULL;
  if (f) fprintf(f, "%s\t0.6\t10\tnormal\n%s\t0.7\t10\tnormal\n", l->paths[m[1]], l->paths[m[2]]);
  CHECK(o && ssae_shard_out_commit(o, &err) == 0, "commit: %s", err.msg);
  ssae_shard_out_free(o);
  ssae_shard_resume_release(&r);
  CHECK(access(out, F_OK) == 0 && access(partial, F_OK) != 0, "renamed into place");
  char *text = test_slurp(out);
  CHECK(text && !strncmp(text, "# ssae-shard 0/2 inputs=6 files=3 digest=", 41) &&
            strstr(text, want) && strstr(text, "\t0.7\t10\tnormal\n"), "final: %s", text);
  free(text);
  /* A complete output: all done. */
  CHECK(ssae_shard_resume_read(out, SSAE_SHARD_TSV, &h, l, m, nm, NULL, &r, &err) == 0 &&
            r.n_done == 3 && !strcmp(r.from, out), "all done");
  ssae_shard_resume_release(&r);

  /* Another list, shard or format: refused, naming both digests. */
  uint64_t sz2[] = {10, 10, 10, 10, 10, 11};
  ssae_shard_list *l2 = ssae_shard_list_new_sized(p, sz2, 6, &err);
  ssae_shard_header h2;
  ssae_shard_header_init(&h2, l2, 0, 2, nm);
  CHECK(ssae_shard_resume_read(out, SSAE_SHARD_TSV, &h2, l2, m, nm, NULL, &r, &err) < 0 &&
            strstr(err.msg, l->digest) && strstr(err.msg, l2->digest),
        "other list: %s", err.msg);
  ssae_shard_header_init(&h2, l, 1, 2, nm);
  CHECK(ssae_shard_resume_read(out, SSAE_SHARD_TSV, &h2, l, m, nm, NULL, &r, &err) < 0 &&
            strstr(err.msg, "shard 0/2") && strstr(err.msg, "shard 1/2"),
        "other shard: %s", err.msg);
  CHECK(ssae_shard_resume_read(out, SSAE_SHARD_JSON, &h, l, m, nm, NULL, &r, &err) < 0 &&
            strstr(err.msg, "TSV"), "other format: %s", err.msg);
  ssae_shard_list_free(l2);

  /* A stranger's line in the output: refused. */
  FILE *g = fopen(out, "a");
  if (g) fprintf(g, "r/zz.wav\t1\t1\tnormal\n"), fclose(g);
  CHECK(ssae_shard_resume_read(out, SSAE_SHARD_TSV, &h, l, m, nm, NULL, &r, &err) < 0 &&
            strstr(err.msg, "r/zz.wav"), "stranger: %s", err.msg);

  /* Windows: only the windows of files done in the main output stay. */
  char wout[512];
  snprintf(wout, sizeof wout, "%s/part-0.windows.tsv", tmp);
  o = ssae_shard_out_new(wout, SSAE_SHARD_WINDOWS, &h, NULL, 0, &err);
  f = o ? ssae_shard_out_file(o) : NULL;
  if (f)
    fprintf(f, "%s\t0\t0.1\t0.5\n%s\t1\t0.2\t0.5\n%s\t0\t0.1\t0.6\n", l->paths[m[0]],
            l->paths[m[0]], l->paths[m[1]]);
  ssae_shard_out_free(o);
  unsigned char only[3] = {1, 0, 0};
  CHECK(ssae_shard_resume_read(wout, SSAE_SHARD_WINDOWS, &h, l, m, nm, only, &r, &err) == 0 &&
            r.kept_len && !strstr(r.kept, l->paths[m[1]]) && strstr(r.kept, "\t1\t0.2\t0.5\n"),
        "windows kept: %s / %s", err.msg, r.kept ? r.kept : "");
  ssae_shard_resume_release(&r);
  ssae_shard_list_free(l);
  free(m);
}

int main(void) {
  snprintf(tmp, sizeof tmp, "/tmp/ssae-shard-test-XXXXXX");
  if (!mkdtemp(tmp)) return 1;
  test_order();
  test_partition();
  test_spec();
  test_digest();
  test_resume();
  failures += test_merge(tmp);
  failures += test_job(tmp);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  if (!failures && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
  if (failures) fprintf(stderr, "%d checks failed (files kept in %s)\n", failures, tmp);
  return failures ? 1 : 0;
}
