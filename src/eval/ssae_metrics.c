#include "ssae_metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  double score;
  int label;
} scored;

static int by_score_desc(const void *a, const void *b) {
  double x = ((const scored *)a)->score, y = ((const scored *)b)->score;
  return (x < y) - (x > y);
}

void ssae_roc_free(ssae_roc *roc) {
  if (!roc) return;
  free(roc->fpr);
  free(roc->tpr);
  free(roc->thr);
  memset(roc, 0, sizeof *roc);
}

int ssae_roc_compute(const double *scores, const int *labels, size_t n,
                     ssae_roc *roc, ssae_err *err) {
  memset(roc, 0, sizeof *roc);
  size_t pos = 0, neg = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(scores[i]))
      return ssae_err_set(err, "score %zu is not a finite number", i);
    if (labels[i] != 0 && labels[i] != 1)
      return ssae_err_set(err, "label %zu is %d; labels are 0 (normal) or 1 (anomaly)", i,
                          labels[i]);
    if (labels[i]) pos++;
    else neg++;
  }
  if (!pos || !neg)
    return ssae_err_set(err, "the ROC needs normal and anomalous files (got %zu normal, "
                             "%zu anomalous)", neg, pos);
  scored *s = malloc(n * sizeof *s);
  roc->fpr = malloc((n + 1) * sizeof *roc->fpr);
  roc->tpr = malloc((n + 1) * sizeof *roc->tpr);
  roc->thr = malloc((n + 1) * sizeof *roc->thr);
  if (!s || !roc->fpr || !roc->tpr || !roc->thr) {
    free(s);
    ssae_roc_free(roc);
    return ssae_err_set(err, "out of memory computing the ROC curve");
  }
  for (size_t i = 0; i < n; i++) {
    s[i].score = scores[i];
    s[i].label = labels[i];
  }
  qsort(s, n, sizeof *s, by_score_desc);
  roc->fpr[0] = roc->tpr[0] = 0.0;
  roc->thr[0] = INFINITY;
  size_t k = 1, tp = 0, fp = 0;
  for (size_t i = 0; i < n;) {
    double v = s[i].score;
    /* Tied scores move together: one diagonal step, not a staircase. */
    for (; i < n && s[i].score == v; i++) {
      if (s[i].label) tp++;
      else fp++;
    }
    roc->fpr[k] = (double)fp / (double)neg;
    roc->tpr[k] = (double)tp / (double)pos;
    roc->thr[k] = v;
    k++;
  }
  roc->n = k;
  free(s);
  return 0;
}

double ssae_roc_auc(const ssae_roc *roc) {
  double a = 0.0;
  for (size_t i = 1; i < roc->n; i++)
    a += (roc->fpr[i] - roc->fpr[i - 1]) * (roc->tpr[i] + roc->tpr[i - 1]) * 0.5;
  return a;
}

double ssae_roc_pauc(const ssae_roc *roc, double max_fpr) {
  if (!(max_fpr > 0.0 && max_fpr <= 1.0)) return NAN;
  if (max_fpr == 1.0) return ssae_roc_auc(roc);
  /* stop = first index with fpr > max_fpr (numpy searchsorted 'right'). */
  size_t stop = 0;
  while (stop < roc->n && roc->fpr[stop] <= max_fpr) stop++;
  if (stop == 0 || stop >= roc->n) return NAN; /* cannot happen: fpr runs 0 .. 1 */
  double x0 = roc->fpr[stop - 1], x1 = roc->fpr[stop];
  double y0 = roc->tpr[stop - 1], y1 = roc->tpr[stop];
  double y_cut = x1 > x0 ? y0 + (y1 - y0) * (max_fpr - x0) / (x1 - x0) : y1;
  double a = 0.0;
  for (size_t i = 1; i < stop; i++)
    a += (roc->fpr[i] - roc->fpr[i - 1]) * (roc->tpr[i] + roc->tpr[i - 1]) * 0.5;
  a += (max_fpr - x0) * (y_cut + y0) * 0.5;
  double min_area = 0.5 * max_fpr * max_fpr, max_area = max_fpr;
  return 0.5 * (1.0 + (a - min_area) / (max_area - min_area));
}

int ssae_metrics_compute(const double *scores, const int *labels, size_t n,
                         double threshold, double max_fpr, ssae_metrics *out,
                         ssae_err *err) {
  memset(out, 0, sizeof *out);
  if (!(max_fpr > 0.0 && max_fpr <= 1.0))
    return ssae_err_set(err, "max_fpr must be in (0, 1], got %g", max_fpr);
  ssae_roc roc;
  if (ssae_roc_compute(scores, labels, n, &roc, err)) return -1;
  out->auc = ssae_roc_auc(&roc);
  out->pauc = ssae_roc_pauc(&roc, max_fpr);
  out->max_fpr = max_fpr;
  ssae_roc_free(&roc);
  for (size_t i = 0; i < n; i++) {
    if (labels[i]) out->n_anomaly++;
    else out->n_normal++;
  }
  out->threshold = threshold;
  if (isnan(threshold)) {
    out->precision = out->recall = out->f1 = NAN;
    return 0;
  }
  for (size_t i = 0; i < n; i++) {
    int called = scores[i] > threshold;
    if (labels[i]) {
      if (called) out->tp++;
      else out->fn++;
    } else {
      if (called) out->fp++;
      else out->tn++;
    }
  }
  out->precision = out->tp + out->fp ? (double)out->tp / (double)(out->tp + out->fp) : 0.0;
  out->recall = (double)out->tp / (double)(out->tp + out->fn);
  double pr = out->precision + out->recall;
  out->f1 = pr > 0.0 ? 2.0 * out->precision * out->recall / pr : 0.0;
  return 0;
}
