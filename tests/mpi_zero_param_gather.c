/* ZeRO-1/2's parameter all-gather overlapped with the next forward
 * (td_zero_set_overlap_param_gather, Megatron's --overlap-param-gather) under
 * mpirun -np N, on the CPU and on the sealed device, fp32 and bf16: after an
 * update, td_zero_gather_params leaves every unit's gather in flight; the next
 * forward lands each one as its unit runs; then the flat parameters, the
 * low-precision weight copy and the loss are those of the blocking gather, bit
 * for bit. A unit the forward never landed early would read stale pieces of
 * the other ranks (a different loss); a weight copy not cast on landing would
 * keep the old weights. */
#include <string.h>

#include "base/mem.h"
#include "check.h"
#include "comm/comm.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "parallel/zero.h"

#define SEQ TST_TINY_SEQ
#define VOCAB TST_TINY_VOCAB

static td_comm *g_world;
static int g_rank, g_size, g_failed;

#define expect(ok, ...) (g_failed |= !tst_check_on_rank(g_rank, g_size, (ok), __VA_ARGS__))

typedef struct {
  td_gpt *model;
  td_zero *zero;
  td_adamw opt;
} run;

static void open_run(run *r, td_device *d, int stage, td_dtype cd, int overlap) {
  td_gpt_config c = tst_tiny_gpt_config();
  td_gpt_layout lay = td_gpt_layout_single(&c);
  lay.unit_multiple = td_zero_unit_multiple(g_size);
  lay.no_flat_grads = stage >= 2;
  r->model = td_gpt_create(d, &c, &lay, 1, cd);
  r->zero = td_zero_create(r->model, g_world, stage, 1000, 0);
  expect(td_zero_set_overlap_param_gather(r->zero, overlap) == overlap,
         "ZeRO-%d over %d ranks: the overlap %s", stage, g_size, overlap ? "applies" : "stays off");
  td_zero_init_params(r->zero, 3);
  int n;
  const td_adam_run *runs = td_zero_runs(r->zero, NULL, &n);
  td_adamw_init(&r->opt, d, td_zero_shard_numel(r->zero), runs, n, 0.9f, 0.95f, 1e-8f, 0.1f);
}

static void close_run(run *r) {
  td_adamw_free(&r->opt);
  td_zero_free(r->zero);
  td_gpt_destroy(r->model);
}

/* This rank's micro-batch of step s; returns the loss sum. */
static double forward(run *r, int s) {
  int32_t tokens[SEQ], targets[SEQ];
  float mask[SEQ];
  for (int i = 0; i < SEQ; i++) {
    tokens[i] = (int32_t)((g_rank * 13 + s * 3 + i * 5 + 1) % VOCAB);
    targets[i] = (int32_t)((g_rank * 7 + s * 5 + i * 11 + 3) % VOCAB);
    mask[i] = 1.0f;
  }
  return td_gpt_forward(r->model, tokens, targets, mask, 5, 1, NULL);
}

/* A step's backward and update (the forward came before), then the gather. */
static void step(run *r) {
  td_zero_zero_grads(r->zero);
  td_zero_set_reduce(r->zero, 1);
  td_gpt_backward(r->model, 1.0f / SEQ);
  td_zero_finish_grads(r->zero);
  td_zero_update(r->zero, &r->opt, 1e-2f, 1.0f);
  td_zero_gather_params(r->zero);
  td_zero_params_changed(r->zero);
}

static int same_device_bytes(td_device *d, const void *a, const void *b, size_t bytes) {
  char *x = td_malloc(bytes), *y = td_malloc(bytes);
  d->ops->copy_d2h(d, x, a, bytes);
  d->ops->copy_d2h(d, y, b, bytes);
  int same = !memcmp(x, y, bytes);
  td_free(x), td_free(y);
  return same;
}

static void check(const char *device, int stage, td_dtype cd) {
  td_device *d = td_device_open(device);
  run plain, over;
  open_run(&plain, d, stage, cd, 0);
  open_run(&over, d, stage, cd, 1);
  const int units = td_gpt_num_units(over.model);
  int deferred = 1, landed = 1, same_loss = 1;
  for (int s = 0; s < 3; s++) {
    double lp = forward(&plain, s), lo = forward(&over, s);
    same_loss &= lp == lo;
    landed &= td_zero_param_gathers_in_flight(over.zero) == 0;
    step(&plain), step(&over);
    deferred &= td_zero_param_gathers_in_flight(over.zero) == units;
  }
  forward(&plain, 3), forward(&over, 3);
  expect(deferred, "%s ZeRO-%d %s: after each update all %d units' gathers are in flight", device,
         stage, td_dtype_name(cd), units);
  expect(landed && td_zero_param_gathers_in_flight(over.zero) == 0,
         "%s ZeRO-%d %s: the next forward lands every unit's gather", device, stage,
         td_dtype_name(cd));
  const int64_t n = td_gpt_flat_numel(over.model);
  int params = same_device_bytes(d, td_gpt_params(plain.model), td_gpt_params(over.model),
                                 (size_t)n * sizeof(float));
  int weights = cd == TD_F32 || same_device_bytes(d, td_gpt_weights(plain.model),
                                                  td_gpt_weights(over.model),
                                                  (size_t)n * td_dtype_size(td_gpt_weight_dtype(over.model)));
  expect(same_loss && params && weights,
         "%s ZeRO-%d %s: overlapped == blocking gather, bit for bit (losses %d, parameters %d, "
         "weight copy %d)",
         device, stage, td_dtype_name(cd), same_loss, params, weights);
  close_run(&plain), close_run(&over);
  td_device_close(d);
}

int main(void) {
  g_world = td_comm_init();
  g_rank = td_comm_rank(g_world), g_size = td_comm_size(g_world);
  for (int stage = 1; stage <= 2; stage++) {
    check("cpu", stage, TD_F32);
    check("cpu", stage, TD_BF16);
    check("sealed", stage, TD_BF16);
  }
  int32_t failed = g_failed;
  if (g_rank == 0) failed |= tst_finish();
  td_comm_all_reduce(g_world, &failed, &failed, 1, TD_I32, TD_OP_MAX);
  td_comm_finalize();
  return failed;
}
