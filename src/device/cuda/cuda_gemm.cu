/* matmul on the CUDA backend: cuBLASLt (td_matmul_desc in device.h).
 *
 * Row-major to cuBLASLt's column-major: a row-major m x n C with row stride ldc
 * is the column-major n x m matrix C^T with leading dimension ldc, and
 * C^T = op(B)^T op(A)^T, so cuBLASLt computes with its "A" = our B and its "B" =
 * our A, sizes (n, m, k):
 *   its A = our B: N (n x k, ld ldb) when !trans_b, T (stored k x n, ld ldb) when trans_b
 *   its B = our A: N (k x m, ld lda) when !trans_a, T (stored m x k, ld lda) when trans_a
 *   C = D: n x m, ld ldc; the bias (n floats) runs along D's rows: CUBLASLT_EPILOGUE_BIAS
 *   adds it after alpha * AB + beta * C, unscaled, as device.h says.
 * Precision: fp32 inputs compute in true fp32 (CUBLAS_COMPUTE_32F) unless
 * TRIDENT_CUDA_TF32=1 (CUBLAS_COMPUTE_32F_FAST_TF32); bf16 inputs accumulate in fp32.
 *
 * Reproducibility: each distinct (shape, strides, dtypes, transposes, bias,
 * pointer alignments, TF32) gets a plan once: its descriptors and the first
 * algorithm of cuBLASLt's heuristic for the fixed workspace, kept for the life of
 * the handle, so the same call runs the same kernel every time (cuBLAS is
 * bitwise reproducible for a given algorithm, GPU and library version on one
 * stream). A shape the heuristic has no algorithm for (possible for odd
 * alignments) runs td_gemm_naive_kernel instead, with a warning once.
 *
 * Bias with a bf16 output: cuBLASLt may have no algorithm taking an fp32 bias
 * there, so the plan tries, in order, an fp32 bias (the CPU's numerics:
 * added before the one rounding), the bias rounded to bf16 on the way in (one
 * n-element cast per call into scratch; what PyTorch's autocast and Megatron's
 * bf16 parameters add), and last an fp32 product into scratch plus
 * td_bias_round_kernel (the CPU's numerics again, at the cost of the product's
 * extra round trip through memory).
 *
 * Fused forms (matmul_fuses; device.h): c_in is cuBLASLt's C where D is our C;
 * TD_EPILOGUE_GELU_AUX is GELU_AUX(_BIAS), TD_EPILOGUE_DGELU is DGELU, the aux
 * matrix (the pre-activation, C's dtype) laid out as our C. cuBLASLt's GELU is
 * the tanh form, so only TD_GELU_TANH fuses. A fused plan must have a cuBLASLt
 * algorithm with the bias as given or cast to bf16 (not the split path), else
 * matmul_fuses says 0 and the caller runs the separate ops. TRIDENT_CUDA_FUSE=0
 * turns the fused forms off (for timing them against the separate ops). */
#include <stdlib.h>
#include <string.h>

#include "device/cuda/cuda_internal.cuh"

/* Everything that determines a plan; compared bytewise (zero-initialised). */
typedef struct {
  int64_t m, n, k, batch, lda, ldb, ldc, stride_a, stride_b, stride_c, ldaux;
  int32_t trans_a, trans_b, ab_dtype, c_dtype, has_bias, tf32, has_c_in, epilogue;
  uint32_t align_a, align_b, align_c, align_bias, align_c_in, align_aux;
} gemm_key;

typedef struct {
  gemm_key key;
  int used;
  int naive;      /* no cuBLASLt algorithm: the fallback kernel */
  int bias_bf16;  /* bf16 output, no algorithm with an fp32 bias: the bias cast to bf16 first */
  int split_bias; /* ... nor with a bf16 bias: fp32 product + td_bias_round_kernel */
  int refused;    /* a fused form cublasLtMatmul refused at run time: composed since */
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
} gemm_plan;

/* Open addressing on the key's hash, grown at half load. */
struct td_cuda_gemm_cache {
  gemm_plan *slots;
  size_t cap, used;
  int warned;
};

static uint64_t key_hash(const gemm_key *k) {
  const unsigned char *p = (const unsigned char *)k;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < sizeof *k; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static gemm_plan *slot_for(gemm_plan *slots, size_t cap, const gemm_key *k) {
  size_t i = (size_t)key_hash(k) & (cap - 1);
  while (slots[i].used && memcmp(&slots[i].key, k, sizeof *k)) i = (i + 1) & (cap - 1);
  return &slots[i];
}

static void cache_grow(td_cuda_gemm_cache *g) {
  size_t cap = g->cap ? 2 * g->cap : 256;
  gemm_plan *slots = (gemm_plan *)td_calloc(cap * sizeof *slots);
  for (size_t i = 0; i < g->cap; i++)
    if (g->slots[i].used) *slot_for(slots, cap, &g->slots[i].key) = g->slots[i];
  td_free(g->slots);
  g->slots = slots, g->cap = cap;
}

void td_cuda_gemm_release(td_cuda *c) {
  td_cuda_gemm_cache *g = c->gemm;
  if (!g) return;
  for (size_t i = 0; i < g->cap; i++) {
    gemm_plan *p = &g->slots[i];
    if (!p->used) continue;
    TD_LT_OK(td_lt.cublasLtMatrixLayoutDestroy(p->la));
    TD_LT_OK(td_lt.cublasLtMatrixLayoutDestroy(p->lb));
    TD_LT_OK(td_lt.cublasLtMatrixLayoutDestroy(p->lc));
    TD_LT_OK(td_lt.cublasLtMatmulDescDestroy(p->op));
  }
  td_free(g->slots);
  td_free(g);
  c->gemm = NULL;
}

/* ------------------------------------------------------------ the fallback */

/* C[b, i, j] = alpha sum_p op(A)[i, p] op(B)[p, j] + beta C[b, i, j] + bias[j]
 * (C not read when beta == 0); one thread per element of C, p in order, fp32.
 * a, b: ab_bf16 ? bf16 : fp32; c: c_bf16 ? bf16 : fp32. */
__global__ void td_gemm_naive_kernel(int64_t m, int64_t n, int64_t k, int64_t batch, int ab_bf16,
                                     int c_bf16, const void *a, int64_t lda, int64_t sa, int ta,
                                     const void *b, int64_t ldb, int64_t sb, int tb, void *c,
                                     int64_t ldc, int64_t sc, const float *bias, float alpha,
                                     float beta) {
  TD_GRID_STRIDE(e, batch * m * n) {
    int64_t q = e / (m * n), i = (e / n) % m, j = e % n;
    float acc = 0.0f;
    for (int64_t p = 0; p < k; p++) {
      float av = td_ld_dt(a, ab_bf16, q * sa + (ta ? p * lda + i : i * lda + p));
      float bv = td_ld_dt(b, ab_bf16, q * sb + (tb ? j * ldb + p : p * ldb + j));
      acc += av * bv;
    }
    int64_t o = q * sc + i * ldc + j;
    float v = alpha * acc;
    if (beta != 0.0f) v += beta * td_ld_dt(c, c_bf16, o);
    if (bias) v += bias[j];
    td_st_dt(c, c_bf16, o, v);
  }
}

static void gemm_naive(td_cuda *c, const td_matmul_desc *g) {
  int64_t total = g->batch * g->m * g->n;
  td_gemm_naive_kernel<<<td_cuda_grid(c, total, TD_CUDA_THREADS), TD_CUDA_THREADS, 0, c->stream>>>(
      g->m, g->n, g->k, g->batch, g->ab_dtype == TD_BF16, g->c_dtype == TD_BF16, g->a, g->lda,
      g->stride_a, g->trans_a, g->b, g->ldb, g->stride_b, g->trans_b, g->c, g->ldc, g->stride_c,
      g->bias, g->alpha, g->beta);
  TD_CUDA_LAUNCHED();
}

/* ------------------------------------------------------------------ plans */

/* The largest power of two <= 256 dividing the address and, for batches, the
 * batch stride in bytes: what cuBLASLt's heuristic must assume of the buffer. */
static uint32_t alignment(const void *p, int64_t batch, int64_t stride, size_t esz) {
  uint64_t bits = (uint64_t)(uintptr_t)p | 256u;
  if (batch > 1) bits |= (uint64_t)stride * esz;
  return (uint32_t)(bits & (~bits + 1));
}

static cudaDataType_t cuda_type(td_dtype dt) { return dt == TD_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

static cublasLtMatrixLayout_t layout(cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld,
                                     int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t l;
  TD_LT_OK(td_lt.cublasLtMatrixLayoutCreate(&l, t, (uint64_t)rows, (uint64_t)cols, ld));
  if (batch > 1) {
    int32_t count = (int32_t)batch;
    TD_LT_OK(td_lt.cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                    &count, sizeof count));
    TD_LT_OK(td_lt.cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                    &stride, sizeof stride));
  }
  return l;
}

/* The heuristic's first algorithm for the plan as it stands; 0 if it has none. */
static int first_algorithm(td_cuda *c, gemm_plan *p, const gemm_key *k, uint32_t align_bias) {
  cublasLtMatmulPreference_t pref;
  TD_LT_OK(td_lt.cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = TD_CUDA_WORKSPACE_BYTES;
  TD_LT_OK(td_lt.cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  /* its A is our B, its B our A; its C our c_in where there is one */
  uint32_t al[4] = {k->align_b, k->align_a, k->has_c_in ? k->align_c_in : k->align_c, k->align_c};
  const cublasLtMatmulPreferenceAttributes_t which[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; i++)
    TD_LT_OK(td_lt.cublasLtMatmulPreferenceSetAttribute(pref, which[i], &al[i], sizeof al[i]));
  if (k->has_bias) { /* the heuristic reads the bias pointer's alignment from its value */
    const void *fake = (const char *)td_cuda_workspace(c) + (align_bias & 255u);
    TD_LT_OK(td_lt.cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                  &fake, sizeof fake));
  }
  if (k->epilogue != TD_EPILOGUE_NONE) { /* and the aux pointer's likewise */
    const void *fake = (const char *)td_cuda_workspace(c) + (k->align_aux & 255u);
    TD_LT_OK(td_lt.cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                  &fake, sizeof fake));
  }
  cublasLtMatmulHeuristicResult_t r;
  memset(&r, 0, sizeof r);
  int found = 0;
  cublasStatus_t s = td_lt.cublasLtMatmulAlgoGetHeuristic(c->lt, p->op, p->la, p->lb, p->lc,
                                                          p->lc, pref, 1, &r, &found);
  TD_LT_OK(td_lt.cublasLtMatmulPreferenceDestroy(pref));
  if (s != CUBLAS_STATUS_SUCCESS || found < 1 || r.state != CUBLAS_STATUS_SUCCESS) return 0;
  p->algo = r.algo;
  return 1;
}

/* cuBLASLt's epilogue for the key: the bias, GELU with its input kept, or
 * GELU's gradient (matmul_fuses has ruled out a bias there). */
static cublasLtEpilogue_t lt_epilogue(const gemm_key *k) {
  if (k->epilogue == TD_EPILOGUE_GELU_AUX)
    return k->has_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  if (k->epilogue == TD_EPILOGUE_DGELU) return CUBLASLT_EPILOGUE_DGELU;
  return k->has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

static void plan_create(td_cuda *c, gemm_plan *p, const gemm_key *k) {
  memset(p, 0, sizeof *p);
  p->key = *k, p->used = 1;
  cublasComputeType_t compute =
      k->ab_dtype == TD_F32 && k->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  TD_LT_OK(td_lt.cublasLtMatmulDescCreate(&p->op, compute, CUDA_R_32F));
  cublasOperation_t ta = k->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N; /* its A: our B */
  cublasOperation_t tb = k->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N; /* its B: our A */
  TD_LT_OK(
      td_lt.cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  TD_LT_OK(
      td_lt.cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  cudaDataType_t ab = cuda_type((td_dtype)k->ab_dtype), ct = cuda_type((td_dtype)k->c_dtype);
  p->la = k->trans_b ? layout(ab, k->k, k->n, k->ldb, k->batch, k->stride_b)
                     : layout(ab, k->n, k->k, k->ldb, k->batch, k->stride_b);
  p->lb = k->trans_a ? layout(ab, k->m, k->k, k->lda, k->batch, k->stride_a)
                     : layout(ab, k->k, k->m, k->lda, k->batch, k->stride_a);
  p->lc = layout(ct, k->n, k->m, k->ldc, k->batch, k->stride_c);
  cublasLtEpilogue_t epi = lt_epilogue(k);
  TD_LT_OK(
      td_lt.cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  if (k->epilogue != TD_EPILOGUE_NONE) /* aux: our m x n row-major, its n x m with ld ldaux */
    TD_LT_OK(td_lt.cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                  &k->ldaux, sizeof k->ldaux));
  if (k->has_bias) {
    int64_t bias_stride = 0; /* the same bias for every batch item */
    TD_LT_OK(td_lt.cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE,
                                                  &bias_stride, sizeof bias_stride));
    int32_t bt = CUDA_R_32F; /* our bias is fp32 whatever the output */
    TD_LT_OK(td_lt.cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                  &bt, sizeof bt));
    if (first_algorithm(c, p, k, k->align_bias)) return;
    if (k->c_dtype == TD_BF16) {
      bt = CUDA_R_16BF; /* the bf16 copy lives in scratch: 256-byte aligned */
      TD_LT_OK(td_lt.cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                    &bt, sizeof bt));
      if (first_algorithm(c, p, k, 256)) {
        p->bias_bf16 = 1;
        return;
      }
      p->split_bias = 1; /* the fp32 product's own plan does the work */
      return;
    }
  } else if (first_algorithm(c, p, k, 0)) {
    return;
  }
  p->naive = 1;
}

static gemm_plan *plan_for(td_cuda *c, const gemm_key *k) {
  if (!c->gemm) c->gemm = (td_cuda_gemm_cache *)td_calloc(sizeof *c->gemm);
  td_cuda_gemm_cache *g = c->gemm;
  if (2 * (g->used + 1) > g->cap) cache_grow(g);
  gemm_plan *p = slot_for(g->slots, g->cap, k);
  if (p->used) return p;
  plan_create(c, p, k);
  g->used++;
  /* a fused form without an algorithm is only a "no" to matmul_fuses (the caller
   * runs the plain product on cuBLASLt): only a plain form's plan runs the kernel */
  if (p->naive && !k->has_c_in && k->epilogue == TD_EPILOGUE_NONE && !g->warned) {
    td_warn("cuda:%d: cuBLASLt has no algorithm for matmul m=%lld n=%lld k=%lld (alignments "
            "%u/%u/%u bytes); using trident's plain kernel for such shapes",
            c->index, (long long)k->m, (long long)k->n, (long long)k->k, k->align_a, k->align_b,
            k->align_c);
    g->warned = 1;
  }
  return p;
}

/* ------------------------------------------------------------------ matmul */

/* C[q, i, j] = bf16(P[q, i, j] + bias[j]); P: batch x m x n dense fp32, C: bf16 with
 * row stride ldc and batch stride sc */
__global__ void td_bias_round_kernel(uint16_t *c, int64_t ldc, int64_t sc, const float *prod,
                                     const float *bias, int64_t m, int64_t n, int64_t batch) {
  TD_GRID_STRIDE(e, batch * m * n) {
    int64_t q = e / (m * n), i = (e / n) % m, j = e % n;
    c[q * sc + i * ldc + j] = td_hd_f32_to_bf16(prod[e] + bias[j]);
  }
}

/* out[j] = bf16(bias[j]) */
__global__ void td_bias_to_bf16_kernel(uint16_t *out, const float *bias, int64_t n) {
  TD_GRID_STRIDE(j, n) out[j] = td_hd_f32_to_bf16(bias[j]);
}

static void cu_matmul(td_device *d, const td_matmul_desc *g);

/* bf16 C = alpha AB + bias (beta is 0 for bf16 outputs) as an fp32 product into
 * scratch, then the bias and the rounding. */
static void matmul_split_bias(td_device *d, td_cuda *c, const td_matmul_desc *g) {
  int64_t total = g->batch * g->m * g->n;
  float *prod = (float *)td_cuda_scratch(c, (size_t)total * sizeof(float));
  td_matmul_desc f = *g;
  f.c = prod, f.c_dtype = TD_F32, f.ldc = g->n, f.stride_c = g->m * g->n, f.bias = NULL;
  f.beta = 0.0f;
  cu_matmul(d, &f);
  td_bias_round_kernel<<<td_cuda_grid(c, total, TD_CUDA_THREADS), TD_CUDA_THREADS, 0, c->stream>>>(
      (uint16_t *)g->c, g->ldc, g->stride_c, prod, g->bias, g->m, g->n, g->batch);
  TD_CUDA_LAUNCHED();
}

static void check_desc(const td_matmul_desc *g) {
  if (!(g->ab_dtype == TD_F32 || g->ab_dtype == TD_BF16))
    td_fail("matmul: inputs must be fp32 or bf16, got %s", td_dtype_name(g->ab_dtype));
  if (!(g->c_dtype == TD_F32 || (g->c_dtype == TD_BF16 && g->ab_dtype == TD_BF16 && g->beta == 0)))
    td_fail("matmul: output %s with %s inputs and beta %g: the output is fp32, or bf16 with bf16 "
            "inputs and beta 0", td_dtype_name(g->c_dtype), td_dtype_name(g->ab_dtype),
            (double)g->beta);
  if (g->m < 0 || g->n < 0 || g->k < 0 || g->batch < 0 || g->batch > INT32_MAX)
    td_fail("matmul: bad sizes m=%lld n=%lld k=%lld batch=%lld", (long long)g->m,
            (long long)g->n, (long long)g->k, (long long)g->batch);
}

/* The plan key of a call (shapes, dtypes, fused forms, pointer alignments). */
static gemm_key key_of(const td_cuda *c, const td_matmul_desc *g) {
  size_t ab = td_dtype_size(g->ab_dtype), cs = td_dtype_size(g->c_dtype);
  gemm_key k;
  memset(&k, 0, sizeof k);
  k.m = g->m, k.n = g->n, k.k = g->k, k.batch = g->batch;
  k.lda = g->lda, k.ldb = g->ldb, k.ldc = g->ldc;
  if (g->batch > 1) k.stride_a = g->stride_a, k.stride_b = g->stride_b, k.stride_c = g->stride_c;
  k.trans_a = g->trans_a != 0, k.trans_b = g->trans_b != 0;
  k.ab_dtype = g->ab_dtype, k.c_dtype = g->c_dtype, k.has_bias = g->bias != NULL;
  k.tf32 = g->ab_dtype == TD_F32 && c->tf32;
  k.align_a = alignment(g->a, g->batch, g->stride_a, ab);
  k.align_b = alignment(g->b, g->batch, g->stride_b, ab);
  k.align_c = alignment(g->c, g->batch, g->stride_c, cs);
  k.align_bias = g->bias ? alignment(g->bias, 1, 0, 4) : 0;
  k.has_c_in = g->c_in != NULL, k.epilogue = g->epilogue;
  k.align_c_in = g->c_in ? alignment(g->c_in, g->batch, g->stride_c, cs) : 0;
  if (g->epilogue != TD_EPILOGUE_NONE) k.ldaux = g->ldaux, k.align_aux = alignment(g->aux, 1, 0, cs);
  return k;
}

/* A plan cuBLASLt runs with the bias as given or as bf16 (not the fallbacks). */
static int plan_fuses(const gemm_plan *p) { return !p->naive && !p->split_bias && !p->refused; }

static int fused_form(const td_matmul_desc *g) {
  return g->c_in || g->epilogue != TD_EPILOGUE_NONE;
}

/* The fused forms taken: one dense matrix (ldc = n, so td_device_matmul_unfused can
 * stand in), k >= 1, c_in with beta 1 and an fp32 C, the tanh GELU (cuBLASLt's),
 * a dense aux whose ld is a multiple of 8 (cuBLASLt's), no bias with DGELU (the
 * bias belongs to the layer before). */
static int expressible(const td_cuda *c, const td_matmul_desc *g) {
  if (!c->fuse || g->batch != 1 || g->m <= 0 || g->n <= 0 || g->k <= 0 || g->ldc != g->n)
    return 0;
  if (g->c_in && (g->beta != 1.0f || g->c_dtype != TD_F32)) return 0;
  /* GELU epilogues for bf16 products only: cuBLASLt does not document its GELU's
   * accuracy (a hardware tanh approximation would be ~5e-4 relative, far below
   * bf16's 4e-3 but not fp32's), and an fp32 run is chosen for exactness: it
   * keeps the GELU kernels, held to the CPU's to 1e-5 over a training run */
  return g->epilogue == TD_EPILOGUE_NONE ||
         (g->ab_dtype == TD_BF16 && g->gelu_kind == TD_GELU_TANH && g->aux &&
          g->ldaux == g->n && g->n % 8 == 0 && !(g->epilogue == TD_EPILOGUE_DGELU && g->bias));
}

static int cu_matmul_fuses(td_device *d, const td_matmul_desc *g) {
  td_cuda *c = td_cuda_enter(d);
  check_desc(g);
  if (!fused_form(g) || !expressible(c, g)) return 0;
  gemm_key k = key_of(c, g);
  return plan_fuses(plan_for(c, &k));
}

static void cu_matmul(td_device *d, const td_matmul_desc *g) {
  td_cuda *c = td_cuda_enter(d);
  check_desc(g);
  if (g->m == 0 || g->n == 0 || g->batch == 0) return;
  if (fused_form(g) && !expressible(c, g))
    td_fail("cuda:%d: matmul m=%lld n=%lld k=%lld with c_in or an epilogue that matmul_fuses did "
            "not offer", c->index, (long long)g->m, (long long)g->n, (long long)g->k);
  if (g->k == 0) { /* C = beta C + bias: cuBLASLt wants k >= 1 */
    gemm_naive(c, g);
    return;
  }
  gemm_key k = key_of(c, g);
  gemm_plan *p = plan_for(c, &k);
  if (fused_form(g) && !plan_fuses(p))
    td_fail("cuda:%d: matmul m=%lld n=%lld k=%lld with c_in or an epilogue that matmul_fuses did "
            "not offer", c->index, (long long)g->m, (long long)g->n, (long long)g->k);
  if (p->naive) {
    gemm_naive(c, g);
    return;
  }
  if (p->split_bias) {
    matmul_split_bias(d, c, g);
    return;
  }
  if (g->bias) {
    const void *bias = g->bias;
    if (p->bias_bf16) {
      uint16_t *b16 = (uint16_t *)td_cuda_scratch(c, (size_t)g->n * sizeof(uint16_t));
      td_bias_to_bf16_kernel<<<td_cuda_grid(c, g->n, TD_CUDA_THREADS), TD_CUDA_THREADS, 0,
                               c->stream>>>(b16, g->bias, g->n);
      TD_CUDA_LAUNCHED();
      bias = b16;
    }
    TD_LT_OK(td_lt.cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                  &bias, sizeof bias));
  }
  if (g->epilogue != TD_EPILOGUE_NONE)
    TD_LT_OK(td_lt.cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                  &g->aux, sizeof g->aux));
  float alpha = g->alpha, beta = g->beta;
  const void *cin = g->c_in ? g->c_in : g->c;
  cublasStatus_t st = td_lt.cublasLtMatmul(c->lt, p->op, &alpha, g->b, p->la, g->a, p->lb, &beta,
                                           cin, p->lc, g->c, p->lc, &p->algo,
                                           td_cuda_workspace(c), TD_CUDA_WORKSPACE_BYTES, c->stream);
  if (st != CUBLAS_STATUS_SUCCESS && fused_form(g)) {
    td_warn("cuda:%d: cuBLASLt refused the fused matmul m=%lld n=%lld k=%lld (status %d) its "
            "heuristic offered; that shape runs the product and separate ops from now on",
            c->index, (long long)g->m, (long long)g->n, (long long)g->k, (int)st);
    p->refused = 1;
    /* the product and separate ops; DGELU's has no bias, so no scratch of its own */
    float *prod = g->epilogue == TD_EPILOGUE_DGELU
                      ? (float *)td_cuda_scratch(c, (size_t)(g->m * g->n) * sizeof(float))
                      : NULL;
    td_device_matmul_unfused(d, g, prod, NULL);
    return;
  }
  TD_LT_OK(st);
}

void td_cuda_register_gemm(td_device_ops *ops) {
  ops->matmul = cu_matmul;
  ops->matmul_fuses = cu_matmul_fuses;
}
