/* Checkpoints in Megatron's directory layout with tensors in safetensors:
 *
 *   DIR/latest_checkpointed_iteration.txt         "100" (written last)
 *   DIR/iter_0000100/metadata.json                trainer state (args, iteration, consumed
 *                                                 samples, scheduler, loss scaler), the layout
 *                                                 it was saved with, and for every global
 *                                                 tensor its shape, dtype and which file holds
 *                                                 which slice of it
 *   DIR/iter_0000100/mp_rank_00/model.safetensors this TP rank's parameter slices (fp32)
 *   DIR/iter_0000100/mp_rank_00/optim_dp000.safetensors  Adam state: NAME.exp_avg, NAME.exp_avg_sq
 *   DIR/iter_0000100/mp_rank_00/rng_dp000.json    the counter-based RNG's state (seed, iteration)
 *
 * Everything is written into iter_0000100.tmp/, fsynced, renamed, and only then
 * is the latest file replaced (by rename), so a crash leaves the previous
 * checkpoint intact. Loading validates every tensor's presence, dtype and shape
 * and refuses a mismatch with a message naming the tensor. */
#ifndef TD_TRAIN_CHECKPOINT_H
#define TD_TRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "base/safetensors.h"
#include "device/device.h"

/* One fp32 tensor on the device, with its global name and shape
 * (tp = 1: the local tensor is the whole global tensor). */
typedef struct {
  const char *name;
  int ndim;
  int64_t shape[TD_ST_MAX_DIMS];
  float *data;
} td_ckpt_tensor;

typedef struct {
  int64_t iteration;
  const td_ckpt_tensor *params;
  int n_params;
  /* Adam state, n_params each, named NAME.exp_avg / NAME.exp_avg_sq; NULL: none */
  const td_ckpt_tensor *exp_avg, *exp_avg_sq;
  const char *state_json; /* the trainer's state, a JSON object (text) */
  const char *rng_json;   /* the RNG state, a JSON object (text) */
} td_ckpt_contents;

/* Save into dir (created if needed). Returns 0, or -1 with err set. */
int td_checkpoint_save(td_device *dev, const char *dir, const td_ckpt_contents *c, char *err,
                       size_t errlen);

/* The iteration in dir/latest_checkpointed_iteration.txt: >= 0, -1 when there is no
 * checkpoint in dir (no such file), -2 with err set when the file is malformed. */
int64_t td_checkpoint_latest(const char *dir, char *err, size_t errlen);

/* Whether iteration `iteration` in dir holds Adam state (metadata.json's
 * layout.has_optimizer_state; a checkpoint made by `trident convert` has none).
 * 0 also when the metadata cannot be read: td_checkpoint_load then says why. */
int td_checkpoint_has_optimizer_state(const char *dir, int64_t iteration);

/* Load iteration `iteration` from dir into c's tensors (params always; Adam state
 * when c->exp_avg is not NULL). Every file and tensor is checked before any is
 * copied, so a refused checkpoint leaves the caller's tensors untouched. Returns 0
 * and, if state_json is not NULL, a td_malloc'ed copy of the saved trainer state;
 * -1 with err set (naming the file and tensor) on any missing or mismatched piece. */
int td_checkpoint_load(td_device *dev, const char *dir, int64_t iteration,
                       const td_ckpt_contents *c, char **state_json, char *err, size_t errlen);

#endif
