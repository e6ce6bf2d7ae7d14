#define _DEFAULT_SOURCE
#include "data/gpt_dataset.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/checked.h"
#include "base/error.h"
#include "base/files.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/memory_limit.h"
#include "data/blend.h"
#include "data/numpy_random.h"

static char *strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *strf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *s = td_malloc((size_t)n + 1);
  va_start(ap, fmt);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}

const char *td_split_name(td_split s) {
  static const char *names[] = {"train", "valid", "test"};
  return names[s];
}

/* ---- sizes: epochs and samples (GPTDataset._get_num_epochs and friends) ---------- */

static int64_t split_tokens(const td_gpt_index_params *p) {
  int64_t t = 0;
  for (int64_t s = p->doc_begin; s < p->doc_end; s++) t += td_indexed_dataset_seq_len(p->data, s);
  return t;
}

/* Megatron separates the last epoch (shuffles it on its own) when the samples asked
 * of it are below 80% of an epoch, so a small overshoot is not drawn from all epochs. */
static void plan_final_epoch(td_gpt_index *gi) {
  int64_t T = gi->tokens_per_epoch, L = gi->p.seq_length;
  gi->separate_final_epoch = 0;
  if (gi->num_epochs == 1) return;
  int64_t sans_final = ((gi->num_epochs - 1) * T - 1) / L;
  int64_t from_final = gi->p.num_samples - sans_final, per_epoch = (T - 1) / L;
  TD_CHECK(from_final >= 0 && from_final <= per_epoch + 1, "final epoch samples %lld", (long long)from_final);
  gi->separate_final_epoch = from_final < (int64_t)(0.80 * (double)per_epoch);
}

/* The flags that ask a split's samples (Megatron's get_train_valid_test_num_samples). */
static const char *asked_by(td_split s) {
  static const char *const by[] = {"--train-iters x --global-batch-size, or --train-samples",
                                   "(--train-iters / --eval-interval + 1) x --eval-iters x "
                                   "--global-batch-size",
                                   "--eval-iters x --global-batch-size"};
  return by[s];
}

static int plan(td_gpt_index *gi, char *err, size_t errlen) {
  const td_gpt_index_params *p = &gi->p;
  int64_t T = split_tokens(p), L = p->seq_length, docs = p->doc_end - p->doc_begin;
  if (T < 2)
    return td_errorf(err, errlen, "the %s split of '%s' (sequences [%lld, %lld)) holds %lld tokens: too few for any sample",
                 td_split_name(p->split), p->data->prefix, (long long)p->doc_begin, (long long)p->doc_end, (long long)T);
  if (p->num_samples > (INT64_MAX - T) / L)
    return td_errorf(err, errlen,
                     "%lld %s samples (%s) of --seq-length %lld tokens are more tokens than a "
                     "64-bit count holds",
                     (long long)p->num_samples, td_split_name(p->split), asked_by(p->split),
                     (long long)L);
  int64_t wanted = p->num_samples * L + 1; /* + 1: the extra label token of the last sample */
  int64_t epochs = (wanted + T - 1) / T;
  if (epochs < 1) epochs = 1;
  if (epochs > INT32_MAX || epochs > (INT64_MAX / 8) / docs || epochs > INT64_MAX / T)
    return td_errorf(err, errlen, "%lld samples of the %s split of '%s' (%s) need %lld epochs of its %lld tokens: too many",
                 (long long)p->num_samples, td_split_name(p->split), p->data->prefix, asked_by(p->split),
                 (long long)epochs, (long long)T);
  gi->tokens_per_epoch = T, gi->num_epochs = epochs;
  gi->n_documents = epochs * docs;
  gi->n_samples = (epochs * T - 1) / L;
  plan_final_epoch(gi);
  return 0;
}

/* ---- building the three indices ---------------------------------------------------- */

static void fill_epochs(const td_gpt_index_params *p, int32_t *out, int64_t epochs) {
  int64_t docs = p->doc_end - p->doc_begin;
  for (int64_t e = 0; e < epochs; e++)
    for (int64_t j = 0; j < docs; j++) out[e * docs + j] = (int32_t)(p->doc_begin + j);
}

/* _build_document_index: the split's sequences once per epoch, shuffled. */
static void build_document_index(const td_gpt_index *gi, td_np_random *r, int32_t *out) {
  int64_t docs = gi->p.doc_end - gi->p.doc_begin, e = gi->num_epochs;
  if (!gi->separate_final_epoch) {
    fill_epochs(&gi->p, out, e);
    td_np_random_shuffle(r, out, e * docs, sizeof *out);
    return;
  }
  fill_epochs(&gi->p, out, e - 1);
  td_np_random_shuffle(r, out, (e - 1) * docs, sizeof *out);
  fill_epochs(&gi->p, out + (e - 1) * docs, 1);
  td_np_random_shuffle(r, out + (e - 1) * docs, docs, sizeof *out);
}

/* helpers.cpp build_sample_idx: walk the documents in document-index order, cutting a
 * sample every seq_length tokens; consecutive samples share one token (the label of
 * the last input). Row s is where sample s starts. */
static void build_sample_index(const td_gpt_index *gi, int64_t *rows) {
  const td_indexed_dataset *data = gi->p.data;
  int64_t pos = 0, off = 0;
  rows[0] = 0, rows[1] = 0;
  for (int64_t s = 1; s <= gi->n_samples; s++) {
    int64_t remaining = gi->p.seq_length + 1;
    while (remaining != 0) {
      int64_t doc_len = td_indexed_dataset_seq_len(data, gi->document_index[pos]) - off;
      remaining -= doc_len;
      if (remaining <= 0) {
        off += remaining + doc_len - 1; /* the last token is shared with the next sample */
        remaining = 0;
      } else {
        TD_CHECK(pos + 1 < gi->n_documents, "sample %lld runs past the document index", (long long)s);
        pos++, off = 0;
      }
    }
    rows[2 * s] = pos, rows[2 * s + 1] = off;
  }
}

/* _build_shuffle_index: a permutation of the samples; with a separate final epoch the
 * samples before it and the samples of it are shuffled apart. */
static void build_shuffle_index(const td_gpt_index *gi, td_np_random *r, int64_t *out) {
  int64_t n = gi->n_samples, first = n;
  if (gi->separate_final_epoch) first = ((gi->num_epochs - 1) * gi->tokens_per_epoch - 1) / gi->p.seq_length;
  for (int64_t i = 0; i < n; i++) out[i] = i;
  td_np_random_shuffle(r, out, first, sizeof *out);
  if (first < n) td_np_random_shuffle(r, out + first, n - first, sizeof *out);
}

static size_t pad8(size_t n) { return (n + 7) & ~(size_t)7; }

/* What build() allocates: the document index, the sample index and the shuffle index. */
static uint64_t build_bytes(const td_gpt_index *gi) {
  uint64_t docs = td_sat_bytes(gi->n_documents, sizeof(int32_t)) + 8;
  uint64_t rows = td_sat_bytes(gi->n_samples + 1, 2 * sizeof(int64_t));
  return td_sat_add(td_sat_add(docs, rows), td_sat_bytes(gi->n_samples, sizeof(int64_t)));
}

/* The indices must fit in memory before they are built (a mistyped --train-iters
 * asks for billions of samples: tens of GB of indices). */
static int check_build_memory(const td_gpt_index *gi, char *err, size_t errlen) {
  char what[1024], detail[320];
  snprintf(what, sizeof what, "building the GPTDataset %s indices of '%s'", td_split_name(gi->p.split),
           gi->p.data->prefix);
  snprintf(detail, sizeof detail, "%lld samples asked by %s, %lld epochs of %lld documents",
           (long long)gi->p.num_samples, asked_by(gi->p.split), (long long)gi->num_epochs,
           (long long)(gi->p.doc_end - gi->p.doc_begin));
  return td_memory_check(build_bytes(gi), 1, what, detail, err, errlen);
}

static void build(td_gpt_index *gi) {
  size_t doc_bytes = pad8((size_t)gi->n_documents * 4), rows = (size_t)gi->n_samples + 1;
  char *block = td_malloc(doc_bytes + rows * 16 + (size_t)gi->n_samples * 8);
  int32_t *doc = (int32_t *)block;
  int64_t *sample = (int64_t *)(block + doc_bytes), *shuffle = sample + 2 * rows;
  td_np_random r;
  td_np_random_seed(&r, gi->p.seed); /* one RandomState for the document and shuffle indices, as Megatron */
  build_document_index(gi, &r, doc);
  gi->document_index = doc;
  build_sample_index(gi, sample);
  build_shuffle_index(gi, &r, shuffle);
  gi->sample_index = sample, gi->shuffle_index = shuffle;
  gi->heap = block;
}

/* ---- the cache ---------------------------------------------------------------------
 * One file per (dataset, split, parameters), named by a hash of the parameters:
 *   "TDGPTIDX" u64 version, u64 description length, description (padded to 8),
 *   u64 n_documents, u64 n_samples + 1, u64 n_samples,
 *   i32 document_index (padded to 8), i64 sample_index[rows][2], i64 shuffle_index,
 *   u64 checksum of everything after the magic.
 * The description also records the size and mtime of the .idx and .bin, so a cache
 * built from other data is stale: it is rebuilt, as is a file whose checksum fails. */

#define CACHE_MAGIC "TDGPTIDX"
#define CACHE_VERSION 1

typedef struct {
  uint64_t h;
  uint8_t pending[8];
  int n_pending;
} hasher;

static uint64_t mix_word(uint64_t h, uint64_t w) { return (h ^ w) * 0x100000001b3ULL; }

/* A word-at-a-time FNV-1a variant: fast enough for GB-sized indices, and any changed
 * byte changes it. Bytes are taken in 8-byte words; the stream length is a multiple of 8. */
static void hash_feed(hasher *s, const void *data, size_t n) {
  const uint8_t *p = data;
  while (n && s->n_pending) {
    s->pending[s->n_pending++] = *p++, n--;
    if (s->n_pending == 8) {
      uint64_t w;
      memcpy(&w, s->pending, 8);
      s->h = mix_word(s->h, w), s->n_pending = 0;
    }
  }
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    s->h = mix_word(s->h, w);
  }
  for (; n; n--) s->pending[s->n_pending++] = *p++;
}

static uint64_t fnv1a(const char *s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ULL;
  return h;
}

static char *describe_params(const td_gpt_index_params *p) {
  return strf("trident GPTDataset indices, format %d\ndataset: %s\nsplit: %s, sequences [%lld, %lld)\n"
              "num_samples: %lld\nsequence_length: %lld\nrandom_seed: %u\nadd_extra_token_to_sequence: 1\n",
              CACHE_VERSION, p->data->prefix, td_split_name(p->split), (long long)p->doc_begin,
              (long long)p->doc_end, (long long)p->num_samples, (long long)p->seq_length, p->seed);
}

static char *describe_file(const char *prefix, const char *ext) {
  char *path = strf("%s%s", prefix, ext);
  struct stat st;
  char *d = stat(path, &st) == 0
                ? strf("%s: %lld bytes, modified %lld.%09ld\n", ext, (long long)st.st_size,
                       (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec)
                : strf("%s: missing\n", ext);
  td_free(path);
  return d;
}

/* The cache path (named by the parameters) and the full description (with file stamps). */
static void cache_names(const td_gpt_index *gi, char **path, char **desc) {
  char *params = describe_params(&gi->p);
  char *idx = describe_file(gi->p.data->prefix, ".idx"), *bin = describe_file(gi->p.data->prefix, ".bin");
  *path = strf("%s/%016llx-GPTDataset-%s.tdindex", gi->p.cache_dir, (unsigned long long)fnv1a(params),
               td_split_name(gi->p.split));
  *desc = strf("%s%s%s", params, idx, bin);
  td_free(params), td_free(idx), td_free(bin);
}

static int put(FILE *f, hasher *h, const void *p, size_t n) {
  if (h) hash_feed(h, p, n);
  return fwrite(p, 1, n, f) == n ? 0 : -1;
}

static int write_cache_body(FILE *f, const td_gpt_index *gi, const char *desc) {
  static const uint8_t zeros[8];
  hasher h = {.h = 0xcbf29ce484222325ULL};
  uint64_t hdr[2] = {CACHE_VERSION, strlen(desc)};
  uint64_t counts[3] = {(uint64_t)gi->n_documents, (uint64_t)gi->n_samples + 1, (uint64_t)gi->n_samples};
  size_t doc_bytes = (size_t)gi->n_documents * 4;
  int bad = put(f, NULL, CACHE_MAGIC, 8);
  bad |= put(f, &h, hdr, 16);
  bad |= put(f, &h, desc, hdr[1]);
  bad |= put(f, &h, zeros, pad8(hdr[1]) - hdr[1]);
  bad |= put(f, &h, counts, 24);
  bad |= put(f, &h, gi->document_index, doc_bytes);
  bad |= put(f, &h, zeros, pad8(doc_bytes) - doc_bytes);
  bad |= put(f, &h, gi->sample_index, ((size_t)gi->n_samples + 1) * 16);
  bad |= put(f, &h, gi->shuffle_index, (size_t)gi->n_samples * 8);
  bad |= put(f, NULL, &h.h, 8);
  return bad;
}

/* Written under a temporary name and renamed, so a reader never sees half a file. */
static int cache_save(const td_gpt_index *gi, const char *path, const char *desc, char *err, size_t errlen) {
  if (td_mkdir_p(gi->p.cache_dir, err, errlen)) return -1;
  char *tmp = strf("%s.tmp.%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "wb");
  int rc = f ? 0 : td_errorf(err, errlen, "cannot create '%s': %s", tmp, strerror(errno));
  if (f) {
    int bad = write_cache_body(f, gi, desc);
    bad |= fflush(f) != 0;
    bad |= fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    rc = bad ? td_errorf(err, errlen, "cannot write '%s': %s", tmp, strerror(errno)) : td_rename(tmp, path, err, errlen);
    if (rc) remove(tmp);
  }
  td_free(tmp);
  return rc;
}

/* Indices that cannot make td_gpt_index_sample read out of bounds. */
static int indices_in_range(const td_gpt_index *gi) {
  for (int64_t i = 0; i < gi->n_documents; i++)
    if (gi->document_index[i] < gi->p.doc_begin || gi->document_index[i] >= gi->p.doc_end) return 0;
  const int64_t *r = gi->sample_index;
  if (r[0] != 0 || r[1] != 0) return 0;
  for (int64_t s = 1; s <= gi->n_samples; s++) {
    int64_t pos = r[2 * s], off = r[2 * s + 1];
    if (pos < r[2 * s - 2] || pos >= gi->n_documents || off < 0) return 0;
    if (pos == r[2 * s - 2] && off < r[2 * s - 1]) return 0;
    if (off >= td_indexed_dataset_seq_len(gi->p.data, gi->document_index[pos])) return 0;
  }
  for (int64_t i = 0; i < gi->n_samples; i++)
    if (gi->shuffle_index[i] < 0 || gi->shuffle_index[i] >= gi->n_samples) return 0;
  return 1;
}

/* Point gi's arrays into a mapped cache file; NULL if it is fine, else what is wrong. */
static const char *cache_attach(td_gpt_index *gi, const uint8_t *m, size_t len, const char *desc) {
  size_t dlen = strlen(desc), head = 24 + pad8(dlen) + 24;
  if (len < head + 8 || memcmp(m, CACHE_MAGIC, 8) != 0) return "not a trident index cache";
  uint64_t v[2], counts[3];
  memcpy(v, m + 8, 16);
  if (v[0] != CACHE_VERSION || v[1] != dlen || memcmp(m + 24, desc, dlen) != 0)
    return "stale (built for other parameters or other data files)";
  memcpy(counts, m + 24 + pad8(dlen), 24);
  size_t doc_bytes = pad8((size_t)gi->n_documents * 4), rows = (size_t)gi->n_samples + 1;
  if (counts[0] != (uint64_t)gi->n_documents || counts[1] != rows || counts[2] != (uint64_t)gi->n_samples ||
      len != head + doc_bytes + rows * 16 + (size_t)gi->n_samples * 8 + 8)
    return "corrupt (sizes do not match)";
  hasher h = {.h = 0xcbf29ce484222325ULL};
  hash_feed(&h, m + 8, len - 16);
  if (memcmp(&h.h, m + len - 8, 8) != 0) return "corrupt (checksum mismatch)";
  gi->document_index = (const int32_t *)(m + head);
  gi->sample_index = (const int64_t *)(m + head + doc_bytes);
  gi->shuffle_index = gi->sample_index + 2 * rows;
  return indices_in_range(gi) ? NULL : "corrupt (indices out of range)";
}

/* 0: loaded. -1: not usable; *why says why (NULL when there is simply no cache yet). */
static int cache_load(td_gpt_index *gi, const char *path, const char *desc, const char **why) {
  *why = NULL;
  if (!td_path_exists(path)) return -1;
  char err[512];
  size_t len;
  const uint8_t *m = td_mmap_file(path, &len, err, sizeof err);
  if (!m) {
    *why = "unreadable";
    return -1;
  }
  *why = cache_attach(gi, m, len, desc);
  if (*why) {
    td_munmap(m, len);
    gi->document_index = NULL, gi->sample_index = NULL, gi->shuffle_index = NULL;
    return -1;
  }
  gi->map = m, gi->map_len = len;
  return 0;
}

/* ---- one GPT index: open, close, sample -------------------------------------------- */

static int check_params(const td_gpt_index_params *p, char *err, size_t errlen) {
  if (p->seq_length < 2) return td_errorf(err, errlen, "--seq-length must be at least 2, not %lld", (long long)p->seq_length);
  if (p->num_samples < 0) return td_errorf(err, errlen, "negative number of samples %lld", (long long)p->num_samples);
  if (p->doc_begin < 0 || p->doc_begin >= p->doc_end || p->doc_end > p->data->n_sequences)
    return td_errorf(err, errlen, "the %s split of '%s' covers no sequences ([%lld, %lld) of %lld)", td_split_name(p->split),
                 p->data->prefix, (long long)p->doc_begin, (long long)p->doc_end, (long long)p->data->n_sequences);
  if (!td_idx_dtype_is_token(p->data->dtype) || p->data->n_sequences > INT32_MAX)
    return td_errorf(err, errlen, "'%s' cannot be a GPT dataset: %s tokens, %lld sequences (at most 2^31 - 1)", p->data->prefix,
                 td_idx_dtype_name(p->data->dtype), (long long)p->data->n_sequences);
  return 0;
}

static void build_and_cache(td_gpt_index *gi, const char *path, const char *desc) {
  td_info("Build and save the GPTDataset %s indices", td_split_name(gi->p.split));
  build(gi);
  if (!path) return;
  char err[1024];
  if (cache_save(gi, path, desc, err, sizeof err))
    td_warn("cannot cache the GPTDataset %s indices (%s); they are built in memory for this run",
            td_split_name(gi->p.split), err);
}

int td_gpt_index_open(td_gpt_index *gi, const td_gpt_index_params *p, char *err, size_t errlen) {
  memset(gi, 0, sizeof *gi);
  gi->p = *p;
  gi->p.cache_dir = p->cache_dir ? td_strdup(p->cache_dir) : NULL;
  if (check_params(p, err, errlen) || plan(gi, err, errlen)) {
    td_gpt_index_close(gi);
    return -1;
  }
  char *path = NULL, *desc = NULL;
  const char *why = NULL;
  if (gi->p.cache_dir) cache_names(gi, &path, &desc);
  if (path && cache_load(gi, path, desc, &why) == 0) {
    gi->loaded_from_cache = 1;
    td_info("Load the GPTDataset %s indices from %s", td_split_name(p->split), path);
  } else {
    if (why) td_warn("the index cache '%s' is %s; rebuilding it", path, why);
    if (check_build_memory(gi, err, errlen)) {
      td_free(path), td_free(desc);
      td_gpt_index_close(gi);
      return -1;
    }
    build_and_cache(gi, path, desc);
  }
  td_info("> total number of samples: %lld", (long long)gi->n_samples);
  td_info("> total number of epochs: %lld", (long long)gi->num_epochs);
  td_free(path), td_free(desc);
  return 0;
}

void td_gpt_index_close(td_gpt_index *gi) {
  if (gi->map) td_munmap(gi->map, gi->map_len);
  td_free(gi->heap);
  td_free((char *)gi->p.cache_dir);
  memset(gi, 0, sizeof *gi);
}

void td_gpt_index_sample(const td_gpt_index *gi, int64_t i, int32_t *tokens) {
  TD_CHECK(i >= 0 && i < gi->n_samples, "sample %lld of %lld", (long long)i, (long long)gi->n_samples);
  const int64_t *beg = gi->sample_index + 2 * gi->shuffle_index[i], *end = beg + 2;
  int64_t want = gi->p.seq_length + 1, got = 0;
  for (int64_t d = beg[0]; d <= end[0]; d++) {
    int64_t seq = gi->document_index[d];
    int64_t off = d == beg[0] ? beg[1] : 0;
    int64_t n = d == end[0] ? end[1] + 1 - off : td_indexed_dataset_seq_len(gi->p.data, seq) - off;
    TD_CHECK(n >= 0 && n <= want - got, "sample %lld: a part of %lld tokens after %lld", (long long)i, (long long)n,
             (long long)got);
    td_indexed_dataset_read(gi->p.data, seq, off, n, tokens + got);
    got += n;
  }
  TD_CHECK(got == want, "sample %lld has %lld tokens, not %lld", (long long)i, (long long)got, (long long)want);
}

/* ---- masks and positions ------------------------------------------------------------- */

void td_gpt_masks(const int32_t *tokens, int64_t n, const td_gpt_mask_config *c, float *loss_mask,
                  int32_t *position_ids, int32_t *attention_start) {
  int64_t doc = 0; /* where the current document starts */
  for (int64_t t = 0; t < n; t++) {
    if (loss_mask) loss_mask[t] = c->eod_mask_loss && tokens[t] == c->eod ? 0.0f : 1.0f;
    if (position_ids) position_ids[t] = (int32_t)(c->reset_position_ids ? t - doc : t);
    if (attention_start) attention_start[t] = (int32_t)(c->reset_attention_mask ? doc : 0);
    if (tokens[t] == c->eod) doc = t + 1;
  }
}

void td_gpt_num_samples(int64_t train_iters, int64_t global_batch, int64_t eval_interval, int64_t eval_iters,
                        int64_t out[3]) {
  TD_CHECK(eval_interval > 0, "eval interval %lld", (long long)eval_interval);
  int64_t evals = train_iters / eval_interval + 1; /* td_args_validate refuses an overflow first */
  TD_CHECK(!td_mul_i64(train_iters, global_batch, &out[TD_SPLIT_TRAIN]) &&
               !td_mul_i64(eval_iters, global_batch, &out[TD_SPLIT_TEST]) &&
               !td_mul_i64(evals, out[TD_SPLIT_TEST], &out[TD_SPLIT_VALID]),
           "sample counts overflow: %lld iterations, global batch %lld, %lld x %lld evaluations",
           (long long)train_iters, (long long)global_batch, (long long)evals, (long long)eval_iters);
}

/* ---- every split, single or blended (BlendedMegatronDatasetBuilder) ------------------ */

struct td_gpt_dataset {
  int n_parts;
  td_gpt_index **parts;
  int64_t size;
  int16_t *dataset_index;        /* NULL when not blended */
  int64_t *dataset_sample_index;
};

struct td_gpt_datasets {
  td_indexed_dataset **data; /* each prefix opened once */
  int n_data, cap_data;
  td_gpt_index **index;      /* every GPT index of every split */
  int n_index, cap_index;
  td_gpt_dataset split[3];
  int present[3];
};

static const td_indexed_dataset *open_data(td_gpt_datasets *d, const char *prefix, char *err, size_t errlen) {
  for (int k = 0; k < d->n_data; k++)
    if (!strcmp(d->data[k]->prefix, prefix)) return d->data[k];
  TD_CHECK(d->n_data < d->cap_data, "more datasets than data path words");
  td_indexed_dataset *ds = td_calloc(sizeof *ds);
  if (td_indexed_dataset_open(ds, prefix, err, errlen)) {
    td_free(ds);
    return NULL;
  }
  d->data[d->n_data++] = ds;
  return ds;
}

/* A GPT index over split i of prefix, num_samples samples (0: one epoch). */
static td_gpt_index *open_index(td_gpt_datasets *d, const td_gpt_data_config *cfg, const char *prefix,
                                const double m[3][2], int i, int64_t num_samples, char *err, size_t errlen) {
  const td_indexed_dataset *data = open_data(d, prefix, err, errlen);
  if (!data) return NULL;
  td_gpt_index_params p = {.data = data, .split = (td_split)i, .num_samples = num_samples,
                           .seq_length = cfg->seq_length, .seed = (uint32_t)cfg->seed};
  td_split_range(m, i, data->n_sequences, &p.doc_begin, &p.doc_end);
  char *default_dir = cfg->cache_dir ? NULL : strf("%s/cache/GPTDataset_indices", prefix); /* Megatron's default */
  p.cache_dir = cfg->cache_dir ? cfg->cache_dir : default_dir;
  TD_CHECK(d->n_index < d->cap_index, "more GPT indices than splits x datasets");
  td_gpt_index *gi = td_calloc(sizeof *gi);
  int rc = td_gpt_index_open(gi, &p, err, errlen);
  td_free(default_dir);
  if (rc) {
    td_free(gi);
    return NULL;
  }
  d->index[d->n_index++] = gi;
  return gi;
}

/* Megatron's blend weights: the normalised --data-path weights, or without weights the
 * datasets' lengths; BlendedDataset normalises them (again), and so do we. */
static int64_t blend_weights(const td_blend *b, const td_gpt_dataset *ds, int64_t target, const int64_t *asked,
                             double *w) {
  int64_t size = 0;
  for (int k = 0; k < b->n; k++) {
    w[k] = b->weights ? b->weights[k] : (double)ds->parts[k]->n_samples;
    size += b->weights ? asked[k] : ds->parts[k]->n_samples;
  }
  td_blend_normalize(w, b->n);
  return b->weights || size < target ? size : target;
}

/* The blend must not draw more samples from a dataset than it holds. */
static int check_blend_counts(const td_gpt_dataset *ds, int i, char *err, size_t errlen) {
  int64_t *count = td_calloc(sizeof(int64_t) * (size_t)ds->n_parts);
  for (int64_t s = 0; s < ds->size; s++) count[ds->dataset_index[s]]++;
  int rc = 0;
  for (int k = 0; k < ds->n_parts && !rc; k++)
    if (count[k] > ds->parts[k]->n_samples)
      rc = td_errorf(err, errlen, "the %s blend draws %lld samples from '%s', which has %lld", td_split_name((td_split)i),
                 (long long)count[k], ds->parts[k]->p.data->prefix, (long long)ds->parts[k]->n_samples);
  td_free(count);
  return rc;
}

static int open_blend(td_gpt_datasets *d, const td_gpt_data_config *cfg, const td_blend *b, const double m[3][2], int i,
                      char *err, size_t errlen) {
  td_gpt_dataset *ds = &d->split[i];
  int64_t *asked = td_malloc(sizeof(int64_t) * (size_t)b->n);
  double *w = td_malloc(sizeof(double) * (size_t)b->n);
  ds->n_parts = b->n;
  ds->parts = td_calloc(sizeof(td_gpt_index *) * (size_t)b->n);
  int rc = 0;
  if (b->weights && cfg->num_samples[i] > INT64_MAX / 4) /* the sizes below are 1.005 x weight x it */
    rc = td_errorf(err, errlen, "%lld %s samples (%s): too many to blend", (long long)cfg->num_samples[i],
                   td_split_name((td_split)i), asked_by((td_split)i));
  for (int k = 0; k < b->n && !rc; k++) {
    asked[k] = b->weights ? td_blend_dataset_size(cfg->num_samples[i], b->weights[k]) : 0;
    ds->parts[k] = open_index(d, cfg, b->prefixes[k], m, i, asked[k], err, errlen);
    rc = ds->parts[k] ? 0 : -1;
  }
  if (!rc) {
    ds->size = blend_weights(b, ds, cfg->num_samples[i], asked, w);
    char what[96];
    snprintf(what, sizeof what, "building the %s blend's indices", td_split_name((td_split)i));
    rc = td_memory_check(td_sat_bytes(ds->size + 1, sizeof(int16_t) + sizeof(int64_t)), 1, what,
                         asked_by((td_split)i), err, errlen);
  }
  if (!rc) {
    ds->dataset_index = td_malloc(sizeof(int16_t) * (size_t)(ds->size + 1));
    ds->dataset_sample_index = td_malloc(sizeof(int64_t) * (size_t)(ds->size + 1));
    td_blend_indices(w, b->n, ds->size, ds->dataset_index, ds->dataset_sample_index);
    rc = check_blend_counts(ds, i, err, errlen);
  }
  td_free(asked), td_free(w);
  return rc;
}

static int open_split(td_gpt_datasets *d, const td_gpt_data_config *cfg, const td_blend *b, const double m[3][2], int i,
                      int blended, char *err, size_t errlen) {
  d->present[i] = 1;
  if (blended) return open_blend(d, cfg, b, m, i, err, errlen);
  td_gpt_dataset *ds = &d->split[i];
  ds->n_parts = 1;
  ds->parts = td_calloc(sizeof(td_gpt_index *));
  ds->parts[0] = open_index(d, cfg, b->prefixes[0], m, i, cfg->num_samples[i], err, errlen);
  if (!ds->parts[0]) return -1;
  ds->size = ds->parts[0]->n_samples;
  return 0;
}

/* --data-path: one distribution split by --split. A single prefix without a weight is
 * used directly; anything else is blended (as Megatron, even "1.0 A"). */
static int open_data_path(td_gpt_datasets *d, const td_gpt_data_config *cfg, char *err, size_t errlen) {
  td_blend b;
  double m[3][2];
  int present[3];
  if (td_split_parse(cfg->split ? cfg->split : "969, 30, 1", m, present, err, errlen) ||
      td_blend_parse(&b, cfg->data_path, cfg->n_data_path, err, errlen))
    return -1;
  if (b.weights) td_blend_normalize(b.weights, b.n);
  int rc = 0, blended = b.n > 1 || b.weights;
  for (int i = 0; i < 3 && !rc; i++)
    if (present[i] && cfg->num_samples[i] > 0) rc = open_split(d, cfg, &b, m, i, blended, err, errlen);
  td_blend_free(&b);
  return rc;
}

/* --train-data-path etc.: each split its own distribution, all of each dataset. */
static int open_split_paths(td_gpt_datasets *d, const td_gpt_data_config *cfg, char *err, size_t errlen) {
  int rc = 0;
  for (int i = 0; i < 3 && !rc; i++) {
    if (cfg->n_split_data_path[i] == 0 || cfg->num_samples[i] == 0) continue;
    td_blend b;
    double m[3][2] = {{0, 0}, {0, 0}, {0, 0}};
    m[i][1] = 1.0;
    if (td_blend_parse(&b, cfg->split_data_path[i], cfg->n_split_data_path[i], err, errlen)) return -1;
    if (b.weights) td_blend_normalize(b.weights, b.n);
    rc = open_split(d, cfg, &b, m, i, b.n > 1, err, errlen);
    td_blend_free(&b);
  }
  return rc;
}

static int check_config(const td_gpt_data_config *cfg, char *err, size_t errlen) {
  int per_split = cfg->n_split_data_path[0] + cfg->n_split_data_path[1] + cfg->n_split_data_path[2];
  if (cfg->n_data_path > 0 && per_split > 0)
    return td_errorf(err, errlen, "--data-path cannot be combined with --train-data-path / --valid-data-path / --test-data-path");
  if (cfg->n_data_path == 0 && per_split == 0) return td_errorf(err, errlen, "no data: give --data-path or --train-data-path");
  if (cfg->seed < 0 || cfg->seed > 0xffffffffLL)
    return td_errorf(err, errlen, "--seed %lld: numpy's RandomState takes seeds 0 .. 2^32 - 1", (long long)cfg->seed);
  for (int i = 0; i < 3; i++)
    if (cfg->num_samples[i] < 0) return td_errorf(err, errlen, "negative %s sample count", td_split_name((td_split)i));
  return 0;
}

td_gpt_datasets *td_gpt_datasets_open(const td_gpt_data_config *cfg, char *err, size_t errlen) {
  if (check_config(cfg, err, errlen)) return NULL;
  td_gpt_datasets *d = td_calloc(sizeof *d);
  d->cap_data = cfg->n_data_path + cfg->n_split_data_path[0] + cfg->n_split_data_path[1] + cfg->n_split_data_path[2];
  d->cap_index = 3 * d->cap_data;
  d->data = td_calloc(sizeof(*d->data) * (size_t)d->cap_data);
  d->index = td_calloc(sizeof(*d->index) * (size_t)d->cap_index);
  int rc = cfg->n_data_path > 0 ? open_data_path(d, cfg, err, errlen) : open_split_paths(d, cfg, err, errlen);
  if (rc) {
    td_gpt_datasets_close(d);
    return NULL;
  }
  return d;
}

void td_gpt_datasets_close(td_gpt_datasets *d) {
  if (!d) return;
  for (int i = 0; i < 3; i++) {
    td_free(d->split[i].parts);
    td_free(d->split[i].dataset_index), td_free(d->split[i].dataset_sample_index);
  }
  for (int k = 0; k < d->n_index; k++) td_gpt_index_close(d->index[k]), td_free(d->index[k]);
  for (int k = 0; k < d->n_data; k++) td_indexed_dataset_close(d->data[k]), td_free(d->data[k]);
  td_free(d->index), td_free(d->data), td_free(d);
}

const td_gpt_dataset *td_gpt_datasets_split(const td_gpt_datasets *d, td_split s) {
  return d->present[s] ? &d->split[s] : NULL;
}

int64_t td_gpt_dataset_len(const td_gpt_dataset *ds) { return ds->size; }
int td_gpt_dataset_n_parts(const td_gpt_dataset *ds) { return ds->n_parts; }
const td_gpt_index *td_gpt_dataset_part(const td_gpt_dataset *ds, int k) { return ds->parts[k]; }

void td_gpt_dataset_locate(const td_gpt_dataset *ds, int64_t index, int *part, int64_t *part_index) {
  TD_CHECK(index >= 0 && index < ds->size, "sample %lld of %lld", (long long)index, (long long)ds->size);
  *part = ds->dataset_index ? ds->dataset_index[index] : 0;
  *part_index = ds->dataset_index ? ds->dataset_sample_index[index] : index;
}

void td_gpt_dataset_sample(const td_gpt_dataset *ds, int64_t index, int32_t *tokens) {
  int part;
  int64_t k;
  td_gpt_dataset_locate(ds, index, &part, &k);
  td_gpt_index_sample(ds->parts[part], k, tokens);
}
