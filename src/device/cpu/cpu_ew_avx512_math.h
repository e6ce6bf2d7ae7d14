/* Vector math for the AVX-512 elementwise kernels (16 fp32 lanes): exp, the
 * normal distribution's tail for GELU, bf16 rounding, masked row helpers.
 * Include only from files compiled with the AVX-512 flags (*_avx512.c). */
#ifndef TD_DEVICE_CPU_EW_AVX512_MATH_H
#define TD_DEVICE_CPU_EW_AVX512_MATH_H

#include <immintrin.h>
#include <stdint.h>

#include "base/dtype.h"
#include "device/cpu/cpu_isa.h" /* td_cpu_bf16_cvt */
#include "cpu_ew_normal_tail.h" /* k_normal_tail_poly */

#define V1(c) _mm512_set1_ps(c)

/* Lanes [0, left) of a 16-lane step (all 16 when left >= 16). */
static inline __mmask16 v_mask(int64_t left) {
  return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
}

/* exp(x) to ~1 ulp: x = n ln2 + r (Cody-Waite, |r| <= ln2/2), exp(r) by Cephes'
 * expf polynomial, times 2^n by scalef, which also rounds subnormal results
 * correctly and gives +Inf above 88.7 and 0 below -103.9. NaN propagates
 * (min/max return their second operand when one is NaN). */
static inline __m512 v_exp(__m512 x) {
  x = _mm512_min_ps(V1(89.0f), _mm512_max_ps(V1(-104.0f), x));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, V1(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, V1(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, V1(-2.12194440e-4f), r);
  __m512 p = _mm512_fmadd_ps(V1(1.9875691500e-4f), r, V1(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, V1(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, V1(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, V1(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, V1(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), V1(1.0f));
  return _mm512_scalef_ps(p, n);
}

/* The normal tail q = Phi(-|x|) and the Gaussian g = exp(-x^2 / 2), for |x| <= 16
 * (the caller clamps): q = g F(|x|), the interval's coefficients picked per lane
 * by a permute. x^2 is split into hi + lo with an FMA so that g keeps its
 * relative accuracy where x^2 is large. Measured: q within 3e-7 relative. */
static inline __m512 v_normal_tail(__m512 x, __m512 *gauss) {
  __m512 hi = _mm512_mul_ps(x, x), lo = _mm512_fmsub_ps(x, x, hi);
  __m512 g = v_exp(_mm512_mul_ps(hi, V1(-0.5f)));
  g = _mm512_fnmadd_ps(g, _mm512_mul_ps(lo, V1(0.5f)), g); /* exp(-lo/2) ~ 1 - lo/2 */
  __m512 y = _mm512_min_ps(V1(15.999f), _mm512_abs_ps(x));
  __m512 k = _mm512_roundscale_ps(y, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512i idx = _mm512_cvttps_epi32(k);
  __m512 s = _mm512_sub_ps(y, _mm512_add_ps(k, V1(0.5f)));
  __m512 p = _mm512_permutexvar_ps(idx, _mm512_load_ps(k_normal_tail_poly[0]));
  for (int j = 1; j < 9; j++)
    p = _mm512_fmadd_ps(p, s, _mm512_permutexvar_ps(idx, _mm512_load_ps(k_normal_tail_poly[j])));
  *gauss = g;
  return _mm512_mul_ps(g, p);
}

/* fp32 -> bf16, round to nearest even; NaN -> quiet NaN; subnormals kept.
 * Bit-exact with td_f32_to_bf16: by vcvtneps2bf16 where it gives those bits,
 * else by integer ops. */
static inline __m256i v_to_bf16(__m512 y) {
  __m512i u = _mm512_castps_si512(y);
  /* vcvtneps2bf16 rounds so too but flushes subnormal inputs to zero: a vector
   * with a lane of zero exponent and non-zero significand takes the integer
   * path, as every vector does without AVX512-BF16 */
  if (td_cpu_bf16_cvt &&
      !_mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000)), u,
                                   _mm512_set1_epi32(0x007fffff)))
    return (__m256i)_mm512_cvtneps_pbh(y);
  __m512i mag = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  __mmask16 nan = _mm512_cmpgt_epu32_mask(mag, _mm512_set1_epi32(0x7f800000));
  __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(u, _mm512_set1_epi32(0x400000)));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

static inline __m512 v_from_bf16(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Store lanes k of y at element i of out, as fp32 or bf16. */
static inline void v_store_f32_or_bf16(void *out, td_dtype dt, int64_t i, __m512 y,
                                       __mmask16 k) {
  if (dt == TD_BF16)
    _mm256_mask_storeu_epi16((uint16_t *)out + i, k, v_to_bf16(y));
  else
    _mm512_mask_storeu_ps((float *)out + i, k, y);
}

#endif
