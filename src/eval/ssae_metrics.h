/* Detection metrics over scored files: ROC curve, AUC, partial AUC and the
 * confusion counts at a decision threshold.
 *
 * Labels: 1 anomalous (the positive class), 0 normal. A higher score means
 * more anomalous; a file is called anomalous when score > threshold (the
 * same rule as `ssae score`'s verdict). Ties are handled as scikit-learn
 * does: tied scores form one ROC point, which makes the AUC equal to the
 * Mann-Whitney statistic with ties counted one half. */
#ifndef SSAE_METRICS_H
#define SSAE_METRICS_H

#include <stddef.h>

#include "ssae_err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ROC points, one per distinct score from the highest down, starting at
 * (0, 0) and ending at (1, 1). thr[0] is +inf, thr[i] the score at which
 * point i is reached (score >= thr[i] counts as positive). */
typedef struct ssae_roc {
  double *fpr, *tpr, *thr;
  size_t n;
} ssae_roc;

/* Needs at least one file of each class and finite scores. */
int ssae_roc_compute(const double *scores, const int *labels, size_t n,
                     ssae_roc *roc, ssae_err *err);
void ssae_roc_free(ssae_roc *roc);

/* Area under the whole curve (trapezoids). */
double ssae_roc_auc(const ssae_roc *roc);

/* Standardised partial AUC up to max_fpr (0 < max_fpr <= 1), as
 * scikit-learn's roc_auc_score(max_fpr=...) computes it: the curve is cut at
 * max_fpr by linear interpolation, its area A is taken, and McClish's
 * correction maps it to 0.5 + 0.5 (A - min) / (max - min) with
 * min = max_fpr^2 / 2 and max = max_fpr. For max_fpr = 1 it is the AUC. */
double ssae_roc_pauc(const ssae_roc *roc, double max_fpr);

typedef struct ssae_metrics {
  size_t n_normal, n_anomaly;
  double auc;
  double pauc;     /* at max_fpr */
  double max_fpr;
  double threshold; /* NAN: no threshold, the counts below are 0 and the rates NAN */
  size_t tp, fp, tn, fn;
  double precision; /* tp / (tp + fp); 0 when nothing is called anomalous */
  double recall;    /* tp / (tp + fn) */
  double f1;        /* 2 p r / (p + r); 0 when p + r = 0 */
} ssae_metrics;

/* Everything above in one call. */
int ssae_metrics_compute(const double *scores, const int *labels, size_t n,
                         double threshold, double max_fpr, ssae_metrics *out,
                         ssae_err *err);

#ifdef __cplusplus
}
#endif
#endif
