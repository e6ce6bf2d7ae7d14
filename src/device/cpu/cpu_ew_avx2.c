/* AVX2 inner kernels of the elementwise group (cpu_ew.h), for CPUs without
 * AVX-512 (AMD Zen 2/3, Intel client cores): 8 fp32 lanes, AVX2 + FMA + F16C.
 * A port of cpu_ew_avx512.c with the same math, operation for operation: exp,
 * normal tail and bf16 rounding from cpu_ew_avx2_math.h, Philox on 8 blocks at
 * once for dropout. Row sums keep the AVX-512 table's 16 lanes as two 8-lane
 * halves and reduce them in its fixed order, so the results match it bitwise.
 * Row tails use masked fp32 loads and stores, 16-bit ones a small buffer. */
#include <math.h>
#include <string.h>

#include "base/rng.h"
#include "device/cpu/cpu_ew.h"
#include "device/cpu/cpu_ew_avx2_math.h"

#define INV_SQRT_2PI 0.3989422804014327f
#define GELU_TANH_K0 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_TANH_K1 0.044715f

/* Streams are prefetched this far ahead, as in the AVX-512 table (the hardware
 * prefetcher alone leaves these loops waiting on memory). The loops step 16
 * elements (two vectors) so that one prefetch covers one 64-byte line of fp32.
 * Prefetches past the end of a buffer do not fault. */
#define PF_BYTES 2048

static ALWAYS_INLINE void prefetch_ahead(const void *p) {
  _mm_prefetch((const char *)p + PF_BYTES, _MM_HINT_T0);
}

/* Elements [i, i + 16) of x as two halves, lanes from left on 0 (the AVX-512
 * table's zero-masked 16-lane load); left > 0. */
static ALWAYS_INLINE void load16(const float *x, int64_t left, __m256 *lo, __m256 *hi) {
  *lo = v_load(x, left);
  *hi = left > 8 ? v_load(x + 8, left - 8) : _mm256_setzero_ps();
}

/* ---------------------------------------------------------------- layernorm */

static float row_mean(const float *x, int64_t cols) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), a, b;
  int64_t c = 0;
  for (; c + 16 <= cols; c += 16) {
    prefetch_ahead(x + c);
    load16(x + c, 16, &a, &b);
    s0 = _mm256_add_ps(s0, a), s1 = _mm256_add_ps(s1, b);
  }
  if (c < cols) {
    load16(x + c, cols - c, &a, &b);
    s0 = _mm256_add_ps(s0, a), s1 = _mm256_add_ps(s1, b);
  }
  return v_reduce_add16(s0, s1) / (float)cols;
}

/* (x - mean)^2 added to s (lanes [left, 8) add 0) */
static ALWAYS_INLINE __m256 sq_dev_step(__m256 s, const float *x, __m256 m, int64_t left) {
  __m256 d = left > 0 ? v_keep(_mm256_sub_ps(v_load(x, left), m), left) : _mm256_setzero_ps();
  return _mm256_fmadd_ps(d, d, s);
}

/* sum (x - mean)^2 over the row */
static float row_sq_dev(const float *x, float mean, int64_t cols) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), m = V1(mean);
  int64_t c = 0;
  for (; c + 16 <= cols; c += 16) {
    s0 = sq_dev_step(s0, x + c, m, 8);
    s1 = sq_dev_step(s1, x + c + 8, m, 8);
  }
  if (c < cols) {
    s0 = sq_dev_step(s0, x + c, m, cols - c);
    s1 = sq_dev_step(s1, x + c + 8, m, cols - c - 8);
  }
  return v_reduce_add16(s0, s1);
}

static ALWAYS_INLINE __m256 layernorm_y(const float *x, const float *w, const float *b,
                                         int64_t c, __m256 m, __m256 r, int64_t left) {
  __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(v_load(x + c, left), m), r);
  return _mm256_fmadd_ps(xhat, v_load(w + c, left), v_load(b + c, left));
}

static void layernorm_row(void *out, td_dtype out_dtype, float *mean_out, float *rstd_out,
                          const float *x, const float *w, const float *b, int64_t cols,
                          float eps) {
  float mean = row_mean(x, cols);
  float rstd = 1.0f / sqrtf(row_sq_dev(x, mean, cols) / (float)cols + eps);
  __m256 m = V1(mean), r = V1(rstd);
  int64_t c = 0;
  for (; c + 16 <= cols; c += 16)
    v_store16_f32_or_bf16(out, out_dtype, c, layernorm_y(x, w, b, c, m, r, 8),
                          layernorm_y(x, w, b, c + 8, m, r, 8));
  for (; c < cols; c += 8)
    v_store_f32_or_bf16(out, out_dtype, c, layernorm_y(x, w, b, c, m, r, cols - c), cols - c);
  *mean_out = mean;
  *rstd_out = rstd;
}

/* Sums of dyw = dout w and dyw xhat over 16 elements from c (lanes past the end
 * load dout = w = 0, so they add nothing). */
static ALWAYS_INLINE void ln_bwd_sums_step(__m256 s_dy[2], __m256 s_dyx[2], const float *dout,
                                           const float *x, const float *w, int64_t c, __m256 m,
                                           __m256 r, int64_t left) {
  __m256 xv[2], dv[2], wv[2];
  load16(x + c, left, &xv[0], &xv[1]);
  load16(dout + c, left, &dv[0], &dv[1]);
  load16(w + c, left, &wv[0], &wv[1]);
  for (int h = 0; h < 2; h++) {
    __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(xv[h], m), r), dyw = _mm256_mul_ps(dv[h], wv[h]);
    s_dy[h] = _mm256_add_ps(s_dy[h], dyw);
    s_dyx[h] = _mm256_fmadd_ps(dyw, xhat, s_dyx[h]);
  }
}

/* dx += rstd (dyw - m_dy - xhat m_dyx), dw_acc += dout xhat, db_acc += dout */
static ALWAYS_INLINE void ln_bwd_step(float *dx, float *dw_acc, float *db_acc, const float *dout,
                                      const float *x, const float *w, int64_t c, __m256 m,
                                      __m256 r, __m256 m_dy, __m256 m_dyx, int64_t left) {
  __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(v_load(x + c, left), m), r);
  __m256 dy = v_load(dout + c, left);
  __m256 dyw = _mm256_mul_ps(dy, v_load(w + c, left));
  /* dyw feeds an FMA, not a subtraction the compiler could contract with its
   * multiply: dyw - m_dy must cancel exactly when the row is constant */
  __m256 t = _mm256_sub_ps(_mm256_fnmadd_ps(xhat, m_dyx, dyw), m_dy);
  v_store(dx + c, _mm256_fmadd_ps(r, t, v_load(dx + c, left)), left);
  v_store(dw_acc + c, _mm256_fmadd_ps(dy, xhat, v_load(dw_acc + c, left)), left);
  v_store(db_acc + c, _mm256_add_ps(dy, v_load(db_acc + c, left)), left);
}

static void layernorm_backward_row(float *dx, float *dw_acc, float *db_acc, const float *dout,
                                   const float *x, const float *w, float mean, float rstd,
                                   int64_t cols) {
  const __m256 m = V1(mean), r = V1(rstd);
  __m256 s_dy[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  __m256 s_dyx[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t c = 0;
  for (; c + 16 <= cols; c += 16) {
    prefetch_ahead(x + c), prefetch_ahead(dout + c), prefetch_ahead(dx + c);
    ln_bwd_sums_step(s_dy, s_dyx, dout, x, w, c, m, r, 16);
  }
  if (c < cols) ln_bwd_sums_step(s_dy, s_dyx, dout, x, w, c, m, r, cols - c);
  const __m256 m_dy = V1(v_reduce_add16(s_dy[0], s_dy[1]) / (float)cols);
  const __m256 m_dyx = V1(v_reduce_add16(s_dyx[0], s_dyx[1]) / (float)cols);
  for (c = 0; c + 8 <= cols; c += 8)
    ln_bwd_step(dx, dw_acc, db_acc, dout, x, w, c, m, r, m_dy, m_dyx, 8);
  if (c < cols) ln_bwd_step(dx, dw_acc, db_acc, dout, x, w, c, m, r, m_dy, m_dyx, cols - c);
}

/* --------------------------------------------------------------------- gelu */

/* The math is cpu_ew_generic.c's: erf form through Phi(x) = 1 - q (x > 0) or q,
 * q = Phi(-|x|) (x clamped to [-16, 16], where only the then exact 0 / 1 limits
 * are affected); tanh form as x sigmoid(z), z = 2u. */
static ALWAYS_INLINE __m256 clamp16(__m256 x) {
  return _mm256_min_ps(V1(16.0f), _mm256_max_ps(V1(-16.0f), x));
}

static ALWAYS_INLINE __m256 gelu_erf_phi(__m256 x, __m256 *gauss) {
  __m256 q = v_normal_tail(clamp16(x), gauss);
  __m256 pos = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ);
  return _mm256_blendv_ps(q, _mm256_sub_ps(V1(1.0f), q), pos);
}

/* s = sigmoid(z) and *s1 = 1 - s for z = 2u = 2 K0 x (1 + K1 x^2): with
 * e = exp(-|z|), they are 1 / (1 + e) and e / (1 + e) (no overflow). */
static ALWAYS_INLINE __m256 gelu_tanh_sigmoid(__m256 x, __m256 x2, __m256 *s1) {
  __m256 z = _mm256_mul_ps(_mm256_mul_ps(V1(2.0f * GELU_TANH_K0), x),
                           _mm256_fmadd_ps(V1(GELU_TANH_K1), x2, V1(1.0f)));
  __m256 e = v_exp(_mm256_sub_ps(_mm256_setzero_ps(), v_abs(z)));
  __m256 big = _mm256_div_ps(V1(1.0f), _mm256_add_ps(V1(1.0f), e));
  __m256 small = _mm256_mul_ps(e, big);
  __m256 pos = _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_GE_OQ);
  *s1 = _mm256_blendv_ps(big, small, pos);
  return _mm256_blendv_ps(small, big, pos);
}

static ALWAYS_INLINE __m256 gelu_value(__m256 x, td_gelu_kind kind) {
  if (kind == TD_GELU_ERF) {
    __m256 g;
    return _mm256_mul_ps(x, gelu_erf_phi(x, &g));
  }
  __m256 s1;
  return _mm256_mul_ps(x, gelu_tanh_sigmoid(x, _mm256_mul_ps(x, x), &s1));
}

static ALWAYS_INLINE __m256 gelu_grad(__m256 x, td_gelu_kind kind) {
  if (kind == TD_GELU_ERF) {
    __m256 g, phi = gelu_erf_phi(x, &g);
    return _mm256_fmadd_ps(_mm256_mul_ps(clamp16(x), g), V1(INV_SQRT_2PI), phi);
  }
  __m256 x2 = _mm256_mul_ps(x, x), s1, s = gelu_tanh_sigmoid(x, x2, &s1);
  __m256 du = _mm256_fmadd_ps(V1(3.0f * GELU_TANH_K1), x2, V1(1.0f)); /* u' / K0 */
  __m256 t = _mm256_mul_ps(_mm256_mul_ps(x, s), _mm256_mul_ps(s1, du));
  return _mm256_fmadd_ps(t, V1(2.0f * GELU_TANH_K0), s);
}

/* Elements [i, i + min(left, 8)): the forward and backward steps. */
static ALWAYS_INLINE void gelu_forward_step(void *out, td_dtype out_dtype, const float *x,
                                            int64_t i, int64_t left, td_gelu_kind kind) {
  v_store_f32_or_bf16(out, out_dtype, i, gelu_value(v_load(x + i, left), kind), left);
}

static ALWAYS_INLINE void gelu_forward_step16(void *out, td_dtype out_dtype, const float *x,
                                              int64_t i, td_gelu_kind kind) {
  __m256 y0 = gelu_value(_mm256_loadu_ps(x + i), kind);
  v_store16_f32_or_bf16(out, out_dtype, i, y0, gelu_value(_mm256_loadu_ps(x + i + 8), kind));
}

static ALWAYS_INLINE void gelu_backward_step(float *dx, const float *dout, const float *x,
                                             int64_t i, int64_t left, td_gelu_kind kind) {
  __m256 g = gelu_grad(v_load(x + i, left), kind);
  v_store(dx + i, _mm256_mul_ps(v_load(dout + i, left), g), left);
}

/* One loop per kind (each fully inlined): 16 elements a step, then the tail. */
static ALWAYS_INLINE void gelu_forward_kind(void *out, td_dtype out_dtype, const float *x,
                                            int64_t n, td_gelu_kind kind) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    prefetch_ahead(x + i);
    gelu_forward_step16(out, out_dtype, x, i, kind);
  }
  for (; i < n; i += 8) gelu_forward_step(out, out_dtype, x, i, n - i, kind);
}

static void gelu_forward(void *out, td_dtype out_dtype, const float *x, int64_t n,
                         td_gelu_kind kind) {
  if (kind == TD_GELU_ERF)
    gelu_forward_kind(out, out_dtype, x, n, TD_GELU_ERF);
  else
    gelu_forward_kind(out, out_dtype, x, n, TD_GELU_TANH);
}

static ALWAYS_INLINE void gelu_backward_kind(float *dx, const float *dout, const float *x,
                                             int64_t n, td_gelu_kind kind) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    prefetch_ahead(x + i), prefetch_ahead(dout + i);
    gelu_backward_step(dx, dout, x, i, 8, kind);
    gelu_backward_step(dx, dout, x, i + 8, 8, kind);
  }
  for (; i < n; i += 8) gelu_backward_step(dx, dout, x, i, n - i, kind);
}

static void gelu_backward(float *dx, const float *dout, const float *x, int64_t n,
                          td_gelu_kind kind) {
  if (kind == TD_GELU_ERF)
    gelu_backward_kind(dx, dout, x, n, TD_GELU_ERF);
  else
    gelu_backward_kind(dx, dout, x, n, TD_GELU_TANH);
}

/* ------------------------------------------------------------ add, scale */

static ALWAYS_INLINE void add_step(float *out, const float *a, const float *b, int64_t left) {
  v_store(out, _mm256_add_ps(v_load(a, left), v_load(b, left)), left);
}

static void add(float *out, const float *a, const float *b, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    prefetch_ahead(a + i), prefetch_ahead(b + i);
    add_step(out + i, a + i, b + i, 8);
    add_step(out + i + 8, a + i + 8, b + i + 8, 8);
  }
  for (; i < n; i += 8) add_step(out + i, a + i, b + i, n - i);
}

static ALWAYS_INLINE void scale_step(float *x, __m256 alpha, int64_t left) {
  v_store(x, _mm256_mul_ps(v_load(x, left), alpha), left);
}

static void scale(float *x, int64_t n, float alpha) {
  const __m256 a = V1(alpha);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    prefetch_ahead(x + i);
    scale_step(x + i, a, 8);
    scale_step(x + i + 8, a, 8);
  }
  for (; i < n; i += 8) scale_step(x + i, a, n - i);
}

/* ------------------------------------------------------------------ dropout */

/* The high and low 32 bits of the 32x32 products a * m, lane by lane (m the same
 * in all lanes): vpmuludq multiplies the even lanes; the odd ones are shifted
 * down for a second one. (Cheaper than vpmulld for the low halves.) */
static ALWAYS_INLINE void mul_wide(__m256i a, __m256i m, __m256i *hi, __m256i *lo) {
  __m256i even = _mm256_mul_epu32(a, m), odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
  *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
}

/* Philox4x32-10 (rng.c) on 8 counters at once: c[w] holds word w of each block. */
static void philox8(__m256i c[4], uint64_t seed) {
  const __m256i m0 = _mm256_set1_epi32((int)0xD2511F53u), m1 = _mm256_set1_epi32((int)0xCD9E8D57u);
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    if (r > 0) k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
    __m256i hi0, lo0, hi1, lo1;
    mul_wide(c[0], m0, &hi0, &lo0);
    mul_wide(c[2], m1, &hi1, &lo1);
    c[0] = _mm256_xor_si256(_mm256_xor_si256(hi1, c[1]), _mm256_set1_epi32((int)k0));
    c[1] = lo1;
    c[2] = _mm256_xor_si256(_mm256_xor_si256(hi0, c[3]), _mm256_set1_epi32((int)k1));
    c[3] = lo0;
  }
}

/* Lanes whose unit(bits) >= p, as all-ones lanes: unit = (bits >> 8) 2^-24 + 2^-25
 * as in rng.h (the product is exact, so the FMA rounds like the scalar multiply-add). */
static ALWAYS_INLINE __m256 keep_lanes(__m256i bits, __m256 p) {
  __m256 hi24 = _mm256_cvtepi32_ps(_mm256_srli_epi32(bits, 8));
  __m256 u = _mm256_fmadd_ps(hi24, V1(5.9604644775390625e-8f), V1(2.98023223876953125e-8f));
  return _mm256_cmp_ps(u, p, _CMP_GE_OQ);
}

/* Keep masks of the 32 elements of blocks j0 .. j0 + 7 (j0 a multiple of 8), k[q]
 * for their elements 8 q .. 8 q + 7. Element 4 j + w uses word w of block j: the
 * lanes hold blocks 0 2 4 6 | 1 3 5 7, so that a 4x4 transpose within each 128-bit
 * half puts the words in element order (no lane crossing). */
static void keep_masks32(__m256 k[4], uint64_t j0, __m256 p, uint64_t seed, uint64_t stream) {
  __m256i c[4] = {
      _mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)j0),
                       _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7)),
      _mm256_set1_epi32((int)(uint32_t)(j0 >> 32)), _mm256_set1_epi32((int)(uint32_t)stream),
      _mm256_set1_epi32((int)(uint32_t)(stream >> 32))};
  philox8(c, seed);
  __m256i t0 = _mm256_unpacklo_epi32(c[0], c[1]), t1 = _mm256_unpacklo_epi32(c[2], c[3]);
  __m256i t2 = _mm256_unpackhi_epi32(c[0], c[1]), t3 = _mm256_unpackhi_epi32(c[2], c[3]);
  k[0] = keep_lanes(_mm256_unpacklo_epi64(t0, t1), p); /* blocks 0 | 1 */
  k[1] = keep_lanes(_mm256_unpackhi_epi64(t0, t1), p); /* blocks 2 | 3 */
  k[2] = keep_lanes(_mm256_unpacklo_epi64(t2, t3), p); /* blocks 4 | 5 */
  k[3] = keep_lanes(_mm256_unpackhi_epi64(t2, t3), p); /* blocks 6 | 7 */
}

/* Element i draws counter first + i (mod 2^64, as the portable kernel does):
 * counters go in groups of 32 (one keep_masks32); a whole group in [i0, i1) is
 * done 8 lanes at a time, the partial groups at the ends element by element. */
static void dropout(float *out, const float *resid, const float *x, int64_t i0, int64_t i1,
                    float p, uint64_t seed, uint64_t stream, uint64_t first) {
  const float scale = 1.0f / (1.0f - p);
  const __m256 vp = V1(p), s = V1(scale);
  for (int64_t e = i0; e < i1;) {
    const uint64_t c = first + (uint64_t)e;
    const int64_t off = (int64_t)(c & 31), n = i1 - e < 32 - off ? i1 - e : 32 - off;
    __m256 k[4];
    keep_masks32(k, (c & ~(uint64_t)31) / 4, vp, seed, stream);
    if (n == 32) {
      for (int q = 0; q < 4; q++) {
        __m256 v = _mm256_and_ps(k[q], _mm256_mul_ps(_mm256_loadu_ps(x + e + 8 * q), s));
        if (resid) v = _mm256_add_ps(_mm256_loadu_ps(resid + e + 8 * q), v);
        _mm256_storeu_ps(out + e + 8 * q, v);
      }
    } else {
      uint32_t keep = 0;
      for (int q = 0; q < 4; q++) keep |= (uint32_t)_mm256_movemask_ps(k[q]) << (8 * q);
      for (int64_t i = 0; i < n; i++) {
        float v = (keep >> (off + i)) & 1 ? x[e + i] * scale : 0.0f;
        out[e + i] = resid ? resid[e + i] + v : v;
      }
    }
    e += n;
  }
}

/* ------------------------------------------------------------ cross-entropy */

/* 8 logits from element j, fp32 or bf16; lanes from left on are 0 */
static ALWAYS_INLINE __m256 load_logits(const void *x, td_dtype dt, int64_t j, int64_t left) {
  if (dt == TD_BF16) return v_from_bf16(v_load_u16((const uint16_t *)x + j, left));
  return v_load((const float *)x + j, left);
}

/* m = max(m, x) in lanes [0, left) */
static ALWAYS_INLINE __m256 max_step(__m256 m, const void *x, td_dtype dt, int64_t j,
                                     int64_t left) {
  if (left <= 0) return m;
  __m256 t = _mm256_max_ps(m, load_logits(x, dt, j, left));
  return left >= 8 ? t : _mm256_blendv_ps(m, t, _mm256_castsi256_ps(v_mask(left)));
}

static float row_max(const void *x, td_dtype dt, int64_t n) {
  const size_t es = td_dtype_size(dt);
  __m256 m0 = V1(-INFINITY), m1 = V1(-INFINITY);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    prefetch_ahead((const char *)x + (size_t)j * es);
    m0 = max_step(m0, x, dt, j, 8), m1 = max_step(m1, x, dt, j + 8, 8);
  }
  if (j < n) m0 = max_step(m0, x, dt, j, n - j), m1 = max_step(m1, x, dt, j + 8, n - j - 8);
  return v_reduce_max16(m0, m1);
}

/* s += exp(x - mx) in lanes [0, left) */
static ALWAYS_INLINE __m256 sum_exp_step(__m256 s, const void *x, td_dtype dt, int64_t j,
                                         __m256 mx, int64_t left) {
  if (left <= 0) return s;
  __m256 t = _mm256_add_ps(s, v_exp(_mm256_sub_ps(load_logits(x, dt, j, left), mx)));
  return left >= 8 ? t : _mm256_blendv_ps(s, t, _mm256_castsi256_ps(v_mask(left)));
}

/* sum exp(x - mx) over pieces of 2048 in fp32 lanes, the pieces added in double */
static double row_sum_exp(const void *x, td_dtype dt, int64_t n, float mx) {
  const __m256 m = V1(mx);
  double total = 0;
  for (int64_t j0 = 0; j0 < n; j0 += 2048) {
    int64_t j1 = n - j0 < 2048 ? n : j0 + 2048, j = j0;
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    for (; j + 16 <= j1; j += 16)
      s0 = sum_exp_step(s0, x, dt, j, m, 8), s1 = sum_exp_step(s1, x, dt, j + 8, m, 8);
    if (j < j1) {
      s0 = sum_exp_step(s0, x, dt, j, m, j1 - j);
      s1 = sum_exp_step(s1, x, dt, j + 8, m, j1 - j - 8);
    }
    total += v_reduce_add16(s0, s1);
  }
  return total;
}

static float logsumexp_row(const void *logits, td_dtype logits_dtype, int64_t vocab) {
  float mx = row_max(logits, logits_dtype, vocab);
  return (float)((double)mx + log(row_sum_exp(logits, logits_dtype, vocab, mx)));
}

/* g - dloss in lane `lane` of g: the one-hot term, on the product's fp32 */
static ALWAYS_INLINE __m256 sub_in_lane(__m256 g, __m256 dloss, int64_t lane) {
  __m256i hit = _mm256_cmpeq_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                   _mm256_set1_epi32((int)lane));
  return _mm256_blendv_ps(g, _mm256_sub_ps(g, dloss), _mm256_castsi256_ps(hit));
}

static ALWAYS_INLINE void softmax_grad_step(void *dlogits, td_dtype dtype, const void *logits,
                                            td_dtype logits_dtype, __m256 lse, __m256 dloss,
                                            int64_t target, int64_t j, int64_t left) {
  __m256 x = load_logits(logits, logits_dtype, j, left);
  __m256 g = _mm256_mul_ps(v_exp(_mm256_sub_ps(x, lse)), dloss);
  if (target >= j && target < j + 8) g = sub_in_lane(g, dloss, target - j);
  v_store_f32_or_bf16(dlogits, dtype, j, g, left);
}

/* bf16 in and out (the bf16 model's loss), 16 elements split by parity: the
 * conversions are then shifts and masks, and the loop runs at the fp32 one's speed
 * (with the in-order unpack and pack it took twice as long). */
static ALWAYS_INLINE void softmax_grad_bf16_step(uint16_t *d, const uint16_t *x, __m256 lse,
                                                 __m256 dloss, int64_t target, int64_t j,
                                                 int64_t left) {
  __m256 ev, od;
  v_from_bf16_eo(v_load_u16x16(x + j, left), &ev, &od);
  __m256 ge = _mm256_mul_ps(v_exp(_mm256_sub_ps(ev, lse)), dloss);
  __m256 go = _mm256_mul_ps(v_exp(_mm256_sub_ps(od, lse)), dloss);
  if (target >= j && target < j + 16) {
    if ((target - j) & 1)
      go = sub_in_lane(go, dloss, (target - j) >> 1);
    else
      ge = sub_in_lane(ge, dloss, (target - j) >> 1);
  }
  v_store_u16x16(d + j, v_to_bf16_eo(ge, go), left);
}

static void softmax_grad_row(void *dlogits, td_dtype dtype, const void *logits,
                             td_dtype logits_dtype, float lse, float dloss, int64_t target,
                             int64_t vocab) {
  const size_t es = td_dtype_size(logits_dtype);
  const __m256 l = V1(lse), d = V1(dloss);
  int64_t j = 0;
  if (dtype == TD_BF16 && logits_dtype == TD_BF16) {
    for (; j + 16 <= vocab; j += 16) {
      prefetch_ahead((const char *)logits + (size_t)j * es);
      softmax_grad_bf16_step(dlogits, logits, l, d, target, j, 16);
    }
    if (j < vocab) softmax_grad_bf16_step(dlogits, logits, l, d, target, j, vocab - j);
    return;
  }
  for (; j + 16 <= vocab; j += 16) {
    prefetch_ahead((const char *)logits + (size_t)j * es);
    softmax_grad_step(dlogits, dtype, logits, logits_dtype, l, d, target, j, 8);
    softmax_grad_step(dlogits, dtype, logits, logits_dtype, l, d, target, j + 8, 8);
  }
  for (; j < vocab; j += 8)
    softmax_grad_step(dlogits, dtype, logits, logits_dtype, l, d, target, j, vocab - j);
}

/* -------------------------------------------------------------------- adamw */

/* The step's constants as vectors, made once: the loop's float stores could
 * alias *c, so the compiler would reload it inside the loop. */
typedef struct {
  __m256 b1, b2, a1, a2, ib1, ib2, gscale, eps, wd, lr;
} adamw_consts;

static ALWAYS_INLINE void adamw_step(float *param, const float *grad, float *m, float *v,
                                     const adamw_consts *k, uint16_t *copy_bf16, int64_t i,
                                     int64_t left) {
  __m256 g = _mm256_mul_ps(v_load(grad + i, left), k->gscale);
  __m256 mi = _mm256_fmadd_ps(k->b1, v_load(m + i, left), _mm256_mul_ps(k->a1, g));
  __m256 g2 = _mm256_mul_ps(_mm256_mul_ps(k->a2, g), g);
  __m256 vi = _mm256_fmadd_ps(k->b2, v_load(v + i, left), g2);
  __m256 den = _mm256_add_ps(_mm256_sqrt_ps(_mm256_mul_ps(vi, k->ib2)), k->eps);
  __m256 upd = _mm256_div_ps(_mm256_mul_ps(mi, k->ib1), den);
  __m256 p = v_load(param + i, left);
  __m256 step = _mm256_fmadd_ps(k->wd, p, upd);
  __m256 np = _mm256_fnmadd_ps(k->lr, step, p);
  v_store(param + i, np, left);
  v_store(m + i, mi, left);
  v_store(v + i, vi, left);
  if (copy_bf16) v_store_u16(copy_bf16 + i, v_to_bf16(np), left);
}

static void adamw(float *param, const float *grad, float *m, float *v, int64_t n,
                  const td_ew_adamw *c, uint16_t *copy_bf16) {
  const adamw_consts k = {V1(c->beta1),   V1(c->beta2),   V1(1.0f - c->beta1), V1(1.0f - c->beta2),
                          V1(c->inv_bc1), V1(c->inv_bc2), V1(c->grad_scale),   V1(c->eps),
                          V1(c->weight_decay), V1(c->lr)};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    prefetch_ahead(param + i), prefetch_ahead(grad + i);
    prefetch_ahead(m + i), prefetch_ahead(v + i);
    adamw_step(param, grad, m, v, &k, copy_bf16, i, 8);
    adamw_step(param, grad, m, v, &k, copy_bf16, i + 8, 8);
  }
  for (; i < n; i += 8) adamw_step(param, grad, m, v, &k, copy_bf16, i, n - i);
}

/* --------------------------------------------------------------------- cast */

/* fp16 -> fp32 by vcvtph2ps, except NaNs: td_f16_to_f32 keeps a signalling NaN's
 * payload as is (sign | 0x7f800000 | m << 13) where the instruction quiets it. */
static ALWAYS_INLINE __m256 from_f16(__m128i h16) {
  __m256i h = _mm256_cvtepu16_epi32(h16);
  __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x7fff)),
                                   _mm256_set1_epi32(0x7c00));
  __m256i sign = _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x8000)), 16);
  __m256i mant = _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x3ff)), 13);
  __m256i bits = _mm256_or_si256(_mm256_or_si256(sign, mant), _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_ps(_mm256_cvtph_ps(h16), _mm256_castsi256_ps(bits),
                          _mm256_castsi256_ps(nan));
}

static ALWAYS_INLINE __m256 load8(const void *src, td_dtype dt, int64_t i, int64_t left) {
  if (dt == TD_F32) return v_load((const float *)src + i, left);
  __m128i h = v_load_u16((const uint16_t *)src + i, left);
  return dt == TD_BF16 ? v_from_bf16(h) : from_f16(h);
}

static ALWAYS_INLINE void store8(void *dst, td_dtype dt, int64_t i, __m256 y, int64_t left) {
  if (dt == TD_F16)
    v_store_u16((uint16_t *)dst + i,
                _mm256_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), left);
  else
    v_store_f32_or_bf16(dst, dt, i, y, left);
}

/* Through fp32; vcvtps2ph rounds to nearest even and keeps subnormals and NaN
 * payloads exactly as td_f32_to_f16 (as its zmm form, checked on all 2^32 inputs). */
static void cast(void *dst, td_dtype dst_dtype, const void *src, td_dtype src_dtype, int64_t n) {
  const size_t es = td_dtype_size(src_dtype);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    prefetch_ahead((const char *)src + (size_t)i * es);
    store8(dst, dst_dtype, i, load8(src, src_dtype, i, 8), 8);
    store8(dst, dst_dtype, i + 8, load8(src, src_dtype, i + 8, 8), 8);
  }
  for (; i < n; i += 8) store8(dst, dst_dtype, i, load8(src, src_dtype, i, n - i), n - i);
}

/* Plain stores up to a 64-byte boundary, streaming stores of whole lines, plain
 * stores for the tail. */
static void zero(void *dst, size_t bytes, int stream) {
  char *d = dst;
  size_t head = stream ? (64 - (uintptr_t)d % 64) % 64 : bytes;
  if (head > bytes) head = bytes;
  memset(d, 0, head);
  size_t i = head;
  for (; i + 64 <= bytes; i += 64) {
    _mm256_stream_si256((__m256i *)(d + i), _mm256_setzero_si256());
    _mm256_stream_si256((__m256i *)(d + i + 32), _mm256_setzero_si256());
  }
  memset(d + i, 0, bytes - i);
  if (stream) _mm_sfence();
}

/* ------------------------------------------------------------- sum_squares */

/* 16 elements from x into the double accumulators a[0..3] (lanes 0-3, 4-7, 8-11, 12-15) */
static ALWAYS_INLINE void sum_squares_step(__m256d a[4], const float *x, int64_t left) {
  __m256 v[2];
  load16(x, left, &v[0], &v[1]);
  for (int h = 0; h < 2; h++) {
    __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v[h]));
    __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v[h], 1));
    a[2 * h] = _mm256_fmadd_pd(lo, lo, a[2 * h]);
    a[2 * h + 1] = _mm256_fmadd_pd(hi, hi, a[2 * h + 1]);
  }
}

/* The AVX-512 table's two 8-lane double accumulators (low / high halves of each
 * 16) as four 4-lane ones, reduced in its order. */
static double sum_squares(const float *x, int64_t n) {
  const __m256d z = _mm256_setzero_pd();
  __m256d a[4] = {z, z, z, z};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    prefetch_ahead(x + i);
    sum_squares_step(a, x + i, 16);
  }
  if (i < n) sum_squares_step(a, x + i, n - i);
  return v_reduce_add8d(_mm256_add_pd(a[0], a[2]), _mm256_add_pd(a[1], a[3]));
}

/* sum_squares of four pieces, two side by side at a time, each with its own four
 * accumulators in sum_squares' order (the same bits): two streams per thread
 * and eight independent FMA chains instead of one stream and four (all four
 * pieces at once would need 16 accumulators, every ymm register). */
static void sum_squares4(const float *x, int64_t piece, double out[4]) {
  const __m256d z = _mm256_setzero_pd();
  for (int p = 0; p < 4; p += 2) {
    __m256d a[2][4] = {{z, z, z, z}, {z, z, z, z}};
    const float *x0 = x + p * piece, *x1 = x0 + piece;
    int64_t i = 0;
    for (; i + 16 <= piece; i += 16) {
      prefetch_ahead(x0 + i), prefetch_ahead(x1 + i);
      sum_squares_step(a[0], x0 + i, 16);
      sum_squares_step(a[1], x1 + i, 16);
    }
    if (i < piece) {
      sum_squares_step(a[0], x0 + i, piece - i);
      sum_squares_step(a[1], x1 + i, piece - i);
    }
    for (int h = 0; h < 2; h++)
      out[p + h] = v_reduce_add8d(_mm256_add_pd(a[h][0], a[h][2]), _mm256_add_pd(a[h][1], a[h][3]));
  }
}

const td_ew_isa td_cpu_ew_avx2 = {
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
    .sum_squares4 = sum_squares4,
};
