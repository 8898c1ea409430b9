/* ssae-gen: machine-like demo recordings with labelled anomalies.
 *
 * A fan driven by a motor: rotation harmonics, a blade-pass tone and its
 * harmonics, broadband flow noise (pink, with a broad resonance, modulated
 * by the blades), mains hum, and a slow drift of the speed. Each clip is a
 * different run of the same machine: the seed varies speed, levels and
 * phases a little, as real recordings of one machine vary.
 *
 * Anomalies (each fades in and out over 50 ms inside its span):
 *   clicks     bearing defect: impacts at the outer-race frequency, stronger
 *              once per turn (load zone), ringing at two structural resonances
 *   squeal     rubbing: a wobbling 2.3 kHz tone with harmonics, pulsing once
 *              per turn where the parts touch
 *   imbalance  raised 1x..12x rotation harmonics and a slow beat on the whole
 *              sound
 *   clog       clogged flow: the fan slows under load, the blade-pass tone
 *              grows, the flow noise loses its highs and gains a low rumble
 *
 * Everything is computed from the seed with a private generator (splitmix64
 * + xoshiro256**), so a seed always gives the same bytes. Output: 16-bit
 * PCM WAV (libsndfile) and a labels file of anomaly spans. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sndfile.h>

#include "ssae_rng.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

#define TWO_PI (2.0 * M_PI)

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2 };

typedef enum { AN_NONE = 0, AN_CLICKS, AN_SQUEAL, AN_IMBALANCE, AN_CLOG, AN_COUNT } anomaly;
static const char *const anomaly_names[AN_COUNT] = {"none", "clicks", "squeal", "imbalance",
                                                    "clog"};

/* ---- random numbers (src/core/ssae_rng.h) ---- */
typedef ssae_rng rng;
static void rng_seed(rng *r, uint64_t seed) { ssae_rng_seed(r, seed); }

/* Uniform in [0, 1). */
static double rng_unif(rng *r) { return ssae_rng_uniform(r); }
static double rng_range(rng *r, double a, double b) { return a + (b - a) * rng_unif(r); }

/* Standard normal (Box-Muller; one value per call keeps the stream simple). */
static double rng_gauss(rng *r) {
  double u = rng_unif(r), v = rng_unif(r);
  if (u < 1e-300) u = 1e-300;
  return sqrt(-2.0 * log(u)) * cos(TWO_PI * v);
}

/* ---- filters ---- */
typedef struct {
  double b0, b1, b2, a1, a2, z1, z2;
} biquad;

/* RBJ band-pass (constant 0 dB peak gain). */
static void bq_bandpass(biquad *f, double fc, double q, double rate) {
  double w = TWO_PI * fc / rate, al = sin(w) / (2.0 * q), a0 = 1.0 + al;
  f->b0 = al / a0;
  f->b1 = 0.0;
  f->b2 = -al / a0;
  f->a1 = -2.0 * cos(w) / a0;
  f->a2 = (1.0 - al) / a0;
  f->z1 = f->z2 = 0.0;
}

static void bq_lowpass(biquad *f, double fc, double q, double rate) {
  double w = TWO_PI * fc / rate, al = sin(w) / (2.0 * q), c = cos(w), a0 = 1.0 + al;
  f->b0 = (1.0 - c) / 2.0 / a0;
  f->b1 = (1.0 - c) / a0;
  f->b2 = f->b0;
  f->a1 = -2.0 * c / a0;
  f->a2 = (1.0 - al) / a0;
  f->z1 = f->z2 = 0.0;
}

static double bq_run(biquad *f, double x) {
  double y = f->b0 * x + f->z1;
  f->z1 = f->b1 * x - f->a1 * y + f->z2;
  f->z2 = f->b2 * x - f->a2 * y;
  return y;
}

/* Paul Kellet's pink-noise filter. */
typedef struct {
  double b[7];
} pink;

static double pink_run(pink *p, double w) {
  double *b = p->b;
  b[0] = 0.99886 * b[0] + w * 0.0555179;
  b[1] = 0.99332 * b[1] + w * 0.0750759;
  b[2] = 0.96900 * b[2] + w * 0.1538520;
  b[3] = 0.86650 * b[3] + w * 0.3104856;
  b[4] = 0.55000 * b[4] + w * 0.5329522;
  b[5] = -0.7616 * b[5] - w * 0.0168980;
  double y = b[0] + b[1] + b[2] + b[3] + b[4] + b[5] + b[6] + w * 0.5362;
  b[6] = w * 0.115926;
  return y * 0.11;
}

/* ---- the machine ---- */
#define N_HARM 12
#define N_BLADE_HARM 4
#define BLADES 7

typedef struct {
  double rate, seconds;
  anomaly kind;
  double at, length; /* anomaly span, seconds */
} clip_spec;

/* Smooth 0..1 envelope of the anomaly span (50 ms raised-cosine ramps). */
static double span_env(const clip_spec *c, double t) {
  if (c->kind == AN_NONE || t < c->at || t >= c->at + c->length) return 0.0;
  double ramp = 0.05, a = t - c->at, b = c->at + c->length - t, m = a < b ? a : b;
  if (ramp > c->length / 2) ramp = c->length / 2;
  if (m >= ramp) return 1.0;
  return 0.5 - 0.5 * cos(M_PI * m / ramp);
}

static int synth(uint64_t seed, const clip_spec *c, float **out, size_t *n_out) {
  size_t n = (size_t)llround(c->seconds * c->rate);
  float *y = malloc((n ? n : 1) * sizeof *y);
  if (!y) return -1;
  rng r;
  rng_seed(&r, seed);
  const double rate = c->rate;

  /* This run of the machine. */
  double f0 = 24.0 * rng_range(&r, 0.985, 1.015);
  double drift_depth = rng_range(&r, 0.004, 0.010), drift_period = rng_range(&r, 6.0, 14.0);
  double drift_phase = rng_range(&r, 0.0, TWO_PI);
  double level = rng_range(&r, 0.95, 1.05);
  double harm_amp[N_HARM], harm_phase[N_HARM];
  for (int k = 0; k < N_HARM; k++) {
    harm_amp[k] = 0.018 / pow(k + 1.0, 0.9) * rng_range(&r, 0.9, 1.1);
    harm_phase[k] = rng_range(&r, 0.0, TWO_PI);
  }
  static const double blade_amp[N_BLADE_HARM] = {0.060, 0.028, 0.013, 0.006};
  double blade_phase[N_BLADE_HARM];
  for (int k = 0; k < N_BLADE_HARM; k++) blade_phase[k] = rng_range(&r, 0.0, TWO_PI);
  double noise_level = 0.045 * rng_range(&r, 0.95, 1.05);
  double hum_phase = rng_range(&r, 0.0, TWO_PI);
  biquad flow_res, rumble, hf_click1, hf_click2, clog_lp;
  bq_bandpass(&flow_res, 1200.0 * rng_range(&r, 0.97, 1.03), 0.7, rate);
  bq_bandpass(&rumble, 180.0, 0.8, rate);
  bq_bandpass(&hf_click1, 3150.0, 12.0, rate);
  bq_bandpass(&hf_click2, 5050.0, 15.0, rate);
  bq_lowpass(&clog_lp, 500.0, 0.7, rate);
  pink pk = {{0}};
  double walk = 0.0; /* slow random walk of the speed */
  double rot = 0.0, blade = 0.0, squeal_ph = 0.0, wob_ph = 0.0;
  double next_click = 0.0, click_amp = 0.0;
  double beat_hz = rng_range(&r, 1.6, 2.4), squeal_hz = 2300.0 * rng_range(&r, 0.97, 1.03);
  /* Each anomaly draws from its own stream so that the normal sound under
   * it is the same as without it. */
  rng ra;
  rng_seed(&ra, seed ^ 0x5deece66dULL);

  for (size_t i = 0; i < n; i++) {
    double t = (double)i / rate, e = span_env(c, t);
    walk += rng_gauss(&r) * 2e-5;
    walk *= 0.99995;
    double speed = 1.0 + drift_depth * sin(TWO_PI * t / drift_period + drift_phase) + walk;
    if (c->kind == AN_CLOG) speed *= 1.0 - 0.07 * e;
    double f = f0 * speed;
    rot += TWO_PI * f / rate;
    if (rot > TWO_PI * 1e6) rot = fmod(rot, TWO_PI);
    blade = rot * BLADES;

    double harm_gain[N_HARM];
    for (int k = 0; k < N_HARM; k++) harm_gain[k] = 1.0;
    double beat = 1.0;
    if (c->kind == AN_IMBALANCE && e > 0) {
      static const double boost[N_HARM] = {10, 7, 6, 5, 4.5, 4, 3.5, 3, 3, 2.5, 2.5, 2};
      for (int k = 0; k < N_HARM; k++) harm_gain[k] = 1.0 + (boost[k] - 1.0) * e;
      beat = 1.0 + 0.6 * e * sin(TWO_PI * beat_hz * t);
    }
    double s = 0.0;
    for (int k = 0; k < N_HARM; k++)
      s += harm_amp[k] * harm_gain[k] * sin((k + 1) * rot + harm_phase[k]);
    double bgain = c->kind == AN_CLOG ? 1.0 + 1.8 * e : 1.0;
    for (int k = 0; k < N_BLADE_HARM; k++)
      s += bgain * blade_amp[k] * sin((k + 1) * blade + blade_phase[k]);
    /* Sidebands of the blade-pass tone at +-1x: a real fan's blades differ. */
    s += 0.008 * sin(blade + rot) + 0.006 * sin(blade - rot);
    s += 0.010 * sin(TWO_PI * 100.0 * t + hum_phase) + 0.004 * sin(TWO_PI * 200.0 * t);

    double w = rng_gauss(&r);
    double pn = pink_run(&pk, w), res = bq_run(&flow_res, w);
    double flow = (0.6 * pn + 0.8 * res) * (1.0 + 0.25 * sin(blade));
    if (c->kind == AN_CLOG && e > 0) {
      double lp = bq_run(&clog_lp, flow);
      flow = (1.0 - e) * flow + e * (0.35 * flow + 1.6 * lp);
      flow += e * 2.5 * bq_run(&rumble, rng_gauss(&ra));
    }
    s += noise_level * flow;

    if (c->kind == AN_CLICKS) {
      /* Impacts at the outer-race defect frequency (3.58x), loudest once
       * per turn in the load zone; each rings two resonances. */
      double imp = 0.0;
      if (t >= next_click) {
        double load = 0.5 + 0.5 * cos(rot);
        click_amp = e * load * load * rng_range(&ra, 0.6, 1.0);
        imp = click_amp * 4.0;
        next_click = t + 1.0 / (3.58 * f) * rng_range(&ra, 0.98, 1.02);
      }
      s += 0.9 * bq_run(&hf_click1, imp) + 0.7 * bq_run(&hf_click2, imp);
    } else if (c->kind == AN_SQUEAL && e > 0) {
      wob_ph += TWO_PI * 0.7 / rate;
      double fs = squeal_hz * (1.0 + 0.03 * sin(wob_ph) + 0.004 * rng_gauss(&ra));
      squeal_ph += TWO_PI * fs / rate;
      double touch = pow(fmax(0.0, cos(rot)), 4.0);
      double sq = sin(squeal_ph) + 0.5 * sin(2.0 * squeal_ph) + 0.25 * sin(3.0 * squeal_ph);
      s += e * 0.05 * (0.25 + 0.75 * touch) * sq;
    }

    double v = level * beat * s;
    if (v > 0.999) v = 0.999;
    if (v < -0.999) v = -0.999;
    y[i] = (float)v;
  }
  *out = y;
  *n_out = n;
  return 0;
}

static int write_wav(const char *path, const float *y, size_t n, int rate) {
  SF_INFO info = {0};
  info.samplerate = rate;
  info.channels = 1;
  info.format = SF_FORMAT_WAV | SF_FORMAT_PCM_16;
  SNDFILE *sf = sf_open(path, SFM_WRITE, &info);
  if (!sf) {
    fprintf(stderr, "ssae-gen: %s: cannot write: %s\n", path, sf_strerror(NULL));
    return -1;
  }
  sf_command(sf, SFC_SET_CLIPPING, NULL, SF_TRUE);
  sf_count_t done = sf_writef_float(sf, y, (sf_count_t)n);
  int rc = sf_close(sf);
  if (done != (sf_count_t)n || rc) {
    fprintf(stderr, "ssae-gen: %s: write failed\n", path);
    return -1;
  }
  return 0;
}

static int make_clip(uint64_t seed, const clip_spec *c, const char *path) {
  float *y;
  size_t n;
  if (synth(seed, c, &y, &n)) {
    fprintf(stderr, "ssae-gen: out of memory\n");
    return -1;
  }
  int rc = write_wav(path, y, n, (int)c->rate);
  free(y);
  return rc;
}

static int write_labels(const char *path, const clip_spec *c) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "ssae-gen: %s: %s\n", path, strerror(errno));
    return -1;
  }
  fprintf(f, "start\tend\tlabel\n");
  if (c->kind != AN_NONE) fprintf(f, "%.3f\t%.3f\t%s\n", c->at, c->at + c->length,
                                  anomaly_names[c->kind]);
  if (fclose(f)) {
    fprintf(stderr, "ssae-gen: %s: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}

static int make_dir(const char *path) {
  if (mkdir(path, 0777) && errno != EEXIST) {
    fprintf(stderr, "ssae-gen: %s: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}

/* Per-clip seeds: independent streams for the train and test roles. */
static uint64_t clip_seed(uint64_t seed, uint64_t role, uint64_t i) {
  uint64_t x = seed * 0x100000001b3ULL ^ (role << 40) ^ i;
  return ssae_rng_splitmix64(&x);
}

/* DIR/train/normal_NNNN.wav, DIR/test/normal/normal_NNNN.wav,
 * DIR/test/anomaly/anomaly_NNNN_KIND.wav, DIR/test/labels.csv (path,label),
 * DIR/test/spans.tsv (file, start, end, label). */
static int make_set(const char *dir, uint64_t seed, int n_train, int n_test, double seconds,
                    double rate) {
  char p[4200], q[4200], rel[128];
  if (strlen(dir) > 4000) {
    fprintf(stderr, "ssae-gen: --set: directory name too long\n");
    return -1;
  }
  snprintf(p, sizeof p, "%s/train", dir);
  snprintf(q, sizeof q, "%s/test", dir);
  if (make_dir(dir) || make_dir(p) || make_dir(q)) return -1;
  snprintf(p, sizeof p, "%s/test/normal", dir);
  snprintf(q, sizeof q, "%s/test/anomaly", dir);
  if (make_dir(p) || make_dir(q)) return -1;
  clip_spec c = {rate, seconds, AN_NONE, 0, 0};
  for (int i = 0; i < n_train; i++) {
    snprintf(p, sizeof p, "%s/train/normal_%04d.wav", dir, i);
    if (make_clip(clip_seed(seed, 1, (uint64_t)i), &c, p)) return -1;
  }
  snprintf(p, sizeof p, "%s/test/labels.csv", dir);
  snprintf(q, sizeof q, "%s/test/spans.tsv", dir);
  FILE *csv = fopen(p, "w"), *spans = fopen(q, "w");
  if (!csv || !spans) {
    fprintf(stderr, "ssae-gen: %s/test: cannot write the label files: %s\n", dir, strerror(errno));
    if (csv) fclose(csv);
    if (spans) fclose(spans);
    return -1;
  }
  fprintf(csv, "path,label\n");
  fprintf(spans, "file\tstart\tend\tlabel\n");
  int rc = 0;
  for (int i = 0; i < n_test && !rc; i++) {
    c.kind = AN_NONE;
    snprintf(rel, sizeof rel, "normal/normal_%04d.wav", i);
    snprintf(q, sizeof q, "%s/test/%s", dir, rel);
    rc = make_clip(clip_seed(seed, 2, (uint64_t)i), &c, q);
    fprintf(csv, "%s,normal\n", rel);
  }
  for (int i = 0; i < n_test && !rc; i++) {
    uint64_t s = clip_seed(seed, 3, (uint64_t)i);
    rng r;
    rng_seed(&r, s ^ 0xa5a5a5a5ULL);
    /* Like DCASE's anomalous clips: the fault is present for most of it. */
    c.kind = (anomaly)(1 + i % (AN_COUNT - 1));
    c.length = seconds * rng_range(&r, 0.6, 0.9);
    c.at = rng_range(&r, 0.0, seconds - c.length);
    snprintf(rel, sizeof rel, "anomaly/anomaly_%04d_%s.wav", i, anomaly_names[c.kind]);
    snprintf(q, sizeof q, "%s/test/%s", dir, rel);
    rc = make_clip(s, &c, q);
    fprintf(csv, "%s,anomaly\n", rel);
    fprintf(spans, "%s\t%.3f\t%.3f\t%s\n", rel, c.at, c.at + c.length, anomaly_names[c.kind]);
  }
  if (fclose(csv) | fclose(spans)) {
    fprintf(stderr, "ssae-gen: %s/test: writing the label files failed\n", dir);
    rc = -1;
  }
  return rc;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: ssae-gen [--seed N] [--seconds S] [--rate HZ]\n"
          "                [--anomaly clicks|squeal|imbalance|clog|none] [--at T] [--length D]\n"
          "                -o OUT.wav [--labels OUT.tsv]\n"
          "       ssae-gen --set DIR [--seed N] [--train N] [--test N] [--seconds S]\n\n"
          "Machine-like demo sound (a fan: rotation harmonics, blade-pass tone, flow noise,\n"
          "slow speed drift) with a labelled anomaly, the same bytes for the same seed.\n\n"
          "  --seed N       random seed (default 1)\n"
          "  --seconds S    clip length (default 10)\n"
          "  --rate HZ      sample rate (default 16000)\n"
          "  --anomaly K    the fault to add (default none)\n"
          "  --at T         start of the fault in seconds (default: a third of the clip)\n"
          "  --length D     its length in seconds (default: a third of the clip)\n"
          "  -o FILE        the WAV file to write (16-bit PCM, mono)\n"
          "  --labels FILE  anomaly spans as TSV: start, end, label (seconds)\n"
          "  --set DIR      a train/test set: DIR/train/*.wav (normal), DIR/test/normal,\n"
          "                 DIR/test/anomaly (one kind after the other), DIR/test/labels.csv\n"
          "                 (path,label) and DIR/test/spans.tsv\n"
          "  --train N      normal training clips in a set (default 40)\n"
          "  --test N       normal and anomalous test clips each (default 20)\n");
}

static int parse_num(const char *flag, const char *s, double min, double max, double *out) {
  char *end;
  errno = 0;
  double v = s ? strtod(s, &end) : 0;
  if (!s || errno || end == s || *end || !(v >= min && v <= max)) {
    fprintf(stderr, "ssae-gen: %s needs a number in [%g, %g], got '%s'\n", flag, min, max,
            s ? s : "");
    return -1;
  }
  *out = v;
  return 0;
}

int main(int argc, char **argv) {
  double seed = 1, seconds = 10, rate = 16000, at = -1, length = -1, n_train = 40, n_test = 20;
  const char *out = NULL, *labels = NULL, *set = NULL;
  anomaly kind = AN_NONE;
  /* The options that take a number, and its range. */
  const struct {
    const char *name;
    double min, max, *value;
  } nums[] = {
      {"--seed", 0, 9007199254740991.0, &seed}, {"--seconds", 0.1, 3600, &seconds},
      {"--rate", 16000, 192000, &rate},         {"--at", 0, 3600, &at},
      {"--length", 0.01, 3600, &length},        {"--train", 0, 100000, &n_train},
      {"--test", 0, 100000, &n_test},
  };
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int rc = 0, takes = 1, num = -1;
    for (int k = 0; k < (int)(sizeof nums / sizeof *nums); k++)
      if (!strcmp(a, nums[k].name)) num = k;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return EXIT_OK;
    } else if (num >= 0) {
      rc = parse_num(a, v, nums[num].min, nums[num].max, nums[num].value);
      if (!rc && nums[num].value == &seed && seed != floor(seed)) {
        fprintf(stderr, "ssae-gen: --seed needs a whole number\n");
        rc = -1;
      }
    } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
      out = v;
    } else if (!strcmp(a, "--labels")) {
      labels = v;
    } else if (!strcmp(a, "--set")) {
      set = v;
    } else if (!strcmp(a, "--anomaly")) {
      int k;
      for (k = 0; k < AN_COUNT; k++)
        if (v && !strcmp(v, anomaly_names[k])) break;
      if (k == AN_COUNT) {
        fprintf(stderr, "ssae-gen: --anomaly must be clicks, squeal, imbalance, clog or none\n");
        rc = -1;
      }
      kind = (anomaly)k;
    } else {
      fprintf(stderr, "ssae-gen: unknown option '%s' (see --help)\n", a);
      return EXIT_USAGE;
    }
    if (takes && !v) {
      fprintf(stderr, "ssae-gen: %s needs a value\n", a);
      return EXIT_USAGE;
    }
    if (rc) return EXIT_USAGE;
    i += takes;
  }
  if (set) {
    if (out || labels || kind != AN_NONE || at >= 0 || length >= 0) {
      fprintf(stderr, "ssae-gen: --set makes a whole set; -o, --labels, --anomaly, --at and "
                      "--length are for one clip\n");
      return EXIT_USAGE;
    }
    return make_set(set, (uint64_t)seed, (int)n_train, (int)n_test, seconds, rate) ? EXIT_INPUT
                                                                                   : EXIT_OK;
  }
  if (!out) {
    fprintf(stderr, "ssae-gen: -o OUT.wav is required (see --help)\n");
    return EXIT_USAGE;
  }
  clip_spec c = {rate, seconds, kind, at >= 0 ? at : seconds / 3,
                 length >= 0 ? length : seconds / 3};
  if (kind != AN_NONE && c.at >= seconds) {
    fprintf(stderr, "ssae-gen: --at %g is past the end of the %g s clip\n", c.at, seconds);
    return EXIT_USAGE;
  }
  if (c.at + c.length > seconds) c.length = seconds - c.at;
  if (make_clip((uint64_t)seed, &c, out)) return EXIT_INPUT;
  if (labels && write_labels(labels, &c)) return EXIT_INPUT;
  return EXIT_OK;
}
