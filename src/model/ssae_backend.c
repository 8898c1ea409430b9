/* Backend selection, start-up self-test and the fall back to the CPU. */
#include "ssae_backend.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_backend_cpu.h"
#include "ssae_config.h"
#include "ssae_cpu.h"

/* Faster backends are declared here, e.g.
 *   #if SSAE_HAVE_CUDA
 *   extern const ssae_backend_ops ssae_backend_cuda;
 *   #endif
 */

/* Tried in this order by "auto"; the CPU is always present and last.
 * Entries for faster backends go above the CPU's, each inside its own
 * #if SSAE_HAVE_... */
#if SSAE_HAVE_CUDA
extern const ssae_backend_ops ssae_backend_cuda;
#endif

const ssae_backend_ops *const ssae_backends[] = {
#if SSAE_HAVE_CUDA
    &ssae_backend_cuda,
#endif
    &ssae_backend_cpu,
    NULL,
};

/* A backend must match the CPU this closely on the self-test batch (ten
 * times the accuracy SPEC section 2 asks of every backend). */
#define SELFTEST_WINDOWS 37
#define SELFTEST_RECON_TOL 1e-5
#define SELFTEST_SCORE_TOL 1e-4

/* An asynchronous slot: its windows, and whether the backend runs them
 * (async) or collect computes them (else; msg: why, when it failed). */
typedef struct backend_slot {
  const float *x;
  const ssae_span *sp; /* submit_spans: the runs (x unused), nsp of them */
  int nsp;
  size_t n;
  int async, failed;
  /* ssae_backend_stream_submit: sp are stream windows, of these channels
   * and continuity */
  int stream;
  const uint32_t *channel;
  const unsigned char *cont;
  char msg[SSAE_ERR_LEN];
} backend_slot;

struct ssae_backend {
  const ssae_model *m;
  const ssae_backend_ops *ops;
  void *impl;
  /* The CPU that takes over after a failure (created on first need). */
  void *cpu;
  int cpu_threads; /* for the CPU (also the fall back): 0 = every core */
  int fell_back;
  void (*cb)(void *user, const char *msg);
  void *user;
  /* Test hooks: fail the next run / the run with this 1-based number. */
  int fail_next;
  unsigned long fail_at, runs;
  char note[SSAE_ERR_LEN];
  /* Windows laid out for backends that take windows only. */
  float *win;
  size_t win_cap, max_batch;
  backend_slot slot[SSAE_BACKEND_SLOTS];
  /* ssae_backend_stream_open: the CPU's per-channel code caches (used
   * whenever the CPU scores stream windows); stream_batch: the batch bound
   * given at creation, the CPU's largest call. */
  ssae_cpu_streams *streams;
  size_t stream_batch;
};

/* Known input at log-mel scale (-100 ... +20 dB) with structure across mel
 * bands, the way real windows look. */
static void selftest_input(const ssae_model *m, float *x, size_t n) {
  size_t win = (size_t)m->d.frames * (size_t)m->d.n_mels;
  uint64_t s = 0x5EED5EEDull;
  for (size_t i = 0; i < n * win; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    double u = (double)(s >> 11) * 0x1.0p-53;
    double band = (double)(i % (size_t)m->d.n_mels) / (double)m->d.n_mels;
    x[i] = (float)(-20.0 - 60.0 * band + 30.0 * (u - 0.5) + (i % 97 == 0 ? 40.0 : 0.0));
  }
}

static int selftest(const ssae_backend_ops *ops, void *impl, const ssae_model *m,
                    size_t max_batch, ssae_err *err) {
  size_t n = SELFTEST_WINDOWS;
  if (max_batch && max_batch < n) n = max_batch;
  size_t win = (size_t)m->d.frames * (size_t)m->d.n_mels;
  float *x = malloc(n * win * sizeof *x), *r0 = malloc(n * win * sizeof *r0),
        *r1 = malloc(n * win * sizeof *r1), *s0 = malloc(n * sizeof *s0),
        *s1 = malloc(n * sizeof *s1);
  void *cpu = NULL;
  int rc = -1;
  if (!x || !r0 || !r1 || !s0 || !s1) {
    ssae_err_set(err, "out of memory for the self-test");
    goto done;
  }
  selftest_input(m, x, n);
  if (!(cpu = ssae_backend_cpu.create(m, n, err))) goto done;
  if (ssae_backend_cpu.run(cpu, x, n, s0, r0, err)) goto done;
  if (ops->run(impl, x, n, s1, r1, err)) {
    ssae_err_prefix(err, "self-test run failed");
    goto done;
  }
  double num = 0, den = 0;
  for (size_t i = 0; i < n * win; i++) {
    double d = (double)r1[i] - r0[i];
    num += d * d;
    den += (double)r0[i] * r0[i];
  }
  double rel = den > 0 ? sqrt(num / den) : sqrt(num);
  if (!(rel <= SELFTEST_RECON_TOL)) {
    ssae_err_set(err, "self-test: reconstructions differ from the CPU by %.3g (relative L2, "
                 "limit %g)", rel, SELFTEST_RECON_TOL);
    goto done;
  }
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)s1[i] - s0[i]) / (fabs((double)s0[i]) + 1e-30);
    if (!(e <= SELFTEST_SCORE_TOL)) {
      ssae_err_set(err, "self-test: window %zu score %.9g, CPU %.9g", i, (double)s1[i],
                   (double)s0[i]);
      goto done;
    }
  }
  rc = 0;
done:
  if (cpu) ssae_backend_cpu.destroy(cpu);
  free(x);
  free(r0);
  free(r1);
  free(s0);
  free(s1);
  return rc;
}

static const ssae_backend_ops *find_ops(const char *name) {
  for (int i = 0; ssae_backends[i]; i++)
    if (!strcmp(ssae_backends[i]->name, name)) return ssae_backends[i];
  return NULL;
}

/* Creates and self-tests one backend. */
static void *start(const ssae_backend_ops *ops, const ssae_model *m, size_t max_batch,
                   int cpu_threads, ssae_err *err) {
  if (!ops->available()) {
    ssae_err_set(err, "%s: not available on this machine", ops->name);
    return NULL;
  }
  void *impl = ops == &ssae_backend_cpu ? ssae_cpu_new(m, cpu_threads, err)
                                        : ops->create(m, max_batch, err);
  if (!impl) {
    ssae_err_prefix(err, "%s", ops->name);
    return NULL;
  }
  if (ops != &ssae_backend_cpu && selftest(ops, impl, m, max_batch, err)) {
    ssae_err_prefix(err, "%s", ops->name);
    ops->destroy(impl);
    return NULL;
  }
  return impl;
}

ssae_backend *ssae_backend_new(const ssae_model *m, const char *which, size_t max_batch,
                               ssae_err *err) {
  return ssae_backend_new_threads(m, which, max_batch, 0, err);
}

ssae_backend *ssae_backend_new_threads(const ssae_model *m, const char *which,
                                       size_t max_batch, int cpu_threads, ssae_err *err) {
  if (!m) {
    ssae_err_set(err, "no model for the backend");
    return NULL;
  }
  if (!which) which = "auto";
  ssae_backend *b = calloc(1, sizeof *b);
  if (!b) {
    ssae_err_set(err, "out of memory for the backend");
    return NULL;
  }
  b->m = m;
  b->cpu_threads = cpu_threads;
  b->stream_batch = max_batch;
  const char *env = getenv("SSAE_BACKEND_FAIL_AT");
  if (env && *env) b->fail_at = strtoul(env, NULL, 10);
  if (!strcmp(which, "auto")) {
    for (int i = 0; ssae_backends[i]; i++) {
      const ssae_backend_ops *ops = ssae_backends[i];
      if (ops == &ssae_backend_cpu || !ops->available()) continue;
      ssae_err e = {{0}};
      if ((b->impl = start(ops, m, max_batch, cpu_threads, &e))) {
        b->ops = ops;
        return b;
      }
      /* Kept for the caller to show: the user asked for the best backend
       * and should learn why the GPU was passed over. */
      snprintf(b->note, sizeof b->note, "%s", e.msg);
    }
    which = "cpu";
  }
  const ssae_backend_ops *ops = find_ops(which);
  if (!ops) {
    if (!strcmp(which, "cuda"))
      ssae_err_set(err, "backend cuda: this ssae was built without CUDA");
    else
      ssae_err_set(err, "unknown backend '%s' (auto, cpu or cuda)", which);
    free(b);
    return NULL;
  }
  if (!(b->impl = start(ops, m, max_batch, cpu_threads, err))) {
    free(b);
    return NULL;
  }
  b->ops = ops;
  return b;
}

void ssae_backend_free(ssae_backend *b) {
  if (!b) return;
  if (b->impl) b->ops->destroy(b->impl);
  if (b->cpu) ssae_backend_cpu.destroy(b->cpu);
  ssae_cpu_streams_free(b->streams);
  free(b->win);
  free(b);
}

/* After a failure of the backend (why): the CPU takes over, reported once. */
static int fall_back(ssae_backend *b, const char *why, ssae_err *err) {
  if (b->fell_back) return 0;
  if (!(b->cpu = ssae_cpu_new(b->m, b->cpu_threads, err)))
    return ssae_err_prefix(err, "backend %s failed (%s) and the CPU could not take over",
                           b->ops->name, why);
  b->fell_back = 1;
  if (b->streams) ssae_cpu_streams_forget(b->streams, NULL, 0);
  if (b->cb) {
    char msg[SSAE_ERR_LEN + 64];
    snprintf(msg, sizeof msg, "backend %s failed: %s; switched to the CPU", b->ops->name,
             why);
    b->cb(b->user, msg);
  }
  return 0;
}

/* The test hooks: 1 when this run is to fail. */
static int hook_fails(ssae_backend *b, ssae_err *e) {
  if (b->fail_next || (b->fail_at && b->runs == b->fail_at)) {
    b->fail_next = 0;
    ssae_err_set(e, "failure forced by the test hook");
    return 1;
  }
  return 0;
}

int ssae_backend_run(ssae_backend *b, const float *x, size_t n, float *scores, float *recon,
                     ssae_err *err) {
  if (!b->fell_back) {
    b->runs++;
    ssae_err e = {{0}};
    if (!hook_fails(b, &e) && b->ops->run(b->impl, x, n, scores, recon, &e) == 0) return 0;
    if (fall_back(b, e.msg, err)) return -1;
  }
  return ssae_backend_cpu.run(b->cpu, x, n, scores, recon, err);
}

int ssae_backend_run_device(ssae_backend *b, const float *x_dev, size_t n, float *scores_dev,
                            float *recon_dev, void *stream, ssae_err *err) {
  if (b->fell_back || !b->ops->run_device) {
    ssae_err_set(err, "backend %s reads no device memory", ssae_backend_name(b));
    return SSAE_BACKEND_NO_DEVICE;
  }
  ssae_err e = {{0}};
  b->runs++;
  if (!hook_fails(b, &e)) {
    int rc = b->ops->run_device(b->impl, x_dev, n, scores_dev, recon_dev, stream, &e);
    if (rc == 0) return 0;
    if (rc == SSAE_BACKEND_DEVICE_EARG) {
      b->runs--; /* nothing ran */
      ssae_err_set(err, "%s", e.msg);
      return SSAE_BACKEND_DEVICE_EARG;
    }
  }
  /* When the CPU cannot take over either, the host path the caller takes
   * next tries again and reports that. */
  if (fall_back(b, e.msg, err) == 0)
    ssae_err_set(err, "backend %s failed (%s); the CPU took over", b->ops->name, e.msg);
  return SSAE_BACKEND_NO_DEVICE;
}

/* The CPU that scores stream windows through the caches now, caches
 * fitted; NULL when none does (another backend, a test hook armed, no
 * stream, no memory for the caches). */
static ssae_cpu *stream_cpu(ssae_backend *b) {
  if (!b->streams || !ssae_backend_cpu_direct(b)) return NULL;
  ssae_cpu *cpu = b->fell_back ? b->cpu : b->impl;
  return ssae_cpu_streams_fit(b->streams, cpu) ? NULL : cpu;
}

void ssae_backend_warm(ssae_backend *b, const float *x, size_t n, float *scores) {
  if (!b || !x || !scores || !n) return;
  ssae_err e = {{0}};
  if (b->fell_back)
    (void)ssae_backend_cpu.run(b->cpu, x, n, scores, NULL, &e);
  else
    (void)b->ops->run(b->impl, x, n, scores, NULL, &e);
  ssae_cpu *cpu = stream_cpu(b);
  if (cpu) {
    const int nc = ssae_cpu_streams_channels(b->streams);
    const size_t wf = (size_t)b->m->d.frames * (size_t)b->m->d.n_mels;
    const ssae_span sp = {x, n < (size_t)nc ? n : (size_t)nc, wf};
    (void)ssae_cpu_streams_score(b->streams, cpu, &sp, 1, sp.n, NULL, NULL, wf, scores);
    ssae_cpu_streams_forget(b->streams, NULL, 0);
  }
}

float *ssae_backend_input_buffer(ssae_backend *b, int slot, size_t *cap) {
  if (cap) *cap = 0;
  if (!b || b->fell_back || !b->ops->input_buffer || slot < 0 || slot >= SSAE_BACKEND_SLOTS)
    return NULL;
  return b->ops->input_buffer(b->impl, slot, cap);
}

int ssae_backend_submit(ssae_backend *b, int slot, const float *x, size_t n, ssae_err *err) {
  if (!b || slot < 0 || slot >= SSAE_BACKEND_SLOTS || (!x && n))
    return ssae_err_set(err, "backend: bad arguments to submit");
  backend_slot *s = &b->slot[slot];
  s->x = x;
  s->sp = NULL;
  s->nsp = 0;
  s->n = n;
  s->async = s->failed = s->stream = 0;
  if (b->fell_back || !b->ops->submit || !n) return 0;
  b->runs++;
  ssae_err e = {{0}};
  if (hook_fails(b, &e) || b->ops->submit(b->impl, slot, x, n, &e)) {
    s->failed = 1;
    snprintf(s->msg, sizeof s->msg, "%s", e.msg);
  } else {
    s->async = 1;
  }
  return 0;
}

int ssae_backend_collect(ssae_backend *b, int slot, float *scores, ssae_err *err) {
  if (!b || slot < 0 || slot >= SSAE_BACKEND_SLOTS || (!scores && b->slot[slot].n))
    return ssae_err_set(err, "backend: bad arguments to collect");
  backend_slot *s = &b->slot[slot];
  if (!s->n) return 0;
  if (s->async) {
    s->async = 0;
    ssae_err e = {{0}};
    if (b->ops->collect(b->impl, slot, scores, &e) == 0) return 0;
    s->failed = 1;
    snprintf(s->msg, sizeof s->msg, "%s", e.msg);
  }
  if (s->failed) {
    s->failed = 0;
    if (fall_back(b, s->msg, err)) return -1;
  }
  /* Not submitted to the backend (none asynchronous, or after a fall
   * back: then the CPU): scored now; stream windows on the CPU through
   * its caches. */
  if (s->stream) {
    ssae_cpu *cpu = stream_cpu(b);
    if (cpu && ssae_cpu_streams_score(b->streams, cpu, s->sp, s->nsp, s->n, s->channel,
                                      s->cont,
                                      (size_t)b->m->d.frames * (size_t)b->m->d.n_mels,
                                      scores) == 0)
      return 0;
    /* Scored below, without the caches. */
    ssae_cpu_streams_forget(b->streams, s->channel, s->n);
  }
  if (s->sp) {
    /* The windows in place: each span laid out contiguously is one call;
     * otherwise a window at a time. */
    size_t off = 0;
    const size_t wf = (size_t)b->m->d.frames * (size_t)b->m->d.n_mels;
    for (int i = 0; i < s->nsp; i++) {
      const ssae_span *p = &s->sp[i];
      if (p->pitch == wf || p->n == 1) {
        if (ssae_backend_run(b, p->x, p->n, scores + off, NULL, err)) return -1;
      } else {
        for (size_t j = 0; j < p->n; j++)
          if (ssae_backend_run(b, p->x + j * p->pitch, 1, scores + off + j, NULL, err))
            return -1;
      }
      off += p->n;
    }
    return 0;
  }
  return ssae_backend_run(b, s->x, s->n, scores, NULL, err);
}

int ssae_backend_spans_direct(const ssae_backend *b) {
  return b && !b->fell_back && b->ops->submit_spans != NULL;
}

/* Spans that do not overlap themselves and hold n windows in all; -1
 * with the reason otherwise. */
static int check_spans(const ssae_backend *b, const ssae_span *sp, int nsp, size_t n,
                       ssae_err *err) {
  const size_t wf = (size_t)b->m->d.frames * (size_t)b->m->d.n_mels;
  size_t total = 0;
  for (int i = 0; i < nsp; i++) {
    if ((!sp[i].x && sp[i].n) || (sp[i].n > 1 && sp[i].pitch < wf))
      return ssae_err_set(err, "backend: span %d overlaps itself (pitch %zu < %zu floats)", i,
                          sp[i].pitch, wf);
    total += sp[i].n;
  }
  if (total != n) return ssae_err_set(err, "backend: spans hold %zu windows, not %zu", total, n);
  return 0;
}

int ssae_backend_submit_spans(ssae_backend *b, int slot, const ssae_span *sp, int nsp,
                              size_t n, ssae_err *err) {
  if (!b || slot < 0 || slot >= SSAE_BACKEND_SLOTS || nsp < 0 || (!sp && nsp))
    return ssae_err_set(err, "backend: bad arguments to submit_spans");
  if (check_spans(b, sp, nsp, n, err)) return -1;
  backend_slot *s = &b->slot[slot];
  s->x = NULL;
  s->sp = sp;
  s->nsp = nsp;
  s->n = n;
  s->async = s->failed = s->stream = 0;
  if (!ssae_backend_spans_direct(b) || !n) return 0;
  b->runs++;
  ssae_err e = {{0}};
  if (hook_fails(b, &e) || b->ops->submit_spans(b->impl, slot, sp, nsp, n, &e)) {
    s->failed = 1;
    snprintf(s->msg, sizeof s->msg, "%s", e.msg);
  } else {
    s->async = 1;
  }
  return 0;
}

int ssae_backend_stream_open(ssae_backend *b, int channels, ssae_err *err) {
  if (!b) return ssae_err_set(err, "backend: no backend for the stream");
  if (b->streams) return ssae_err_set(err, "backend: stream already open");
  const size_t call_max = b->stream_batch ? b->stream_batch : 256;
  if (!(b->streams = ssae_cpu_streams_new(channels, call_max, err))) return -1;
  /* The caches now, when the CPU will use them (else when it takes over). */
  if (ssae_backend_cpu_direct(b) &&
      ssae_cpu_streams_fit(b->streams, b->fell_back ? b->cpu : b->impl))
    return ssae_err_set(err, "backend: out of memory for %d channels' code caches", channels);
  return 0;
}

/* 1 when slot s of n windows goes to the backend asynchronously. */
static int slot_async(ssae_backend *b, int slot, size_t n) {
  if (b->fell_back || !b->ops->submit || !b->ops->input_buffer) return 0;
  size_t cap = 0;
  return b->ops->input_buffer(b->impl, slot, &cap) != NULL && cap >= n;
}

int ssae_backend_stream_async(const ssae_backend *b, size_t n) {
  if (!b) return 0;
  for (int s = 0; s < SSAE_BACKEND_SLOTS; s++)
    if (!slot_async((ssae_backend *)b, s, n)) return 0;
  return 1;
}

int ssae_backend_stream_submit(ssae_backend *b, int slot, const ssae_span *sp, int nsp,
                               size_t n, const uint32_t *channel, const unsigned char *cont,
                               ssae_err *err) {
  if (!b || !b->streams || slot < 0 || slot >= SSAE_BACKEND_SLOTS || nsp < 0 || (!sp && nsp) ||
      (n && (!channel || !cont)))
    return ssae_err_set(err, "backend: bad arguments to stream_submit");
  if (check_spans(b, sp, nsp, n, err)) return -1;
  const size_t wf = (size_t)b->m->d.frames * (size_t)b->m->d.n_mels;
  const uint32_t nc = (uint32_t)ssae_cpu_streams_channels(b->streams);
  for (size_t i = 0; i < n; i++)
    if (channel[i] >= nc)
      return ssae_err_set(err, "backend: channel %u of a stream of %u", channel[i], nc);
  backend_slot *s = &b->slot[slot];
  s->x = NULL;
  s->sp = sp;
  s->nsp = nsp;
  s->n = n;
  s->async = s->failed = 0;
  s->stream = 1;
  s->channel = channel;
  s->cont = cont;
  /* A laid-out batch goes to the backend's submit; windows elsewhere to
   * its span reader; else (the CPU) collect scores them. */
  const int laid_out = nsp == 1 && sp[0].pitch == wf;
  if (!n || !slot_async(b, slot, n) || (!laid_out && !b->ops->submit_spans)) return 0;
  ssae_cpu_streams_forget(b->streams, channel, n); /* the device scores them */
  b->runs++;
  ssae_err e = {{0}};
  if (hook_fails(b, &e) || (laid_out ? b->ops->submit(b->impl, slot, sp[0].x, n, &e)
                                     : b->ops->submit_spans(b->impl, slot, sp, nsp, n, &e))) {
    s->failed = 1;
    snprintf(s->msg, sizeof s->msg, "%s", e.msg);
  } else {
    s->async = 1;
  }
  return 0;
}

int ssae_backend_host_register(ssae_backend *b, void *p, size_t bytes,
                               const ssae_backend_ops **ops) {
  if (ops) *ops = NULL;
  if (!b || !p || !bytes || !b->ops->host_register || b->ops->host_register(p, bytes))
    return -1;
  if (ops) *ops = b->ops;
  return 0;
}

void ssae_backend_host_unregister(const ssae_backend_ops *ops, void *p) {
  if (ops && ops->host_unregister && p) ops->host_unregister(p);
}

/* Windows per call of a window-only backend in ssae_backend_run_frames. */
#define FRAMES_CHUNK 4096

int ssae_backend_run_frames(ssae_backend *b, const float *frames, size_t n_frames,
                            float *scores, ssae_err *err) {
  size_t M = (size_t)b->m->d.n_mels, F = (size_t)b->m->d.frames, win = F * M;
  if (n_frames < F) return 0;
  size_t nw = n_frames - F + 1;
  /* The CPU as the chosen backend, or after a fall back: no layout. The
   * test hooks still go through ssae_backend_run below. */
  if (ssae_backend_cpu_direct(b)) {
    void *cpu = b->fell_back ? b->cpu : b->impl;
    if (ssae_cpu_score_frames(cpu, frames, n_frames, scores))
      return ssae_err_set(err, "cpu: bad arguments to the forward pass");
    return 0;
  }
  size_t chunk = nw < FRAMES_CHUNK ? nw : FRAMES_CHUNK;
  if (b->max_batch && chunk > b->max_batch) chunk = b->max_batch;
  if (chunk > b->win_cap) {
    float *p = realloc(b->win, chunk * win * sizeof *p);
    if (!p) return ssae_err_set(err, "out of memory for %zu windows", chunk);
    b->win = p;
    b->win_cap = chunk;
  }
  for (size_t i = 0; i < nw; i += chunk) {
    size_t k = nw - i < chunk ? nw - i : chunk;
    /* Window t is frames t ... t+F-1, one contiguous run. */
    for (size_t t = 0; t < k; t++)
      memcpy(b->win + t * win, frames + (i + t) * M, win * sizeof *b->win);
    if (ssae_backend_run(b, b->win, k, scores + i, NULL, err)) return -1;
  }
  return 0;
}

int ssae_backend_cpu_direct(const ssae_backend *b) {
  return (b->fell_back || b->ops == &ssae_backend_cpu) && !b->fail_next && !b->fail_at;
}

int ssae_backend_set_math(ssae_backend *b, const char *math, ssae_err *err) {
  if (!b || !math || (strcmp(math, "fp32") && strcmp(math, "3xtf32")))
    return ssae_err_set(err, "math '%s': fp32 or 3xtf32", math ? math : "(null)");
  if (b->ops->set_math) return b->ops->set_math(b->impl, math, err);
  return 0;
}

const char *ssae_backend_name(const ssae_backend *b) {
  return b->fell_back ? "cpu" : b->ops->name;
}

void ssae_backend_set_fallback_cb(ssae_backend *b, void (*cb)(void *user, const char *msg),
                                  void *user) {
  b->cb = cb;
  b->user = user;
}

const char *ssae_backend_note(const ssae_backend *b) { return b->note; }

void ssae_backend_fail_next(ssae_backend *b) { b->fail_next = 1; }

int ssae_backend_fell_back(const ssae_backend *b) { return b->fell_back; }
