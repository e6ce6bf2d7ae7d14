/* One fuzz input through the JSON-lines reader (data/jsonl.h): shared by the
 * libFuzzer harness (fuzz_jsonl.c) and the corpus replay (test_fuzz_replay.c).
 *
 * The input is one line (newlines inside it included). The reader must reject it
 * with a message or give the "text" value: NUL-terminated, exactly n bytes, valid
 * UTF-8 (a text Megatron's tokenizer can encode). The same line is read again with
 * the buffer it grew, which must give the same text. */
#ifndef TD_FUZZ_JSONL_H
#define TD_FUZZ_JSONL_H

#include "data/bpe_tokenizer.h"
#include "data/jsonl.h"
#include "fuzz_util.h"

static inline int td_fuzz_jsonl_one(const uint8_t *data, size_t size) {
  /* a copy of exactly size bytes: the reader must not read past len */
  char *line = td_malloc(size + 1), *buf = NULL, err[512] = "";
  if (size) memcpy(line, data, size);
  size_t cap = 0, n = 0;
  int rc = td_jsonl_get_string(line, size, "text", &buf, &cap, &n, err, sizeof err);
  if (rc == 0) {
    size_t bad;
    const char *why;
    TD_CHECK(n < cap && buf[n] == 0, "text not NUL-terminated inside its buffer");
    TD_CHECK(td_utf8_validate(buf, n, &bad, &why) == 0, "accepted text is not UTF-8 at %zu: %s", bad, why);
    char *first = td_fuzz_strndup((const uint8_t *)buf, n);
    size_t n2 = 0;
    TD_CHECK(td_jsonl_get_string(line, size, "text", &buf, &cap, &n2, err, sizeof err) == 0, "second read");
    TD_CHECK(n2 == n && !memcmp(first, buf, n), "a second read gives another text");
    td_free(first);
  } else {
    TD_CHECK(err[0], "a rejected line gives a message");
  }
  td_free(buf), td_free(line);
  return rc == 0;
}

#endif
