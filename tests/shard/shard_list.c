/* shard_list: one shard of an input list, run the way `ssae score --shard`
 * runs one (ssae_shard_job), with a checksum of a file's bytes standing in
 * for its score, so that the merge tests (test_merge_cli.sh) can make
 * parts of any files, audio or not, with sizes chosen for the partition.
 * `ssae score` itself is tested as a shard in test_score_shard.sh and, as
 * a Slurm array's task, in tests/cluster.
 *
 * usage: shard_list [--shard I/N|auto] [--shard-count N] [--files-from F]
 *                   [-o OUT] [--resume] [--windows W] [--json] [-v]
 *                   [INPUT...]
 * Writes the shard's output (to OUT, else stdout): the header, then
 * ssae score's result line per file with the FNV-1a 64 of its bytes as its
 * score ("path<TAB>fnv<TAB>1<TAB>normal"; JSON: {"path":..,"score":fnv,
 * "windows":1,"verdict":"normal"}), a failure record for a file that
 * cannot be read; --windows W: two lines per file,
 * "path<TAB>k<TAB>k/2<TAB>fnv". -v names each file on stderr as it is done. Exit: 0 done, 1 some file failed, 2 usage or
 * setup error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_shard_job.h"

static int fail(const char *msg) {
  fprintf(stderr, "shard_list: %s\n", msg);
  return 2;
}

int main(int argc, char **argv) {
  ssae_shard_job_opts o = {.shard = "0/1"};
  int verbose = 0, nin = 0;
  char **inputs = calloc((size_t)argc + 1, sizeof *inputs);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int more = i + 1 < argc;
    if (!strcmp(a, "--shard") && more) o.shard = argv[++i];
    else if (!strcmp(a, "--shard-count") && more) o.shard_count = (size_t)atol(argv[++i]);
    else if (!strcmp(a, "--files-from") && more) o.files_from = argv[++i];
    else if (!strcmp(a, "-o") && more) o.out = argv[++i];
    else if (!strcmp(a, "--windows") && more) o.windows = argv[++i];
    else if (!strcmp(a, "--resume")) o.resume = 1;
    else if (!strcmp(a, "--json")) o.json = 1;
    else if (!strcmp(a, "-v")) verbose = 1;
    else if (a[0] == '-' && a[1]) {
      free(inputs);
      return fail("unknown option (see the comment in shard_list.c)");
    }
    else inputs[nin++] = argv[i];
  }
  o.args = inputs;
  o.n_args = (size_t)nin;
  ssae_err err = {{0}};
  /* The list, the shard, what a resume keeps, the outputs started. */
  ssae_shard_job *j = ssae_shard_job_new(&o, &err);
  if (!j) {
    free(inputs);
    return fail(err.msg);
  }
  size_t n;
  char *const *pending = ssae_shard_job_pending(j, &n);
  if (o.resume && ssae_shard_job_done_before(j))
    fprintf(stderr, "shard_list: shard %zu/%zu: %zu of %zu files done already\n",
            ssae_shard_job_spec(j)->index, ssae_shard_job_spec(j)->count,
            ssae_shard_job_done_before(j), ssae_shard_job_files(j));
  FILE *out = ssae_shard_job_out(j), *win = ssae_shard_job_windows(j);
  int status = 0;
  for (size_t k = 0; k < n; k++) {
    const char *p = pending[k];
    FILE *in = fopen(p, "rb");
    unsigned long long h = 0xcbf29ce484222325ull;
    int c;
    while (in && (c = getc(in)) != EOF) h = (h ^ (unsigned char)c) * 0x100000001b3ull;
    if (!in || ferror(in)) {
      ssae_shard_job_failed(j, p, "cannot read");
      status = 1;
    } else {
      /* Windows first, then the result line, then next. */
      if (win) fprintf(win, "%s\t0\t0\t%llu\n%s\t1\t0.5\t%llu\n", p, h, p, h);
      if (o.json) {
        fputs("{\"path\":", out);
        ssae_json_write_str(out, p);
        fprintf(out, ",\"score\":%llu,\"windows\":1,\"verdict\":\"normal\"}\n", h);
      } else {
        fprintf(out, "%s\t%llu\t1\tnormal\n", p, h);
      }
    }
    if (in) fclose(in);
    if (ssae_shard_job_next(j, &err)) status = fail(err.msg);
    if (verbose) fprintf(stderr, "shard_list: done %s\n", p);
  }
  if (ssae_shard_job_finish(j, &err)) status = fail(err.msg);
  ssae_shard_job_free(j);
  free(inputs);
  return status;
}
