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

/* threads: 0 = all cores, 1 = the calling thread only (fewer when the
 * system refuses some: ssae_cpu_threads says how many). The model must
 * outlive the object. */
ssae_cpu *ssae_cpu_new(const ssae_model *m, int threads, ssae_err *err);
void ssae_cpu_free(ssae_cpu *c);
/* The weights of m, a model of the dimensions c was made for, folded into
 * c again in place: its threads and scratch stay (making them again cost
 * ten times the fold). Not during a forward on c. On failure c's weights
 * are a mix: free it. */
int ssae_cpu_set_model(ssae_cpu *c, const ssae_model *m, ssae_err *err);

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

/* Scoring the next window of each of many streams (the real-time engine:
 * a channel's consecutive windows share F-1 frames) while encoding only its
 * new frame. The caller keeps one code cache per stream, of
 * ssae_cpu_codes_len(c) doubles (F slice codes, padded; opaque), which
 * holds the codes of the last window scored with it. */
size_t ssae_cpu_codes_len(const ssae_cpu *c);

/* Scores n windows (n*F*M floats in x, as ssae_cpu_forward). codes[i] is
 * the cache of window i's stream. cont[i] != 0 says that window i follows
 * the last window scored with codes[i] by one frame (its first F-1 frames
 * are that window's last F-1): only its last frame is encoded, the other
 * codes come from the cache. cont[i] == 0 (or cont NULL: for every window)
 * encodes all F frames: a stream's first window, or after a dropped window
 * or a restart. Either way codes[i] then holds window i's codes. Windows of
 * one call must not share a cache (at most one window per stream per call;
 * sharing gives wrong scores, nothing worse). A cont[i] that is not true of
 * the data gives a wrong score for that window and its successors until a
 * cont 0; nothing worse.
 * Scores are bit-identical to ssae_cpu_forward on the same n windows, on
 * every kernel set. Runs on the calling thread only, whatever the object's
 * thread count. No allocation. One call at a time per object (it shares
 * the object's scratch with ssae_cpu_forward). -1: c NULL, or x, codes,
 * scores or a codes[i] NULL with n > 0 (nothing is changed then). */
int ssae_cpu_score_cached(ssae_cpu *c, const float *x, size_t n, double *const *codes,
                          const unsigned char *cont, float *scores);

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
