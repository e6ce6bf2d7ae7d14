/* AVX-512 row kernels of the CPU attention (semantics in cpu_attention.h; the
 * portable versions are in cpu_attention.c). Compiled with the AVX-512 flags and
 * called only after td_cpu_isa_get() == TD_ISA_AVX512. exp and bf16 rounding:
 * cpu_attention_avx512.h. Philox runs 16 counter blocks at once, the 32x32->64
 * products split into even and odd lanes. */
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

/* Lanes kept by dropout among `valid` (all valid lanes without dropout). */
static inline __mmask16 kept(const uint32_t *words, td_attn_dropout dr, int64_t j, __mmask16 valid) {
  if (!words) return valid;
  __m512i w = _mm512_maskz_loadu_epi32(valid, words + j);
  return _mm512_mask_cmpge_epu32_mask(valid, w, _mm512_set1_epi32((int)dr.thr));
}

void td_attn_softmax_row_avx512(float *s, int64_t nvalid, int64_t ncols, float scale,
                                const uint32_t *words, td_attn_dropout dr, float *lse,
                                void *p_out, td_dtype p_dtype) {
  const __m512 vscale = _mm512_set1_ps(scale), vscale2 = _mm512_set1_ps(scale * TD_ATTN_LOG2E);
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < nvalid; j += 16) {
    __mmask16 m = td_attn_lanes(nvalid - j);
    vmax = _mm512_mask_max_ps(vmax, m, vmax, _mm512_mul_ps(vscale, _mm512_maskz_loadu_ps(m, s + j)));
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
    if (words) p = _mm512_maskz_mul_ps(kept(words, dr, j, valid), p, vks);
    store16(p_out, p_dtype, j, m, p);
  }
}

void td_attn_softmax_bwd_row_avx512(const float *s, const float *dp, int64_t nvalid,
                                    int64_t ncols, float scale, const uint32_t *words,
                                    td_attn_dropout dr, float lse, float di, void *p_out,
                                    void *ds_out, td_dtype p_dtype) {
  const __m512 vscale2 = _mm512_set1_ps(scale * TD_ATTN_LOG2E);
  const __m512 vlse2 = _mm512_set1_ps(lse * TD_ATTN_LOG2E), vdi = _mm512_set1_ps(di);
  const __m512 vks = _mm512_set1_ps(dr.keep_scale);
  for (int64_t j = 0; j < ncols; j += 16) {
    __mmask16 m = td_attn_lanes(ncols - j), valid = td_attn_lanes(nvalid - j);
    __m512 x2 = _mm512_fmsub_ps(vscale2, _mm512_maskz_loadu_ps(valid, s + j), vlse2);
    __m512 p = _mm512_maskz_mov_ps(valid, td_attn_exp2_16(x2, 5));
    __m512 dpv = _mm512_maskz_loadu_ps(valid, dp + j), pk = p;
    if (words) {
      __m512 k = _mm512_maskz_mov_ps(kept(words, dr, j, valid), vks);
      pk = _mm512_mul_ps(p, k);
      dpv = _mm512_mul_ps(dpv, k);
    }
    __m512 ds = _mm512_mul_ps(p, _mm512_sub_ps(dpv, vdi));
    store16(p_out, p_dtype, j, m, pk);
    store16(ds_out, p_dtype, j, m, ds);
  }
}

/* ------------------------------------------------------------------- Philox */

/* lo and hi 32 bits of a * mul in every lane */
static inline __m512i mulhilo(__m512i a, uint32_t mul, __m512i *hi) {
  const __m512i vm = _mm512_set1_epi32((int)mul);
  __m512i pe = _mm512_mul_epu32(a, vm);                        /* even lanes, 64-bit */
  __m512i po = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), vm); /* odd lanes */
  *hi = _mm512_mask_blend_epi32(0xaaaa, _mm512_srli_epi64(pe, 32), po);
  return _mm512_mask_blend_epi32(0xaaaa, pe, _mm512_slli_epi64(po, 32));
}

const uint32_t *td_attn_rng_row_avx512(uint64_t seed, uint64_t stream, uint64_t g0, int64_t n,
                                       uint32_t *buf) {
  const uint64_t first = g0 >> 2, nblk = ((g0 + (uint64_t)n - 1) >> 2) - first + 1;
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i lo32 = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi32 = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const __m512i lo64 = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11);
  const __m512i hi64 = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
  for (uint64_t q = 0; q < nblk; q += 16) {
    const uint64_t b0 = first + q;
    const __m512i blo = _mm512_set1_epi32((int)(uint32_t)b0);
    const __m512i bhi = _mm512_set1_epi32((int)(uint32_t)(b0 >> 32));
    __m512i c0 = _mm512_add_epi32(blo, iota);
    __m512i c1 = _mm512_mask_add_epi32(bhi, _mm512_cmplt_epu32_mask(c0, blo), bhi,
                                       _mm512_set1_epi32(1)); /* carry into the high word */
    __m512i c2 = _mm512_set1_epi32((int)(uint32_t)stream);
    __m512i c3 = _mm512_set1_epi32((int)(uint32_t)(stream >> 32));
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
      if (r > 0) k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
      __m512i hi0, hi1;
      __m512i lo0 = mulhilo(c0, 0xD2511F53u, &hi0), lo1 = mulhilo(c2, 0xCD9E8D57u, &hi1);
      c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32((int)k0));
      c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32((int)k1));
      c1 = lo1;
      c3 = lo0;
    }
    /* lane l holds block b0 + l as (c0, c1, c2, c3): interleave to block order */
    __m512i a01l = _mm512_permutex2var_epi32(c0, lo32, c1), a01h = _mm512_permutex2var_epi32(c0, hi32, c1);
    __m512i a23l = _mm512_permutex2var_epi32(c2, lo32, c3), a23h = _mm512_permutex2var_epi32(c2, hi32, c3);
    uint32_t *o = buf + 4 * q;
    _mm512_storeu_si512(o, _mm512_permutex2var_epi64(a01l, lo64, a23l));
    _mm512_storeu_si512(o + 16, _mm512_permutex2var_epi64(a01l, hi64, a23l));
    _mm512_storeu_si512(o + 32, _mm512_permutex2var_epi64(a01h, lo64, a23h));
    _mm512_storeu_si512(o + 48, _mm512_permutex2var_epi64(a01h, hi64, a23h));
  }
  return buf + (g0 & 3);
}
