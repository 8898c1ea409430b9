/* 3xTF32 on mma.sync m16n8k8 (sm_80 or newer): the operand split and the
 * three products, shared by the inference kernel (ssae_cuda_warp_3xtf32.cuh)
 * and the tensor-core VJP (ssae_cuda_vjp_tc.cuh). Each fp32 operand
 * v = big + small, big = tf32(v), small = tf32(v - big), and
 * a b ~ big_a big_b + big_a small_b + small_a big_b (the dropped
 * small_a small_b is 2^-22 of the product), accumulated in fp32.
 * Fragments (PTX ISA, m16n8k8 .tf32), g = lane / 4, t = lane % 4:
 *   A: a[r] = (row g + 8 (r & 1), k t + 4 (r >> 1))
 *   B: b[r] = (k t + 4 r, column g)
 *   C: c[r] = (row g + 8 (r >> 1), column 2t + (r & 1)) */
#ifndef SSAE_CUDA_MMA_TF32_CUH
#define SSAE_CUDA_MMA_TF32_CUH

/* The mask that keeps a tf32 value's 19 high bits (ssae_tf32,
 * ssae_split_tt), read from constant memory rather than written as an
 * immediate. ptxas knows that a tf32 MMA reads only those bits: with an
 * immediate mask it passes the MMA the unmasked value, keeps the masked
 * one for the subtraction alone, and where a fragment's values were loaded
 * in pairs that are not its register order (an operand stored along k for
 * A, across k for B) it then moves them into place, four moves a fragment:
 * 14 % of k_vjp_tc's instructions. A mask it cannot see makes it use the
 * masked values, written in place (doc/gpu-kernels.md). */
static __constant__ unsigned ssae_tf32_trunc_mask = 0xffffe000u;

/* tf32(v) (round to nearest, ties away from zero), as fp32 bits: half a
 * tf32 unit added to the magnitude's bits, the 13 low bits cleared. Two
 * integer instructions; cvt.rna.tf32.f32 compiles to four on sm_90 (it
 * also keeps NaN and infinity apart, which finite operands never need). */
__device__ __forceinline__ unsigned ssae_tf32(float v) {
  return (__float_as_uint(v) + 0x1000u) & ssae_tf32_trunc_mask;
}

__device__ __forceinline__ void ssae_split(float v, unsigned &big, unsigned &small) {
  big = ssae_tf32(v);
  small = ssae_tf32(v - __uint_as_float(big));
}

/* The same with the small half left for the MMA to truncate (its error
 * 2^-10 of small, 2^-21 of v): one instruction fewer. */
__device__ __forceinline__ void ssae_split_t(float v, unsigned &big, unsigned &small) {
  big = ssae_tf32(v);
  small = __float_as_uint(v - __uint_as_float(big));
}

/* Both halves left for the MMA to truncate: big = v with its 13 low bits
 * cleared (the MMA's own truncation), small = v - big exactly, truncated
 * by the MMA (an error below 2^-10 of small, 2^-20 of v, against 2^-21
 * rounding big): two instructions, one fewer again. The training kernel's
 * form (k_vjp_tc: gradients to 1e-4), not the inference kernels'. */
__device__ __forceinline__ void ssae_split_tt(float v, unsigned &big, unsigned &small) {
  big = __float_as_uint(v) & ssae_tf32_trunc_mask;
  small = __float_as_uint(v - __uint_as_float(big));
}

__device__ __forceinline__ void ssae_mma(float (&c)[4], const unsigned (&a)[4],
                                         const unsigned (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* c += a b in 3xTF32: the small terms first (they are the smaller). */
__device__ __forceinline__ void ssae_mma3(float (&c)[4], const unsigned (&ab)[4],
                                          const unsigned (&as)[4], const unsigned (&bb)[2],
                                          const unsigned (&bs)[2]) {
  ssae_mma(c, as, bb);
  ssae_mma(c, ab, bs);
  ssae_mma(c, ab, bb);
}

#endif
