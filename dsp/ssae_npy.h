/* NumPy .npy files (format version 1.0): float32 little-endian, C order, so
 * that numpy.load gives the same array. Not for the audio thread. */
#ifndef SSAE_NPY_H
#define SSAE_NPY_H

#include <stddef.h>

#include "ssae_err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes data (shape[0] x ... x shape[ndim-1] floats) to path; ndim 1..8. */
int ssae_npy_write_f32(const char *path, const float *data, const size_t *shape, int ndim,
                       ssae_err *err);

/* Reads a float32 ('<f4', C order) .npy file. *data is newly allocated;
 * shape holds up to 8 dimensions. */
int ssae_npy_read_f32(const char *path, float **data, size_t *shape, int *ndim,
                      ssae_err *err);

#ifdef __cplusplus
}
#endif
#endif
