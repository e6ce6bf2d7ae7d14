/* matmul through ops->matmul of the device under test (TRIDENT_TEST_DEVICE: cpu,
 * sealed, cuda) against a naive double reference; operands live in device memory,
 * copied in and out around each op. On the CPU every path it can take is tested:
 * the library chosen by measurement (cpu_gemm_select.c: products of 4 MFLOP or more,
 * such as the odd 75 x 67 x 433, are measured; smaller ones run the default), and
 * each GEMM library forced by TRIDENT_GEMM_FP32 / TRIDENT_GEMM_BF16; another device
 * runs each case once through its own matmul.
 * Both transposes, batches with strides, bias, alpha/beta, fp32 and bf16 inputs,
 * fp32 and bf16 outputs, sizes that are not multiples of 16. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/mem.h"
#include "base/rng.h"
#include "check.h"
#include "device/cpu/cpu_gemm.h"

typedef struct {
  int64_t m, n, k, batch;
  int ta, tb, bias, c_bf16;
  td_dtype ab;
  float alpha, beta;
  double tol; /* 0: the default for the dtypes */
} mm_case;

/* C[b] = alpha op(A) op(B) + beta C + bias, in double. Also returns the largest sum of
 * the terms' magnitudes: the scale of fp32 rounding error, which a 1x1x1 product whose
 * terms cancel would otherwise turn into a huge "relative" error. */
static double reference(const mm_case *c, const float *a, const float *b, const float *bias,
                        const float *c0, double *out) {
  double scale = 0;
  for (int64_t q = 0; q < c->batch; q++)
    for (int64_t i = 0; i < c->m; i++)
      for (int64_t j = 0; j < c->n; j++) {
        double s = 0, mag = 0;
        for (int64_t p = 0; p < c->k; p++) {
          double av = c->ta ? a[q * c->m * c->k + p * c->m + i] : a[q * c->m * c->k + i * c->k + p];
          double bv = c->tb ? b[q * c->k * c->n + j * c->k + p] : b[q * c->k * c->n + p * c->n + j];
          s += av * bv;
          mag += fabs(av * bv);
        }
        int64_t o = q * c->m * c->n + i * c->n + j;
        out[o] = c->alpha * s + c->beta * (double)c0[o] + (bias ? bias[j] : 0.0);
        mag = fabs(c->alpha) * mag + fabs(c->beta * (double)c0[o]) + (bias ? fabs(bias[j]) : 0.0);
        if (mag > scale) scale = mag;
      }
  return scale;
}

static void to_bf16(uint16_t *dst, const float *src, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = td_f32_to_bf16(src[i]);
}

/* The CPU's path under test: -1 the measured choice, else the library forced
 * (another device has one path, its own). */
static int g_path = -1;

static const char *path_name(void) {
  if (!tst_device_is_cpu()) return "device";
  return g_path < 0 ? "measured" : td_gemm_library_name((td_gemm_library)g_path);
}

static void run_case(const mm_case *c, uint64_t stream) {
  int64_t na = c->batch * c->m * c->k, nb = c->batch * c->k * c->n, nc = c->batch * c->m * c->n;
  float *a = td_malloc(na * 4), *b = td_malloc(nb * 4), *bias = td_malloc(c->n * 4);
  float *cc = td_malloc(nc * 4), *c0 = td_malloc(nc * 4);
  double *ref = td_malloc(nc * 8);
  tst_fill_uniform(a, na, stream, -1, 1);
  tst_fill_uniform(b, nb, stream + 1, -1, 1);
  tst_fill_uniform(bias, c->n, stream + 2, -1, 1);
  tst_fill_uniform(c0, nc, stream + 3, -1, 1);
  void *pa = a, *pb = b;
  uint16_t *ha = NULL, *hb = NULL, *hc = NULL;
  if (c->ab == TD_BF16) { /* the reference sees the rounded inputs */
    tst_round_bf16(a, na);
    tst_round_bf16(b, nb);
    ha = td_malloc(na * 2), hb = td_malloc(nb * 2);
    to_bf16(ha, a, na);
    to_bf16(hb, b, nb);
    pa = ha, pb = hb;
  }
  if (c->c_bf16) hc = td_malloc(nc * 2);
  /* The op's operands in device memory: A and B in their dtype, C starting as c0
   * (a bf16 C has beta 0: zeroed memory will do), the bias */
  size_t ab_size = td_dtype_size(c->ab);
  void *da = tst_put(pa, na * ab_size), *db = tst_put(pb, nb * ab_size);
  void *dc = c->c_bf16 ? tst_put(NULL, nc * 2) : tst_put(c0, nc * 4);
  float *dbias = c->bias ? tst_put(bias, c->n * 4) : NULL;
  td_matmul_desc g = {
      .m = c->m, .n = c->n, .k = c->k, .ab_dtype = c->ab, .c_dtype = c->c_bf16 ? TD_BF16 : TD_F32,
      .a = da, .lda = c->ta ? c->m : c->k, .stride_a = c->m * c->k, .trans_a = c->ta,
      .b = db, .ldb = c->tb ? c->k : c->n, .stride_b = c->k * c->n, .trans_b = c->tb,
      .c = dc, .ldc = c->n, .stride_c = c->m * c->n,
      .bias = dbias, .alpha = c->alpha, .beta = c->beta, .batch = c->batch};
  if (tst_device_is_cpu()) { /* the CPU's choice of GEMM library for this product */
    td_gemm_library chosen = td_cpu_gemm_choose(&g);
    CHECK(td_cpu_gemm_library_serves(chosen, c->ab) && (g_path < 0 || (int)chosen == g_path),
          "path %d: the device chose %s for %s inputs", g_path, td_gemm_library_name(chosen),
          td_dtype_name(c->ab));
  }
  tst_device()->ops->matmul(tst_device(), &g);
  if (hc) {
    tst_get(hc, dc, nc * 2);
    for (int64_t i = 0; i < nc; i++) cc[i] = td_bf16_to_f32(hc[i]);
  } else {
    tst_get(cc, dc, nc * 4);
  }
  double scale = reference(c, a, b, c->bias ? bias : NULL, c0, ref);
  double err = 0;
  for (int64_t i = 0; i < nc; i++) {
    double d = fabs((double)cc[i] - ref[i]) / scale;
    if (!(d <= err)) err = d; /* NaN propagates */
  }
  double tol = c->tol ? c->tol : (c->ab == TD_BF16 || c->c_bf16) ? 1e-2 : 1e-5;
  CHECK(err < tol, "%s %s->%s m%lld n%lld k%lld batch%lld ta%d tb%d bias%d alpha%g beta%g: rel err %.3g",
        path_name(), td_dtype_name(c->ab), c->c_bf16 ? "bf16" : "fp32", (long long)c->m,
        (long long)c->n, (long long)c->k, (long long)c->batch, c->ta, c->tb, c->bias, c->alpha,
        c->beta, err);
  td_free(a), td_free(b), td_free(bias), td_free(cc), td_free(c0), td_free(ref);
  td_free(ha), td_free(hb), td_free(hc);
  tst_release(da), tst_release(db), tst_release(dc), tst_release(dbias);
}

/* Every case of one shape and input dtype. */
static void run_shape(int64_t m, int64_t n, int64_t k, int ab, uint64_t *stream) {
  for (int t = 0; t < 4; t++) {
    mm_case c = {.m = m, .n = n, .k = k, .batch = 1, .ta = t & 1, .tb = t >> 1,
                 .ab = ab ? TD_BF16 : TD_F32, .alpha = 1};
    run_case(&c, *stream += 4);
    c.bias = 1, c.beta = 1; /* accumulate with bias */
    run_case(&c, *stream += 4);
    c.bias = 0, c.beta = 0.5f, c.alpha = 0.25f, c.batch = 3; /* batched, scaled */
    run_case(&c, *stream += 4);
    c.beta = 0, c.alpha = 1, c.batch = 1, c.c_bf16 = 1, c.bias = 1; /* bf16 output */
    if (ab) run_case(&c, *stream += 4);
    /* bias with alpha != 1: alpha * AB + beta * C + bias, the bias unscaled */
    c.c_bf16 = 0, c.alpha = 0.25f, c.beta = 0.5f, c.batch = 3;
    run_case(&c, *stream += 4);
    c.beta = 0, c.batch = 1, c.c_bf16 = ab;
    run_case(&c, *stream += 4);
  }
}

/* Force lib (-1: measure) for the dtypes it serves through the environment. */
static void select_path(int lib) {
  static const char *const vars[2] = {"TRIDENT_GEMM_FP32", "TRIDENT_GEMM_BF16"};
  for (int ab = 0; ab < 2; ab++) {
    if (lib >= 0 && td_cpu_gemm_library_serves((td_gemm_library)lib, ab ? TD_BF16 : TD_F32))
      setenv(vars[ab], td_gemm_library_name((td_gemm_library)lib), 1);
    else
      unsetenv(vars[ab]);
  }
  td_cpu_gemm_select_reset();
  g_path = lib;
}

/* the last two (6.4 and 4.4 MFLOP) are measured; the others run the default library;
 * 300 x 37 (m >= 8n) takes the AVX512-BF16 GEMM's C^T pass with a transposed A;
 * 129 x 520 (3.2 MFLOP) is a C large enough that OpenBLAS's bias fill runs on
 * every thread (more than 2^16 elements), split over an odd number of rows */
static const int64_t k_shapes[][3] = {{1, 1, 1},      {7, 5, 3},      {33, 17, 65},
                                      {300, 37, 90},  {64, 771, 48},  {129, 520, 24},
                                      {130, 96, 257}, {75, 67, 433}};

/* Every shape, for the input dtypes the path serves (lib -1: the measured choice, or
 * another device's matmul, serves both). */
static void run_shapes(int lib, uint64_t *stream) {
  for (size_t s = 0; s < sizeof k_shapes / sizeof *k_shapes; s++)
    for (int ab = 0; ab < 2; ab++) /* OpenBLAS has no bf16 GEMM here; AMX is bf16 only */
      if (lib < 0 || td_cpu_gemm_library_serves((td_gemm_library)lib, ab ? TD_BF16 : TD_F32))
        run_shape(k_shapes[s][0], k_shapes[s][1], k_shapes[s][2], ab, stream);
}

/* trident's own bf16 GEMMs give the same bits on 1, 2, 3, 6 and 16 threads (their
 * threads split whole 32 x 32 blocks of C as a grid of row and column groups; each
 * element is one k-ordered chain): every transpose, shapes that split by columns
 * (n 200: 7 column blocks of 3 row blocks, on 2 and 3 threads), by rows and
 * columns at once (6 threads: 3 x 2; 16: 2 x 8, one group with no block) and by
 * rows alone (n 20: one column block; n 9: m >= 8n, a C^T pass where A is
 * transposed). */
static void own_bf16_threads(uint64_t *stream) {
  const int64_t m = 75, k = 433, ns[3] = {200, 20, 9};
  for (int lib = TD_GEMM_AMX; lib <= TD_GEMM_DPBF16; lib++) {
    if (!td_cpu_gemm_library_serves((td_gemm_library)lib, TD_BF16)) continue;
    for (int shape = 0; shape < 3; shape++)
      for (int t = 0; t < 4; t++) {
        const int64_t n = ns[shape];
        uint16_t *a = td_malloc((size_t)(m * k) * 2), *b = td_malloc((size_t)(k * n) * 2);
        enum { RUNS = 5 };
        static const int threads[RUNS] = {1, 2, 3, 6, 16};
        float *f = td_malloc((size_t)(k * (m > n ? m : n)) * 4), *c[RUNS];
        td_rng_fill_normal(f, m * k, 7, (*stream)++, 0, 0.0f, 1.0f);
        to_bf16(a, f, m * k);
        td_rng_fill_normal(f, k * n, 7, (*stream)++, 0, 0.0f, 1.0f);
        to_bf16(b, f, k * n);
        const int saved = omp_get_max_threads();
        for (int th = 0; th < RUNS; th++) {
          c[th] = td_malloc((size_t)(m * n) * 4);
          td_matmul_desc g = {.m = m, .n = n, .k = k, .ab_dtype = TD_BF16, .c_dtype = TD_F32,
                              .a = a, .lda = t & 1 ? m : k, .trans_a = t & 1,
                              .b = b, .ldb = t >> 1 ? k : n, .trans_b = t >> 1,
                              .c = c[th], .ldc = n, .alpha = 1, .batch = 1};
          omp_set_num_threads(threads[th]);
          td_cpu_gemm_with(&g, (td_gemm_library)lib);
        }
        omp_set_num_threads(saved);
        int same = 1;
        for (int th = 1; th < RUNS; th++) same &= !memcmp(c[0], c[th], (size_t)(m * n) * 4);
        CHECK(same, "%s m%lld n%lld k%lld ta%d tb%d: the same bits on 1, 2, 3, 6 and 16 threads",
              td_gemm_library_name((td_gemm_library)lib), (long long)m, (long long)n,
              (long long)k, t & 1, t >> 1);
        td_free(a), td_free(b), td_free(f);
        for (int th = 0; th < RUNS; th++) td_free(c[th]);
      }
  }
}

int main(void) {
  setenv("TRIDENT_GEMM_CACHE", "off", 0); /* outside ctest: never the user's cache */
  uint64_t stream = 1;
  if (tst_device_is_cpu()) {
    for (int lib = -1; lib < (int)TD_GEMM_LIBRARIES; lib++) { /* -1: the measured choice */
      select_path(lib);
      run_shapes(lib, &stream);
      if (lib < 0) { /* the measured path did measure: its choices are counted in the summary */
        char line[4800];
        td_cpu_gemm_describe(line, sizeof line);
        CHECK(strstr(line, "fp32 measured per shape (") && !strstr(line, "none cached yet"),
              "fp32 choices measured: %s", line);
      }
    }
    select_path(-1);
    own_bf16_threads(&stream);
  } else {
    run_shapes(-1, &stream);
  }
  /* bf16 deeper than one pass of trident's bf16 GEMM (TD_GEMM_BF16_KMAX = 4096):
   * accumulated through C in passes, the first with the caller's beta and bias; on
   * the CPU through each bf16 library */
  for (int lib = -1; lib < (tst_device_is_cpu() ? (int)TD_GEMM_LIBRARIES : 0); lib++) {
    if (lib >= 0 && !td_cpu_gemm_library_serves((td_gemm_library)lib, TD_BF16)) continue;
    if (tst_device_is_cpu()) select_path(lib);
    for (int t = 0; t < 4; t++) {
      mm_case c = {.m = 40, .n = 70, .k = 4200, .batch = 1, .ta = t & 1, .tb = t >> 1,
                   .bias = 1, .ab = TD_BF16, .alpha = 1, .beta = 1};
      run_case(&c, stream += 4);
    }
  }
  if (tst_device_is_cpu()) select_path(-1);
  /* Where oneDNN has no bf16 kernels (a CPU without AVX-512: the _avx2 variant),
   * bf16 products run as fp32 GEMMs on widened inputs, and those above 8M widened
   * elements in blocks of C (2048 x 2048) and of k (1024): B alone over the bound
   * (n and k split, edges of 4 and 52) and A alone (m and k split); bf16 C, and
   * fp32 C with alpha, beta and the bias that only the first k block may add.
   * The inputs are bf16 already (the reference sees them), so an fp32 C is held to
   * fp32's 1e-5: a bias added at each k block is 4e-3 of the scale here. */
  if (tst_device_is_cpu() && !td_cpu_gemm_onednn_bf16()) {
    static const int64_t big[2][3] = {{64, 4100, 2100}, {2100, 40, 4100}};
    for (int s = 0; s < 2; s++)
      for (int t = 0; t < 4; t++) {
        mm_case c = {.m = big[s][0], .n = big[s][1], .k = big[s][2], .batch = 1, .ta = t & 1,
                     .tb = t >> 1, .bias = 1, .ab = TD_BF16, .alpha = 1, .c_bf16 = t % 3 == 0};
        c.tol = c.c_bf16 ? 2e-3 : 1e-5; /* bf16 C: its rounding, within 4e-4 of the scale here */
        if (!c.c_bf16) c.alpha = 0.5f, c.beta = 0.5f;
        run_case(&c, stream += 4);
      }
  }
  return tst_finish();
}
