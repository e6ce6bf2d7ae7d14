/* The elementwise group of the CPU backend: every kernel of td_device_ops but
 * matmul and attention (device.h has each one's math and shapes).
 *
 * This file owns the threading: work is cut into pieces whose bounds depend on
 * the sizes alone (EW_CHUNK elements, whole rows, or row chunks), OpenMP
 * threads take whole pieces, and each piece runs an inner kernel of the ISA
 * table (cpu_ew.h) chosen by td_cpu_isa_get(). Reductions across rows
 * (bias_backward, layernorm dw / db, sum_squares) keep one partial per piece
 * in a scratch buffer and add the partials in piece order, so the result is
 * the same for any thread count; embedding_backward gives each thread whole
 * columns, walked in row order. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "device/cpu/cpu_ew.h"
#include "device/cpu/cpu_isa.h"
#include "device/cpu/cpu_kernels.h"

#define EW_CHUNK 16384    /* elements per piece of a flat kernel (a multiple of 64) */
#define EW_PAR_MIN 32768  /* below this many elements a kernel runs on one thread */
#define EW_MAX_PIECES 64  /* row chunks of a reduction over rows */
#define EW_MIN_ROWS 16    /* rows per chunk, at least */
/* Zero fills of more than this use non-temporal stores: the data would not stay in
 * cache anyway (zeroing the 0.5 GB gradient of GPT-2 124M: 25.8 -> 11.4 ms). */
#define EW_STREAM_BYTES ((size_t)16 << 20)

const td_ew_isa *td_cpu_ew_isa(void) {
  switch (td_cpu_isa_get()) {
  case TD_ISA_AVX512: return &td_cpu_ew_avx512;
  case TD_ISA_AVX2: return &td_cpu_ew_avx2;
  default: return &td_cpu_ew_generic;
  }
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Scratch for per-piece partials: grown on demand and kept (no allocation in
 * the steady state); one per calling thread so concurrent callers are safe. */
static _Thread_local void *scratch_buf;
static _Thread_local size_t scratch_bytes;

static void *scratch(size_t bytes) {
  if (bytes > scratch_bytes) {
    td_free(scratch_buf);
    scratch_buf = td_malloc(bytes);
    scratch_bytes = bytes;
  }
  return scratch_buf;
}

/* Rows per chunk of a reduction over rows: a function of rows alone. */
static int64_t rows_per_chunk(int64_t rows) {
  int64_t r = (rows + EW_MAX_PIECES - 1) / EW_MAX_PIECES;
  return r < EW_MIN_ROWS ? EW_MIN_ROWS : r;
}

/* out[c] += sum_k part[k * stride + c] over k < nparts, k in order; c < cols */
static void add_partials(float *out, const float *part, int64_t nparts, int64_t stride,
                         int64_t cols) {
#pragma omp parallel for schedule(static) if (nparts * cols > EW_PAR_MIN)
  for (int64_t c0 = 0; c0 < cols; c0 += 256) {
    float s[256] = {0};
    int64_t w = min64(256, cols - c0);
    for (int64_t k = 0; k < nparts; k++) {
      const float *p = part + k * stride + c0;
#pragma omp simd
      for (int64_t c = 0; c < w; c++) s[c] += p[c];
    }
    for (int64_t c = 0; c < w; c++) out[c0 + c] += s[c];
  }
}

/* ---------------------------------------------------------------------- fill */

static void fill_bytes(void *dst, size_t esize, uint64_t pattern, int64_t n) {
  if (esize == 2)
    for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = (uint16_t)pattern;
  else if (esize == 4)
    for (int64_t i = 0; i < n; i++) ((uint32_t *)dst)[i] = (uint32_t)pattern;
  else
    for (int64_t i = 0; i < n; i++) ((uint64_t *)dst)[i] = pattern;
}

/* dst[i] = value converted to dt (any td_dtype; integers truncate) */
static void cpu_fill(td_device *d, void *dst, td_dtype dt, int64_t n, float value) {
  (void)d;
  const uint64_t pattern = td_dtype_bits_of(dt, value);
  size_t es = td_dtype_size(dt);
  const td_ew_isa *isa = td_cpu_ew_isa();
  int stream = (size_t)n * es > EW_STREAM_BYTES;
#pragma omp parallel for schedule(static) if (n > EW_PAR_MIN)
  for (int64_t i = 0; i < n; i += EW_CHUNK) {
    char *piece = (char *)dst + (size_t)i * es;
    if (pattern == 0)
      isa->zero(piece, (size_t)min64(EW_CHUNK, n - i) * es, stream);
    else
      fill_bytes(piece, es, pattern, min64(EW_CHUNK, n - i));
  }
}

/* ------------------------------------------------------------- bias_backward */

/* Elements [i, i + len) of x (fp32 or bf16) as fp32: x itself, or converted into
 * buf (EW_CHUNK floats). */
static const float *f32_piece(const td_ew_isa *isa, const void *x, td_dtype x_dtype, int64_t i,
                              int64_t len, float *buf) {
  if (x_dtype == TD_F32) return (const float *)x + i;
  isa->cast(buf, TD_F32, (const uint16_t *)x + i, TD_BF16, len);
  return buf;
}

/* acc[c] += x[c]; the row step of every column sum here (rows in order) */
static void add_row(float *acc, const float *x, int64_t cols) {
#pragma omp simd
  for (int64_t c = 0; c < cols; c++) acc[c] += x[c];
}

/* acc[c] = sum_r x[r, c], r in order; x: rows x cols, fp32 or bf16 (each bf16
 * piece widened to fp32 first, so the sums are those of its fp32 cast). xc
 * (NULL: none) receives an fp32 x cast to xc_dtype, each piece while it is in
 * cache. */
static void column_sums(const td_ew_isa *isa, float *acc, const void *x, td_dtype dt,
                        int64_t rows, int64_t cols, void *xc, td_dtype xc_dtype) {
  const size_t cs = xc ? td_dtype_size(xc_dtype) : 0;
  memset(acc, 0, (size_t)cols * sizeof(float));
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c0 = 0; c0 < cols; c0 += EW_CHUNK) {
      float buf[EW_CHUNK];
      int64_t len = min64(EW_CHUNK, cols - c0);
      const float *piece = f32_piece(isa, x, dt, r * cols + c0, len, buf);
      add_row(acc + c0, piece, len);
      if (xc) isa->cast((char *)xc + (size_t)(r * cols + c0) * cs, xc_dtype, piece, TD_F32, len);
    }
}

/* dbias[c] += sum_r dout[r, c]; dout: rows x cols (fp32 or bf16), and dout_cast
 * (NULL: none) = dout in cast_dtype. Per-chunk column sums, then the chunks in
 * order. */
static void cpu_bias_backward(td_device *d, float *dbias, const void *dout, td_dtype dout_dtype,
                              int64_t rows, int64_t cols, void *dout_cast, td_dtype cast_dtype) {
  (void)d;
  TD_CHECK(dout_dtype == TD_F32 || dout_dtype == TD_BF16, "bias_backward: dout must be fp32 or bf16");
  TD_CHECK(!dout_cast || (dout_dtype == TD_F32 && cast_dtype == TD_BF16),
           "bias_backward: the cast of dout is fp32 to bf16, not %s to %s",
           td_dtype_name(dout_dtype), td_dtype_name(cast_dtype));
  const td_ew_isa *isa = td_cpu_ew_isa();
  int64_t rc = rows_per_chunk(rows), nch = (rows + rc - 1) / rc;
  size_t es = td_dtype_size(dout_dtype), cs = dout_cast ? td_dtype_size(cast_dtype) : 0;
  float *part = scratch((size_t)(nch * cols) * sizeof(float));
#pragma omp parallel for schedule(static) if (nch > 1 && rows * cols > EW_PAR_MIN)
  for (int64_t k = 0; k < nch; k++)
    column_sums(isa, part + k * cols, (const char *)dout + (size_t)(k * rc * cols) * es,
                dout_dtype, min64(rc, rows - k * rc), cols,
                dout_cast ? (char *)dout_cast + (size_t)(k * rc * cols) * cs : NULL, cast_dtype);
  add_partials(dbias, part, nch, cols, cols);
}

/* ----------------------------------------------------------------- layernorm */

/* out = (x - mean) rstd w + b per row; x: rows x cols; w, b: cols; mean, rstd:
 * rows (saved when not NULL); out: rows x cols in out_dtype (F32 or BF16). */
static void cpu_layernorm_forward(td_device *d, void *out, td_dtype out_dtype, float *mean,
                                  float *rstd, const float *x, const float *w, const float *b,
                                  int64_t rows, int64_t cols, float eps) {
  (void)d;
  TD_CHECK(out_dtype == TD_F32 || out_dtype == TD_BF16, "layernorm output must be fp32 or bf16");
  const td_ew_isa *isa = td_cpu_ew_isa();
  size_t os = td_dtype_size(out_dtype);
#pragma omp parallel for schedule(static) if (rows * cols > EW_PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    float m, s;
    isa->layernorm_row((char *)out + (size_t)(r * cols) * os, out_dtype, &m, &s, x + r * cols,
                       w, b, cols, eps);
    if (mean) mean[r] = m;
    if (rstd) rstd[r] = s;
  }
}

/* With xhat = (x - mean) rstd and g = dout w, per row:
 *   dx += rstd (g - mean_c(g) - xhat mean_c(g xhat)),
 *   dw += sum_r dout xhat,  db += sum_r dout  (per row chunk, then chunks in order).
 * Scratch: nch x [dw partial (cols), db partial (cols)]. */
static void cpu_layernorm_backward(td_device *d, float *dx, float *dw, float *db,
                                   const float *dout, const float *x, const float *w,
                                   const float *mean, const float *rstd, int64_t rows,
                                   int64_t cols) {
  (void)d;
  const td_ew_isa *isa = td_cpu_ew_isa();
  int64_t rc = rows_per_chunk(rows), nch = (rows + rc - 1) / rc;
  float *part = scratch((size_t)(2 * nch * cols) * sizeof(float));
#pragma omp parallel for schedule(static) if (nch > 1 && rows * cols > EW_PAR_MIN)
  for (int64_t k = 0; k < nch; k++) {
    float *pw = part + 2 * k * cols, *pb = pw + cols;
    memset(pw, 0, (size_t)(2 * cols) * sizeof(float));
    for (int64_t r = k * rc; r < min64(rows, (k + 1) * rc); r++)
      isa->layernorm_backward_row(dx + r * cols, pw, pb, dout + r * cols, x + r * cols, w,
                                  mean[r], rstd[r], cols);
  }
  add_partials(dw, part, nch, 2 * cols, cols);
  add_partials(db, part + cols, nch, 2 * cols, cols);
}

/* ---------------------------------------------------------------------- gelu */

/* out[i] = gelu(x[i]) in out_dtype (F32 or BF16), x fp32 or bf16; i < n */
static void cpu_gelu_forward(td_device *d, void *out, td_dtype out_dtype, const void *x,
                             td_dtype x_dtype, int64_t n, td_gelu_kind kind) {
  (void)d;
  TD_CHECK(out_dtype == TD_F32 || out_dtype == TD_BF16, "gelu output must be fp32 or bf16");
  TD_CHECK(x_dtype == TD_F32 || x_dtype == TD_BF16, "gelu input must be fp32 or bf16");
  const td_ew_isa *isa = td_cpu_ew_isa();
  size_t os = td_dtype_size(out_dtype), xs = td_dtype_size(x_dtype);
#pragma omp parallel for schedule(static) if (n > EW_PAR_MIN)
  for (int64_t i = 0; i < n; i += EW_CHUNK) {
    int64_t len = min64(EW_CHUNK, n - i);
    if (isa->gelu_forward_x && x_dtype != TD_F32) { /* fp32 x: gelu_forward is as fast */
      isa->gelu_forward_x((char *)out + (size_t)i * os, out_dtype, (const char *)x + (size_t)i * xs,
                          x_dtype, len, kind);
      continue;
    }
    float buf[EW_CHUNK];
    isa->gelu_forward((char *)out + (size_t)i * os, out_dtype, f32_piece(isa, x, x_dtype, i, len, buf),
                      len, kind);
  }
}

/* Elements [i, i + len) of gelu_backward: dx = g = dout gelu'(x) in dx_dtype, and
 * acc[0, len) += g when acc is not NULL. In one pass where the ISA has it and
 * there is a pass to save (a widening, a cast or the row sum: 20-35% faster at
 * GPT-2's fc1 width on AVX-512); else x widened into xb, g computed in place for
 * fp32 (else in gb, then rounded), and the row sum, one pass after another
 * (EW_CHUNK floats each). */
static void gelu_grad_piece(const td_ew_isa *isa, void *dx, td_dtype dx_dtype, float *acc,
                            const float *dout, const void *x, td_dtype x_dtype, int64_t i,
                            int64_t len, td_gelu_kind kind) {
  char *dxi = (char *)dx + (size_t)i * td_dtype_size(dx_dtype);
  if (isa->gelu_backward_x && (acc || x_dtype != TD_F32 || dx_dtype != TD_F32)) {
    isa->gelu_backward_x(dxi, dx_dtype, acc, dout + i,
                         (const char *)x + (size_t)i * td_dtype_size(x_dtype), x_dtype, len, kind);
    return;
  }
  float xb[EW_CHUNK], gb[EW_CHUNK];
  float *g = dx_dtype == TD_F32 ? (float *)dxi : gb;
  isa->gelu_backward(g, dout + i, f32_piece(isa, x, x_dtype, i, len, xb), len, kind);
  if (dx_dtype != TD_F32) isa->cast(dxi, dx_dtype, g, TD_F32, len);
  if (acc) add_row(acc, g, len);
}

/* g = dout gelu'(x) (fp32), dx = g in dx_dtype; dbias (may be NULL) += column
 * sums of g, blocked as bias_backward blocks them (the same bits). x fp32 or
 * bf16; an fp32 dx may alias dout. */
static void cpu_gelu_backward(td_device *d, void *dx, td_dtype dx_dtype, float *dbias,
                              const float *dout, const void *x, td_dtype x_dtype, int64_t rows,
                              int64_t cols, td_gelu_kind kind) {
  (void)d;
  TD_CHECK(x_dtype == TD_F32 || x_dtype == TD_BF16, "gelu input must be fp32 or bf16");
  TD_CHECK(dx_dtype == TD_F32 || dx_dtype == TD_BF16, "gelu gradient must be fp32 or bf16");
  const td_ew_isa *isa = td_cpu_ew_isa();
  int64_t n = rows * cols;
  if (!dbias) {
#pragma omp parallel for schedule(static) if (n > EW_PAR_MIN)
    for (int64_t i = 0; i < n; i += EW_CHUNK)
      gelu_grad_piece(isa, dx, dx_dtype, NULL, dout, x, x_dtype, i, min64(EW_CHUNK, n - i), kind);
    return;
  }
  int64_t rc = rows_per_chunk(rows), nch = (rows + rc - 1) / rc;
  float *part = scratch((size_t)(nch * cols) * sizeof(float));
#pragma omp parallel for schedule(static) if (nch > 1 && n > EW_PAR_MIN)
  for (int64_t k = 0; k < nch; k++) {
    float *acc = part + k * cols;
    memset(acc, 0, (size_t)cols * sizeof(float));
    for (int64_t r = k * rc; r < min64(rows, (k + 1) * rc); r++)
      for (int64_t c0 = 0; c0 < cols; c0 += EW_CHUNK)
        gelu_grad_piece(isa, dx, dx_dtype, acc + c0, dout, x, x_dtype, r * cols + c0,
                        min64(EW_CHUNK, cols - c0), kind);
  }
  add_partials(dbias, part, nch, cols, cols);
}

/* ------------------------------------------------------- add, scale, dropout */

/* out = a + b (out may alias a or b) */
static void cpu_add(td_device *d, float *out, const float *a, const float *b, int64_t n) {
  (void)d;
  const td_ew_isa *isa = td_cpu_ew_isa();
#pragma omp parallel for schedule(static) if (n > EW_PAR_MIN)
  for (int64_t i = 0; i < n; i += EW_CHUNK) isa->add(out + i, a + i, b + i, min64(EW_CHUNK, n - i));
}

/* x *= alpha */
static void cpu_scale(td_device *d, float *x, int64_t n, float alpha) {
  (void)d;
  const td_ew_isa *isa = td_cpu_ew_isa();
#pragma omp parallel for schedule(static) if (n > EW_PAR_MIN)
  for (int64_t i = 0; i < n; i += EW_CHUNK) isa->scale(x + i, min64(EW_CHUNK, n - i), alpha);
}

/* x[k] = unit(td_rng_u32(seed, stream, first + k)) >= p ? x[k] / (1 - p) : 0, with
 * unit() = td_rng_bits_to_unit, so P(keep) = 1 - p; p == 0 is the identity. */
static void cpu_dropout(td_device *d, float *out, const float *resid, const float *x, int64_t n,
                        float p, uint64_t seed, uint64_t stream, uint64_t first) {
  TD_CHECK(p >= 0.0f && p <= 1.0f, "dropout probability %g outside [0, 1]", (double)p);
  if (p == 0.0f) { /* nothing masked: the sum, or a copy */
    if (resid)
      cpu_add(d, out, resid, x, n);
    else if (out != x)
      memmove(out, x, (size_t)n * sizeof(float));
    return;
  }
  const td_ew_isa *isa = td_cpu_ew_isa();
#pragma omp parallel for schedule(static) if (n > EW_PAR_MIN)
  for (int64_t i = 0; i < n; i += EW_CHUNK)
    isa->dropout(out, resid, x, i, min64(i + EW_CHUNK, n), p, seed, stream, first);
}

/* ----------------------------------------------------------------- embedding */

/* One output row: the table row, or zeros / nothing when the id is not in this table. */
static void embed_row(float *out, const float *table, int64_t row, int64_t rows_in_table,
                      int64_t cols, int accumulate) {
  const float *t = row >= 0 && row < rows_in_table ? table + row * cols : NULL;
  if (!accumulate) {
    if (t)
      memcpy(out, t, (size_t)cols * sizeof(float));
    else
      memset(out, 0, (size_t)cols * sizeof(float));
  } else if (t) {
#pragma omp simd
    for (int64_t c = 0; c < cols; c++) out[c] += t[c];
  }
}

/* out[r] (+)= table[ids[r] - vocab_start]; out: n x cols; table: rows_in_table x cols */
static void cpu_embedding_forward(td_device *d, float *out, const int32_t *ids, int64_t n,
                                  const float *table, int64_t vocab_start, int64_t rows_in_table,
                                  int64_t cols, int accumulate) {
  (void)d;
#pragma omp parallel for schedule(static) if (n * cols > EW_PAR_MIN)
  for (int64_t r = 0; r < n; r++)
    embed_row(out + r * cols, table, ids[r] - vocab_start, rows_in_table, cols, accumulate);
}

/* dtable[ids[r] - vocab_start] += dout[r] for ids in range. Each thread owns a
 * range of whole columns (in 16-float cache lines) and adds rows in order, so
 * repeated ids sum in the same order for any thread count. */
static void cpu_embedding_backward(td_device *d, float *dtable, const float *dout,
                                   const int32_t *ids, int64_t n, int64_t vocab_start,
                                   int64_t rows_in_table, int64_t cols) {
  (void)d;
#pragma omp parallel if (n * cols > EW_PAR_MIN)
  {
    int64_t nt = omp_get_num_threads(), t = omp_get_thread_num(), lines = (cols + 15) / 16;
    int64_t c0 = lines * t / nt * 16, c1 = min64(cols, lines * (t + 1) / nt * 16);
    for (int64_t r = 0; r < n; r++) {
      int64_t row = ids[r] - vocab_start;
      if (row < 0 || row >= rows_in_table) continue;
      float *dt = dtable + row * cols;
      const float *g = dout + r * cols;
#pragma omp simd
      for (int64_t c = c0; c < c1; c++) dt[c] += g[c];
    }
  }
}

/* ------------------------------------------------------------- cross-entropy */

static int32_t checked_target(const int32_t *targets, int64_t r, int64_t vocab) {
  int32_t t = targets[r];
  TD_CHECK(t >= 0 && t < vocab, "cross-entropy target[%lld] = %d outside [0, %lld)",
           (long long)r, t, (long long)vocab);
  return t;
}

static void check_logits_dtype(const char *op, td_dtype dt) {
  TD_CHECK(dt == TD_F32 || dt == TD_BF16, "%s: logits are fp32 or bf16, not %s", op,
           td_dtype_name(dt));
}

/* logits[r, j] as fp32 (the target's; the rows themselves go to the ISA's loops) */
static float logit_at(const void *logits, td_dtype dt, int64_t i) {
  return dt == TD_BF16 ? td_bf16_to_f32(((const uint16_t *)logits)[i]) : ((const float *)logits)[i];
}

/* lse[r] = log sum_j exp(logits[r, j]); losses[r] = lse[r] - logits[r, targets[r]];
 * logits: n x vocab in logits_dtype */
static void cpu_cross_entropy_forward(td_device *d, float *losses, float *lse, const void *logits,
                                      td_dtype logits_dtype, const int32_t *targets, int64_t n,
                                      int64_t vocab) {
  (void)d;
  check_logits_dtype("cross_entropy_forward", logits_dtype);
  const td_ew_isa *isa = td_cpu_ew_isa();
  const size_t es = td_dtype_size(logits_dtype);
#pragma omp parallel for schedule(static) if (n * vocab > EW_PAR_MIN)
  for (int64_t r = 0; r < n; r++) {
    float l = isa->logsumexp_row((const char *)logits + (size_t)(r * vocab) * es, logits_dtype,
                                 vocab);
    lse[r] = l;
    losses[r] = l - logit_at(logits, logits_dtype, r * vocab + checked_target(targets, r, vocab));
  }
}

/* The vocabulary-parallel pieces (device.h): lse of the slice, the target's logit
 * where the slice holds it. */
static void cpu_cross_entropy_slice(td_device *d, float *lse, float *target_logit,
                                    const void *logits, td_dtype logits_dtype,
                                    const int32_t *targets, int64_t n, int64_t vocab,
                                    int64_t vocab_start) {
  (void)d;
  check_logits_dtype("cross_entropy_slice", logits_dtype);
  const td_ew_isa *isa = td_cpu_ew_isa();
  const size_t es = td_dtype_size(logits_dtype);
#pragma omp parallel for schedule(static) if (n * vocab > EW_PAR_MIN)
  for (int64_t r = 0; r < n; r++) {
    int64_t t = (int64_t)targets[r] - vocab_start;
    lse[r] = isa->logsumexp_row((const char *)logits + (size_t)(r * vocab) * es, logits_dtype,
                                vocab);
    target_logit[r] = t >= 0 && t < vocab ? logit_at(logits, logits_dtype, r * vocab + t) : 0.0f;
  }
}

static void cpu_cross_entropy_combine(td_device *d, float *lse, float *losses,
                                      const float *lse_parts, const float *target_logit,
                                      int64_t n, int64_t parts) {
  (void)d;
  for (int64_t r = 0; r < n; r++) {
    double mx = -INFINITY, sum = 0;
    for (int64_t p = 0; p < parts; p++) mx = fmax(mx, lse_parts[p * n + r]);
    for (int64_t p = 0; p < parts; p++) sum += exp(lse_parts[p * n + r] - mx);
    lse[r] = (float)(mx + log(sum));
    losses[r] = lse[r] - target_logit[r];
  }
}

/* Sequential on purpose: n is a micro-batch's tokens, and the order fixes the bits. */
static void cpu_masked_sum(td_device *d, double *out, const float *x, const float *mask,
                           int64_t n) {
  (void)d;
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += (double)x[i] * mask[i];
  *out = s;
}

/* dlogits[r, j] = (exp(logits[r, j] - lse[r]) - [j + vocab_start == targets[r]]) dloss[r]
 * (dlogits may alias logits of its dtype). Targets are the model's, checked
 * against the vocabulary at its input. */
static void cpu_cross_entropy_backward(td_device *d, void *dlogits, td_dtype dlogits_dtype,
                                       const void *logits, td_dtype logits_dtype,
                                       const float *lse, const int32_t *targets,
                                       const float *dloss, int64_t n, int64_t vocab,
                                       int64_t vocab_start) {
  (void)d;
  TD_CHECK(dlogits_dtype == TD_F32 || dlogits_dtype == TD_BF16,
           "cross_entropy_backward: dlogits are fp32 or bf16, not %s",
           td_dtype_name(dlogits_dtype));
  check_logits_dtype("cross_entropy_backward", logits_dtype);
  const td_ew_isa *isa = td_cpu_ew_isa();
  const size_t es = td_dtype_size(dlogits_dtype), ls = td_dtype_size(logits_dtype);
#pragma omp parallel for schedule(static) if (n * vocab > EW_PAR_MIN)
  for (int64_t r = 0; r < n; r++)
    isa->softmax_grad_row((char *)dlogits + (size_t)(r * vocab) * es, dlogits_dtype,
                          (const char *)logits + (size_t)(r * vocab) * ls, logits_dtype, lse[r],
                          dloss[r], (int64_t)targets[r] - vocab_start, vocab);
}

/* forward then backward per row while the row is in cache: the target's logit is
 * read before the gradient may overwrite it (in place). */
static void cpu_cross_entropy_fused(td_device *d, float *losses, float *lse, void *dlogits,
                                    td_dtype dlogits_dtype, const void *logits,
                                    td_dtype logits_dtype, const int32_t *targets,
                                    const float *dloss, int64_t n, int64_t vocab) {
  (void)d;
  TD_CHECK(dlogits_dtype == TD_F32 || dlogits_dtype == TD_BF16,
           "cross_entropy_fused: dlogits are fp32 or bf16, not %s", td_dtype_name(dlogits_dtype));
  check_logits_dtype("cross_entropy_fused", logits_dtype);
  const td_ew_isa *isa = td_cpu_ew_isa();
  const size_t es = td_dtype_size(dlogits_dtype), ls = td_dtype_size(logits_dtype);
#pragma omp parallel for schedule(static) if (n * vocab > EW_PAR_MIN)
  for (int64_t r = 0; r < n; r++) {
    const void *row = (const char *)logits + (size_t)(r * vocab) * ls;
    const int32_t t = checked_target(targets, r, vocab);
    const float l = isa->logsumexp_row(row, logits_dtype, vocab);
    lse[r] = l;
    losses[r] = l - logit_at(row, logits_dtype, t);
    isa->softmax_grad_row((char *)dlogits + (size_t)(r * vocab) * es, dlogits_dtype, row,
                          logits_dtype, l, dloss[r], t, vocab);
  }
}

/* --------------------------------------------------------- optimizer, utils */

/* AdamW as device.h writes it; the bias corrections 1 / (1 - beta^t) in double.
 * A bf16 copy is stored by the update's own loop; an fp16 one is cast per piece
 * while the piece is in cache. */
static void cpu_adamw(td_device *d, float *param, const float *grad, float *m, float *v,
                      int64_t n, float lr, float beta1, float beta2, float eps,
                      float weight_decay, float grad_scale, int64_t step, void *copy,
                      td_dtype copy_dtype) {
  (void)d;
  TD_CHECK(step >= 1, "adamw step %lld: steps count from 1", (long long)step);
  TD_CHECK(!copy || copy_dtype == TD_BF16 || copy_dtype == TD_F16,
           "adamw: the weight copy is bf16 or fp16, not %s", td_dtype_name(copy_dtype));
  const size_t cs = copy ? td_dtype_size(copy_dtype) : 0;
  const td_ew_adamw c = {
      .lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps, .weight_decay = weight_decay,
      .grad_scale = grad_scale,
      .inv_bc1 = (float)(1.0 / (1.0 - pow(beta1, (double)step))),
      .inv_bc2 = (float)(1.0 / (1.0 - pow(beta2, (double)step)))};
  const td_ew_isa *isa = td_cpu_ew_isa();
#pragma omp parallel for schedule(static) if (n > EW_PAR_MIN)
  for (int64_t i = 0; i < n; i += EW_CHUNK) {
    uint16_t *bf16 = copy && copy_dtype == TD_BF16 ? (uint16_t *)copy + i : NULL;
    isa->adamw(param + i, grad + i, m + i, v + i, min64(EW_CHUNK, n - i), &c, bf16);
    if (copy && !bf16)
      isa->cast((char *)copy + (size_t)i * cs, copy_dtype, param + i, TD_F32, min64(EW_CHUNK, n - i));
  }
}

static int is_float_dtype(td_dtype dt) { return dt == TD_F32 || dt == TD_BF16 || dt == TD_F16; }

/* dst = (dst_dtype) src for fp32 / bf16 / fp16, rounding as dtype.h (nearest even,
 * NaN and Inf kept); the same dtype is a copy. */
static void cpu_cast(td_device *d, void *dst, td_dtype dst_dtype, const void *src,
                     td_dtype src_dtype, int64_t n) {
  (void)d;
  TD_CHECK(is_float_dtype(dst_dtype) && is_float_dtype(src_dtype),
           "cast between %s and %s: only fp32, bf16, fp16", td_dtype_name(src_dtype),
           td_dtype_name(dst_dtype));
  size_t ds = td_dtype_size(dst_dtype), ss = td_dtype_size(src_dtype);
  if (dst_dtype == src_dtype) {
    if (n > 0 && dst != src) memmove(dst, src, (size_t)n * ds);
    return;
  }
  const td_ew_isa *isa = td_cpu_ew_isa();
#pragma omp parallel for schedule(static) if (n > EW_PAR_MIN)
  for (int64_t i = 0; i < n; i += EW_CHUNK)
    isa->cast((char *)dst + (size_t)i * ds, dst_dtype, (const char *)src + (size_t)i * ss,
              src_dtype, min64(EW_CHUNK, n - i));
}

/* sum x^2 in double: one partial per EW_CHUNK piece, added in piece order; the
 * pieces four at a time where the ISA reads them side by side */
static void cpu_sum_squares(td_device *d, double *out, const float *x, int64_t n) {
  (void)d;
  const td_ew_isa *isa = td_cpu_ew_isa();
  int64_t np = (n + EW_CHUNK - 1) / EW_CHUNK;
  double *part = scratch((size_t)np * sizeof(double)), s = 0;
#pragma omp parallel for schedule(static) if (n > EW_PAR_MIN)
  for (int64_t g = 0; g < (np + 3) / 4; g++) {
    int64_t k = 4 * g;
    if (isa->sum_squares4 && (k + 4) * EW_CHUNK <= n) {
      isa->sum_squares4(x + k * EW_CHUNK, EW_CHUNK, part + k);
      continue;
    }
    for (; k < 4 * g + 4 && k < np; k++)
      part[k] = isa->sum_squares(x + k * EW_CHUNK, min64(EW_CHUNK, n - k * EW_CHUNK));
  }
  for (int64_t k = 0; k < np; k++) s += part[k];
  *out = s;
}

static void cpu_count_zeros(td_device *d, double *out, const float *x, int64_t n) {
  (void)d;
  int64_t zeros = 0;
#pragma omp parallel for schedule(static) reduction(+ : zeros) if (n > EW_PAR_MIN)
  for (int64_t i = 0; i < n; i++) zeros += x[i] == 0.0f;
  *out = (double)zeros;
}

void td_cpu_register_elementwise(td_device_ops *ops) {
  ops->fill = cpu_fill;
  ops->bias_backward = cpu_bias_backward;
  ops->layernorm_forward = cpu_layernorm_forward;
  ops->layernorm_backward = cpu_layernorm_backward;
  ops->gelu_forward = cpu_gelu_forward;
  ops->gelu_backward = cpu_gelu_backward;
  ops->add = cpu_add;
  ops->dropout = cpu_dropout;
  ops->embedding_forward = cpu_embedding_forward;
  ops->embedding_backward = cpu_embedding_backward;
  ops->cross_entropy_forward = cpu_cross_entropy_forward;
  ops->cross_entropy_slice = cpu_cross_entropy_slice;
  ops->cross_entropy_combine = cpu_cross_entropy_combine;
  ops->masked_sum = cpu_masked_sum;
  ops->cross_entropy_backward = cpu_cross_entropy_backward;
  ops->cross_entropy_fused = cpu_cross_entropy_fused;
  ops->adamw = cpu_adamw;
  ops->cast = cpu_cast;
  ops->scale = cpu_scale;
  ops->sum_squares = cpu_sum_squares;
  ops->count_zeros = cpu_count_zeros;
}
