/* The data-parallel engine (parallel/zero.h) in a world of one rank: the AdamW
 * runs of every stage cover each parameter exactly once, buckets hold whole
 * units from the last to the first within the bucket size, and ZeRO stages 1,
 * 2 and 3 train a tiny GPT (fp32 and bf16, tied and untied output layer, with
 * and without full recomputation, several micro-batches per step) to the same
 * bits as stage 0: gradients placed through unit buffers, parameters gathered
 * into slots, prefetched, dropped after each step. Whole buffers gathered from
 * the shards and scattered back round-trip exactly. Multi-rank equality (DP=2,
 * DP=4, TP=2 x DP=2) is cli_train_dp.sh's and cli_train_tp.sh's; the
 * round trip across ranks is mpi_zero_checkpoint's. */
#include <math.h>
#include <string.h>

#include "base/mem.h"
#include "base/rng.h"
#include "check.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "parallel/zero.h"

#define MB 2
#define SEQ 7
#define NTOK (MB * SEQ)
#define VOCAB 37
#define STEPS 3

static td_gpt_config tiny_config(int untie) {
  td_gpt_config c;
  memset(&c, 0, sizeof c);
  c.num_layers = 3, c.hidden = 16, c.heads = 2, c.ffn_hidden = 40;
  c.seq_len = SEQ, c.max_positions = 9;
  c.vocab_size = td_gpt_padded_vocab(VOCAB, 8, 1);
  c.init_std = 0.02f, c.layernorm_eps = 1e-5f, c.hidden_dropout = 0.1f;
  c.untie_embeddings = untie;
  return c;
}

typedef struct {
  td_gpt *model;
  td_zero *zero;
  td_adamw opt;
} run;

static void open_run(run *r, const td_gpt_config *c, td_dtype cd, int stage, int recompute,
                     int64_t bucket) {
  td_gpt_layout lay = td_gpt_layout_single(c);
  lay.no_flat_grads = stage >= 2, lay.no_flat_params = stage == 3;
  if (recompute) lay.recompute = TD_RECOMPUTE_UNIFORM, lay.recompute_num_layers = 2;
  r->model = td_gpt_create(tst_device(), c, &lay, MB, cd);
  r->zero = td_zero_create(r->model, NULL, stage, bucket, 0);
  td_zero_init_params(r->zero, 11);
  int n;
  const td_adam_run *runs = td_zero_runs(r->zero, NULL, &n);
  td_adamw_init(&r->opt, tst_device(), td_zero_shard_numel(r->zero), runs, n, 0.9f, 0.95f, 1e-8f,
                0.1f);
}

static void close_run(run *r) {
  td_adamw_free(&r->opt);
  td_zero_free(r->zero);
  td_gpt_destroy(r->model);
}

/* STEPS steps of `micro` micro-batches; the parameters after them, whole. */
static float *train(run *r, int micro) {
  int32_t tokens[NTOK], targets[NTOK];
  float mask[NTOK];
  for (int s = 0; s < STEPS; s++) {
    td_zero_zero_grads(r->zero);
    for (int m = 0; m < micro; m++) {
      for (int i = 0; i < NTOK; i++) {
        tokens[i] = (int32_t)(td_rng_u32(tst_seed(), 7, (uint64_t)(s * 1000 + m * 100 + 2 * i)) % VOCAB);
        targets[i] = (int32_t)(td_rng_u32(tst_seed(), 7, (uint64_t)(s * 1000 + m * 100 + 2 * i + 1)) % VOCAB);
        mask[i] = i % 4 == 1 ? 0.0f : 1.0f;
      }
      td_gpt_forward(r->model, tokens, targets, mask, (uint64_t)(s * 10 + m), 1, NULL);
      td_zero_set_reduce(r->zero, m == micro - 1);
      td_gpt_backward(r->model, 1.0f / NTOK);
    }
    td_zero_finish_grads(r->zero);
    double norm = td_zero_model_sum(r->zero, TD_ZERO_GRADS, 1, NULL);
    td_zero_update(r->zero, &r->opt, 1e-2f, (float)(norm > 1 ? 1 / norm : 1));
    td_zero_gather_params(r->zero);
    td_zero_params_changed(r->zero);
    td_zero_step_done(r->zero);
  }
  float *full = td_malloc((size_t)td_gpt_flat_numel(r->model) * sizeof(float));
  td_zero_gather_full(r->zero, &r->opt, 0, full);
  return full;
}

static void test_runs_cover_each_parameter_once(void) {
  td_gpt_config c = tiny_config(1);
  for (int stage = 0; stage <= 3; stage++) {
    run r;
    open_run(&r, &c, TD_F32, stage, 0, 1000);
    int n;
    const int *tensor;
    const td_adam_run *runs = td_zero_runs(r.zero, &tensor, &n);
    int64_t covered = 0, bad = 0, next_state = 0;
    for (int k = 0; k < n; k++) {
      const td_gpt_tensor *t = td_gpt_tensor_at(r.model, tensor[k]);
      covered += runs[k].numel;
      bad += runs[k].state_offset < next_state || runs[k].weight_decay != t->weight_decay;
      bad += stage < 3 && (runs[k].param_offset < t->offset ||
                           runs[k].param_offset + runs[k].numel > t->offset + t->numel);
      next_state = runs[k].state_offset + runs[k].numel;
    }
    CHECK(covered == td_gpt_num_params(r.model) && !bad && next_state <= td_zero_shard_numel(r.zero),
          "stage %d: runs cover %lld of %lld parameters, %lld misplaced", stage, (long long)covered,
          (long long)td_gpt_num_params(r.model), (long long)bad);
    close_run(&r);
  }
}

/* A bucket of 1000 elements: the tiny layers (~3.3k elements) are a bucket
 * each, the final LayerNorm shares one with nothing larger than it. */
static void test_buckets(void) {
  td_gpt_config c = tiny_config(0);
  run small, large;
  open_run(&small, &c, TD_F32, 0, 0, 1000);
  open_run(&large, &c, TD_F32, 0, 0, 1 << 30);
  int units = td_gpt_num_units(small.model);
  CHECK(units == 5, "units: embeddings, 3 layers, final LayerNorm: %d", units);
  CHECK(td_zero_num_buckets(small.zero) == units && td_zero_num_buckets(large.zero) == 1,
        "buckets: %d of 1000 elements (want %d: every unit is larger), %d of 2^30 (want 1)",
        td_zero_num_buckets(small.zero), units, td_zero_num_buckets(large.zero));
  close_run(&small), close_run(&large);
}

/* Largest |got - want| over largest |want|. */
static double max_rel(const float *got, const float *want, int64_t n) {
  double d = 0, w = 0;
  for (int64_t i = 0; i < n; i++) {
    double e = got[i] > want[i] ? (double)got[i] - want[i] : (double)want[i] - got[i];
    d = e > d ? e : d;
    w = want[i] > w ? want[i] : -want[i] > w ? -want[i] : w;
  }
  return d / w;
}

/* ||got - want|| / ||want|| (2-norms) */
static double norm_rel(const float *got, const float *want, int64_t n) {
  double d = 0, w = 0;
  for (int64_t i = 0; i < n; i++) {
    double e = (double)got[i] - want[i];
    d += e * e, w += (double)want[i] * want[i];
  }
  return sqrt(d / w);
}

/* One micro-batch per step: every stage gives stage 0's bits. With gradient
 * accumulation stages 2 and 3 add each micro-batch's reduced gradient to the
 * shard (DeepSpeed's order), stage 0/1 the gradient the backwards accumulated:
 * the same sum, rounded in another order. The parameters are compared normwise:
 * a gradient element that is rounding noise (bf16: a sum that cancels) can take
 * the other sign in the other order, and Adam turns that into an update of the
 * other sign, lr in size, whatever the gradient's size (0.011 of the largest
 * parameter for one seed in ~30 on a Zen 3); the largest element's difference is
 * printed too. */
static void test_stages_train_alike(void) {
  static const td_dtype dts[2] = {TD_F32, TD_BF16};
  for (int d = 0; d < 2; d++)
    for (int untie = 0; untie < 2; untie++)
      for (int rc = 0; rc < 2; rc++)
        for (int micro = 1; micro <= 3; micro += 2) {
          td_gpt_config c = tiny_config(untie);
          run base;
          open_run(&base, &c, dts[d], 0, rc, 1000);
          float *want = train(&base, micro);
          int64_t n = td_gpt_flat_numel(base.model);
          for (int stage = 1; stage <= 3; stage++) {
            run z;
            open_run(&z, &c, dts[d], stage, rc, stage == 2 ? 1 << 30 : 1000);
            float *got = train(&z, micro);
            const char *layout = untie ? "untied" : "tied";
            if (micro == 1 || stage == 1) {
              CHECK(!memcmp(got, want, (size_t)n * sizeof(float)),
                    "%s, %s output layer, recompute %d, %d micro-batches: stage %d trains to "
                    "stage 0's bits", td_dtype_name(dts[d]), layout, rc, micro, stage);
            } else {
              double e = norm_rel(got, want, n), tol = dts[d] == TD_F32 ? 3e-5 : 1e-2;
              CHECK(e < tol, "%s, %s output layer, recompute %d, %d micro-batches: stage %d "
                    "within %.0e of stage 0, normwise (%.2g; largest element %.2g)",
                    td_dtype_name(dts[d]), layout, rc, micro, stage, tol, e,
                    max_rel(got, want, n));
            }
            td_free(got);
            close_run(&z);
          }
          td_free(want);
          close_run(&base);
        }
}

/* Scatter a whole buffer into the shards and gather it back, for each buffer. */
static void test_gather_scatter_round_trip(void) {
  td_gpt_config c = tiny_config(1);
  for (int stage = 0; stage <= 3; stage++) {
    run r;
    open_run(&r, &c, TD_F32, stage, 0, 1000);
    int64_t n = td_gpt_flat_numel(r.model);
    float *in = td_malloc((size_t)n * sizeof(float)), *out = td_malloc((size_t)n * sizeof(float));
    int bad = 0;
    for (int which = 0; which < 3; which++) {
      tst_fill_normal(in, n, (uint64_t)(40 + which), 1.0f);
      for (int u = 0; u < td_gpt_num_units(r.model); u++) { /* the gaps stay zero */
        const td_gpt_unit *un = td_gpt_unit_at(r.model, u);
        for (int i = un->first_tensor; i < un->first_tensor + un->n_tensors; i++) {
          const td_gpt_tensor *t = td_gpt_tensor_at(r.model, i);
          int64_t end = i + 1 < un->first_tensor + un->n_tensors
                            ? td_gpt_tensor_at(r.model, i + 1)->offset : un->offset + un->numel;
          memset(in + t->offset + t->numel, 0, (size_t)(end - t->offset - t->numel) * sizeof(float));
        }
      }
      td_zero_scatter_full(r.zero, &r.opt, which, in);
      memset(out, 0xff, (size_t)n * sizeof(float));
      td_zero_gather_full(r.zero, &r.opt, which, out);
      bad += memcmp(in, out, (size_t)n * sizeof(float)) != 0;
    }
    CHECK(!bad, "stage %d: parameters, m and v scattered and gathered back exactly", stage);
    td_free(in), td_free(out);
    close_run(&r);
  }
}

int main(void) {
  test_runs_cover_each_parameter_once();
  test_buckets();
  test_stages_train_alike();
  test_gather_scatter_round_trip();
  return tst_finish();
}
