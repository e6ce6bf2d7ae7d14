/* ZeRO's gradient reduction across ranks (parallel/zero.h) under mpirun -np N,
 * with each wire dtype (td_zero_set_grad_comm_dtype: fp32, Megatron's
 * --grad-reduce-in-bf16, DeepSpeed's communication_data_type fp16), at every
 * stage, on the CPU and on the sealed device (every move through the device's
 * copies and casts), with small buckets so that several units are in flight.
 *
 * Each rank trains a tiny GPT on tokens of its own. Its unreduced gradients
 * come from the same model without data parallelism; every rank's are gathered
 * on the host, and the expected reduction computed there: each rank's gradient
 * rounded to the wire dtype, the ranks summed in fp32 in rank order, the sum
 * rounded to the wire dtype once (fp32: the plain sum in rank order). Stage 0/1
 * must leave exactly that in every rank's flat gradients, stage 2/3 exactly
 * this rank's pieces of it added to the zeroed shard (0 + x: a -0 sum is +0). */
#include <stdio.h>
#include <string.h>

#include "base/dtype.h"
#include "base/mem.h"
#include "check.h"
#include "comm/comm.h"
#include "model/gpt.h"
#include "parallel/zero.h"

#define SEQ TST_TINY_SEQ
#define VOCAB TST_TINY_VOCAB

static td_comm *g_world;
static int g_rank, g_size, g_failed;

#define expect(ok, ...) (g_failed |= !tst_check_on_rank(g_rank, g_size, (ok), __VA_ARGS__))

/* x as the wire carries it. */
static float on_wire(float x, td_dtype wire) {
  if (wire == TD_BF16) return td_bf16_to_f32(td_f32_to_bf16(x));
  if (wire == TD_F16) return td_f16_to_f32(td_f32_to_f16(x));
  return x;
}

/* One forward and backward of rank `rank`'s tokens (their loss summed, not
 * averaged: gradients clear of fp16's subnormals). */
static void backward(td_gpt *m, int rank) {
  int32_t tokens[SEQ], targets[SEQ];
  float mask[SEQ];
  for (int i = 0; i < SEQ; i++) {
    tokens[i] = (int32_t)((rank * 13 + i * 5 + 1) % VOCAB);
    targets[i] = (int32_t)((rank * 7 + i * 11 + 3) % VOCAB);
    mask[i] = 1.0f;
  }
  td_gpt_forward(m, tokens, targets, mask, 5, 1, NULL);
  td_gpt_backward(m, 1.0f);
}

static td_gpt *make_model(td_device *d, int stage, int dp_size) {
  td_gpt_config cfg = tst_tiny_gpt_config();
  td_gpt_layout lay = td_gpt_layout_single(&cfg);
  lay.unit_multiple = td_zero_unit_multiple(dp_size);
  lay.no_flat_grads = stage >= 2, lay.no_flat_params = stage == 3;
  return td_gpt_create(d, &cfg, &lay, 1, TD_F32);
}

/* This rank's unreduced gradients (flat, n elements), from a model without
 * data parallelism that starts from the same parameters. */
static float *local_grads(td_device *d, int64_t n) {
  td_gpt *m = make_model(d, 0, g_size);
  td_zero *z = td_zero_create(m, NULL, 0, 1000, 0);
  td_zero_init_params(z, 3);
  td_zero_zero_grads(z);
  td_zero_set_reduce(z, 1);
  backward(m, g_rank);
  td_zero_finish_grads(z);
  float *g = td_malloc((size_t)n * sizeof(float));
  d->ops->copy_d2h(d, g, td_gpt_grads(m), (size_t)n * sizeof(float));
  td_zero_free(z);
  td_gpt_destroy(m);
  return g;
}

static void check_reduction(const char *device, int stage, td_dtype wire) {
  td_device *d = td_device_open(device);
  td_gpt *m = make_model(d, stage, g_size);
  const int64_t n = td_gpt_flat_numel(m);
  float *mine = local_grads(d, n);
  float *all = td_malloc((size_t)(n * g_size) * sizeof(float)); /* [rank][n] */
  td_comm_all_gather(g_world, mine, all, n, TD_F32);
  float *want = td_malloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; i++) {
    float s = on_wire(all[i], wire);
    for (int r = 1; r < g_size; r++) s += on_wire(all[(int64_t)r * n + i], wire);
    want[i] = on_wire(s, wire);
  }

  td_zero *z = td_zero_create(m, g_world, stage, 1000, 0);
  td_zero_set_grad_comm_dtype(z, wire);
  td_zero_init_params(z, 3);
  td_zero_zero_grads(z);
  td_zero_set_reduce(z, 1);
  backward(m, g_rank);
  td_zero_finish_grads(z);
  const int64_t have_n = stage >= 2 ? td_zero_shard_numel(z) : n;
  float *have = td_malloc((size_t)have_n * sizeof(float));
  d->ops->copy_d2h(d, have, td_zero_grad_base(z), (size_t)have_n * sizeof(float));
  int64_t bad = -1, at = 0;
  float got = 0;
  for (int u = 0; u < td_gpt_num_units(m); u++) { /* stage 2/3: this rank's piece of each unit */
    const td_gpt_unit *un = td_gpt_unit_at(m, u);
    const int64_t piece = un->numel / g_size;
    const int64_t lo = stage >= 2 ? un->offset + g_rank * piece : un->offset;
    const int64_t len = stage >= 2 ? piece : un->numel;
    for (int64_t j = 0; j < len && bad < 0; j++) {
      const float w = stage >= 2 ? 0.0f + want[lo + j] : want[lo + j];
      if (memcmp(&have[(stage >= 2 ? at : lo) + j], &w, sizeof(float)))
        bad = lo + j, got = have[(stage >= 2 ? at : lo) + j];
    }
    at += len;
  }
  char diff[128] = "";
  if (bad >= 0)
    snprintf(diff, sizeof diff, " (first difference at flat element %lld: %g, want %g)",
             (long long)bad, (double)got, (double)want[bad]);
  expect(bad < 0 && (stage < 2 || at == have_n),
         "%s ZeRO-%d, %s on the wire: the reduced gradients are every rank's rounded to the wire, "
         "summed in rank order, rounded once%s",
         device, stage, td_dtype_name(wire), diff);
  int64_t rounded = 0; /* the wire did round: some element differs from the fp32 sum */
  for (int64_t i = 0; i < n && wire != TD_F32; i++) {
    float s = all[i];
    for (int r = 1; r < g_size; r++) s += all[(int64_t)r * n + i];
    rounded += s != want[i];
  }
  if (wire != TD_F32)
    expect(rounded > 0, "%s ZeRO-%d, %s on the wire: %lld elements differ from the fp32 sum",
           device, stage, td_dtype_name(wire), (long long)rounded);
  td_free(have), td_free(want), td_free(all), td_free(mine);
  td_zero_free(z);
  td_gpt_destroy(m);
  td_device_close(d);
}

int main(void) {
  g_world = td_comm_init();
  g_rank = td_comm_rank(g_world), g_size = td_comm_size(g_world);
  static const td_dtype wires[] = {TD_F32, TD_BF16, TD_F16};
  for (int stage = 0; stage <= 3; stage++)
    for (int w = 0; w < 3; w++) {
      check_reduction("cpu", stage, wires[w]);
      check_reduction("sealed", stage, wires[w]);
    }
  int32_t failed = g_failed;
  if (g_rank == 0) failed |= tst_finish();
  td_comm_all_reduce(g_world, &failed, &failed, 1, TD_I32, TD_OP_MAX);
  td_comm_finalize();
  return failed;
}
