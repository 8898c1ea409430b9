/* The device half of the GPU front end (ssae_cuda_frontend_dev.h): its
 * tables and buffers on the device, a run's copies and launches on one
 * stream, its end at a CUDA event. The kernels, and what a run does on the
 * device, are in ssae_cuda_frontend_kernels.cuh. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_cuda_frontend_dev.h"
#include "ssae_cuda_frontend_kernels.cuh"

struct ssae_fe_dev {
  ssae_fe_dev_cfg cfg;
  dev_params p;
  dev_tables t;
  cudaStream_t stream;
  int have_stream;
  /* One event after each queued run (the oldest at ev0; nev queued). */
  cudaEvent_t ev[SSAE_FE_DEV_RUNS];
  int have_ev, ev0, nev;
  void *d_tables; /* one allocation behind t */
  /* The input blocks, page-locked: the caller's rings (ext_in), or this
   * object's blocks (in 2 MB pages and registered, or from cudaHostAlloc
   * where that fails: h_in_alloc). Each run's samples go to the device by
   * the copy engine (d_stage), which moves them over PCIe several times
   * faster than a kernel's reads of mapped memory. */
  void *h_in;
  int h_in_registered; /* h_in (ext_in or this object's) is registered here */
  int h_in_alloc;      /* h_in is from cudaHostAlloc */
  /* Two sample buffers of channels x buf_stride floats, one after the
   * other: channel c's hist is in buffer par[c] (ssae_fe_desc.buf), and each
   * run that takes the channel moves it to the other. */
  float *d_bufs;
  unsigned char *par;
  /* Each run's new samples, channels x max_block samples as in the
   * blocks: rows of a ring (2D copies, one or two per run of channels that
   * share their positions), or the blocks (one 2D copy of what the
   * channels bring). */
  void *d_stage;
  ssae_fe_desc *d_desc, *h_desc;
  float *d_rows, *d_cache_rows, *h_rows;
  double *d_codes, *d_cache_codes;
  float *d_scores, *h_scores;
  size_t smem_frames, smem_codes, smem_windows;
};

#define CK(call, what)                                                                 \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess)                                                             \
      return ssae_err_set(err, "CUDA front end: %s: %s", what, cudaGetErrorString(e_)); \
  } while (0)

extern "C" int ssae_fe_dev_present(void) {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

extern "C" void ssae_fe_dev_warm(int device) {
  if (cudaSetDevice(device) == cudaSuccess) cudaFree(0);
  cudaGetLastError(); /* not sticky: cleared for the calls that follow */
}

extern "C" void ssae_fe_dev_free(ssae_fe_dev *d) {
  if (!d) return;
  if (d->have_stream) {
    cudaSetDevice(d->cfg.device);
    cudaStreamSynchronize(d->stream);
    cudaStreamDestroy(d->stream);
  }
  for (int i = 0; i < d->have_ev; i++) cudaEventDestroy(d->ev[i]);
  cudaFree(d->d_tables);
  cudaFree(d->d_bufs);
  free(d->par);
  cudaFree(d->d_desc);
  cudaFree(d->d_stage);
  cudaFree(d->d_rows);
  cudaFree(d->d_cache_rows);
  cudaFree(d->d_codes);
  cudaFree(d->d_cache_codes);
  cudaFree(d->d_scores);
  if (d->h_in_registered) cudaHostUnregister(d->h_in);
  if (d->h_in_alloc) cudaFreeHost(d->h_in);
  else if (d->h_in != d->cfg.ext_in) free(d->h_in);
  cudaFreeHost(d->h_desc);
  cudaFreeHost(d->h_rows);
  cudaFreeHost(d->h_scores);
  free(d);
}

/* Appends n bytes of src to the table image at *off (16-byte aligned). */
static size_t table_put(char *img, size_t *off, const void *src, size_t n) {
  size_t at = *off;
  if (img) memcpy(img + at, src, n);
  *off = (at + n + 15) & ~(size_t)15;
  return at;
}

static int build_tables(ssae_fe_dev *d, ssae_err *err) {
  const ssae_fe_dev_cfg *g = &d->cfg;
  const int N = g->n_fft, pow2 = d->p.pow2, ntw = pow2 ? N / 2 : N;
  double2 *tw = (double2 *)malloc(sizeof *tw * (size_t)ntw);
  if (!tw) return ssae_err_set(err, "out of memory for the GPU front end's tables");
  for (int k = 0; k < ntw; k++) {
    const double a = 2.0 * M_PI * k / N;
    tw[k] = pow2 ? make_double2(cos(a), -sin(a)) : make_double2(cos(a), sin(a));
  }
  /* The stage twiddles (dev_tables.tws): N/2 - 1 of them, from tw. */
  const int N2 = N / 2, nts = pow2 ? N2 - 1 : 1;
  int lg = 0;
  while ((1 << lg) < N2) lg++;
  double2 *tws = (double2 *)malloc(sizeof *tws * (size_t)nts);
  /* The mel weights band by band in k-major rows (dev_tables.mel_wT). */
  const int nm = g->n_mels;
  int maxlen = 1;
  for (int m = 0; m < nm; m++)
    if (g->mel_len[m] > maxlen) maxlen = g->mel_len[m];
  double *mel_wT = (double *)calloc((size_t)maxlen * (size_t)nm, sizeof *mel_wT);
  if (!tws || !mel_wT) {
    free(tw);
    free(tws);
    free(mel_wT);
    return ssae_err_set(err, "out of memory for the GPU front end's tables");
  }
  tws[0] = tw[0]; /* the one entry of a non-power-of-two size's (unused) table */
  if (pow2)
    for (int h = 1, st = 0; h < N2; h *= 2, st++)
      for (int j = 0; j < h; j++) tws[h - 1 + j] = tw[j << (lg - st)];
  for (int m = 0; m < nm; m++)
    for (int k = 0; k < g->mel_len[m]; k++)
      mel_wT[(size_t)k * nm + m] = g->mel_w[g->mel_off[m] + k];
  const size_t M = (size_t)g->M, S = (size_t)g->S, L = (size_t)g->L, F = (size_t)g->F;
  struct part {
    const void *src;
    size_t n;
  } parts[] = {{g->win, sizeof(double) * (size_t)N},
               {mel_wT, sizeof(double) * (size_t)maxlen * (size_t)nm},
               {g->encT, sizeof(double) * M * S},
               {g->enc_b, sizeof(double) * S},
               {g->B, sizeof(double) * L * F * S},
               {g->bnT, sizeof(double) * L * L},
               {g->bn_b, sizeof(double) * L},
               {g->D, sizeof(double) * F * M * L},
               {g->dec_b, sizeof(double) * M},
               {tw, sizeof(double2) * (size_t)ntw},
               {tws, sizeof(double2) * (size_t)nts},
               {g->mel_start, sizeof(int) * (size_t)g->n_mels},
               {g->mel_len, sizeof(int) * (size_t)g->n_mels}};
  const int np = (int)(sizeof parts / sizeof parts[0]);
  size_t total = 0, at[13];
  for (int i = 0; i < np; i++) table_put(NULL, &total, parts[i].src, parts[i].n);
  char *img = (char *)malloc(total);
  if (!img) {
    free(tw);
    free(tws);
    free(mel_wT);
    return ssae_err_set(err, "out of memory for the GPU front end's tables");
  }
  size_t off = 0;
  for (int i = 0; i < np; i++) at[i] = table_put(img, &off, parts[i].src, parts[i].n);
  free(tw);
  free(tws);
  free(mel_wT);
  cudaError_t e = cudaMalloc(&d->d_tables, total);
  if (e == cudaSuccess) e = cudaMemcpy(d->d_tables, img, total, cudaMemcpyHostToDevice);
  free(img);
  CK(e, "uploading the tables");
  char *b = (char *)d->d_tables;
  d->t.win = (const double *)(b + at[0]);
  d->t.mel_wT = (const double *)(b + at[1]);
  d->t.encT = (const double *)(b + at[2]);
  d->t.enc_b = (const double *)(b + at[3]);
  d->t.B = (const double *)(b + at[4]);
  d->t.bnT = (const double *)(b + at[5]);
  d->t.bn_b = (const double *)(b + at[6]);
  d->t.D = (const double *)(b + at[7]);
  d->t.dec_b = (const double *)(b + at[8]);
  d->t.tw = (const double2 *)(b + at[9]);
  d->t.tws = (const double2 *)(b + at[10]);
  d->t.mel_start = (const int *)(b + at[11]);
  d->t.mel_len = (const int *)(b + at[12]);
  return 0;
}

/* The input blocks, page-locked, for the copy engine. cudaHostAlloc takes
 * 20-30 ms per 64 MiB on the H100 hosts and as long again to free (an
 * offline job's two sets of 64 MiB: a tenth of its time on the GPU);
 * memory touched in 2 MB pages and then registered takes about a third of
 * that and unregisters in a millisecond (BENCHMARKS.md). cudaHostAlloc
 * where that fails. */
static cudaError_t host_blocks(ssae_fe_dev *d, size_t bytes) {
  size_t size = 0;
  void *h = ssae_fe_host_alloc(bytes, &size);
  if (h) {
    if (cudaHostRegister(h, size, cudaHostRegisterPortable) == cudaSuccess) {
      d->h_in = h;
      d->h_in_registered = 1;
      return cudaSuccess;
    }
    cudaGetLastError(); /* not sticky: cleared, cudaHostAlloc next */
    free(h);
  }
  cudaError_t e = cudaHostAlloc(&d->h_in, bytes, cudaHostAllocPortable);
  if (e == cudaSuccess) d->h_in_alloc = 1;
  return e;
}

extern "C" ssae_fe_dev *ssae_fe_dev_new(const ssae_fe_dev_cfg *cfg, ssae_err *err) {
  /* Powers of two from 8 on take the FFT; smaller sizes the DFT. */
  const int N = cfg->n_fft, pow2 = N >= 8 && (N & (N - 1)) == 0;
  if (N > (pow2 ? kMaxPow2 : kMaxDft)) {
    ssae_err_set(err, "the GPU front end takes n_fft up to %d (%s), not %d",
                 pow2 ? kMaxPow2 : kMaxDft, pow2 ? "powers of two" : "other sizes", N);
    return NULL;
  }
  /* channels: the launches' grid.y (65535 at most). */
  if (cfg->channels < 1 || cfg->channels > 65535 || cfg->max_block < 1 ||
      cfg->max_block > (1u << 30) || cfg->max_rows < cfg->F || cfg->M != cfg->n_mels) {
    ssae_err_set(err, "GPU front end: bad sizes (%d channels, %zu samples a block)",
                 cfg->channels, cfg->max_block);
    return NULL;
  }
  ssae_fe_dev *d = (ssae_fe_dev *)calloc(1, sizeof *d);
  if (!d) {
    ssae_err_set(err, "out of memory for the GPU front end");
    return NULL;
  }
  d->cfg = *cfg;
  dev_params &p = d->p;
  p.channels = cfg->channels;
  p.n_fft = N;
  p.hop = cfg->hop;
  p.half = N / 2;
  p.center = cfg->center;
  p.reflect = cfg->reflect;
  p.pow2 = pow2;
  p.log2n = 0;
  while ((1 << p.log2n) < N) p.log2n++;
  p.n_bins = N / 2 + 1;
  p.n_mels = cfg->n_mels;
  p.pcm_i16 = cfg->pcm_i16;
  p.power = cfg->power;
  p.M = cfg->M;
  p.F = cfg->F;
  p.L = cfg->L;
  p.S = cfg->S;
  p.max_rows = cfg->max_rows;
  p.max_block = cfg->max_block;
  p.buf_stride = (size_t)N + cfg->max_block;
  d->smem_frames =
      sizeof(double2) * (size_t)(pow2 ? N / 2 : N) + sizeof(double) * (size_t)p.n_bins;
  d->smem_codes = sizeof(double) * code_smem_doubles(p.M);
  const size_t ch = (size_t)cfg->channels, rows = ch * (size_t)cfg->max_rows;
  const size_t in_bytes = ch * cfg->max_block * (cfg->pcm_i16 ? 2 : 4);
  const size_t cache = ch * (size_t)(cfg->F - 1);
  cudaError_t e = cudaSetDevice(cfg->device);
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking);
  if (e == cudaSuccess) d->have_stream = 1;
  while (e == cudaSuccess && d->have_ev < SSAE_FE_DEV_RUNS) {
    e = cudaEventCreateWithFlags(&d->ev[d->have_ev], cudaEventDisableTiming);
    if (e == cudaSuccess) d->have_ev++;
  }
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(fe_frames, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)d->smem_frames);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(fe_codes, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)d->smem_codes);
  d->smem_windows = sizeof(double) * win_smem_doubles(p.F, p.S, p.L);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(fe_windows, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)d->smem_windows);
  if (e == cudaSuccess) e = cudaMalloc(&d->d_bufs, sizeof(float) * 2 * ch * p.buf_stride);
  if (e == cudaSuccess && !(d->par = (unsigned char *)calloc(ch, 1))) e = cudaErrorMemoryAllocation;
  if (e == cudaSuccess) e = cudaMalloc(&d->d_desc, sizeof(ssae_fe_desc) * ch);
  p.staged = cfg->ext_in != NULL;
  if (e == cudaSuccess)
    e = cudaMalloc(&d->d_stage, p.staged ? sizeof(float) * ch * cfg->max_block : in_bytes);
  if (e == cudaSuccess) e = cudaMalloc(&d->d_rows, sizeof(float) * rows * (size_t)p.M);
  if (e == cudaSuccess) e = cudaMalloc(&d->d_codes, sizeof(double) * rows * (size_t)p.S);
  if (e == cudaSuccess && cache)
    e = cudaMalloc(&d->d_cache_rows, sizeof(float) * cache * (size_t)p.M);
  if (e == cudaSuccess && cache)
    e = cudaMalloc(&d->d_cache_codes, sizeof(double) * cache * (size_t)p.S);
  if (e == cudaSuccess) e = cudaMalloc(&d->d_scores, sizeof(float) * rows);
  if (e == cudaSuccess && cfg->ext_in) {
    /* Page-locked for the copy engine; never read by a kernel. */
    e = cudaHostRegister(cfg->ext_in, cfg->ext_in_bytes, cudaHostRegisterPortable);
    if (e == cudaSuccess) {
      d->h_in_registered = 1;
      d->h_in = cfg->ext_in;
    }
  } else if (e == cudaSuccess) {
    e = host_blocks(d, in_bytes);
  }
  if (e == cudaSuccess) e = cudaMallocHost((void **)&d->h_desc, sizeof(ssae_fe_desc) * ch);
  if (e == cudaSuccess) e = cudaMallocHost((void **)&d->h_scores, sizeof(float) * rows);
  if (e == cudaSuccess && cfg->keep_frames)
    e = cudaMallocHost((void **)&d->h_rows, sizeof(float) * rows * (size_t)p.M);
  /* Defined contents everywhere (the result copies take whole arrays;
   * compute-sanitizer's initcheck stays quiet). */
  if (e == cudaSuccess) e = cudaMemset(d->d_rows, 0, sizeof(float) * rows * (size_t)p.M);
  if (e == cudaSuccess) e = cudaMemset(d->d_codes, 0, sizeof(double) * rows * (size_t)p.S);
  if (e == cudaSuccess) e = cudaMemset(d->d_scores, 0, sizeof(float) * rows);
  if (e != cudaSuccess) {
    ssae_err_set(err, "CUDA front end: setting up %zu channels: %s", ch, cudaGetErrorString(e));
    ssae_fe_dev_free(d);
    return NULL;
  }
  memset(d->h_desc, 0, sizeof(ssae_fe_desc) * ch);
  if (build_tables(d, err)) {
    ssae_fe_dev_free(d);
    return NULL;
  }
  /* The clears and the tables' upload went on the legacy default stream,
   * which the runs' non-blocking stream does not wait for: without this,
   * a first run on a busy GPU could start before them (its frames then
   * cleared under it: cuda_frontend failed in 6 of 120 runs beside two
   * other GPU processes). */
  if ((e = cudaStreamSynchronize(0)) != cudaSuccess) {
    ssae_err_set(err, "CUDA front end: setting up %zu channels: %s", ch, cudaGetErrorString(e));
    ssae_fe_dev_free(d);
    return NULL;
  }
  return d;
}

extern "C" void *ssae_fe_dev_block(ssae_fe_dev *d, int ch) {
  if (d->cfg.ext_in) return NULL;
  return (char *)d->h_in + (size_t)ch * d->cfg.max_block * (d->cfg.pcm_i16 ? 2 : 4);
}

extern "C" ssae_fe_desc *ssae_fe_dev_desc(ssae_fe_dev *d) { return d->h_desc; }

extern "C" const float *ssae_fe_dev_scores(const ssae_fe_dev *d, int ch) {
  return d->h_scores + (size_t)ch * d->cfg.max_rows;
}

extern "C" const float *ssae_fe_dev_rows(const ssae_fe_dev *d, int ch) {
  return d->h_rows ? d->h_rows + (size_t)ch * d->cfg.max_rows * d->cfg.M : NULL;
}

extern "C" int ssae_fe_dev_launch(ssae_fe_dev *d, int lo, int hi, int poison, ssae_err *err) {
  const dev_params &p = d->p;
  if (lo < 0 || hi > p.channels || lo >= hi)
    return ssae_err_set(err, "GPU front end: channels %d .. %d of %d", lo, hi - 1, p.channels);
  if (d->nev == SSAE_FE_DEV_RUNS)
    return ssae_err_set(err, "GPU front end: %d runs are already queued", SSAE_FE_DEV_RUNS);
  const int ch = hi - lo;
  int max_n = 0, max_new = 0, max_win = 0;
  for (int c = lo; c < hi; c++) {
    ssae_fe_desc *g = &d->h_desc[c];
    g->buf = d->par[c];
    if (g->n > max_n) max_n = g->n;
    if (g->nnew > max_new) max_new = g->nnew;
    if (g->carry + g->nnew - p.F + 1 > max_win) max_win = g->carry + g->nnew - p.F + 1;
  }
  cudaStream_t s = d->stream;
  CK(cudaSetDevice(d->cfg.device), "selecting the device");
  CK(cudaMemcpyAsync(d->d_desc + lo, d->h_desc + lo, sizeof(ssae_fe_desc) * (size_t)ch,
                     cudaMemcpyHostToDevice, s),
     "descriptor copy");
  if (max_n && p.staged) {
    /* Runs of channels whose samples lie at the same place in their rows. */
    const size_t len = d->cfg.ext_row, row = sizeof(float) * len;
    for (int c0 = lo; c0 < hi;) {
      const ssae_fe_desc *g = &d->h_desc[c0];
      int c1 = c0 + 1;
      while (c1 < hi && d->h_desc[c1].n == g->n && d->h_desc[c1].src == g->src) c1++;
      if (g->n) {
        const size_t at = (size_t)g->src, n = (size_t)g->n, first = len - at < n ? len - at : n;
        const float *src = (const float *)d->h_in + (size_t)c0 * len;
        float *dst = (float *)d->d_stage + (size_t)c0 * p.max_block;
        CK(cudaMemcpy2DAsync(dst, sizeof(float) * p.max_block, src + at, row, sizeof(float) * first,
                             (size_t)(c1 - c0), cudaMemcpyHostToDevice, s),
           "sample copy");
        if (first < n)
          CK(cudaMemcpy2DAsync(dst + first, sizeof(float) * p.max_block, src, row,
                               sizeof(float) * (n - first), (size_t)(c1 - c0),
                               cudaMemcpyHostToDevice, s),
             "sample copy");
      }
      c0 = c1;
    }
  } else if (max_n) {
    /* The blocks: each channel's samples at its block's start (16-bit or
     * float), one 2D copy of as many bytes of each as the most any
     * brings. */
    const size_t pitch = p.max_block * (p.pcm_i16 ? 2 : 4);
    size_t width = 0;
    for (int c = lo; c < hi; c++) {
      const ssae_fe_desc *g = &d->h_desc[c];
      const size_t b = (size_t)g->n * (p.pcm_i16 || g->i16 ? 2 : 4);
      if (b > width) width = b;
    }
    CK(cudaMemcpy2DAsync((char *)d->d_stage + (size_t)lo * pitch, pitch,
                         (const char *)d->h_in + (size_t)lo * pitch, pitch, width, (size_t)ch,
                         cudaMemcpyHostToDevice, s),
       "sample copy");
  }
  /* The carry moves only in runs that make frames (cache_part skips the
   * channels that make none). */
  const int carry = p.F > 1 && max_new > 0;
  const int n_app = max_n ? ((max_n + 255) / 256 < 64 ? (max_n + 255) / 256 : 64) : 0;
  if (n_app + carry) {
    fe_start<<<dim3((unsigned)(n_app + carry), (unsigned)ch), poison ? 0 : 256, 0, s>>>(
        p, d->d_desc, d->d_stage, d->d_bufs, d->d_rows, d->d_codes,
        d->d_cache_rows, d->d_cache_codes, n_app, lo);
    CK(cudaGetLastError(), "append launch");
  }
  if (max_new) {
    fe_frames<<<dim3((unsigned)max_new, (unsigned)ch), kFrameThreads, d->smem_frames, s>>>(
        p, d->t, d->d_desc, d->d_bufs, d->d_rows, lo);
    CK(cudaGetLastError(), "frame launch");
    const long long blocks = ((long long)max_new * ch + kCodeFrames - 1) / kCodeFrames;
    fe_codes<<<(unsigned)blocks, 128, d->smem_codes, s>>>(p, d->t, d->d_desc, d->d_rows,
                                                           d->d_codes, max_new, lo, hi);
    CK(cudaGetLastError(), "code launch");
  }
  if (max_win > 0) {
    const long long blocks = ((long long)max_win * ch + kWinPerBlock - 1) / kWinPerBlock;
    fe_windows<<<(unsigned)blocks, 32 * kWinWarps, d->smem_windows, s>>>(
        p, d->t, d->d_desc, d->d_rows, d->d_codes, d->d_scores, max_win, lo, hi);
    CK(cudaGetLastError(), "window launch");
  }
  {
    const int n_cmp = (p.n_fft + 1023) / 1024; /* 1024 samples a block of 256 threads */
    fe_finish<<<dim3((unsigned)(n_cmp + carry), (unsigned)ch), 256, 0, s>>>(
        p, d->d_desc, d->d_bufs, d->d_rows, d->d_codes, d->d_cache_rows, d->d_cache_codes, n_cmp,
        lo);
    CK(cudaGetLastError(), "compact launch");
  }
  const size_t rows = (size_t)ch * (size_t)p.max_rows, r0 = (size_t)lo * (size_t)p.max_rows;
  if (max_win > 0)
    CK(cudaMemcpyAsync(d->h_scores + r0, d->d_scores + r0, sizeof(float) * rows,
                       cudaMemcpyDeviceToHost, s),
       "score copy");
  if (d->h_rows && max_new)
    CK(cudaMemcpyAsync(d->h_rows + r0 * p.M, d->d_rows + r0 * p.M,
                       sizeof(float) * rows * (size_t)p.M, cudaMemcpyDeviceToHost, s),
       "frame copy");
  CK(cudaEventRecord(d->ev[(d->ev0 + d->nev) % SSAE_FE_DEV_RUNS], s), "marking the run's end");
  d->nev++;
  return 0;
}

extern "C" int ssae_fe_dev_wait(ssae_fe_dev *d, int lo, int hi, ssae_err *err) {
  if (!d->nev) return ssae_err_set(err, "GPU front end: no run queued");
  const cudaEvent_t ev = d->ev[d->ev0];
  d->ev0 = (d->ev0 + 1) % SSAE_FE_DEV_RUNS;
  d->nev--;
  CK(cudaEventSynchronize(ev), "running the front end");
  for (int c = lo; c < hi; c++) d->par[c] ^= 1;
  return 0;
}

extern "C" int ssae_fe_dev_ready(ssae_fe_dev *d) {
  return !d->nev || cudaEventQuery(d->ev[d->ev0]) != cudaErrorNotReady;
}
