/* The folded weights of the forward kernels and where each part sits.
 *
 * The weights arrive pre-folded (ssae_cuda_instance.cu, in double
 * precision, once per model):
 *   - LayerNorm weight/bias fold into the following Linear:
 *     W'(g*n + b) + c = (W diag g) n + (W b + c);
 *   - reconstruction and decoder fold into one matrix per slice,
 *     D_f = W_d B_f^T (M x L), since y_f = W_d (B_f^T z') + b_d.
 * Both are exact re-associations of the same function; the second removes
 * 20480 of the 62464 multiply-adds per window (default dims).
 *
 * Folded weight layout (floats, every segment padded to 4 floats), each
 * matrix stored transposed ([k][row]) so that a thread's output rows are
 * contiguous:
 *   WeT [M][S]  BT [C][L]  WbT [L][L]  DT [L][F*M]  be [S]  bb [L]  bd [M]
 * followed by the row-major copies the generic kernel reads:
 *   We [S][M]  B [L][C]  Wb [L][L]  D [F*M][L]
 */
#ifndef SSAE_CUDA_LAYOUT_CUH
#define SSAE_CUDA_LAYOUT_CUH

#include <cuda_runtime.h>
#include <stddef.h>

struct ssae_cuda_layout {
  int M, F, L, S;
  int we, bt, wbt, dt, be, bb, bd; /* float offsets into the folded weights */
  int we_r, b_r, wb_r, d_r;        /* the same matrices row-major (generic) */
  int tiled_total;                 /* floats of the part the shared-memory kernels copy */
  int total;                       /* floats, multiple of 4 */
};

static inline int ssae_cuda_pad4(int v) { return (v + 3) & ~3; }

/* The layout of a model of M mels, F frames, latent L, slice latent S. */
static inline ssae_cuda_layout ssae_cuda_layout_make(int M, int F, int L, int S) {
  ssae_cuda_layout lo;
  lo.M = M;
  lo.F = F;
  lo.L = L;
  lo.S = S;
  const int C = F * S, FM = F * M;
  int o = 0;
  lo.we = o; o += ssae_cuda_pad4(M * S);
  lo.bt = o; o += ssae_cuda_pad4(C * L);
  lo.wbt = o; o += ssae_cuda_pad4(L * L);
  lo.dt = o; o += ssae_cuda_pad4(L * FM);
  lo.be = o; o += ssae_cuda_pad4(S);
  lo.bb = o; o += ssae_cuda_pad4(L);
  lo.bd = o; o += ssae_cuda_pad4(M);
  /* The tiled kernel copies [0, tiled_total) into shared memory. */
  lo.tiled_total = o;
  lo.we_r = o; o += ssae_cuda_pad4(M * S);
  lo.b_r = o; o += ssae_cuda_pad4(C * L);
  lo.wb_r = o; o += ssae_cuda_pad4(L * L);
  lo.d_r = o; o += ssae_cuda_pad4(L * FM);
  lo.total = o;
  return lo;
}

/* The folded part of the weights, [0, tiled_total): ssae_fold_count values,
 * value i written by ssae_fold_one from the parameters P (state_dict order,
 * tensor t at P + off[t], as ssae_param_offsets gives them) and the
 * normalised basis bn [L x C], in double. The host folds a loaded model
 * with it (ssae_cuda_instance.cu), a kernel the VJP's parameters at every
 * call (ssae_cuda_train_vjp.cu): the same arithmetic, the same bits. */
__host__ __device__ inline int ssae_fold_count(const ssae_cuda_layout &lo) {
  const int M = lo.M, L = lo.L, S = lo.S, C = lo.F * S;
  return M * S + S + C * L + L * L + L + L * lo.F * M + M;
}

/* A LayerNorm of width `in` folded into the Linear W [out x in] after it:
 * entry i of (W diag g)^T ([k][o]), and entry o of c + W b. */
__host__ __device__ inline float ssae_fold_ln_weight(const float *W, const float *g, int in,
                                                     int out, int i) {
  const int k = i / out, o = i % out;
  return (float)((double)W[o * in + k] * g[k]);
}

__host__ __device__ inline float ssae_fold_ln_bias(const float *W, const float *b, const float *c,
                                                   int in, int o) {
  double v = c[o];
  for (int k = 0; k < in; k++) v += (double)W[o * in + k] * b[k];
  return (float)v;
}

__host__ __device__ inline void ssae_fold_one(const ssae_cuda_layout &lo, const int *off,
                                              const float *P, const float *bn, int i,
                                              float *w) {
  const int M = lo.M, F = lo.F, L = lo.L, S = lo.S, C = F * S, FM = F * M;
  const float *ln1w = P + off[0], *ln1b = P + off[1], *We = P + off[2], *be = P + off[3];
  const float *ln2w = P + off[5], *ln2b = P + off[6], *Wb = P + off[7], *bb = P + off[8];
  const float *Wd = P + off[9], *bd = P + off[10];
  if (i < M * S) { /* [k][s]: We diag(ln1 weight) */
    w[lo.we + i] = ssae_fold_ln_weight(We, ln1w, M, S, i);
    return;
  }
  i -= M * S;
  if (i < S) { /* be + We ln1 bias */
    w[lo.be + i] = ssae_fold_ln_bias(We, ln1b, be, M, i);
    return;
  }
  i -= S;
  if (i < C * L) { /* [c][l]: the normalised basis */
    w[lo.bt + i] = bn[(i % L) * C + i / L];
    return;
  }
  i -= C * L;
  if (i < L * L) { /* [k][l]: Wb diag(ln2 weight) */
    w[lo.wbt + i] = ssae_fold_ln_weight(Wb, ln2w, L, L, i);
    return;
  }
  i -= L * L;
  if (i < L) { /* bb + Wb ln2 bias */
    w[lo.bb + i] = ssae_fold_ln_bias(Wb, ln2b, bb, L, i);
    return;
  }
  i -= L;
  if (i < L * FM) { /* [l][f M + m]: D_f = Wd B_f^T */
    const int l = i / FM, j = i % FM, f = j / M, mm = j % M;
    double a = 0;
    for (int s = 0; s < S; s++) a += (double)Wd[mm * S + s] * bn[l * C + f * S + s];
    w[lo.dt + i] = (float)a;
    return;
  }
  i -= L * FM;
  if (i < M) w[lo.bd + i] = bd[i];
}

/* Folded value i (written by ssae_fold_one) copied to its place in the
 * row-major copies the generic and small_batch kernels read, where it has
 * one (the encoder, the basis, the bottleneck, the decoder's D). */
__host__ __device__ inline void ssae_fold_row_copy(const ssae_cuda_layout &lo, int i, float *w) {
  const int M = lo.M, L = lo.L, S = lo.S, C = lo.F * S, FM = lo.F * M;
  if (i < M * S) { /* we [k][s] */
    w[lo.we_r + (i % S) * M + i / S] = w[lo.we + i];
    return;
  }
  i -= M * S + S;
  if (i < 0) return;
  if (i < C * L) { /* bt [c][l] */
    w[lo.b_r + (i % L) * C + i / L] = w[lo.bt + i];
    return;
  }
  i -= C * L;
  if (i < L * L) { /* wbt [k][l] */
    w[lo.wb_r + (i % L) * L + i / L] = w[lo.wbt + i];
    return;
  }
  i -= L * L + L;
  if (i >= 0 && i < L * FM) w[lo.d_r + (i % FM) * L + i / FM] = w[lo.dt + i]; /* dt [l][j] */
}

/* Float offsets of warp_3xtf32's fragment-ordered weights in its shared
 * memory (ssae_cuda_warp_3xtf32.cuh; after them the biases, then the warps'
 * buffers). */
struct ssae_tc_layout {
  int web, wes, bf, wbf, df, be, bb, bd, total;
};

static inline ssae_tc_layout ssae_tc_layout_of(const ssae_cuda_layout *lo) {
  ssae_tc_layout t;
  t.web = 0;
  t.wes = 4096;
  t.bf = 8192;
  t.wbf = t.bf + lo->F * 2048;
  t.df = t.wbf + 1024;
  t.be = t.df + lo->F * 2048;
  t.bb = t.be + 64;
  t.bd = t.bb + 32;
  t.total = t.bd + 64;
  return t;
}

#endif
