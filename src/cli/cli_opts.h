/* One option parser for every subcommand. A command declares a static table
 * of its options (long name, optional short name, kind of value, range or
 * choices, help text, where the value goes in the command's options
 * struct); ssae_cli_parse fills that struct from argv, checks every value,
 * prints `--help` generated from the table, and reports usage errors as
 * "ssae CMD: ..." on stderr naming the option and what it accepts.
 *
 * Accepted forms: `--name VALUE`, `--name=VALUE`, `-x VALUE`; `--` ends
 * the options (everything after it is positional); `-` alone is a
 * positional argument. An option given twice keeps the last value, except
 * LIST options, which collect every value in order. */
#ifndef SSAE_CLI_OPTS_H
#define SSAE_CLI_OPTS_H

#include <stddef.h>
#include <stdio.h>

#include "ssae_err.h"

typedef enum ssae_cli_kind {
  SSAE_CLI_END = 0, /* ends a table */
  SSAE_CLI_FLAG,    /* no value; stores int 1 */
  SSAE_CLI_INT,     /* int in [min, max] */
  SSAE_CLI_DOUBLE,  /* finite double in [min, max] */
  SSAE_CLI_STRING,  /* const char *: the argument itself */
  SSAE_CLI_CHOICE,  /* const char *: the table's spelling of one of choices */
  SSAE_CLI_LIST,    /* ssae_cli_list: every value, in order */
  SSAE_CLI_CUSTOM,  /* parse(): anything else (channels, feature settings) */
  SSAE_CLI_HEADING, /* not an option: a heading line in the help */
} ssae_cli_kind;

/* Values of a LIST option; the strings are argv's, the array is owned by
 * the ssae_cli_args of the parse. */
typedef struct ssae_cli_list {
  char **v;
  int n;
} ssae_cli_list;

struct ssae_cli_opt;
/* CUSTOM: stores the value at dest; -1 with the reason in err (printed as
 * "ssae CMD: --name: reason", exit 2). */
typedef int (*ssae_cli_parse_fn)(const struct ssae_cli_opt *o, const char *value, void *dest,
                                 ssae_err *err);
/* CUSTOM: the current value at dest as text, for the help's default. */
typedef void (*ssae_cli_show_fn)(const struct ssae_cli_opt *o, const void *dest, char *buf,
                                 size_t len);

typedef struct ssae_cli_opt {
  ssae_cli_kind kind;
  const char *name;   /* "--epochs" */
  char short_name;    /* 'o' for -o; 0: none */
  size_t offset;      /* where the value goes in the options struct */
  const char *metavar; /* the value's name in the help ("N", "FILE") */
  double min, max;    /* INT, DOUBLE: the accepted range */
  const char *const *choices; /* CHOICE: NULL-terminated */
  const char *help;   /* one sentence; wrapped to the terminal width of 80 */
  /* The default as the help shows it: NULL prints the struct's value at
   * parse time ("(default: 100)"); "" shows none (outputs, flags). */
  const char *def;
  ssae_cli_parse_fn parse; /* CUSTOM */
  ssae_cli_show_fn show;   /* CUSTOM, may be NULL */
  const void *arg;         /* CUSTOM's own argument (a feature key, ...) */
  /* LIST: the arguments after the value that do not start with "--" are
   * values too (`--connect A B C`). */
  int greedy;
} ssae_cli_opt;

typedef struct ssae_cli_cmd {
  const char *name;     /* "features": messages say "ssae features: ..." */
  const char *usage;    /* "usage: ssae features ..." lines, without the last newline */
  const char *about;    /* paragraph(s) between the usage and the options; may be NULL */
  const char *epilogue; /* after the options (notes, exit status); may be NULL */
  const ssae_cli_opt *opts;
  int positional;       /* 1: arguments that are not options are collected */
  /* 1: "unknown option --x", unquoted (ssae train has always said it so,
   * and scripts match it); 0: "unknown option '--x'". */
  int unquoted_unknown;
} ssae_cli_cmd;

/* What the parse leaves besides the options struct. */
typedef struct ssae_cli_args {
  char **pos; /* positional arguments, in order */
  int n_pos;
  const ssae_cli_cmd *cmd;
  unsigned char *given; /* per table entry: given on the command line */
  char **pool;          /* storage of LIST values and pos */
} ssae_cli_args;

/* ssae_cli_parse's result when the command goes on. */
#define SSAE_CLI_CONTINUE (-1)

/* Parses argv[1..argc-1] (argv[0] is the subcommand's name) into opts,
 * whose fields hold the defaults beforehand (the help prints them).
 * Returns SSAE_CLI_CONTINUE, or the exit status to return at once:
 * SSAE_EXIT_OK after --help (on stdout), SSAE_EXIT_USAGE after a usage
 * error (printed), SSAE_EXIT_INPUT when out of memory. args is released by
 * ssae_cli_args_free in every case. */
int ssae_cli_parse(const ssae_cli_cmd *cmd, int argc, char **argv, void *opts,
                   ssae_cli_args *args);
void ssae_cli_args_free(ssae_cli_args *args);

/* 1 when the option (long name) was on the command line. */
int ssae_cli_given(const ssae_cli_args *args, const char *name);

/* The help text, generated from the table with opts' current values as
 * the defaults. */
void ssae_cli_help(const ssae_cli_cmd *cmd, const void *opts, FILE *f);

/* Prints "ssae CMD: <msg> (see ssae CMD --help)" and returns
 * SSAE_EXIT_USAGE: for the checks a command makes after the parse. */
int ssae_cli_usage_error(const ssae_cli_cmd *cmd, const char *fmt, ...) SSAE_PRINTF(2, 3);

/* Ready-made CUSTOM parsers. */
/* int channel: an index from 0 or "mix"; "all" is refused. */
int ssae_cli_parse_channel(const ssae_cli_opt *o, const char *v, void *dest, ssae_err *err);
/* int channel: an index from 0, "mix" or "all". */
int ssae_cli_parse_channel_all(const ssae_cli_opt *o, const char *v, void *dest, ssae_err *err);
void ssae_cli_show_channel(const ssae_cli_opt *o, const void *dest, char *buf, size_t len);
/* The feature setting o->arg (a key of ssae_feat_keys) of the
 * ssae_feat_cfg at dest, through ssae_feat_cfg_set. */
int ssae_cli_parse_feature(const ssae_cli_opt *o, const char *v, void *dest, ssae_err *err);
void ssae_cli_show_feature(const ssae_cli_opt *o, const void *dest, char *buf, size_t len);

/* The range of --threshold in eval, report, monitor and jack: above 0.
 * Window scores are mean squared errors (>= 0), so a threshold of 0 would
 * call every sound an anomaly, and the engine and the LV2 plugin read 0 as
 * "the model's threshold"; no command takes 0. */
#define SSAE_CLI_THRESHOLD_MIN 1e-30
#define SSAE_CLI_THRESHOLD_MAX 1e30

/* The backend choices of score, eval, report, monitor and jack. */
extern const char *const ssae_cli_backends[];

#endif
