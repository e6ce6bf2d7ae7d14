#include "data/mock_data.h"

#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "base/rng.h"

#define MOCK_MAX_DOC 4096 /* Megatron's mock documents are shorter than this */
#define MOCK_STREAM 0x6d6f636bULL

void td_mock_data_init(td_mock_data *m, int64_t seq_length, int32_t eod, uint64_t seed, uint64_t split) {
  TD_CHECK(seq_length > 0 && seq_length <= INT32_MAX, "mock data: seq_length %lld", (long long)seq_length);
  memset(m, 0, sizeof *m);
  m->seq_length = seq_length, m->eod = eod, m->seed = seed, m->split = split;
}

void td_mock_data_free(td_mock_data *m) {
  td_free(m->doc_end);
  m->doc_end = NULL;
}

static int64_t doc_length(const td_mock_data *m, int64_t d) {
  return 1 + td_rng_u32(m->seed, MOCK_STREAM + m->split, (uint64_t)d) % (MOCK_MAX_DOC - 1);
}

/* Extend the prefix sums until they cover token position pos. */
static void cover(td_mock_data *m, int64_t pos) {
  while (m->n_docs == 0 || m->doc_end[m->n_docs - 1] <= pos) {
    if (m->n_docs == m->cap) {
      int64_t cap = m->cap ? m->cap * 2 : 1024;
      int64_t *bigger = td_malloc((size_t)cap * sizeof *bigger);
      if (m->n_docs) memcpy(bigger, m->doc_end, (size_t)m->n_docs * sizeof *bigger);
      td_free(m->doc_end);
      m->doc_end = bigger, m->cap = cap;
    }
    int64_t prev = m->n_docs ? m->doc_end[m->n_docs - 1] : 0;
    m->doc_end[m->n_docs] = prev + doc_length(m, m->n_docs);
    m->n_docs++;
  }
}

/* The document holding token position pos (binary search over prefix sums). */
static int64_t doc_at(const td_mock_data *m, int64_t pos) {
  int64_t lo = 0, hi = m->n_docs - 1;
  while (lo < hi) {
    int64_t mid = (lo + hi) / 2;
    if (m->doc_end[mid] > pos) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

void td_mock_data_sample(td_mock_data *m, int64_t index, int32_t *tokens) {
  /* the positions of sample `index` must fit 64 bits (2^63 tokens: no run gets there) */
  TD_CHECK(index >= 0 && index <= (INT64_MAX - m->seq_length - 1) / m->seq_length,
           "mock sample %lld of %lld tokens", (long long)index, (long long)m->seq_length);
  int64_t start = index * m->seq_length, n = m->seq_length + 1;
  cover(m, start + n);
  int64_t d = doc_at(m, start);
  for (int64_t i = 0; i < n; i++) {
    int64_t pos = start + i;
    while (m->doc_end[d] <= pos) d++;
    int64_t begin = d ? m->doc_end[d - 1] : 0, k = pos - begin;
    int64_t len = m->doc_end[d] - begin;
    tokens[i] = k == len - 1 ? m->eod : (int32_t)(1 + k % (m->eod - 1 > 0 ? m->eod - 1 : 1));
  }
}
