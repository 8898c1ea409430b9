/* The plugin in a host: a model of normal sound (make_template_model) is
 * set through patch:Set; a recording with an injected anomaly, fed in
 * host-sized blocks (64 ... 4096 frames) at 16 kHz, gives the window scores
 * of `ssae score --windows` on the same file, the smoothed score and alarm
 * of the detector applied to those scores, an alarm that rises during the
 * anomaly and falls after it, and audio passed through bit for bit (with
 * separate buffers and in place). */
#define _XOPEN_SOURCE 700
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lv2_host.h"
#include "ssae_detector.h"

#define RATE 16000
#define SECONDS 24
#define HOP 512
#define T0 10.0
#define T1 14.0

typedef struct ref {
  double *score, *ema;
  int *alarm;
  size_t n;
} ref;

static size_t read_windows(const char *path, double **out) {
  FILE *f = fopen(path, "r");
  CHECK(f, "cannot open %s", path);
  size_t cap = 1024, n = 0;
  double *s = (double *)malloc(cap * sizeof(double));
  char line[8192];
  while (fgets(line, sizeof(line), f)) {
    /* path, window index, time, score: parse from the right (the path may
     * hold anything but a tab). */
    char *fields[16];
    int nf = 0;
    for (char *tok = strtok(line, "\t\r\n"); tok && nf < 16;
         tok = strtok(NULL, "\t\r\n"))
      fields[nf++] = tok;
    if (nf < 3) continue;
    char *end1, *end2;
    long idx = strtol(fields[nf - 3], &end1, 10);
    double score = strtod(fields[nf - 1], &end2);
    if (*end1 || *end2) continue; /* a header line */
    CHECK(idx == (long)n, "window index %ld out of order (expected %zu)", idx, n);
    if (n == cap) s = (double *)realloc(s, (cap *= 2) * sizeof(double));
    s[n++] = score;
  }
  fclose(f);
  *out = s;
  return n;
}

/* The one detector (ssae_detector_run), applied offline to the reference
 * scores: what the plugin's engine must publish window for window. */
static void detector(ref *r, double thr, double tau, int on, int off) {
  float *score = (float *)malloc(r->n * sizeof(float));
  float *ema = (float *)malloc(r->n * sizeof(float));
  unsigned char *alarm = (unsigned char *)malloc(r->n);
  r->ema = (double *)malloc(r->n * sizeof(double));
  r->alarm = (int *)malloc(r->n * sizeof(int));
  for (size_t i = 0; i < r->n; i++) score[i] = (float)r->score[i];
  ssae_detector_params p = {thr, tau, on, off};
  ssae_detector_run(&p, (double)HOP / RATE, score, NULL, r->n, ema, alarm);
  for (size_t i = 0; i < r->n; i++) {
    r->ema[i] = ema[i];
    r->alarm[i] = alarm[i];
  }
  free(score);
  free(ema);
  free(alarm);
}

static int close_to(double a, double b) {
  return fabs(a - b) <= 1e-6 + 2e-5 * fabs(b);
}

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

typedef struct obs {
  size_t checked, distinct, last_n, ahead;
  double max_rel; /* largest relative score difference to ssae score */
  int last_alarm, rises, falls;
  double first_alarm_t;
} obs;

/* One look at the control outputs. The engine publishes each value
 * atomically; a look may catch the worker between a window's score and its
 * count, so a value may also belong to the next window. */
static void observe(lv2h *h, const ref *r, double thr, obs *o) {
  size_t n = (size_t)*lv2h_ctl(h, "windows");
  float score = *lv2h_ctl(h, "window_score");
  float smoothed = *lv2h_ctl(h, "score");
  int alarm = *lv2h_ctl(h, "alarm") > 0.5f;
  CHECK(*lv2h_ctl(h, "drops") == 0.0f, "windows dropped: %g",
        *lv2h_ctl(h, "drops"));
  if (n == 0) return;
  CHECK(n <= r->n, "plugin scored %zu windows, ssae score has %zu", n, r->n);
  size_t i = n - 1;
  int ok_score = close_to(score, r->score[i]) ||
                 (n < r->n && close_to(score, r->score[n]));
  CHECK(ok_score, "window %zu: plugin score %.7g, ssae score %.7g", i, score,
        r->score[i]);
  if (close_to(score, r->score[i])) {
    o->max_rel = fmax(o->max_rel, fabs(score - r->score[i]) / r->score[i]);
  } else {
    o->ahead++;
  }
  int ok_ema = close_to(smoothed, r->ema[i]) ||
               (n < r->n && close_to(smoothed, r->ema[n]));
  CHECK(ok_ema, "window %zu: plugin smoothed score %.7g, expected %.7g", i,
        smoothed, r->ema[i]);
  int ok_alarm = alarm == r->alarm[i] || (n < r->n && alarm == r->alarm[n]) ||
                 fabs(r->ema[i] - thr) < 1e-3 * thr;
  CHECK(ok_alarm, "window %zu (t=%.2f s): plugin alarm %d, expected %d", i,
        (double)i * HOP / RATE, alarm, r->alarm[i]);
  CHECK(fabsf(*lv2h_ctl(h, "threshold_used") - (float)thr) <= 1e-6f * (float)thr,
        "threshold in use %g, set %g", *lv2h_ctl(h, "threshold_used"), thr);
  float lat = *lv2h_ctl(h, "latency");
  CHECK(lat >= 0 && lat < 2 * RATE, "latency %g samples", lat);
  o->checked++;
  if (n != o->last_n) o->distinct++;
  o->last_n = n;
  if (alarm && !o->last_alarm) {
    o->rises++;
    if (o->first_alarm_t < 0) o->first_alarm_t = (double)i * HOP / RATE;
  }
  if (!alarm && o->last_alarm) o->falls++;
  o->last_alarm = alarm;
}

static void run_pass(const char *model, const float *x, size_t n,
                     const ref *r, double thr, double tau, int on, int off,
                     int in_place, uint64_t seed) {
  lv2h h;
  /* Pass one with a worker thread (a live host), pass two synchronous (a
   * host exporting). */
  CHECK(lv2h_open(&h, "urn:ssae:lv2:mono", RATE, !in_place) == 0,
        "cannot load the plugin");
  CHECK(lv2h_load_model(&h, model), "the plugin did not load %s", model);
  *lv2h_ctl(&h, "threshold") = (float)thr;
  *lv2h_ctl(&h, "smoothing") = (float)tau;
  *lv2h_ctl(&h, "alarm_on") = (float)on;
  *lv2h_ctl(&h, "alarm_off") = (float)off;
  *lv2h_ctl(&h, "enable") = 1.0f;
  float *in = (float *)malloc(4096 * sizeof(float));
  float *out = (float *)malloc(4096 * sizeof(float));
  lv2h_connect(&h, "in", in);
  lv2h_connect(&h, "out", in_place ? in : out);
  obs o = {0, 0, 0, 0, 0.0, 0, 0, 0, -1.0};
  size_t pos = 0;
  int block = 0;
  while (pos < n) {
    uint32_t bs = block == 0 ? 64 : block == 1 ? 4096 : 64 + rnd_u32(&seed) % 4033;
    if (bs > n - pos) bs = (uint32_t)(n - pos);
    memcpy(in, x + pos, bs * sizeof(float));
    if (!in_place) memset(out, 0xff, bs * sizeof(float));
    lv2h_run(&h, bs);
    CHECK(memcmp(in_place ? in : out, x + pos, bs * sizeof(float)) == 0,
          "audio not passed through unchanged (block %d)", block);
    observe(&h, r, thr, &o);
    pos += bs;
    block++;
    /* A host running 20 times faster than real time. */
    sleep_s((double)bs / RATE / 20.0);
  }
  /* The worker scores what is left; the host keeps calling run(). */
  size_t last = 0;
  for (int i = 0; i < 2500; i++) {
    lv2h_run(&h, 0);
    observe(&h, r, thr, &o);
    size_t w = (size_t)*lv2h_ctl(&h, "windows");
    if (w + 1 >= r->n && w == last && i > 50) break;
    last = w;
    sleep_s(0.002);
  }
  size_t w = (size_t)*lv2h_ctl(&h, "windows");
  CHECK(w + 2 >= r->n && w <= r->n,
        "plugin scored %zu windows of the %zu of ssae score", w, r->n);
  fprintf(stderr,
          "%s: %d blocks, %zu looks at %zu distinct windows checked (largest "
          "relative difference to ssae score %.2g; %zu looks caught the next "
          "window's score), alarm rose %d fell %d, first at %.2f s\n",
          in_place ? "in place" : "separate buffers", block, o.checked,
          o.distinct, o.max_rel, o.ahead, o.rises, o.falls, o.first_alarm_t);
  CHECK(o.distinct >= 50, "too few windows observed (%zu)", o.distinct);
  CHECK(o.rises >= 1 && o.falls >= 1, "the alarm did not rise and fall");
  CHECK(o.first_alarm_t >= T0 - 0.5 && o.first_alarm_t <= T0 + 2.0,
        "alarm first rose at %.2f s, the anomaly starts at %.1f s",
        o.first_alarm_t, T0);
  CHECK(!o.last_alarm, "the alarm is still on after the anomaly");
  char logtext[4096];
  int errors;
  lv2h_log_take(&h, logtext, sizeof(logtext), &errors);
  CHECK(errors == 0, "the plugin logged errors: %s", logtext);
  free(in);
  free(out);
  lv2h_close(&h);
}

int main(int argc, char **argv) {
  char *dir = lv2h_test_start(argc, argv, "score");
  const char *ssae = getenv("SSAE");
  CHECK(ssae && *ssae, "SSAE (path of the ssae program) is not set");
  size_t n = (size_t)RATE * SECONDS;
  float *x = (float *)malloc(n * sizeof(float));
  sig_make(x, n, RATE, 1, 1, T0, T1);
  char model[4096], wav[4096], tsv[4096], cmd[16384];
  CHECK(make_template_model(dir, model, sizeof(model)) == 0,
        "cannot make the model");
  snprintf(wav, sizeof(wav), "%s/anomaly.wav", dir);
  snprintf(tsv, sizeof(tsv), "%s/windows.tsv", dir);
  CHECK(sig_write_wav(wav, x, n, RATE) == 0, "cannot write %s", wav);
  snprintf(cmd, sizeof(cmd), "'%s' score --model '%s' --windows '%s' '%s' > '%s/score.out'",
           ssae, model, tsv, wav, dir);
  CHECK(system(cmd) == 0, "'%s' failed", cmd);

  ref r = {0};
  r.n = read_windows(tsv, &r.score);
  CHECK(r.n > 700, "ssae score gave %zu windows for %d s", r.n, SECONDS);

  /* Threshold between the normal and the anomalous windows' scores. */
  double max_normal = 0, min_anomaly = INFINITY;
  for (size_t i = 0; i < r.n; i++) {
    double t = (double)i * HOP / RATE;
    if (t < T0 - 0.5 || t > T1 + 0.5) max_normal = fmax(max_normal, r.score[i]);
    if (t > T0 + 0.5 && t < T1 - 0.5) min_anomaly = fmin(min_anomaly, r.score[i]);
  }
  fprintf(stderr, "ssae score: %zu windows, normal max %.4g, anomaly min %.4g\n",
          r.n, max_normal, min_anomaly);
  CHECK(min_anomaly > 1.5 * max_normal,
        "the model does not separate the injected anomaly "
        "(normal max %g, anomaly min %g)", max_normal, min_anomaly);
  double thr = sqrt(max_normal * min_anomaly);
  const double tau = 0.25;
  const int on = 3, off = 5;
  detector(&r, thr, tau, on, off);

  run_pass(model, x, n, &r, thr, tau, on, off, 0, 42);
  run_pass(model, x, n, &r, thr, tau, on, off, 1, 7);

  free(r.score);
  free(r.ema);
  free(r.alarm);
  free(x);
  free(dir);
  return 0;
}
