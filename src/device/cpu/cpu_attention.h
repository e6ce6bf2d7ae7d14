/* Causal self-attention on the CPU (ops->attention_forward / attention_backward,
 * semantics in device.h td_attention_desc).
 *
 * Algorithm (FlashAttention-2's memory, GEMMs on big blocks): for each (batch,
 * head) and each block of query rows [i0, i1), only keys [0, i1) can be visible:
 *   forward:  S = Q[i0:i1] K[0:i1]^T (GEMM), row softmax of scale S in fp32 (lse
 *             saved), P' = dropout(P), O[i0:i1] = P' V[0:i1] (GEMM);
 *   backward: S and P = exp(scale S - lse) recomputed, dP' = dO V^T (GEMM),
 *             dP = dropout(dP'), D_i = rowsum(dO_i * O_i), dS = P * (dP - D),
 *             dQ = scale dS K (GEMM), dK += scale dS^T Q, dV += P'^T dO (GEMMs
 *             into fp32 T x D accumulators; query blocks last to first).
 * Scratch is O(block * T + T * D) per thread, reused across calls.
 * Three implementations of it:
 *   - per-head kernels, operands packed once per head, one OpenMP task per
 *     (batch, head): on the avx512 ISA, fp32 on our own AVX-512 FMA GEMM
 *     (cpu_attention_f32_avx512.c), bf16 on our own GEMM on AMX tiles (needs
 *     AMX-BF16, AVX512-BF16 and the OS's grant of the tile state), else on
 *     AVX512-BF16 dot products (cpu_attention_bf16_avx512.c); on the avx2 ISA,
 *     fp32 and bf16 on our own AVX2 FMA GEMM (cpu_attention_f32_avx2.c; bf16
 *     widened, its P and dS rounded to bf16);
 *   - td_cpu_gemm (a library GEMM, single-threaded per task) on strided blocks
 *     with the row kernels below, AVX-512, AVX2 (cpu_attention_avx2.c) or
 *     portable C (cpu_attention.c): bf16 on an AVX-512 CPU without AVX512-BF16,
 *     everything with TRIDENT_CPU_ISA=generic, and any call when forced
 *     (td_cpu_attention_use_kernels).
 * Every task computes its outputs alone in a fixed order, so results do not
 * depend on the number of threads. Bench FLOPs: td_cpu_attention_flops.
 *
 * Dropout keep rule (forward and backward alike): element (b, h, i, j) draws
 * u = td_rng_u32(seed, stream, ((b*Ht + h0 + h)*T + i)*T + j) (Ht, h0: the desc's
 * heads_total and head_start, td_attn_dropout_base) and is DROPPED iff
 * u < thr, thr = round(p * 2^32) (so kept with probability 1 - p up to 2^-32);
 * kept values are scaled by 1/(1 - p). p == 0 draws nothing. */
#ifndef TD_DEVICE_CPU_ATTENTION_H
#define TD_DEVICE_CPU_ATTENTION_H

#include <stddef.h>
#include <stdint.h>
#include <xmmintrin.h>

#include "device/device.h"

/* Query rows per block: library-GEMM path, bf16 and fp32 per-head paths (multiples of 32). */
#define TD_ATTN_BQ 128
#define TD_ATTN_BF16_BQ 64
#define TD_ATTN_F32_BQ 64

/* FLOPs of one call, FlashAttention's convention: forward = two GEMMs of
 * 2*T*T*D per head halved by the causal mask = 4*B*H*T*T*D/2; backward = 2.5x
 * forward (five GEMMs, one of them the recompute of S). */
double td_cpu_attention_flops(const td_attention_desc *desc, int backward);

/* Which implementation runs (tests compare them): TD_ATTN_USE_GEMM forces the
 * td_cpu_gemm implementation even where the per-head kernels run,
 * TD_ATTN_USE_NO_AMX the per-head kernels without AMX (bf16 on AVX512-BF16 dot
 * products where the CPU has them), TD_ATTN_USE_NO_BF16_UNITS those of an AVX-512
 * CPU without AMX and AVX512-BF16 (bf16 on the AVX2 heads, widened to fp32),
 * TD_ATTN_USE_DEFAULT (the default) restores the choice above. Not thread-safe:
 * call between attention calls. */
enum {
  TD_ATTN_USE_GEMM = 0,
  TD_ATTN_USE_DEFAULT = 1,
  TD_ATTN_USE_NO_AMX = 2,
  TD_ATTN_USE_NO_BF16_UNITS = 3
};
void td_cpu_attention_use_kernels(int mode);

/* Dropout parameters of one call: thr as in the keep rule above (0: no dropout),
 * keep_scale = 1/(1 - p). */
typedef struct {
  uint32_t thr;
  float keep_scale;
} td_attn_dropout;

/* The dropout counter of element (i = 0, j = 0) of head h of batch b: heads are
 * numbered among the model's (heads_total, head_start), so a tensor-parallel rank
 * draws the masks the unsplit model draws for its heads. */
static inline uint64_t td_attn_dropout_base(const td_attention_desc *a, int64_t b, int64_t h) {
  int64_t heads = a->heads_total ? a->heads_total : a->heads;
  return (uint64_t)((b * heads + a->head_start + h) * a->seq * a->seq);
}

/* words[k] = td_rng_u32(seed, stream, g0 + k) for k < n, where
 * words = buf + (g0 & 3) is returned; buf holds at least n + 67 words. */
const uint32_t *td_attn_rng_row_generic(uint64_t seed, uint64_t stream, uint64_t g0, int64_t n,
                                        uint32_t *buf);
const uint32_t *td_attn_rng_row_avx512(uint64_t seed, uint64_t stream, uint64_t g0, int64_t n,
                                       uint32_t *buf);
const uint32_t *td_attn_rng_row_avx2(uint64_t seed, uint64_t stream, uint64_t g0, int64_t n,
                                     uint32_t *buf);

/* Forward softmax of one row of raw scores s[0:ncols) (q.k, scaled here) whose
 * first nvalid entries are visible (1 <= nvalid <= ncols), with x_j = scale s_j:
 *   *lse = log sum_{j<nvalid} exp(x_j),  p_j = exp(x_j - *lse) for j < nvalid, else 0,
 *   p'_j = p_j * keep_j * keep_scale (words: the row's random words, NULL without dropout).
 * p' goes to p_out: fp32 (may be s itself) or bf16 (round to nearest even). */
void td_attn_softmax_row_generic(float *s, int64_t nvalid, int64_t ncols, float scale,
                                 const uint32_t *words, td_attn_dropout dr, float *lse, void *p_out,
                                 td_dtype p_dtype);
void td_attn_softmax_row_avx512(float *s, int64_t nvalid, int64_t ncols, float scale,
                                const uint32_t *words, td_attn_dropout dr, float *lse, void *p_out,
                                td_dtype p_dtype);
void td_attn_softmax_row_avx2(float *s, int64_t nvalid, int64_t ncols, float scale,
                              const uint32_t *words, td_attn_dropout dr, float *lse, void *p_out,
                              td_dtype p_dtype);

/* Backward of one row: from the recomputed raw scores s, the row's lse,
 * dp' = dO V^T and di = rowsum(dO * O):
 *   p_j = exp(scale s_j - lse) (0 for j >= nvalid), m_j = keep_j * keep_scale,
 *   p'_j = p_j m_j  -> p_out,     ds_j = p_j (dp'_j m_j - di) -> ds_out.
 * Outputs in p_dtype: fp32 (p_out may be s, ds_out may be dp) or bf16. */
void td_attn_softmax_bwd_row_generic(const float *s, const float *dp, int64_t nvalid, int64_t ncols,
                                     float scale, const uint32_t *words, td_attn_dropout dr,
                                     float lse, float di, void *p_out, void *ds_out,
                                     td_dtype p_dtype);
void td_attn_softmax_bwd_row_avx512(const float *s, const float *dp, int64_t nvalid, int64_t ncols,
                                    float scale, const uint32_t *words, td_attn_dropout dr,
                                    float lse, float di, void *p_out, void *ds_out,
                                    td_dtype p_dtype);
void td_attn_softmax_bwd_row_avx2(const float *s, const float *dp, int64_t nvalid, int64_t ncols,
                                  float scale, const uint32_t *words, td_attn_dropout dr,
                                  float lse, float di, void *p_out, void *ds_out,
                                  td_dtype p_dtype);

/* ------------------------------------------- the per-head kernels' common parts */

/* Head bh = b*H + h of a call, elements esz bytes. */
typedef struct {
  int64_t T, H, D, esz;
  const char *q, *k, *v; /* token 0 of this head in qkv (tokens 3*H*D elements apart) */
  const char *o, *dout;  /* token 0 of this head in out, dout (tokens H*D elements apart) */
  float *lse;            /* this head's lse, T */
  uint64_t g0;           /* dropout index of element (i = 0, j = 0) */
} td_attn_head;

static inline td_attn_head td_attn_head_of(const td_attention_desc *a, int64_t bh) {
  td_attn_head e = {
      .T = a->seq, .H = a->heads, .D = a->head_dim, .esz = a->dtype == TD_BF16 ? 2 : 4};
  const int64_t tok = (bh / e.H * e.T * e.H + bh % e.H) * e.D; /* (b*T*H + h)*D */
  e.q = (const char *)a->qkv + 3 * tok * e.esz;
  e.k = e.q + e.D * e.esz, e.v = e.q + 2 * e.D * e.esz;
  e.o = (const char *)a->out + tok * e.esz;
  e.dout = a->dout ? (const char *)a->dout + tok * e.esz : NULL;
  e.lse = a->lse + bh * e.T;
  e.g0 = td_attn_dropout_base(a, bh / e.H, bh % e.H);
  return e;
}

/* Rows [t, t + n) (row_bytes each, ld_bytes apart, only rows < T) into cache
 * (hint _MM_HINT_T0 or _T1): the hardware prefetchers do not follow a head's
 * token rows (one per page or so). _mm_prefetch is SSE: every ISA's file. */
#define td_attn_prefetch_rows(src, ld_bytes, t, n, T, row_bytes, hint)  \
  do {                                                                  \
    for (int64_t u_ = (t); u_ < (t) + (n) && u_ < (T); u_++)            \
      for (int64_t b_ = 0; b_ < (row_bytes); b_ += 64)                  \
        _mm_prefetch((const char *)(src) + u_ * (ld_bytes) + b_, hint); \
  } while (0)


/* Forward row (cpu_attention.h's softmax row, before normalising): raw scores s,
 * visible j < nvalid (0: a padding row), random words or NULL. */
typedef struct {
  const float *s;
  int64_t nvalid;
  const uint32_t *words;
} td_attn_fwd_row;


/* Backward row (cpu_attention.h's row backward): recomputed raw scores s,
 * dp' = dO V^T, lse, di = rowsum(dO * O), visible j < nvalid, words or NULL. */
typedef struct {
  const float *s, *dp;
  int64_t nvalid;
  float lse2, di; /* lse2 = lse log2 e */
  const uint32_t *words;
} td_attn_bwd_row;

/* bf16 per-head paths (cpu_attention_bf16_avx512.c), one head bh = b*H + h per call,
 * bf16 desc; scratch of td_attn_bf16_scratch_bytes(T, D, backward) bytes, 64-byte
 * aligned. amx: AMX tiles; dpbf16: AVX512-BF16 dot products. */
size_t td_attn_bf16_scratch_bytes(int64_t T, int64_t D, int backward);
void td_attn_amx_forward_head(const td_attention_desc *a, int64_t bh, td_attn_dropout dr,
                              void *scratch);
void td_attn_amx_backward_head(const td_attention_desc *a, int64_t bh, td_attn_dropout dr,
                               void *scratch);
void td_attn_dpbf16_forward_head(const td_attention_desc *a, int64_t bh, td_attn_dropout dr,
                                 void *scratch);
void td_attn_dpbf16_backward_head(const td_attention_desc *a, int64_t bh, td_attn_dropout dr,
                                  void *scratch);

/* fp32 AVX-512 path (cpu_attention_f32_avx512.c), same contract, fp32 desc. */
size_t td_attn_f32_scratch_bytes(int64_t T, int64_t D, int backward);
void td_attn_f32_forward_head(const td_attention_desc *a, int64_t bh, td_attn_dropout dr,
                              void *scratch);
void td_attn_f32_backward_head(const td_attention_desc *a, int64_t bh, td_attn_dropout dr,
                               void *scratch);

/* fp32 AVX2 path (cpu_attention_f32_avx2.c): the AVX-512 path's algorithm, packs
 * and arithmetic on 8 lanes, for CPUs without AVX-512; same contract. */
size_t td_attn_f32_avx2_scratch_bytes(int64_t T, int64_t D, int backward);
void td_attn_f32_avx2_forward_head(const td_attention_desc *a, int64_t bh, td_attn_dropout dr,
                                   void *scratch);
void td_attn_f32_avx2_backward_head(const td_attention_desc *a, int64_t bh, td_attn_dropout dr,
                                    void *scratch);

#endif
