/* Vector math for the AVX2 elementwise kernels (8 fp32 lanes): exp, the normal
 * distribution's tail for GELU, bf16 rounding, row tails, fixed-order reductions.
 * The same math as cpu_ew_avx512_math.h, operation for operation; where AVX2 lacks
 * an AVX-512 instruction (scalef, a 16-entry permute, masks, unsigned compares),
 * the replacement gives the same bits, so these functions agree bitwise with the
 * AVX-512 ones (exp, GELU and the bf16 / fp16 roundings checked on all 2^32 fp32
 * inputs). Include only from files compiled with the AVX2 flags (*_avx2.c). */
#ifndef TD_DEVICE_CPU_EW_AVX2_MATH_H
#define TD_DEVICE_CPU_EW_AVX2_MATH_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "base/dtype.h"
#include "cpu_ew_normal_tail.h" /* k_normal_tail_poly */

#define V1(c) _mm256_set1_ps(c)
#define ALWAYS_INLINE inline __attribute__((always_inline))

/* ------------------------------------------------------------ row tails */

/* A step of 8 lanes covers elements [i, i + min(left, 8)): left >= 8 is a whole
 * vector (plain loads and stores; the loops pass a constant 8, so the tail code
 * folds away), fewer lanes are masked, lanes past the end load as 0 like the
 * AVX-512 table's zero-masked loads. */

/* Lanes [0, left) as all-ones 32-bit lanes, 0 <= left < 8. */
static ALWAYS_INLINE __m256i v_mask(int64_t left) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)left),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* y in lanes [0, left), 0 elsewhere */
static ALWAYS_INLINE __m256 v_keep(__m256 y, int64_t left) {
  return left >= 8 ? y : _mm256_and_ps(y, _mm256_castsi256_ps(v_mask(left)));
}

static ALWAYS_INLINE __m256 v_load(const float *p, int64_t left) {
  return left >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, v_mask(left));
}

static ALWAYS_INLINE void v_store(float *p, __m256 y, int64_t left) {
  if (left >= 8)
    _mm256_storeu_ps(p, y);
  else
    _mm256_maskstore_ps(p, v_mask(left), y);
}

/* 16-bit elements have no masked load or store in AVX2: the tail goes through a
 * small buffer (a whole-vector access could run past the end of the array). */
static ALWAYS_INLINE __m128i v_load_u16(const uint16_t *p, int64_t left) {
  if (left >= 8) return _mm_loadu_si128((const __m128i *)p);
  uint16_t buf[8] = {0};
  memcpy(buf, p, (size_t)left * sizeof(uint16_t));
  return _mm_loadu_si128((const __m128i *)buf);
}

static ALWAYS_INLINE void v_store_u16(uint16_t *p, __m128i h, int64_t left) {
  if (left >= 8) {
    _mm_storeu_si128((__m128i *)p, h);
    return;
  }
  uint16_t buf[8];
  _mm_storeu_si128((__m128i *)buf, h);
  memcpy(p, buf, (size_t)left * sizeof(uint16_t));
}

/* ----------------------------------------------------------- reductions */

/* Row sums keep 16 lanes as two halves (lo: lanes 0-7, hi: 8-15), as the AVX-512
 * table's one __m512 accumulator, and reduce them in the order GCC's
 * _mm512_reduce_add_ps / _max_ps / _add_pd do: halves, quarters, then pairs.
 * The order is fixed, and (built with GCC) the sums are the AVX-512 table's to the
 * bit, NaN payloads aside. */
static inline float v_reduce_add16(__m256 lo, __m256 hi) {
  __m256 t = _mm256_add_ps(hi, lo);
  __m128 q = _mm_add_ps(_mm256_extractf128_ps(t, 1), _mm256_castps256_ps128(t));
  q = _mm_add_ps(q, _mm_shuffle_ps(q, q, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtss_f32(q) + _mm_cvtss_f32(_mm_shuffle_ps(q, q, 1));
}

/* (max's operand order kept too: it decides which NaN comes out) */
static inline float v_reduce_max16(__m256 lo, __m256 hi) {
  __m256 t = _mm256_max_ps(hi, lo);
  __m128 q = _mm_max_ps(_mm256_extractf128_ps(t, 1), _mm256_castps256_ps128(t));
  q = _mm_max_ps(q, _mm_shuffle_ps(q, q, _MM_SHUFFLE(1, 0, 3, 2)));
  q = _mm_max_ps(q, _mm_shuffle_ps(q, q, _MM_SHUFFLE(0, 1, 0, 1)));
  return _mm_cvtss_f32(q);
}

/* 8 doubles as lo (lanes 0-3) and hi (4-7), reduced as _mm512_reduce_add_pd */
static inline double v_reduce_add8d(__m256d lo, __m256d hi) {
  __m256d t = _mm256_add_pd(hi, lo);
  __m128d q = _mm_add_pd(_mm256_extractf128_pd(t, 1), _mm256_castpd256_pd128(t));
  return _mm_cvtsd_f64(q) + _mm_cvtsd_f64(_mm_unpackhi_pd(q, q));
}

/* ------------------------------------------------------------------ exp */

/* p 2^n for integral n in [-150, 128] (what v_exp's clamp allows), as scalef would
 * give it: with n = n1 + n2, n1 = floor(n / 2), both 2^n1 and 2^n2 are normal
 * floats made from their biased exponents b1 = n1 + 127 = floor((n + 254) / 2) and
 * b2 = n + 254 - b1; p 2^n1 is exact, the second product rounds once, so a
 * subnormal result is rounded correctly and overflow gives +Inf. A NaN p stays
 * the same NaN (n's integer conversion is then garbage, but finite). */
static inline __m256 v_scale_pow2(__m256 p, __m256 n) {
  __m256i b = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(254));
  __m256i b1 = _mm256_srai_epi32(b, 1), b2 = _mm256_sub_epi32(b, b1);
  __m256 f1 = _mm256_castsi256_ps(_mm256_slli_epi32(b1, 23));
  __m256 f2 = _mm256_castsi256_ps(_mm256_slli_epi32(b2, 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, f1), f2);
}

/* exp(x) to ~1 ulp: x = n ln2 + r (Cody-Waite, |r| <= ln2/2), exp(r) by Cephes'
 * expf polynomial, times 2^n; +Inf above 88.7 and 0 below -103.9. NaN propagates
 * (min/max return their second operand when one is NaN). */
static inline __m256 v_exp(__m256 x) {
  x = _mm256_min_ps(V1(89.0f), _mm256_max_ps(V1(-104.0f), x));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, V1(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, V1(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, V1(-2.12194440e-4f), r);
  __m256 p = _mm256_fmadd_ps(V1(1.9875691500e-4f), r, V1(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, V1(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, V1(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, V1(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, V1(5.0000001201e-1f));
  p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), V1(1.0f));
  return v_scale_pow2(p, n);
}

static ALWAYS_INLINE __m256 v_abs(__m256 x) { return _mm256_andnot_ps(V1(-0.0f), x); }

/* ---------------------------------------------------------- normal tail */

/* row[idx] per lane, idx in [0, 16): a permute of each 8-entry half (it reads
 * idx's low 3 bits), the halves picked by idx's bit 3, shifted into the sign bit
 * that blendv reads (upper). A NaN input's idx 0x80000000 picks entry 0, as
 * vpermps zmm does. With upper_lanes 0 no lane needs the upper half: one permute. */
static ALWAYS_INLINE __m256 v_lookup16(const float *row, __m256i idx, __m256 upper,
                                       int upper_lanes) {
  __m256 lo = _mm256_permutevar8x32_ps(_mm256_load_ps(row), idx);
  if (!upper_lanes) return lo;
  __m256 hi = _mm256_permutevar8x32_ps(_mm256_load_ps(row + 8), idx);
  return _mm256_blendv_ps(lo, hi, upper);
}

/* F(y) by Horner in s, each coefficient looked up for the lane's interval */
static ALWAYS_INLINE __m256 v_tail_poly(__m256i idx, __m256 upper, __m256 s, int upper_lanes) {
  __m256 p = v_lookup16(k_normal_tail_poly[0], idx, upper, upper_lanes);
#pragma GCC unroll 8
  for (int j = 1; j < 9; j++)
    p = _mm256_fmadd_ps(p, s, v_lookup16(k_normal_tail_poly[j], idx, upper, upper_lanes));
  return p;
}

/* The normal tail q = Phi(-|x|) and the Gaussian g = exp(-x^2 / 2), for |x| <= 16
 * (the caller clamps): q = g F(|x|), the interval's coefficients picked per lane.
 * x^2 is split into hi + lo with an FMA so that g keeps its relative accuracy
 * where x^2 is large. Measured (AVX-512 twin): q within 3e-7 relative.
 * The lookups are most of the work (AVX2 has no 16-entry permute); when no lane
 * has |x| >= 8, as for nearly all activations, they take one permute each
 * instead of two and a blend (the same coefficients, so the same bits). */
static inline __m256 v_normal_tail(__m256 x, __m256 *gauss) {
  __m256 hi = _mm256_mul_ps(x, x), lo = _mm256_fmsub_ps(x, x, hi);
  __m256 g = v_exp(_mm256_mul_ps(hi, V1(-0.5f)));
  g = _mm256_fnmadd_ps(g, _mm256_mul_ps(lo, V1(0.5f)), g); /* exp(-lo/2) ~ 1 - lo/2 */
  __m256 y = _mm256_min_ps(V1(15.999f), v_abs(x));
  __m256 k = _mm256_round_ps(y, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m256i idx = _mm256_cvttps_epi32(k);
  __m256 upper = _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28));
  __m256 s = _mm256_sub_ps(y, _mm256_add_ps(k, V1(0.5f)));
  __m256 p = _mm256_movemask_ps(upper) ? v_tail_poly(idx, upper, s, 1)
                                        : v_tail_poly(idx, upper, s, 0);
  *gauss = g;
  return _mm256_mul_ps(g, p);
}

/* ------------------------------------------------------------------ bf16 */

/* fp32 -> bf16, round to nearest even by integer ops (subnormals kept); NaN ->
 * quiet NaN. Bit-exact with td_f32_to_bf16. Leaves the bf16 in the upper half of
 * each 32-bit lane. The magnitude compare is signed (AVX2 has no unsigned one):
 * both sides are below 2^31. */
static ALWAYS_INLINE __m256i v_bf16_round(__m256 y) {
  __m256i u = _mm256_castps_si256(y);
  __m256i mag = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  __m256i nan = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7f800000));
  __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff)));
  return _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x400000)), nan);
}

/* 8 values to 8 bf16 (the shifted words are in [0, 0xffff]: the saturating pack
 * keeps them) */
static inline __m128i v_to_bf16(__m256 y) {
  __m256i r = _mm256_srli_epi32(v_bf16_round(y), 16);
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

/* 16 values (lo: elements 0-7, hi: 8-15) to 16 bf16 in element order: the 256-bit
 * pack works within 128-bit halves, one permute of 64-bit quarters reorders. */
static inline __m256i v_to_bf16x2(__m256 lo, __m256 hi) {
  __m256i a = _mm256_srli_epi32(v_bf16_round(lo), 16), b = _mm256_srli_epi32(v_bf16_round(hi), 16);
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), _MM_SHUFFLE(3, 1, 2, 0));
}

static inline __m256 v_from_bf16(__m128i h) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* 16 bf16 as fp32 split by parity, with no shuffles (which share one port with the
 * permutes and bf16 packs on Intel cores): *ev holds elements 0 2 .. 14, *od
 * elements 1 3 .. 15, for elementwise work that stores bf16 again (v_to_bf16_eo). */
static ALWAYS_INLINE void v_from_bf16_eo(__m256i w, __m256 *ev, __m256 *od) {
  *ev = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  *od = _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32((int)0xffff0000u)));
}

static ALWAYS_INLINE __m256i v_to_bf16_eo(__m256 ev, __m256 od) {
  return _mm256_or_si256(_mm256_srli_epi32(v_bf16_round(ev), 16),
                         _mm256_and_si256(v_bf16_round(od), _mm256_set1_epi32((int)0xffff0000u)));
}

/* 16 16-bit elements, [0, left) of them (lanes from left on load 0) */
static ALWAYS_INLINE __m256i v_load_u16x16(const uint16_t *p, int64_t left) {
  if (left >= 16) return _mm256_loadu_si256((const __m256i *)p);
  uint16_t buf[16] = {0};
  memcpy(buf, p, (size_t)left * sizeof(uint16_t));
  return _mm256_loadu_si256((const __m256i *)buf);
}

static ALWAYS_INLINE void v_store_u16x16(uint16_t *p, __m256i h, int64_t left) {
  if (left >= 16) {
    _mm256_storeu_si256((__m256i *)p, h);
    return;
  }
  uint16_t buf[16];
  _mm256_storeu_si256((__m256i *)buf, h);
  memcpy(p, buf, (size_t)left * sizeof(uint16_t));
}

/* Store lanes [0, left) of y at element i of out, as fp32 or bf16. */
static ALWAYS_INLINE void v_store_f32_or_bf16(void *out, td_dtype dt, int64_t i, __m256 y,
                                              int64_t left) {
  if (dt == TD_BF16)
    v_store_u16((uint16_t *)out + i, v_to_bf16(y), left);
  else
    v_store((float *)out + i, y, left);
}

/* Store elements [i, i + 16) = lo, hi, as fp32 or bf16 */
static ALWAYS_INLINE void v_store16_f32_or_bf16(void *out, td_dtype dt, int64_t i, __m256 lo,
                                                __m256 hi) {
  if (dt == TD_BF16) {
    _mm256_storeu_si256((__m256i *)((uint16_t *)out + i), v_to_bf16x2(lo, hi));
  } else {
    _mm256_storeu_ps((float *)out + i, lo);
    _mm256_storeu_ps((float *)out + i + 8, hi);
  }
}

#endif
