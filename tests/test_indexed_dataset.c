/* data/indexed_dataset: the reader on Megatron's own preprocess output, the writer
 * against it byte for byte, every kind of corruption as a clear error, random
 * mutations, and the replay of the fuzzing corpus (tests/fuzz/corpus/indexed_dataset). */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "base/files.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/rng.h"
#include "check.h"
#include "data/indexed_dataset.h"
#include "fuzz/fuzz_indexed_dataset.h"

#define REF_PREFIX TD_SOURCE_DIR "/tests/data/megatron_ref/ref_text_document"

static char g_tmp[256];

static char *read_all(const char *path, size_t *len) {
  char err[512];
  char *p = td_read_file(path, len, err, sizeof err);
  if (!p) printf("%s\n", err);
  return p;
}

static int file_equals(const char *a, const char *b) {
  size_t la, lb;
  char *x = read_all(a, &la), *y = read_all(b, &lb);
  int same = x && y && la == lb && !memcmp(x, y, la);
  td_free(x), td_free(y);
  return same;
}

/* 310 sequences (uint16), 312 documents of which 2 are empty: README of megatron_ref. */
static void test_reference(void) {
  td_indexed_dataset ds;
  char err[512];
  int rc = td_indexed_dataset_open(&ds, REF_PREFIX, err, sizeof err);
  CHECK(rc == 0, "open Megatron's ref_text_document: %s", rc ? err : "ok");
  if (rc) return;
  CHECK(ds.dtype == TD_IDX_UINT16 && ds.n_sequences == 310 && ds.n_document_indices == 313,
        "uint16, 310 sequences, 313 document indices (312 documents)");
  CHECK(ds.n_tokens * 2 == (int64_t)ds.bin_len, "%lld tokens fill the .bin", (long long)ds.n_tokens);
  int64_t empty = 0;
  for (int64_t d = 0; d + 1 < ds.n_document_indices; d++)
    empty += td_indexed_dataset_doc_index(&ds, d + 1) == td_indexed_dataset_doc_index(&ds, d);
  CHECK(empty == 2, "2 empty documents add no sequence (%lld)", (long long)empty);
  int32_t last;
  td_indexed_dataset_read(&ds, 0, td_indexed_dataset_seq_len(&ds, 0) - 1, 1, &last);
  CHECK(last == 50256, "--append-eod: a sequence ends with <|endoftext|> (%d)", last);
  td_indexed_dataset_close(&ds);
}

/* Re-write the reference's documents and compare the files byte for byte. */
static int rewrite(const td_indexed_dataset *ds, const char *prefix, td_idx_dtype dt, char *err, size_t errlen) {
  td_idx_builder *b = td_idx_builder_open(prefix, dt, err, errlen);
  if (!b) return -1;
  int32_t *buf = td_malloc(sizeof(int32_t) * (size_t)(ds->n_tokens + 1));
  for (int64_t d = 0; d + 1 < ds->n_document_indices; d++) {
    int64_t s0 = td_indexed_dataset_doc_index(ds, d), s1 = td_indexed_dataset_doc_index(ds, d + 1), n = 0;
    for (int64_t s = s0; s < s1; s++) {
      td_indexed_dataset_read(ds, s, 0, td_indexed_dataset_seq_len(ds, s), buf + n);
      n += td_indexed_dataset_seq_len(ds, s);
    }
    if (s1 - s0 > 1 || td_idx_builder_add_document(b, buf, n, err, errlen)) {
      td_idx_builder_abort(b);
      td_free(buf);
      return -1;
    }
  }
  td_free(buf);
  return td_idx_builder_finalize(b, err, errlen);
}

static void test_writer_reproduces_reference(void) {
  td_indexed_dataset ds;
  char err[512], prefix[512];
  if (td_indexed_dataset_open(&ds, REF_PREFIX, err, sizeof err)) return;
  snprintf(prefix, sizeof prefix, "%s/rewritten", g_tmp);
  int rc = rewrite(&ds, prefix, td_idx_dtype_for_vocab(50257), err, sizeof err);
  CHECK(rc == 0, "rewrite the reference documents: %s", rc ? err : "ok");
  char a[600], b[600];
  snprintf(a, sizeof a, "%s.bin", prefix);
  CHECK(file_equals(a, REF_PREFIX ".bin"), ".bin byte-identical to Megatron's preprocess output");
  snprintf(a, sizeof a, "%s.idx", prefix);
  CHECK(file_equals(a, REF_PREFIX ".idx"), ".idx byte-identical to Megatron's preprocess output");
  snprintf(a, sizeof a, "%s.bin.tmp", prefix), snprintf(b, sizeof b, "%s.idx.tmp", prefix);
  CHECK(!td_path_exists(a) && !td_path_exists(b), "no temporaries left behind");
  td_indexed_dataset_close(&ds);
}

static void test_writer_dtypes_and_errors(void) {
  char err[512], prefix[512];
  snprintf(prefix, sizeof prefix, "%s/w32", g_tmp);
  td_idx_builder *b = td_idx_builder_open(prefix, td_idx_dtype_for_vocab(100000), err, sizeof err);
  const int32_t doc[4] = {99999, 0, 7, 65536};
  CHECK(b && !td_idx_builder_add_document(b, doc, 4, err, sizeof err) && !td_idx_builder_add_document(b, doc, 0, err, sizeof err) &&
            !td_idx_builder_finalize(b, err, sizeof err),
        "a 100000-token vocabulary writes int32");
  td_indexed_dataset ds;
  int32_t back[4] = {0};
  if (td_indexed_dataset_open(&ds, prefix, err, sizeof err) == 0) {
    td_indexed_dataset_read(&ds, 0, 0, 4, back);
    CHECK(ds.dtype == TD_IDX_INT32 && ds.n_document_indices == 3 && !memcmp(back, doc, sizeof doc),
          "int32 round trip, with an empty document");
    td_indexed_dataset_close(&ds);
  }
  snprintf(prefix, sizeof prefix, "%s/bad", g_tmp);
  b = td_idx_builder_open(prefix, TD_IDX_UINT16, err, sizeof err);
  int rc = td_idx_builder_add_document(b, doc, 4, err, sizeof err);
  CHECK(rc && strstr(err, "99999") && strstr(err, "uint16"), "an id over the dtype is an error: %s", err);
  td_idx_builder_abort(b);
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.bin.tmp", prefix);
  CHECK(!td_path_exists(tmp), "abort removes the temporary .bin");
  snprintf(prefix, sizeof prefix, "%s/no/such/dir/x", g_tmp);
  CHECK(!td_idx_builder_open(prefix, TD_IDX_UINT16, err, sizeof err) && strstr(err, "no/such/dir"),
        "an unwritable prefix is an error naming it: %s", err);
}

/* ---- corruption -------------------------------------------------------------------- */

typedef struct {
  uint8_t *idx, *bin;
  size_t idx_len, bin_len;
} pair;

static pair load_ref(void) {
  pair p;
  p.idx = (uint8_t *)read_all(REF_PREFIX ".idx", &p.idx_len);
  p.bin = (uint8_t *)read_all(REF_PREFIX ".bin", &p.bin_len);
  return p;
}

/* Open the pair; expect failure with a message containing `want`. */
static void expect_error(const pair *p, const char *what, const char *want) {
  td_indexed_dataset ds;
  char err[512] = "";
  int rc = td_indexed_dataset_open_memory(&ds, "corrupt", p->idx, p->idx_len, p->bin, p->bin_len, err, sizeof err);
  CHECK(rc != 0 && strstr(err, want) && strstr(err, "corrupt."), "%s -> %s", what, rc ? err : "accepted!");
  if (!rc) td_indexed_dataset_close(&ds);
}

static void put_u64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static void put_i32(uint8_t *p, int32_t v) { memcpy(p, &v, 4); }

static void test_corrupt_header(const pair *ref) {
  pair p = *ref;
  p.idx = td_calloc(ref->idx_len + 16);
  memcpy(p.idx, ref->idx, ref->idx_len);
  p.idx_len = 20;
  expect_error(&p, "idx cut inside the header", "truncated");
  p.idx_len = ref->idx_len - 3;
  expect_error(&p, "idx cut inside the document indices", "truncated");
  p.idx_len = ref->idx_len + 5;
  expect_error(&p, "5 stray bytes after the index", "unexpected bytes");
  p.idx_len = ref->idx_len;
  p.idx[0] = 'X';
  expect_error(&p, "bad magic", "MMIDIDX");
  p.idx[0] = 'M', p.idx[9] = 2;
  expect_error(&p, "version 2", "version 2");
  p.idx[9] = 1, p.idx[17] = 9;
  expect_error(&p, "dtype code 9", "dtype code 9");
  p.idx[17] = 8;
  put_u64(p.idx + 18, 1ULL << 62);
  expect_error(&p, "sequence count 2^62", "sequences (12 bytes each) do not fit");
  put_u64(p.idx + 18, 310), put_u64(p.idx + 26, 1ULL << 61);
  expect_error(&p, "document count 2^61", "document indices (8 bytes each) do not fit");
  td_free(p.idx);
}

static void test_corrupt_arrays(const pair *ref) {
  pair p = *ref;
  p.idx = td_malloc(ref->idx_len);
  const size_t lengths = 34, pointers = 34 + 310 * 4, docs = pointers + 310 * 8;
  memcpy(p.idx, ref->idx, ref->idx_len);
  put_i32(p.idx + lengths + 4 * 7, -3);
  expect_error(&p, "negative sequence length", "negative length");
  memcpy(p.idx, ref->idx, ref->idx_len);
  put_i32(p.idx + lengths + 4 * 309, 1 << 30);
  expect_error(&p, "last sequence far too long", "outside");
  memcpy(p.idx, ref->idx, ref->idx_len);
  put_u64(p.idx + pointers + 8 * 5, (uint64_t)ref->bin_len * 4);
  expect_error(&p, "pointer past the .bin", "outside");
  memcpy(p.idx, ref->idx, ref->idx_len);
  put_u64(p.idx + pointers + 8 * 5, 1);
  expect_error(&p, "pointer not a multiple of the token size", "not a multiple");
  memcpy(p.idx, ref->idx, ref->idx_len);
  put_u64(p.idx + docs, 1);
  expect_error(&p, "document index not starting at 0", "starts with 1");
  memcpy(p.idx, ref->idx, ref->idx_len);
  put_u64(p.idx + docs + 8 * 100, 2);
  expect_error(&p, "document index going backwards", "document index 100");
  memcpy(p.idx, ref->idx, ref->idx_len);
  for (int d = 0; d < 313; d++) /* every document ends by sequence 309: the last sequence is in none */
    if (p.idx[docs + 8 * d] + 256 * p.idx[docs + 8 * d + 1] > 309) put_u64(p.idx + docs + 8 * d, 309);
  expect_error(&p, "documents ending before the last sequence", "end at sequence 309");
  memcpy(p.idx, ref->idx, ref->idx_len);
  p.bin_len = ref->bin_len - 2;
  expect_error(&p, ".bin one token short", "outside");
  p.bin_len = ref->bin_len + 2;
  p.bin = td_calloc(p.bin_len);
  expect_error(&p, ".bin with a stray token", "do not belong together");
  td_free(p.bin), td_free(p.idx);
}

static void test_missing_files(void) {
  char prefix[512], err[512], path[600];
  td_indexed_dataset ds;
  int rc = td_indexed_dataset_open(&ds, "/nonexistent/x", err, sizeof err);
  CHECK(rc && strstr(err, "/nonexistent/x.idx"), "a missing .idx is named: %s", err);
  snprintf(prefix, sizeof prefix, "%s/only_idx", g_tmp);
  snprintf(path, sizeof path, "%s.idx", prefix);
  size_t len;
  char *idx = read_all(REF_PREFIX ".idx", &len);
  td_write_file(path, idx, len, err, sizeof err);
  td_free(idx);
  rc = td_indexed_dataset_open(&ds, prefix, err, sizeof err);
  CHECK(rc && strstr(err, "only_idx.bin"), "a missing .bin is named: %s", err);
}

/* Random byte flips of the reference index: each is rejected with a message or
 * accepted and then readable end to end (the fuzz harness body). */
static void test_random_mutations(const pair *ref) {
  size_t n = 4 + ref->idx_len + ref->bin_len;
  uint8_t *in = td_malloc(n);
  uint32_t idx_len = (uint32_t)ref->idx_len;
  int accepted = 0, rounds = 3000;
  td_log_set_level(TD_LOG_WARN); /* the harness builds GPT indices, which log at info level */
  for (int r = 0; r < rounds; r++) {
    memcpy(in, &idx_len, 4);
    memcpy(in + 4, ref->idx, ref->idx_len);
    memcpy(in + 4 + ref->idx_len, ref->bin, ref->bin_len);
    int flips = 1 + (int)(td_rng_u32(tst_seed(), 11, (uint64_t)r) % 4);
    for (int f = 0; f < flips; f++) {
      uint32_t u = td_rng_u32(tst_seed(), 12, (uint64_t)(r * 8 + f));
      in[4 + u % ref->idx_len] ^= (uint8_t)(1u << (u >> 29));
    }
    accepted += td_fuzz_indexed_dataset_one(in, n);
  }
  td_log_set_level(TD_LOG_INFO);
  CHECK(1, "%d random corruptions of the index: %d accepted and read, %d rejected, no crash", rounds, accepted,
        rounds - accepted);
  td_free(in);
}

/* Every file of tests/fuzz/corpus/indexed_dataset: fuzzer finds (crashes, hangs, once)
 * and seeds (test_fuzz_replay replays them too, with the other targets' corpora). */
static void test_fuzz_corpus(void) {
  const char *dir = TD_SOURCE_DIR "/tests/fuzz/corpus/indexed_dataset";
  DIR *d = opendir(dir);
  CHECK(d != NULL, "open %s", dir);
  if (!d) return;
  int files = 0, accepted = 0;
  struct dirent *e;
  td_log_set_level(TD_LOG_WARN);
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[1024];
    size_t len;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    char *data = read_all(path, &len);
    if (!data) continue;
    accepted += td_fuzz_indexed_dataset_one((const uint8_t *)data, len);
    files++;
    td_free(data);
  }
  closedir(d);
  td_log_set_level(TD_LOG_INFO);
  CHECK(files > 0, "replayed %d corpus inputs (%d accepted, %d rejected cleanly)", files, accepted, files - accepted);
}

int main(void) {
  snprintf(g_tmp, sizeof g_tmp, "/tmp/td_test_indexed_XXXXXX");
  if (!mkdtemp(g_tmp)) return 1;
  test_reference();
  test_writer_reproduces_reference();
  test_writer_dtypes_and_errors();
  pair ref = load_ref();
  if (ref.idx && ref.bin) {
    test_corrupt_header(&ref);
    test_corrupt_arrays(&ref);
    test_random_mutations(&ref);
  }
  td_free(ref.idx), td_free(ref.bin);
  test_missing_files();
  test_fuzz_corpus();
  char err[256];
  td_remove_tree(g_tmp, err, sizeof err);
  return tst_finish();
}
