/* The host half of the GPU front end (ssae_cuda_frontend.h): which frames
 * and windows each run makes (the stream geometry of dsp/ssae_logmel.c),
 * the descriptors for the device half (ssae_cuda_frontend.cu), and the same
 * steps on the CPU from a host copy of each stream's state.
 *
 * The host copy: the newest n_fft + (F-1)*hop samples of each stream. A
 * frame not yet made starts after the newest n_fft samples, so the last
 * F-1 frames made start after the newest n_fft + (F-1)*hop; those frames
 * (the carry of the next windows) can be made again on the CPU from the
 * copy, which is all a switch to the CPU needs: no device memory has to be
 * read back after a CUDA error. */
#include "ssae_cuda_frontend.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ssae_cpu.h"
#include "ssae_cuda_frontend_dev.h"
#include "ssae_logmel_batch.h"

typedef struct {
  uint64_t n_in, next_t, seen; /* samples and frames of the stream so far */
  uint64_t origin;             /* ring input: the ring position of the stream's sample 0 */
  float *hist;                 /* the newest hh samples (n_in - hh ... n_in - 1);
                                  NULL with ring input, where the ring keeps them */
  size_t hh;
  size_t n_scores, n_frames, carry; /* the last run's results */
  size_t run_n;                /* the samples of the run in flight that takes it */
  int run_end;                 /* and whether its stream ends after them */
} fe_chan;

/* A run between its submit and its wait: channels lo .. hi-1. Its launch
 * failed (launch_err): the move to the CPU waits for its finish(), so that
 * the last run's results stay readable until then. */
typedef struct {
  int lo, hi, launch_failed;
  ssae_err launch_err;
} fe_run;

/* Runs in flight at once, at most (on disjoint channels); the device
 * queues as many. */
#define RUNS_IN_FLIGHT SSAE_CUDA_FE_IN_FLIGHT
_Static_assert(SSAE_CUDA_FE_IN_FLIGHT <= SSAE_FE_DEV_RUNS, "the device queues every run in flight");

struct ssae_cuda_fe {
  ssae_cuda_fe_cfg cfg;
  ssae_feat_cfg feat;
  int M, F, n_fft, hop, half;
  size_t max_fr, max_rows, hist_cap;
  fe_chan *ch;
  unsigned char *packed; /* channel's block holds int16 this run (ssae_cuda_fe_pack_i16) */
  /* Ring input (cfg.ring_len): channels x ring_len floats, page-aligned. */
  float *ring;
  size_t ring_bytes;
  ssae_fe_dev *dev;
  /* The runs in flight, oldest first from q0 (a ring of RUNS_IN_FLIGHT). */
  fe_run q[RUNS_IN_FLIGHT];
  int q0, nq;
  long fail_after, runs;
  ssae_err note;
  /* The CPU path. */
  ssae_lmbatch lb;
  int lb_ready;
  ssae_cpu *cpu;
  void *cpu_blocks;  /* channels x max_block samples (cfg.cpu: the caller's blocks) */
  float *blk;        /* one block as floats */
  float *rows;       /* max_rows frames of one channel */
  float *cpu_scores; /* channels x max_rows */
  float *cpu_frames; /* channels x max_rows x M (keep_frames) */
};

static uint64_t total_frames(const ssae_cuda_fe *fe, uint64_t n) {
  ssae_lmbatch b = {.cfg = fe->feat, .hop = fe->hop, .half = fe->half, .n_fft = fe->n_fft};
  return ssae_lm_total_frames(&b, n);
}

/* The frames [t0, t1) a run of n samples (ending the stream or not) makes:
 * all of the stream's at its end, else those ssae_lm_frame_ready allows
 * (frame t reaches sample t*hop + n_fft/2 when centred, t*hop + n_fft
 * not; a centred, reflected stream of n_fft/2 samples or fewer has none
 * yet, as its first frame's reflection reads samples 1 ... n_fft/2). */
static void run_frames(const ssae_cuda_fe *fe, const fe_chan *c, size_t n, int end, uint64_t *t0,
                       uint64_t *t1) {
  const uint64_t n_total = c->n_in + n;
  uint64_t t = 0;
  if (end) {
    t = total_frames(fe, n_total);
  } else {
    const int center = fe->feat.center;
    const uint64_t reach = (uint64_t)(center ? fe->half : fe->n_fft);
    const int too_short =
        center && fe->feat.pad_mode == SSAE_PAD_REFLECT && n_total <= (uint64_t)fe->half;
    if (n_total >= reach && !too_short) t = (n_total - reach) / (uint64_t)fe->hop + 1;
  }
  *t0 = c->next_t;
  *t1 = t < *t0 ? *t0 : t;
}

void ssae_cuda_fe_free(ssae_cuda_fe *fe) {
  if (!fe) return;
  if (fe->ch)
    for (int i = 0; i < fe->cfg.channels; i++) free(fe->ch[i].hist);
  free(fe->ch);
  free(fe->packed);
  ssae_fe_dev_free(fe->dev); /* unpins the ring before it goes */
  free(fe->ring);
  if (fe->lb_ready) ssae_lmbatch_release(&fe->lb);
  ssae_cpu_free(fe->cpu);
  free(fe->cpu_blocks);
  free(fe->blk);
  free(fe->rows);
  free(fe->cpu_scores);
  free(fe->cpu_frames);
  free(fe);
}

int ssae_cuda_fe_device_present(void) { return ssae_fe_dev_present(); }

static pthread_t warm_tid;
static int warm_running, warm_device;

static void *warm_main(void *arg) {
  (void)arg;
  ssae_fe_dev_warm(warm_device);
  return NULL;
}

void ssae_cuda_fe_warm_up(int device) {
  if (warm_running) return;
  warm_device = device;
  warm_running = !pthread_create(&warm_tid, NULL, warm_main, NULL);
}

void ssae_cuda_fe_warm_up_end(void) {
  if (!warm_running) return;
  pthread_join(warm_tid, NULL);
  warm_running = 0;
}

void *ssae_fe_host_alloc(size_t bytes, size_t *size) {
  const size_t align = bytes >= ((size_t)4 << 20) ? (size_t)2 << 20 : 4096;
  const size_t sz = (bytes + align - 1) & ~(align - 1);
  void *p = aligned_alloc(align, sz);
  if (!p) return NULL;
#ifdef MADV_HUGEPAGE
  if (align > 4096) madvise(p, sz, MADV_HUGEPAGE);
#endif
  memset(p, 0, sz);
  *size = sz;
  return p;
}

/* The model folded for the device, in double (see ssae_cuda_frontend_dev.h). */
static int start_device(ssae_cuda_fe *fe, const ssae_model *m, ssae_err *err) {
  const size_t M = (size_t)m->d.n_mels, F = (size_t)m->d.frames, L = (size_t)m->d.latent,
               S = (size_t)m->d.slice_latent, C = F * S;
  ssae_melbank *bank = &fe->lb.bank;
  int *mel_i = malloc(sizeof *mel_i * 3 * M);
  double *w = malloc(sizeof *w * (M * S + S + L * C + L * L + L + F * M * L + M));
  if (!mel_i || !w) {
    free(mel_i);
    free(w);
    return ssae_err_set(err, "out of memory for the GPU front end");
  }
  double *encT = w, *enc_b = encT + M * S, *B = enc_b + S, *bnT = B + L * C, *bn_b = bnT + L * L,
         *D = bn_b + L, *dec_b = D + F * M * L;
  for (size_t o = 0; o < S; o++) {
    double b = m->enc_b[o];
    for (size_t i = 0; i < M; i++) {
      encT[i * S + o] = (double)m->enc_w[o * M + i] * m->ln_enc_w[i];
      b += (double)m->enc_w[o * M + i] * m->ln_enc_b[i];
    }
    enc_b[o] = b;
  }
  /* Column-major for the device: a warp's lanes (one per latent unit)
   * read consecutive doubles. */
  for (size_t l = 0; l < L; l++)
    for (size_t k = 0; k < C; k++) B[k * L + l] = m->basis_n[l * C + k];
  for (size_t o = 0; o < L; o++) {
    double b = m->bn_b[o];
    for (size_t i = 0; i < L; i++) {
      bnT[i * L + o] = (double)m->bn_w[o * L + i] * m->ln_bn_w[i];
      b += (double)m->bn_w[o * L + i] * m->ln_bn_b[i];
    }
    bn_b[o] = b;
  }
  for (size_t f = 0; f < F; f++)
    for (size_t mm = 0; mm < M; mm++)
      for (size_t l = 0; l < L; l++) {
        double s = 0.0;
        for (size_t k = 0; k < S; k++)
          s += (double)m->dec_w[mm * S + k] * m->basis_n[l * C + f * S + k];
        D[l * F * M + f * M + mm] = s; /* [L][F*M]: lanes (outputs) read in a row */
      }
  for (size_t i = 0; i < M; i++) {
    dec_b[i] = m->dec_b[i];
    mel_i[i] = bank->start[i];
    mel_i[M + i] = bank->len[i];
    mel_i[2 * M + i] = (int)bank->off[i];
  }
  ssae_fe_dev_cfg g = {
      .device = fe->cfg.device, .channels = fe->cfg.channels,
      .pcm_i16 = fe->cfg.pcm == SSAE_FE_PCM_I16, .keep_frames = fe->cfg.keep_frames,
      .max_block = fe->cfg.max_block, .max_rows = (int)fe->max_rows, .n_fft = fe->n_fft,
      .hop = fe->hop, .center = fe->feat.center, .reflect = fe->feat.pad_mode == SSAE_PAD_REFLECT,
      .n_mels = fe->feat.n_mels, .power = fe->feat.power, .win = fe->lb.win,
      .mel_start = mel_i, .mel_len = mel_i + M, .mel_off = mel_i + 2 * M, .mel_w = bank->w,
      .M = (int)M, .F = (int)F, .L = (int)L, .S = (int)S, .encT = encT,
      .enc_b = enc_b, .B = B, .bnT = bnT, .bn_b = bn_b, .D = D, .dec_b = dec_b,
      .ext_in = fe->ring, .ext_in_bytes = fe->ring_bytes, .ext_row = fe->cfg.ring_len};
  fe->dev = ssae_fe_dev_new(&g, err);
  free(mel_i);
  free(w);
  return fe->dev ? 0 : -1;
}

ssae_cuda_fe *ssae_cuda_fe_new(const ssae_model *m, const ssae_cuda_fe_cfg *cfg, ssae_err *err) {
  if (!m || !cfg || cfg->channels < 1 || cfg->max_block < 1 || cfg->max_block > (1u << 30)) {
    ssae_err_set(err, "GPU front end: bad settings");
    return NULL;
  }
  if (ssae_feat_cfg_validate(&m->feat, err)) return NULL;
  if (m->feat.n_mels != m->d.n_mels) {
    ssae_err_set(err, "the model's n_mels (%d) and its features' (%d) differ", m->d.n_mels,
                 m->feat.n_mels);
    return NULL;
  }
  ssae_cuda_fe *fe = calloc(1, sizeof *fe);
  if (!fe) {
    ssae_err_set(err, "out of memory for the GPU front end");
    return NULL;
  }
  fe->cfg = *cfg;
  fe->feat = m->feat;
  fe->M = m->d.n_mels;
  fe->F = m->d.frames;
  fe->n_fft = m->feat.n_fft;
  fe->hop = m->feat.hop_length;
  fe->half = fe->n_fft / 2;
  fe->max_fr = (cfg->max_block + (size_t)fe->n_fft) / (size_t)fe->hop + 3;
  fe->max_rows = fe->max_fr + (size_t)fe->F - 1;
  fe->hist_cap = (size_t)fe->n_fft + (size_t)(fe->F - 1) * (size_t)fe->hop;
  fe->fail_after = -1;
  const char *fa = getenv("SSAE_CUDA_FAIL_AFTER");
  if (fa && *fa) fe->fail_after = strtol(fa, NULL, 10);
  const size_t nc = (size_t)cfg->channels;
  const size_t rl = cfg->ring_len;
  if (rl && ((rl & (rl - 1)) || rl < cfg->max_block + fe->hist_cap || cfg->pcm != SSAE_FE_PCM_F32 ||
             rl > ((size_t)1 << 30) / nc)) {
    ssae_err_set(err, "GPU front end: ring of %zu samples: it must be a power of two of at "
                      "least %zu (a block and the stream history) holding floats, and at most "
                      "2^30 samples in all", rl, cfg->max_block + fe->hist_cap);
    ssae_cuda_fe_free(fe);
    return NULL;
  }
  fe->ch = calloc(nc, sizeof *fe->ch);
  fe->packed = calloc(nc, 1);
  if (!fe->ch || !fe->packed) goto oom;
  if (rl) {
    /* In 2 MB pages at thousands of channels: with 4 KB pages each row the
     * audio thread writes is a TLB miss (at 8,192 channels, about a
     * millisecond per block on the H100 host's Xeon). */
    if (!(fe->ring = ssae_fe_host_alloc(nc * rl * sizeof(float), &fe->ring_bytes))) goto oom;
  } else {
    for (size_t i = 0; i < nc; i++)
      if (!(fe->ch[i].hist = malloc(sizeof(float) * fe->hist_cap))) goto oom;
  }
  if (ssae_lmbatch_init(&fe->lb, &m->feat, err)) {
    fe->lb_ready = 1;
    ssae_cuda_fe_free(fe);
    return NULL;
  }
  fe->lb_ready = 1;
  fe->blk = malloc(sizeof *fe->blk * cfg->max_block);
  fe->rows = malloc(sizeof *fe->rows * fe->max_rows * (size_t)fe->M);
  fe->cpu_scores = malloc(sizeof *fe->cpu_scores * fe->max_rows * nc);
  if (cfg->keep_frames)
    fe->cpu_frames = malloc(sizeof *fe->cpu_frames * fe->max_rows * nc * (size_t)fe->M);
  if (!fe->blk || !fe->rows || !fe->cpu_scores || (cfg->keep_frames && !fe->cpu_frames))
    goto oom;
  if (!(fe->cpu = ssae_cpu_new(m, 1, err))) {
    ssae_cuda_fe_free(fe);
    return NULL;
  }
  if (cfg->cpu && rl) {
    /* The ring is the CPU path's input too. */
  } else if (cfg->cpu) {
    fe->cpu_blocks = malloc(cfg->max_block * nc * (cfg->pcm == SSAE_FE_PCM_I16 ? 2 : 4));
    if (!fe->cpu_blocks) goto oom;
  } else if (start_device(fe, m, err)) {
    ssae_cuda_fe_free(fe);
    return NULL;
  }
  return fe;
oom:
  ssae_err_set(err, "out of memory for the front end of %d channels", cfg->channels);
  ssae_cuda_fe_free(fe);
  return NULL;
}

void *ssae_cuda_fe_block(ssae_cuda_fe *fe, int ch) {
  if (fe->ring) return NULL;
  if (fe->dev) return ssae_fe_dev_block(fe->dev, ch);
  return (char *)fe->cpu_blocks +
         (size_t)ch * fe->cfg.max_block * (fe->cfg.pcm == SSAE_FE_PCM_I16 ? 2 : 4);
}

size_t ssae_cuda_fe_max_frames(const ssae_cuda_fe *fe) { return fe->max_fr; }

float *ssae_cuda_fe_ring(ssae_cuda_fe *fe, int ch) {
  if (!fe->ring || ch < 0 || ch >= fe->cfg.channels) return NULL;
  return fe->ring + (size_t)ch * fe->cfg.ring_len;
}

size_t ssae_cuda_fe_ring_keep(const ssae_cuda_fe *fe) { return fe->hist_cap; }

void ssae_cuda_fe_reset(ssae_cuda_fe *fe, int ch) {
  if (ch < 0 || ch >= fe->cfg.channels) return;
  fe_chan *c = &fe->ch[ch];
  c->n_in = c->next_t = c->seen = c->hh = 0;
  c->n_scores = c->n_frames = c->carry = 0;
}

size_t ssae_cuda_fe_new_frames(const ssae_cuda_fe *fe, int ch) { return fe->ch[ch].n_frames; }
int ssae_cuda_fe_on_gpu(const ssae_cuda_fe *fe) { return fe->dev != NULL; }
const char *ssae_cuda_fe_note(const ssae_cuda_fe *fe) { return fe->note.msg; }

/* Samples n - k ... n - 1 of channel ch's block of n as floats: where they
 * lie for a float block, else only those k converted into fe->blk (ring
 * input: copied out of the ring, which may wrap). */
static float ring_sample(const ssae_cuda_fe *fe, size_t ch, uint64_t p) {
  return fe->ring[ch * fe->cfg.ring_len + (p & (fe->cfg.ring_len - 1))];
}

static const float *block_tail_f32(ssae_cuda_fe *fe, int ch, size_t n, size_t k) {
  if (fe->ring) {
    const fe_chan *c = &fe->ch[ch];
    const uint64_t p = c->origin + c->n_in + (n - k); /* before the run moves n_in on */
    for (size_t i = 0; i < k; i++) fe->blk[i] = ring_sample(fe, (size_t)ch, p + i);
    return fe->blk;
  }
  const void *src = ssae_cuda_fe_block(fe, ch);
  if (fe->cfg.pcm == SSAE_FE_PCM_F32 && !fe->packed[ch]) return (const float *)src + (n - k);
  const int16_t *s = (const int16_t *)src + (n - k);
  for (size_t i = 0; i < k; i++) fe->blk[i] = (float)s[i] * (1.0f / 32768.0f);
  return fe->blk;
}

/* Channel ch's block as floats (into fe->blk). */
static const float *block_f32(ssae_cuda_fe *fe, int ch, size_t n) {
  return block_tail_f32(fe, ch, n, n);
}

/* Sample j of a stream whose copy holds samples n_in - hh ... n_in - 1 (or
 * whose ring does) and whose current block (blk, NULL: none) follows them. */
static float sample(const ssae_cuda_fe *fe, const fe_chan *c, const float *blk, int64_t j) {
  if ((uint64_t)j >= c->n_in) return blk[(uint64_t)j - c->n_in];
  if (fe->ring) return ring_sample(fe, (size_t)(c - fe->ch), c->origin + (uint64_t)j);
  return c->hist[(uint64_t)j - (c->n_in - c->hh)];
}

/* Frame t of a stream of n_total samples (ended: samples past it are
 * padding) into the batch, bands to out; as emit_frame in ssae_logmel.c. */
static void cpu_frame(ssae_cuda_fe *fe, const fe_chan *c, const float *blk, uint64_t t,
                      uint64_t n_total, int ended, float *out) {
  ssae_lmbatch *b = &fe->lb;
  const int64_t start = ssae_lm_frame_start(b, t), n = (int64_t)n_total;
  const int reflect = fe->feat.pad_mode == SSAE_PAD_REFLECT;
  float *frame = ssae_lmbatch_gather(b);
  for (int i = 0; i < fe->n_fft; i++) {
    const int64_t j = start + i;
    float v;
    if (j >= 0 && j < n) v = sample(fe, c, blk, j);
    else if (!reflect) v = 0.0f;
    else if (!ended && j < 0) v = sample(fe, c, blk, -j);
    else v = sample(fe, c, blk, (int64_t)ssae_lm_reflect_index(j, n_total));
    frame[i] = v;
  }
  if (ssae_lmbatch_add(b, frame, out)) ssae_lmbatch_run(b);
}

/* One run of channel ch on the CPU: the carry frames made again from the
 * copy, the new frames, every window's score. */
static int cpu_channel(ssae_cuda_fe *fe, int ch, size_t n, int end, uint64_t t0, uint64_t t1,
                       ssae_err *err) {
  fe_chan *c = &fe->ch[ch];
  const size_t M = (size_t)fe->M, carry = c->carry;
  const float *blk = n ? block_f32(fe, ch, n) : NULL;
  for (size_t r = 0; r < carry; r++)
    cpu_frame(fe, c, NULL, c->next_t - carry + r, c->n_in, 0, fe->rows + r * M);
  for (uint64_t t = t0; t < t1; t++)
    cpu_frame(fe, c, blk, t, c->n_in + n, end, fe->rows + (carry + (size_t)(t - t0)) * M);
  ssae_lmbatch_run(&fe->lb);
  const size_t total = carry + (size_t)(t1 - t0);
  c->n_scores = total >= (size_t)fe->F ? total - (size_t)fe->F + 1 : 0;
  if (c->n_scores &&
      ssae_cpu_score_frames(fe->cpu, fe->rows, total, fe->cpu_scores + (size_t)ch * fe->max_rows))
    return ssae_err_set(err, "the CPU model failed");
  if (fe->cpu_frames)
    memcpy(fe->cpu_frames + (size_t)ch * fe->max_rows * M, fe->rows + carry * M,
           (size_t)(t1 - t0) * M * sizeof *fe->rows);
  return 0;
}

/* The host copy after a run of n samples. */
static void keep_history(ssae_cuda_fe *fe, int ch, size_t n) {
  fe_chan *c = &fe->ch[ch];
  const size_t cap = fe->hist_cap;
  /* Only the samples kept are converted: converting every 16-bit block
   * whole (256 x 65,536 samples a run, on the thread that drives the GPU)
   * took ~8 ms of each ~10 ms run (ssae score --stats, H100 host). */
  const float *blk = block_tail_f32(fe, ch, n, n < cap ? n : cap);
  if (n >= cap) {
    memcpy(c->hist, blk, cap * sizeof *blk);
    c->hh = cap;
    return;
  }
  size_t old = c->hh + n > cap ? cap - n : c->hh;
  memmove(c->hist, c->hist + (c->hh - old), old * sizeof *c->hist);
  memcpy(c->hist + old, blk, n * sizeof *blk);
  c->hh = old + n;
}

/* After a CUDA error: to the CPU for good (the caller's samples move to
 * the CPU blocks first; the ring is the caller's input on the CPU as well).
 * The run in hand is made again there by finish(). */
static int to_cpu(ssae_cuda_fe *fe, const ssae_err *derr, ssae_err *err) {
  fe->note = *derr;
  if (!fe->ring) {
    const int nc = fe->cfg.channels;
    const size_t bytes = fe->cfg.max_block * (fe->cfg.pcm == SSAE_FE_PCM_I16 ? 2 : 4);
    fe->cpu_blocks = malloc(bytes * (size_t)nc);
    if (!fe->cpu_blocks) return ssae_err_set(err, "%s; no memory to go on on the CPU", derr->msg);
    for (int i = 0; i < nc; i++)
      memcpy((char *)fe->cpu_blocks + bytes * (size_t)i, ssae_fe_dev_block(fe->dev, i), bytes);
  }
  ssae_fe_dev_free(fe->dev);
  fe->dev = NULL;
  return 0;
}

/* A run's first half: its channels' frame counts and descriptors, and on
 * the GPU its work queued; pos: ring input's first positions (NULL:
 * blocks). clear_others: the channels outside the run's range report no
 * frames and no windows (else they keep their last run's). */
static int start(ssae_cuda_fe *fe, const uint64_t *pos, const size_t *n, const unsigned char *end,
                 int clear_others, ssae_err *err) {
  const int nc = fe->cfg.channels;
  if (fe->nq == RUNS_IN_FLIGHT)
    return ssae_err_set(err, "GPU front end: %d runs are already in flight", RUNS_IN_FLIGHT);
  /* The run takes the channels from the first that brings samples or ends
   * to the last (lo .. hi-1), on the host and on the device: one input
   * group's run of many costs its share. A channel that brings nothing and
   * does not end makes no frame and no window; it only says so. */
  int lo = nc, hi = 0;
  for (int i = 0; i < nc; i++) {
    if (n[i] > fe->cfg.max_block)
      return ssae_err_set(err, "GPU front end: %zu samples for channel %d, at most %zu", n[i], i,
                          fe->cfg.max_block);
    if (n[i] || (end && end[i])) {
      if (i < lo) lo = i;
      hi = i + 1;
    }
  }
  for (int k = 0; k < fe->nq; k++) {
    const fe_run *r = &fe->q[(fe->q0 + k) % RUNS_IN_FLIGHT];
    if (lo < hi && lo < r->hi && r->lo < hi)
      return ssae_err_set(err,
                          "GPU front end: channels %d .. %d overlap a run in flight (%d .. %d)",
                          lo, hi - 1, r->lo, r->hi - 1);
  }
  if (clear_others) {
    for (int i = 0; i < lo; i++) fe->ch[i].n_frames = fe->ch[i].n_scores = 0;
    for (int i = hi > lo ? hi : nc; i < nc; i++) fe->ch[i].n_frames = fe->ch[i].n_scores = 0;
  }
  const long long blk_len = (long long)fe->cfg.max_block;
  for (int i = lo; i < hi; i++) {
    fe_chan *c = &fe->ch[i];
    const int brings = n[i] || (end && end[i]);
    /* A channel that brings nothing keeps its origin: its position in pos
     * need not be set (ssae_cuda_fe_submit_ring). */
    if (pos && brings) c->origin = pos[i] - c->n_in;
    c->run_n = n[i];
    c->run_end = end && end[i];
    uint64_t t0, t1;
    run_frames(fe, c, n[i], end && end[i], &t0, &t1);
    c->carry = c->seen < (uint64_t)(fe->F - 1) ? (size_t)c->seen : (size_t)(fe->F - 1);
    c->n_frames = (size_t)(t1 - t0);
    const size_t total = c->carry + c->n_frames;
    c->n_scores = total >= (size_t)fe->F ? total - (size_t)fe->F + 1 : 0;
    if (fe->dev) {
      ssae_fe_desc *d = &ssae_fe_dev_desc(fe->dev)[i];
      const uint64_t after = c->n_in + n[i];
      d->n_in = (long long)c->n_in;
      d->t0 = (long long)t0;
      d->hlen = (int)(c->n_in < (uint64_t)fe->n_fft ? c->n_in : (uint64_t)fe->n_fft);
      d->n = (int)n[i];
      d->end = end && end[i];
      d->nnew = (int)c->n_frames;
      d->carry = (int)c->carry;
      d->keep = (int)(after < (uint64_t)fe->n_fft ? after : (uint64_t)fe->n_fft);
      d->i16 = fe->cfg.pcm == SSAE_FE_PCM_I16 || fe->packed[i];
      /* Blocks: in units of the block's samples (int16 packed into a float
       * block starts at twice the float offset); a ring: the position. */
      const int packed = fe->cfg.pcm == SSAE_FE_PCM_F32 && fe->packed[i];
      d->src = pos ? (long long)((brings ? pos[i] : c->origin + c->n_in) & (fe->cfg.ring_len - 1))
                   : (long long)i * blk_len * (packed ? 2 : 1);
    }
  }
  fe_run *r = &fe->q[(fe->q0 + fe->nq) % RUNS_IN_FLIGHT];
  fe->nq++;
  r->lo = lo;
  r->hi = hi;
  r->launch_failed = 0;
  if (fe->dev && lo < hi) {
    const int poison = fe->fail_after >= 0 && fe->runs + fe->nq - 1 >= fe->fail_after;
    r->launch_err.msg[0] = 0;
    if (ssae_fe_dev_launch(fe->dev, lo, hi, poison, &r->launch_err)) r->launch_failed = 1;
  }
  return 0;
}

/* A run's second half: the device waited for (on a CUDA error, the run
 * made again on the CPU), the streams moved on. */
static int finish(ssae_cuda_fe *fe, ssae_err *err) {
  if (!fe->nq) return ssae_err_set(err, "GPU front end: no run in flight");
  const fe_run r = fe->q[fe->q0];
  fe->q0 = (fe->q0 + 1) % RUNS_IN_FLIGHT;
  fe->nq--;
  const int lo = r.lo, hi = r.hi;
  if (fe->dev && lo < hi) {
    ssae_err derr = {{0}};
    if (r.launch_failed) derr = r.launch_err;
    if ((r.launch_failed || ssae_fe_dev_wait(fe->dev, lo, hi, &derr)) &&
        to_cpu(fe, &derr, err))
      return -1;
  }
  fe->runs++;
  for (int i = lo; i < hi; i++) {
    fe_chan *c = &fe->ch[i];
    const size_t n = c->run_n;
    const int e = c->run_end;
    if (!fe->dev) {
      uint64_t t0 = c->next_t, t1 = c->next_t + c->n_frames;
      if (cpu_channel(fe, i, n, e, t0, t1, err)) return -1;
    }
    c->next_t += c->n_frames;
    c->seen += c->n_frames;
    if (n && !fe->ring) keep_history(fe, i, n);
    c->n_in += n;
    if (e) c->n_in = c->next_t = c->seen = c->hh = 0;
  }
  if (!fe->ring) memset(fe->packed, 0, (size_t)fe->cfg.channels);
  return 0;
}

static int run(ssae_cuda_fe *fe, const uint64_t *pos, const size_t *n, const unsigned char *end,
               ssae_err *err) {
  if (fe->nq) return ssae_err_set(err, "GPU front end: a run is still in flight");
  if (start(fe, pos, n, end, 1, err)) return -1;
  return finish(fe, err);
}

int ssae_cuda_fe_run(ssae_cuda_fe *fe, const size_t *n, const unsigned char *end, ssae_err *err) {
  if (fe->ring)
    return ssae_err_set(err, "GPU front end: ring input runs through ssae_cuda_fe_run_ring");
  return run(fe, NULL, n, end, err);
}

int ssae_cuda_fe_run_ring(ssae_cuda_fe *fe, const uint64_t *pos, const size_t *n,
                          const unsigned char *end, ssae_err *err) {
  if (!fe->ring || !pos) return ssae_err_set(err, "GPU front end: not made for ring input");
  return run(fe, pos, n, end, err);
}

int ssae_cuda_fe_submit(ssae_cuda_fe *fe, const size_t *n, const unsigned char *end,
                        ssae_err *err) {
  if (fe->ring)
    return ssae_err_set(err, "GPU front end: ring input runs through ssae_cuda_fe_submit_ring");
  if (fe->nq) return ssae_err_set(err, "GPU front end: a run is still in flight");
  return start(fe, NULL, n, end, 1, err);
}

int ssae_cuda_fe_submit_ring(ssae_cuda_fe *fe, const uint64_t *pos, const size_t *n,
                             const unsigned char *end, ssae_err *err) {
  if (!fe->ring || !pos) return ssae_err_set(err, "GPU front end: not made for ring input");
  return start(fe, pos, n, end, 0, err);
}

int ssae_cuda_fe_wait(ssae_cuda_fe *fe, ssae_err *err) { return finish(fe, err); }

int ssae_cuda_fe_in_flight(const ssae_cuda_fe *fe) { return fe->nq; }

int ssae_cuda_fe_ready(ssae_cuda_fe *fe) {
  if (!fe->nq || !fe->dev) return 1;
  const fe_run *r = &fe->q[fe->q0];
  return r->launch_failed || r->lo >= r->hi || ssae_fe_dev_ready(fe->dev);
}

int ssae_cuda_fe_pack_i16(ssae_cuda_fe *fe, int ch, size_t n) {
  if (fe->cfg.pcm != SSAE_FE_PCM_F32 || fe->ring || n > fe->cfg.max_block) return 0;
  float *x = ssae_cuda_fe_block(fe, ch);
  /* Every sample k/32768 with k a 16-bit integer: exact either way. */
  int ok = 1;
  for (size_t i = 0; i < n; i++) {
    const float v = x[i] * 32768.0f;
    ok &= v >= -32768.0f && v <= 32767.0f && v == (float)(int)v;
  }
  if (!ok) return 0;
  /* In place, through a small buffer: chunk k's int16 bytes end below the
   * floats still to be read. */
  int16_t tmp[1024];
  int16_t *dst = (int16_t *)(void *)x;
  for (size_t i = 0; i < n; i += 1024) {
    const size_t k = n - i < 1024 ? n - i : 1024;
    for (size_t j = 0; j < k; j++) tmp[j] = (int16_t)(x[i + j] * 32768.0f);
    memcpy(dst + i, tmp, k * sizeof *tmp);
  }
  fe->packed[ch] = 1;
  return 1;
}

int ssae_cuda_fe_set_i16(ssae_cuda_fe *fe, int ch) {
  if (fe->cfg.pcm != SSAE_FE_PCM_F32 || fe->ring || ch < 0 || ch >= fe->cfg.channels) return 0;
  fe->packed[ch] = 1;
  return 1;
}

size_t ssae_cuda_fe_scores(const ssae_cuda_fe *fe, int ch, const float **scores) {
  *scores = fe->dev ? ssae_fe_dev_scores(fe->dev, ch) : fe->cpu_scores + (size_t)ch * fe->max_rows;
  return fe->ch[ch].n_scores;
}

size_t ssae_cuda_fe_frames(const ssae_cuda_fe *fe, int ch, const float **frames) {
  if (!fe->cfg.keep_frames) {
    *frames = NULL;
    return 0;
  }
  if (fe->dev) {
    const float *r = ssae_fe_dev_rows(fe->dev, ch);
    *frames = r + fe->ch[ch].carry * (size_t)fe->M;
  } else {
    *frames = fe->cpu_frames + (size_t)ch * fe->max_rows * (size_t)fe->M;
  }
  return fe->ch[ch].n_frames;
}
