/* data/gpt_dataset, blend, sampler: Megatron's own GPTDataset indices and samples
 * (tests/data/megatron_ref/ref_gpt_samples.json, made by Megatron-LM core_v0.12.3)
 * reproduced exactly for every split and multi-epoch variant the file covers; the
 * index cache (built once, reused, rebuilt when a parameter or the data changes or
 * the file is corrupt); blending as Megatron weighs and interleaves; masks and
 * positions; and the pretraining sampler at DP=2 against DP=1 across a resume. */
#define _DEFAULT_SOURCE
#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/files.h"
#include "base/mem.h"
#include "check.h"
#include "data/blend.h"
#include "data/gpt_dataset.h"
#include "data/sampler.h"

#define REF_DIR TD_SOURCE_DIR "/tests/data/megatron_ref"
#define REF_PREFIX REF_DIR "/ref_text_document"
#define SEQ 32
#define SEED 1234

static char g_tmp[256];

/* ---- Megatron's reference ---------------------------------------------------------- */

static int json_ints_equal(const cJSON *arr, const void *data, int64_t n, int elem_bytes) {
  if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != n) return 0;
  int64_t i = 0;
  for (const cJSON *v = arr->child; v; v = v->next, i++) {
    int64_t x = elem_bytes == 4 ? ((const int32_t *)data)[i] : ((const int64_t *)data)[i];
    if ((double)x != v->valuedouble) return 0;
  }
  return 1;
}

static int sample_rows_equal(const cJSON *rows, const td_gpt_index *gi) {
  if (cJSON_GetArraySize(rows) != gi->n_samples + 1) return 0;
  int64_t r = 0;
  for (const cJSON *row = rows->child; row; row = row->next, r++)
    if (!json_ints_equal(row, gi->sample_index + 2 * r, 2, 8)) return 0;
  return 1;
}

/* The listed samples: tokens and the documents they span. */
static int samples_equal(const cJSON *samples, const td_gpt_index *gi, int64_t *checked) {
  int32_t tokens[SEQ + 1];
  int bad = 0;
  *checked = 0;
  for (const cJSON *s = samples->child; s; s = s->next, (*checked)++) {
    int64_t i = (int64_t)cJSON_GetObjectItem(s, "i")->valuedouble;
    td_gpt_index_sample(gi, i, tokens);
    bad += !json_ints_equal(cJSON_GetObjectItem(s, "text"), tokens, SEQ + 1, 4);
    const int64_t *beg = gi->sample_index + 2 * gi->shuffle_index[i];
    int64_t docs[64], n = 0;
    for (int64_t d = beg[0]; d <= beg[2] && n < 64; d++) docs[n++] = gi->document_index[d];
    bad += !json_ints_equal(cJSON_GetObjectItem(s, "document_ids"), docs, n, 8);
  }
  return bad == 0;
}

static int json_int(const cJSON *o, const char *key) { return (int)cJSON_GetObjectItem(o, key)->valuedouble; }

static void check_reference_config(const td_indexed_dataset *ds, const char *name, const cJSON *c) {
  const cJSON *range = cJSON_GetObjectItem(c, "indices_first_last_count"), *req = cJSON_GetObjectItem(c, "num_samples_requested");
  int valid = !strcmp(cJSON_GetObjectItem(c, "split")->valuestring, "valid");
  td_gpt_index_params p = {.data = ds, .split = valid ? TD_SPLIT_VALID : TD_SPLIT_TRAIN,
                           .doc_begin = cJSON_GetArrayItem(range, 0)->valueint,
                           .doc_end = cJSON_GetArrayItem(range, 1)->valueint + 1,
                           .num_samples = cJSON_IsNull(req) ? 0 : req->valueint, .seq_length = SEQ, .seed = SEED};
  td_gpt_index gi;
  char err[512];
  if (td_gpt_index_open(&gi, &p, err, sizeof err)) {
    CHECK(0, "%s: %s", name, err);
    return;
  }
  int separate = 0;
  for (const cJSON *line = cJSON_GetObjectItem(c, "megatron_debug_log")->child; line; line = line->next)
    separate |= !strcmp(line->valuestring, "> separate_final_epoch: True");
  CHECK(gi.num_epochs == json_int(c, "num_epochs") && gi.tokens_per_epoch == json_int(c, "num_tokens_per_epoch") &&
            gi.n_samples == json_int(c, "len") && gi.separate_final_epoch == separate,
        "%s: %lld epochs of %lld tokens, %lld samples, separate final epoch %d", name, (long long)gi.num_epochs,
        (long long)gi.tokens_per_epoch, (long long)gi.n_samples, gi.separate_final_epoch);
  CHECK(json_ints_equal(cJSON_GetObjectItem(c, "document_index"), gi.document_index, gi.n_documents, 4),
        "%s: document index (%lld) equals Megatron's", name, (long long)gi.n_documents);
  CHECK(sample_rows_equal(cJSON_GetObjectItem(c, "sample_index"), &gi), "%s: sample index equals Megatron's", name);
  CHECK(json_ints_equal(cJSON_GetObjectItem(c, "shuffle_index"), gi.shuffle_index, gi.n_samples, 8),
        "%s: shuffle index equals Megatron's", name);
  int64_t n;
  int ok = samples_equal(cJSON_GetObjectItem(c, "samples"), &gi, &n);
  CHECK(ok, "%s: the first %lld samples (tokens and documents) equal Megatron's", name, (long long)n);
  td_gpt_index_close(&gi);
}

static cJSON *load_reference(void) {
  size_t len;
  char err[512];
  char *text = td_read_file(REF_DIR "/ref_gpt_samples.json", &len, err, sizeof err);
  CHECK(text != NULL, "read ref_gpt_samples.json: %s", text ? "ok" : err);
  cJSON *j = text ? cJSON_Parse(text) : NULL;
  td_free(text);
  return j;
}

/* --split 949,50,1 over 310 sequences: train [0, 294), valid [294, 310), test empty. */
static void check_split_matrix(const cJSON *ref) {
  const cJSON *m = cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "parameters"), "split_matrix");
  double mat[3][2];
  int present[3];
  char err[256];
  CHECK(td_split_parse("949,50,1", mat, present, err, sizeof err) == 0, "parse --split 949,50,1");
  int same = 1;
  for (int i = 0; i < 3; i++)
    for (int k = 0; k < 2; k++) same &= mat[i][k] == cJSON_GetArrayItem(cJSON_GetArrayItem(m, i), k)->valuedouble;
  CHECK(same, "split matrix equals Megatron's (to the bit)");
  int64_t b[3], e[3];
  for (int i = 0; i < 3; i++) td_split_range(mat, i, 310, &b[i], &e[i]);
  CHECK(b[0] == 0 && e[0] == 294 && b[1] == 294 && e[1] == 310 && b[2] == 310 && e[2] == 310,
        "split ranges [0,294) [294,310) [310,310)");
}

static void test_reference(const cJSON *ref) {
  td_indexed_dataset ds;
  char err[512];
  if (td_indexed_dataset_open(&ds, REF_PREFIX, err, sizeof err)) {
    CHECK(0, "%s", err);
    return;
  }
  check_split_matrix(ref);
  for (const cJSON *c = cJSON_GetObjectItem(ref, "configs")->child; c; c = c->next)
    check_reference_config(&ds, c->string, c);
  td_indexed_dataset_close(&ds);
}

/* The trainer's path: --data-path PREFIX --split 949,50,1. */
static void test_reference_top_level(const cJSON *ref) {
  const char *words[] = {REF_PREFIX};
  char cache[512], err[512];
  snprintf(cache, sizeof cache, "%s/top_cache", g_tmp);
  td_gpt_data_config cfg = {.data_path = words, .n_data_path = 1, .split = "949,50,1", .seq_length = SEQ,
                       .seed = SEED, .num_samples = {50, 12, 0}, .cache_dir = cache};
  td_gpt_datasets *d = td_gpt_datasets_open(&cfg, err, sizeof err);
  CHECK(d != NULL, "open --data-path ref --split 949,50,1: %s", d ? "ok" : err);
  if (!d) return;
  const char *names[2] = {"train_n50", "valid_none"};
  for (int s = 0; s < 2; s++) {
    const td_gpt_dataset *ds = td_gpt_datasets_split(d, (td_split)s);
    const cJSON *samples = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "configs"), names[s]), "samples");
    int bad = !ds;
    int32_t tokens[SEQ + 1];
    for (const cJSON *x = samples->child; x && ds; x = x->next) {
      td_gpt_dataset_sample(ds, (int64_t)cJSON_GetObjectItem(x, "i")->valuedouble, tokens);
      bad += !json_ints_equal(cJSON_GetObjectItem(x, "text"), tokens, SEQ + 1, 4);
    }
    CHECK(!bad && td_gpt_dataset_len(ds) == (s ? 12 : 783), "%s split through td_gpt_datasets: Megatron's samples", td_split_name((td_split)s));
  }
  CHECK(td_gpt_datasets_split(d, TD_SPLIT_TEST) == NULL, "no test samples asked: no test split");
  td_gpt_datasets_close(d);
  cfg.num_samples[2] = 8;
  d = td_gpt_datasets_open(&cfg, err, sizeof err);
  CHECK(!d && strstr(err, "test split") && strstr(err, "[310, 310)"), "test samples from an empty test split: %s", err);
  if (d) td_gpt_datasets_close(d);
}

/* ---- the index cache ----------------------------------------------------------------- */

static void copy_file(const char *from, const char *to) {
  size_t len;
  char err[512];
  char *data = td_read_file(from, &len, err, sizeof err);
  if (!data || td_write_file(to, data, len, err, sizeof err)) printf("copy %s: %s\n", from, err);
  td_free(data);
}

static void copy_dataset(const char *prefix) {
  char to[600];
  snprintf(to, sizeof to, "%s.idx", prefix);
  copy_file(REF_PREFIX ".idx", to);
  snprintf(to, sizeof to, "%s.bin", prefix);
  copy_file(REF_PREFIX ".bin", to);
}

static int count_files(const char *dir, char *last, size_t last_len) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    if (e->d_name[0] != '.') n++, snprintf(last, last_len, "%s/%s", dir, e->d_name);
  if (d) closedir(d);
  return n;
}

/* Open with params p; returns loaded_from_cache, or -1 on error. Keeps gi open. */
static int open_index(td_gpt_index *gi, const td_gpt_index_params *p) {
  char err[512];
  if (td_gpt_index_open(gi, p, err, sizeof err)) {
    printf("%s\n", err);
    return -1;
  }
  return gi->loaded_from_cache;
}

static int same_indices(const td_gpt_index *a, const td_gpt_index *b) {
  return a->n_documents == b->n_documents && a->n_samples == b->n_samples &&
         !memcmp(a->document_index, b->document_index, (size_t)a->n_documents * 4) &&
         !memcmp(a->sample_index, b->sample_index, (size_t)(a->n_samples + 1) * 16) &&
         !memcmp(a->shuffle_index, b->shuffle_index, (size_t)a->n_samples * 8);
}

static int reopen_loaded(const td_gpt_index_params *p, const td_gpt_index *ref) {
  td_gpt_index gi;
  int loaded = open_index(&gi, p);
  int ok = loaded >= 0 && same_indices(&gi, ref);
  if (loaded >= 0) td_gpt_index_close(&gi);
  return ok ? loaded : -1;
}

static void damage_file(const char *path, int truncate_it) {
  size_t len;
  char err[256];
  char *data = td_read_file(path, &len, err, sizeof err);
  if (!data) return;
  data[len / 2] ^= 0x10;
  td_write_file(path, data, truncate_it ? len / 2 : len, err, sizeof err);
  td_free(data);
}

static void test_cache_reuse_and_rebuild(void) {
  char prefix[512], cache[512], err[512], file[1024];
  snprintf(prefix, sizeof prefix, "%s/copy_a", g_tmp);
  snprintf(cache, sizeof cache, "%s/cache", g_tmp);
  copy_dataset(prefix);
  td_indexed_dataset ds;
  if (td_indexed_dataset_open(&ds, prefix, err, sizeof err)) return;
  td_gpt_index_params p = {.data = &ds, .split = TD_SPLIT_TRAIN, .doc_begin = 0, .doc_end = 294, .num_samples = 793,
                           .seq_length = SEQ, .seed = SEED, .cache_dir = cache};
  td_gpt_index first;
  CHECK(open_index(&first, &p) == 0 && count_files(cache, file, sizeof file) == 1, "first open builds and writes one cache file");
  CHECK(reopen_loaded(&p, &first) == 1, "second open loads the cache, identical indices");
  td_gpt_index_params q = p;
  q.seed = 99;
  CHECK(reopen_loaded(&q, &first) == -1 && count_files(cache, file, sizeof file) == 2, "another seed: a new cache file");
  q = p, q.seq_length = 16;
  td_gpt_index other;
  CHECK(open_index(&other, &q) == 0 && count_files(cache, file, sizeof file) == 3, "another sequence length: built anew");
  td_gpt_index_close(&other);
  q = p, q.num_samples = 50;
  CHECK(open_index(&other, &q) == 0, "another sample count: built anew");
  td_gpt_index_close(&other);
  CHECK(reopen_loaded(&p, &first) == 1, "the original parameters still load their cache");
  td_gpt_index_close(&first);
  td_indexed_dataset_close(&ds);
}

/* The cache of the train split, seed 1234, in a cache directory of its own. */
static void test_cache_stale_and_corrupt(void) {
  char prefix[512], cache[512], err[512], file[1024], bin[600];
  snprintf(prefix, sizeof prefix, "%s/copy_b", g_tmp);
  snprintf(cache, sizeof cache, "%s/cache_b", g_tmp);
  copy_dataset(prefix);
  td_indexed_dataset ds;
  if (td_indexed_dataset_open(&ds, prefix, err, sizeof err)) return;
  td_gpt_index_params p = {.data = &ds, .split = TD_SPLIT_TRAIN, .doc_begin = 0, .doc_end = 294, .num_samples = 1573,
                           .seq_length = SEQ, .seed = SEED, .cache_dir = cache};
  td_gpt_index ref;
  if (open_index(&ref, &p) != 0) return;
  count_files(cache, file, sizeof file);
  damage_file(file, 0);
  CHECK(reopen_loaded(&p, &ref) == 0, "a flipped byte in the cache: detected, rebuilt, same indices");
  CHECK(reopen_loaded(&p, &ref) == 1, "... and the rebuilt cache loads");
  damage_file(file, 1);
  CHECK(reopen_loaded(&p, &ref) == 0 && reopen_loaded(&p, &ref) == 1, "a truncated cache: rebuilt, then loaded");
  snprintf(bin, sizeof bin, "%s.bin", prefix);
  struct timespec t[2] = {{.tv_sec = 1000000000}, {.tv_sec = 1000000000}};
  utimensat(AT_FDCWD, bin, t, 0);
  CHECK(reopen_loaded(&p, &ref) == 0 && count_files(cache, file, sizeof file) == 1,
        "a newer .bin makes the cache stale: rebuilt in place");
  CHECK(reopen_loaded(&p, &ref) == 1, "... and then reused");
  p.cache_dir = "/proc/no_cache_here";
  CHECK(reopen_loaded(&p, &ref) == 0, "an unwritable cache directory: a warning, indices in memory");
  td_gpt_index_close(&ref);
  td_indexed_dataset_close(&ds);
}

/* ---- blending --------------------------------------------------------------------- */

static void test_blend_parse_and_weights(void) {
  td_blend b;
  char err[256];
  const char *w1[] = {"30", "A", "70", " B "};
  CHECK(!td_blend_parse(&b, w1, 4, err, sizeof err) && b.n == 2 && b.weights && !strcmp(b.prefixes[1], "B"),
        "\"30 A 70 B\": two weighted prefixes (stripped)");
  td_blend_normalize(b.weights, 2);
  CHECK(b.weights[0] == 0.3 && b.weights[1] == 0.7, "30/70 normalise to 0.3/0.7");
  td_blend_free(&b);
  const char *w2[] = {"A", "B"}, *w3[] = {"0.5", "A", "B"}, *w4[] = {"0.5", "A", "x", "B"};
  CHECK(!td_blend_parse(&b, w2, 2, err, sizeof err) && b.n == 2 && !b.weights, "\"A B\": unweighted");
  td_blend_free(&b);
  CHECK(!td_blend_parse(&b, w3, 3, err, sizeof err) && b.n == 3 && !b.weights, "odd count: all prefixes");
  td_blend_free(&b);
  CHECK(!td_blend_parse(&b, w4, 4, err, sizeof err) && b.n == 4 && !b.weights, "a non-number weight: all prefixes");
  td_blend_free(&b);
  const char *w5[] = {"-1", "A", "2", "B"}, *w6[] = {"0", "A", "0", "B"};
  CHECK(td_blend_parse(&b, w5, 4, err, sizeof err) && strstr(err, "'A'"), "a negative weight: %s", err);
  CHECK(td_blend_parse(&b, w6, 4, err, sizeof err), "all-zero weights: %s", err);
  /* python3 -c 'import numpy as np; n = lambda w: (np.array(w) / np.sum(np.array(w))).tolist();
   *   w = n([0.1, 0.2, 0.3]); print([x.hex() for x in w], [x.hex() for x in n(w)])'
   * Megatron normalises in the builder and again in BlendedDataset: the second pass moves the bits. */
  double w[3] = {0.1, 0.2, 0.3};
  td_blend_normalize(w, 3);
  CHECK(w[0] == 0x1.5555555555555p-3 && w[1] == 0x1.5555555555555p-2 && w[2] == 0x1.ffffffffffffep-2,
        "normalize([0.1, 0.2, 0.3]) equals numpy's bits");
  td_blend_normalize(w, 3);
  CHECK(w[0] == 0x1.5555555555556p-3 && w[1] == 0x1.5555555555556p-2 && w[2] == 0x1.fffffffffffffp-2,
        "normalised again, as BlendedDataset does, equals numpy's bits");
  /* python3 -c 'import numpy as np; print(np.sum(np.array([1.0 / (i + 1) for i in range(200)])).hex())'
   * (a left-to-right sum gives ...addp+2: numpy sums pairwise above 128 elements) */
  double x[200];
  for (int i = 0; i < 200; i++) x[i] = 1.0 / (i + 1);
  CHECK(td_numpy_sum(x, 200) == 0x1.7831a8b7c3adbp+2, "numpy.sum of 200 values, bit for bit (pairwise)");
}

static void test_blend_sizes_and_indices(void) {
  /* python3 -c 'import math; print(int(math.ceil(t * w * 1.005)))' for each (t, w) */
  CHECK(td_blend_dataset_size(1000, 0.3) == 302 && td_blend_dataset_size(100, 0.3) == 31 &&
            td_blend_dataset_size(100, 0.7) == 71 && td_blend_dataset_size(800, 1.0 / 3) == 268 &&
            td_blend_dataset_size(123457, 0.25) == 31019,
        "samples per blended dataset: ceil(target * weight * 1.005)");
  static const int16_t want_d[10] = {1, 0, 1, 1, 0, 1, 1, 0, 1, 1};
  static const int64_t want_s[10] = {0, 0, 1, 2, 1, 3, 4, 2, 5, 6};
  const double w[2] = {0.3, 0.7};
  int16_t d[10];
  int64_t s[10];
  td_blend_indices(w, 2, 10, d, s);
  CHECK(!memcmp(d, want_d, sizeof d) && !memcmp(s, want_s, sizeof s), "blending index for 0.3/0.7 (Megatron's greedy order)");
  static const int16_t want3[12] = {2, 1, 0, 2, 1, 2, 0, 2, 1, 2, 0, 2};
  const double w3[3] = {0.2, 0.3, 0.5};
  int16_t d3[12];
  int64_t s3[12];
  td_blend_indices(w3, 3, 12, d3, s3);
  CHECK(!memcmp(d3, want3, sizeof d3) && s3[11] == 5, "blending index for 0.2/0.3/0.5");
}

/* Each blended sample is sample j of its part; part 0 (ref) with 31 samples has one
 * epoch, so its samples are the reference's train samples. */
static void check_blend_samples(const td_gpt_dataset *ds, const cJSON *ref_samples) {
  int32_t a[SEQ + 1], b[SEQ + 1];
  int bad = 0, from0 = 0, matched_ref = 0;
  for (int64_t s = 0; s < td_gpt_dataset_len(ds); s++) {
    int part;
    int64_t j;
    td_gpt_dataset_locate(ds, s, &part, &j);
    td_gpt_dataset_sample(ds, s, a);
    td_gpt_index_sample(td_gpt_dataset_part(ds, part), j, b);
    bad += memcmp(a, b, sizeof a) != 0;
    from0 += part == 0;
    const cJSON *r = part == 0 ? cJSON_GetArrayItem(ref_samples, (int)j) : NULL;
    if (r) bad += !json_ints_equal(cJSON_GetObjectItem(r, "text"), a, SEQ + 1, 4), matched_ref++;
  }
  CHECK(!bad && from0 == 31, "blended samples come from their parts (%d from ref, %d checked against Megatron's)", from0,
        matched_ref);
}

static void test_blend_datasets(const cJSON *ref) {
  char b_prefix[512], cache[512], err[512];
  snprintf(b_prefix, sizeof b_prefix, "%s/copy_c", g_tmp);
  snprintf(cache, sizeof cache, "%s/blend_cache", g_tmp);
  copy_dataset(b_prefix);
  const char *words[] = {"0.3", REF_PREFIX, "0.7", b_prefix};
  td_gpt_data_config cfg = {.data_path = words, .n_data_path = 4, .split = "949,50,1", .seq_length = SEQ, .seed = SEED,
                       .num_samples = {100, 10, 0}, .cache_dir = cache};
  td_gpt_datasets *d = td_gpt_datasets_open(&cfg, err, sizeof err);
  CHECK(d != NULL, "open --data-path 0.3 ref 0.7 copy: %s", d ? "ok" : err);
  if (!d) return;
  const td_gpt_dataset *train = td_gpt_datasets_split(d, TD_SPLIT_TRAIN), *valid = td_gpt_datasets_split(d, TD_SPLIT_VALID);
  CHECK(td_gpt_dataset_n_parts(train) == 2 && td_gpt_dataset_len(train) == 31 + 71 &&
            td_gpt_dataset_part(train, 0)->p.num_samples == 31 && td_gpt_dataset_len(valid) == 4 + 8,
        "sizes: train 31 + 71 = 102 of 100 asked, valid 4 + 8 (Megatron's 0.5%% margin)");
  const cJSON *ref_samples = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "configs"), "train_n50"), "samples");
  check_blend_samples(train, ref_samples);
  td_gpt_datasets_close(d);

  const char *plain[] = {REF_PREFIX, b_prefix};
  cfg.data_path = plain, cfg.n_data_path = 2, cfg.num_samples[0] = 1000;
  d = td_gpt_datasets_open(&cfg, err, sizeof err);
  train = d ? td_gpt_datasets_split(d, TD_SPLIT_TRAIN) : NULL;
  int part0, part1;
  int64_t j0, j1;
  if (train) td_gpt_dataset_locate(train, 0, &part0, &j0), td_gpt_dataset_locate(train, 1, &part1, &j1);
  CHECK(train && td_gpt_dataset_len(train) == 1000 && td_gpt_dataset_part(train, 1)->n_samples == 783 && part0 == 0 &&
            part1 == 1,
        "unweighted blend: one epoch each, weighed by length (783:783), 1000 of 1566 drawn alternately");
  if (d) td_gpt_datasets_close(d);
}

static void test_split_paths(void) {
  char b_prefix[512], cache[512], err[512];
  snprintf(b_prefix, sizeof b_prefix, "%s/copy_c", g_tmp);
  snprintf(cache, sizeof cache, "%s/split_cache", g_tmp);
  const char *train_w[] = {REF_PREFIX}, *valid_w[] = {b_prefix};
  td_gpt_data_config cfg = {.split_data_path = {train_w, valid_w, NULL}, .n_split_data_path = {1, 1, 0},
                       .seq_length = SEQ, .seed = SEED, .num_samples = {50, 20, 10}, .cache_dir = cache};
  td_gpt_datasets *d = td_gpt_datasets_open(&cfg, err, sizeof err);
  const td_gpt_dataset *t = d ? td_gpt_datasets_split(d, TD_SPLIT_TRAIN) : NULL, *v = d ? td_gpt_datasets_split(d, TD_SPLIT_VALID) : NULL;
  CHECK(t && v && !td_gpt_datasets_split(d, TD_SPLIT_TEST) && td_gpt_dataset_part(t, 0)->p.doc_end == 310 &&
            td_gpt_dataset_part(v, 0)->p.doc_begin == 0 && td_gpt_dataset_part(v, 0)->p.split == TD_SPLIT_VALID,
        "--train-data-path / --valid-data-path: all of each dataset, no test path no test split: %s", d ? "ok" : err);
  if (d) td_gpt_datasets_close(d);
  const char *both[] = {REF_PREFIX};
  cfg.data_path = both, cfg.n_data_path = 1;
  d = td_gpt_datasets_open(&cfg, err, sizeof err);
  CHECK(!d && strstr(err, "--data-path"), "--data-path with --train-data-path is an error: %s", err);
  cfg.n_data_path = 0, cfg.n_split_data_path[0] = cfg.n_split_data_path[1] = 0;
  d = td_gpt_datasets_open(&cfg, err, sizeof err);
  CHECK(!d && strstr(err, "no data"), "no data at all is an error: %s", err);
  cfg.n_data_path = 1, cfg.seed = 1LL << 32;
  d = td_gpt_datasets_open(&cfg, err, sizeof err);
  CHECK(!d && strstr(err, "2^32"), "a seed numpy would refuse is an error: %s", err);
}

/* ---- masks, sample counts, sampler ---------------------------------------------------- */

static void test_masks(void) {
  const int32_t tok[7] = {5, 9, 6, 7, 9, 9, 8}; /* eod = 9 */
  float loss[7];
  int32_t pos[7], start[7];
  td_gpt_mask_config c = {.eod = 9, .eod_mask_loss = 1, .reset_position_ids = 1, .reset_attention_mask = 1};
  td_gpt_masks(tok, 7, &c, loss, pos, start);
  static const float want_loss[7] = {1, 0, 1, 1, 0, 0, 1};
  static const int32_t want_pos[7] = {0, 1, 0, 1, 2, 0, 0}, want_start[7] = {0, 0, 2, 2, 2, 5, 6};
  CHECK(!memcmp(loss, want_loss, sizeof loss), "--eod-mask-loss: no loss where the input is eod");
  CHECK(!memcmp(pos, want_pos, sizeof pos), "--reset-position-ids: positions restart after each eod");
  CHECK(!memcmp(start, want_start, sizeof start), "--reset-attention-mask: attention starts after the last eod");
  td_gpt_mask_config off = {.eod = 9};
  td_gpt_masks(tok, 7, &off, loss, pos, start);
  int plain = 1;
  for (int t = 0; t < 7; t++) plain &= loss[t] == 1 && pos[t] == t && start[t] == 0;
  CHECK(plain, "defaults: all loss, positions 0..n-1, causal from 0");
  int64_t n[3];
  td_gpt_num_samples(100, 8, 10, 5, n);
  CHECK(n[0] == 800 && n[1] == 440 && n[2] == 40, "sample counts: 800 / (100/10+1)*5*8 = 440 / 40");
}

/* DP=1 with 4 micro-batches of 2 and DP=2 with 2 each give the same global batch of 8
 * every iteration; a sampler started at a consumed count continues the same sequence. */
static int global_batch(const td_sampler *s, int64_t consumed, int64_t gbs, int64_t *out) {
  int64_t mb = s->micro_batch, per = mb * s->dp_size, k = 0;
  int ok = 1;
  for (int64_t j = 0; j < gbs / per; j++)
    for (int r = 0; r < s->dp_size; r++, k += mb) {
      td_sampler rank = *s;
      rank.dp_rank = r;
      ok &= td_sampler_micro_batch(&rank, consumed + j * per, out + k);
    }
  return ok;
}

static int cmp64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static void test_sampler(void) {
  char err[256];
  td_sampler dp1, dp2, resumed;
  const int64_t gbs = 8, total = 783;
  CHECK(!td_sampler_init(&dp1, total, 2, 0, 1, err, sizeof err) && !td_sampler_init(&dp2, total, 2, 0, 2, err, sizeof err),
        "samplers for DP=1 and DP=2");
  int64_t a[8], b[8], mb[2];
  int same = 1;
  for (int it = 0; it < 6; it++) {
    same &= global_batch(&dp1, it * gbs, gbs, a) && global_batch(&dp2, it * gbs, gbs, b);
    qsort(b, 8, sizeof b[0], cmp64);
    same &= !memcmp(a, b, sizeof a) && a[0] == it * gbs && a[7] == it * gbs + 7;
  }
  CHECK(same, "6 iterations: the DP=2 ranks' micro-batches together are the DP=1 global batch, in consumed order");
  td_sampler_init(&resumed, total, 2, 1, 2, err, sizeof err);
  int ok = td_sampler_micro_batch(&resumed, 3 * gbs + 4, mb);
  CHECK(ok && mb[0] == 30 && mb[1] == 31, "resumed at 24 consumed, rank 1's 2nd micro-batch is samples 30, 31");
  CHECK(!td_sampler_micro_batch(&dp2, total - 3, mb) && td_sampler_micro_batch(&dp2, total - 4, mb),
        "the last incomplete step is dropped");
  CHECK(td_sampler_init(&dp2, total, 2, 2, 2, err, sizeof err) && strstr(err, "rank"), "rank outside the group: %s", err);
}

/* The same through real samples: DP ranks fetch exactly the DP=1 batch's tokens. */
static void test_sampler_samples(const td_gpt_dataset *ds) {
  td_sampler dp1, r0, r1;
  char err[256];
  td_sampler_init(&dp1, td_gpt_dataset_len(ds), 4, 0, 1, err, sizeof err);
  td_sampler_init(&r0, td_gpt_dataset_len(ds), 2, 0, 2, err, sizeof err);
  td_sampler_init(&r1, td_gpt_dataset_len(ds), 2, 1, 2, err, sizeof err);
  int bad = 0;
  for (int64_t consumed = 100; consumed < 140; consumed += 4) { /* resumed at 100 */
    int64_t g[4], x[2], y[2];
    int32_t t1[SEQ + 1], t2[SEQ + 1];
    td_sampler_micro_batch(&dp1, consumed, g);
    td_sampler_micro_batch(&r0, consumed, x), td_sampler_micro_batch(&r1, consumed, y);
    int64_t both[4] = {x[0], x[1], y[0], y[1]};
    for (int k = 0; k < 4; k++) {
      td_gpt_dataset_sample(ds, g[k], t1), td_gpt_dataset_sample(ds, both[k], t2);
      bad += memcmp(t1, t2, sizeof t1) != 0;
    }
  }
  CHECK(bad == 0, "10 steps from consumed=100: rank 0 + rank 1 tokens equal the DP=1 micro-batch's");
}

/* Without --data-cache-path the cache goes where Megatron puts it: PREFIX/cache/GPTDataset_indices
 * (a copy of the reference in the temporary directory: never write next to the shared data). */
static void test_sampler_on_reference(void) {
  char prefix[512], dir[600], file[1024], err[512];
  snprintf(prefix, sizeof prefix, "%s/copy_d", g_tmp);
  copy_dataset(prefix);
  const char *words[] = {prefix};
  td_gpt_data_config cfg = {.data_path = words, .n_data_path = 1, .split = "949,50,1", .seq_length = SEQ, .seed = SEED,
                       .num_samples = {200, 0, 0}};
  td_gpt_datasets *d = td_gpt_datasets_open(&cfg, err, sizeof err);
  snprintf(dir, sizeof dir, "%s/cache/GPTDataset_indices", prefix);
  CHECK(d && count_files(dir, file, sizeof file) == 1, "no --data-cache-path: the cache is in PREFIX/cache/GPTDataset_indices: %s",
        d ? file : err);
  if (!d) return;
  test_sampler_samples(td_gpt_datasets_split(d, TD_SPLIT_TRAIN));
  td_gpt_datasets_close(d);
}

int main(void) {
  snprintf(g_tmp, sizeof g_tmp, "/tmp/td_test_gpt_XXXXXX");
  if (!mkdtemp(g_tmp)) return 1;
  cJSON *ref = load_reference();
  if (ref) {
    test_reference(ref);
    test_reference_top_level(ref);
    test_blend_datasets(ref);
  }
  test_cache_reuse_and_rebuild();
  test_cache_stale_and_corrupt();
  test_blend_parse_and_weights();
  test_blend_sizes_and_indices();
  test_split_paths();
  test_masks();
  test_sampler();
  test_sampler_on_reference();
  cJSON_Delete(ref);
  char err[256];
  td_remove_tree(g_tmp, err, sizeof err);
  return tst_finish();
}
