/* One fuzz input through the GPT-2 BPE tokenizer (data/bpe_tokenizer.h): shared by
 * the libFuzzer harness (fuzz_tokenizer.c) and the corpus replay (test_fuzz_replay.c).
 *
 * The input is text, arbitrary bytes. The encoder must refuse invalid UTF-8 (and
 * append nothing) or accept it, and then decode(encode(x)) == x. The GPT-2
 * vocabulary (data/gpt2/) is loaded once per process. */
#ifndef TD_FUZZ_TOKENIZER_H
#define TD_FUZZ_TOKENIZER_H

#include "data/bpe_tokenizer.h"
#include "fuzz_util.h"

static inline td_bpe_worker *td_fuzz_bpe_worker(const td_bpe **bpe_out) {
  static td_bpe *bpe;
  static td_bpe_worker *w;
  if (!bpe) {
    char err[1024];
    bpe = td_bpe_load(TD_SOURCE_DIR "/data/gpt2/vocab.json", TD_SOURCE_DIR "/data/gpt2/merges.txt", err, sizeof err);
    TD_CHECK(bpe != NULL, "loading the GPT-2 vocabulary: %s", err);
    w = td_bpe_worker_new(bpe);
  }
  *bpe_out = bpe;
  return w;
}

static inline int td_fuzz_tokenizer_one(const uint8_t *data, size_t size) {
  const td_bpe *bpe;
  td_bpe_worker *w = td_fuzz_bpe_worker(&bpe);
  int32_t *ids = NULL;
  size_t n = 0, cap = 0, bad;
  char err[512] = "";
  const char *why;
  int valid = td_utf8_validate((const char *)data, size, &bad, &why) == 0;
  int rc = td_bpe_encode(w, (const char *)data, size, &ids, &n, &cap, err, sizeof err);
  TD_CHECK((rc == 0) == valid, "encode %s valid UTF-8 (%s)", rc ? "refused" : "accepted", err);
  if (rc) {
    TD_CHECK(n == 0 && err[0], "a refused text appends nothing and gives a message");
  } else {
    char *out = NULL;
    size_t len = 0;
    TD_CHECK(td_bpe_decode(bpe, ids, n, &out, &len, err, sizeof err) == 0, "decode: %s", err);
    TD_CHECK(len == size && (size == 0 || !memcmp(out, data, size)), "decode(encode(x)) != x (%zu vs %zu bytes)",
             len, size);
    for (size_t i = 0; i < n; i++) TD_CHECK(ids[i] >= 0 && ids[i] < td_bpe_vocab_size(bpe), "id %d", ids[i]);
    td_free(out);
  }
  td_free(ids);
  return rc == 0;
}

#endif
