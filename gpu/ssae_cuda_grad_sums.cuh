/* The partial gradients' sums after the CUDA training kernels (k_fwd_bwd,
 * k_vjp, k_vjp_tc): each block's partial gradient summed in a fixed order
 * (k_part_sum), and after k_vjp_tc's the folded decoder's gradient taken
 * back to the basis and Wd (k_decoder_grad), queued together by
 * queue_part_sums; with a grad_dest they also write the finished gradient
 * and loss, where no k_update follows. Included by ssae_cuda_train.cu and
 * ssae_cuda_train_vjp.cu after ssae_cuda_train_kernels.cuh (file-local:
 * each has its own copy). */
#ifndef SSAE_CUDA_GRAD_SUMS_CUH
#define SSAE_CUDA_GRAD_SUMS_CUH

#include "ssae_cuda_train_kernels.cuh"

namespace {

/* Each value's sum over the nparts partial gradients (block b's count
 * values at part + b * count: the P parameters', and for k_vjp_tc the
 * folded decoder's dD^T after them) into psum, in double and in a fixed
 * order (the same bits on every run): kSumLanes threads a value, lane q
 * adding the partials b = q, q + kSumLanes, ... in turn, the lanes' sums
 * then added in lane order. A thread a parameter adding all nparts in turn
 * (132 on an H100 or H200, 70 blocks) took 25 us of a 0.58 ms training
 * step at 65,536 windows: one chain of loads and additions per thread. */
const int kSumLanes = 4, kSumParams = kThreads / kSumLanes;
/* The floats of a block's partial gradient: the P parameters', and after
 * k_vjp_tc's (tc) the folded decoder's dD^T after them (L rows of F M; the
 * basis's entries then hold only its encoder-side term, Wd's are zero),
 * which k_decoder_grad takes back through the fold once they are summed. */
__host__ __device__ inline int part_floats(const dims_t &d, bool tc) {
  return tc ? d.P + d.L * d.F * d.M : d.P;
}
inline unsigned grid_part_sum(int count) {
  return (unsigned)((count + kSumParams - 1) / kSumParams);
}
/* Whether parameter i's gradient is complete once summed: all but the
 * basis's and Wd's, which k_decoder_grad completes after k_vjp_tc. */
__device__ __forceinline__ bool summed_is_final(const dims_t &d, int i) {
  return i < d.P && (i < d.off[4] || i >= d.off[5]) && (i < d.off[9] || i >= d.off[10]);
}

/* gout (NULL: none; k_vjp_tc's partials only) gets the complete gradients
 * as floats (summed_is_final) in place of their sums in psum: the step's
 * gradient output without a kernel of its own (k_decoder_grad writes the
 * rest). */
__global__ void __launch_bounds__(kThreads)
    k_part_sum(int count, const float *__restrict__ part, int nparts, double *__restrict__ psum,
               dims_t d, float *__restrict__ gout) {
  __shared__ double lanes[kThreads];
  const int j = threadIdx.x % kSumParams, q = threadIdx.x / kSumParams;
  const int i = (int)blockIdx.x * kSumParams + j;
  double acc = 0;
  if (i < count) {
#pragma unroll 8
    for (int b = q; b < nparts; b += kSumLanes) acc += part[(size_t)b * count + i];
  }
  lanes[threadIdx.x] = acc;
  __syncthreads();
  if (q == 0 && i < count) {
    double s = lanes[j];
    for (int l = 1; l < kSumLanes; l++) s += lanes[l * kSumParams + j];
    if (gout && summed_is_final(d, i))
      gout[i] = (float)s;
    else
      psum[i] = s;
  }
}

/* a . b over n terms (a[i * sa], b[i * sb]) in double in four chains (i
 * mod 4) added in a fixed order: a quarter the latency of one chain, the
 * same bits on every run */
template <class TA, class TB>
__device__ __forceinline__ double dot4(const TA *a, int sa, const TB *b, int sb, int n) {
  double c0 = 0, c1 = 0, c2 = 0, c3 = 0;
  int i = 0;
  for (; i + 3 < n; i += 4) {
    c0 += (double)a[i * sa] * (double)b[i * sb];
    c1 += (double)a[(i + 1) * sa] * (double)b[(i + 1) * sb];
    c2 += (double)a[(i + 2) * sa] * (double)b[(i + 2) * sb];
    c3 += (double)a[(i + 3) * sa] * (double)b[(i + 3) * sb];
  }
  for (; i < n; i++) c0 += (double)a[i * sa] * (double)b[i * sb];
  return (c0 + c1) + (c2 + c3);
}

/* k_decoder_grad's blocks: a basis row each, then Wd's 8 x 8 tiles (and
 * with a loss to write one more, which writes it) */
const int kDgTile = 8;
__host__ __device__ inline unsigned grid_decoder_grad(const dims_t &d) {
  return (unsigned)(d.L + ((d.M + kDgTile - 1) / kDgTile) * ((d.S + kDgTile - 1) / kDgTile));
}
/* its dynamic shared memory: the larger of a dD^T row and a basis row's
 * gradient in double and Wd (blocks [0, L)), and a tile's F L x 8 of dD^T
 * (double) and of the basis with kSumLanes partial sums a weight (the
 * others) */
inline size_t smem_decoder_grad(const dims_t &d) {
  const size_t K = (size_t)d.F * d.L;
  const size_t row = sizeof(double) * (d.F * d.M + d.C) + sizeof(float) * d.M * d.S;
  const size_t tile = (sizeof(double) + sizeof(float)) * K * kDgTile +
                      sizeof(double) * kSumLanes * kDgTile * kDgTile;
  return row > tile ? row : tile;
}

/* The folded decoder's gradient taken back through the fold, once per step
 * from k_vjp_tc's blocks' dD^T summed (psum + P: L rows of F M), in double,
 * where each block had done it for its own part (two products as large as
 * a sixth of a group's each): the normalised basis's dB_f += dD^T_f Wd
 * (blocks [0, L), a basis row each) and dWd = sum over f of
 * (dD^T_f)^T B_f (the other blocks, a tile of 8 x 8 weights each,
 * kSumLanes threads a weight, each a quarter of the F L terms, added in
 * lane order), into psum's sums of the other terms (the blocks' dWd is
 * zero). The operands are staged in shared memory, a thread's loads in
 * flight together: read from L2 in the sums' loops, a trip each, the
 * kernel took 2.4 times as long (H200).
 * With gout (k_part_sum having written the other gradients there) it
 * writes these as floats to gout instead, each basis row's through the
 * normalisation (gnorm: the rows' norms) as k_update's UPD_GRAD_OUT does,
 * and with loss_out one more block writes the loss: the nparts blocks'
 * squared errors (part_sse) summed in a fixed order, times loss_scale. */
__global__ void __launch_bounds__(kThreads)
    k_decoder_grad(dims_t d, const float *__restrict__ P, const float *__restrict__ bn,
                   double *__restrict__ psum, const double *__restrict__ gnorm,
                   float *__restrict__ gout, const double *__restrict__ part_sse, int nparts,
                   float *__restrict__ loss_out, double loss_scale) {
  extern __shared__ double dg_smem[];
  const int FM = d.F * d.M, tid = threadIdx.x;
  const double *gdt = psum + d.P;
  if (blockIdx.x == grid_decoder_grad(d)) {
    if (tid < 32) {
      const double s = blocks_sse(part_sse, nparts, tid); /* as k_update's */
      if (tid == 0) *loss_out = (float)(s * loss_scale);
    }
    return;
  }
  if ((int)blockIdx.x < d.L) {
    __shared__ double red[kThreads];
    const int l = blockIdx.x;
    const size_t o = d.off[4] + (size_t)l * d.C;
    double *row = dg_smem, *dB = row + FM;
    float *wd = reinterpret_cast<float *>(dB + d.C);
#pragma unroll 16
    for (int i = tid; i < d.M * d.S; i += kThreads) wd[i] = __ldg(P + d.off[9] + i);
    for (int c = tid; c < FM; c += kThreads) row[c] = gdt[(size_t)l * FM + c];
    __syncthreads();
    for (int c = tid; c < d.F * d.S; c += kThreads) {
      const int f = c / d.S, s = c % d.S;
      const double v = psum[o + c] + dot4(row + f * d.M, 1, wd + s, d.S, d.M);
      if (gout)
        dB[c] = v;
      else
        psum[o + c] = v;
    }
    if (gout) {
      basis_row_back(dB, P + o, gnorm[l], d.C, red);
      for (int c = tid; c < d.C; c += kThreads) gout[o + c] = (float)dB[c];
    }
    return;
  }
  const int K = d.F * d.L, nts = (d.S + kDgTile - 1) / kDgTile;
  const int tile = (int)blockIdx.x - d.L, m0 = tile / nts * kDgTile, s0 = tile % nts * kDgTile;
  /* k = f L + l: gt[k][j] = dD^T[l][f M + m0 + j], bt[k][j] = B[l][f S + s0 + j] */
  double *gt = dg_smem, *lanes = gt + K * kDgTile;
  float *bt = reinterpret_cast<float *>(lanes + kSumLanes * kDgTile * kDgTile);
#pragma unroll 8
  for (int i = tid; i < K * kDgTile; i += kThreads) {
    const int k = i / kDgTile, j = i % kDgTile, f = k / d.L, l = k % d.L;
    gt[i] = m0 + j < d.M ? gdt[(size_t)l * FM + f * d.M + m0 + j] : 0.0;
    bt[i] = s0 + j < d.S ? __ldg(bn + (size_t)l * d.C + f * d.S + s0 + j) : 0.f;
  }
  __syncthreads();
  const int per = (K + kSumLanes - 1) / kSumLanes;
  for (int i = tid; i < kSumLanes * kDgTile * kDgTile; i += kThreads) {
    const int q = i / (kDgTile * kDgTile), mj = i / kDgTile % kDgTile, sj = i % kDgTile;
    const int k0 = q * per, n = min(K, k0 + per) - k0;
    lanes[i] = dot4(gt + k0 * kDgTile + mj, kDgTile, bt + k0 * kDgTile + sj, kDgTile, n);
  }
  __syncthreads();
  for (int i = tid; i < kDgTile * kDgTile; i += kThreads) {
    const int m = m0 + i / kDgTile, s = s0 + i % kDgTile;
    if (m >= d.M || s >= d.S) continue;
    double v = lanes[i];
    for (int q = 1; q < kSumLanes; q++) v += lanes[q * kDgTile * kDgTile + i];
    const size_t o = d.off[9] + (size_t)m * d.S + s;
    if (gout)
      gout[o] = (float)(psum[o] + v);
    else
      psum[o] += v;
  }
}

/* Where queue_part_sums puts the step's gradient when no k_update follows
 * (k_vjp_tc's partials only): gout gets the complete gradient as floats,
 * through the basis's normalisation (gnorm: the rows' norms), and loss_out
 * (NULL: none) the nparts blocks' squared errors (part_sse) summed times
 * loss_scale. */
struct grad_dest {
  float *gout;
  const double *gnorm, *part_sse;
  float *loss_out;
  double loss_scale;
};

/* Queues the sums of the first nparts partial gradients at part (tc: made
 * by k_vjp_tc) into psum on s: k_part_sum, then for k_vjp_tc's
 * k_decoder_grad (params, bn: the parameters and the normalised basis the
 * step ran on); with out (tc only) the gradient and loss to out's places
 * instead. On a launch's failure, *what names it. */
inline cudaError_t queue_part_sums(const dims_t &d, bool tc, const float *part, int nparts,
                                   double *psum, const float *params, const float *bn,
                                   cudaStream_t s, const char **what,
                                   const grad_dest *out = NULL) {
  const int count = part_floats(d, tc);
  k_part_sum<<<grid_part_sum(count), kThreads, 0, s>>>(count, part, nparts, psum, d,
                                                       out ? out->gout : NULL);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    *what = "launching the gradient sum";
    return e;
  }
  if (!tc) return cudaSuccess;
  const grad_dest none = {NULL, NULL, NULL, NULL, 0};
  const grad_dest &o = out ? *out : none;
  k_decoder_grad<<<grid_decoder_grad(d) + (o.loss_out ? 1 : 0), kThreads, smem_decoder_grad(d),
                   s>>>(d, params, bn, psum, o.gnorm, o.gout, o.part_sse, nparts, o.loss_out,
                        o.loss_scale);
  e = cudaGetLastError();
  if (e != cudaSuccess) *what = "launching the decoder's gradient";
  return e;
}

}  // namespace

#endif
