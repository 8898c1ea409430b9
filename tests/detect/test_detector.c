/* The detector's step function (hysteresis, smoothing, digital silence, a
 * non-finite score, no threshold), ssae_detector_run against a loop of
 * steps, and the shared definition of a window's samples, time and
 * silence (ssae_silence.h) against a brute-force reading of it. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ssae_test.h"
#include "ssae_detector.h"
#include "ssae_features.h"
#include "ssae_silence.h"

enum { ON = SSAE_DETECTOR_ALARM_ON, OFF = SSAE_DETECTOR_ALARM_OFF, SAME = SSAE_DETECTOR_NO_CHANGE };

/* Steps through scores with alpha 1 (no smoothing), threshold 1, on 3,
 * off 2; silent where the score is -1; returns what each step did. */
static void steps(ssae_detector *d, const double *s, int n, int *what) {
  for (int i = 0; i < n; i++)
    what[i] = ssae_detector_step(d, s[i] == -1 ? 5.0 : s[i], s[i] == -1, 1.0, 1.0, 3, 2);
}

static void test_defaults(void) {
  ssae_detector_params p;
  memset(&p, 0xff, sizeof p);
  ssae_detector_params_default(&p);
  CHECK(isnan(p.threshold), "default threshold %g", p.threshold);
  CHECK(p.smoothing_s == SSAE_DETECTOR_SMOOTHING_S && p.on_count == SSAE_DETECTOR_ON_COUNT &&
            p.off_count == SSAE_DETECTOR_OFF_COUNT,
        "defaults %g %d %d", p.smoothing_s, p.on_count, p.off_count);
  CHECK(!strcmp(SSAE_DETECTOR_TEXT(SSAE_DETECTOR_ON_COUNT), "3"), "defaults as text");
  double a = ssae_detector_alpha(0.032, 0.1);
  CHECK(fabs(a - (1.0 - exp(-0.32))) < 1e-15, "alpha %.17g", a);
  CHECK(ssae_detector_alpha(0.032, 0.0) == 1.0, "no smoothing: alpha 1");
}

static void test_hysteresis(void) {
  ssae_detector d;
  ssae_detector_reset(&d);
  /* Two above, one at the threshold (counts as below), three above: on at
   * the third of those; one below keeps it, two end it. */
  const double s[] = {2, 2, 1, 2, 2, 2, 2, 0.5, 2, 0.5, 1.0, 2};
  const int want[] = {SAME, SAME, SAME, SAME, SAME, ON, SAME, SAME, SAME, SAME, OFF, SAME};
  int what[12];
  steps(&d, s, 12, what);
  for (int i = 0; i < 12; i++)
    CHECK(what[i] == want[i], "hysteresis step %d: %d, want %d", i, what[i], want[i]);
  CHECK(!d.alarm && d.above == 1, "state after: alarm %d above %d", d.alarm, d.above);

  /* Counts below 1 count as 1. */
  ssae_detector_reset(&d);
  CHECK(ssae_detector_step(&d, 2, 0, 1.0, 1.0, 0, -4) == ON, "on_count 0 acts as 1");
  CHECK(ssae_detector_step(&d, 0, 0, 1.0, 1.0, 0, -4) == OFF, "off_count -4 acts as 1");
}

static void test_smoothing(void) {
  ssae_detector d;
  ssae_detector_reset(&d);
  const double a = 0.25;
  ssae_detector_step(&d, 8.0, 0, a, 100.0, 1, 1);
  CHECK(d.have_smoothed && d.smoothed == 8.0, "the first score starts the average: %g",
        d.smoothed);
  ssae_detector_step(&d, 4.0, 0, a, 100.0, 1, 1);
  CHECK(d.smoothed == 7.0, "EMA step: %g", d.smoothed);
  /* The smoothed score is judged, not the window's: one loud window does
   * not cross a threshold its average stays under. */
  ssae_detector_reset(&d);
  ssae_detector_step(&d, 1.0, 0, a, 2.0, 1, 1);
  CHECK(ssae_detector_step(&d, 4.0, 0, a, 2.0, 1, 1) == SAME && d.smoothed == 1.75,
        "one loud window: smoothed %g stays under 2", d.smoothed);
  CHECK(ssae_detector_step(&d, 4.0, 0, a, 2.0, 1, 1) == ON && d.smoothed == 2.3125,
        "the second one crosses: smoothed %g", d.smoothed);
}

static void test_silence(void) {
  ssae_detector d;
  ssae_detector_reset(&d);
  /* On after three; a silent window ends the alarm and forgets everything:
   * two above after it are not enough, the third turns it on again. */
  const double s[] = {2, 2, 2, -1, 2, 2, 2, -1, -1, 0.5};
  const int want[] = {SAME, SAME, ON, OFF, SAME, SAME, ON, OFF, SAME, SAME};
  int what[10];
  steps(&d, s, 10, what);
  for (int i = 0; i < 10; i++)
    CHECK(what[i] == want[i], "silence step %d: %d, want %d", i, what[i], want[i]);
  /* After silence the average starts at the next score, not from the old
   * one. */
  ssae_detector_reset(&d);
  ssae_detector_step(&d, 100.0, 0, 0.1, 1e9, 1, 1);
  ssae_detector_step(&d, 100.0, 1, 0.1, 1e9, 1, 1);
  CHECK(!d.have_smoothed, "silence resets the average");
  ssae_detector_step(&d, 3.0, 0, 0.1, 1e9, 1, 1);
  CHECK(d.smoothed == 3.0, "afresh after silence: %g", d.smoothed);
}

static void test_nan_score(void) {
  ssae_detector d;
  ssae_detector_reset(&d);
  /* A non-finite score is no evidence: the streak of scores above goes on
   * across it, the average is untouched, an alarm stays on. */
  CHECK(ssae_detector_step(&d, NAN, 0, 0.5, 1.0, 3, 2) == SAME && !d.have_smoothed,
        "NaN before any score: nothing");
  ssae_detector_step(&d, 2, 0, 0.5, 1.0, 3, 2);
  ssae_detector_step(&d, 2, 0, 0.5, 1.0, 3, 2);
  double sm = d.smoothed;
  CHECK(ssae_detector_step(&d, NAN, 0, 0.5, 1.0, 3, 2) == SAME && d.smoothed == sm &&
            d.above == 2,
        "NaN keeps the state: smoothed %g above %d", d.smoothed, d.above);
  CHECK(ssae_detector_step(&d, INFINITY, 0, 0.5, 1.0, 3, 2) == SAME && d.smoothed == sm,
        "inf is no evidence either");
  CHECK(ssae_detector_step(&d, 2, 0, 0.5, 1.0, 3, 2) == ON, "on at the third finite score");
  CHECK(ssae_detector_step(&d, NAN, 0, 0.5, 1.0, 3, 2) == SAME && d.alarm,
        "NaN leaves an alarm on");
}

static void test_no_threshold(void) {
  ssae_detector d;
  ssae_detector_reset(&d);
  for (int i = 0; i < 5; i++)
    CHECK(ssae_detector_step(&d, 1e6, 0, 0.5, NAN, 1, 1) == SAME && !d.alarm,
          "no threshold: no alarm");
  CHECK(d.smoothed == 1e6, "the average is kept without a threshold");
  CHECK(ssae_detector_step(&d, 1e6, 0, 0.5, 1.0, 1, 1) == ON, "a threshold arrives");
  CHECK(ssae_detector_step(&d, 1e6, 0, 0.5, INFINITY, 1, 1) == OFF, "and goes: alarm off");
  ssae_detector_step(&d, 1e6, 0, 0.5, 1.0, 1, 1);
  CHECK(ssae_detector_step(&d, NAN, 0, 0.5, NAN, 1, 1) == OFF,
        "no threshold with a NaN score: alarm off too");
}

static void test_run(void) {
  enum { N = 400 };
  float sc[N], sm[N], sm2[N];
  unsigned char sil[N], al[N], al2[N];
  uint64_t r = 12345;
  for (int i = 0; i < N; i++) {
    r = r * 6364136223846793005ULL + 1442695040888963407ULL;
    double u = (double)(r >> 11) * 0x1.0p-53;
    sc[i] = (float)((i / 40) % 2 ? 3.0 + u : 0.5 + u);
    sil[i] = i >= 230 && i < 236; /* inside the third of five loud stretches: six alarms */
  }
  sc[0] = NAN;
  sc[100] = NAN;
  ssae_detector_params p;
  ssae_detector_params_default(&p);
  p.threshold = 2.0;
  const double hop = 512.0 / 16000.0;
  ssae_detector_run(&p, hop, sc, sil, N, sm, al);
  ssae_detector d;
  ssae_detector_reset(&d);
  double a = ssae_detector_alpha(hop, p.smoothing_s);
  int spans = 0, same = 1;
  for (int i = 0; i < N; i++) {
    if (ssae_detector_step(&d, sc[i], sil[i], a, p.threshold, p.on_count, p.off_count) == ON)
      spans++;
    float want = d.have_smoothed ? (float)d.smoothed : NAN;
    if (!(al[i] == d.alarm && (sm[i] == want || (isnan(sm[i]) && isnan(want))))) same = 0;
  }
  CHECK(same, "ssae_detector_run is a loop of steps");
  CHECK(spans == 6 && isnan(sm[0]) && isnan(sm[232]) && isfinite(sm[236]),
        "run: %d spans, smoothed %g %g %g", spans, sm[0], sm[232], sm[236]);
  ssae_detector_run(&p, hop, sc, NULL, N, sm2, al2);
  CHECK(al2[233] && !al[233], "silent NULL: nothing silent");
  p.threshold = NAN;
  ssae_detector_run(&p, hop, sc, sil, N, NULL, al2);
  int any = 0;
  for (int i = 0; i < N; i++) any |= al2[i];
  CHECK(!any, "run without a threshold: no alarm");
}

/* The definition, read literally: window w is silent when one of its
 * samples [first, min(end, n)) is a zero whose run, counted up to it, has
 * at least SSAE_SILENCE_MIN_ZEROS zeros. */
static int brute_silent(const ssae_feat_cfg *f, const float *x, size_t n, size_t w) {
  uint64_t first, end;
  ssae_window_samples(f, w, &first, &end);
  if (end > n) end = n;
  for (uint64_t j = first; j < end; j++) {
    size_t run = 0;
    for (uint64_t k = j + 1; k-- > 0 && x[k] == 0.0f;) run++;
    if (run >= SSAE_SILENCE_MIN_ZEROS) return 1;
  }
  return 0;
}

static void test_window_span(void) {
  ssae_feat_cfg f;
  ssae_feat_cfg_default(&f);
  uint64_t first, end;
  ssae_window_samples(&f, 0, &first, &end);
  CHECK(first == 0 && end == 5 * 512, "window 0: %llu .. %llu", (unsigned long long)first,
        (unsigned long long)end);
  ssae_window_samples(&f, 10, &first, &end);
  CHECK(first == 15 * 512 - 4 * 512 - 1024 && end == 15 * 512, "window 10: %llu .. %llu",
        (unsigned long long)first, (unsigned long long)end);
  CHECK(ssae_window_time(&f, 92) == (92 + 5) * 512 / 16000.0, "time of window 92: %.9g",
        ssae_window_time(&f, 92));
  /* Uncentred frames, n_fft 400, hop 160: frame t is 160 t .. 160 t + 400. */
  f.center = 0;
  f.n_fft = 400;
  f.hop_length = 160;
  ssae_window_samples(&f, 3, &first, &end);
  CHECK(first == 480 && end == 7 * 160 + 400, "uncentred window 3: %llu .. %llu",
        (unsigned long long)first, (unsigned long long)end);
}

static void test_silence_windows(void) {
  ssae_feat_cfg f;
  ssae_feat_cfg_default(&f);
  enum { NS = 40000 };
  float *x = malloc(NS * sizeof *x);
  unsigned char sil[128];
  if (!x) {
    failures++;
    return;
  }
  for (int i = 0; i < NS; i++) x[i] = (float)sin(0.01 * i) + 0.5f;
  for (int i = 0; i < NS; i++)
    if (x[i] == 0.0f) x[i] = 1e-3f;
  const size_t nw = (NS / 512 + 1) - 5 + 1; /* centred frames: 1 + NS / hop */
  /* 63 zeros: not silence. */
  for (int i = 10000; i < 10063; i++) x[i] = 0.0f;
  ssae_silence_windows(&f, x, NS, nw, sil);
  int any = 0;
  for (size_t w = 0; w < nw; w++) any |= sil[w];
  CHECK(!any, "63 zeros are not digital silence");
  /* One more: the windows that hold its 64th zero (sample 10063) are. */
  x[10063] = 0.0f;
  ssae_silence_windows(&f, x, NS, nw, sil);
  int ok = 1, n_sil = 0;
  for (size_t w = 0; w < nw; w++) {
    uint64_t first, end;
    ssae_window_samples(&f, w, &first, &end);
    ok &= sil[w] == (first <= 10063 && 10063 < end);
    n_sil += sil[w];
  }
  CHECK(ok && n_sil == 6, "64 zeros: %d windows silent", n_sil);
  /* Runs at the start, the end and across windows, against the brute
   * force reading. */
  for (int i = 0; i < 300; i++) x[i] = 0.0f;
  for (int i = 20000; i < 23000; i++) x[i] = 0.0f;
  for (int i = 30001; i < 30065; i++) x[i] = 0.0f;
  for (int i = NS - 100; i < NS; i++) x[i] = 0.0f;
  ssae_silence_windows(&f, x, NS, nw, sil);
  int bad = 0;
  for (size_t w = 0; w < nw; w++) bad += sil[w] != brute_silent(&f, x, NS, w);
  CHECK(bad == 0, "%d windows differ from the definition", bad);
  CHECK(sil[0] && sil[nw - 1], "silence at the start and the end");
  /* The live scan, in blocks of any size, judges each window on its own
   * samples however far past its end the block goes. */
  for (size_t blk = 1; blk <= 8192; blk = blk * 3 + 1) {
    ssae_silence live;
    ssae_silence_reset(&live);
    size_t scanned = 0, bad_live = 0;
    for (size_t w = 0; w < nw; w++) {
      uint64_t first, end;
      ssae_window_samples(&f, w, &first, &end);
      while (scanned < end && scanned < NS) {
        size_t len = NS - scanned < blk ? NS - scanned : blk;
        ssae_silence_scan(&live, scanned, x + scanned, len);
        scanned += len;
      }
      bad_live += ssae_silence_touches(&live, first, end) != sil[w];
    }
    CHECK(bad_live == 0, "blocks of %zu: %zu windows differ", blk, bad_live);
  }
  /* An offline reader's way: scan blocks as read, flag what they complete. */
  unsigned char sil2[128];
  ssae_silence rd;
  ssae_silence_reset(&rd);
  size_t flagged = 0;
  for (size_t pos = 0; pos < NS; pos += 16384) {
    size_t len = NS - pos < 16384 ? NS - pos : 16384;
    ssae_silence_scan(&rd, pos, x + pos, len);
    size_t done = flagged;
    while (done < nw) {
      uint64_t first, end;
      ssae_window_samples(&f, done, &first, &end);
      if (end > pos + len && pos + len < NS) break;
      done++;
    }
    ssae_silence_flag_windows(&rd, &f, flagged, done - flagged, sil2 + flagged);
    flagged = done;
  }
  CHECK(flagged == nw && !memcmp(sil, sil2, nw), "flags from a reader's blocks differ");
  /* A gap in the positions ends a run: 40 + 40 zeros are no silence. */
  ssae_silence g;
  ssae_silence_reset(&g);
  static const float z[40] = {0};
  ssae_silence_scan(&g, 0, z, 40);
  ssae_silence_scan(&g, 1000, z, 40);
  CHECK(!ssae_silence_touches(&g, 0, 2000), "a gap in the positions ends a run");
  ssae_silence_scan(&g, 1040, z, 40);
  CHECK(ssae_silence_touches(&g, 1000 + 63, 1000 + 64) && !ssae_silence_touches(&g, 0, 1063),
        "the 64th zero of a run continued in the next block");
  free(x);
}

/* More separate runs than the scan keeps: the oldest merge, and silence is
 * never missed; windows judged within a block of their end stay exact. */
static void test_many_runs(void) {
  ssae_feat_cfg f;
  ssae_feat_cfg_default(&f);
  enum { NS = 60000 };
  float *x = malloc(NS * sizeof *x);
  unsigned char sil[128];
  if (!x) {
    failures++;
    return;
  }
  for (int i = 0; i < NS; i++) x[i] = 0.25f + (float)(i % 7);
  for (int r = 0; r < 60; r++)
    for (int i = 0; i < 64 + r % 5; i++) x[400 + r * 900 + (r % 3) * 50 + i] = 0.0f;
  const size_t nw = (NS / 512 + 1) - 5 + 1;
  ssae_silence_windows(&f, x, NS, nw, sil);
  int bad = 0, n_sil = 0;
  for (size_t w = 0; w < nw; w++) {
    bad += sil[w] != brute_silent(&f, x, NS, w);
    n_sil += sil[w];
  }
  CHECK(bad == 0 && n_sil > 0 && n_sil < (int)nw, "many runs: %d differ, %d silent", bad,
        n_sil);
  ssae_silence all;
  ssae_silence_reset(&all);
  ssae_silence_scan(&all, 0, x, NS);
  CHECK(all.n == SSAE_SILENCE_SPANS, "spans kept: %d", all.n);
  int missed = 0;
  for (size_t w = 0; w < nw; w++) {
    uint64_t first, end;
    ssae_window_samples(&f, w, &first, &end);
    missed += brute_silent(&f, x, NS, w) && !ssae_silence_touches(&all, first, end);
  }
  CHECK(missed == 0, "merged spans missed %d silent windows", missed);
  free(x);
}

int main(void) {
  test_defaults();
  test_hysteresis();
  test_smoothing();
  test_silence();
  test_nan_score();
  test_no_threshold();
  test_run();
  test_window_span();
  test_silence_windows();
  test_many_runs();
  return test_done("detector: all checks passed");
}
