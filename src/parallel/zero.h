/* ZeRO stage 1 (Megatron's --use-distributed-optimizer): the Adam state is
 * sharded over the data-parallel group. The flat parameter and gradient buffers
 * (padded by the model to a multiple of the DP size) are cut into DP equal
 * contiguous shards; DP rank r owns elements [r S, (r + 1) S), S = numel / dp.
 * Each step:
 *   gradients: all-reduced over DP as before (td_ddp), so every rank holds the
 *              whole summed gradient, and the norm and clipping are unchanged;
 *   update:    AdamW on this rank's shard only (its m and v are all it keeps);
 *   params:    all-gathered over DP in place, so every rank again holds the
 *              whole updated model (the same bits as without ZeRO).
 * Checkpoints stay layout-free: the shards of m and v are gathered on DP rank 0
 * to be written whole, and a load reads them whole and keeps this rank's shard,
 * so a ZeRO checkpoint loads without ZeRO, at another DP size, and back. */
#ifndef TD_PARALLEL_ZERO_H
#define TD_PARALLEL_ZERO_H

#include <stdint.h>

#include "comm/comm.h"

typedef struct {
  td_comm *dp;
  int dp_size, dp_rank;
  int64_t numel;       /* of the flat buffers: a multiple of dp_size */
  int64_t first, size; /* this rank's shard: [first, first + size) */
} td_zero;

/* numel must be a multiple of the size of dp (the DP group, NULL: a group of one). */
void td_zero_init(td_zero *z, td_comm *dp, int64_t numel);

/* Every rank's updated shard of the flat params to every rank (in place). */
void td_zero_all_gather(const td_zero *z, float *flat);

/* Optimizer state (one buffer of z->size elements per rank) gathered into
 * full[numel] on DP rank 0 (full is only written there; other ranks may pass
 * NULL). Collective over DP. */
void td_zero_gather_to_first(const td_zero *z, const float *shard, float *full);

#endif
