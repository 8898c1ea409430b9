/* The stereo variant at 48 kHz (the engine resamples to the model's rate),
 * with a model of normal sound (make_template_model) set through patch:Set:
 * both channels pass through bit for bit (in place), a normal left channel
 * and an anomalous right channel raise the alarm during the anomaly and
 * clear it after; the outputs report the worse channel. */
#define _XOPEN_SOURCE 700
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lv2_host.h"
#include "ssae_detector.h"

#define RATE 48000
#define SECONDS 16
#define T0 6.0
#define T1 9.0

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

typedef struct result {
  float max_score_normal, min_score_anomaly;
  double first_on, last_off;
  int rises, falls, final_alarm;
} result;

static result run(const char *model, const float *l, const float *r, size_t n,
                  float thr, uint64_t seed) {
  lv2h h;
  CHECK(lv2h_open(&h, "urn:ssae:lv2:stereo", RATE, 1) == 0,
        "cannot load the stereo plugin");
  /* The host starts the ports at ssae.ttl's defaults: the detector's. */
  CHECK(*lv2h_ctl(&h, "smoothing") == (float)SSAE_DETECTOR_SMOOTHING_S &&
            *lv2h_ctl(&h, "alarm_on") == SSAE_DETECTOR_ON_COUNT &&
            *lv2h_ctl(&h, "alarm_off") == SSAE_DETECTOR_OFF_COUNT,
        "stereo port defaults %g %g %g are not the detector's", *lv2h_ctl(&h, "smoothing"),
        *lv2h_ctl(&h, "alarm_on"), *lv2h_ctl(&h, "alarm_off"));
  CHECK(lv2h_load_model(&h, model), "the plugin did not load %s", model);
  *lv2h_ctl(&h, "threshold") = thr;
  *lv2h_ctl(&h, "smoothing") = 0.2f;
  *lv2h_ctl(&h, "alarm_on") = 3;
  *lv2h_ctl(&h, "alarm_off") = 5;
  float *bl = (float *)malloc(4096 * sizeof(float));
  float *br = (float *)malloc(4096 * sizeof(float));
  lv2h_connect(&h, "in_l", bl);
  lv2h_connect(&h, "out_l", bl);
  lv2h_connect(&h, "in_r", br);
  lv2h_connect(&h, "out_r", br);
  result res = {0, INFINITY, -1, -1, 0, 0, 0};
  int alarm = 0;
  size_t pos = 0;
  while (pos < n) {
    uint32_t bs = 64 + rnd_u32(&seed) % 4033;
    if (bs > n - pos) bs = (uint32_t)(n - pos);
    memcpy(bl, l + pos, bs * sizeof(float));
    memcpy(br, r + pos, bs * sizeof(float));
    lv2h_run(&h, bs);
    CHECK(memcmp(bl, l + pos, bs * sizeof(float)) == 0 &&
              memcmp(br, r + pos, bs * sizeof(float)) == 0,
          "audio changed in place");
    pos += bs;
    double t = (double)pos / RATE;
    float ws = *lv2h_ctl(&h, "window_score");
    int a = *lv2h_ctl(&h, "alarm") > 0.5f;
    CHECK(*lv2h_ctl(&h, "drops") == 0.0f, "windows dropped");
    if (*lv2h_ctl(&h, "windows") > 0) {
      /* Allow for the score latency around the anomaly's edges. */
      if (t < T0 - 0.2 || t > T1 + 1.0)
        res.max_score_normal = fmaxf(res.max_score_normal, ws);
      if (t > T0 + 0.5 && t < T1 - 0.2)
        res.min_score_anomaly = fminf(res.min_score_anomaly, ws);
    }
    if (a && !alarm) {
      res.rises++;
      if (res.first_on < 0) res.first_on = t;
    }
    if (!a && alarm) {
      res.falls++;
      res.last_off = t;
    }
    alarm = a;
    sleep_s((double)bs / RATE / 20.0);
  }
  res.final_alarm = alarm;
  free(bl);
  free(br);
  lv2h_close(&h);
  return res;
}

int main(int argc, char **argv) {
  char *dir = lv2h_test_start(argc, argv, "stereo");
  char model[4096];
  CHECK(make_template_model(dir, model, sizeof(model)) == 0,
        "cannot make the model");
  size_t n = (size_t)RATE * SECONDS;
  float *l = (float *)malloc(n * sizeof(float));
  float *r = (float *)malloc(n * sizeof(float));
  sig_make(l, n, RATE, 11, 0, 0, 0);
  sig_make(r, n, RATE, 12, 1, T0, T1);

  /* First the scores: threshold unset (the model's or none). */
  result a = run(model, l, r, n, 0.0f, 3);
  fprintf(stderr, "48 kHz stereo: normal max %.4g, anomaly min %.4g\n",
          a.max_score_normal, a.min_score_anomaly);
  CHECK(a.max_score_normal > 0, "no scores");
  CHECK(a.min_score_anomaly > 1.5f * a.max_score_normal,
        "the anomaly on the right channel does not show in the score");

  float thr = sqrtf(a.max_score_normal * a.min_score_anomaly);
  result b = run(model, l, r, n, thr, 4);
  fprintf(stderr, "alarm: %d rises (first %.2f s), %d falls (last %.2f s)\n",
          b.rises, b.first_on, b.falls, b.last_off);
  CHECK(b.rises >= 1 && b.falls >= 1, "the alarm did not rise and fall");
  CHECK(b.first_on > T0 && b.first_on < T0 + 2.0,
        "alarm rose at %.2f s, anomaly at %.1f s", b.first_on, T0);
  CHECK(b.last_off > T1 && b.last_off < T1 + 3.0,
        "alarm fell at %.2f s, anomaly ended at %.1f s", b.last_off, T1);
  CHECK(!b.final_alarm, "the alarm is on at the end");
  free(l);
  free(r);
  free(dir);
  return 0;
}
