/* AVX-512 row kernels of the CPU attention (semantics in cpu_attention.h; the
 * portable versions are in cpu_attention.c). Compiled with the AVX-512 flags and
 * called only after td_cpu_isa_get() == TD_ISA_AVX512. exp and bf16 rounding:
 * cpu_attention_avx512.h. */
#include <math.h>

#include "device/cpu/cpu_attention.h"
#include "device/cpu/cpu_attention_avx512.h"

/* dst[j:j+16) under mask m = x as fp32 or bf16 */
static inline void store16(void *dst, td_dtype dt, int64_t j, __mmask16 m, __m512 x) {
  if (dt == TD_BF16)
    td_attn_store_bf16((uint16_t *)dst + j, m, x);
  else
    _mm512_mask_storeu_ps((float *)dst + j, m, x);
}

void td_attn_softmax_row_avx512(float *s, int64_t nvalid, int64_t ncols, float scale,
                                const uint32_t *words, td_attn_dropout dr, float *lse, void *p_out,
                                td_dtype p_dtype) {
  const __m512 vscale = _mm512_set1_ps(scale), vscale2 = _mm512_set1_ps(scale * TD_ATTN_LOG2E);
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < nvalid; j += 16) {
    __mmask16 m = td_attn_lanes(nvalid - j);
    vmax =
        _mm512_mask_max_ps(vmax, m, vmax, _mm512_mul_ps(vscale, _mm512_maskz_loadu_ps(m, s + j)));
  }
  const float mx = _mm512_reduce_max_ps(vmax);
  const __m512 vm2 = _mm512_set1_ps(mx * TD_ATTN_LOG2E);
  __m512 vsum = _mm512_setzero_ps();
  for (int64_t j = 0; j < nvalid; j += 16) {
    __mmask16 m = td_attn_lanes(nvalid - j);
    __m512 e = td_attn_exp2_16(_mm512_fmsub_ps(vscale2, _mm512_maskz_loadu_ps(m, s + j), vm2), 5);
    _mm512_mask_storeu_ps(s + j, m, e);
    vsum = _mm512_mask_add_ps(vsum, m, vsum, e);
  }
  const float l = _mm512_reduce_add_ps(vsum);
  *lse = mx + logf(l);
  const __m512 vinv = _mm512_set1_ps(1.0f / l), vks = _mm512_set1_ps(dr.keep_scale);
  for (int64_t j = 0; j < ncols; j += 16) {
    __mmask16 m = td_attn_lanes(ncols - j), valid = td_attn_lanes(nvalid - j);
    __m512 p = _mm512_maskz_mul_ps(valid, _mm512_maskz_loadu_ps(valid, s + j), vinv);
    if (words) p = _mm512_maskz_mul_ps(td_attn_kept(words, dr, j, valid), p, vks);
    store16(p_out, p_dtype, j, m, p);
  }
}

void td_attn_softmax_bwd_row_avx512(const float *s, const float *dp, int64_t nvalid, int64_t ncols,
                                    float scale, const uint32_t *words, td_attn_dropout dr,
                                    float lse, float di, void *p_out, void *ds_out,
                                    td_dtype p_dtype) {
  const __m512 vscale2 = _mm512_set1_ps(scale * TD_ATTN_LOG2E);
  const __m512 vlse2 = _mm512_set1_ps(lse * TD_ATTN_LOG2E), vdi = _mm512_set1_ps(di);
  const __m512 vks = _mm512_set1_ps(dr.keep_scale);
  for (int64_t j = 0; j < ncols; j += 16) {
    __mmask16 m = td_attn_lanes(ncols - j), valid = td_attn_lanes(nvalid - j);
    __m512 x2 = _mm512_fmsub_ps(vscale2, _mm512_maskz_loadu_ps(valid, s + j), vlse2);
    __m512 p = _mm512_maskz_mov_ps(valid, td_attn_exp2_16(x2, 5));
    __m512 dpv = _mm512_maskz_loadu_ps(valid, dp + j), pk = p;
    if (words) {
      __m512 k = _mm512_maskz_mov_ps(td_attn_kept(words, dr, j, valid), vks);
      pk = _mm512_mul_ps(p, k);
      dpv = _mm512_mul_ps(dpv, k);
    }
    __m512 ds = _mm512_mul_ps(p, _mm512_sub_ps(dpv, vdi));
    store16(p_out, p_dtype, j, m, pk);
    store16(ds_out, p_dtype, j, m, ds);
  }
}

/* ------------------------------------------------------------------- Philox */

/* One Philox round on 8 blocks (one per 64-bit lane, each 32-bit word of the
 * state in the low half of a lane; the high halves carry junk that never
 * reaches a low half): 2 vpmuludq, 2 shifts, 2 three-way xors. */
#define PHILOX_ROUND(c0, c1, c2, c3, k0, k1)                                      \
  do {                                                                            \
    const __m512i p0_ = _mm512_mul_epu32(c0, m0), p1_ = _mm512_mul_epu32(c2, m1); \
    c0 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1_, 32), c1, k0, 0x96);     \
    c2 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0_, 32), c3, k1, 0x96);     \
    c1 = p1_;                                                                     \
    c3 = p0_;                                                                     \
  } while (0)

/* Store the 32 words of 8 blocks (lane l: block l) in block order. */
static inline void philox_store(uint32_t *o, __m512i c0, __m512i c1, __m512i c2, __m512i c3) {
  const __m512i lo = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11);
  const __m512i hi = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
  const __m512i w01 = _mm512_mask_blend_epi32(0xaaaa, c0, _mm512_slli_epi64(c1, 32));
  const __m512i w23 = _mm512_mask_blend_epi32(0xaaaa, c2, _mm512_slli_epi64(c3, 32));
  _mm512_storeu_si512(o, _mm512_permutex2var_epi64(w01, lo, w23));
  _mm512_storeu_si512(o + 16, _mm512_permutex2var_epi64(w01, hi, w23));
}

/* 16 blocks per step, as two independent groups of 8 (the rounds' multiply
 * latency is the bound otherwise). */
const uint32_t *td_attn_rng_row_avx512(uint64_t seed, uint64_t stream, uint64_t g0, int64_t n,
                                       uint32_t *buf) {
  const uint64_t first = g0 >> 2, nblk = ((g0 + (uint64_t)n - 1) >> 2) - first + 1;
  const __m512i iota = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7), eight = _mm512_set1_epi64(8);
  const __m512i m0 = _mm512_set1_epi64(0xD2511F53u), m1 = _mm512_set1_epi64(0xCD9E8D57u);
  const __m512i s0 = _mm512_set1_epi64((long long)(uint32_t)stream);
  const __m512i s1 = _mm512_set1_epi64((long long)(stream >> 32));
  __m512i key[10][2];
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++, k0 += 0x9E3779B9u, k1 += 0xBB67AE85u)
    key[r][0] = _mm512_set1_epi64(k0), key[r][1] = _mm512_set1_epi64(k1);
  for (uint64_t q = 0; q < nblk; q += 16) {
    const __m512i ctr = _mm512_add_epi64(_mm512_set1_epi64((long long)(first + q)), iota);
    const __m512i ctr8 = _mm512_add_epi64(ctr, eight);
    __m512i a0 = ctr, a1 = _mm512_srli_epi64(ctr, 32), a2 = s0, a3 = s1;
    __m512i b0 = ctr8, b1 = _mm512_srli_epi64(ctr8, 32), b2 = s0, b3 = s1;
#pragma GCC unroll 10
    for (int r = 0; r < 10; r++) {
      PHILOX_ROUND(a0, a1, a2, a3, key[r][0], key[r][1]);
      PHILOX_ROUND(b0, b1, b2, b3, key[r][0], key[r][1]);
    }
    philox_store(buf + 4 * q, a0, a1, a2, a3);
    philox_store(buf + 4 * q + 32, b0, b1, b2, b3);
  }
  return buf + (g0 & 3);
}
