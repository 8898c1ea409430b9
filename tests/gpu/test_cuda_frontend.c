/* The GPU front end (gpu/ssae_cuda_frontend.h) against the CPU front end
 * (dsp/ssae_logmel.h) and the CPU model (ssae_cpu_score_frames), on the dsp
 * parity signals (white noise, chirp, tones and noise, silence, a
 * full-scale square wave) and short streams, several channels at once, fed
 * in random block sizes with streams ending at random runs.
 *
 *   test_cuda_frontend --host      the object's CPU path (cfg.cpu) against
 *                                  dsp and ssae_cpu: frames and scores
 *                                  bit-identical; needs no GPU
 *   test_cuda_frontend [--tiny]    the GPU path: frames within 0.001 dB of
 *                                  the CPU's on every band within 90 dB of
 *                                  its frame's peak (SPEC section 1's
 *                                  parity), scores within 1e-5 relative;
 *                                  random blocks bit-identical to one pass;
 *                                  int16 input (and float blocks packed as
 *                                  int16) equal to float; exits
 *                                  77 without a device. --tiny: short
 *                                  signals, few channels (compute-sanitizer)
 *   test_cuda_frontend --logmel IN.npy OUT.npy [key=value ...]
 *                                  the GPU's log-mel frames of a float32
 *                                  signal (fed in random blocks), feature
 *                                  keys as in model files (for the
 *                                  torchaudio parity test); 77 without a
 *                                  device
 *   test_cuda_frontend --probe     0 with a CUDA device, else 77 (for scripts)
 *   test_cuda_frontend --fallback  SSAE_CUDA_FAIL_AFTER=2: the third run
 *                                  fails on the device, the object moves to
 *                                  the CPU and no window is lost
 *   test_cuda_frontend --split [host|fail]
 *                                  ring input in two halves of channels
 *                                  run in turn through submit and wait (as
 *                                  the live engine's worker does): two
 *                                  runs in flight, each half's results
 *                                  read while the other's run is in
 *                                  flight, against the CPU references; a
 *                                  third run, and one over channels in
 *                                  flight, refused. host: the CPU path (no
 *                                  GPU needed); fail: SSAE_CUDA_FAIL_AFTER=3,
 *                                  a launch that fails while the run
 *                                  before it is still in flight */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_cpu.h"
#include "ssae_cuda_frontend.h"
#include "ssae_logmel.h"
#include "ssae_model.h"
#include "ssae_npy.h"

static int failures;
#define CHECK(cond, ...)                  \
  do {                                    \
    if (!(cond)) {                        \
      fprintf(stderr, "FAIL: " __VA_ARGS__); \
      fputc('\n', stderr);                \
      failures++;                         \
    }                                     \
  } while (0)

static uint64_t rng_state = 12345;
static uint64_t rnd(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  uint64_t z = rng_state;
  z = (z ^ (z >> 33)) * 0xff51afd7ed558ccdull;
  return z ^ (z >> 33);
}
static double unif(void) { return (double)(rnd() >> 11) * 0x1.0p-53; }

enum { N_SIGNALS = 8 };
static const char *const signal_names[N_SIGNALS] = {
    "white", "chirp", "tone+noise", "silence", "square", "short (100)", "short (700)", "one"};

/* Signal k of n samples at 16 kHz (the short ones are shorter), rounded to
 * 16-bit values so that int16 input can be compared with float. */
static size_t make_signal(int k, size_t n, float *x) {
  if (k == 5) n = n < 100 ? n : 100;
  if (k == 6) n = n < 700 ? n : 700;
  if (k == 7) n = 1;
  const double sr = 16000.0, sec = (double)n / sr;
  for (size_t i = 0; i < n; i++) {
    const double t = (double)i / sr;
    double v;
    switch (k) {
      case 0: v = unif() - 0.5; break;
      case 1: v = 0.5 * sin(2 * M_PI * (50.0 * t + (7850.0 / (2 * sec)) * t * t)); break;
      case 3: v = 0.0; break;
      case 4: v = sin(2 * M_PI * 1000.3 * t) >= 0 ? 32767.0 / 32768 : -32767.0 / 32768; break;
      default: {
        v = 0.02 * (unif() - 0.5);
        for (int h = 1; h <= 8; h++) v += 0.3 / h * sin(2 * M_PI * 120 * h * t + h);
      }
    }
    x[i] = (float)(round(v * 32768.0) / 32768.0);
  }
  return n;
}

typedef struct {
  float *frames, *scores;
  size_t n_frames, n_scores, cap_f, cap_s;
} collected;

static void collect(collected *c, const float *v, size_t n, size_t width, int scores) {
  float **buf = scores ? &c->scores : &c->frames;
  size_t *len = scores ? &c->n_scores : &c->n_frames, *cap = scores ? &c->cap_s : &c->cap_f;
  if (*len + n > *cap) {
    *cap = (*len + n) * 2;
    *buf = realloc(*buf, sizeof **buf * *cap * width);
    if (!*buf) {
      fprintf(stderr, "out of memory\n");
      exit(1);
    }
  }
  memcpy(*buf + *len * width, v, sizeof **buf * n * width);
  *len += n;
}

/* Feeds channel c the signal sig[c % n_sig] in random blocks (each up to
 * max_block; block 0 = one pass in max_block pieces), several channels per
 * run, some runs giving a channel nothing; each stream ends on the run
 * that brings its last samples. Results per channel in out. */
static int feed(ssae_cuda_fe *fe, int M, int channels, size_t max_block, float *const *sig,
                const size_t *len, int n_sig, int random_blocks, int i16, collected *out) {
  size_t *pos = calloc((size_t)channels, sizeof *pos), *n = calloc((size_t)channels, sizeof *n);
  unsigned char *end = calloc((size_t)channels, 1), *done = calloc((size_t)channels, 1);
  int left = channels, rc = 0;
  while (left > 0 && !rc) {
    for (int c = 0; c < channels; c++) {
      const size_t L = len[c % n_sig];
      n[c] = 0;
      end[c] = 0;
      if (done[c]) continue;
      size_t want = max_block;
      if (random_blocks) {
        const double u = unif();
        want = u < 0.1 ? 0 : u < 0.4 ? 1 + rnd() % 16 : 1 + rnd() % max_block;
      }
      if (want > L - pos[c]) want = L - pos[c];
      n[c] = want;
      const float *src = sig[c % n_sig] + pos[c];
      void *blk = ssae_cuda_fe_block(fe, c);
      if (i16)
        for (size_t i = 0; i < want; i++) ((int16_t *)blk)[i] = (int16_t)lrintf(src[i] * 32768.0f);
      else
        memcpy(blk, src, want * sizeof *src);
      /* Half the float blocks go as int16 (the signals are 16-bit values). */
      if (!i16 && want && (rnd() & 1))
        CHECK(ssae_cuda_fe_pack_i16(fe, c, want) == 1, "a 16-bit block was not packed");
      pos[c] += want;
      if (pos[c] == L) end[c] = 1, done[c] = 1, left--;
    }
    ssae_err err = {{0}};
    if (ssae_cuda_fe_run(fe, n, end, &err)) {
      fprintf(stderr, "run failed: %s\n", err.msg);
      rc = -1;
      break;
    }
    for (int c = 0; c < channels; c++) {
      const float *v;
      size_t k = ssae_cuda_fe_frames(fe, c, &v);
      if (k) collect(&out[c], v, k, (size_t)M, 0);
      k = ssae_cuda_fe_scores(fe, c, &v);
      if (k) collect(&out[c], v, k, 1, 1);
    }
  }
  free(pos);
  free(n);
  free(end);
  free(done);
  return rc;
}

/* ours against ref: exact, or within tol dB on bands within 90 dB of the
 * frame's peak in ref and the score tolerance (relative). A window whose
 * frames all lie within those 90 dB is held to the CPU path's score; one
 * with a band further down (a square wave's gaps between harmonics, the
 * padded edge of a constant-padded tone) is held to the CPU model's score
 * on our own frames instead: down there the CPU path's float FFT gives its
 * rounding, not the signal (the frames' parity with torchaudio in float64
 * is tests/gpu/test_gpu_parity.py's), and the model turns any
 * difference in a band into a different score. cpu: the model. */
static int window_in_parity(const float *f, size_t w) {
  for (size_t t = w; t < w + 5; t++) {
    float peak = -INFINITY, low = INFINITY;
    for (int m = 0; m < 64; m++) {
      peak = fmaxf(peak, f[t * 64 + m]);
      low = fminf(low, f[t * 64 + m]);
    }
    if (low < peak - 90.0f) return 0;
  }
  return 1;
}

static void compare(const char *what, const collected *ours, const float *ref_f, size_t ref_nf,
                    const float *ref_s, size_t ref_ns, int exact, double tol_db, double tol_rel,
                    ssae_cpu *cpu) {
  const int M = 64;
  CHECK(ours->n_frames == ref_nf, "%s: %zu frames, reference %zu", what, ours->n_frames, ref_nf);
  CHECK(ours->n_scores == ref_ns, "%s: %zu scores, reference %zu", what, ours->n_scores, ref_ns);
  if (ours->n_frames != ref_nf || ours->n_scores != ref_ns) return;
  double worst_db = 0, worst_rel = 0;
  for (size_t t = 0; t < ref_nf; t++) {
    float peak = -INFINITY;
    for (int m = 0; m < M; m++) peak = fmaxf(peak, ref_f[t * M + m]);
    for (int m = 0; m < M; m++) {
      const double a = ours->frames[t * M + m], b = ref_f[t * M + m];
      if (exact) {
        if (memcmp(&ours->frames[t * M + m], &ref_f[t * M + m], sizeof(float))) worst_db = INFINITY;
      } else if (b >= peak - 90.0 && fabs(a - b) > worst_db) {
        worst_db = fabs(a - b);
      }
    }
  }
  float *own = NULL;
  if (!exact && ref_ns) {
    own = malloc(sizeof(float) * ref_ns);
    if (!own || ssae_cpu_score_frames(cpu, ours->frames, ours->n_frames, own)) {
      CHECK(0, "%s: the CPU model on our frames failed", what);
      free(own);
      return;
    }
  }
  for (size_t w = 0; w < ref_ns; w++) {
    const double a = ours->scores[w],
                 b = exact || window_in_parity(ref_f, w) ? ref_s[w] : own[w];
    const double rel = exact ? (memcmp(&ours->scores[w], &ref_s[w], sizeof(float)) ? INFINITY : 0)
                             : fabs(a - b) / fmax(fabs(b), 1e-30);
    if (rel > worst_rel) worst_rel = rel;
  }
  free(own);
  CHECK(worst_db <= tol_db, "%s: frames off by %g dB", what, worst_db);
  CHECK(worst_rel <= tol_rel, "%s: scores off by %g relative", what, worst_rel);
}

static void release(collected *c, int n) {
  for (int i = 0; i < n; i++) {
    free(c[i].frames);
    free(c[i].scores);
    memset(&c[i], 0, sizeof c[i]);
  }
}

typedef struct {
  const char *name;
  int n_fft, hop, center;
  ssae_pad_mode pad;
  double power;
} feat_case;

static const feat_case cases[] = {
    {"default (1024/512, reflect)", 1024, 512, 1, SSAE_PAD_REFLECT, 2.0},
    {"512/256", 512, 256, 1, SSAE_PAD_REFLECT, 2.0},
    {"constant padding, power 1", 1024, 320, 1, SSAE_PAD_CONSTANT, 1.0},
    {"not centred, hop 100", 256, 100, 0, SSAE_PAD_REFLECT, 2.0},
    {"400/160 (not a power of two)", 400, 160, 1, SSAE_PAD_REFLECT, 2.0},
};

/* --logmel: the frames of one signal on the GPU. */
static int logmel_file(int argc, char **argv) {
  ssae_err err = {{0}};
  ssae_feat_cfg feat;
  ssae_feat_cfg_default(&feat);
  for (int i = 4; i < argc; i++) {
    char key[64];
    const char *eq = strchr(argv[i], '=');
    if (!eq || (size_t)(eq - argv[i]) >= sizeof key) return fprintf(stderr, "bad %s\n", argv[i]), 2;
    memcpy(key, argv[i], (size_t)(eq - argv[i]));
    key[eq - argv[i]] = 0;
    if (ssae_feat_cfg_set(&feat, key, eq + 1, &err) != 1)
      return fprintf(stderr, "%s: %s\n", argv[i], err.msg[0] ? err.msg : "not a feature key"), 2;
  }
  float *x;
  size_t shape[8];
  int ndim;
  if (ssae_npy_read_f32(argv[2], &x, shape, &ndim, &err) || ndim != 1)
    return fprintf(stderr, "%s: %s\n", argv[2], err.msg[0] ? err.msg : "not 1-D"), 1;
  ssae_dims d;
  ssae_dims_default(&d);
  d.n_mels = feat.n_mels;
  ssae_model *m = ssae_model_new(&d, &err);
  if (!m) return fprintf(stderr, "%s\n", err.msg), 1;
  ssae_model_init(m, 1);
  if (ssae_model_update(m, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
  m->feat = feat;
  const size_t max_block = 3000;
  ssae_cuda_fe_cfg cfg = {.channels = 1, .max_block = max_block, .keep_frames = 1};
  ssae_cuda_fe *fe = ssae_cuda_fe_new(m, &cfg, &err);
  if (!fe) return fprintf(stderr, "%s\n", err.msg), 1;
  collected out = {0};
  size_t len = shape[0];
  float *sig[1] = {x};
  int rc = feed(fe, feat.n_mels, 1, max_block, sig, &len, 1, 1, 0, &out);
  if (!rc && !ssae_cuda_fe_on_gpu(fe))
    rc = fprintf(stderr, "left the GPU: %s\n", ssae_cuda_fe_note(fe));
  size_t oshape[2] = {out.n_frames, (size_t)feat.n_mels};
  if (!rc && ssae_npy_write_f32(argv[3], out.frames, oshape, 2, &err))
    rc = fprintf(stderr, "%s\n", err.msg);
  ssae_cuda_fe_free(fe);
  ssae_model_free(m);
  free(out.frames);
  free(out.scores);
  free(x);
  return rc ? 1 : 0;
}

/* The references for a signal: dsp's front end on it whole (*f, *nf frames)
 * and the CPU model's scores of its windows (*sc, *ns). -1 after a message. */
static int reference(const ssae_model *m, ssae_cpu *cpu, const float *x, size_t n, float **f,
                     size_t *nf, float **sc, size_t *ns) {
  ssae_err err = {{0}};
  if (ssae_logmel_compute(&m->feat, x, n, f, nf, &err))
    return fprintf(stderr, "%s\n", err.msg), -1;
  *ns = *nf >= 5 ? *nf - 4 : 0;
  *sc = malloc(sizeof(float) * (*ns + 1));
  if (!*sc || (*ns && ssae_cpu_score_frames(cpu, *f, *nf, *sc)))
    return fprintf(stderr, "cpu scoring failed\n"), -1;
  return 0;
}

/* Channels c0 .. c0+n-1's results of their last run (those that were in
 * it: ran[c]) onto out[c]. */
static void read_results(const ssae_cuda_fe *fe, int c0, int n, const unsigned char *ran,
                         collected *out) {
  for (int c = c0; c < c0 + n; c++) {
    if (!ran[c]) continue;
    const float *v;
    size_t k = ssae_cuda_fe_frames(fe, c, &v);
    if (k) collect(&out[c], v, k, 64, 0);
    k = ssae_cuda_fe_scores(fe, c, &v);
    if (k) collect(&out[c], v, k, 1, 1);
  }
}

/* --split: see the header. */
static int split_test(const char *mode) {
  const int host = mode && !strcmp(mode, "host"), fail = mode && !strcmp(mode, "fail");
  if (!host && !ssae_cuda_fe_device_present()) return printf("skip: no CUDA device\n"), 77;
  if (fail) setenv("SSAE_CUDA_FAIL_AFTER", "3", 1);
  enum { CH = 6, HALF = 3 };
  const size_t sig_len = 20000, max_block = 2048, ring_len = 32768;
  ssae_err err = {{0}};
  ssae_model *m = ssae_model_new(NULL, &err);
  if (!m) return fprintf(stderr, "%s\n", err.msg), 1;
  ssae_model_init(m, 11);
  if (ssae_model_update(m, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
  ssae_cpu *cpu = ssae_cpu_new(m, 1, &err);
  if (!cpu) return fprintf(stderr, "%s\n", err.msg), 1;
  float *sig[CH], *ref_f[CH], *ref_s[CH];
  size_t len[CH], ref_nf[CH], ref_ns[CH];
  for (int c = 0; c < CH; c++) {
    sig[c] = malloc(sizeof(float) * sig_len);
    len[c] = make_signal(c % 3 == 2 ? 2 : c % 3, sig_len - 1000 * (size_t)c, sig[c]);
    if (reference(m, cpu, sig[c], len[c], &ref_f[c], &ref_nf[c], &ref_s[c], &ref_ns[c]))
      return 1;
  }
  ssae_cuda_fe_cfg cfg = {.channels = CH, .max_block = max_block, .pcm = SSAE_FE_PCM_F32,
                          .cpu = host, .keep_frames = 1, .ring_len = ring_len};
  ssae_cuda_fe *fe = ssae_cuda_fe_new(m, &cfg, &err);
  if (!fe) return fprintf(stderr, "%s\n", err.msg), 1;
  uint64_t pos[CH] = {0};
  size_t n[CH] = {0};
  unsigned char end[CH] = {0}, done[CH] = {0}, ran[CH] = {0};
  collected out[CH];
  memset(out, 0, sizeof out);
  int queue[2], nq = 0, rc = 0, refused = 0; /* the halves of the runs in flight, oldest first */
  /* Each turn: the next half's blocks into its rings and its run submitted
   * behind the other half's, still in flight (the front end reads pos, n
   * and end there only); then the oldest run waited for and its half's
   * results read while the newer one runs. */
  for (int turn = 0; !rc; turn++) {
    const int h = turn % 2, c0 = h * HALF;
    int any = 0;
    for (int c = 0; c < CH; c++) n[c] = end[c] = 0;
    for (int c = c0; c < c0 + HALF; c++) {
      if (done[c]) continue;
      size_t want = 1 + rnd() % max_block;
      if (want > len[c] - pos[c]) want = len[c] - pos[c];
      float *ring = ssae_cuda_fe_ring(fe, c);
      for (size_t i = 0; i < want; i++) ring[(pos[c] + i) & (ring_len - 1)] = sig[c][pos[c] + i];
      n[c] = want;
      if (pos[c] + want == len[c]) end[c] = done[c] = 1;
      any = 1;
    }
    if (any) {
      /* A channel that brings nothing may lie outside the run's range: its
       * results are then its last run's, already read. */
      for (int c = c0; c < c0 + HALF; c++) ran[c] = n[c] || end[c];
      if (nq == 1 && !refused) {
        /* A run over the channels of the one in flight is refused, and
         * changes nothing. */
        size_t n_in_flight[CH] = {0};
        n_in_flight[queue[0] * HALF + 1] = 1;
        ssae_err e2;
        CHECK(ssae_cuda_fe_submit_ring(fe, pos, n_in_flight, NULL, &e2) != 0,
              "split: a run over channels in flight was accepted");
        refused = 1;
      }
      if (ssae_cuda_fe_submit_ring(fe, pos, n, end, &err)) {
        fprintf(stderr, "submit failed: %s\n", err.msg);
        rc = -1;
        break;
      }
      for (int c = c0; c < c0 + HALF; c++) pos[c] += n[c];
      queue[nq++] = h;
      CHECK(ssae_cuda_fe_in_flight(fe) == nq, "split: %d runs in flight, expected %d",
            ssae_cuda_fe_in_flight(fe), nq);
      if (nq == SSAE_CUDA_FE_IN_FLIGHT) {
        size_t none[CH] = {0};
        unsigned char ends[CH] = {0};
        ends[0] = 1;
        ssae_err e3;
        CHECK(ssae_cuda_fe_submit_ring(fe, pos, none, ends, &e3) != 0,
              "split: a third run in flight was accepted");
      }
    }
    if (!nq) {
      int left = 0;
      for (int c = 0; c < CH; c++) left += !done[c];
      if (!left) break;
      continue;
    }
    /* Two in flight where the other half can still be submitted. */
    int next_in_flight = 0;
    for (int k = 0; k < nq; k++) next_in_flight |= queue[k] == (h ^ 1);
    if (any && nq < SSAE_CUDA_FE_IN_FLIGHT && !next_in_flight) continue;
    if (ssae_cuda_fe_wait(fe, &err)) {
      fprintf(stderr, "wait failed: %s\n", err.msg);
      rc = -1;
      break;
    }
    read_results(fe, queue[0] * HALF, HALF, ran, out);
    queue[0] = queue[1];
    nq--;
  }
  if (rc) failures++;
  if (fail) {
    CHECK(!ssae_cuda_fe_on_gpu(fe) && *ssae_cuda_fe_note(fe),
          "split: the failure hook did not move the front end to the CPU");
    printf("fallback note: %s\n", ssae_cuda_fe_note(fe));
  } else if (!host) {
    CHECK(ssae_cuda_fe_on_gpu(fe), "split: left the GPU: %s", ssae_cuda_fe_note(fe));
  }
  for (int c = 0; c < CH; c++) {
    char what[96];
    snprintf(what, sizeof what, "split, channel %d, %s", c, host ? "CPU path" : "GPU");
    /* After a move to the CPU the frames of the runs before it are the
     * GPU's, of the runs after it the CPU's: the GPU's tolerances. */
    compare(what, &out[c], ref_f[c], ref_nf[c], ref_s[c], ref_ns[c], host, 0.001, 1e-5, cpu);
    free(sig[c]);
    free(ref_f[c]);
    free(ref_s[c]);
  }
  release(out, CH);
  ssae_cuda_fe_free(fe);
  ssae_cpu_free(cpu);
  ssae_model_free(m);
  if (failures) return fprintf(stderr, "%d failures\n", failures), 1;
  printf("ok\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--split")) return split_test(argc > 2 ? argv[2] : NULL);
  const int host = argc > 1 && !strcmp(argv[1], "--host");
  const int tiny = argc > 1 && !strcmp(argv[1], "--tiny");
  const int fallback = argc > 1 && !strcmp(argv[1], "--fallback");
  if (argc > 1 && !strcmp(argv[1], "--probe")) return ssae_cuda_fe_device_present() ? 0 : 77;
  if (argc > 3 && !strcmp(argv[1], "--logmel")) {
    if (!ssae_cuda_fe_device_present()) return printf("skip: no CUDA device\n"), 77;
    return logmel_file(argc, argv);
  }
  if (!host && !ssae_cuda_fe_device_present()) {
    printf("skip: no CUDA device\n");
    return 77;
  }
  if (fallback) setenv("SSAE_CUDA_FAIL_AFTER", "2", 1);
  const size_t sig_len = tiny ? 6000 : 40000;
  const int channels = tiny ? 3 : 11;
  float *sig[N_SIGNALS];
  size_t len[N_SIGNALS];
  for (int k = 0; k < N_SIGNALS; k++) {
    sig[k] = malloc(sizeof(float) * sig_len);
    len[k] = make_signal(k, sig_len, sig[k]);
  }
  const int n_cases = fallback || tiny ? 2 : (int)(sizeof cases / sizeof cases[0]);
  for (int ci = 0; ci < n_cases; ci++) {
    const feat_case *fc = &cases[ci];
    ssae_err err = {{0}};
    ssae_model *m = ssae_model_new(NULL, &err);
    if (!m) return fprintf(stderr, "%s\n", err.msg), 1;
    ssae_model_init(m, 7 + (uint64_t)ci);
    if (ssae_model_update(m, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    m->feat.n_fft = fc->n_fft;
    m->feat.hop_length = fc->hop;
    m->feat.center = fc->center;
    m->feat.pad_mode = fc->pad;
    m->feat.power = fc->power;
    ssae_cpu *cpu = ssae_cpu_new(m, 1, &err);
    if (!cpu) return fprintf(stderr, "%s\n", err.msg), 1;
    /* The references: dsp's front end and the CPU model on whole signals. */
    float *ref_f[N_SIGNALS], *ref_s[N_SIGNALS];
    size_t ref_nf[N_SIGNALS], ref_ns[N_SIGNALS];
    for (int k = 0; k < N_SIGNALS; k++)
      if (reference(m, cpu, sig[k], len[k], &ref_f[k], &ref_nf[k], &ref_s[k], &ref_ns[k]))
        return 1;
    collected *out = calloc((size_t)channels, sizeof *out),
              *one = calloc((size_t)channels, sizeof *one);
    const size_t max_block = tiny ? 1500 : 4096;
    for (int pass = 0; pass < (host ? 2 : 3); pass++) {
      /* host: CPU path, float then int16. GPU: random blocks, one pass
       * (bit-identical to each other), int16 random blocks. */
      const int i16 = host ? pass == 1 : pass == 2, random_blocks = host || pass != 1;
      ssae_cuda_fe_cfg cfg = {.channels = channels, .max_block = max_block,
                              .pcm = i16 ? SSAE_FE_PCM_I16 : SSAE_FE_PCM_F32, .cpu = host,
                              .keep_frames = 1};
      ssae_cuda_fe *fe = ssae_cuda_fe_new(m, &cfg, &err);
      if (!fe) return fprintf(stderr, "%s: %s\n", fc->name, err.msg), 1;
      if (!i16 && ci == 0) {
        /* A block that is not 16-bit stays as it is. */
        float *b = ssae_cuda_fe_block(fe, 0);
        b[0] = 0.1f;
        CHECK(ssae_cuda_fe_pack_i16(fe, 0, 1) == 0 && b[0] == 0.1f, "0.1 packed as int16");
      }
      collected *dst = pass == 1 && !host ? one : out;
      if (feed(fe, 64, channels, max_block, sig, len, N_SIGNALS, random_blocks, i16, dst))
        failures++;
      if (fallback) {
        CHECK(!ssae_cuda_fe_on_gpu(fe) && *ssae_cuda_fe_note(fe),
              "%s: the failure hook did not move the front end to the CPU", fc->name);
        printf("fallback note: %s\n", ssae_cuda_fe_note(fe));
      } else if (!host) {
        CHECK(ssae_cuda_fe_on_gpu(fe), "%s: left the GPU: %s", fc->name, ssae_cuda_fe_note(fe));
      }
      ssae_cuda_fe_free(fe);
      for (int c = 0; c < channels; c++) {
        const int k = c % N_SIGNALS;
        char what[160];
        snprintf(what, sizeof what, "%s, %s, channel %d, %s%s", fc->name, signal_names[k], c,
                 host ? "CPU path" : "GPU", i16 ? ", int16" : "");
        if (pass == 1 && !host) {
          /* One pass against the random blocks of pass 0: the same bits. */
          compare(what, &one[c], out[c].frames, out[c].n_frames, out[c].scores,
                  out[c].n_scores, 1, 0, 0, cpu);
          continue;
        }
        compare(what, &dst[c], ref_f[k], ref_nf[k], ref_s[k], ref_ns[k], host,
                fc->n_fft % 256 ? 0.01 : 0.001, 1e-5, cpu);
      }
      if (pass != 0 || host) release(out, channels);
      if (pass == 1 && !host) release(one, channels);
      if (fallback) break;
    }
    release(out, channels);
    free(out);
    free(one);
    for (int k = 0; k < N_SIGNALS; k++) {
      free(ref_f[k]);
      free(ref_s[k]);
    }
    ssae_cpu_free(cpu);
    ssae_model_free(m);
    printf("%s: checked\n", fc->name);
  }
  for (int k = 0; k < N_SIGNALS; k++) free(sig[k]);
  if (failures) {
    fprintf(stderr, "%d failures\n", failures);
    return 1;
  }
  printf("ok\n");
  return 0;
}
