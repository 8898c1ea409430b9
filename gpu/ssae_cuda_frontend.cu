/* The device half of the GPU front end (ssae_cuda_frontend_dev.h).
 *
 * One run is four launches on one stream over the run's channels, then the
 * copies out and one wait:
 *   start    the new samples (float, or int16 / 32768), read from mapped
 *            page-locked memory (blocks) or from the staging buffer that
 *            the copy engine filled from the caller's ring, after each
 *            channel's hist; and each channel's cached frames and codes in
 *            front of its rows (when the run makes frames)
 *   frames   one block per new frame: window, FFT, power, mel, dB (double
 *            precision: float rounding inside the FFT leaves errors of
 *            0.01 dB on bins 80-90 dB under a frame's peak, ten times the
 *            SPEC's parity, see dsp/ssae_fft.h), then the frame's
 *            LayerNorm, slice encoder and GELU, once per frame
 *   windows  four windows per warp (each weight loaded once for the
 *            four): their F codes, latent, bottleneck, the folded decoder
 *            and the squared error against their F frames
 *   finish   each channel's newest n_fft samples to the front of its other
 *            sample buffer (two buffers: no launch reads what it writes),
 *            and its last F-1 rows back to its cache
 *   copies   scores (and frames) to page-locked host memory
 * The model runs in double as the CPU reference does (ssae_cpu.c), so the
 * scores agree with it to float rounding. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssae_cuda_frontend_dev.h"

namespace {

/* The FFT in shared memory: n_fft complex doubles; sizes above this go to
 * the CPU (the host half refuses them here). */
const int kMaxPow2 = 8192;
const int kMaxDft = 4096;
/* Threads per frame in fe_frames: 128 (four butterflies each per FFT stage,
 * more blocks resident per SM) took 1.38 ms for an offline run of 32,768
 * frames where 256 took 1.57 and 64 took 1.46 (ncu, H100). */
const int kFrameThreads = 128;
/* fe_windows: warps a block, windows a block. */
const int kWinWarps = 4;
const int kWinPerBlock = 8;

struct dev_tables {
  const double *win, *mel_w, *encT, *enc_b, *B, *bnT, *bn_b, *D, *dec_b;
  const double2 *tw; /* pow2: exp(-2 pi i k/N), k < N/2; else cos/sin of 2 pi k/N, k < N */
  const int *mel_start, *mel_len, *mel_off;
};

struct dev_params {
  int channels, n_fft, hop, half, center, reflect, pow2, log2n, n_bins, n_mels, pcm_i16;
  int staged; /* the caller's ring (ext_in): this run's samples were copied to d_stage */
  double power;
  int M, F, L, S, max_rows;
  size_t max_block, buf_stride;
};

}  // namespace

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
  /* The input blocks: page-locked and mapped, read by fe_start straight
   * over PCIe (only the samples each channel brings; no staging copy); or
   * the caller's rings (ext_in), page-locked only. */
  void *h_in, *d_in_map;
  int ext_registered; /* h_in is the caller's memory (cfg.ext_in), page-locked here */
  /* Two sample buffers of channels x buf_stride floats, one after the
   * other: channel c's hist is in buffer par[c] (ssae_fe_desc.buf), and each
   * run that takes the channel moves it to the other. */
  float *d_bufs;
  unsigned char *par;
  /* With the caller's ring: each run's new samples, channels x max_block,
   * copied in by the copy engine (rows of a ring: 2D copies, one or two
   * per run of channels that share their positions), which moves them
   * over PCIe several times faster than the kernel's reads of mapped
   * memory (a few bytes per thread in flight). */
  float *d_stage;
  ssae_fe_desc *d_desc, *h_desc;
  float *d_rows, *d_cache_rows, *h_rows;
  double *d_codes, *d_cache_codes;
  float *d_scores, *h_scores;
  size_t smem_frames, smem_windows;
};

#define CK(call, what)                                                                 \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess)                                                             \
      return ssae_err_set(err, "CUDA front end: %s: %s", what, cudaGetErrorString(e_)); \
  } while (0)

/* numpy's 'reflect' index (ssae_lm_reflect_index). */
__device__ __forceinline__ long long reflect_index(long long j, long long n) {
  if (n == 1) return 0;
  long long period = 2 * (n - 1), m = j % period;
  if (m < 0) m += period;
  if (m >= n) m = period - m;
  return m;
}

/* Channel c's sample buffer b (0, 1). */
__device__ __forceinline__ float *chan_buf(const dev_params &p, float *bufs, int b, int c) {
  return bufs + ((size_t)b * p.channels + c) * p.buf_stride;
}

/* The launches below take channels c_lo .. c_lo + gridDim.y (the run's
 * range); the parts of fe_start and fe_finish take nb of their x-blocks,
 * this block being number b of them. */

/* Channel c's new samples after its hist. */
__device__ void append_part(const dev_params &p, const ssae_fe_desc &d, const void *in,
                            float *bufs, int c, int b, int nb) {
  float *dst = chan_buf(p, bufs, d.buf, c) + d.hlen;
  for (int i = b * blockDim.x + threadIdx.x; i < d.n; i += nb * blockDim.x) {
    if (p.staged) {
      dst[i] = ((const float *)in)[(size_t)c * p.max_block + i];
      continue;
    }
    const long long j = d.src + i;
    if (d.i16)
      dst[i] = (float)((const int16_t *)in)[j] * (1.0f / 32768.0f);
    else
      dst[i] = ((const float *)in)[j];
  }
}

/* Channel c's rows <- its cache (dir 0, the carry in front) or cache <- its
 * last rows (dir 1). */
__device__ void cache_part(const dev_params &p, const ssae_fe_desc &d, float *rows, double *codes,
                           float *cache_rows, double *cache_codes, int dir, int c) {
  const int keep_rows = p.F - 1;
  int n, from;
  /* A run that makes no frame makes no window either: its carry is neither
   * read nor changed (at thousands of channels each of these launches
   * moves 3 KB a channel: ~20 us on the H100 at 8192). */
  if (d.nnew == 0) return;
  if (dir == 0) {
    n = d.carry;
    from = 0;
  } else {
    const int total = d.carry + d.nnew;
    n = d.end ? 0 : total < keep_rows ? total : keep_rows;
    from = total - n;
  }
  float *r = rows + (size_t)c * p.max_rows * p.M;
  double *k = codes + (size_t)c * p.max_rows * p.S;
  float *cr = cache_rows + (size_t)c * keep_rows * p.M;
  double *ck = cache_codes + (size_t)c * keep_rows * p.S;
  for (int i = threadIdx.x; i < n * p.M; i += blockDim.x) {
    if (dir == 0) r[i] = cr[i];
    else cr[i] = r[(size_t)from * p.M + i];
  }
  for (int i = threadIdx.x; i < n * p.S; i += blockDim.x) {
    if (dir == 0) k[i] = ck[i];
    else ck[i] = k[(size_t)from * p.S + i];
  }
}

__device__ __forceinline__ double gelu_d(double v) {
  return 0.5 * v * (1.0 + erf(v * 0.70710678118654752440));
}

/* One block per new frame. Shared memory: the spectrum (n_fft/2 double2
 * for powers of two, n_fft otherwise), the power (n_bins doubles), the dB
 * bands (n_mels floats) and two doubles of LayerNorm statistics.
 *
 * Powers of two: the real frame as an n_fft/2-point complex FFT (even
 * samples real, odd imaginary), then split into the n_fft/2+1 bins of the
 * real transform; the complex FFT in place (input in bit-reversed order),
 * two radix-2 stages per pass: each thread takes four points of a group
 * of 4h, does both stages' butterflies in registers and writes them back.
 * Against one radix-2 stage per pass over the whole frame, that is a
 * quarter of the shared-memory traffic and of the barriers: the kernel is
 * bound by shared memory (ncu, H100). */
__global__ void fe_frames(dev_params p, dev_tables t, const ssae_fe_desc *desc,
                          float *bufs, float *rows, double *codes, int c_lo) {
  extern __shared__ double2 sh[];
  const int c = c_lo + blockIdx.y, i = blockIdx.x;
  const ssae_fe_desc d = desc[c];
  if (i >= d.nnew) return;
  const int N = p.n_fft, tid = threadIdx.x, nt = blockDim.x;
  double *pw = (double *)(sh + (p.pow2 ? N / 2 : N));
  float *band = (float *)(pw + p.n_bins);
  double *stats = (double *)(band + ((p.n_mels + 1) & ~1));
  const long long start = (d.t0 + i) * p.hop - (p.center ? p.half : 0);
  const long long n_total = d.n_in + d.n, base = d.n_in - d.hlen;
  const float *s = chan_buf(p, bufs, d.buf, c);
  /* Sample k of the frame, windowed. */
  auto sample = [&](int k) -> double {
    const long long j = start + k;
    float v;
    if (j >= 0 && j < n_total) v = s[j - base];
    else if (!p.reflect) v = 0.0f;
    else if (!d.end && j < 0) v = s[-j - base];
    else v = s[reflect_index(j, n_total) - base];
    return (double)v * t.win[k];
  };
  if (p.pow2) {
    const int N2 = N / 2, lg = p.log2n - 1; /* the complex FFT's size, log2 */
    for (int n = tid; n < N2; n += nt)
      sh[__brev((unsigned)n) >> (32 - lg)] = make_double2(sample(2 * n), sample(2 * n + 1));
    __syncthreads();
    /* W_N^k = t.tw[k]; the complex FFT's W_{2h}^j = W_N^{j N/(2h)}. */
    int st = 0; /* log2 h of the next stage */
    for (; st + 2 <= lg; st += 2) {
      const int h = 1 << st;
      for (int q = tid; q < N2 / 4; q += nt) {
        const int j = q & (h - 1), a = ((q >> st) << (st + 2)) + j;
        const double2 w1 = t.tw[j << (lg - st)], w2 = t.tw[j << (lg - st - 1)];
        const double2 a0 = sh[a], a1 = sh[a + h], a2 = sh[a + 2 * h], a3 = sh[a + 3 * h];
        /* Stage st: (a0, a1) and (a2, a3) with W_{2h}^j. */
        const double2 u1 = make_double2(a1.x * w1.x - a1.y * w1.y, a1.x * w1.y + a1.y * w1.x);
        const double2 u3 = make_double2(a3.x * w1.x - a3.y * w1.y, a3.x * w1.y + a3.y * w1.x);
        const double2 b0 = make_double2(a0.x + u1.x, a0.y + u1.y);
        const double2 b1 = make_double2(a0.x - u1.x, a0.y - u1.y);
        const double2 b2 = make_double2(a2.x + u3.x, a2.y + u3.y);
        const double2 b3 = make_double2(a2.x - u3.x, a2.y - u3.y);
        /* Stage st+1: (b0, b2) with W_{4h}^j, (b1, b3) with W_{4h}^{j+h} =
         * W_{4h}^j (-i). */
        const double2 v2 = make_double2(b2.x * w2.x - b2.y * w2.y, b2.x * w2.y + b2.y * w2.x);
        const double2 r3 = make_double2(b3.x * w2.x - b3.y * w2.y, b3.x * w2.y + b3.y * w2.x);
        const double2 v3 = make_double2(r3.y, -r3.x);
        sh[a] = make_double2(b0.x + v2.x, b0.y + v2.y);
        sh[a + 2 * h] = make_double2(b0.x - v2.x, b0.y - v2.y);
        sh[a + h] = make_double2(b1.x + v3.x, b1.y + v3.y);
        sh[a + 3 * h] = make_double2(b1.x - v3.x, b1.y - v3.y);
      }
      __syncthreads();
    }
    if (st < lg) { /* an odd number of stages: the last one alone */
      const int h = 1 << st;
      for (int q = tid; q < N2 / 2; q += nt) {
        const int j = q & (h - 1), a = ((q >> st) << (st + 1)) + j;
        const double2 w = t.tw[j << (lg - st)], u = sh[a], x = sh[a + h];
        const double2 v = make_double2(x.x * w.x - x.y * w.y, x.x * w.y + x.y * w.x);
        sh[a] = make_double2(u.x + v.x, u.y + v.y);
        sh[a + h] = make_double2(u.x - v.x, u.y - v.y);
      }
      __syncthreads();
    }
    /* The real transform's bins: with A = Z[k], B = conj(Z[N2-k]) (Z[N2] =
     * Z[0]): E = (A+B)/2, O = (A-B)/(2i), X[k] = E + W_N^k O; X[N2] = E0 - O0. */
    for (int k = tid; k <= N2; k += nt) {
      const int kk = k == N2 ? 0 : k;
      const double2 A = sh[kk], Bc = sh[kk ? N2 - kk : 0];
      const double ex = 0.5 * (A.x + Bc.x), ey = 0.5 * (A.y - Bc.y);
      const double ox = 0.5 * (A.y + Bc.y), oy = -0.5 * (A.x - Bc.x);
      double xr, xi;
      if (k == N2) {
        xr = ex - ox;
        xi = ey - oy;
      } else {
        const double2 w = t.tw[k];
        xr = ex + (ox * w.x - oy * w.y);
        xi = ey + (ox * w.y + oy * w.x);
      }
      pw[k] = xr * xr + xi * xi;
    }
  } else {
    for (int k = tid; k < N; k += nt) sh[k] = make_double2(sample(k), 0.0);
    __syncthreads();
    /* A plain DFT for the other even sizes (tw[k] = cos, sin of 2 pi k/N). */
    for (int k = tid; k < p.n_bins; k += nt) {
      double re = 0.0, im = 0.0;
      long long idx = 0;
      for (int n = 0; n < N; n++) {
        const double2 w = t.tw[idx];
        re += sh[n].x * w.x;
        im -= sh[n].x * w.y;
        idx += k;
        if (idx >= N) idx -= N;
      }
      pw[k] = re * re + im * im;
    }
  }
  __syncthreads();
  if (p.power != 2.0)
    for (int k = tid; k < p.n_bins; k += nt)
      pw[k] = p.power == 1.0 ? sqrt(pw[k]) : pow(pw[k], 0.5 * p.power);
  __syncthreads();
  float *out = rows + ((size_t)c * p.max_rows + d.carry + i) * p.M;
  for (int m = tid; m < p.n_mels; m += nt) {
    const double *w = t.mel_w + t.mel_off[m];
    const double *q = pw + t.mel_start[m];
    double acc = 0.0;
    for (int k = 0; k < t.mel_len[m]; k++) acc += w[k] * q[k];
    const float v = (float)(4.3429448190325182 * log(acc + 2.220446049250313e-16));
    band[m] = v;
    out[m] = v;
  }
  __syncthreads();
  /* LayerNorm statistics of the float frame (as ssae_normalise_f). */
  if (tid < 32) {
    double a = 0.0;
    for (int m = tid; m < p.M; m += 32) a += (double)band[m];
    for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
    const double mean = a / p.M;
    double q = 0.0;
    for (int m = tid; m < p.M; m += 32) {
      const double e = (double)band[m] - mean;
      q += e * e;
    }
    for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
    if (tid == 0) {
      stats[0] = mean;
      stats[1] = 1.0 / sqrt(q / p.M + 1e-5);
    }
  }
  __syncthreads();
  double *code = codes + ((size_t)c * p.max_rows + d.carry + i) * p.S;
  for (int o = tid; o < p.S; o += nt) {
    double acc = t.enc_b[o];
    for (int m = 0; m < p.M; m++)
      acc += t.encT[(size_t)m * p.S + o] * (((double)band[m] - stats[0]) * stats[1]);
    code[o] = gelu_d(acc);
  }
}

/* Shared memory of a fe_windows block, in doubles: the windows' codes,
 * the warps' partial projections, the windows' z and hidden vectors, the
 * warps' partial squared errors. */
__host__ __device__ inline size_t win_smem_doubles(int F, int S, int L) {
  return (size_t)kWinPerBlock * ((size_t)F * S + (size_t)kWinWarps * L + 2 * (size_t)L + kWinWarps);
}

__device__ __forceinline__ double warp_sum_d(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* Each block scores kWinPerBlock windows: window w of channel c is rows w
 * .. w+F-1, and the grid's k-th window is window k % max_win of channel
 * k / max_win (at one window per channel a run, the live case, a block
 * takes eight channels' windows). The windows' codes go to shared memory
 * first (coalesced); the basis projection splits its F*S terms over the
 * block's warps, so that every weight loaded (the basis, the bottleneck,
 * the folded decoder: FP64, read through L1/L2) serves all of the block's
 * windows while four warps a block hide the loads' latency (one warp per
 * four windows, the layout before, kept 16 warps an SM busy at 8192
 * windows and took 187 us; ncu, H100). */
__global__ void __launch_bounds__(32 * kWinWarps)
    fe_windows(dev_params p, dev_tables t, const ssae_fe_desc *desc, const float *rows,
               const double *codes, float *scores, int max_win, int c_lo, int c_hi) {
  extern __shared__ double wsh[];
  __shared__ long long r_s[kWinPerBlock];
  __shared__ int ok_s[kWinPerBlock];
  const int W = kWinPerBlock, NW = kWinWarps;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int L = p.L, C = p.F * p.S, FM = p.F * p.M;
  if (tid < W) {
    const long long k = (long long)blockIdx.x * W + tid;
    const int c = c_lo + (int)(k / max_win), w = (int)(k % max_win);
    ok_s[tid] = c < c_hi && w <= desc[c].carry + desc[c].nnew - p.F;
    r_s[tid] = (long long)c * p.max_rows + w;
  }
  __syncthreads();
  int f = -1;
  for (int v = W - 1; v >= 0; v--)
    if (ok_s[v]) f = v;
  if (f < 0) return; /* the whole block leaves: no barrier follows */
  /* A window past its channel's is computed on a valid one's data (its
   * score is not written), so the loops below stay branch-free. */
  long long r[kWinPerBlock];
  for (int v = 0; v < W; v++) r[v] = ok_s[v] ? r_s[v] : r_s[f];
  double *cod = wsh;                         /* W x C */
  double *part = cod + (size_t)W * C;        /* NW x W x L */
  double *z = part + (size_t)NW * W * L;     /* W x 2L: z, then the hidden vector */
  double *red = z + (size_t)W * 2 * L;       /* NW x W */
  for (int v = 0; v < W; v++) {
    const double *src = codes + (size_t)r[v] * p.S;
    for (int k = tid; k < C; k += blockDim.x) cod[v * C + k] = src[k];
  }
  __syncthreads();
  {
    const int chunk = (C + NW - 1) / NW, kb = warp * chunk, ke = min(C, kb + chunk);
    for (int l = lane; l < L; l += 32) {
      double acc[kWinPerBlock];
      for (int v = 0; v < W; v++) acc[v] = 0.0;
      for (int k = kb; k < ke; k++) {
        const double b = t.B[(size_t)k * L + l];
        for (int v = 0; v < W; v++) acc[v] += b * cod[v * C + k];
      }
      for (int v = 0; v < W; v++) part[((size_t)warp * W + v) * L + l] = acc[v];
    }
  }
  __syncthreads();
  /* LayerNorm and the bottleneck: a warp per window. */
  for (int v = warp; v < W; v += NW) {
    double *zv = z + (size_t)v * 2 * L;
    double a = 0.0;
    for (int l = lane; l < L; l += 32) {
      double sum = 0.0;
      for (int w = 0; w < NW; w++) sum += part[((size_t)w * W + v) * L + l];
      zv[l] = sum;
      a += sum;
    }
    const double mean = warp_sum_d(a) / L;
    double q = 0.0;
    for (int l = lane; l < L; l += 32) {
      const double e = zv[l] - mean;
      q += e * e;
    }
    const double rstd = 1.0 / sqrt(warp_sum_d(q) / L + 1e-5);
    __syncwarp();
    for (int o = lane; o < L; o += 32) {
      double acc = t.bn_b[o];
      for (int k = 0; k < L; k++) acc += t.bnT[(size_t)k * L + o] * ((zv[k] - mean) * rstd);
      zv[L + o] = gelu_d(acc);
    }
  }
  __syncthreads();
  /* The decoder over the block's threads, every window at once. */
  double e2[kWinPerBlock];
  for (int v = 0; v < W; v++) e2[v] = 0.0;
  for (int j = tid; j < FM; j += blockDim.x) {
    double y[kWinPerBlock];
    const double bj = t.dec_b[j % p.M];
    for (int v = 0; v < W; v++) y[v] = bj;
    for (int k = 0; k < L; k++) {
      const double dk = t.D[(size_t)k * FM + j];
      for (int v = 0; v < W; v++) y[v] += dk * z[(size_t)v * 2 * L + L + k];
    }
    for (int v = 0; v < W; v++) {
      const double e = y[v] - (double)rows[(size_t)r[v] * p.M + j];
      e2[v] += e * e;
    }
  }
  for (int v = 0; v < W; v++) {
    const double sum = warp_sum_d(e2[v]);
    if (lane == 0) red[warp * W + v] = sum;
  }
  __syncthreads();
  if (tid < W && ok_s[tid]) {
    double sum = 0.0;
    for (int w = 0; w < NW; w++) sum += red[w * W + tid];
    scores[r_s[tid]] = (float)(sum / FM);
  }
}

/* Channel c's newest n_fft samples to the front of its other buffer. */
__device__ void compact_part(const dev_params &p, const ssae_fe_desc &d, float *bufs, int c, int b,
                             int nb) {
  const float *s = chan_buf(p, bufs, d.buf, c) + (d.hlen + d.n - d.keep);
  float *o = chan_buf(p, bufs, 1 - d.buf, c);
  /* Four loads in flight before the stores (the buffers may alias as far
   * as the compiler knows): one value per thread and block, the layout
   * before, left the copy latency-bound (67 us for 8192 channels; ncu). */
  const int step = nb * blockDim.x;
  for (int i = b * blockDim.x + threadIdx.x; i < d.keep; i += 4 * step) {
    float v[4];
    for (int u = 0; u < 4; u++) v[u] = i + u * step < d.keep ? s[i + u * step] : 0.0f;
    for (int u = 0; u < 4; u++)
      if (i + u * step < d.keep) o[i + u * step] = v[u];
  }
}

/* A run's first launch: x-blocks 0 .. n_app-1 append the new samples; one
 * more, when the run makes frames (carry), puts the carry in front of the
 * rows. Its last: x-blocks 0 .. n_cmp-1 compact the samples; one more, when
 * the run makes frames, saves the last rows to the cache. Each pair in one
 * launch: a run of one group of many is a few microseconds of work, and
 * each launch costs about as much. */
__global__ void fe_start(dev_params p, const ssae_fe_desc *desc, const void *in, float *bufs,
                         float *rows, double *codes, float *cache_rows, double *cache_codes,
                         int n_app, int c_lo) {
  const int c = c_lo + blockIdx.y, b = blockIdx.x;
  const ssae_fe_desc d = desc[c];
  if (b < n_app) append_part(p, d, in, bufs, c, b, n_app);
  else cache_part(p, d, rows, codes, cache_rows, cache_codes, 0, c);
}

__global__ void fe_finish(dev_params p, const ssae_fe_desc *desc, float *bufs, float *rows,
                          double *codes, float *cache_rows, double *cache_codes, int n_cmp,
                          int c_lo) {
  const int c = c_lo + blockIdx.y, b = blockIdx.x;
  const ssae_fe_desc d = desc[c];
  if (b < n_cmp) compact_part(p, d, bufs, c, b, n_cmp);
  else cache_part(p, d, rows, codes, cache_rows, cache_codes, 1, c);
}

extern "C" int ssae_fe_dev_present(void) {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
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
  if (d->ext_registered) cudaHostUnregister(d->cfg.ext_in);
  else cudaFreeHost(d->h_in);
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
  const size_t M = (size_t)g->M, S = (size_t)g->S, L = (size_t)g->L, F = (size_t)g->F;
  struct part {
    const void *src;
    size_t n;
  } parts[] = {{g->win, sizeof(double) * (size_t)N},
               {g->mel_w, sizeof(double) * (size_t)g->mel_nw},
               {g->encT, sizeof(double) * M * S},
               {g->enc_b, sizeof(double) * S},
               {g->B, sizeof(double) * L * F * S},
               {g->bnT, sizeof(double) * L * L},
               {g->bn_b, sizeof(double) * L},
               {g->D, sizeof(double) * F * M * L},
               {g->dec_b, sizeof(double) * M},
               {tw, sizeof(double2) * (size_t)ntw},
               {g->mel_start, sizeof(int) * (size_t)g->n_mels},
               {g->mel_len, sizeof(int) * (size_t)g->n_mels},
               {g->mel_off, sizeof(int) * (size_t)g->n_mels}};
  const int np = (int)(sizeof parts / sizeof parts[0]);
  size_t total = 0, at[13];
  for (int i = 0; i < np; i++) table_put(NULL, &total, parts[i].src, parts[i].n);
  char *img = (char *)malloc(total);
  if (!img) {
    free(tw);
    return ssae_err_set(err, "out of memory for the GPU front end's tables");
  }
  size_t off = 0;
  for (int i = 0; i < np; i++) at[i] = table_put(img, &off, parts[i].src, parts[i].n);
  free(tw);
  cudaError_t e = cudaMalloc(&d->d_tables, total);
  if (e == cudaSuccess) e = cudaMemcpy(d->d_tables, img, total, cudaMemcpyHostToDevice);
  free(img);
  CK(e, "uploading the tables");
  char *b = (char *)d->d_tables;
  d->t.win = (const double *)(b + at[0]);
  d->t.mel_w = (const double *)(b + at[1]);
  d->t.encT = (const double *)(b + at[2]);
  d->t.enc_b = (const double *)(b + at[3]);
  d->t.B = (const double *)(b + at[4]);
  d->t.bnT = (const double *)(b + at[5]);
  d->t.bn_b = (const double *)(b + at[6]);
  d->t.D = (const double *)(b + at[7]);
  d->t.dec_b = (const double *)(b + at[8]);
  d->t.tw = (const double2 *)(b + at[9]);
  d->t.mel_start = (const int *)(b + at[10]);
  d->t.mel_len = (const int *)(b + at[11]);
  d->t.mel_off = (const int *)(b + at[12]);
  return 0;
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
  if (cfg->channels < 1 || cfg->channels > 65535 || cfg->max_block < 1 || cfg->max_block > (1u << 30) ||
      cfg->max_rows < cfg->F || cfg->M != cfg->n_mels) {
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
  d->smem_frames = sizeof(double2) * (size_t)(pow2 ? N / 2 : N) + sizeof(double) * (size_t)p.n_bins +
                   sizeof(float) * (size_t)((p.n_mels + 1) & ~1) + 2 * sizeof(double);
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
  d->smem_windows = sizeof(double) * win_smem_doubles(p.F, p.S, p.L);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(fe_windows, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)d->smem_windows);
  if (e == cudaSuccess) e = cudaMalloc(&d->d_bufs, sizeof(float) * 2 * ch * p.buf_stride);
  if (e == cudaSuccess && !(d->par = (unsigned char *)calloc(ch, 1))) e = cudaErrorMemoryAllocation;
  if (e == cudaSuccess) e = cudaMalloc(&d->d_desc, sizeof(ssae_fe_desc) * ch);
  p.staged = cfg->ext_in != NULL;
  if (e == cudaSuccess && p.staged)
    e = cudaMalloc(&d->d_stage, sizeof(float) * ch * cfg->max_block);
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
      d->ext_registered = 1;
      d->h_in = cfg->ext_in;
    }
  } else if (e == cudaSuccess) {
    e = cudaHostAlloc(&d->h_in, in_bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e == cudaSuccess) e = cudaHostGetDevicePointer(&d->d_in_map, d->h_in, 0);
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
  if (d->ext_registered) return NULL;
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
        float *dst = d->d_stage + (size_t)c0 * p.max_block;
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
  }
  /* The carry moves only in runs that make frames (cache_part skips the
   * channels that make none). */
  const int carry = p.F > 1 && max_new > 0;
  const int n_app = max_n ? ((max_n + 255) / 256 < 64 ? (max_n + 255) / 256 : 64) : 0;
  if (n_app + carry) {
    fe_start<<<dim3((unsigned)(n_app + carry), (unsigned)ch), poison ? 0 : 256, 0, s>>>(
        p, d->d_desc, p.staged ? d->d_stage : d->d_in_map, d->d_bufs, d->d_rows, d->d_codes,
        d->d_cache_rows, d->d_cache_codes, n_app, lo);
    CK(cudaGetLastError(), "append launch");
  }
  if (max_new) {
    fe_frames<<<dim3((unsigned)max_new, (unsigned)ch), kFrameThreads, d->smem_frames, s>>>(
        p, d->t, d->d_desc, d->d_bufs, d->d_rows, d->d_codes, lo);
    CK(cudaGetLastError(), "frame launch");
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
