#include "parallel/zero.h"

#include <string.h>

#include "base/error.h"

void td_zero_init(td_zero *z, td_comm *dp, int64_t numel) {
  z->dp = dp;
  z->dp_size = dp ? td_comm_size(dp) : 1;
  z->dp_rank = dp ? td_comm_rank(dp) : 0;
  TD_CHECK(numel % z->dp_size == 0, "ZeRO: %lld elements do not split into %d equal shards",
           (long long)numel, z->dp_size);
  z->numel = numel;
  z->size = numel / z->dp_size;
  z->first = z->size * z->dp_rank;
}

void td_zero_all_gather(const td_zero *z, float *flat) {
  if (z->dp_size == 1) return;
  td_comm_all_gather(z->dp, flat + z->first, flat, z->size, TD_F32);
}

void td_zero_gather_to_first(const td_zero *z, const float *shard, float *full) {
  if (z->dp_size == 1) {
    memcpy(full, shard, (size_t)z->size * sizeof(float));
    return;
  }
  td_comm_gather(z->dp, shard, full, z->size, TD_F32, 0);
}
