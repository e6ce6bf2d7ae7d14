/* Data parallelism at DeepSpeed's ZeRO stages 0-3, in Megatron-core's shape (a
 * gradient buffer whose buckets reduce while backward runs, a distributed
 * optimizer that owns the shards, a hook that gathers a layer's parameters just
 * before it runs). It drives the model through td_gpt_hooks.
 *
 * Shards. The model's flat buffers are a run of units (gpt.h: the embeddings,
 * each layer, the final LayerNorm), each padded to a multiple of 16 x DP. Unit u
 * of numel n splits into DP equal pieces of p = n / DP; rank r owns piece r of
 * every unit: its shard is the concatenation of those pieces (shard_offset[u]).
 *
 * Gradients, each backward (stage 0/1: only the last micro-batch's; stage 2/3:
 * every micro-batch's), a bucket of whole units at a time (Megatron's bucket
 * size; a unit larger than it is a bucket alone), from the last unit to the
 * first, as soon as backward has finished every unit of the bucket:
 *   reduce-scatter: an all-to-all sends piece r of the unit to rank r, which
 *     sums the DP copies in rank order 0, 1, ..., DP-1 (fp32, left to right).
 *     Every stage sums in this one order, so stages 0-3 train bit for bit the
 *     same at any DP size (an MPI all-reduce sums in an order of its own, which
 *     depends on the message size);
 *   stage 0/1: the summed piece goes back into the flat gradients and an
 *     all-gather gives every rank the whole gradient (reduce-scatter +
 *     all-gather is an all-reduce);
 *   stage 2/3: the summed piece is added to this rank's gradient shard (kept
 *     across micro-batches) and the unit's gradient buffer, allocated to its size
 *     and bound to the model just for this backward, is freed.
 * With a half-precision wire (td_zero_set_grad_comm_dtype: Megatron's
 * --grad-reduce-in-bf16, DeepSpeed's communication_data_type) each rank's
 * gradients are rounded to it before the all-to-all, the pieces widen to fp32
 * and sum in the same rank order, and the sum is rounded to the wire dtype once
 * (the all-gather moves that; stage 2/3 add the rounded value to the shard):
 * half the bytes on both collectives, every rank and every stage with the same
 * bits, accumulation over micro-batches still fp32.
 * At most two units are in flight at a time (their receive buffers are the
 * only extra memory). MPI progresses them inside MPI calls: every hook tests
 * the units in flight.
 *
 * Optimizer: AdamW on this rank's pieces (stage 0: everything, unsharded), its
 * m and v (and from stage 2 its gradients, at stage 3 its fp32 parameters)
 * being shard-sized. After the step, stage 1/2 all-gather the updated pieces
 * into the flat parameters; stage 3 keeps only its shard.
 *
 * Stage 3 parameters: before a unit runs (forward, recomputation, backward) its
 * pieces are all-gathered into one of three slots (allocated to the unit's size,
 * and cast to the matmul dtype), which the model then reads; a slot is reused
 * once no one holds it, and emptied after each step. The next unit is prefetched (its all-gather started) from the order the
 * first training step asked for units in. */
#ifndef TD_PARALLEL_ZERO_H
#define TD_PARALLEL_ZERO_H

#include <stdint.h>

#include "comm/comm.h"
#include "device/device.h"
#include "model/gpt.h"
#include "optim/adamw.h"

typedef struct td_zero td_zero;

/* Megatron's default bucket size (elements) for a data-parallel size:
 * max(40M, 1M x dp). */
int64_t td_zero_default_bucket_size(int dp_size);

/* The unit multiple the model's layout needs for dp ranks (0: none). */
int64_t td_zero_unit_multiple(int dp_size);

/* For model (built with unit_multiple td_zero_unit_multiple(dp), and at stage
 * 2/3 no_flat_grads, at stage 3 no_flat_params), its data-parallel group dp
 * (NULL: a group of one) and stage 0-3. Installs the model's hooks.
 * params_on_host (stage 3 only; DeepSpeed's offload_param.device cpu): this
 * rank's fp32 parameter shard lives in the device's pinned host memory, each
 * unit's piece copied up when the unit is gathered; td_zero_param_base is then
 * a host address, for an optimizer that updates on the host. */
td_zero *td_zero_create(td_gpt *model, td_comm *dp, int stage, int64_t bucket_size,
                        int params_on_host);
void td_zero_free(td_zero *z);
/* Hook a pipeline replica of the model (td_gpt_create_replica) as well. */
void td_zero_attach(td_zero *z, td_gpt *replica);

/* Megatron's --overlap-param-gather at stage 1/2 (on: 1 when it applies, i.e.
 * stage 1/2 with DP > 1; else 0 and nothing changes): td_zero_gather_params
 * only starts each unit's all-gather of the updated parameters, in forward's
 * order, and the next forward (or anything else that reads the parameters
 * through the model's hooks) waits for a unit's gather just before the unit
 * runs, then casts its weight copy; the compute in between overlaps the rest.
 * Functions here that read or write the whole parameters (the update, model
 * sums of the parameters, gather_full / scatter_full) wait for every gather
 * first; a caller reading the flat parameters itself calls td_zero_sync_params.
 * The same bits either way. Before the first step, and before td_zero_attach of
 * pipeline replicas. */
int td_zero_set_overlap_param_gather(td_zero *z, int on);
void td_zero_sync_params(td_zero *z);
int td_zero_param_gathers_in_flight(const td_zero *z); /* units whose gather has not landed */

/* The dtype data-parallel gradients cross between ranks in: TD_F32 (the
 * default), TD_BF16 or TD_F16 (see above). Before the first backward. */
void td_zero_set_grad_comm_dtype(td_zero *z, td_dtype dt);

int td_zero_stage(const td_zero *z);
int64_t td_zero_shard_numel(const td_zero *z); /* this rank's optimizer-state elements */
int td_zero_num_buckets(const td_zero *z);

/* Stage 0/1: whether the coming backward reduces (the step's last micro-batch:
 * 1) or only accumulates (0). Stage 2/3 reduce every backward. */
void td_zero_set_reduce(td_zero *z, int last_micro_batch);
/* Zero this rank's gradients (flat, or the shard) before a step's first backward. */
void td_zero_zero_grads(td_zero *z);
/* After the step's last backward: finish every reduction (start those of units
 * backward never finished) and wait. */
void td_zero_finish_grads(td_zero *z);
/* Sequence parallelism at stage 2/3: sum the replicated tensors' gradients over
 * tp (its shard pieces; NULL: nothing to do); stage 0/1 use
 * td_gpt_reduce_sequence_parallel_grads. */
void td_zero_reduce_sequence_parallel_grads(td_zero *z, td_comm *tp);

/* Per tensor 0/1: whether a statistic of the whole model counts it on this rank
 * (TP and PP replicas are counted once; the trainer decides). NULL: all. */
typedef enum { TD_ZERO_GRADS, TD_ZERO_PARAMS } td_zero_what;
/* Sum over this DP group's model (each element once) of x^2 (squares = 1) or of
 * x == 0 (squares = 0) for the gradients or the parameters: per rank's pieces,
 * then over ranks in rank order, so every stage gets the same bits. Collective
 * over DP at stage 2/3 (gradients) and 3 (parameters). */
double td_zero_model_sum(td_zero *z, td_zero_what what, int squares, const unsigned char *counted);
/* n (<= TD_ZERO_MAX_STATS) such sums at once, out[q] with squares[q], each with
 * td_zero_model_sum's bits: the host waits for the device once for all of them. */
#define TD_ZERO_MAX_STATS 2
void td_zero_model_sums(td_zero *z, td_zero_what what, int n, const int *squares, double *out,
                        const unsigned char *counted);

/* This rank's AdamW runs (td_adam_run over the shard) and, per run, its tensor:
 * for td_adamw_init; the bases td_zero_step passes. */
const td_adam_run *td_zero_runs(const td_zero *z, const int **tensor_of_run, int *n);
/* The optimizer step on this rank's shard (AdamW o built over td_zero_runs). */
void td_zero_update(td_zero *z, td_adamw *o, float lr, float grad_scale);
/* Stage 1/2: every rank's updated pieces into every rank's flat parameters
 * (with the overlap above: started, landing unit by unit). */
void td_zero_gather_params(td_zero *z);
/* After the parameters changed (an update, a load): refresh the weight copy in
 * the matmul dtype (stage 3: drop the gathered copies). */
void td_zero_params_changed(td_zero *z);
/* Where this rank's parameters of a run are (params base for td_adam_run): device
 * memory, or host memory with params_on_host. */
float *td_zero_param_base(td_zero *z);
/* Where this rank's gradients of a run are (grads base for td_adam_run): the
 * flat gradients (stage 0/1: the whole model, reduced), or the shard (stage
 * 2/3: this rank's pieces, unit after unit), device memory. */
float *td_zero_grad_base(td_zero *z);

/* Stage 3: initialise the shards from seed; other stages: td_gpt_init_params. */
void td_zero_init_params(td_zero *z, uint64_t seed);

/* Checkpoints are whole tensors: the flat buffer of the parameters (which 0) or
 * of Adam's m (1) or v (2) gathered on DP rank 0 into full (HOST memory, flat
 * numel elements there; NULL elsewhere), collective over DP; and the reverse,
 * DP rank 0's full (host memory, flat numel elements; NULL elsewhere) handed
 * out, each rank keeping its pieces (a scatter per unit; a broadcast of what
 * every rank keeps whole). A unit at a time goes through host memory, so a
 * save or load needs no model-sized device buffer (ZeRO-3's point: the model
 * need not fit one device), and only DP rank 0 holds the whole buffer (the
 * other ranks of a host need none). o: the optimizer (for m and v). */
void td_zero_gather_full(td_zero *z, td_adamw *o, int which, float *full);
void td_zero_scatter_full(td_zero *z, td_adamw *o, int which, const float *full);

/* Bytes this rank holds on the device: persistent model states (parameters,
 * weight copy, gradients, optimizer state) and transient buffers (stage 3
 * slots, gradient buffers in the pool, receive buffers), at their peak so far;
 * and the parameter shard offloaded to host memory (params_host, 0 without). */
typedef struct {
  uint64_t params, weights, grads, optim, transient_peak, params_host;
} td_zero_memory;
td_zero_memory td_zero_memory_report(const td_zero *z, const td_adamw *o);

/* Seconds spent inside communication calls not hidden behind compute, and
 * units reduced, since the last call. */
double td_zero_take_comm_seconds(td_zero *z);

/* Stage 3: the first training step is over; its order of units is the
 * prefetch order from now on. */
void td_zero_step_done(td_zero *z);

#endif
