/* Engine end to end in C, against independently computed expectations.
 *
 * The model is built so that its score is known in closed form: with the
 * slice decoder's weights zero, the reconstruction is the decoder bias c for
 * every frame, so a window's score is mean((x - c)^2) over its log-mel
 * values x (computed here with the offline ssae_logmel_compute path). The
 * test then checks:
 *  - every window's score from the engine (streamed in odd-sized blocks, two
 *    channels, flushed at the end) equals the offline score;
 *  - the alarm events equal those of a separate implementation of the
 *    detector (EMA with a time constant, hysteresis on/off counts), with
 *    their window index, time, score and threshold, and valid JSON lines;
 *  - parameters changed at run time take effect (a huge threshold: no alarm);
 *  - a model swap while running changes the scores to the new model's;
 *  - digital silence is not judged (no alarm, an alarm in progress ends);
 *  - an input-rate change (48 kHz) keeps the engine running. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ssae_test.h"
#include "ssae_engine.h"
#include "ssae_logmel.h"

#define MAXW 4096
#define MAXEV 256

typedef struct rec {
  pthread_mutex_t mu;
  float score[2][MAXW];
  int have[2][MAXW];
  ssae_event ev[MAXEV];
  ssae_alarm_info info[MAXEV]; /* ev[k].alarm, copied (valid only during the
                                  callback) */
  int nev;
  int bad_json;
} rec;

static void on_event(void *user, const ssae_event *ev) {
  rec *r = user;
  pthread_mutex_lock(&r->mu);
  if (ev->type == SSAE_EVENT_WINDOW && ev->channel >= 0 && ev->channel < 2 &&
      ev->window < MAXW) {
    r->score[ev->channel][ev->window] = (float)ev->raw_score;
    r->have[ev->channel][ev->window] = 1;
  }
  if ((ev->type == SSAE_EVENT_ALARM_ON || ev->type == SSAE_EVENT_ALARM_OFF) &&
      r->nev < MAXEV) {
    if (ev->alarm) r->info[r->nev] = *ev->alarm;
    else memset(&r->info[r->nev], 0, sizeof r->info[r->nev]);
    r->ev[r->nev] = *ev;
    r->ev[r->nev++].alarm = NULL;
    char line[1024], machine[16];
    snprintf(machine, sizeof machine, "\"machine\":\"ch%d\"", ev->channel);
    int n = ssae_event_json(ev, line, sizeof line);
    const int off = ev->type == SSAE_EVENT_ALARM_OFF;
    if (n <= 0 || line[n - 1] != '\n' || line[0] != '{' ||
        !strstr(line, "\"t\":") || !strstr(line, "\"channel\":") ||
        !strstr(line, off ? "\"event\":\"alarm_off\"" : "\"event\":\"alarm_on\"") ||
        !strstr(line, "\"score\":") || !strstr(line, "\"threshold\":") ||
        !strstr(line, machine) || !strstr(line, "\"id\":\"") || !strstr(line, "\"time\":\"") ||
        !strstr(line, "Z\"") || !ev->alarm ||
        (off && (!strstr(line, "\"duration_s\":") || !strstr(line, "\"peak_score\":") ||
                 !strstr(line, "\"reason\":\""))))
      r->bad_json = 1;
  }
  pthread_mutex_unlock(&r->mu);
}

/* The decoder's weights are zero whatever the latent sizes (S, L), so the
 * score stays mean((x - c)^2): models of other sizes with the same
 * features have the same expected scores. */
static ssae_model *level_model_dims(double c, double threshold, int S, int L) {
  ssae_err err;
  ssae_dims d;
  ssae_dims_default(&d);
  d.slice_latent = S;
  d.latent = L;
  ssae_model *m = ssae_model_new(&d, &err);
  if (!m) FAIL("%s", err.msg);
  ssae_model_init(m, 7);
  memset(m->dec_w, 0, (size_t)d.n_mels * d.slice_latent * sizeof(float));
  for (int i = 0; i < d.n_mels; i++) m->dec_b[i] = (float)c;
  m->threshold = threshold;
  if (ssae_model_update(m, &err)) FAIL("%s", err.msg);
  return m;
}

static ssae_model *level_model(double c, double threshold) {
  ssae_dims d;
  ssae_dims_default(&d);
  return level_model_dims(c, threshold, d.slice_latent, d.latent);
}

/* Offline expected window scores for model level c. */
static size_t expected(const float *x, size_t n, double c, double *out) {
  ssae_feat_cfg cfg;
  ssae_feat_cfg_default(&cfg);
  float *fr;
  size_t nf;
  ssae_err err;
  if (ssae_logmel_compute(&cfg, x, n, &fr, &nf, &err)) FAIL("%s", err.msg);
  size_t nw = nf >= 5 ? nf - 4 : 0;
  for (size_t w = 0; w < nw && w < MAXW; w++) {
    double acc = 0;
    for (int k = 0; k < 5; k++)
      for (int m = 0; m < 64; m++) {
        double v = fr[(w + (size_t)k) * 64 + (size_t)m] - c;
        acc += v * v;
      }
    out[w] = acc / 320.0;
  }
  free(fr);
  return nw;
}

typedef struct alarm {
  int on;
  uint64_t window;
  double smoothed;
} alarm;

/* The detector as documented: EMA with alpha = 1 - exp(-hop/sr/tau), alarm
 * on after `on` smoothed scores above thr, off after `off` below. */
static int simulate(const double *s, size_t nw, double thr, double tau, int on,
                    int off, alarm *out) {
  double alpha = tau > 0 ? 1 - exp(-(512.0 / 16000.0) / tau) : 1;
  double ema = 0;
  int have = 0, above = 0, below = 0, state = 0, n = 0;
  for (size_t w = 0; w < nw; w++) {
    ema = have ? ema + alpha * (s[w] - ema) : s[w];
    have = 1;
    if (ema > thr) {
      above++;
      below = 0;
      if (!state && above >= on) {
        state = 1;
        out[n++] = (alarm){1, w, ema};
      }
    } else {
      below++;
      above = 0;
      if (state && below >= off) {
        state = 0;
        out[n++] = (alarm){0, w, ema};
      }
    }
  }
  return n;
}

static void feed(ssae_engine *e, const float *x0, const float *x1, size_t n) {
  size_t sizes[] = {1, 333, 512, 4096, 77, 1024, 9000};
  size_t off = 0;
  for (int k = 0; off < n; k++) {
    size_t b = sizes[k % 7];
    if (b > n - off) b = n - off;
    const float *p[2] = {x0 + off, x1 ? x1 + off : NULL};
    ssae_engine_process(e, p, b);
    off += b;
  }
  ssae_engine_flush(e);
  ssae_engine_drain(e);
}

int main(void) {
  const size_t N = 16000 * 6;
  float *x = malloc(N * sizeof *x), *q = malloc(N * sizeof *q);
  uint64_t st = 0x9E3779B97F4A7C15ULL;
  for (size_t i = 0; i < N; i++) {
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    double u = (double)(st >> 11) / 9007199254740992.0 - 0.5;
    /* quiet noise, a loud section from 2.5 s to 3.5 s */
    double a = (i >= 40000 && i < 56000) ? 0.5 : 0.01;
    x[i] = (float)(a * u);
    q[i] = (float)(0.01 * u); /* channel 1: normal throughout */
  }
  const double c = -60.0;
  static double e0[MAXW], e1[MAXW];
  size_t nw = expected(x, N, c, e0);
  size_t nw1 = expected(q, N, c, e1);
  if (nw != nw1 || nw < 100) FAIL("unexpected window count %zu", nw);
  /* Threshold between the normal and the loud scores. */
  double lo = 1e300, hi = 0;
  for (size_t w = 0; w < nw; w++) {
    double t0 = (double)w * 512 - 512, t1 = (double)(w + 4) * 512 + 512;
    if (t1 < 40000 || t0 > 56000) {
      if (e0[w] > hi) hi = e0[w];
    } else if (t0 >= 40000 && t1 <= 56000 && e0[w] < lo) {
      lo = e0[w];
    }
  }
  if (!(lo > 2 * hi)) FAIL("test signal: loud %g vs normal %g not separable", lo, hi);
  double thr = sqrt(lo * hi);

  ssae_model *m = level_model(c, thr);
  rec *r = calloc(1, sizeof *r);
  pthread_mutex_init(&r->mu, NULL);
  ssae_engine_cfg cfg;
  ssae_engine_cfg_default(&cfg);
  cfg.channels = 2;
  cfg.backend = "cpu";
  cfg.emit_windows = 1;
  cfg.on_event = on_event;
  cfg.user = r;
  cfg.max_block = 1000;
  cfg.params.smoothing_s = 0.05;
  cfg.params.on_count = 3;
  cfg.params.off_count = 4;
  ssae_err err;
  ssae_engine *e = ssae_engine_new(m, &cfg, &err);
  if (!e) FAIL("%s", err.msg);
  if (ssae_engine_channels(e) != 2 || ssae_engine_model_rate(e) != 16000 ||
      ssae_engine_window_floats(e) != 320)
    FAIL("engine getters");

  /* 1. window scores and alarms */
  feed(e, x, q, N);
  for (int ch = 0; ch < 2; ch++) {
    const double *ex = ch ? e1 : e0;
    for (size_t w = 0; w < nw; w++) {
      if (!r->have[ch][w]) FAIL("channel %d window %zu not scored", ch, w);
      double rel = fabs(r->score[ch][w] - ex[w]) / ex[w];
      if (rel > 1e-4)
        FAIL("channel %d window %zu: score %g, expected %g", ch, w,
             r->score[ch][w], ex[w]);
    }
    if (r->have[ch][nw]) FAIL("channel %d: more windows than offline", ch);
  }
  alarm want[64];
  int nwant = simulate(e0, nw, thr, 0.05, 3, 4, want);
  if (nwant != 2) FAIL("simulated detector gives %d alarm events, expected 2", nwant);
  if (r->nev != nwant) FAIL("engine gave %d alarm events, expected %d", r->nev, nwant);
  for (int k = 0; k < nwant; k++) {
    const ssae_event *ev = &r->ev[k];
    double t = ((double)(ev->window + 4) * 512 + 512) / 16000.0;
    if (ev->channel != 0 || (ev->type == SSAE_EVENT_ALARM_ON) != want[k].on ||
        ev->window != want[k].window || fabs(ev->t - t) > 1e-9 ||
        fabs(ev->score - want[k].smoothed) > 1e-3 * want[k].smoothed ||
        fabs(ev->threshold - thr) > 1e-9 * thr)
      FAIL("alarm event %d: %s ch %d window %llu t %.3f score %g thr %g; "
           "expected %s window %llu t %.3f score %g",
           k, ev->type == SSAE_EVENT_ALARM_ON ? "on" : "off", ev->channel,
           (unsigned long long)ev->window, ev->t, ev->score, ev->threshold,
           want[k].on ? "on" : "off", (unsigned long long)want[k].window, t,
           want[k].smoothed);
  }
  if (r->bad_json) FAIL("malformed JSON event line");
  /* The alarm's identity and extent (SPEC section 4): one id for its on
   * and off, a version 4 UUID; its duration in audio seconds; its peak the
   * highest window score from the window that raised it to the one that
   * ended it; ended by the scores. */
  const ssae_alarm_info *a0 = &r->info[0], *a1 = &r->info[1];
  if (strcmp(a0->id, a1->id) || strlen(a0->id) != 36 || a0->id[14] != '4')
    FAIL("alarm ids: on %s, off %s", a0->id, a1->id);
  if (fabs(a1->duration_s - (r->ev[1].t - r->ev[0].t)) > 1e-9 || a0->duration_s != 0)
    FAIL("alarm duration %g s, expected %g", a1->duration_s, r->ev[1].t - r->ev[0].t);
  double peak = 0;
  for (uint64_t w = r->ev[0].window; w <= r->ev[1].window; w++)
    if (r->score[0][w] > peak) peak = r->score[0][w];
  if (a1->peak_score != peak || a0->peak_score != r->score[0][r->ev[0].window])
    FAIL("alarm peak %g (on: %g), expected %g", a1->peak_score, a0->peak_score, peak);
  if (a0->reason || !a1->reason || strcmp(a1->reason, "score"))
    FAIL("alarm_off's reason %s, expected score", a1->reason ? a1->reason : "(none)");
  if (!(a1->wall >= a0->wall && a0->wall == a0->wall_on && a1->wall_on == a0->wall_on &&
        a0->wall > 1.7e9))
    FAIL("alarm wall clock: on %.3f, off %.3f", a0->wall, a1->wall);
  char first_id[SSAE_ALARM_ID_LEN];
  memcpy(first_id, a0->id, sizeof first_id);
  printf("%zu windows x 2 channels match the offline scores; alarm on at "
         "%.3f s, off at %.3f s as simulated; alarm %s, %.3f s, peak %.4g\n",
         nw, r->ev[0].t, r->ev[1].t, a0->id, a1->duration_s, a1->peak_score);

  /* 2. a run-time threshold far above: no alarms */
  ssae_engine_params p;
  ssae_engine_get_params(e, &p);
  p.threshold = lo * 1000;
  ssae_engine_set_params(e, &p);
  r->nev = 0;
  feed(e, x, q, N);
  if (r->nev) FAIL("alarm despite a run-time threshold of %g", p.threshold);
  ssae_channel_state cs;
  ssae_engine_channel_get(e, 0, &cs);
  if (fabs(cs.threshold - p.threshold) > 1e-6 * p.threshold || cs.alarm)
    FAIL("channel state: threshold %g alarm %d", cs.threshold, cs.alarm);
  if (cs.windows != 2 * nw) FAIL("channel 0 scored %llu windows, expected %zu",
                                 (unsigned long long)cs.windows, 2 * nw);

  /* 3. silence: an alarm in progress ends, silence raises none */
  p.threshold = NAN; /* the model's again */
  ssae_engine_set_params(e, &p);
  r->nev = 0;
  const float *loud[2] = {x + 40000, q};
  ssae_engine_process(e, loud, 16000); /* 1 s loud: alarm on */
  ssae_engine_drain(e);
  ssae_engine_channel_get(e, 0, &cs);
  if (!cs.alarm) FAIL("no alarm on a loud second");
  float *zero = calloc(16000, sizeof *zero);
  const float *z[2] = {zero, zero};
  ssae_engine_process(e, z, 16000);
  ssae_engine_flush(e);
  ssae_engine_drain(e);
  ssae_engine_channel_get(e, 0, &cs);
  if (cs.alarm) FAIL("alarm still on after a second of digital silence");
  /* The frames that straddle the loud-to-silent edge are not silent and
   * may toggle the alarm; once the windows are pure silence nothing may
   * start, and the last event ends the alarm. */
  if (r->nev < 2 || r->ev[r->nev - 1].type != SSAE_EVENT_ALARM_OFF)
    FAIL("silence: expected the alarm to end, got %d events", r->nev);
  {
    const ssae_alarm_info *end = &r->info[r->nev - 1], *start = &r->info[r->nev - 2];
    if (!end->reason || strcmp(end->reason, "silence"))
      FAIL("silence: alarm_off's reason %s", end->reason ? end->reason : "(none)");
    if (strcmp(end->id, start->id) || !strcmp(end->id, first_id))
      FAIL("silence: alarm ids %s / %s (the first alarm's %s)", start->id, end->id, first_id);
    /* A silent window's score says nothing about the machine: not a peak. */
    /* A silent window's score says nothing about the machine: the peak is
     * that of the windows before the first silent one, which ended it. */
    const uint64_t w_on = r->ev[r->nev - 2].window, w_off = r->ev[r->nev - 1].window;
    double loud_peak = 0;
    for (uint64_t w = w_on; w < w_off && w < MAXW; w++)
      if (r->have[0][w] && r->score[0][w] > loud_peak) loud_peak = r->score[0][w];
    printf("silence: alarm %s ended after %.3f s, peak %.6g (the silent window's score "
           "%.6g)\n",
           end->id, end->duration_s, end->peak_score, r->ev[r->nev - 1].raw_score);
    if (end->peak_score != loud_peak)
      FAIL("silence: peak %.9g, expected %.9g (windows %llu to %llu)", end->peak_score,
           loud_peak, (unsigned long long)w_on, (unsigned long long)w_off - 1);
  }
  for (int k = 0; k < r->nev; k++)
    if (r->ev[k].type == SSAE_EVENT_ALARM_ON &&
        r->ev[k].window >= r->ev[0].window + 31 + 5)
      FAIL("silence: alarm_on at window %llu (t %.3f) in digital silence",
           (unsigned long long)r->ev[k].window, r->ev[k].t);

  /* 4. model swap while running */
  ssae_model *m2 = level_model(c + 10, thr);
  if (ssae_engine_swap_model(e, m2, &err)) FAIL("swap: %s", err.msg);
  ssae_model_free(m); /* the engine no longer uses it */
  static double e2[MAXW];
  expected(x, N, c + 10, e2);
  memset(r->have, 0, sizeof r->have);
  feed(e, x, q, N);
  /* Window indices continue; find this stream's first window. */
  ssae_engine_channel_get(e, 0, &cs);
  uint64_t first = cs.windows - nw;
  for (size_t w = 0; w < nw; w++) {
    uint64_t idx = first + w;
    if (idx >= MAXW || !r->have[0][idx]) FAIL("after swap: window %zu missing", w);
    if (fabs(r->score[0][idx] - e2[w]) > 1e-4 * e2[w])
      FAIL("after swap: window %zu score %g, expected %g", w, r->score[0][idx], e2[w]);
  }
  /* A model of other latent sizes (twice the slice codes the worker
   * keeps per channel, half the latent): its scores, on both channels. */
  ssae_model *m3 = level_model_dims(c + 20, thr, 128, 16);
  if (ssae_engine_swap_model(e, m3, &err)) FAIL("swap to S=128: %s", err.msg);
  ssae_model_free(m2);
  static double e3[MAXW], q3[MAXW];
  expected(x, N, c + 20, e3);
  expected(q, N, c + 20, q3);
  memset(r->have, 0, sizeof r->have);
  feed(e, x, q, N);
  for (int ch = 0; ch < 2; ch++) {
    ssae_engine_channel_get(e, ch, &cs);
    first = cs.windows - nw;
    for (size_t w = 0; w < nw; w++) {
      const double want = ch ? q3[w] : e3[w];
      uint64_t idx = first + w;
      if (idx >= MAXW || !r->have[ch][idx])
        FAIL("after swap to S=128: channel %d window %zu missing", ch, w);
      if (fabs(r->score[ch][idx] - want) > 1e-4 * want)
        FAIL("after swap to S=128: channel %d window %zu score %g, expected %g", ch, w,
             r->score[ch][idx], want);
    }
  }

  /* A swap restarts the smoothing: a model whose scores run far above the
   * next one's threshold, then that model on normal audio (its scores
   * below its threshold) raises no alarm from the old model's average. */
  {
    ssae_model *big = level_model(c + 400, 1e30), *calm = level_model(c, thr);
    if (ssae_engine_swap_model(e, big, &err)) FAIL("swap to the loud model: %s", err.msg);
    ssae_model_free(m3);
    m3 = NULL;
    feed(e, x, x, 40000); /* the normal part */
    ssae_engine_channel_get(e, 0, &cs);
    const double big_smoothed = cs.smoothed;
    pthread_mutex_lock(&r->mu);
    r->nev = 0;
    pthread_mutex_unlock(&r->mu);
    if (ssae_engine_swap_model(e, calm, &err)) FAIL("swap to the calm model: %s", err.msg);
    ssae_model_free(big);
    feed(e, x, x, 40000);
    pthread_mutex_lock(&r->mu);
    int nev = r->nev;
    pthread_mutex_unlock(&r->mu);
    if (!(big_smoothed > 10 * thr))
      FAIL("swap test: the loud model's smoothed score %g is not far above %g", big_smoothed,
           thr);
    if (nev) FAIL("swap: %d alarm event(s) on normal audio after a swap (the old model's "
                  "smoothed score %g against the new threshold %g)", nev, big_smoothed, thr);
    printf("swap: the smoothing restarts (the old model's %.4g against the new threshold "
           "%.4g): no alarm\n", big_smoothed, thr);
    m3 = calm;
    ssae_engine_channel_get(e, 0, &cs);
  }

  ssae_dims d;
  ssae_dims_default(&d);
  d.n_mels = 32;
  ssae_model *bad = ssae_model_new(&d, &err);
  if (bad) {
    bad->feat.n_mels = 32;
    if (ssae_engine_swap_model(e, bad, &err) == 0)
      FAIL("swap accepted a model with other features");
    ssae_model_free(bad);
  }

  /* 5. input rate change */
  if (ssae_engine_set_input_rate(e, 48000, &err)) FAIL("%s", err.msg);
  size_t n48 = 3 * 16000;
  float *y = calloc(n48, sizeof *y);
  for (size_t i = 0; i < n48; i++) y[i] = 0.01f * sinf((float)i * 0.05f);
  const float *yp[2] = {y, y};
  uint64_t before = cs.windows;
  ssae_engine_process(e, yp, n48);
  ssae_engine_drain(e);
  ssae_engine_channel_get(e, 0, &cs);
  /* 1 s at 48 kHz = 31 frames after resampling: 27 windows */
  if (cs.windows - before < 25 || cs.windows - before > 28)
    FAIL("48 kHz: %llu windows for one second", (unsigned long long)(cs.windows - before));
  if (ssae_engine_set_input_rate(e, 0, &err) == 0) FAIL("rate 0 accepted");

  ssae_engine_stats s;
  ssae_engine_stats_get(e, &s);
  if (s.dropped || s.scored != s.windows || !s.batches || strcmp(s.backend, "cpu"))
    FAIL("stats: windows %llu scored %llu dropped %llu backend %s",
         (unsigned long long)s.windows, (unsigned long long)s.scored,
         (unsigned long long)s.dropped, s.backend);
  ssae_engine_free(e);
  ssae_model_free(m3);
  pthread_mutex_destroy(&r->mu);
  free(r);
  free(x);
  free(q);
  free(y);
  free(zero);
  printf("run-time parameters, silence, model swap and rate change OK\n");
  return 0;
}
