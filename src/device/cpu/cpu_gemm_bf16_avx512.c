/* trident's own bf16 GEMMs (cpu_gemm_bf16.h), Goto-style, fp32 accumulation:
 *
 *   A (m x k) is packed once per call into 16 x 32 tiles (1 KiB each, rows of 64
 *   bytes): tile (g, kb) holds rows 16g..16g+15, columns 32kb..32kb+31, at
 *   A_p + (g KB + kb) 512 elements (KB = k / 32, padded). Transposed A (the weight
 *   gradient's dY^T) is transposed while packing.
 *   B (k x n) is packed per thread, one block of NC columns at a time, into the
 *   pair layout: for each 16-column panel, row p holds (B[2p][j], B[2p+1][j]) for
 *   its 16 columns j, so tile (panel, kb) is 16 rows of 64 bytes, contiguous.
 *   A 32 x 32 block of C is computed from two A tiles and two B panels per
 *   32-deep step; an AVX-512 epilogue writes alpha acc + beta C + bias as fp32
 *   or bf16. The block's inner kernel is one of:
 *     AMX          tiles 0-3 hold the block, 4-5 the A tiles, 6-7 the B tiles,
 *                  over KC-deep chunks of k, the accumulators going through a
 *                  per-thread fp32 buffer between chunks, then the epilogue;
 *     AVX512-BF16  four 8-row strips, each 8 x 32 fp32 in 16 zmm registers over
 *                  the whole k (B from L2): per pair of k, two 16-word loads of B
 *                  and one broadcast word (A[i][2p], A[i][2p+1]) per row, 16
 *                  VDPBF16PS; the epilogue folded into the strip's one write of C.
 *                  A tile row is exactly such a run of words, so both kernels read
 *                  the same packs (and a transposed A may come in B's pair layout,
 *                  see a_tiles).
 *
 * Threads split C's 32 x 32 blocks as a grid of row and column groups (thread_grid);
 * each packs only the B blocks of its columns. Every output
 * element is one chain of products in k order, whatever the split, so results
 * do not depend on the number of threads. k beyond KMAX is cut into passes of
 * KMAX accumulated through C (which must then be fp32).
 *
 * Zero padding: rows of A beyond m, columns of B beyond n, and k beyond k in both
 * are packed as zeros (a NaN or Inf there could otherwise leak into real rows). */
#include <immintrin.h>
#include <omp.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "device/cpu/cpu_bf16_avx512.h"
#include "device/cpu/cpu_ew_avx512_math.h"
#include "device/cpu/cpu_gemm_bf16.h"
#include "device/cpu/cpu_isa.h"


/* Blocking, measured at the GPT-2 124M shapes (2 cores, bench/RESULTS.md): 1 MiB B
 * blocks beat 256 KiB, 512 KiB and 2 MiB. KC 256 beat 128, 512 and whole-k while
 * each step's B tiles came from L2 as the tile loads asked for them; with the next
 * step's B tiles prefetched into L1 (micro_32x32), KC 1024 was 2-25% faster than 256
 * on an Emerald Rapids VM (the fewer round trips of the accumulators through memory
 * count once the loads no longer stall). */
enum {
  KC = 1024,              /* k chunk of the microkernel: A chunk 64 KiB, B chunk 64 KiB */
  B_BLOCK_BYTES = 1 << 20 /* packed B block per thread, about half of L2 */
};
#define KMAX TD_GEMM_BF16_KMAX

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ------------------------------------------------------------ availability */

int td_cpu_gemm_amx_usable(void) { return td_cpu_amx_usable(); }

int td_cpu_gemm_dpbf16_usable(void) {
  return td_cpu_isa_get() == TD_ISA_AVX512 && td_cpu_has_avx512_bf16();
}

/* ----------------------------------------------------------------- packing */

/* 16 x 16 transpose of 32-bit words: r[i] word j -> r[j] word i. */
static void transpose16x16(__m512i r[16]) {
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
  /* r[4G + w], 128-bit lane L, now holds word 4L + w of rows 4G..4G+3: a 4 x 4
   * transpose of lanes among r[w], r[4 + w], r[8 + w], r[12 + w] finishes */
  for (int i = 0; i < 4; i++) {
    t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 4; i++) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
    r[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);
    r[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xdd);
  }
}

/* 16 bf16 of a row: elements [0, left) of src (zeros beyond). */
static __m256i load16_bf16(const uint16_t *src, int64_t left) {
  if (left <= 0) return _mm256_setzero_si256();
  return _mm256_maskz_loadu_epi16(v_mask(left), src);
}

/* Elements [0, left) of a 32-element step (none when left <= 0). */
static __mmask32 k_mask32(int64_t left) {
  if (left <= 0) return 0;
  return left >= 32 ? 0xffffffffu : (__mmask32)((1u << left) - 1u);
}

/* Words (lo[j], hi[j]) for j < 16: the pair layout of two rows. */
static __m512i interleave_pairs(__m256i lo, __m256i hi) {
  return _mm512_or_si512(_mm512_cvtepu16_epi32(lo),
                         _mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
}

/* A not transposed (element (i, p) at a[i lda + p]): tiles of row group g. */
static void pack_a_rows(uint16_t *dst, const uint16_t *a, int64_t lda, int64_t m, int64_t k,
                        int64_t g, int64_t kb_count) {
  for (int64_t kb = 0; kb < kb_count; kb++) {
    uint16_t *t = dst + kb * 512;
    int64_t p0 = kb * 32;
    __mmask32 km = k_mask32(k - p0);
    for (int r = 0; r < 16; r++) {
      int64_t i = g * 16 + r;
      __m512i v =
          i < m && km ? _mm512_maskz_loadu_epi16(km, a + i * lda + p0) : _mm512_setzero_si512();
      _mm512_store_si512(t + r * 32, v);
    }
  }
}

/* A transposed (element (i, p) at a[p lda + i]): tiles of row groups [g0, g1),
 * group g's at dst + (g - g0) kb_count 512. Row r of a tile is the words
 * (A[i][2j], A[i][2j+1]), j < 16: the pair layout of source rows 2j, 2j+1,
 * transposed. Steps outer, groups inner: each source row is read left to right. */
static void pack_a_cols(uint16_t *dst, const uint16_t *a, int64_t lda, int64_t m, int64_t k,
                        int64_t g0, int64_t g1, int64_t kb_count) {
  for (int64_t kb = 0; kb < kb_count; kb++)
    for (int64_t g = g0; g < g1; g++) {
      int64_t i0 = g * 16, left = m - i0;
      __m512i r[16];
      for (int j = 0; j < 16; j++) {
        int64_t p = kb * 32 + 2 * j;
        __m256i lo = p < k ? load16_bf16(a + p * lda + i0, left) : _mm256_setzero_si256();
        __m256i hi = p + 1 < k ? load16_bf16(a + (p + 1) * lda + i0, left) : _mm256_setzero_si256();
        r[j] = interleave_pairs(lo, hi);
      }
      transpose16x16(r);
      uint16_t *t = dst + ((g - g0) * kb_count + kb) * 512;
      for (int i = 0; i < 16; i++) _mm512_store_si512(t + i * 32, r[i]);
    }
}

/* B not transposed (element (p, j) at b[p ldb + j]): the panels of columns j0 +
 * 16q.. (q < panels), panel q at dst + q kpad 16, pair rows 0..kpad/2. Pair rows
 * outer: each source row is read left to right. */
static void pack_b_rows(uint16_t *dst, const uint16_t *b, int64_t ldb, int64_t n, int64_t k,
                        int64_t kpad, int64_t j0, int64_t panels) {
  for (int64_t p = 0; p < kpad; p += 2)
    for (int64_t q = 0; q < panels; q++) {
      int64_t j = j0 + q * 16, left = n - j;
      __m256i lo = p < k ? load16_bf16(b + p * ldb + j, left) : _mm256_setzero_si256();
      __m256i hi = p + 1 < k ? load16_bf16(b + (p + 1) * ldb + j, left) : _mm256_setzero_si256();
      _mm512_store_si512(dst + q * kpad * 16 + p * 16, interleave_pairs(lo, hi));
    }
}

/* B transposed (element (p, j) at b[j ldb + p]): the same panel. Word (pair row q,
 * column j) is the 32-bit word q of source row j: 16 x 16 word transposes. */
static void pack_b_cols(uint16_t *dst, const uint16_t *b, int64_t ldb, int64_t n, int64_t k,
                        int64_t kpad, int64_t j0) {
  for (int64_t p0 = 0; p0 < kpad; p0 += 32) {
    __mmask32 km = k_mask32(k - p0);
    __m512i r[16];
    for (int jj = 0; jj < 16; jj++) {
      int64_t j = j0 + jj;
      r[jj] = j < n && km ? _mm512_maskz_loadu_epi16(km, b + j * ldb + p0) : _mm512_setzero_si512();
    }
    transpose16x16(r);
    for (int q = 0; q < 16; q++) _mm512_store_si512(dst + (p0 / 2 + q) * 32, r[q]);
  }
}

/* --------------------------------------------------------------- compute */

/* Where the A tiles of a 32-row block live: packed tiles (1 KiB apart per step,
 * rows 64 bytes apart), or A itself when it is row-major with k a multiple of 32
 * (rows lda apart, 32 elements per step). The AVX512-BF16 kernel also reads a
 * transposed A packed in B's pair layout (pack_b_rows: row i of a 16-row group is
 * word i of each pair row), which needs no transposes to pack. Word (row r, pair
 * w, step kb) of a 16-row group is at t + r row + w pair + kb step elements. */
typedef struct {
  const uint16_t *t0, *t1; /* the tiles of rows 0-15 and 16-31 at step 0 */
  int64_t stride;          /* bytes between tile rows (AMX) */
  int64_t step;            /* elements between consecutive k steps */
  int64_t row, pair;       /* elements between rows, between pairs of k */
} a_tiles;

/* acc[32 x 32] (+)= A block times two B panels (at b0, b0 + b_panel; 512 elements
 * per step), steps kb0..kb1; acc rows acc_ld bytes apart. */
TD_AMX_FN static void micro_32x32(const a_tiles *a, const uint16_t *b0, int64_t b_panel, int64_t kb0,
                               int64_t kb1, float *acc, int64_t acc_ld, int load_acc) {
  char *c = (char *)acc;
  TD_MEMORY_BARRIER();
  if (load_acc) {
    _tile_loadd(0, c, acc_ld);
    _tile_loadd(1, c + 64, acc_ld);
    _tile_loadd(2, c + 16 * acc_ld, acc_ld);
    _tile_loadd(3, c + 16 * acc_ld + 64, acc_ld);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  const uint16_t *a0 = a->t0, *a1 = a->t1, *b1 = b0 + b_panel;
  const int64_t as = a->stride, ak = a->step;
  for (int64_t kb = kb0; kb < kb1; kb++) {
    /* The next step's B tiles (16 rows of 64 bytes each) into L1 while this step's
     * products run: a tile register is loaded only after the products reading it
     * are done, so a B tile coming from L2 on demand stalls the kernel (the
     * prefetch alone made KC 256 12% faster). One past the last step touches the
     * next panel: harmless. */
    const char *nb0 = (const char *)(b0 + (kb + 1) * 512), *nb1 = (const char *)(b1 + (kb + 1) * 512);
    for (int l = 0; l < 16; l++) {
      _mm_prefetch(nb0 + 64 * l, _MM_HINT_T0);
      _mm_prefetch(nb1 + 64 * l, _MM_HINT_T0);
    }
    _tile_loadd(4, a0 + kb * ak, as);
    _tile_loadd(6, b0 + kb * 512, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(7, b1 + kb * 512, 64);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(5, a1 + kb * ak, as);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, acc_ld);
  _tile_stored(1, c + 64, acc_ld);
  _tile_stored(2, c + 16 * acc_ld, acc_ld);
  _tile_stored(3, c + 16 * acc_ld + 64, acc_ld);
  TD_MEMORY_BARRIER();
}

/* C[rows x cols] = alpha acc + beta C + bias (cols masked per 16), as c_dtype. */
static void epilogue(const td_matmul_desc *g, void *c, int64_t i0, int64_t j0, int64_t rows,
                     int64_t cols, const float *acc, int64_t acc_ld_floats) {
  const __m512 alpha = V1(g->alpha), beta = V1(g->beta);
  size_t es = g->c_dtype == TD_BF16 ? 2 : 4;
  for (int64_t r = 0; r < rows; r++) {
    char *crow = (char *)c + (size_t)((i0 + r) * g->ldc + j0) * es;
    const float *arow = acc + r * acc_ld_floats;
    for (int64_t j = 0; j < cols; j += 16) {
      __mmask16 k = v_mask(cols - j);
      __m512 v = _mm512_mul_ps(alpha, _mm512_load_ps(arow + j));
      if (g->beta != 0.0f)
        v = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(k, (const float *)crow + j), v);
      if (g->bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, g->bias + j0 + j));
      v_store_f32_or_bf16(crow, g->c_dtype, j, v, k);
    }
  }
}

/* The same for a pass computing C^T (transpose_c): acc element (r, c) is C[j0 + c]
 * [i0 + r]; 16 x 16 blocks are transposed in registers so C is written by rows. */
static void epilogue_transposed(const td_matmul_desc *g, void *c, int64_t i0, int64_t j0,
                                int64_t rows, int64_t cols, const float *acc,
                                int64_t acc_ld_floats) {
  const __m512 alpha = V1(g->alpha), beta = V1(g->beta);
  size_t es = g->c_dtype == TD_BF16 ? 2 : 4;
  for (int64_t r0 = 0; r0 < rows; r0 += 16)
    for (int64_t c0 = 0; c0 < cols; c0 += 16) {
      __m512i t[16];
      for (int r = 0; r < 16; r++)
        t[r] = _mm512_castps_si512(_mm512_load_ps(acc + (r0 + r) * acc_ld_floats + c0));
      transpose16x16(t);
      __mmask16 k = v_mask(rows - r0);
      for (int64_t cc = 0; cc < 16 && c0 + cc < cols; cc++) {
        char *crow = (char *)c + (size_t)((j0 + c0 + cc) * g->ldc + i0 + r0) * es;
        __m512 v = _mm512_mul_ps(alpha, _mm512_castsi512_ps(t[cc]));
        if (g->beta != 0.0f) v = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(k, crow), v);
        v_store_f32_or_bf16(crow, g->c_dtype, 0, v, k);
      }
    }
}

/* Per-thread buffers that only grow. */
static __thread uint16_t *t_bpack;
static __thread size_t t_bpack_bytes;
static __thread float *t_acc;
static __thread size_t t_acc_bytes;

static void *grow(void *p, size_t *have, size_t need) {
  if (need <= *have) return p;
  td_free(p);
  *have = need;
  return td_malloc(need);
}

/* The shared packed A. */
static uint16_t *g_apack;
static size_t g_apack_bytes;

typedef struct {
  const td_matmul_desc *g;
  const uint16_t *a, *b; /* this batch item */
  void *c;
  int64_t k, kpad, kb_count, groups; /* groups: 16-row groups of A (m padded to 32) */
  int64_t direct_groups;             /* groups read from A itself (the rest are packed) */
  int64_t nc;                        /* columns per packed B block */
  int transpose_c;                   /* g is the transposed problem: write C^T */
  int amx;                           /* the inner kernel: AMX tiles, else AVX512-BF16 */
  int a_pairs;                       /* A is packed in the pair layout (AVX512-BF16, trans_a) */
} pass;

/* The A tiles of the 32-row block at row i. */
static a_tiles a_block(const pass *s, int64_t i) {
  a_tiles t;
  if (i / 16 < s->direct_groups) {
    t.t0 = s->a + i * s->g->lda, t.t1 = t.t0 + 16 * s->g->lda;
    t.stride = s->g->lda * 2, t.step = 32, t.row = s->g->lda, t.pair = 2;
  } else {
    t.t0 = g_apack + (i / 16 - s->direct_groups) * s->kb_count * 512;
    t.t1 = t.t0 + s->kb_count * 512;
    t.stride = 64, t.step = 512, t.row = 32, t.pair = 2;
    if (s->a_pairs) t.stride = 0, t.row = 2, t.pair = 32;
  }
  return t;
}

/* Where an 8 x 32 strip of accumulators goes: rows [0, rows) and columns [0, cols)
 * of C at c (row 0, column 0 of the strip; the epilogue's alpha, beta, bias, dtype
 * folded in), or, for a transposed pass, the per-thread buffer (acc, acc_ld floats
 * apart) that epilogue_transposed then writes. */
typedef struct {
  const td_matmul_desc *g;
  char *c;           /* NULL: write acc */
  const float *bias; /* at column 0 of the strip, or NULL */
  int64_t rows, cols;
  float *acc;
  int64_t acc_ld;
} strip_out;

/* Strip rows 0-7 = A rows (word (r, w, kb) at a + r a_row + w a_pair + kb a_step
 * elements) times the B panels at b, b + b_panel over every step of k, kept in 16 zmm registers and then
 * written once (no accumulator round trips between k chunks: B comes from L2). */
static inline __attribute__((always_inline)) void dp_strip8(const uint16_t *a, int64_t a_row,
                                                            int64_t a_pair, int64_t a_step,
                                                            const uint16_t *b, int64_t b_panel,
                                                            int64_t kb_count,
                                                            const strip_out *o) {
  __m512 c[8][2];
#pragma GCC unroll 8
  for (int r = 0; r < 8; r++) c[r][0] = c[r][1] = _mm512_setzero_ps();
  td_dp_rows8(c, a, a_row, a_pair, a_step, b, b_panel, 32, 512, kb_count);
  if (!o->c) {
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
      _mm512_store_ps(o->acc + r * o->acc_ld, c[r][0]);
      _mm512_store_ps(o->acc + r * o->acc_ld + 16, c[r][1]);
    }
    return;
  }
  const td_matmul_desc *g = o->g;
  const size_t es = g->c_dtype == TD_BF16 ? 2 : 4;
  const __mmask16 m0 = v_mask(o->cols), m1 = o->cols > 16 ? v_mask(o->cols - 16) : 0;
  __m512 bias0 = _mm512_setzero_ps(), bias1 = bias0;
  if (o->bias) bias0 = _mm512_maskz_loadu_ps(m0, o->bias), bias1 = _mm512_maskz_loadu_ps(m1, o->bias + 16);
#pragma GCC unroll 8
  for (int r = 0; r < 8; r++) {
    if (r >= o->rows) break;
    char *crow = o->c + (size_t)(r * g->ldc) * es;
    __m512 v0 = _mm512_fmadd_ps(V1(g->alpha), c[r][0], bias0);
    __m512 v1 = _mm512_fmadd_ps(V1(g->alpha), c[r][1], bias1);
    if (g->beta != 0.0f) {
      v0 = _mm512_fmadd_ps(V1(g->beta), _mm512_maskz_loadu_ps(m0, crow), v0);
      v1 = _mm512_fmadd_ps(V1(g->beta), _mm512_maskz_loadu_ps(m1, crow + 64), v1);
    }
    v_store_f32_or_bf16(crow, g->c_dtype, 0, v0, m0);
    v_store_f32_or_bf16(crow, g->c_dtype, 16, v1, m1);
  }
}

/* The 32 x 32 block of C at (i, j) (j: column of B panel b0 in C) from the A tiles
 * at and the B panels b0, b0 + b_panel, as four strips on AVX512-BF16 dot products;
 * a transposed pass leaves it in acc (acc_ld floats apart) for epilogue_transposed. */
static void dp_32x32(const pass *s, const a_tiles *at, int64_t i, int64_t j, const uint16_t *b0,
                     int64_t b_panel, float *acc, int64_t acc_ld) {
  const td_matmul_desc *g = s->g;
  const int64_t es = g->c_dtype == TD_BF16 ? 2 : 4;
  for (int q = 0; q < 4; q++) {
    const uint16_t *a = (q < 2 ? at->t0 : at->t1) + (q % 2) * 8 * at->row;
    strip_out o = {.g = g, .rows = g->m - i - 8 * q, .cols = g->n - j};
    if (o.rows <= 0) break;
    if (s->transpose_c)
      o.acc = acc + q * 8 * acc_ld, o.acc_ld = acc_ld;
    else
      o.c = (char *)s->c + (size_t)((i + 8 * q) * g->ldc + j) * (size_t)es,
      o.bias = g->bias ? g->bias + j : NULL;
    dp_strip8(a, at->row, at->pair, at->step, b0, b_panel, s->kb_count, &o);
  }
}

/* Columns [j0, j1) of rows [i0, i1) (i0, j0 multiples of 32) by this thread. */
TD_AMX_FN static void compute_range(const pass *s, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const td_matmul_desc *g = s->g;
  const int64_t kpad = s->kpad, acc_ld = s->nc + 16; /* +64 bytes: rows 4 KiB apart alias */
  t_bpack = grow(t_bpack, &t_bpack_bytes, (size_t)(kpad * s->nc) * 2);
  t_acc = grow(t_acc, &t_acc_bytes, (size_t)(32 * acc_ld) * 4);
  if (s->amx) td_amx_tiles_configure();
  for (int64_t jb = j0; jb < j1; jb += s->nc) {
    int64_t cols = min64(s->nc, j1 - jb), panels = round_up(cols, 32) / 16;
    if (g->trans_b)
      for (int64_t q = 0; q < panels; q++)
        pack_b_cols(t_bpack + q * kpad * 16, s->b, g->ldb, g->n, s->k, kpad, jb + q * 16);
    else
      pack_b_rows(t_bpack, s->b, g->ldb, g->n, s->k, kpad, jb, panels);
    for (int64_t i = i0; i < i1; i += 32) {
      a_tiles at = a_block(s, i);
      if (s->amx)
        for (int64_t kb0 = 0; kb0 < s->kb_count; kb0 += KC / 32) {
          int64_t kb1 = min64(s->kb_count, kb0 + KC / 32);
          for (int64_t q = 0; q < panels; q += 2)
            micro_32x32(&at, t_bpack + q * kpad * 16, kpad * 16, kb0, kb1, t_acc + q * 16,
                        acc_ld * 4, kb0 > 0);
        }
      else
        for (int64_t q = 0; q < panels; q += 2)
          dp_32x32(s, &at, i, jb + q * 16, t_bpack + q * kpad * 16, kpad * 16, t_acc + q * 16,
                   acc_ld);
      if (s->amx || s->transpose_c)
        (s->transpose_c ? epilogue_transposed : epilogue)(g, s->c, i, jb, min64(32, g->m - i),
                                                          min64(cols, g->n - jb), t_acc, acc_ld);
    }
  }
  if (s->amx) _tile_release();
}

/* Threads as a grid of tr row groups by tc column groups of C's 32 x 32 blocks
 * (tr tc = nt, each group a contiguous range): the grid whose busiest thread has
 * the fewest blocks, the most column groups among equals (each column group
 * packs its own B blocks, so fewer copies). Columns alone leave threads idle
 * where the blocks do not divide: GPT-2's n = 768 is 24 column blocks, so on 16
 * threads half of them took 2 and half 1 (75% busy), where 8 x 2 groups give
 * each 48 of a 1024-row product's 768 blocks. */
static void thread_grid(int64_t mblocks, int64_t nblocks, int nt, int *tr, int *tc) {
  int64_t best = -1;
  for (int c = nt; c >= 1; c--) {
    if (nt % c) continue;
    int r = nt / c;
    int64_t busiest = ((mblocks + r - 1) / r) * ((nblocks + c - 1) / c);
    if (best < 0 || busiest < best) best = busiest, *tr = r, *tc = c;
  }
}

static void run_pass(const pass *s) {
  const td_matmul_desc *g = s->g;
#pragma omp parallel
  {
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    int64_t packed = s->groups - s->direct_groups;
    int64_t g0 = s->direct_groups + packed * t / nt, g1 = s->direct_groups + packed * (t + 1) / nt;
    uint16_t *dst = g_apack + (g0 - s->direct_groups) * s->kb_count * 512;
    if (s->a_pairs)
      pack_b_rows(dst, s->a, g->lda, g->m, s->k, s->kpad, g0 * 16, g1 - g0);
    else if (g->trans_a)
      pack_a_cols(dst, s->a, g->lda, g->m, s->k, g0, g1, s->kb_count);
    else
      for (int64_t q = g0; q < g1; q++)
        pack_a_rows(dst + (q - g0) * s->kb_count * 512, s->a, g->lda, g->m, s->k, q, s->kb_count);
#pragma omp barrier
    int64_t mblocks = s->groups / 2, nblocks = round_up(g->n, 32) / 32;
    int tr = 1, tc = 1;
    thread_grid(mblocks, nblocks, nt, &tr, &tc);
    const int64_t rg = t / tc, cg = t % tc;
    const int64_t r0 = mblocks * rg / tr, r1 = mblocks * (rg + 1) / tr;
    const int64_t c0 = nblocks * cg / tc, c1 = nblocks * (cg + 1) / tc;
    if (r1 > r0 && c1 > c0)
      compute_range(s, r0 * 32, min64(r1 * 32, g->m), c0 * 32, min64(c1 * 32, g->n));
  }
}

/* One batch item: k cut into passes of at most KMAX, each accumulating into C
 * (the first with the caller's beta and bias, the later ones with beta = 1).
 * A weight gradient (transposed A, plain B: both operands k-major) packs its A
 * with transposes for AMX tiles. Computing C^T = B^T A instead, whose packed A is
 * the smaller B^T when n < m, and writing C^T transposed saves packing but costs
 * the transposed epilogue (a fifth of the time at m 3072, n 768, k 1024): 7-10%
 * slower on AMX at the GPT-2 weight gradients with n < m (3072 x 768, 50304 x
 * 768), so AMX never does. The AVX512-BF16 kernel packs a transposed A in the pair
 * layout instead, as cheap to pack as B, and computes C^T only when A is much the
 * larger operand (m >= 8n: the lm_head's weight gradient, where every thread would
 * otherwise stream all of a 100 MB packed A; 12% faster measured there, 3-5%
 * slower at m = 3n, 4n). */
static void gemm_one(const td_matmul_desc *g, const uint16_t *a, const uint16_t *b, void *c,
                     int amx) {
  td_matmul_desc piece = *g;
  int transpose_c = !amx && g->trans_a && !g->trans_b && !g->bias && g->n * 8 <= g->m;
  if (transpose_c) {
    const uint16_t *t = a;
    a = b, b = t;
    piece.m = g->n, piece.n = g->m;
    piece.lda = g->ldb, piece.ldb = g->lda;
  }
  for (int64_t p0 = 0; p0 < piece.k; p0 += KMAX) {
    pass s = {.g = &piece, .c = c, .transpose_c = transpose_c, .amx = amx};
    s.a_pairs = !amx && piece.trans_a;
    s.k = min64(KMAX, piece.k - p0);
    s.kpad = round_up(s.k, 32), s.kb_count = s.kpad / 32;
    s.groups = round_up(piece.m, 32) / 16;
    s.a = a + (piece.trans_a ? p0 * piece.lda : p0);
    s.b = b + (piece.trans_b ? p0 : p0 * piece.ldb);
    /* row-major A with whole steps is read in place, but for a last partial 32-row
     * block (packed, zero-padded: tile loads must not read past A) */
    s.direct_groups = !piece.trans_a && s.k % 32 == 0 ? piece.m / 32 * 2 : 0;
    s.nc = min64(round_up(piece.n, 32), (B_BLOCK_BYTES / (s.kpad * 2)) / 32 * 32);
    if (s.nc < 32) s.nc = 32;
    g_apack =
        grow(g_apack, &g_apack_bytes, (size_t)((s.groups - s.direct_groups) * s.kb_count) * 1024);
    run_pass(&s);
    piece.beta = 1.0f, piece.bias = NULL;
  }
}

static void gemm_bf16(const td_matmul_desc *g, int amx) {
  TD_CHECK(g->ab_dtype == TD_BF16, "trident's bf16 GEMM takes bf16 inputs");
  TD_CHECK(g->k <= KMAX || g->c_dtype == TD_F32,
           "trident's bf16 GEMM accumulates k > %d through C, which must be fp32", KMAX);
  size_t es = g->c_dtype == TD_BF16 ? 2 : 4;
  for (int64_t q = 0; q < g->batch; q++)
    gemm_one(g, (const uint16_t *)g->a + q * g->stride_a, (const uint16_t *)g->b + q * g->stride_b,
             (char *)g->c + (size_t)(q * g->stride_c) * es, amx);
}

void td_cpu_gemm_amx(const td_matmul_desc *g) { gemm_bf16(g, 1); }

void td_cpu_gemm_dpbf16(const td_matmul_desc *g) { gemm_bf16(g, 0); }
