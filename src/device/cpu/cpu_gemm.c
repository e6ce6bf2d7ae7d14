/* GEMM for the CPU backend: oneDNN's matmul primitive (brgemm kernels; bf16 runs
 * on AMX / AVX512-BF16 where the CPU has them), OpenBLAS (cblas_sgemm, loaded by cpu_openblas.c; Debian's
 * OpenBLAS is built without its bf16 GEMM) or trident's own bf16 GEMM on AMX tiles
 * or AVX512-BF16 dot products (cpu_gemm_bf16_avx512.c). Which one runs a call is measured per shape class on
 * the machine that runs (cpu_gemm_select.c), because no library is fastest
 * everywhere (bench/RESULTS.md): at the GPT-2 124M shapes OpenBLAS fp32 ran up to
 * 2x oneDNN 2.6 where oneDNN falls back to slow kernels (n = 3072, transposed A)
 * on one machine and at 13-26% of oneDNN on a Sapphire Rapids it does not know
 * (issue #14); with AMX, trident's bf16 GEMM is 1.3-1.4x oneDNN 2.6's brgemm on
 * the weight gradients and up to 3x on the lm_head products, within 10% of it on
 * the small attention projection. Calls made from inside parallel regions (the
 * attention's fallback) take the default library, never trident's bf16 GEMM.
 *
 * oneDNN primitives are created once per distinct (shape, strides, dtypes,
 * alpha, beta, bias?) and cached; each thread has its own stream and scratchpad,
 * so td_cpu_gemm may be called concurrently from inside a parallel region (it
 * then runs on the calling thread).
 *
 * A CPU without AVX-512 (AMD Zen 2/3, Intel client cores) has no bf16 kernels in
 * oneDNN 2.x: it refuses the primitive. There a bf16 product widens its inputs to
 * fp32 (exact) and runs as an fp32 GEMM, accumulating in fp32 as the bf16
 * kernels do; a bf16 C is rounded from the fp32 result (gemm_bf16_widened). */
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/error.h"
#include "base/mem.h"
#include "device/cpu/cpu_gemm.h"
#include "device/cpu/cpu_ew.h"
#include "device/cpu/cpu_gemm_bf16.h"
#include "device/cpu/cpu_kernels.h"
#include "device/cpu/cpu_openblas.h"

/* ---------------------------------------------------------------- libraries */

static const char *const k_library_names[TD_GEMM_LIBRARIES] = {"onednn", "openblas", "amx",
                                                                  "avx512bf16"};

int td_cpu_gemm_library_serves(td_gemm_library lib, td_dtype ab_dtype) {
  switch (lib) {
    case TD_GEMM_ONEDNN: return ab_dtype == TD_F32 || ab_dtype == TD_BF16;
    case TD_GEMM_OPENBLAS: return ab_dtype == TD_F32;
    case TD_GEMM_AMX: return ab_dtype == TD_BF16 && td_cpu_gemm_amx_usable();
    case TD_GEMM_DPBF16: return ab_dtype == TD_BF16 && td_cpu_gemm_dpbf16_usable();
    default: return 0;
  }
}

const char *td_gemm_library_name(td_gemm_library lib) {
  TD_CHECK(lib >= 0 && lib < TD_GEMM_LIBRARIES, "GEMM library %d", (int)lib);
  return k_library_names[lib];
}

/* ---------------------------------------------------------------- OpenBLAS */

/* C <- beta*C + bias on every row, so the library call can then accumulate (beta = 1).
 * OpenBLAS itself makes such a pass over C for any beta but 1 (its beta kernel), so
 * this costs nothing beyond it, as long as it runs on every thread: on one thread
 * it took 5-6% of the forward GEMMs' time at GPT-2 124M (bench/RESULTS.md). */
static void fold_bias(float *c, int64_t m, int64_t n, int64_t ldc, const float *bias, float beta) {
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && m * n > (1 << 16))
  for (int64_t i = 0; i < m; i++) {
    float *row = c + i * ldc;
    if (beta == 0.0f)
      memcpy(row, bias, (size_t)n * sizeof *row);
    else
      for (int64_t j = 0; j < n; j++) row[j] = beta * row[j] + bias[j];
  }
}

static void openblas_one(const td_matmul_desc *g, const float *a, const float *b, float *c,
                         int64_t ldc, float beta) {
  enum CBLAS_TRANSPOSE ta = g->trans_a ? CblasTrans : CblasNoTrans;
  enum CBLAS_TRANSPOSE tb = g->trans_b ? CblasTrans : CblasNoTrans;
  if (g->bias) {
    fold_bias(c, g->m, g->n, ldc, g->bias, beta);
    beta = 1.0f;
  }
  td_openblas_get()->sgemm(CblasRowMajor, ta, tb, (blasint)g->m, (blasint)g->n, (blasint)g->k,
                           g->alpha, a, (blasint)g->lda, b, (blasint)g->ldb, beta, c,
                           (blasint)ldc);
}

static void gemm_openblas(const td_matmul_desc *g) {
  TD_CHECK(g->ab_dtype == TD_F32, "OpenBLAS serves fp32 inputs only");
  for (int64_t b = 0; b < g->batch; b++)
    openblas_one(g, (const float *)g->a + b * g->stride_a, (const float *)g->b + b * g->stride_b,
                 (float *)g->c + b * g->stride_c, g->ldc, g->beta);
}

/* ------------------------------------------------------------------ oneDNN */

#define DNNL_OK(call)                                                                  \
  do {                                                                                 \
    dnnl_status_t st_ = (call);                                                        \
    TD_CHECK(st_ == dnnl_success, "oneDNN call %s returned status %d", #call, (int)st_); \
  } while (0)

/* Everything that determines a primitive; compared bytewise (zero-initialised). */
typedef struct {
  int64_t m, n, k, batch, lda, ldb, ldc, stride_a, stride_b, stride_c;
  int32_t trans_a, trans_b, ab_dtype, c_dtype, has_bias;
  float alpha, beta;
} gemm_key;

/* oneDNN applies the output scale after its own bias: scale * (AB + bias). With
 * alpha != 1 the bias is instead a binary-add post-op after the scale (and after
 * the sum post-op): alpha * AB + beta * C + bias, as the device interface says. */
static int bias_as_post_op(const gemm_key *k) { return k->has_bias && k->alpha != 1.0f; }

typedef struct {
  gemm_key key;
  dnnl_primitive_t prim;
  dnnl_memory_desc_t a_md, b_md, c_md, bias_md, scratch_md;
  size_t scratch_bytes;
} gemm_entry;

#define GEMM_CACHE_SIZE 512
static gemm_entry g_cache[GEMM_CACHE_SIZE];
static int g_cache_used;
static dnnl_engine_t g_engine;

static dnnl_data_type_t dnnl_type(td_dtype dt) { return dt == TD_BF16 ? dnnl_bf16 : dnnl_f32; }

/* A row-major matrix of rows x cols, stored transposed when trans, with leading
 * dimension ld and batch stride; 3-D (batch first) when batch > 1. */
static void matrix_md(dnnl_memory_desc_t *md, int64_t batch, int64_t rows, int64_t cols, int trans,
                      int64_t ld, int64_t stride, dnnl_data_type_t dt) {
  dnnl_dims_t dims, strides;
  int nd = 0;
  if (batch > 1) dims[nd] = batch, strides[nd++] = stride;
  dims[nd] = rows, strides[nd++] = trans ? 1 : ld;
  dims[nd] = cols, strides[nd++] = trans ? ld : 1;
  DNNL_OK(dnnl_memory_desc_init_by_strides(md, nd, dims, dt, strides));
}

static void entry_create(gemm_entry *e, const gemm_key *k) {
  e->key = *k;
  matrix_md(&e->a_md, k->batch, k->m, k->k, k->trans_a, k->lda, k->stride_a, dnnl_type(k->ab_dtype));
  matrix_md(&e->b_md, k->batch, k->k, k->n, k->trans_b, k->ldb, k->stride_b, dnnl_type(k->ab_dtype));
  matrix_md(&e->c_md, k->batch, k->m, k->n, 0, k->ldc, k->stride_c, dnnl_type(k->c_dtype));
  if (k->has_bias) { /* {1, n}, or {1, 1, n} for a batched matmul: broadcast over rows */
    matrix_md(&e->bias_md, 1, 1, k->n, 0, k->n, 0, dnnl_f32);
    if (k->batch > 1) {
      dnnl_dims_t dims = {1, 1, k->n}, strides = {k->n, k->n, 1};
      DNNL_OK(dnnl_memory_desc_init_by_strides(&e->bias_md, 3, dims, dnnl_f32, strides));
    }
  }
  dnnl_matmul_desc_t desc;
  int inner_bias = k->has_bias && !bias_as_post_op(k);
  DNNL_OK(dnnl_matmul_desc_init(&desc, &e->a_md, &e->b_md, inner_bias ? &e->bias_md : NULL,
                                &e->c_md));
  dnnl_primitive_attr_t attr;
  DNNL_OK(dnnl_primitive_attr_create(&attr));
  DNNL_OK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
  if (k->alpha != 1.0f) DNNL_OK(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k->alpha));
  dnnl_post_ops_t po;
  DNNL_OK(dnnl_post_ops_create(&po));
  if (k->beta != 0.0f) DNNL_OK(dnnl_post_ops_append_sum(po, k->beta));
  if (bias_as_post_op(k)) DNNL_OK(dnnl_post_ops_append_binary(po, dnnl_binary_add, &e->bias_md));
  DNNL_OK(dnnl_primitive_attr_set_post_ops(attr, po));
  dnnl_post_ops_destroy(po);
  dnnl_primitive_desc_t pd;
  DNNL_OK(dnnl_primitive_desc_create(&pd, &desc, attr, g_engine, NULL));
  e->scratch_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  e->scratch_bytes = dnnl_memory_desc_get_size(&e->scratch_md);
  DNNL_OK(dnnl_primitive_create(&e->prim, pd));
  dnnl_primitive_desc_destroy(pd);
  dnnl_primitive_attr_destroy(attr);
}

static const gemm_entry *entry_get(const gemm_key *k) {
  const gemm_entry *found = NULL;
#pragma omp critical(td_gemm_cache)
  {
    if (!g_engine) DNNL_OK(dnnl_engine_create(&g_engine, dnnl_cpu, 0));
    for (int i = 0; i < g_cache_used && !found; i++)
      if (!memcmp(&g_cache[i].key, k, sizeof *k)) found = &g_cache[i];
    if (!found) {
      TD_CHECK(g_cache_used < GEMM_CACHE_SIZE, "more than %d distinct GEMM shapes",
               GEMM_CACHE_SIZE);
      entry_create(&g_cache[g_cache_used], k);
      found = &g_cache[g_cache_used++];
    }
  }
  return found;
}

/* Per-thread execution state: a stream and oneDNN's scratchpad. */
static __thread dnnl_stream_t t_stream;
static __thread td_cpu_workspace t_scratchpad;

static dnnl_memory_t wrap(const dnnl_memory_desc_t *md, const void *p) {
  dnnl_memory_t mem;
  DNNL_OK(dnnl_memory_create(&mem, md, g_engine, (void *)p));
  return mem;
}

static gemm_key key_of(const td_matmul_desc *g) {
  gemm_key k;
  memset(&k, 0, sizeof k);
  k.m = g->m, k.n = g->n, k.k = g->k, k.batch = g->batch, k.lda = g->lda, k.ldb = g->ldb;
  k.ldc = g->ldc, k.stride_a = g->batch > 1 ? g->stride_a : 0;
  k.stride_b = g->batch > 1 ? g->stride_b : 0, k.stride_c = g->batch > 1 ? g->stride_c : 0;
  k.trans_a = g->trans_a != 0, k.trans_b = g->trans_b != 0, k.ab_dtype = g->ab_dtype;
  k.c_dtype = g->c_dtype, k.has_bias = g->bias != NULL, k.alpha = g->alpha, k.beta = g->beta;
  return k;
}

void td_cpu_gemm_prepare(const td_matmul_desc *g, td_gemm_library lib) {
  gemm_key k = key_of(g);
  if (lib == TD_GEMM_ONEDNN) entry_get(&k);
}

/* 1 when oneDNN runs bf16 matmuls on this CPU (probed once: a 1 x 1 x 1 primitive) */
int td_cpu_gemm_onednn_bf16(void) {
  static int has = -1;
#pragma omp critical(td_gemm_cache)
  if (has < 0) {
    if (!g_engine) DNNL_OK(dnnl_engine_create(&g_engine, dnnl_cpu, 0));
    dnnl_memory_desc_t md;
    dnnl_dims_t dims = {1, 1}, strides = {1, 1};
    DNNL_OK(dnnl_memory_desc_init_by_strides(&md, 2, dims, dnnl_bf16, strides));
    dnnl_matmul_desc_t desc;
    DNNL_OK(dnnl_matmul_desc_init(&desc, &md, &md, NULL, &md));
    dnnl_primitive_desc_t pd;
    has = dnnl_primitive_desc_create(&pd, &desc, NULL, g_engine, NULL) == dnnl_success;
    if (has) dnnl_primitive_desc_destroy(pd);
  }
  return has;
}

/* Per-thread fp32 copies of a bf16 product's A and B (and its C when that is bf16) */
static __thread td_cpu_workspace t_wide;

/* A product widened whole takes m k + k n (+ m n for a bf16 C) fp32 elements of a
 * thread's workspace. Above WIDE_MAX (32 MiB) it runs in blocks of C and of k, each
 * block's operands widened in turn, so the workspace stays bounded whatever the
 * model: the lm_head's weight alone is 150 MB widened at GPT-2 124M. */
enum { WIDE_MAX = 8 << 20, WIDE_BM = 2048, WIDE_BN = 2048, WIDE_BK = 1024 };

/* dst = the batch x rows x cols bf16 matrices at src (row stride ld, matrix stride
 * stride) as dense fp32; a row at a time by the ISA's cast (exact). */
static void widen(float *dst, const uint16_t *src, int64_t batch, int64_t rows, int64_t cols,
                  int64_t ld, int64_t stride) {
  const td_ew_isa *isa = td_cpu_ew_isa();
#pragma omp parallel for collapse(2) schedule(static) if (!omp_in_parallel() && batch * rows * cols > (1 << 16))
  for (int64_t b = 0; b < batch; b++)
    for (int64_t r = 0; r < rows; r++)
      isa->cast(dst + (b * rows + r) * cols, TD_F32, src + b * stride + r * ld, TD_BF16, cols);
}

/* dst (row stride ld, matrix stride stride) = the dense batch x rows x cols fp32
 * matrices at src, rounded to bf16 by the ISA's cast (td_f32_to_bf16's bits) */
static void narrow(uint16_t *dst, const float *src, int64_t batch, int64_t rows, int64_t cols,
                   int64_t ld, int64_t stride) {
  const td_ew_isa *isa = td_cpu_ew_isa();
#pragma omp parallel for collapse(2) schedule(static) if (!omp_in_parallel() && batch * rows * cols > (1 << 16))
  for (int64_t b = 0; b < batch; b++)
    for (int64_t r = 0; r < rows; r++)
      isa->cast(dst + b * stride + r * ld, TD_BF16, src + (b * rows + r) * cols, TD_F32, cols);
}

static void gemm_onednn(const td_matmul_desc *g, int measure_widened);

/* w (fp32 inputs) on the fp32 library: chosen by measurement when measure (as
 * ops->matmul chooses: td_cpu_gemm outside parallel regions), else the default
 * (calls from parallel regions, td_cpu_gemm_with): the library, and so the bits,
 * must not depend on the thread count. */
static void gemm_f32_widened(const td_matmul_desc *w, int measure) {
  td_gemm_library lib = measure ? td_cpu_gemm_choose(w) : td_cpu_gemm_library(TD_F32);
  if (lib == TD_GEMM_OPENBLAS)
    gemm_openblas(w);
  else
    gemm_onednn(w, 0);
}

/* One product (batch 1) in blocks of at most WIDE_BM x WIDE_BN of C, each summed
 * over k in blocks of WIDE_BK: the first with the caller's beta and bias, the
 * others onto it (beta 1); a bf16 C's block is summed in fp32 and rounded once. */
static void gemm_bf16_widened_blocked(const td_matmul_desc *g, int measure) {
  const uint16_t *A = g->a, *B = g->b;
  const int bf16_c = g->c_dtype == TD_BF16;
  float *wa = td_cpu_workspace_get(
      &t_wide, (size_t)(WIDE_BM * WIDE_BK + WIDE_BK * WIDE_BN + (bf16_c ? WIDE_BM * WIDE_BN : 0)) *
                   sizeof(float));
  float *wb = wa + WIDE_BM * WIDE_BK, *wc = wb + WIDE_BK * WIDE_BN;
  for (int64_t i0 = 0; i0 < g->m; i0 += WIDE_BM)
    for (int64_t j0 = 0; j0 < g->n; j0 += WIDE_BN) {
      const int64_t mb = g->m - i0 < WIDE_BM ? g->m - i0 : WIDE_BM;
      const int64_t nb = g->n - j0 < WIDE_BN ? g->n - j0 : WIDE_BN;
      for (int64_t p0 = 0; p0 < g->k; p0 += WIDE_BK) {
        const int64_t kb = g->k - p0 < WIDE_BK ? g->k - p0 : WIDE_BK;
        td_matmul_desc w = *g;
        w.m = mb, w.n = nb, w.k = kb, w.batch = 1, w.ab_dtype = TD_F32, w.a = wa, w.b = wb;
        if (g->trans_a) /* op(A)'s rows i0.., columns p0..: A's rows p0.. when transposed */
          widen(wa, A + p0 * g->lda + i0, 1, kb, mb, g->lda, 0), w.lda = mb;
        else
          widen(wa, A + i0 * g->lda + p0, 1, mb, kb, g->lda, 0), w.lda = kb;
        if (g->trans_b)
          widen(wb, B + j0 * g->ldb + p0, 1, nb, kb, g->ldb, 0), w.ldb = kb;
        else
          widen(wb, B + p0 * g->ldb + j0, 1, kb, nb, g->ldb, 0), w.ldb = nb;
        w.beta = p0 ? 1.0f : g->beta;
        w.bias = p0 || !g->bias ? NULL : g->bias + j0;
        if (bf16_c)
          w.c_dtype = TD_F32, w.c = wc, w.ldc = nb;
        else
          w.c = (float *)g->c + i0 * g->ldc + j0;
        gemm_f32_widened(&w, measure);
      }
      if (bf16_c) narrow((uint16_t *)g->c + i0 * g->ldc + j0, wc, 1, mb, nb, g->ldc, 0);
    }
}

/* A bf16 product where oneDNN has no bf16 kernels: the inputs widened to fp32
 * (exact), the fp32 library (measure: see gemm_f32_widened), a bf16 C rounded from
 * the fp32 result. */
static void gemm_bf16_widened(const td_matmul_desc *g, int measure) {
  const int64_t a_rows = g->trans_a ? g->k : g->m, a_cols = g->trans_a ? g->m : g->k;
  const int64_t b_rows = g->trans_b ? g->n : g->k, b_cols = g->trans_b ? g->k : g->n;
  const size_t a_n = (size_t)(g->batch * g->m * g->k), b_n = (size_t)(g->batch * g->k * g->n);
  const size_t c_n = g->c_dtype == TD_BF16 ? (size_t)(g->batch * g->m * g->n) : 0;
  if (a_n + b_n + c_n > WIDE_MAX) {
    const size_t c_size = td_dtype_size(g->c_dtype);
    for (int64_t bi = 0; bi < g->batch; bi++) {
      td_matmul_desc one = *g;
      one.batch = 1, one.a = (const uint16_t *)g->a + bi * g->stride_a;
      one.b = (const uint16_t *)g->b + bi * g->stride_b;
      one.c = (char *)g->c + (size_t)(bi * g->stride_c) * c_size;
      gemm_bf16_widened_blocked(&one, measure);
    }
    return;
  }
  float *a = td_cpu_workspace_get(&t_wide, (a_n + b_n + c_n) * sizeof(float));
  float *b = a + a_n, *c = b + b_n;
  widen(a, g->a, g->batch, a_rows, a_cols, g->lda, g->stride_a);
  widen(b, g->b, g->batch, b_rows, b_cols, g->ldb, g->stride_b);
  td_matmul_desc w = *g;
  w.ab_dtype = TD_F32, w.a = a, w.lda = a_cols, w.stride_a = a_rows * a_cols;
  w.b = b, w.ldb = b_cols, w.stride_b = b_rows * b_cols;
  if (c_n) w.c_dtype = TD_F32, w.c = c, w.ldc = g->n, w.stride_c = g->m * g->n; /* beta is 0 */
  gemm_f32_widened(&w, measure);
  if (c_n) narrow(g->c, c, g->batch, g->m, g->n, g->ldc, g->stride_c);
}

/* measure_widened: see gemm_bf16_widened */
static void gemm_onednn(const td_matmul_desc *g, int measure_widened) {
  if (g->ab_dtype == TD_BF16 && !td_cpu_gemm_onednn_bf16()) {
    gemm_bf16_widened(g, measure_widened);
    return;
  }
  gemm_key k = key_of(g);
  const gemm_entry *e = entry_get(&k);
  if (!t_stream) DNNL_OK(dnnl_stream_create(&t_stream, g_engine, dnnl_stream_default_flags));
  void *scratchpad = td_cpu_workspace_get(&t_scratchpad, e->scratch_bytes);
  dnnl_exec_arg_t args[5] = {
      {DNNL_ARG_SRC, wrap(&e->a_md, g->a)},
      {DNNL_ARG_WEIGHTS, wrap(&e->b_md, g->b)},
      {DNNL_ARG_DST, wrap(&e->c_md, g->c)},
      {DNNL_ARG_SCRATCHPAD, wrap(&e->scratch_md, scratchpad)},
  };
  int nargs = 4;
  if (g->bias) {
    /* the binary post-op's index in the chain: after the sum post-op, if any */
    int arg = bias_as_post_op(&k)
                  ? DNNL_ARG_ATTR_MULTIPLE_POST_OP(k.beta != 0.0f ? 1 : 0) | DNNL_ARG_SRC_1
                  : DNNL_ARG_BIAS;
    args[nargs++] = (dnnl_exec_arg_t){arg, wrap(&e->bias_md, g->bias)};
  }
  DNNL_OK(dnnl_primitive_execute(e->prim, t_stream, nargs, args));
  DNNL_OK(dnnl_stream_wait(t_stream));
  for (int i = 0; i < nargs; i++) dnnl_memory_destroy(args[i].memory);
}

/* ------------------------------------------------------------------ entry */

static void check_desc(const td_matmul_desc *g) {
  TD_CHECK(g->ab_dtype == TD_F32 || g->ab_dtype == TD_BF16, "matmul inputs must be fp32 or bf16");
  TD_CHECK(g->c_dtype == TD_F32 || g->c_dtype == TD_BF16, "matmul output must be fp32 or bf16");
  TD_CHECK(g->c_dtype == TD_F32 || (g->beta == 0.0f && g->ab_dtype == TD_BF16),
           "a bf16 matmul output needs bf16 inputs and beta = 0");
  TD_CHECK(g->m > 0 && g->n > 0 && g->k > 0 && g->batch > 0, "empty matmul %lldx%lldx%lld",
           (long long)g->m, (long long)g->n, (long long)g->k);
  TD_CHECK(!g->c_in && g->epilogue == TD_EPILOGUE_NONE,
           "matmul with c_in or an epilogue: the CPU fuses none (matmul_fuses), its callers run "
           "the elementwise ops after the product");
}

static void run_with(const td_matmul_desc *g, td_gemm_library lib, int measure_widened) {
  if (!td_cpu_gemm_library_serves(lib, g->ab_dtype)) lib = TD_GEMM_ONEDNN;
  const int own_bf16 = (lib == TD_GEMM_AMX || lib == TD_GEMM_DPBF16) && !omp_in_parallel() &&
                       (g->c_dtype == TD_F32 || g->k <= TD_GEMM_BF16_KMAX);
  if (own_bf16)
    (lib == TD_GEMM_AMX ? td_cpu_gemm_amx : td_cpu_gemm_dpbf16)(g);
  else if (lib == TD_GEMM_OPENBLAS)
    gemm_openblas(g);
  else
    gemm_onednn(g, measure_widened);
}

void td_cpu_gemm_with(const td_matmul_desc *g, td_gemm_library lib) {
  check_desc(g);
  run_with(g, lib, 0);
}

void td_cpu_gemm(const td_matmul_desc *g, int threads) {
  check_desc(g);
  /* oneDNN and OpenBLAS run on the calling thread inside a parallel region. Calls
   * made from parallel regions (threads = 1) are not measured (they would time each
   * other) and take the default; trident's bf16 GEMM keeps shared packing buffers, so they
   * go to oneDNN instead, even when the team has one thread and the region is not
   * active: the library, and so the bits, must not depend on the thread count. */
  td_gemm_library lib = threads == 1 ? td_cpu_gemm_library(g->ab_dtype) : td_cpu_gemm_choose(g);
  if (threads == 1 && (lib == TD_GEMM_AMX || lib == TD_GEMM_DPBF16)) lib = TD_GEMM_ONEDNN;
  run_with(g, lib, threads != 1);
}

static void cpu_matmul(td_device *d, const td_matmul_desc *g) {
  (void)d;
  td_cpu_gemm(g, 0);
}

void td_cpu_register_gemm(td_device_ops *ops) { ops->matmul = cpu_matmul; }
