/* Checkpoints in Megatron's directory layout with tensors in safetensors:
 *
 *   DIR/latest_checkpointed_iteration.txt         "100" (written last)
 *   DIR/iter_0000100/metadata.json                trainer state (args, iteration, consumed
 *                                                 samples, scheduler, loss scaler), the layout
 *                                                 it was saved with, and for every global
 *                                                 tensor its shape, dtype and which file holds
 *                                                 which slice of it
 *   DIR/iter_0000100/mp_rank_RR/model.safetensors TP rank RR's parameter slices (fp32), under
 *                                                 their global names, with the slices' shapes
 *   DIR/iter_0000100/mp_rank_RR/optim_dp000.safetensors  Adam state: NAME.exp_avg, NAME.exp_avg_sq
 *   DIR/iter_0000100/mp_rank_RR/rng_dp000.json    the counter-based RNG's state (seed, iteration)
 *   DIR/iter_0000100/mp_rank_RR/slices.json       global shape, offset and shape of each slice
 *                                                 (read by the commit to write metadata.json)
 *
 * RR is the tensor-parallel rank, two digits (mp_rank_00, mp_rank_01, ...); with
 * pipeline stages the directory is mp_rank_RR_PPP (PPP the stage, three digits),
 * as Megatron names them. A tensor two stages hold (tied word embeddings) is
 * listed once.
 * Everything is written into iter_0000100.tmp/, fsynced, renamed, and only then
 * is the latest file replaced (by rename), so a crash leaves the previous
 * checkpoint intact. Saving an iteration that is already there (a requeued job)
 * first moves the published one aside (iter_0000100.old) and deletes it only
 * after the new one and the latest file are in place; a load that finds the
 * latest iteration missing puts the complete copy back. A save starts by
 * removing the leftovers of interrupted ones (iter_*.tmp, iter_*.old). Loading assembles each slice the caller asks for from the
 * saved slices that overlap it, whatever tensor-parallel size the checkpoint was
 * saved with, and validates every tensor's presence, dtype, global shape and
 * coverage first, refusing a mismatch with a message naming the tensor.
 *
 * Saving with tensor parallelism (no MPI here; the caller orders the steps):
 *   one rank:                        td_checkpoint_save_prepare
 *   barrier
 *   every TP rank (of DP rank 0):    td_checkpoint_save_shard
 *   barrier
 *   one rank:                        td_checkpoint_save_commit
 * With one rank, td_checkpoint_save does all three. */
#ifndef TD_TRAIN_CHECKPOINT_H
#define TD_TRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "base/safetensors.h"
#include "device/device.h"
#include "model/gpt.h"

struct cJSON;

/* The largest iteration, sample count or seed a checkpoint may hold: 2^53, the
 * largest integer a JSON number (a double) represents exactly. */
#define TD_CKPT_MAX_INT ((int64_t)1 << 53)

/* One fp32 tensor slice on the device, with its global name: data holds the
 * row-major block of the global tensor (global_shape) that starts at offset and
 * has shape `shape`. A column-parallel weight split in two along dim 0 is, on TP
 * rank 1 of 2, global_shape {R, C}, offset {R / 2, 0}, shape {R - R / 2, C}.
 * global_shape all zero (the default of a designated initializer) means the
 * slice is the whole tensor: global_shape = shape, offset 0. */
typedef struct {
  const char *name;
  int ndim;
  int64_t shape[TD_ST_MAX_DIMS];
  float *data;   /* device memory (the dev of save/load), or host memory when on_host */
  int on_host;   /* data is host memory: read and written with memcpy (ZeRO's gathered buffers) */
  int64_t global_shape[TD_ST_MAX_DIMS];
  int64_t offset[TD_ST_MAX_DIMS];
} td_ckpt_tensor;

/* The view of model tensor v stored at flat + v->offset (a parameter, gradient
 * or optimizer-state buffer): its slice of the global tensor (local shape,
 * starting at slice_start along split_dim), under its global name. */
td_ckpt_tensor td_ckpt_view_of(const td_gpt_tensor *v, float *flat);

typedef struct {
  int64_t iteration;
  const td_ckpt_tensor *params;
  int n_params;
  /* Adam state, n_params each, named NAME.exp_avg / NAME.exp_avg_sq; NULL: none */
  const td_ckpt_tensor *exp_avg, *exp_avg_sq;
  const char *state_json; /* the trainer's state, a JSON object (text) */
  const char *rng_json;   /* the RNG state, a JSON object (text) */
  int tp_rank, tp_size;   /* this rank's tensor-parallel rank and the TP size; 0, 0: 0 of 1 */
  int pp_rank, pp_size;   /* its pipeline stage and the number of stages; 0, 0: 0 of 1 */
} td_ckpt_contents;

/* out = dir/iter_XXXXXXX/rel (a file of a checkpoint, for messages). */
void td_checkpoint_path(char *out, size_t n, const char *dir, int64_t iteration, const char *rel);

/* Save into dir (created if needed) from one rank: prepare, shard, commit.
 * Returns 0, or -1 with err set (the temporary directory removed). */
int td_checkpoint_save(td_device *dev, const char *dir, const td_ckpt_contents *c, char *err,
                       size_t errlen);

/* Step 1, one rank: create dir if needed, restore an iteration an interrupted
 * save left only aside, remove the leftovers of interrupted saves (iter_*.tmp,
 * iter_*.old; one line on stdout says which), and create an empty
 * dir/iter_XXXXXXX.tmp. Returns 0, or -1 with err set. */
int td_checkpoint_save_prepare(const char *dir, int64_t iteration, char *err, size_t errlen);

/* After a failed shard or commit (one rank): remove dir/iter_XXXXXXX.tmp, so no
 * half-written directory is left. Errors are ignored: the next save cleans up. */
void td_checkpoint_save_abort(const char *dir, int64_t iteration);

/* Step 2, every TP rank (of data-parallel rank 0), after the prepare: write
 * iter_XXXXXXX.tmp/mp_rank_RR/ (RR = c->tp_rank): model.safetensors, the Adam
 * state if c->exp_avg, rng_dp000.json, and slices.json last; all fsynced.
 * Returns 0, or -1 with err set (the caller must then not commit). */
int td_checkpoint_save_shard(td_device *dev, const char *dir, const td_ckpt_contents *c,
                             char *err, size_t errlen);

/* Step 3, one rank, after every shard is written: read the c->tp_size shards'
 * slices.json (a missing one is an error), check that the slices cover every
 * tensor, write metadata.json (c->state_json, the layout; by rename, so its
 * presence marks the directory complete), move a published iter_XXXXXXX aside,
 * rename the temporary directory to iter_XXXXXXX, replace
 * latest_checkpointed_iteration.txt, and only then delete the copy aside.
 * Only c->iteration, c->tp_size and c->state_json are used. Returns 0, or -1
 * with err set (the previous checkpoint and latest file as they were). */
int td_checkpoint_save_commit(const char *dir, const td_ckpt_contents *c, char *err,
                              size_t errlen);

/* The iteration in dir/latest_checkpointed_iteration.txt: >= 0; -1 when there is
 * no checkpoint (dir or that file does not exist); -2 with err set (naming the
 * path and the reason) when dir or the file cannot be read, dir is not a
 * directory, or the file does not hold an integer from 0 to TD_CKPT_MAX_INT.
 * When its iteration's directory is missing but an interrupted re-save left a
 * complete copy (.tmp or .old), the copy is renamed back (one line on stdout);
 * -2 if that fails, with err saying what to rename. */
int64_t td_checkpoint_latest(const char *dir, char *err, size_t errlen);

/* Whether iteration `iteration` in dir holds Adam state (metadata.json's
 * layout.has_optimizer_state; a checkpoint made by `trident convert` has none).
 * 0 also when the metadata cannot be read: td_checkpoint_load then says why. */
int td_checkpoint_has_optimizer_state(const char *dir, int64_t iteration);

/* The saved RNG state of iteration `iteration` (mp_rank_00/rng_dp000.json), a
 * td_malloc'ed JSON object text; NULL with err set when it is missing, not a JSON
 * object, or (when not empty) its "seed" or "iteration" is not an integer from 0
 * to TD_CKPT_MAX_INT. */
char *td_checkpoint_read_rng(const char *dir, int64_t iteration, char *err, size_t errlen);

/* Load iteration `iteration` from dir into c's tensors (params always; Adam state
 * when c->exp_avg is not NULL). Each tensor is a slice (global_shape, offset,
 * shape; or the whole tensor) assembled from the saved slices that overlap it,
 * from any number of mp_rank_RR files: the checkpoint may have been saved at any
 * tensor-parallel size (c->tp_rank / tp_size are not used). Every file, global
 * shape and the coverage of every slice is checked before anything is copied, so
 * a refused checkpoint leaves the caller's tensors untouched. Returns 0
 * and, if state_json is not NULL, a td_malloc'ed copy of the saved trainer state;
 * -1 with err set (naming the file and tensor) on any missing or mismatched piece. */
int td_checkpoint_load(td_device *dev, const char *dir, int64_t iteration,
                       const td_ckpt_contents *c, char **state_json, char *err, size_t errlen);

/* A field of checkpoint JSON: member `key` of o, called `field` in the message,
 * which names `file`. An integer from lo to hi (JSON integer-valued numbers only:
 * not 1.5, "7", 1e300 or a missing field), or a finite number from lo to hi.
 * 0 and *out; -1 with err set otherwise. */
int td_ckpt_json_int(const struct cJSON *o, const char *key, const char *file, const char *field,
                     int64_t lo, int64_t hi, int64_t *out, char *err, size_t errlen);
int td_ckpt_json_number(const struct cJSON *o, const char *key, const char *file,
                        const char *field, double lo, double hi, double *out, char *err,
                        size_t errlen);

#endif
