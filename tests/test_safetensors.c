/* safetensors: round trip, and every kind of damaged file refused with a message. */
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "base/files.h"
#include "base/mem.h"
#include "base/safetensors.h"
#include "check.h"

static char g_dir[256];

static const char *tmp_path(const char *name) {
  static char p[512];
  snprintf(p, sizeof p, "%s/%s", g_dir, name);
  return p;
}

static void test_round_trip(void) {
  float a[6] = {1, 2, 3, 4, 5, 6.5f};
  uint16_t b[3] = {0x3f80, 0x4000, 0xc040};
  int64_t c[2] = {-7, 1LL << 40};
  td_st_tensor ts[3] = {{"layer.weight", TD_F32, 2, {2, 3}, a},
                        {"half", TD_BF16, 1, {3}, b},
                        {"ids", TD_I64, 1, {2}, c}};
  const char *k[] = {"format"}, *v[] = {"pt"};
  char err[512];
  const char *path = tmp_path("rt.safetensors");
  CHECK(td_safetensors_write(path, ts, 3, k, v, 1, err, sizeof err) == 0, "write");
  td_safetensors *st = td_safetensors_open(path, err, sizeof err);
  CHECK(st != NULL, "open: %s", st ? "ok" : err);
  if (!st) return;
  CHECK(td_safetensors_count(st) == 3, "3 tensors");
  const td_st_tensor *t = td_safetensors_find(st, "layer.weight");
  CHECK(t && t->dtype == TD_F32 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 &&
            !memcmp(t->data, a, sizeof a),
        "fp32 tensor comes back with shape and bytes");
  t = td_safetensors_find(st, "half");
  CHECK(t && t->dtype == TD_BF16 && !memcmp(t->data, b, sizeof b), "bf16 tensor comes back");
  t = td_safetensors_find(st, "ids");
  CHECK(t && t->dtype == TD_I64 && !memcmp(t->data, c, sizeof c), "int64 tensor comes back");
  CHECK(td_safetensors_meta(st, "format") && !strcmp(td_safetensors_meta(st, "format"), "pt"),
        "metadata comes back");
  CHECK(td_safetensors_find(st, "missing") == NULL, "unknown name is NULL");
  td_safetensors_close(st);
}

/* Write raw bytes: 8-byte length + header + data. */
static const char *write_raw(const char *name, const char *header, uint64_t claimed_len,
                             size_t data_bytes) {
  size_t hl = strlen(header), total = 8 + hl + data_bytes;
  unsigned char *buf = td_calloc(total);
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(claimed_len >> (8 * i));
  memcpy(buf + 8, header, hl);
  char err[256];
  td_write_file(tmp_path(name), buf, total, err, sizeof err);
  td_free(buf);
  return tmp_path(name);
}

static void expect_refused(const char *path, const char *needle, const char *what) {
  char err[512] = "";
  td_safetensors *st = td_safetensors_open(path, err, sizeof err);
  CHECK(st == NULL && strstr(err, needle), "%s refused: %s", what, err);
  td_safetensors_close(st);
}

static void test_damaged(void) {
  const char *good = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  size_t gl = strlen(good);
  char err[256];
  td_write_file(tmp_path("short"), "abc", 3, err, sizeof err);
  expect_refused(tmp_path("short"), "too short", "3-byte file");
  expect_refused(write_raw("zero", "", 0, 0), "not a JSON object", "empty header");
  expect_refused(tmp_path("does-not-exist"), "cannot open", "missing file");
  expect_refused(write_raw("trunc", good, gl, 4), "data_offsets", "truncated data");
  expect_refused(write_raw("hlen", good, 1u << 30, 8), "header length", "header length past the end");
  expect_refused(write_raw("json", "{\"w\": [1, 2", 11, 8), "not a JSON object", "broken JSON");
  const char *bad_dtype = "{\"w\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}";
  expect_refused(write_raw("dtype", bad_dtype, strlen(bad_dtype), 8), "dtype", "unknown dtype");
  const char *bad_size = "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}";
  expect_refused(write_raw("size", bad_size, strlen(bad_size), 8), "need 12", "size/shape mismatch");
  const char *overlap = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}";
  expect_refused(write_raw("overlap", overlap, strlen(overlap), 12), "overlap", "overlapping tensors");
  const char *neg = "{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}";
  expect_refused(write_raw("neg", neg, strlen(neg), 8), "shape", "negative dimension");
  /* 2^32 * 2^32 * 4 bytes wraps int64 to 0: must not pass as "need 0 bytes" */
  const char *wrap = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}";
  expect_refused(write_raw("wrap", wrap, strlen(wrap), 8), "shape [4294967296, 4294967296] overflows",
                 "a shape whose byte count overflows int64");
  const char *wrap3 = "{\"w\":{\"dtype\":\"I64\",\"shape\":[1048576,1048576,1048576],\"data_offsets\":[0,8]}}";
  expect_refused(write_raw("wrap3", wrap3, strlen(wrap3), 8), "overflows", "2^60 elements of 8 bytes");
  const char *huge = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1e19],\"data_offsets\":[0,8]}}";
  expect_refused(write_raw("huge", huge, strlen(huge), 8), "integer sizes in [0, 2^53]",
                 "a size past int64");
}

/* Tensors with a zero-size dimension hold no bytes: legal anywhere in the data,
 * even at an offset inside another tensor (offsets [x, x]), and never an overlap. */
static void test_empty_tensors(void) {
  const char *hdr = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"e\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[4,4]},"
                    "\"z\":{\"dtype\":\"BF16\",\"shape\":[5,0],\"data_offsets\":[8,8]},"
                    "\"big0\":{\"dtype\":\"F32\",\"shape\":[0,9007199254740992],\"data_offsets\":[0,0]}}";
  char err[512] = "";
  td_safetensors *st = td_safetensors_open(write_raw("empty", hdr, strlen(hdr), 8), err, sizeof err);
  CHECK(st != NULL, "zero-size tensors (one inside another's bytes, one at the end) accepted: %s",
        st ? "ok" : err);
  if (!st) return;
  const td_st_tensor *e = td_safetensors_find(st, "e"), *w = td_safetensors_find(st, "w");
  CHECK(td_safetensors_count(st) == 4 && e && e->ndim == 2 && td_st_numel(e) == 0 && w &&
            td_st_numel(w) == 2,
        "4 tensors, the empty ones with 0 elements");
  td_safetensors_close(st);
  /* written by the writer too, and read back */
  float a[2] = {1.5f, -2};
  td_st_tensor ts[3] = {{"a", TD_F32, 1, {2}, a}, {"none", TD_F32, 2, {0, 7}, a}, {"b", TD_F32, 1, {1}, a}};
  const char *path = tmp_path("empty_rt.safetensors");
  CHECK(td_safetensors_write(path, ts, 3, NULL, NULL, 0, err, sizeof err) == 0, "write with an empty tensor");
  st = td_safetensors_open(path, err, sizeof err);
  CHECK(st && td_safetensors_find(st, "none") && td_st_numel(td_safetensors_find(st, "none")) == 0 &&
            !memcmp(td_safetensors_find(st, "b")->data, a, 4),
        "round trip with an empty tensor between two others: %s", st ? "ok" : err);
  td_safetensors_close(st);
  /* a real overlap is still refused when empty tensors are around */
  const char *ov = "{\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
                   "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}";
  expect_refused(write_raw("ov_empty", ov, strlen(ov), 8), "overlap", "overlap next to an empty tensor");
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/trident_test_st_%d", (int)getpid());
  char err[256];
  td_mkdir_p(g_dir, err, sizeof err);
  test_round_trip();
  test_damaged();
  test_empty_tensors();
  td_remove_tree(g_dir, err, sizeof err);
  return tst_finish();
}
