/* ssae_shard_job: a shard's run killed and resumed with --windows; the
 * refusals (--resume without an output, windows from another run). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../ssae_test.h"
#include "ssae_shard_job.h"

int test_job(const char *dir);

static size_t count_lines(const char *path, const char *prefix) {
  FILE *f = fopen(path, "r");
  char line[1024];
  size_t n = 0;
  while (f && fgets(line, sizeof line, f)) n += !strncmp(line, prefix, strlen(prefix));
  if (f) fclose(f);
  return n;
}

int test_job(const char *dir) {
  char d[512], out[600], win[600], partial[700], *arg = d;
  snprintf(d, sizeof d, "%s/job", dir);
  snprintf(out, sizeof out, "%s/out.tsv", dir);
  snprintf(win, sizeof win, "%s/win.tsv", dir);
  snprintf(partial, sizeof partial, "%s.partial", out);
  if (mkdir(d, 0755)) return ++failures;
  for (int i = 0; i < 5; i++) {
    char p[600];
    snprintf(p, sizeof p, "%s/c%d.wav", d, i);
    FILE *f = fopen(p, "w");
    if (f) fprintf(f, "%*s", 100 * (i + 1), ""), fclose(f);
  }
  ssae_err err = {{0}};
  ssae_shard_job_opts o = {.args = &arg, .n_args = 1, .shard = "0/1", .resume = 1,
                           .out = out, .windows = win};
  /* First run: two files, then killed (no finish). */
  ssae_shard_job *j = ssae_shard_job_new(&o, &err);
  CHECK(j != NULL, "job: %s", err.msg);
  if (!j) return failures;
  size_t n;
  char *const *pending = ssae_shard_job_pending(j, &n);
  CHECK(n == 5 && ssae_shard_job_files(j) == 5 && !ssae_shard_job_done_before(j), "5 to do");
  for (size_t k = 0; k < 2 && k < n; k++) {
    fprintf(ssae_shard_job_windows(j), "%s\t0\t0.1\t1\n", pending[k]);
    fprintf(ssae_shard_job_out(j), "%s\t1\t1\tnormal\n", pending[k]);
    CHECK(ssae_shard_job_next(j, &err) == 0, "next");
  }
  fprintf(ssae_shard_job_windows(j), "%s\t0\t0.1\t1\n", pending[2]); /* killed before its line */
  ssae_shard_job_next(j, &err);
  ssae_shard_job_free(j);
  CHECK(access(out, F_OK) != 0 && access(partial, F_OK) == 0, "killed: only .partial");

  /* Resumed: three to do, the windows of the third not kept. */
  j = ssae_shard_job_new(&o, &err);
  CHECK(j != NULL, "resume: %s", err.msg);
  if (!j) return failures;
  pending = ssae_shard_job_pending(j, &n);
  CHECK(n == 3 && ssae_shard_job_done_before(j) == 2, "3 left, not %zu", n);
  for (size_t k = 0; k < n; k++) {
    fprintf(ssae_shard_job_windows(j), "%s\t0\t0.1\t1\n", pending[k]);
    if (k == 1) ssae_shard_job_failed(j, pending[k], "broken");
    else fprintf(ssae_shard_job_out(j), "%s\t1\t1\tnormal\n", pending[k]);
    ssae_shard_job_next(j, &err);
  }
  CHECK(ssae_shard_job_finish(j, &err) == 0, "finish: %s", err.msg);
  ssae_shard_job_free(j);
  CHECK(access(partial, F_OK) != 0, "no .partial after finish");
  CHECK(count_lines(out, d) == 4 && count_lines(out, "# ssae-failed\t") == 1 &&
            count_lines(out, "# ssae-shard 0/1 inputs=5 files=5 ") == 1, "output lines");
  CHECK(count_lines(win, d) == 5 && count_lines(win, "path\twindow\ttime\tscore") == 1,
        "windows: one per file, %zu", count_lines(win, d));

  /* Again: the failed file only. */
  j = ssae_shard_job_new(&o, &err);
  pending = j ? ssae_shard_job_pending(j, &n) : NULL;
  CHECK(j && n == 1 && strstr(pending[0], "c3.wav"), "only the failed file again");
  ssae_shard_job_free(j);

  /* Windows from another run (none), resume refused. */
  char winp[700];
  snprintf(winp, sizeof winp, "%s.partial", win);
  unlink(win);
  unlink(winp); /* the run above left one, as a killed run would */
  j = ssae_shard_job_new(&o, &err);
  CHECK(!j && strstr(err.msg, "without --windows"), "windows missing: %s", err.msg);
  ssae_shard_job_free(j);
  o.out = NULL;
  j = ssae_shard_job_new(&o, &err);
  CHECK(!j && strstr(err.msg, "-o"), "resume to stdout: %s", err.msg);
  ssae_shard_job_free(j);
  return failures;
}
