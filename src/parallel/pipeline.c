#include "parallel/pipeline.h"

#include "base/mem.h"

static int first_stage(const td_pipeline *p) { return p->stage == 0; }
static int last_stage(const td_pipeline *p) { return p->stage == p->stages - 1; }

static void wait_sends(td_pipeline *p, int r) {
  for (int k = 0; k < 2; k++)
    if (p->sending[r][k]) td_dcomm_wait(&p->sends[r][k]), p->sending[r][k] = 0;
}

static void wait_all_sends(td_pipeline *p) {
  for (int r = 0; r < p->n_replicas; r++) wait_sends(p, r);
}

/* Micro-batch m's loss goes to device slot m (read back once a step, not once a
 * micro-batch). training: the backward follows, for tokens weighted by mask x
 * dloss_scale (the head's stage runs its part with the forward: gpt.h,
 * td_gpt_forward_train_to). */
static void stage_forward(td_pipeline *p, const td_pipeline_batch *b, int64_t m, int training,
                          float dloss_scale, double *ms) {
  const int64_t o = m * b->micro_tokens, n = td_gpt_stage_numel(p->replicas[0]);
  int r = (int)(m % p->n_replicas);
  td_gpt *g = p->replicas[r];
  wait_sends(p, r);
  if (!first_stage(p)) td_dcomm_recv(p->pp, td_gpt_device(g), td_gpt_stage_input(g), n, TD_F32, p->stage - 1, (int)m);
  td_timers_start(p->timers, TD_TIMER_FORWARD_COMPUTE);
  uint64_t seed = training ? b->seed(b->ctx, m) : 0;
  if (training)
    td_gpt_forward_train_to(g, b->tokens + o, b->targets + o, b->mask + o, seed, dloss_scale,
                            p->loss_dev + m, ms);
  else
    td_gpt_forward_to(g, b->tokens + o, b->targets + o, b->mask + o, seed, 0, p->loss_dev + m, ms);
  td_timers_stop(p->timers, TD_TIMER_FORWARD_COMPUTE);
  if (!last_stage(p)) {
    td_dcomm_isend(p->pp, td_gpt_device(g), td_gpt_stage_output(g), n, TD_F32, p->stage + 1, (int)m, &p->sends[r][0]);
    p->sending[r][0] = 1;
  }
}

static void stage_backward(td_pipeline *p, int64_t m, int64_t M, float dloss_scale) {
  const int64_t n = td_gpt_stage_numel(p->replicas[0]);
  int r = (int)(m % p->n_replicas);
  td_gpt *g = p->replicas[r];
  wait_sends(p, r);
  if (!last_stage(p))
    td_dcomm_recv(p->pp, td_gpt_device(g), td_gpt_stage_output_grad(g), n, TD_F32, p->stage + 1, (int)m);
  td_zero_set_reduce(p->zero, m == M - 1); /* stage 0/1 reduce in the last backward */
  td_timers_start(p->timers, TD_TIMER_BACKWARD_COMPUTE);
  td_gpt_backward(g, dloss_scale);
  td_timers_stop(p->timers, TD_TIMER_BACKWARD_COMPUTE);
  if (!first_stage(p)) {
    td_dcomm_isend(p->pp, td_gpt_device(g), td_gpt_stage_input_grad(g), n, TD_F32, p->stage - 1, (int)m,
                  &p->sends[r][1]);
    p->sending[r][1] = 1;
  }
}

static void one_f_one_b(td_pipeline *p, const td_pipeline_batch *b, int64_t M, float dloss_scale) {
  const int64_t later = p->stages - p->stage - 1, warmup = later < M ? later : M;
  double ms;
  for (int64_t m = 0; m < warmup; m++) stage_forward(p, b, m, 1, dloss_scale, &ms);
  for (int64_t i = 0; i < M - warmup; i++) {
    stage_forward(p, b, warmup + i, 1, dloss_scale, &ms);
    stage_backward(p, i, M, dloss_scale);
  }
  for (int64_t m = M - warmup; m < M; m++) stage_backward(p, m, M, dloss_scale);
  wait_all_sends(p);
}

static void no_pipelining(td_pipeline *p, const td_pipeline_batch *b, int64_t M, float dloss_scale) {
  double ms;
  for (int64_t m = 0; m < M; m++) {
    stage_forward(p, b, m, 1, dloss_scale, &ms);
    stage_backward(p, m, M, dloss_scale);
  }
}

td_pipeline_schedule td_pipeline_select(int stages) { return stages > 1 ? one_f_one_b : no_pipelining; }

/* Room for M micro-batches' losses, on the device and on the host. */
static void loss_slots(td_pipeline *p, int64_t M) {
  if (M <= p->loss_cap) return;
  td_device *d = td_gpt_device(p->replicas[0]);
  if (p->loss_dev) d->ops->free(d, p->loss_dev);
  td_free(p->loss_host);
  p->loss_dev = d->ops->alloc(d, (size_t)M * sizeof(double));
  p->loss_host = td_malloc((size_t)M * sizeof(double));
  p->loss_cap = M;
}

/* The slots' sum in micro-batch order: one wait for the step's losses. */
static double read_losses(td_pipeline *p, int64_t M) {
  td_device *d = td_gpt_device(p->replicas[0]);
  d->ops->copy_d2h(d, p->loss_host, p->loss_dev, (size_t)M * sizeof(double));
  double loss = 0;
  for (int64_t m = 0; m < M; m++) loss += p->loss_host[m];
  return loss;
}

double td_pipeline_step(td_pipeline *p, const td_pipeline_batch *b, int64_t M, float dloss_scale) {
  loss_slots(p, M);
  p->schedule(p, b, M, dloss_scale);
  return read_losses(p, M);
}

double td_pipeline_forward_only(td_pipeline *p, const td_pipeline_batch *b, int64_t M,
                                double *mask_sum) {
  double ms;
  loss_slots(p, M);
  *mask_sum = 0;
  for (int64_t m = 0; m < M; m++) {
    stage_forward(p, b, m, 0, 0.0f, &ms);
    *mask_sum += ms;
  }
  wait_all_sends(p);
  return read_losses(p, M);
}

void td_pipeline_init(td_pipeline *p, td_gpt *model, td_comm *pp, int stage, int stages,
                      int64_t max_micro, td_timers *timers, td_zero *zero) {
  int64_t span = stages - stage;
  *p = (td_pipeline){.pp = pp, .stage = stage, .stages = stages, .timers = timers, .zero = zero,
                     .schedule = td_pipeline_select(stages)};
  p->n_replicas = stages > 1 ? (int)(span < max_micro ? span : max_micro) : 1;
  p->replicas = td_calloc((size_t)p->n_replicas * sizeof *p->replicas);
  p->sends = td_calloc((size_t)p->n_replicas * sizeof *p->sends);
  p->sending = td_calloc((size_t)p->n_replicas * sizeof *p->sending);
  p->replicas[0] = model;
  if (stages > 1) td_dcomm_p2p_setup(pp, td_gpt_device(model)); /* NCCL's channels, when used */
  for (int r = 1; r < p->n_replicas; r++) {
    p->replicas[r] = td_gpt_create_replica(model);
    td_zero_attach(zero, p->replicas[r]);
  }
}

void td_pipeline_free(td_pipeline *p) {
  if (p->loss_dev) td_gpt_device(p->replicas[0])->ops->free(td_gpt_device(p->replicas[0]), p->loss_dev);
  td_free(p->loss_host);
  for (int r = 1; r < p->n_replicas; r++) td_gpt_destroy(p->replicas[r]);
  td_free(p->replicas), td_free(p->sends), td_free(p->sending);
}

double td_pipeline_take_tp_seconds(td_pipeline *p) {
  double s = 0;
  for (int r = 0; r < p->n_replicas; r++) s += td_gpt_take_comm_seconds(p->replicas[r]);
  return s;
}

void td_pipeline_set_seq_length(td_pipeline *p, int64_t T) {
  for (int r = 0; r < p->n_replicas; r++) td_gpt_set_seq_length(p->replicas[r], T);
}
