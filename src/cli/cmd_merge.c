/* ssae merge: the outputs of `ssae score --shard` into one result in input
 * order (the merging and its checks are ssae_merge's). */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cli_opts.h"
#include "ssae_merge.h"
#include "ssae_shard.h"

static const char *const CMD = "merge";

typedef struct opts {
  const char *output, *files_from;
} opts;

static const ssae_cli_opt options[] = {
    {.kind = SSAE_CLI_STRING, .name = "--output", .short_name = 'o',
     .offset = offsetof(opts, output), .metavar = "OUT",
     .help = "write the result to OUT (atomically: a temporary file beside it, renamed)",
     .def = "stdout"},
    {.kind = SSAE_CLI_STRING, .name = "--files-from", .offset = offsetof(opts, files_from),
     .metavar = "LIST|-",
     .help = "the input list given to ssae score (one path per line, '-' for stdin; "
             "directories expanded): its digest must match, and missing inputs are named",
     .def = ""},
    {0}};

static const ssae_cli_cmd command = {
    .name = "merge",
    .usage = "usage: ssae merge [-o OUT] [--files-from LIST|-] PART...",
    .about = "Joins the outputs of 'ssae score --shard I/N' (TSV, JSON or --windows\n"
             "files, one per shard) into the result one 'ssae score' run over the same\n"
             "inputs gives, in input order. The parts must be shards 0 to N-1 of one\n"
             "input list (their headers carry its digest), each complete, and every\n"
             "input must appear exactly once; missing or duplicated shards and inputs,\n"
             "and result lines without the values ssae score writes, are named and\n"
             "nothing is written.",
    .epilogue = "Exit status: 0 merged, 1 a problem named above or inputs that failed in\n"
                "their shard (the result is still written then), 2 usage error.",
    .opts = options,
    .positional = 1,
};

static void print_note(void *user, const char *msg) {
  (void)user;
  ssae_cli_error(CMD, "%s", msg);
}

/* The list given with --files-from, expanded as ssae score expands it. */
static ssae_shard_list *read_list(const char *file, ssae_err *err) {
  char **lines = NULL, **paths = NULL;
  size_t nl = 0, np = 0;
  ssae_shard_list *list = NULL;
  if (ssae_paths_read_list(file, &lines, &nl, err) == 0 &&
      ssae_paths_expand(lines, nl, &paths, &np, err) == 0)
    list = ssae_shard_list_new(paths, np, err);
  ssae_paths_free(lines, nl);
  ssae_paths_free(paths, np);
  return list;
}

int ssae_cmd_merge(int argc, char **argv) {
  opts o = {0};
  ssae_cli_args args;
  int rc = ssae_cli_parse(&command, argc, argv, &o, &args);
  if (rc != SSAE_CLI_CONTINUE) return rc;
  ssae_err err = {{0}};
  ssae_shard_list *list = NULL;
  if (!args.n_pos) {
    rc = ssae_cli_usage_error(&command, "no shard outputs to merge");
  } else if (o.files_from && !(list = read_list(o.files_from, &err))) {
    ssae_cli_error(CMD, "%s", err.msg);
    rc = SSAE_EXIT_INPUT;
  } else {
    ssae_merge_opts mo = {.list = list, .note = print_note};
    rc = ssae_merge(args.pos, (size_t)args.n_pos, o.output, &mo, &err) ? SSAE_EXIT_INPUT
                                                                          : SSAE_EXIT_OK;
    if (rc) ssae_cli_error(CMD, "%s", err.msg);
  }
  ssae_shard_list_free(list);
  ssae_cli_args_free(&args);
  return rc;
}
