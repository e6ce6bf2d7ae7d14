/* safetensors (Hugging Face's tensor file format; readable by PyTorch, numpy,
 * transformers): an 8-byte little-endian header length N, N bytes of JSON
 *   {"__metadata__": {"k": "v"}, "name": {"dtype": "F32", "shape": [..],
 *    "data_offsets": [begin, end]}, ...}
 * (padded with spaces to a multiple of 8), then the raw little-endian data, offsets
 * relative to the end of the header. Dtypes: F32, BF16, F16, I32, I64.
 * The reader maps the file and validates everything before use: header length,
 * JSON, dtypes, shapes, offsets inside the data and matching the shape, no
 * overlaps; a bad file is an error message naming the file and the problem. */
#ifndef TD_BASE_SAFETENSORS_H
#define TD_BASE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"

#define TD_ST_MAX_DIMS 8

typedef struct {
  const char *name;
  td_dtype dtype;
  int ndim;
  int64_t shape[TD_ST_MAX_DIMS];
  const void *data; /* host memory: the tensor's bytes, row-major */
} td_st_tensor;

int64_t td_st_numel(const td_st_tensor *t);

/* Write n tensors (and optional string metadata pairs keys[i] = values[i]) to path,
 * fsynced. Returns 0, or -1 with err set. */
int td_safetensors_write(const char *path, const td_st_tensor *tensors, int n,
                         const char *const *meta_keys, const char *const *meta_values, int n_meta,
                         char *err, size_t errlen);

/* The same with tensor data that is not host memory (a device's): copy(ctx, dst,
 * src, bytes) brings bytes of a tensor's data to the host, a piece at a time
 * through one bounded staging buffer, so the file is never staged whole. */
typedef void (*td_st_copy_fn)(void *ctx, void *dst, const void *src, size_t bytes);
int td_safetensors_write_with(const char *path, const td_st_tensor *tensors, int n,
                              const char *const *meta_keys, const char *const *meta_values,
                              int n_meta, td_st_copy_fn copy, void *ctx, char *err,
                              size_t errlen);

typedef struct td_safetensors td_safetensors;

td_safetensors *td_safetensors_open(const char *path, char *err, size_t errlen);
int td_safetensors_count(const td_safetensors *st);
const td_st_tensor *td_safetensors_at(const td_safetensors *st, int i);
const td_st_tensor *td_safetensors_find(const td_safetensors *st, const char *name); /* or NULL */
const char *td_safetensors_meta(const td_safetensors *st, const char *key);        /* or NULL */
void td_safetensors_close(td_safetensors *st);

#endif
