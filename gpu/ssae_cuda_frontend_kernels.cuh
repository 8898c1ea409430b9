/* The GPU front end's kernels, included by ssae_cuda_frontend.cu (the
 * device object: tables, buffers, launches, waits) and nowhere else.
 *
 * One run is five launches on one stream over the run's channels, then the
 * copies out and one wait:
 *   start    the new samples (float, or int16 / 32768), read from the
 *            staging buffer that the copy engine filled from the blocks
 *            or from the caller's ring, after each
 *            channel's hist; and each channel's cached frames and codes in
 *            front of its rows (when the run makes frames)
 *   frames   one block per new frame: window, FFT, power, mel, dB (double
 *            precision: float rounding inside the FFT leaves errors of
 *            0.01 dB on bins 80-90 dB under a frame's peak, ten times the
 *            SPEC's parity, see dsp/ssae_fft.h)
 *   codes    sixteen frames a block: their LayerNorm, slice encoder and
 *            GELU, once per frame
 *   windows  eight windows a block (each weight loaded once for the
 *            eight): their F codes, latent, bottleneck, the folded decoder
 *            and the squared error against their F frames
 *   finish   each channel's newest n_fft samples to the front of its other
 *            sample buffer (two buffers: no launch reads what it writes),
 *            and its last F-1 rows back to its cache
 *   copies   scores (and frames) to page-locked host memory
 * The model runs in double as the CPU reference does (ssae_cpu.c), so the
 * scores agree with it to float rounding. */
#ifndef SSAE_CUDA_FRONTEND_KERNELS_CUH
#define SSAE_CUDA_FRONTEND_KERNELS_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

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
/* fe_codes: frames a block (each encoder weight loaded once for the
 * sixteen: in fe_frames, a block per frame, the weights were a third of
 * the kernel's L1 traffic). */
const int kCodeFrames = 16;
/* fe_windows: warps a block, windows a block. */
const int kWinWarps = 4;
const int kWinPerBlock = 8;

struct dev_tables {
  /* mel_wT: band m's weight k at [k * n_mels + m] (zero past its length),
   * so that the band threads' loads are coalesced */
  const double *win, *mel_wT, *encT, *enc_b, *B, *bnT, *bn_b, *D, *dec_b;
  const double2 *tw; /* pow2: exp(-2 pi i k/N), k < N/2; else cos/sin of 2 pi k/N, k < N */
  /* pow2: the complex FFT's stage twiddles, W_{2h}^j for j < h at [h - 1 + j]
   * (the values of tw, laid out so that a pass's lanes read consecutive
   * ones) */
  const double2 *tws;
  const int *mel_start, *mel_len;
};

struct dev_params {
  int channels, n_fft, hop, half, center, reflect, pow2, log2n, n_bins, n_mels, pcm_i16;
  int staged; /* the caller's ring (ext_in): this run's samples were copied to d_stage */
  double power;
  int M, F, L, S, max_rows;
  size_t max_block, buf_stride;
};

}  // namespace

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
 * for powers of two, n_fft otherwise) and the power (n_bins doubles).
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
                          float *bufs, float *rows, int c_lo) {
  extern __shared__ double2 sh[];
  const int c = c_lo + blockIdx.y, i = blockIdx.x;
  const ssae_fe_desc d = desc[c];
  if (i >= d.nnew) return;
  const int N = p.n_fft, tid = threadIdx.x, nt = blockDim.x;
  double *pw = (double *)(sh + (p.pow2 ? N / 2 : N));
  const long long start = (d.t0 + i) * p.hop - (p.center ? p.half : 0);
  const long long n_total = d.n_in + d.n, base = d.n_in - d.hlen;
  const float *s = chan_buf(p, bufs, d.buf, c);
  /* Sample k of the frame. */
  auto raw = [&](int k) -> float {
    const long long j = start + k;
    if (j >= 0 && j < n_total) return s[j - base];
    if (!p.reflect) return 0.0f;
    if (!d.end && j < 0) return s[-j - base];
    return s[reflect_index(j, n_total) - base];
  };
  if (p.pow2) {
    const int N2 = N / 2, lg = p.log2n - 1; /* the complex FFT's size, log2 */
    /* Point n lives at sh[at(n)]: its low three bits (a double2's place
     * among the eight a 128-byte row holds) XORed with bits 2-4, 5-7 and
     * 8-10, so that the eight lanes of each quarter-warp's 16-byte access
     * fall in different rows' slots in the bit-reversed stores and the
     * first passes (strides of 4 and 16 points), where unswizzled they
     * took 2 to 8 wavefronts each (34 M bank conflicts in an offline run
     * of 32,640 frames, Nsight Compute). A bijection on every block of
     * eight points: the same arithmetic, the same bits. */
    auto at = [](int n) { return n ^ (((n >> 2) ^ (n >> 5) ^ (n >> 8)) & 7); };
    const double2 *win2 = (const double2 *)t.win; /* samples 2n, 2n+1 in one load */
    for (int n = tid; n < N2; n += nt) {
      const double2 w = win2[n];
      sh[at((int)(__brev((unsigned)n) >> (32 - lg)))] =
          make_double2((double)raw(2 * n) * w.x, (double)raw(2 * n + 1) * w.y);
    }
    __syncthreads();
    /* The complex FFT's W_{2h}^j = W_N^{j N/(2h)} = t.tws[h - 1 + j]. */
    int st = 0; /* log2 h of the next stage */
    for (; st + 2 <= lg; st += 2) {
      const int h = 1 << st;
      for (int q = tid; q < N2 / 4; q += nt) {
        const int j = q & (h - 1), a = ((q >> st) << (st + 2)) + j;
        const double2 w1 = t.tws[h - 1 + j], w2 = t.tws[2 * h - 1 + j];
        const double2 a0 = sh[at(a)], a1 = sh[at(a + h)], a2 = sh[at(a + 2 * h)],
                     a3 = sh[at(a + 3 * h)];
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
        sh[at(a)] = make_double2(b0.x + v2.x, b0.y + v2.y);
        sh[at(a + 2 * h)] = make_double2(b0.x - v2.x, b0.y - v2.y);
        sh[at(a + h)] = make_double2(b1.x + v3.x, b1.y + v3.y);
        sh[at(a + 3 * h)] = make_double2(b1.x - v3.x, b1.y - v3.y);
      }
      __syncthreads();
    }
    if (st < lg) { /* an odd number of stages: the last one alone */
      const int h = 1 << st;
      for (int q = tid; q < N2 / 2; q += nt) {
        const int j = q & (h - 1), a = ((q >> st) << (st + 1)) + j;
        const double2 w = t.tws[h - 1 + j], u = sh[at(a)], x = sh[at(a + h)];
        const double2 v = make_double2(x.x * w.x - x.y * w.y, x.x * w.y + x.y * w.x);
        sh[at(a)] = make_double2(u.x + v.x, u.y + v.y);
        sh[at(a + h)] = make_double2(u.x - v.x, u.y - v.y);
      }
      __syncthreads();
    }
    /* The real transform's bins: with A = Z[k], B = conj(Z[N2-k]) (Z[N2] =
     * Z[0]): E = (A+B)/2, O = (A-B)/(2i), X[k] = E + W_N^k O; X[N2] = E0 - O0. */
    for (int k = tid; k <= N2; k += nt) {
      const int kk = k == N2 ? 0 : k;
      const double2 A = sh[at(kk)], Bc = sh[at(kk ? N2 - kk : 0)];
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
    for (int k = tid; k < N; k += nt) sh[k] = make_double2((double)raw(k) * t.win[k], 0.0);
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
    const double *q = pw + t.mel_start[m];
    const int len = t.mel_len[m];
    double acc = 0.0;
    for (int k = 0; k < len; k++) acc += t.mel_wT[k * p.n_mels + m] * q[k];
    out[m] = (float)(4.3429448190325182 * log(acc + 2.220446049250313e-16));
  }
}

/* Shared memory of a fe_codes block, in doubles: the frames' normalised
 * bands. */
__host__ __device__ inline size_t code_smem_doubles(int M) { return (size_t)kCodeFrames * M; }

/* Each block encodes kCodeFrames new frames: the grid's k-th is new frame
 * k % max_new of channel c_lo + k / max_new (at one new frame per channel
 * a run, the live case, a block takes sixteen channels' frames). A warp
 * per frame makes its LayerNorm statistics from the float frame (as
 * ssae_normalise_f) and its normalised bands; then thread o of each half
 * of the block makes output o of eight frames, every weight loaded once
 * for them. */
__global__ void __launch_bounds__(128)
    fe_codes(dev_params p, dev_tables t, const ssae_fe_desc *desc, const float *rows,
             double *codes, int max_new, int c_lo, int c_hi) {
  extern __shared__ double xn[]; /* kCodeFrames x M */
  __shared__ long long r_s[kCodeFrames];
  __shared__ int ok_s[kCodeFrames];
  const int FR = kCodeFrames, M = p.M, S = p.S;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, nw = blockDim.x / 32;
  if (tid < FR) {
    const long long k = (long long)blockIdx.x * FR + tid;
    const int c = c_lo + (int)(k / max_new), i = (int)(k % max_new);
    ok_s[tid] = c < c_hi && i < desc[c].nnew;
    r_s[tid] = ok_s[tid] ? (long long)c * p.max_rows + desc[c].carry + i : -1;
  }
  __syncthreads();
  int f0 = -1;
  for (int v = FR - 1; v >= 0; v--)
    if (ok_s[v]) f0 = v;
  if (f0 < 0) return; /* the whole block leaves: no barrier follows */
  for (int v = warp; v < FR; v += nw) {
    /* A frame past its channel's is made from a valid one's (not written). */
    const float *band = rows + (size_t)(ok_s[v] ? r_s[v] : r_s[f0]) * M;
    double a = 0.0;
    for (int m = lane; m < M; m += 32) a += (double)band[m];
    for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
    const double mean = a / M;
    double q = 0.0;
    for (int m = lane; m < M; m += 32) {
      const double e = (double)band[m] - mean;
      q += e * e;
    }
    for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
    const double rstd = 1.0 / sqrt(q / M + 1e-5);
    for (int m = lane; m < M; m += 32) xn[v * M + m] = ((double)band[m] - mean) * rstd;
  }
  __syncthreads();
  const int half = FR / 2, per = blockDim.x / 2, v0 = tid / per * half;
  for (int o = tid % per; o < S; o += per) {
    double acc[kCodeFrames / 2];
    const double b = t.enc_b[o];
#pragma unroll
    for (int v = 0; v < half; v++) acc[v] = b;
    for (int m = 0; m < M; m++) {
      const double w = t.encT[(size_t)m * S + o];
#pragma unroll
      for (int v = 0; v < half; v++) acc[v] += w * xn[(v0 + v) * M + m];
    }
#pragma unroll
    for (int v = 0; v < half; v++)
      if (ok_s[v0 + v]) codes[(size_t)r_s[v0 + v] * S + o] = gelu_d(acc[v]);
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
  constexpr int W = kWinPerBlock, NW = kWinWarps;
  __shared__ long long r_s[W], rv_s[W];
  __shared__ int ok_s[W];
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
  if (tid < W) rv_s[tid] = ok_s[tid] ? r_s[tid] : r_s[f];
  __syncthreads();
  /* The rows from shared memory (in registers they took eight pairs
   * across the whole kernel: 198-200 us against 217-220 for an offline
   * run of 31,520 windows; 12 or 16 windows a block, fewer blocks
   * resident, 210-212 us; ncu, H100). */
  const long long *r = rv_s;
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
      double acc[W];
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
  double e2[W];
  for (int v = 0; v < W; v++) e2[v] = 0.0;
  for (int j = tid; j < FM; j += blockDim.x) {
    double y[W];
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

#endif
