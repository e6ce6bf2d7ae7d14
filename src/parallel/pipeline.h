/* Pipeline schedules, as Megatron-core's schedules.py: td_pipeline_select
 * selects one for the layout (get_forward_backward_func) and runs a step's
 * micro-batches through this rank's stage.
 *
 * 1F1B (forward_backward_pipelining_without_interleaving): stage s of PP runs
 * min(PP - s - 1, M) warm-up forwards, then alternates one forward and one
 * backward, then runs the remaining backwards. A forward receives its input
 * from stage s - 1 and sends its output to s + 1; a backward receives its
 * output's gradient from s + 1 and sends its input's gradient to s - 1 (the tag
 * is the micro-batch). Up to min(PP - s, M) micro-batches are in flight on stage
 * s, each in its own activation arena (td_gpt_create_replica; micro-batch m uses
 * replica m mod that count, free again by then). Sends are non-blocking (their
 * buffer is that replica's, waited for before it is reused) and receives
 * blocking, which the schedule's order makes deadlock-free.
 *
 * No pipelining (forward_backward_no_pipelining, PP = 1): forward and backward
 * per micro-batch in one arena, no communication. */
#ifndef TD_PARALLEL_PIPELINE_H
#define TD_PARALLEL_PIPELINE_H

#include <stdint.h>

#include "comm/comm.h"
#include "comm/device_comm.h"
#include "model/gpt.h"
#include "parallel/zero.h"
#include "train/timers.h"

/* A step's micro-batches, host memory: micro-batch m's tokens, targets and loss
 * mask start at m x micro_tokens; seed(ctx, m) is its dropout seed. */
typedef struct {
  const int32_t *tokens, *targets;
  const float *mask;
  int64_t micro_tokens;
  uint64_t (*seed)(void *ctx, int64_t m);
  void *ctx;
} td_pipeline_batch;

typedef struct td_pipeline td_pipeline;
/* Forward and backward of M micro-batches (gradients accumulate; the last
 * backward is the one td_zero reduces in at stage 0/1); micro-batch m's masked
 * loss sum lands in the device slot loss_dev[m] (0 off the last stage). */
typedef void (*td_pipeline_schedule)(td_pipeline *p, const td_pipeline_batch *b, int64_t M,
                                     float dloss_scale);

struct td_pipeline {
  td_gpt **replicas; /* an activation arena per micro-batch in flight (replicas[0] = model) */
  int n_replicas;
  td_comm *pp;       /* the pipeline group (NULL: one stage) */
  int stage, stages;
  td_dcomm_request (*sends)[2]; /* per replica: its output's and its input gradient's send */
  int (*sending)[2];
  td_timers *timers;
  td_zero *zero;
  td_pipeline_schedule schedule;
  double *loss_dev, *loss_host; /* the micro-batches' loss sums: device slots, host copy */
  int64_t loss_cap;
};

/* Stage `stage` of `stages` (pp its group), up to max_micro micro-batches per
 * step: the replicas it needs (hooked into zero) and its schedule. */
void td_pipeline_init(td_pipeline *p, td_gpt *model, td_comm *pp, int stage, int stages,
                      int64_t max_micro, td_timers *timers, td_zero *zero);
void td_pipeline_free(td_pipeline *p);

/* Megatron's get_forward_backward_func: 1F1B with stages, else no pipelining. */
td_pipeline_schedule td_pipeline_select(int stages);

/* A training step's forward and backward by the selected schedule: the sum over
 * this stage's micro-batches of their masked losses (0 off the last stage), read
 * back once, after the schedule has issued all of its work. */
double td_pipeline_step(td_pipeline *p, const td_pipeline_batch *b, int64_t M, float dloss_scale);

/* Forward only (evaluation): the sum of masked losses; *mask_sum the mask's. */
double td_pipeline_forward_only(td_pipeline *p, const td_pipeline_batch *b, int64_t M,
                                double *mask_sum);

/* The sequence length of the next micro-batches, on every arena
 * (td_gpt_set_seq_length); every stage sets the same. */
void td_pipeline_set_seq_length(td_pipeline *p, int64_t T);

/* Seconds in tensor-parallel collectives since the last call, over every arena. */
double td_pipeline_take_tp_seconds(td_pipeline *p);

#endif
