/* ssae merge: the outputs of `ssae score --shard` into one result in input
 * order (the merging and its checks are ssae_merge's). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ssae_merge.h"
#include "ssae_shard.h"

int ssae_cmd_merge(int argc, char **argv);

static const char *const CMD = "merge";

static void usage(FILE *f) {
  fprintf(f,
          "usage: ssae merge [-o OUT] [--files-from LIST|-] PART...\n\n"
          "Joins the outputs of 'ssae score --shard I/N' (TSV, JSON or --windows\n"
          "files, one per shard) into the result one 'ssae score' run over the same\n"
          "inputs gives, in input order. The parts must be shards 0 to N-1 of one\n"
          "input list (their headers carry its digest), each complete, and every\n"
          "input must appear exactly once; missing or duplicated shards and inputs\n"
          "are named and nothing is written.\n\n"
          "options:\n"
          "  -o, --output OUT       write the result to OUT (atomically: a temporary\n"
          "                         file beside it, renamed); default: stdout\n"
          "  --files-from LIST      the input list given to ssae score (one path per\n"
          "                         line, '-' for stdin; directories expanded): its\n"
          "                         digest must match, and missing inputs are named\n"
          "  -h, --help             this text\n\n"
          "Exit status: 0 merged, 1 a problem named above or inputs that failed in\n"
          "their shard (the result is still written then), 2 usage error.\n");
}

static void print_note(void *user, const char *msg) {
  (void)user;
  ssae_cli_error(CMD, "%s", msg);
}

int ssae_cmd_merge(int argc, char **argv) {
  const char *out = NULL, *list_file = NULL;
  int nparts = 0, opts_done = 0;
  /* Parts are gathered in argv's place, in order (argv[0] is the name). */
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (opts_done || a[0] != '-' || !a[1]) {
      argv[1 + nparts++] = argv[i];
    } else if (!strcmp(a, "--")) {
      opts_done = 1;
    } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return SSAE_EXIT_OK;
    } else if (!strcmp(a, "-o") || !strcmp(a, "--output") || !strcmp(a, "--files-from")) {
      if (i + 1 >= argc) {
        ssae_cli_error(CMD, "%s needs a value (see ssae merge --help)", a);
        return SSAE_EXIT_USAGE;
      }
      if (!strcmp(a, "--files-from")) list_file = argv[++i];
      else out = argv[++i];
    } else {
      ssae_cli_error(CMD, "unknown option '%s' (see ssae merge --help)", a);
      return SSAE_EXIT_USAGE;
    }
  }
  if (!nparts) {
    ssae_cli_error(CMD, "no shard outputs to merge (see ssae merge --help)");
    return SSAE_EXIT_USAGE;
  }

  ssae_err err = {{0}};
  ssae_shard_list *list = NULL;
  if (list_file) {
    char **lines = NULL, **paths = NULL;
    size_t nl = 0, np = 0;
    if (ssae_paths_read_list(list_file, &lines, &nl, &err) ||
        ssae_paths_expand(lines, nl, &paths, &np, &err) ||
        !(list = ssae_shard_list_new(paths, np, &err))) {
      ssae_cli_error(CMD, "%s", err.msg);
      ssae_paths_free(lines, nl);
      ssae_paths_free(paths, np);
      return SSAE_EXIT_INPUT;
    }
    ssae_paths_free(lines, nl);
    ssae_paths_free(paths, np);
  }
  ssae_merge_opts opts = {.list = list, .note = print_note};
  int rc = ssae_merge(argv + 1, (size_t)nparts, out, &opts, &err);
  if (rc) ssae_cli_error(CMD, "%s", err.msg);
  ssae_shard_list_free(list);
  return rc ? SSAE_EXIT_INPUT : SSAE_EXIT_OK;
}
