/* ssae info: what a model file holds (SPEC section 4). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "cli_opts.h"
#include "ssae_features.h"
#include "ssae_model.h"

static const char *const CMD = "info";

typedef struct opts {
  const char *model, *format;
} opts;

static const char *const formats[] = {"text", "json", NULL};

static const ssae_cli_opt options[] = {
    {.kind = SSAE_CLI_CHOICE, .name = "--format", .offset = offsetof(opts, format),
     .choices = formats,
     .help = "text, or one JSON object with keys path, dims, parameters, features, threshold, "
             "metadata"},
    {.kind = SSAE_CLI_STRING, .name = "--model", .offset = offsetof(opts, model), .metavar = "M",
     .help = "the model file, as MODEL", .def = "the model built into ssae"},
    {0}};

static const ssae_cli_cmd command = {
    .name = "info",
    .usage = "usage: ssae info [options] [MODEL]",
    .about = "Shows a model file's dimensions, feature settings, decision threshold and\n"
             "provenance (training files, windows, epochs, seed, loss, program version),\n"
             "after checking the whole file. Without MODEL, the model built into ssae.",
    .epilogue = "Exit status: 0 the model is valid, 1 it is not (the reason on stderr),\n"
                "2 usage error.",
    .opts = options,
    .positional = 1,
};

static int is_known(const char *k) {
  static const char *const own[] = {"latent_dim", "slice_latent_dim", "threshold",
                                    "threshold_method", NULL};
  for (int i = 0; ssae_feat_keys[i]; i++)
    if (!strcmp(k, ssae_feat_keys[i])) return 1;
  for (int i = 0; own[i]; i++)
    if (!strcmp(k, own[i])) return 1;
  return 0;
}

static void print_text(const ssae_model *m, const char *path) {
  const ssae_dims *d = &m->d;
  printf("model          %s\n", path ? path : "built-in default model");
  printf("dimensions     n_mels %d, frames %d, latent_dim %d, slice_latent_dim %d "
         "(window %d values, combined %d)\n", d->n_mels, d->frames, d->latent, d->slice_latent,
         d->n_mels * d->frames, d->frames * d->slice_latent);
  printf("parameters     %zu\n", ssae_model_param_count(d));
  printf("features      ");
  for (int i = 0; ssae_feat_keys[i]; i++) {
    char buf[128];
    if (ssae_feat_cfg_get(&m->feat, ssae_feat_keys[i], buf, sizeof buf) == 0)
      printf(" %s=%s", ssae_feat_keys[i], buf);
  }
  printf("\n");
  const char *method = ssae_model_meta_get(m, "threshold_method");
  if (isnan(m->threshold))
    printf("threshold      none (ssae score says 'unknown')%s%s\n", method ? "; method " : "",
           method ? method : "");
  else
    printf("threshold      %.9g%s%s\n", m->threshold, method ? ", set by " : "",
           method ? method : "");
  int any = 0;
  for (size_t i = 0; i < m->n_meta; i++) {
    if (is_known(m->meta[i].key)) continue;
    if (!any) printf("provenance\n");
    any = 1;
    printf("  %-20s %s\n", m->meta[i].key, m->meta[i].value);
  }
  if (!any) printf("provenance     none recorded\n");
}

static void print_json(const ssae_model *m, const char *path) {
  const ssae_dims *d = &m->d;
  printf("{\"path\":");
  if (path) ssae_cli_json_str(stdout, path);
  else printf("null");
  printf(",\"dims\":{\"n_mels\":%d,\"frames\":%d,\"latent_dim\":%d,\"slice_latent_dim\":%d}",
         d->n_mels, d->frames, d->latent, d->slice_latent);
  printf(",\"parameters\":%zu,\"features\":{", ssae_model_param_count(d));
  for (int i = 0; ssae_feat_keys[i]; i++) {
    char buf[128];
    if (ssae_feat_cfg_get(&m->feat, ssae_feat_keys[i], buf, sizeof buf)) continue;
    printf("%s", i ? "," : "");
    ssae_cli_json_str(stdout, ssae_feat_keys[i]);
    putchar(':');
    ssae_cli_json_str(stdout, buf);
  }
  printf("},\"threshold\":");
  if (isnan(m->threshold)) printf("null");
  else printf("%.17g", m->threshold);
  printf(",\"metadata\":{");
  for (size_t i = 0; i < m->n_meta; i++) {
    printf("%s", i ? "," : "");
    ssae_cli_json_str(stdout, m->meta[i].key);
    putchar(':');
    ssae_cli_json_str(stdout, m->meta[i].value);
  }
  printf("}}\n");
}

int ssae_cmd_info(int argc, char **argv) {
  opts o = {.format = "text"};
  ssae_cli_args args;
  int rc = ssae_cli_parse(&command, argc, argv, &o, &args);
  if (rc != SSAE_CLI_CONTINUE) return rc;
  const char *path = o.model;
  for (int i = 0; i < args.n_pos; i++) {
    if (path) {
      ssae_cli_error(CMD, "one model at a time ('%s' and '%s')", path, args.pos[i]);
      ssae_cli_args_free(&args);
      return SSAE_EXIT_USAGE;
    }
    path = args.pos[i];
  }
  ssae_cli_args_free(&args);
  const int json = !strcmp(o.format, "json");
  ssae_err err = {{0}};
  /* A FIFO or a device would block the open (a FIFO until a writer
   * comes): such a path is refused before it is opened. */
  struct stat st;
  if (path && stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
    ssae_cli_error(CMD, "%s: not a regular file", path);
    return SSAE_EXIT_INPUT;
  }
  ssae_model *m = ssae_model_open(path, &err);
  if (!m) {
    ssae_cli_error(CMD, "%s", err.msg);
    return SSAE_EXIT_INPUT;
  }
  if (json) print_json(m, path);
  else print_text(m, path);
  ssae_model_free(m);
  return SSAE_EXIT_OK;
}
