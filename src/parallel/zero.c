#include "parallel/zero.h"

#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/mem.h"
#include "comm/device_comm.h"

enum { MAX_IN_FLIGHT = 2, SLOTS = 3 };

/* A unit's reduction: waiting for its bucket, queued, exchanging pieces
 * (all-to-all), gathering the sum (stage 0/1), done for this backward. */
typedef enum { RED_IDLE = 0, RED_QUEUED, RED_EXCHANGE, RED_GATHER } red_phase;

typedef struct {
  red_phase phase;
  td_dcomm_request req;
  float *recv;     /* fp32: DP x piece, every rank's copy of this rank's piece;
                      with a half-precision wire, the one piece of their sum */
  void *wire;      /* half-precision wire: the unit in that dtype (sent, then the
                      rounded sums gathered into it) */
  void *wire_recv; /* half-precision wire: every rank's copy of this rank's piece */
} unit_reduction;

typedef struct {
  int first_unit, n_units; /* units [first_unit, first_unit + n_units) */
  int pending;             /* units backward has not finished this time */
} bucket;

/* A stage-3 slot: one gathered unit (fp32 and, under low precision, its weights). */
typedef struct {
  float *params;
  void *weights;
  int unit;       /* -1: empty */
  int refs;       /* params_needed without params_done */
  int in_flight;  /* its all-gather was started and not yet waited for */
  td_dcomm_request req;
} slot;

/* MPI wants every rank to start the collectives of a communicator in one
 * order. Exchanges start in bucket order and all-gathers of gradients in the
 * order exchanges complete (tested oldest first), parameter gathers in the
 * order units are needed: each kind on a communicator of its own (copies of
 * the DP group) keeps its order the same on every rank. */
enum { COMM_EXCHANGE, COMM_GRAD_GATHER, COMM_PARAM_GATHER, N_COMMS };

struct td_zero {
  td_gpt *model;
  td_device *dev;
  td_comm *dp, *comm[N_COMMS];
  int dp_size, dp_rank, stage;
  td_dtype wire;     /* gradients between ranks: TD_F32, or TD_BF16 / TD_F16 (half the bytes) */
  int weights_fresh; /* the last update wrote the bf16 weight copy (td_zero_update) */
  int n_units;
  int64_t *piece;      /* per unit: numel / dp, what each rank reduces and gathers */
  int64_t *part;       /* per unit: what this rank's optimizer owns (stage 0: the unit) */
  int64_t *shard_off;  /* per unit: its part's first element in this rank's shard */
  int64_t shard_numel, max_unit, flat_numel;
  int reduce_now;      /* stage 0/1: this backward reduces */
  /* gradient reduction */
  bucket *buckets;
  int n_buckets, *bucket_of;
  unit_reduction *red;
  int *queue, n_queue; /* units queued or in flight, in start order */
  int in_flight;
  /* stage 2/3 */
  float *grad_shard;
  float **grad_buf;  /* per unit: its gradient buffer while bound (NULL otherwise) */
  /* stage 1/2 with overlap_param_gather: per unit, the all-gather of its updated
   * parameters started after the update and waited for when the unit is next
   * needed (then its weight copy is cast) */
  int overlap_param_gather;
  td_dcomm_request *param_req;
  unsigned char *param_pending;
  int n_param_pending;
  /* stage 3 */
  float *param_shard;  /* device memory, or pinned host memory when params_on_host */
  int params_on_host;  /* DeepSpeed's offload_param: the fp32 shard stays in host memory */
  slot slots[SLOTS];
  int *slot_of; /* unit -> slot, -1 */
  int *trace, n_trace, cap_trace, trace_frozen, cursor;
  /* optimizer runs over the shard */
  td_adam_run *runs;
  int *run_tensor, n_runs;
  double comm_seconds;
  uint64_t transient, transient_peak;
  /* statistics: one device slot per (rank, tensor) piece, read back together */
  double *stat_dev, *stat_host;
  int64_t n_stat;
};

static const td_device_ops *OPS(const td_zero *z) { return z->dev->ops; }
static const td_gpt_unit *U(const td_zero *z, int u) { return td_gpt_unit_at(z->model, u); }

int64_t td_zero_default_bucket_size(int dp_size) {
  int64_t s = 1000000LL * dp_size;
  return s > 40000000LL ? s : 40000000LL;
}

int64_t td_zero_unit_multiple(int dp_size) { return dp_size > 1 ? 16 * (int64_t)dp_size : 0; }

/* ------------------------------------------------------------ memory */

/* Unit-sized buffers live only while used (a unit's gradients from its
 * backward to its reduction, a receive buffer through an exchange, a gathered
 * unit until its slot is reused): allocated to size and freed, counted. */
static void *transient_alloc(td_zero *z, int64_t n, size_t elem) {
  z->transient += (uint64_t)n * elem;
  if (z->transient > z->transient_peak) z->transient_peak = z->transient;
  return td_device_alloc_scratch(z->dev, (size_t)n * elem); /* each user writes it whole first */
}

static void transient_free(td_zero *z, void *p, int64_t n, size_t elem) {
  if (!p) return;
  z->transient -= (uint64_t)n * elem;
  OPS(z)->free(z->dev, p);
}

/* ------------------------------------------------------------ reductions */

/* Where this rank's summed piece of unit u goes before the all-gather (stage
 * 0/1: the flat gradients). */
static float *flat_grad_piece(td_zero *z, int u) {
  return td_gpt_grads(z->model) + U(z, u)->offset + z->dp_rank * z->piece[u];
}

/* Unit u's gradients as backward left them (the flat buffer, or its buffer). */
static float *unit_grads(td_zero *z, int u) {
  return z->stage >= 2 ? z->grad_buf[u] : td_gpt_grads(z->model) + U(z, u)->offset;
}

static size_t wire_size(const td_zero *z) { return td_dtype_size(z->wire); }

/* Send piece r of unit u's gradients to rank r; a half-precision wire rounds
 * each rank's gradients once, on the way out. */
static void start_exchange(td_zero *z, int u) {
  unit_reduction *r = &z->red[u];
  const int64_t n = U(z, u)->numel;
  if (z->wire == TD_F32) {
    r->recv = transient_alloc(z, n, sizeof(float));
    td_dcomm_iall_to_all(z->comm[COMM_EXCHANGE], z->dev, unit_grads(z, u), r->recv, z->piece[u],
                        TD_F32, &r->req);
  } else {
    r->wire = transient_alloc(z, n, wire_size(z));
    r->wire_recv = transient_alloc(z, n, wire_size(z));
    OPS(z)->cast(z->dev, r->wire, z->wire, unit_grads(z, u), TD_F32, n);
    td_dcomm_iall_to_all(z->comm[COMM_EXCHANGE], z->dev, r->wire, r->wire_recv, z->piece[u], z->wire,
                        &r->req);
  }
  r->phase = RED_EXCHANGE;
  z->in_flight++;
}

/* dst = recv[0] + recv[1] + ... + recv[DP-1], left to right (fp32; DP >= 2;
 * dst may be recv[0]). A half-precision wire widens the received pieces one at
 * a time into recv (a piece, which is then the sum; dst unused) and a piece of
 * scratch: the same fp32 sum of the same values. */
static void sum_pieces(td_zero *z, int u, float *dst) {
  unit_reduction *r = &z->red[u];
  const int64_t p = z->piece[u];
  if (z->wire == TD_F32) {
    OPS(z)->add(z->dev, dst, r->recv, r->recv + p, p);
    for (int q = 2; q < z->dp_size; q++) OPS(z)->add(z->dev, dst, dst, r->recv + q * p, p);
    return;
  }
  const size_t es = wire_size(z);
  r->recv = transient_alloc(z, p, sizeof(float));
  float *widened = transient_alloc(z, p, sizeof(float));
  OPS(z)->cast(z->dev, r->recv, TD_F32, r->wire_recv, z->wire, p);
  for (int q = 1; q < z->dp_size; q++) {
    OPS(z)->cast(z->dev, widened, TD_F32, (char *)r->wire_recv + (size_t)(q * p) * es, z->wire, p);
    OPS(z)->add(z->dev, r->recv, r->recv, widened, p);
  }
  transient_free(z, widened, p, sizeof(float));
  transient_free(z, r->wire_recv, U(z, u)->numel, es);
  r->wire_recv = NULL;
}

/* The fp32 buffer behind r->recv: the DP pieces (fp32 wire) or the one sum. */
static int64_t recv_numel(const td_zero *z, int u) {
  return z->wire == TD_F32 ? U(z, u)->numel : z->piece[u];
}

static void unit_reduced(td_zero *z, int u) {
  unit_reduction *r = &z->red[u];
  r->phase = RED_IDLE;
  transient_free(z, r->recv, recv_numel(z, u), sizeof(float));
  transient_free(z, r->wire, U(z, u)->numel, wire_size(z));
  r->recv = NULL, r->wire = NULL;
  if (z->stage >= 2) { /* the unit's buffer is gone until its next backward */
    transient_free(z, z->grad_buf[u], U(z, u)->numel, sizeof(float));
    z->grad_buf[u] = NULL;
    td_gpt_bind_grads(z->model, u, NULL);
  }
}

/* A half-precision wire: the summed piece rounded to it, in this rank's place
 * of the unit's wire buffer (what the all-gather sends); stage 2/3 keep the
 * rounded value too, so every stage and every rank sees the same gradients. */
static void round_sum(td_zero *z, int u) {
  unit_reduction *r = &z->red[u];
  const int64_t p = z->piece[u];
  void *mine = (char *)r->wire + (size_t)(z->dp_rank * p) * wire_size(z);
  OPS(z)->cast(z->dev, mine, z->wire, r->recv, TD_F32, p);
  if (z->stage >= 2) OPS(z)->cast(z->dev, r->recv, TD_F32, mine, z->wire, p);
}

/* The exchange of unit u is complete: sum, then place the sum. */
static void exchanged(td_zero *z, int u) {
  unit_reduction *r = &z->red[u];
  int64_t p = z->piece[u];
  /* stage 0/1 sum straight into this rank's piece of the flat gradients */
  float *mine = z->stage >= 2 ? NULL : flat_grad_piece(z, u);
  sum_pieces(z, u, mine ? mine : r->recv);
  if (z->wire != TD_F32) round_sum(z, u);
  if (z->stage >= 2) {
    float *dst = z->grad_shard + z->shard_off[u];
    OPS(z)->add(z->dev, dst, dst, r->recv, p);
    z->in_flight--;
    unit_reduced(z, u);
    return;
  }
  float *unit = td_gpt_grads(z->model) + U(z, u)->offset;
  transient_free(z, r->recv, recv_numel(z, u), sizeof(float));
  r->recv = NULL;
  if (z->wire == TD_F32)
    td_dcomm_iall_gather(z->comm[COMM_GRAD_GATHER], z->dev, mine, unit, p, TD_F32, &r->req);
  else
    td_dcomm_iall_gather(z->comm[COMM_GRAD_GATHER], z->dev,
                         (char *)r->wire + (size_t)(z->dp_rank * p) * wire_size(z), r->wire, p,
                         z->wire, &r->req);
  r->phase = RED_GATHER;
}

/* Advance unit u if its collective completed (block: wait for it); 0 when it
 * had not. */
static int advance(td_zero *z, int u, int block) {
  unit_reduction *r = &z->red[u];
  if (block)
    td_dcomm_wait(&r->req);
  else if (!td_dcomm_test(&r->req))
    return 0;
  if (r->phase == RED_EXCHANGE) {
    exchanged(z, u);
  } else {
    if (z->wire != TD_F32) /* the gathered unit, widened into the flat gradients */
      OPS(z)->cast(z->dev, td_gpt_grads(z->model) + U(z, u)->offset, TD_F32, r->wire, z->wire,
                   U(z, u)->numel);
    z->in_flight--;
    unit_reduced(z, u);
  }
  return 1;
}

/* Advance the units in flight, oldest first, up to the first that is not
 * complete (block: wait for the oldest instead), drop the finished ones, then
 * start queued ones while fewer than MAX_IN_FLIGHT run. */
static void progress(td_zero *z, int block) {
  double t0 = td_now_seconds();
  int k = 0, stop = 0;
  for (int i = 0; i < z->n_queue; i++) {
    int u = z->queue[i];
    red_phase ph = z->red[u].phase;
    if (!stop && (ph == RED_EXCHANGE || ph == RED_GATHER))
      stop = !advance(z, u, block && k == 0);
    if (z->red[u].phase != RED_IDLE) z->queue[k++] = u;
  }
  z->n_queue = k;
  for (int i = 0; i < z->n_queue && z->in_flight < MAX_IN_FLIGHT; i++)
    if (z->red[z->queue[i]].phase == RED_QUEUED) start_exchange(z, z->queue[i]);
  z->comm_seconds += td_now_seconds() - t0;
}

/* Unit u's gradients of this backward are final (no DP: placed at once). */
static void reduce_unit(td_zero *z, int u) {
  if (z->dp_size == 1) {
    if (z->stage >= 2) {
      float *dst = z->grad_shard + z->shard_off[u];
      OPS(z)->add(z->dev, dst, dst, z->grad_buf[u], z->piece[u]);
      unit_reduced(z, u);
    }
    return;
  }
  z->red[u].phase = RED_QUEUED;
  z->queue[z->n_queue++] = u;
}

static void on_grads_ready(void *ctx, td_gpt *m, int u) {
  td_zero *z = ctx;
  (void)m;
  if (z->stage < 2 && !z->reduce_now) return;
  bucket *b = &z->buckets[z->bucket_of[u]];
  if (--b->pending == 0) { /* a bucket starts whole, from its last unit down */
    for (int k = b->first_unit + b->n_units - 1; k >= b->first_unit; k--) reduce_unit(z, k);
    b->pending = b->n_units;
  }
  if (z->n_queue) progress(z, 0);
}

/* Stage 2/3: a zeroed buffer for unit u's gradients, once per backward; its
 * previous backward's reduction must be over first (the shard adds them in
 * micro-batch order). */
static void on_grads_needed(void *ctx, td_gpt *m, int u) {
  td_zero *z = ctx;
  (void)m;
  if (z->stage < 2) return;
  while (z->red[u].phase != RED_IDLE) progress(z, 1); /* then its old buffer is back */
  if (z->grad_buf[u]) return; /* bound earlier in this backward (tied embeddings) */
  float *b = transient_alloc(z, U(z, u)->numel, sizeof(float));
  OPS(z)->fill(z->dev, b, TD_F32, U(z, u)->numel, 0.0f);
  z->grad_buf[u] = b;
  td_gpt_bind_grads(z->model, u, b);
}

void td_zero_set_reduce(td_zero *z, int last_micro_batch) { z->reduce_now = last_micro_batch; }

void td_zero_finish_grads(td_zero *z) {
  if (z->dp_size > 1 && (z->stage >= 2 || z->reduce_now))
    for (int b = z->n_buckets - 1; b >= 0; b--) { /* units backward never marked */
      bucket *k = &z->buckets[b];
      if (k->pending != k->n_units) {
        for (int u = k->first_unit + k->n_units - 1; u >= k->first_unit; u--)
          if (z->red[u].phase == RED_IDLE && !(z->stage >= 2 && !z->grad_buf[u])) reduce_unit(z, u);
        k->pending = k->n_units;
      }
    }
  while (z->n_queue) progress(z, 1);
  z->reduce_now = 0;
}

void td_zero_zero_grads(td_zero *z) {
  if (z->stage >= 2)
    OPS(z)->fill(z->dev, z->grad_shard, TD_F32, z->shard_numel, 0.0f);
  else
    td_gpt_zero_grads(z->model);
}

/* ------------------------------------------------------------ stage 3 slots */

/* The unit most likely needed after u (the first step's order), or -1. */
static int predict_next(td_zero *z, int u) {
  if (!z->trace_frozen || !z->n_trace) return -1;
  for (int k = 0; k < z->n_trace; k++) {
    int i = (z->cursor + k) % z->n_trace;
    if (z->trace[i] == u) {
      z->cursor = (i + 1) % z->n_trace;
      return z->trace[z->cursor];
    }
  }
  return -1;
}

static void record(td_zero *z, int u) {
  if (z->trace_frozen) return;
  if (z->n_trace == z->cap_trace) {
    z->cap_trace = z->cap_trace ? 2 * z->cap_trace : 64;
    int *grown = td_malloc(sizeof *grown * (size_t)z->cap_trace);
    if (z->n_trace) memcpy(grown, z->trace, sizeof *grown * (size_t)z->n_trace);
    td_free(z->trace);
    z->trace = grown;
  }
  z->trace[z->n_trace++] = u;
}

/* A slot no one holds (preferring an empty one, and never `keep`), or -1. */
static int free_slot(td_zero *z, int keep) {
  int best = -1;
  for (int i = 0; i < SLOTS; i++) {
    slot *s = &z->slots[i];
    if (s->refs || s->in_flight || (keep >= 0 && s->unit == keep)) continue;
    if (s->unit < 0) return i;
    if (best < 0) best = i;
  }
  return best;
}

/* Empty slot i (its unit, if any, is no longer gathered). */
static void empty_slot(td_zero *z, int i) {
  slot *s = &z->slots[i];
  if (s->unit < 0) return;
  int64_t n = U(z, s->unit)->numel;
  transient_free(z, s->params, n, sizeof(float));
  transient_free(z, s->weights, n, td_dtype_size(td_gpt_weight_dtype(z->model)));
  s->params = NULL, s->weights = NULL;
  z->slot_of[s->unit] = -1;
  s->unit = -1;
}

/* Start gathering unit u into slot i: this rank's piece in place, then the rest. */
static void start_gather(td_zero *z, int i, int u) {
  slot *s = &z->slots[i];
  empty_slot(z, i);
  int64_t n = U(z, u)->numel;
  s->params = transient_alloc(z, n, sizeof(float));
  if (td_gpt_compute_dtype(z->model) != TD_F32)
    s->weights = transient_alloc(z, n, td_dtype_size(td_gpt_weight_dtype(z->model)));
  s->unit = u, s->in_flight = 1;
  z->slot_of[u] = i;
  int64_t p = z->piece[u];
  float *mine = s->params + z->dp_rank * p;
  if (z->params_on_host) /* up from the pinned shard; the host writes it only after the step's waits */
    OPS(z)->copy_h2d_async(z->dev, mine, z->param_shard + z->shard_off[u], (size_t)p * sizeof(float));
  else
    OPS(z)->copy_d2d(z->dev, mine, z->param_shard + z->shard_off[u], (size_t)p * sizeof(float));
  if (z->dp_size > 1)
    td_dcomm_iall_gather(z->comm[COMM_PARAM_GATHER], z->dev, mine, s->params, p, TD_F32, &s->req);
}

/* Wait for slot i's gather, cast its weights. */
static void land(td_zero *z, int i) {
  slot *s = &z->slots[i];
  if (!s->in_flight) return;
  double t0 = td_now_seconds();
  if (z->dp_size > 1) td_dcomm_wait(&s->req);
  z->comm_seconds += td_now_seconds() - t0;
  s->in_flight = 0;
  if (s->weights) td_gpt_cast_unit_weights(z->model, s->weights, s->params, U(z, s->unit)->numel);
}

/* ------------------------------------------------------------ stage 1/2 overlap */

/* Unit u's flat weight copy (the matmul dtype) and parameters. */
static void cast_unit(td_zero *z, int u) {
  if (td_gpt_compute_dtype(z->model) == TD_F32) return;
  const td_gpt_unit *un = U(z, u);
  const size_t es = td_dtype_size(td_gpt_weight_dtype(z->model));
  td_gpt_cast_unit_weights(z->model, (char *)td_gpt_weights(z->model) + (size_t)un->offset * es,
                           td_gpt_params(z->model) + un->offset, un->numel);
}

/* Unit u's parameter all-gather is complete (block: wait for it; else 0 when it
 * is not yet): cast its weights. */
static int land_unit_params(td_zero *z, int u, int block) {
  if (!z->param_pending[u]) return 1;
  double t0 = td_now_seconds();
  if (block)
    td_dcomm_wait(&z->param_req[u]);
  else if (!td_dcomm_test(&z->param_req[u]))
    return 0;
  z->comm_seconds += td_now_seconds() - t0;
  z->param_pending[u] = 0, z->n_param_pending--;
  cast_unit(z, u);
  return 1;
}

/* Every unit's gather landed (before anything reads or writes the whole
 * parameters: the update, a checkpoint, a statistic). */
static void land_all_params(td_zero *z) {
  for (int u = 0; u < z->n_units && z->n_param_pending; u++) land_unit_params(z, u, 1);
}

/* Start every unit's all-gather of the updated pieces, in the order forward
 * needs them; the compute that follows overlaps them. */
static void start_param_gathers(td_zero *z) {
  float *flat = td_gpt_params(z->model);
  for (int u = 0; u < z->n_units; u++) {
    int64_t p = z->piece[u];
    float *unit = flat + U(z, u)->offset;
    td_dcomm_iall_gather(z->comm[COMM_PARAM_GATHER], z->dev, unit + z->dp_rank * p, unit, p, TD_F32,
                         &z->param_req[u]);
    z->param_pending[u] = 1, z->n_param_pending++;
  }
}

/* Stage 1/2: unit u is about to run; its gather lands first, and the gathers
 * after it are tested (MPI moves a non-blocking collective only inside MPI
 * calls), oldest first. */
static void on_params_landing(td_zero *z, int u) {
  if (!z->n_param_pending) return;
  land_unit_params(z, u, 1);
  for (int k = 0; k < z->n_units && z->n_param_pending; k++)
    if (z->param_pending[k] && !land_unit_params(z, k, 0)) break;
}

static void on_params_needed(void *ctx, td_gpt *m, int u) {
  td_zero *z = ctx;
  if (z->stage < 3) {
    on_params_landing(z, u);
    return;
  }
  record(z, u);
  int i = z->slot_of[u];
  if (i < 0) {
    i = free_slot(z, -1);
    TD_CHECK(i >= 0, "ZeRO-3: every parameter slot is in use");
    start_gather(z, i, u);
  }
  land(z, i);
  z->slots[i].refs++;
  td_gpt_bind_params(m, u, z->slots[i].params, z->slots[i].weights);
  int next = predict_next(z, u); /* prefetch: its all-gather runs while u computes */
  if (next >= 0 && next != u && z->slot_of[next] < 0) {
    int j = free_slot(z, u);
    if (j >= 0) start_gather(z, j, next);
  }
  if (z->n_queue) progress(z, 0);
}

static void on_params_done(void *ctx, td_gpt *m, int u) {
  td_zero *z = ctx;
  if (z->stage < 3) return;
  int i = z->slot_of[u];
  TD_CHECK(i >= 0 && z->slots[i].refs > 0, "ZeRO-3: unit %d released but not held", u);
  if (--z->slots[i].refs == 0) td_gpt_bind_params(m, u, NULL, NULL);
}

/* The shard changed (a step, a load): every gathered copy is stale. */
static void drop_slots(td_zero *z) {
  for (int i = 0; i < SLOTS; i++) {
    land(z, i);
    TD_CHECK(!z->slots[i].refs, "ZeRO-3: a slot is held across a step");
    empty_slot(z, i);
  }
}

void td_zero_step_done(td_zero *z) {
  if (z->stage == 3) z->trace_frozen = 1;
}

/* ------------------------------------------------------------ layout */

/* Buckets of whole units from the last to the first, each at most bucket_size
 * elements unless one unit alone is larger. */
static void make_buckets(td_zero *z, int64_t bucket_size) {
  z->buckets = td_calloc(sizeof *z->buckets * (size_t)(z->n_units ? z->n_units : 1));
  z->bucket_of = td_calloc(sizeof *z->bucket_of * (size_t)(z->n_units ? z->n_units : 1));
  int64_t fill = 0;
  for (int u = z->n_units - 1; u >= 0; u--) {
    bucket *b = z->n_buckets ? &z->buckets[z->n_buckets - 1] : NULL;
    if (!b || fill + U(z, u)->numel > bucket_size) {
      b = &z->buckets[z->n_buckets++];
      b->first_unit = u + 1, fill = 0;
    }
    b->first_unit--, b->n_units++, b->pending++;
    fill += U(z, u)->numel;
    z->bucket_of[u] = (int)(b - z->buckets);
  }
}

/* This rank's AdamW runs: each tensor's part inside this rank's piece of its
 * unit (stage 0: the whole unit), with the offsets of the three bases. */
static void make_runs(td_zero *z) {
  int n = td_gpt_num_tensors(z->model), k = 0;
  z->runs = td_malloc(sizeof *z->runs * (size_t)(n ? n : 1));
  z->run_tensor = td_malloc(sizeof *z->run_tensor * (size_t)(n ? n : 1));
  for (int u = 0; u < z->n_units; u++) {
    const td_gpt_unit *un = U(z, u);
    int64_t lo = un->offset + (z->stage ? z->dp_rank * z->piece[u] : 0), hi = lo + z->part[u];
    for (int i = un->first_tensor; i < un->first_tensor + un->n_tensors; i++) {
      const td_gpt_tensor *t = td_gpt_tensor_at(z->model, i);
      int64_t b = t->offset > lo ? t->offset : lo;
      int64_t e = t->offset + t->numel < hi ? t->offset + t->numel : hi;
      if (b >= e) continue;
      int64_t s = z->shard_off[u] + (b - lo);
      z->runs[k] = (td_adam_run){.state_offset = s, .param_offset = z->stage == 3 ? s : b,
                                 .grad_offset = z->stage >= 2 ? s : b, .numel = e - b,
                                 .weight_decay = t->weight_decay};
      z->run_tensor[k++] = i;
    }
  }
  z->n_runs = k;
}

static void alloc_stage3(td_zero *z) {
  const size_t bytes = (size_t)z->shard_numel * sizeof(float);
  z->param_shard = z->params_on_host ? OPS(z)->host_alloc(z->dev, bytes) : OPS(z)->alloc(z->dev, bytes);
  z->slot_of = td_malloc(sizeof *z->slot_of * (size_t)z->n_units);
  for (int u = 0; u < z->n_units; u++) z->slot_of[u] = -1;
  for (int i = 0; i < SLOTS; i++) z->slots[i].unit = -1;
}

td_zero *td_zero_create(td_gpt *model, td_comm *dp, int stage, int64_t bucket_size,
                        int params_on_host) {
  TD_CHECK(stage >= 0 && stage <= 3, "ZeRO stage %d", stage);
  TD_CHECK(!params_on_host || stage == 3, "ZeRO: parameters in host memory need stage 3");
  td_zero *z = td_calloc(sizeof *z);
  z->model = model, z->dev = td_gpt_device(model), z->dp = dp, z->stage = stage;
  z->params_on_host = params_on_host;
  z->dp_size = dp ? td_comm_size(dp) : 1;
  z->dp_rank = dp ? td_comm_rank(dp) : 0;
  z->n_units = td_gpt_num_units(model);
  z->flat_numel = td_gpt_flat_numel(model);
  size_t nu = (size_t)(z->n_units ? z->n_units : 1);
  z->piece = td_malloc(sizeof *z->piece * nu);
  z->part = td_malloc(sizeof *z->part * nu);
  z->shard_off = td_malloc(sizeof *z->shard_off * nu);
  for (int u = 0; u < z->n_units; u++) {
    int64_t n = U(z, u)->numel;
    TD_CHECK(n % z->dp_size == 0, "ZeRO: unit %d of %lld elements does not split into %d pieces", u,
             (long long)n, z->dp_size);
    z->piece[u] = n / z->dp_size;
    z->part[u] = stage ? z->piece[u] : n;
    z->shard_off[u] = z->shard_numel;
    z->shard_numel += z->part[u];
    if (n > z->max_unit) z->max_unit = n;
  }
  z->red = td_calloc(sizeof *z->red * nu);
  z->queue = td_malloc(sizeof *z->queue * nu);
  for (int k = 0; k < N_COMMS && z->dp_size > 1; k++) {
    z->comm[k] = td_comm_split(dp, 0, z->dp_rank);
    td_dcomm_bind(z->comm[k], z->dev); /* the device's collective library, when it has one */
  }
  make_buckets(z, bucket_size);
  make_runs(z);
  if (stage >= 2) {
    z->grad_shard = OPS(z)->alloc(z->dev, (size_t)z->shard_numel * sizeof(float));
    z->grad_buf = td_calloc(sizeof *z->grad_buf * nu);
  }
  if (stage == 3) alloc_stage3(z);
  td_zero_attach(z, model);
  return z;
}

void td_zero_attach(td_zero *z, td_gpt *m) {
  td_gpt_hooks h = {.ctx = z, .grads_ready = on_grads_ready, .grads_needed = on_grads_needed};
  if (z->stage == 3 || z->overlap_param_gather)
    h.params_needed = on_params_needed, h.params_done = on_params_done;
  td_gpt_set_hooks(m, &h);
}

void td_zero_free(td_zero *z) {
  if (!z) return;
  land_all_params(z);
  td_gpt_set_hooks(z->model, NULL);
  const td_device_ops *ops = OPS(z);
  if (z->grad_buf)
    for (int u = 0; u < z->n_units; u++) transient_free(z, z->grad_buf[u], U(z, u)->numel, sizeof(float));
  if (z->grad_shard) ops->free(z->dev, z->grad_shard);
  if (z->param_shard && z->params_on_host)
    ops->host_free(z->dev, z->param_shard);
  else if (z->param_shard)
    ops->free(z->dev, z->param_shard);
  if (z->slot_of) /* a prefetch may still be gathering (after a last evaluation) */
    for (int i = 0; i < SLOTS; i++) land(z, i), empty_slot(z, i);
  for (int k = 0; k < N_COMMS; k++) td_comm_free(z->comm[k]);
  td_free(z->piece), td_free(z->part), td_free(z->shard_off), td_free(z->red), td_free(z->queue);
  td_free(z->grad_buf), td_free(z->slot_of);
  td_free(z->trace), td_free(z->buckets), td_free(z->bucket_of), td_free(z->runs);
  td_free(z->run_tensor), td_free(z->param_req), td_free(z->param_pending);
  if (z->stat_dev) ops->free(z->dev, z->stat_dev);
  td_free(z->stat_host);
  td_free(z);
}

void td_zero_set_grad_comm_dtype(td_zero *z, td_dtype dt) {
  TD_CHECK(dt == TD_F32 || dt == TD_BF16 || dt == TD_F16,
           "ZeRO: gradients cross between ranks in fp32, bf16 or fp16, not %s", td_dtype_name(dt));
  TD_CHECK(!z->n_queue, "ZeRO: the gradients' wire dtype changed while reductions are in flight");
  z->wire = dt;
}

int td_zero_set_overlap_param_gather(td_zero *z, int on) {
  TD_CHECK(!z->n_param_pending, "ZeRO: the parameter gather's overlap changed while gathers run");
  on = on && (z->stage == 1 || z->stage == 2) && z->dp_size > 1;
  if (on && !z->param_req) {
    z->param_req = td_calloc(sizeof *z->param_req * (size_t)(z->n_units ? z->n_units : 1));
    z->param_pending = td_calloc((size_t)(z->n_units ? z->n_units : 1));
  }
  z->overlap_param_gather = on;
  td_zero_attach(z, z->model);
  return on;
}

void td_zero_sync_params(td_zero *z) { land_all_params(z); }
int td_zero_param_gathers_in_flight(const td_zero *z) { return z->n_param_pending; }

int td_zero_stage(const td_zero *z) { return z->stage; }
int64_t td_zero_shard_numel(const td_zero *z) { return z->shard_numel; }
int td_zero_num_buckets(const td_zero *z) { return z->n_buckets; }

const td_adam_run *td_zero_runs(const td_zero *z, const int **tensor_of_run, int *n) {
  if (tensor_of_run) *tensor_of_run = z->run_tensor;
  *n = z->n_runs;
  return z->runs;
}

float *td_zero_param_base(td_zero *z) {
  return z->stage == 3 ? z->param_shard : td_gpt_params(z->model);
}

float *td_zero_grad_base(td_zero *z) {
  return z->stage >= 2 ? z->grad_shard : td_gpt_grads(z->model);
}

/* ------------------------------------------------------------ statistics */

/* Rank r's piece of unit u in flat elements [lo, hi). */
static void piece_range(const td_zero *z, int u, int r, int64_t *lo, int64_t *hi) {
  *lo = U(z, u)->offset + r * z->piece[u], *hi = *lo + z->piece[u];
}

/* Rank r's part of the statistic, read from data laid out as the flat buffer
 * (flat) or as r's shard (shard; r == this rank): one reduction op per tensor
 * piece into the device slots from `slot` on. Returns the pieces' count. A
 * shard in host memory goes up a unit's piece at a time through upload (device
 * memory of the largest piece; stream order keeps one unit's ops before the
 * next copy). */
static int64_t piece_stats(td_zero *z, int r, const float *flat, const float *shard, float *upload,
                           int squares, const unsigned char *counted, int64_t slot) {
  const int64_t first = slot;
  for (int u = 0; u < z->n_units; u++) {
    const td_gpt_unit *un = U(z, u);
    int64_t lo, hi;
    piece_range(z, u, r, &lo, &hi);
    const float *piece = shard ? shard + z->shard_off[u] : NULL;
    if (shard && upload) {
      OPS(z)->copy_h2d_async(z->dev, upload, piece, (size_t)z->piece[u] * sizeof(float));
      piece = upload;
    }
    for (int i = un->first_tensor; i < un->first_tensor + un->n_tensors; i++) {
      const td_gpt_tensor *t = td_gpt_tensor_at(z->model, i);
      int64_t b = t->offset > lo ? t->offset : lo;
      int64_t e = t->offset + t->numel < hi ? t->offset + t->numel : hi;
      if (b >= e || (counted && !counted[i])) continue;
      const float *x = flat ? flat + b : piece + (b - lo);
      TD_CHECK(slot < z->n_stat, "ZeRO statistics: more pieces than the %lld slots",
               (long long)z->n_stat);
      double *out = z->stat_dev + slot++;
      if (squares)
        OPS(z)->sum_squares(z->dev, out, x, e - b);
      else
        OPS(z)->count_zeros(z->dev, out, x, e - b);
    }
  }
  return slot - first;
}

/* The sum of n slots from `first`, in slot order (the order of the tensors). */
static double slots_sum(const td_zero *z, int64_t first, int64_t n) {
  double s = 0;
  for (int64_t k = first; k < first + n; k++) s += z->stat_host[k];
  return s;
}

/* Each rank's part of each statistic is the sum of its pieces in tensor order, as
 * when each piece's value came back one at a time, so the bits do not depend on
 * the device or on which statistics are asked together; the host waits once, for
 * all of them. */
void td_zero_model_sums(td_zero *z, td_zero_what what, int n, const int *squares, double *out,
                        const unsigned char *counted) {
  TD_CHECK(n >= 1 && n <= TD_ZERO_MAX_STATS, "td_zero_model_sums: %d statistics", n);
  if (what == TD_ZERO_PARAMS) land_all_params(z);
  int sharded = what == TD_ZERO_GRADS ? z->stage >= 2 : z->stage == 3;
  const float *flat = what == TD_ZERO_GRADS ? td_gpt_grads(z->model) : td_gpt_params(z->model);
  const int ranks = sharded ? 1 : z->dp_size;
  double *part = td_calloc(sizeof *part * (size_t)(n * z->dp_size));  /* [stat][rank] */
  int64_t *count = td_malloc(sizeof *count * (size_t)(n * ranks)), used = 0;
  if (!z->stat_dev) {
    z->n_stat = (int64_t)TD_ZERO_MAX_STATS * z->dp_size * td_gpt_num_tensors(z->model);
    z->stat_dev = OPS(z)->alloc(z->dev, (size_t)(z->n_stat ? z->n_stat : 1) * sizeof(double));
    z->stat_host = td_malloc((size_t)(z->n_stat ? z->n_stat : 1) * sizeof(double));
  }
  const float *shard = what == TD_ZERO_GRADS ? z->grad_shard : z->param_shard;
  int64_t max_piece = 0;
  for (int u = 0; u < z->n_units; u++) max_piece = z->piece[u] > max_piece ? z->piece[u] : max_piece;
  float *upload = sharded && shard == z->param_shard && z->params_on_host
                      ? transient_alloc(z, max_piece, sizeof(float))
                      : NULL;
  for (int q = 0; q < n; q++)
    for (int k = 0; k < ranks; k++) {
      const int r = sharded ? z->dp_rank : k;
      count[q * ranks + k] = piece_stats(z, r, sharded ? NULL : flat, sharded ? shard : NULL,
                                         upload, squares[q], counted, used);
      used += count[q * ranks + k];
    }
  if (used) OPS(z)->copy_d2h(z->dev, z->stat_host, z->stat_dev, (size_t)used * sizeof(double));
  transient_free(z, upload, max_piece, sizeof(float));
  used = 0;
  for (int q = 0; q < n; q++)
    for (int k = 0; k < ranks; k++)
      part[q * z->dp_size + k] = slots_sum(z, used, count[q * ranks + k]), used += count[q * ranks + k];
  td_free(count);
  if (sharded && z->dp_size > 1) { /* each rank its own: part[q][0] -> part[q][rank] */
    double mine[TD_ZERO_MAX_STATS], *g = td_malloc(sizeof *g * (size_t)(n * z->dp_size));
    for (int q = 0; q < n; q++) mine[q] = part[q * z->dp_size];
    td_comm_all_gather(z->dp, mine, g, n, TD_F64); /* [rank][stat] */
    for (int q = 0; q < n; q++)
      for (int r = 0; r < z->dp_size; r++) part[q * z->dp_size + r] = g[r * n + q];
    td_free(g);
  }
  for (int q = 0; q < n; q++) {
    double s = 0;
    for (int r = 0; r < z->dp_size; r++) s += part[q * z->dp_size + r];
    out[q] = s;
  }
  td_free(part);
}

double td_zero_model_sum(td_zero *z, td_zero_what what, int squares, const unsigned char *counted) {
  double s;
  td_zero_model_sums(z, what, 1, &squares, &s, counted);
  return s;
}

/* ------------------------------------------------------------ step */

/* Every rank's updated pieces into every rank's flat parameters (stage 1/2). */
static void gather_params(td_zero *z) {
  if (z->dp_size == 1) return;
  float *flat = td_gpt_params(z->model);
  for (int u = 0; u < z->n_units; u++) {
    int64_t p = z->piece[u];
    float *unit = flat + U(z, u)->offset;
    td_dcomm_all_gather(z->dp, z->dev, unit + z->dp_rank * p, unit, p, TD_F32);
  }
}

/* Without sharding every rank updates the whole flat buffer, and AdamW writes the
 * bf16 weight copy in the same pass (td_zero_params_changed then has nothing to
 * cast); the shards of stages 1-3 are gathered as fp32 and cast after. */
void td_zero_update(td_zero *z, td_adamw *o, float lr, float grad_scale) {
  land_all_params(z); /* a gather still sending this rank's piece must not see it change */
  void *copy = z->stage == 0 && td_gpt_weight_dtype(z->model) == TD_BF16 ? td_gpt_weights(z->model)
                                                                          : NULL;
  z->weights_fresh =
      td_adamw_step_copy(o, td_zero_param_base(z), td_zero_grad_base(z), copy, TD_BF16, lr, grad_scale);
}


void td_zero_gather_params(td_zero *z) {
  if (z->overlap_param_gather)
    start_param_gathers(z);
  else if (z->stage == 1 || z->stage == 2)
    gather_params(z);
}

void td_zero_params_changed(td_zero *z) {
  if (z->stage == 3)
    drop_slots(z);
  else if (!z->weights_fresh && !z->n_param_pending) /* pending units: cast as each lands */
    td_gpt_cast_weights(z->model);
  z->weights_fresh = 0;
}

void td_zero_reduce_sequence_parallel_grads(td_zero *z, td_comm *tp) {
  if (z->stage < 2 || !tp) return;
  for (int u = 0; u < z->n_units; u++) {
    const td_gpt_unit *un = U(z, u);
    int64_t lo, hi;
    piece_range(z, u, z->dp_rank, &lo, &hi);
    for (int i = un->first_tensor; i < un->first_tensor + un->n_tensors; i++) {
      const td_gpt_tensor *t = td_gpt_tensor_at(z->model, i);
      int64_t b = t->offset > lo ? t->offset : lo;
      int64_t e = t->offset + t->numel < hi ? t->offset + t->numel : hi;
      if (b >= e || t->split_dim >= 0) continue;
      float *x = z->grad_shard + z->shard_off[u] + (b - lo);
      td_dcomm_all_reduce(tp, z->dev, x, x, e - b, TD_F32, TD_OP_SUM);
    }
  }
}

/* ------------------------------------------------------------ whole buffers */

void td_zero_init_params(td_zero *z, uint64_t seed) {
  if (z->stage < 3) {
    td_gpt_init_params(z->model, seed);
    return;
  }
  float *unit = transient_alloc(z, z->max_unit, sizeof(float));
  for (int u = 0; u < z->n_units; u++) {
    td_gpt_init_unit(z->model, u, seed, unit);
    float *dst = z->param_shard + z->shard_off[u];
    const float *src = unit + z->dp_rank * z->piece[u];
    const size_t bytes = (size_t)z->piece[u] * sizeof(float);
    if (z->params_on_host)
      OPS(z)->copy_d2h(z->dev, dst, src, bytes);
    else
      OPS(z)->copy_d2d(z->dev, dst, src, bytes);
  }
  transient_free(z, unit, z->max_unit, sizeof(float));
}

/* Unit u's piece of buffer `which` on this rank, in host memory (host: piece
 * floats): m and v offloaded are read where they are; parameters, and m and v
 * in device memory, come down with one copy. */
static void piece_to_host(td_zero *z, td_adamw *o, int which, int u, float *host) {
  const size_t bytes = (size_t)z->piece[u] * sizeof(float);
  if (which != 0 && (o->nvme || o->host)) {
    td_adamw_read_state(o, which - 1, z->shard_off[u], z->piece[u], host);
    return;
  }
  const float *base = which == 0 ? z->param_shard : which == 1 ? o->exp_avg : o->exp_avg_sq;
  if (which == 0 && z->params_on_host)
    memcpy(host, base + z->shard_off[u], bytes);
  else
    OPS(z)->copy_d2h(z->dev, host, base + z->shard_off[u], bytes);
}

void td_zero_gather_full(td_zero *z, td_adamw *o, int which, float *full) {
  if (which == 0) land_all_params(z);
  int sharded = which == 0 ? z->stage == 3 : z->stage >= 1;
  if (!sharded) { /* the whole buffer is here already */
    if (z->dp_rank != 0) return;
    if (which == 0)
      OPS(z)->copy_d2h(z->dev, full, td_gpt_params(z->model), (size_t)z->flat_numel * sizeof(float));
    else
      td_adamw_read_state(o, which - 1, 0, z->flat_numel, full);
    return;
  }
  /* a unit at a time: this rank's piece to the host, gathered by MPI into the
   * unit's place in full (DP rank 0); the device holds nothing extra */
  float *mine = td_malloc((size_t)z->max_unit * sizeof(float));
  for (int u = 0; u < z->n_units; u++) {
    piece_to_host(z, o, which, u, mine);
    float *dst = full ? full + U(z, u)->offset : NULL;
    if (z->dp_size > 1)
      td_comm_gather(z->dp, mine, dst, z->piece[u], TD_F32, 0);
    else
      memcpy(dst, mine, (size_t)z->piece[u] * sizeof(float));
  }
  td_free(mine);
}

/* Unit u of buffer `which` as this rank keeps it (from host: the whole unit for
 * the parameters below stage 3, else part[u] floats), into its place: the flat
 * parameters, the parameter shard, or Adam's state. */
static void store_part(td_zero *z, td_adamw *o, int which, int u, const float *host) {
  const size_t bytes = (size_t)z->part[u] * sizeof(float);
  if (which == 0 && z->stage < 3) /* the whole unit, whatever the optimizer's part */
    OPS(z)->copy_h2d(z->dev, td_gpt_params(z->model) + U(z, u)->offset, host,
                     (size_t)U(z, u)->numel * sizeof(float));
  else if (which == 0 && z->params_on_host)
    memcpy(z->param_shard + z->shard_off[u], host, bytes);
  else if (which == 0)
    OPS(z)->copy_h2d(z->dev, z->param_shard + z->shard_off[u], host, bytes);
  else
    td_adamw_write_state(o, which - 1, z->shard_off[u], z->part[u], host);
}

void td_zero_scatter_full(td_zero *z, td_adamw *o, int which, const float *full) {
  if (which == 0) land_all_params(z);
  const int whole = z->stage == 0 || (which == 0 && z->stage < 3); /* every rank keeps all */
  /* the host writes the shard: no copy of it may still be reading (a prefetch) */
  if (which == 0 && z->params_on_host) OPS(z)->synchronize(z->dev);
  float *mine = td_malloc((size_t)z->max_unit * sizeof(float));
  for (int u = 0; u < z->n_units; u++) {
    const int64_t n = U(z, u)->numel;
    const float *unit = full ? full + U(z, u)->offset : NULL; /* DP rank 0's */
    if (z->dp_size == 1)
      memcpy(mine, unit, (size_t)n * sizeof(float));
    else if (whole) {
      if (z->dp_rank == 0) memcpy(mine, unit, (size_t)n * sizeof(float));
      td_comm_broadcast(z->dp, mine, n, TD_F32, 0);
    } else {
      td_comm_scatter(z->dp, unit, mine, z->piece[u], TD_F32, 0);
    }
    store_part(z, o, which, u, mine);
  }
  td_free(mine);
  if (which == 0 && z->stage < 3) td_gpt_cast_weights(z->model);
  if (which == 0 && z->stage == 3) drop_slots(z);
}

/* ------------------------------------------------------------ reports */

td_zero_memory td_zero_memory_report(const td_zero *z, const td_adamw *o) {
  td_gpt_memory m = td_gpt_memory_report(z->model);
  td_zero_memory r = {.params = m.params, .weights = m.weights_bf16, .grads = m.grads,
                      .transient_peak = z->transient_peak};
  if (z->param_shard && !z->params_on_host) r.params += (uint64_t)z->shard_numel * sizeof(float);
  if (z->params_on_host) r.params_host = (uint64_t)z->shard_numel * sizeof(float);
  if (z->grad_shard) r.grads += (uint64_t)z->shard_numel * sizeof(float);
  if (o && !o->nvme && !o->host) r.optim = 2 * (uint64_t)o->numel * sizeof(float);
  return r;
}

double td_zero_take_comm_seconds(td_zero *z) {
  double s = z->comm_seconds;
  z->comm_seconds = 0;
  return s;
}
