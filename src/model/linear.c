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

/* y = x w^T + b */
static td_matmul_desc forward_desc(void *y, td_dtype y_dtype, const void *x, const void *w,
                                   const float *b, int64_t n, int64_t in, int64_t out,
                                   td_dtype dtype) {
  td_matmul_desc g = matmul(n, out, in, dtype, y_dtype);
  g.a = x, g.lda = in;
  g.b = w, g.ldb = in, g.trans_b = 1;
  g.c = y, g.ldc = out;
  g.bias = b;
  return g;
}

/* dx = dy w */
static td_matmul_desc backward_input_desc(void *dx, td_dtype dx_dtype, const void *dy,
                                          const void *w, int64_t n, int64_t in, int64_t out,
                                          td_dtype dtype) {
  td_matmul_desc g = matmul(n, in, out, dtype, dx_dtype);
  g.a = dy, g.lda = out;
  g.b = w, g.ldb = in;
  g.c = dx, g.ldc = in;
  return g;
}

void td_linear_forward(td_device *d, void *y, td_dtype y_dtype, const void *x, const void *w,
                       const float *b, int64_t n, int64_t in, int64_t out, td_dtype dtype) {
  td_matmul_desc g = forward_desc(y, y_dtype, x, w, b, n, in, out, dtype);
  d->ops->matmul(d, &g);
}

void td_linear_forward_residual(td_device *d, float *y, const float *resid, const void *x,
                                const void *w, const float *b, int64_t n, int64_t in, int64_t out,
                                td_dtype dtype, int fuse) {
  td_matmul_desc g = forward_desc(y, TD_F32, x, w, b, n, in, out, dtype);
  g.c_in = resid, g.beta = 1.0f;
  if (fuse && td_device_matmul_fuses(d, &g))
    d->ops->matmul(d, &g);
  else
    td_device_matmul_unfused(d, &g, NULL, NULL);
}

void td_linear_forward_gelu(td_device *d, void *act, void *pre, td_dtype y_dtype, const void *x,
                            const void *w, const float *b, int64_t n, int64_t in, int64_t out,
                            td_dtype dtype, td_gelu_kind kind, int fuse) {
  td_matmul_desc g = forward_desc(act, y_dtype, x, w, b, n, in, out, dtype);
  g.epilogue = TD_EPILOGUE_GELU_AUX, g.aux = pre, g.ldaux = out, g.gelu_kind = kind;
  if (fuse && td_device_matmul_fuses(d, &g))
    d->ops->matmul(d, &g);
  else
    td_device_matmul_unfused(d, &g, NULL, NULL);
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
  td_matmul_desc g = backward_input_desc(dx, dx_dtype, dy, w, n, in, out, dtype);
  d->ops->matmul(d, &g);
}

void td_linear_backward_input_dgelu(td_device *d, void *dpre, td_dtype dx_dtype, float *dbias,
                                    float *scratch, const void *dy, const void *w, const void *pre,
                                    int64_t n, int64_t in, int64_t out, td_dtype dtype,
                                    td_gelu_kind kind, int fuse) {
  td_matmul_desc g = backward_input_desc(dpre, dx_dtype, dy, w, n, in, out, dtype);
  g.epilogue = TD_EPILOGUE_DGELU, g.aux = (void *)pre, g.ldaux = in, g.gelu_kind = kind;
  if (fuse && td_device_matmul_fuses(d, &g)) {
    d->ops->matmul(d, &g);
    d->ops->bias_backward(d, dbias, dpre, dx_dtype, n, in, NULL, TD_F32);
  } else {
    td_device_matmul_unfused(d, &g, scratch, dbias);
  }
}
