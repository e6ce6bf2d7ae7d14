#include "model/linear.h"

/* A single (batch = 1) C = alpha op(A) op(B) + beta C with dense row strides. */
static td_matmul_desc matmul(int64_t m, int64_t n, int64_t k, td_dtype ab, td_dtype c_dtype) {
  td_matmul_desc g = {0};
  g.m = m, g.n = n, g.k = k;
  g.ab_dtype = ab, g.c_dtype = c_dtype;
  g.alpha = 1.0f;
  g.batch = 1;
  return g;
}

void td_linear_forward(td_device *d, void *y, td_dtype y_dtype, const void *x, const void *w,
                       const float *b, int64_t n, int64_t in, int64_t out, td_dtype dtype) {
  td_matmul_desc g = matmul(n, out, in, dtype, y_dtype);
  g.a = x, g.lda = in;
  g.b = w, g.ldb = in, g.trans_b = 1;
  g.c = y, g.ldc = out;
  g.bias = b;
  d->ops->matmul(d, &g);
}

void td_linear_backward_weight(td_device *d, float *dw, const void *dy, const void *x, int64_t n,
                               int64_t in, int64_t out, td_dtype dtype) {
  td_matmul_desc g = matmul(out, in, n, dtype, TD_F32);
  g.a = dy, g.lda = out, g.trans_a = 1;
  g.b = x, g.ldb = in;
  g.c = dw, g.ldc = in;
  g.beta = 1.0f;
  d->ops->matmul(d, &g);
}

void td_linear_backward_input(td_device *d, void *dx, td_dtype dx_dtype, const void *dy,
                              const void *w, int64_t n, int64_t in, int64_t out, td_dtype dtype) {
  td_matmul_desc g = matmul(n, in, out, dtype, dx_dtype);
  g.a = dy, g.lda = out;
  g.b = w, g.ldb = in;
  g.c = dx, g.ldc = in;
  d->ops->matmul(d, &g);
}
