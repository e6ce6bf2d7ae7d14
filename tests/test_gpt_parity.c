/* Parity with PyTorch: tests/parity/gpt2_tiny_ref.safetensors holds the weights,
 * a batch, and a plain PyTorch GPT-2's float64 loss, every parameter gradient and
 * the losses after 3 AdamW steps (tests/parity/make_gpt2_reference.py). The fp32
 * model must agree within 1e-5 relative. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/safetensors.h"
#include "check.h"
#include "model/gpt.h"

#define TOL 1e-5

/* The reference file beside this source (CMake compiles with absolute paths). */
static void ref_path(char *buf, size_t n) {
  const char *f = __FILE__, *slash = strrchr(f, '/');
  if (slash)
    snprintf(buf, n, "%.*s/parity/gpt2_tiny_ref.safetensors", (int)(slash - f), f);
  else
    snprintf(buf, n, "parity/gpt2_tiny_ref.safetensors");
}

static double meta_num(const td_safetensors *st, const char *key) {
  const char *v = td_safetensors_meta(st, key);
  if (!v) {
    fprintf(stderr, "reference file has no metadata %s\n", key);
    exit(1);
  }
  return strtod(v, NULL);
}

static const td_st_tensor *need(const td_safetensors *st, const char *name, td_dtype dt,
                                int64_t numel) {
  const td_st_tensor *t = td_safetensors_find(st, name);
  if (!t || t->dtype != dt || td_st_numel(t) != numel) {
    fprintf(stderr, "reference tensor %s missing or not %lld elements of %s\n", name,
            (long long)numel, td_dtype_name(dt));
    exit(1);
  }
  return t;
}

static td_gpt_config config_from(const td_safetensors *st) {
  td_gpt_config c;
  memset(&c, 0, sizeof c);
  c.num_layers = (int64_t)meta_num(st, "num_layers");
  c.hidden = (int64_t)meta_num(st, "hidden");
  c.heads = (int64_t)meta_num(st, "heads");
  c.ffn_hidden = (int64_t)meta_num(st, "ffn_hidden");
  c.seq_len = (int64_t)meta_num(st, "seq_len");
  c.max_positions = (int64_t)meta_num(st, "max_positions");
  c.vocab_size = (int64_t)meta_num(st, "vocab_size");
  c.layernorm_eps = (float)meta_num(st, "layernorm_eps");
  c.init_std = 0.02f;
  return c;
}

/* Every model tensor from the file, by name and shape. */
static void load_weights(td_gpt *m, const td_safetensors *st) {
  td_device *d = tst_device();
  for (int i = 0; i < td_gpt_num_tensors(m); i++) {
    const td_gpt_tensor *t = td_gpt_tensor_at(m, i);
    const td_st_tensor *s = need(st, t->name, TD_F32, t->numel);
    d->ops->copy_h2d(d, td_gpt_params(m) + t->offset, s->data, (size_t)t->numel * sizeof(float));
  }
  td_gpt_cast_weights(m);
}

typedef struct {
  const int32_t *tokens, *targets;
  const float *mask;
} batch;

/* Masked mean loss; with grads: zeroed, then its gradient. */
static double loss_and_grad(td_gpt *m, const batch *b) {
  double msum;
  td_gpt_zero_grads(m);
  double sum = td_gpt_forward(m, b->tokens, b->targets, b->mask, 0, 1, &msum);
  td_gpt_backward(m, (float)(1.0 / msum));
  return sum / msum;
}

static void check_grads(td_gpt *m, const td_safetensors *st) {
  td_device *d = tst_device();
  for (int i = 0; i < td_gpt_num_tensors(m); i++) {
    const td_gpt_tensor *t = td_gpt_tensor_at(m, i);
    char name[TD_GPT_NAME_MAX + 8];
    snprintf(name, sizeof name, "grad.%s", t->name);
    const td_st_tensor *ref = need(st, name, TD_F32, t->numel);
    float *g = td_malloc((size_t)t->numel * sizeof(float));
    d->ops->copy_d2h(d, g, td_gpt_grads(m) + t->offset, (size_t)t->numel * sizeof(float));
    CHECK_REL(t->name, tst_rel_err_f(g, ref->data, t->numel), TOL);
    td_free(g);
  }
}

/* One AdamW step on every tensor, Megatron's no-decay rule (the view's flag). */
static void adamw_step(td_gpt *m, const td_safetensors *st, float *mom, float *var, int64_t step) {
  td_device *d = tst_device();
  float lr = (float)meta_num(st, "lr"), b1 = (float)meta_num(st, "beta1");
  float b2 = (float)meta_num(st, "beta2"), eps = (float)meta_num(st, "eps");
  float wd = (float)meta_num(st, "weight_decay");
  for (int i = 0; i < td_gpt_num_tensors(m); i++) {
    const td_gpt_tensor *t = td_gpt_tensor_at(m, i);
    int64_t o = t->offset;
    d->ops->adamw(d, td_gpt_params(m) + o, td_gpt_grads(m) + o, mom + o, var + o, t->numel, lr,
                  b1, b2, eps, t->weight_decay ? wd : 0.0f, 1.0f, step, NULL, TD_F32);
  }
  td_gpt_cast_weights(m);
}

int main(void) {
  char path[4096], err[512];
  ref_path(path, sizeof path);
  td_safetensors *st = td_safetensors_open(path, err, sizeof err);
  if (!st) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  td_device *d = tst_device();
  td_gpt_config c = config_from(st);
  const td_st_tensor *tok = td_safetensors_find(st, "tokens");
  if (!tok || tok->ndim != 2 || tok->shape[1] != c.seq_len) {
    fprintf(stderr, "reference tokens are not [batch, %lld]\n", (long long)c.seq_len);
    return 1;
  }
  int64_t mb = tok->shape[0], n = mb * c.seq_len;
  batch b = {need(st, "tokens", TD_I32, n)->data, need(st, "targets", TD_I32, n)->data,
             need(st, "loss_mask", TD_F32, n)->data};

  td_gpt_layout lay = td_gpt_layout_single(&c);
  td_gpt *m = td_gpt_create(d, &c, &lay, mb, TD_F32);
  load_weights(m, st);
  double loss = loss_and_grad(m, &b), want = meta_num(st, "loss");
  CHECK_REL("loss", fabs(loss - want) / want, TOL);
  check_grads(m, st);

  size_t bytes = (size_t)td_gpt_flat_numel(m) * sizeof(float);
  float *mom = d->ops->alloc(d, bytes), *var = d->ops->alloc(d, bytes);
  const char *steps = td_safetensors_meta(st, "step_losses");
  for (int64_t step = 1; step <= 3 && steps; step++) {
    adamw_step(m, st, mom, var, step);
    char *end;
    double ref = strtod(steps, &end);
    steps = *end == ',' ? end + 1 : end;
    loss = loss_and_grad(m, &b);
    CHECK(fabs(loss - ref) / ref < TOL, "loss after AdamW step %lld: %.7f vs %.7f (rel %.2g)",
          (long long)step, loss, ref, fabs(loss - ref) / ref);
  }
  d->ops->free(d, mom), d->ops->free(d, var);
  td_gpt_destroy(m);
  td_safetensors_close(st);
  return tst_finish();
}
