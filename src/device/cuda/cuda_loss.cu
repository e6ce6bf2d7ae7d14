/* Softmax cross-entropy on the CUDA backend: forward, the vocabulary-parallel
 * slice, backward (device.h).
 *
 * Row log-sum-exp: one block per row; each thread keeps an online (max, sum) over
 * its strided elements (sum in double of expf terms, as the CPU sums), the
 * threads' pairs are merged by the block's fixed tree:
 *   M = max_t m_t,  S = sum_t s_t exp(m_t - M),  lse = M + log S.
 * A target outside [0, vocab) in cross_entropy_forward is an input error (the CPU
 * fails on it): the row's loss becomes NaN and the handle's error flag is set, so
 * the next synchronising call (synchronize, copy_d2h, a reduction) fails with the
 * reason. */
#include "device/cuda/cuda_internal.cuh"

#define XENT_COLS_PER_BLOCK 2048 /* backward: columns per block (8 per thread) */

/* logsumexp of row[0 .. vocab), returned to every thread of the block */
__device__ float td_row_logsumexp(const float *row, int64_t vocab, float *redf, double *redd) {
  float m = -INFINITY;
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    float x = row[j];
    if (x == -INFINITY) continue; /* adds exp(-inf) = 0 (all -inf: M is -inf, lse NaN as on the CPU) */
    if (x > m) {
      s = s * (double)expf(m - x); /* 0 while m is -inf */
      m = x;
    }
    s += (double)expf(x - m); /* NaN stays NaN */
  }
  const float M = td_block_max(m, redf);
  const double part = s * (double)expf(m - M); /* a thread without terms: 0 * 0 */
  const double S = td_block_sum(part, redd);
  return (float)((double)M + log(S));
}

/* Per row r of logits (n x vocab): lse[r] = logsumexp, losses[r] = lse - logits[r, t]
 * (t = targets[r]; outside [0, vocab): NaN and the error flag). One block per row. */
__global__ void td_xent_forward_kernel(float *losses, float *lse, const float *logits,
                                       const int32_t *targets, int64_t n, int64_t vocab,
                                       int *err) {
  __shared__ float redf[33];
  __shared__ double redd[33];
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const float *row = logits + r * vocab;
    const float l = td_row_logsumexp(row, vocab, redf, redd);
    if (threadIdx.x == 0) {
      const int32_t t = targets[r];
      lse[r] = l;
      if (t >= 0 && t < vocab) {
        losses[r] = l - row[t];
      } else {
        losses[r] = NAN;
        *(volatile int *)err = TD_CUDA_ERR_TARGET; /* mapped host memory: a plain store */
      }
    }
  }
}

/* The vocabulary slice's pieces: lse[r] over the slice; target_logit[r] =
 * logits[r, targets[r] - vocab_start] when that is in [0, vocab), else 0. */
__global__ void td_xent_slice_kernel(float *lse, float *target_logit, const float *logits,
                                     const int32_t *targets, int64_t n, int64_t vocab,
                                     int64_t vocab_start) {
  __shared__ float redf[33];
  __shared__ double redd[33];
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const float *row = logits + r * vocab;
    const float l = td_row_logsumexp(row, vocab, redf, redd);
    if (threadIdx.x == 0) {
      const int64_t t = (int64_t)targets[r] - vocab_start;
      lse[r] = l;
      target_logit[r] = t >= 0 && t < vocab ? row[t] : 0.0f;
    }
  }
}

/* dlogits[r, j] = exp(logits[r, j] - lse[r]) dloss[r] - (j == t ? dloss[r] : 0),
 * t = targets[r] - vocab_start; dlogits may alias logits (each element is read,
 * then written, by one thread). grid (rows, ceil(vocab / XENT_COLS_PER_BLOCK)).
 * The product is rounded before the target's subtraction, as the CPU does. */
template <typename T>
__global__ void td_xent_backward_kernel(T *dlogits, const float *logits, const float *lse,
                                        const int32_t *targets, const float *dloss, int64_t n,
                                        int64_t vocab, int64_t vocab_start) {
  const int64_t j0 = (int64_t)blockIdx.y * XENT_COLS_PER_BLOCK;
  const int64_t j1 = min(vocab, j0 + XENT_COLS_PER_BLOCK);
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const float l = lse[r], g = dloss[r];
    const int64_t t = (int64_t)targets[r] - vocab_start;
    for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
      const int64_t i = r * vocab + j;
      float v = __fmul_rn(expf(logits[i] - l), g);
      if (j == t) v = v - g;
      td_st(dlogits, i, v);
    }
  }
}

static unsigned row_grid(int64_t n) { return (unsigned)(n < 65536 * 16 ? n : 65536 * 16); }

static void cu_cross_entropy_forward(td_device *d, float *losses, float *lse, const float *logits,
                                     const int32_t *targets, int64_t n, int64_t vocab) {
  td_cuda *c = td_cuda_enter(d);
  if (n <= 0) return;
  td_xent_forward_kernel<<<row_grid(n), TD_CUDA_THREADS, 0, c->stream>>>(losses, lse, logits,
                                                                         targets, n, vocab, c->err_dev);
  TD_CUDA_LAUNCHED();
}

static void cu_cross_entropy_slice(td_device *d, float *lse, float *target_logit,
                                   const float *logits, const int32_t *targets, int64_t n,
                                   int64_t vocab, int64_t vocab_start) {
  td_cuda *c = td_cuda_enter(d);
  if (n <= 0) return;
  td_xent_slice_kernel<<<row_grid(n), TD_CUDA_THREADS, 0, c->stream>>>(lse, target_logit, logits,
                                                                       targets, n, vocab, vocab_start);
  TD_CUDA_LAUNCHED();
}

static void cu_cross_entropy_backward(td_device *d, void *dlogits, td_dtype dlogits_dtype,
                                      const float *logits, const float *lse,
                                      const int32_t *targets, const float *dloss, int64_t n,
                                      int64_t vocab, int64_t vocab_start) {
  td_cuda *c = td_cuda_enter(d);
  if (dlogits_dtype != TD_F32 && dlogits_dtype != TD_BF16)
    td_fail("cross_entropy_backward: dlogits are fp32 or bf16, not %s",
            td_dtype_name(dlogits_dtype));
  if (n <= 0 || vocab <= 0) return;
  int64_t chunks = (vocab + XENT_COLS_PER_BLOCK - 1) / XENT_COLS_PER_BLOCK;
  if (chunks > 65535) td_fail("cross_entropy_backward: vocabulary slice of %lld", (long long)vocab);
  dim3 grid(row_grid(n), (unsigned)chunks);
  if (dlogits_dtype == TD_BF16)
    td_xent_backward_kernel<<<grid, TD_CUDA_THREADS, 0, c->stream>>>(
        (uint16_t *)dlogits, logits, lse, targets, dloss, n, vocab, vocab_start);
  else
    td_xent_backward_kernel<<<grid, TD_CUDA_THREADS, 0, c->stream>>>(
        (float *)dlogits, logits, lse, targets, dloss, n, vocab, vocab_start);
  TD_CUDA_LAUNCHED();
}

/* The vocabulary-parallel combine (device.h): a thread per row, in double. */
__global__ void td_xent_combine_kernel(float *lse, float *losses, const float *parts,
                                       const float *target_logit, int64_t n, int64_t nparts) {
  TD_GRID_STRIDE(r, n) {
    double mx = -INFINITY, sum = 0;
    for (int64_t p = 0; p < nparts; p++) mx = fmax(mx, (double)parts[p * n + r]);
    for (int64_t p = 0; p < nparts; p++) sum += exp((double)parts[p * n + r] - mx);
    float l = (float)(mx + log(sum));
    lse[r] = l;
    losses[r] = l - target_logit[r];
  }
}

static void cu_cross_entropy_combine(td_device *d, float *lse, float *losses,
                                     const float *lse_parts, const float *target_logit, int64_t n,
                                     int64_t parts) {
  td_cuda *c = td_cuda_enter(d);
  if (n <= 0) return;
  td_xent_combine_kernel<<<td_cuda_grid(c, n, TD_CUDA_THREADS), TD_CUDA_THREADS, 0, c->stream>>>(
      lse, losses, lse_parts, target_logit, n, parts);
  TD_CUDA_LAUNCHED();
}

/* *out = sum of x[i] * mask[i] in double: one block, each thread a fixed stride,
 * then td_block_sum's fixed tree (a micro-batch's tokens: one block is enough). */
__global__ void td_masked_sum_kernel(double *out, const float *x, const float *mask, int64_t n) {
  __shared__ double red[33];
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += (double)x[i] * mask[i];
  s = td_block_sum(s, red);
  if (threadIdx.x == 0) *out = s;
}

/* n == 0 runs too: the kernel writes 0. */
static void cu_masked_sum(td_device *d, double *out, const float *x, const float *mask,
                          int64_t n) {
  td_cuda *c = td_cuda_enter(d);
  td_masked_sum_kernel<<<1, 1024, 0, c->stream>>>(out, x, mask, n);
  TD_CUDA_LAUNCHED();
}

void td_cuda_register_loss(td_device_ops *ops) {
  ops->cross_entropy_combine = cu_cross_entropy_combine;
  ops->masked_sum = cu_masked_sum;
  ops->cross_entropy_forward = cu_cross_entropy_forward;
  ops->cross_entropy_slice = cu_cross_entropy_slice;
  ops->cross_entropy_backward = cu_cross_entropy_backward;
}
