/* Megatron's MegatronPretrainingSampler (--dataloader-type single): the samples of a
 * split are consumed in order, one global batch after another; each micro-batch step
 * takes the next micro_batch * dp_size indices and data-parallel rank r gets the r-th
 * slice of micro_batch of them. The last incomplete step is dropped.
 *
 * The only state is the number of samples consumed so far (summed over all ranks),
 * which the checkpoint stores; resuming at that count continues with the next index,
 * none repeated or skipped. Within an iteration of k micro-batches, micro-batch j
 * starts at consumed + j * micro_batch * dp_size. */
#ifndef TD_DATA_SAMPLER_H
#define TD_DATA_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  int64_t total_samples; /* length of the dataset */
  int64_t micro_batch;
  int dp_rank, dp_size;
} td_sampler;

/* Checks the arguments as Megatron does. 0, or -1 with a message. */
int td_sampler_init(td_sampler *s, int64_t total_samples, int64_t micro_batch, int dp_rank, int dp_size, char *err,
                    size_t errlen);
/* The micro_batch sample indices of this rank's micro-batch that starts after
 * `consumed` samples. Returns 1, or 0 when fewer than micro_batch * dp_size samples
 * remain (the data is exhausted). */
int td_sampler_micro_batch(const td_sampler *s, int64_t consumed, int64_t *indices);

#endif
