#define _DEFAULT_SOURCE
#include "data/indexed_dataset.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/files.h"
#include "base/mem.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the .idx/.bin format is little-endian and is read in place"
#endif

#define IDX_MAGIC "MMIDIDX\0\0"
#define IDX_MAGIC_LEN 9
#define IDX_HEADER_LEN 34 /* magic, u64 version, u8 dtype, u64 sequence_count, u64 document_count */

static int32_t load_i32(const uint8_t *p) { int32_t v; memcpy(&v, p, 4); return v; }
static int64_t load_i64(const uint8_t *p) { int64_t v; memcpy(&v, p, 8); return v; }
static uint64_t load_u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

size_t td_idx_dtype_size(td_idx_dtype dt) {
  switch (dt) {
  case TD_IDX_UINT8: case TD_IDX_INT8: return 1;
  case TD_IDX_INT16: case TD_IDX_UINT16: return 2;
  case TD_IDX_INT32: case TD_IDX_FLOAT32: return 4;
  case TD_IDX_INT64: case TD_IDX_FLOAT64: return 8;
  }
  return 0;
}

const char *td_idx_dtype_name(td_idx_dtype dt) {
  static const char *names[] = {"?", "uint8", "int8", "int16", "int32", "int64", "float64", "float32", "uint16"};
  return td_idx_dtype_size(dt) ? names[dt] : "unknown";
}

int td_idx_dtype_is_token(td_idx_dtype dt) {
  return dt == TD_IDX_UINT8 || dt == TD_IDX_INT8 || dt == TD_IDX_INT16 || dt == TD_IDX_UINT16 ||
         dt == TD_IDX_INT32;
}

td_idx_dtype td_idx_dtype_for_vocab(int64_t vocab_size) {
  return vocab_size < 65500 ? TD_IDX_UINT16 : TD_IDX_INT32;
}

/* ---- reader ---------------------------------------------------------------- */

int32_t td_indexed_dataset_seq_len(const td_indexed_dataset *ds, int64_t seq) {
  return load_i32(ds->lengths + 4 * seq);
}

int64_t td_indexed_dataset_seq_ptr(const td_indexed_dataset *ds, int64_t seq) {
  return load_i64(ds->pointers + 8 * seq);
}

int64_t td_indexed_dataset_doc_index(const td_indexed_dataset *ds, int64_t i) {
  return load_i64(ds->doc_indices + 8 * i);
}

/* Header and array sizes against the length of the .idx. */
static int check_header(td_indexed_dataset *ds, char *err, size_t errlen) {
  const char *p = ds->prefix;
  if (ds->idx_len < IDX_HEADER_LEN)
    return td_errorf(err, errlen, "'%s.idx' is truncated: %zu bytes, the header alone needs %d", p, ds->idx_len,
                 IDX_HEADER_LEN);
  if (memcmp(ds->idx, IDX_MAGIC, IDX_MAGIC_LEN) != 0)
    return td_errorf(err, errlen, "'%s.idx' is not a Megatron MMapIndexedDataset index (it does not start with MMIDIDX\\0\\0)", p);
  uint64_t version = load_u64(ds->idx + 9);
  if (version != 1)
    return td_errorf(err, errlen, "'%s.idx' has index version %llu; only version 1 exists", p, (unsigned long long)version);
  ds->dtype = (td_idx_dtype)ds->idx[17];
  ds->itemsize = td_idx_dtype_size(ds->dtype);
  if (!ds->itemsize)
    return td_errorf(err, errlen, "'%s.idx' has unknown dtype code %d (Megatron's codes are 1-8)", p, ds->idx[17]);
  uint64_t n_seq = load_u64(ds->idx + 18), n_doc = load_u64(ds->idx + 26);
  uint64_t rest = ds->idx_len - IDX_HEADER_LEN;
  if (n_seq > rest / 12)
    return td_errorf(err, errlen, "'%s.idx' is truncated or corrupt: the lengths and pointers of %llu sequences (12 bytes each) do not fit the %llu bytes after the header",
                 p, (unsigned long long)n_seq, (unsigned long long)rest);
  rest -= n_seq * 12;
  if (n_doc > rest / 8)
    return td_errorf(err, errlen, "'%s.idx' is truncated or corrupt: %llu document indices (8 bytes each) do not fit the %llu bytes left",
                 p, (unsigned long long)n_doc, (unsigned long long)rest);
  rest -= n_doc * 8;
  if (rest != 0 && rest != n_seq) /* a multimodal index appends one mode byte per sequence */
    return td_errorf(err, errlen, "'%s.idx' has %llu unexpected bytes after the document indices", p, (unsigned long long)rest);
  ds->n_sequences = (int64_t)n_seq, ds->n_document_indices = (int64_t)n_doc;
  ds->lengths = ds->idx + IDX_HEADER_LEN;
  ds->pointers = ds->lengths + 4 * n_seq;
  ds->doc_indices = ds->pointers + 8 * n_seq;
  return 0;
}

/* Every sequence lies inside the .bin, and together they fill it exactly. */
static int check_sequences(td_indexed_dataset *ds, char *err, size_t errlen) {
  const char *p = ds->prefix;
  int64_t isz = (int64_t)ds->itemsize, bin_len = (int64_t)ds->bin_len, tokens = 0;
  for (int64_t i = 0; i < ds->n_sequences; i++) {
    int64_t len = td_indexed_dataset_seq_len(ds, i), ptr = td_indexed_dataset_seq_ptr(ds, i);
    if (len < 0)
      return td_errorf(err, errlen, "'%s.idx' is corrupt: sequence %lld has negative length %lld", p, (long long)i, (long long)len);
    if (ptr % isz != 0)
      return td_errorf(err, errlen, "'%s.idx' is corrupt: sequence %lld starts at byte %lld, not a multiple of the %s token size",
                   p, (long long)i, (long long)ptr, td_idx_dtype_name(ds->dtype));
    if (ptr < 0 || ptr > bin_len || len > (bin_len - ptr) / isz)
      return td_errorf(err, errlen, "'%s.idx' does not match '%s.bin': sequence %lld (%lld tokens at byte %lld) lies outside the %lld-byte .bin",
                   p, p, (long long)i, (long long)len, (long long)ptr, (long long)bin_len);
    tokens += len;
    if (tokens > bin_len / isz) /* stop before the sum can overflow */
      return td_errorf(err, errlen, "'%s.idx' is corrupt: its first %lld sequences already hold more tokens than the %lld-byte '%s.bin'",
                   p, (long long)i + 1, (long long)bin_len, p);
  }
  if (tokens * isz != bin_len)
    return td_errorf(err, errlen, "'%s.bin' has %lld bytes but '%s.idx' describes %lld tokens of %s (%lld bytes): the files do not belong together or one is truncated",
                 p, (long long)bin_len, p, (long long)tokens, td_idx_dtype_name(ds->dtype), (long long)(tokens * isz));
  ds->n_tokens = tokens;
  return 0;
}

/* document_indices: 0, non-decreasing, ending at the sequence count. */
static int check_documents(const td_indexed_dataset *ds, char *err, size_t errlen) {
  const char *p = ds->prefix;
  if (ds->n_document_indices < 1)
    return td_errorf(err, errlen, "'%s.idx' is corrupt: the document index is empty (it must start with 0)", p);
  int64_t prev = td_indexed_dataset_doc_index(ds, 0);
  if (prev != 0)
    return td_errorf(err, errlen, "'%s.idx' is corrupt: the document index starts with %lld, not 0", p, (long long)prev);
  for (int64_t i = 1; i < ds->n_document_indices; i++) {
    int64_t d = td_indexed_dataset_doc_index(ds, i);
    if (d < prev || d > ds->n_sequences)
      return td_errorf(err, errlen, "'%s.idx' is corrupt: document index %lld is %lld (after %lld; %lld sequences)", p,
                   (long long)i, (long long)d, (long long)prev, (long long)ds->n_sequences);
    prev = d;
  }
  if (prev != ds->n_sequences)
    return td_errorf(err, errlen, "'%s.idx' is corrupt: the documents end at sequence %lld, the index has %lld sequences", p,
                 (long long)prev, (long long)ds->n_sequences);
  return 0;
}

static int validate(td_indexed_dataset *ds, char *err, size_t errlen) {
  if (check_header(ds, err, errlen) || check_sequences(ds, err, errlen) || check_documents(ds, err, errlen)) {
    td_indexed_dataset_close(ds);
    return -1;
  }
  return 0;
}

int td_indexed_dataset_open_memory(td_indexed_dataset *ds, const char *name, const void *idx, size_t idx_len,
                                   const void *bin, size_t bin_len, char *err, size_t errlen) {
  memset(ds, 0, sizeof *ds);
  ds->prefix = td_strdup(name);
  ds->idx = idx, ds->idx_len = idx_len, ds->bin = bin, ds->bin_len = bin_len;
  return validate(ds, err, errlen);
}

int td_indexed_dataset_open(td_indexed_dataset *ds, const char *prefix, char *err, size_t errlen) {
  memset(ds, 0, sizeof *ds);
  size_t n = strlen(prefix);
  char *path = td_malloc(n + 5);
  memcpy(path, prefix, n);
  memcpy(path + n, ".idx", 5);
  ds->prefix = td_strdup(prefix);
  ds->owns_maps = 1;
  ds->idx = td_mmap_file(path, &ds->idx_len, err, errlen);
  memcpy(path + n, ".bin", 5);
  if (ds->idx) ds->bin = td_mmap_file(path, &ds->bin_len, err, errlen);
  td_free(path);
  if (!ds->idx || !ds->bin) {
    td_indexed_dataset_close(ds);
    return -1;
  }
  return validate(ds, err, errlen);
}

void td_indexed_dataset_close(td_indexed_dataset *ds) {
  if (ds->owns_maps) {
    td_munmap(ds->idx, ds->idx_len);
    td_munmap(ds->bin, ds->bin_len);
  }
  td_free(ds->prefix);
  memset(ds, 0, sizeof *ds);
}

void td_indexed_dataset_read(const td_indexed_dataset *ds, int64_t seq, int64_t offset, int64_t n, int32_t *out) {
  TD_CHECK(seq >= 0 && seq < ds->n_sequences, "sequence %lld of %lld", (long long)seq, (long long)ds->n_sequences);
  int64_t len = td_indexed_dataset_seq_len(ds, seq);
  TD_CHECK(offset >= 0 && n >= 0 && offset + n <= len, "tokens [%lld, %lld) of a %lld-token sequence",
           (long long)offset, (long long)(offset + n), (long long)len);
  const uint8_t *p = ds->bin + td_indexed_dataset_seq_ptr(ds, seq) + offset * (int64_t)ds->itemsize;
  switch (ds->dtype) {
  case TD_IDX_UINT8: for (int64_t k = 0; k < n; k++) out[k] = p[k]; break;
  case TD_IDX_INT8: for (int64_t k = 0; k < n; k++) out[k] = (int8_t)p[k]; break;
  case TD_IDX_UINT16: for (int64_t k = 0; k < n; k++) { uint16_t v; memcpy(&v, p + 2 * k, 2); out[k] = v; } break;
  case TD_IDX_INT16: for (int64_t k = 0; k < n; k++) { int16_t v; memcpy(&v, p + 2 * k, 2); out[k] = v; } break;
  case TD_IDX_INT32: memcpy(out, p, (size_t)n * 4); break;
  default: TD_CHECK(0, "%s is not a token dtype", td_idx_dtype_name(ds->dtype));
  }
}

/* ---- writer ---------------------------------------------------------------- */

struct td_idx_builder {
  char *prefix;
  td_idx_dtype dtype;
  FILE *bin;
  int32_t *lengths;            /* per sequence */
  int64_t n_seq, cap_seq;
  int64_t *doc_indices;        /* 0, then n_seq after each document */
  int64_t n_doc, cap_doc;
  uint8_t *buf;                /* ids converted to the dtype */
  size_t buf_cap;
};

static char *path_with(const char *prefix, const char *suffix) {
  size_t a = strlen(prefix), b = strlen(suffix);
  char *s = td_malloc(a + b + 1);
  memcpy(s, prefix, a);
  memcpy(s + a, suffix, b + 1);
  return s;
}

static void *grow(void *p, int64_t n, int64_t *cap, size_t elem) {
  if (n < *cap) return p;
  int64_t c = *cap ? *cap * 2 : 1024;
  void *q = td_malloc((size_t)c * elem);
  if (n) memcpy(q, p, (size_t)n * elem);
  td_free(p);
  *cap = c;
  return q;
}

td_idx_builder *td_idx_builder_open(const char *prefix, td_idx_dtype dtype, char *err, size_t errlen) {
  if (!td_idx_dtype_is_token(dtype)) {
    td_errorf(err, errlen, "cannot write '%s': %s is not a token dtype", prefix, td_idx_dtype_name(dtype));
    return NULL;
  }
  char *tmp = path_with(prefix, ".bin.tmp");
  FILE *f = fopen(tmp, "wb");
  if (!f) td_errorf(err, errlen, "cannot create '%s': %s", tmp, strerror(errno));
  td_free(tmp);
  if (!f) return NULL;
  td_idx_builder *b = td_calloc(sizeof *b);
  b->prefix = td_strdup(prefix);
  b->dtype = dtype;
  b->bin = f;
  b->doc_indices = grow(NULL, 0, &b->cap_doc, sizeof *b->doc_indices);
  b->doc_indices[b->n_doc++] = 0;
  return b;
}

/* ids -> the dtype in b->buf; -1 if an id does not fit. */
static int convert_ids(td_idx_builder *b, const int32_t *ids, int64_t n, char *err, size_t errlen) {
  size_t isz = td_idx_dtype_size(b->dtype), need = (size_t)n * isz;
  if (need > b->buf_cap) {
    td_free(b->buf);
    b->buf_cap = need > 65536 ? need : 65536;
    b->buf = td_malloc(b->buf_cap);
  }
  int64_t lo = b->dtype == TD_IDX_INT8 ? -128 : b->dtype == TD_IDX_INT16 ? -32768 : b->dtype == TD_IDX_INT32 ? INT32_MIN : 0;
  int64_t hi = isz == 1 ? (lo ? 127 : 255) : isz == 2 ? (lo ? 32767 : 65535) : INT32_MAX;
  for (int64_t k = 0; k < n; k++) {
    if (ids[k] < lo || ids[k] > hi)
      return td_errorf(err, errlen, "'%s': token id %d (document %lld, position %lld) does not fit the %s dtype", b->prefix,
                   ids[k], (long long)(b->n_doc - 1), (long long)k, td_idx_dtype_name(b->dtype));
    uint8_t *d = b->buf + (size_t)k * isz;
    if (isz == 1) *d = (uint8_t)ids[k];
    else if (isz == 2) { uint16_t v = (uint16_t)ids[k]; memcpy(d, &v, 2); }
    else memcpy(d, &ids[k], 4);
  }
  return 0;
}

int td_idx_builder_add_document(td_idx_builder *b, const int32_t *ids, int64_t n, char *err, size_t errlen) {
  if (n < 0 || n > INT32_MAX)
    return td_errorf(err, errlen, "'%s': a document of %lld tokens (at most 2^31 - 1 fit a sequence length)", b->prefix,
                 (long long)n);
  if (n > 0) {
    if (convert_ids(b, ids, n, err, errlen)) return -1;
    size_t bytes = (size_t)n * td_idx_dtype_size(b->dtype);
    if (fwrite(b->buf, 1, bytes, b->bin) != bytes)
      return td_errorf(err, errlen, "cannot write '%s.bin.tmp': %s", b->prefix, strerror(errno));
    b->lengths = grow(b->lengths, b->n_seq, &b->cap_seq, sizeof *b->lengths);
    b->lengths[b->n_seq++] = (int32_t)n;
  }
  b->doc_indices = grow(b->doc_indices, b->n_doc, &b->cap_doc, sizeof *b->doc_indices);
  b->doc_indices[b->n_doc++] = b->n_seq;
  return 0;
}

int td_idx_builder_add_index(td_idx_builder *b, const char *prefix, char *err, size_t errlen) {
  td_indexed_dataset ds;
  if (td_indexed_dataset_open(&ds, prefix, err, errlen)) return -1;
  int rc = 0;
  if (ds.dtype != b->dtype) {
    rc = td_errorf(err, errlen, "cannot append '%s' (%s tokens) to '%s' (%s tokens)", prefix,
                   td_idx_dtype_name(ds.dtype), b->prefix, td_idx_dtype_name(b->dtype));
  } else {
    size_t bytes = (size_t)ds.n_tokens * ds.itemsize;
    if (bytes && fwrite(ds.bin, 1, bytes, b->bin) != bytes)
      rc = td_errorf(err, errlen, "cannot write '%s.bin.tmp': %s", b->prefix, strerror(errno));
    const int64_t offset = b->n_seq;
    for (int64_t q = 0; !rc && q < ds.n_sequences; q++) {
      b->lengths = grow(b->lengths, b->n_seq, &b->cap_seq, sizeof *b->lengths);
      b->lengths[b->n_seq++] = td_indexed_dataset_seq_len(&ds, q);
    }
    for (int64_t d = 1; !rc && d < ds.n_document_indices; d++) {
      b->doc_indices = grow(b->doc_indices, b->n_doc, &b->cap_doc, sizeof *b->doc_indices);
      b->doc_indices[b->n_doc++] = offset + td_indexed_dataset_doc_index(&ds, d);
    }
  }
  td_indexed_dataset_close(&ds);
  return rc;
}

/* The .idx image: header, lengths, pointers (running byte offsets), document indices. */
static uint8_t *index_image(const td_idx_builder *b, size_t *len) {
  size_t n = (size_t)b->n_seq, isz = td_idx_dtype_size(b->dtype);
  *len = IDX_HEADER_LEN + n * 12 + (size_t)b->n_doc * 8;
  uint8_t *img = td_malloc(*len), *p = img;
  uint64_t version = 1, n_seq = n, n_doc = (uint64_t)b->n_doc;
  memcpy(p, IDX_MAGIC, IDX_MAGIC_LEN), p += IDX_MAGIC_LEN;
  memcpy(p, &version, 8), p += 8;
  *p++ = (uint8_t)b->dtype;
  memcpy(p, &n_seq, 8), p += 8;
  memcpy(p, &n_doc, 8), p += 8;
  if (n) memcpy(p, b->lengths, n * 4); /* lengths is NULL for an empty dataset */
  p += n * 4;
  int64_t ptr = 0;
  for (size_t i = 0; i < n; i++, p += 8) {
    memcpy(p, &ptr, 8);
    ptr += (int64_t)b->lengths[i] * (int64_t)isz;
  }
  memcpy(p, b->doc_indices, (size_t)b->n_doc * 8);
  return img;
}

static void builder_free(td_idx_builder *b) {
  if (b->bin) fclose(b->bin);
  td_free(b->lengths), td_free(b->doc_indices), td_free(b->buf), td_free(b->prefix), td_free(b);
}

static int close_bin(td_idx_builder *b, const char *tmp, char *err, size_t errlen) {
  int bad = fflush(b->bin) != 0 || fsync(fileno(b->bin)) != 0;
  bad |= fclose(b->bin) != 0;
  b->bin = NULL;
  return bad ? td_errorf(err, errlen, "cannot write '%s': %s", tmp, strerror(errno)) : 0;
}

int td_idx_builder_finalize(td_idx_builder *b, char *err, size_t errlen) {
  char *bin_tmp = path_with(b->prefix, ".bin.tmp"), *idx_tmp = path_with(b->prefix, ".idx.tmp");
  char *bin = path_with(b->prefix, ".bin"), *idx = path_with(b->prefix, ".idx");
  size_t len;
  uint8_t *img = index_image(b, &len);
  int rc = close_bin(b, bin_tmp, err, errlen);
  if (!rc) rc = td_write_file(idx_tmp, img, len, err, errlen);
  if (!rc) rc = td_rename(bin_tmp, bin, err, errlen);
  if (!rc) rc = td_rename(idx_tmp, idx, err, errlen);
  if (rc) remove(bin_tmp), remove(idx_tmp);
  td_free(img), td_free(bin_tmp), td_free(idx_tmp), td_free(bin), td_free(idx);
  builder_free(b);
  return rc;
}

void td_idx_builder_abort(td_idx_builder *b) {
  char *bin_tmp = path_with(b->prefix, ".bin.tmp");
  builder_free(b);
  remove(bin_tmp);
  td_free(bin_tmp);
}
