/* GPT forward and backward (gpt.h), each layer's forward and backward side by
 * side. Sizes as in gpt_impl.h: N = B*T tokens, C hidden, H heads, D head dim,
 * F ffn hidden, V vocabulary; cd the compute dtype (fp32, bf16 or fp16), md the
 * dtype matmul inputs are stored in (bf16 for bf16, else fp32).
 *
 * fp16 (TD_F16) is Megatron's fp16 on fp32 GEMMs: every matmul input, forward
 * (weights, LayerNorm and GELU outputs, qkv and attention output) and backward
 * (each matmul's dY, the attention's dout and dqkv), is rounded to fp16 precision
 * and range before the GEMM reads it, so a scaled gradient beyond 65504 becomes
 * Inf exactly where fp16 storage would make it Inf, and the trainer's loss scaler
 * sees the overflow. Accumulation, master weights, gradients and the residual
 * stream stay fp32. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/checked.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/mem.h"
#include "base/memory_limit.h"
#include "comm/comm.h"
#include "comm/device_comm.h"
#include "model/gpt_config.h"
#include "model/gpt_impl.h"
#include "model/linear.h"

/* ------------------------------------------------------------ small helpers */

static const td_device_ops *OPS(const td_gpt *m) { return m->dev->ops; }
/* Tensor t's elements past its unit's first (bindings point at that). */
static int64_t in_unit(const td_gpt *m, int t) {
  return m->tensors[t].offset - m->units[m->unit_of[t]].offset;
}
static float *P(const td_gpt *m, int t) { return m->unit_params[m->unit_of[t]] + in_unit(m, t); }
static float *G(const td_gpt *m, int t) { return m->unit_grads[m->unit_of[t]] + in_unit(m, t); }
/* A weight as the matmuls read it: the fp32 master or its low-precision copy. */
static const void *W(const td_gpt *m, int t) {
  if (m->cd == TD_F32) return P(m, t);
  return (const char *)m->unit_weights[m->unit_of[t]] + (size_t)in_unit(m, t) * td_dtype_size(m->md);
}
/* Tensor i of local layer l. */
static int LT(const td_gpt *m, int64_t l, int i) {
  return m->layer_first + (int)l * TD_GPT_LAYER_TENSORS + i;
}
static td_gelu_kind gelu_kind(const td_gpt *m) {
  return m->cfg.openai_gelu ? TD_GELU_TANH : TD_GELU_ERF;
}

/* ------------------------------------------------------------ units, hooks */

void td_gpt_set_hooks(td_gpt *m, const td_gpt_hooks *h) {
  m->hooks = h ? *h : (td_gpt_hooks){0};
}

static void params_needed(td_gpt *m, int u) {
  if (m->hooks.params_needed) m->hooks.params_needed(m->hooks.ctx, m, u);
}
static void params_done(td_gpt *m, int u) {
  if (m->hooks.params_done) m->hooks.params_done(m->hooks.ctx, m, u);
}
static void grads_needed(td_gpt *m, int u) {
  if (m->hooks.grads_needed) m->hooks.grads_needed(m->hooks.ctx, m, u);
}
static void grads_ready(td_gpt *m, int u) {
  if (m->hooks.grads_ready) m->hooks.grads_ready(m->hooks.ctx, m, u);
}

void td_gpt_bind_params(td_gpt *m, int u, float *params, void *weights) {
  TD_CHECK(u >= 0 && u < m->n_units, "unit %d of %d", u, m->n_units);
  m->unit_params[u] = params;
  m->unit_weights[u] = weights;
}

void td_gpt_bind_grads(td_gpt *m, int u, float *grads) {
  TD_CHECK(u >= 0 && u < m->n_units, "unit %d of %d", u, m->n_units);
  m->unit_grads[u] = grads;
}

/* The units of the embeddings, of layer l, of the final LayerNorm, of the
 * output layer's weight (the embeddings' when tied). */
static int emb_unit(const td_gpt *m) { return m->unit_of[m->wte]; }
static int layer_unit(const td_gpt *m, int64_t l) { return m->unit_of[LT(m, l, 0)]; }
static int final_unit(const td_gpt *m) { return m->unit_of[m->lnf_w]; }
static int head_unit(const td_gpt *m) { return m->unit_of[m->head_w]; }

/* Dropout RNG streams: one per (global layer, site); the embedding is layer -1. */
enum { SITE_ATTENTION, SITE_PROJ, SITE_FC2, SITE_EMBEDDING };
static uint64_t dropout_stream(const td_gpt *m, int64_t l, int site) {
  int64_t global = site == SITE_EMBEDDING ? -1 : m->lay.layer_begin + l;
  return ((uint64_t)(global + 1) << 8) | (uint64_t)site;
}

/* dst = fp16(src) as fp32 values, n elements through the fp16 scratch (dst may be
 * src). Beyond 65504 a value becomes Inf, as in fp16 storage. */
static void round_f16(td_gpt *m, float *dst, const float *src, int64_t n) {
  for (int64_t i = 0; i < n; i += m->half_numel) {
    int64_t len = n - i < m->half_numel ? n - i : m->half_numel;
    OPS(m)->cast(m->dev, m->half, TD_F16, src + i, TD_F32, len);
    OPS(m)->cast(m->dev, dst + i, TD_F32, m->half, TD_F16, len);
  }
}

/* x (md, n elements) is about to be a matmul input: fp16-rounded in place for fp16. */
static void matmul_input(td_gpt *m, void *x, int64_t n) {
  if (m->cd == TD_F16) round_f16(m, x, x, n);
}

/* A matmul's dY as the GEMMs read it: dy itself in fp32, else its bf16 cast or
 * fp16 rounding in dst (n elements of md; dy stays untouched: it may be the
 * residual gradient). */
static const void *to_compute(td_gpt *m, const float *dy, int64_t n, void *dst) {
  if (m->cd == TD_F32) return dy;
  if (m->cd == TD_F16)
    round_f16(m, dst, dy, n);
  else
    OPS(m)->cast(m->dev, dst, TD_BF16, dy, TD_F32, n);
  return dst;
}

/* What a bias gradient sums: the fp32 dY the GEMMs read (under fp16 the rounded
 * values, so an overflow reaches the bias too), or under bf16 dy before its cast. */
static const float *bias_dy(const td_gpt *m, const float *dy, const void *dy_c) {
  return m->cd == TD_BF16 ? dy : dy_c;
}

/* ---------------------------------------------------------- tensor parallel */

/* The TP group's collectives on device buffers, timed (td_gpt_take_comm_seconds). */
static void tp_sum(td_gpt *m, float *x, int64_t n) {
  double t0 = td_now_seconds();
  td_dcomm_all_reduce(m->lay.tp_comm, m->dev, x, x, n, TD_F32, TD_OP_SUM);
  m->comm_seconds += td_now_seconds() - t0;
}

static void tp_gather(td_gpt *m, const void *x, void *all, int64_t n, td_dtype dt) {
  double t0 = td_now_seconds();
  td_dcomm_all_gather(m->lay.tp_comm, m->dev, x, all, n, dt);
  m->comm_seconds += td_now_seconds() - t0;
}

double td_gpt_take_comm_seconds(td_gpt *m) {
  double s = m->comm_seconds;
  m->comm_seconds = 0;
  return s;
}

/* A row-parallel layer's bias: added with the partial sums of TP rank 0 only, so
 * once in the reduced output. */
static const float *row_parallel_bias(const td_gpt *m, int t) {
  return m->lay.tp_rank == 0 ? P(m, t) : NULL;
}

/* A row-parallel layer's partial output [N, C] summed over TP: all-reduced in
 * place, or under sequence parallelism reduce-scattered into out [NS, C]. Also the
 * backward of a column-parallel layer's input. Returns this rank's reduced rows
 * (partial itself at tp = 1). The reduce-scatter is an all-reduce of the scratch
 * `partial` and a copy of this rank's rows: Open MPI 4.1's reduce_scatter_block
 * took 2.8 ms for 4 MB on 2 ranks where its all-reduce took 0.54 ms (`trident bench
 * comm`), and sequence parallelism ran 31% slower than tensor parallelism alone
 * with it, 0.3-2.7% with this (bench/RESULTS.md). */
static float *reduce_rows(td_gpt *m, float *partial, float *out) {
  if (m->lay.tp_size == 1) return partial;
  tp_sum(m, partial, m->N * m->C);
  if (!m->sp) return partial;
  OPS(m)->copy_d2d(m->dev, out, partial + m->ns0 * m->C, (size_t)(m->NS * m->C) * sizeof(float));
  return out;
}

/* A column-parallel layer's input [NS, C] md as its GEMM reads it: all N tokens
 * (all-gathered into m->gath under sequence parallelism, else x itself). */
static const void *gather_input(td_gpt *m, const void *x) {
  if (!m->sp) return x;
  tp_gather(m, x, m->gath, m->NS * m->C, m->md);
  return m->gath;
}

/* An fp32 gradient of this rank's tokens [NS, C] for all N tokens (the backward of
 * a reduce-scatter): all-gathered into m->full under sequence parallelism. */
static const float *gather_grad(td_gpt *m, const float *dy) {
  if (!m->sp) return dy;
  tp_gather(m, dy, m->full, m->NS * m->C, TD_F32);
  return m->full;
}

/* Hidden dropout on this rank's NS tokens, out = (resid +) dropout(x): element
 * counters from their place in the micro-batch (ns0 x C), so the masks do not
 * depend on sequence parallelism. */
static void hidden_dropout(td_gpt *m, float *out, const float *resid, const float *x,
                           uint64_t stream) {
  OPS(m)->dropout(m->dev, out, resid, x, m->NS * m->C, m->p_hidden, m->seed, stream,
                  (uint64_t)(m->ns0 * m->C));
}

/* Hidden dropout backward: the forward's mask applied to dy, into scratch (dy
 * itself when p = 0). */
static const float *dropout_grad(td_gpt *m, const float *dy, float *scratch, uint64_t stream) {
  if (m->p_hidden == 0.0f) return dy;
  hidden_dropout(m, scratch, NULL, dy, stream);
  return scratch;
}

/* The rows of a bias gradient's dY that are this rank's tokens (all of them
 * without sequence parallelism): dy_full is [N, C] fp32. */
static const float *own_rows(const td_gpt *m, const float *dy_full) {
  return dy_full + m->ns0 * m->C;
}

/* ---------------------------------------------------- row-parallel output */

/* The output of a block (attention proj, MLP fc2): a row-parallel linear over
 * this rank's share K of the inner dimension, summed over TP, then hidden
 * dropout and the residual (Megatron's RowParallelLinear + bias-dropout-add):
 *   y[NS, C] = resid + dropout(sum_tp(x[N, K] W[C, K]^T) + b)
 * w and b are the weight and bias tensor indices, site the dropout site. */
static void row_parallel_output_forward(td_gpt *m, int64_t l, int site, int w, int b,
                                        const void *x, int64_t K, float *y, const float *resid) {
  if (m->lay.tp_size == 1 && m->p_hidden == 0.0f) { /* nothing between the GEMM and the add */
    td_linear_forward_residual(m->dev, y, resid, x, W(m, w), P(m, b), m->N, K, m->C, m->md,
                               !m->lay.no_residual_fusion);
    return;
  }
  td_linear_forward(m->dev, m->hidden, TD_F32, x, W(m, w), row_parallel_bias(m, b), m->N, K, m->C,
                    m->md);
  hidden_dropout(m, y, resid, reduce_rows(m, m->hidden, m->hs), dropout_stream(m, l, site));
}

/* Its backward from m->dres = d y: accumulates the weight and bias gradients and
 * returns dY[N, C] as the GEMMs read it, for the caller's d x = dY W. The
 * gradient reaching the GEMMs is all N tokens' (all-gathered under sequence
 * parallelism); the bias gradient sums this rank's tokens only (summed over TP
 * after backward, as replicated tensors are). A cast dY lives in m->dln (N x C
 * floats), which the block's next write of dln comes after its last read. */
static const void *row_parallel_output_backward(td_gpt *m, int64_t l, int site, int w, int b,
                                                const void *x, int64_t K) {
  int64_t N = m->N, C = m->C;
  const float *dy = gather_grad(m, dropout_grad(m, m->dres, m->gf, dropout_stream(m, l, site)));
  const void *dy_c = m->dln;
  if (m->cd == TD_BF16 && !m->sp) /* the GEMMs' bf16 dY cast while the bias sums dy */
    OPS(m)->bias_backward(m->dev, G(m, b), dy, TD_F32, N, C, m->dln, TD_BF16);
  else {
    dy_c = to_compute(m, dy, N * C, m->dln);
    OPS(m)->bias_backward(m->dev, G(m, b), own_rows(m, bias_dy(m, dy, dy_c)), TD_F32, m->NS, C,
                          NULL, TD_F32);
  }
  td_linear_backward_weight(m->dev, G(m, w), dy_c, x, N, K, C, m->md);
  return dy_c;
}

/* --------------------------------------------------------------- embedding */

/* emb[NS, C] = dropout(wte[tokens] + wpe[positions]); the vocabulary-parallel
 * lookup (each rank its ids, zeros elsewhere) is summed over TP first. */
static void embedding_forward(td_gpt *m) {
  const td_device_ops *ops = OPS(m);
  int64_t N = m->N, C = m->C;
  float *lookup = m->sp ? m->full : m->emb;
  ops->embedding_forward(m->dev, lookup, m->tokens, N, P(m, m->wte), m->vocab_start,
                         m->tensors[m->wte].local_shape[0], C, 0);
  reduce_rows(m, lookup, m->emb);
  ops->embedding_forward(m->dev, m->emb, m->positions + m->ns0, m->NS, P(m, m->wpe), 0,
                         m->cfg.max_positions, C, 1);
  hidden_dropout(m, m->emb, NULL, m->emb, dropout_stream(m, -1, SITE_EMBEDDING));
}

/* demb = dropout'(dres) (in place), dwpe[positions] += demb (this rank's tokens),
 * dwte[tokens] += demb (all tokens: gathered under sequence parallelism) */
static void embedding_backward(td_gpt *m) {
  const td_device_ops *ops = OPS(m);
  int64_t N = m->N, C = m->C;
  hidden_dropout(m, m->dres, NULL, m->dres, dropout_stream(m, -1, SITE_EMBEDDING));
  ops->embedding_backward(m->dev, G(m, m->wpe), m->dres, m->positions + m->ns0, m->NS, 0,
                          m->cfg.max_positions, C);
  ops->embedding_backward(m->dev, G(m, m->wte), gather_grad(m, m->dres), m->tokens, N,
                          m->vocab_start, m->tensors[m->wte].local_shape[0], C);
}

/* --------------------------------------------------------------- attention */

static td_attention_desc attention_desc(const td_gpt *m, const td_gpt_layer_acts *a, int64_t l) {
  td_attention_desc ad = {0};
  ad.batch = m->B, ad.seq = m->T, ad.heads = m->H, ad.head_dim = m->D;
  ad.dtype = m->md;
  ad.scale = 1.0f / sqrtf((float)m->D);
  ad.qkv = a->qkv, ad.out = a->att, ad.lse = a->att_lse;
  ad.dropout_p = m->p_attn, ad.seed = m->seed, ad.stream = dropout_stream(m, l, SITE_ATTENTION);
  ad.head_start = m->H * m->lay.tp_rank, ad.heads_total = m->cfg.heads; /* global head numbers */
  return ad;
}

/* ln1 = layernorm(x)                      [NS, C] -> [NS, C] md
 * qkv = ln1 Wqkv^T + bqkv                 [N, 3A] md, per token [H, 3, D]  (column-parallel;
 *                                         ln1 all-gathered under sequence parallelism)
 * att = attention(qkv)                    [N, A] md, lse [B, H, T]
 * mid = x + dropout(sum_tp(att Wproj^T) + bproj)  [NS, C]                   (row-parallel) */
static void attention_block_forward(td_gpt *m, int64_t l) {
  const td_device_ops *ops = OPS(m);
  td_gpt_layer_acts *a = &m->acts[l];
  int64_t N = m->N, C = m->C, A = m->A;
  ops->layernorm_forward(m->dev, a->ln1, m->md, a->ln1_mean, a->ln1_rstd, a->x,
                         P(m, LT(m, l, TD_LN1_W)), P(m, LT(m, l, TD_LN1_B)), m->NS, C,
                         m->cfg.layernorm_eps);
  matmul_input(m, a->ln1, m->NS * C);
  td_linear_forward(m->dev, a->qkv, m->md, gather_input(m, a->ln1), W(m, LT(m, l, TD_QKV_W)),
                    P(m, LT(m, l, TD_QKV_B)), N, C, 3 * A, m->md);
  matmul_input(m, a->qkv, N * 3 * A); /* the attention's QK^T and PV read it */
  td_attention_desc ad = attention_desc(m, a, l);
  ops->attention_forward(m->dev, &ad);
  matmul_input(m, a->att, N * A);
  row_parallel_output_forward(m, l, SITE_PROJ, LT(m, l, TD_PROJ_W), LT(m, l, TD_PROJ_B), a->att, A,
                              a->mid, a->x);
}

/* In: dres = d mid. Out: dres = d x (the residual passes through, ln1 adds). */
static void attention_block_backward(td_gpt *m, int64_t l) {
  const td_device_ops *ops = OPS(m);
  const td_gpt_layer_acts *a = &m->acts[l];
  int64_t N = m->N, C = m->C, A = m->A;
  const void *dy = row_parallel_output_backward(m, l, SITE_PROJ, LT(m, l, TD_PROJ_W),
                                                LT(m, l, TD_PROJ_B), a->att, A);
  td_linear_backward_input(m->dev, m->gatt, m->md, dy, W(m, LT(m, l, TD_PROJ_W)), N, A, C, m->md);
  matmul_input(m, m->gatt, N * A); /* the attention backward's matmuls read it */
  td_attention_desc ad = attention_desc(m, a, l);
  ad.dout = m->gatt, ad.dqkv = m->gh;
  ops->attention_backward(m->dev, &ad);
  matmul_input(m, m->gh, N * 3 * A);
  ops->bias_backward(m->dev, G(m, LT(m, l, TD_QKV_B)), m->gh, m->md, N, 3 * A, NULL, TD_F32);
  td_linear_backward_weight(m->dev, G(m, LT(m, l, TD_QKV_W)), m->gh, gather_input(m, a->ln1), N,
                            C, 3 * A, m->md);
  td_linear_backward_input(m->dev, m->dln, TD_F32, m->gh, W(m, LT(m, l, TD_QKV_W)), N, C, 3 * A,
                           m->md);
  /* column-parallel: each rank's heads' share of d ln1 */
  const float *dln = reduce_rows(m, m->dln, m->dlns);
  ops->layernorm_backward(m->dev, m->dres, G(m, LT(m, l, TD_LN1_W)), G(m, LT(m, l, TD_LN1_B)),
                          dln, a->x, P(m, LT(m, l, TD_LN1_W)), a->ln1_mean, a->ln1_rstd, m->NS,
                          C);
}

/* --------------------------------------------------------------------- MLP */

/* ln2 = layernorm(mid)                     [NS, C] md (all-gathered for fc1 under SP)
 * fc1 = ln2 Wfc1^T + bfc1                  [N, F] md (column-parallel: F is this rank's share;
 *                                         bf16 under bf16, as autocast and Megatron keep it)
 * gelu = gelu(fc1)                         [N, F] md
 * out = mid + dropout(sum_tp(gelu Wfc2^T) + bfc2)  [NS, C]                  (row-parallel) */
static void mlp_block_forward(td_gpt *m, int64_t l) {
  const td_device_ops *ops = OPS(m);
  td_gpt_layer_acts *a = &m->acts[l];
  int64_t N = m->N, C = m->C, F = m->F;
  ops->layernorm_forward(m->dev, a->ln2, m->md, a->ln2_mean, a->ln2_rstd, a->mid,
                         P(m, LT(m, l, TD_LN2_W)), P(m, LT(m, l, TD_LN2_B)), m->NS, C,
                         m->cfg.layernorm_eps);
  matmul_input(m, a->ln2, m->NS * C);
  td_linear_forward_gelu(m->dev, a->gelu, a->fc1, m->md, gather_input(m, a->ln2),
                         W(m, LT(m, l, TD_FC1_W)), P(m, LT(m, l, TD_FC1_B)), N, C, F, m->md,
                         gelu_kind(m), !m->lay.no_gelu_fusion);
  matmul_input(m, a->gelu, N * F);
  row_parallel_output_forward(m, l, SITE_FC2, LT(m, l, TD_FC2_W), LT(m, l, TD_FC2_B), a->gelu, F,
                              a->out, a->mid);
}

/* In: dres = d out. Out: dres = d mid. */
static void mlp_block_backward(td_gpt *m, int64_t l) {
  const td_device_ops *ops = OPS(m);
  const td_gpt_layer_acts *a = &m->acts[l];
  int64_t N = m->N, C = m->C, F = m->F;
  const void *dy = row_parallel_output_backward(m, l, SITE_FC2, LT(m, l, TD_FC2_W),
                                                LT(m, l, TD_FC2_B), a->gelu, F);
  const void *w2 = W(m, LT(m, l, TD_FC2_W));
  float *dfc1_b = G(m, LT(m, l, TD_FC1_B));
  const void *dfc1_c;
  if (m->cd == TD_F16) { /* the bias sums the fp16-rounded dY the GEMMs read */
    td_linear_backward_input(m->dev, m->dff, TD_F32, dy, w2, N, F, C, m->md);
    ops->gelu_backward(m->dev, m->dff, TD_F32, NULL, m->dff, a->fc1, m->md, N, F, gelu_kind(m));
    dfc1_c = to_compute(m, m->dff, N * F, m->gh);
    ops->bias_backward(m->dev, dfc1_b, dfc1_c, TD_F32, N, F, NULL, TD_F32);
  } else { /* dY in the GEMMs' dtype with GELU's gradient and fc1's bias gradient */
    void *dfc1 = m->md == TD_BF16 ? m->gh : (void *)m->dff;
    td_linear_backward_input_dgelu(m->dev, dfc1, m->md, dfc1_b, m->dff, dy, w2, a->fc1, N, F, C,
                                   m->md, gelu_kind(m), !m->lay.no_gelu_fusion);
    dfc1_c = dfc1;
  }
  td_linear_backward_weight(m->dev, G(m, LT(m, l, TD_FC1_W)), dfc1_c, gather_input(m, a->ln2), N,
                            C, F, m->md);
  td_linear_backward_input(m->dev, m->dln, TD_F32, dfc1_c, W(m, LT(m, l, TD_FC1_W)), N, C, F,
                           m->md);
  const float *dln = reduce_rows(m, m->dln, m->dlns);
  ops->layernorm_backward(m->dev, m->dres, G(m, LT(m, l, TD_LN2_W)), G(m, LT(m, l, TD_LN2_B)),
                          dln, a->mid, P(m, LT(m, l, TD_LN2_W)), a->ln2_mean, a->ln2_rstd, m->NS,
                          C);
}

/* -------------------------------------------------------------------- head
 * The output layer and the loss run over chunks of R tokens (rows): the logits
 * [R, V] of one chunk exist at a time, the whole micro-batch's [N, V] only when
 * R = N. A training forward given the loss gradient's scale
 * (td_gpt_forward_train_to) runs each chunk's backward while its logits are
 * there (dlogits, the output layer's weight gradient, the rows of dlnf), then
 * the final LayerNorm's backward: the logits never wait for backward, as in
 * Liger-Kernel's fused linear cross-entropy. */

static const float *last_hidden(const td_gpt *m) {
  return m->n_layers ? m->acts[m->n_layers - 1].out : m->emb;
}

static int64_t chunk_rows(const td_gpt *m) { return m->R < m->N ? m->R : m->N; }

/* Row r0 of an [N, C] md matrix. */
static const void *md_rows(const td_gpt *m, const void *x, int64_t r0) {
  return (const char *)x + (size_t)(r0 * m->C) * td_dtype_size(m->md);
}

/* Vocabulary-parallel cross-entropy of rows [r0, r0 + n): each rank's log-sum-exp
 * over its slice and the target logits it holds; the lse's gathered over the TP
 * group ([tp, n]) and the target logits summed, then combined on the device:
 * lse = logsumexp_r(lse_r), loss = lse - target logit. */
static void vocab_parallel_cross_entropy(td_gpt *m, int64_t r0, int64_t n) {
  const td_device_ops *ops = OPS(m);
  int64_t tp = m->lay.tp_size;
  float *mine = m->ce_parts + m->lay.tp_rank * n, *losses = m->losses + r0;
  ops->cross_entropy_slice(m->dev, mine, losses, m->logits, m->md, m->targets + r0, n, m->V,
                           m->vocab_start);
  tp_gather(m, mine, m->ce_parts, n, TD_F32);
  tp_sum(m, losses, n);
  ops->cross_entropy_combine(m->dev, m->ce_lse + r0, losses, m->ce_parts, losses, n, tp);
}

/* logits = x[r0 : r0 + n] Whead^T         [n, V] md  (this rank's vocabulary slice)
 * losses = lse(logits) - logits[target]   [n] */
static void chunk_forward(td_gpt *m, const void *x, int64_t r0, int64_t n) {
  td_linear_forward(m->dev, m->logits, m->md, md_rows(m, x, r0), W(m, m->head_w), NULL, n, m->C,
                    m->V, m->md);
  if (m->lay.tp_size > 1)
    vocab_parallel_cross_entropy(m, r0, n);
  else
    OPS(m)->cross_entropy_forward(m->dev, m->losses + r0, m->ce_lse + r0, m->logits, m->md,
                                  m->targets + r0, n, m->V);
}

/* From the chunk's dlogits (in m->logits, the compute dtype: the GEMMs' input):
 * dWhead += dlogits^T x, dln[r0 : r0 + n] = dlogits Whead (this vocabulary
 * slice's share). */
static void chunk_output_grads(td_gpt *m, const void *x, int64_t r0, int64_t n) {
  int64_t C = m->C, V = m->V;
  matmul_input(m, m->logits, n * V); /* fp16: dlogits are not needed unrounded */
  td_linear_backward_weight(m->dev, G(m, m->head_w), m->logits, md_rows(m, x, r0), n, C, V, m->md);
  td_linear_backward_input(m->dev, m->dln + r0 * C, TD_F32, m->logits, W(m, m->head_w), n, C, V,
                           m->md);
}

/* The chunk's backward from its logits: dlogits in place, then the GEMMs. */
static void chunk_backward(td_gpt *m, const void *x, int64_t r0, int64_t n) {
  OPS(m)->cross_entropy_backward(m->dev, m->logits, m->md, m->logits, m->md, m->ce_lse + r0,
                                 m->targets + r0, m->dloss + r0, n, m->V, m->vocab_start);
  chunk_output_grads(m, x, r0, n);
}

/* A training chunk: forward and backward, the loss and its gradient in one pass
 * over the logits where this rank holds the whole vocabulary (the two ops' bits). */
static void chunk_train(td_gpt *m, const void *x, int64_t r0, int64_t n) {
  if (m->lay.tp_size > 1) {
    chunk_forward(m, x, r0, n);
    chunk_backward(m, x, r0, n);
    return;
  }
  td_linear_forward(m->dev, m->logits, m->md, md_rows(m, x, r0), W(m, m->head_w), NULL, n, m->C,
                    m->V, m->md);
  td_device_cross_entropy_fused(m->dev, m->losses + r0, m->ce_lse + r0, m->logits, m->md,
                                m->logits, m->md, m->targets + r0, m->dloss + r0, n, m->V);
  chunk_output_grads(m, x, r0, n);
}

/* dloss = mask * dloss_scale: each token's weight in the loss gradient */
static void set_dloss(td_gpt *m, float dloss_scale) {
  OPS(m)->copy_d2d(m->dev, m->dloss, m->mask, (size_t)m->N * sizeof(float));
  OPS(m)->scale(m->dev, m->dloss, m->N, dloss_scale);
}

/* From dln (every vocabulary slice's share, summed over TP here): dres = d x
 * (overwritten), and the final LayerNorm's gradients. */
static void final_layernorm_backward(td_gpt *m) {
  const float *dln = reduce_rows(m, m->dln, m->dlns);
  OPS(m)->fill(m->dev, m->dres, TD_F32, m->NS * m->C, 0.0f);
  OPS(m)->layernorm_backward(m->dev, m->dres, G(m, m->lnf_w), G(m, m->lnf_b), dln, last_hidden(m),
                             P(m, m->lnf_w), m->lnf_mean, m->lnf_rstd, m->NS, m->C);
}

/* lnf = layernorm(x) [NS, C] md, then the chunks; with_grad: each chunk's backward
 * too, and the final LayerNorm's (dloss set). */
static void head_forward(td_gpt *m, int with_grad) {
  int64_t N = m->N, R = chunk_rows(m);
  OPS(m)->layernorm_forward(m->dev, m->lnf, m->md, m->lnf_mean, m->lnf_rstd, last_hidden(m),
                            P(m, m->lnf_w), P(m, m->lnf_b), m->NS, m->C, m->cfg.layernorm_eps);
  matmul_input(m, m->lnf, m->NS * m->C);
  const void *x = gather_input(m, m->lnf);
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    int64_t n = N - r0 < R ? N - r0 : R;
    (with_grad ? chunk_train : chunk_forward)(m, x, r0, n);
  }
  m->logits_whole = !with_grad && R == N;
  if (with_grad) final_layernorm_backward(m);
}

/* The backward of a forward that kept the whole logits. */
static void head_backward(td_gpt *m, float dloss_scale) {
  set_dloss(m, dloss_scale);
  chunk_backward(m, gather_input(m, m->lnf), 0, m->N);
  final_layernorm_backward(m);
}

/* The head's forward with its units' parameters (and, with the backward fused,
 * their gradients: final only after backward, td_gpt_backward marks them). */
static void head_forward_unit(td_gpt *m, int with_grad) {
  int f = final_unit(m), h = head_unit(m);
  params_needed(m, f);
  if (h != f) params_needed(m, h);
  if (with_grad) {
    grads_needed(m, f);
    if (h != f) grads_needed(m, h);
  }
  head_forward(m, with_grad);
  if (h != f) params_done(m, h);
  params_done(m, f);
}

/* ------------------------------------------------------------ recomputation */

static void layer_forward(td_gpt *m, int64_t l) {
  attention_block_forward(m, l);
  mlp_block_forward(m, l);
}

static void layer_forward_unit(td_gpt *m, int64_t l) {
  params_needed(m, layer_unit(m, l));
  layer_forward(m, l);
  params_done(m, layer_unit(m, l));
}

/* Whether layer l is recomputed (td_recompute), and its chunk [*c0, *c1). */
static int recompute_chunk(const td_gpt *m, int64_t l, int64_t *c0, int64_t *c1) {
  int64_t n = m->lay.recompute_num_layers;
  *c0 = l, *c1 = l + 1;
  if (m->lay.recompute == TD_RECOMPUTE_UNIFORM) {
    *c0 = l / n * n;
    *c1 = *c0 + n < m->n_layers ? *c0 + n : m->n_layers;
    return 1;
  }
  return m->lay.recompute == TD_RECOMPUTE_BLOCK && l < n;
}

/* Activation slots the recomputed chunks share: the longest chunk's layers. */
static int64_t recompute_slots(const td_gpt *m) {
  int64_t n = m->lay.recompute_num_layers;
  if (m->lay.recompute == TD_RECOMPUTE_UNIFORM) return n < m->n_layers ? n : m->n_layers;
  return m->lay.recompute == TD_RECOMPUTE_BLOCK ? 1 : 0;
}

/* ------------------------------------------------------------------- model */

/* Ids come from user data: one outside the vocabulary is a user-facing error. */
static void check_tokens(const td_gpt *m, const int32_t *ids, const char *what) {
  for (int64_t i = 0; i < m->N; i++)
    if (ids[i] < 0 || ids[i] >= m->cfg.vocab_size)
      td_fail("%s id %d (micro-batch position %lld) is outside the model's vocabulary [0, %lld): "
              "was the data tokenized with a larger vocabulary?",
              what, ids[i], (long long)i, (long long)m->cfg.vocab_size);
}

/* The micro-batch into the arena without the host waiting for the device: through
 * the pinned buffer, once the previous upload from it is done (the device is then
 * at most a micro-batch behind the host, however far the host runs ahead). */
static void upload_batch(td_gpt *m, const int32_t *tokens, const int32_t *targets,
                         const float *loss_mask) {
  const td_device_ops *ops = OPS(m);
  const size_t ids = (size_t)m->N * sizeof(int32_t), mask = (size_t)m->N * sizeof(float);
  if (m->upload_pending) ops->event_synchronize(m->dev, m->uploaded);
  memcpy(m->upload, tokens, ids);
  memcpy(m->upload + ids, targets, ids);
  memcpy(m->upload + 2 * ids, loss_mask, mask);
  ops->copy_h2d_async(m->dev, m->tokens, m->upload, ids);
  ops->copy_h2d_async(m->dev, m->targets, m->upload + ids, ids);
  ops->copy_h2d_async(m->dev, m->mask, m->upload + 2 * ids, mask);
  ops->event_record(m->dev, m->uploaded);
  m->upload_pending = 1;
}

/* The forward of td_gpt_forward_to and td_gpt_forward_train_to; with_grad: the
 * head's backward too, for tokens weighted by mask x dloss_scale. */
static void forward(td_gpt *m, const int32_t *tokens, const int32_t *targets,
                    const float *loss_mask, uint64_t dropout_seed, int training, int with_grad,
                    float dloss_scale, double *loss_sum, double *mask_sum) {
  const td_device_ops *ops = OPS(m);
  check_tokens(m, tokens, "token");
  check_tokens(m, targets, "target");
  upload_batch(m, tokens, targets, loss_mask);
  m->seed = dropout_seed;
  m->p_hidden = training ? m->cfg.hidden_dropout : 0.0f;
  m->p_attn = training ? m->cfg.attention_dropout : 0.0f;

  if (m->lay.has_embedding) { /* else the caller filled td_gpt_stage_input */
    params_needed(m, emb_unit(m));
    embedding_forward(m);
    params_done(m, emb_unit(m));
  }
  for (int64_t l = 0; l < m->n_layers; l++) layer_forward_unit(m, l);
  m->head_done = with_grad && m->lay.has_head;
  m->head_dloss_scale = dloss_scale;
  m->logits_whole = 0;
  if (m->lay.has_head) {
    if (with_grad) set_dloss(m, dloss_scale);
    head_forward_unit(m, with_grad);
  }
  m->pending_backward = 1;

  double msum = 0;
  for (int64_t i = 0; i < m->N; i++) msum += loss_mask[i]; /* the caller's host mask */
  if (mask_sum) *mask_sum = msum;
  if (m->lay.has_head)
    ops->masked_sum(m->dev, loss_sum, m->losses, m->mask, m->N);
  else
    ops->fill(m->dev, loss_sum, TD_F64, 1, 0.0f);
}

void td_gpt_forward_to(td_gpt *m, const int32_t *tokens, const int32_t *targets,
                       const float *loss_mask, uint64_t dropout_seed, int training,
                       double *loss_sum, double *mask_sum) {
  forward(m, tokens, targets, loss_mask, dropout_seed, training, 0, 0.0f, loss_sum, mask_sum);
}

void td_gpt_forward_train_to(td_gpt *m, const int32_t *tokens, const int32_t *targets,
                             const float *loss_mask, uint64_t dropout_seed, float dloss_scale,
                             double *loss_sum, double *mask_sum) {
  forward(m, tokens, targets, loss_mask, dropout_seed, 1, 1, dloss_scale, loss_sum, mask_sum);
}

double td_gpt_forward(td_gpt *m, const int32_t *tokens, const int32_t *targets,
                      const float *loss_mask, uint64_t dropout_seed, int training,
                      double *mask_sum) {
  double loss;
  td_gpt_forward_to(m, tokens, targets, loss_mask, dropout_seed, training, m->loss_sum, mask_sum);
  OPS(m)->copy_d2h(m->dev, &loss, m->loss_sum, sizeof loss);
  return loss;
}

float *td_gpt_stage_input(td_gpt *m) { return m->emb; }
int64_t td_gpt_stage_numel(const td_gpt *m) { return m->NS * m->C; }
const float *td_gpt_stage_output(const td_gpt *m) { return last_hidden(m); }
float *td_gpt_stage_output_grad(td_gpt *m) { return m->dres; }
const float *td_gpt_stage_input_grad(const td_gpt *m) { return m->dres; }

/* Row r of m->logits (V values in md) to host memory as fp32. */
static void logits_to_host(const td_gpt *m, int64_t r, float *out) {
  const size_t es = td_dtype_size(m->md);
  void *host = m->md == TD_F32 ? (void *)out : td_malloc((size_t)m->V * es);
  OPS(m)->copy_d2h(m->dev, host, (const char *)m->logits + (size_t)(r * m->V) * es,
                   (size_t)m->V * es);
  if (host != out) { /* bf16 */
    for (int64_t j = 0; j < m->V; j++) out[j] = td_bf16_to_f32(((const uint16_t *)host)[j]);
    td_free(host);
  }
}

void td_gpt_logits_row_to_host(const td_gpt *m, int64_t token, float *out) {
  TD_CHECK(m->pending_backward && m->lay.has_head,
           "td_gpt_logits_row_to_host needs a forward of the stage holding the head (and no "
           "backward since)");
  TD_CHECK(m->logits_whole,
           "td_gpt_logits_row_to_host needs the whole micro-batch's logits: a model without "
           "logits chunks (logits_chunk 0) and td_gpt_forward_to");
  TD_CHECK(token >= 0 && token < m->N, "logits row %lld outside [0, %lld)", (long long)token,
           (long long)m->N);
  logits_to_host(m, token, out);
}

/* ------------------------------------------- generation: rows of one sequence */

/* Row r0 of an activation of `width` columns of dtype dt. */
static void *at_row(const void *x, int64_t r0, int64_t width, td_dtype dt) {
  return (char *)x + (size_t)(r0 * width) * td_dtype_size(dt);
}

/* Layer l's forward of rows [r0, r0 + n), every op of layer_forward on those rows
 * (tensor-parallel size 1, no dropout); the attention's queries see the keys and
 * values of rows [0, r0 + n) in a->qkv. */
static void layer_forward_rows(td_gpt *m, int64_t l, int64_t r0, int64_t n) {
  const td_device_ops *ops = OPS(m);
  const td_gpt_layer_acts *a = &m->acts[l];
  const int64_t C = m->C, A = m->A, F = m->F;
  const td_dtype md = m->md;
  const float *x = a->x + r0 * C;
  float *mid = a->mid + r0 * C, *out = a->out + r0 * C;
  void *ln1 = at_row(a->ln1, r0, C, md), *qkv = at_row(a->qkv, r0, 3 * A, md);
  void *att = at_row(a->att, r0, A, md), *ln2 = at_row(a->ln2, r0, C, md);
  void *fc1 = at_row(a->fc1, r0, F, md), *gelu = at_row(a->gelu, r0, F, md);
  ops->layernorm_forward(m->dev, ln1, md, a->ln1_mean + r0, a->ln1_rstd + r0, x,
                         P(m, LT(m, l, TD_LN1_W)), P(m, LT(m, l, TD_LN1_B)), n, C,
                         m->cfg.layernorm_eps);
  matmul_input(m, ln1, n * C);
  td_linear_forward(m->dev, qkv, md, ln1, W(m, LT(m, l, TD_QKV_W)), P(m, LT(m, l, TD_QKV_B)), n,
                    C, 3 * A, md);
  matmul_input(m, qkv, n * 3 * A);
  td_attention_desc ad = attention_desc(m, a, l);
  if (r0 == 0) { /* the whole causal attention of rows [0, n) (lse laid out [H, n]) */
    ad.seq = n;
    ops->attention_forward(m->dev, &ad);
  } else {
    ops->attention_forward_rows(m->dev, &ad, r0, n);
  }
  matmul_input(m, att, n * A);
  td_linear_forward_residual(m->dev, mid, x, att, W(m, LT(m, l, TD_PROJ_W)),
                             P(m, LT(m, l, TD_PROJ_B)), n, A, C, md, !m->lay.no_residual_fusion);
  ops->layernorm_forward(m->dev, ln2, md, a->ln2_mean + r0, a->ln2_rstd + r0, mid,
                         P(m, LT(m, l, TD_LN2_W)), P(m, LT(m, l, TD_LN2_B)), n, C,
                         m->cfg.layernorm_eps);
  matmul_input(m, ln2, n * C);
  td_linear_forward_gelu(m->dev, gelu, fc1, md, ln2, W(m, LT(m, l, TD_FC1_W)),
                         P(m, LT(m, l, TD_FC1_B)), n, C, F, md, gelu_kind(m),
                         !m->lay.no_gelu_fusion);
  matmul_input(m, gelu, n * F);
  td_linear_forward_residual(m->dev, out, mid, gelu, W(m, LT(m, l, TD_FC2_W)),
                             P(m, LT(m, l, TD_FC2_B)), n, F, C, md, !m->lay.no_residual_fusion);
}

/* Row r's logits [V] (md) in m->logits' first row: the final LayerNorm of that
 * row and its product with the output layer, then to the host as fp32. */
static void last_row_logits(td_gpt *m, int64_t r, float *out) {
  const int64_t C = m->C, V = m->V;
  void *lnf = at_row(m->lnf, r, C, m->md);
  OPS(m)->layernorm_forward(m->dev, lnf, m->md, m->lnf_mean + r, m->lnf_rstd + r,
                            last_hidden(m) + r * C, P(m, m->lnf_w), P(m, m->lnf_b), 1, C,
                            m->cfg.layernorm_eps);
  matmul_input(m, lnf, C);
  td_linear_forward(m->dev, m->logits, m->md, lnf, W(m, m->head_w), NULL, 1, C, V, m->md);
  logits_to_host(m, 0, out);
}

void td_gpt_forward_rows(td_gpt *m, const int32_t *tokens, int64_t r0, int64_t r1,
                         float *last_logits) {
  TD_CHECK(m->B == 1 && m->lay.tp_size == 1 && m->lay.has_embedding && m->lay.has_head &&
               m->lay.recompute == TD_RECOMPUTE_NONE && !m->hooks.params_needed,
           "td_gpt_forward_rows needs one sequence through the whole model at tensor-parallel "
           "size 1 without recomputation or hooks");
  TD_CHECK(0 <= r0 && r0 < r1 && r1 <= m->N, "rows [%lld, %lld) of a sequence of %lld",
           (long long)r0, (long long)r1, (long long)m->N);
  if (!OPS(m)->attention_forward_rows) r0 = 0; /* no cache on this backend: recompute */
  const int64_t n = r1 - r0, C = m->C;
  for (int64_t i = r0; i < r1; i++)
    if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab_size)
      td_fail("token id %d (position %lld) is outside the model's vocabulary [0, %lld)",
              tokens[i], (long long)i, (long long)m->cfg.vocab_size);
  if (m->upload_pending) OPS(m)->event_synchronize(m->dev, m->uploaded), m->upload_pending = 0;
  OPS(m)->copy_h2d(m->dev, m->tokens + r0, tokens + r0, (size_t)n * sizeof *tokens);
  m->p_hidden = m->p_attn = 0.0f;
  OPS(m)->embedding_forward(m->dev, m->emb + r0 * C, m->tokens + r0, n, P(m, m->wte), 0,
                            m->tensors[m->wte].local_shape[0], C, 0);
  OPS(m)->embedding_forward(m->dev, m->emb + r0 * C, m->positions + r0, n, P(m, m->wpe), 0,
                            m->cfg.max_positions, C, 1);
  for (int64_t l = 0; l < m->n_layers; l++) layer_forward_rows(m, l, r0, n);
  last_row_logits(m, r1 - 1, last_logits);
  m->pending_backward = 0, m->logits_whole = 0;
}

/* The head's backward with its units' parameters and gradients (the word
 * embeddings' gradient, when tied, is final only after the embedding's). After
 * td_gpt_forward_train_to only the marking is left. */
static void head_backward_unit(td_gpt *m, float dloss_scale) {
  int f = final_unit(m), h = head_unit(m);
  if (m->head_done) {
    TD_CHECK(dloss_scale == m->head_dloss_scale ||
                 (isnan(dloss_scale) && isnan(m->head_dloss_scale)),
             "td_gpt_backward's dloss_scale %g is not the %g its td_gpt_forward_train_to took",
             (double)dloss_scale, (double)m->head_dloss_scale);
    grads_ready(m, f);
    return;
  }
  TD_CHECK(m->logits_whole,
           "td_gpt_backward: the logits of the last forward were computed %lld tokens at a time "
           "(logits_chunk) and are gone; train through td_gpt_forward_train_to, which runs the "
           "output layer's backward with its forward",
           (long long)m->R);
  params_needed(m, f);
  if (h != f) params_needed(m, h);
  grads_needed(m, f);
  if (h != f) grads_needed(m, h);
  head_backward(m, dloss_scale);
  if (h != f) params_done(m, h);
  params_done(m, f);
  grads_ready(m, f);
}

static void layer_backward_unit(td_gpt *m, int64_t l) {
  int64_t c0, c1;
  if (recompute_chunk(m, l, &c0, &c1) && l == c1 - 1) /* entering a recomputed chunk */
    for (int64_t k = c0; k < c1; k++) layer_forward_unit(m, k);
  int u = layer_unit(m, l);
  params_needed(m, u);
  grads_needed(m, u);
  mlp_block_backward(m, l);
  attention_block_backward(m, l);
  params_done(m, u);
  grads_ready(m, u);
}

/* Tensors are ordered embeddings, layers, final LayerNorm (+ untied output layer):
 * backward finishes their units from the last to the first. */
void td_gpt_backward(td_gpt *m, float dloss_scale) {
  TD_CHECK(m->pending_backward, "td_gpt_backward needs a forward first (once per forward)");
  m->pending_backward = 0;
  if (m->lay.has_head) head_backward_unit(m, dloss_scale); /* else the caller filled dres */
  for (int64_t l = m->n_layers - 1; l >= 0; l--) layer_backward_unit(m, l);
  if (m->lay.has_embedding) { /* else dres is the input's gradient */
    grads_needed(m, emb_unit(m));
    embedding_backward(m);
    grads_ready(m, emb_unit(m));
  }
}

void td_gpt_reduce_sequence_parallel_grads(td_gpt *m) {
  if (!m->sp) return;
  for (int i = 0; i < m->n_tensors; i++) /* the replicated tensors: one rank's tokens each */
    if (m->tensors[i].split_dim < 0)
      tp_sum(m, G(m, i), m->tensors[i].numel);
}

void td_gpt_zero_grads(td_gpt *m) {
  TD_CHECK(m->grads, "td_gpt_zero_grads: the model has no flat gradients (ZeRO-2/3)");
  OPS(m)->fill(m->dev, m->grads, TD_F32, m->flat_numel, 0.0f);
}

td_dtype td_gpt_weight_dtype(const td_gpt *m) { return m->md; }

void td_gpt_cast_unit_weights(td_gpt *m, void *weights, const float *params, int64_t n) {
  if (m->cd == TD_F16)
    round_f16(m, weights, params, n);
  else if (m->cd == TD_BF16)
    OPS(m)->cast(m->dev, weights, TD_BF16, params, TD_F32, n);
}

void td_gpt_cast_weights(td_gpt *m) {
  if (m->params) td_gpt_cast_unit_weights(m, m->weights_lp, m->params, m->flat_numel);
}

/* ------------------------------------------------------------------ arena */

/* Carves the arena; with base NULL it only measures (every pointer NULL). The
 * byte counts saturate (base/checked.h): a plan for sizes beyond any machine
 * measures as TD_SIZE_HUGE and is refused, it does not wrap. */
typedef struct {
  char *base;
  uint64_t used;
} bump;

static uint64_t aligned_bytes(int64_t n, td_dtype dt) {
  uint64_t b = td_sat_bytes(n, td_dtype_size(dt));
  return b > TD_SIZE_HUGE - 63 ? TD_SIZE_HUGE : (b + 63) / 64 * 64;
}

static void *take(bump *b, int64_t n, td_dtype dt) {
  void *p = b->base ? b->base + b->used : NULL;
  b->used = td_sat_add(b->used, aligned_bytes(n, dt));
  return p;
}

/* One layer's activations; out only with_out (a chunk's last layer writes its
 * output to a buffer of its own). */
static void carve_layer(td_gpt *m, bump *b, td_gpt_layer_acts *a, int with_out) {
  int64_t N = m->N, NS = m->NS, C = m->C, F = m->F, A = m->A;
  size_t before = b->used;
  a->ln1_mean = take(b, NS, TD_F32), a->ln1_rstd = take(b, NS, TD_F32);
  a->ln1 = take(b, NS * C, m->md);
  a->qkv = take(b, N * 3 * A, m->md);
  a->att = take(b, N * A, m->md);
  a->att_lse = take(b, m->B * m->H * m->T, TD_F32);
  a->mid = take(b, NS * C, TD_F32);
  a->ln2_mean = take(b, NS, TD_F32), a->ln2_rstd = take(b, NS, TD_F32);
  a->ln2 = take(b, NS * C, m->md);
  a->fc1 = take(b, N * F, m->md);
  a->gelu = take(b, N * F, m->md);
  a->out = with_out ? take(b, NS * C, TD_F32) : NULL;
  /* what a layer that keeps everything holds, out included */
  m->layer_bytes = td_sat_add(b->used - before, with_out ? 0 : aligned_bytes(NS * C, TD_F32));
}

/* The layers' activations. A recomputed layer's live in the slot of its place
 * in its chunk (slots are shared by every chunk), except the chunk's output,
 * which the next chunk (or the head) reads after the slots are reused. */
static void carve_layers(td_gpt *m, bump *b) {
  int64_t slots = recompute_slots(m);
  td_gpt_layer_acts *slot = td_calloc((size_t)(slots ? slots : 1) * sizeof *slot);
  for (int64_t s = 0; s < slots; s++) carve_layer(m, b, &slot[s], s < slots - 1);
  for (int64_t l = 0; l < m->n_layers; l++) {
    int64_t c0, c1;
    if (!recompute_chunk(m, l, &c0, &c1)) {
      carve_layer(m, b, &m->acts[l], 1);
    } else {
      m->acts[l] = slot[l - c0];
      if (l == c1 - 1) m->acts[l].out = take(b, m->NS * m->C, TD_F32);
    }
    m->acts[l].x = l ? m->acts[l - 1].out : m->emb;
  }
  td_free(slot);
}

/* The arena before the layers: the ids and the embedding output. */
static void carve_inputs(td_gpt *m, bump *b) {
  int64_t N = m->N;
  m->tokens = take(b, N, TD_I32), m->targets = take(b, N, TD_I32);
  m->positions = take(b, N, TD_I32);
  m->emb = take(b, m->NS * m->C, TD_F32);
}

/* The arena after the layers: the head and the backward scratch. */
static void carve_rest(td_gpt *m, bump *b) {
  int64_t N = m->N, C = m->C, F = m->F, V = m->V;
  m->lnf_mean = take(b, m->NS, TD_F32), m->lnf_rstd = take(b, m->NS, TD_F32);
  m->lnf = take(b, m->NS * C, m->md);
  m->logits = m->lay.has_head ? take(b, m->R * V, m->md) : NULL; /* the head's stage only */
  m->losses = take(b, N, TD_F32), m->ce_lse = take(b, N, TD_F32);
  m->ce_parts = m->lay.tp_size > 1 ? take(b, m->lay.tp_size * m->R, TD_F32) : NULL;
  m->mask = take(b, N, TD_F32), m->dloss = take(b, N, TD_F32);
  m->loss_sum = take(b, 1, TD_F64);
  m->hidden = take(b, N * C, TD_F32);
  m->dres = take(b, m->NS * C, TD_F32), m->dln = take(b, N * C, TD_F32);
  m->gf = take(b, N * (C > 3 * m->A ? C : 3 * m->A), TD_F32);
  m->dff = take(b, N * F, TD_F32);
  m->gatt = take(b, N * m->A, m->md);
  m->gh = take(b, m->half_numel, m->md);
  m->half = m->cd == TD_F16 ? take(b, m->half_numel, TD_F16) : NULL;
  if (m->sp) {
    m->full = take(b, N * C, TD_F32), m->gath = take(b, N * C, m->md);
    m->hs = take(b, m->NS * C, TD_F32), m->dlns = take(b, m->NS * C, TD_F32);
  }
}

static void carve(td_gpt *m, bump *b) {
  carve_inputs(m, b);
  carve_layers(m, b);
  carve_rest(m, b);
}

/* What carve_layers takes, from one layer's measure (carve_layers' layout, in
 * closed form, so n layers are measured without a table of n): each layer that
 * keeps everything takes `full`; recomputed layers share slots (the longest
 * chunk's layers, the last without its output) and each chunk keeps its output. */
static uint64_t layers_bytes(td_gpt *m) {
  bump one = {NULL, 0};
  td_gpt_layer_acts scratch;
  carve_layer(m, &one, &scratch, 1);
  uint64_t n = (uint64_t)m->n_layers, full = one.used, out = aligned_bytes(m->NS * m->C, TD_F32);
  uint64_t k = m->lay.recompute_num_layers > 0 ? (uint64_t)m->lay.recompute_num_layers : 1;
  uint64_t slots = (uint64_t)recompute_slots(m);
  uint64_t shared = slots ? td_sat_add(td_sat_mul(slots - 1, full), full - out) : 0;
  if (m->lay.recompute == TD_RECOMPUTE_UNIFORM)
    return td_sat_add(shared, td_sat_mul((n + k - 1) / k, out));
  if (m->lay.recompute == TD_RECOMPUTE_BLOCK) {
    uint64_t r = k < n ? k : n; /* the first k layers, a chunk each */
    return td_sat_add(td_sat_add(shared, td_sat_mul(r, out)), td_sat_mul(n - r, full));
  }
  return td_sat_mul(n, full);
}

/* The arena's bytes without carving it (td_gpt_plan). */
static uint64_t planned_arena_bytes(td_gpt *m) {
  bump b = {NULL, 0};
  carve_inputs(m, &b);
  carve_rest(m, &b);
  return td_sat_add(b.used, layers_bytes(m));
}

/* positions[b*T + t] = t */
static void upload_positions(td_gpt *m) {
  int32_t *host = td_malloc((size_t)m->N * sizeof(int32_t));
  for (int64_t i = 0; i < m->N; i++) host[i] = (int32_t)(i % m->T);
  OPS(m)->copy_h2d(m->dev, m->positions, host, (size_t)m->N * sizeof(int32_t));
  td_free(host);
}

void td_gpt_set_seq_length(td_gpt *m, int64_t T) {
  if (T == m->T) return;
  TD_CHECK(T >= 1 && T <= m->cfg.seq_len, "sequence length %lld outside [1, %lld]", (long long)T,
           (long long)m->cfg.seq_len);
  TD_CHECK(!m->sp || T % m->lay.tp_size == 0,
           "sequence length %lld with sequence parallelism over %d ranks", (long long)T,
           m->lay.tp_size);
  m->T = T, m->N = m->B * T;
  m->NS = m->sp ? m->N / m->lay.tp_size : m->N;
  m->ns0 = m->sp ? m->NS * m->lay.tp_rank : 0;
  upload_positions(m);
}

/* ------------------------------------------------------------------ create */

static void check_config(const td_gpt_config *c, const td_gpt_layout *lay, int64_t micro_batch,
                         td_dtype cd) {
  TD_CHECK(c->num_layers > 0 && c->hidden > 0 && c->heads > 0 && c->ffn_hidden > 0 &&
               c->seq_len > 0 && c->vocab_size > 0,
           "GPT sizes must be positive");
  TD_CHECK(c->hidden % c->heads == 0, "hidden %lld not divisible by heads %lld",
           (long long)c->hidden, (long long)c->heads);
  TD_CHECK(c->seq_len <= c->max_positions, "seq_len %lld > max_positions %lld",
           (long long)c->seq_len, (long long)c->max_positions);
  TD_CHECK(micro_batch > 0, "micro_batch %lld", (long long)micro_batch);
  TD_CHECK(cd == TD_F32 || cd == TD_BF16 || cd == TD_F16,
           "compute dtype must be fp32, bf16 or fp16");
  TD_CHECK(lay->layer_begin >= 0 && lay->layer_begin <= lay->layer_end &&
               lay->layer_end <= c->num_layers,
           "layer range [%lld, %lld) of %lld", (long long)lay->layer_begin,
           (long long)lay->layer_end, (long long)c->num_layers);
  TD_CHECK(lay->tp_size >= 1 && lay->tp_rank >= 0 && lay->tp_rank < lay->tp_size,
           "tp rank %d of %d", lay->tp_rank, lay->tp_size);
  TD_CHECK(lay->tp_size == 1 || (lay->tp_comm && td_comm_size(lay->tp_comm) == lay->tp_size &&
                                 td_comm_rank(lay->tp_comm) == lay->tp_rank),
           "tensor-parallel layout needs its TP group (rank %d of %d)", lay->tp_rank, lay->tp_size);
  TD_CHECK(c->heads % lay->tp_size == 0 && c->ffn_hidden % lay->tp_size == 0 &&
               c->vocab_size % lay->tp_size == 0,
           "heads %lld, ffn %lld, vocabulary %lld not divisible by tp %d", (long long)c->heads,
           (long long)c->ffn_hidden, (long long)c->vocab_size, lay->tp_size);
  TD_CHECK(!lay->sequence_parallel || (micro_batch * c->seq_len) % lay->tp_size == 0,
           "sequence parallelism: %lld tokens not divisible by tp %d",
           (long long)(micro_batch * c->seq_len), lay->tp_size);
  int64_t layers = lay->layer_end - lay->layer_begin;
  TD_CHECK(lay->recompute == TD_RECOMPUTE_NONE ||
               (lay->recompute_num_layers >= 1 && lay->recompute_num_layers <= layers),
           "recompute_num_layers %lld outside [1, %lld]", (long long)lay->recompute_num_layers,
           (long long)layers);
  TD_CHECK(lay->logits_chunk >= 0, "logits_chunk %lld", (long long)lay->logits_chunk);
  TD_CHECK(lay->has_embedding || lay->layer_begin > 0, "the first stage holds the embedding");
  TD_CHECK(lay->has_head || lay->layer_end < c->num_layers, "the last stage holds the head");
}

int64_t td_gpt_auto_logits_chunk(const td_gpt_config *cfg, int64_t micro_batch,
                                 const td_device *dev) {
  const uint64_t budget = td_device_has(dev, TD_DEVICE_HOST_RAM) ? (uint64_t)256 << 20
                                                                  : (uint64_t)4 << 30;
  const uint64_t row = td_sat_bytes(cfg->vocab_size, sizeof(float));
  if (td_sat_mul(td_sat_mul((uint64_t)micro_batch, (uint64_t)cfg->seq_len), row) <= budget)
    return 0;
  int64_t chunk = 128;
  while ((uint64_t)chunk * 2 * row <= budget) chunk *= 2;
  return chunk;
}

td_gpt_layout td_gpt_layout_single(const td_gpt_config *cfg) {
  return (td_gpt_layout){.tp_size = 1, .layer_end = cfg->num_layers, .has_embedding = 1,
                         .has_head = 1, .unit_multiple = 1};
}

static void set_sizes(td_gpt *m, int64_t micro_batch) {
  const td_gpt_config *c = &m->cfg;
  int64_t tp = m->lay.tp_size;
  m->B = micro_batch, m->T = c->seq_len, m->N = m->B * m->T;
  m->C = c->hidden, m->H = c->heads / tp, m->D = c->hidden / c->heads;
  m->F = c->ffn_hidden / tp, m->V = c->vocab_size / tp;
  m->A = m->H * m->D;
  m->sp = m->lay.sequence_parallel && tp > 1;
  m->NS = m->sp ? m->N / tp : m->N;
  m->ns0 = m->sp ? m->NS * m->lay.tp_rank : 0;
  int64_t widest = 3 * m->A > m->F ? 3 * m->A : m->F;
  m->half_numel = m->N * (widest > m->C ? widest : m->C);
  m->vocab_start = m->V * m->lay.tp_rank;
  m->R = m->lay.logits_chunk > 0 && m->lay.logits_chunk < m->N ? m->lay.logits_chunk : m->N;
  m->n_layers = m->lay.layer_end - m->lay.layer_begin;
}

/* The activation arena (carved twice: to measure, then for real). */
static void alloc_activations(td_gpt *m) {
  m->acts = td_calloc((size_t)(m->n_layers ? m->n_layers : 1) * sizeof *m->acts);
  bump measure = {NULL, 0};
  carve(m, &measure);
  m->arena_bytes = measure.used;
  m->arena = OPS(m)->alloc(m->dev, m->arena_bytes);
  bump real = {m->arena, 0};
  carve(m, &real);
  upload_positions(m);
  m->upload = OPS(m)->host_alloc(m->dev, (size_t)m->N * (2 * sizeof(int32_t) + sizeof(float)));
  m->uploaded = OPS(m)->event_create(m->dev);
  m->upload_pending = 0;
}

/* ------------------------------------------------------------------ plan */

/* A model struct with the sizes of (cfg, lay, micro_batch, cd); nothing allocated. */
static void size_model(td_gpt *m, const td_gpt_config *cfg, const td_gpt_layout *lay,
                       int64_t micro_batch, td_dtype cd) {
  m->cfg = *cfg, m->lay = *lay, m->cd = cd;
  m->md = cd == TD_BF16 ? TD_BF16 : TD_F32;
  set_sizes(m, micro_batch);
}

/* The host side: the tensor table (grown by doubling: up to twice its tensors),
 * the activation table, positions, losses and the cross-entropy staging
 * ((tp + 2) x N), the pinned upload buffer (3 x N), and td_gpt_init_params'
 * buffer of the largest tensor. */
static uint64_t host_bytes(const td_gpt *m, const td_gpt_param_count *c) {
  uint64_t tensors = td_sat_mul(td_sat_mul(c->n_tensors, 2), sizeof(td_gpt_tensor));
  uint64_t acts = td_sat_mul((uint64_t)(m->n_layers ? m->n_layers : 1), sizeof(td_gpt_layer_acts));
  uint64_t rows = td_sat_mul((uint64_t)m->N, (uint64_t)m->lay.tp_size + 7);
  return td_sat_add(td_sat_add(tensors, acts),
                    td_sat_add(td_sat_mul(rows, sizeof(float)), td_sat_mul(c->largest, sizeof(float))));
}

int td_gpt_plan(const td_gpt_config *cfg, const td_gpt_layout *lay, int64_t micro_batch,
                td_dtype compute_dtype, td_gpt_memory *mem, td_gpt_param_count *counts,
                char *err, size_t errlen) {
  TD_CHECK(lay->tp_size >= 1 && lay->layer_begin >= 0 && lay->layer_begin <= lay->layer_end,
           "layout: tp %d, layers [%lld, %lld)", lay->tp_size, (long long)lay->layer_begin,
           (long long)lay->layer_end);
  if (micro_batch < 1)
    return td_errorf(err, errlen, "--micro-batch-size must be a positive integer; got %lld",
                     (long long)micro_batch);
  if (td_gpt_check_sizes(cfg, micro_batch, NULL, err, errlen)) return -1;
  td_gpt m;
  memset(&m, 0, sizeof m);
  size_model(&m, cfg, lay, micro_batch, compute_dtype);
  td_gpt_param_count c = td_gpt_count_params(cfg, lay);
  *mem = (td_gpt_memory){0};
  if (!lay->no_flat_params) mem->params = td_sat_mul(c.flat_numel, sizeof(float));
  if (!lay->no_flat_grads) mem->grads = td_sat_mul(c.flat_numel, sizeof(float));
  if (compute_dtype != TD_F32 && !lay->no_flat_params)
    mem->weights_bf16 = td_sat_mul(c.flat_numel, td_dtype_size(m.md));
  mem->activations = planned_arena_bytes(&m);
  mem->activations_per_layer = m.layer_bytes;
  mem->host = host_bytes(&m, &c);
  if (counts) *counts = c;
  return 0;
}

uint64_t td_gpt_memory_total(const td_gpt_memory *m) {
  return td_sat_add(td_sat_add(td_sat_add(m->params, m->grads), td_sat_add(m->weights_bf16, m->activations)),
                    m->host);
}

/* Whether dev's buffers come out of the host's RAM (the CPU backend, a profiler
 * wrapping it, the sealed test device): then they count against the host's
 * memory; else against the device's own (memory_info), when it says. */
static int device_is_host(const td_device *dev) { return td_device_has(dev, TD_DEVICE_HOST_RAM); }

/* A device with memory of its own: the model's part of it fits what is free. */
static int check_device_memory(td_device *dev, uint64_t need, const char *detail, char *err,
                               size_t n) {
  if (device_is_host(dev) || !dev->ops->memory_info) return 0;
  size_t free_b, total_b;
  dev->ops->memory_info(dev, &free_b, &total_b);
  if (need <= free_b) return 0;
  char name[256], nb[32], fb[32], tb[32];
  td_device_describe(dev, name, sizeof name);
  td_bytes_text(need, nb, sizeof nb), td_bytes_text(free_b, fb, sizeof fb);
  td_bytes_text(total_b, tb, sizeof tb);
  return td_errorf(err, n, "the model needs %s of device memory on %s (%s), more than the %s free "
                           "of its %s",
                   nb, name, detail, fb, tb);
}

/* Refuse (td_fail) a model beyond the limits or the memory, before allocating. */
static uint64_t check_create(td_device *dev, const td_gpt_config *cfg,
                             const td_gpt_layout *lay, int64_t micro_batch, td_dtype cd) {
  td_gpt_memory need;
  char err[1536], detail[512], p[32], a[32], h[32];
  if (td_gpt_plan(cfg, lay, micro_batch, cd, &need, NULL, err, sizeof err)) td_fail("%s", err);
  td_bytes_text(need.params, p, sizeof p);
  td_bytes_text(need.activations, a, sizeof a);
  td_bytes_text(need.host, h, sizeof h);
  snprintf(detail, sizeof detail,
           "parameters %s (--num-layers %lld, --hidden-size %lld, --ffn-hidden-size %lld, "
           "vocabulary %lld, --max-position-embeddings %lld), the same again for gradients%s, "
           "activations %s (--micro-batch-size %lld x --seq-length %lld tokens), host tables %s",
           p, (long long)cfg->num_layers, (long long)cfg->hidden, (long long)cfg->ffn_hidden,
           (long long)cfg->vocab_size, (long long)cfg->max_positions,
           cd == TD_F32 ? "" : " and part again for the low-precision weights", a,
           (long long)micro_batch, (long long)cfg->seq_len, h);
  uint64_t host = device_is_host(dev) ? td_gpt_memory_total(&need) : need.host;
  if (td_memory_check(host, td_comm_local_size(), "the model", detail, err, sizeof err) ||
      check_device_memory(dev, td_gpt_memory_total(&need) - need.host, detail, err, sizeof err) ||
      td_gpt_check_layers(cfg, "--num-layers", err, sizeof err))
    td_fail("%s", err);
  return need.host;
}

/* The flat buffers the layout asks for, and every unit bound into them (a unit
 * without them stays unbound: NULL, until td_gpt_bind_*). */
static void alloc_flat(td_gpt *m) {
  td_device *dev = m->dev;
  size_t flat_bytes = (size_t)m->flat_numel * sizeof(float);
  if (!m->lay.no_flat_params) {
    m->params = dev->ops->alloc(dev, flat_bytes);
    if (m->cd != TD_F32)
      m->weights_lp = dev->ops->alloc(dev, (size_t)m->flat_numel * td_dtype_size(m->md));
  }
  if (!m->lay.no_flat_grads) m->grads = dev->ops->alloc(dev, flat_bytes);
  size_t n = (size_t)(m->n_units ? m->n_units : 1);
  m->unit_params = td_calloc(n * sizeof *m->unit_params);
  m->unit_weights = td_calloc(n * sizeof *m->unit_weights);
  m->unit_grads = td_calloc(n * sizeof *m->unit_grads);
  for (int u = 0; u < m->n_units; u++) {
    int64_t off = m->units[u].offset;
    if (m->params) m->unit_params[u] = m->params + off;
    if (m->weights_lp) m->unit_weights[u] = (char *)m->weights_lp + (size_t)off * td_dtype_size(m->md);
    if (m->grads) m->unit_grads[u] = m->grads + off;
  }
}

td_gpt *td_gpt_create(td_device *dev, const td_gpt_config *cfg, const td_gpt_layout *lay,
                      int64_t micro_batch, td_dtype compute_dtype) {
  uint64_t host = check_create(dev, cfg, lay, micro_batch, compute_dtype);
  check_config(cfg, lay, micro_batch, compute_dtype);
  td_gpt *m = td_calloc(sizeof *m);
  m->dev = dev, m->cfg = *cfg, m->lay = *lay, m->cd = compute_dtype;
  m->md = compute_dtype == TD_BF16 ? TD_BF16 : TD_F32;
  m->host_bytes = host;
  set_sizes(m, micro_batch);
  td_gpt_build_tensors(m);
  alloc_flat(m);

  alloc_activations(m);
  return m;
}

td_gpt *td_gpt_create_replica(const td_gpt *m) {
  TD_CHECK(!m->replica_of, "a replica of a replica");
  td_gpt *r = td_calloc(sizeof *r);
  *r = *m; /* sizes, tensor views and the shared parameter, gradient and weight buffers */
  r->replica_of = m;
  r->hooks = (td_gpt_hooks){0}, r->pending_backward = 0, r->comm_seconds = 0;
  alloc_activations(r);
  return r;
}

void td_gpt_destroy(td_gpt *m) {
  if (!m) return;
  const td_device_ops *ops = OPS(m);
  ops->event_synchronize(m->dev, m->uploaded); /* the last upload has left m->upload */
  ops->event_destroy(m->dev, m->uploaded);
  ops->host_free(m->dev, m->upload);
  ops->free(m->dev, m->arena);
  td_free(m->acts);
  if (!m->replica_of) { /* a replica shares these with its model */
    if (m->params) ops->free(m->dev, m->params);
    if (m->grads) ops->free(m->dev, m->grads);
    if (m->weights_lp) ops->free(m->dev, m->weights_lp);
    td_free(m->tensors), td_free(m->units), td_free(m->unit_of);
    td_free(m->unit_params), td_free(m->unit_weights), td_free(m->unit_grads);
  }
  td_free(m);
}

td_gpt_memory td_gpt_memory_report(const td_gpt *m) {
  td_gpt_memory r;
  r.params = m->params ? (size_t)m->flat_numel * sizeof(float) : 0;
  r.grads = m->grads ? (size_t)m->flat_numel * sizeof(float) : 0;
  r.weights_bf16 = m->weights_lp ? (size_t)m->flat_numel * td_dtype_size(m->md) : 0;
  r.activations = m->arena_bytes;
  r.activations_per_layer = m->layer_bytes;
  r.host = m->host_bytes;
  return r;
}
