#include "base/error.h"
#include "base/safetensors.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/files.h"
#include "base/mem.h"

static const struct {
  const char *name;
  td_dtype dt;
} k_dtypes[] = {{"F32", TD_F32}, {"BF16", TD_BF16}, {"F16", TD_F16}, {"I32", TD_I32}, {"I64", TD_I64}};

static const char *dtype_tag(td_dtype dt) {
  for (size_t i = 0; i < sizeof k_dtypes / sizeof *k_dtypes; i++)
    if (k_dtypes[i].dt == dt) return k_dtypes[i].name;
  return NULL;
}

static int dtype_from_tag(const char *s, td_dtype *dt) {
  for (size_t i = 0; i < sizeof k_dtypes / sizeof *k_dtypes; i++)
    if (!strcmp(k_dtypes[i].name, s)) return *dt = k_dtypes[i].dt, 0;
  return -1;
}

int64_t td_st_numel(const td_st_tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
  return n;
}

/* ------------------------------------------------------------------ write */

static char *header_json(const td_st_tensor *ts, int n, const char *const *keys,
                         const char *const *values, int n_meta, size_t *total_data) {
  cJSON *root = cJSON_CreateObject();
  if (n_meta > 0) {
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    for (int i = 0; i < n_meta; i++) cJSON_AddStringToObject(meta, keys[i], values[i]);
  }
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    cJSON *t = cJSON_AddObjectToObject(root, ts[i].name);
    cJSON_AddStringToObject(t, "dtype", dtype_tag(ts[i].dtype));
    cJSON *shape = cJSON_AddArrayToObject(t, "shape");
    for (int d = 0; d < ts[i].ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)ts[i].shape[d]));
    size_t bytes = (size_t)td_st_numel(&ts[i]) * td_dtype_size(ts[i].dtype);
    cJSON *offs = cJSON_AddArrayToObject(t, "data_offsets");
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + bytes)));
    off += bytes;
  }
  char *s = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  *total_data = off;
  return s;
}

static void host_copy(void *ctx, void *dst, const void *src, size_t bytes) {
  (void)ctx;
  memcpy(dst, src, bytes);
}

int td_safetensors_write(const char *path, const td_st_tensor *ts, int n,
                         const char *const *keys, const char *const *values, int n_meta,
                         char *err, size_t errlen) {
  return td_safetensors_write_with(path, ts, n, keys, values, n_meta, host_copy, NULL, err, errlen);
}

/* The 8-byte header length, the JSON header padded with spaces to 8 bytes. */
static int write_header(td_file_writer *w, const char *json, char *err, size_t errlen) {
  size_t hlen = strlen(json), padded = (hlen + 7) / 8 * 8;
  unsigned char *buf = td_malloc(8 + padded);
  for (int b = 0; b < 8; b++) buf[b] = (unsigned char)((uint64_t)padded >> (8 * b));
  memcpy(buf + 8, json, hlen);
  memset(buf + 8 + hlen, ' ', padded - hlen);
  int rc = td_file_append(w, buf, 8 + padded, err, errlen);
  td_free(buf);
  return rc;
}

enum { STAGE_BYTES = 64 << 20 };

int td_safetensors_write_with(const char *path, const td_st_tensor *ts, int n,
                              const char *const *keys, const char *const *values, int n_meta,
                              td_st_copy_fn copy, void *ctx, char *err, size_t errlen) {
  for (int i = 0; i < n; i++)
    if (!dtype_tag(ts[i].dtype) || ts[i].ndim < 0 || ts[i].ndim > TD_ST_MAX_DIMS)
      return td_errorf(err, errlen, "%s: tensor '%s' has an unsupported dtype or rank", path, ts[i].name);
  size_t data_bytes;
  char *json = header_json(ts, n, keys, values, n_meta, &data_bytes);
  td_file_writer w;
  int rc = td_file_create(&w, path, err, errlen);
  if (!rc) rc = write_header(&w, json, err, errlen);
  free(json);
  char *stage = rc ? NULL : td_malloc(data_bytes < STAGE_BYTES ? (data_bytes ? data_bytes : 1) : STAGE_BYTES);
  for (int i = 0; !rc && i < n; i++) {
    size_t bytes = (size_t)td_st_numel(&ts[i]) * td_dtype_size(ts[i].dtype);
    for (size_t off = 0; !rc && off < bytes; off += STAGE_BYTES) {
      size_t len = bytes - off < STAGE_BYTES ? bytes - off : STAGE_BYTES;
      copy(ctx, stage, (const char *)ts[i].data + off, len);
      rc = td_file_append(&w, stage, len, err, errlen);
    }
  }
  td_free(stage);
  if (rc) { /* nothing half-written left behind */
    if (w.fd >= 0) td_file_abort(&w), remove(path);
    return -1;
  }
  return td_file_finish(&w, err, errlen);
}

/* ------------------------------------------------------------------ read */

struct td_safetensors {
  const unsigned char *map;
  size_t map_len;
  int n;
  td_st_tensor *tensors;
  cJSON *meta; /* the "__metadata__" object, detached, or NULL */
};

void td_safetensors_close(td_safetensors *st) {
  if (!st) return;
  for (int i = 0; i < st->n; i++) td_free((void *)st->tensors[i].name);
  td_free(st->tensors);
  cJSON_Delete(st->meta);
  td_munmap(st->map, st->map_len);
  td_free(st);
}

/* Integers a JSON number holds exactly: up to 2^53 (a larger one is rounded, and
 * casting one past 2^63 to int64 is undefined). */
#define MAX_JSON_INT 9007199254740992.0

static int parse_int_array(const cJSON *arr, int64_t *out, int max, int *count) {
  if (!cJSON_IsArray(arr)) return -1;
  int n = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, arr) {
    if (n >= max || !cJSON_IsNumber(it) || !(it->valuedouble >= 0) ||
        it->valuedouble > MAX_JSON_INT || it->valuedouble != (double)(int64_t)it->valuedouble)
      return -1;
    out[n++] = (int64_t)it->valuedouble;
  }
  *count = n;
  return 0;
}

/* The bytes of a tensor of this shape and element size, or -1 when that overflows
 * int64 (a damaged or hostile header: the product must not wrap to a small number). */
static int64_t shape_bytes(const int64_t *shape, int ndim, size_t elem) {
  for (int d = 0; d < ndim; d++)
    if (shape[d] == 0) return 0; /* an empty tensor, whatever the other sizes */
  int64_t n = (int64_t)elem;
  for (int d = 0; d < ndim; d++) {
    if (n > INT64_MAX / shape[d]) return -1;
    n *= shape[d];
  }
  return n;
}

/* One header entry -> tensor; checks dtype, shape and offsets against data_len. */
static int parse_entry(const cJSON *e, td_st_tensor *t, int64_t off[2], size_t data_len,
                       const char *path, char *err, size_t errlen) {
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
  if (!cJSON_IsString(dt) || dtype_from_tag(dt->valuestring, &t->dtype))
    return td_errorf(err, errlen, "%s: tensor '%s': dtype must be one of F32, BF16, F16, I32, I64",
                 path, e->string);
  if (parse_int_array(cJSON_GetObjectItemCaseSensitive(e, "shape"), t->shape, TD_ST_MAX_DIMS,
                      &t->ndim))
    return td_errorf(err, errlen,
                     "%s: tensor '%s': shape must be a list of at most %d integer sizes in [0, 2^53]",
                     path, e->string, TD_ST_MAX_DIMS);
  int64_t want = shape_bytes(t->shape, t->ndim, td_dtype_size(t->dtype));
  if (want < 0) {
    char dims[256] = "";
    for (int d = 0; d < t->ndim; d++)
      snprintf(dims + strlen(dims), sizeof dims - strlen(dims), "%s%lld", d ? ", " : "",
               (long long)t->shape[d]);
    return td_errorf(err, errlen, "%s: tensor '%s': shape [%s] overflows: its size in bytes "
                     "exceeds 2^63 (the header is damaged)", path, e->string, dims);
  }
  int n_off;
  if (parse_int_array(cJSON_GetObjectItemCaseSensitive(e, "data_offsets"), off, 2, &n_off) ||
      n_off != 2 || off[0] > off[1] || (size_t)off[1] > data_len)
    return td_errorf(err, errlen,
                 "%s: tensor '%s': data_offsets must be [begin, end] within the %zu data bytes",
                 path, e->string, data_len);
  if (off[1] - off[0] != want)
    return td_errorf(err, errlen, "%s: tensor '%s': %lld bytes stored but its shape and dtype need %lld",
                 path, e->string, (long long)(off[1] - off[0]), (long long)want);
  return 0;
}

static int cmp_off(const void *a, const void *b) {
  const int64_t *x = a, *y = b;
  return (x[0] > y[0]) - (x[0] < y[0]);
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A name listed twice (a repeated JSON key) would leave which bytes a lookup gets to
 * the parser's order: refused, as a damaged header. Sorted, not pairwise: a header
 * may list a million tensors. */
static int check_unique_names(const td_safetensors *st, const char *path, char *err, size_t errlen) {
  const char **names = td_malloc(sizeof *names * (size_t)(st->n ? st->n : 1));
  for (int i = 0; i < st->n; i++) names[i] = st->tensors[i].name;
  qsort(names, (size_t)st->n, sizeof *names, cmp_name);
  int rc = 0;
  for (int i = 1; i < st->n && rc == 0; i++)
    if (!strcmp(names[i], names[i - 1]))
      rc = td_errorf(err, errlen, "%s: tensor '%s' is listed twice in the header (the header is damaged)",
                     path, names[i]);
  td_free(names);
  return rc;
}

static int parse_header(td_safetensors *st, const char *json, size_t hlen, size_t data_len,
                        const unsigned char *data, const char *path, char *err, size_t errlen) {
  cJSON *root = cJSON_ParseWithLength(json, hlen);
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return td_errorf(err, errlen, "%s: the header is not a JSON object (not a safetensors file?)", path);
  }
  st->meta = cJSON_DetachItemFromObjectCaseSensitive(root, "__metadata__");
  int n = cJSON_GetArraySize(root), rc = 0;
  st->tensors = td_calloc(sizeof(td_st_tensor) * (size_t)(n ? n : 1));
  int64_t(*offs)[2] = td_malloc(sizeof(int64_t[2]) * (size_t)(n ? n : 1));
  const cJSON *e;
  cJSON_ArrayForEach(e, root) {
    td_st_tensor *t = &st->tensors[st->n];
    if (!cJSON_IsObject(e) || parse_entry(e, t, offs[st->n], data_len, path, err, errlen)) {
      if (!cJSON_IsObject(e)) td_errorf(err, errlen, "%s: header entry '%s' is not an object", path, e->string);
      rc = -1;
      break;
    }
    t->name = td_strdup(e->string);
    t->data = data + offs[st->n][0];
    st->n++;
  }
  if (rc == 0) rc = check_unique_names(st, path, err, errlen);
  if (rc == 0) { /* no two tensors may share bytes; an empty one holds none */
    int m = 0;
    for (int i = 0; i < st->n; i++)
      if (offs[i][1] > offs[i][0]) offs[m][0] = offs[i][0], offs[m][1] = offs[i][1], m++;
    qsort(offs, (size_t)m, sizeof *offs, cmp_off);
    for (int i = 1; i < m; i++)
      if (offs[i][0] < offs[i - 1][1])
        rc = td_errorf(err, errlen, "%s: tensors overlap in the data section", path);
  }
  td_free(offs);
  cJSON_Delete(root);
  return rc;
}

td_safetensors *td_safetensors_open(const char *path, char *err, size_t errlen) {
  td_safetensors *st = td_calloc(sizeof *st);
  st->map = td_mmap_file(path, &st->map_len, err, errlen);
  if (!st->map) {
    td_free(st);
    return NULL;
  }
  uint64_t hlen = 0;
  if (st->map_len < 8) {
    td_errorf(err, errlen, "%s: file is %zu bytes, too short for a safetensors header", path, st->map_len);
    goto bad;
  }
  for (int b = 0; b < 8; b++) hlen |= (uint64_t)st->map[b] << (8 * b);
  if (hlen > st->map_len - 8 || hlen > 100000000) {
    td_errorf(err, errlen, "%s: header length %llu exceeds the file (%zu bytes): truncated or not safetensors",
          path, (unsigned long long)hlen, st->map_len);
    goto bad;
  }
  if (parse_header(st, (const char *)st->map + 8, (size_t)hlen, st->map_len - 8 - hlen,
                   st->map + 8 + hlen, path, err, errlen))
    goto bad;
  return st;
bad:
  td_safetensors_close(st);
  return NULL;
}

int td_safetensors_count(const td_safetensors *st) { return st->n; }
const td_st_tensor *td_safetensors_at(const td_safetensors *st, int i) { return &st->tensors[i]; }

const td_st_tensor *td_safetensors_find(const td_safetensors *st, const char *name) {
  for (int i = 0; i < st->n; i++)
    if (!strcmp(st->tensors[i].name, name)) return &st->tensors[i];
  return NULL;
}

const char *td_safetensors_meta(const td_safetensors *st, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(st->meta, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}
