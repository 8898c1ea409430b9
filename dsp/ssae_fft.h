/* Real FFT in double precision for power-of-two sizes, SSAE_LANES frames at
 * a time (one per SIMD lane, see ssae_lanes.h).
 *
 * Why not kiss_fftr here: the Debian KissFFT is the float build, and float
 * rounding inside the FFT leaves a noise floor about 140 dB under a frame's
 * peak; bins 80-90 dB down then carry errors of 0.01 dB, more than the
 * 0.001 dB the front end promises against a float64 torchaudio reference
 * (torchaudio's own float32 pipeline is off by 0.001 dB on a square wave).
 * Other even sizes use kiss_fftr (ssae_logmel.c).
 *
 * Why frames in lanes: a 1024-point FFT vectorised inside one frame spends
 * its time on shuffles and short loops; with one frame per lane every
 * butterfly is plain vector arithmetic on whole registers, and the twiddles
 * are scalars. */
#ifndef SSAE_FFT_H
#define SSAE_FFT_H

#include "ssae_err.h"
#include "ssae_lanes.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ssae_rfft ssae_rfft;

/* n: a power of two, 8 or more. */
ssae_rfft *ssae_rfft_new(int n, ssae_err *err);
void ssae_rfft_free(ssae_rfft *f);

/* cos(2 pi i/n) from the plan's table (the periodic Hann window takes it
 * from there: no libm calls). */
double ssae_rfft_cos(const ssae_rfft *f, int i);

/* Power spectra of SSAE_LANES frames: frame l is x[l][i]*win[i],
 * i = 0..n-1 (products in double), and |X_l[k]|^2 goes to lane l of
 * power[k], k = 0..n/2. Lanes that carry no frame may repeat another
 * frame's pointer. `power` is 64-byte aligned (n/2+1 vectors).
 * Audio-thread safe (no allocation). */
void ssae_rfft_power(ssae_rfft *f, const float *const x[SSAE_LANES], const double *win,
                     ssae_v8d *power);

/* The same for one frame (power: n/2+1 doubles), with the very operations
 * of one lane above, so the bits are those the frame gets in any lane; for
 * a stream fed in small blocks, which completes one frame at a time.
 * Audio-thread safe. */
void ssae_rfft_power1(ssae_rfft *f, const float *x, const double *win, double *power);

#ifdef __cplusplus
}
#endif
#endif
