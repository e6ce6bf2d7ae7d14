/* Causal self-attention on the CPU (design in cpu_attention.h): the entry
 * points, which choose the per-head kernels or the td_cpu_gemm implementation,
 * the latter itself, and the portable C row kernels.
 *
 * td_cpu_gemm implementation: the forward runs one task per (b, h, query block
 * of TD_ATTN_BQ rows), the backward one per (b, h). Per-thread scratch (reused
 * across calls, only grows):
 *   forward:  S   TD_ATTN_BQ x T fp32 (P' written in place in fp32; a bf16 copy
 *             TD_ATTN_BQ x T for bf16), dropout words T + 67;
 *   backward: S, dP as above, P', dS in bf16 for bf16, dK and dV T x D fp32. */
#include "device/cpu/cpu_attention.h"

#include <math.h>
#include <string.h>

#include "base/dtype.h"
#include "base/error.h"
#include "base/mem.h"
#include "base/rng.h"
#include "device/cpu/cpu_isa.h"
#include "device/cpu/cpu_kernels.h"

double td_cpu_attention_flops(const td_attention_desc *a, int backward) {
  double fwd = 4.0 * (double)a->batch * (double)a->heads * (double)a->seq * (double)a->seq *
               (double)a->head_dim / 2.0;
  return backward ? 2.5 * fwd : fwd;
}

/* ------------------------------------------------------- portable row kernels */

const uint32_t *td_attn_rng_row_generic(uint64_t seed, uint64_t stream, uint64_t g0, int64_t n,
                                        uint32_t *buf) {
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint64_t first = g0 >> 2, last = (g0 + (uint64_t)n - 1) >> 2;
  for (uint64_t blk = first; blk <= last; blk++) {
    uint32_t ctr[4] = {(uint32_t)blk, (uint32_t)(blk >> 32), (uint32_t)stream,
                       (uint32_t)(stream >> 32)};
    td_philox4x32_10(ctr, key, buf + 4 * (blk - first));
  }
  return buf + (g0 & 3);
}

static void store_p(void *out, td_dtype dt, int64_t j, float v) {
  if (dt == TD_BF16)
    ((uint16_t *)out)[j] = td_f32_to_bf16(v);
  else
    ((float *)out)[j] = v;
}

/* keep_j * keep_scale (1 without dropout) */
static float keep_factor(const uint32_t *words, td_attn_dropout dr, int64_t j) {
  if (!words) return 1.0f;
  return words[j] >= dr.thr ? dr.keep_scale : 0.0f;
}

void td_attn_softmax_row_generic(float *s, int64_t nvalid, int64_t ncols, float scale,
                                 const uint32_t *words, td_attn_dropout dr, float *lse, void *p_out,
                                 td_dtype p_dtype) {
  float m = scale * s[0];
  for (int64_t j = 1; j < nvalid; j++) m = scale * s[j] > m ? scale * s[j] : m;
  float l = 0.0f;
  for (int64_t j = 0; j < nvalid; j++) {
    s[j] = expf(scale * s[j] - m);
    l += s[j];
  }
  *lse = m + logf(l);
  float inv = 1.0f / l;
  for (int64_t j = 0; j < nvalid; j++)
    store_p(p_out, p_dtype, j, s[j] * inv * keep_factor(words, dr, j));
  for (int64_t j = nvalid; j < ncols; j++) store_p(p_out, p_dtype, j, 0.0f);
}

void td_attn_softmax_bwd_row_generic(const float *s, const float *dp, int64_t nvalid, int64_t ncols,
                                     float scale, const uint32_t *words, td_attn_dropout dr,
                                     float lse, float di, void *p_out, void *ds_out,
                                     td_dtype p_dtype) {
  for (int64_t j = 0; j < ncols; j++) {
    float p = 0.0f, pk = 0.0f, ds = 0.0f;
    if (j < nvalid) {
      float k = keep_factor(words, dr, j);
      p = expf(scale * s[j] - lse);
      pk = p * k;
      ds = p * (dp[j] * k - di);
    }
    store_p(p_out, p_dtype, j, pk);
    store_p(ds_out, p_dtype, j, ds);
  }
}

/* ------------------------------------------------------------------ dispatch */

typedef struct {
  const uint32_t *(*rng_row)(uint64_t, uint64_t, uint64_t, int64_t, uint32_t *);
  void (*softmax_row)(float *, int64_t, int64_t, float, const uint32_t *, td_attn_dropout, float *,
                      void *, td_dtype);
  void (*softmax_bwd_row)(const float *, const float *, int64_t, int64_t, float, const uint32_t *,
                          td_attn_dropout, float, float, void *, void *, td_dtype);
} row_kernels;

static row_kernels row_kernels_get(void) {
  if (td_cpu_isa_get() == TD_ISA_AVX512)
    return (row_kernels){td_attn_rng_row_avx512, td_attn_softmax_row_avx512,
                         td_attn_softmax_bwd_row_avx512};
  if (td_cpu_isa_get() == TD_ISA_AVX2)
    return (row_kernels){td_attn_rng_row_avx2, td_attn_softmax_row_avx2,
                         td_attn_softmax_bwd_row_avx2};
  return (row_kernels){td_attn_rng_row_generic, td_attn_softmax_row_generic,
                       td_attn_softmax_bwd_row_generic};
}

/* The per-head kernels (AMX, else AVX512-BF16 dot products for bf16; AVX-512 FMA
 * for fp32; AVX2 FMA for fp32 and bf16 on the avx2 ISA, and for bf16 on an AVX-512
 * CPU with neither AMX nor AVX512-BF16, as Skylake-SP, Cascade Lake and Ice Lake:
 * the AVX2 heads widen bf16 to fp32, where the td_cpu_gemm path would pack and
 * widen every block of every head again), or NULLs: the td_cpu_gemm path.
 * AMX needs the CPU's AMX-BF16 and AVX512-BF16, and Linux to grant the tile data
 * state (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA). */
typedef struct {
  size_t (*scratch_bytes)(int64_t T, int64_t D, int backward);
  void (*forward)(const td_attention_desc *, int64_t, td_attn_dropout, void *);
  void (*backward)(const td_attention_desc *, int64_t, td_attn_dropout, void *);
} head_kernels;

static int g_head_kernels = TD_ATTN_USE_DEFAULT;

void td_cpu_attention_use_kernels(int mode) { g_head_kernels = mode; }

static head_kernels head_kernels_get(td_dtype dt) {
  head_kernels none = {NULL, NULL, NULL};
  if (g_head_kernels == TD_ATTN_USE_GEMM || td_cpu_isa_get() == TD_ISA_GENERIC) return none;
  if (td_cpu_isa_get() == TD_ISA_AVX2) /* fp32 and bf16 alike */
    return (head_kernels){td_attn_f32_avx2_scratch_bytes, td_attn_f32_avx2_forward_head,
                          td_attn_f32_avx2_backward_head};
  if (dt == TD_F32)
    return (head_kernels){td_attn_f32_scratch_bytes, td_attn_f32_forward_head,
                          td_attn_f32_backward_head};
  const int bf16_units = g_head_kernels != TD_ATTN_USE_NO_BF16_UNITS;
  if (bf16_units && g_head_kernels != TD_ATTN_USE_NO_AMX && td_cpu_amx_usable())
    return (head_kernels){td_attn_bf16_scratch_bytes, td_attn_amx_forward_head,
                          td_attn_amx_backward_head};
  if (bf16_units && td_cpu_has_avx512_bf16())
    return (head_kernels){td_attn_bf16_scratch_bytes, td_attn_dpbf16_forward_head,
                          td_attn_dpbf16_backward_head};
  return (head_kernels){td_attn_f32_avx2_scratch_bytes, td_attn_f32_avx2_forward_head,
                        td_attn_f32_avx2_backward_head};
}

/* ------------------------------------------------------------------ helpers */

/* Per-thread tiles (cpu_kernels.h's workspace) */
static __thread td_cpu_workspace t_tiles;
static void *scratch(size_t bytes) { return td_cpu_workspace_get(&t_tiles, bytes); }

static size_t round64(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

/* One single-threaded GEMM: C = alpha op(A) op(B) + beta C (batch 1, no bias). */
static void gemm(int64_t m, int64_t n, int64_t k, td_dtype ab, td_dtype c_dtype, const void *a,
                 int64_t lda, int trans_a, const void *b, int64_t ldb, int trans_b, void *c,
                 int64_t ldc, float alpha, float beta) {
  td_matmul_desc g = {.m = m,
                      .n = n,
                      .k = k,
                      .ab_dtype = ab,
                      .c_dtype = c_dtype,
                      .a = a,
                      .lda = lda,
                      .trans_a = trans_a,
                      .b = b,
                      .ldb = ldb,
                      .trans_b = trans_b,
                      .c = c,
                      .ldc = ldc,
                      .alpha = alpha,
                      .beta = beta,
                      .batch = 1};
  td_cpu_gemm(&g, 1);
}

/* Shape and pointers of one call: element offsets of q, k, v, o rows in the
 * [B, T, H, 3, D] and [B, T, H, D] layouts. */
typedef struct {
  int64_t B, T, H, D;
  td_dtype dt;
  size_t esz;
  int64_t ld_qkv, ld_o; /* row (token) strides in elements: 3*H*D and H*D */
  int64_t nqb;          /* query blocks per head */
  td_attn_dropout dr;
  row_kernels rk;
} attn_shape;

static attn_shape shape_of(const td_attention_desc *a) {
  TD_CHECK(a->batch > 0 && a->seq > 0 && a->heads > 0 && a->head_dim > 0,
           "empty attention B=%lld T=%lld H=%lld D=%lld", (long long)a->batch, (long long)a->seq,
           (long long)a->heads, (long long)a->head_dim);
  TD_CHECK(a->dtype == TD_F32 || a->dtype == TD_BF16, "attention dtype must be fp32 or bf16");
  TD_CHECK(a->dropout_p >= 0.0f && a->dropout_p < 1.0f, "attention dropout p = %g not in [0, 1)",
           (double)a->dropout_p);
  TD_CHECK(a->head_start >= 0 && (a->heads_total ? a->head_start + a->heads <= a->heads_total
                                                 : a->head_start == 0),
           "attention heads [%lld, %lld) of %lld", (long long)a->head_start,
           (long long)(a->head_start + a->heads), (long long)a->heads_total);
  attn_shape s = {.B = a->batch,
                  .T = a->seq,
                  .H = a->heads,
                  .D = a->head_dim,
                  .dt = a->dtype,
                  .esz = td_dtype_size(a->dtype),
                  .rk = row_kernels_get()};
  s.ld_qkv = 3 * s.H * s.D;
  s.ld_o = s.H * s.D;
  s.nqb = (s.T + TD_ATTN_BQ - 1) / TD_ATTN_BQ;
  double thr = nearbyint((double)a->dropout_p * 4294967296.0);
  s.dr.thr = thr > 4294967295.0 ? 4294967295u : (uint32_t)thr;
  s.dr.keep_scale = 1.0f / (1.0f - a->dropout_p);
  return s;
}

/* Element offset of row t of q (which = 0), k (1) or v (2) of head h in qkv. */
static int64_t qkv_off(const attn_shape *s, int64_t b, int64_t h, int64_t t, int which) {
  return ((b * s->T + t) * s->H + h) * 3 * s->D + which * s->D;
}
static int64_t o_off(const attn_shape *s, int64_t b, int64_t h, int64_t t) {
  return ((b * s->T + t) * s->H + h) * s->D;
}

static const char *cptr(const void *p, const attn_shape *s, int64_t off) {
  return (const char *)p + off * (int64_t)s->esz;
}

static float load(const void *p, td_dtype dt, int64_t i) {
  return dt == TD_BF16 ? td_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* The random words of row i (query) of head (b, h) for keys [0, n), or NULL
 * without dropout. */
static const uint32_t *row_words(const attn_shape *s, const td_attention_desc *a, int64_t b,
                                 int64_t h, int64_t i, int64_t n, uint32_t *buf) {
  if (s->dr.thr == 0) return NULL;
  return s->rk.rng_row(a->seed, a->stream, td_attn_dropout_base(a, b, h) + (uint64_t)(i * s->T), n,
                       buf);
}

/* ------------------------------------------------------------------ forward */

/* Query rows [i0, i1) of head (b, h), at most TD_ATTN_BQ of them, against keys
 * [0, i1). */
static void forward_rows(const attn_shape *s, const td_attention_desc *a, int64_t b, int64_t h,
                         int64_t i0, int64_t i1) {
  const int64_t bq = i1 - i0, n = i1, D = s->D;
  size_t s_bytes = round64((size_t)(bq * n) * 4), p_bytes = round64((size_t)(bq * n) * 2);
  char *base = scratch(s_bytes + p_bytes + (size_t)(n + 67) * 4);
  float *S = (float *)base;
  void *P = s->dt == TD_BF16 ? (void *)(base + s_bytes) : (void *)S;
  uint32_t *rng = (uint32_t *)(base + s_bytes + p_bytes);
  /* S = Q[i0:i1] K[0:n]^T (scaled in the softmax) */
  gemm(bq, n, D, s->dt, TD_F32, cptr(a->qkv, s, qkv_off(s, b, h, i0, 0)), s->ld_qkv, 0,
       cptr(a->qkv, s, qkv_off(s, b, h, 0, 1)), s->ld_qkv, 1, S, n, 1.0f, 0.0f);
  for (int64_t r = 0; r < bq; r++) {
    int64_t i = i0 + r;
    const uint32_t *w = row_words(s, a, b, h, i, i + 1, rng);
    s->rk.softmax_row(S + r * n, i + 1, n, a->scale, w, s->dr, a->lse + (b * s->H + h) * s->T + i,
                      (char *)P + r * n * (int64_t)s->esz, s->dt);
  }
  /* O[i0:i1] = P' V[0:n] */
  gemm(bq, D, n, s->dt, s->dt, P, n, 0, cptr(a->qkv, s, qkv_off(s, b, h, 0, 2)), s->ld_qkv, 0,
       (char *)a->out + o_off(s, b, h, i0) * (int64_t)s->esz, s->ld_o, 1.0f, 0.0f);
}

static void forward_block(const attn_shape *s, const td_attention_desc *a, int64_t b, int64_t h,
                          int64_t qb) {
  const int64_t i0 = qb * TD_ATTN_BQ;
  forward_rows(s, a, b, h, i0, i0 + TD_ATTN_BQ < s->T ? i0 + TD_ATTN_BQ : s->T);
}

static void cpu_attention_forward(td_device *d, const td_attention_desc *a) {
  (void)d;
  const attn_shape s = shape_of(a);
  const int64_t bh = s.B * s.H, ntasks = bh * s.nqb;
  const head_kernels hk = head_kernels_get(s.dt);
  if (hk.forward) {
    const size_t bytes = hk.scratch_bytes(s.T, s.D, 0);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t t = 0; t < bh; t++) hk.forward(a, t, s.dr, scratch(bytes));
    return;
  }
  /* largest (last) query blocks first, for balance under dynamic scheduling */
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < ntasks; t++) {
    int64_t qb = s.nqb - 1 - t / bh, b = (t % bh) / s.H, h = t % s.H;
    forward_block(&s, a, b, h, qb);
  }
}

/* Rows [q0, q0 + nq) only, on the td_cpu_gemm path (a generated token is one row:
 * the per-head kernels' packing would cost more than its products). One task per
 * (head, block of TD_ATTN_BQ rows), the last blocks first. */
static void cpu_attention_forward_rows(td_device *d, const td_attention_desc *a, int64_t q0,
                                       int64_t nq) {
  (void)d;
  const attn_shape s = shape_of(a);
  TD_CHECK(a->batch == 1 && q0 >= 0 && nq > 0 && q0 + nq <= s.T,
           "attention rows [%lld, %lld) of a sequence of %lld (batch %lld; one sequence only)",
           (long long)q0, (long long)(q0 + nq), (long long)s.T, (long long)a->batch);
  const int64_t nb = (nq + TD_ATTN_BQ - 1) / TD_ATTN_BQ, ntasks = s.H * nb;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < ntasks; t++) {
    const int64_t i0 = q0 + (nb - 1 - t / s.H) * TD_ATTN_BQ, end = q0 + nq;
    forward_rows(&s, a, 0, t % s.H, i0, i0 + TD_ATTN_BQ < end ? i0 + TD_ATTN_BQ : end);
  }
}

/* ----------------------------------------------------------------- backward */

static void backward_head(const attn_shape *s, const td_attention_desc *a, int64_t b, int64_t h) {
  const int64_t T = s->T, D = s->D, bqmax = TD_ATTN_BQ < T ? TD_ATTN_BQ : T;
  const int bf16 = s->dt == TD_BF16;
  size_t sd_bytes = round64((size_t)(bqmax * T) * 4), pb_bytes = round64((size_t)(bqmax * T) * 2);
  size_t kv_bytes = round64((size_t)(T * D) * 4);
  char *base = scratch(2 * sd_bytes + (bf16 ? 2 * pb_bytes : 0) + 2 * kv_bytes +
                       round64((size_t)(T + 67) * 4));
  float *S = (float *)base, *dP = (float *)(base + sd_bytes);
  char *next = base + 2 * sd_bytes;
  void *P = S, *dS = dP; /* fp32: written in place */
  if (bf16) {
    P = next, dS = next + pb_bytes;
    next += 2 * pb_bytes;
  }
  float *dK = (float *)next, *dV = (float *)(next + kv_bytes);
  uint32_t *rng = (uint32_t *)(next + 2 * kv_bytes);
  const char *Q = cptr(a->qkv, s, qkv_off(s, b, h, 0, 0));
  const char *K = cptr(a->qkv, s, qkv_off(s, b, h, 0, 1));
  const char *V = cptr(a->qkv, s, qkv_off(s, b, h, 0, 2));
  const char *O = cptr(a->out, s, o_off(s, b, h, 0)), *dO = cptr(a->dout, s, o_off(s, b, h, 0));
  const float *lse = a->lse + (b * s->H + h) * T;
  const int64_t lq = s->ld_qkv * (int64_t)s->esz, lo = s->ld_o * (int64_t)s->esz; /* bytes */
  for (int64_t qb = s->nqb - 1; qb >= 0; qb--) {
    const int64_t i0 = qb * TD_ATTN_BQ, i1 = i0 + TD_ATTN_BQ < T ? i0 + TD_ATTN_BQ : T;
    const int64_t bq = i1 - i0, n = i1;
    const float beta = qb == s->nqb - 1 ? 0.0f : 1.0f; /* the last block covers every key */
    /* S = Q_blk K^T (scaled in the row kernel),  dP' = dO_blk V^T */
    gemm(bq, n, D, s->dt, TD_F32, Q + i0 * lq, s->ld_qkv, 0, K, s->ld_qkv, 1, S, n, 1.0f, 0.0f);
    gemm(bq, n, D, s->dt, TD_F32, dO + i0 * lo, s->ld_o, 0, V, s->ld_qkv, 1, dP, n, 1.0f, 0.0f);
    for (int64_t r = 0; r < bq; r++) {
      int64_t i = i0 + r;
      float di = 0.0f; /* rowsum(dO_i * O_i) */
      for (int64_t e = 0; e < D; e++)
        di += load(dO + i * lo, s->dt, e) * load(O + i * lo, s->dt, e);
      const uint32_t *w = row_words(s, a, b, h, i, i + 1, rng);
      s->rk.softmax_bwd_row(S + r * n, dP + r * n, i + 1, n, a->scale, w, s->dr, lse[i], di,
                            (char *)P + r * n * (int64_t)s->esz,
                            (char *)dS + r * n * (int64_t)s->esz, s->dt);
    }
    /* dV[0:n] += P'^T dO_blk,  dK[0:n] += scale dS^T Q_blk,  dQ_blk = scale dS K */
    gemm(n, D, bq, s->dt, TD_F32, P, n, 1, dO + i0 * lo, s->ld_o, 0, dV, D, 1.0f, beta);
    gemm(n, D, bq, s->dt, TD_F32, dS, n, 1, Q + i0 * lq, s->ld_qkv, 0, dK, D, a->scale, beta);
    gemm(bq, D, n, s->dt, s->dt, dS, n, 0, K, s->ld_qkv, 0,
         (char *)a->dqkv + qkv_off(s, b, h, i0, 0) * (int64_t)s->esz, s->ld_qkv, a->scale, 0.0f);
  }
  for (int64_t t = 0; t < T; t++) {
    char *row = (char *)a->dqkv + qkv_off(s, b, h, t, 1) * (int64_t)s->esz;
    if (bf16) {
      uint16_t *o = (uint16_t *)row;
      for (int64_t e = 0; e < D; e++) o[e] = td_f32_to_bf16(dK[t * D + e]);
      for (int64_t e = 0; e < D; e++) o[D + e] = td_f32_to_bf16(dV[t * D + e]);
    } else {
      memcpy(row, dK + t * D, (size_t)D * 4);
      memcpy(row + D * 4, dV + t * D, (size_t)D * 4);
    }
  }
}

static void cpu_attention_backward(td_device *d, const td_attention_desc *a) {
  (void)d;
  const attn_shape s = shape_of(a);
  const int64_t bh = s.B * s.H;
  const head_kernels hk = head_kernels_get(s.dt);
  if (hk.backward) {
    const size_t bytes = hk.scratch_bytes(s.T, s.D, 1);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t t = 0; t < bh; t++) hk.backward(a, t, s.dr, scratch(bytes));
    return;
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < bh; t++) backward_head(&s, a, t / s.H, t % s.H);
}

void td_cpu_register_attention(td_device_ops *ops) {
  ops->attention_forward = cpu_attention_forward;
  ops->attention_forward_rows = cpu_attention_forward_rows;
  ops->attention_backward = cpu_attention_backward;
}
