/* AVX2 helpers shared by the attention's *_avx2.c files (include only from
 * files compiled with the AVX2 flags). They follow cpu_attention_avx512.h's
 * math on 8 lanes, to its bits:
 *
 * exp2_8: 2^t as td_attn_exp2_16 at degree 5 (n = round(t), 2^f by the same
 * polynomial with constant term 1), times 2^n built from integers in two halves
 * (AVX2 has no vscalefps): p 2^n1 is exact and p 2^n1 2^n2 rounds once, so
 * results in the subnormal range round as vscalefps rounds them; t is clamped
 * to [-160, 128] first (2^-160 rounds to 0, as vscalefps gives below -150).
 * reduce16_*: a 16-lane vector held as two halves (lanes 0-7, 8-15) reduced in
 * the order of GCC's _mm512_reduce_add_ps / _max_ps / _min_ps, so sums kept as
 * the AVX-512 kernels keep them (lane l of 16 accumulating elements l mod 16)
 * end in the same bits.
 * log8_ge1: td_attn_log16 (x >= 1), its vgetmantps / vgetexpps by integer ops. */
#ifndef TD_DEVICE_CPU_ATTENTION_AVX2_H
#define TD_DEVICE_CPU_ATTENTION_AVX2_H

#include <immintrin.h>
#include <stdint.h>

#include "device/cpu/cpu_attention.h"

#define TD_ATTN_LOG2E 1.44269504088896341f

/* lanes [0, left) of 8 as an all-ones 32-bit mask (none when left <= 0) */
static inline __m256i td_attn_lanes8(int64_t left) {
  int n = left >= 8 ? 8 : left <= 0 ? 0 : (int)left;
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* 2^t on 8 lanes; NaN propagates through the polynomial */
static inline __m256 td_attn_exp2_8(__m256 t) {
  t = _mm256_min_ps(_mm256_set1_ps(128.0f), _mm256_max_ps(_mm256_set1_ps(-160.0f), t));
  __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 f = _mm256_sub_ps(t, n);
  __m256 p = _mm256_set1_ps(1.326474228e-3f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.671517975e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550733756e-2f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402224200e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931469776e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  __m256i ni = _mm256_cvtps_epi32(n), n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

/* the first `left` lanes of s[j:j+8), 0 elsewhere */
static inline __m256 td_attn_load8(const float *s, int64_t j, int64_t left) {
  return left >= 8 ? _mm256_loadu_ps(s + j) : _mm256_maskload_ps(s + j, td_attn_lanes8(left));
}

/* all-ones lanes where the row's word j + lane is kept (u >= thr, unsigned),
 * over the first `left` lanes (0 beyond) */
static inline __m256 td_attn_kept8(const uint32_t *words, td_attn_dropout dr, int64_t j,
                                   int64_t left) {
  __m256i live = td_attn_lanes8(left);
  __m256i w = _mm256_maskload_epi32((const int *)(words + j), live);
  const __m256i flip = _mm256_set1_epi32((int)0x80000000u); /* unsigned compare by signed */
  __m256i dropped = _mm256_cmpgt_epi32(_mm256_xor_si256(_mm256_set1_epi32((int)dr.thr), flip),
                                       _mm256_xor_si256(w, flip));
  return _mm256_castsi256_ps(_mm256_andnot_si256(dropped, live));
}

/* keep_scale where the row's word j + lane is kept, 0 where dropped or past `left` */
static inline __m256 td_attn_keep8(const uint32_t *words, td_attn_dropout dr, int64_t j,
                                   int64_t left) {
  return _mm256_and_ps(td_attn_kept8(words, dr, j, left), _mm256_set1_ps(dr.keep_scale));
}

/* horizontal sum / max of 8 lanes in a fixed order */
static inline float td_attn_hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

static inline float td_attn_hmax8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}


/* x rounded to bf16 (td_f32_to_bf16's bits: nearest even, NaN kept quiet), as fp32 */
static inline __m256 td_attn_round_bf16_8(__m256 x) {
  const __m256i u = _mm256_castps_si256(x), hi = _mm256_srli_epi32(u, 16);
  __m256i r = _mm256_add_epi32(
      u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(hi, _mm256_set1_epi32(1))));
  r = _mm256_srli_epi32(r, 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
  return _mm256_castsi256_ps(_mm256_slli_epi32(r, 16));
}

/* the first `left` of the 8 bf16 at s + j as fp32, 0 elsewhere */
static inline __m256 td_attn_load_bf16_8(const uint16_t *s, int64_t j, int64_t left) {
  __m128i h;
  if (left >= 8) {
    h = _mm_loadu_si128((const __m128i *)(s + j));
  } else {
    uint16_t tmp[8] = {0};
    for (int64_t i = 0; i < left; i++) tmp[i] = s[j + i];
    h = _mm_loadu_si128((const __m128i *)tmp);
  }
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* the first `left` lanes of x (already bf16 values, as td_attn_round_bf16_8 gives)
 * stored as bf16 at d + j */
static inline void td_attn_store_bf16_8(uint16_t *d, int64_t j, int64_t left, __m256 x) {
  const __m256i w = _mm256_srli_epi32(_mm256_castps_si256(x), 16);
  const __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
  if (left >= 8) {
    _mm_storeu_si128((__m128i *)(d + j), h);
  } else {
    uint16_t tmp[8];
    _mm_storeu_si128((__m128i *)tmp, h);
    for (int64_t i = 0; i < left; i++) d[j + i] = tmp[i];
  }
}

/* _mm512_reduce_add_ps of the 16 lanes (lo, hi) */
static inline float td_attn_reduce16_add(__m256 lo, __m256 hi) {
  __m256 t3 = _mm256_add_ps(hi, lo);
  __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
  __m128 t8 = _mm_add_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtss_f32(t8) + _mm_cvtss_f32(_mm_shuffle_ps(t8, t8, _MM_SHUFFLE(1, 1, 1, 1)));
}

/* _mm512_reduce_max_ps (max 1) or _min_ps (max 0) of the 16 lanes (lo, hi) */
static inline float td_attn_reduce16_ext(__m256 lo, __m256 hi, int max) {
  __m256 t3 = max ? _mm256_max_ps(hi, lo) : _mm256_min_ps(hi, lo);
  __m128 t4 = _mm256_extractf128_ps(t3, 1), t5 = _mm256_castps256_ps128(t3);
  __m128 t6 = max ? _mm_max_ps(t4, t5) : _mm_min_ps(t4, t5);
  __m128 t7 = _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2));
  __m128 t8 = max ? _mm_max_ps(t6, t7) : _mm_min_ps(t6, t7);
  __m128 t9 = _mm_shuffle_ps(t8, t8, _MM_SHUFFLE(0, 1, 0, 1));
  return _mm_cvtss_f32(max ? _mm_max_ps(t8, t9) : _mm_min_ps(t8, t9));
}

/* log x for x >= 1 (finite), td_attn_log16's steps: m = x's mantissa in [0.75,
 * 1.5) (halved when its first fraction bit is set), k its exponent to match. */
static inline __m256 td_attn_log8_ge1(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i top = _mm256_and_si256(_mm256_srli_epi32(u, 22), _mm256_set1_epi32(1));
  const __m256i e = _mm256_sub_epi32(_mm256_srli_epi32(u, 23), _mm256_set1_epi32(127));
  const __m256 m = _mm256_castsi256_ps(
      _mm256_or_si256(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffff)),
                      _mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(127), top), 23)));
  const __m256 k = _mm256_cvtepi32_ps(_mm256_add_epi32(e, top));
  const __m256 one = _mm256_set1_ps(1.0f);
  __m256 z = _mm256_div_ps(_mm256_sub_ps(m, one), _mm256_add_ps(m, one));
  __m256 z2 = _mm256_mul_ps(z, z);
  __m256 q = _mm256_set1_ps(2.0f / 9);
  q = _mm256_fmadd_ps(q, z2, _mm256_set1_ps(2.0f / 7));
  q = _mm256_fmadd_ps(q, z2, _mm256_set1_ps(2.0f / 5));
  q = _mm256_fmadd_ps(q, z2, _mm256_set1_ps(2.0f / 3));
  q = _mm256_fmadd_ps(q, z2, _mm256_set1_ps(2.0f));
  return _mm256_fmadd_ps(k, _mm256_set1_ps(0.693147180559945f), _mm256_mul_ps(q, z));
}

/* In-register transpose of an 8 x 8 matrix of floats (r[i] = row i). */
static inline __attribute__((always_inline)) void td_attn_transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
#pragma GCC unroll 2
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

#endif
