/* One fuzz input through the checkpoint load side (train/checkpoint.h): the latest
 * file, metadata.json, rng_dp000.json, slices.json (read by the commit) and the
 * model.safetensors they point to. Shared by the libFuzzer harness
 * (fuzz_checkpoint.c) and the corpus replay (test_fuzz_replay.c).
 *
 * Input: parts separated by NUL bytes, in this order (a missing part is a missing
 * file; the last part takes the rest of the input, NULs included):
 *   latest_checkpointed_iteration.txt, iter_0000001/metadata.json,
 *   iter_0000001/mp_rank_00/rng_dp000.json, iter_0000002.tmp/mp_rank_00/slices.json,
 *   model.safetensors (in both iterations' mp_rank_00/).
 * They are written to a fresh directory under /dev/shm; then td_checkpoint_latest,
 * td_checkpoint_has_optimizer_state, td_checkpoint_read_rng, td_checkpoint_load of
 * iteration 1 into a tiny GPT (the CPU device; the sizes of the seed checkpoint,
 * TD_FUZZ_CKPT_FLAGS), td_checkpoint_save_commit of iteration 2 (which reads
 * slices.json and writes metadata.json) and, when that commits, the latest file
 * again and a load of iteration 2. Each refuses with a message or succeeds. */
#ifndef TD_FUZZ_CHECKPOINT_H
#define TD_FUZZ_CHECKPOINT_H

#include "device/device.h"
#include "model/gpt.h"
#include "train/checkpoint.h"
#include "fuzz_util.h"

/* The seed checkpoint: trident train --mock-data TD_FUZZ_CKPT_FLAGS --save DIR. */
#define TD_FUZZ_CKPT_FLAGS                                                                  \
  "--vocab-size 64 --make-vocab-size-divisible-by 8 --num-layers 1 --hidden-size 8 "        \
  "--num-attention-heads 2 --seq-length 8 --max-position-embeddings 8"

typedef struct {
  td_device *dev;
  td_gpt_tensor *views;
  td_ckpt_tensor *params;
  int n;
  float *flat;
} td_fuzz_ckpt_model;

static inline td_fuzz_ckpt_model *td_fuzz_ckpt_model_get(void) {
  static td_fuzz_ckpt_model m;
  if (m.dev) return &m;
  td_gpt_config cfg = {.num_layers = 1, .hidden = 8, .heads = 2, .ffn_hidden = 32, .seq_len = 8,
                       .max_positions = 8, .vocab_size = 72}; /* 64 + end of document, padded to 8 */
  int64_t numel;
  m.dev = td_device_open("cpu");
  TD_CHECK(m.dev != NULL, "the CPU device");
  m.views = td_gpt_single_tensors(&cfg, &m.n, &numel);
  m.flat = m.dev->ops->alloc(m.dev, sizeof(float) * (size_t)numel);
  m.params = td_calloc(sizeof *m.params * (size_t)m.n);
  for (int i = 0; i < m.n; i++) m.params[i] = td_ckpt_view_of(&m.views[i], m.flat);
  return &m;
}

static inline int td_fuzz_ckpt_load(const char *ck, int64_t it) {
  td_fuzz_ckpt_model *m = td_fuzz_ckpt_model_get();
  td_ckpt_contents c = {.iteration = it, .params = m->params, .n_params = m->n};
  char *state = NULL, err[2048] = "";
  int rc = td_checkpoint_load(m->dev, ck, it, &c, &state, err, sizeof err);
  if (rc == 0) TD_CHECK(state != NULL, "a load gives the trainer state");
  else TD_CHECK(err[0], "a refused load gives a message");
  td_free(state);
  return rc == 0;
}

/* The first checks: the latest file, the optimizer flag, the RNG state, the load. */
static inline int td_fuzz_ckpt_read_side(const char *ck) {
  char err[2048] = "";
  int64_t it = td_checkpoint_latest(ck, err, sizeof err);
  TD_CHECK(it >= -1 || err[0], "a refused latest file gives a message");
  (void)td_checkpoint_has_optimizer_state(ck, 1);
  err[0] = 0;
  char *rng = td_checkpoint_read_rng(ck, 1, err, sizeof err);
  TD_CHECK(rng || err[0], "a refused rng file gives a message");
  td_free(rng);
  return td_fuzz_ckpt_load(ck, 1);
}

/* The commit of iteration 2 (slices.json -> metadata.json), then its load. */
static inline void td_fuzz_ckpt_commit(const char *ck) {
  td_ckpt_contents c = {.iteration = 2, .tp_size = 1, .state_json = "{\"fuzz\": 1}"};
  char err[2048] = "";
  if (td_checkpoint_save_commit(ck, &c, err, sizeof err)) {
    TD_CHECK(err[0], "a refused commit gives a message");
    return;
  }
  TD_CHECK(td_checkpoint_latest(ck, err, sizeof err) == 2, "the commit publishes iteration 2: %s", err);
  td_fuzz_ckpt_load(ck, 2);
}

static inline int td_fuzz_checkpoint_one(const uint8_t *data, size_t size) {
  static const char *const names[] = {
      "ckpt/latest_checkpointed_iteration.txt", "ckpt/iter_0000001/metadata.json",
      "ckpt/iter_0000001/mp_rank_00/rng_dp000.json", "ckpt/iter_0000002.tmp/mp_rank_00/slices.json",
      "ckpt/iter_0000001/mp_rank_00/model.safetensors"};
  size_t off[5], len[5];
  int parts = td_fuzz_split(data, size, 5, off, len);
  char dir[256], ck[300];
  td_fuzz_tmpdir(dir, sizeof dir);
  for (int i = 0; i < parts; i++) td_fuzz_put(dir, names[i], data + off[i], len[i]);
  if (parts == 5) td_fuzz_put(dir, "ckpt/iter_0000002.tmp/mp_rank_00/model.safetensors", data + off[4], len[4]);
  snprintf(ck, sizeof ck, "%s/ckpt", dir);
  int loaded = td_fuzz_ckpt_read_side(ck);
  if (parts >= 4) td_fuzz_ckpt_commit(ck);
  td_fuzz_rmdir(dir);
  return loaded;
}

#endif
