/* Portable C inner kernels of the elementwise group (cpu_ew.h), compiled for
 * baseline x86-64: row reductions in double, special functions from libm.
 * The reference the AVX-512 table is held to, and the path for CPUs without it. */
#include <math.h>
#include <string.h>

#include "base/dtype.h"
#include "base/rng.h"
#include "device/cpu/cpu_ew.h"

#define INV_SQRT_2PI 0.3989422804014327f
#define GELU_TANH_K0 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_TANH_K1 0.044715f

static void store_f32_or_bf16(void *out, td_dtype dt, int64_t i, float y) {
  if (dt == TD_BF16)
    ((uint16_t *)out)[i] = td_f32_to_bf16(y);
  else
    ((float *)out)[i] = y;
}

/* ---------------------------------------------------------------- layernorm */

/* mean = sum x / C; rstd = 1 / sqrt(sum (x - mean)^2 / C + eps); two passes in double */
static void layernorm_row(void *out, td_dtype out_dtype, float *mean_out, float *rstd_out,
                          const float *x, const float *w, const float *b, int64_t cols,
                          float eps) {
  double s = 0, ss = 0;
  for (int64_t c = 0; c < cols; c++) s += x[c];
  float mean = (float)(s / (double)cols);
  for (int64_t c = 0; c < cols; c++) {
    double d = (double)x[c] - mean;
    ss += d * d;
  }
  float rstd = (float)(1.0 / sqrt(ss / (double)cols + eps));
  if (out_dtype == TD_F32) {
    float *y = out;
#pragma omp simd
    for (int64_t c = 0; c < cols; c++) y[c] = (x[c] - mean) * rstd * w[c] + b[c];
  } else {
    for (int64_t c = 0; c < cols; c++)
      ((uint16_t *)out)[c] = td_f32_to_bf16((x[c] - mean) * rstd * w[c] + b[c]);
  }
  *mean_out = mean;
  *rstd_out = rstd;
}

static void layernorm_backward_row(float *dx, float *dw_acc, float *db_acc, const float *dout,
                                   const float *x, const float *w, float mean, float rstd,
                                   int64_t cols) {
  double s_dy = 0, s_dyx = 0; /* sum dout w, sum dout w xhat */
  for (int64_t c = 0; c < cols; c++) {
    float xhat = (x[c] - mean) * rstd, dyw = dout[c] * w[c];
    s_dy += dyw;
    s_dyx += (double)dyw * xhat;
  }
  float m_dy = (float)(s_dy / (double)cols), m_dyx = (float)(s_dyx / (double)cols);
#pragma omp simd
  for (int64_t c = 0; c < cols; c++) {
    float xhat = (x[c] - mean) * rstd, dyw = dout[c] * w[c];
    dx[c] += rstd * (dyw - m_dy - xhat * m_dyx);
    dw_acc[c] += dout[c] * xhat;
    db_acc[c] += dout[c];
  }
}

/* --------------------------------------------------------------------- gelu */

/* erf:  gelu(x) = x Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2 (no cancellation for x < 0)
 *       gelu'(x) = Phi(x) + x phi(x), phi(x) = exp(-x^2/2) / sqrt(2 pi)
 * tanh: 1 + tanh(u) = 2 sigmoid(z), z = 2u = 2 K0 (x + K1 x^3), so gelu(x) = x s,
 *       gelu'(x) = s + x s (1 - s) 2 K0 (1 + 3 K1 x^2); with e = exp(-|z|) <= 1,
 *       the two of s and 1 - s are 1 / (1 + e) and e / (1 + e): no overflow, and
 *       tiny values keep their relative accuracy. */
static float phi_cdf(float x) { return 0.5f * erfcf(-x * (float)M_SQRT1_2); }

/* s = sigmoid(z) and s1 = 1 - s */
static void sigmoid_pair(float z, float *s, float *s1) {
  float e = expf(-fabsf(z)), big = 1.0f / (1.0f + e), small = e * big;
  *s = z >= 0.0f ? big : small;
  *s1 = z >= 0.0f ? small : big;
}

static float gelu_value(float x, td_gelu_kind kind) {
  if (kind == TD_GELU_ERF) return x * phi_cdf(x);
  float s, s1;
  sigmoid_pair(2.0f * GELU_TANH_K0 * x * (1.0f + GELU_TANH_K1 * x * x), &s, &s1);
  return x * s;
}

static float gelu_grad(float x, td_gelu_kind kind) {
  if (kind == TD_GELU_ERF) {
    float xc = fminf(fmaxf(x, -16.0f), 16.0f); /* phi(16) underflows; keeps Inf * 0 out */
    return phi_cdf(x) + xc * expf(-0.5f * xc * xc) * INV_SQRT_2PI;
  }
  float x2 = x * x, s, s1;
  sigmoid_pair(2.0f * GELU_TANH_K0 * x * (1.0f + GELU_TANH_K1 * x2), &s, &s1);
  return s + x * s * s1 * (2.0f * GELU_TANH_K0) * (1.0f + 3.0f * GELU_TANH_K1 * x2);
}

static void gelu_forward(void *out, td_dtype out_dtype, const float *x, int64_t n,
                         td_gelu_kind kind) {
  for (int64_t i = 0; i < n; i++) store_f32_or_bf16(out, out_dtype, i, gelu_value(x[i], kind));
}

static void gelu_backward(float *dx, const float *dout, const float *x, int64_t n,
                          td_gelu_kind kind) {
  for (int64_t i = 0; i < n; i++) dx[i] = dout[i] * gelu_grad(x[i], kind);
}

/* ------------------------------------------------------------ add, scale */

static void add(float *out, const float *a, const float *b, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

static void scale(float *x, int64_t n, float alpha) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) x[i] *= alpha;
}

/* ------------------------------------------------------------------ dropout */

/* Element i is kept iff unit(td_rng_u32(seed, stream, first + i)) >= p; one Philox
 * block (rng.h's counter layout) gives the bits of counters 4j .. 4j+3. */
static void dropout(float *out, const float *resid, const float *x, int64_t i0, int64_t i1,
                    float p, uint64_t seed, uint64_t stream, uint64_t first) {
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  const float s = 1.0f / (1.0f - p);
  uint32_t bits[4];
  uint64_t have = UINT64_MAX; /* the block in bits */
  for (int64_t i = i0; i < i1; i++) {
    uint64_t k = first + (uint64_t)i, j = k / 4;
    if (j != have) {
      uint32_t ctr[4] = {(uint32_t)j, (uint32_t)(j >> 32), (uint32_t)stream,
                         (uint32_t)(stream >> 32)};
      td_philox4x32_10(ctr, key, bits);
      have = j;
    }
    float v = td_rng_bits_to_unit(bits[k % 4]) >= p ? x[i] * s : 0.0f;
    out[i] = resid ? resid[i] + v : v;
  }
}

/* ------------------------------------------------------------ cross-entropy */

static float load_f32_or_bf16(const void *x, td_dtype dt, int64_t i) {
  return dt == TD_BF16 ? td_bf16_to_f32(((const uint16_t *)x)[i]) : ((const float *)x)[i];
}

/* lse = max + log sum exp(x - max), the sum in double */
static float logsumexp_row(const void *logits, td_dtype logits_dtype, int64_t vocab) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < vocab; j++) mx = fmaxf(mx, load_f32_or_bf16(logits, logits_dtype, j));
  double s = 0;
  for (int64_t j = 0; j < vocab; j++) s += expf(load_f32_or_bf16(logits, logits_dtype, j) - mx);
  return (float)((double)mx + log(s));
}

static void softmax_grad_row(void *dlogits, td_dtype dtype, const void *logits,
                             td_dtype logits_dtype, float lse, float dloss, int64_t target,
                             int64_t vocab) {
  for (int64_t j = 0; j < vocab; j++) {
    float g = expf(load_f32_or_bf16(logits, logits_dtype, j) - lse) * dloss;
    if (j == target) g -= dloss;
    store_f32_or_bf16(dlogits, dtype, j, g);
  }
}

/* -------------------------------------------------------------------- adamw */

static void adamw(float *param, const float *grad, float *m, float *v, int64_t n,
                  const td_ew_adamw *c, uint16_t *copy_bf16) {
  for (int64_t i = 0; i < n; i++) {
    float g = grad[i] * c->grad_scale;
    float mi = c->beta1 * m[i] + (1.0f - c->beta1) * g;
    float vi = c->beta2 * v[i] + (1.0f - c->beta2) * g * g;
    float update = mi * c->inv_bc1 / (sqrtf(vi * c->inv_bc2) + c->eps);
    param[i] -= c->lr * (c->weight_decay * param[i] + update);
    m[i] = mi;
    v[i] = vi;
    if (copy_bf16) copy_bf16[i] = td_f32_to_bf16(param[i]);
  }
}

/* --------------------------------------------------------------------- cast */

/* Through fp32 (exact from bf16 and fp16) in pieces of 256, dtype.h's scalar rounding. */
static void load_f32(float *dst, const void *src, td_dtype dt, int64_t n) {
  const uint16_t *h = src;
  if (dt == TD_F32)
    memcpy(dst, src, (size_t)n * sizeof(float));
  else if (dt == TD_BF16)
    for (int64_t i = 0; i < n; i++) dst[i] = td_bf16_to_f32(h[i]);
  else
    for (int64_t i = 0; i < n; i++) dst[i] = td_f16_to_f32(h[i]);
}

static void store_from_f32(void *dst, td_dtype dt, const float *src, int64_t n) {
  uint16_t *h = dst;
  if (dt == TD_F32)
    memcpy(dst, src, (size_t)n * sizeof(float));
  else if (dt == TD_BF16)
    for (int64_t i = 0; i < n; i++) h[i] = td_f32_to_bf16(src[i]);
  else
    for (int64_t i = 0; i < n; i++) h[i] = td_f32_to_f16(src[i]);
}

static void cast(void *dst, td_dtype dst_dtype, const void *src, td_dtype src_dtype, int64_t n) {
  float buf[256];
  size_t ds = td_dtype_size(dst_dtype), ss = td_dtype_size(src_dtype);
  for (int64_t i = 0; i < n; i += 256) {
    int64_t len = n - i < 256 ? n - i : 256;
    load_f32(buf, (const char *)src + (size_t)i * ss, src_dtype, len);
    store_from_f32((char *)dst + (size_t)i * ds, dst_dtype, buf, len);
  }
}

static void zero(void *dst, size_t bytes, int stream) {
  (void)stream; /* portable C has no non-temporal stores */
  memset(dst, 0, bytes);
}

/* ------------------------------------------------------------- sum_squares */

/* four interleaved double accumulators, combined as (a0 + a1) + (a2 + a3) */
static double sum_squares(const float *x, int64_t n) {
  double a[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int q = 0; q < 4; q++) a[q] += (double)x[i + q] * x[i + q];
  for (; i < n; i++) a[0] += (double)x[i] * x[i];
  return (a[0] + a[1]) + (a[2] + a[3]);
}

const td_ew_isa td_cpu_ew_generic = {
    .layernorm_row = layernorm_row,
    .layernorm_backward_row = layernorm_backward_row,
    .gelu_forward = gelu_forward,
    .gelu_backward = gelu_backward,
    .add = add,
    .scale = scale,
    .dropout = dropout,
    .logsumexp_row = logsumexp_row,
    .softmax_grad_row = softmax_grad_row,
    .adamw = adamw,
    .cast = cast,
    .zero = zero,
    .sum_squares = sum_squares,
};
