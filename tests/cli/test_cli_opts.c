/* The option-table parser (src/cli/cli_opts.c): values, ranges, choices,
 * lists, positionals, --name=value, --help, and the usage errors (exit 2,
 * naming the option and what it accepts). stderr and stdout go to files so
 * that the messages can be checked. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cli_opts.h"
#include "ssae_audio.h"
#include "ssae_config.h"
#include "ssae_features.h"

typedef struct opts {
  const char *out, *fmt, *backend;
  int n, flag, channel;
  double x;
  ssae_cli_list list;
  ssae_feat_cfg feat;
} opts;

static const char *const fmts[] = {"tsv", "json", NULL};

static const ssae_cli_opt table[] = {
    {.kind = SSAE_CLI_STRING, .name = "--output", .short_name = 'o',
     .offset = offsetof(opts, out), .metavar = "PATH", .help = "where", .def = ""},
    {.kind = SSAE_CLI_INT, .name = "--count", .offset = offsetof(opts, n), .metavar = "N",
     .min = 1, .max = 10, .help = "how many"},
    {.kind = SSAE_CLI_DOUBLE, .name = "--ratio", .offset = offsetof(opts, x), .metavar = "X",
     .min = 0, .max = 1, .help = "a fraction"},
    {.kind = SSAE_CLI_CHOICE, .name = "--format", .offset = offsetof(opts, fmt),
     .choices = fmts, .help = "output format"},
    {.kind = SSAE_CLI_CHOICE, .name = "--backend", .offset = offsetof(opts, backend),
     .choices = ssae_cli_backends, .help = "where the model runs"},
    {.kind = SSAE_CLI_FLAG, .name = "--quiet", .short_name = 'q', .offset = offsetof(opts, flag),
     .help = "say less"},
    {.kind = SSAE_CLI_LIST, .name = "--connect", .offset = offsetof(opts, list),
     .metavar = "PORT", .greedy = 1, .help = "ports", .def = ""},
    {.kind = SSAE_CLI_CUSTOM, .name = "--channel", .offset = offsetof(opts, channel),
     .metavar = "N|mix", .help = "a channel", .parse = ssae_cli_parse_channel,
     .show = ssae_cli_show_channel},
    {.kind = SSAE_CLI_CUSTOM, .name = "--n-fft", .offset = offsetof(opts, feat), .metavar = "N",
     .help = "FFT size", .parse = ssae_cli_parse_feature, .show = ssae_cli_show_feature,
     .arg = "n_fft"},
    {0}};

static const ssae_cli_cmd cmd = {.name = "demo", .usage = "usage: ssae demo [options] FILE...",
                                 .about = "A demonstration.", .epilogue = "The end.",
                                 .opts = table, .positional = 1};
static const ssae_cli_cmd cmd_nopos = {.name = "demo", .usage = "usage: ssae demo",
                                       .opts = table, .unquoted_unknown = 1};

static int fails;
static char err_text[4096], out_text[8192];

#define CHECK(c, ...)                            \
  do {                                           \
    if (!(c)) {                                  \
      fprintf(stderr, "FAIL line %d: ", __LINE__); \
      fprintf(stderr, __VA_ARGS__);              \
      fputc('\n', stderr);                       \
      fails++;                                   \
    }                                            \
  } while (0)

static void slurp(FILE *f, char *buf, size_t len) {
  fflush(f);
  rewind(f);
  size_t n = fread(buf, 1, len - 1, f);
  buf[n] = 0;
  rewind(f);
  (void)!ftruncate(fileno(f), 0);
}

/* Parses the NULL-terminated argument list; the messages land in
 * err_text / out_text. */
static int parse(const ssae_cli_cmd *c, opts *o, ssae_cli_args *args, FILE *ef, FILE *of, ...) {
  char *argv[32];
  int argc = 0;
  argv[argc++] = "demo";
  va_list ap;
  va_start(ap, of);
  for (char *a; (a = va_arg(ap, char *));) argv[argc++] = a;
  va_end(ap);
  argv[argc] = NULL;
  memset(o, 0, sizeof *o);
  o->n = 3;
  o->x = 0.5;
  o->fmt = "tsv";
  ssae_feat_cfg_default(&o->feat);
  int saved_err = dup(2), saved_out = dup(1);
  fflush(stderr);
  fflush(stdout);
  dup2(fileno(ef), 2);
  dup2(fileno(of), 1);
  int rc = ssae_cli_parse(c, argc, argv, o, args);
  fflush(stderr);
  fflush(stdout);
  dup2(saved_err, 2);
  dup2(saved_out, 1);
  close(saved_err);
  close(saved_out);
  slurp(ef, err_text, sizeof err_text);
  slurp(of, out_text, sizeof out_text);
  return rc;
}

#define P(c, ...) parse(c, &o, &args, ef, of, __VA_ARGS__, (char *)NULL)
#define USAGE(...)                                                                      \
  do {                                                                                  \
    int rc_ = P(&cmd, __VA_ARGS__);                                                     \
    CHECK(rc_ == SSAE_EXIT_USAGE, "exit %d, want 2 (%s)", rc_, err_text);               \
  } while (0)
#define SAYS(s) CHECK(strstr(err_text, s), "stderr %s lacks '%s'", err_text, s)

int main(void) {
  FILE *ef = tmpfile(), *of = tmpfile();
  if (!ef || !of) return 99;
  opts o;
  ssae_cli_args args;

  /* Values of every kind, both spellings, positionals and "--". */
  int rc = P(&cmd, "a.wav", "-o", "x.npy", "--count", "7", "--ratio=0.25", "--format", "json",
             "-q", "--connect", "p1", "p2", "--connect", "p3", "--channel", "mix", "--n-fft",
             "2048", "-", "--", "--count");
  CHECK(rc == SSAE_CLI_CONTINUE, "parse failed: %d %s", rc, err_text);
  if (rc == SSAE_CLI_CONTINUE) {
    CHECK(!strcmp(o.out, "x.npy") && o.n == 7 && o.x == 0.25 && !strcmp(o.fmt, "json") &&
              o.flag == 1 && o.channel == SSAE_CHANNEL_MIX && o.feat.n_fft == 2048,
          "values: %s %d %g %s %d %d %d", o.out, o.n, o.x, o.fmt, o.flag, o.channel,
          o.feat.n_fft);
    CHECK(o.list.n == 3 && !strcmp(o.list.v[0], "p1") && !strcmp(o.list.v[2], "p3"),
          "list: %d", o.list.n);
    CHECK(args.n_pos == 3 && !strcmp(args.pos[0], "a.wav") && !strcmp(args.pos[1], "-") &&
              !strcmp(args.pos[2], "--count"),
          "positionals: %d", args.n_pos);
    CHECK(ssae_cli_given(&args, "--count") && ssae_cli_given(&args, "--output") &&
              ssae_cli_given(&args, "--ratio"),
          "given");
    ssae_cli_args_free(&args);
  }
  /* Defaults stay when not given; the last of a repeated option wins. */
  rc = P(&cmd, "--count", "2", "--count", "4");
  CHECK(rc == SSAE_CLI_CONTINUE && o.n == 4 && o.x == 0.5 && !strcmp(o.fmt, "tsv") &&
            !ssae_cli_given(&args, "--ratio"),
        "defaults / repeats: %d %g", o.n, o.x);
  if (rc == SSAE_CLI_CONTINUE) ssae_cli_args_free(&args);

  /* Ranges. */
  USAGE("--count", "11");
  SAYS("ssae demo: --count wants a whole number from 1 to 10, not '11'");
  USAGE("--count", "0");
  USAGE("--count", "3x");
  USAGE("--count", "");
  USAGE("--ratio", "1.5");
  SAYS("--ratio wants a number from 0 to 1, not '1.5'");
  USAGE("--ratio", "nan");
  USAGE("--ratio=-0.1");
  /* Choices. */
  USAGE("--format", "xml");
  SAYS("--format wants tsv or json, not 'xml'");
  /* --backend cuda: in a build without CUDA a usage error naming why,
   * before any input is read; with CUDA the choice (whether a device is
   * there is the run's question). */
#if SSAE_HAVE_CUDA
  rc = P(&cmd, "--backend", "cuda");
  CHECK(rc == SSAE_CLI_CONTINUE && !strcmp(o.backend, "cuda"), "--backend cuda: %d %s", rc,
        err_text);
  if (rc == SSAE_CLI_CONTINUE) ssae_cli_args_free(&args);
#else
  USAGE("--backend", "cuda");
  SAYS("--backend cuda: this ssae was built without CUDA");
#endif
  rc = P(&cmd, "--backend", "cpu");
  CHECK(rc == SSAE_CLI_CONTINUE && !strcmp(o.backend, "cpu"), "--backend cpu: %d", rc);
  if (rc == SSAE_CLI_CONTINUE) ssae_cli_args_free(&args);
  /* Custom kinds name the option and the reason. */
  USAGE("--channel", "all");
  SAYS("--channel: 'all' is not supported here");
  USAGE("--channel", "left");
  SAYS("--channel:");
  USAGE("--n-fft", "7");
  SAYS("--n-fft:");
  SAYS("n_fft");
  /* Missing values, unknown options, values given to flags. */
  USAGE("--count");
  SAYS("--count needs a value (see ssae demo --help)");
  USAGE("a.wav", "-o");
  SAYS("--output needs a value");
  USAGE("--bogus");
  SAYS("unknown option '--bogus' (see ssae demo --help)");
  USAGE("-x");
  SAYS("unknown option '-x'");
  USAGE("--quiet=1");
  SAYS("--quiet takes no value");
  rc = P(&cmd_nopos, "--bogus");
  CHECK(rc == SSAE_EXIT_USAGE && strstr(err_text, "unknown option --bogus"), "unquoted: %s",
        err_text);
  rc = P(&cmd_nopos, "file.wav");
  CHECK(rc == SSAE_EXIT_USAGE && strstr(err_text, "unexpected argument 'file.wav'"),
        "positional refused: %s", err_text);

  /* --help: exit 0, on stdout, every option with its default. */
  rc = P(&cmd, "--count", "9", "--help");
  CHECK(rc == SSAE_EXIT_OK && !err_text[0], "--help: %d %s", rc, err_text);
  static const char *const want[] = {"usage: ssae demo [options] FILE...", "A demonstration.",
                                     "options:", "-o, --output PATH", "--count N",
                                     "(default: 9)", "--ratio X", "(default: 0.5)",
                                     "--format tsv|json", "(default: tsv)", "-q, --quiet",
                                     "--connect PORT", "--channel N|mix", "(default: 0)",
                                     "--n-fft N", "(default: 1024)", "-h, --help",
                                     "The end.", NULL};
  for (int i = 0; want[i]; i++) CHECK(strstr(out_text, want[i]), "--help lacks '%s'", want[i]);
  for (char *l = out_text; *l;) {
    size_t n = strcspn(l, "\n");
    CHECK(n <= 80, "help line over 80 columns: %.*s", (int)n, l);
    l += n + (l[n] != 0);
  }
  rc = P(&cmd, "-h");
  CHECK(rc == SSAE_EXIT_OK && strstr(out_text, "usage: ssae demo"), "-h");
  /* A usage error before --help wins. */
  USAGE("--bogus", "--help");

  /* One CUDA hardware queue for the short jobs (score, eval, report):
   * asked for unless the backend is cpu, the user's own setting kept. */
  unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
  ssae_cli_one_cuda_queue("cpu");
  CHECK(!getenv("CUDA_DEVICE_MAX_CONNECTIONS"), "set for --backend cpu");
  ssae_cli_one_cuda_queue("auto");
  const char *q = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
#if SSAE_HAVE_CUDA
  CHECK(q && !strcmp(q, "1"), "one queue for auto: %s", q ? q : "unset");
#else
  CHECK(!q, "set without CUDA: %s", q);
#endif
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "4", 1);
  ssae_cli_one_cuda_queue("cuda");
  q = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  CHECK(q && !strcmp(q, "4"), "the user's setting replaced: %s", q ? q : "unset");

  if (fails) {
    fprintf(stderr, "%d check(s) failed\n", fails);
    return 1;
  }
  printf("all option parser checks passed\n");
  return 0;
}
