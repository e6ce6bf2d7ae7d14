/* The CUDA backend against the CPU backend, op by op: the same random inputs
 * (odd sizes that are not multiples of any tile: m, n, k in {1, 7, 33, 129},
 * T in {1, 17, 64, 130}, D in {32, 64, 80, ...}) run through both, outputs
 * compared with a tolerance fit for each op (fp32 GEMMs in true fp32: 1e-5
 * normwise; bf16 outputs: bf16 rounding), and exactly where both compute the same
 * thing the same way (add, scale, dropout, cast, fill, copies, embedding,
 * count_zeros; dropout masks of ones and attention's masks bit for bit, also
 * against td_rng_u32 itself). Every CUDA op runs twice on the same inputs and
 * must give the same bits (determinism).
 *
 * Built only with the CUDA backend (TD_HAVE_CUDA). Without a visible GPU it
 * prints why and exits 77, which ctest reports as skipped. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/mem.h"
#include "base/rng.h"
#include "check.h"
#include "comm/ccl.h"
#include "device/cuda/cuda_device.h"
#include "device/device.h"
#include "model/linear.h"

static td_device *g_cpu, *g_gpu;
static uint64_t g_stream = 1000; /* test RNG streams, one per buffer */

/* ------------------------------------------------------------------ helpers */

#define MAX_BUFS 16
typedef struct {
  td_device *d;
  void *p[MAX_BUFS];
  int n;
} bufs;

/* A device copy of host (bytes), or zeroed device memory when host is NULL. */
static void *put(bufs *b, const void *host, size_t bytes) {
  void *p = b->d->ops->alloc(b->d, bytes);
  if (host) b->d->ops->copy_h2d(b->d, p, host, bytes);
  b->p[b->n++] = p;
  return p;
}
static void get(bufs *b, void *host, const void *dev, size_t bytes) {
  b->d->ops->copy_d2h(b->d, host, dev, bytes);
}
static void release(bufs *b) {
  for (int i = 0; i < b->n; i++) b->d->ops->free(b->d, b->p[i]);
  b->n = 0;
}

static float *randf(int64_t n, float lo, float hi) {
  float *x = td_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  tst_fill_uniform(x, n, g_stream++, lo, hi);
  return x;
}
static uint16_t *to_bf16(const float *x, int64_t n) {
  uint16_t *h = td_malloc((size_t)(n > 0 ? n : 1) * 2);
  for (int64_t i = 0; i < n; i++) h[i] = td_f32_to_bf16(x[i]);
  return h;
}
static void *alloc_host(size_t bytes) { return td_calloc(bytes ? bytes : 1); }

static int same_bits(const void *a, const void *b, size_t bytes) { return !memcmp(a, b, bytes); }

/* max |got - ref| / max |ref| (NaN counts as a failure) */
static double relerr(const float *got, const float *ref, int64_t n) {
  return tst_rel_err_f(got, ref, n);
}

/* Tolerance of fp32 GEMMs: true fp32, or TF32 when the environment asks for it. */
static double fp32_gemm_tol(void) {
  const char *e = getenv("TRIDENT_CUDA_TF32");
  return e && !strcmp(e, "1") ? 2e-3 : 1e-5;
}

/* ------------------------------------------------------------------ memory */

/* memory_stats: the bytes of live allocations, up and down, and their peak. */
static void test_memory_stats(void) {
  const td_device_ops *o = g_gpu->ops;
  size_t a0, p0, a1, p1, a2, p2;
  CHECK(o->memory_stats != NULL, "the CUDA backend reports memory_stats");
  if (!o->memory_stats) return;
  o->memory_stats(g_gpu, &a0, &p0);
  void *x = o->alloc(g_gpu, 3000), *y = o->alloc(g_gpu, (size_t)5 << 20);
  o->memory_stats(g_gpu, &a1, &p1);
  o->free(g_gpu, y);
  o->memory_stats(g_gpu, &a2, &p2);
  o->free(g_gpu, x);
  CHECK(a1 == a0 + 3000 + ((size_t)5 << 20) && p1 >= a1 && a2 == a0 + 3000 && p2 == p1,
        "memory_stats: %zu -> %zu -> %zu bytes allocated, peak %zu kept", a0, a1, a2, p2);
  /* alloc_scratch (not zeroed): counted as alloc is, and holds what is written */
  CHECK(o->alloc_scratch != NULL, "the CUDA backend has alloc_scratch");
  if (!o->alloc_scratch) return;
  const size_t n = 3001;
  float *h = randf((int64_t)n, -1, 1), *back = alloc_host(n * 4);
  void *s = o->alloc_scratch(g_gpu, n * 4);
  o->memory_stats(g_gpu, &a1, &p1);
  o->copy_h2d(g_gpu, s, h, n * 4);
  o->copy_d2h(g_gpu, back, s, n * 4);
  o->free(g_gpu, s);
  o->memory_stats(g_gpu, &a2, &p2);
  CHECK(a1 == a0 + n * 4 && a2 == a0 && same_bits(back, h, n * 4),
        "alloc_scratch: %zu -> %zu -> %zu bytes allocated, the written bytes read back", a0, a1,
        a2);
  td_free(h);
  td_free(back);
}

static void test_memory(void) {
  test_memory_stats();
  const int64_t n = 1000;
  float *h = randf(n, -1, 1), *back = alloc_host(n * 4);
  bufs b = {.d = g_gpu};
  float *z = put(&b, NULL, 4096);
  float *zh = alloc_host(4096);
  get(&b, zh, z, 4096);
  int zero = 1;
  for (int i = 0; i < 1024; i++) zero &= zh[i] == 0.0f;
  CHECK(zero, "alloc returns zeroed memory");
  float *x = put(&b, h, n * 4), *y = put(&b, NULL, n * 4);
  g_gpu->ops->copy_d2d(g_gpu, y, x, n * 4);
  get(&b, back, y, n * 4);
  CHECK(same_bits(back, h, n * 4), "copy_h2d, copy_d2d, copy_d2h round trip");
  /* overlapping d2d (memmove): shift right by 7 and left by 5, as the CPU does */
  float *ref = alloc_host(n * 4);
  memcpy(ref, h, n * 4);
  memmove(ref + 7, ref, (n - 7) * 4);
  memmove(ref, ref + 5, (n - 5) * 4);
  g_gpu->ops->copy_d2d(g_gpu, x + 7, x, (n - 7) * 4);
  g_gpu->ops->copy_d2d(g_gpu, x, x + 5, (n - 5) * 4);
  get(&b, back, x, n * 4);
  CHECK(same_bits(back, ref, n * 4), "copy_d2d with overlapping ranges is memmove");
  /* fill: every dtype, values the CPU converts the same way */
  static const td_dtype dts[] = {TD_F32, TD_BF16, TD_F16, TD_I32, TD_I64, TD_F64};
  static const float vals[] = {0.0f, -0.0f, 1.5f, -3.25f, 1e-30f, 70000.0f, 0.1f};
  int ok = 1;
  unsigned char *hg = alloc_host(8 * 37), *dc = alloc_host(8 * 37);
  void *dg = put(&b, NULL, 8 * 37);
  for (size_t i = 0; i < sizeof dts / sizeof *dts; i++)
    for (size_t v = 0; v < sizeof vals / sizeof *vals; v++) {
      memset(dc, 0xab, 8 * 37);
      g_gpu->ops->copy_h2d(g_gpu, dg, dc, 8 * 37);
      g_cpu->ops->fill(g_cpu, dc, dts[i], 37, vals[v]);
      g_gpu->ops->fill(g_gpu, dg, dts[i], 37, vals[v]);
      get(&b, hg, dg, 8 * 37);
      ok &= same_bits(hg, dc, 8 * 37);
    }
  CHECK(ok, "fill: every dtype and value bit-identical to the CPU (and nothing past n)");
  g_gpu->ops->synchronize(g_gpu);
  release(&b);
  td_free(h), td_free(back), td_free(zh), td_free(ref), td_free(hg), td_free(dc);
}

/* ------------------------------------------------------------------ matmul */

typedef struct {
  int64_t m, n, k, batch, lda, ldb, ldc, off; /* off: elements the pointers are shifted by */
  int ta, tb, bias, c_bf16;
  td_dtype ab;
  float alpha, beta;
} mm_case;

/* Runs the case on d: A, B (fp32 host values, converted for bf16), C0, bias in;
 * C out as fp32 (from bf16 when c_bf16). */
static void mm_on(td_device *d, const mm_case *c, const float *a, const float *bm, const float *c0,
                  const float *bias, float *out) {
  bufs b = {.d = d};
  int64_t na = c->batch * (c->ta ? c->k : c->m) * c->lda + c->off;
  int64_t nb = c->batch * (c->tb ? c->n : c->k) * c->ldb + c->off;
  int64_t nc = c->batch * c->m * c->ldc + c->off;
  size_t es = td_dtype_size(c->ab), cs = c->c_bf16 ? 2 : 4;
  void *ha = c->ab == TD_BF16 ? (void *)to_bf16(a, na) : (void *)a;
  void *hb = c->ab == TD_BF16 ? (void *)to_bf16(bm, nb) : (void *)bm;
  void *hc = c->c_bf16 ? (void *)to_bf16(c0, nc) : (void *)c0;
  char *da = put(&b, ha, na * es), *db = put(&b, hb, nb * es), *dc = put(&b, hc, nc * cs);
  float *dbias = c->bias ? put(&b, bias, (c->n + 1) * 4) : NULL;
  td_matmul_desc g = {.m = c->m, .n = c->n, .k = c->k, .ab_dtype = c->ab,
                      .c_dtype = c->c_bf16 ? TD_BF16 : TD_F32,
                      .a = da + c->off * es, .lda = c->lda,
                      .stride_a = (c->ta ? c->k : c->m) * c->lda, .trans_a = c->ta,
                      .b = db + c->off * es, .ldb = c->ldb,
                      .stride_b = (c->tb ? c->n : c->k) * c->ldb, .trans_b = c->tb,
                      .c = dc + c->off * cs, .ldc = c->ldc, .stride_c = c->m * c->ldc,
                      .bias = dbias ? dbias + (c->off & 1) : NULL, .alpha = c->alpha,
                      .beta = c->beta, .batch = c->batch};
  d->ops->matmul(d, &g);
  if (c->c_bf16) {
    uint16_t *h16 = alloc_host(nc * 2);
    get(&b, h16, dc, nc * 2);
    for (int64_t i = 0; i < nc; i++) out[i] = td_bf16_to_f32(h16[i]);
    td_free(h16);
  } else {
    get(&b, out, dc, nc * 4);
  }
  release(&b);
  if (ha != a) td_free(ha);
  if (hb != bm) td_free(hb);
  if (hc != c0) td_free(hc);
}

static void mm_case_run(const mm_case *c) {
  int64_t na = c->batch * (c->ta ? c->k : c->m) * c->lda + c->off;
  int64_t nb = c->batch * (c->tb ? c->n : c->k) * c->ldb + c->off;
  int64_t nc = c->batch * c->m * c->ldc + c->off;
  float *a = randf(na, -1, 1), *bm = randf(nb, -1, 1), *c0 = randf(nc, -1, 1);
  float *bias = randf(c->n + 1, -1, 1);
  float *rc = alloc_host(nc * 4), *g1 = alloc_host(nc * 4), *g2 = alloc_host(nc * 4);
  mm_on(g_cpu, c, a, bm, c0, bias, rc);
  mm_on(g_gpu, c, a, bm, c0, bias, g1);
  mm_on(g_gpu, c, a, bm, c0, bias, g2);
  double tol = c->ab == TD_BF16 || c->c_bf16 ? (c->c_bf16 ? 1.6e-2 : 1e-4) : fp32_gemm_tol();
  double err = relerr(g1, rc, nc);
  CHECK(err < tol && same_bits(g1, g2, nc * 4),
        "matmul %s->%s m%lld n%lld k%lld batch%lld ta%d tb%d ld+%lld off%lld bias%d a%g b%g: "
        "rel err %.3g (tol %.1g), deterministic %d",
        td_dtype_name(c->ab), c->c_bf16 ? "bf16" : "fp32", (long long)c->m, (long long)c->n,
        (long long)c->k, (long long)c->batch, c->ta, c->tb,
        (long long)(c->lda - (c->ta ? c->m : c->k)), (long long)c->off, c->bias,
        (double)c->alpha, (double)c->beta, err, tol, same_bits(g1, g2, nc * 4));
  td_free(a), td_free(bm), td_free(c0), td_free(bias), td_free(rc), td_free(g1), td_free(g2);
}

static void test_matmul(void) {
  static const int64_t sz[] = {1, 7, 33, 129};
  int idx = 0;
  for (int im = 0; im < 4; im++)
    for (int in = 0; in < 4; in++)
      for (int ik = 0; ik < 4; ik++, idx++)
        for (int ab = 0; ab < 2; ab++) {
          mm_case c = {.m = sz[im], .n = sz[in], .k = sz[ik], .batch = 1, .ta = idx & 1,
                       .tb = (idx >> 1) & 1, .ab = ab ? TD_BF16 : TD_F32, .alpha = 1};
          int variant = (idx + ab) % 6;
          if (variant == 1) c.bias = 1, c.beta = 1;                     /* accumulate + bias */
          if (variant == 2) c.batch = 3, c.alpha = 0.25f, c.beta = 0.5f; /* batched, scaled */
          if (variant == 3) c.bias = 1, c.c_bf16 = ab;                  /* bf16 out + bias */
          if (variant == 4) c.batch = 2, c.bias = 1, c.alpha = 0.5f, c.beta = 0.25f;
          int pad = variant == 5 ? 3 : 0; /* padded rows, shifted pointers */
          c.off = variant == 5 ? 1 : 0;
          c.lda = (c.ta ? c.m : c.k) + pad, c.ldb = (c.tb ? c.k : c.n) + pad, c.ldc = c.n + pad;
          mm_case_run(&c);
        }
  /* GPT-2-like shapes: forward X W^T with bias, input and weight gradients */
  for (int ab = 0; ab < 2; ab++) {
    td_dtype dt = ab ? TD_BF16 : TD_F32;
    mm_case f = {.m = 256, .n = 2304, .k = 768, .batch = 1, .tb = 1, .bias = 1, .ab = dt,
                 .alpha = 1, .lda = 768, .ldb = 768, .ldc = 2304, .c_bf16 = ab};
    mm_case_run(&f);
    mm_case bi = {.m = 256, .n = 768, .k = 3072, .batch = 1, .ab = dt, .alpha = 1, .lda = 3072,
                  .ldb = 768, .ldc = 768};
    mm_case_run(&bi);
    mm_case bw = {.m = 768, .n = 768, .k = 256, .batch = 1, .ta = 1, .ab = dt, .alpha = 1,
                  .beta = 1, .lda = 768, .ldb = 768, .ldc = 768};
    mm_case_run(&bw);
  }
}

/* ------------------------------------------------------------ fused linear */

/* n host floats on b's device in dt (fp32, or bf16 rounded), and back as fp32. */
static void *put_dt(bufs *b, const float *x, int64_t n, td_dtype dt) {
  if (dt == TD_F32) return put(b, x, (size_t)n * 4);
  uint16_t *h = to_bf16(x, n);
  void *p = put(b, h, (size_t)n * 2);
  td_free(h);
  return p;
}
static float *get_dt(bufs *b, const void *dev, int64_t n, td_dtype dt) {
  float *out = alloc_host((size_t)n * 4);
  if (dt == TD_F32) {
    get(b, out, dev, (size_t)n * 4);
    return out;
  }
  uint16_t *h = alloc_host((size_t)n * 2);
  get(b, h, dev, (size_t)n * 2);
  for (int64_t i = 0; i < n; i++) out[i] = td_bf16_to_f32(h[i]);
  td_free(h);
  return out;
}

typedef struct {
  int64_t n, in, out;
  const float *x, *w, *bias, *resid, *dy, *pre_in, *db0;
} lin_case;
typedef struct {
  float *y, *act, *pre, *dpre, *dbias;
} lin_result;

/* model/linear.h's fused forms on d: y = resid + x w^T + b; pre = x w^T + b,
 * act = gelu(pre); dpre = (dy w) gelu'(pre_in), dbias = db0 + its column sums. */
static lin_result linear_on(td_device *d, const lin_case *c, td_dtype dt) {
  bufs b = {.d = d};
  int64_t n = c->n, in = c->in, out = c->out;
  size_t es = td_dtype_size(dt);
  void *x = put_dt(&b, c->x, n * in, dt), *w = put_dt(&b, c->w, out * in, dt);
  void *dy = put_dt(&b, c->dy, n * out, dt), *pre_in = put_dt(&b, c->pre_in, n * in, dt);
  float *bias = put(&b, c->bias, out * 4), *resid = put(&b, c->resid, n * out * 4);
  float *y = put(&b, NULL, n * out * 4), *scratch = put(&b, NULL, n * in * 4);
  float *dbias = put(&b, c->db0, in * 4);
  void *act = put(&b, NULL, n * out * es), *pre = put(&b, NULL, n * out * es);
  void *dpre = put(&b, NULL, n * in * es);
  td_linear_forward_residual(d, y, resid, x, w, bias, n, in, out, dt, 1);
  td_linear_forward_gelu(d, act, pre, dt, x, w, bias, n, in, out, dt, TD_GELU_TANH, 1);
  td_linear_backward_input_dgelu(d, dpre, dt, dbias, scratch, dy, w, pre_in, n, in, out, dt,
                                 TD_GELU_TANH, 1);
  lin_result r = {get_dt(&b, y, n * out, TD_F32), get_dt(&b, act, n * out, dt),
                  get_dt(&b, pre, n * out, dt), get_dt(&b, dpre, n * in, dt),
                  get_dt(&b, dbias, in, TD_F32)};
  release(&b);
  return r;
}

static void lin_free(lin_result *r) {
  td_free(r->y), td_free(r->act), td_free(r->pre), td_free(r->dpre), td_free(r->dbias);
}

/* Which of the three fused forms the GPU's matmul_fuses offers for c in dt (the
 * descriptors model/linear.c builds, on throwaway buffers of the right sizes). */
static void fused_forms(const lin_case *c, td_dtype dt, int fused[3]) {
  bufs b = {.d = g_gpu};
  int64_t n = c->n, in = c->in, out = c->out;
  size_t es = td_dtype_size(dt);
  td_matmul_desc f = {.m = n, .n = out, .k = in, .ab_dtype = dt, .c_dtype = TD_F32, .alpha = 1,
                      .batch = 1, .lda = in, .ldb = in, .trans_b = 1, .ldc = out};
  f.a = put(&b, NULL, n * in * es), f.b = put(&b, NULL, out * in * es);
  f.bias = put(&b, NULL, out * 4), f.c = put(&b, NULL, n * out * 4);
  td_matmul_desc r = f;
  r.c_in = put(&b, NULL, n * out * 4), r.beta = 1;
  td_matmul_desc g = f;
  g.c_dtype = dt, g.epilogue = TD_EPILOGUE_GELU_AUX, g.aux = put(&b, NULL, n * out * es);
  g.ldaux = out, g.gelu_kind = TD_GELU_TANH;
  td_matmul_desc dg = {.m = n, .n = in, .k = out, .ab_dtype = dt, .c_dtype = dt, .alpha = 1,
                       .batch = 1, .lda = out, .ldb = in, .ldc = in, .a = f.a, .b = f.b,
                       .c = put(&b, NULL, n * in * es), .epilogue = TD_EPILOGUE_DGELU,
                       .aux = put(&b, NULL, n * in * es), .ldaux = in, .gelu_kind = TD_GELU_TANH};
  fused[0] = td_device_matmul_fuses(g_gpu, &r);
  fused[1] = td_device_matmul_fuses(g_gpu, &g);
  fused[2] = td_device_matmul_fuses(g_gpu, &dg);
  release(&b);
}

/* The GPU's fused linear forms against the CPU's separate ops. The fused GELU
 * works from the fp32 product where the CPU rounds pre first, and the fused
 * bias gradient sums the stored dpre: bf16 results within 2e-2 of the largest,
 * fp32 ones within 1e-4 (fp32 fuses only the residual: its GELU stays in
 * trident's kernels). At GPT-2's MLP shape in bf16 all three fusions must be
 * offered: the step's speed rests on them; in fp32 the GELU forms must not be. */
static void test_linear_fused(void) {
  static const int64_t shapes[][3] = {{256, 768, 3072}, {40, 200, 64}, {512, 768, 768}};
  for (int s = 0; s < 3; s++)
    for (int bf = 0; bf < 2; bf++) {
      td_dtype dt = bf ? TD_BF16 : TD_F32;
      int64_t n = shapes[s][0], in = shapes[s][1], out = shapes[s][2];
      float *x = randf(n * in, -1, 1), *w = randf(out * in, -0.05f, 0.05f);
      float *bias = randf(out, -0.5f, 0.5f), *resid = randf(n * out, -2, 2);
      float *dy = randf(n * out, -1, 1), *pre_in = randf(n * in, -3, 3), *db0 = randf(in, -1, 1);
      lin_case c = {n, in, out, x, w, bias, resid, dy, pre_in, db0};
      lin_result cpu = linear_on(g_cpu, &c, dt), gpu = linear_on(g_gpu, &c, dt);
      int fused[3];
      fused_forms(&c, dt, fused);
      double tol = bf ? 2e-2 : 1e-4;
      double e_y = relerr(gpu.y, cpu.y, n * out), e_act = relerr(gpu.act, cpu.act, n * out);
      double e_pre = relerr(gpu.pre, cpu.pre, n * out), e_dpre = relerr(gpu.dpre, cpu.dpre, n * in);
      double e_db = relerr(gpu.dbias, cpu.dbias, in);
      CHECK(e_y < (bf ? 1e-4 : fp32_gemm_tol() * 10) && e_act < tol && e_pre < tol &&
                e_dpre < tol && e_db < tol,
            "fused linear %s n=%lld in=%lld out=%lld (fused: residual %d, gelu %d, dgelu %d): "
            "y %.2g act %.2g pre %.2g dpre %.2g dbias %.2g", td_dtype_name(dt), (long long)n,
            (long long)in, (long long)out, fused[0], fused[1], fused[2], e_y, e_act, e_pre, e_dpre,
            e_db);
      if (s == 0 && bf)
        CHECK(fused[0] && fused[1] && fused[2],
              "cuBLASLt offers the residual, GELU and GELU-gradient epilogues at GPT-2's MLP "
              "shape in bf16 (residual %d, gelu %d, dgelu %d)", fused[0], fused[1], fused[2]);
      if (!bf)
        CHECK(!fused[1] && !fused[2], "fp32 n=%lld: no GELU epilogue offered (gelu %d, dgelu %d)",
              (long long)n, fused[1], fused[2]);
      lin_free(&cpu), lin_free(&gpu);
      td_free(x), td_free(w), td_free(bias), td_free(resid), td_free(dy), td_free(pre_in);
      td_free(db0);
    }
}

/* ------------------------------------------------------- row reductions */

static void test_bias_backward(void) {
  /* 768: the model's width, the 4-column vector path (the odd ones: its tails) */
  static const int64_t rows[] = {1, 7, 33, 129, 4100}, cols[] = {1, 7, 768, 129, 769};
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 5; j++) {
      int64_t R = rows[i], C = cols[(i + j) % 5], n = R * C;
      float *dout = randf(n, -1, 1), *db0 = randf(C, -1, 1);
      float *rc = alloc_host(C * 4), *g1 = alloc_host(C * 4), *g2 = alloc_host(C * 4);
      float *gf = alloc_host(C * 4), *outs[4] = {rc, g1, g2, gf};
      uint16_t *c16 = alloc_host(n * 2);
      for (int r = 0; r < 4; r++) { /* CPU, GPU twice, GPU with dout cast to bf16 */
        bufs b = {.d = r ? g_gpu : g_cpu};
        float *dd = put(&b, dout, n * 4), *ddb = put(&b, db0, C * 4);
        uint16_t *dc = r == 3 ? put(&b, NULL, n * 2) : NULL;
        b.d->ops->bias_backward(b.d, ddb, dd, TD_F32, R, C, dc, dc ? TD_BF16 : TD_F32);
        get(&b, outs[r], ddb, C * 4);
        if (dc) get(&b, c16, dc, n * 2);
        release(&b);
      }
      int64_t off = 0; /* the fused cast against cast's rounding */
      for (int64_t q = 0; q < n; q++) off += c16[q] != td_f32_to_bf16(dout[q]);
      double err = relerr(g1, rc, C);
      int det = same_bits(g1, g2, C * 4) && same_bits(g1, gf, C * 4);
      CHECK(err < 2e-5 && det && off == 0,
            "bias_backward %lldx%lld: rel err %.3g, deterministic (and with the fused cast) %d, "
            "fused bf16 cast off cast's rounding %lld", (long long)R, (long long)C, err, det,
            (long long)off);
      td_free(dout), td_free(db0), td_free(rc), td_free(g1), td_free(g2), td_free(gf);
      td_free(c16);
    }
}

static void test_layernorm(void) {
  /* cols: the scalar path (<= 256), registers (768, 1000), the loop path (1001, 1600) */
  static const int64_t rows[] = {1, 7, 33, 129, 300}, cols[] = {1, 7, 33, 768, 1000, 1001, 1600};
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 7; j++)
      for (int bf = 0; bf < 2; bf++) {
        int64_t R = rows[i], C = cols[j], n = R * C;
        float *x = randf(n, -2, 3), *w = randf(C, 0.5f, 1.5f), *bb = randf(C, -0.5f, 0.5f);
        float *dout = randf(n, -1, 1), *dx0 = randf(n, -1, 1);
        float *dw0 = randf(C, -1, 1), *db0 = randf(C, -1, 1);
        float *o[3], *mean[3], *rstd[3], *dx[3], *dw[3], *db[3];
        for (int r = 0; r < 3; r++) {
          o[r] = alloc_host(n * 4), mean[r] = alloc_host(R * 4), rstd[r] = alloc_host(R * 4);
          dx[r] = alloc_host(n * 4), dw[r] = alloc_host(C * 4), db[r] = alloc_host(C * 4);
          bufs b = {.d = r ? g_gpu : g_cpu};
          float *dxi = put(&b, x, n * 4), *dwi = put(&b, w, C * 4), *dbi = put(&b, bb, C * 4);
          void *dout_ = put(&b, NULL, n * 4);
          float *dm = put(&b, NULL, R * 4), *drs = put(&b, NULL, R * 4);
          b.d->ops->layernorm_forward(b.d, dout_, bf ? TD_BF16 : TD_F32, dm, drs, dxi, dwi, dbi, R,
                                      C, 1e-5f);
          if (bf) {
            uint16_t *h = alloc_host(n * 2);
            get(&b, h, dout_, n * 2);
            for (int64_t e = 0; e < n; e++) o[r][e] = td_bf16_to_f32(h[e]);
            td_free(h);
          } else {
            get(&b, o[r], dout_, n * 4);
          }
          get(&b, mean[r], dm, R * 4), get(&b, rstd[r], drs, R * 4);
          float *ddo = put(&b, dout, n * 4), *ddx = put(&b, dx0, n * 4);
          float *ddw = put(&b, dw0, C * 4), *ddb = put(&b, db0, C * 4);
          b.d->ops->layernorm_backward(b.d, ddx, ddw, ddb, ddo, dxi, dwi, dm, drs, R, C);
          get(&b, dx[r], ddx, n * 4), get(&b, dw[r], ddw, C * 4), get(&b, db[r], ddb, C * 4);
          release(&b);
        }
        double tol = bf ? 1e-2 : 2e-5;
        double e_o = relerr(o[1], o[0], n), e_m = relerr(mean[1], mean[0], R);
        double e_s = relerr(rstd[1], rstd[0], R), e_dx = relerr(dx[1], dx[0], n);
        double e_dw = relerr(dw[1], dw[0], C), e_db = relerr(db[1], db[0], C);
        int det = same_bits(o[1], o[2], n * 4) && same_bits(dx[1], dx[2], n * 4) &&
                  same_bits(dw[1], dw[2], C * 4) && same_bits(db[1], db[2], C * 4) &&
                  same_bits(mean[1], mean[2], R * 4) && same_bits(rstd[1], rstd[2], R * 4);
        CHECK(e_o < tol && e_m < 1e-5 && e_s < 1e-5 && e_dx < 1e-4 && e_dw < 1e-4 && e_db < 1e-4 &&
                  det,
              "layernorm %lldx%lld -> %s: out %.2g mean %.2g rstd %.2g dx %.2g dw %.2g db %.2g, "
              "deterministic %d",
              (long long)R, (long long)C, bf ? "bf16" : "fp32", e_o, e_m, e_s, e_dx, e_dw, e_db,
              det);
        for (int r = 0; r < 3; r++)
          td_free(o[r]), td_free(mean[r]), td_free(rstd[r]), td_free(dx[r]), td_free(dw[r]),
              td_free(db[r]);
        td_free(x), td_free(w), td_free(bb), td_free(dout), td_free(dx0), td_free(dw0),
            td_free(db0);
      }
}

/* ------------------------------------------------------------ elementwise */

static void test_gelu(void) {
  const int64_t n = 100003;
  float *x = randf(n, -8, 8), *dout = randf(n, -1, 1);
  x[0] = 0.0f, x[1] = -0.0f, x[2] = 30.0f, x[3] = -30.0f, x[4] = 16.5f, x[5] = -16.5f;
  for (int kind = 0; kind < 2; kind++)
    for (int xb = 0; xb < 2; xb++)
      for (int ob = 0; ob < 2; ob++) {
        float *y[3], *dx[3];
        uint16_t *x16 = to_bf16(x, n);
        for (int r = 0; r < 3; r++) {
          y[r] = alloc_host(n * 4), dx[r] = alloc_host(n * 4);
          bufs b = {.d = r ? g_gpu : g_cpu};
          void *dxin = xb ? put(&b, x16, n * 2) : put(&b, x, n * 4);
          void *dy = put(&b, NULL, n * 4);
          float *dg = put(&b, dout, n * 4);
          b.d->ops->gelu_forward(b.d, dy, ob ? TD_BF16 : TD_F32, dxin, xb ? TD_BF16 : TD_F32, n,
                                 (td_gelu_kind)kind);
          if (ob) {
            uint16_t *h = alloc_host(n * 2);
            get(&b, h, dy, n * 2);
            for (int64_t e = 0; e < n; e++) y[r][e] = td_bf16_to_f32(h[e]);
            td_free(h);
          } else {
            get(&b, y[r], dy, n * 4);
          }
          /* in place: dx aliases dout */
          b.d->ops->gelu_backward(b.d, dg, TD_F32, NULL, dg, dxin, xb ? TD_BF16 : TD_F32, 1, n, (td_gelu_kind)kind);
          get(&b, dx[r], dg, n * 4);
          release(&b);
        }
        double e_y = relerr(y[1], y[0], n), e_dx = relerr(dx[1], dx[0], n);
        int det = same_bits(y[1], y[2], n * 4) && same_bits(dx[1], dx[2], n * 4);
        double tol = ob ? 8e-3 : 2e-6;
        CHECK(e_y < tol && e_dx < 2e-6 && det,
              "gelu %s x %s -> %s: forward %.2g, backward (in place) %.2g, deterministic %d",
              kind ? "tanh" : "erf", xb ? "bf16" : "fp32", ob ? "bf16" : "fp32", e_y, e_dx, det);
        for (int r = 0; r < 3; r++) td_free(y[r]), td_free(dx[r]);
        td_free(x16);
      }
  td_free(x), td_free(dout);
}

/* The MLP's backward as a bf16 step runs it: gelu_backward writing bf16 dx with
 * the fc1 bias gradient fused, x bf16, at GPT-2's fc1 width (the vector path)
 * and at an odd width (the scalar path); and bias_backward of a bf16 dout (the
 * QKV bias) at both. Against the CPU, and the same bits twice on the GPU. dx is
 * held to 2 bf16 ulps of the largest value (the backends' fp32 gradients differ
 * in their last bits, so a few roundings go the other way), and bias_backward
 * reads the same bf16 values on both (one flipped element moves a sum by its
 * ulp, more than the sums' own error). */
static void test_gelu_bias(void) {
  static const int64_t shapes[][2] = {{4100, 3072}, {129, 771}};
  for (int i = 0; i < 2; i++) {
    const int64_t R = shapes[i][0], C = shapes[i][1], n = R * C;
    float *x = randf(n, -6, 6), *dout = randf(n, -1, 1), *db0 = randf(C, -1, 1);
    uint16_t *x16 = to_bf16(x, n), *d16 = to_bf16(dout, n);
    float *dx[3], *db[3], *bb[3];
    int plain_same = 1; /* bf16 dx without the bias sum: the same bits */
    for (int r = 0; r < 3; r++) {
      dx[r] = alloc_host(n * 4), db[r] = alloc_host(C * 4), bb[r] = alloc_host(C * 4);
      uint16_t *h = alloc_host(n * 2), *h2 = alloc_host(n * 2);
      bufs b = {.d = r ? g_gpu : g_cpu};
      void *dxin = put(&b, x16, n * 2), *ddx = put(&b, NULL, n * 2), *ddx2 = put(&b, NULL, n * 2);
      float *dg = put(&b, dout, n * 4), *ddb = put(&b, db0, C * 4), *dbb = put(&b, db0, C * 4);
      void *dd16 = put(&b, d16, n * 2);
      b.d->ops->gelu_backward(b.d, ddx, TD_BF16, ddb, dg, dxin, TD_BF16, R, C, TD_GELU_TANH);
      b.d->ops->gelu_backward(b.d, ddx2, TD_BF16, NULL, dg, dxin, TD_BF16, R, C, TD_GELU_TANH);
      b.d->ops->bias_backward(b.d, dbb, dd16, TD_BF16, R, C, NULL, TD_F32);
      get(&b, h, ddx, n * 2), get(&b, h2, ddx2, n * 2);
      get(&b, db[r], ddb, C * 4), get(&b, bb[r], dbb, C * 4);
      plain_same &= same_bits(h, h2, n * 2);
      for (int64_t e = 0; e < n; e++) dx[r][e] = td_bf16_to_f32(h[e]);
      td_free(h), td_free(h2);
      release(&b);
    }
    double e_dx = relerr(dx[1], dx[0], n), e_db = relerr(db[1], db[0], C);
    double e_bb = relerr(bb[1], bb[0], C);
    int det = same_bits(dx[1], dx[2], n * 4) && same_bits(db[1], db[2], C * 4) &&
              same_bits(bb[1], bb[2], C * 4);
    CHECK(e_dx < 8e-3 && e_db < 2e-5 && e_bb < 2e-5 && det && plain_same,
          "gelu tanh backward %lldx%lld bf16 -> bf16 with the bias fused: dx %.2g, dbias %.2g; "
          "bias_backward of bf16 %.2g; deterministic %d; without the bias sum the same dx %d",
          (long long)R, (long long)C, e_dx, e_db, e_bb, det, plain_same);
    for (int r = 0; r < 3; r++) td_free(dx[r]), td_free(db[r]), td_free(bb[r]);
    td_free(x), td_free(dout), td_free(db0), td_free(x16), td_free(d16);
  }
}

static void test_add_scale(void) {
  const int64_t n = 77777;
  float *a = randf(n, -1, 1), *bb = randf(n, -1, 1);
  float *o[3];
  for (int r = 0; r < 3; r++) {
    o[r] = alloc_host(n * 4);
    bufs b = {.d = r ? g_gpu : g_cpu};
    float *da = put(&b, a, n * 4), *db = put(&b, bb, n * 4), *dc = put(&b, NULL, n * 4);
    b.d->ops->add(b.d, dc, da, db, n);
    b.d->ops->add(b.d, da, da, dc, n); /* aliasing a */
    b.d->ops->scale(b.d, da, n, -0.37f);
    b.d->ops->add(b.d, db, dc, db, n); /* aliasing b */
    b.d->ops->add(b.d, db, db, da, n);
    get(&b, o[r], db, n * 4);
    release(&b);
  }
  CHECK(same_bits(o[1], o[0], n * 4) && same_bits(o[1], o[2], n * 4),
        "add (with aliasing) and scale: bit-identical to the CPU and deterministic");
  for (int r = 0; r < 3; r++) td_free(o[r]);
  td_free(a), td_free(bb);
}

static void test_dropout(void) {
  static const int64_t ns[] = {1, 3, 17, 1000, 65537};
  static const float ps[] = {0.1f, 0.5f, 0.9f, 1.0f, 0.0f};
  static const uint64_t firsts[] = {0, 1, 6, 1234567, (1ull << 33) + 3};
  for (int i = 0; i < 5; i++)
    for (int f = 0; f < 5; f++) {
      int64_t n = ns[i];
      float p = ps[(i + f) % 5];
      float *ones = alloc_host(n * 4), *x = randf(n, -1, 1), *res = randf(n, -2, 2);
      float *o[3], *ox[3], *oa[3];
      for (int64_t e = 0; e < n; e++) ones[e] = 1.0f;
      for (int r = 0; r < 3; r++) { /* in place; and out = resid + dropout(x) */
        o[r] = alloc_host(n * 4), ox[r] = alloc_host(n * 4), oa[r] = alloc_host(n * 4);
        bufs b = {.d = r ? g_gpu : g_cpu};
        float *d1 = put(&b, ones, n * 4), *dx = put(&b, x, n * 4), *dr = put(&b, res, n * 4);
        float *da = put(&b, NULL, n * 4);
        b.d->ops->dropout(b.d, d1, NULL, d1, n, p, 0xfeedbeefcafeull + (uint64_t)i,
                          7 + (uint64_t)f, firsts[f]);
        b.d->ops->dropout(b.d, da, dr, dx, n, p, 99, 3, firsts[f]);
        b.d->ops->dropout(b.d, dx, NULL, dx, n, p, 99, 3, firsts[f]);
        get(&b, o[r], d1, n * 4), get(&b, ox[r], dx, n * 4), get(&b, oa[r], da, n * 4);
        release(&b);
      }
      /* the mask itself against td_rng_u32 */
      int64_t wrong = 0;
      for (int64_t e = 0; e < n; e++) {
        int keep = p == 0.0f ||
                   td_rng_bits_to_unit(td_rng_u32(0xfeedbeefcafeull + (uint64_t)i, 7 + (uint64_t)f,
                                                  firsts[f] + (uint64_t)e)) >= p;
        wrong += (o[1][e] != 0.0f) != keep;
      }
      CHECK(same_bits(o[1], o[0], n * 4) && same_bits(ox[1], ox[0], n * 4) &&
                same_bits(oa[1], oa[0], n * 4) && wrong == 0 && same_bits(o[1], o[2], n * 4),
            "dropout n=%lld p=%g first=%llu: mask of ones, values and resid + dropout(x) "
            "bit-identical to the CPU, %lld mask bits off td_rng_u32",
            (long long)n, (double)p, (unsigned long long)firsts[f], (long long)wrong);
      for (int r = 0; r < 3; r++) td_free(o[r]), td_free(ox[r]), td_free(oa[r]);
      td_free(ones), td_free(x), td_free(res);
    }
}

static void test_cast(void) {
  const int64_t n = 70001;
  float *x = randf(n, -70000, 70000);
  uint32_t s = 12345;
  for (int64_t i = 0; i < n; i += 3) { /* random bit patterns: NaNs, Infs, subnormals */
    s = s * 1664525u + 1013904223u;
    memcpy(&x[i], &s, 4);
  }
  static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 65504.0f, 65520.0f,
                                  5.96e-8f, 2.9e-8f, 1e-40f, 3.0e38f};
  for (size_t i = 0; i < sizeof special / sizeof *special; i++) x[i + 1] = special[i];
  static const td_dtype dts[] = {TD_F32, TD_BF16, TD_F16};
  for (int si = 0; si < 3; si++)
    for (int di = 0; di < 3; di++) {
      td_dtype st = dts[si], dt = dts[di];
      size_t ss = td_dtype_size(st), ds = td_dtype_size(dt);
      void *src = alloc_host(n * ss);
      g_cpu->ops->cast(g_cpu, src, st, x, TD_F32, n); /* the source in its dtype */
      void *o[3];
      for (int r = 0; r < 3; r++) {
        o[r] = alloc_host(n * ds);
        bufs b = {.d = r ? g_gpu : g_cpu};
        void *d1 = put(&b, src, n * ss), *d2 = put(&b, NULL, n * ds);
        b.d->ops->cast(b.d, d2, dt, d1, st, n);
        get(&b, o[r], d2, n * ds);
        release(&b);
      }
      CHECK(same_bits(o[1], o[0], n * ds) && same_bits(o[1], o[2], n * ds),
            "cast %s -> %s: bit-identical to the CPU (NaN, Inf, subnormals, ties), deterministic",
            td_dtype_name(st), td_dtype_name(dt));
      for (int r = 0; r < 3; r++) td_free(o[r]);
      td_free(src);
    }
  td_free(x);
}

/* ------------------------------------------------------------------ embedding */

static void test_embedding(void) {
  static const int64_t ns[] = {1, 17, 130, 4096}, colss[] = {1, 7, 129, 768};
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) {
      int64_t n = ns[i], C = colss[j], V = 50, vs = j % 2 ? 20 : 0, rt = j % 2 ? 25 : 50;
      int32_t *ids = alloc_host(n * 4);
      for (int64_t r = 0; r < n; r++) ids[r] = (int32_t)(td_rng_u32(5, 6, (uint64_t)r) % (V + 0));
      float *table = randf(rt * C, -1, 1), *dout = randf(n * C, -1, 1), *o0 = randf(n * C, -1, 1);
      float *dt0 = randf(rt * C, -1, 1);
      float *o[3], *oa[3], *dt[3];
      for (int r = 0; r < 3; r++) {
        o[r] = alloc_host(n * C * 4), oa[r] = alloc_host(n * C * 4), dt[r] = alloc_host(rt * C * 4);
        bufs b = {.d = r ? g_gpu : g_cpu};
        int32_t *di = put(&b, ids, n * 4);
        float *dtab = put(&b, table, rt * C * 4), *dout_ = put(&b, o0, n * C * 4);
        float *dacc = put(&b, o0, n * C * 4), *dg = put(&b, dout, n * C * 4);
        float *ddt = put(&b, dt0, rt * C * 4);
        b.d->ops->embedding_forward(b.d, dout_, di, n, dtab, vs, rt, C, 0);
        b.d->ops->embedding_forward(b.d, dacc, di, n, dtab, vs, rt, C, 1);
        b.d->ops->embedding_backward(b.d, ddt, dg, di, n, vs, rt, C);
        get(&b, o[r], dout_, n * C * 4), get(&b, oa[r], dacc, n * C * 4);
        get(&b, dt[r], ddt, rt * C * 4);
        release(&b);
      }
      int exact = same_bits(o[1], o[0], n * C * 4) && same_bits(oa[1], oa[0], n * C * 4) &&
                  same_bits(dt[1], dt[0], rt * C * 4);
      int det = same_bits(dt[1], dt[2], rt * C * 4) && same_bits(o[1], o[2], n * C * 4);
      CHECK(exact && det,
            "embedding n=%lld cols=%lld rows [%lld, %lld): forward, accumulate and the "
            "scatter-add backward bit-identical to the CPU (repeated ids in token order), "
            "deterministic %d",
            (long long)n, (long long)C, (long long)vs, (long long)(vs + rt), det);
      for (int r = 0; r < 3; r++) td_free(o[r]), td_free(oa[r]), td_free(dt[r]);
      td_free(ids), td_free(table), td_free(dout), td_free(o0), td_free(dt0);
    }
}

/* ------------------------------------------------------------------ loss */

static void test_cross_entropy(void) {
  static const int64_t ns[] = {1, 7, 33}, vocabs[] = {1, 7, 129, 50304};
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++) {
      int64_t n = ns[i], V = vocabs[j], nv = n * V;
      float *logits = randf(nv, -8, 8), *dloss = randf(n, 0, 1);
      int32_t *t = alloc_host(n * 4);
      for (int64_t r = 0; r < n; r++) t[r] = (int32_t)(td_rng_u32(8, 9, (uint64_t)r) % (uint64_t)V);
      int64_t vs = V > 2 ? V / 3 : 0, sl = V - vs; /* a slice [vs, V) of the vocabulary */
      float *loss[3], *lse[3], *dl[3], *slse[3], *stl[3], *sdl[3];
      uint16_t *dl16[3];
      for (int r = 0; r < 3; r++) {
        loss[r] = alloc_host(n * 4), lse[r] = alloc_host(n * 4), dl[r] = alloc_host(nv * 4);
        dl16[r] = alloc_host(nv * 2);
        slse[r] = alloc_host(n * 4), stl[r] = alloc_host(n * 4), sdl[r] = alloc_host(n * sl * 4);
        bufs b = {.d = r ? g_gpu : g_cpu};
        float *dlg = put(&b, logits, nv * 4), *dls = put(&b, NULL, n * 4);
        float *dlse = put(&b, NULL, n * 4), *dd = put(&b, dloss, n * 4);
        int32_t *dt = put(&b, t, n * 4);
        b.d->ops->cross_entropy_forward(b.d, dls, dlse, dlg, TD_F32, dt, n, V);
        get(&b, loss[r], dls, n * 4), get(&b, lse[r], dlse, n * 4);
        /* the slice: a copy of columns [vs, V) of each row */
        float *slice = alloc_host(n * sl * 4);
        for (int64_t q = 0; q < n; q++) memcpy(slice + q * sl, logits + q * V + vs, sl * 4);
        float *dsl = put(&b, slice, n * sl * 4), *ds1 = put(&b, NULL, n * 4);
        float *ds2 = put(&b, NULL, n * 4);
        b.d->ops->cross_entropy_slice(b.d, ds1, ds2, dsl, TD_F32, dt, n, sl, vs);
        get(&b, slse[r], ds1, n * 4), get(&b, stl[r], ds2, n * 4);
        b.d->ops->cross_entropy_backward(b.d, dsl, TD_F32, dsl, TD_F32, dlse, dt, dd, n, sl,
                                         vs); /* in place */
        get(&b, sdl[r], dsl, n * sl * 4);
        uint16_t *d16 = put(&b, NULL, nv * 2);
        b.d->ops->cross_entropy_backward(b.d, d16, TD_BF16, dlg, TD_F32, dlse, dt, dd, n, V, 0);
        get(&b, dl16[r], d16, nv * 2);
        b.d->ops->cross_entropy_backward(b.d, dlg, TD_F32, dlg, TD_F32, dlse, dt, dd, n, V,
                                         0); /* in place */
        get(&b, dl[r], dlg, nv * 4);
        release(&b);
        td_free(slice);
      }
      double e_lse = relerr(lse[1], lse[0], n), e_loss = relerr(loss[1], loss[0], n);
      double e_sl = relerr(slse[1], slse[0], n), e_dl = relerr(dl[1], dl[0], nv);
      double e_sdl = relerr(sdl[1], sdl[0], n * sl);
      int tl_exact = same_bits(stl[1], stl[0], n * 4);
      int64_t off16 = 0; /* the GPU's bf16 dlogits: its fp32 ones rounded as cast rounds */
      for (int64_t q = 0; q < nv; q++) off16 += dl16[1][q] != td_f32_to_bf16(dl[1][q]);
      int det = same_bits(loss[1], loss[2], n * 4) && same_bits(lse[1], lse[2], n * 4) &&
                same_bits(dl[1], dl[2], nv * 4) && same_bits(slse[1], slse[2], n * 4) &&
                same_bits(sdl[1], sdl[2], n * sl * 4);
      CHECK(e_lse < 1e-6 && e_loss < 2e-5 && e_sl < 1e-6 && e_dl < 1e-5 && e_sdl < 1e-5 &&
                tl_exact && det && off16 == 0,
            "cross-entropy n=%lld vocab=%lld (slice from %lld): lse %.2g loss %.2g slice lse %.2g "
            "dlogits %.2g slice dlogits %.2g, target logits exact %d, deterministic %d, bf16 "
            "dlogits off their fp32 rounding %lld",
            (long long)n, (long long)V, (long long)vs, e_lse, e_loss, e_sl, e_dl, e_sdl, tl_exact,
            det, (long long)off16);
      for (int r = 0; r < 3; r++)
        td_free(loss[r]), td_free(lse[r]), td_free(dl[r]), td_free(slse[r]), td_free(stl[r]),
            td_free(sdl[r]), td_free(dl16[r]);
      td_free(logits), td_free(dloss), td_free(t);
    }
}

/* |a - b| within one bf16 ulp of the larger magnitude (8 significant bits) */
static int within_bf16_ulp(uint16_t a, uint16_t b) {
  float x = td_bf16_to_f32(a), y = td_bf16_to_f32(b);
  int e;
  frexpf(fmaxf(fabsf(x), fabsf(y)), &e);
  return fabsf(x - y) <= ldexpf(1.0f, e - 8);
}

/* bf16 logits, as the bf16 step keeps them: the loss and lse from them, then the
 * bf16 gradient in place over them; the GPU against the CPU (the same bf16
 * inputs: lse within fp32 rounding, each gradient element within a bf16 ulp of
 * the CPU's, as their fp32 values may round apart), against itself, and its
 * cross_entropy_fused against its two ops (bit for bit). */
static void test_cross_entropy_bf16_logits(void) {
  static const int64_t ns[] = {3, 17}, vocabs[] = {129, 50257};
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++) {
      int64_t n = ns[i], V = vocabs[j], nv = n * V;
      float *logits = randf(nv, -8, 8), *dloss = randf(n, 0, 1);
      uint16_t *l16 = alloc_host(nv * 2), *g16[4];
      for (int64_t q = 0; q < nv; q++) l16[q] = td_f32_to_bf16(logits[q]);
      int32_t *t = alloc_host(n * 4);
      for (int64_t r = 0; r < n; r++) t[r] = (int32_t)(td_rng_u32(8, 10, (uint64_t)r) % (uint64_t)V);
      float *loss[4], *lse[4];
      for (int r = 0; r < 4; r++) { /* CPU, GPU twice, the GPU's cross_entropy_fused */
        loss[r] = alloc_host(n * 4), lse[r] = alloc_host(n * 4), g16[r] = alloc_host(nv * 2);
        bufs b = {.d = r ? g_gpu : g_cpu};
        uint16_t *dlg = put(&b, l16, nv * 2);
        float *dls = put(&b, NULL, n * 4), *dlse = put(&b, NULL, n * 4), *dd = put(&b, dloss, n * 4);
        int32_t *dt = put(&b, t, n * 4);
        if (r == 3) {
          b.d->ops->cross_entropy_fused(b.d, dls, dlse, dlg, TD_BF16, dlg, TD_BF16, dt, dd, n, V);
        } else {
          b.d->ops->cross_entropy_forward(b.d, dls, dlse, dlg, TD_BF16, dt, n, V);
          b.d->ops->cross_entropy_backward(b.d, dlg, TD_BF16, dlg, TD_BF16, dlse, dt, dd, n, V, 0);
        }
        get(&b, loss[r], dls, n * 4), get(&b, lse[r], dlse, n * 4), get(&b, g16[r], dlg, nv * 2);
        release(&b);
      }
      int64_t far = 0; /* elements more than one bf16 ulp from the CPU's */
      for (int64_t q = 0; q < nv; q++) far += !within_bf16_ulp(g16[1][q], g16[0][q]);
      double e_lse = relerr(lse[1], lse[0], n), e_loss = relerr(loss[1], loss[0], n);
      int det = same_bits(loss[1], loss[2], n * 4) && same_bits(lse[1], lse[2], n * 4) &&
                same_bits(g16[1], g16[2], nv * 2);
      int fused = same_bits(loss[1], loss[3], n * 4) && same_bits(lse[1], lse[3], n * 4) &&
                  same_bits(g16[1], g16[3], nv * 2);
      CHECK(e_lse < 1e-6 && e_loss < 2e-5 && far == 0 && det && fused,
            "cross-entropy of bf16 logits n=%lld vocab=%lld: lse %.2g loss %.2g, in-place bf16 "
            "dlogits more than an ulp from the CPU's %lld, deterministic %d, cross_entropy_fused "
            "== forward then backward %d",
            (long long)n, (long long)V, e_lse, e_loss, (long long)far, det, fused);
      for (int r = 0; r < 4; r++) td_free(loss[r]), td_free(lse[r]), td_free(g16[r]);
      td_free(logits), td_free(dloss), td_free(t), td_free(l16);
    }
}

/* The vocabulary-parallel combine and the masked loss sum (both in double). */
static void test_combine_and_masked_sum(void) {
  static const int64_t ns[] = {1, 7, 1000, 4099};
  for (int i = 0; i < 4; i++) {
    int64_t n = ns[i], parts = 1 + i;
    float *lp = randf(n * parts, -5, 12), *tl = randf(n, -20, 20), *x = randf(n, 0, 11);
    float *mask = randf(n, 0, 1);
    for (int64_t r = 0; r < n; r++) mask[r] = mask[r] < 0.3f ? 0.0f : 1.0f;
    float *lse[3], *loss[3];
    double sum[3];
    for (int r = 0; r < 3; r++) {
      lse[r] = alloc_host(n * 4), loss[r] = alloc_host(n * 4);
      bufs b = {.d = r ? g_gpu : g_cpu};
      float *dlp = put(&b, lp, n * parts * 4), *dtl = put(&b, tl, n * 4), *dl = put(&b, NULL, n * 4);
      float *dx = put(&b, x, n * 4), *dm = put(&b, mask, n * 4);
      b.d->ops->cross_entropy_combine(b.d, dl, dtl, dlp, dtl, n, parts); /* losses alias */
      get(&b, lse[r], dl, n * 4), get(&b, loss[r], dtl, n * 4);
      double *dsum = put(&b, NULL, sizeof(double));
      b.d->ops->masked_sum(b.d, dsum, dx, dm, n);
      get(&b, &sum[r], dsum, sizeof(double));
      release(&b);
    }
    double e_lse = relerr(lse[1], lse[0], n), e_loss = relerr(loss[1], loss[0], n);
    double e_sum = fabs(sum[1] - sum[0]) / (fabs(sum[0]) > 1 ? fabs(sum[0]) : 1);
    int det = same_bits(lse[1], lse[2], n * 4) && same_bits(loss[1], loss[2], n * 4) &&
              sum[1] == sum[2];
    CHECK(e_lse < 1e-6 && e_loss < 1e-6 && e_sum < 1e-12 && det,
          "cross_entropy_combine n=%lld parts=%lld: lse %.2g loss %.2g; masked_sum %.2g; "
          "deterministic %d", (long long)n, (long long)parts, e_lse, e_loss, e_sum, det);
    for (int r = 0; r < 3; r++) td_free(lse[r]), td_free(loss[r]);
    td_free(lp), td_free(tl), td_free(x), td_free(mask);
  }
}

/* ------------------------------------------------------------------ optimizer */

static void test_adamw(void) {
  static const int64_t ns[] = {1, 7, 100003};
  for (int i = 0; i < 3; i++)
    for (int step = 1; step <= 1000; step *= 10) {
      int64_t n = ns[i];
      float *p0 = randf(n, -1, 1), *g0 = randf(n, -1, 1), *m0 = randf(n, -0.1f, 0.1f);
      float *v0 = randf(n, 0, 0.01f);
      float *p[3], *m[3], *v[3];
      int copied = 1; /* the bf16 copy is the rounding of each run's own new p */
      for (int r = 0; r < 3; r++) {
        p[r] = alloc_host(n * 4), m[r] = alloc_host(n * 4), v[r] = alloc_host(n * 4);
        uint16_t *w = alloc_host(n * 2);
        bufs b = {.d = r ? g_gpu : g_cpu};
        float *dp = put(&b, p0, n * 4), *dg = put(&b, g0, n * 4), *dm = put(&b, m0, n * 4);
        float *dv = put(&b, v0, n * 4);
        void *dw = put(&b, w, n * 2);
        b.d->ops->adamw(b.d, dp, dg, dm, dv, n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, step, dw,
                        TD_BF16);
        get(&b, p[r], dp, n * 4), get(&b, m[r], dm, n * 4), get(&b, v[r], dv, n * 4);
        get(&b, w, dw, n * 2);
        for (int64_t k = 0; k < n; k++) copied &= w[k] == td_f32_to_bf16(p[r][k]);
        td_free(w);
        release(&b);
      }
      double ep = relerr(p[1], p[0], n), em = relerr(m[1], m[0], n), ev = relerr(v[1], v[0], n);
      int det = same_bits(p[1], p[2], n * 4) && same_bits(m[1], m[2], n * 4) &&
                same_bits(v[1], v[2], n * 4);
      CHECK(ep < 1e-6 && em < 1e-6 && ev < 1e-6 && det && copied,
            "adamw n=%lld step %d: param %.2g m %.2g v %.2g, deterministic %d, bf16 copy %d",
            (long long)n, step, ep, em, ev, det, copied);
      for (int r = 0; r < 3; r++) td_free(p[r]), td_free(m[r]), td_free(v[r]);
      td_free(p0), td_free(g0), td_free(m0), td_free(v0);
    }
}

/* adamw_runs (one launch over a work list) against adamw per run on the GPU: the
 * same bits in params, m, v and the bf16 copy; runs of 1 element to a few
 * chunks, decayed or not, at different offsets in params, grads and the state
 * (gaps left alone). A second set of runs replaces the device's cached table. */
static void test_adamw_runs(void) {
  static const td_adam_run sets[2][5] = {
      {{0, 3, 5, 20000, 1, 0}, {20000, 20010, 20040, 1, 0, 0}, {20001, 20020, 20041, 8192, 1, 0},
       {28200, 28300, 28400, 8193, 0, 0}, {36400, 36500, 36600, 777, 1, 0}},
      {{100, 0, 7, 9000, 0, 0}, {9200, 9100, 9300, 3, 1, 0}, {0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0}}};
  static const int counts[2] = {5, 2};
  const int64_t n = 40000;
  int same = 1, gaps = 1;
  for (int set = 0; set < 2; set++) {
    const td_adam_run *runs = sets[set];
    float *p0 = randf(n, -1, 1), *g0 = randf(n, -1, 1), *m0 = randf(n, -0.1f, 0.1f);
    float *v0 = randf(n, 0, 0.01f);
    float *out[2][3];
    uint16_t *w[2];
    for (int way = 0; way < 2; way++) {
      bufs b = {.d = g_gpu};
      float *dp = put(&b, p0, n * 4), *dg = put(&b, g0, n * 4), *dm = put(&b, m0, n * 4);
      float *dv = put(&b, v0, n * 4);
      void *dw = put(&b, NULL, n * 2);
      for (int step = 1; step <= 2; step++) {
        if (way == 0)
          g_gpu->ops->adamw_runs(g_gpu, dp, dg, dm, dv, runs, counts[set], 3e-4f, 0.9f, 0.95f,
                                 1e-8f, 0.1f, 0.5f, step, dw, TD_BF16);
        else
          for (int i = 0; i < counts[set]; i++) {
            const td_adam_run *r = &runs[i];
            g_gpu->ops->adamw(g_gpu, dp + r->param_offset, dg + r->grad_offset,
                              dm + r->state_offset, dv + r->state_offset, r->numel, 3e-4f, 0.9f,
                              0.95f, 1e-8f, r->weight_decay ? 0.1f : 0.0f, 0.5f, step,
                              (uint16_t *)dw + r->param_offset, TD_BF16);
          }
      }
      float *dd[3] = {dp, dm, dv};
      for (int k = 0; k < 3; k++) out[way][k] = alloc_host(n * 4), get(&b, out[way][k], dd[k], n * 4);
      w[way] = alloc_host(n * 2), get(&b, w[way], dw, n * 2);
      release(&b);
    }
    for (int k = 0; k < 3; k++) same &= same_bits(out[0][k], out[1][k], n * 4);
    same &= same_bits(w[0], w[1], n * 2);
    gaps &= out[0][0][n - 1] == p0[n - 1]; /* past every run: untouched */
    for (int way = 0; way < 2; way++) {
      for (int k = 0; k < 3; k++) td_free(out[way][k]);
      td_free(w[way]);
    }
    td_free(p0), td_free(g0), td_free(m0), td_free(v0);
  }
  CHECK(same && gaps,
        "adamw_runs == adamw per run, bit for bit (params, m, v, bf16 copy; two steps, two sets "
        "of runs), elements outside the runs untouched %d", gaps);
}

static void test_reductions(void) {
  static const int64_t ns[] = {1, 7, 16385, 1000003};
  for (int i = 0; i < 4; i++) {
    int64_t n = ns[i];
    float *x = randf(n, -3, 3);
    for (int64_t e = 0; e < n; e += 7) x[e] = 0.0f;
    for (int64_t e = 3; e < n; e += 11) x[e] = -0.0f;
    td_device *c = g_cpu, *gp = g_gpu;
    double sc = td_device_reduce_now(c, c->ops->sum_squares, x, n);
    int64_t zc = (int64_t)td_device_reduce_now(c, c->ops->count_zeros, x, n);
    bufs b = {.d = g_gpu};
    float *dx = put(&b, x, n * 4);
    double s1 = td_device_reduce_now(gp, gp->ops->sum_squares, dx, n);
    double s2 = td_device_reduce_now(gp, gp->ops->sum_squares, dx, n);
    int64_t z1 = (int64_t)td_device_reduce_now(gp, gp->ops->count_zeros, dx, n);
    int64_t z2 = (int64_t)td_device_reduce_now(gp, gp->ops->count_zeros, dx, n);
    double err = fabs(s1 - sc) / (sc > 0 ? sc : 1);
    CHECK(err < 1e-10 && s1 == s2 && z1 == zc && z1 == z2,
          "sum_squares n=%lld rel err %.2g (same bits twice %d); count_zeros %lld == %lld",
          (long long)n, err, s1 == s2, (long long)z1, (long long)zc);
    if (n > 1) { /* NaN and Inf propagate: the fp16 overflow check */
      float bad = NAN;
      g_gpu->ops->copy_h2d(g_gpu, dx + n / 2, &bad, 4);
      double sn = td_device_reduce_now(gp, gp->ops->sum_squares, dx, n);
      bad = INFINITY;
      g_gpu->ops->copy_h2d(g_gpu, dx + n / 2, &bad, 4);
      double si = td_device_reduce_now(gp, gp->ops->sum_squares, dx, n);
      CHECK(isnan(sn) && isinf(si), "sum_squares n=%lld: NaN -> %g, Inf -> %g", (long long)n, sn,
            si);
    }
    release(&b);
    td_free(x);
  }
}

/* ------------------------------------------------------------------ attention */

typedef struct {
  int64_t B, T, H, D, Ht, h0;
  td_dtype dt;
  float p;
} att_case;

typedef struct {
  float *out, *lse, *dqkv; /* fp32 copies */
} att_result;

static void att_on(td_device *d, const att_case *c, const float *qkv, const float *dout,
                   att_result *res) {
  const int64_t nqkv = c->B * c->T * c->H * 3 * c->D, no = c->B * c->T * c->H * c->D;
  const int64_t nl = c->B * c->H * c->T;
  const int bf = c->dt == TD_BF16;
  const size_t es = bf ? 2 : 4;
  bufs b = {.d = d};
  uint16_t *q16 = bf ? to_bf16(qkv, nqkv) : NULL, *g16 = bf ? to_bf16(dout, no) : NULL;
  void *dq = put(&b, bf ? (void *)q16 : (void *)qkv, nqkv * es);
  void *dg = put(&b, bf ? (void *)g16 : (void *)dout, no * es);
  void *dout_ = put(&b, NULL, no * es), *dqkv = put(&b, NULL, nqkv * es);
  float *dlse = put(&b, NULL, nl * 4);
  td_attention_desc a = {.batch = c->B, .seq = c->T, .heads = c->H, .head_dim = c->D,
                         .dtype = c->dt, .scale = 1.0f / sqrtf((float)c->D), .qkv = dq,
                         .out = dout_, .lse = dlse, .dout = dg, .dqkv = dqkv,
                         .dropout_p = c->p, .seed = 0x1234abcdull, .stream = 42,
                         .head_start = c->h0, .heads_total = c->Ht};
  d->ops->attention_forward(d, &a);
  d->ops->attention_backward(d, &a);
  res->out = alloc_host(no * 4), res->lse = alloc_host(nl * 4), res->dqkv = alloc_host(nqkv * 4);
  get(&b, res->lse, dlse, nl * 4);
  if (bf) {
    uint16_t *h = alloc_host(nqkv * 2);
    get(&b, h, dout_, no * 2);
    for (int64_t i = 0; i < no; i++) res->out[i] = td_bf16_to_f32(h[i]);
    get(&b, h, dqkv, nqkv * 2);
    for (int64_t i = 0; i < nqkv; i++) res->dqkv[i] = td_bf16_to_f32(h[i]);
    td_free(h);
  } else {
    get(&b, res->out, dout_, no * 4);
    get(&b, res->dqkv, dqkv, nqkv * 4);
  }
  release(&b);
  td_free(q16), td_free(g16);
}

static void att_free(att_result *r) { td_free(r->out), td_free(r->lse), td_free(r->dqkv); }

/* The GPU's attention (TRIDENT_CUDA_ATTENTION=mode: native, cudnn or auto) against
 * the CPU's on the same random inputs, twice (bit-identical), within the tolerances
 * of the dtype (cuDNN's lse came within 6e-7 of the CPU's on an H100). */
static void att_case_run_on(const att_case *c, const char *mode) {
  const int64_t nqkv = c->B * c->T * c->H * 3 * c->D, no = c->B * c->T * c->H * c->D;
  const int64_t nl = c->B * c->H * c->T;
  float *qkv = randf(nqkv, -1.5f, 1.5f), *dout = randf(no, -1, 1);
  att_result rc, g1, g2;
  att_on(g_cpu, c, qkv, dout, &rc);
  setenv("TRIDENT_CUDA_ATTENTION", mode, 1);
  att_on(g_gpu, c, qkv, dout, &g1);
  att_on(g_gpu, c, qkv, dout, &g2);
  unsetenv("TRIDENT_CUDA_ATTENTION");
  const int bf = c->dt == TD_BF16;
  double e_o = relerr(g1.out, rc.out, no), e_l = relerr(g1.lse, rc.lse, nl);
  double e_d = relerr(g1.dqkv, rc.dqkv, nqkv);
  double tol_o = bf ? 2e-2 : 2e-5, tol_d = bf ? 5e-2 : 1e-4;
  int det = same_bits(g1.out, g2.out, no * 4) && same_bits(g1.lse, g2.lse, nl * 4) &&
            same_bits(g1.dqkv, g2.dqkv, nqkv * 4);
  CHECK(e_o < tol_o && e_l < 1e-5 && e_d < tol_d && det,
        "attention (%s) %s B%lld T%lld H%lld D%lld p=%g heads [%lld of %lld): out %.2g lse %.2g "
        "dqkv %.2g, deterministic %d",
        mode, td_dtype_name(c->dt), (long long)c->B, (long long)c->T, (long long)c->H,
        (long long)c->D, (double)c->p, (long long)c->h0, (long long)c->Ht, e_o, e_l, e_d, det);
  att_free(&rc), att_free(&g1), att_free(&g2);
  td_free(qkv), td_free(dout);
}

static void att_case_run(const att_case *c) { att_case_run_on(c, "native"); }

/* The masks themselves: q = k = 0 makes P uniform over the visible keys, and
 * v_j = e_j (D >= T) puts element (i, j) of P' in out[i, j]: nonzero iff kept.
 * The pattern must match the keep rule on td_rng_u32 exactly, on both backends. */
static void test_attention_masks(void) {
  const int64_t B = 2, T = 61, H = 2, D = 64, Ht = 5, h0 = 2;
  const float p = 0.3f;
  const int64_t nqkv = B * T * H * 3 * D, no = B * T * H * D;
  float *qkv = alloc_host(nqkv * 4), *dout = alloc_host(no * 4);
  for (int64_t bb = 0; bb < B; bb++)
    for (int64_t t = 0; t < T; t++)
      for (int64_t h = 0; h < H; h++) qkv[((bb * T + t) * H + h) * 3 * D + 2 * D + t] = 1.0f;
  att_case c = {.B = B, .T = T, .H = H, .D = D, .Ht = Ht, .h0 = h0, .dt = TD_F32, .p = p};
  double thr = nearbyint((double)p * 4294967296.0);
  int64_t wrong[2] = {0, 0}, kept = 0;
  for (int dev = 0; dev < 2; dev++) {
    att_result r;
    att_on(dev ? g_gpu : g_cpu, &c, qkv, dout, &r);
    for (int64_t bb = 0; bb < B; bb++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < T; i++)
          for (int64_t j = 0; j <= i; j++) {
            uint64_t ctr = (uint64_t)(((bb * Ht + h0 + h) * T + i) * T + j);
            int keep = (double)td_rng_u32(0x1234abcdull, 42, ctr) >= thr;
            float v = r.out[((bb * T + i) * H + h) * D + j];
            wrong[dev] += (v != 0.0f) != keep;
            kept += dev == 0 && keep;
          }
    att_free(&r);
  }
  CHECK(wrong[0] == 0 && wrong[1] == 0 && kept > 0,
        "attention dropout masks (p=%g, heads %lld.. of %lld): CPU %lld, CUDA %lld elements off "
        "the td_rng_u32 keep rule (%lld kept)",
        (double)p, (long long)h0, (long long)Ht, (long long)wrong[0], (long long)wrong[1],
        (long long)kept);
  td_free(qkv), td_free(dout);
}

static void test_attention(void) {
  static const int64_t Ts[] = {1, 17, 64, 130}, Ds[] = {32, 64, 80};
  for (int ti = 0; ti < 4; ti++)
    for (int di = 0; di < 3; di++)
      for (int bf = 0; bf < 2; bf++) {
        att_case c = {.B = 2, .T = Ts[ti], .H = 3, .D = Ds[di], .dt = bf ? TD_BF16 : TD_F32,
                      .p = (ti + di) % 2 ? 0.1f : 0.0f};
        if (di == 1) c.Ht = 7, c.h0 = 4; /* a tensor-parallel rank's heads */
        att_case_run(&c);
      }
  static const int64_t bigD[] = {128, 100, 256, 16, 1};
  for (int i = 0; i < 5; i++) {
    att_case c = {.B = 1, .T = 77, .H = 2, .D = bigD[i], .dt = i % 2 ? TD_BF16 : TD_F32, .p = 0.2f};
    att_case_run(&c);
  }
  att_case gpt2 = {.B = 2, .T = 256, .H = 4, .D = 64, .dt = TD_BF16, .p = 0.1f};
  att_case_run(&gpt2);
  test_attention_masks();
}

/* cuDNN's fused attention (bf16, no dropout, head_dim % 8 == 0, T > 1) against the
 * CPU: forced (TRIDENT_CUDA_ATTENTION=cudnn fails rather than fall back) at GPT-2's
 * shape; auto gives cuDNN's bits on the calls it takes, runs trident's kernels on
 * the others (dropout, T = 1), and takes odd lengths and head sizes (counted by
 * td_cudnn_attention_calls). Skipped when cuDNN's attention is not available (not
 * built in, or libcudnn.so.9 not found). */
static void test_attention_cudnn(void) {
  const char *what = td_cudnn_describe();
  if (strncmp(what, "cuDNN ", 6) != 0) {
    printf("SKIP attention_cudnn: %s\n", what);
    return;
  }
  printf("  (%s)\n", what);
  att_case gpt2 = {.B = 4, .T = 1024, .H = 12, .D = 64, .dt = TD_BF16};
  att_case_run_on(&gpt2, "cudnn");
  /* one input through cudnn, auto and native: auto must give cuDNN's bits */
  att_case small = {.B = 2, .T = 77, .H = 3, .D = 64, .dt = TD_BF16};
  const int64_t nqkv = small.B * small.T * small.H * 3 * small.D;
  const int64_t no = small.B * small.T * small.H * small.D;
  float *qkv = randf(nqkv, -1.5f, 1.5f), *dout = randf(no, -1, 1);
  att_result forced, autor, native;
  const char *modes[3] = {"cudnn", "auto", "native"};
  att_result *outs[3] = {&forced, &autor, &native};
  for (int m = 0; m < 3; m++) {
    setenv("TRIDENT_CUDA_ATTENTION", modes[m], 1);
    att_on(g_gpu, &small, qkv, dout, outs[m]);
  }
  unsetenv("TRIDENT_CUDA_ATTENTION");
  int auto_is_cudnn = same_bits(forced.out, autor.out, no * 4) &&
                      same_bits(forced.dqkv, autor.dqkv, nqkv * 4);
  int native_differs = !same_bits(forced.dqkv, native.dqkv, nqkv * 4);
  CHECK(auto_is_cudnn && native_differs,
        "TRIDENT_CUDA_ATTENTION=auto runs cuDNN on bf16 without dropout (%d; native's bits "
        "differ from cuDNN's: %d)",
        auto_is_cudnn, native_differs);
  att_free(&forced), att_free(&autor), att_free(&native);
  td_free(qkv), td_free(dout);
  /* dropout: cuDNN with trident's masks (its custom-mask input), against the CPU's
   * attention with the same masks; a tensor-parallel rank's heads [1, 3) of 4 too */
  att_case drops[] = {{.B = 2, .T = 65, .H = 2, .D = 64, .dt = TD_BF16, .p = 0.1f},
                      {.B = 1, .T = 130, .H = 2, .D = 64, .Ht = 4, .h0 = 1, .dt = TD_BF16,
                       .p = 0.3f}};
  int64_t before = td_cudnn_attention_calls();
  for (int i = 0; i < 2; i++) att_case_run_on(&drops[i], "cudnn");
  int64_t ran = td_cudnn_attention_calls() - before;
  CHECK(ran == 8, "attention with dropout: cuDNN ran %lld of the 8 calls, with trident's masks",
        (long long)ran);
  /* odd lengths and head sizes through auto, each against the CPU; cuDNN must
   * have taken all four calls (two runs, forward and backward) of every shape but
   * T = 1 (which it refuses: trident's kernels run it) */
  static const int64_t Ts[] = {1, 17, 64, 130, 333}, Ds[] = {64, 32, 128, 40};
  for (int ti = 0; ti < 5; ti++)
    for (int di = 0; di < 4; di++) {
      att_case c = {.B = 1 + ti % 2, .T = Ts[ti], .H = 1 + (ti + di) % 3, .D = Ds[di],
                    .dt = TD_BF16};
      before = td_cudnn_attention_calls();
      att_case_run_on(&c, "auto");
      ran = td_cudnn_attention_calls() - before;
      int64_t want = c.T == 1 ? 0 : 4;
      CHECK(ran == want, "attention T%lld D%lld: cuDNN ran %lld of the calls, expected %lld",
            (long long)c.T, (long long)c.D, (long long)ran, (long long)want);
    }
}

/* A target outside the vocabulary is an input error the CPU reports at once; the
 * GPU flags it and the next synchronising call fails with the reason. Run in a
 * child process (a fresh CUDA context: td_fail ends the process). */
static int bad_target_child(void) {
  td_device *gpu = td_device_open("cuda");
  float logits[2 * 5] = {0};
  int32_t t[2] = {1, 5};
  bufs b = {.d = gpu};
  float *dl = put(&b, logits, sizeof logits), *loss = put(&b, NULL, 8), *lse = put(&b, NULL, 8);
  int32_t *dt = put(&b, t, sizeof t);
  gpu->ops->cross_entropy_forward(gpu, loss, lse, dl, TD_F32, dt, 2, 5);
  gpu->ops->synchronize(gpu); /* must fail here */
  printf("synchronize returned\n");
  return 0;
}

static void test_bad_target(const char *self) {
  char cmd[4200], out[4096] = "";
  snprintf(cmd, sizeof cmd, "'%s' --bad-target-child 2>&1", self);
  FILE *p = popen(cmd, "r");
  size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
  out[n] = 0;
  int status = p ? pclose(p) : -1;
  CHECK(status != 0 && strstr(out, "outside the vocabulary") && !strstr(out, "synchronize returned"),
        "cross_entropy_forward with a target outside the vocabulary: the next synchronize fails "
        "with the reason (exit status %d, output: %.200s)", status, out);
}

/* ------------------------------------------------------------------ main */

/* TRIDENT_CUDA_TEST_ONLY=attention (a substring of the group names below) runs
 * only the groups that match. */
/* NCCL through trident's library interface (comm/ccl.h) at one rank, the only
 * count one GPU allows (NCCL refuses two ranks on one GPU): the bootstrap, a
 * collective of each kind and a send/recv pair in a group, on the GPU's stream,
 * each result exact; and event_query, which the communication stream's requests
 * use. Multi-rank logic is covered on the CPU by mpi_device_comm (the same
 * calls through the sealed device's MPI stand-in). */
static void test_nccl(void) {
  const td_ccl_ops *lib = td_ccl_for(g_gpu);
  char why[512] = "";
  CHECK(lib && !strcmp(lib->name, "nccl"), "the CUDA backend's collective library is NCCL");
  if (!lib || !lib->load(why, sizeof why)) {
    printf("SKIP nccl: %s\n", why);
    return;
  }
  char version[64];
  lib->version(version, sizeof version);
  printf("NCCL %s\n", version);
  unsigned char id[TD_CCL_ID_BYTES];
  lib->make_id(id);
  td_ccl *c = lib->create(g_gpu, NULL, 0, 1, id);
  const int64_t n = 100003;
  float *x = randf(n, -2, 2);
  float *got = alloc_host((size_t)n * sizeof(float));
  bufs b = {.d = g_gpu};
  float *dx = put(&b, x, (size_t)n * sizeof(float)), *dy = put(&b, NULL, (size_t)n * sizeof(float));
  lib->all_reduce(c, g_gpu, dx, dy, n, TD_F32, TD_OP_SUM);
  get(&b, got, dy, (size_t)n * sizeof(float));
  CHECK(same_bits(got, x, (size_t)n * sizeof(float)), "nccl all_reduce over one rank is the input");
  g_gpu->ops->fill(g_gpu, dy, TD_F32, n, 0.0f);
  lib->all_gather(c, g_gpu, dx, dy, n, TD_F32);
  get(&b, got, dy, (size_t)n * sizeof(float));
  CHECK(same_bits(got, x, (size_t)n * sizeof(float)), "nccl all_gather over one rank is the input");
  g_gpu->ops->fill(g_gpu, dy, TD_F32, n, 0.0f);
  lib->group_start(c);
  lib->send(c, g_gpu, dx, n, TD_F32, 0);
  lib->recv(c, g_gpu, dy, n, TD_F32, 0);
  lib->group_end(c);
  td_event *ev = g_gpu->ops->event_create(g_gpu);
  g_gpu->ops->event_record(g_gpu, ev);
  g_gpu->ops->event_synchronize(g_gpu, ev);
  CHECK(g_gpu->ops->event_query(g_gpu, ev) == 1, "event_query after event_synchronize is 1");
  get(&b, got, dy, (size_t)n * sizeof(float));
  CHECK(same_bits(got, x, (size_t)n * sizeof(float)), "nccl send/recv to itself in a group");
  g_gpu->ops->event_destroy(g_gpu, ev);
  lib->destroy(c);
  release(&b);
  td_free(x), td_free(got);
}

static int want(const char *group) {
  const char *only = getenv("TRIDENT_CUDA_TEST_ONLY");
  return !only || !*only || strstr(group, only) != NULL;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--bad-target-child")) return bad_target_child();
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    printf("SKIP: no CUDA device visible (%s): the CUDA backend cannot be tested here\n",
           e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 77;
  }
  if (!td_device_available("cuda")) {
    printf("SKIP: the CUDA backend reports no usable device\n");
    return 77;
  }
  g_cpu = tst_device();
  g_gpu = td_device_open("cuda");
  char name[256];
  td_device_describe(g_gpu, name, sizeof name);
  printf("CPU backend vs %s\n", name);
  CHECK(!strcmp(td_device_resolve("auto"), "cuda"), "auto resolves to cuda on a machine with a GPU");
  static const struct {
    const char *name;
    void (*fn)(void);
  } groups[] = {{"memory", test_memory},         {"cast", test_cast},
                {"add_scale", test_add_scale},   {"dropout", test_dropout},
                {"gelu", test_gelu},             {"gelu_bias", test_gelu_bias},
                {"bias_backward", test_bias_backward},
                {"layernorm", test_layernorm},   {"embedding", test_embedding},
                {"cross_entropy", test_cross_entropy},
                {"cross_entropy_bf16_logits", test_cross_entropy_bf16_logits},
                {"combine", test_combine_and_masked_sum}, {"adamw", test_adamw},
                {"adamw_runs", test_adamw_runs},
                {"reductions", test_reductions}, {"matmul", test_matmul},
                {"linear_fused", test_linear_fused},
                {"attention", test_attention},   {"nccl", test_nccl},
                {"attention_cudnn", test_attention_cudnn}};
  for (size_t i = 0; i < sizeof groups / sizeof *groups; i++)
    if (want(groups[i].name)) groups[i].fn();
  if (want("cross_entropy")) test_bad_target(argv[0]);
  td_device_close(g_gpu);
  return tst_finish();
}
