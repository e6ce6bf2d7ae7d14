/* fp32 attention on AVX-512 FMA, one (batch, head) per call: the algorithm of
 * cpu_attention.h with our own register-blocked GEMM on operands packed once per
 * head (through OpenBLAS a third of the time goes to packing these small strided
 * blocks, call after call).
 *
 * FMA GEMM: C[M x N] (+)= A[M x K] B[K x N], fp32 row-major, an 8 x 32 block of
 * C in 16 registers, K in chunks of 256 (B's strip stays in L1); M a multiple of
 * 8, N of 32. T and D are padded with zeros to Tp, Dp (multiples of 32). Packs:
 *   Qp, Kp, Vp, dOp   row-major Tp x Dp (A of S = Q K^T and dP' = dO V^T;
 *                     B of dQ = dS K and O = P V)
 *   KT, VT, QT, dOT   transposed, Dp x Tp (B of S and dP'; A of dK^T = Q^T dS
 *                     and dV^T = dO^T P')
 * Forward rows write e_j = exp(x_j - max) * keep_j over S, and O's rows are
 * multiplied by keep_scale / l after the P V product; backward rows write P'
 * over S and dS over dP. dK^T, dV^T accumulate in Dp x Tp over the query blocks
 * (last block first: it covers every key) and are transposed into dqkv at the
 * end; scale is applied when dQ and dK are written. Rows of Tp elements are
 * Tp + 16 apart (64 bytes of slack: rows 4 KiB apart alias in L1). */
#include <math.h>
#include <string.h>

#include "device/cpu/cpu_attention.h"
#include "device/cpu/cpu_attention_avx512.h"

#define BQ TD_ATTN_F32_BQ
/* rows per causal slice (cpu_attention_f32_heads.inc): the GEMM steps 8 rows, 32 columns */
#define CS 32
#define KC 256 /* K chunk of the GEMM */

static int64_t round32(int64_t x) { return (x + 31) & ~(int64_t)31; }
static size_t round64(size_t x) { return (x + 63) & ~(size_t)63; }

/* ------------------------------------------------------------------- GEMM */

/* One row r of the 8 x 32 block: c<r>0, c<r>1 are its 32 accumulators. */
#define ROW_FMA(r)                                 \
  {                                                \
    const __m512 a_ = _mm512_set1_ps(ak[(r)*lda]); \
    c##r##0 = _mm512_fmadd_ps(a_, b0, c##r##0);    \
    c##r##1 = _mm512_fmadd_ps(a_, b1, c##r##1);    \
  }
#define ROW_INIT(r)                                                          \
  {                                                                          \
    c##r##0 = acc ? _mm512_loadu_ps(c + (r)*ldc) : _mm512_setzero_ps();      \
    c##r##1 = acc ? _mm512_loadu_ps(c + (r)*ldc + 16) : _mm512_setzero_ps(); \
  }
#define ROW_STORE(r)                             \
  {                                              \
    _mm512_storeu_ps(c + (r)*ldc, c##r##0);      \
    _mm512_storeu_ps(c + (r)*ldc + 16, c##r##1); \
  }
#define FOR_8_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

/* C[0:8, 0:32) (+)= A[0:8, 0:K) B[0:K, 0:32) */
static inline void block8x32(int64_t K, const float *a, int64_t lda, const float *b, int64_t ldb,
                             float *c, int64_t ldc, int acc) {
  __m512 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, c60, c61, c70, c71;
  FOR_8_ROWS(ROW_INIT)
  for (int64_t k = 0; k < K; k++) {
    const __m512 b0 = _mm512_loadu_ps(b + k * ldb), b1 = _mm512_loadu_ps(b + k * ldb + 16);
    const float *ak = a + k;
    FOR_8_ROWS(ROW_FMA)
  }
  FOR_8_ROWS(ROW_STORE)
}

/* C[M x N] (+)= A[M x K] B[K x N]; leading dimensions in elements. */
static void fma_gemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                     int64_t ldb, float *C, int64_t ldc, int accumulate) {
  for (int64_t k0 = 0; k0 < K; k0 += KC) {
    const int64_t kc = K - k0 < KC ? K - k0 : KC;
    for (int64_t j = 0; j < N; j += 32)
      for (int64_t i = 0; i < M; i += 8)
        block8x32(kc, A + i * lda + k0, lda, B + k0 * ldb + j, ldb, C + i * ldc + j, ldc,
                  accumulate || k0 > 0);
  }
}

/* ---------------------------------------------------------------- packing */

/* Packs of one head's matrix X (T rows of D floats, ld elements apart), zero
 * padded to Tp x Dp; rows (row-major, Tp x Dp) and tr (X^T, Dp rows tr_pitch
 * apart) may each be NULL. X is read once, 16 x 16 at a time. */
static void pack_head(const void *x, int bf16, int64_t ld, int64_t T, int64_t D, int64_t Tp,
                      int64_t Dp, float *rows, float *tr, int64_t tr_pitch) {
  (void)bf16; /* fp32 only here (cpu_attention_f32_heads.inc) */
  const float *src = (const float *)x;
  td_attn_prefetch_rows(src, ld * 4, 0, 16, T, D * 4, _MM_HINT_T0);
  for (int64_t t0 = 0; t0 < Tp; t0 += 16) {
    td_attn_prefetch_rows(src, ld * 4, t0 + 16, 16, T, D * 4, _MM_HINT_T0);
    for (int64_t c = 0; c < Dp; c += 16) {
      __m512i r[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; i++)
        r[i] = t0 + i < T ? _mm512_maskz_loadu_epi32(td_attn_lanes(D - c), src + (t0 + i) * ld + c)
                          : _mm512_setzero_si512();
      if (rows) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) _mm512_storeu_si512(rows + (t0 + i) * Dp + c, r[i]);
      }
      if (!tr) continue;
      td_attn_transpose16(r);
#pragma GCC unroll 16
      for (int k = 0; k < 16; k++) _mm512_storeu_si512(tr + (c + k) * tr_pitch + t0, r[k]);
    }
  }
}

/* dst[0:D) = mult * x[0:D); full aligned 64-byte lines are streamed (no read
 * for ownership: dst is not read again soon). */
static inline void store_row(float *dst, const float *x, int64_t D, __m512 mult) {
  for (int64_t d = 0; d < D; d += 16) {
    __m512 v = _mm512_mul_ps(mult, _mm512_loadu_ps(x + d));
    if (d + 16 <= D && ((uintptr_t)(dst + d) & 63) == 0)
      _mm512_stream_ps(dst + d, v);
    else
      _mm512_mask_storeu_ps(dst + d, td_attn_lanes(D - d), v);
  }
}

/* dst rows r < rows (ld apart) = mult * row_mult[r] * src[r][0:D) (row_mult NULL:
 * 1); src rows Dp apart. */
static void store_rows(void *out, int bf16, int64_t ld, const float *src, int64_t rows, int64_t D,
                       int64_t Dp, float mult, const float *row_mult) {
  (void)bf16;
  float *dst = (float *)out;
  for (int64_t r = 0; r < rows; r++)
    store_row(dst + r * ld, src + r * Dp, D, _mm512_set1_ps(row_mult ? mult * row_mult[r] : mult));
}

/* dst[t][d] (rows ld apart) = mult * src[d][t] for t < T, d < D; src Dp rows
 * pitch apart, transposed 16 x 16 at a time through buf (16 rows of Dp). */
static void store_transposed(void *out, int bf16, int64_t ld, const float *src, int64_t pitch,
                             int64_t T, int64_t D, int64_t Dp, float mult, float *buf) {
  (void)bf16;
  float *dst = (float *)out;
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
    for (int i = 0; i < 16 && t0 + i < T; i++) store_row(dst + (t0 + i) * ld, buf + i * Dp, D, vm);
  }
}

/* ------------------------------------------------------------- row kernels */

/* Forward rows r0, r1 (two at a time for instruction-level parallelism), n
 * columns (a multiple of 32): e_j (td_attn_fwd_exp, exp to 9.2e-8) over the
 * row's scores; mx = max_j scale s_j, l = sum_j exp(scale s_j - mx). */
static void fwd_row_pair(const td_attn_fwd_row *r0, const td_attn_fwd_row *r1, int64_t n,
                         float scale, td_attn_dropout dr, int bf16, float mx[2], float l[2]) {
  (void)bf16;
  __m512 vm[2];
  td_attn_fwd_max2(r0, r1, scale, mx, vm);
  const __m512 vscale2 = _mm512_set1_ps(scale * TD_ATTN_LOG2E), vm0 = vm[0], vm1 = vm[1];
  __m512 sum0 = _mm512_setzero_ps(), sum1 = sum0;
  for (int64_t j = 0; j < n; j += 16) {
    __m512 e0 = td_attn_fwd_exp(r0, j, vscale2, vm0, dr, 5, &sum0);
    __m512 e1 = td_attn_fwd_exp(r1, j, vscale2, vm1, dr, 5, &sum1);
    _mm512_storeu_ps((float *)r0->s + j, e0);
    _mm512_storeu_ps((float *)r1->s + j, e1);
  }
  l[0] = _mm512_reduce_add_ps(sum0), l[1] = _mm512_reduce_add_ps(sum1);
}

/* Backward rows r0, r1, n columns (a multiple of 16): P' over s, dS over dp. */
static void bwd_row_pair(const td_attn_bwd_row *r0, const td_attn_bwd_row *r1, int64_t n,
                         float scale, td_attn_dropout dr, int bf16) {
  (void)bf16;
  const __m512 vscale2 = _mm512_set1_ps(scale * TD_ATTN_LOG2E);
  for (int64_t j = 0; j < n; j += 16) {
    __m512 pk0, ds0, pk1, ds1;
    td_attn_bwd_chunk(r0, j, vscale2, dr, 5, &pk0, &ds0);
    td_attn_bwd_chunk(r1, j, vscale2, dr, 5, &pk1, &ds1);
    _mm512_storeu_ps((float *)r0->s + j, pk0);
    _mm512_storeu_ps((float *)r0->dp + j, ds0);
    _mm512_storeu_ps((float *)r1->s + j, pk1);
    _mm512_storeu_ps((float *)r1->dp + j, ds1);
  }
}

/* sum_d x[d] y[d] */
static float dot(const float *x, const void *yv, int bf16, int64_t D) {
  (void)bf16;
  const float *y = (const float *)yv;
  __m512 acc = _mm512_setzero_ps();
  for (int64_t d = 0; d < D; d += 16) {
    __mmask16 m = td_attn_lanes(D - d);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + d), _mm512_maskz_loadu_ps(m, y + d), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

/* The random words of query row i for keys [0, i + 1), NULL without dropout. */
static inline const uint32_t *row_words(const td_attention_desc *a, const td_attn_head *e,
                                        td_attn_dropout dr, int64_t i, uint32_t *buf) {
  return td_attn_words(a, e, dr, i, buf);
}

/* The block's lse = max + log l (rows < valid) and O's row factors keep_scale / l
 * over l; rows a multiple of 16. */
static void lse_and_row_factors(const float *rowm, float *rowl, float *lse, int64_t rows,
                                int64_t valid, float keep_scale) {
  for (int64_t r = 0; r < rows; r += 16) {
    __m512 l = _mm512_loadu_ps(rowl + r);
    _mm512_mask_storeu_ps(lse + r, td_attn_lanes(valid - r),
                          _mm512_add_ps(_mm512_loadu_ps(rowm + r),
                                        td_attn_log16(_mm512_max_ps(l, _mm512_set1_ps(1.0f)))));
    _mm512_storeu_ps(rowl + r, _mm512_div_ps(_mm512_set1_ps(keep_scale), l));
  }
}

#define F32_HEADS_NAME(x) td_attn_f32_##x
#include "device/cpu/cpu_attention_f32_heads.inc"
