/* Real FFT in double precision for power-of-two sizes.
 *
 * Why not kiss_fftr here: the Debian KissFFT is the float build, and float
 * rounding inside the FFT leaves a noise floor about 140 dB under a frame's
 * peak; bins 80-90 dB down then carry errors of 0.01 dB, more than the
 * 0.001 dB the front end promises against a float64 torchaudio reference
 * (torchaudio's own float32 pipeline is off by 0.001 dB on a square wave).
 * Other even sizes use kiss_fftr (ssae_logmel.c). */
#ifndef SSAE_FFT_H
#define SSAE_FFT_H

#include "ssae_err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ssae_rfft ssae_rfft;

/* n: a power of two, 8 or more. */
ssae_rfft *ssae_rfft_new(int n, ssae_err *err);
void ssae_rfft_free(ssae_rfft *f);

/* Power spectrum |X[k]|^2, k = 0..n/2, of the real signal x[i]*win[i],
 * i = 0..n-1 (products in double). Audio-thread safe (no allocation). */
void ssae_rfft_power(ssae_rfft *f, const float *x, const double *win, double *power);

#ifdef __cplusplus
}
#endif
#endif
