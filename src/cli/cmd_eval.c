/* ssae eval: how well a model separates normal from anomalous recordings. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <strings.h>
#include <sys/stat.h>

#include "cli.h"
#include "cli_opts.h"
#include "ssae_audio.h"
#include "ssae_backend.h"
#include "ssae_config.h"
#include "ssae_filescore.h"
#include "ssae_metrics.h"
#include "ssae_model.h"
#include "ssae_outfile.h"
#include "ssae_plot.h"
#include "ssae_reference.h"

static const char *const CMD = "eval";

typedef struct opts {
  const char *model, *csv, *format, *plot, *scores, *backend;
  ssae_cli_list normal, anomaly;
  double threshold, max_fpr;
  int channel, strict, device;
} opts;

static const char *const formats[] = {"tsv", "json", NULL};

static const ssae_cli_opt options[] = {
    {.kind = SSAE_CLI_STRING, .name = "--model", .offset = offsetof(opts, model), .metavar = "M",
     .help = "model file", .def = "the model that ships with ssae"},
    {.kind = SSAE_CLI_LIST, .name = "--normal", .offset = offsetof(opts, normal),
     .metavar = "PATH", .help = "normal recordings (directory or file); repeatable",
     .def = ""},
    {.kind = SSAE_CLI_LIST, .name = "--anomaly", .offset = offsetof(opts, anomaly),
     .metavar = "PATH", .help = "anomalous recordings (directory or file); repeatable",
     .def = ""},
    {.kind = SSAE_CLI_STRING, .name = "--csv", .offset = offsetof(opts, csv), .metavar = "FILE",
     .help = "labelled file list instead of directories", .def = ""},
    {.kind = SSAE_CLI_CHOICE, .name = "--format", .offset = offsetof(opts, format),
     .choices = formats, .help = "output format"},
    {.kind = SSAE_CLI_STRING, .name = "--plot", .offset = offsetof(opts, plot),
     .metavar = "OUT.png|.svg", .help = "ROC curves and score histograms with the threshold",
     .def = ""},
    {.kind = SSAE_CLI_STRING, .name = "--scores", .offset = offsetof(opts, scores),
     .metavar = "FILE",
     .help = "also write every file's score (TSV: section, path, label, score, windows)",
     .def = ""},
    {.kind = SSAE_CLI_DOUBLE, .name = "--threshold", .offset = offsetof(opts, threshold),
     .metavar = "X", .min = SSAE_CLI_THRESHOLD_MIN,
     .max = SSAE_CLI_THRESHOLD_MAX,
     .help = "(above 0) decide at X instead of the model's threshold",
     .def = "the model's"},
    {.kind = SSAE_CLI_DOUBLE, .name = "--max-fpr", .offset = offsetof(opts, max_fpr),
     .metavar = "X", .min = 1e-6, .max = 1, .help = "partial AUC limit"},
    {.kind = SSAE_CLI_CHOICE, .name = "--backend", .offset = offsetof(opts, backend),
     .choices = ssae_cli_backends, .help = "where the model runs"},
    {.kind = SSAE_CLI_INT, .name = "--device", .offset = offsetof(opts, device), .metavar = "N",
     .min = 0, .max = 255, .help = "CUDA device of the CUDA backend (--backend cuda or auto)",
     .def = "0"},
    {.kind = SSAE_CLI_CUSTOM, .name = "--channel", .offset = offsetof(opts, channel),
     .metavar = "N|mix", .help = "channel of multi-channel files",
     .parse = ssae_cli_parse_channel, .show = ssae_cli_show_channel},
    {.kind = SSAE_CLI_FLAG, .name = "--strict", .offset = offsetof(opts, strict),
     .help = "a file whose data chunk is shorter than its header says is skipped as an "
             "error, not scored with a warning"},
    {0}};

static const ssae_cli_cmd command = {
    .name = "eval",
    .usage = "usage: ssae eval [options] --normal DIR --anomaly DIR "
             "[--normal DIR --anomaly DIR...]\n"
             "       ssae eval [options] --csv FILE",
    .about = "Scores normal and anomalous recordings with the model and reports how well\n"
             "the scores separate them: ROC AUC, partial AUC up to a false-positive rate of\n"
             "0.1 (McClish-standardised, as scikit-learn's roc_auc_score(max_fpr=0.1)), and\n"
             "precision, recall and F1 when a file is called anomalous at score > threshold\n"
             "(the model's threshold). Anomalous files are the positive class.\n\n"
             "Each --normal/--anomaly pair (in order; directories are searched recursively,\n"
             "or single files) is one section, for instance one machine; with several\n"
             "sections a last section \"all\" pools every file. A CSV file has lines\n"
             "path,label (label normal|anomaly, or 0|1; a header line is skipped; relative\n"
             "paths are relative to the CSV's directory) and forms one section; a CSV\n"
             "with a bad line is refused before any scoring, every bad line named.\n"
             "A file that cannot be read or scored is reported and skipped (exit 1).",
    .epilogue = "A model from ssae train also holds a spectrum-only reference (a Gaussian of\n"
                "each window's mean log-mel spectrum, fitted on the same training windows):\n"
                "its AUC and pAUC on the same files follow the network's (ref_auc, ref_pauc,\n"
                "and the network's minus the reference's), and a line on stderr says whether\n"
                "the network beats it.\n"
                "Exit status: 0 success, 1 some file or section failed (the rest is still\n"
                "reported), 2 usage error (a bad CSV line, a --plot name that is not\n"
                ".png or .svg).",
    .opts = options,
};

typedef struct {
  char *name;        /* section name */
  char *normal_src;  /* what the user gave */
  char *anomaly_src;
  char **paths;
  int *labels;
  size_t n;
  double *scores; /* per path; NAN when the file failed */
  size_t *windows;
  double *ref_scores; /* the spectrum-only reference's; NULL without one */
} section;

static void section_free(section *s) {
  free(s->name);
  free(s->normal_src);
  free(s->anomaly_src);
  ssae_cli_free_paths(s->paths, s->n);
  free(s->labels);
  free(s->scores);
  free(s->windows);
  free(s->ref_scores);
}

static int add_path(section *s, const char *p, int label) {
  char **v = realloc(s->paths, (s->n + 1) * sizeof *v);
  if (!v) return -1;
  s->paths = v;
  int *l = realloc(s->labels, (s->n + 1) * sizeof *l);
  if (!l) return -1;
  s->labels = l;
  if (!(s->paths[s->n] = strdup(p))) return -1;
  s->labels[s->n++] = label;
  return 0;
}

static int add_collected(section *s, char *arg, int label) {
  char **paths;
  size_t n;
  ssae_err err;
  /* a folder that is not there is the user's typo, not a file to skip */
  struct stat st;
  if (stat(arg, &st)) {
    ssae_cli_error(CMD, "--%s %s: %s", label ? "anomaly" : "normal", arg, strerror(errno));
    return -1;
  }
  if (ssae_cli_collect(&arg, 1, &paths, &n, &err)) {
    ssae_cli_error(CMD, "%s", err.msg);
    return -1;
  }
  int rc = 0;
  for (size_t i = 0; i < n && !rc; i++) rc = add_path(s, paths[i], label);
  ssae_cli_free_paths(paths, n);
  if (rc) ssae_cli_error(CMD, "out of memory");
  else if (n == 0) ssae_cli_error(CMD, "%s: no audio files", arg);
  return rc;
}

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t') s++;
  size_t n = strlen(s);
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
    s[--n] = 0;
  if (n >= 2 && s[0] == '"' && s[n - 1] == '"') {
    s[n - 1] = 0;
    s++;
  }
  return s;
}

/* Returns 0, or -1 after printing why: every bad line with its number and
 * reason (the whole CSV is then refused, before any work), or a CSV that
 * cannot be read. */
static int read_csv(section *s, const char *csv) {
  FILE *f = fopen(csv, "r");
  if (!f) {
    ssae_cli_error(CMD, "%s: %s", csv, strerror(errno));
    return -1;
  }
  const char *slash = strrchr(csv, '/');
  size_t dirlen = slash ? (size_t)(slash - csv + 1) : 0;
  char line[8192];
  int lineno = 0, rc = 0, bad = 0, oom = 0;
  while (!oom && fgets(line, sizeof line, f)) {
    lineno++;
    size_t len = strlen(line);
    if (len == sizeof line - 1 && line[len - 1] != '\n' && !feof(f)) {
      ssae_cli_error(CMD, "%s:%d: line longer than %zu bytes", csv, lineno, sizeof line - 2);
      bad++;
      int c;
      while ((c = fgetc(f)) != EOF && c != '\n') {
      }
      continue;
    }
    char *p = trim(line);
    if (!*p || *p == '#') continue;
    char *comma = strrchr(p, ',');
    if (!comma) {
      ssae_cli_error(CMD, "%s:%d: expected path,label", csv, lineno);
      bad++;
      continue;
    }
    *comma = 0;
    char *path = trim(p), *lab = trim(comma + 1);
    char full[8192 + 4096];
    if (path[0] == '/' || !dirlen) snprintf(full, sizeof full, "%s", path);
    else snprintf(full, sizeof full, "%.*s%s", (int)dirlen, csv, path);
    int label;
    if (!strcasecmp(lab, "normal") || !strcmp(lab, "0")) label = 0;
    else if (!strcasecmp(lab, "anomaly") || !strcasecmp(lab, "anomalous") || !strcmp(lab, "1"))
      label = 1;
    /* a header: "label", or any first line whose path is not a file */
    else if (!strcasecmp(lab, "label") || (lineno == 1 && *path && access(full, F_OK) != 0))
      continue;
    else {
      ssae_cli_error(CMD, "%s:%d: label '%s' is not normal, anomaly, 0 or 1", csv, lineno, lab);
      bad++;
      continue;
    }
    if (!*path) {
      ssae_cli_error(CMD, "%s:%d: no path before the label", csv, lineno);
      bad++;
      continue;
    }
    if (add_path(s, full, label)) {
      ssae_cli_error(CMD, "out of memory");
      oom = rc = -1;
    }
  }
  if (!oom && ferror(f)) {
    ssae_cli_error(CMD, "%s: read failed: %s", csv, strerror(errno));
    rc = -1;
  }
  fclose(f);
  if (bad) {
    ssae_cli_error(CMD, "%s: %d bad line%s of %d: nothing evaluated", csv, bad,
                   bad == 1 ? "" : "s", lineno);
    rc = -1;
  } else if (!rc && s->n == 0) {
    ssae_cli_error(CMD, "%s: no files listed", csv);
    rc = -1;
  }
  return rc;
}

/* done: files tried, of which skipped failed (never counted as scored). */
static void progress(size_t done, size_t skipped, size_t total, const char *name) {
  if (ssae_cli_stderr_tty()) {
    fprintf(stderr, "\rscoring %zu/%zu %-40.40s", done, total, name);
    if (done == total) fprintf(stderr, "\r%-70s\r", "");
  } else if (done == total || (total >= 40 && done % (total / 4) == 0)) {
    if (skipped)
      fprintf(stderr, "ssae eval: %zu/%zu files: %zu scored, %zu skipped\n", done, total,
              done - skipped, skipped);
    else
      fprintf(stderr, "ssae eval: scored %zu/%zu files\n", done, total);
  }
  fflush(stderr);
}

static void fmt_num(char *buf, size_t len, double v, int json) {
  if (isnan(v)) snprintf(buf, len, json ? "null" : "nan");
  else snprintf(buf, len, "%.6f", v);
}

/* The reference's metrics next to a section's, and the comparison. */
typedef struct ref_row {
  int have;
  double auc, pauc;
} ref_row;

static void print_row(const char *name, const char *normal, const char *anomaly,
                      const ssae_metrics *m, const ref_row *ref, int json, int last) {
  char rauc[32], rpauc[32], dauc[32], dpauc[32];
  fmt_num(rauc, sizeof rauc, ref->have ? ref->auc : NAN, json);
  fmt_num(rpauc, sizeof rpauc, ref->have ? ref->pauc : NAN, json);
  fmt_num(dauc, sizeof dauc, ref->have ? m->auc - ref->auc : NAN, json);
  fmt_num(dpauc, sizeof dpauc, ref->have ? m->pauc - ref->pauc : NAN, json);
  char auc[32], pauc[32], thr[32], p[32], r[32], f1[32];
  fmt_num(auc, sizeof auc, m->auc, json);
  fmt_num(pauc, sizeof pauc, m->pauc, json);
  fmt_num(thr, sizeof thr, m->threshold, json);
  fmt_num(p, sizeof p, m->precision, json);
  fmt_num(r, sizeof r, m->recall, json);
  fmt_num(f1, sizeof f1, m->f1, json);
  if (!json) {
    printf("%s\t%s\t%s\t%zu\t%zu\t%s\t%s\t%g\t%s\t%s\t%s\t%s\t%zu\t%zu\t%zu\t%zu", name, normal,
           anomaly, m->n_normal, m->n_anomaly, auc, pauc, m->max_fpr, thr, p, r, f1, m->tp,
           m->fp, m->tn, m->fn);
    printf("\t%s\t%s\t%s\t%s\n", rauc, rpauc, dauc, dpauc);
    return;
  }
  printf("    {\"name\": ");
  ssae_cli_json_str(stdout, name);
  printf(", \"normal\": ");
  ssae_cli_json_str(stdout, normal);
  printf(", \"anomaly\": ");
  ssae_cli_json_str(stdout, anomaly);
  printf(",\n     \"n_normal\": %zu, \"n_anomaly\": %zu, \"auc\": %s, \"pauc\": %s, "
         "\"max_fpr\": %g,\n     \"threshold\": %s, \"precision\": %s, \"recall\": %s, "
         "\"f1\": %s, \"tp\": %zu, \"fp\": %zu, \"tn\": %zu, \"fn\": %zu,\n",
         m->n_normal, m->n_anomaly, auc, pauc, m->max_fpr, thr, p, r, f1, m->tp, m->fp, m->tn,
         m->fn);
  printf("     \"reference_auc\": %s, \"reference_pauc\": %s, \"auc_minus_reference\": %s, "
         "\"pauc_minus_reference\": %s, \"beats_reference\": %s}%s\n", rauc, rpauc, dauc,
         dpauc, !ref->have || isnan(m->auc) || isnan(ref->auc) ? "null"
                : m->auc > ref->auc ? "true" : "false", last ? "" : ",");
}

/* The files of a section that were scored. */
static size_t gather(const section *s, double *scores, int *labels) {
  size_t k = 0;
  for (size_t i = 0; i < s->n; i++)
    if (!isnan(s->scores[i])) {
      scores[k] = s->scores[i];
      labels[k++] = s->labels[i];
    }
  return k;
}

/* Usage errors the table cannot express; 0 when the options make sense. */
static int check(const opts *o) {
  if (o->normal.n != o->anomaly.n)
    return ssae_cli_usage_error(&command,
                                "give --normal and --anomaly in pairs (%d --normal, %d --anomaly)",
                                o->normal.n, o->anomaly.n);
  if (!o->csv && o->normal.n == 0)
    return ssae_cli_usage_error(&command,
                                "nothing to evaluate: give --normal DIR --anomaly DIR "
                                "or --csv FILE");
  if (o->plot) {
    const char *dot = strrchr(o->plot, '.');
    if (!dot || (strcasecmp(dot, ".png") && strcasecmp(dot, ".svg")))
      return ssae_cli_usage_error(&command, "--plot %s: the picture's name must end in .png "
                                  "or .svg", o->plot);
  }
  if (o->plot && !SSAE_HAVE_CAIRO) {
    ssae_cli_error(CMD, "--plot: this ssae was built without cairo (libcairo2-dev), so it "
                        "cannot draw pictures");
    return SSAE_EXIT_USAGE;
  }
  return 0;
}

/* The sections the options name, with their files: one per
 * --normal/--anomaly pair, then the CSV's; room for the pooled one after
 * them. *rc becomes 1 when some path could not be listed. */
static section *make_sections(const opts *o, size_t *n_sec, int *rc, int *bad_csv) {
  const int n_norm = o->normal.n;
  *n_sec = (size_t)n_norm + (o->csv ? 1 : 0);
  section *sec = calloc(*n_sec + 1, sizeof *sec);
  if (!sec) {
    ssae_cli_error(CMD, "out of memory");
    return NULL;
  }
  char name[64];
  for (int i = 0; i < n_norm; i++) {
    snprintf(name, sizeof name, "%d", i + 1);
    sec[i].name = strdup(name);
    sec[i].normal_src = strdup(o->normal.v[i]);
    sec[i].anomaly_src = strdup(o->anomaly.v[i]);
    if (add_collected(&sec[i], o->normal.v[i], 0) | add_collected(&sec[i], o->anomaly.v[i], 1))
      *rc = SSAE_EXIT_INPUT;
  }
  if (o->csv) {
    section *s = &sec[n_norm];
    snprintf(name, sizeof name, "%d", n_norm + 1);
    s->name = strdup(name);
    s->normal_src = strdup(o->csv);
    s->anomaly_src = strdup(o->csv);
    if (read_csv(s, o->csv)) *bad_csv = 1;
  }
  return sec;
}

/* Every file's score (NAN when it failed: reported and skipped, *rc 1);
 * *total: the number of files. -1 when out of memory. */
static int score_sections(const opts *o, const ssae_model *m, ssae_backend *b,
                          const ssae_reference *ref, section *sec, size_t n_sec, size_t *total,
                          int *rc) {
  ssae_err err;
  size_t done = 0, skipped = 0;
  ssae_audio_opts ao = {.strict = o->strict};
  *total = 0;
  for (size_t k = 0; k < n_sec; k++) *total += sec[k].n;
  for (size_t k = 0; k < n_sec; k++) {
    section *s = &sec[k];
    s->scores = malloc((s->n ? s->n : 1) * sizeof *s->scores);
    s->windows = calloc(s->n ? s->n : 1, sizeof *s->windows);
    if (ref) s->ref_scores = malloc((s->n ? s->n : 1) * sizeof *s->ref_scores);
    if (!s->scores || !s->windows || (ref && !s->ref_scores)) {
      ssae_cli_error(CMD, "out of memory");
      *rc = SSAE_EXIT_INPUT;
      return -1;
    }
    for (size_t i = 0; i < s->n; i++) {
      ssae_file_scores fs;
      s->scores[i] = NAN;
      if (ref) s->ref_scores[i] = NAN;
      if (ssae_file_score_opts(m, b, 256, s->paths[i], o->channel, ref != NULL, &ao, &fs, &err)) {
        if (ssae_cli_stderr_tty()) fputc('\n', stderr);
        ssae_cli_error(CMD, "skipped: %s", err.msg);
        *rc = SSAE_EXIT_INPUT;
        skipped++;
      } else {
        if (fs.warning.msg[0]) {
          if (ssae_cli_stderr_tty()) fputc('\n', stderr);
          ssae_cli_error(CMD, "warning: %s", fs.warning.msg);
        }
        s->scores[i] = fs.file_score;
        s->windows[i] = fs.n_windows;
        if (ref) s->ref_scores[i] = ssae_reference_file_score(ref, fs.frames, fs.n_frames, NULL);
        ssae_file_scores_release(&fs);
      }
      progress(++done, skipped, *total, s->paths[i]);
    }
  }
  return 0;
}

/* With several sections, section "all" at sec[n_sec] pools every file;
 * returns the number of sections then. */
static size_t pool(section *sec, size_t n_sec, size_t total) {
  if (n_sec < 2) return n_sec;
  section *all = &sec[n_sec];
  all->name = strdup("all");
  all->normal_src = strdup("*");
  all->anomaly_src = strdup("*");
  all->scores = malloc((total ? total : 1) * sizeof *all->scores);
  all->labels = malloc((total ? total : 1) * sizeof *all->labels);
  if (sec[0].ref_scores) all->ref_scores = malloc((total ? total : 1) * sizeof *all->ref_scores);
  if (!all->scores || !all->labels || (sec[0].ref_scores && !all->ref_scores)) return n_sec;
  for (size_t k = 0; k < n_sec; k++)
    for (size_t i = 0; i < sec[k].n; i++) {
      if (all->ref_scores) all->ref_scores[all->n] = sec[k].ref_scores[i];
      all->scores[all->n] = sec[k].scores[i];
      all->labels[all->n++] = sec[k].labels[i];
    }
  return n_sec + 1;
}

/* --scores: every scored file of every listed section. */
static int write_scores(const char *path, const section *sec, size_t n_sec) {
  ssae_err err = {{0}};
  ssae_outfile *f = ssae_outfile_open(path, &err);
  if (!f) {
    ssae_cli_error(CMD, "%s", err.msg);
    return SSAE_EXIT_INPUT;
  }
  ssae_outfile_printf(f, "section\tpath\tlabel\tscore\twindows\n");
  for (size_t k = 0; k < n_sec; k++)
    for (size_t i = 0; i < sec[k].n && sec[k].paths; i++)
      if (!isnan(sec[k].scores[i]))
        ssae_outfile_printf(f, "%s\t%s\t%s\t%.9g\t%zu\n", sec[k].name, sec[k].paths[i],
                            sec[k].labels[i] ? "anomaly" : "normal", sec[k].scores[i],
                            sec[k].windows[i]);
  if (ssae_outfile_commit(f, &err)) {
    ssae_cli_error(CMD, "%s", err.msg);
    return SSAE_EXIT_INPUT;
  }
  return 0;
}

/* --plot: the sections' ROC curves and histograms. */
static int draw(const opts *o, const ssae_evalplot_section *ps, size_t n_plot,
                double threshold) {
  if (!n_plot) {
    ssae_cli_error(CMD, "--plot: no section could be evaluated, %s not written", o->plot);
    return 0;
  }
#if SSAE_HAVE_CAIRO
  ssae_err err;
  char title[512];
  int rc = 0;
  snprintf(title, sizeof title, "ssae eval: model %s, threshold %.4g",
           o->model ? o->model : "default", threshold);
  if (ssae_evalplot_draw(ps, n_plot, threshold, o->max_fpr, title, o->plot, 0, 0, NULL, &err)) {
    ssae_cli_error(CMD, "%s", err.msg);
    rc = SSAE_EXIT_INPUT;
  } else {
    fprintf(stderr, "ssae eval: wrote %s\n", o->plot);
  }
  ssae_plot_cleanup();
  return rc;
#else
  (void)ps;
  (void)threshold;
  return 0;
#endif
}

/* The reference's AUC and pAUC on the files of a section the network
 * scored. */
static ref_row reference_metrics(const section *s, double max_fpr) {
  ref_row r = {0};
  if (!s->ref_scores) return r;
  double *sc = malloc((s->n ? s->n : 1) * sizeof *sc);
  int *lab = malloc((s->n ? s->n : 1) * sizeof *lab);
  size_t k = 0;
  for (size_t i = 0; sc && lab && i < s->n; i++)
    if (!isnan(s->scores[i])) {
      sc[k] = s->ref_scores[i];
      lab[k++] = s->labels[i];
    }
  ssae_metrics m;
  ssae_err err;
  if (sc && lab && ssae_metrics_compute(sc, lab, k, NAN, max_fpr, &m, &err) == 0)
    r = (ref_row){1, m.auc, m.pauc};
  free(sc);
  free(lab);
  return r;
}

/* Says plainly, per section, whether the network beats the reference. */
static void compare_reference(const section *sec, size_t n_sec, const int *ok,
                              const ssae_metrics *met, const ref_row *ref, int have_ref,
                              size_t n_ok) {
  if (!have_ref) {
    ssae_cli_error(CMD, "no reference in this model (a model from ssae train holds a "
                        "spectrum-only reference to compare the network with; this one was "
                        "made before that, or elsewhere)");
    return;
  }
  for (size_t k = 0; k < n_sec; k++) {
    if (!ok[k] || !ref[k].have || isnan(met[k].auc) || isnan(ref[k].auc)) continue;
    char where[300] = "";
    if (n_ok > 1) snprintf(where, sizeof where, "section %s: ", sec[k].name);
    if (met[k].auc > ref[k].auc)
      ssae_cli_error(CMD, "%sthe network beats the spectrum-only reference on these files "
                          "(AUC %.2f vs %.2f, pAUC %.2f vs %.2f)", where, met[k].auc,
                     ref[k].auc, met[k].pauc, ref[k].pauc);
    else
      ssae_cli_error(CMD, "%sthe network does not beat the spectrum-only reference on these "
                          "files (AUC %.2f vs %.2f, pAUC %.2f vs %.2f)", where, met[k].auc,
                     ref[k].auc, met[k].pauc, ref[k].pauc);
  }
}

/* The metrics of every section, printed as a table or JSON, and the plot. */
static int report(const opts *o, const section *sec, size_t n_sec, double threshold,
                  int have_ref) {
  ssae_err err;
  int rc = 0, json = !strcmp(o->format, "json");
  ssae_metrics *met = calloc(n_sec, sizeof *met);
  int *ok = calloc(n_sec, sizeof *ok);
  ssae_evalplot_section *ps = calloc(n_sec, sizeof *ps);
  double **pscores = calloc(n_sec, sizeof *pscores);
  int **plabels = calloc(n_sec, sizeof *plabels);
  ref_row *ref = calloc(n_sec ? n_sec : 1, sizeof *ref);
  if (!met || !ok || !ps || !pscores || !plabels || !ref) {
    ssae_cli_error(CMD, "out of memory");
    rc = SSAE_EXIT_INPUT;
    n_sec = 0;
  }
  size_t n_ok = 0, n_plot = 0;
  for (size_t k = 0; k < n_sec; k++) {
    const section *s = &sec[k];
    pscores[k] = malloc((s->n ? s->n : 1) * sizeof **pscores);
    plabels[k] = malloc((s->n ? s->n : 1) * sizeof **plabels);
    if (!pscores[k] || !plabels[k]) {
      ssae_cli_error(CMD, "out of memory");
      rc = SSAE_EXIT_INPUT;
      continue;
    }
    size_t n = gather(s, pscores[k], plabels[k]);
    if (ssae_metrics_compute(pscores[k], plabels[k], n, threshold, o->max_fpr, &met[k], &err)) {
      ssae_cli_error(CMD, "section %s (%s, %s): %s", s->name, s->normal_src, s->anomaly_src,
                     err.msg);
      rc = SSAE_EXIT_INPUT;
      continue;
    }
    ok[k] = 1;
    n_ok++;
    ref[k] = reference_metrics(s, o->max_fpr);
    /* The pooled section is not drawn as a curve of its own. */
    if (strcmp(s->name, "all") || n_sec == 1)
      ps[n_plot++] = (ssae_evalplot_section){s->name, pscores[k], plabels[k], n, met[k].auc,
                                             met[k].pauc};
  }
  if (json) {
    printf("{\n  \"model\": ");
    ssae_cli_json_str(stdout, o->model ? o->model : "default");
    printf(",\n  \"reference\": %s,\n  \"sections\": [\n",
           have_ref ? "\"spectrum-only (Gaussian of the windows' mean log-mel spectrum)\""
                    : "null");
  } else {
    printf("section\tnormal\tanomaly\tn_normal\tn_anomaly\tauc\tpauc\tmax_fpr\tthreshold\t"
           "precision\trecall\tf1\ttp\tfp\ttn\tfn\tref_auc\tref_pauc\tauc_minus_ref\t"
           "pauc_minus_ref\n");
  }
  size_t printed = 0;
  for (size_t k = 0; k < n_sec; k++)
    if (ok[k])
      print_row(sec[k].name, sec[k].normal_src, sec[k].anomaly_src, &met[k], &ref[k], json,
                ++printed == n_ok);
  if (json) printf("  ]\n}\n");
  /* Checked here, before the picture, so that the reason is the write's
   * own (main's exit check then stays quiet and makes the status 1). */
  ssae_err out_err = {{0}};
  if (ssae_stdout_check(&out_err) && out_err.msg[0]) ssae_cli_error(CMD, "%s", out_err.msg);
  if (n_ok) compare_reference(sec, n_sec, ok, met, ref, have_ref, n_ok);
  if (o->plot) {
    int prc = draw(o, ps, n_plot, threshold);
    if (prc) rc = prc;
  }
  for (size_t k = 0; k < n_sec; k++) {
    free(pscores[k]);
    free(plabels[k]);
  }
  free(pscores);
  free(plabels);
  free(ref);
  free(met);
  free(ok);
  free(ps);
  return rc;
}

/* Sections, scores, metrics. */
static int run(const opts *o) {
  int rc = SSAE_EXIT_OK;
  size_t n_listed;
  int bad_csv = 0;
  section *sec = make_sections(o, &n_listed, &rc, &bad_csv);
  if (!sec) return SSAE_EXIT_INPUT;
  if (bad_csv) {
    for (size_t k = 0; k <= n_listed; k++) section_free(&sec[k]);
    free(sec);
    return SSAE_EXIT_USAGE;
  }
  ssae_err err;
  ssae_model *m = ssae_model_open(o->model, &err);
  ssae_backend *b = m ? ssae_backend_new(m, o->backend, 256, &err) : NULL;
  size_t total;
  ssae_reference ref = {0};
  int have_ref = 0;
  if (b) {
    int r = ssae_reference_from_model(m, &ref, &err);
    if (r < 0) ssae_cli_error(CMD, "the model's reference is not used: %s", err.msg);
    have_ref = r == 0;
  }
  if (!b) {
    ssae_cli_error(CMD, "%s", err.msg);
    rc = SSAE_EXIT_INPUT;
  } else if (score_sections(o, m, b, have_ref ? &ref : NULL, sec, n_listed, &total, &rc) ==
             0) {
    double threshold = isnan(o->threshold) ? m->threshold : o->threshold;
    size_t n_sec = pool(sec, n_listed, total);
    if (o->scores) {
      int wrc = write_scores(o->scores, sec, n_sec);
      if (wrc) rc = wrc;
    }
    int mrc = report(o, sec, n_sec, threshold, have_ref);
    if (mrc) rc = mrc;
  }
  for (size_t k = 0; k <= n_listed; k++) section_free(&sec[k]);
  free(sec);
  ssae_reference_release(&ref);
  ssae_backend_free(b);
  ssae_model_free(m);
  return rc;
}

int ssae_cmd_eval(int argc, char **argv) {
  opts o = {.format = "tsv", .backend = "auto", .threshold = NAN, .max_fpr = 0.1};
  ssae_cli_args args;
  int rc = ssae_cli_parse(&command, argc, argv, &o, &args);
  if (rc != SSAE_CLI_CONTINUE) return rc;
  ssae_cli_one_cuda_queue(o.backend);
  rc = check(&o);
  /* before any work; the backend made next on this thread lives there */
  if (!rc) rc = ssae_cli_use_device(CMD, o.device, o.backend);
  if (!rc) rc = run(&o);
  ssae_cli_args_free(&args);
  return rc;
}
