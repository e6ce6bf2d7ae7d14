/* Vector math for the AVX-512 elementwise kernels (16 fp32 lanes): exp, the
 * normal distribution's tail for GELU, bf16 rounding, masked row helpers.
 * Include only from files compiled with the AVX-512 flags (*_avx512.c). */
#ifndef TD_DEVICE_CPU_EW_AVX512_MATH_H
#define TD_DEVICE_CPU_EW_AVX512_MATH_H

#include <immintrin.h>
#include <stdint.h>

#include "base/dtype.h"

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

/* F(y) = Phi(-y) exp(y^2 / 2) on [k, k + 1), k = 0..15: degree-8 Chebyshev fits
 * (mpmath, 40 digits) in s = y - k - 1/2, relative error below 2.6e-9.
 * Row j holds the coefficient of s^(8-j) for each k (Horner order). */
static const float k_normal_tail_poly[9][16] __attribute__((aligned(64))) = {
      {0.0003368522288f, 2.790544718e-5f, 3.342826034e-6f, 5.399227574e-7f,
       1.10967127e-7f, 2.770581447e-8f, 8.102793062e-9f, 2.697901447e-9f,
       1.00019294e-9f, 4.05708087e-10f, 1.775811097e-10f, 8.29500676e-11f,
       4.098082192e-11f, 2.125740607e-11f, 1.150761893e-11f, 6.468838287e-12f},
      {-0.001078368176f, -0.0001058674131f, -1.491537978e-5f, -2.804371745e-6f,
       -6.63367735e-7f, -1.884873006e-7f, -6.207073919e-8f, -2.304747014e-8f,
       -9.44654069e-9f, -4.204030721e-9f, -2.00525384e-9f, -1.014630176e-9f,
       -5.401134832e-10f, -3.004550306e-10f, -1.736970475e-10f, -1.038807071e-10f},
      {0.00307696083f, 0.0003683035818f, 6.232346817e-5f, 1.385191485e-5f,
       3.813765874e-6f, 1.243383904e-6f, 4.638736248e-7f, 1.929619084e-7f,
       8.774680057e-8f, 4.295989786e-8f, 2.237746043e-8f, 1.228580114e-8f,
       7.056474841e-9f, 4.214363005e-9f, 2.604251267e-9f, 1.658290874e-9f},
      {-0.008689512507f, -0.001265552069f, -0.0002573492765f, -6.771238232e-5f,
       -2.173379615e-5f, -8.142232113e-6f, -3.445561274e-6f, -1.607316109e-6f,
       -8.115602745e-7f, -4.373942299e-7f, -2.489385844e-7f, -1.483625692e-7f,
       -9.197454533e-8f, -5.899118877e-8f, -3.897453194e-8f, -2.64290926e-8f},
      {0.02282989338f, 0.004110359772f, 0.00101760181f, 0.0003201539229f,
       0.0001206951469f, 5.224526153e-5f, 2.518018865e-5f, 1.321291173e-5f,
       7.424844025e-6f, 4.413045804e-6f, 2.748138052e-6f, 1.779892872e-6f,
       1.19202489e-6f, 8.216694241e-7f, 5.807574133e-7f, 4.196013523e-7f},
      {-0.054915653f, -0.01249704154f, -0.003831134494f, -0.001459154161f,
       -0.0006518067419f, -0.0003280622128f, -0.0001808995831f, -0.0001071335832f,
       -6.716903093e-5f, -4.411092678e-5f, -3.010015071e-5f, -2.121058443e-5f,
       -1.536018548e-5f, -1.138749396e-5f, -8.615855554e-6f, -6.635966636e-6f},
      {0.1187761977f, 0.0351868733f, 0.01364822573f, 0.006387652118f,
       0.003415910242f, 0.002013323039f, 0.001276567991f, 0.0008563535029f,
       0.0006006361321f, 0.0004367059848f, 0.0003270441334f, 0.0002510412918f,
       0.0001967704178f, 0.000157017846f, 0.0001272529351f, 0.0001045358882f},
      {-0.2241328493f, -0.09027127897f, -0.04561395185f, -0.02673424267f,
       -0.01732701591f, -0.01205746326f, -0.008840390671f, -0.006744052015f,
       -0.005306914214f, -0.004281039635f, -0.003524263853f, -0.002950606609f,
       -0.002505710779f, -0.002153903403f, -0.001871015126f, -0.001640214167f},
      {0.3496188347f, 0.205780667f, 0.1413313314f, 0.1063451536f,
       0.08480339211f, 0.07034269403f, 0.06001567534f, 0.05229309712f,
       0.04631004308f, 0.0415432885f, 0.03765885872f, 0.03443405859f,
       0.03171492557f, 0.02939173163f, 0.02738422519f, 0.02563239137f}};

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

/* fp32 -> bf16, round to nearest even by integer ops (subnormals kept, unlike
 * vcvtneps2bf16); NaN -> quiet NaN. Bit-exact with td_f32_to_bf16. */
static inline __m256i v_to_bf16(__m512 y) {
  __m512i u = _mm512_castps_si512(y);
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
