/* fp32 attention on AVX2 FMA, one (batch, head) per call: for CPUs without
 * AVX-512 (AMD Zen 2/3, Intel client cores), the algorithm, packs and scratch
 * layout of cpu_attention_f32_avx512.c (read its header first) on 8 lanes; the
 * scratch and the head drivers are the same code (cpu_attention_f32_heads.inc).
 * Through td_cpu_gemm a library GEMM packs these small strided blocks call
 * after call; here each head's operands are packed once.
 *
 * FMA GEMM: C[M x N] (+)= A[M x K] B[K x N], fp32 row-major, a 6 x 16 block of C
 * in 12 registers (4 x 16 and 2 x 16 for the rows left over), K in chunks of 256
 * (B's strip stays in L1); M a multiple of 2, N of 16. Every element of C is
 * one chain of FMAs over k in order, as in the AVX-512 GEMM, and the rows keep
 * their sums as 16 lanes (two halves) reduced in the AVX-512 kernels' order
 * (cpu_attention_avx2.h), so the two paths are written to give the same bits.
 * Transposes go 8 x 8 at a time. bf16 calls (a CPU without AVX512-BF16 has no
 * bf16 arithmetic) run on the same fp32 products: inputs widened in the packs,
 * e_j, P' and dS rounded to bf16 in the rows as the bf16 heads round them,
 * outputs rounded when stored. */
#include <math.h>
#include <string.h>

#include "device/cpu/cpu_attention.h"
#include "device/cpu/cpu_attention_avx2.h"

#define BQ TD_ATTN_F32_BQ
/* rows per causal slice (cpu_attention_f32_heads.inc): the GEMM steps 2 rows, 16 columns */
#define CS 16
#define KC 256 /* K chunk of the GEMM */

static int64_t round32(int64_t x) { return (x + 31) & ~(int64_t)31; }
static size_t round64(size_t x) { return (x + 63) & ~(size_t)63; }

/* ------------------------------------------------------------------- GEMM */

#define ROW_DECL(r) __m256 c##r##0, c##r##1;
#define ROW_INIT(r)                                                              \
  {                                                                          \
    c##r##0 = acc ? _mm256_loadu_ps(c + (r)*ldc) : _mm256_setzero_ps();     \
    c##r##1 = acc ? _mm256_loadu_ps(c + (r)*ldc + 8) : _mm256_setzero_ps(); \
  }
#define ROW_FMA(r)                                          \
  {                                                     \
    const __m256 a_ = _mm256_broadcast_ss(ak + (r)*lda); \
    c##r##0 = _mm256_fmadd_ps(a_, b0, c##r##0);         \
    c##r##1 = _mm256_fmadd_ps(a_, b1, c##r##1);         \
  }
#define ROW_STORE(r)                                \
  {                                             \
    _mm256_storeu_ps(c + (r)*ldc, c##r##0);     \
    _mm256_storeu_ps(c + (r)*ldc + 8, c##r##1); \
  }
#define ROWS6(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define ROWS4(X) X(0) X(1) X(2) X(3)
#define ROWS2(X) X(0) X(1)

/* C[0:R, 0:16) (+)= A[0:R, 0:K) B[0:K, 0:16) for R = 6, 4, 2 */
#define BLOCK(name, ROWS)                                                                    \
  static inline void name(int64_t K, const float *a, int64_t lda, const float *b, int64_t ldb, \
                          float *c, int64_t ldc, int acc) {                                  \
    ROWS(ROW_DECL)                                                                               \
    ROWS(ROW_INIT)                                                                               \
    for (int64_t k = 0; k < K; k++) {                                                        \
      const __m256 b0 = _mm256_loadu_ps(b + k * ldb), b1 = _mm256_loadu_ps(b + k * ldb + 8); \
      const float *ak = a + k;                                                               \
      ROWS(ROW_FMA)                                                                              \
    }                                                                                        \
    ROWS(ROW_STORE)                                                                              \
  }
BLOCK(block6x16, ROWS6)
BLOCK(block4x16, ROWS4)
BLOCK(block2x16, ROWS2)

/* C[M x N] (+)= A[M x K] B[K x N]; leading dimensions in elements. */
static void fma_gemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                     int64_t ldb, float *C, int64_t ldc, int accumulate) {
  for (int64_t k0 = 0; k0 < K; k0 += KC) {
    const int64_t kc = K - k0 < KC ? K - k0 : KC;
    const int acc = accumulate || k0 > 0;
    for (int64_t j = 0; j < N; j += 16) {
      const float *a = A + k0, *b = B + k0 * ldb + j;
      float *c = C + j;
      int64_t i = 0;
      for (; i + 6 <= M; i += 6) block6x16(kc, a + i * lda, lda, b, ldb, c + i * ldc, ldc, acc);
      for (; i + 4 <= M; i += 4) block4x16(kc, a + i * lda, lda, b, ldb, c + i * ldc, ldc, acc);
      for (; i < M; i += 2) block2x16(kc, a + i * lda, lda, b, ldb, c + i * ldc, ldc, acc);
    }
  }
}

/* ---------------------------------------------------------------- packing */

/* Packs of one head's matrix X (T rows of D fp32 or bf16, ld elements apart) in
 * fp32, zero padded to Tp x Dp; rows (row-major, Tp x Dp) and tr (X^T, Dp rows
 * tr_pitch apart) may each be NULL. X is read once, 8 x 8 at a time. */
static void pack_head(const void *src, int bf16, int64_t ld, int64_t T, int64_t D, int64_t Tp,
                      int64_t Dp, float *rows, float *tr, int64_t tr_pitch) {
  const int64_t esz = bf16 ? 2 : 4;
  td_attn_prefetch_rows(src, ld * esz, 0, 8, T, D * esz, _MM_HINT_T0);
  for (int64_t t0 = 0; t0 < Tp; t0 += 8) {
    td_attn_prefetch_rows(src, ld * esz, t0 + 8, 8, T, D * esz, _MM_HINT_T0);
    for (int64_t c = 0; c < Dp; c += 8) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; i++)
        r[i] = t0 + i >= T ? _mm256_setzero_ps()
               : bf16      ? td_attn_load_bf16_8((const uint16_t *)src + (t0 + i) * ld, c, D - c)
                           : td_attn_load8((const float *)src + (t0 + i) * ld, c, D - c);
      if (rows) {
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) _mm256_storeu_ps(rows + (t0 + i) * Dp + c, r[i]);
      }
      if (!tr) continue;
      td_attn_transpose8(r);
#pragma GCC unroll 8
      for (int k = 0; k < 8; k++) _mm256_storeu_ps(tr + (c + k) * tr_pitch + t0, r[k]);
    }
  }
}

/* dst[0:D) = mult * x[0:D), fp32 or rounded to bf16; full aligned 32-byte fp32
 * pieces are streamed (no read for ownership: dst is not read again soon). */
static inline void store_row(void *dst, int bf16, const float *x, int64_t D, __m256 mult) {
  for (int64_t d = 0; d < D; d += 8) {
    __m256 v = _mm256_mul_ps(mult, _mm256_loadu_ps(x + d));
    float *f = (float *)dst + d;
    if (bf16)
      td_attn_store_bf16_8(dst, d, D - d, td_attn_round_bf16_8(v));
    else if (d + 8 <= D && ((uintptr_t)f & 31) == 0)
      _mm256_stream_ps(f, v);
    else
      _mm256_maskstore_ps(f, td_attn_lanes8(D - d), v);
  }
}

/* dst rows r < rows (ld elements apart) = mult * row_mult[r] * src[r][0:D)
 * (row_mult NULL: 1); src rows Dp apart. */
static void store_rows(void *dst, int bf16, int64_t ld, const float *src, int64_t rows, int64_t D,
                       int64_t Dp, float mult, const float *row_mult) {
  const int64_t esz = bf16 ? 2 : 4;
  for (int64_t r = 0; r < rows; r++)
    store_row((char *)dst + r * ld * esz, bf16, src + r * Dp, D,
              _mm256_set1_ps(row_mult ? mult * row_mult[r] : mult));
}

/* dst[t][d] (rows ld elements apart) = mult * src[d][t] for t < T, d < D; src Dp
 * rows pitch apart, transposed 8 x 8 at a time through buf (8 rows of Dp). */
static void store_transposed(void *dst, int bf16, int64_t ld, const float *src, int64_t pitch,
                             int64_t T, int64_t D, int64_t Dp, float mult, float *buf) {
  const int64_t esz = bf16 ? 2 : 4;
  const __m256 vm = _mm256_set1_ps(mult);
  for (int64_t t0 = 0; t0 < T; t0 += 8) {
    for (int64_t d0 = 0; d0 < Dp; d0 += 8) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + (d0 + i) * pitch + t0);
      td_attn_transpose8(r);
#pragma GCC unroll 8
      for (int i = 0; i < 8; i++) _mm256_storeu_ps(buf + i * Dp + d0, r[i]);
    }
    for (int i = 0; i < 8 && t0 + i < T; i++)
      store_row((char *)dst + (t0 + i) * ld * esz, bf16, buf + i * Dp, D, vm);
  }
}

/* ------------------------------------------------------------- row kernels */

/* The random words of query row i for keys [0, i + 1), NULL without dropout. */
static inline const uint32_t *row_words(const td_attention_desc *a, const td_attn_head *e,
                                        td_attn_dropout dr, int64_t i, uint32_t *buf) {
  if (dr.thr == 0) return NULL;
  return td_attn_rng_row_avx2(a->seed, a->stream, e->g0 + (uint64_t)(i * e->T), i + 1, buf);
}

/* The running max (scale >= 0) or min of the row's visible scores in lanes
 * [j, j + 8): lanes past nvalid keep ext. */
static inline __m256 row_extreme(const td_attn_fwd_row *r, int64_t j, float scale, __m256 ext) {
  const __m256 live = _mm256_castsi256_ps(td_attn_lanes8(r->nvalid - j));
  const __m256 x = td_attn_load8(r->s, j, r->nvalid - j);
  return _mm256_blendv_ps(ext, scale >= 0 ? _mm256_max_ps(ext, x) : _mm256_min_ps(ext, x), live);
}

/* e_j = exp(scale s_j - max) of lanes [j, j + 8), 0 past nvalid; added to *sum
 * before dropout zeroes the dropped lanes. */
static inline __m256 row_exp(const td_attn_fwd_row *r, int64_t j, __m256 vscale2, __m256 vm2,
                             td_attn_dropout dr, __m256 *sum) {
  const int64_t left = r->nvalid - j;
  const __m256 live = _mm256_castsi256_ps(td_attn_lanes8(left));
  __m256 x2 = _mm256_fmsub_ps(vscale2, td_attn_load8(r->s, j, left), vm2);
  __m256 e = _mm256_and_ps(td_attn_exp2_8(x2), live);
  *sum = _mm256_add_ps(*sum, e);
  if (!r->words) return e;
  return _mm256_and_ps(e, td_attn_kept8(r->words, dr, j, left));
}

/* Forward rows r0, r1 (two at a time for instruction-level parallelism), n
 * columns (a multiple of 16): e_j over the row's scores (rounded to bf16 for a
 * bf16 call); mx = max_j scale s_j, l = sum_j exp(scale s_j - mx) (unrounded),
 * each kept as 16 lanes (lo, hi). */
static void fwd_row_pair(const td_attn_fwd_row *r0, const td_attn_fwd_row *r1, int64_t n,
                         float scale, td_attn_dropout dr, int bf16, float mx[2], float l[2]) {
  const td_attn_fwd_row *rr[2] = {r0, r1};
  const int64_t live = r0->nvalid > r1->nvalid ? r0->nvalid : r1->nvalid;
  __m256 ext[2][2], vm[2], sum[2][2];
  for (int u = 0; u < 2; u++)
    ext[u][0] = ext[u][1] = _mm256_set1_ps(scale >= 0 ? -INFINITY : INFINITY);
  for (int64_t j = 0; j < live; j += 16)
    for (int u = 0; u < 2; u++)
      for (int h = 0; h < 2; h++) ext[u][h] = row_extreme(rr[u], j + 8 * h, scale, ext[u][h]);
  for (int u = 0; u < 2; u++) {
    mx[u] = scale * td_attn_reduce16_ext(ext[u][0], ext[u][1], scale >= 0);
    vm[u] = _mm256_set1_ps(rr[u]->nvalid ? mx[u] * TD_ATTN_LOG2E : 0.0f);
    sum[u][0] = sum[u][1] = _mm256_setzero_ps();
  }
  const __m256 vscale2 = _mm256_set1_ps(scale * TD_ATTN_LOG2E);
  for (int64_t j = 0; j < n; j += 16)
    for (int u = 0; u < 2; u++)
      for (int h = 0; h < 2; h++) {
        __m256 e = row_exp(rr[u], j + 8 * h, vscale2, vm[u], dr, &sum[u][h]);
        _mm256_storeu_ps((float *)rr[u]->s + j + 8 * h, bf16 ? td_attn_round_bf16_8(e) : e);
      }
  for (int u = 0; u < 2; u++) l[u] = td_attn_reduce16_add(sum[u][0], sum[u][1]);
}

/* Backward row r, lanes [j, j + 8): P' over s, dS over dp (both rounded to bf16
 * for a bf16 call). */
static inline void bwd_chunk(const td_attn_bwd_row *r, int64_t j, __m256 vscale2,
                             td_attn_dropout dr, int bf16) {
  const int64_t left = r->nvalid - j;
  const __m256 live = _mm256_castsi256_ps(td_attn_lanes8(left));
  __m256 x2 = _mm256_fmsub_ps(vscale2, td_attn_load8(r->s, j, left), _mm256_set1_ps(r->lse2));
  __m256 p = _mm256_and_ps(td_attn_exp2_8(x2), live);
  __m256 dp = td_attn_load8(r->dp, j, left), pk = p;
  if (r->words) {
    const __m256 k = td_attn_keep8(r->words, dr, j, left);
    pk = _mm256_mul_ps(p, k);
    dp = _mm256_mul_ps(dp, k);
  }
  __m256 ds = _mm256_mul_ps(p, _mm256_sub_ps(dp, _mm256_set1_ps(r->di)));
  if (bf16) pk = td_attn_round_bf16_8(pk), ds = td_attn_round_bf16_8(ds);
  _mm256_storeu_ps((float *)r->s + j, pk);
  _mm256_storeu_ps((float *)r->dp + j, ds);
}

/* Backward rows r0, r1, n columns (a multiple of 8). */
static void bwd_row_pair(const td_attn_bwd_row *r0, const td_attn_bwd_row *r1, int64_t n,
                         float scale, td_attn_dropout dr, int bf16) {
  const __m256 vscale2 = _mm256_set1_ps(scale * TD_ATTN_LOG2E);
  for (int64_t j = 0; j < n; j += 8) {
    bwd_chunk(r0, j, vscale2, dr, bf16);
    bwd_chunk(r1, j, vscale2, dr, bf16);
  }
}

/* sum_d x[d] y[d], kept as 16 lanes (x zero-padded to a multiple of 16; y fp32
 * or bf16) */
static float dot(const float *x, const void *y, int bf16, int64_t D) {
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t d = 0; d < D; d += 16)
    for (int h = 0; h < 2; h++) {
      const int64_t j = d + 8 * h;
      const __m256 yv = bf16 ? td_attn_load_bf16_8((const uint16_t *)y, j, D - j)
                             : td_attn_load8((const float *)y, j, D - j);
      acc[h] = _mm256_fmadd_ps(td_attn_load8(x, j, D - j), yv, acc[h]);
    }
  return td_attn_reduce16_add(acc[0], acc[1]);
}

/* The block's lse = max + log l (rows < valid) and O's row factors keep_scale / l
 * over l; rows a multiple of 8. */
static void lse_and_row_factors(const float *rowm, float *rowl, float *lse, int64_t rows,
                                int64_t valid, float keep_scale) {
  for (int64_t r = 0; r < rows; r += 8) {
    const __m256 l = _mm256_loadu_ps(rowl + r);
    const __m256 x = _mm256_add_ps(_mm256_loadu_ps(rowm + r),
                                   td_attn_log8_ge1(_mm256_max_ps(l, _mm256_set1_ps(1.0f))));
    _mm256_maskstore_ps(lse + r, td_attn_lanes8(valid - r), x);
    _mm256_storeu_ps(rowl + r, _mm256_div_ps(_mm256_set1_ps(keep_scale), l));
  }
}

#define F32_HEADS_NAME(x) td_attn_f32_avx2_##x
#include "device/cpu/cpu_attention_f32_heads.inc"
