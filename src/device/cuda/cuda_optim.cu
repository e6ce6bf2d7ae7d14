/* AdamW, sum of squares and zero count on the CUDA backend.
 *
 * sum_squares is a fixed two-stage reduction in double: block k sums the squares
 * of elements [k * SQ_CHUNK, (k + 1) * SQ_CHUNK) (each thread a fixed stride,
 * then td_block_sum's tree), one block adds the chunks' sums (each thread a fixed
 * stride of them, then the tree). The blocking depends on n alone, so the result
 * is reproducible bit for bit; NaN and Inf propagate through the sums. count_zeros
 * adds integers, exact in any order. Both leave their result in device memory
 * and do not wait. */
#include <math.h>

#include "device/cuda/cuda_internal.cuh"

#define SQ_CHUNK 16384    /* elements per first-stage block */
#define SQ_FINAL_THREADS 1024

/* AdamW (device.h) on n fp32 elements; inv_bc1 = 1 / (1 - beta1^t), inv_bc2 likewise
 * (computed by the host in double, then float, as the CPU does). The weight copy
 * (bf16 or fp16, NULL: none) is written from the new value in the same pass. */
__global__ void td_adamw_kernel(float *param, const float *grad, float *m, float *v, int64_t n,
                                float lr, float beta1, float beta2, float eps, float wd,
                                float grad_scale, float inv_bc1, float inv_bc2,
                                __nv_bfloat16 *copy_bf16, __half *copy_f16) {
  TD_GRID_STRIDE(i, n) {
    float g = grad[i] * grad_scale;
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    float update = mi * inv_bc1 / (sqrtf(vi * inv_bc2) + eps);
    float p = param[i] - lr * (wd * param[i] + update);
    param[i] = p;
    m[i] = mi;
    v[i] = vi;
    if (copy_bf16) copy_bf16[i] = __float2bfloat16_rn(p);
    if (copy_f16) copy_f16[i] = __float2half_rn(p);
  }
}

static void cu_adamw(td_device *d, float *param, const float *grad, float *m, float *v, int64_t n,
                     float lr, float beta1, float beta2, float eps, float weight_decay,
                     float grad_scale, int64_t step, void *copy, td_dtype copy_dtype) {
  td_cuda *c = td_cuda_enter(d);
  if (step < 1) td_fail("adamw step %lld: steps count from 1", (long long)step);
  if (copy && copy_dtype != TD_BF16 && copy_dtype != TD_F16)
    td_fail("adamw: the weight copy is bf16 or fp16, not %s", td_dtype_name(copy_dtype));
  if (n <= 0) return;
  float inv_bc1 = (float)(1.0 / (1.0 - pow(beta1, (double)step)));
  float inv_bc2 = (float)(1.0 / (1.0 - pow(beta2, (double)step)));
  td_adamw_kernel<<<td_cuda_grid(c, n, TD_CUDA_THREADS), TD_CUDA_THREADS, 0, c->stream>>>(
      param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, inv_bc1, inv_bc2,
      copy && copy_dtype == TD_BF16 ? (__nv_bfloat16 *)copy : NULL,
      copy && copy_dtype == TD_F16 ? (__half *)copy : NULL);
  TD_CUDA_LAUNCHED();
}

/* part[k] = sum of x[i]^2 (double) over chunk k = blockIdx.x (grid-stride over chunks) */
__global__ void td_sumsq_partial_kernel(double *part, const float *x, int64_t n, int64_t nchunks) {
  __shared__ double red[33];
  for (int64_t k = blockIdx.x; k < nchunks; k += gridDim.x) {
    const int64_t i0 = k * SQ_CHUNK, i1 = min(n, i0 + SQ_CHUNK);
    double s = 0;
    for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) s += (double)x[i] * x[i];
    s = td_block_sum(s, red);
    if (threadIdx.x == 0) part[k] = s;
  }
}

/* *out = sum of part[0 .. nparts) in a fixed order (one block) */
__global__ void td_sum_parts_kernel(double *out, const double *part, int64_t nparts) {
  __shared__ double red[33];
  double s = 0;
  for (int64_t k = threadIdx.x; k < nparts; k += blockDim.x) s += part[k];
  s = td_block_sum(s, red);
  if (threadIdx.x == 0) *out = s;
}

/* *out = 0 (an empty reduction) */
__global__ void td_zero_double_kernel(double *out) { *out = 0.0; }

static void cu_sum_squares(td_device *d, double *out, const float *x, int64_t n) {
  td_cuda *c = td_cuda_enter(d);
  if (n <= 0) {
    td_zero_double_kernel<<<1, 1, 0, c->stream>>>(out);
    TD_CUDA_LAUNCHED();
    return;
  }
  int64_t nchunks = (n + SQ_CHUNK - 1) / SQ_CHUNK;
  double *part = (double *)td_cuda_scratch(c, (size_t)nchunks * sizeof(double));
  unsigned grid = (unsigned)(nchunks < 65536 * 16 ? nchunks : 65536 * 16);
  td_sumsq_partial_kernel<<<grid, TD_CUDA_THREADS, 0, c->stream>>>(part, x, n, nchunks);
  TD_CUDA_LAUNCHED();
  td_sum_parts_kernel<<<1, SQ_FINAL_THREADS, 0, c->stream>>>(out, part, nchunks);
  TD_CUDA_LAUNCHED();
}

/* *count += the number of x[i] == 0 (+0 or -0): per-block counts, one integer
 * atomic per block (integer sums are exact in any order). */
__global__ void td_count_zeros_kernel(unsigned long long *count, const float *x, int64_t n) {
  __shared__ unsigned long long red[33];
  unsigned long long z = 0;
  TD_GRID_STRIDE(i, n) z += x[i] == 0.0f;
  z = td_block_sum(z, red);
  if (threadIdx.x == 0 && z) atomicAdd(count, z);
}

/* *out = (double)*count */
__global__ void td_count_to_double_kernel(double *out, const unsigned long long *count) {
  *out = (double)*count;
}

static void cu_count_zeros(td_device *d, double *out, const float *x, int64_t n) {
  td_cuda *c = td_cuda_enter(d);
  unsigned long long *count = (unsigned long long *)c->reduce;
  TD_CUDA_OK(cudaMemsetAsync(count, 0, sizeof *count, c->stream));
  if (n > 0) {
    td_count_zeros_kernel<<<td_cuda_grid(c, n, TD_CUDA_THREADS), TD_CUDA_THREADS, 0,
                            c->stream>>>(count, x, n);
    TD_CUDA_LAUNCHED();
  }
  td_count_to_double_kernel<<<1, 1, 0, c->stream>>>(out, count);
  TD_CUDA_LAUNCHED();
}

void td_cuda_register_optim(td_device_ops *ops) {
  ops->adamw = cu_adamw;
  ops->sum_squares = cu_sum_squares;
  ops->count_zeros = cu_count_zeros;
}
