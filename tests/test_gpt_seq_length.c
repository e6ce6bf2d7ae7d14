/* td_gpt_set_seq_length (Megatron-DeepSpeed's seqlen curriculum): a model made
 * for sequence length 24 and set to 8 gives, on the same parameters and tokens,
 * the loss and every parameter gradient of a model made for 8, bit for bit,
 * with hidden and attention dropout on (its counters follow the tokens); and
 * set back to 24 it is the 24 model again. fp32 and bf16. */
#include <string.h>

#include "base/mem.h"
#include "base/rng.h"
#include "check.h"
#include "model/gpt.h"

static td_gpt_config config(int64_t seq) {
  td_gpt_config c;
  memset(&c, 0, sizeof c);
  c.num_layers = 2, c.hidden = 32, c.heads = 4, c.ffn_hidden = 128;
  c.seq_len = seq, c.max_positions = 24, c.vocab_size = 96;
  c.layernorm_eps = 1e-5f, c.init_std = 0.02f;
  c.hidden_dropout = 0.1f, c.attention_dropout = 0.1f;
  return c;
}

/* The loss of one micro-batch and its gradients on the host. */
static double loss_and_grads(td_gpt *m, const int32_t *tok, const int32_t *tgt, const float *mask,
                             float *grads) {
  td_device *d = tst_device();
  double msum;
  td_gpt_zero_grads(m);
  double loss = td_gpt_forward(m, tok, tgt, mask, 77, 1, &msum);
  td_gpt_backward(m, (float)(1.0 / msum));
  int64_t n = td_gpt_flat_numel(m);
  d->ops->copy_d2h(d, grads, td_gpt_grads(m), (size_t)n * sizeof(float));
  return loss / msum;
}

static void test_dtype(td_dtype cd) {
  const int64_t B = 3, T = 8, FULL = 24;
  td_gpt_config cs = config(T), cl = config(FULL);
  td_gpt_layout ls = td_gpt_layout_single(&cs), ll = td_gpt_layout_single(&cl);
  td_gpt *small = td_gpt_create(tst_device(), &cs, &ls, B, cd);
  td_gpt *large = td_gpt_create(tst_device(), &cl, &ll, B, cd);
  td_gpt_init_params(small, 5);
  td_gpt_init_params(large, 5);
  int64_t n = td_gpt_flat_numel(small);
  CHECK(n == td_gpt_flat_numel(large), "the same parameters (positions sized by max_positions)");
  int32_t tok[3 * 24], tgt[3 * 24];
  float mask[3 * 24];
  for (int64_t i = 0; i < B * FULL; i++) {
    tok[i] = (int32_t)(td_rng_u32(3, 0, (uint64_t)i) % 96);
    tgt[i] = (int32_t)(td_rng_u32(3, 1, (uint64_t)i) % 96);
    mask[i] = (float)(i % 5 != 2);
  }
  float *gs = td_malloc((size_t)n * 4), *gl = td_malloc((size_t)n * 4);
  double a = loss_and_grads(small, tok, tgt, mask, gs);
  td_gpt_set_seq_length(large, T);
  double b = loss_and_grads(large, tok, tgt, mask, gl);
  CHECK(a == b && !memcmp(gs, gl, (size_t)n * 4),
        "%s: set to %lld tokens, the %lld model is the %lld model (loss %.9g vs %.9g)",
        td_dtype_name(cd), (long long)T, (long long)FULL, (long long)T, b, a);
  td_gpt *again = td_gpt_create(tst_device(), &cl, &ll, B, cd);
  td_gpt_init_params(again, 5);
  float *g2 = td_malloc((size_t)n * 4);
  double c = loss_and_grads(again, tok, tgt, mask, g2);
  td_gpt_set_seq_length(large, FULL);
  double e = loss_and_grads(large, tok, tgt, mask, gl);
  CHECK(c == e && !memcmp(g2, gl, (size_t)n * 4), "%s: set back to %lld, the full model again",
        td_dtype_name(cd), (long long)FULL);
  td_free(gs), td_free(gl), td_free(g2);
  td_gpt_destroy(small), td_gpt_destroy(large), td_gpt_destroy(again);
}

int main(void) {
  test_dtype(TD_F32);
  test_dtype(TD_BF16);
  return tst_finish();
}
