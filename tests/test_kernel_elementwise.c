/* Elementwise kernels I: layernorm, gelu (erf and tanh), bias_backward, add,
 * scale, dropout, sum_squares, count_zeros against naive double references on
 * random inputs at sizes that are not multiples of 16; every backward's double
 * reference against central finite differences of the double forward; alloc's
 * zeroed memory; on the CPU, thread-count independence (1 vs 2 threads,
 * bitwise) of the reductions and of dropout.
 * Runs on the device TRIDENT_TEST_DEVICE names (cpu, sealed, cuda; tst_device):
 * inputs are made on the host, copied to device memory for the kernels, and the
 * results copied back to be checked; the host never touches device memory.
 * (Loss, embedding, adamw: test_kernel_elementwise_loss.c; cast and fill:
 * test_kernel_elementwise_cast.c.) */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/mem.h"
#include "base/rng.h"
#include "check.h"

#define OPS (tst_device()->ops)
#define DEV tst_device()

static float *falloc(int64_t n) { return td_malloc((size_t)(n > 0 ? n : 1) * sizeof(float)); }
static double *dalloc(int64_t n) { return td_malloc((size_t)(n > 0 ? n : 1) * sizeof(double)); }

/* Kernels get only device memory (tst_putf, tst_getf): on a GPU, or the sealed
 * test device, the host can neither read nor write it. dset reloads an existing
 * buffer (before an in-place op). */
static void dset(float *dev, const float *host, int64_t n) {
  OPS->copy_h2d(DEV, dev, host, (size_t)n * sizeof(float));
}

/* bf16 output vs a double reference: within one bf16 ulp of RNE(ref) (or a
 * negligible absolute error, where the sign of a tiny value may flip, and
 * below 1e-30, where fp32 results are underflow). */
static int64_t bf16_far(const uint16_t *got, const double *ref, int64_t n) {
  double scale = 0;
  for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(ref[i]));
  int64_t far = 0;
  for (int64_t i = 0; i < n; i++) {
    int diff = abs((int)got[i] - (int)td_f32_to_bf16((float)ref[i]));
    if (diff > 1 && fabs(td_bf16_to_f32(got[i]) - ref[i]) > 1e-6 * scale + 1e-30) far++;
  }
  return far;
}

/* Normwise relative error whose denominator is at least 1e-30: below that, fp32
 * results are underflow (a gelu of x << 0 on a short random input). */
static double rel_err_floor(const float *got, const double *ref, int64_t n) {
  double num = 0, den = 1e-30;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs(got[i] - ref[i]);
    if (!(d <= num)) num = d; /* NaN propagates */
    den = fmax(den, fabs(ref[i]));
  }
  return num / den;
}

static double bf16_rel_err(const uint16_t *got, const double *ref, int64_t n) {
  float *g = falloc(n);
  for (int64_t i = 0; i < n; i++) g[i] = td_bf16_to_f32(got[i]);
  double e = rel_err_floor(g, ref, n);
  td_free(g);
  return e;
}

/* ----------------------------------------------------------------- layernorm */

typedef struct {
  int64_t rows, cols;
  const double *x, *w, *b; /* the inputs, in double */
  double eps;
} ln_ref;

/* out = (x - mean) rstd w + b, rstd = 1 / sqrt(var + eps), biased var */
static void ln_forward_ref(const ln_ref *p, double *out, double *mean, double *rstd) {
  for (int64_t r = 0; r < p->rows; r++) {
    const double *x = p->x + r * p->cols;
    double m = 0, v = 0;
    for (int64_t c = 0; c < p->cols; c++) m += x[c];
    m /= (double)p->cols;
    for (int64_t c = 0; c < p->cols; c++) v += (x[c] - m) * (x[c] - m);
    double s = 1.0 / sqrt(v / (double)p->cols + p->eps);
    for (int64_t c = 0; c < p->cols; c++) out[r * p->cols + c] = (x[c] - m) * s * p->w[c] + p->b[c];
    if (mean) mean[r] = m, rstd[r] = s;
  }
}

/* Gradients of L = sum out * dout (no accumulation): dx, dw, db. */
static void ln_backward_ref(const ln_ref *p, const double *dout, double *dx, double *dw,
                            double *db) {
  int64_t C = p->cols;
  double *out = dalloc(p->rows * C), *mean = dalloc(p->rows), *rstd = dalloc(p->rows);
  ln_forward_ref(p, out, mean, rstd);
  for (int64_t c = 0; c < C; c++) dw[c] = db[c] = 0;
  for (int64_t r = 0; r < p->rows; r++) {
    const double *x = p->x + r * C, *dy = dout + r * C;
    double a = 0, bsum = 0;
    for (int64_t c = 0; c < C; c++) {
      double xhat = (x[c] - mean[r]) * rstd[r];
      a += dy[c] * p->w[c];
      bsum += dy[c] * p->w[c] * xhat;
      dw[c] += dy[c] * xhat;
      db[c] += dy[c];
    }
    for (int64_t c = 0; c < C; c++) {
      double xhat = (x[c] - mean[r]) * rstd[r];
      dx[r * C + c] = rstd[r] * (dy[c] * p->w[c] - a / C - xhat * bsum / C);
    }
  }
  td_free(out), td_free(mean), td_free(rstd);
}

static double ln_loss(const ln_ref *p, const double *dout) {
  double *out = dalloc(p->rows * p->cols), L = 0;
  ln_forward_ref(p, out, NULL, NULL);
  for (int64_t i = 0; i < p->rows * p->cols; i++) L += out[i] * dout[i];
  td_free(out);
  return L;
}

/* max |analytic - central difference| / max |analytic| over the entries of v */
static double fd_err(double *v, int64_t n, const double *analytic, double (*loss)(const void *),
                     const void *ctx) {
  double num = 0, den = 0, h = 1e-6;
  for (int64_t i = 0; i < n; i++) {
    double keep = v[i];
    v[i] = keep + h;
    double lp = loss(ctx);
    v[i] = keep - h;
    double lm = loss(ctx);
    v[i] = keep;
    num = fmax(num, fabs((lp - lm) / (2 * h) - analytic[i]));
    den = fmax(den, fabs(analytic[i]));
  }
  return num / den;
}

typedef struct {
  ln_ref *p;
  const double *dout;
} ln_ctx;
static double ln_loss_cb(const void *c) {
  const ln_ctx *k = c;
  return ln_loss(k->p, k->dout);
}

static void test_layernorm_fd(void) {
  int64_t R = 3, C = 7;
  double x[21], w[7], b[7], dout[21], dx[21], dw[7], db[7];
  float f[21];
  tst_fill_normal(f, 21, 100, 1.0f);
  for (int i = 0; i < 21; i++) x[i] = f[i] + 0.5;
  tst_fill_normal(f, 21, 101, 1.0f);
  for (int i = 0; i < 21; i++) dout[i] = f[i];
  tst_fill_normal(f, 14, 102, 1.0f);
  for (int i = 0; i < 7; i++) w[i] = 1 + f[i], b[i] = f[7 + i];
  ln_ref p = {R, C, x, w, b, 1e-5};
  ln_ctx ctx = {&p, dout};
  ln_backward_ref(&p, dout, dx, dw, db);
  double ex = fd_err(x, R * C, dx, ln_loss_cb, &ctx), ew = fd_err(w, C, dw, ln_loss_cb, &ctx);
  double eb = fd_err(b, C, db, ln_loss_cb, &ctx);
  CHECK(ex < 1e-7 && ew < 1e-7 && eb < 1e-7,
        "layernorm reference dx, dw, db vs finite differences: %.2g %.2g %.2g", ex, ew, eb);
}

static double *to_double(const float *f, int64_t n) {
  double *d = dalloc(n);
  for (int64_t i = 0; i < n; i++) d[i] = f[i];
  return d;
}

static void test_layernorm_forward(int64_t R, int64_t C, uint64_t s) {
  int64_t n = R * C;
  float *x = falloc(n), *w = falloc(C), *b = falloc(C), *out = falloc(n);
  float *mean = falloc(R), *rstd = falloc(R);
  uint16_t *out16 = td_malloc((size_t)n * 2 + 2);
  tst_fill_normal(x, n, s, 2.0f);
  for (int64_t i = 0; i < n; i++) x[i] += 3.0f;
  tst_fill_normal(w, C, s + 1, 1.0f);
  tst_fill_normal(b, C, s + 2, 1.0f);
  double *xd = to_double(x, n), *wd = to_double(w, C), *bd = to_double(b, C);
  double *ref = dalloc(n), *mref = dalloc(R), *rref = dalloc(R);
  ln_ref p = {R, C, xd, wd, bd, 1e-5};
  ln_forward_ref(&p, ref, mref, rref);
  /* _d: the device twins */
  float *x_d = tst_putf(x, n), *w_d = tst_putf(w, C), *b_d = tst_putf(b, C), *out_d = tst_putf(NULL, n);
  float *mean_d = tst_putf(NULL, R), *rstd_d = tst_putf(NULL, R);
  uint16_t *out16_d = tst_put(NULL, (size_t)n * 2);
  OPS->layernorm_forward(DEV, out_d, TD_F32, mean_d, rstd_d, x_d, w_d, b_d, R, C, 1e-5f);
  OPS->layernorm_forward(DEV, out16_d, TD_BF16, NULL, NULL, x_d, w_d, b_d, R, C, 1e-5f);
  tst_getf(out, out_d, n), tst_getf(mean, mean_d, R), tst_getf(rstd, rstd_d, R);
  tst_get(out16, out16_d, (size_t)n * 2);
  tst_release(x_d), tst_release(w_d), tst_release(b_d), tst_release(out_d);
  tst_release(mean_d), tst_release(rstd_d), tst_release(out16_d);
  double e_out = tst_rel_err(out, ref, n), e_m = tst_rel_err(mean, mref, R);
  double e_r = tst_rel_err(rstd, rref, R);
  CHECK(e_out < 1e-5 && e_m < 1e-5 && e_r < 1e-5,
        "layernorm forward %lldx%lld fp32: rel err out %.2g mean %.2g rstd %.2g", (long long)R,
        (long long)C, e_out, e_m, e_r);
  double e16 = bf16_rel_err(out16, ref, n);
  int64_t far = bf16_far(out16, ref, n);
  CHECK(e16 < 1e-2 && far == 0, "layernorm forward %lldx%lld bf16: rel err %.2g, %lld beyond 1 ulp",
        (long long)R, (long long)C, e16, (long long)far);
  td_free(x), td_free(w), td_free(b), td_free(out), td_free(mean), td_free(rstd), td_free(out16);
  td_free(xd), td_free(wd), td_free(bd), td_free(ref), td_free(mref), td_free(rref);
}

typedef struct {
  float *x, *w, *b, *dout, *mean, *rstd, *dx, *dw, *db;
} ln_bufs;

/* A layernorm backward case: the buffers on the host (h: the inputs and the
 * gradients' initial values, for the reference; ln_case_get_grads overwrites
 * the gradients with the kernel's) and their device twins (d), which the
 * kernels read and write. */
typedef struct {
  int64_t R, C;
  ln_bufs h, d;
} ln_case;

static ln_case ln_case_new(int64_t R, int64_t C, uint64_t s) {
  int64_t n = R * C;
  ln_case k = {R, C,
               {falloc(n), falloc(C), falloc(C), falloc(n), falloc(R), falloc(R), falloc(n),
                falloc(C), falloc(C)},
               {0}};
  ln_bufs *u = &k.h;
  tst_fill_normal(u->x, n, s, 1.0f);
  tst_fill_normal(u->w, C, s + 1, 1.0f);
  tst_fill_normal(u->b, C, s + 2, 1.0f);
  tst_fill_normal(u->dout, n, s + 3, 1.0f);
  tst_fill_normal(u->dx, n, s + 4, 1.0f);
  tst_fill_normal(u->dw, C, s + 5, 1.0f);
  tst_fill_normal(u->db, C, s + 6, 1.0f);
  k.d = (ln_bufs){tst_putf(u->x, n),  tst_putf(u->w, C),  tst_putf(u->b, C),  tst_putf(u->dout, n), tst_putf(NULL, R),
                  tst_putf(NULL, R),      tst_putf(u->dx, n), tst_putf(u->dw, C), tst_putf(u->db, C)};
  /* mean and rstd from the kernel, as training saves them for backward; the
   * host's copies feed the reference's error scale */
  float *tmp = tst_putf(NULL, n);
  OPS->layernorm_forward(DEV, tmp, TD_F32, k.d.mean, k.d.rstd, k.d.x, k.d.w, k.d.b, R, C, 1e-5f);
  tst_release(tmp);
  tst_getf(u->mean, k.d.mean, R), tst_getf(u->rstd, k.d.rstd, R);
  return k;
}

/* The kernel's dx, dw, db back into the host buffers. */
static void ln_case_get_grads(ln_case *k) {
  tst_getf(k->h.dx, k->d.dx, k->R * k->C), tst_getf(k->h.dw, k->d.dw, k->C), tst_getf(k->h.db, k->d.db, k->C);
}

static void ln_bufs_free(ln_bufs *u, void (*release)(void *)) {
  float *all[] = {u->x, u->w, u->b, u->dout, u->mean, u->rstd, u->dx, u->dw, u->db};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) release(all[i]);
}

static void ln_case_free(ln_case *k) {
  ln_bufs_free(&k->h, td_free), ln_bufs_free(&k->d, tst_release);
}

/* dx, dw, db accumulate onto random initial values */
static void test_layernorm_backward(int64_t R, int64_t C, uint64_t s) {
  int64_t n = R * C;
  ln_case k = ln_case_new(R, C, s);
  const ln_bufs u = k.h;
  double *xd = to_double(u.x, n), *wd = to_double(u.w, C), *bd = to_double(u.b, C);
  double *dyd = to_double(u.dout, n), *dx = dalloc(n), *dw = dalloc(C), *db = dalloc(C);
  ln_ref p = {R, C, xd, wd, bd, 1e-5};
  ln_backward_ref(&p, dyd, dx, dw, db);
  for (int64_t i = 0; i < n; i++) dx[i] += u.dx[i];
  for (int64_t c = 0; c < C; c++) dw[c] += u.dw[c], db[c] += u.db[c];
  /* dw and db are column sums over R rows that may cancel: measure them against
   * the sum of their terms' magnitudes, the scale of float summation error */
  double sw = 0, sb = 0;
  for (int64_t c = 0; c < C; c++) {
    double mw = fabs(u.dw[c]), mb = fabs(u.db[c]);
    for (int64_t r = 0; r < R; r++) {
      double xhat = ((double)u.x[r * C + c] - u.mean[r]) * u.rstd[r];
      mw += fabs(dyd[r * C + c] * xhat), mb += fabs(dyd[r * C + c]);
    }
    sw = fmax(sw, mw), sb = fmax(sb, mb);
  }
  const ln_bufs d = k.d;
  OPS->layernorm_backward(DEV, d.dx, d.dw, d.db, d.dout, d.x, d.w, d.mean, d.rstd, R, C);
  ln_case_get_grads(&k);
  double ex = tst_rel_err(u.dx, dx, n), ew = tst_err_over(u.dw, dw, C, sw);
  double eb = tst_err_over(u.db, db, C, sb);
  CHECK(ex < 1e-5 && ew < 1e-5 && eb < 1e-5,
        "layernorm backward %lldx%lld: rel err dx %.2g, dw %.2g db %.2g of sum |terms|", (long long)R,
        (long long)C, ex, ew, eb);
  ln_case_free(&k);
  td_free(xd), td_free(wd), td_free(bd), td_free(dyd), td_free(dx), td_free(dw), td_free(db);
}

/* ---------------------------------------------------------------------- gelu */

static double gelu_ref(double x, td_gelu_kind k) {
  if (k == TD_GELU_ERF) return 0.5 * x * erfc(-x / sqrt(2.0));
  /* 0.5 x (1 + tanh u) written as x sigmoid(2u): no cancellation for x << 0 */
  double u = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return x / (1.0 + exp(-2.0 * u));
}

static double gelu_grad_ref(double x, td_gelu_kind k) {
  if (k == TD_GELU_ERF) return 0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
  double c = sqrt(2.0 / M_PI), u = c * (x + 0.044715 * x * x * x);
  double s = 1.0 / (1.0 + exp(-2.0 * u)), du = c * (1 + 3 * 0.044715 * x * x);
  return s + x * s * (1 - s) * 2 * du;
}

static const char *gelu_name(td_gelu_kind k) { return k == TD_GELU_ERF ? "erf" : "tanh"; }

static void test_gelu_fd(td_gelu_kind k) {
  double worst = 0, h = 1e-5;
  for (double x = -8; x <= 8; x += 0.0625) {
    double fd = (gelu_ref(x + h, k) - gelu_ref(x - h, k)) / (2 * h);
    worst = fmax(worst, fabs(fd - gelu_grad_ref(x, k)));
  }
  CHECK(worst < 1e-8, "gelu %s reference derivative vs finite differences: max abs err %.2g",
        gelu_name(k), worst);
}

/* Elements off by more than the conditioning allows: gelu's relative condition
 * number grows like x^2 in the tails (the erf / exp argument carries a rounding
 * of x^2), and gelu' crosses zero, so the backward also gets an absolute
 * 2e-6 |dout| (the size of the rounding of Phi + x phi); below 1e-30: underflow. */
static int64_t count_far(const float *got, const double *ref, const float *x, const float *dout,
                         int64_t n) {
  int64_t far = 0;
  for (int64_t i = 0; i < n; i++) {
    double tol = 2e-6 * ((1.0 + (double)x[i] * x[i]) * fabs(ref[i]) + (dout ? fabs(dout[i]) : 0));
    if (!(fabs(got[i] - ref[i]) <= tol + 1e-30)) far++;
  }
  return far;
}

/* x: normal(0, 4); from 100 elements on, the last ones are the ends of the
 * range and special points */
static float *gelu_inputs(int64_t n, uint64_t s) {
  float *x = falloc(n);
  tst_fill_normal(x, n, s, 4.0f);
  const float special[] = {0.0f, -0.0f, 16.0f, -16.0f, 30.0f, -30.0f, 1e-20f, -1e-20f, -9.0f, 7.5f};
  for (int64_t i = 0; n >= 100 && i < 10; i++) x[n - 1 - i] = special[i];
  return x;
}

static void test_gelu(int64_t n, td_gelu_kind k, uint64_t s) {
  float *x = gelu_inputs(n, s), *out = falloc(n), *dout = falloc(n), *dx = falloc(n);
  uint16_t *out16 = td_malloc((size_t)n * 2 + 2);
  double *ref = dalloc(n), *dref = dalloc(n);
  tst_fill_normal(dout, n, s + 1, 1.0f);
  for (int64_t i = 0; i < n; i++) {
    ref[i] = gelu_ref(x[i], k);
    dref[i] = dout[i] * gelu_grad_ref(x[i], k);
  }
  float *x_d = tst_putf(x, n), *out_d = tst_putf(NULL, n), *dout_d = tst_putf(dout, n), *dx_d = tst_putf(NULL, n);
  uint16_t *out16_d = tst_put(NULL, (size_t)n * 2);
  OPS->gelu_forward(DEV, out_d, TD_F32, x_d, TD_F32, n, k);
  OPS->gelu_forward(DEV, out16_d, TD_BF16, x_d, TD_F32, n, k);
  OPS->gelu_backward(DEV, dx_d, TD_F32, NULL, dout_d, x_d, TD_F32, 1, n, k);
  tst_getf(out, out_d, n), tst_getf(dx, dx_d, n);
  tst_get(out16, out16_d, (size_t)n * 2);
  double ef = rel_err_floor(out, ref, n), eb = rel_err_floor(dx, dref, n);
  int64_t ff = count_far(out, ref, x, NULL, n), fb = count_far(dx, dref, x, dout, n);
  /* one element's "normwise" backward error is its own relative error, which is
   * unbounded where gelu' crosses zero (seed 1795801564351376: 2.5e-5 for n=1, yet
   * within its condition); count_far holds every element to its conditioning */
  int eb_ok = n < 5 || eb < 1e-5;
  CHECK(ef < 1e-5 && eb_ok && ff == 0 && fb == 0,
        "gelu %s n=%lld: rel err fwd %.2g bwd %.2g; elements beyond 2e-6 x condition: %lld, %lld",
        gelu_name(k), (long long)n, ef, eb, (long long)ff, (long long)fb);
  double e16 = bf16_rel_err(out16, ref, n);
  int64_t far = bf16_far(out16, ref, n);
  CHECK(e16 < 1e-2 && far == 0, "gelu %s n=%lld bf16: rel err %.2g, %lld beyond 1 ulp",
        gelu_name(k), (long long)n, e16, (long long)far);
  OPS->gelu_backward(DEV, dout_d, TD_F32, NULL, dout_d, x_d, TD_F32, 1, n, k); /* in place: dx aliases dout */
  tst_getf(dout, dout_d, n);
  CHECK(memcmp(dout, dx, (size_t)n * 4) == 0, "gelu %s n=%lld backward in place (dx == dout)",
        gelu_name(k), (long long)n);
  tst_release(x_d), tst_release(out_d), tst_release(dout_d), tst_release(dx_d);
  tst_release(out16_d);
  /* bf16 input: the same as the fp32 kernel on the bf16-rounded values */
  uint16_t *x16 = td_malloc((size_t)n * 2 + 2);
  float *xr = falloc(n), *out_r = falloc(n), *dx_r = falloc(n), *out_b = falloc(n), *dx_b = falloc(n);
  for (int64_t i = 0; i < n; i++) x16[i] = td_f32_to_bf16(x[i]), xr[i] = td_bf16_to_f32(x16[i]);
  tst_fill_normal(dx_r, n, s + 1, 1.0f);
  /* both backward runs start from the same dout, each in place on its own twin */
  uint16_t *x16_d = tst_put(x16, (size_t)n * 2);
  float *xr_d = tst_putf(xr, n), *out_r_d = tst_putf(NULL, n), *out_b_d = tst_putf(NULL, n);
  float *dx_r_d = tst_putf(dx_r, n), *dx_b_d = tst_putf(dx_r, n);
  OPS->gelu_forward(DEV, out_r_d, TD_F32, xr_d, TD_F32, n, k);
  OPS->gelu_forward(DEV, out_b_d, TD_F32, x16_d, TD_BF16, n, k);
  OPS->gelu_backward(DEV, dx_r_d, TD_F32, NULL, dx_r_d, xr_d, TD_F32, 1, n, k);
  OPS->gelu_backward(DEV, dx_b_d, TD_F32, NULL, dx_b_d, x16_d, TD_BF16, 1, n, k);
  tst_getf(out_r, out_r_d, n), tst_getf(out_b, out_b_d, n), tst_getf(dx_r, dx_r_d, n), tst_getf(dx_b, dx_b_d, n);
  tst_release(x16_d), tst_release(xr_d), tst_release(out_r_d), tst_release(out_b_d);
  tst_release(dx_r_d), tst_release(dx_b_d);
  CHECK(memcmp(out_r, out_b, (size_t)n * 4) == 0 && memcmp(dx_r, dx_b, (size_t)n * 4) == 0,
        "gelu %s n=%lld with bf16 input == fp32 kernel on the rounded input", gelu_name(k),
        (long long)n);
  td_free(x16), td_free(xr), td_free(out_r), td_free(dx_r), td_free(out_b), td_free(dx_b);
  td_free(x), td_free(out), td_free(dout), td_free(dx), td_free(out16), td_free(ref), td_free(dref);
}

/* ------------------------------------------------------------- bias_backward */

/* bias_backward's reference, the column sum, is dL/dbias of L = sum dout (y + bias) */
typedef struct {
  int64_t R, C;
  const double *y, *dout, *bias;
} bias_ctx;
static double bias_loss_cb(const void *c) {
  const bias_ctx *k = c;
  double L = 0;
  for (int64_t i = 0; i < k->R * k->C; i++) L += k->dout[i] * (k->y[i] + k->bias[i % k->C]);
  return L;
}

static void test_bias_fd(void) {
  enum { R = 5, C = 3 };
  double y[R * C], dout[R * C], bias[C], ref[C] = {0};
  float f[R * C];
  tst_fill_normal(f, R * C, 110, 1.0f);
  for (int i = 0; i < R * C; i++) y[i] = f[i];
  tst_fill_normal(f, R * C, 111, 1.0f);
  for (int i = 0; i < R * C; i++) dout[i] = f[i], ref[i % C] += f[i];
  for (int c = 0; c < C; c++) bias[c] = 0.1 * c;
  bias_ctx ctx = {R, C, y, dout, bias};
  double e = fd_err(bias, C, ref, bias_loss_cb, &ctx);
  CHECK(e < 1e-7, "bias_backward reference vs finite differences: %.2g", e);
}

static void test_bias_backward(int64_t R, int64_t C, uint64_t s) {
  float *dout = falloc(R * C), *db = falloc(C);
  double *ref = dalloc(C);
  tst_fill_normal(dout, R * C, s, 1.0f);
  tst_fill_normal(db, C, s + 1, 1.0f);
  for (int64_t c = 0; c < C; c++) {
    ref[c] = db[c];
    for (int64_t r = 0; r < R; r++) ref[c] += dout[r * C + c];
  }
  float *dout_d = tst_putf(dout, R * C), *db_d = tst_putf(db, C);
  OPS->bias_backward(DEV, db_d, dout_d, TD_F32, R, C, NULL, TD_F32);
  tst_getf(db, db_d, C);
  tst_release(dout_d), tst_release(db_d);
  double e = tst_rel_err(db, ref, C);
  CHECK(e < 1e-5, "bias_backward %lldx%lld: rel err %.2g", (long long)R, (long long)C, e);
  td_free(dout), td_free(db), td_free(ref);
}

/* A bf16 dout sums as its fp32 widening does, bit for bit. */
static void test_bias_backward_bf16(int64_t R, int64_t C, uint64_t s) {
  int64_t n = R * C;
  float *dout = falloc(n), *db = falloc(C), *got[2] = {falloc(C), falloc(C)};
  uint16_t *d16 = td_malloc((size_t)n * 2 + 2);
  tst_fill_normal(dout, n, s, 1.0f);
  tst_fill_normal(db, C, s + 1, 1.0f);
  for (int64_t i = 0; i < n; i++) d16[i] = td_f32_to_bf16(dout[i]), dout[i] = td_bf16_to_f32(d16[i]);
  void *src[2] = {tst_putf(dout, n), tst_put(d16, (size_t)n * 2)};
  for (int b = 0; b < 2; b++) {
    float *db_d = tst_putf(db, C);
    OPS->bias_backward(DEV, db_d, src[b], b ? TD_BF16 : TD_F32, R, C, NULL, TD_F32);
    tst_getf(got[b], db_d, C);
    tst_release(db_d), tst_release(src[b]);
  }
  CHECK(memcmp(got[0], got[1], (size_t)C * 4) == 0,
        "bias_backward %lldx%lld of bf16 dout == of its fp32 widening, bit for bit", (long long)R,
        (long long)C);
  td_free(dout), td_free(db), td_free(got[0]), td_free(got[1]), td_free(d16);
}

/* bias_backward with the cast of dout fused: the same dbias bits as without it,
 * and dout_cast the bits of cast (fp32 -> bf16). */
static void test_bias_backward_cast(int64_t R, int64_t C, uint64_t s) {
  int64_t n = R * C;
  float *dout = falloc(n), *db = falloc(C), *got[2] = {falloc(C), falloc(C)};
  uint16_t *c16[2] = {td_malloc((size_t)n * 2 + 2), td_malloc((size_t)n * 2 + 2)};
  tst_fill_normal(dout, n, s, 1.0f);
  tst_fill_normal(db, C, s + 1, 1.0f);
  float *dout_d = tst_putf(dout, n);
  for (int fused = 0; fused < 2; fused++) {
    float *db_d = tst_putf(db, C);
    uint16_t *c_d = tst_put(NULL, (size_t)n * 2);
    if (fused) {
      OPS->bias_backward(DEV, db_d, dout_d, TD_F32, R, C, c_d, TD_BF16);
    } else {
      OPS->bias_backward(DEV, db_d, dout_d, TD_F32, R, C, NULL, TD_F32);
      OPS->cast(DEV, c_d, TD_BF16, dout_d, TD_F32, n);
    }
    tst_getf(got[fused], db_d, C), tst_get(c16[fused], c_d, (size_t)n * 2);
    tst_release(db_d), tst_release(c_d);
  }
  CHECK(memcmp(got[0], got[1], (size_t)C * 4) == 0 && memcmp(c16[0], c16[1], (size_t)n * 2) == 0,
        "bias_backward %lldx%lld with dout cast to bf16 in the same pass == bias_backward, cast "
        "(bit for bit)", (long long)R, (long long)C);
  tst_release(dout_d);
  td_free(dout), td_free(db), td_free(got[0]), td_free(got[1]), td_free(c16[0]), td_free(c16[1]);
}

/* gelu_backward with the fused bias gradient (x fp32 or bf16): dx in fp32 (in
 * place on dout) and in bf16, and dbias, are the bits of the unfused kernels
 * (gelu_backward alone, cast, bias_backward on its fp32 output); dbias is also
 * held to the double column sums of dout gelu'(x). */
static void test_gelu_bias(int64_t R, int64_t C, td_gelu_kind k, td_dtype x_dt, uint64_t s) {
  const int64_t n = R * C;
  float *x = gelu_inputs(n, s), *dout = falloc(n), *db0 = falloc(C);
  uint16_t *x16 = td_malloc((size_t)n * 2 + 2);
  double *ref = dalloc(C);
  tst_fill_normal(dout, n, s + 1, 1.0f);
  tst_fill_normal(db0, C, s + 2, 1.0f);
  for (int64_t i = 0; i < n; i++) {
    x16[i] = td_f32_to_bf16(x[i]);
    if (x_dt == TD_BF16) x[i] = td_bf16_to_f32(x16[i]);
  }
  double *mag = dalloc(C); /* sum of |terms|: the sums' conditioning */
  for (int64_t c = 0; c < C; c++) ref[c] = db0[c], mag[c] = fabs(db0[c]);
  for (int64_t i = 0; i < n; i++) {
    double t = dout[i] * gelu_grad_ref(x[i], k);
    ref[i % C] += t, mag[i % C] += fabs(t);
  }
  void *x_d = x_dt == TD_BF16 ? tst_put(x16, (size_t)n * 2) : (void *)tst_putf(x, n);
  float *dout_d = tst_putf(dout, n), *g_d = tst_putf(NULL, n), *dbu_d = tst_putf(db0, C);
  uint16_t *g16_d = tst_put(NULL, (size_t)n * 2), *dx16_d = tst_put(NULL, (size_t)n * 2);
  OPS->gelu_backward(DEV, g_d, TD_F32, NULL, dout_d, x_d, x_dt, R, C, k);
  OPS->cast(DEV, g16_d, TD_BF16, g_d, TD_F32, n);
  OPS->bias_backward(DEV, dbu_d, g_d, TD_F32, R, C, NULL, TD_F32);
  float *dx32_d = tst_putf(dout, n), *db32_d = tst_putf(db0, C), *db16_d = tst_putf(db0, C);
  OPS->gelu_backward(DEV, dx32_d, TD_F32, db32_d, dx32_d, x_d, x_dt, R, C, k);
  OPS->gelu_backward(DEV, dx16_d, TD_BF16, db16_d, dout_d, x_d, x_dt, R, C, k);
  float *g = falloc(n), *dx32 = falloc(n), *dbu = falloc(C), *db32 = falloc(C), *db16 = falloc(C);
  uint16_t *g16 = td_malloc((size_t)n * 2 + 2), *dx16 = td_malloc((size_t)n * 2 + 2);
  tst_getf(g, g_d, n), tst_getf(dx32, dx32_d, n), tst_getf(dbu, dbu_d, C);
  tst_getf(db32, db32_d, C), tst_getf(db16, db16_d, C);
  tst_get(g16, g16_d, (size_t)n * 2), tst_get(dx16, dx16_d, (size_t)n * 2);
  double e = 0; /* error over the sum of |terms|: fp32 rounding, whatever the cancellation */
  for (int64_t c = 0; c < C; c++) e = fmax(e, fabs(dbu[c] - ref[c]) / (mag[c] + 1e-30));
  CHECK(memcmp(g, dx32, (size_t)n * 4) == 0 && memcmp(g16, dx16, (size_t)n * 2) == 0 &&
            memcmp(dbu, db32, (size_t)C * 4) == 0 && memcmp(dbu, db16, (size_t)C * 4) == 0 &&
            e < 1e-5,
        "gelu %s backward %lldx%lld, x %s, bias fused: dx fp32 (in place) and bf16, dbias == "
        "unfused bits; dbias err %.2g of its terms' magnitude",
        gelu_name(k), (long long)R, (long long)C, td_dtype_name(x_dt), e);
  void *bufs[] = {x_d, dout_d, g_d, dbu_d, g16_d, dx16_d, dx32_d, db32_d, db16_d};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) tst_release(bufs[i]);
  td_free(x), td_free(dout), td_free(db0), td_free(x16), td_free(ref), td_free(mag), td_free(g);
  td_free(dx32);
  td_free(dbu), td_free(db32), td_free(db16), td_free(g16), td_free(dx16);
}

/* ---------------------------------------------------------------- add, scale */

static void test_add_scale(int64_t n, uint64_t s) {
  float *a = falloc(n), *b = falloc(n), *out = falloc(n), *want = falloc(n);
  tst_fill_normal(a, n, s, 1.0f);
  tst_fill_normal(b, n, s + 1, 1.0f);
  for (int64_t i = 0; i < n; i++) want[i] = a[i] + b[i];
  float *a_d = tst_putf(a, n), *b_d = tst_putf(b, n), *out_d = tst_putf(NULL, n);
  OPS->add(DEV, out_d, a_d, b_d, n);
  tst_getf(out, out_d, n);
  int ok = memcmp(out, want, (size_t)n * 4) == 0;
  dset(out_d, a, n);
  OPS->add(DEV, out_d, out_d, b_d, n); /* out aliases a */
  tst_getf(out, out_d, n);
  ok = ok && memcmp(out, want, (size_t)n * 4) == 0;
  dset(out_d, b, n);
  OPS->add(DEV, out_d, a_d, out_d, n); /* out aliases b */
  tst_getf(out, out_d, n);
  ok = ok && memcmp(out, want, (size_t)n * 4) == 0;
  CHECK(ok, "add n=%lld equals a + b exactly, also in place", (long long)n);
  for (int64_t i = 0; i < n; i++) want[i] = a[i] * 0.37f;
  OPS->scale(DEV, a_d, n, 0.37f);
  tst_getf(a, a_d, n);
  CHECK(memcmp(a, want, (size_t)n * 4) == 0, "scale n=%lld equals x * alpha exactly", (long long)n);
  tst_release(a_d), tst_release(b_d), tst_release(out_d);
  td_free(a), td_free(b), td_free(out), td_free(want);
}

/* ------------------------------------------------------------------- dropout */

/* In place, out of place, and onto a residual (out = resid + dropout(x), out
 * aliasing resid as the model's bias-dropout-add may): each element against the
 * Philox decision, the sum against resid + the masked value in fp32. */
static void test_dropout(int64_t n, float p, uint64_t seed, uint64_t stream, uint64_t first) {
  float *x = falloc(n), *y = falloc(n), *r = falloc(n), *o = falloc(n), *a = falloc(n);
  tst_fill_uniform(x, n, 300, 1.0f, 2.0f); /* never 0, so a zero means dropped */
  tst_fill_normal(r, n, 301, 1.0f);
  float *y_d = tst_putf(x, n), *x_d = tst_putf(x, n), *o_d = tst_putf(NULL, n);
  float *a_d = tst_putf(r, n);
  OPS->dropout(DEV, y_d, NULL, y_d, n, p, seed, stream, first);
  OPS->dropout(DEV, o_d, NULL, x_d, n, p, seed, stream, first);
  OPS->dropout(DEV, a_d, a_d, x_d, n, p, seed, stream, first);
  tst_getf(y, y_d, n), tst_getf(o, o_d, n), tst_getf(a, a_d, n);
  tst_release(y_d), tst_release(x_d), tst_release(o_d), tst_release(a_d);
  int64_t kept = 0, wrong = 0;
  float s = 1.0f / (1.0f - p);
  for (int64_t i = 0; i < n; i++) {
    int keep = td_rng_bits_to_unit(td_rng_u32(seed, stream, first + (uint64_t)i)) >= p;
    float v = keep ? x[i] * s : 0.0f;
    kept += keep;
    wrong += y[i] != v || o[i] != v || a[i] != r[i] + v;
  }
  double frac = (double)kept / (double)n, sd = sqrt(p * (1.0 - p) / (double)n);
  CHECK(wrong == 0 && fabs(frac - (1.0 - p)) <= 5 * sd && fabs(s * (1.0 - p) - 1) < 1e-7,
        "dropout n=%lld p=%g first=%llu: kept %.5f (expect %.5f), %lld differ from the Philox "
        "decision (in place, out of place, onto a residual)",
        (long long)n, (double)p, (unsigned long long)first, frac, 1.0 - p, (long long)wrong);
  td_free(x), td_free(y), td_free(r), td_free(o), td_free(a);
}

/* p = 0: in place nothing changes, out of place a copy, onto a residual add's bits. */
static void test_dropout_identity(void) {
  float x[37], y[37], r[37], c[37], a[37], want[37];
  tst_fill_normal(x, 37, 310, 1.0f);
  tst_fill_normal(r, 37, 311, 1.0f);
  float *y_d = tst_putf(x, 37), *c_d = tst_putf(NULL, 37), *a_d = tst_putf(r, 37);
  float *w_d = tst_putf(r, 37);
  OPS->dropout(DEV, y_d, NULL, y_d, 37, 0.0f, 1, 2, 0);
  OPS->dropout(DEV, c_d, NULL, y_d, 37, 0.0f, 1, 2, 0);
  OPS->dropout(DEV, a_d, a_d, y_d, 37, 0.0f, 1, 2, 0);
  OPS->add(DEV, w_d, w_d, y_d, 37);
  tst_getf(y, y_d, 37), tst_getf(c, c_d, 37), tst_getf(a, a_d, 37), tst_getf(want, w_d, 37);
  tst_release(y_d), tst_release(c_d), tst_release(a_d), tst_release(w_d);
  CHECK(memcmp(x, y, sizeof x) == 0 && memcmp(x, c, sizeof x) == 0 &&
            memcmp(a, want, sizeof a) == 0,
        "dropout p=0: the identity in place, a copy out of place, add's bits onto a residual");
}

/* --------------------------------------------------------------- sum_squares */

static void test_sum_squares(int64_t n, uint64_t s) {
  float *x = falloc(n);
  tst_fill_normal(x, n, s, 3.0f);
  double ref = 0;
  for (int64_t i = 0; i < n; i++) ref += (double)x[i] * x[i];
  float *x_d = tst_putf(x, n);
  double got = td_device_reduce_now(DEV, OPS->sum_squares, x_d, n);
  tst_release(x_d);
  double e = n ? fabs(got - ref) / ref : fabs(got);
  CHECK(e < 1e-12, "sum_squares n=%lld: rel err %.2g", (long long)n, e);
  td_free(x);
}

static void test_sum_squares_special(void) {
  float x[100];
  tst_fill_normal(x, 100, 320, 1.0f);
  float *x_d = tst_putf(NULL, 100); /* reloaded from x after each change */
  x[77] = INFINITY;
  dset(x_d, x, 100);
  int inf_ok = isinf(td_device_reduce_now(DEV, OPS->sum_squares, x_d, 100));
  x[33] = NAN;
  dset(x_d, x, 100);
  CHECK(inf_ok && isnan(td_device_reduce_now(DEV, OPS->sum_squares, x_d, 100)),
        "sum_squares propagates Inf and NaN");
  x[33] = x[77] = 3e38f; /* squares overflow fp32, not the double sum */
  dset(x_d, x, 100);
  CHECK(isfinite(td_device_reduce_now(DEV, OPS->sum_squares, x_d, 100)),
        "sum_squares of 3e38 is finite (double)");
  tst_release(x_d);
}

/* count_zeros: random zeros (and -0) placed at seeded positions, counted exactly */
static void test_count_zeros(int64_t n, uint64_t s) {
  float *x = falloc(n);
  tst_fill_normal(x, n, s, 1.0f);
  int64_t want = 0;
  for (int64_t i = 0; i < n; i++) {
    if (td_rng_u32(tst_seed(), s + 1, (uint64_t)i) % 7 == 0) x[i] = i % 2 ? -0.0f : 0.0f;
    want += x[i] == 0.0f;
  }
  float *x_d = tst_putf(x, n);
  int64_t got = (int64_t)td_device_reduce_now(DEV, OPS->count_zeros, x_d, n);
  tst_release(x_d);
  CHECK(got == want, "count_zeros n=%lld: %lld (want %lld)", (long long)n, (long long)got,
        (long long)want);
  td_free(x);
}

/* --------------------------------------------------- thread-count independence */

/* The CPU's OpenMP kernels (main runs this on the CPU only): each result is
 * computed once with 1 thread and once with 2, on twin inputs. */
static void test_threads(void) {
  int saved = omp_get_max_threads();
  const int64_t R = 257, C = 771, n = 1000003;
  ln_case k[2] = {ln_case_new(R, C, 400), ln_case_new(R, C, 400)};
  ln_bufs u[2] = {k[0].h, k[1].h};
  float *x = falloc(n), *drop[2] = {falloc(n), falloc(n)}, *db[2] = {falloc(C), falloc(C)};
  double ss[2];
  tst_fill_normal(x, n, 410, 1.0f);
  float *x_d = tst_putf(x, n);
  for (int t = 0; t < 2; t++) {
    omp_set_num_threads(t + 1);
    const ln_bufs d = k[t].d;
    OPS->layernorm_backward(DEV, d.dx, d.dw, d.db, d.dout, d.x, d.w, d.mean, d.rstd, R, C);
    ln_case_get_grads(&k[t]);
    float *db_d = tst_putf(NULL, C);
    OPS->bias_backward(DEV, db_d, d.dout, TD_F32, R, C, NULL, TD_F32);
    tst_getf(db[t], db_d, C);
    tst_release(db_d);
    ss[t] = td_device_reduce_now(DEV, OPS->sum_squares, x_d, n);
    float *drop_d = tst_putf(x, n);
    OPS->dropout(DEV, drop_d, NULL, drop_d, n, 0.25f, 7, 9, 0);
    tst_getf(drop[t], drop_d, n);
    tst_release(drop_d);
  }
  omp_set_num_threads(saved);
  tst_release(x_d);
  CHECK(memcmp(u[0].dw, u[1].dw, C * 4) == 0 && memcmp(u[0].db, u[1].db, C * 4) == 0 &&
            memcmp(u[0].dx, u[1].dx, (size_t)(R * C) * 4) == 0,
        "layernorm backward dx, dw, db bitwise equal with 1 and 2 threads");
  CHECK(memcmp(db[0], db[1], C * 4) == 0, "bias_backward bitwise equal with 1 and 2 threads");
  CHECK(memcmp(&ss[0], &ss[1], sizeof(double)) == 0,
        "sum_squares bitwise equal with 1 and 2 threads");
  CHECK(memcmp(drop[0], drop[1], (size_t)n * 4) == 0, "dropout equal with 1 and 2 threads");
  ln_case_free(&k[0]), ln_case_free(&k[1]);
  td_free(x), td_free(drop[0]), td_free(drop[1]), td_free(db[0]), td_free(db[1]);
}

/* alloc's memory is zeroed, large buffers by the threads (first touch) on the
 * CPU: after dirty buffers of the same sizes were freed (a GPU's pool may hand
 * the same memory out again), every byte of the new ones, odd sizes and a size
 * a byte past a whole number of pieces included, is 0. Dirtied and read
 * through copies: the host does not touch device memory. */
static void test_alloc_zeroed(void) {
  static const size_t sizes[] = {1, 4099, (1u << 20) - 3, (1u << 20) + 65537, (5u << 20) + 1};
  const size_t most = sizes[sizeof sizes / sizeof *sizes - 1];
  unsigned char *dirt = td_malloc(most), *back = td_malloc(most);
  memset(dirt, 0xA5, most);
  int zero = 1;
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    void *dirty = OPS->alloc(DEV, sizes[i]);
    OPS->copy_h2d(DEV, dirty, dirt, sizes[i]);
    OPS->free(DEV, dirty);
    void *p = OPS->alloc(DEV, sizes[i]);
    memset(back, 0xA5, sizes[i]); /* so a copy that did not happen reads as dirty */
    tst_get(back, p, sizes[i]);
    for (size_t k = 0; k < sizes[i]; k++) zero &= back[k] == 0;
    OPS->free(DEV, p);
  }
  td_free(dirt), td_free(back);
  CHECK(zero, "alloc: every byte zero (1 B to 5 MiB + 1, after freeing dirty buffers)");
}

int main(void) {
  test_alloc_zeroed();
  static const int64_t shapes[][2] = {{1, 1}, {1, 5}, {7, 17}, {33, 771}, {3, 1}, {70, 768}};
  test_layernorm_fd();
  test_bias_fd();
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    test_layernorm_forward(shapes[i][0], shapes[i][1], 10 + i * 10);
    test_layernorm_backward(shapes[i][0], shapes[i][1], 20 + i * 10);
    test_bias_backward(shapes[i][0], shapes[i][1], 30 + i * 10);
    test_bias_backward_bf16(shapes[i][0], shapes[i][1], 35 + i * 10);
    test_bias_backward_cast(shapes[i][0], shapes[i][1], 37 + i * 10);
    for (int k = 0; k < 2; k++)
      for (int xb = 0; xb < 2; xb++)
        test_gelu_bias(shapes[i][0], shapes[i][1], (td_gelu_kind)k, xb ? TD_BF16 : TD_F32,
                       700 + i * 10 + k * 2 + xb);
  }
  test_bias_backward(1000, 33, 200);
  test_bias_backward_bf16(1000, 36, 205);
  test_bias_backward_cast(1000, 768, 207);
  test_gelu_bias(300, 3072, TD_GELU_TANH, TD_BF16, 790); /* GPT-2's fc1 width, a vector path */
  static const int64_t sizes[] = {1, 5, 17, 771, 100003};
  for (int k = 0; k < 2; k++) {
    test_gelu_fd((td_gelu_kind)k);
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
      test_gelu(sizes[i], (td_gelu_kind)k, 210 + i * 10 + k);
  }
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    test_add_scale(sizes[i], 260 + i * 10);
    test_sum_squares(sizes[i], 270 + i * 10);
    test_count_zeros(sizes[i], 600 + i * 10);
  }
  test_sum_squares(16384 * 9 + 5, 275); /* two groups of four 16384-element pieces, then two */
  test_sum_squares_special();
  test_dropout_identity();
  static const int64_t dsizes[] = {1, 5, 67, 771, 1000003};
  for (size_t i = 0; i < sizeof dsizes / sizeof *dsizes; i++)
    test_dropout(dsizes[i], 0.1f, 1234567ull + i, 5, 0);
  /* seed and stream with high words set */
  test_dropout(200003, 0.5f, 0x123456789abcdefull, 0xfedcba987654321ull, 0);
  /* a slice of a larger tensor: counters from `first`, aligned or not */
  /* (the last two: counters past 2^63, and a range that wraps past 2^64 as the
   * portable kernel's uint64 counters do) */
  static const uint64_t firsts[] = {3, 64, 1000, 70001, (1ull << 33) + 5,
                                    (1ull << 63) - 37, UINT64_MAX - 500};
  for (size_t i = 0; i < sizeof firsts / sizeof *firsts; i++)
    test_dropout(i % 2 ? 771 : 100003, 0.3f, 99 + i, 6, firsts[i]);
  /* the OpenMP thread count is the CPU backend's own machinery */
  if (tst_device_is_cpu()) test_threads();
  return tst_finish();
}
