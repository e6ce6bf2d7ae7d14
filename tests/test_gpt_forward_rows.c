/* td_gpt_forward_rows (generation with a key/value cache): rows run a few at a
 * time, each call reusing the keys and values of the rows before, give the
 * logits the whole sequence's forward gives at the last row of each call:
 * calls of one row (a generated token), of several (a prompt, more than a
 * query block of the CPU attention's 64 rows), from row 0 and after a restart,
 * fp32 and bf16, erf and tanh GELU. Also on a device without
 * attention_forward_rows (the same model recomputing the rows before), and on
 * the sealed and CUDA devices (TRIDENT_TEST_DEVICE). */
#include <math.h>
#include <string.h>

#include "base/mem.h"
#include "base/rng.h"
#include "check.h"
#include "model/gpt.h"

enum { T = 96, VOCAB = 100 };

static td_gpt_config config(int tanh_gelu) {
  td_gpt_config c;
  memset(&c, 0, sizeof c);
  c.num_layers = 2, c.hidden = 32, c.heads = 4, c.ffn_hidden = 128;
  c.seq_len = T, c.max_positions = T, c.vocab_size = 128; /* VOCAB padded */
  c.layernorm_eps = 1e-5f, c.init_std = 0.3f;             /* large weights: logits far apart */
  c.openai_gelu = tanh_gelu;
  return c;
}

/* Normwise relative error of n values against the reference. */
static double rel_err(const float *x, const float *ref, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = (double)x[i] - ref[i];
    num += d * d, den += (double)ref[i] * ref[i];
  }
  return sqrt(num / (den > 0 ? den : 1));
}

/* The row r logits of every row, from one forward of the whole sequence. */
static void reference_logits(td_gpt *m, const int32_t *tok, float *ref) {
  int32_t tgt[T] = {0};
  float mask[T];
  for (int64_t i = 0; i < T; i++) mask[i] = 1.0f;
  double ms;
  td_gpt_forward(m, tok, tgt, mask, 0, 0, &ms);
  for (int64_t r = 0; r < T; r++) td_gpt_logits_row_to_host(m, r, ref + r * 128);
}

/* The calls [b[i], b[i + 1]) in order; each one's last row against the reference. */
static void check_calls(td_gpt *m, const int32_t *tok, const float *ref, const int64_t *b, int n,
                        double tol, const char *what) {
  float logits[128];
  double worst = 0;
  int at = 0;
  for (int i = 0; i < n; i++) {
    td_gpt_forward_rows(m, tok, b[i], b[i + 1], logits);
    double e = rel_err(logits, ref + (b[i + 1] - 1) * 128, 128);
    if (e > worst) worst = e, at = i;
  }
  CHECK(worst < tol, "%s, %d calls from row %lld: the last row's logits within %.3g (tol %.0e; "
        "the worst: rows [%lld, %lld))", what, n, (long long)b[0], worst, tol, (long long)b[at],
        (long long)b[at + 1]);
}

static void check_model(td_device *dev, td_dtype cd, int tanh_gelu, const char *device_name) {
  td_gpt_config c = config(tanh_gelu);
  td_gpt_layout lay = td_gpt_layout_single(&c);
  /* the reference from a model of its own: no row of m holds its values before a call */
  td_gpt *m = td_gpt_create(dev, &c, &lay, 1, cd), *whole = td_gpt_create(dev, &c, &lay, 1, cd);
  td_gpt_init_params(m, 11), td_gpt_init_params(whole, 11);
  td_gpt_cast_weights(m), td_gpt_cast_weights(whole);
  int32_t tok[T];
  for (int64_t i = 0; i < T; i++) tok[i] = (int32_t)(td_rng_u32(7, 0, (uint64_t)i) % VOCAB);
  float *ref = td_malloc((size_t)T * 128 * sizeof *ref);
  reference_logits(whole, tok, ref);
  td_gpt_destroy(whole);
  /* bf16 activations round where the whole forward's do, but a product of other
   * rows may round an element the other way: a bf16 unit, amplified a little */
  const double tol = cd == TD_BF16 ? 3e-2 : 2e-5;
  char what[128];
  snprintf(what, sizeof what, "%s %s %s GELU", device_name, td_dtype_name(cd),
           tanh_gelu ? "tanh" : "erf");
  /* one row at a time, a prompt of several, one of more than 64 rows, the last row */
  static const int64_t calls[] = {0, 1, 2, 3, 9, 10, 11, 80, 81, 82, 95, 96};
  check_calls(m, tok, ref, calls, (int)(sizeof calls / sizeof *calls) - 1, tol, what);
  /* a fresh start: a prompt from row 0, then single rows again */
  static const int64_t again[] = {0, 40, 41, 42};
  check_calls(m, tok, ref, again, (int)(sizeof again / sizeof *again) - 1, tol, what);
  td_free(ref);
  td_gpt_destroy(m);
}

int main(void) {
  td_device *dev = tst_device();
  /* the same backend without the op: the model recomputes the rows before */
  td_device_ops no_rows_ops = *dev->ops;
  no_rows_ops.attention_forward_rows = NULL;
  td_device no_rows = *dev;
  no_rows.ops = &no_rows_ops;
  for (int dt = 0; dt < 2; dt++)
    for (int tanh_gelu = 0; tanh_gelu < 2; tanh_gelu++) {
      td_dtype cd = dt ? TD_BF16 : TD_F32;
      check_model(dev, cd, tanh_gelu, dev->ops->name);
      if (dev->ops->attention_forward_rows) check_model(&no_rows, cd, tanh_gelu, "no rows op");
    }
  return tst_finish();
}
