/* ssae-threshold: sets a model's threshold for the live detector from the
 * smoothed window scores of normal recordings.
 *
 * `ssae train` fits its threshold to file scores (means over a whole clip).
 * The real-time engine compares smoothed window scores, which scatter far
 * more than file means, to the same threshold: on a model whose normal
 * clips are all alike, the file-score threshold sits inside the normal
 * window scores and the live monitor raises false alarms. This tool puts the
 * threshold at margin x the q-quantile of the smoothed window scores (the
 * detector's own smoothing, ssae_detector_run) over normal files, and
 * records how in the metadata. Windows that touch digital silence carry no
 * smoothed score (the detector does not judge them) and are left out.
 * Used by tools/make-default-model.sh. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_backend.h"
#include "ssae_detector.h"
#include "ssae_filescore.h"
#include "ssae_model.h"

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static void usage(FILE *f) {
  fprintf(f, "usage: ssae-threshold MODEL -o OUT [--smoothing S] [--quantile Q] [--margin X]\n"
             "                      NORMAL.wav...\n\n"
             "Sets OUT's threshold to X times the Q-quantile of the S-smoothed window\n"
             "scores of the normal files (defaults: S "
             SSAE_DETECTOR_TEXT(SSAE_DETECTOR_SMOOTHING_S) " s as the detector, Q 1 = the\n"
             "largest, X 1.1). OUT may be MODEL.\n");
}

int main(int argc, char **argv) {
  const char *in = NULL, *out = NULL;
  double smoothing = SSAE_DETECTOR_SMOOTHING_S, q = 1.0, margin = 1.1;
  char **files = calloc((size_t)argc, sizeof *files);
  int n_files = 0;
  if (!files) return 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      free(files);
      return 0;
    } else if (!strcmp(a, "-o") && v) {
      out = v;
      i++;
    } else if (!strcmp(a, "--smoothing") && v) {
      smoothing = atof(v);
      i++;
    } else if (!strcmp(a, "--quantile") && v) {
      q = atof(v);
      i++;
    } else if (!strcmp(a, "--margin") && v) {
      margin = atof(v);
      i++;
    } else if (a[0] == '-') {
      fprintf(stderr, "ssae-threshold: unknown option or missing value '%s'\n", a);
      free(files);
      return 2;
    } else if (!in) {
      in = a;
    } else {
      files[n_files++] = argv[i];
    }
  }
  if (!in || !out || !n_files || !(q > 0 && q <= 1) || !(margin > 0) || smoothing < 0) {
    usage(stderr);
    free(files);
    return 2;
  }
  ssae_err err;
  ssae_model *m = ssae_model_load(in, &err);
  ssae_backend *b = m ? ssae_backend_new(m, "cpu", 256, &err) : NULL;
  if (!b) {
    fprintf(stderr, "ssae-threshold: %s\n", err.msg);
    ssae_model_free(m);
    free(files);
    return 1;
  }
  float *all = NULL;
  size_t n_all = 0;
  int rc = 0;
  double hop_s = (double)m->feat.hop_length / m->feat.sample_rate;
  for (int i = 0; i < n_files && !rc; i++) {
    ssae_file_scores fs;
    if (ssae_file_score(m, b, 256, files[i], 0, 0, &fs, &err)) {
      fprintf(stderr, "ssae-threshold: %s\n", err.msg);
      rc = 1;
      break;
    }
    float *grown = realloc(all, (n_all + fs.n_windows) * sizeof *all);
    if (!grown) {
      fprintf(stderr, "ssae-threshold: out of memory\n");
      ssae_file_scores_release(&fs);
      rc = 1;
      break;
    }
    all = grown;
    ssae_detector_params p;
    ssae_detector_params_default(&p);
    p.smoothing_s = smoothing;
    float *sm = all + n_all;
    ssae_detector_run(&p, hop_s, fs.scores, fs.silent, fs.n_windows, sm, NULL);
    /* Only the smoothed scores the detector judges. */
    for (size_t k = 0; k < fs.n_windows; k++)
      if (isfinite(sm[k])) all[n_all++] = sm[k];
    ssae_file_scores_release(&fs);
  }
  if (!rc && !n_all) {
    fprintf(stderr, "ssae-threshold: every window of the files touches digital silence\n");
    rc = 1;
  }
  if (!rc) {
    qsort(all, n_all, sizeof *all, cmp_float);
    size_t k = (size_t)floor(q * (double)(n_all - 1) + 0.5);
    double thr = margin * all[k];
    char method[256], buf[64];
    snprintf(method, sizeof method,
             "%g x quantile %g of %g s-smoothed window scores of %d normal files "
             "(%zu windows; tools/ssae-threshold)",
             margin, q, smoothing, n_files, n_all);
    m->threshold = thr;
    snprintf(buf, sizeof buf, "%.9g", thr);
    if (ssae_model_meta_set(m, "threshold", buf, &err) ||
        ssae_model_meta_set(m, "threshold_method", method, &err) ||
        (ssae_model_meta_get(m, "threshold_percentile") &&
         ssae_model_meta_set(m, "threshold_percentile", "none (see threshold_method)", &err)) ||
        ssae_model_save(m, out, &err)) {
      fprintf(stderr, "ssae-threshold: %s\n", err.msg);
      rc = 1;
    } else {
      printf("%s: threshold %.6g (%s; median window %.4g)\n", out, thr, method,
             all[n_all / 2]);
    }
  }
  free(all);
  free(files);
  ssae_backend_free(b);
  ssae_model_free(m);
  return rc;
}
