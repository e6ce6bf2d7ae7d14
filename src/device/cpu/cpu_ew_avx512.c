/* AVX-512 inner kernels of the elementwise group (cpu_ew.h): 16 fp32 lanes,
 * row tails by masked loads and stores, exp / normal tail / bf16 rounding from
 * cpu_ew_avx512_math.h, Philox on 16 blocks at once for dropout. Same math as
 * cpu_ew_generic.c; row sums are in fp32 lanes reduced in a fixed order. */
#include <math.h>
#include <string.h>

#include "base/rng.h"
#include "device/cpu/cpu_ew.h"
#include "device/cpu/cpu_ew_avx512_math.h"

#define INV_SQRT_2PI 0.3989422804014327f

/* Streams are prefetched this far ahead: the hardware prefetcher alone leaves these
 * loops waiting on memory (GELU forward from DRAM: 1.27 -> 0.58 ns per element on
 * one core). Prefetches past the end of a buffer do not fault. */
#define PF_BYTES 2048
#define ALWAYS_INLINE inline __attribute__((always_inline))

static ALWAYS_INLINE void prefetch_ahead(const void *p) {
  _mm_prefetch((const char *)p + PF_BYTES, _MM_HINT_T0);
}
#define GELU_TANH_K0 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_TANH_K1 0.044715f

/* ---------------------------------------------------------------- layernorm */

static float row_mean(const float *x, int64_t cols) {
  __m512 s = _mm512_setzero_ps();
  for (int64_t c = 0; c < cols; c += 16) {
    prefetch_ahead(x + c);
    s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(v_mask(cols - c), x + c));
  }
  return _mm512_reduce_add_ps(s) / (float)cols;
}

/* sum (x - mean)^2 over the row (masked lanes contribute 0) */
static float row_sq_dev(const float *x, float mean, int64_t cols) {
  __m512 s = _mm512_setzero_ps(), m = V1(mean);
  for (int64_t c = 0; c < cols; c += 16) {
    __mmask16 k = v_mask(cols - c);
    __m512 d = _mm512_maskz_sub_ps(k, _mm512_maskz_loadu_ps(k, x + c), m);
    s = _mm512_fmadd_ps(d, d, s);
  }
  return _mm512_reduce_add_ps(s);
}

static void layernorm_row(void *out, td_dtype out_dtype, float *mean_out, float *rstd_out,
                          const float *x, const float *w, const float *b, int64_t cols,
                          float eps) {
  float mean = row_mean(x, cols);
  float rstd = 1.0f / sqrtf(row_sq_dev(x, mean, cols) / (float)cols + eps);
  __m512 m = V1(mean), r = V1(rstd);
  for (int64_t c = 0; c < cols; c += 16) {
    __mmask16 k = v_mask(cols - c);
    __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + c), m), r);
    __m512 y = _mm512_fmadd_ps(xhat, _mm512_maskz_loadu_ps(k, w + c),
                               _mm512_maskz_loadu_ps(k, b + c));
    v_store_f32_or_bf16(out, out_dtype, c, y, k);
  }
  *mean_out = mean;
  *rstd_out = rstd;
}

/* dx += rstd (dyw - mean(dyw) - xhat mean(dyw xhat)), dyw = dout w; masked lanes
 * load dout = w = 0, so they add nothing to the two row sums. */
static void layernorm_backward_row(float *dx, float *dw_acc, float *db_acc, const float *dout,
                                   const float *x, const float *w, float mean, float rstd,
                                   int64_t cols) {
  __m512 m = V1(mean), r = V1(rstd), s_dy = _mm512_setzero_ps(), s_dyx = _mm512_setzero_ps();
  for (int64_t c = 0; c < cols; c += 16) {
    __mmask16 k = v_mask(cols - c);
    prefetch_ahead(x + c), prefetch_ahead(dout + c), prefetch_ahead(dx + c);
    __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + c), m), r);
    __m512 dyw = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, dout + c), _mm512_maskz_loadu_ps(k, w + c));
    s_dy = _mm512_add_ps(s_dy, dyw);
    s_dyx = _mm512_fmadd_ps(dyw, xhat, s_dyx);
  }
  __m512 m_dy = V1(_mm512_reduce_add_ps(s_dy) / (float)cols);
  __m512 m_dyx = V1(_mm512_reduce_add_ps(s_dyx) / (float)cols);
  for (int64_t c = 0; c < cols; c += 16) {
    __mmask16 k = v_mask(cols - c);
    __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + c), m), r);
    __m512 dy = _mm512_maskz_loadu_ps(k, dout + c);
    __m512 dyw = _mm512_mul_ps(dy, _mm512_maskz_loadu_ps(k, w + c));
    /* dyw feeds an FMA, not a subtraction the compiler could contract with its
     * multiply: dyw - m_dy must cancel exactly when the row is constant */
    __m512 t = _mm512_sub_ps(_mm512_fnmadd_ps(xhat, m_dyx, dyw), m_dy);
    _mm512_mask_storeu_ps(dx + c, k, _mm512_fmadd_ps(r, t, _mm512_maskz_loadu_ps(k, dx + c)));
    __m512 dw = _mm512_fmadd_ps(dy, xhat, _mm512_maskz_loadu_ps(k, dw_acc + c));
    _mm512_mask_storeu_ps(dw_acc + c, k, dw);
    _mm512_mask_storeu_ps(db_acc + c, k, _mm512_add_ps(dy, _mm512_maskz_loadu_ps(k, db_acc + c)));
  }
}

/* --------------------------------------------------------------------- gelu */

/* The math is cpu_ew_generic.c's: erf form through Phi(x) = 1 - q (x > 0) or q,
 * q = Phi(-|x|) (x clamped to [-16, 16], where only the then exact 0 / 1 limits
 * are affected); tanh form as x sigmoid(z), z = 2u. */
static ALWAYS_INLINE __m512 clamp16(__m512 x) {
  return _mm512_min_ps(V1(16.0f), _mm512_max_ps(V1(-16.0f), x));
}

static ALWAYS_INLINE __m512 gelu_erf_phi(__m512 x, __m512 *gauss) {
  __m512 q = v_normal_tail(clamp16(x), gauss);
  __mmask16 pos = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ);
  return _mm512_mask_sub_ps(q, pos, V1(1.0f), q);
}

/* s = sigmoid(z) and *s1 = 1 - s for z = 2u = 2 K0 x (1 + K1 x^2): with
 * e = exp(-|z|), they are 1 / (1 + e) and e / (1 + e) (no overflow). */
static ALWAYS_INLINE __m512 gelu_tanh_sigmoid(__m512 x, __m512 x2, __m512 *s1) {
  __m512 z = _mm512_mul_ps(_mm512_mul_ps(V1(2.0f * GELU_TANH_K0), x),
                           _mm512_fmadd_ps(V1(GELU_TANH_K1), x2, V1(1.0f)));
  __m512 e = v_exp(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(z)));
  __m512 big = _mm512_div_ps(V1(1.0f), _mm512_add_ps(V1(1.0f), e));
  __m512 small = _mm512_mul_ps(e, big);
  __mmask16 pos = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_GE_OQ);
  *s1 = _mm512_mask_blend_ps(pos, big, small);
  return _mm512_mask_blend_ps(pos, small, big);
}

static ALWAYS_INLINE __m512 gelu_value(__m512 x, td_gelu_kind kind) {
  if (kind == TD_GELU_ERF) {
    __m512 g;
    return _mm512_mul_ps(x, gelu_erf_phi(x, &g));
  }
  __m512 s1;
  return _mm512_mul_ps(x, gelu_tanh_sigmoid(x, _mm512_mul_ps(x, x), &s1));
}

static ALWAYS_INLINE __m512 gelu_grad(__m512 x, td_gelu_kind kind) {
  if (kind == TD_GELU_ERF) {
    __m512 g, phi = gelu_erf_phi(x, &g);
    return _mm512_fmadd_ps(_mm512_mul_ps(clamp16(x), g), V1(INV_SQRT_2PI), phi);
  }
  __m512 x2 = _mm512_mul_ps(x, x), s1, s = gelu_tanh_sigmoid(x, x2, &s1);
  __m512 du = _mm512_fmadd_ps(V1(3.0f * GELU_TANH_K1), x2, V1(1.0f)); /* u' / K0 */
  __m512 t = _mm512_mul_ps(_mm512_mul_ps(x, s), _mm512_mul_ps(s1, du));
  return _mm512_fmadd_ps(t, V1(2.0f * GELU_TANH_K0), s);
}

/* Lanes k of elements [i, i + 16): the forward and backward steps. */
static ALWAYS_INLINE void gelu_forward_step(void *out, td_dtype out_dtype, const float *x,
                                            int64_t i, __mmask16 k, td_gelu_kind kind) {
  v_store_f32_or_bf16(out, out_dtype, i, gelu_value(_mm512_maskz_loadu_ps(k, x + i), kind), k);
}

static ALWAYS_INLINE void gelu_backward_step(float *dx, const float *dout, const float *x,
                                             int64_t i, __mmask16 k, td_gelu_kind kind) {
  __m512 g = gelu_grad(_mm512_maskz_loadu_ps(k, x + i), kind);
  _mm512_mask_storeu_ps(dx + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, dout + i), g));
}

/* One loop per kind (each fully inlined); whole vectors, then the masked tail. */
static void gelu_forward(void *out, td_dtype out_dtype, const float *x, int64_t n,
                         td_gelu_kind kind) {
  int64_t i = 0;
  if (kind == TD_GELU_ERF)
    for (; i + 16 <= n; i += 16) {
      prefetch_ahead(x + i);
      gelu_forward_step(out, out_dtype, x, i, 0xffff, TD_GELU_ERF);
    }
  else
    for (; i + 16 <= n; i += 16) {
      prefetch_ahead(x + i);
      gelu_forward_step(out, out_dtype, x, i, 0xffff, TD_GELU_TANH);
    }
  if (i < n) gelu_forward_step(out, out_dtype, x, i, v_mask(n - i), kind);
}

static void gelu_backward(float *dx, const float *dout, const float *x, int64_t n,
                          td_gelu_kind kind) {
  int64_t i = 0;
  if (kind == TD_GELU_ERF)
    for (; i + 16 <= n; i += 16) {
      prefetch_ahead(x + i), prefetch_ahead(dout + i);
      gelu_backward_step(dx, dout, x, i, 0xffff, TD_GELU_ERF);
    }
  else
    for (; i + 16 <= n; i += 16) {
      prefetch_ahead(x + i), prefetch_ahead(dout + i);
      gelu_backward_step(dx, dout, x, i, 0xffff, TD_GELU_TANH);
    }
  if (i < n) gelu_backward_step(dx, dout, x, i, v_mask(n - i), kind);
}

/* ------------------------------------------------------------ add, scale */

static void add(float *out, const float *a, const float *b, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 k = v_mask(n - i);
    prefetch_ahead(a + i), prefetch_ahead(b + i);
    __m512 s = _mm512_add_ps(_mm512_maskz_loadu_ps(k, a + i), _mm512_maskz_loadu_ps(k, b + i));
    _mm512_mask_storeu_ps(out + i, k, s);
  }
}

static void scale(float *x, int64_t n, float alpha) {
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 k = v_mask(n - i);
    prefetch_ahead(x + i);
    _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), V1(alpha)));
  }
}

/* ------------------------------------------------------------------ dropout */

/* High 32 bits of the 32x32 products a * m, lane by lane (m the same in all lanes). */
static __m512i mulhi_epu32(__m512i a, __m512i m) {
  __m512i even = _mm512_srli_epi64(_mm512_mul_epu32(a, m), 32);
  __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
  return _mm512_mask_blend_epi32(0xAAAA, even, odd);
}

/* Philox4x32-10 (rng.c) on 16 counters at once: c[w] holds word w of each block. */
static void philox16(__m512i c[4], uint64_t seed) {
  const __m512i m0 = _mm512_set1_epi32((int)0xD2511F53u), m1 = _mm512_set1_epi32((int)0xCD9E8D57u);
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    if (r > 0) k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
    __m512i hi0 = mulhi_epu32(c[0], m0), lo0 = _mm512_mullo_epi32(c[0], m0);
    __m512i hi1 = mulhi_epu32(c[2], m1), lo1 = _mm512_mullo_epi32(c[2], m1);
    c[0] = _mm512_xor_si512(_mm512_xor_si512(hi1, c[1]), _mm512_set1_epi32((int)k0));
    c[1] = lo1;
    c[2] = _mm512_xor_si512(_mm512_xor_si512(hi0, c[3]), _mm512_set1_epi32((int)k1));
    c[3] = lo0;
  }
}

/* Lanes whose unit(bits) >= p: unit = (bits >> 8) 2^-24 + 2^-25 as in rng.h (the
 * product is exact, so the FMA rounds like the scalar multiply-add). */
static __mmask16 keep_lanes(__m512i bits, __m512 p) {
  __m512 hi24 = _mm512_cvtepi32_ps(_mm512_srli_epi32(bits, 8));
  __m512 u = _mm512_fmadd_ps(hi24, V1(5.9604644775390625e-8f), V1(2.98023223876953125e-8f));
  return _mm512_cmp_ps_mask(u, p, _CMP_GE_OQ);
}

/* Keep bits of elements 64 G .. 64 G + 63 (blocks 16 G .. 16 G + 15): element
 * 4 j + w uses word w of block j, so the four word masks are interleaved. */
static uint64_t keep_bits64(uint64_t group, __m512 p, uint64_t seed, uint64_t stream) {
  uint64_t j0 = group * 16;
  __m512i c[4] = {
      _mm512_add_epi32(_mm512_set1_epi32((int)(uint32_t)j0),
                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)),
      _mm512_set1_epi32((int)(uint32_t)(j0 >> 32)), _mm512_set1_epi32((int)(uint32_t)stream),
      _mm512_set1_epi32((int)(uint32_t)(stream >> 32))};
  philox16(c, seed);
  return _pdep_u64(keep_lanes(c[0], p), 0x1111111111111111ull) |
         _pdep_u64(keep_lanes(c[1], p), 0x2222222222222222ull) |
         _pdep_u64(keep_lanes(c[2], p), 0x4444444444444444ull) |
         _pdep_u64(keep_lanes(c[3], p), 0x8888888888888888ull);
}

/* Element i draws counter first + i (mod 2^64, as the portable kernel does):
 * counters go in groups of 64 (one keep_bits64); a whole group in [i0, i1) is
 * done 16 lanes at a time, the partial groups at the ends element by element. */
static void dropout(float *out, const float *resid, const float *x, int64_t i0, int64_t i1,
                    float p, uint64_t seed, uint64_t stream, uint64_t first) {
  const float scale = 1.0f / (1.0f - p);
  const __m512 vp = V1(p), s = V1(scale);
  for (int64_t e = i0; e < i1;) {
    const uint64_t c = first + (uint64_t)e;
    const int64_t off = (int64_t)(c & 63), n = i1 - e < 64 - off ? i1 - e : 64 - off;
    const uint64_t keep = keep_bits64(c / 64, vp, seed, stream);
    if (n == 64) {
      for (int q = 0; q < 64; q += 16) {
        __m512 v = _mm512_maskz_mul_ps((__mmask16)(keep >> q), _mm512_loadu_ps(x + e + q), s);
        if (resid) v = _mm512_add_ps(_mm512_loadu_ps(resid + e + q), v);
        _mm512_storeu_ps(out + e + q, v);
      }
    } else {
      for (int64_t k = 0; k < n; k++) {
        float v = (keep >> (off + k)) & 1 ? x[e + k] * scale : 0.0f;
        out[e + k] = resid ? resid[e + k] + v : v;
      }
    }
    e += n;
  }
}

/* ------------------------------------------------------------ cross-entropy */

/* 16 logits from element j, fp32 or bf16; lanes outside k are 0 */
static ALWAYS_INLINE __m512 load_logits(const void *x, td_dtype dt, int64_t j, __mmask16 k) {
  if (dt == TD_BF16) return v_from_bf16(_mm256_maskz_loadu_epi16(k, (const uint16_t *)x + j));
  return _mm512_maskz_loadu_ps(k, (const float *)x + j);
}

static float row_max(const void *x, td_dtype dt, int64_t n) {
  const size_t es = td_dtype_size(dt);
  __m512 m = V1(-INFINITY);
  for (int64_t j = 0; j < n; j += 16) {
    __mmask16 k = v_mask(n - j);
    prefetch_ahead((const char *)x + (size_t)j * es);
    m = _mm512_mask_max_ps(m, k, m, load_logits(x, dt, j, k));
  }
  return _mm512_reduce_max_ps(m);
}

/* sum exp(x - mx) over pieces of 2048 in fp32 lanes, the pieces added in double */
static double row_sum_exp(const void *x, td_dtype dt, int64_t n, float mx) {
  double total = 0;
  for (int64_t j0 = 0; j0 < n; j0 += 2048) {
    int64_t j1 = n - j0 < 2048 ? n : j0 + 2048;
    __m512 s = _mm512_setzero_ps();
    for (int64_t j = j0; j < j1; j += 16) {
      __mmask16 k = v_mask(j1 - j);
      __m512 e = v_exp(_mm512_sub_ps(load_logits(x, dt, j, k), V1(mx)));
      s = _mm512_mask_add_ps(s, k, s, e);
    }
    total += _mm512_reduce_add_ps(s);
  }
  return total;
}

static float logsumexp_row(const void *logits, td_dtype logits_dtype, int64_t vocab) {
  float mx = row_max(logits, logits_dtype, vocab);
  return (float)((double)mx + log(row_sum_exp(logits, logits_dtype, vocab, mx)));
}

static void softmax_grad_row(void *dlogits, td_dtype dtype, const void *logits,
                             td_dtype logits_dtype, float lse, float dloss, int64_t target,
                             int64_t vocab) {
  const size_t es = td_dtype_size(logits_dtype);
  for (int64_t j = 0; j < vocab; j += 16) {
    __mmask16 k = v_mask(vocab - j);
    prefetch_ahead((const char *)logits + (size_t)j * es);
    __m512 e = v_exp(_mm512_sub_ps(load_logits(logits, logits_dtype, j, k), V1(lse)));
    __m512 g = _mm512_mul_ps(e, V1(dloss));
    if (target >= j && target < j + 16) /* the one-hot term, on the product's fp32 */
      g = _mm512_mask_sub_ps(g, (__mmask16)(1u << (target - j)), g, V1(dloss));
    v_store_f32_or_bf16(dlogits, dtype, j, g, k);
  }
}

/* -------------------------------------------------------------------- adamw */

static void adamw(float *param, const float *grad, float *m, float *v, int64_t n,
                  const td_ew_adamw *c, uint16_t *copy_bf16) {
  const __m512 b1 = V1(c->beta1), b2 = V1(c->beta2), a1 = V1(1.0f - c->beta1);
  const __m512 a2 = V1(1.0f - c->beta2), ib1 = V1(c->inv_bc1), ib2 = V1(c->inv_bc2);
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 k = v_mask(n - i);
    prefetch_ahead(param + i), prefetch_ahead(grad + i);
    prefetch_ahead(m + i), prefetch_ahead(v + i);
    __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, grad + i), V1(c->grad_scale));
    __m512 mi = _mm512_fmadd_ps(b1, _mm512_maskz_loadu_ps(k, m + i), _mm512_mul_ps(a1, g));
    __m512 vi = _mm512_fmadd_ps(b2, _mm512_maskz_loadu_ps(k, v + i),
                                _mm512_mul_ps(_mm512_mul_ps(a2, g), g));
    __m512 den = _mm512_add_ps(_mm512_sqrt_ps(_mm512_mul_ps(vi, ib2)), V1(c->eps));
    __m512 upd = _mm512_div_ps(_mm512_mul_ps(mi, ib1), den);
    __m512 p = _mm512_maskz_loadu_ps(k, param + i);
    __m512 step = _mm512_fmadd_ps(V1(c->weight_decay), p, upd);
    __m512 np = _mm512_fnmadd_ps(V1(c->lr), step, p);
    _mm512_mask_storeu_ps(param + i, k, np);
    _mm512_mask_storeu_ps(m + i, k, mi);
    _mm512_mask_storeu_ps(v + i, k, vi);
    if (copy_bf16) _mm256_mask_storeu_epi16(copy_bf16 + i, k, v_to_bf16(np));
  }
}

/* --------------------------------------------------------------------- cast */

/* fp16 -> fp32 by vcvtph2ps, except NaNs: td_f16_to_f32 keeps a signalling NaN's
 * payload as is (sign | 0x7f800000 | m << 13) where the instruction quiets it. */
static __m512 from_f16(__m256i h16) {
  __m512i h = _mm512_cvtepu16_epi32(h16);
  __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(h, _mm512_set1_epi32(0x7fff)),
                                          _mm512_set1_epi32(0x7c00));
  __m512i sign = _mm512_slli_epi32(_mm512_and_si512(h, _mm512_set1_epi32(0x8000)), 16);
  __m512i mant = _mm512_slli_epi32(_mm512_and_si512(h, _mm512_set1_epi32(0x3ff)), 13);
  __m512i bits = _mm512_or_si512(_mm512_or_si512(sign, mant), _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_mov_ps(_mm512_cvtph_ps(h16), nan, _mm512_castsi512_ps(bits));
}

static __m512 load16(const void *src, td_dtype dt, int64_t i, __mmask16 k) {
  if (dt == TD_F32) return _mm512_maskz_loadu_ps(k, (const float *)src + i);
  __m256i h = _mm256_maskz_loadu_epi16(k, (const uint16_t *)src + i);
  return dt == TD_BF16 ? v_from_bf16(h) : from_f16(h);
}

static void store16(void *dst, td_dtype dt, int64_t i, __m512 y, __mmask16 k) {
  if (dt == TD_F16)
    _mm256_mask_storeu_epi16((uint16_t *)dst + i, k,
                             _mm512_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  else
    v_store_f32_or_bf16(dst, dt, i, y, k);
}

/* Through fp32; vcvtps2ph rounds to nearest even and keeps subnormals and NaN
 * payloads exactly as td_f32_to_f16 (checked on all 2^32 inputs). (Streaming
 * stores measured slower here: 27.6 -> 30.2 ms for the 124M-weight bf16 copy.) */
static void cast(void *dst, td_dtype dst_dtype, const void *src, td_dtype src_dtype, int64_t n) {
  size_t es = td_dtype_size(src_dtype);
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 k = v_mask(n - i);
    prefetch_ahead((const char *)src + (size_t)i * es);
    store16(dst, dst_dtype, i, load16(src, src_dtype, i, k), k);
  }
}

/* ---------------------------------------------- gelu on fp32 or bf16 input */

/* One loop per kind and x dtype (each inlined whole): 16 lanes a step, the tail
 * masked. The math and the roundings of gelu_forward / gelu_backward, cast and
 * the row sum, so the bits are theirs (x widened from bf16 exactly). */
static ALWAYS_INLINE void gelu_forward_x_kind(void *out, td_dtype out_dtype, const void *x,
                                              td_dtype x_dtype, int64_t n, td_gelu_kind kind) {
  const size_t xs = x_dtype == TD_F32 ? 4 : 2;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = v_mask(n - i);
    prefetch_ahead((const char *)x + (size_t)i * xs);
    v_store_f32_or_bf16(out, out_dtype, i, gelu_value(load16(x, x_dtype, i, k), kind), k);
  }
}

static void gelu_forward_x(void *out, td_dtype out_dtype, const void *x, td_dtype x_dtype,
                           int64_t n, td_gelu_kind kind) {
  if (kind == TD_GELU_ERF)
    x_dtype == TD_F32 ? gelu_forward_x_kind(out, out_dtype, x, TD_F32, n, TD_GELU_ERF)
                      : gelu_forward_x_kind(out, out_dtype, x, TD_BF16, n, TD_GELU_ERF);
  else
    x_dtype == TD_F32 ? gelu_forward_x_kind(out, out_dtype, x, TD_F32, n, TD_GELU_TANH)
                      : gelu_forward_x_kind(out, out_dtype, x, TD_BF16, n, TD_GELU_TANH);
}

static ALWAYS_INLINE void gelu_backward_x_kind(void *dx, td_dtype dx_dtype, float *acc,
                                               const float *dout, const void *x,
                                               td_dtype x_dtype, int64_t n,
                                               td_gelu_kind kind) {
  const size_t xs = x_dtype == TD_F32 ? 4 : 2;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = v_mask(n - i);
    prefetch_ahead((const char *)x + (size_t)i * xs), prefetch_ahead(dout + i);
    __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, dout + i),
                             gelu_grad(load16(x, x_dtype, i, k), kind));
    v_store_f32_or_bf16(dx, dx_dtype, i, g, k);
    if (acc) _mm512_mask_storeu_ps(acc + i, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, acc + i), g));
  }
}

static void gelu_backward_x(void *dx, td_dtype dx_dtype, float *acc, const float *dout,
                            const void *x, td_dtype x_dtype, int64_t n, td_gelu_kind kind) {
  if (kind == TD_GELU_ERF)
    x_dtype == TD_F32
        ? gelu_backward_x_kind(dx, dx_dtype, acc, dout, x, TD_F32, n, TD_GELU_ERF)
        : gelu_backward_x_kind(dx, dx_dtype, acc, dout, x, TD_BF16, n, TD_GELU_ERF);
  else
    x_dtype == TD_F32
        ? gelu_backward_x_kind(dx, dx_dtype, acc, dout, x, TD_F32, n, TD_GELU_TANH)
        : gelu_backward_x_kind(dx, dx_dtype, acc, dout, x, TD_BF16, n, TD_GELU_TANH);
}

/* Plain stores up to a 64-byte boundary, streaming stores of whole lines, plain
 * stores for the tail. */
static void zero(void *dst, size_t bytes, int stream) {
  char *d = dst;
  size_t head = stream ? (64 - (uintptr_t)d % 64) % 64 : bytes;
  if (head > bytes) head = bytes;
  memset(d, 0, head);
  size_t i = head;
  for (; i + 64 <= bytes; i += 64) _mm512_stream_si512((void *)(d + i), _mm512_setzero_si512());
  memset(d + i, 0, bytes - i);
  if (stream) _mm_sfence();
}

/* ------------------------------------------------------------- sum_squares */

/* Elements [i, i + 16) of x (lanes k) into the accumulators of their low and high
 * halves. */
static ALWAYS_INLINE void sum_squares_step(__m512d *a0, __m512d *a1, const float *x, __mmask16 k) {
  __m512 v = _mm512_maskz_loadu_ps(k, x);
  __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
  __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1));
  *a0 = _mm512_fmadd_pd(lo, lo, *a0);
  *a1 = _mm512_fmadd_pd(hi, hi, *a1);
}

/* two 8-lane double accumulators (low / high halves of each 16), then reduced */
static double sum_squares(const float *x, int64_t n) {
  __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
  for (int64_t i = 0; i < n; i += 16) {
    prefetch_ahead(x + i);
    sum_squares_step(&a0, &a1, x + i, v_mask(n - i));
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
}

/* sum_squares of four pieces side by side, each with its own accumulators in its
 * order: from memory, four streams read ~1.4x faster than one (0.5 GB of
 * gradients on 2 cores of an Emerald Rapids VM: 25-29 -> 20 ms). */
static void sum_squares4(const float *x, int64_t piece, double out[4]) {
  __m512d a0[4], a1[4];
  for (int p = 0; p < 4; p++) a0[p] = a1[p] = _mm512_setzero_pd();
  for (int64_t i = 0; i < piece; i += 16) {
    const __mmask16 k = v_mask(piece - i);
    for (int p = 0; p < 4; p++) {
      const float *xp = x + p * piece + i;
      prefetch_ahead(xp);
      sum_squares_step(&a0[p], &a1[p], xp, k);
    }
  }
  for (int p = 0; p < 4; p++) out[p] = _mm512_reduce_add_pd(_mm512_add_pd(a0[p], a1[p]));
}

const td_ew_isa td_cpu_ew_avx512 = {
    .layernorm_row = layernorm_row,
    .layernorm_backward_row = layernorm_backward_row,
    .gelu_forward = gelu_forward,
    .gelu_backward = gelu_backward,
    .gelu_forward_x = gelu_forward_x,
    .gelu_backward_x = gelu_backward_x,
    .add = add,
    .scale = scale,
    .dropout = dropout,
    .logsumexp_row = logsumexp_row,
    .softmax_grad_row = softmax_grad_row,
    .adamw = adamw,
    .cast = cast,
    .zero = zero,
    .sum_squares = sum_squares,
    .sum_squares4 = sum_squares4,
};
