/* AVX2 row kernels of the CPU attention (semantics in cpu_attention.h; the
 * portable versions are in cpu_attention.c, the AVX-512 ones in
 * cpu_attention_avx512.c, whose math this follows on 8 lanes). Compiled with the
 * AVX2 flags and called only after td_cpu_isa_get() == TD_ISA_AVX2, where the
 * attention's td_cpu_gemm path (when forced: the per-head kernels run
 * otherwise) runs these rows between its GEMMs.
 *
 * exp, masks, dropout and sums: cpu_attention_avx2.h.
 * bf16: td_attn_round_bf16_8, the bits of td_f32_to_bf16. */
#include <math.h>

#include "base/dtype.h"
#include "device/cpu/cpu_attention_avx2.h"

/* dst[j:j+8) (only its first `left` lanes) = x as fp32 or bf16 */
static inline void store8(void *dst, td_dtype dt, int64_t j, int64_t left, __m256 x) {
  if (dt == TD_BF16)
    td_attn_store_bf16_8(dst, j, left, td_attn_round_bf16_8(x));
  else if (left >= 8)
    _mm256_storeu_ps((float *)dst + j, x);
  else
    _mm256_maskstore_ps((float *)dst + j, td_attn_lanes8(left), x);
}

void td_attn_softmax_row_avx2(float *s, int64_t nvalid, int64_t ncols, float scale,
                              const uint32_t *words, td_attn_dropout dr, float *lse, void *p_out,
                              td_dtype p_dtype) {
  const __m256 vscale = _mm256_set1_ps(scale), vscale2 = _mm256_set1_ps(scale * TD_ATTN_LOG2E);
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  for (int64_t j = 0; j < nvalid; j += 8) {
    __m256 x = _mm256_mul_ps(vscale, td_attn_load8(s, j, nvalid - j));
    if (nvalid - j < 8)
      x = _mm256_blendv_ps(vmax, x, _mm256_castsi256_ps(td_attn_lanes8(nvalid - j)));
    vmax = _mm256_max_ps(vmax, x);
  }
  const float mx = td_attn_hmax8(vmax);
  const __m256 vm2 = _mm256_set1_ps(mx * TD_ATTN_LOG2E);
  __m256 vsum = _mm256_setzero_ps();
  for (int64_t j = 0; j < nvalid; j += 8) {
    int64_t left = nvalid - j;
    __m256 e = td_attn_exp2_8(_mm256_fmsub_ps(vscale2, td_attn_load8(s, j, left), vm2));
    if (left < 8) e = _mm256_and_ps(e, _mm256_castsi256_ps(td_attn_lanes8(left)));
    store8(s, TD_F32, j, left, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  const float l = td_attn_hsum8(vsum);
  *lse = mx + logf(l);
  const __m256 vinv = _mm256_set1_ps(1.0f / l);
  for (int64_t j = 0; j < ncols; j += 8) {
    __m256 p = _mm256_mul_ps(td_attn_load8(s, j, nvalid - j), vinv); /* 0 past nvalid */
    if (words) p = _mm256_mul_ps(p, td_attn_keep8(words, dr, j, nvalid - j));
    store8(p_out, p_dtype, j, ncols - j, p);
  }
}

void td_attn_softmax_bwd_row_avx2(const float *s, const float *dp, int64_t nvalid, int64_t ncols,
                                  float scale, const uint32_t *words, td_attn_dropout dr,
                                  float lse, float di, void *p_out, void *ds_out,
                                  td_dtype p_dtype) {
  const __m256 vscale2 = _mm256_set1_ps(scale * TD_ATTN_LOG2E);
  const __m256 vlse2 = _mm256_set1_ps(lse * TD_ATTN_LOG2E);
  const __m256 vdi = _mm256_set1_ps(di);
  for (int64_t j = 0; j < ncols; j += 8) {
    int64_t valid = nvalid - j;
    __m256 live = _mm256_castsi256_ps(td_attn_lanes8(valid));
    __m256 x2 = _mm256_fmsub_ps(vscale2, td_attn_load8(s, j, valid), vlse2);
    __m256 p = _mm256_and_ps(td_attn_exp2_8(x2), live);
    __m256 dpv = td_attn_load8(dp, j, valid), pk = p;
    if (words) {
      __m256 k = td_attn_keep8(words, dr, j, valid);
      pk = _mm256_mul_ps(p, k);
      dpv = _mm256_mul_ps(dpv, k);
    }
    __m256 ds = _mm256_and_ps(_mm256_mul_ps(p, _mm256_sub_ps(dpv, vdi)), live); /* +0 past nvalid */
    store8(p_out, p_dtype, j, ncols - j, pk);
    store8(ds_out, p_dtype, j, ncols - j, ds);
  }
}

/* ------------------------------------------------------------------- Philox */

/* One Philox round on 4 blocks (one per 64-bit lane, each 32-bit word of the
 * state in the low half of a lane; the high halves carry junk that never
 * reaches a low half), as in cpu_attention_avx512.c on 8. */
#define PHILOX_ROUND(c0, c1, c2, c3, k0, k1)                                              \
  do {                                                                                    \
    const __m256i p0_ = _mm256_mul_epu32(c0, m0), p1_ = _mm256_mul_epu32(c2, m1);         \
    c0 = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1_, 32), c1), k0);          \
    c2 = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0_, 32), c3), k1);          \
    c1 = p1_;                                                                             \
    c3 = p0_;                                                                             \
  } while (0)

/* Store the 16 words of 4 blocks (lane l: block l) in block order. */
static inline void philox_store(uint32_t *o, __m256i c0, __m256i c1, __m256i c2, __m256i c3) {
  const __m256i w01 = _mm256_blend_epi32(c0, _mm256_slli_epi64(c1, 32), 0xaa);
  const __m256i w23 = _mm256_blend_epi32(c2, _mm256_slli_epi64(c3, 32), 0xaa);
  const __m256i lo = _mm256_unpacklo_epi64(w01, w23), hi = _mm256_unpackhi_epi64(w01, w23);
  _mm256_storeu_si256((__m256i *)o, _mm256_permute2x128_si256(lo, hi, 0x20));
  _mm256_storeu_si256((__m256i *)(o + 8), _mm256_permute2x128_si256(lo, hi, 0x31));
}

/* 8 blocks per step, as two independent groups of 4 (the rounds' multiply
 * latency is the bound otherwise). */
const uint32_t *td_attn_rng_row_avx2(uint64_t seed, uint64_t stream, uint64_t g0, int64_t n,
                                     uint32_t *buf) {
  const uint64_t first = g0 >> 2, nblk = ((g0 + (uint64_t)n - 1) >> 2) - first + 1;
  const __m256i iota = _mm256_setr_epi64x(0, 1, 2, 3), four = _mm256_set1_epi64x(4);
  const __m256i m0 = _mm256_set1_epi64x(0xD2511F53u), m1 = _mm256_set1_epi64x(0xCD9E8D57u);
  const __m256i s0 = _mm256_set1_epi64x((long long)(uint32_t)stream);
  const __m256i s1 = _mm256_set1_epi64x((long long)(stream >> 32));
  __m256i key[10][2];
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++, k0 += 0x9E3779B9u, k1 += 0xBB67AE85u)
    key[r][0] = _mm256_set1_epi64x(k0), key[r][1] = _mm256_set1_epi64x(k1);
  for (uint64_t q = 0; q < nblk; q += 8) {
    const __m256i ctr = _mm256_add_epi64(_mm256_set1_epi64x((long long)(first + q)), iota);
    const __m256i ctr4 = _mm256_add_epi64(ctr, four);
    __m256i a0 = ctr, a1 = _mm256_srli_epi64(ctr, 32), a2 = s0, a3 = s1;
    __m256i b0 = ctr4, b1 = _mm256_srli_epi64(ctr4, 32), b2 = s0, b3 = s1;
#pragma GCC unroll 10
    for (int r = 0; r < 10; r++) {
      PHILOX_ROUND(a0, a1, a2, a3, key[r][0], key[r][1]);
      PHILOX_ROUND(b0, b1, b2, b3, key[r][0], key[r][1]);
    }
    philox_store(buf + 4 * q, a0, a1, a2, a3);
    philox_store(buf + 4 * q + 16, b0, b1, b2, b3);
  }
  return buf + (g0 & 3);
}
