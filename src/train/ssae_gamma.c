/* Gamma distribution fit (maximum likelihood, location 0) and the inverse of
 * the regularised incomplete gamma function, for the decision threshold. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ssae_threshold.h"
#include "ssae_train.h"

static double digamma(double x) {
  double r = 0;
  while (x < 6) {
    r -= 1 / x;
    x += 1;
  }
  double f = 1 / (x * x);
  return r + log(x) - 0.5 / x -
         f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f / 132))));
}

static double trigamma(double x) {
  double r = 0;
  while (x < 6) {
    r += 1 / (x * x);
    x += 1;
  }
  double f = 1 / (x * x);
  return r + 1 / x + f / 2 +
         f / x * (1.0 / 6 - f * (1.0 / 30 - f * (1.0 / 42 - f / 30)));
}

int ssae_gamma_fit(const double *x, size_t n, double *shape, double *scale,
                   ssae_err *err) {
  if (n < 2) return ssae_err_set(err, "a gamma fit needs at least 2 scores");
  double sum = 0, sum_log = 0, lo = INFINITY, hi = -INFINITY;
  for (size_t i = 0; i < n; i++) {
    if (!(x[i] > 0) || !isfinite(x[i]))
      return ssae_err_set(err, "score %g cannot be fitted (scores must be "
                          "positive and finite)", x[i]);
    sum += x[i];
    sum_log += log(x[i]);
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
  }
  double mean = sum / (double)n;
  double s = log(mean) - sum_log / (double)n;
  if (!(s > 1e-14) || hi - lo <= 1e-12 * hi)
    return ssae_err_set(err, "all scores are equal; a gamma fit needs spread");
  /* Minka's starting point, then Newton on log k - digamma(k) = s */
  double k = (3 - s + sqrt((s - 3) * (s - 3) + 24 * s)) / (12 * s);
  for (int it = 0; it < 100; it++) {
    double f = log(k) - digamma(k) - s;
    double fp = 1 / k - trigamma(k);
    double nk = k - f / fp;
    if (!(nk > 0)) nk = k / 2;
    if (fabs(nk - k) <= 1e-14 * k) {
      k = nk;
      break;
    }
    k = nk;
  }
  if (!isfinite(k) || k <= 0)
    return ssae_err_set(err, "the gamma fit did not converge");
  *shape = k;
  *scale = mean / k;
  return 0;
}

/* P(a, x) by its series (x < a + 1) or Q by Lentz's continued fraction. */
double ssae_gamma_p(double a, double x) {
  if (!(x > 0)) return 0;
  if (isinf(x)) return 1;
  double lpre = -x + a * log(x) - lgamma(a);
  if (x < a + 1) {
    double ap = a, del = 1 / a, sum = del;
    for (int n = 0; n < 100000; n++) {
      ap += 1;
      del *= x / ap;
      sum += del;
      if (fabs(del) < fabs(sum) * 1e-16) break;
    }
    return sum * exp(lpre);
  }
  const double tiny = 1e-300;
  double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (int i = 1; i < 100000; i++) {
    double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (fabs(c) < tiny) c = tiny;
    d = 1 / d;
    double del = d * c;
    h *= del;
    if (fabs(del - 1) < 1e-16) break;
  }
  return 1 - exp(lpre) * h;
}

/* Halley's method from the Numerical Recipes starting guesses, then a
 * bisection polish when Halley did not land (extreme shapes). */
double ssae_gamma_p_inv(double a, double p) {
  if (!(a > 0) || !(p > 0)) return 0;
  if (p >= 1) return INFINITY;
  double a1 = a - 1, gln = lgamma(a), lna1 = 0, afac = 0, x, t;
  if (a > 1) {
    lna1 = log(a1);
    afac = exp(a1 * (lna1 - 1) - gln);
    double pp = p < 0.5 ? p : 1 - p;
    t = sqrt(-2 * log(pp));
    x = (2.30753 + t * 0.27061) / (1 + t * (0.99229 + t * 0.04481)) - t;
    if (p < 0.5) x = -x;
    double q = 1 - 1 / (9 * a) - x / (3 * sqrt(a));
    x = a * q * q * q;
    if (x < 1e-3) x = 1e-3;
  } else {
    t = 1 - a * (0.253 + a * 0.12);
    x = p < t ? pow(p / t, 1 / a) : 1 - log(1 - (p - t) / (1 - t));
  }
  for (int j = 0; j < 50; j++) {
    if (x <= 0) {
      x = 0;
      break;
    }
    double e = ssae_gamma_p(a, x) - p;
    if (a > 1)
      t = afac * exp(-(x - a1) + a1 * (log(x) - lna1));
    else
      t = exp(-x + a1 * log(x) - gln);
    if (!(t > 0)) break;
    double u = e / t;
    double m = u * ((a - 1) / x - 1);
    t = u / (1 - 0.5 * (m < 1 ? m : 1));
    x -= t;
    if (x <= 0) x = 0.5 * (x + t);
    if (fabs(t) < 1e-14 * x) break;
  }
  if (fabs(ssae_gamma_p(a, x) - p) > 1e-12) {
    double lo = 0, hi = x > 0 ? x : 1;
    while (ssae_gamma_p(a, hi) < p) hi *= 2;
    for (int i = 0; i < 200; i++) {
      double mid = 0.5 * (lo + hi);
      if (ssae_gamma_p(a, mid) < p)
        lo = mid;
      else
        hi = mid;
    }
    x = 0.5 * (lo + hi);
  }
  return x;
}

int ssae_threshold_fit_scores(const double *x, size_t n, double percentile, int per_window,
                              ssae_threshold_fit *fit, ssae_err *err) {
  memset(fit, 0, sizeof *fit);
  fit->threshold = fit->shape = fit->scale = NAN;
  fit->method = "none";
  if (!(percentile > 0 && percentile < 1))
    return ssae_err_set(err, "threshold percentile %g is not between 0 and 1", percentile);
  const char *what = per_window ? "window" : "file";
  /* A non-finite score is a broken model (training diverged), not data
   * without spread: that is an error, not a model without a threshold. */
  for (size_t i = 0; i < n; i++)
    if (!isfinite(x[i]))
      return ssae_err_set(err, "%s score %zu is %g: the trained model gives non-finite scores",
                          what, i, x[i]);
  ssae_err why = {{0}};
  double shape, scale;
  if (ssae_gamma_fit(x, n, &shape, &scale, &why)) {
    snprintf(fit->warning, sizeof fit->warning,
             "no threshold (written as \"none\"): the %zu %s score%s give no gamma fit: %.300s", n,
             what, n == 1 ? "" : "s", why.msg);
    return 1;
  }
  double t = scale * ssae_gamma_p_inv(shape, percentile);
  if (!isfinite(t) || !(t > 0)) {
    snprintf(fit->warning, sizeof fit->warning,
             "no threshold (written as \"none\"): the gamma fit of the %zu %s scores (shape "
             "%g, scale %g) gives %g at p = %g", n, what, shape, scale, t, percentile);
    return 1;
  }
  fit->threshold = t;
  fit->shape = shape;
  fit->scale = scale;
  fit->method = per_window ? "gamma_mle_loc0_window_scores" : "gamma_mle_loc0_file_scores";
  return 0;
}
