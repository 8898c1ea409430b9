/* The safetensors container (https://github.com/huggingface/safetensors):
 * 8-byte little-endian header length N, N bytes of JSON, then the data
 * section. Reading checks the container itself (header size, JSON, dtypes,
 * shapes against byte sizes, offsets inside the data, no overlap); what the
 * tensors mean is the model's business. Internal to libssae. */
#ifndef SSAE_SAFETENSORS_H
#define SSAE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ssae_err.h"
#include "ssae_json.h"

#define SSAE_ST_MAX_DIMS 8
/* The reference implementation refuses headers above 100 MB as well. */
#define SSAE_ST_MAX_HEADER (100u * 1000u * 1000u)

typedef struct ssae_st_tensor {
  const char *name;
  const char *dtype;
  size_t elem_size;
  int ndim;
  uint64_t shape[SSAE_ST_MAX_DIMS];
  uint64_t numel;
  const unsigned char *data; /* inside the caller's buffer */
  size_t nbytes;
} ssae_st_tensor;

typedef struct ssae_st_meta {
  const char *key, *value;
} ssae_st_meta;

typedef struct ssae_st {
  ssae_json json;
  ssae_st_tensor *tensors;
  size_t n_tensors;
  ssae_st_meta *meta;
  size_t n_meta;
} ssae_st;

/* Parses buf[0..len) (which must outlive *out). Messages do not name the
 * file: the caller puts the name in front. */
int ssae_st_parse(const void *buf, size_t len, ssae_st *out, ssae_err *err);
void ssae_st_free(ssae_st *st);

/* NULL when absent. */
const ssae_st_tensor *ssae_st_find(const ssae_st *st, const char *name);

/* A tensor to write: F32, little-endian on disk. */
typedef struct ssae_st_out {
  const char *name;
  int ndim;
  uint64_t shape[SSAE_ST_MAX_DIMS];
  const float *data;
} ssae_st_out;

/* Writes a whole file to f: metadata first (in the given order), tensors
 * packed in the given order. */
int ssae_st_write(FILE *f, const ssae_st_meta *meta, size_t n_meta,
                  const ssae_st_out *t, size_t n_t, ssae_err *err);

#endif
