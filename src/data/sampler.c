#include "data/sampler.h"

#include <stdint.h>
#include <stdio.h>

int td_sampler_init(td_sampler *s, int64_t total_samples, int64_t micro_batch, int dp_rank, int dp_size, char *err,
                    size_t errlen) {
  const char *bad = total_samples <= 0  ? "the dataset has no samples"
                    : micro_batch <= 0  ? "the micro-batch size must be positive"
                    : dp_size <= 0      ? "the data-parallel size must be positive"
                    : dp_rank < 0 || dp_rank >= dp_size ? "the data-parallel rank is outside the group"
                    : micro_batch > INT64_MAX / dp_size ? "micro-batch x data-parallel size overflows"
                                                        : NULL;
  if (bad) {
    if (err && errlen)
      snprintf(err, errlen, "sampler: %s (samples %lld, micro-batch %lld, rank %d of %d)", bad,
               (long long)total_samples, (long long)micro_batch, dp_rank, dp_size);
    return -1;
  }
  *s = (td_sampler){total_samples, micro_batch, dp_rank, dp_size};
  return 0;
}

int td_sampler_micro_batch(const td_sampler *s, int64_t consumed, int64_t *indices) {
  int64_t step = s->micro_batch * s->dp_size;
  if (consumed < 0 || consumed > s->total_samples - step) return 0;
  int64_t first = consumed + (int64_t)s->dp_rank * s->micro_batch;
  for (int64_t k = 0; k < s->micro_batch; k++) indices[k] = first + k;
  return 1;
}
