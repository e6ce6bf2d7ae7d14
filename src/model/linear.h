/* A Linear layer stored as PyTorch's and Megatron's: w is [out, in], y = x w^T + b.
 * x, w and dy share one dtype (TD_F32 or TD_BF16: the model's matmul input
 * dtype); weight gradients and the accumulation are fp32. n is the number of rows
 * (tokens). */
#ifndef TD_MODEL_LINEAR_H
#define TD_MODEL_LINEAR_H

#include <stdint.h>

#include "device/device.h"

/* y[n, out] = x[n, in] @ w[out, in]^T + b[out] (b may be NULL); y in y_dtype */
void td_linear_forward(td_device *d, void *y, td_dtype y_dtype, const void *x, const void *w,
                       const float *b, int64_t n, int64_t in, int64_t out, td_dtype dtype);

/* dw[out, in] += dy[n, out]^T @ x[n, in] */
void td_linear_backward_weight(td_device *d, float *dw, const void *dy, const void *x, int64_t n,
                               int64_t in, int64_t out, td_dtype dtype);

/* dx[n, in] = dy[n, out] @ w[out, in] (overwrites); dx in dx_dtype */
void td_linear_backward_input(td_device *d, void *dx, td_dtype dx_dtype, const void *dy,
                              const void *w, int64_t n, int64_t in, int64_t out, td_dtype dtype);

#endif
