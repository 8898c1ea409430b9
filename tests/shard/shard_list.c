/* shard_list: the files of one shard of an input list, chosen and written
 * the way `ssae score --shard` does it, with a file's size standing in for
 * its score. The cluster test runs it as the Slurm array's task; it is
 * also the reference for wiring --files-from, --shard, --shard-count and
 * --resume into a command (see the calls below, in order).
 *
 * usage: shard_list [--shard I/N|auto] [--shard-count N] [--files-from F]
 *                   [-o OUT [--resume]] [--json] [--delay-ms MS] [-v] [INPUT...]
 * Without -o it prints the shard's paths, one a line. With -o it writes a
 * shard output: the header, then "path<TAB>bytes" (JSON: {"path":..,
 * "bytes":..}) per file, a failure record for a file that cannot be
 * stat'ed; --delay-ms waits before each file (so a test can kill it
 * mid-way); -v names each file on stderr as it is done. Exit: 0 done, 1 some file failed, 2 usage or setup error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "ssae_shard.h"

static int fail(const char *msg) {
  fprintf(stderr, "shard_list: %s\n", msg);
  return 2;
}

int main(int argc, char **argv) {
  const char *spec_s = "0/1", *list_file = NULL, *out = NULL;
  long count_arg = 0, delay_ms = 0;
  int resume = 0, json = 0, verbose = 0, nin = 0;
  char **inputs = calloc((size_t)argc + 1, sizeof *inputs);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int more = i + 1 < argc;
    if (!strcmp(a, "--shard") && more) spec_s = argv[++i];
    else if (!strcmp(a, "--shard-count") && more) count_arg = atol(argv[++i]);
    else if (!strcmp(a, "--files-from") && more) list_file = argv[++i];
    else if (!strcmp(a, "-o") && more) out = argv[++i];
    else if (!strcmp(a, "--delay-ms") && more) delay_ms = atol(argv[++i]);
    else if (!strcmp(a, "--resume")) resume = 1;
    else if (!strcmp(a, "--json")) json = 1;
    else if (!strcmp(a, "-v")) verbose = 1;
    else if (a[0] == '-' && a[1]) return fail("unknown option (see the comment in shard_list.c)");
    else inputs[nin++] = argv[i];
  }
  ssae_err err = {{0}};
  /* 1. The inputs: --files-from lines, then the arguments, then expanded. */
  char **listed = NULL, **paths = NULL;
  size_t nlisted = 0, npaths = 0;
  if (list_file && ssae_paths_read_list(list_file, &listed, &nlisted, &err)) return fail(err.msg);
  for (int i = 0; i < nin; i++) {
    char **grown = realloc(listed, (nlisted + 1) * sizeof *grown);
    if (!grown || !(grown[nlisted] = strdup(inputs[i]))) return fail("out of memory");
    listed = grown;
    nlisted++;
  }
  free(inputs);
  if (ssae_paths_expand(listed, nlisted, &paths, &npaths, &err)) return fail(err.msg);
  ssae_paths_free(listed, nlisted);
  /* 2. The sorted list with sizes and digest; 3. which shard; 4. its files. */
  ssae_shard_list *l = ssae_shard_list_new(paths, npaths, &err);
  ssae_paths_free(paths, npaths);
  ssae_shard_spec spec;
  size_t *members = NULL, nm = 0;
  if (!l || ssae_shard_spec_parse(spec_s, count_arg > 0 ? (size_t)count_arg : 0, &spec, &err) ||
      ssae_shard_members(l, spec.index, spec.count, &members, &nm, &err))
    return fail(err.msg);
  if (!out) {
    for (size_t k = 0; k < nm; k++) printf("%s\n", l->paths[members[k]]);
    free(members);
    ssae_shard_list_free(l);
    return 0;
  }
  /* 5. The header; 6. with --resume what a previous run finished; 7. the
   * output, starting with those lines. */
  ssae_shard_format fmt = json ? SSAE_SHARD_JSON : SSAE_SHARD_TSV;
  ssae_shard_header h;
  ssae_shard_header_init(&h, l, spec.index, spec.count, nm);
  ssae_shard_resume r = {0};
  if (resume && ssae_shard_resume_read(out, fmt, &h, l, members, nm, NULL, &r, &err))
    return fail(err.msg);
  if (resume && r.from[0])
    fprintf(stderr, "shard_list: %s: %zu of %zu files done already\n", r.from, r.n_done, nm);
  ssae_shard_out *o = ssae_shard_out_new(out, fmt, &h, r.kept, r.kept_len, &err);
  if (!o) return fail(err.msg);
  FILE *f = ssae_shard_out_file(o);
  int status = 0;
  for (size_t k = 0; k < nm; k++) {
    if (r.done && r.done[k]) continue;
    if (delay_ms) nanosleep(&(struct timespec){delay_ms / 1000, delay_ms % 1000 * 1000000L}, NULL);
    const char *p = l->paths[members[k]];
    struct stat st;
    if (stat(p, &st)) {
      ssae_shard_write_failed(f, fmt, p, "cannot stat");
      status = 1;
    } else if (json) {
      fputs("{\"path\":", f);
      ssae_json_write_str(f, p);
      fprintf(f, ",\"bytes\":%lld}\n", (long long)st.st_size);
    } else {
      fprintf(f, "%s\t%lld\n", p, (long long)st.st_size);
    }
    fflush(f); /* a kill loses at most this line */
    if (verbose) fprintf(stderr, "shard_list: done %s\n", p);
  }
  /* 8. Complete: renamed into place. */
  if (ssae_shard_out_commit(o, &err)) status = fail(err.msg);
  ssae_shard_out_free(o);
  ssae_shard_resume_release(&r);
  free(members);
  ssae_shard_list_free(l);
  return status;
}
