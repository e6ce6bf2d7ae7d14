/* One fuzz input through the .idx/.bin reader: shared by the libFuzzer harness
 * (fuzz_indexed_dataset.c) and the regression replay in test_indexed_dataset.c.
 *
 * Input layout: u32 little-endian length of the .idx part, the .idx bytes, then the
 * .bin bytes (a short input is all .idx). The reader must either reject the pair with
 * a message or accept it; an accepted pair must then survive reading every token and
 * building (and sampling) a small GPT index over it. A crash, a sanitizer report or
 * a failed internal check is a bug. */
#ifndef TD_FUZZ_INDEXED_DATASET_H
#define TD_FUZZ_INDEXED_DATASET_H

#include <stdint.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"

static void td_fuzz_read_all(const td_indexed_dataset *ds) {
  if (!td_idx_dtype_is_token(ds->dtype)) return;
  int32_t *buf = td_malloc(sizeof(int32_t) * (size_t)(ds->n_tokens + 1));
  for (int64_t s = 0; s < ds->n_sequences; s++)
    td_indexed_dataset_read(ds, s, 0, td_indexed_dataset_seq_len(ds, s), buf);
  td_free(buf);
}

/* Sequence length 2..8 and 0..12 samples, varied with the input size so the fuzzer
 * also reaches multi-epoch and separate-final-epoch indices. */
static void td_fuzz_gpt_index(const td_indexed_dataset *ds, size_t size) {
  if (ds->n_sequences == 0) return;
  td_gpt_index_params p = {.data = ds, .split = TD_SPLIT_TRAIN, .doc_begin = 0, .doc_end = ds->n_sequences,
                           .num_samples = (int64_t)(size % 13), .seq_length = 2 + (int64_t)(size % 7), .seed = 1234};
  td_gpt_index gi;
  char err[512];
  if (td_gpt_index_open(&gi, &p, err, sizeof err) != 0) {
    TD_CHECK(err[0], "a rejected GPT index gives a message");
    return;
  }
  int32_t tokens[9];
  for (int64_t i = 0; i < gi.n_samples && i < 64; i++) td_gpt_index_sample(&gi, i, tokens);
  td_gpt_index_close(&gi);
}

/* 1 when the reader accepted the input, 0 when it rejected it with a message. */
static int td_fuzz_indexed_dataset_one(const uint8_t *data, size_t size) {
  uint32_t idx_len = 0;
  if (size >= 4) memcpy(&idx_len, data, 4);
  size_t head = size >= 4 ? 4 : size, rest = size - head;
  if (idx_len > rest) idx_len = (uint32_t)rest;
  td_indexed_dataset ds;
  char err[512] = "";
  if (td_indexed_dataset_open_memory(&ds, "fuzz", data + head, idx_len, data + head + idx_len, rest - idx_len, err,
                                     sizeof err) != 0) {
    TD_CHECK(strstr(err, "fuzz.idx") || strstr(err, "fuzz.bin"), "the message names the file: %s", err);
    return 0;
  }
  td_fuzz_read_all(&ds);
  if (td_idx_dtype_is_token(ds.dtype)) td_fuzz_gpt_index(&ds, size);
  td_indexed_dataset_close(&ds);
  return 1;
}

#endif
