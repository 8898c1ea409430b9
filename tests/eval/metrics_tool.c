/* Reads cases on stdin, each "THRESHOLD MAX_FPR N" followed by N "score
 * label" pairs, and prints one line per case with the metrics of
 * ssae_metrics.h (auc pauc tp fp tn fn precision recall f1), or "error MSG".
 * test_metrics.py checks them against its own computation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ssae_metrics.h"

int main(void) {
  double thr, max_fpr;
  size_t n;
  while (scanf("%lf %lf %zu", &thr, &max_fpr, &n) == 3) {
    double *s = malloc((n ? n : 1) * sizeof *s);
    int *lab = malloc((n ? n : 1) * sizeof *lab);
    if (!s || !lab) return 1;
    for (size_t i = 0; i < n; i++)
      if (scanf("%lf %d", &s[i], &lab[i]) != 2) return 1;
    ssae_metrics m;
    ssae_err err;
    if (ssae_metrics_compute(s, lab, n, thr, max_fpr, &m, &err))
      printf("error %s\n", err.msg);
    else
      printf("%.17g %.17g %zu %zu %zu %zu %.17g %.17g %.17g\n", m.auc, m.pauc, m.tp, m.fp, m.tn,
             m.fn, m.precision, m.recall, m.f1);
    free(s);
    free(lab);
  }
  return 0;
}
