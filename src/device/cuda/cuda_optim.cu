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
#include <string.h>

#include "device/cuda/cuda_internal.cuh"

#define SQ_CHUNK 16384    /* elements per first-stage block */
#define SQ_FINAL_THREADS 1024

/* AdamW (device.h) on element i; inv_bc1 = 1 / (1 - beta1^t), inv_bc2 likewise
 * (computed by the host in double, then float, as the CPU does). The weight copy
 * (bf16 or fp16, NULL: none) is written from the new value in the same pass. */
struct td_adamw_consts {
  float lr, beta1, beta2, eps, grad_scale, inv_bc1, inv_bc2;
};

__device__ __forceinline__ void td_adamw_elem(float *param, const float *grad, float *m, float *v,
                                              int64_t i, const td_adamw_consts &k, float wd,
                                              __nv_bfloat16 *copy_bf16, __half *copy_f16) {
  float g = grad[i] * k.grad_scale;
  float mi = k.beta1 * m[i] + (1.0f - k.beta1) * g;
  float vi = k.beta2 * v[i] + (1.0f - k.beta2) * g * g;
  float update = mi * k.inv_bc1 / (sqrtf(vi * k.inv_bc2) + k.eps);
  float p = param[i] - k.lr * (wd * param[i] + update);
  param[i] = p;
  m[i] = mi;
  v[i] = vi;
  if (copy_bf16) copy_bf16[i] = __float2bfloat16_rn(p);
  if (copy_f16) copy_f16[i] = __float2half_rn(p);
}

/* AdamW on n fp32 elements */
__global__ void td_adamw_kernel(float *param, const float *grad, float *m, float *v, int64_t n,
                                td_adamw_consts k, float wd, __nv_bfloat16 *copy_bf16,
                                __half *copy_f16) {
  TD_GRID_STRIDE(i, n) td_adamw_elem(param, grad, m, v, i, k, wd, copy_bf16, copy_f16);
}

/* adamw_runs' work list: runs cut into pieces of at most ADAM_CHUNK elements, one
 * block's at a time, so one launch covers a model's tensors of every size. */
#define ADAM_CHUNK 8192
struct td_adam_chunk {
  int64_t param, grad, state; /* element offsets of the piece */
  int32_t numel, decay;
};

__global__ void td_adamw_chunks_kernel(float *param, const float *grad, float *m, float *v,
                                       const td_adam_chunk *chunks, int64_t nchunks,
                                       td_adamw_consts k, float wd, __nv_bfloat16 *copy_bf16,
                                       __half *copy_f16) {
  for (int64_t j = blockIdx.x; j < nchunks; j += gridDim.x) {
    const td_adam_chunk ch = chunks[j];
    const float w = ch.decay ? wd : 0.0f;
    __nv_bfloat16 *cb = copy_bf16 ? copy_bf16 + ch.param : NULL;
    __half *ch16 = copy_f16 ? copy_f16 + ch.param : NULL;
    for (int i = threadIdx.x; i < ch.numel; i += blockDim.x)
      td_adamw_elem(param + ch.param, grad + ch.grad, m + ch.state, v + ch.state, i, k, w, cb,
                    ch16);
  }
}

/* The chunk table of the runs last seen, kept on the device (a trainer passes the
 * same runs every step: built and uploaded once). */
struct td_cuda_adam {
  td_adam_run *runs; /* host copy of the runs it was built from */
  int n_runs;
  td_adam_chunk *chunks; /* device */
  int64_t nchunks;
};

void td_cuda_adam_release(td_cuda *c) {
  if (!c->adam) return;
  if (c->adam->chunks) TD_CUDA_OK(cudaFree(c->adam->chunks));
  td_free(c->adam->runs);
  td_free(c->adam);
  c->adam = NULL;
}

static const td_adam_chunk *td_adam_chunks(td_cuda *c, const td_adam_run *runs, int n_runs,
                                           int64_t *nchunks) {
  td_cuda_adam *a = c->adam;
  if (a && a->n_runs == n_runs && !memcmp(a->runs, runs, sizeof *runs * (size_t)n_runs)) {
    *nchunks = a->nchunks;
    return a->chunks;
  }
  td_cuda_adam_release(c);
  int64_t n = 0;
  for (int i = 0; i < n_runs; i++) n += (runs[i].numel + ADAM_CHUNK - 1) / ADAM_CHUNK;
  td_adam_chunk *host = (td_adam_chunk *)td_malloc(sizeof *host * (size_t)(n ? n : 1));
  int64_t j = 0;
  for (int i = 0; i < n_runs; i++)
    for (int64_t e = 0; e < runs[i].numel; e += ADAM_CHUNK)
      host[j++] = {runs[i].param_offset + e, runs[i].grad_offset + e, runs[i].state_offset + e,
                   (int32_t)(runs[i].numel - e < ADAM_CHUNK ? runs[i].numel - e : ADAM_CHUNK),
                   runs[i].weight_decay};
  a = (td_cuda_adam *)td_calloc(sizeof *a);
  a->runs = (td_adam_run *)td_malloc(sizeof *runs * (size_t)(n_runs ? n_runs : 1));
  memcpy(a->runs, runs, sizeof *runs * (size_t)n_runs);
  a->n_runs = n_runs, a->nchunks = n;
  if (n) {
    TD_CUDA_OK(cudaMalloc((void **)&a->chunks, sizeof *host * (size_t)n));
    /* synchronous: the host table is freed next (once per set of runs) */
    TD_CUDA_OK(cudaMemcpy(a->chunks, host, sizeof *host * (size_t)n, cudaMemcpyHostToDevice));
  }
  td_free(host);
  c->adam = a;
  *nchunks = n;
  return a->chunks;
}

static td_adamw_consts td_adamw_prepare(float lr, float beta1, float beta2, float eps,
                                        float grad_scale, int64_t step, const void *copy,
                                        td_dtype copy_dtype) {
  if (step < 1) td_fail("adamw step %lld: steps count from 1", (long long)step);
  if (copy && copy_dtype != TD_BF16 && copy_dtype != TD_F16)
    td_fail("adamw: the weight copy is bf16 or fp16, not %s", td_dtype_name(copy_dtype));
  return {lr, beta1, beta2, eps, grad_scale, (float)(1.0 / (1.0 - pow(beta1, (double)step))),
          (float)(1.0 / (1.0 - pow(beta2, (double)step)))};
}

static void cu_adamw(td_device *d, float *param, const float *grad, float *m, float *v, int64_t n,
                     float lr, float beta1, float beta2, float eps, float weight_decay,
                     float grad_scale, int64_t step, void *copy, td_dtype copy_dtype) {
  td_cuda *c = td_cuda_enter(d);
  td_adamw_consts k = td_adamw_prepare(lr, beta1, beta2, eps, grad_scale, step, copy, copy_dtype);
  if (n <= 0) return;
  td_adamw_kernel<<<td_cuda_grid(c, n, TD_CUDA_THREADS), TD_CUDA_THREADS, 0, c->stream>>>(
      param, grad, m, v, n, k, weight_decay,
      copy && copy_dtype == TD_BF16 ? (__nv_bfloat16 *)copy : NULL,
      copy && copy_dtype == TD_F16 ? (__half *)copy : NULL);
  TD_CUDA_LAUNCHED();
}

static void cu_adamw_runs(td_device *d, float *params, const float *grads, float *m, float *v,
                          const td_adam_run *runs, int n_runs, float lr, float beta1, float beta2,
                          float eps, float weight_decay, float grad_scale, int64_t step,
                          void *copy, td_dtype copy_dtype) {
  td_cuda *c = td_cuda_enter(d);
  td_adamw_consts k = td_adamw_prepare(lr, beta1, beta2, eps, grad_scale, step, copy, copy_dtype);
  for (int i = 0; i < n_runs; i++)
    if (runs[i].numel < 0) td_fail("adamw_runs: run %d has %lld elements", i, (long long)runs[i].numel);
  int64_t nchunks;
  const td_adam_chunk *chunks = td_adam_chunks(c, runs, n_runs, &nchunks);
  if (nchunks == 0) return;
  unsigned grid = (unsigned)(nchunks < (int64_t)c->sm_count * 16 ? nchunks : (int64_t)c->sm_count * 16);
  td_adamw_chunks_kernel<<<grid, TD_CUDA_THREADS, 0, c->stream>>>(
      params, grads, m, v, chunks, nchunks, k, weight_decay,
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
  ops->adamw_runs = cu_adamw_runs;
  ops->sum_squares = cu_sum_squares;
  ops->count_zeros = cu_count_zeros;
}
