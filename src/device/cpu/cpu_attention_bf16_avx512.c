/* bf16 attention, one (batch, head) per call; the algorithm is cpu_attention.h's
 * with our own GEMM instead of the library's (oneDNN 2.6 only runs AMX on dense
 * operands, and attention's are strided; through oneDNN per block the heads ran at
 * a third of the GEMM rate on AVX512-BF16). Two GEMMs of one contract:
 *   AMX          tiles (TDPBF16PS), blocked 32 x 32 (4 C tiles, 2 A, 2 B); needs
 *                AMX-BF16 and the OS's grant of the tile state;
 *   AVX512-BF16  dot products (VDPBF16PS), 8 x 32 strips of C in 16 zmm registers:
 *                per pair of k, two loads of B and a broadcast word of A per row.
 * Both need AVX512-BF16 (vcvtne2ps2bf16: round to nearest even).
 *
 * GEMM: C[M x N] fp32 (+)= A[M x K] B with A bf16 row-major and B in the
 * pair layout ("VNNI": row p holds, for each column n, the pair B[2p][n],
 * B[2p+1][n]). M, N, K are multiples of 32: T and D are padded with zeros to
 * Tp, Dp (multiples of 32). Per head the operands are packed once (bf16, Tp x Dp
 * each):
 *   Qp, dOp   row-major (A of S = Q K^T, dP' = dO V^T)
 *   KTv, VTv  pair layout of K^T, V^T: row p = (K[t][2p], K[t][2p+1]) for all t
 *             (B of S and dP'; a 32-bit transpose of K viewed as Tp x Dp/2)
 *   Kv, Vv    pair layout of K, V: row p = (V[2p][d], V[2p+1][d]) for all d
 *             (B of dQ = dS K and O = P V)
 *   QT, dOT   Q^T, dO^T row-major (A of dK^T = Q^T dS, dV^T = dO^T P')
 * Forward rows write e_j = exp(x_j - max) * keep_j as bf16 (P before its 1/l),
 * and O's rows are multiplied by keep_scale / l after the P V product, as
 * FlashAttention does. Backward rows write P' and dS in the pair layout over
 * query rows (B of dV^T, dK^T) and dS row-major (A of dQ). dK^T, dV^T
 * accumulate in fp32 Dp x Tp over the query blocks (last block first: it covers
 * every key) and are transposed into dqkv at the end; scale is applied when dQ
 * and dK are written. Padded query rows get P = P' = dS = 0.
 *
 * Long row pitches get 64 extra bytes: tile rows 4 KiB apart alias in L1 and
 * halve the tile store rate. */
#include <math.h>
#include <string.h>

#include "base/dtype.h"
#include "device/cpu/cpu_attention.h"
#include "device/cpu/cpu_attention_avx512.h"
#include "device/cpu/cpu_bf16_avx512.h"

#define BQ TD_ATTN_BF16_BQ


static int64_t round32(int64_t x) { return (x + 31) & ~(int64_t)31; }
static size_t round64(size_t x) { return (x + 63) & ~(size_t)63; }

/* ------------------------------------------------------------------- tiles */

/* C[M x N] (+)= A[M x K] B: A bf16 row-major (lda bytes), B in pair layout (K/2
 * rows of N pairs, ldb bytes), C fp32 (ldc bytes); M, N, K multiples of 32.
 * Column blocks outer: B (the long operand here) is read once. */
TD_AMX_FN static void tile_gemm(int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                             const void *B, int64_t ldb, float *C, int64_t ldc, int accumulate) {
  TD_MEMORY_BARRIER();
  for (int64_t j = 0; j < N; j += 32)
    for (int64_t i = 0; i < M; i += 32) {
      char *c = (char *)C + i * ldc + j * 4;
      if (accumulate) {
        _tile_loadd(0, c, ldc);
        _tile_loadd(1, c + 64, ldc);
        _tile_loadd(2, c + 16 * ldc, ldc);
        _tile_loadd(3, c + 16 * ldc + 64, ldc);
      } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      }
      for (int64_t k = 0; k < K; k += 32) {
        const char *a = (const char *)A + i * lda + k * 2;
        const char *b = (const char *)B + (k / 2) * ldb + j * 4;
        _tile_loadd(4, a, lda);
        _tile_loadd(5, a + 16 * lda, lda);
        _tile_loadd(6, b, ldb);
        _tile_loadd(7, b + 64, ldb);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      _tile_stored(0, c, ldc);
      _tile_stored(1, c + 64, ldc);
      _tile_stored(2, c + 16 * ldc, ldc);
      _tile_stored(3, c + 16 * ldc + 64, ldc);
    }
}

/* tile_gemm's contract on AVX512-BF16 dot products: 8 x 32 strips of C over the
 * whole K, column blocks outer (B's 32 columns, K/2 rows of 128 bytes, stay in L1
 * or L2 for every strip). */
static void dp_gemm(int64_t M, int64_t N, int64_t K, const void *A, int64_t lda, const void *B,
                    int64_t ldb, float *C, int64_t ldc, int accumulate) {
  for (int64_t j = 0; j < N; j += 32)
    for (int64_t i = 0; i < M; i += 8) {
      const char *a = (const char *)A + i * lda, *b = (const char *)B + j * 4;
      char *c = (char *)C + i * ldc + j * 4;
      __m512 acc[8][2];
#pragma GCC unroll 8
      for (int r = 0; r < 8; r++) {
        acc[r][0] = accumulate ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
        acc[r][1] = accumulate ? _mm512_loadu_ps(c + r * ldc + 64) : _mm512_setzero_ps();
      }
      td_dp_rows8(acc, (const uint16_t *)a, lda / 2, 2, 32, (const uint16_t *)b, 32, ldb / 2,
                  8 * ldb, K / 32);
#pragma GCC unroll 8
      for (int r = 0; r < 8; r++) {
        _mm512_storeu_ps(c + r * ldc, acc[r][0]);
        _mm512_storeu_ps(c + r * ldc + 64, acc[r][1]);
      }
    }
}

typedef void (*gemm_fn)(int64_t M, int64_t N, int64_t K, const void *A, int64_t lda, const void *B,
                        int64_t ldb, float *C, int64_t ldc, int accumulate);

/* ---------------------------------------------------------------- packing */

/* mask of the first min(max(left, 0), 32) lanes */
static inline __mmask32 lanes32(int64_t left) {
  return left >= 32  ? (__mmask32)0xffffffffu
         : left <= 0 ? (__mmask32)0
                     : (__mmask32)((1u << left) - 1);
}

/* Packs of one head's matrix X (T rows of D bf16, ld elements apart), zero
 * padded to Tp x Dp; each output may be NULL:
 *   rows   row-major, Tp x Dp bf16
 *   tr     X^T: pair layout, Dp/2 rows of 32-bit pairs (tr_split 0), or bf16,
 *          Dp rows (tr_split 1); rows tr_pitch elements apart
 *   pairs  pair layout of X, Tp/2 rows of Dp 32-bit pairs
 * X is read once, 16 tokens x 32 columns at a time. */
static void pack_head(const uint16_t *src, int64_t ld, int64_t T, int64_t D, int64_t Tp, int64_t Dp,
                      uint16_t *rows, void *tr, int64_t tr_pitch, int tr_split, uint32_t *pairs) {
  const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                      39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
  td_attn_prefetch_rows(src, ld * 2, 0, 16, T, D * 2, _MM_HINT_T0);
  for (int64_t t0 = 0; t0 < Tp; t0 += 16) {
    td_attn_prefetch_rows(src, ld * 2, t0 + 16, 16, T, D * 2, _MM_HINT_T0);
    for (int64_t c = 0; c < Dp; c += 32) {
      __m512i r[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; i++)
        r[i] = t0 + i < T ? _mm512_maskz_loadu_epi16(lanes32(D - c), src + (t0 + i) * ld + c)
                          : _mm512_setzero_si512();
      if (rows) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) _mm512_storeu_si512(rows + (t0 + i) * Dp + c, r[i]);
      }
      if (pairs) {
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
          uint32_t *o = pairs + (t0 / 2 + i) * Dp + c;
          _mm512_storeu_si512(o, _mm512_permutex2var_epi16(r[2 * i], lo, r[2 * i + 1]));
          _mm512_storeu_si512(o + 16, _mm512_permutex2var_epi16(r[2 * i], hi, r[2 * i + 1]));
        }
      }
      if (!tr) continue;
      td_attn_transpose16(r); /* r[k]: pair c/2 + k of tokens t0 .. t0 + 15 */
#pragma GCC unroll 16
      for (int k = 0; k < 16; k++) {
        if (!tr_split) {
          _mm512_storeu_si512((uint32_t *)tr + (c / 2 + k) * tr_pitch + t0, r[k]);
        } else {
          uint16_t *o = (uint16_t *)tr + (c + 2 * k) * tr_pitch + t0;
          _mm256_storeu_si256((__m256i *)o, _mm512_cvtepi32_epi16(r[k]));
          _mm256_storeu_si256((__m256i *)(o + tr_pitch),
                              _mm512_cvtepi32_epi16(_mm512_srli_epi32(r[k], 16)));
        }
      }
    }
  }
}

/* dst[0:D) = bf16 of x[0:D) (x 32-aligned runs of fp32); full aligned 64-byte
 * lines are streamed (no read for ownership: dst is not read again soon). */
static inline void store_row_bf16(uint16_t *dst, const float *x, int64_t D, __m512 mult) {
  int64_t d = 0;
  for (; d + 32 <= D; d += 32) {
    __m512i v = (__m512i)_mm512_cvtne2ps_pbh(_mm512_mul_ps(mult, _mm512_loadu_ps(x + d + 16)),
                                             _mm512_mul_ps(mult, _mm512_loadu_ps(x + d)));
    if (((uintptr_t)(dst + d) & 63) == 0)
      _mm512_stream_si512((__m512i *)(dst + d), v);
    else
      _mm512_storeu_si512(dst + d, v);
  }
  for (; d < D; d += 16)
    _mm256_mask_storeu_epi16(
        dst + d, td_attn_lanes(D - d),
        (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(mult, _mm512_loadu_ps(x + d))));
}

/* dst rows r < rows (ld elements apart) = mult * row_mult[r] * src[r][0:D) as bf16
 * (row_mult NULL: 1); src fp32, rows Dp apart. */
static void store_rows(uint16_t *dst, int64_t ld, const float *src, int64_t rows, int64_t D,
                       int64_t Dp, float mult, const float *row_mult) {
  for (int64_t r = 0; r < rows; r++)
    store_row_bf16(dst + r * ld, src + r * Dp, D,
                   _mm512_set1_ps(row_mult ? mult * row_mult[r] : mult));
}

/* dst[t][d] (rows ld elements apart) = mult * src[d][t] as bf16 for t < T, d < D;
 * src fp32, Dp rows pitch apart. Transposed 16 x 16 at a time through buf
 * (16 rows of Dp floats). */
static void store_transposed(uint16_t *dst, int64_t ld, const float *src, int64_t pitch, int64_t T,
                             int64_t D, int64_t Dp, float mult, float *buf) {
  const __m512 vm = _mm512_set1_ps(mult);
  for (int64_t t0 = 0; t0 < T; t0 += 16) {
    for (int64_t d0 = 0; d0 < Dp; d0 += 16) {
      __m512i r[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(src + (d0 + i) * pitch + t0);
      td_attn_transpose16(r);
#pragma GCC unroll 16
      for (int i = 0; i < 16; i++) _mm512_storeu_si512(buf + i * Dp + d0, r[i]);
    }
    for (int i = 0; i < 16 && t0 + i < T; i++)
      store_row_bf16(dst + (t0 + i) * ld, buf + i * Dp, D, vm);
  }
}

/* sum_d x[d] y[d] over D bf16 elements */
static float dot_bf16(const uint16_t *x, const uint16_t *y, int64_t D) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t d = 0; d < D; d += 16) {
    __mmask16 m = td_attn_lanes(D - d);
    acc = _mm512_fmadd_ps(td_attn_load_bf16(x + d, m), td_attn_load_bf16(y + d, m), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

/* ------------------------------------------------------------- row kernels */

/* Forward rows r0, r1 (two at a time for instruction-level parallelism), n
 * columns (a multiple of 32): e_j (td_attn_fwd_exp, exp to 2.8e-6: e goes to
 * bf16 and lse's error stays ~1e-6) as bf16 to p0, p1; mx = max_j scale s_j and
 * l = sum_j exp(scale s_j - mx) of each row. */
static void fwd_row_pair(const td_attn_fwd_row *r0, const td_attn_fwd_row *r1, int64_t n,
                         float scale, td_attn_dropout dr, uint16_t *p0, uint16_t *p1, float mx[2],
                         float l[2]) {
  __m512 vm[2];
  td_attn_fwd_max2(r0, r1, scale, mx, vm);
  const __m512 vscale2 = _mm512_set1_ps(scale * TD_ATTN_LOG2E), vm0 = vm[0], vm1 = vm[1];
  __m512 sum0 = _mm512_setzero_ps(), sum1 = sum0;
  for (int64_t j = 0; j < n; j += 32) {
    __m512 a0 = td_attn_fwd_exp(r0, j, vscale2, vm0, dr, 4, &sum0);
    __m512 b0 = td_attn_fwd_exp(r0, j + 16, vscale2, vm0, dr, 4, &sum0);
    __m512 a1 = td_attn_fwd_exp(r1, j, vscale2, vm1, dr, 4, &sum1);
    __m512 b1 = td_attn_fwd_exp(r1, j + 16, vscale2, vm1, dr, 4, &sum1);
    _mm512_storeu_si512(p0 + j, (__m512i)_mm512_cvtne2ps_pbh(b0, a0));
    _mm512_storeu_si512(p1 + j, (__m512i)_mm512_cvtne2ps_pbh(b1, a1));
  }
  l[0] = _mm512_reduce_add_ps(sum0), l[1] = _mm512_reduce_add_ps(sum1);
}

/* Query rows 2q, 2q+1 of a block (n columns, a multiple of 32): dS row-major to
 * ds0 and ds0 + ds_pitch; P' and dS pairs to pk_pairs, ds_pairs (row q of the
 * pair layouts). A row with nvalid == 0 (padding) gives zeros. */
static void bwd_row_pair(const td_attn_bwd_row *r0, const td_attn_bwd_row *r1, int64_t n,
                         float scale, td_attn_dropout dr, uint16_t *ds0, int64_t ds_pitch,
                         uint32_t *pk_pairs, uint32_t *ds_pairs) {
  const __m512 vscale2 = _mm512_set1_ps(scale * TD_ATTN_LOG2E);
  const __m512i interleave =
      _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                       21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const int64_t live = r0->nvalid > r1->nvalid ? r0->nvalid : r1->nvalid;
  for (int64_t j = 0; j < n; j += 16) {
    __m512i pk2 = _mm512_setzero_si512(), ds2 = pk2; /* row 0 in words 0-15, row 1 in 16-31 */
    if (j < live) {
      __m512 pk0, ds0v, pk1, ds1v;
      td_attn_bwd_chunk(r0, j, vscale2, dr, 3, &pk0, &ds0v); /* exp to 1e-4: p', dS go to bf16 */
      td_attn_bwd_chunk(r1, j, vscale2, dr, 3, &pk1, &ds1v);
      pk2 = (__m512i)_mm512_cvtne2ps_pbh(pk1, pk0);
      ds2 = (__m512i)_mm512_cvtne2ps_pbh(ds1v, ds0v);
    }
    _mm256_storeu_si256((__m256i *)(ds0 + j), _mm512_castsi512_si256(ds2));
    _mm256_storeu_si256((__m256i *)(ds0 + ds_pitch + j), _mm512_extracti64x4_epi64(ds2, 1));
    _mm512_storeu_si512(pk_pairs + j, _mm512_permutexvar_epi16(interleave, pk2));
    _mm512_storeu_si512(ds_pairs + j, _mm512_permutexvar_epi16(interleave, ds2));
  }
}

/* ------------------------------------------------------------------ scratch */

typedef struct {
  int64_t Tp, Dp;
  /* pitch (elements) of rows up to Tp long: p32 for 32-bit elements (KTv, VTv,
   * dKT, dVT, S, dP, Pv, dSv), p16 for bf16 (QT, dOT, P, dS); 64 bytes of slack */
  int64_t p32, p16;
  uint16_t *Qp, *KTv, *Vv, *Kv, *VTv, *dOp, *QT, *dOT, *P, *dS, *Pv, *dSv;
  float *S, *dP, *Ob, *dKT, *dVT, *rowm, *rowl, *di;
  uint32_t *rng0, *rng1;
} bf16_bufs;

static void *take(char *base, size_t *off, size_t bytes) {
  void *p = base ? base + *off : NULL;
  *off += round64(bytes);
  return p;
}

/* Carve the scratch (base NULL: only count); returns its size. */
static size_t layout(bf16_bufs *b, char *base, int64_t Tp, int64_t Dp, int backward) {
  memset(b, 0, sizeof *b);
  b->Tp = Tp, b->Dp = Dp, b->p32 = Tp + 16, b->p16 = Tp + 32;
  const size_t pk = (size_t)(Tp * Dp) * 2;
  const size_t pairs_t = (size_t)(Dp / 2 * b->p32) * 4, rows_t = (size_t)(Dp * b->p16) * 2;
  const size_t blk32 = (size_t)(BQ * b->p32) * 4, blk16 = (size_t)(BQ * b->p16) * 2;
  size_t off = 0;
  b->Qp = take(base, &off, pk);
  b->KTv = take(base, &off, pairs_t);
  b->S = take(base, &off, blk32);
  b->Ob = take(base, &off, (size_t)(BQ * Dp) * 4); /* O block, dQ block, transposes */
  b->rng0 = take(base, &off, (size_t)(Tp + 67) * 4);
  if (!backward) {
    b->Vv = take(base, &off, pk);
    b->P = take(base, &off, blk16);
    b->rowm = take(base, &off, BQ * 4);
    b->rowl = take(base, &off, BQ * 4);
    b->rng1 = take(base, &off, (size_t)(Tp + 67) * 4);
    return off;
  }
  b->Kv = take(base, &off, pk);
  b->VTv = take(base, &off, pairs_t);
  b->dOp = take(base, &off, pk);
  b->QT = take(base, &off, rows_t);
  b->dOT = take(base, &off, rows_t);
  b->dP = take(base, &off, blk32);
  b->dS = take(base, &off, blk16);
  b->Pv = take(base, &off, blk32 / 2);
  b->dSv = take(base, &off, blk32 / 2);
  b->dKT = take(base, &off, pairs_t * 2);
  b->dVT = take(base, &off, pairs_t * 2);
  b->rng1 = take(base, &off, (size_t)(Tp + 67) * 4);
  b->di = take(base, &off, (size_t)Tp * 4);
  return off;
}

size_t td_attn_bf16_scratch_bytes(int64_t T, int64_t D, int backward) {
  bf16_bufs b;
  return layout(&b, NULL, round32(T), round32(D), backward);
}

/* ------------------------------------------------------------------ heads */

static void forward_head(const td_attention_desc *a, int64_t bh, td_attn_dropout dr,
                         void *scratch, gemm_fn gemm) {
  const td_attn_head e = td_attn_head_of(a, bh);
  const int64_t T = e.T, D = e.D, ld = 3 * e.H * D;
  bf16_bufs m;
  layout(&m, scratch, round32(T), round32(D), 0);
  const int64_t Tp = m.Tp, Dp = m.Dp;
  pack_head((const uint16_t *)e.q, ld, T, D, Tp, Dp, m.Qp, NULL, 0, 0, NULL);
  pack_head((const uint16_t *)e.k, ld, T, D, Tp, Dp, NULL, m.KTv, m.p32, 0, NULL);
  pack_head((const uint16_t *)e.v, ld, T, D, Tp, Dp, NULL, NULL, 0, 0, (uint32_t *)m.Vv);
  uint16_t *out = (uint16_t *)e.o;
  for (int64_t i0 = 0; i0 < T; i0 += BQ) {
    const int64_t rows = BQ < Tp - i0 ? BQ : Tp - i0, n = i0 + rows; /* keys [0, n) */
    gemm(rows, n, Dp, m.Qp + i0 * Dp, Dp * 2, m.KTv, m.p32 * 4, m.S, m.p32 * 4, 0);
    for (int64_t r = 0; r < rows; r += 2) {
      td_attn_fwd_row rr[2];
      for (int u = 0; u < 2; u++) {
        const int64_t i = i0 + r + u;
        rr[u] = (td_attn_fwd_row){.s = m.S + (r + u) * m.p32};
        if (i >= T) continue; /* padding: nvalid 0 gives a zero row */
        rr[u].nvalid = i + 1;
        rr[u].words = td_attn_words(a, &e, dr, i, u ? m.rng1 : m.rng0);
      }
      fwd_row_pair(&rr[0], &rr[1], n, a->scale, dr, m.P + r * m.p16, m.P + (r + 1) * m.p16,
                   m.rowm + r, m.rowl + r);
    }
    for (int64_t r = 0; r < rows; r += 16) { /* lse = max + log l;  O's row factor keep_scale / l */
      __m512 l = _mm512_loadu_ps(m.rowl + r);
      __mmask16 real = td_attn_lanes(T - i0 - r);
      _mm512_mask_storeu_ps(e.lse + i0 + r, real,
                            _mm512_add_ps(_mm512_loadu_ps(m.rowm + r),
                                          td_attn_log16(_mm512_max_ps(l, _mm512_set1_ps(1.0f)))));
      _mm512_storeu_ps(m.rowl + r, _mm512_div_ps(_mm512_set1_ps(dr.keep_scale), l));
    }
    gemm(rows, Dp, n, m.P, m.p16 * 2, m.Vv, Dp * 4, m.Ob, Dp * 4, 0);
    store_rows(out + i0 * e.H * D, e.H * D, m.Ob, (T - i0 < rows ? T - i0 : rows), D, Dp, 1.0f,
               m.rowl);
  }
  _mm_sfence(); /* the streaming stores */
}

static void backward_head(const td_attention_desc *a, int64_t bh, td_attn_dropout dr,
                          void *scratch, gemm_fn gemm) {
  const td_attn_head e = td_attn_head_of(a, bh);
  const int64_t T = e.T, D = e.D, ld = 3 * e.H * D, ldo = e.H * D;
  const uint16_t *O = (const uint16_t *)e.o;
  bf16_bufs m;
  layout(&m, scratch, round32(T), round32(D), 1);
  const int64_t Tp = m.Tp, Dp = m.Dp, p32 = m.p32, p16 = m.p16;
  pack_head((const uint16_t *)e.q, ld, T, D, Tp, Dp, m.Qp, m.QT, p16, 1, NULL);
  pack_head((const uint16_t *)e.k, ld, T, D, Tp, Dp, NULL, m.KTv, p32, 0, (uint32_t *)m.Kv);
  pack_head((const uint16_t *)e.v, ld, T, D, Tp, Dp, NULL, m.VTv, p32, 0, NULL);
  pack_head((const uint16_t *)e.dout, ldo, T, D, Tp, Dp, m.dOp, m.dOT, p16, 1, NULL);
  for (int64_t t = 0; t < T; t++) { /* D_t = rowsum(dO_t * O_t) */
    if (t % 16 == 0) td_attn_prefetch_rows(O, ldo * 2, t + 16, 16, T, D * 2, _MM_HINT_T0);
    m.di[t] = dot_bf16(m.dOp + t * Dp, O + t * ldo, D);
  }
  uint16_t *dq = (uint16_t *)((char *)a->dqkv + (e.q - (const char *)a->qkv));
  const int64_t last = (T - 1) / BQ * BQ;
  for (int64_t i0 = last; i0 >= 0; i0 -= BQ) {
    const int64_t rows = BQ < Tp - i0 ? BQ : Tp - i0, n = i0 + rows;
    const int acc = i0 != last; /* the last block covers every key: it initialises dK^T, dV^T */
    gemm(rows, n, Dp, m.Qp + i0 * Dp, Dp * 2, m.KTv, p32 * 4, m.S, p32 * 4, 0);
    gemm(rows, n, Dp, m.dOp + i0 * Dp, Dp * 2, m.VTv, p32 * 4, m.dP, p32 * 4, 0);
    for (int64_t r = 0; r < rows; r += 2) {
      td_attn_bwd_row rr[2];
      for (int u = 0; u < 2; u++) {
        const int64_t i = i0 + r + u;
        rr[u] = (td_attn_bwd_row){.s = m.S + (r + u) * p32, .dp = m.dP + (r + u) * p32};
        if (i >= T) continue; /* padding: nvalid 0 */
        rr[u].nvalid = i + 1;
        rr[u].lse2 = e.lse[i] * TD_ATTN_LOG2E;
        rr[u].di = m.di[i];
        rr[u].words = td_attn_words(a, &e, dr, i, u ? m.rng1 : m.rng0);
      }
      bwd_row_pair(&rr[0], &rr[1], n, a->scale, dr, m.dS + r * p16, p16,
                   (uint32_t *)m.Pv + (r / 2) * p32, (uint32_t *)m.dSv + (r / 2) * p32);
    }
    gemm(Dp, n, rows, m.dOT + i0, p16 * 2, m.Pv, p32 * 4, m.dVT, p32 * 4, acc);
    gemm(Dp, n, rows, m.QT + i0, p16 * 2, m.dSv, p32 * 4, m.dKT, p32 * 4, acc);
    gemm(rows, Dp, n, m.dS, p16 * 2, m.Kv, Dp * 4, m.Ob, Dp * 4, 0);
    store_rows(dq + i0 * ld, ld, m.Ob, (T - i0 < rows ? T - i0 : rows), D, Dp, a->scale, NULL);
  }
  store_transposed(dq + D, ld, m.dKT, p32, T, D, Dp, a->scale, m.Ob);
  store_transposed(dq + 2 * D, ld, m.dVT, p32, T, D, Dp, 1.0f, m.Ob);
  _mm_sfence(); /* the streaming stores */
}

TD_AMX_FN void td_attn_amx_forward_head(const td_attention_desc *a, int64_t bh, td_attn_dropout dr,
                                     void *scratch) {
  td_amx_tiles_configure();
  forward_head(a, bh, dr, scratch, tile_gemm);
  _tile_release();
}

TD_AMX_FN void td_attn_amx_backward_head(const td_attention_desc *a, int64_t bh, td_attn_dropout dr,
                                      void *scratch) {
  td_amx_tiles_configure();
  backward_head(a, bh, dr, scratch, tile_gemm);
  _tile_release();
}

void td_attn_dpbf16_forward_head(const td_attention_desc *a, int64_t bh, td_attn_dropout dr,
                                 void *scratch) {
  forward_head(a, bh, dr, scratch, dp_gemm);
}

void td_attn_dpbf16_backward_head(const td_attention_desc *a, int64_t bh, td_attn_dropout dr,
                                  void *scratch) {
  backward_head(a, bh, dr, scratch, dp_gemm);
}
