/* The memory one rank of `trident train` needs, computed from the flags and the
 * layout before anything is allocated, so a run too large for the machine is a
 * message naming the figures and the flags behind them (DESIGN.md "Errors")
 * instead of minutes of allocation ending in an out-of-memory failure or the
 * kernel's OOM killer. The model's part is td_gpt_plan (the arithmetic of the
 * start-up memory report, td_gpt_memory_report); the trainer adds Adam's state,
 * the pipeline's extra activation arenas, the staging of one global batch and
 * its per-tensor tables. The limit is base/memory_limit.h's (MemAvailable +
 * swap shared by the node's ranks, cgroup and rlimits, or TRIDENT_MEMORY_LIMIT). */
#ifndef TD_TRAIN_TRAIN_MEMORY_H
#define TD_TRAIN_TRAIN_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include "model/gpt.h"
#include "train/args.h"

/* Where this rank sits: its pipeline stage, the data-parallel size, the ZeRO
 * stage (0-3; the layout says which flat buffers the model keeps), and whether the device's buffers are host memory (the CPU backend: they then
 * count against the host's memory; a GPU's own memory is not checked here). */
typedef struct {
  int pp_size, pp_rank, dp_size, zero_stage;
  int dp_rank;         /* ZeRO's whole checkpoint buffers live on DP rank 0 only */
  int device_is_host;
  int optimizer_on_host; /* Adam's state and update in host memory (td_adamw_init_host) */
  /* A device with memory of its own (device_is_host 0): its free and total bytes
   * (device.h memory_info; 0: unknown, not checked) and its name for messages. */
  uint64_t device_free, device_total;
  const char *device_name;
  int ranks_on_device; /* ranks of this host on the same device (mpirun with more ranks
                          than GPUs): each gets its share of device_free; 0 or 1: alone */
  int params_on_host;  /* ZeRO-3's parameter shard in host memory (offload_param) */
} td_train_place;

/* Bytes per rank, each saturating at TD_SIZE_HUGE (base/checked.h). */
typedef struct {
  td_gpt_memory model;    /* parameters, gradients, low-precision weights, one arena, host */
  int arenas;             /* activation arenas: the pipeline's micro-batches in flight */
  uint64_t activations;   /* all arenas */
  uint64_t optimizer;     /* Adam's two fp32 moments over this rank's (ZeRO) share */
  uint64_t shards;        /* ZeRO-2/3: this rank's gradient (and ZeRO-3 parameter) shard */
  uint64_t transient;     /* unit-sized buffers: DP receive buffers, ZeRO-2/3 gradient
                             buffers, ZeRO-3 gathered slots, the CPU's kept block */
  uint64_t checkpoint;    /* ZeRO with --save or --load: whole buffers in host memory (DP rank 0) */
  uint64_t staging;       /* host: a global batch of tokens, targets and loss mask */
  uint64_t tables;        /* host: the model's and the trainer's per-tensor tables */
  uint64_t total;         /* of host memory: everything on the CPU backend */
  uint64_t device;        /* of the device's memory: what the model, Adam and ZeRO allocate there */
} td_train_memory;

/* The figures for this run (after td_args_validate; cfg with the padded
 * vocabulary, lay this rank's layout). Returns 0, or -1 with err: a size beyond
 * its limit (model/gpt_config.h). */
int td_train_memory_plan(const td_args *a, const td_gpt_config *cfg, const td_gpt_layout *lay,
                         td_dtype compute, const td_train_place *p, td_train_memory *m,
                         char *err, size_t errlen);

/* td_train_memory_plan, then 0 when the total fits the memory available to one of
 * ranks_per_node ranks, and (a device with memory of its own) the device's part
 * fits its free memory; else -1 with err giving every figure, the flags behind
 * the largest, and the limit with its source. */
int td_train_check_memory(const td_args *a, const td_gpt_config *cfg, const td_gpt_layout *lay,
                          td_dtype compute, const td_train_place *p, int ranks_per_node,
                          char *err, size_t errlen);

#endif
