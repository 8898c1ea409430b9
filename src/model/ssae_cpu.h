/* The SSAE forward pass on the CPU (SPEC section 2): the reference every
 * other backend is checked against. */
#ifndef SSAE_CPU_H
#define SSAE_CPU_H

#include <stddef.h>

#include "ssae_err.h"
#include "ssae_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ssae_cpu ssae_cpu;

/* threads: 0 = all cores, 1 = the calling thread only. The model must
 * outlive the object. */
ssae_cpu *ssae_cpu_new(const ssae_model *m, int threads, ssae_err *err);
void ssae_cpu_free(ssae_cpu *c);

/* One call at a time per object. Arithmetic is float64 inside, so results
 * agree with the float64 PyTorch module to about 1e-8.
 * n windows of F*M floats in x. scores: n floats (mean squared error per
 * window). recon: n*F*M floats, or NULL for scores only. Large batches are
 * split over the threads. No allocation. */
int ssae_cpu_forward(ssae_cpu *c, const float *x, size_t n, float *scores,
                     float *recon);

/* Scores of every window of a run of consecutive log-mel frames (n_frames
 * x M floats, frame-major as SPEC section 1 lays out windows): window t is
 * frames t ... t+F-1, so scores gets n_frames-F+1 values (none when
 * n_frames < F). Equal to ssae_cpu_forward on the windows laid out one by
 * one, but each frame is read and encoded once instead of F times. No
 * allocation. */
int ssae_cpu_score_frames(ssae_cpu *c, const float *frames, size_t n_frames, float *scores);

/* The instruction set the kernels use here: "avx512", "avx2" or "generic"
 * (the environment variable SSAE_CPU_KERNELS=avx2|generic caps it, for
 * tests and comparisons). */
const char *ssae_cpu_isa(void);

/* Threads the object runs on (the calling thread included). */
int ssae_cpu_threads(const ssae_cpu *c);

#ifdef __cplusplus
}
#endif
#endif
