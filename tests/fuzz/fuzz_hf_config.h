/* One fuzz input through the Hugging Face import (model/hf_convert.h): config.json
 * and the weights it describes. Shared by the libFuzzer harness (fuzz_hf_config.c)
 * and the corpus replay (test_fuzz_replay.c).
 *
 * Input: config.json, then (after a NUL byte, when there is one) model.safetensors.
 * td_hf_open must refuse the directory with a message naming it or accept it; an
 * accepted small model (at most TD_FUZZ_HF_MAX_NUMEL parameters, so an input stays
 * cheap) is then read into trident's layout, which may again be refused. */
#ifndef TD_FUZZ_HF_CONFIG_H
#define TD_FUZZ_HF_CONFIG_H

#include "model/hf_convert.h"
#include "fuzz_util.h"

#define TD_FUZZ_HF_MAX_NUMEL ((int64_t)1 << 20)

static inline void td_fuzz_hf_read(const td_hf_gpt2 *h) {
  int n;
  int64_t numel;
  td_gpt_tensor *ts = td_gpt_single_tensors(td_hf_config(h), &n, &numel);
  if (numel <= TD_FUZZ_HF_MAX_NUMEL) {
    float *flat = td_calloc(sizeof *flat * (size_t)(numel + 1));
    char err[1024] = "";
    if (td_hf_read_params(h, ts, n, flat, err, sizeof err)) TD_CHECK(err[0], "a refusal gives a message");
    td_free(flat);
  }
  td_free(ts);
}

static inline int td_fuzz_hf_config_one(const uint8_t *data, size_t size) {
  size_t off[2], len[2];
  int parts = td_fuzz_split(data, size, 2, off, len);
  char dir[256], err[1024] = "";
  td_fuzz_tmpdir(dir, sizeof dir);
  td_fuzz_put(dir, "config.json", data + off[0], len[0]);
  if (parts == 2) td_fuzz_put(dir, "model.safetensors", data + off[1], len[1]);
  td_hf_gpt2 *h = td_hf_open(dir, 128, err, sizeof err);
  if (h) {
    TD_CHECK(td_hf_vocab_size(h) > 0 && td_hf_vocab_size(h) <= td_hf_config(h)->vocab_size, "vocab %lld",
             (long long)td_hf_vocab_size(h));
    td_fuzz_hf_read(h);
    td_hf_close(h);
  } else {
    TD_CHECK(strstr(err, dir), "the message names the directory or its file: %s", err);
  }
  td_fuzz_rmdir(dir);
  return h != NULL;
}

#endif
