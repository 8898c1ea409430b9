/* Reads "score label" lines on stdin, prints the metrics of ssae_metrics.h
 * (for test_metrics.py, which checks them against its own computation). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ssae_metrics.h"

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: metrics_tool THRESHOLD MAX_FPR < scores\n");
    return 2;
  }
  double thr = strtod(argv[1], NULL), max_fpr = strtod(argv[2], NULL);
  size_t n = 0, cap = 0;
  double *s = NULL, v;
  int *lab = NULL, l;
  while (scanf("%lf %d", &v, &l) == 2) {
    if (n == cap) {
      cap = cap ? 2 * cap : 256;
      double *ns = realloc(s, cap * sizeof *s);
      int *nl = realloc(lab, cap * sizeof *lab);
      if (!ns || !nl) return 1;
      s = ns;
      lab = nl;
    }
    s[n] = v;
    lab[n++] = l;
  }
  ssae_metrics m;
  ssae_err err;
  int rc = ssae_metrics_compute(s, lab, n, thr, max_fpr, &m, &err);
  if (rc) {
    printf("error %s\n", err.msg);
  } else {
    printf("auc %.17g\npauc %.17g\ntp %zu\nfp %zu\ntn %zu\nfn %zu\n", m.auc, m.pauc, m.tp, m.fp,
           m.tn, m.fn);
    printf("precision %.17g\nrecall %.17g\nf1 %.17g\n", m.precision, m.recall, m.f1);
  }
  free(s);
  free(lab);
  return rc ? 1 : 0;
}
