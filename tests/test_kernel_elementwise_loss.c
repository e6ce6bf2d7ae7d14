/* Elementwise kernels II: softmax cross-entropy (forward, backward in place,
 * vocab 50304), embedding forward / backward with ids outside this rank's
 * vocabulary range, AdamW, masked_sum; against naive double references, the
 * cross-entropy and embedding gradients' references against central finite
 * differences of the double loss, and 1 vs 2 threads (CPU only).
 * Runs on the device TRIDENT_TEST_DEVICE names (cpu, sealed, cuda; tst_device):
 * inputs are made on the host, copied to device memory for each op, and its
 * results copied back to be checked on the host. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "base/mem.h"
#include "base/rng.h"
#include "check.h"

#define OPS (tst_device()->ops)
#define DEV tst_device()

static float *falloc(int64_t n) { return td_malloc((size_t)(n > 0 ? n : 1) * sizeof(float)); }
static double *dalloc(int64_t n) { return td_malloc((size_t)(n > 0 ? n : 1) * sizeof(double)); }

/* Device copies of n host elements (zeroed device memory when h is NULL), and
 * device results back to the host: ops see only device memory, the host reads
 * only its own. */
static int32_t *iput(const int32_t *h, int64_t n) {
  return tst_put(h, (size_t)n * sizeof(int32_t));
}

static int32_t *random_ids(int64_t n, int64_t below, uint64_t stream) {
  int32_t *ids = td_malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
  for (int64_t i = 0; i < n; i++)
    ids[i] = (int32_t)(td_rng_u32(tst_seed(), stream, (uint64_t)i) % (uint64_t)below);
  return ids;
}

/* ------------------------------------------------------------- cross-entropy */

/* lse of one row and the loss lse - x[t], in double */
static double xent_ref(const double *x, int64_t V, int32_t t, double *lse) {
  double mx = -INFINITY, s = 0;
  for (int64_t j = 0; j < V; j++) mx = fmax(mx, x[j]);
  for (int64_t j = 0; j < V; j++) s += exp(x[j] - mx);
  *lse = mx + log(s);
  return *lse - x[t];
}

/* d(dloss * loss)/dx = (softmax(x) - onehot(t)) dloss */
static void xent_grad_ref(const double *x, int64_t V, int32_t t, double dloss, double *dx) {
  double lse;
  xent_ref(x, V, t, &lse);
  for (int64_t j = 0; j < V; j++) dx[j] = (exp(x[j] - lse) - (j == t)) * dloss;
}

static void test_xent_fd(void) {
  enum { V = 9 };
  double x[V], g[V], worst = 0, scale = 0, h = 1e-6, lse;
  float f[V];
  tst_fill_normal(f, V, 500, 2.0f);
  for (int j = 0; j < V; j++) x[j] = f[j];
  xent_grad_ref(x, V, 4, 0.7, g);
  for (int j = 0; j < V; j++) {
    double keep = x[j];
    x[j] = keep + h;
    double lp = 0.7 * xent_ref(x, V, 4, &lse);
    x[j] = keep - h;
    double lm = 0.7 * xent_ref(x, V, 4, &lse);
    x[j] = keep;
    worst = fmax(worst, fabs((lp - lm) / (2 * h) - g[j]));
    scale = fmax(scale, fabs(g[j]));
  }
  CHECK(worst / scale < 1e-7, "cross-entropy reference gradient vs finite differences: %.2g",
        worst / scale);
}

/* Error of dlogits in two parts: the non-target entries p_j dloss relative to
 * the largest of them, and the target entries (p_t - 1) dloss relative to max
 * dloss (p_t - 1 loses digits when p_t ~ 1: lse is given in fp32). */
static double xent_grad_err(const float *g, const double *ref, const int32_t *t,
                            const float *dloss, int64_t N, int64_t V) {
  double num = 0, den = 0, tnum = 0, tden = 0;
  for (int64_t r = 0; r < N; r++) {
    for (int64_t j = 0; j < V; j++) {
      double e = fabs(g[r * V + j] - ref[r * V + j]);
      if (j == t[r]) {
        tnum = fmax(tnum, e);
      } else {
        num = fmax(num, e);
        den = fmax(den, fabs(ref[r * V + j]));
      }
    }
    tden = fmax(tden, dloss[r]);
  }
  return fmax(den > 0 ? num / den : num, tden > 0 ? tnum / tden : tnum);
}

/* Rows: random logits (std 3), one row shifted by +60 (large logits must not
 * overflow), dloss with zeros (the loss mask). Backward runs in place. */
static void test_xent(int64_t N, int64_t V, uint64_t s) {
  int64_t n = N * V;
  float *x = falloc(n), *g = falloc(n), *loss = falloc(N), *lse = falloc(N), *dloss = falloc(N);
  double *xd = dalloc(V), *lref = dalloc(N), *sref = dalloc(N), *gref = dalloc(n);
  int32_t *t = random_ids(N, V, s);
  tst_fill_normal(x, n, s + 1, 3.0f);
  for (int64_t j = 0; j < V; j++) x[(N - 1) * V + j] += 60.0f;
  tst_fill_uniform(dloss, N, s + 2, 0.0f, 1.0f);
  if (N > 1) dloss[0] = 0.0f;
  for (int64_t r = 0; r < N; r++) {
    for (int64_t j = 0; j < V; j++) xd[j] = x[r * V + j];
    lref[r] = xent_ref(xd, V, t[r], &sref[r]);
    xent_grad_ref(xd, V, t[r], dloss[r], gref + r * V);
  }
  float *x_d = tst_putf(x, n), *dloss_d = tst_putf(dloss, N), *loss_d = tst_putf(NULL, N);
  float *lse_d = tst_putf(NULL, N), *g_d = tst_putf(NULL, n);
  int32_t *t_d = iput(t, N);
  OPS->cross_entropy_forward(DEV, loss_d, lse_d, x_d, TD_F32, t_d, N, V);
  tst_getf(loss, loss_d, N), tst_getf(lse, lse_d, N);
  double el = tst_rel_err(loss, lref, N), es = tst_rel_err(lse, sref, N);
  CHECK(el < 1e-5 && es < 1e-5, "cross-entropy forward %lldx%lld: rel err loss %.2g lse %.2g",
        (long long)N, (long long)V, el, es);
  OPS->cross_entropy_backward(DEV, g_d, TD_F32, x_d, TD_F32, lse_d, t_d, dloss_d, N, V, 0);
  tst_getf(g, g_d, n);
  double worst = xent_grad_err(g, gref, t, dloss, N, V);
  /* bf16 dlogits: each the fp32 gradient rounded as cast rounds it */
  uint16_t *g16 = td_malloc((size_t)n * 2), *g16_d = tst_put(NULL, (size_t)n * 2);
  OPS->cross_entropy_backward(DEV, g16_d, TD_BF16, x_d, TD_F32, lse_d, t_d, dloss_d, N, V, 0);
  tst_get(g16, g16_d, (size_t)n * 2);
  int64_t off = 0;
  for (int64_t i = 0; i < n; i++) off += g16[i] != td_f32_to_bf16(g[i]);
  CHECK(off == 0, "cross-entropy backward %lldx%lld to bf16: %lld elements differ from the fp32 "
        "gradient rounded", (long long)N, (long long)V, (long long)off);
  tst_release(g16_d), td_free(g16);
  /* dlogits aliases logits */
  OPS->cross_entropy_backward(DEV, x_d, TD_F32, x_d, TD_F32, lse_d, t_d, dloss_d, N, V, 0);
  tst_getf(x, x_d, n); /* the host logits are done with: x now holds the in-place gradient */
  CHECK(worst < 1e-5 && memcmp(x, g, (size_t)n * 4) == 0,
        "cross-entropy backward %lldx%lld: rel err %.2g, in place equal", (long long)N,
        (long long)V, worst);
  tst_release(x_d), tst_release(dloss_d), tst_release(loss_d), tst_release(lse_d);
  tst_release(g_d), tst_release(t_d);
  td_free(x), td_free(g), td_free(loss), td_free(lse), td_free(dloss), td_free(xd);
  td_free(lref), td_free(sref), td_free(gref), td_free(t);
}

/* bf16 logits (the step's under bf16): every result equals the fp32 path's on
 * the same values widened (the loads are exact, the math is the fp32 path's),
 * and the bf16 gradient written in place over the logits is the fp32 gradient
 * rounded as cast rounds it. The slice's pieces are checked from vocab_start v0. */
static void test_xent_bf16(int64_t N, int64_t V, int64_t v0, uint64_t s) {
  int64_t n = N * V;
  float *x = falloc(n), *g = falloc(n), *g2 = falloc(n), *dloss = falloc(N);
  float *out[8];
  for (int i = 0; i < 8; i++) out[i] = falloc(N);
  uint16_t *x16 = td_malloc((size_t)n * 2), *g16 = td_malloc((size_t)n * 2);
  int32_t *t = random_ids(N, V + v0, s); /* some targets outside the slice */
  tst_fill_normal(x, n, s + 1, 3.0f);
  for (int64_t i = 0; i < n; i++) x16[i] = td_f32_to_bf16(x[i]), x[i] = td_bf16_to_f32(x16[i]);
  tst_fill_uniform(dloss, N, s + 2, 0.0f, 1.0f);
  float *x_d = tst_putf(x, n), *dloss_d = tst_putf(dloss, N), *g_d = tst_putf(NULL, n);
  uint16_t *x16_d = tst_put(x16, (size_t)n * 2);
  int32_t *t_d = iput(t, N);
  float *o_d[4];
  for (int i = 0; i < 4; i++) o_d[i] = tst_putf(NULL, N);
  OPS->cross_entropy_slice(DEV, o_d[0], o_d[1], x_d, TD_F32, t_d, N, V, v0);
  OPS->cross_entropy_slice(DEV, o_d[2], o_d[3], x16_d, TD_BF16, t_d, N, V, v0);
  for (int i = 0; i < 4; i++) tst_getf(out[i], o_d[i], N);
  int same = memcmp(out[0], out[2], (size_t)N * 4) == 0 && memcmp(out[1], out[3], (size_t)N * 4) == 0;
  OPS->cross_entropy_backward(DEV, g_d, TD_F32, x_d, TD_F32, o_d[0], t_d, dloss_d, N, V, v0);
  tst_getf(g, g_d, n);
  OPS->cross_entropy_backward(DEV, g_d, TD_F32, x16_d, TD_BF16, o_d[0], t_d, dloss_d, N, V, v0);
  tst_getf(g2, g_d, n);
  same = same && memcmp(g, g2, (size_t)n * 4) == 0;
  OPS->cross_entropy_backward(DEV, x16_d, TD_BF16, x16_d, TD_BF16, o_d[0], t_d, dloss_d, N, V, v0);
  tst_get(g16, x16_d, (size_t)n * 2);
  int64_t off = 0;
  for (int64_t i = 0; i < n; i++) off += g16[i] != td_f32_to_bf16(g[i]);
  if (v0 == 0) { /* the whole vocabulary: the forward too (targets all inside) */
    for (int64_t r = 0; r < N; r++) t[r] %= (int32_t)V;
    tst_release(t_d), t_d = iput(t, N);
    tst_release(x16_d), x16_d = tst_put(x16, (size_t)n * 2);
    OPS->cross_entropy_forward(DEV, o_d[0], o_d[1], x_d, TD_F32, t_d, N, V);
    OPS->cross_entropy_forward(DEV, o_d[2], o_d[3], x16_d, TD_BF16, t_d, N, V);
    for (int i = 0; i < 4; i++) tst_getf(out[4 + i], o_d[i], N);
    same = same && memcmp(out[4], out[6], (size_t)N * 4) == 0 &&
           memcmp(out[5], out[7], (size_t)N * 4) == 0;
  }
  CHECK(same && off == 0,
        "cross-entropy of bf16 logits %lldx%lld from %lld: %s the fp32 path's on the widened "
        "values; in-place bf16 gradient: %lld elements differ from the fp32 one rounded",
        (long long)N, (long long)V, (long long)v0, same ? "equal to" : "NOT equal to", (long long)off);
  for (int i = 0; i < 4; i++) tst_release(o_d[i]);
  tst_release(x_d), tst_release(dloss_d), tst_release(g_d), tst_release(x16_d), tst_release(t_d);
  for (int i = 0; i < 8; i++) td_free(out[i]);
  td_free(x), td_free(g), td_free(g2), td_free(dloss), td_free(x16), td_free(g16), td_free(t);
}

/* cross_entropy_fused (in place over the logits, as the training step runs it)
 * gives cross_entropy_forward's losses and lse and cross_entropy_backward's
 * dlogits bit for bit, for fp32 and bf16 logits. */
static void test_xent_fused(int64_t N, int64_t V, td_dtype dt, uint64_t s) {
  const int64_t n = N * V;
  const size_t es = td_dtype_size(dt);
  float *x = falloc(n), *dloss = falloc(N), *o[4];
  for (int i = 0; i < 4; i++) o[i] = falloc(N);
  char *g[2] = {td_malloc((size_t)n * es), td_malloc((size_t)n * es)};
  int32_t *t = random_ids(N, V, s);
  tst_fill_normal(x, n, s + 1, 3.0f);
  tst_fill_uniform(dloss, N, s + 2, 0.0f, 1.0f);
  void *host = x;
  uint16_t *x16 = NULL;
  if (dt == TD_BF16) {
    x16 = td_malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) x16[i] = td_f32_to_bf16(x[i]);
    host = x16;
  }
  int32_t *t_d = iput(t, N);
  float *dloss_d = tst_putf(dloss, N), *od[4];
  for (int i = 0; i < 4; i++) od[i] = tst_putf(NULL, N);
  void *a_d = tst_put(host, (size_t)n * es), *b_d = tst_put(host, (size_t)n * es);
  OPS->cross_entropy_forward(DEV, od[0], od[1], a_d, dt, t_d, N, V);
  OPS->cross_entropy_backward(DEV, a_d, dt, a_d, dt, od[1], t_d, dloss_d, N, V, 0);
  OPS->cross_entropy_fused(DEV, od[2], od[3], b_d, dt, b_d, dt, t_d, dloss_d, N, V);
  for (int i = 0; i < 4; i++) tst_getf(o[i], od[i], N);
  tst_get(g[0], a_d, (size_t)n * es), tst_get(g[1], b_d, (size_t)n * es);
  CHECK(!memcmp(o[0], o[2], (size_t)N * 4) && !memcmp(o[1], o[3], (size_t)N * 4) &&
            !memcmp(g[0], g[1], (size_t)n * es),
        "cross_entropy_fused %lldx%lld %s == forward then backward, bit for bit (in place)",
        (long long)N, (long long)V, td_dtype_name(dt));
  for (int i = 0; i < 4; i++) tst_release(od[i]), td_free(o[i]);
  tst_release(a_d), tst_release(b_d), tst_release(t_d), tst_release(dloss_d);
  td_free(x), td_free(dloss), td_free(g[0]), td_free(g[1]), td_free(t), td_free(x16);
}

/* Vocabulary-parallel cross-entropy: the vocabulary in `parts` slices (the last
 * one shorter when parts does not divide V); the slices' lse and target logits
 * combine (logsumexp of the lse's, sum of the target logits) into the loss of the
 * whole row, and each slice's backward with the whole row's lse is its columns
 * of the whole gradient. */
static void test_xent_slices(int64_t N, int64_t V, int parts, uint64_t s) {
  float *x = falloc(N * V), *dloss = falloc(N), *slice = falloc(N * V), *g = falloc(N * V);
  float *lse = falloc(N), *tl = falloc(N), *lse_all = falloc(N * parts), *tl_sum = falloc(N);
  double *xd = dalloc(V), *lref = dalloc(N), *sref = dalloc(N), *gref = dalloc(N * V);
  float *glse = falloc(N);
  int32_t *t = random_ids(N, V, s);
  tst_fill_normal(x, N * V, s + 1, 3.0f);
  tst_fill_uniform(dloss, N, s + 2, 0.0f, 1.0f);
  for (int64_t r = 0; r < N; r++) {
    for (int64_t j = 0; j < V; j++) xd[j] = x[r * V + j];
    lref[r] = xent_ref(xd, V, t[r], &sref[r]);
    xent_grad_ref(xd, V, t[r], dloss[r], gref + r * V);
    tl_sum[r] = 0;
  }
  /* Each slice is one rank's: made on the host, its pieces copied back and
   * gathered there (the ranks' collective). */
  int64_t width = (V + parts - 1) / parts;
  int32_t *t_d = iput(t, N);
  float *lse_d = tst_putf(NULL, N), *tl_d = tst_putf(NULL, N);
  for (int p = 0; p < parts; p++) {
    int64_t v0 = p * width, w = V - v0 < width ? V - v0 : width;
    for (int64_t r = 0; r < N; r++) memcpy(slice + r * w, x + r * V + v0, (size_t)w * 4);
    float *slice_d = tst_putf(slice, N * w);
    OPS->cross_entropy_slice(DEV, lse_d, tl_d, slice_d, TD_F32, t_d, N, w, v0);
    tst_release(slice_d);
    tst_getf(lse, lse_d, N), tst_getf(tl, tl_d, N);
    for (int64_t r = 0; r < N; r++) lse_all[p * N + r] = lse[r], tl_sum[r] += tl[r];
  }
  float *loss = falloc(N);
  float *lse_all_d = tst_putf(lse_all, N * parts), *tl_sum_d = tst_putf(tl_sum, N);
  float *glse_d = tst_putf(NULL, N), *loss_d = tst_putf(NULL, N), *dloss_d = tst_putf(dloss, N);
  OPS->cross_entropy_combine(DEV, glse_d, loss_d, lse_all_d, tl_sum_d, N, parts);
  tst_getf(loss, loss_d, N), tst_getf(glse, glse_d, N);
  double el = tst_rel_err(loss, lref, N), es = tst_rel_err(glse, sref, N);
  CHECK(el < 1e-5 && es < 1e-5, "cross-entropy over %d vocabulary slices %lldx%lld: rel err loss %.2g lse %.2g",
        parts, (long long)N, (long long)V, el, es);
  for (int p = 0; p < parts; p++) {
    int64_t v0 = p * width, w = V - v0 < width ? V - v0 : width;
    for (int64_t r = 0; r < N; r++) memcpy(slice + r * w, x + r * V + v0, (size_t)w * 4);
    float *slice_d = tst_putf(slice, N * w);
    OPS->cross_entropy_backward(DEV, slice_d, TD_F32, slice_d, TD_F32, glse_d, t_d, dloss_d, N, w,
                                v0);
    tst_getf(slice, slice_d, N * w);
    tst_release(slice_d);
    for (int64_t r = 0; r < N; r++) memcpy(g + r * V + v0, slice + r * w, (size_t)w * 4);
  }
  double worst = xent_grad_err(g, gref, t, dloss, N, V);
  CHECK(worst < 1e-5, "cross-entropy backward over %d vocabulary slices %lldx%lld: rel err %.2g", parts,
        (long long)N, (long long)V, worst);
  tst_release(t_d), tst_release(lse_d), tst_release(tl_d), tst_release(lse_all_d);
  tst_release(tl_sum_d), tst_release(glse_d), tst_release(loss_d), tst_release(dloss_d);
  td_free(x), td_free(dloss), td_free(slice), td_free(g), td_free(lse), td_free(tl);
  td_free(lse_all), td_free(tl_sum), td_free(xd), td_free(lref), td_free(sref), td_free(gref);
  td_free(glse), td_free(t), td_free(loss);
}

/* ----------------------------------------------------------------- embedding */

/* The scatter-add reference is dL/dtable of L = sum dout * embedding(table), ids
 * partly outside [vstart, vstart + rows) */
typedef struct {
  int64_t n, rows, cols, vstart;
  const int32_t *ids;
  const double *dout, *table;
} emb_ctx;

static double emb_loss(const emb_ctx *k) {
  double L = 0;
  for (int64_t r = 0; r < k->n; r++)
    if (k->ids[r] >= k->vstart && k->ids[r] < k->vstart + k->rows)
      for (int64_t c = 0; c < k->cols; c++)
        L += k->dout[r * k->cols + c] * k->table[(k->ids[r] - k->vstart) * k->cols + c];
  return L;
}

static void test_embedding_fd(void) {
  enum { N = 6, ROWS = 4, COLS = 3 };
  const int32_t ids[N] = {5, 2, 9, 5, 3, 8}; /* vstart 2: 9 is outside, 5 repeats */
  double dout[N * COLS], table[ROWS * COLS] = {0}, ref[ROWS * COLS] = {0}, worst = 0, h = 1e-6;
  float f[N * COLS];
  tst_fill_normal(f, N * COLS, 530, 1.0f);
  for (int i = 0; i < N * COLS; i++) dout[i] = f[i];
  emb_ctx k = {N, ROWS, COLS, 2, ids, dout, table};
  for (int r = 0; r < N; r++)
    if (ids[r] >= 2 && ids[r] < 2 + ROWS)
      for (int c = 0; c < COLS; c++) ref[(ids[r] - 2) * COLS + c] += dout[r * COLS + c];
  for (int i = 0; i < ROWS * COLS; i++) {
    table[i] = h;
    double lp = emb_loss(&k);
    table[i] = -h;
    double lm = emb_loss(&k);
    table[i] = 0;
    worst = fmax(worst, fabs((lp - lm) / (2 * h) - ref[i]));
  }
  CHECK(worst < 1e-8, "embedding backward reference vs finite differences: %.2g", worst);
}

/* ids in [0, 3 rows_in_table): about a third fall in [vocab_start, vocab_start + rows) */
static void test_embedding(int64_t n, int64_t cols, uint64_t s) {
  const int64_t rows = 20, vstart = 20;
  float *table = falloc(rows * cols), *out = falloc(n * cols), *out0 = falloc(n * cols);
  float *dtab = falloc(rows * cols), *want = falloc(rows * cols), *dout = falloc(n * cols);
  int32_t *ids = random_ids(n, 3 * rows, s);
  tst_fill_normal(table, rows * cols, s + 1, 1.0f);
  tst_fill_normal(out0, n * cols, s + 2, 1.0f);
  int32_t *ids_d = iput(ids, n);
  float *table_d = tst_putf(table, rows * cols), *out_d = tst_putf(out0, n * cols);
  OPS->embedding_forward(DEV, out_d, ids_d, n, table_d, vstart, rows, cols, 0);
  tst_getf(out, out_d, n * cols);
  tst_release(out_d);
  int64_t wrong = 0;
  for (int64_t r = 0; r < n; r++)
    for (int64_t c = 0; c < cols; c++) {
      int in = ids[r] >= vstart && ids[r] < vstart + rows;
      wrong += out[r * cols + c] != (in ? table[(ids[r] - vstart) * cols + c] : 0.0f);
    }
  out_d = tst_putf(out0, n * cols);
  OPS->embedding_forward(DEV, out_d, ids_d, n, table_d, vstart, rows, cols, 1);
  tst_getf(out, out_d, n * cols);
  for (int64_t r = 0; r < n; r++)
    for (int64_t c = 0; c < cols; c++) {
      int in = ids[r] >= vstart && ids[r] < vstart + rows;
      float w = out0[r * cols + c] + (in ? table[(ids[r] - vstart) * cols + c] : 0.0f);
      wrong += out[r * cols + c] != w;
    }
  CHECK(wrong == 0, "embedding forward n=%lld cols=%lld: out of range ids give zeros / add nothing",
        (long long)n, (long long)cols);
  /* backward: the same float additions in row order, so bitwise equal */
  tst_fill_normal(dout, n * cols, s + 3, 1.0f);
  tst_fill_normal(dtab, rows * cols, s + 4, 1.0f);
  memcpy(want, dtab, (size_t)(rows * cols) * 4);
  for (int64_t r = 0; r < n; r++)
    if (ids[r] >= vstart && ids[r] < vstart + rows)
      for (int64_t c = 0; c < cols; c++) want[(ids[r] - vstart) * cols + c] += dout[r * cols + c];
  float *dtab_d = tst_putf(dtab, rows * cols), *dout_d = tst_putf(dout, n * cols);
  OPS->embedding_backward(DEV, dtab_d, dout_d, ids_d, n, vstart, rows, cols);
  tst_getf(dtab, dtab_d, rows * cols);
  CHECK(memcmp(dtab, want, (size_t)(rows * cols) * 4) == 0,
        "embedding backward n=%lld cols=%lld: scatter-add in row order, out of range skipped",
        (long long)n, (long long)cols);
  tst_release(ids_d), tst_release(table_d), tst_release(out_d), tst_release(dtab_d);
  tst_release(dout_d);
  td_free(table), td_free(out), td_free(out0), td_free(dtab), td_free(want), td_free(dout);
  td_free(ids);
}

/* The CPU's OpenMP thread count (main runs it only on the CPU). */
static void test_embedding_threads(void) {
  const int64_t n = 500, cols = 771, rows = 7; /* many repeated ids */
  int saved = omp_get_max_threads();
  float *dout = falloc(n * cols), *dt[2] = {falloc(rows * cols), falloc(rows * cols)};
  int32_t *ids = random_ids(n, rows, 520);
  tst_fill_normal(dout, n * cols, 521, 1.0f);
  float *dout_d = tst_putf(dout, n * cols);
  int32_t *ids_d = iput(ids, n);
  for (int t = 0; t < 2; t++) {
    omp_set_num_threads(t + 1);
    float *dt_d = tst_putf(NULL, rows * cols); /* zeroed */
    OPS->embedding_backward(DEV, dt_d, dout_d, ids_d, n, 0, rows, cols);
    tst_getf(dt[t], dt_d, rows * cols);
    tst_release(dt_d);
  }
  omp_set_num_threads(saved);
  CHECK(memcmp(dt[0], dt[1], (size_t)(rows * cols) * 4) == 0,
        "embedding backward bitwise equal with 1 and 2 threads");
  tst_release(dout_d), tst_release(ids_d);
  td_free(dout), td_free(dt[0]), td_free(dt[1]), td_free(ids);
}

/* --------------------------------------------------------------------- adamw */

typedef struct {
  double lr, b1, b2, eps, wd, gs;
  int64_t step;
} adam_cfg;

/* One step on one element; returns the size of the step's terms,
 * lr (|wd p| + |mhat / (sqrt(vhat) + eps)|), which may cancel. */
static double adamw_ref(const adam_cfg *c, double *p, double g, double *m, double *v) {
  g *= c->gs;
  *m = c->b1 * *m + (1 - c->b1) * g;
  *v = c->b2 * *v + (1 - c->b2) * g * g;
  double mh = *m / (1 - pow(c->b1, (double)c->step)), vh = *v / (1 - pow(c->b2, (double)c->step));
  double decay = c->wd * *p, update = mh / (sqrt(vh) + c->eps);
  *p -= c->lr * (decay + update);
  return c->lr * (fabs(decay) + fabs(update));
}

/* The change of the parameters and the new m are compared relative to the size
 * of their terms, which may cancel (lr 1, so that the change is not lost in the
 * parameter's own rounding). */
static void test_adamw(int64_t n, int64_t step, uint64_t s) {
  const adam_cfg c = {1.0, 0.9, 0.95, 1e-8, 0.1, 0.5, step};
  float *p = falloc(n), *g = falloc(n), *m = falloc(n), *v = falloc(n), *p0 = falloc(n);
  double *pr = dalloc(n), *mr = dalloc(n), *vr = dalloc(n), *dpr = dalloc(n);
  tst_fill_normal(p, n, s, 1.0f);
  tst_fill_normal(g, n, s + 1, 1.0f);
  tst_fill_normal(m, n, s + 2, 0.1f);
  tst_fill_uniform(v, n, s + 3, 0.0f, 0.1f);
  double step_size = 0, num = 0, m_size = 0, m_num = 0;
  for (int64_t i = 0; i < n; i++) {
    pr[i] = p[i], mr[i] = m[i], vr[i] = v[i];
    m_size = fmax(m_size, c.b1 * fabs(m[i]) + (1 - c.b1) * c.gs * fabs(g[i]));
    step_size = fmax(step_size, adamw_ref(&c, &pr[i], g[i], &mr[i], &vr[i]));
    dpr[i] = pr[i] - p[i];
    p0[i] = p[i];
  }
  float *p_d = tst_putf(p, n), *g_d = tst_putf(g, n), *m_d = tst_putf(m, n), *v_d = tst_putf(v, n);
  OPS->adamw(DEV, p_d, g_d, m_d, v_d, n, (float)c.lr, (float)c.b1, (float)c.b2, (float)c.eps,
             (float)c.wd, (float)c.gs, step, NULL, TD_F32);
  tst_getf(p, p_d, n), tst_getf(m, m_d, n), tst_getf(v, v_d, n);
  tst_release(p_d), tst_release(g_d), tst_release(m_d), tst_release(v_d);
  for (int64_t i = 0; i < n; i++) {
    num = fmax(num, fabs((double)p[i] - p0[i] - dpr[i]));
    m_num = fmax(m_num, fabs(m[i] - mr[i]));
  }
  double ep = num / step_size, em = m_num / m_size, ev = tst_rel_err(v, vr, n);
  CHECK(ep < 1e-5 && em < 1e-5 && ev < 1e-5,
        "adamw n=%lld step=%lld: rel err param change %.2g m %.2g v %.2g", (long long)n,
        (long long)step, ep, em, ev);
  td_free(p), td_free(g), td_free(m), td_free(v), td_free(p0);
  td_free(pr), td_free(mr), td_free(vr), td_free(dpr);
}

/* adamw with a weight copy (bf16, fp16): the same parameters, moments and bits as
 * without, and the copy is what cast makes of the new parameters, bit for bit. */
static void test_adamw_copy(int64_t n, td_dtype cd, uint64_t s) {
  float *p[2], *m[2], *v[2], *g = falloc(n);
  size_t es = td_dtype_size(cd), cb = (size_t)n * es;
  void *copy_d = tst_put(NULL, cb), *want_d = tst_put(NULL, cb);
  void *copy = td_malloc(cb ? cb : 1), *want = td_malloc(cb ? cb : 1);
  tst_fill_normal(g, n, s + 1, 1.0f);
  float *g_d = tst_putf(g, n), *p0_d = NULL;
  for (int r = 0; r < 2; r++) {
    p[r] = falloc(n), m[r] = falloc(n), v[r] = falloc(n);
    tst_fill_normal(p[r], n, s, 1.0f);
    tst_fill_normal(m[r], n, s + 2, 0.1f);
    tst_fill_uniform(v[r], n, s + 3, 0.0f, 0.1f);
    float *p_d = tst_putf(p[r], n), *m_d = tst_putf(m[r], n), *v_d = tst_putf(v[r], n);
    OPS->adamw(DEV, p_d, g_d, m_d, v_d, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 3,
               r ? copy_d : NULL, cd);
    tst_getf(p[r], p_d, n), tst_getf(m[r], m_d, n), tst_getf(v[r], v_d, n);
    tst_release(m_d), tst_release(v_d);
    if (r) tst_release(p_d);
    else p0_d = p_d; /* the parameters without a copy: cast's input below */
  }
  OPS->cast(DEV, want_d, cd, p0_d, TD_F32, n);
  tst_get(copy, copy_d, cb), tst_get(want, want_d, cb);
  size_t b = (size_t)n * sizeof(float);
  CHECK(!memcmp(p[0], p[1], b) && !memcmp(m[0], m[1], b) && !memcmp(v[0], v[1], b) &&
            !memcmp(copy, want, cb),
        "adamw n=%lld with a %s copy: parameters, moments unchanged; copy == cast bit for bit",
        (long long)n, td_dtype_name(cd));
  for (int r = 0; r < 2; r++) td_free(p[r]), td_free(m[r]), td_free(v[r]);
  tst_release(g_d), tst_release(p0_d), tst_release(copy_d), tst_release(want_d);
  td_free(g), td_free(copy), td_free(want);
}

/* masked_sum against a double sum: the loss of a micro-batch under its mask. */
static void test_masked_sum(int64_t n, uint64_t seed) {
  float *x = falloc(n), *mask = falloc(n);
  tst_fill_uniform(x, n, seed, -3.0f, 3.0f);
  double ref = 0, mag = 0;
  for (int64_t i = 0; i < n; i++) {
    mask[i] = (float)(i % 3 != 1);
    ref += (double)x[i] * mask[i], mag += fabs((double)x[i] * mask[i]);
  }
  float *x_d = tst_putf(x, n), *mask_d = tst_putf(mask, n);
  double got, *got_d = tst_put(NULL, sizeof(double)); /* the sum stays on the device until read */
  OPS->masked_sum(DEV, got_d, x_d, mask_d, n);
  tst_get(&got, got_d, sizeof got);
  tst_release(x_d), tst_release(mask_d), tst_release(got_d);
  double err = fabs(got - ref) / (mag > 0 ? mag : 1);
  CHECK(err < 1e-12, "masked_sum n=%lld: %.17g vs %.17g (err %.2g of the magnitude)", (long long)n,
        got, ref, err);
  td_free(x), td_free(mask);
}

int main(void) {
  static const int64_t ms[] = {0, 1, 7, 1000, 65537};
  for (size_t i = 0; i < sizeof ms / sizeof *ms; i++) test_masked_sum(ms[i], 900 + i);
  test_xent_fd();
  static const int64_t xs[][2] = {{1, 1}, {7, 5}, {33, 17}, {5, 771}, {70, 1000}, {3, 50304}};
  for (size_t i = 0; i < sizeof xs / sizeof *xs; i++) test_xent(xs[i][0], xs[i][1], 600 + 10 * i);
  test_xent_bf16(3, 1001, 0, 690);
  test_xent_fused(5, 50257, TD_BF16, 680);
  test_xent_fused(7, 333, TD_F32, 682);
  test_xent_fused(1, 1, TD_F32, 684);
  test_xent_bf16(2, 50257, 0, 692);
  test_xent_bf16(6, 333, 17, 694);
  test_xent_slices(7, 203, 2, 700);
  test_xent_slices(5, 1000, 4, 710);
  test_xent_slices(3, 97, 3, 720);
  static const int64_t es[][2] = {{1, 1}, {7, 5}, {33, 17}, {65, 771}};
  for (size_t i = 0; i < sizeof es / sizeof *es; i++)
    test_embedding(es[i][0], es[i][1], 700 + 10 * i);
  test_embedding_fd();
  if (tst_device_is_cpu()) test_embedding_threads();
  static const int64_t as[] = {1, 17, 771, 100003};
  for (size_t i = 0; i < sizeof as / sizeof *as; i++) {
    test_adamw(as[i], 1, 800 + 10 * i);
    test_adamw(as[i], 10, 805 + 10 * i);
    test_adamw_copy(as[i], TD_BF16, 900 + 10 * i);
    test_adamw_copy(as[i], TD_F16, 905 + 10 * i);
  }
  return tst_finish();
}
