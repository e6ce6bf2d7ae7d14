/* AVX-512 helpers shared by the attention's *_avx512.c files (include only from
 * files compiled with the AVX-512 flags).
 *
 * exp2_16: 2^t on 16 lanes (callers pass t = x log2 e, folding log2 e into their
 * scale): n = round(t), f = t - n in [-1/2, 1/2], 2^f by a minimax polynomial
 * (relative error 7.5e-5, 2.6e-6, 7.5e-8 for degree 3, 4, 5: the fp32 kernels
 * use 5, bf16 ones fewer), times 2^n by vscalefps (which flushes t < -150 to 0).
 * t must not be -inf (finite inputs never give it).
 * bf16_bits: round to nearest even with the integer trick of td_f32_to_bf16
 * (same bits as the portable path, NaN kept quiet), the bf16 in the low 16 bits
 * of each 32-bit lane. */
#ifndef TD_DEVICE_CPU_ATTENTION_AVX512_H
#define TD_DEVICE_CPU_ATTENTION_AVX512_H

#include <immintrin.h>
#include <stdint.h>

/* mask of the first min(max(left, 0), 16) lanes */
static inline __mmask16 td_attn_lanes(int64_t left) {
  return left >= 16 ? (__mmask16)0xffff : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1);
}

#define TD_ATTN_LOG2E 1.44269504088896341f

/* 2^t, with a polynomial of the given degree (3, 4 or 5; a constant, so the
 * branches fold away) */
static inline __m512 td_attn_exp2_16(__m512 t, int degree) {
  static const float c[3][6] = {
      {9.999280735e-1f, 6.932609855e-1f, 2.426111222e-1f, 5.517166907e-2f, 0.0f, 0.0f},
      {9.999992614e-1f, 6.931218147e-1f, 2.402474483e-1f, 5.591786032e-2f, 9.570101908e-3f, 0.0f},
      {1.000000072f, 6.931469671e-1f, 2.402211972e-1f, 5.550713274e-2f, 9.675541334e-3f,
       1.327647198e-3f}};
  const float *k = c[degree - 3];
  __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_set1_ps(k[degree]);
  for (int i = degree - 1; i >= 0; i--) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(k[i]));
  return _mm512_scalef_ps(p, n);
}

static inline __m512i td_attn_bf16_bits(__m512 x) {
  __m512i u = _mm512_castps_si512(x);
  __m512i hi = _mm512_srli_epi32(u, 16);
  __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                                   _mm512_and_si512(hi, _mm512_set1_epi32(1))));
  r = _mm512_srli_epi32(r, 16);
  __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  return _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
}

/* store the first lanes (mask m) of x as bf16 */
static inline void td_attn_store_bf16(uint16_t *dst, __mmask16 m, __m512 x) {
  _mm256_mask_storeu_epi16(dst, m, _mm512_cvtepi32_epi16(td_attn_bf16_bits(x)));
}

/* the first lanes (mask m) of 16 bf16 as fp32, 0 elsewhere */
static inline __m512 td_attn_load_bf16(const uint16_t *src, __mmask16 m) {
  __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

/* In-register transpose of a 16 x 16 matrix of 32-bit elements (r[i] = row i). */
static inline void td_attn_transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 16; i += 8)
    for (int j = 0; j < 4; j++) {
      t[i + j] = _mm512_shuffle_i32x4(r[i + j], r[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_shuffle_i32x4(r[i + j], r[i + j + 4], 0xdd);
    }
  for (int j = 0; j < 8; j++) {
    r[j] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0xdd);
  }
}

#endif
