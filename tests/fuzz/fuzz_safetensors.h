/* One fuzz input through the safetensors reader (base/safetensors.h): shared by the
 * libFuzzer harness (fuzz_safetensors.c) and the corpus replay (test_fuzz_replay.c).
 *
 * The input is the file. The reader must reject it with a message naming the file or
 * accept it; an accepted file must then give every tensor's bytes inside the mapping
 * (each byte is read, so AddressSanitizer sees an overrun), find each tensor by its
 * name, and survive a write of the same tensors and metadata and a re-read that gives
 * them back byte for byte. */
#ifndef TD_FUZZ_SAFETENSORS_H
#define TD_FUZZ_SAFETENSORS_H

#include "base/safetensors.h"
#include "fuzz_util.h"

static inline unsigned td_fuzz_st_touch(const td_st_tensor *t) {
  size_t bytes = (size_t)td_st_numel(t) * td_dtype_size(t->dtype);
  unsigned sum = 0;
  for (size_t i = 0; i < bytes; i++) sum += ((const unsigned char *)t->data)[i];
  return sum;
}

/* Write st's tensors (and its "format" metadata, when there) to path and read them back. */
static inline void td_fuzz_st_rewrite(const td_safetensors *st, const char *path) {
  int n = td_safetensors_count(st);
  td_st_tensor *ts = td_calloc(sizeof *ts * (size_t)(n + 1));
  for (int i = 0; i < n; i++) ts[i] = *td_safetensors_at(st, i);
  const char *k[] = {"format"}, *v[] = {td_safetensors_meta(st, "format")};
  char err[1024];
  int rc = td_safetensors_write(path, ts, n, k, v, v[0] ? 1 : 0, err, sizeof err);
  TD_CHECK(rc == 0, "writing back an accepted file failed: %s", err);
  td_safetensors *back = td_safetensors_open(path, err, sizeof err);
  TD_CHECK(back != NULL, "re-reading a written file failed: %s", err);
  TD_CHECK(td_safetensors_count(back) == n, "tensor count changed");
  for (int i = 0; i < n; i++) {
    const td_st_tensor *b = td_safetensors_find(back, ts[i].name);
    TD_CHECK(b && b->dtype == ts[i].dtype && b->ndim == ts[i].ndim, "tensor '%s' changed", ts[i].name);
    TD_CHECK(!memcmp(b->shape, ts[i].shape, sizeof b->shape[0] * (size_t)b->ndim), "shape changed");
    size_t bytes = (size_t)td_st_numel(b) * td_dtype_size(b->dtype);
    TD_CHECK(bytes == 0 || !memcmp(b->data, ts[i].data, bytes), "data of '%s' changed", ts[i].name);
  }
  td_safetensors_close(back);
  td_free(ts);
}

/* 1 when the reader accepted the input, 0 when it rejected it with a message. */
static inline int td_fuzz_safetensors_one(const uint8_t *data, size_t size) {
  char dir[256], path[300], err[1024] = "";
  td_fuzz_tmpdir(dir, sizeof dir);
  td_fuzz_put(dir, "in.safetensors", data, size);
  snprintf(path, sizeof path, "%s/in.safetensors", dir);
  td_safetensors *st = td_safetensors_open(path, err, sizeof err);
  if (!st) {
    TD_CHECK(strstr(err, "in.safetensors"), "the message names the file: %s", err);
    td_fuzz_rmdir(dir);
    return 0;
  }
  volatile unsigned sum = 0;
  for (int i = 0; i < td_safetensors_count(st); i++) {
    const td_st_tensor *t = td_safetensors_at(st, i);
    TD_CHECK(t->ndim >= 0 && t->ndim <= TD_ST_MAX_DIMS, "ndim %d", t->ndim);
    TD_CHECK(td_safetensors_find(st, t->name) == t, "find('%s') gives another tensor", t->name);
    sum += td_fuzz_st_touch(t);
  }
  (void)sum;
  snprintf(path, sizeof path, "%s/out.safetensors", dir);
  td_fuzz_st_rewrite(st, path);
  td_safetensors_close(st);
  td_fuzz_rmdir(dir);
  return 1;
}

#endif
