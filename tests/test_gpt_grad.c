/* The GPT model (src/model/gpt.h) on a tiny config: parameter views and the
 * init rule, loss at init, every parameter gradient against central finite
 * differences of a double-precision re-implementation of the loss, determinism
 * (repeat, 1 vs 2 threads), bf16 and fp16 against fp32, fp16's overflow to Inf
 * under a loss scale too large (what the loss scaler must see) and its underflow
 * under one too small, dropout (seeded, and its backward against finite
 * differences of the model itself), full activation recomputation, two
 * pipeline stages chained by hand against the unsplit model, and the output
 * layer run in chunks of tokens with its backward fused into the forward. */
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/rng.h"
#include "check.h"
#include "model/gpt.h"

#define MB 2
#define SEQ 7
#define NTOK (MB * SEQ)
#define VOCAB 37 /* before padding */

typedef struct {
  int32_t tokens[NTOK], targets[NTOK];
  float mask[NTOK];
} batch;

static td_gpt_config tiny_config(void) {
  td_gpt_config c;
  memset(&c, 0, sizeof c);
  c.num_layers = 2, c.hidden = 16, c.heads = 2, c.ffn_hidden = 40;
  c.seq_len = SEQ, c.max_positions = 9;
  c.vocab_size = td_gpt_padded_vocab(VOCAB, 8, 1);
  c.init_std = 0.02f, c.layernorm_eps = 1e-5f;
  return c;
}

static td_gpt *make(const td_gpt_config *c, td_dtype cd) {
  td_gpt_layout lay = td_gpt_layout_single(c);
  return td_gpt_create(tst_device(), c, &lay, MB, cd);
}

static batch random_batch(uint64_t stream) {
  batch b;
  for (int i = 0; i < NTOK; i++) {
    b.tokens[i] = (int32_t)(td_rng_u32(tst_seed(), stream, 3 * i) % VOCAB);
    b.targets[i] = (int32_t)(td_rng_u32(tst_seed(), stream, 3 * i + 1) % VOCAB);
    b.mask[i] = i % 5 == 3 ? 0.0f : 1.0f; /* some tokens do not count */
  }
  return b;
}

/* Parameters with more signal than the training init: every path matters. */
static void randomize(td_gpt *m, uint64_t stream) {
  td_device *d = tst_device();
  for (int i = 0; i < td_gpt_num_tensors(m); i++) {
    const td_gpt_tensor *t = td_gpt_tensor_at(m, i);
    float *h = td_malloc((size_t)t->numel * sizeof(float));
    int norm_w = strstr(t->name, "layernorm.weight") != NULL;
    float std = t->ndim == 1 ? 0.1f
                : strstr(t->name, "embeddings") ? 0.5f
                                                : 1.0f / sqrtf((float)t->shape[1]);
    tst_fill_normal(h, t->numel, stream * 1000 + (uint64_t)i, std);
    for (int64_t k = 0; norm_w && k < t->numel; k++) h[k] += 1.0f;
    d->ops->copy_h2d(d, td_gpt_params(m) + t->offset, h, (size_t)t->numel * sizeof(float));
    td_free(h);
  }
  td_gpt_cast_weights(m);
}

static double mean_loss(td_gpt *m, const batch *b, uint64_t seed, int training) {
  double msum, sum = td_gpt_forward(m, b->tokens, b->targets, b->mask, seed, training, &msum);
  return sum / msum;
}

/* Gradient of the masked mean loss times loss_scale, copied to host (flat layout). */
static double scaled_gradient(td_gpt *m, const batch *b, uint64_t seed, int training,
                              double loss_scale, float *g) {
  td_device *d = tst_device();
  td_gpt_zero_grads(m);
  double msum, sum = td_gpt_forward(m, b->tokens, b->targets, b->mask, seed, training, &msum);
  td_gpt_backward(m, (float)(loss_scale / msum));
  d->ops->copy_d2h(d, g, td_gpt_grads(m), (size_t)td_gpt_flat_numel(m) * sizeof(float));
  return sum / msum;
}

static double gradient(td_gpt *m, const batch *b, uint64_t seed, int training, float *g) {
  return scaled_gradient(m, b, seed, training, 1.0, g);
}

/* ------------------------------------------------ double reference forward */

typedef struct {
  const td_gpt *m;
  double *p; /* the parameters, flat, in double */
} ref_model;

static const double *rp(const ref_model *r, const char *fmt, ...) {
  char name[TD_GPT_NAME_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  const td_gpt_tensor *t = td_gpt_find_tensor(r->m, name);
  if (!t) {
    fprintf(stderr, "no tensor %s\n", name);
    abort();
  }
  return r->p + t->offset;
}

static void ref_layernorm(double *y, const double *x, const double *w, const double *b, int n,
                          int c, double eps) {
  for (int i = 0; i < n; i++) {
    double mean = 0, var = 0;
    for (int k = 0; k < c; k++) mean += x[i * c + k] / c;
    for (int k = 0; k < c; k++) var += (x[i * c + k] - mean) * (x[i * c + k] - mean) / c;
    for (int k = 0; k < c; k++)
      y[i * c + k] = (x[i * c + k] - mean) / sqrt(var + eps) * w[k] + b[k];
  }
}

/* y[n, out] = x[n, in] w[out, in]^T + b */
static void ref_linear(double *y, const double *x, const double *w, const double *b, int n, int in,
                       int out) {
  for (int i = 0; i < n; i++)
    for (int o = 0; o < out; o++) {
      double s = b ? b[o] : 0;
      for (int k = 0; k < in; k++) s += x[i * in + k] * w[o * in + k];
      y[i * out + o] = s;
    }
}

/* qkv per token [H, 3, D] -> out per token [H, D], causal */
static void ref_attention(double *out, const double *qkv, int heads, int hd) {
  int c = heads * hd;
  for (int b = 0; b < MB; b++)
    for (int h = 0; h < heads; h++)
      for (int i = 0; i < SEQ; i++) {
        const double *q = qkv + ((b * SEQ + i) * heads + h) * 3 * hd;
        double s[SEQ], mx = -INFINITY, z = 0;
        for (int j = 0; j <= i; j++) {
          const double *k = qkv + ((b * SEQ + j) * heads + h) * 3 * hd + hd;
          s[j] = 0;
          for (int e = 0; e < hd; e++) s[j] += q[e] * k[e] / sqrt((double)hd);
          if (s[j] > mx) mx = s[j];
        }
        for (int j = 0; j <= i; j++) z += s[j] = exp(s[j] - mx);
        for (int e = 0; e < hd; e++) {
          double o = 0;
          for (int j = 0; j <= i; j++)
            o += s[j] / z * qkv[((b * SEQ + j) * heads + h) * 3 * hd + 2 * hd + e];
          out[(b * SEQ + i) * c + h * hd + e] = o;
        }
      }
}

static double ref_gelu(double x, int tanh_form) {
  if (tanh_form) return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1 + erf(x / sqrt(2.0)));
}

static double ref_mean_loss(const ref_model *r, const batch *bt) {
  const td_gpt_config *c = td_gpt_get_config(r->m);
  int C = (int)c->hidden, F = (int)c->ffn_hidden, V = (int)c->vocab_size, H = (int)c->heads;
  double eps = c->layernorm_eps;
  double *x = malloc(sizeof(double) * NTOK * C), *h = malloc(sizeof(double) * NTOK * C);
  double *qkv = malloc(sizeof(double) * NTOK * 3 * C), *att = malloc(sizeof(double) * NTOK * C);
  double *f1 = malloc(sizeof(double) * NTOK * F), *logits = malloc(sizeof(double) * NTOK * V);
  const double *wte = rp(r, "embedding.word_embeddings.weight");
  const double *wpe = rp(r, "embedding.position_embeddings.weight");
  for (int i = 0; i < NTOK; i++)
    for (int k = 0; k < C; k++) x[i * C + k] = wte[bt->tokens[i] * C + k] + wpe[i % SEQ * C + k];
  for (int l = 0; l < c->num_layers; l++) {
#define L(s) rp(r, "decoder.layers.%d." s, l)
    ref_layernorm(h, x, L("input_layernorm.weight"), L("input_layernorm.bias"), NTOK, C, eps);
    ref_linear(qkv, h, L("self_attention.linear_qkv.weight"), L("self_attention.linear_qkv.bias"),
               NTOK, C, 3 * C);
    ref_attention(att, qkv, H, C / H);
    ref_linear(h, att, L("self_attention.linear_proj.weight"), L("self_attention.linear_proj.bias"),
               NTOK, C, C);
    for (int i = 0; i < NTOK * C; i++) x[i] += h[i];
    ref_layernorm(h, x, L("pre_mlp_layernorm.weight"), L("pre_mlp_layernorm.bias"), NTOK, C, eps);
    ref_linear(f1, h, L("mlp.linear_fc1.weight"), L("mlp.linear_fc1.bias"), NTOK, C, F);
    for (int i = 0; i < NTOK * F; i++) f1[i] = ref_gelu(f1[i], c->openai_gelu);
    ref_linear(h, f1, L("mlp.linear_fc2.weight"), L("mlp.linear_fc2.bias"), NTOK, F, C);
    for (int i = 0; i < NTOK * C; i++) x[i] += h[i];
#undef L
  }
  ref_layernorm(h, x, rp(r, "decoder.final_layernorm.weight"),
                rp(r, "decoder.final_layernorm.bias"), NTOK, C, eps);
  ref_linear(logits, h, c->untie_embeddings ? rp(r, "output_layer.weight") : wte, NULL, NTOK, C, V);
  double sum = 0, msum = 0;
  for (int i = 0; i < NTOK; i++) {
    double mx = -INFINITY, z = 0;
    for (int v = 0; v < V; v++) mx = fmax(mx, logits[i * V + v]);
    for (int v = 0; v < V; v++) z += exp(logits[i * V + v] - mx);
    sum += bt->mask[i] * (mx + log(z) - logits[i * V + bt->targets[i]]);
    msum += bt->mask[i];
  }
  free(x), free(h), free(qkv), free(att), free(f1), free(logits);
  return sum / msum;
}

/* ------------------------------------------------------------------ tests */

static void test_padded_vocab(void) {
  CHECK(td_gpt_padded_vocab(50257, 128, 1) == 50304, "GPT-2 vocab pads to 50304");
  CHECK(td_gpt_padded_vocab(50257, 128, 2) == 50432, "with tp 2 to a multiple of 256: 50432");
  CHECK(td_gpt_padded_vocab(256, 128, 1) == 256, "a multiple stays");
  CHECK(td_gpt_padded_vocab(VOCAB, 8, 1) == 40, "37 pads to 40 by 8");
}

static void test_views(const td_gpt *m, const td_gpt_config *c) {
  int64_t C = c->hidden, F = c->ffn_hidden;
  int64_t layer = 4 * C + 3 * C * C + 3 * C + C * C + C + F * C + F + C * F + C;
  int64_t want = c->vocab_size * C + c->max_positions * C + c->num_layers * layer + 2 * C;
  CHECK(td_gpt_num_params(m) == want, "parameter count %lld (want %lld)",
        (long long)td_gpt_num_params(m), (long long)want);
  CHECK(td_gpt_num_tensors(m) == 2 + 12 * (int)c->num_layers + 2, "tensor count %d",
        td_gpt_num_tensors(m));
  const td_gpt_tensor *qkv =
      td_gpt_find_tensor(m, "decoder.layers.1.self_attention.linear_qkv.weight");
  CHECK(qkv && qkv->shape[0] == 3 * C && qkv->shape[1] == C && qkv->weight_decay,
        "qkv weight [3h, h], decayed");
  const td_gpt_tensor *fc2 = td_gpt_find_tensor(m, "decoder.layers.0.mlp.linear_fc2.weight");
  CHECK(fc2 && fc2->shape[0] == C && fc2->shape[1] == F &&
            fabsf(fc2->init_std - c->init_std / sqrtf(2.0f * (float)c->num_layers)) < 1e-9f,
        "fc2 weight [h, ffn], std init_std / sqrt(2L)");
  const td_gpt_tensor *lnb = td_gpt_find_tensor(m, "decoder.final_layernorm.bias");
  CHECK(lnb && !lnb->weight_decay && lnb->init_std == 0 && lnb->init_value == 0,
        "final layernorm bias: no decay, zero");
  CHECK(td_gpt_find_tensor(m, "output_layer.weight") == NULL, "tied: no output_layer.weight");
  int aligned = 1, in_order = 1;
  for (int i = 0; i < td_gpt_num_tensors(m); i++) {
    const td_gpt_tensor *t = td_gpt_tensor_at(m, i);
    aligned &= t->offset % 16 == 0;
    const td_gpt_tensor *prev = i ? td_gpt_tensor_at(m, i - 1) : NULL;
    if (prev) in_order &= t->offset >= prev->offset + prev->numel;
  }
  CHECK(aligned && in_order, "views are 64-byte aligned and disjoint");
  td_gpt_memory mem = td_gpt_memory_report(m);
  CHECK(mem.params == (size_t)td_gpt_flat_numel(m) * 4 && mem.grads == mem.params &&
            mem.weights_bf16 == 0 && mem.activations > 0,
        "memory report: params %zu, grads %zu, activations %zu", mem.params, mem.grads,
        mem.activations);
}

/* Every tensor equals its global draw (tp = 1: the slice is the whole tensor). */
static void test_init(td_gpt *m, uint64_t seed) {
  td_device *d = tst_device();
  int ok = 1;
  for (int i = 0; i < td_gpt_num_tensors(m); i++) {
    const td_gpt_tensor *t = td_gpt_tensor_at(m, i);
    int64_t n = t->shape[0] * t->shape[1];
    float *want = td_malloc((size_t)n * sizeof(float)), *got = td_malloc((size_t)n * sizeof(float));
    if (t->init_std > 0)
      td_rng_fill_normal(want, n, seed, td_gpt_name_stream(t->name), 0, 0.0f, t->init_std);
    else
      for (int64_t k = 0; k < n; k++) want[k] = t->init_value;
    d->ops->copy_d2h(d, got, td_gpt_params(m) + t->offset, (size_t)n * sizeof(float));
    ok &= t->numel == n && memcmp(want, got, (size_t)n * sizeof(float)) == 0;
    td_free(want), td_free(got);
  }
  CHECK(ok, "every parameter is its global-shape draw from (seed, name stream, index)");
}

/* At init the logits are near 0, so the loss is near ln(vocab): averaged over 16
 * random batches (~180 tokens), as one batch's dozen tokens can stray 2%. */
static void test_init_loss(td_gpt *m) {
  double loss = 0, want = log((double)td_gpt_get_config(m)->vocab_size);
  for (uint64_t i = 0; i < 16; i++) {
    batch b = random_batch(100 + i);
    loss += mean_loss(m, &b, 0, 1) / 16;
  }
  CHECK(fabs(loss - want) < 0.02 * want, "loss at init %.4f ~ ln(vocab) %.4f", loss, want);
}

/* Analytic fp32 gradient vs central differences of the double reference at a few
 * random coordinates of every tensor. */
static void test_gradients(const td_gpt_config *c, const char *what) {
  td_gpt *m = make(c, TD_F32);
  randomize(m, 2);
  batch b = random_batch(3);
  int64_t nflat = td_gpt_flat_numel(m);
  float *g = td_malloc((size_t)nflat * sizeof(float));
  float *pf = td_malloc((size_t)nflat * sizeof(float));
  double loss = gradient(m, &b, 0, 1, g);
  tst_device()->ops->copy_d2h(tst_device(), pf, td_gpt_params(m), (size_t)nflat * sizeof(float));
  ref_model r = {m, td_malloc((size_t)nflat * sizeof(double))};
  for (int64_t i = 0; i < nflat; i++) r.p[i] = pf[i];
  double ref_loss = ref_mean_loss(&r, &b);
  CHECK(fabs(loss - ref_loss) < 1e-5 * ref_loss, "%s: loss %.7f vs double %.7f", what, loss,
        ref_loss);
  double worst = 0;
  const char *worst_name = "";
  for (int i = 0; i < td_gpt_num_tensors(m); i++) {
    const td_gpt_tensor *t = td_gpt_tensor_at(m, i);
    double scale = 0, err = 0;
    for (int64_t k = 0; k < t->numel; k++) scale = fmax(scale, fabs(g[t->offset + k]));
    for (int s = 0; s < 4; s++) {
      int64_t k = t->offset + td_rng_u32(tst_seed(), 77, (uint64_t)(i * 4 + s)) % t->numel;
      double p0 = r.p[k], h = 1e-5;
      r.p[k] = p0 + h;
      double up = ref_mean_loss(&r, &b);
      r.p[k] = p0 - h;
      double down = ref_mean_loss(&r, &b);
      r.p[k] = p0;
      err = fmax(err, fabs(g[k] - (up - down) / (2 * h)) / fmax(scale, 1e-30));
    }
    if (err > worst) worst = err, worst_name = t->name;
  }
  CHECK(worst < 1e-4, "%s: gradients vs double finite differences, worst rel err %.3g (%s)", what,
        worst, worst_name);
  td_free(r.p), td_free(g), td_free(pf);
  td_gpt_destroy(m);
}

static void test_determinism(td_dtype cd) {
  td_gpt_config c = tiny_config();
  td_gpt *m = make(&c, cd);
  randomize(m, 4);
  batch b = random_batch(5);
  size_t bytes = (size_t)td_gpt_flat_numel(m) * sizeof(float);
  float *g1 = td_malloc(bytes), *g2 = td_malloc(bytes), *g3 = td_malloc(bytes);
  int threads = omp_get_max_threads();
  gradient(m, &b, 0, 1, g1);
  gradient(m, &b, 0, 1, g2);
  omp_set_num_threads(threads == 1 ? 2 : 1);
  gradient(m, &b, 0, 1, g3);
  omp_set_num_threads(threads);
  CHECK(!memcmp(g1, g2, bytes), "%s gradient bitwise identical on a second run",
        td_dtype_name(cd));
  CHECK(!memcmp(g1, g3, bytes), "%s gradient bitwise identical with %d and %d threads",
        td_dtype_name(cd), threads, threads == 1 ? 2 : 1);
  td_free(g1), td_free(g2), td_free(g3);
  td_gpt_destroy(m);
}

static void test_bf16(void) {
  td_gpt_config c = tiny_config();
  td_gpt *m32 = make(&c, TD_F32), *m16 = make(&c, TD_BF16);
  randomize(m32, 6);
  randomize(m16, 6);
  batch b = random_batch(7);
  size_t bytes = (size_t)td_gpt_flat_numel(m32) * sizeof(float);
  float *g32 = td_malloc(bytes), *g16 = td_malloc(bytes);
  double l32 = gradient(m32, &b, 0, 1, g32), l16 = gradient(m16, &b, 0, 1, g16);
  CHECK(fabs(l16 - l32) < 1e-2 * l32, "bf16 loss %.5f vs fp32 %.5f", l16, l32);
  double err = tst_rel_err_f(g16, g32, td_gpt_flat_numel(m32));
  CHECK(err < 5e-2, "bf16 gradient vs fp32: normwise rel err %.3g", err);
  td_gpt_memory mem = td_gpt_memory_report(m16);
  CHECK(mem.weights_bf16 == (size_t)td_gpt_flat_numel(m16) * 2, "bf16 weight copy %zu bytes",
        mem.weights_bf16);
  td_free(g32), td_free(g16);
  td_gpt_destroy(m32), td_gpt_destroy(m16);
}

/* fp16 against fp32: the loss, and the gradient under a loss scale (unscaled
 * afterwards, as the optimizer does), within fp16's precision. */
static void test_fp16_matches_fp32(void) {
  td_gpt_config c = tiny_config();
  td_gpt *m32 = make(&c, TD_F32), *m16 = make(&c, TD_F16);
  randomize(m32, 6);
  randomize(m16, 6);
  batch b = random_batch(7);
  int64_t n = td_gpt_flat_numel(m32);
  float *g32 = td_malloc((size_t)n * sizeof(float)), *g16 = td_malloc((size_t)n * sizeof(float));
  double scale = 1024.0;
  double l32 = gradient(m32, &b, 0, 1, g32), l16 = scaled_gradient(m16, &b, 0, 1, scale, g16);
  CHECK(fabs(l16 - l32) < 1e-2 * l32 && l16 != l32, "fp16 loss %.6f vs fp32 %.6f (close, rounded)",
        l16, l32);
  for (int64_t i = 0; i < n; i++) g16[i] = (float)(g16[i] / scale);
  double err = tst_rel_err_f(g16, g32, n);
  CHECK(err < 1e-2, "fp16 gradient (loss scale %g, unscaled) vs fp32: normwise rel err %.3g", scale,
        err);
  td_gpt_memory mem = td_gpt_memory_report(m16);
  CHECK(mem.weights_bf16 == (size_t)n * 4, "fp16 weight copy (fp16 values in fp32) %zu bytes",
        mem.weights_bf16);
  td_free(g32), td_free(g16);
  td_gpt_destroy(m32), td_gpt_destroy(m16);
}

/* Sum of squares of the flat gradient, as the trainer's overflow check takes it. */
static double grad_sumsq(td_gpt *m) {
  td_device *d = tst_device();
  return td_device_reduce_now(d, d->ops->sum_squares, td_gpt_grads(m), td_gpt_flat_numel(m));
}

/* A loss scale whose dlogits exceed fp16's 65504 makes the fp16 gradients Inf/NaN
 * (the step the loss scaler skips) while fp32 stays finite; a scale so small that
 * every dY is below fp16's smallest subnormal flushes the matmul weight gradients
 * to zero where fp32 keeps them (what loss scaling exists to prevent). */
static void test_fp16_overflow_underflow(void) {
  td_gpt_config c = tiny_config();
  td_gpt *m32 = make(&c, TD_F32), *m16 = make(&c, TD_F16);
  randomize(m32, 10);
  randomize(m16, 10);
  batch b = random_batch(11);
  int64_t n = td_gpt_flat_numel(m16);
  float *g = td_malloc((size_t)n * sizeof(float));
  double huge = 4294967296.0; /* Megatron's --initial-loss-scale 2^32 */
  scaled_gradient(m16, &b, 0, 1, huge, g);
  double s16 = grad_sumsq(m16);
  scaled_gradient(m32, &b, 0, 1, huge, g);
  double s32 = grad_sumsq(m32);
  CHECK(!isfinite(s16) && isfinite(s32),
        "loss scale 2^32: fp16 gradient sum of squares %g (overflow), fp32 %g", s16, s32);
  scaled_gradient(m16, &b, 0, 1, 1024.0, g);
  CHECK(isfinite(grad_sumsq(m16)), "loss scale 1024: fp16 gradients finite");

  const char *w = "decoder.layers.0.mlp.linear_fc1.weight";
  const td_gpt_tensor *t = td_gpt_find_tensor(m16, w);
  double tiny = 0x1p-40, a16 = 0, a32 = 0;
  scaled_gradient(m16, &b, 0, 1, tiny, g);
  for (int64_t k = 0; k < t->numel; k++) a16 += fabs(g[t->offset + k]);
  scaled_gradient(m32, &b, 0, 1, tiny, g);
  for (int64_t k = 0; k < t->numel; k++) a32 += fabs(g[t->offset + k]);
  CHECK(a16 == 0 && a32 > 0, "loss scale 2^-40: fp16 %s gradient underflows to 0 (fp32: %g)", w,
        a32);
  td_free(g);
  td_gpt_destroy(m32), td_gpt_destroy(m16);
}

/* Forward activations beyond 65504 are Inf in fp16 (the final LayerNorm output
 * here feeds the head matmul), finite in fp32. */
static void test_fp16_forward_range(void) {
  td_gpt_config c = tiny_config();
  td_gpt *m32 = make(&c, TD_F32), *m16 = make(&c, TD_F16);
  td_device *d = tst_device();
  td_gpt *both[2] = {m32, m16};
  for (int i = 0; i < 2; i++) {
    randomize(both[i], 12);
    const td_gpt_tensor *t = td_gpt_find_tensor(both[i], "decoder.final_layernorm.weight");
    d->ops->fill(d, td_gpt_params(both[i]) + t->offset, TD_F32, t->numel, 70000.0f);
    td_gpt_cast_weights(both[i]);
  }
  batch b = random_batch(13);
  double l32 = mean_loss(m32, &b, 0, 0), l16 = mean_loss(m16, &b, 0, 0);
  CHECK(isfinite(l32) && !isfinite(l16),
        "LayerNorm weight 70000: fp32 loss %g, fp16 loss %g (activation overflow)", l32, l16);
  td_gpt_destroy(m32), td_gpt_destroy(m16);
}

/* Dropout: reproducible per seed, off in eval, and its backward applies the
 * forward's masks (float central differences of the model itself). */
static void test_dropout(void) {
  td_gpt_config c = tiny_config();
  c.hidden_dropout = 0.2f, c.attention_dropout = 0.2f;
  td_gpt_config pc = tiny_config();
  td_gpt *m = make(&c, TD_F32), *plain = make(&pc, TD_F32);
  randomize(m, 8);
  randomize(plain, 8);
  batch b = random_batch(9);
  uint64_t s1 = td_gpt_dropout_seed(1234, 5, 0), s2 = td_gpt_dropout_seed(1234, 5, 1);
  double a = mean_loss(m, &b, s1, 1), a2 = mean_loss(m, &b, s1, 1), other = mean_loss(m, &b, s2, 1);
  CHECK(a == a2, "same dropout seed, same loss (%.6f)", a);
  CHECK(a != other, "another seed, another loss (%.6f vs %.6f)", a, other);
  CHECK(mean_loss(m, &b, s1, 0) == mean_loss(plain, &b, s1, 1), "training = 0: no dropout");

  size_t bytes = (size_t)td_gpt_flat_numel(m) * sizeof(float);
  float *g = td_malloc(bytes), *p = td_malloc(bytes);
  gradient(m, &b, s1, 1, g);
  td_device *d = tst_device();
  d->ops->copy_d2h(d, p, td_gpt_params(m), bytes);
  const char *names[] = {"embedding.word_embeddings.weight", "embedding.position_embeddings.weight",
                         "decoder.layers.0.self_attention.linear_qkv.weight",
                         "decoder.layers.1.mlp.linear_fc2.bias"};
  double worst = 0;
  for (int i = 0; i < 4; i++) {
    const td_gpt_tensor *t = td_gpt_find_tensor(m, names[i]);
    double scale = 0;
    for (int64_t k = 0; k < t->numel; k++) scale = fmax(scale, fabs(g[t->offset + k]));
    for (int s = 0; s < 3; s++) {
      int64_t k = t->offset + td_rng_u32(tst_seed(), 99, (uint64_t)(i * 3 + s)) % t->numel;
      float p0 = p[k], h = 1e-2f, v;
      v = p0 + h, d->ops->copy_h2d(d, td_gpt_params(m) + k, &v, 4);
      double up = mean_loss(m, &b, s1, 1);
      v = p0 - h, d->ops->copy_h2d(d, td_gpt_params(m) + k, &v, 4);
      double down = mean_loss(m, &b, s1, 1);
      d->ops->copy_h2d(d, td_gpt_params(m) + k, &p0, 4);
      worst = fmax(worst, fabs(g[k] - (up - down) / (2.0 * h)) / scale);
    }
  }
  CHECK(worst < 2e-3, "dropout backward vs finite differences: worst rel err %.3g", worst);
  td_free(g), td_free(p);
  td_gpt_destroy(m), td_gpt_destroy(plain);
}

/* Full recomputation reruns a chunk's forward in backward: with dropout on, the
 * loss and every gradient are bitwise those of the run that keeps everything,
 * for uniform chunks (one that does not divide the layers) and block, in fp32,
 * bf16 and fp16; the activation arena shrinks. */
static void test_recompute(td_dtype cd) {
  td_gpt_config c = tiny_config();
  c.num_layers = 5, c.hidden_dropout = 0.2f, c.attention_dropout = 0.2f;
  td_gpt *keep = make(&c, cd);
  randomize(keep, 10);
  batch b = random_batch(11);
  uint64_t seed = td_gpt_dropout_seed(99, 3, 1);
  size_t bytes = (size_t)td_gpt_flat_numel(keep) * sizeof(float);
  float *g0 = td_malloc(bytes), *g = td_malloc(bytes), *p = td_malloc(bytes);
  double l0 = gradient(keep, &b, seed, 1, g0);
  td_device *d = tst_device();
  d->ops->copy_d2h(d, p, td_gpt_params(keep), bytes);
  size_t arena0 = td_gpt_memory_report(keep).activations;
  static const struct { td_recompute how; int64_t n; const char *name; } cases[] = {
      {TD_RECOMPUTE_UNIFORM, 1, "uniform 1"}, {TD_RECOMPUTE_UNIFORM, 2, "uniform 2 (chunks 2+2+1)"},
      {TD_RECOMPUTE_UNIFORM, 5, "uniform 5"}, {TD_RECOMPUTE_BLOCK, 3, "block 3"}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    td_gpt_layout lay = td_gpt_layout_single(&c);
    lay.recompute = cases[i].how, lay.recompute_num_layers = cases[i].n;
    td_gpt *m = td_gpt_create(d, &c, &lay, MB, cd);
    d->ops->copy_h2d(d, td_gpt_params(m), p, bytes);
    td_gpt_cast_weights(m);
    double l = gradient(m, &b, seed, 1, g);
    l = gradient(m, &b, seed, 1, g); /* twice: the slots are reused */
    size_t arena = td_gpt_memory_report(m).activations;
    CHECK(l == l0 && !memcmp(g, g0, bytes),
          "%s recompute %s: loss and gradients bitwise equal to keeping all activations",
          td_dtype_name(cd), cases[i].name);
    CHECK(cases[i].n == c.num_layers ? arena <= arena0 : arena < arena0,
          "%s recompute %s: activations %zu bytes (all kept: %zu)", td_dtype_name(cd),
          cases[i].name, arena, arena0);
    td_gpt_destroy(m);
  }
  td_free(g0), td_free(g), td_free(p);
  td_gpt_destroy(keep);
}

/* Pipeline stages: layers [0, 2) with the embedding and [2, 4) with the head,
 * chained by hand (the first's output is the second's input, the second's input
 * gradient the first's output gradient), give the unsplit model's loss and every
 * gradient bit for bit, dropout on (its streams are per global layer); the tied
 * word embedding's gradient is the sum of the first stage's and the last stage's
 * copy (added in another order: within 1e-6). */
static void copy_by_name(td_gpt *dst, td_gpt *src, int grads, float *host) {
  td_device *d = tst_device();
  for (int i = 0; i < td_gpt_num_tensors(dst); i++) {
    const td_gpt_tensor *t = td_gpt_tensor_at(dst, i), *u = td_gpt_find_tensor(src, t->name);
    size_t bytes = (size_t)t->numel * sizeof(float);
    d->ops->copy_d2h(d, host, (grads ? td_gpt_grads(src) : td_gpt_params(src)) + u->offset, bytes);
    d->ops->copy_h2d(d, (grads ? td_gpt_grads(dst) : td_gpt_params(dst)) + t->offset, host, bytes);
  }
}

static double tensor_diff(td_gpt *a, td_gpt *full, const char *name, const float *extra,
                          float *ha, float *hf) {
  td_device *d = tst_device();
  const td_gpt_tensor *t = td_gpt_find_tensor(a, name), *u = td_gpt_find_tensor(full, name);
  d->ops->copy_d2h(d, ha, td_gpt_grads(a) + t->offset, (size_t)t->numel * sizeof(float));
  d->ops->copy_d2h(d, hf, td_gpt_grads(full) + u->offset, (size_t)u->numel * sizeof(float));
  double worst = 0, scale = 0;
  for (int64_t k = 0; k < t->numel; k++) {
    double got = (double)ha[k] + (extra ? extra[k] : 0.0);
    worst = fmax(worst, fabs(got - hf[k])), scale = fmax(scale, fabs(hf[k]));
  }
  return scale > 0 ? worst / scale : worst;
}

static void test_pipeline_stages(td_dtype cd, int untie) {
  td_gpt_config c = tiny_config();
  c.num_layers = 4, c.hidden_dropout = 0.2f, c.attention_dropout = 0.2f, c.untie_embeddings = untie;
  td_device *d = tst_device();
  td_gpt *full = make(&c, cd);
  randomize(full, 12);
  td_gpt_layout la = td_gpt_layout_single(&c), lb = la;
  la.layer_end = 2, la.has_head = 0;
  lb.layer_begin = 2, lb.has_embedding = 0;
  td_gpt *a = td_gpt_create(d, &c, &la, MB, cd), *b = td_gpt_create(d, &c, &lb, MB, cd);
  float *host = td_malloc((size_t)td_gpt_flat_numel(full) * sizeof(float));
  float *h2 = td_malloc((size_t)td_gpt_flat_numel(full) * sizeof(float));
  copy_by_name(a, full, 0, host), copy_by_name(b, full, 0, host);
  td_gpt_cast_weights(a), td_gpt_cast_weights(b);
  batch bt = random_batch(13);
  uint64_t seed = td_gpt_dropout_seed(5, 2, 1);
  double ms, msum;
  td_gpt_zero_grads(full), td_gpt_zero_grads(a), td_gpt_zero_grads(b);
  double lfull = td_gpt_forward(full, bt.tokens, bt.targets, bt.mask, seed, 1, &msum);
  td_gpt_backward(full, (float)(1.0 / msum));
  size_t act = (size_t)NTOK * (size_t)c.hidden * sizeof(float);
  double la0 = td_gpt_forward(a, bt.tokens, bt.targets, bt.mask, seed, 1, &ms);
  d->ops->copy_d2d(d, td_gpt_stage_input(b), td_gpt_stage_output(a), act);
  double lb0 = td_gpt_forward(b, bt.tokens, bt.targets, bt.mask, seed, 1, &ms);
  td_gpt_backward(b, (float)(1.0 / msum));
  d->ops->copy_d2d(d, td_gpt_stage_output_grad(a), td_gpt_stage_input_grad(b), act);
  td_gpt_backward(a, 0.0f);
  CHECK(la0 == 0 && lb0 == lfull, "%s two stages: the last stage's loss %.9g == unsplit %.9g",
        td_dtype_name(cd), lb0, lfull);
  double worst = 0;
  int bitwise = 1;
  for (int s = 0; s < 2; s++) {
    td_gpt *st = s ? b : a;
    for (int i = 0; i < td_gpt_num_tensors(st); i++) {
      const char *name = td_gpt_tensor_at(st, i)->name;
      if (!untie && !strcmp(name, "embedding.word_embeddings.weight")) continue;
      double e = tensor_diff(st, full, name, NULL, host, h2);
      bitwise &= e == 0, worst = fmax(worst, e);
    }
  }
  CHECK(bitwise, "%s two stages%s: every gradient%s bitwise equal (worst %.2g)", td_dtype_name(cd),
        untie ? ", untied" : "", untie ? "" : " but the tied embedding's", worst);
  if (untie) {
    td_free(host), td_free(h2);
    td_gpt_destroy(a), td_gpt_destroy(b), td_gpt_destroy(full);
    return;
  }
  const td_gpt_tensor *tb = td_gpt_find_tensor(b, "embedding.word_embeddings.weight");
  float *head = td_malloc((size_t)tb->numel * sizeof(float));
  d->ops->copy_d2h(d, head, td_gpt_grads(b) + tb->offset, (size_t)tb->numel * sizeof(float));
  double e = tensor_diff(a, full, "embedding.word_embeddings.weight", head, host, h2);
  CHECK(e < 1e-6, "%s tied embedding: first stage's + last stage's copy's gradient == unsplit "
        "(rel err %.2g)", td_dtype_name(cd), e);
  td_free(head), td_free(host), td_free(h2);
  td_gpt_destroy(a), td_gpt_destroy(b), td_gpt_destroy(full);
}

/* A replica (another activation arena on the same parameters and gradients)
 * keeps a second micro-batch in flight: forward on the model, forward on the
 * replica, backward on the replica, backward on the model accumulates what two
 * forward-backward pairs on the model do (added in the other order: 1e-6). */
static void test_replica(void) {
  td_gpt_config c = tiny_config();
  c.hidden_dropout = 0.1f;
  td_gpt *m = make(&c, TD_F32);
  randomize(m, 14);
  td_gpt *r = td_gpt_create_replica(m);
  batch b1 = random_batch(15), b2 = random_batch(16);
  size_t bytes = (size_t)td_gpt_flat_numel(m) * sizeof(float);
  float *want = td_malloc(bytes), *got = td_malloc(bytes);
  td_device *d = tst_device();
  double ms;
  td_gpt_zero_grads(m);
  td_gpt_forward(m, b1.tokens, b1.targets, b1.mask, 1, 1, &ms), td_gpt_backward(m, 0.5f);
  td_gpt_forward(m, b2.tokens, b2.targets, b2.mask, 2, 1, &ms), td_gpt_backward(m, 0.25f);
  d->ops->copy_d2h(d, want, td_gpt_grads(m), bytes);
  td_gpt_zero_grads(m);
  double l1 = td_gpt_forward(m, b1.tokens, b1.targets, b1.mask, 1, 1, &ms);
  double l2 = td_gpt_forward(r, b2.tokens, b2.targets, b2.mask, 2, 1, &ms);
  td_gpt_backward(r, 0.25f), td_gpt_backward(m, 0.5f);
  d->ops->copy_d2h(d, got, td_gpt_grads(m), bytes);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < bytes / sizeof(float); i++)
    worst = fmax(worst, fabs((double)got[i] - want[i])), scale = fmax(scale, fabs(want[i]));
  CHECK(l1 != l2 && worst <= 1e-6 * scale,
        "replica: two micro-batches in flight accumulate the sequential gradients (rel err %.2g)",
        worst / scale);
  td_free(want), td_free(got);
  td_gpt_destroy(r), td_gpt_destroy(m);
}

/* One training micro-batch on a model with logits chunks of `chunk` tokens (0:
 * none) through td_gpt_forward_train_to; the flat gradients into g. */
static double fused_gradient(const td_gpt_config *c, td_dtype cd, int64_t chunk, const batch *b,
                             float *g, td_gpt_memory *mem) {
  td_gpt_layout lay = td_gpt_layout_single(c);
  lay.logits_chunk = chunk;
  td_gpt *m = td_gpt_create(tst_device(), c, &lay, MB, cd);
  randomize(m, 17);
  td_device *d = tst_device();
  double msum = 0, sum, *loss = d->ops->alloc(d, sizeof(double));
  for (int i = 0; i < NTOK; i++) msum += b->mask[i];
  td_gpt_zero_grads(m);
  td_gpt_forward_train_to(m, b->tokens, b->targets, b->mask, 9, (float)(1.0 / msum), loss, NULL);
  d->ops->copy_d2h(d, &sum, loss, sizeof sum);
  d->ops->free(d, loss);
  td_gpt_backward(m, (float)(1.0 / msum));
  d->ops->copy_d2h(d, g, td_gpt_grads(m), (size_t)td_gpt_flat_numel(m) * sizeof(float));
  if (mem) *mem = td_gpt_memory_report(m);
  td_gpt_destroy(m);
  return sum / msum;
}

/* Logits chunks of 1, 3 and 5 tokens (14 tokens: a short last chunk) give the
 * loss and gradients of the whole-logits model (the output layer's weight
 * gradient summed chunk by chunk: fp32 rounding apart; with bf16 / fp16 logits,
 * a GEMM library that rounds a row differently at another row count (OpenBLAS
 * on a Zen 3) can move a logit or its gradient by one unit of their dtype, so
 * the gradients are held to that unit, 2^-8 or 2^-11), the fused path without
 * chunks gives td_gpt_forward + td_gpt_backward's bits, and the arena shrinks by
 * the logits of the tokens not in a chunk. Dropout on: the masks are counters. */
static void test_logits_chunks(td_dtype cd, int untie) {
  td_gpt_config c = tiny_config();
  c.hidden_dropout = 0.1f, c.attention_dropout = 0.1f, c.untie_embeddings = untie;
  td_gpt *m = make(&c, cd);
  randomize(m, 17);
  const int64_t n = td_gpt_flat_numel(m);
  float *want = td_malloc((size_t)n * sizeof(float)), *got = td_malloc((size_t)n * sizeof(float));
  batch b = random_batch(18);
  double lw = scaled_gradient(m, &b, 9, 1, 1.0, want);
  td_gpt_destroy(m);
  const char *what = untie ? "untied" : "tied";
  td_gpt_memory whole, part;
  double l0 = fused_gradient(&c, cd, 0, &b, got, &whole);
  CHECK(l0 == lw && !memcmp(got, want, (size_t)n * sizeof(float)),
        "%s %s: the head's backward fused into the forward gives the unfused loss and gradients "
        "bit for bit", td_dtype_name(cd), what);
  const int64_t chunks[] = {1, 3, 5};
  for (int k = 0; k < 3; k++) {
    double l = fused_gradient(&c, cd, chunks[k], &b, got, &part);
    double scale = 0, worst = 0;
    for (int64_t i = 0; i < n; i++)
      scale = fmax(scale, fabs(want[i])), worst = fmax(worst, fabs((double)got[i] - want[i]));
    const double unit = cd == TD_BF16 ? 0x1p-8 : cd == TD_F16 ? 0x1p-11 : 1e-5;
    CHECK(fabs(l - lw) <= 1e-6 * fabs(lw) && worst <= unit * scale,
          "%s %s: logits chunks of %lld tokens: loss %.9g vs %.9g, gradients rel err %.2g",
          td_dtype_name(cd), what, (long long)chunks[k], l, lw, worst / scale);
    /* the logits are in the matmul dtype, their gradient in place */
    int64_t V = c.vocab_size, gone = (NTOK - chunks[k]) * V * (cd == TD_BF16 ? 2 : 4);
    CHECK(part.activations + (size_t)gone <= whole.activations + 64 * 4,
          "%s logits chunk %lld: arena %zu bytes, %lld less than whole logits' %zu",
          td_dtype_name(cd), (long long)chunks[k], part.activations,
          (long long)(whole.activations - part.activations), whole.activations);
  }
  /* evaluation (no dropout, no backward) chunk by chunk */
  td_gpt_layout lay = td_gpt_layout_single(&c);
  lay.logits_chunk = 3;
  td_gpt *ch = td_gpt_create(tst_device(), &c, &lay, MB, cd), *wh = make(&c, cd);
  randomize(ch, 17), randomize(wh, 17);
  double e1 = mean_loss(ch, &b, 0, 0), e2 = mean_loss(wh, &b, 0, 0);
  CHECK(fabs(e1 - e2) <= 1e-6 * fabs(e2), "%s %s: evaluation loss in chunks of 3 %.9g == %.9g",
        td_dtype_name(cd), what, e1, e2);
  td_gpt_destroy(ch), td_gpt_destroy(wh);
  td_free(want), td_free(got);
}

int main(void) {
  test_padded_vocab();
  td_gpt_config c = tiny_config();
  td_gpt *m = make(&c, TD_F32);
  test_views(m, &c);
  td_gpt_init_params(m, 42);
  test_init(m, 42);
  test_init_loss(m);
  td_gpt_destroy(m);

  test_gradients(&c, "tied, erf GELU");
  td_gpt_config u = c;
  u.untie_embeddings = 1, u.openai_gelu = 1;
  test_gradients(&u, "untied, tanh GELU");
  test_determinism(TD_F32);
  test_determinism(TD_BF16);
  test_determinism(TD_F16);
  test_bf16();
  test_fp16_matches_fp32();
  test_fp16_overflow_underflow();
  test_fp16_forward_range();
  test_dropout();
  test_recompute(TD_F32);
  test_recompute(TD_BF16);
  test_recompute(TD_F16);
  test_pipeline_stages(TD_F32, 0);
  test_pipeline_stages(TD_BF16, 0);
  test_pipeline_stages(TD_F32, 1);
  test_replica();
  test_logits_chunks(TD_F32, 0);
  test_logits_chunks(TD_F32, 1);
  test_logits_chunks(TD_BF16, 0);
  test_logits_chunks(TD_F16, 0);
  return tst_finish();
}
