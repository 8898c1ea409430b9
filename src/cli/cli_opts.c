#include "cli_opts.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ssae_config.h"
#include "ssae_audio.h"
#include "ssae_features.h"

const char *const ssae_cli_backends[] = {"auto", "cpu", "cuda", NULL};

enum { HELP_COL = 26, HELP_WIDTH = 79 };

static void *field(void *opts, const ssae_cli_opt *o) { return (char *)opts + o->offset; }
static const void *cfield(const void *opts, const ssae_cli_opt *o) {
  return (const char *)opts + o->offset;
}

static int takes_value(const ssae_cli_opt *o) { return o->kind != SSAE_CLI_FLAG; }

/* "a, b or c" */
static void choice_text(const char *const *c, char *buf, size_t len) {
  size_t k = 0, n = 0;
  while (c[n]) n++;
  buf[0] = 0;
  for (size_t i = 0; i < n && k < len; i++) {
    const char *sep = i == 0 ? "" : i + 1 == n ? " or " : ", ";
    int w = snprintf(buf + k, len - k, "%s%s", sep, c[i]);
    if (w < 0) break;
    k += (size_t)w;
  }
}

/* ---- help ---------------------------------------------------------------- */

/* Writes text from column `col` on, wrapped at HELP_WIDTH; the first line
 * continues at column `at` (where the label ended). */
static void wrapped(FILE *f, const char *text, int col, int at) {
  const char *p = text;
  int pos = at;
  if (pos > col - 2) {
    fprintf(f, "\n%*s", col, "");
    pos = col;
  } else {
    fprintf(f, "%*s", col - pos, "");
    pos = col;
  }
  int first = 1;
  while (*p) {
    while (*p == ' ') p++;
    if (!*p) break;
    size_t w = strcspn(p, " ");
    if (!first && pos + 1 + (int)w > HELP_WIDTH) {
      fprintf(f, "\n%*s", col, "");
      pos = col;
      first = 1;
    }
    fprintf(f, "%s%.*s", first ? "" : " ", (int)w, p);
    pos += (int)w + (first ? 0 : 1);
    first = 0;
    p += w;
  }
  fputc('\n', f);
}

static void default_text(const ssae_cli_opt *o, const void *opts, char *buf, size_t len) {
  buf[0] = 0;
  if (o->def) {
    snprintf(buf, len, "%s", o->def);
    return;
  }
  const void *d = cfield(opts, o);
  switch (o->kind) {
    case SSAE_CLI_INT: snprintf(buf, len, "%d", *(const int *)d); break;
    case SSAE_CLI_DOUBLE: snprintf(buf, len, "%g", *(const double *)d); break;
    case SSAE_CLI_STRING:
    case SSAE_CLI_CHOICE:
      if (*(const char *const *)d) snprintf(buf, len, "%s", *(const char *const *)d);
      break;
    case SSAE_CLI_CUSTOM:
      if (o->show) o->show(o, d, buf, len);
      break;
    default: break;
  }
}

void ssae_cli_help(const ssae_cli_cmd *cmd, const void *opts, FILE *f) {
  fprintf(f, "%s\n", cmd->usage);
  if (cmd->about) fprintf(f, "\n%s\n", cmd->about);
  fputc('\n', f);
  if (!cmd->opts || cmd->opts[0].kind != SSAE_CLI_HEADING) fprintf(f, "options:\n");
  for (const ssae_cli_opt *o = cmd->opts; o && o->kind != SSAE_CLI_END; o++) {
    if (o->kind == SSAE_CLI_HEADING) {
      fprintf(f, "%s\n", o->help);
      continue;
    }
    char label[128], metavar[96], def[160], text[1024];
    metavar[0] = 0;
    if (takes_value(o)) {
      if (o->metavar) snprintf(metavar, sizeof metavar, " %s", o->metavar);
      else if (o->kind == SSAE_CLI_CHOICE) {
        size_t k = 0;
        metavar[k++] = ' ';
        for (int i = 0; o->choices[i] && k < sizeof metavar - 1; i++)
          k += (size_t)snprintf(metavar + k, sizeof metavar - k, "%s%s", i ? "|" : "",
                                o->choices[i]);
      } else snprintf(metavar, sizeof metavar, " X");
    }
    if (o->short_name)
      snprintf(label, sizeof label, "  -%c, %s%s", o->short_name, o->name, metavar);
    else
      snprintf(label, sizeof label, "  %s%s", o->name, metavar);
    default_text(o, opts, def, sizeof def);
    if (def[0])
      snprintf(text, sizeof text, "%s (default: %s)", o->help ? o->help : "", def);
    else
      snprintf(text, sizeof text, "%s", o->help ? o->help : "");
    fputs(label, f);
    wrapped(f, text, HELP_COL, (int)strlen(label));
  }
  fputs("  -h, --help", f);
  wrapped(f, "this text", HELP_COL, 12);
  if (cmd->epilogue) fprintf(f, "\n%s\n", cmd->epilogue);
}

/* ---- errors -------------------------------------------------------------- */

int ssae_cli_usage_error(const ssae_cli_cmd *cmd, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "ssae %s: ", cmd->name);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, " (see ssae %s --help)\n", cmd->name);
  return SSAE_EXIT_USAGE;
}

/* ---- values -------------------------------------------------------------- */

/* Stores one value; prints the usage error and returns -1 on a bad one. */
static int store(const ssae_cli_cmd *cmd, const ssae_cli_opt *o, const char *v, void *opts) {
  void *d = field(opts, o);
  char *end;
  switch (o->kind) {
    case SSAE_CLI_INT: {
      errno = 0;
      long x = strtol(v, &end, 10);
      if (errno || end == v || *end || (double)x < o->min || (double)x > o->max) {
        ssae_cli_error(cmd->name, "%s wants a whole number from %.0f to %.0f, not '%s'",
                       o->name, o->min, o->max, v);
        return -1;
      }
      *(int *)d = (int)x;
      return 0;
    }
    case SSAE_CLI_DOUBLE: {
      errno = 0;
      double x = strtod(v, &end);
      if (errno || end == v || *end || !isfinite(x) || x < o->min || x > o->max) {
        ssae_cli_error(cmd->name, "%s wants a number from %g to %g, not '%s'", o->name, o->min,
                       o->max, v);
        return -1;
      }
      *(double *)d = x;
      return 0;
    }
    case SSAE_CLI_STRING: *(const char **)d = v; return 0;
    case SSAE_CLI_CHOICE:
#if !SSAE_HAVE_CUDA
      /* Asking a build without CUDA for it cannot work however often it
       * runs: a usage error, as --gpu N is, before any input is read. By
       * the option's name, not its list: ssae bench's --backend has its
       * own choices (all, cpu, cuda) and got exit 1 after printing its
       * table's header. The choices left are the ones offered. */
      if (!strcmp(o->name, "--backend") && !strcmp(v, "cuda")) {
        const char *rest[8];
        size_t n = 0;
        for (int i = 0; o->choices[i] && n + 1 < sizeof rest / sizeof *rest; i++)
          if (strcmp(o->choices[i], "cuda")) rest[n++] = o->choices[i];
        rest[n] = NULL;
        char c[128];
        choice_text(rest, c, sizeof c);
        ssae_cli_error(cmd->name, "%s cuda: this ssae was built without CUDA (%s here; "
                                  "README: The GPU backend)", o->name, c);
        return -1;
      }
#endif
      for (int i = 0; o->choices[i]; i++)
        if (!strcmp(v, o->choices[i])) {
          *(const char **)d = o->choices[i];
          return 0;
        }
      {
        char c[256];
        choice_text(o->choices, c, sizeof c);
        ssae_cli_error(cmd->name, "%s wants %s, not '%s'", o->name, c, v);
      }
      return -1;
    case SSAE_CLI_LIST: {
      ssae_cli_list *l = d;
      l->v[l->n++] = (char *)v;
      return 0;
    }
    case SSAE_CLI_CUSTOM: {
      ssae_err err = {{0}};
      if (o->parse(o, v, d, &err)) {
        ssae_cli_error(cmd->name, "%s: %s", o->name, err.msg);
        return -1;
      }
      return 0;
    }
    default: return -1;
  }
}

static const ssae_cli_opt *find_long(const ssae_cli_cmd *cmd, const char *a, size_t len) {
  for (const ssae_cli_opt *o = cmd->opts; o && o->kind != SSAE_CLI_END; o++)
    if (o->kind != SSAE_CLI_HEADING && strlen(o->name) == len && !strncmp(o->name, a, len))
      return o;
  return NULL;
}

static const ssae_cli_opt *find_short(const ssae_cli_cmd *cmd, char c) {
  for (const ssae_cli_opt *o = cmd->opts; o && o->kind != SSAE_CLI_END; o++)
    if (o->kind != SSAE_CLI_HEADING && o->short_name == c) return o;
  return NULL;
}

void ssae_cli_args_free(ssae_cli_args *args) {
  if (!args) return;
  free(args->pool);
  free(args->given);
  memset(args, 0, sizeof *args);
}

int ssae_cli_given(const ssae_cli_args *args, const char *name) {
  if (!args->cmd || !args->given) return 0;
  int i = 0;
  for (const ssae_cli_opt *o = args->cmd->opts; o && o->kind != SSAE_CLI_END; o++, i++)
    if (o->kind != SSAE_CLI_HEADING && !strcmp(o->name, name)) return args->given[i];
  return 0;
}

int ssae_cli_parse(const ssae_cli_cmd *cmd, int argc, char **argv, void *opts,
                   ssae_cli_args *args) {
  memset(args, 0, sizeof *args);
  args->cmd = cmd;
  int n_opts = 0, n_lists = 0;
  for (const ssae_cli_opt *o = cmd->opts; o && o->kind != SSAE_CLI_END; o++, n_opts++)
    n_lists += o->kind == SSAE_CLI_LIST;
  /* Every list and the positionals get room for all of argv. */
  size_t slots = (size_t)argc + 1;
  args->pool = calloc(slots * (size_t)(n_lists + 1), sizeof *args->pool);
  args->given = calloc((size_t)n_opts + 1, 1);
  if (!args->pool || !args->given) {
    ssae_cli_error(cmd->name, "out of memory");
    ssae_cli_args_free(args);
    return SSAE_EXIT_INPUT;
  }
  args->pos = args->pool;
  int li = 0;
  for (const ssae_cli_opt *o = cmd->opts; o && o->kind != SSAE_CLI_END; o++)
    if (o->kind == SSAE_CLI_LIST) {
      ssae_cli_list *l = field(opts, o);
      l->v = args->pool + slots * (size_t)++li;
      l->n = 0;
    }

  int only_pos = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!only_pos && !strcmp(a, "--")) {
      only_pos = 1;
      continue;
    }
    if (only_pos || a[0] != '-' || a[1] == 0) {
      if (!cmd->positional) {
        ssae_cli_usage_error(cmd, "unexpected argument '%s'", a);
        goto usage;
      }
      args->pos[args->n_pos++] = argv[i];
      continue;
    }
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      ssae_cli_help(cmd, opts, stdout);
      ssae_cli_args_free(args);
      return SSAE_EXIT_OK;
    }
    const ssae_cli_opt *o = NULL;
    const char *inline_v = NULL;
    if (a[1] == '-') {
      const char *eq = strchr(a, '=');
      o = find_long(cmd, a, eq ? (size_t)(eq - a) : strlen(a));
      if (o && eq) inline_v = eq + 1;
    } else if (a[2] == 0) {
      o = find_short(cmd, a[1]);
    }
    if (!o) {
      ssae_cli_usage_error(cmd, cmd->unquoted_unknown ? "unknown option %s" : "unknown option '%s'",
                           a);
      goto usage;
    }
    args->given[o - cmd->opts] = 1;
    if (!takes_value(o)) {
      if (inline_v) {
        ssae_cli_usage_error(cmd, "%s takes no value", o->name);
        goto usage;
      }
      *(int *)field(opts, o) = 1;
      continue;
    }
    const char *v = inline_v;
    if (!v) {
      if (i + 1 >= argc) {
        ssae_cli_usage_error(cmd, "%s needs a value", o->name);
        goto usage;
      }
      v = argv[++i];
    }
    if (store(cmd, o, v, opts)) goto usage;
    if (o->kind == SSAE_CLI_LIST && o->greedy)
      while (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) store(cmd, o, argv[++i], opts);
  }
  return SSAE_CLI_CONTINUE;
usage:
  ssae_cli_args_free(args);
  return SSAE_EXIT_USAGE;
}

/* ---- ready-made CUSTOM kinds ---------------------------------------------- */

int ssae_cli_parse_channel_all(const ssae_cli_opt *o, const char *v, void *dest, ssae_err *err) {
  (void)o;
  return ssae_audio_parse_channel(v, dest, err);
}

int ssae_cli_parse_channel(const ssae_cli_opt *o, const char *v, void *dest, ssae_err *err) {
  (void)o;
  int c;
  /* The reader's message offers 'all', which these commands refuse. */
  if (ssae_audio_parse_channel(v, &c, err))
    return ssae_err_set(err, "channel '%s' is not an index from 0 (up to 1023) or 'mix'", v);
  if (c == SSAE_CHANNEL_ALL)
    return ssae_err_set(err, "'all' is not supported here: give an index from 0 or mix");
  *(int *)dest = c;
  return 0;
}

void ssae_cli_show_channel(const ssae_cli_opt *o, const void *dest, char *buf, size_t len) {
  (void)o;
  int c = *(const int *)dest;
  if (c == SSAE_CHANNEL_MIX) snprintf(buf, len, "mix");
  else if (c == SSAE_CHANNEL_ALL) snprintf(buf, len, "all");
  else snprintf(buf, len, "%d", c);
}

int ssae_cli_parse_feature(const ssae_cli_opt *o, const char *v, void *dest, ssae_err *err) {
  int rc = ssae_feat_cfg_set(dest, o->arg, v, err);
  if (rc == 1) return 0;
  if (rc == 0) ssae_err_set(err, "no feature setting %s", (const char *)o->arg);
  return -1;
}

void ssae_cli_show_feature(const ssae_cli_opt *o, const void *dest, char *buf, size_t len) {
  if (ssae_feat_cfg_get(dest, o->arg, buf, len)) buf[0] = 0;
}
