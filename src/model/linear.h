/* A Linear layer stored as PyTorch's and Megatron's: w is [out, in], y = x w^T + b.
 * x, w and dy share one dtype (TD_F32 or TD_BF16: the model's matmul input
 * dtype); weight gradients and the accumulation are fp32. n is the number of rows
 * (tokens).
 *
 * The fused forms (a residual, a GELU or its gradient with the GEMM) run as one
 * GEMM where the device's matmul_fuses offers it (cuBLASLt's epilogues) and fuse
 * is 1, and as the GEMM followed by the elementwise ops otherwise: the same
 * math, the fused one from the fp32 product before its rounding. */
#ifndef TD_MODEL_LINEAR_H
#define TD_MODEL_LINEAR_H

#include <stdint.h>

#include "device/device.h"

/* y[n, out] = x[n, in] @ w[out, in]^T + b[out] (b may be NULL); y in y_dtype */
void td_linear_forward(td_device *d, void *y, td_dtype y_dtype, const void *x, const void *w,
                       const float *b, int64_t n, int64_t in, int64_t out, td_dtype dtype);

/* y[n, out] = resid + x w^T + b (fp32; y and resid distinct): the residual stream
 * after a layer without dropout. Unfused: y = x w^T + b, then add (add's bits). */
void td_linear_forward_residual(td_device *d, float *y, const float *resid, const void *x,
                                const void *w, const float *b, int64_t n, int64_t in, int64_t out,
                                td_dtype dtype, int fuse);

/* pre[n, out] = x w^T + b and act = gelu(pre) (kind), both in y_dtype (the MLP's
 * first layer). Unfused: td_linear_forward into pre, then gelu_forward. */
void td_linear_forward_gelu(td_device *d, void *act, void *pre, td_dtype y_dtype, const void *x,
                            const void *w, const float *b, int64_t n, int64_t in, int64_t out,
                            td_dtype dtype, td_gelu_kind kind, int fuse);

/* dw[out, in] += dy[n, out]^T @ x[n, in] */
void td_linear_backward_weight(td_device *d, float *dw, const void *dy, const void *x, int64_t n,
                               int64_t in, int64_t out, td_dtype dtype);

/* dx[n, in] = dy[n, out] @ w[out, in] (overwrites); dx in dx_dtype */
void td_linear_backward_input(td_device *d, void *dx, td_dtype dx_dtype, const void *dy,
                              const void *w, int64_t n, int64_t in, int64_t out, td_dtype dtype);

/* The backward of td_linear_forward_gelu's activation through the layer after it:
 * dpre[n, in] = (dy @ w) * gelu'(pre) in dx_dtype (pre: [n, in] in dx_dtype), and
 * dbias[in] += its column sums (the first layer's bias gradient). Fused: the GEMM
 * writes dpre, and the bias sums dpre as stored (bf16 under bf16, as PyTorch's
 * autocast sums it). Unfused: the fp32 product into scratch ([n, in] floats; it
 * may be dpre when dx_dtype is fp32), then gelu_backward with the bias from the
 * fp32 values. */
void td_linear_backward_input_dgelu(td_device *d, void *dpre, td_dtype dx_dtype, float *dbias,
                                    float *scratch, const void *dy, const void *w, const void *pre,
                                    int64_t n, int64_t in, int64_t out, td_dtype dtype,
                                    td_gelu_kind kind, int fuse);

#endif
