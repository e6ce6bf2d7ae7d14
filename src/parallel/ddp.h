/* Data-parallel gradient reduction, as Megatron-core's DistributedDataParallel
 * with overlap_grad_reduce: the flat gradient buffer is cut into buckets of whole
 * tensors, in the order backward finishes them (the reverse of the parameter
 * order, as Megatron builds its buckets), and each bucket is all-reduced over
 * the data-parallel group (sum, in place, fp32) as soon as backward has finished
 * every tensor in it, while backward goes on with the earlier layers.
 *
 * The sum, not a mean: the trainer scales each rank's loss gradient by
 * 1 / (loss-mask tokens of the GLOBAL batch), so the summed gradient is the
 * gradient of the per-token mean over the global batch, the same number a
 * single rank computes for the whole batch.
 *
 * Progress. MPI moves a non-blocking collective only inside MPI calls, so every
 * td_ddp_grads_ready also tests the buckets in flight (backward calls it after
 * each layer); td_ddp_finish waits for the rest. The time spent inside those
 * calls is the communication NOT hidden behind backward (comm_seconds).
 *
 * Every rank must start the same buckets in the same order: backward finishes
 * the tensors in the same order on every rank, so they do. */
#ifndef TD_PARALLEL_DDP_H
#define TD_PARALLEL_DDP_H

#include <stdint.h>

#include "comm/comm.h"

typedef struct {
  int64_t offset, numel; /* of a tensor in the flat buffer */
} td_ddp_tensor;

typedef enum { TD_BUCKET_WAITING = 0, TD_BUCKET_IN_FLIGHT, TD_BUCKET_DONE } td_bucket_state;

typedef struct {
  int64_t begin, end;  /* element range of the flat buffer (whole tensors, gaps included) */
  int pending;         /* tensors not yet finished by this backward */
  int n_tensors;
  td_bucket_state state;
  td_comm_request req;
} td_ddp_bucket;

typedef struct {
  td_comm *dp;
  float *grads;
  int n_tensors, n_buckets;
  int *bucket_of; /* tensor -> bucket */
  td_ddp_bucket *buckets;
  /* seconds inside communication calls (not hidden behind compute) and buckets
   * all-reduced, since init: the caller reads and resets them */
  double comm_seconds;
  int64_t reductions;
} td_ddp;

/* Megatron's default bucket size (elements) for a data-parallel size:
 * max(40M, 1M x dp). */
int64_t td_ddp_default_bucket_size(int dp_size);

/* Buckets of at most bucket_size elements (a tensor larger than that is a bucket
 * of its own) over tensors[0..n), filled from the last tensor to the first. dp
 * is the data-parallel group (of size 1: nothing is ever sent). */
void td_ddp_init(td_ddp *d, td_comm *dp, float *grads, const td_ddp_tensor *tensors, int n,
                 int64_t bucket_size);
void td_ddp_free(td_ddp *d);

/* Backward has finished the gradients of tensors [first, first + count): start
 * the all-reduce of every bucket this completes, and progress those in flight. */
void td_ddp_grads_ready(td_ddp *d, int first, int count);

/* Start whatever was not started (tensors backward never marked, e.g. a model
 * part without gradients), wait for every bucket, and re-arm for the next step. */
void td_ddp_finish(td_ddp *d);

#endif
