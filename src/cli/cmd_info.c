/* ssae info: what a model file holds (SPEC section 4). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ssae_features.h"
#include "ssae_model.h"

static const char *const CMD = "info";

static void usage(FILE *f) {
  fprintf(f,
          "usage: ssae info [options] [MODEL]\n\n"
          "Shows a model file's dimensions, feature settings, decision threshold and\n"
          "provenance (training files, windows, epochs, seed, loss, program version),\n"
          "after checking the whole file. Without MODEL, the model built into ssae.\n\n"
          "options:\n"
          "  --format text|json   text (default), or one JSON object with keys path,\n"
          "                       dims, parameters, features, threshold, metadata\n"
          "  -h, --help           this text\n\n"
          "Exit status: 0 the model is valid, 1 it is not (the reason on stderr),\n"
          "2 usage error.\n");
}

static int is_known(const char *k) {
  static const char *const own[] = {"latent_dim", "slice_latent_dim", "threshold",
                                    "threshold_method", NULL};
  for (int i = 0; ssae_feat_keys[i]; i++)
    if (!strcmp(k, ssae_feat_keys[i])) return 1;
  for (int i = 0; own[i]; i++)
    if (!strcmp(k, own[i])) return 1;
  return 0;
}

static void json_str(const char *s) {
  putchar('"');
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') printf("\\%c", c);
    else if (c < 0x20) printf("\\u%04x", c);
    else putchar(c);
  }
  putchar('"');
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
  if (path) json_str(path);
  else printf("null");
  printf(",\"dims\":{\"n_mels\":%d,\"frames\":%d,\"latent_dim\":%d,\"slice_latent_dim\":%d}",
         d->n_mels, d->frames, d->latent, d->slice_latent);
  printf(",\"parameters\":%zu,\"features\":{", ssae_model_param_count(d));
  for (int i = 0; ssae_feat_keys[i]; i++) {
    char buf[128];
    if (ssae_feat_cfg_get(&m->feat, ssae_feat_keys[i], buf, sizeof buf)) continue;
    printf("%s", i ? "," : "");
    json_str(ssae_feat_keys[i]);
    putchar(':');
    json_str(buf);
  }
  printf("},\"threshold\":");
  if (isnan(m->threshold)) printf("null");
  else printf("%.17g", m->threshold);
  printf(",\"metadata\":{");
  for (size_t i = 0; i < m->n_meta; i++) {
    printf("%s", i ? "," : "");
    json_str(m->meta[i].key);
    putchar(':');
    json_str(m->meta[i].value);
  }
  printf("}}\n");
}

int ssae_cmd_info(int argc, char **argv) {
  const char *path = NULL;
  int json = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return SSAE_EXIT_OK;
    } else if (!strcmp(a, "--format")) {
      if (i + 1 >= argc) {
        ssae_cli_error(CMD, "--format needs a value: text or json");
        return SSAE_EXIT_USAGE;
      }
      const char *v = argv[++i];
      if (!strcmp(v, "json")) json = 1;
      else if (!strcmp(v, "text")) json = 0;
      else {
        ssae_cli_error(CMD, "--format wants text or json, not '%s'", v);
        return SSAE_EXIT_USAGE;
      }
    } else if (!strcmp(a, "--model")) {
      if (i + 1 >= argc) {
        ssae_cli_error(CMD, "--model needs a file");
        return SSAE_EXIT_USAGE;
      }
      path = argv[++i];
    } else if (a[0] == '-' && a[1]) {
      ssae_cli_error(CMD, "unknown option '%s' (see ssae info --help)", a);
      return SSAE_EXIT_USAGE;
    } else if (path) {
      ssae_cli_error(CMD, "one model at a time ('%s' and '%s')", path, a);
      return SSAE_EXIT_USAGE;
    } else {
      path = a;
    }
  }
  ssae_err err = {{0}};
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
