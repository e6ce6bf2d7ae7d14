/* Causal attention (ops->attention_forward / attention_backward) against a naive
 * double-precision reference: out, lse and dqkv for odd shapes (T not a multiple
 * of the query blocks), fp32 and bf16, with and without dropout (the reference
 * applies the keep rule of cpu_attention.h; its backward takes the out the
 * kernel wrote, as the kernel does), through each path the CPU has (the
 * per-head kernels: AVX-512 or AVX2 FMA for fp32, AMX and AVX512-BF16 for bf16,
 * and for bf16 on AVX-512 without them the AVX2 heads, which the no-bf16-units
 * path runs on any AVX-512 CPU; and td_cpu_gemm with the row kernels); the fp32
 * per-head kernels of AVX2 and
 * AVX-512 against each other where the CPU runs both; the
 * reference backward against central finite differences of the reference
 * forward; bitwise identical results with 1 and 2 threads; the dropout random
 * words of both ISA paths against td_rng_u32; attention_forward_rows (a few
 * query rows against the keys before them: generation's cache) against the
 * same reference, leaving the other rows alone. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/mem.h"
#include "base/rng.h"
#include "check.h"
#include "device/cpu/cpu_attention.h"
#include "device/cpu/cpu_isa.h"

typedef struct {
  int64_t B, T, H, D;
  double scale, p;
  uint64_t seed, stream;
} ref_shape;

/* keep_j * 1/(1-p) for element index g, the rule of cpu_attention.h */
static double keep(const ref_shape *s, uint64_t g) {
  if (s->p == 0) return 1.0;
  double thr = nearbyint((double)(float)s->p * 4294967296.0); /* the kernel gets p as float */
  return (double)td_rng_u32(s->seed, s->stream, g) >= thr ? 1.0 / (1.0 - (double)(float)s->p) : 0.0;
}

static int64_t qkv_at(const ref_shape *s, int64_t b, int64_t t, int64_t h, int which) {
  return ((b * s->T + t) * s->H + h) * 3 * s->D + which * s->D;
}
static int64_t o_at(const ref_shape *s, int64_t b, int64_t t, int64_t h) {
  return ((b * s->T + t) * s->H + h) * s->D;
}

/* Forward (out, lse) and, when dout != NULL, backward (dqkv) in double. The
 * backward's inputs are qkv, out, dout (and lse): D_i = rowsum(dO_i * O_i) uses
 * o_in, the out a kernel's backward is given (bf16-rounded for bf16), or this
 * forward's out when o_in is NULL. */
static void reference(const ref_shape *s, const double *qkv, double *out, double *lse,
                      const double *dout, const double *o_in, double *dqkv) {
  const int64_t T = s->T, D = s->D;
  double *sc = malloc((size_t)T * 8), *dp = malloc((size_t)T * 8);
  if (dqkv) memset(dqkv, 0, (size_t)(s->B * T * s->H * 3 * D) * 8);
  for (int64_t b = 0; b < s->B; b++)
    for (int64_t h = 0; h < s->H; h++)
      for (int64_t i = 0; i < T; i++) {
        const double *q = qkv + qkv_at(s, b, i, h, 0);
        double m = -INFINITY, l = 0;
        for (int64_t j = 0; j <= i; j++) {
          const double *k = qkv + qkv_at(s, b, j, h, 1);
          double d = 0;
          for (int64_t e = 0; e < D; e++) d += q[e] * k[e];
          sc[j] = s->scale * d;
          m = fmax(m, sc[j]);
        }
        for (int64_t j = 0; j <= i; j++) l += exp(sc[j] - m);
        double L = m + log(l);
        lse[(b * s->H + h) * T + i] = L;
        double *o = out + o_at(s, b, i, h);
        const uint64_t g0 = (uint64_t)(((b * s->H + h) * T + i) * T);
        for (int64_t e = 0; e < D; e++) o[e] = 0;
        for (int64_t j = 0; j <= i; j++) {
          sc[j] = exp(sc[j] - L); /* p */
          double pk = sc[j] * keep(s, g0 + (uint64_t)j);
          const double *v = qkv + qkv_at(s, b, j, h, 2);
          for (int64_t e = 0; e < D; e++) o[e] += pk * v[e];
        }
        if (!dout) continue;
        const double *dO = dout + o_at(s, b, i, h), *oi = (o_in ? o_in : out) + o_at(s, b, i, h);
        double di = 0;
        for (int64_t e = 0; e < D; e++) di += dO[e] * oi[e];
        for (int64_t j = 0; j <= i; j++) {
          const double *v = qkv + qkv_at(s, b, j, h, 2);
          double kf = keep(s, g0 + (uint64_t)j), d = 0;
          for (int64_t e = 0; e < D; e++) d += dO[e] * v[e];
          dp[j] = d * kf;
          double *dv = dqkv + qkv_at(s, b, j, h, 2);
          for (int64_t e = 0; e < D; e++) dv[e] += sc[j] * kf * dO[e];
        }
        double *dq = dqkv + qkv_at(s, b, i, h, 0);
        for (int64_t j = 0; j <= i; j++) {
          double ds = s->scale * sc[j] * (dp[j] - di);
          const double *k = qkv + qkv_at(s, b, j, h, 1);
          double *dk = dqkv + qkv_at(s, b, j, h, 1);
          for (int64_t e = 0; e < D; e++) dq[e] += ds * k[e], dk[e] += ds * q[e];
        }
      }
  free(sc), free(dp);
}

/* The reference backward against central differences of L = sum(out * dout). */
static void check_reference_gradient(double p) {
  ref_shape s = {
      .B = 1, .T = 5, .H = 2, .D = 3, .scale = 0.7, .p = p, .seed = tst_seed(), .stream = 99};
  const int64_t n3 = s.B * s.T * s.H * 3 * s.D, no = s.B * s.T * s.H * s.D;
  float *f = malloc((size_t)(n3 + no) * 4);
  tst_fill_normal(f, n3 + no, 1, 1.0f);
  double *qkv = calloc((size_t)n3, 8), *dout = calloc((size_t)no, 8), *out = malloc((size_t)no * 8);
  double *lse = malloc((size_t)(s.B * s.H * s.T) * 8), *dqkv = malloc((size_t)n3 * 8);
  double *fd = malloc((size_t)n3 * 8);
  for (int64_t i = 0; i < n3; i++) qkv[i] = f[i];
  for (int64_t i = 0; i < no; i++) dout[i] = f[n3 + i];
  reference(&s, qkv, out, lse, dout, NULL, dqkv);
  const double eps = 1e-5;
  for (int64_t x = 0; x < n3; x++) {
    double save = qkv[x], lp = 0, lm = 0;
    qkv[x] = save + eps;
    reference(&s, qkv, out, lse, NULL, NULL, NULL);
    for (int64_t i = 0; i < no; i++) lp += out[i] * dout[i];
    qkv[x] = save - eps;
    reference(&s, qkv, out, lse, NULL, NULL, NULL);
    for (int64_t i = 0; i < no; i++) lm += out[i] * dout[i];
    qkv[x] = save;
    fd[x] = (lp - lm) / (2 * eps);
  }
  float *g = malloc((size_t)n3 * 4);
  for (int64_t i = 0; i < n3; i++) g[i] = (float)dqkv[i];
  char what[64];
  snprintf(what, sizeof what, "reference backward vs finite differences (p=%g)", p);
  CHECK_REL(what, tst_rel_err(g, fd, n3), 1e-6);
  free(f), free(qkv), free(dout), free(out), free(lse), free(dqkv), free(fd), free(g);
}

/* ------------------------------------------------------------------ device */

typedef struct {
  ref_shape s;
  td_dtype dt;
} att_case;

static const char *g_path = ""; /* which implementation the checks run through */

typedef struct { /* device buffers of one case */
  td_attention_desc a;
  int64_t n3, no, nl;
} att_run;

static void *upload(td_device *dev, const float *x, int64_t n, td_dtype dt) {
  void *d = dev->ops->alloc(dev, (size_t)n * td_dtype_size(dt));
  if (dt == TD_F32) {
    dev->ops->copy_h2d(dev, d, x, (size_t)n * 4);
  } else {
    uint16_t *h = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) h[i] = td_f32_to_bf16(x[i]);
    dev->ops->copy_h2d(dev, d, h, (size_t)n * 2);
    free(h);
  }
  return d;
}

static void download(td_device *dev, float *x, const void *d, int64_t n, td_dtype dt) {
  if (dt == TD_F32) {
    dev->ops->copy_d2h(dev, x, d, (size_t)n * 4);
  } else {
    uint16_t *h = malloc((size_t)n * 2);
    dev->ops->copy_d2h(dev, h, d, (size_t)n * 2);
    for (int64_t i = 0; i < n; i++) x[i] = td_bf16_to_f32(h[i]);
    free(h);
  }
}

static att_run run_setup(td_device *dev, const att_case *c, const float *qkv, const float *dout) {
  const ref_shape *s = &c->s;
  att_run r = {.n3 = s->B * s->T * s->H * 3 * s->D,
               .no = s->B * s->T * s->H * s->D,
               .nl = s->B * s->H * s->T};
  r.a = (td_attention_desc){.batch = s->B,
                            .seq = s->T,
                            .heads = s->H,
                            .head_dim = s->D,
                            .dtype = c->dt,
                            .scale = (float)s->scale,
                            .qkv = upload(dev, qkv, r.n3, c->dt),
                            .out = dev->ops->alloc(dev, (size_t)r.no * td_dtype_size(c->dt)),
                            .lse = dev->ops->alloc(dev, (size_t)r.nl * 4),
                            .dout = upload(dev, dout, r.no, c->dt),
                            .dqkv = dev->ops->alloc(dev, (size_t)r.n3 * td_dtype_size(c->dt)),
                            .dropout_p = (float)s->p,
                            .seed = s->seed,
                            .stream = s->stream};
  return r;
}

static void run_free(td_device *dev, att_run *r) {
  void *bufs[] = {(void *)r->a.qkv, r->a.out, r->a.lse, (void *)r->a.dout, r->a.dqkv};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) dev->ops->free(dev, bufs[i]);
}

/* Random qkv and dout (rounded to bf16 for a bf16 case, so the reference sees
 * the kernel's inputs). */
static void random_inputs(const att_case *c, float *qkv, float *dout, int64_t n3, int64_t no,
                          uint64_t stream) {
  tst_fill_normal(qkv, n3, stream, 1.0f);
  tst_fill_normal(dout, no, stream + 1, 1.0f);
  if (c->dt == TD_BF16) tst_round_bf16(qkv, n3), tst_round_bf16(dout, no);
}

static void check_case(const att_case *c, uint64_t stream) {
  td_device *dev = tst_device();
  const ref_shape *s = &c->s;
  const int64_t n3 = s->B * s->T * s->H * 3 * s->D, no = s->B * s->T * s->H * s->D;
  const int64_t nl = s->B * s->H * s->T;
  float *qkv = malloc((size_t)n3 * 4), *dout = malloc((size_t)no * 4);
  random_inputs(c, qkv, dout, n3, no, stream);
  att_run r = run_setup(dev, c, qkv, dout);
  dev->ops->attention_forward(dev, &r.a);
  dev->ops->attention_backward(dev, &r.a);
  float *out = malloc((size_t)no * 4), *lse = malloc((size_t)nl * 4), *g = malloc((size_t)n3 * 4);
  download(dev, out, r.a.out, no, c->dt);
  dev->ops->copy_d2h(dev, lse, r.a.lse, (size_t)nl * 4);
  download(dev, g, r.a.dqkv, n3, c->dt);

  double *dq = malloc((size_t)n3 * 8), *dd = malloc((size_t)no * 8), *oi = malloc((size_t)no * 8);
  double *ro = malloc((size_t)no * 8), *rl = malloc((size_t)nl * 8), *rg = malloc((size_t)n3 * 8);
  for (int64_t i = 0; i < n3; i++) dq[i] = qkv[i];
  for (int64_t i = 0; i < no; i++) dd[i] = dout[i], oi[i] = out[i];
  reference(s, dq, ro, rl, dd, oi, rg);
  const double tol = c->dt == TD_BF16 ? 1e-2 : 1e-5;
  /* lse is a log: its fp32 error is absolute, ~eps x the scores' size, which is
   * O(1) here; a row whose lse is near 0 (T = 1) has no meaningful relative error */
  double lse_scale = 1.0;
  for (int64_t i = 0; i < nl; i++) lse_scale = fmax(lse_scale, fabs(rl[i]));
  double eo = tst_rel_err(out, ro, no), el = tst_err_over(lse, rl, nl, lse_scale);
  double eg = tst_rel_err(g, rg, n3);
  CHECK(eo < tol && el < 1e-5 && eg < tol,
        "%s %s B=%lld T=%lld H=%lld D=%lld p=%g: rel err out %.3g lse %.3g dqkv %.3g (tol %.0e)",
        g_path, td_dtype_name(c->dt), (long long)s->B, (long long)s->T, (long long)s->H,
        (long long)s->D, s->p, eo, el, eg, tol);
  run_free(dev, &r);
  free(qkv), free(dout), free(dq), free(dd), free(oi), free(ro), free(rl), free(rg);
  free(out), free(lse), free(g);
}

/* attention_forward_rows: rows [q0, q0 + nq) of one sequence against the double
 * reference of the whole forward (dropout too), for several splits (one row, a
 * few, more than a query block, from row 0, the last row); the other rows of out
 * and lse keep what they held. */
static void check_rows(td_dtype dt, double p, uint64_t stream) {
  td_device *dev = tst_device();
  if (!dev->ops->attention_forward_rows) {
    printf("SKIP: %s has no attention_forward_rows\n", dev->ops->name);
    return;
  }
  const att_case c = {.s = {.B = 1, .T = 150, .H = 3, .D = 24, .scale = 1.0 / sqrt(24.0), .p = p,
                            .seed = tst_seed(), .stream = 9},
                      .dt = dt};
  const ref_shape *s = &c.s;
  const int64_t n3 = s->T * s->H * 3 * s->D, no = s->T * s->H * s->D, nl = s->H * s->T;
  float *qkv = malloc((size_t)n3 * 4), *dout = malloc((size_t)no * 4);
  random_inputs(&c, qkv, dout, n3, no, stream);
  double *dq = malloc((size_t)n3 * 8), *ro = malloc((size_t)no * 8), *rl = malloc((size_t)nl * 8);
  for (int64_t i = 0; i < n3; i++) dq[i] = qkv[i];
  reference(s, dq, ro, rl, NULL, NULL, NULL);
  att_run r = run_setup(dev, &c, qkv, dout);
  float *out = malloc((size_t)no * 4), *lse = malloc((size_t)nl * 4);
  float *sentinel = malloc((size_t)no * 4);
  for (int64_t i = 0; i < no; i++) sentinel[i] = 1536.0f; /* exact in bf16 */
  static const int64_t splits[][2] = {{0, 1}, {0, 150}, {7, 1}, {7, 5}, {20, 70}, {100, 50}, {149, 1}};
  for (size_t k = 0; k < sizeof splits / sizeof *splits; k++) {
    const int64_t q0 = splits[k][0], nq = splits[k][1];
    float *up = malloc((size_t)no * 4); /* out and lse start as the sentinel */
    memcpy(up, sentinel, (size_t)no * 4);
    void *o = upload(dev, up, no, dt);
    dev->ops->copy_d2d(dev, r.a.out, o, (size_t)no * td_dtype_size(dt));
    dev->ops->copy_h2d(dev, r.a.lse, sentinel, (size_t)nl * 4);
    dev->ops->free(dev, o), free(up);
    dev->ops->attention_forward_rows(dev, &r.a, q0, nq);
    download(dev, out, r.a.out, no, dt);
    dev->ops->copy_d2h(dev, lse, r.a.lse, (size_t)nl * 4);
    double num = 0, den = 0, lerr = 0;
    int64_t untouched = 1;
    for (int64_t t = 0; t < s->T; t++)
      for (int64_t h = 0; h < s->H; h++) {
        const int64_t o0 = o_at(s, 0, t, h), li = h * s->T + t;
        const int in = t >= q0 && t < q0 + nq;
        for (int64_t e = 0; e < s->D; e++) {
          if (in) {
            double d = out[o0 + e] - ro[o0 + e];
            num += d * d, den += ro[o0 + e] * ro[o0 + e];
          } else {
            untouched &= out[o0 + e] == 1536.0f;
          }
        }
        if (in)
          lerr = fmax(lerr, fabs(lse[li] - rl[li]) / fmax(1.0, fabs(rl[li])));
        else
          untouched &= lse[li] == 1536.0f;
      }
    const double tol = dt == TD_BF16 ? 1e-2 : 1e-5, e = sqrt(num / den);
    CHECK(e < tol && lerr < 1e-5 && untouched,
          "attention_forward_rows %s p=%g rows [%lld, %lld) of %lld: rel err out %.3g lse %.3g "
          "(tol %.0e), other rows untouched: %s",
          td_dtype_name(dt), p, (long long)q0, (long long)(q0 + nq), (long long)s->T, e, lerr,
          tol, untouched ? "yes" : "NO");
  }
  run_free(dev, &r);
  free(qkv), free(dout), free(dq), free(ro), free(rl), free(out), free(lse), free(sentinel);
}

/* Forward + backward with 1 and with 2 threads give the same bits. */
static void check_threads(td_dtype dt, uint64_t stream) {
  td_device *dev = tst_device();
  att_case c = {.s = {.B = 2,
                      .T = 300,
                      .H = 3,
                      .D = 64,
                      .scale = 0.125,
                      .p = 0.1,
                      .seed = tst_seed(),
                      .stream = 5},
                .dt = dt};
  const int64_t n3 = 2 * 300 * 3 * 3 * 64, no = 2 * 300 * 3 * 64, nl = 2 * 3 * 300;
  const size_t esz = td_dtype_size(dt);
  float *qkv = malloc((size_t)n3 * 4), *dout = malloc((size_t)no * 4);
  random_inputs(&c, qkv, dout, n3, no, stream);
  att_run r = run_setup(dev, &c, qkv, dout);
  char *res[2];
  for (int t = 0; t < 2; t++) {
    omp_set_num_threads(t + 1);
    dev->ops->attention_forward(dev, &r.a);
    dev->ops->attention_backward(dev, &r.a);
    res[t] = malloc((size_t)(no + n3) * esz + (size_t)nl * 4);
    dev->ops->copy_d2h(dev, res[t], r.a.out, (size_t)no * esz);
    dev->ops->copy_d2h(dev, res[t] + no * esz, r.a.dqkv, (size_t)n3 * esz);
    dev->ops->copy_d2h(dev, res[t] + (no + n3) * esz, r.a.lse, (size_t)nl * 4);
  }
  CHECK(!memcmp(res[0], res[1], (size_t)(no + n3) * esz + (size_t)nl * 4),
        "%s %s B=2 T=300 H=3 D=64 p=0.1: out, lse, dqkv bitwise equal with 1 and 2 threads", g_path,
        td_dtype_name(dt));
  run_free(dev, &r);
  free(qkv), free(dout), free(res[0]), free(res[1]);
}

/* The rows of random words (the portable path and the vector one of the ISA in
 * use) are td_rng_u32 at every alignment, across a carry into the counter's high
 * word. */
static void check_rng_rows(void) {
  const uint64_t starts[] = {0, 1, 2, 3, 1021, (1ull << 34) - 41};
  const int64_t lens[] = {1, 5, 64, 67, 200};
  uint32_t *buf = td_malloc((200 + 67) * 4);
  const td_cpu_isa isa = td_cpu_isa_get();
  const uint32_t *(*vec)(uint64_t, uint64_t, uint64_t, int64_t, uint32_t *) =
      isa == TD_ISA_AVX512 ? td_attn_rng_row_avx512
      : isa == TD_ISA_AVX2 ? td_attn_rng_row_avx2
                           : NULL;
  int bad = 0, paths = vec ? 2 : 1;
  for (int path = 0; path < paths; path++)
    for (size_t a = 0; a < sizeof starts / sizeof *starts; a++)
      for (size_t b = 0; b < sizeof lens / sizeof *lens; b++) {
        const uint32_t *w = path ? vec(77, 3, starts[a], lens[b], buf)
                                 : td_attn_rng_row_generic(77, 3, starts[a], lens[b], buf);
        for (int64_t k = 0; k < lens[b]; k++)
          bad += w[k] != td_rng_u32(77, 3, starts[a] + (uint64_t)k);
      }
  CHECK(bad == 0, "dropout words equal td_rng_u32 (%d ISA paths): %d mismatches", paths, bad);
  td_free(buf);
}

/* Fraction kept by the keep rule at p = 0.1 over many elements. */
static void check_keep_fraction(void) {
  ref_shape s = {.p = 0.1, .seed = tst_seed(), .stream = 11};
  const int n = 200000;
  double kept = 0;
  for (int i = 0; i < n; i++) kept += keep(&s, (uint64_t)i) != 0;
  CHECK(fabs(kept / n - 0.9) < 0.005, "keep rule keeps %.4f of elements at p=0.1", kept / n);
}

/* The fp32 per-head kernels of the two ISAs on the same heads (a CPU with
 * AVX-512 runs both): the AVX2 one mirrors the AVX-512 one's arithmetic
 * (cpu_attention_f32_avx2.c), so their out, lse and dqkv must agree to a few
 * fp32 roundings; whether they match bit for bit, as written to, is printed. */
static void check_f32_isas(void) {
  if (!tst_device_is_cpu() || !__builtin_cpu_supports("avx512f") ||
      !__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vl") ||
      !__builtin_cpu_supports("avx512dq") || !__builtin_cpu_supports("avx2")) {
    printf("SKIP fp32 per-head kernels AVX2 vs AVX-512: this CPU has no AVX-512\n");
    return;
  }
  static const int64_t shapes[][4] = {{2, 300, 3, 64}, {1, 130, 2, 80}, {1, 33, 1, 8}};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
    for (int drop = 0; drop < 2; drop++) {
      const int64_t B = shapes[i][0], T = shapes[i][1], H = shapes[i][2], D = shapes[i][3];
      const int64_t n3 = B * T * H * 3 * D, no = B * T * H * D, nl = B * H * T;
      float *qkv = td_malloc((size_t)n3 * 4), *dout = td_malloc((size_t)no * 4);
      tst_fill_normal(qkv, n3, 300 + i, 1.0f);
      tst_fill_normal(dout, no, 400 + i, 1.0f);
      float *res[2];
      for (int isa = 0; isa < 2; isa++) {
        res[isa] = td_malloc((size_t)(no + nl + n3) * 4);
        td_attention_desc a = {.batch = B, .seq = T, .heads = H, .head_dim = D, .dtype = TD_F32,
                               .scale = 1.0f / sqrtf((float)D), .qkv = qkv, .out = res[isa],
                               .lse = res[isa] + no, .dout = dout, .dqkv = res[isa] + no + nl,
                               .dropout_p = drop ? 0.1f : 0.0f, .seed = 21, .stream = 4};
        td_attn_dropout dr = {.thr = drop ? (uint32_t)nearbyint((double)0.1f * 4294967296.0) : 0u,
                              .keep_scale = 1.0f / (1.0f - 0.1f)};
        size_t bytes = isa ? td_attn_f32_avx2_scratch_bytes(T, D, 1)
                           : td_attn_f32_scratch_bytes(T, D, 1);
        void *scratch = td_malloc(bytes);
        for (int64_t bh = 0; bh < B * H; bh++)
          (isa ? td_attn_f32_avx2_forward_head : td_attn_f32_forward_head)(&a, bh, dr, scratch);
        for (int64_t bh = 0; bh < B * H; bh++)
          (isa ? td_attn_f32_avx2_backward_head : td_attn_f32_backward_head)(&a, bh, dr, scratch);
        td_free(scratch);
      }
      double worst = 0, scale = 0;
      for (int64_t k = 0; k < no + nl + n3; k++) {
        worst = fmax(worst, fabs((double)res[0][k] - (double)res[1][k]));
        scale = fmax(scale, fabs((double)res[0][k]));
      }
      const int same = !memcmp(res[0], res[1], (size_t)(no + nl + n3) * 4);
      CHECK(worst <= 1e-6 * scale,
            "fp32 per-head AVX2 vs AVX-512 B=%lld T=%lld H=%lld D=%lld p=%g: max diff %.3g of "
            "max %.3g (%s)",
            (long long)B, (long long)T, (long long)H, (long long)D, drop ? 0.1 : 0.0, worst, scale,
            same ? "bitwise equal" : "NOT bitwise equal");
      td_free(qkv), td_free(dout), td_free(res[0]), td_free(res[1]);
    }
}

int main(void) {
  printf("ISA %s\n", td_cpu_isa_name(td_cpu_isa_get()));
  check_reference_gradient(0.0);
  check_reference_gradient(0.3);
  check_rng_rows();
  check_keep_fraction();
  check_f32_isas();
  static const int64_t shapes[][4] = {{1, 1, 1, 8},    {2, 7, 3, 8},   {1, 65, 3, 64},
                                      {2, 130, 1, 64}, {1, 130, 3, 8}, {2, 65, 1, 8},
                                      {1, 300, 2, 64}, {1, 33, 2, 80}};
  uint64_t stream = 100;
  /* the default choice (per-head kernels: fp32 on avx512, bf16 on AMX or
   * AVX512-BF16, else on the AVX2 heads; both on avx2), the per-head kernels without
   * AMX where the default uses AMX, those of an AVX-512 CPU without bf16 units where
   * this one has them, then td_cpu_gemm forced (with the ISA's rows); generic:
   * td_cpu_gemm only */
  int modes[4], paths = 0;
  const int avx512 = td_cpu_isa_get() == TD_ISA_AVX512;
  if (td_cpu_isa_get() != TD_ISA_GENERIC) modes[paths++] = TD_ATTN_USE_DEFAULT;
  if (avx512 && td_cpu_amx_usable()) modes[paths++] = TD_ATTN_USE_NO_AMX;
  /* what an AVX-512 CPU without AMX and AVX512-BF16 runs (bf16 on the AVX2 heads) */
  if (avx512 && td_cpu_has_avx512_bf16()) modes[paths++] = TD_ATTN_USE_NO_BF16_UNITS;
  modes[paths++] = TD_ATTN_USE_GEMM;
  for (int path = 0; path < paths; path++) {
    td_cpu_attention_use_kernels(modes[path]);
    g_path = modes[path] == TD_ATTN_USE_DEFAULT         ? "default"
             : modes[path] == TD_ATTN_USE_NO_AMX        ? "no-AMX"
             : modes[path] == TD_ATTN_USE_NO_BF16_UNITS ? "no-bf16-units"
                                                        : "td_cpu_gemm";
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
      for (int dt = 0; dt < 2; dt++)
        for (int drop = 0; drop < 2; drop++) {
          att_case c = {.s = {.B = shapes[i][0],
                              .T = shapes[i][1],
                              .H = shapes[i][2],
                              .D = shapes[i][3],
                              .scale = 1.0 / sqrt((double)shapes[i][3]),
                              .p = drop ? 0.1 : 0.0,
                              .seed = tst_seed() + i,
                              .stream = 7 + i},
                        .dt = dt ? TD_BF16 : TD_F32};
          check_case(&c, stream += 2);
        }
    check_threads(TD_F32, stream += 2);
    check_threads(TD_BF16, stream += 2);
  }
  for (int dt = 0; dt < 2; dt++) /* one path: rows always run on td_cpu_gemm */
    for (int drop = 0; drop < 2; drop++) check_rows(dt ? TD_BF16 : TD_F32, drop ? 0.1 : 0.0, stream += 2);
  return tst_finish();
}
