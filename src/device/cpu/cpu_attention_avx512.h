/* AVX-512 helpers shared by the attention's *_avx512.c files (include only from
 * files compiled with the AVX-512 flags).
 *
 * exp2_16: 2^t on 16 lanes (callers pass t = x log2 e, folding log2 e into their
 * scale): n = round(t), f = t - n in [-1/2, 1/2], 2^f by a polynomial with
 * constant term 1 (so 2^0 = 1 exactly), otherwise minimax in relative error:
 * 1.0e-4, 2.8e-6, 9.2e-8 for degree 3, 4, 5 (the fp32 kernels use 5, bf16 ones
 * fewer), times 2^n by vscalefps (which flushes t < -150 to 0).
 * t must not be -inf (finite inputs never give it).
 * bf16_bits: round to nearest even with the integer trick of td_f32_to_bf16
 * (same bits as the portable path, NaN kept quiet), the bf16 in the low 16 bits
 * of each 32-bit lane. */
#ifndef TD_DEVICE_CPU_ATTENTION_AVX512_H
#define TD_DEVICE_CPU_ATTENTION_AVX512_H

#include <immintrin.h>
#include <stdint.h>

#include "device/cpu/cpu_attention.h"

#define TD_ATTN_INLINE static inline __attribute__((always_inline))

/* mask of the first min(max(left, 0), 16) lanes */
static inline __mmask16 td_attn_lanes(int64_t left) {
  return left >= 16 ? (__mmask16)0xffff : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1);
}

#define TD_ATTN_LOG2E 1.44269504088896341f

/* 2^t, with a polynomial of the given degree (3, 4 or 5; a constant, so the
 * branches fold away) */
static inline __m512 td_attn_exp2_16(__m512 t, int degree) {
  static const float c[3][6] = {
      {1.0f, 6.932830072e-1f, 2.422110607e-1f, 5.500828986e-2f, 0.0f, 0.0f},
      {1.0f, 6.931241944e-1f, 2.402410002e-1f, 5.590642719e-2f, 9.582767296e-3f, 0.0f},
      {1.0f, 6.931469776e-1f, 2.402224200e-1f, 5.550733756e-2f, 9.671517975e-3f, 1.326474228e-3f}};
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
  __m512i r = _mm512_add_epi32(
      u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(hi, _mm512_set1_epi32(1))));
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

/* In-register transpose of a 16 x 16 matrix of 32-bit elements (r[i] = row i);
 * inlined and unrolled so that r stays in registers. */
TD_ATTN_INLINE void td_attn_transpose16(__m512i r[16]) {
  __m512i t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
#pragma GCC unroll 2
  for (int i = 0; i < 16; i += 8)
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
      t[i + j] = _mm512_shuffle_i32x4(r[i + j], r[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_shuffle_i32x4(r[i + j], r[i + j + 4], 0xdd);
    }
#pragma GCC unroll 8
  for (int j = 0; j < 8; j++) {
    r[j] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0xdd);
  }
}

/* log x for x >= 1: x = m 2^k with m in [0.75, 1.5), log m = 2 atanh z =
 * 2 (z + z^3/3 + ... + z^9/9), z = (m - 1)/(m + 1) in [-1/7, 1/5] (error < 2e-8). */
static inline __m512 td_attn_log16(__m512 x) {
  __m512 m = _mm512_getmant_ps(x, _MM_MANT_NORM_p75_1p5, _MM_MANT_SIGN_zero);
  __m512 k = _mm512_getexp_ps(_mm512_div_ps(x, m));
  __m512 z =
      _mm512_div_ps(_mm512_sub_ps(m, _mm512_set1_ps(1.0f)), _mm512_add_ps(m, _mm512_set1_ps(1.0f)));
  __m512 z2 = _mm512_mul_ps(z, z);
  __m512 q = _mm512_set1_ps(2.0f / 9);
  q = _mm512_fmadd_ps(q, z2, _mm512_set1_ps(2.0f / 7));
  q = _mm512_fmadd_ps(q, z2, _mm512_set1_ps(2.0f / 5));
  q = _mm512_fmadd_ps(q, z2, _mm512_set1_ps(2.0f / 3));
  q = _mm512_fmadd_ps(q, z2, _mm512_set1_ps(2.0f));
  return _mm512_fmadd_ps(k, _mm512_set1_ps(0.693147180559945f), _mm512_mul_ps(q, z));
}

/* The random words of query row i for keys [0, i + 1), NULL without dropout. */
static inline const uint32_t *td_attn_words(const td_attention_desc *a, const td_attn_head *e,
                                            td_attn_dropout dr, int64_t i, uint32_t *buf) {
  if (dr.thr == 0) return NULL;
  return td_attn_rng_row_avx512(a->seed, a->stream, e->g0 + (uint64_t)(i * e->T), i + 1, buf);
}

/* Lanes kept by dropout among `valid` (all valid lanes without dropout). */
static inline __mmask16 td_attn_kept(const uint32_t *words, td_attn_dropout dr, int64_t j,
                                     __mmask16 valid) {
  if (!words) return valid;
  __m512i w = _mm512_maskz_loadu_epi32(valid, words + j);
  return _mm512_mask_cmpge_epu32_mask(valid, w, _mm512_set1_epi32((int)dr.thr));
}

/* ------------------------------------------------ row kernels by chunks */

/* running max (scale >= 0) or min of a row's chunk j (16 lanes) */
TD_ATTN_INLINE __m512 td_attn_fwd_extreme(const td_attn_fwd_row *r, int64_t j, float scale,
                                          __m512 ext) {
  __mmask16 m = td_attn_lanes(r->nvalid - j);
  __m512 x = _mm512_maskz_loadu_ps(m, r->s + j);
  return scale >= 0 ? _mm512_mask_max_ps(ext, m, ext, x) : _mm512_mask_min_ps(ext, m, ext, x);
}

/* max_j scale s_j of the row from its extreme */
TD_ATTN_INLINE float td_attn_fwd_max(__m512 ext, float scale) {
  return scale * (scale >= 0 ? _mm512_reduce_max_ps(ext) : _mm512_reduce_min_ps(ext));
}

/* The prologue both forward row-pair kernels share: mx[i] = max_j scale s_j of
 * rows r0, r1, and vm[i] = mx[i] log2 e (0 for a padding row), the shift
 * td_attn_fwd_exp takes. */
TD_ATTN_INLINE void td_attn_fwd_max2(const td_attn_fwd_row *r0, const td_attn_fwd_row *r1,
                                     float scale, float mx[2], __m512 vm[2]) {
  const int64_t live = r0->nvalid > r1->nvalid ? r0->nvalid : r1->nvalid;
  __m512 ext0 = _mm512_set1_ps(scale >= 0 ? -INFINITY : INFINITY), ext1 = ext0;
  for (int64_t j = 0; j < live; j += 16) {
    ext0 = td_attn_fwd_extreme(r0, j, scale, ext0);
    ext1 = td_attn_fwd_extreme(r1, j, scale, ext1);
  }
  mx[0] = td_attn_fwd_max(ext0, scale), mx[1] = td_attn_fwd_max(ext1, scale);
  vm[0] = _mm512_set1_ps(r0->nvalid ? mx[0] * TD_ATTN_LOG2E : 0.0f);
  vm[1] = _mm512_set1_ps(r1->nvalid ? mx[1] * TD_ATTN_LOG2E : 0.0f);
}

/* e_j = exp(scale s_j - max) of chunk j (vscale2 = scale log2 e, vm2 = max log2 e),
 * 0 outside the visible part; added to *sum; then dropped lanes zeroed. */
TD_ATTN_INLINE __m512 td_attn_fwd_exp(const td_attn_fwd_row *r, int64_t j, __m512 vscale2,
                                      __m512 vm2, td_attn_dropout dr, int degree, __m512 *sum) {
  const __mmask16 valid = td_attn_lanes(r->nvalid - j);
  __m512 x2 = _mm512_fmsub_ps(vscale2, _mm512_maskz_loadu_ps(valid, r->s + j), vm2);
  __m512 e = _mm512_maskz_mov_ps(valid, td_attn_exp2_16(x2, degree));
  *sum = _mm512_add_ps(*sum, e);
  return r->words ? _mm512_maskz_mov_ps(td_attn_kept(r->words, dr, j, valid), e) : e;
}

/* p' and dS of a row's chunk j (16 lanes; 0 outside the visible part) */
TD_ATTN_INLINE void td_attn_bwd_chunk(const td_attn_bwd_row *r, int64_t j, __m512 vscale2,
                                      td_attn_dropout dr, int degree, __m512 *pk, __m512 *ds) {
  __mmask16 valid = td_attn_lanes(r->nvalid - j);
  __m512 x2 =
      _mm512_fmsub_ps(vscale2, _mm512_maskz_loadu_ps(valid, r->s + j), _mm512_set1_ps(r->lse2));
  __m512 p = _mm512_maskz_mov_ps(valid, td_attn_exp2_16(x2, degree));
  __m512 dp = _mm512_maskz_loadu_ps(valid, r->dp + j);
  *pk = p;
  if (r->words) {
    __m512 k =
        _mm512_maskz_mov_ps(td_attn_kept(r->words, dr, j, valid), _mm512_set1_ps(dr.keep_scale));
    *pk = _mm512_mul_ps(p, k);
    dp = _mm512_mul_ps(dp, k);
  }
  *ds = _mm512_mul_ps(p, _mm512_sub_ps(dp, _mm512_set1_ps(r->di)));
}

#endif
