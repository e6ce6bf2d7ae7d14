/* Softmax cross-entropy on the CUDA backend: forward, the vocabulary-parallel
 * slice, backward, and forward + backward in one pass (device.h), over fp32 or
 * bf16 logits (a template per storage type: float, or bf16 as uint16_t).
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

#define XENT_COLS_PER_BLOCK 2048 /* backward: columns per block (8 per thread; a multiple of 16 bytes) */

/* Elements of p[0 .. len) before the first 16-byte boundary (all when fewer). */
template <typename L>
__device__ __forceinline__ int64_t td_head_elems(const L *p, int64_t len) {
  const int64_t h = (int64_t)(((16 - ((uintptr_t)p & 15)) & 15) / sizeof(L));
  return h < len ? h : len;
}

/* f(j, p[j] as fp32) for the elements j of p[0 .. len) that this thread owns: an
 * unaligned head and the tail one element per thread, the body between them
 * from 16-byte loads (4 fp32 or 8 bf16 a thread). Which thread owns an element
 * depends on len and on p's offset from a 16-byte boundary only. */
template <typename L, typename F>
__device__ __forceinline__ void td_for_each_elem(const L *p, int64_t len, F f) {
  constexpr int VEC = 16 / sizeof(L);
  const int64_t head = td_head_elems(p, len), body = head + (len - head) / VEC * VEC;
  for (int64_t j = threadIdx.x; j < head; j += blockDim.x) f(j, td_ld(p, j));
  for (int64_t j = head + (int64_t)threadIdx.x * VEC; j < body; j += (int64_t)blockDim.x * VEC) {
    const uint4 q = *reinterpret_cast<const uint4 *>(p + j);
    L e[VEC];
    memcpy(e, &q, sizeof q); /* register moves */
#pragma unroll
    for (int k = 0; k < VEC; k++) f(j + k, td_ld(e, k));
  }
  for (int64_t j = body + threadIdx.x; j < len; j += blockDim.x) f(j, td_ld(p, j));
}

/* logsumexp of row[0 .. vocab) (fp32, or bf16 as uint16_t), returned to every
 * thread of the block */
template <typename L>
__device__ float td_row_logsumexp(const L *row, int64_t vocab, float *redf, double *redd) {
  float m = -INFINITY;
  double s = 0.0;
  td_for_each_elem(row, vocab, [&](int64_t, float x) {
    if (x == -INFINITY) return; /* adds exp(-inf) = 0 (all -inf: M is -inf, lse NaN as on the CPU) */
    if (x > m) {
      s = s * (double)expf(m - x); /* 0 while m is -inf */
      m = x;
    }
    s += (double)expf(x - m); /* NaN stays NaN */
  });
  const float M = td_block_max(m, redf);
  const double part = s * (double)expf(m - M); /* a thread without terms: 0 * 0 */
  const double S = td_block_sum(part, redd);
  return (float)((double)M + log(S));
}

/* Per row r of logits (n x vocab): lse[r] = logsumexp, losses[r] = lse - logits[r, t]
 * (t = targets[r]; outside [0, vocab): NaN and the error flag). One block per row. */
template <typename L>
__global__ void td_xent_forward_kernel(float *losses, float *lse, const L *logits,
                                       const int32_t *targets, int64_t n, int64_t vocab,
                                       int *err) {
  __shared__ float redf[33];
  __shared__ double redd[33];
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const L *row = logits + r * vocab;
    const float l = td_row_logsumexp(row, vocab, redf, redd);
    if (threadIdx.x == 0) {
      const int32_t t = targets[r];
      lse[r] = l;
      if (t >= 0 && t < vocab) {
        losses[r] = l - td_ld(row, t);
      } else {
        losses[r] = NAN;
        *(volatile int *)err = TD_CUDA_ERR_TARGET; /* mapped host memory: a plain store */
      }
    }
  }
}

/* The vocabulary slice's pieces: lse[r] over the slice; target_logit[r] =
 * logits[r, targets[r] - vocab_start] when that is in [0, vocab), else 0. */
template <typename L>
__global__ void td_xent_slice_kernel(float *lse, float *target_logit, const L *logits,
                                     const int32_t *targets, int64_t n, int64_t vocab,
                                     int64_t vocab_start) {
  __shared__ float redf[33];
  __shared__ double redd[33];
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const L *row = logits + r * vocab;
    const float l = td_row_logsumexp(row, vocab, redf, redd);
    if (threadIdx.x == 0) {
      const int64_t t = (int64_t)targets[r] - vocab_start;
      lse[r] = l;
      target_logit[r] = t >= 0 && t < vocab ? td_ld(row, t) : 0.0f;
    }
  }
}

/* out[j] = exp(in[j] - l) g - (j == t ? g : 0) for j < w, over the block's
 * threads: in read 16 bytes a thread (td_for_each_elem), and where out has in's
 * type and offset the stores are as wide, else one element. */
template <typename T, typename L>
__device__ __forceinline__ void td_xent_grad_span(T *out, const L *in, int64_t w, float l, float g,
                                                  int64_t t) {
  constexpr int VEC = 16 / sizeof(L);
  auto grad = [&](int64_t j, float x) {
    float v = __fmul_rn(expf(x - l), g);
    return j == t ? v - g : v;
  };
  if constexpr (sizeof(T) == sizeof(L)) { /* 16-byte stores where out sits as in does */
    if (((uintptr_t)in & 15) == ((uintptr_t)out & 15)) {
      const int64_t head = td_head_elems(in, w), body = head + (w - head) / VEC * VEC;
      for (int64_t j = threadIdx.x; j < head; j += blockDim.x) td_st(out, j, grad(j, td_ld(in, j)));
      for (int64_t j = head + (int64_t)threadIdx.x * VEC; j < body; j += (int64_t)blockDim.x * VEC) {
        uint4 q = *reinterpret_cast<const uint4 *>(in + j);
        L x[VEC];
        T d[VEC];
        memcpy(x, &q, sizeof q); /* register moves */
#pragma unroll
        for (int k = 0; k < VEC; k++) td_st(d, k, grad(j + k, td_ld(x, k)));
        memcpy(&q, d, sizeof q);
        *reinterpret_cast<uint4 *>(out + j) = q;
      }
      for (int64_t j = body + threadIdx.x; j < w; j += blockDim.x) td_st(out, j, grad(j, td_ld(in, j)));
      return;
    }
  }
  td_for_each_elem(in, w, [&](int64_t j, float x) { td_st(out, j, grad(j, x)); });
}

/* dlogits[r, j] = exp(logits[r, j] - lse[r]) dloss[r] - (j == t ? dloss[r] : 0),
 * t = targets[r] - vocab_start; dlogits may alias logits of its type (each
 * element is read, then written, by one thread). grid (rows, ceil(vocab /
 * XENT_COLS_PER_BLOCK)). The product is rounded before the target's subtraction,
 * as the CPU does. */
template <typename T, typename L>
__global__ void td_xent_backward_kernel(T *dlogits, const L *logits, const float *lse,
                                        const int32_t *targets, const float *dloss, int64_t n,
                                        int64_t vocab, int64_t vocab_start) {
  const int64_t j0 = (int64_t)blockIdx.y * XENT_COLS_PER_BLOCK;
  const int64_t w = min(vocab, j0 + XENT_COLS_PER_BLOCK) - j0;
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x)
    td_xent_grad_span(dlogits + r * vocab + j0, logits + r * vocab + j0, w, lse[r], dloss[r],
                      (int64_t)targets[r] - vocab_start - j0);
}

/* The forward kernel's row, then the backward's over the same row while it is
 * in L2 (one block per row): the two kernels' bits. Thread 0 reads the target's
 * logit before the block may overwrite it (dlogits aliasing logits). */
template <typename T, typename L>
__global__ void td_xent_fused_kernel(float *losses, float *lse, T *dlogits, const L *logits,
                                     const int32_t *targets, const float *dloss, int64_t n,
                                     int64_t vocab, int *err) {
  __shared__ float redf[33];
  __shared__ double redd[33];
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const L *row = logits + r * vocab;
    const float l = td_row_logsumexp(row, vocab, redf, redd);
    const int32_t t = targets[r];
    if (threadIdx.x == 0) {
      lse[r] = l;
      if (t >= 0 && t < vocab) {
        losses[r] = l - td_ld(row, t);
      } else {
        losses[r] = NAN;
        *(volatile int *)err = TD_CUDA_ERR_TARGET; /* mapped host memory: a plain store */
      }
    }
    __syncthreads();
    td_xent_grad_span(dlogits + r * vocab, row, vocab, l, dloss[r], (int64_t)t);
    __syncthreads(); /* the row's gradient written before the next row's reductions reuse redf */
  }
}

static unsigned row_grid(int64_t n) { return (unsigned)(n < 65536 * 16 ? n : 65536 * 16); }

static void check_logits_dtype(const char *op, td_dtype dt) {
  if (dt != TD_F32 && dt != TD_BF16)
    td_fail("%s: logits are fp32 or bf16, not %s", op, td_dtype_name(dt));
}

static void cu_cross_entropy_forward(td_device *d, float *losses, float *lse, const void *logits,
                                     td_dtype logits_dtype, const int32_t *targets, int64_t n,
                                     int64_t vocab) {
  td_cuda *c = td_cuda_enter(d);
  check_logits_dtype("cross_entropy_forward", logits_dtype);
  if (n <= 0) return;
  if (logits_dtype == TD_BF16)
    td_xent_forward_kernel<<<row_grid(n), TD_CUDA_THREADS, 0, c->stream>>>(
        losses, lse, (const uint16_t *)logits, targets, n, vocab, c->err_dev);
  else
    td_xent_forward_kernel<<<row_grid(n), TD_CUDA_THREADS, 0, c->stream>>>(
        losses, lse, (const float *)logits, targets, n, vocab, c->err_dev);
  TD_CUDA_LAUNCHED();
}

static void cu_cross_entropy_slice(td_device *d, float *lse, float *target_logit,
                                   const void *logits, td_dtype logits_dtype,
                                   const int32_t *targets, int64_t n, int64_t vocab,
                                   int64_t vocab_start) {
  td_cuda *c = td_cuda_enter(d);
  check_logits_dtype("cross_entropy_slice", logits_dtype);
  if (n <= 0) return;
  if (logits_dtype == TD_BF16)
    td_xent_slice_kernel<<<row_grid(n), TD_CUDA_THREADS, 0, c->stream>>>(
        lse, target_logit, (const uint16_t *)logits, targets, n, vocab, vocab_start);
  else
    td_xent_slice_kernel<<<row_grid(n), TD_CUDA_THREADS, 0, c->stream>>>(
        lse, target_logit, (const float *)logits, targets, n, vocab, vocab_start);
  TD_CUDA_LAUNCHED();
}

/* f(T(), L()) with the storage types of dlogits' and logits' dtypes (fp32:
 * float, bf16: uint16_t; checked by the caller). */
template <typename F>
static void with_xent_types(td_dtype dlogits_dtype, td_dtype logits_dtype, F f) {
  auto in = [&](auto t) {
    if (logits_dtype == TD_BF16)
      f(t, uint16_t());
    else
      f(t, float());
  };
  if (dlogits_dtype == TD_BF16)
    in(uint16_t());
  else
    in(float());
}

static void cu_cross_entropy_backward(td_device *d, void *dlogits, td_dtype dlogits_dtype,
                                      const void *logits, td_dtype logits_dtype, const float *lse,
                                      const int32_t *targets, const float *dloss, int64_t n,
                                      int64_t vocab, int64_t vocab_start) {
  td_cuda *c = td_cuda_enter(d);
  if (dlogits_dtype != TD_F32 && dlogits_dtype != TD_BF16)
    td_fail("cross_entropy_backward: dlogits are fp32 or bf16, not %s",
            td_dtype_name(dlogits_dtype));
  check_logits_dtype("cross_entropy_backward", logits_dtype);
  if (n <= 0 || vocab <= 0) return;
  int64_t chunks = (vocab + XENT_COLS_PER_BLOCK - 1) / XENT_COLS_PER_BLOCK;
  if (chunks > 65535) td_fail("cross_entropy_backward: vocabulary slice of %lld", (long long)vocab);
  dim3 grid(row_grid(n), (unsigned)chunks);
  with_xent_types(dlogits_dtype, logits_dtype, [&](auto t, auto l) {
    td_xent_backward_kernel<<<grid, TD_CUDA_THREADS, 0, c->stream>>>(
        (decltype(t) *)dlogits, (const decltype(l) *)logits, lse, targets, dloss, n, vocab,
        vocab_start);
  });
  TD_CUDA_LAUNCHED();
}

static void cu_cross_entropy_fused(td_device *d, float *losses, float *lse, void *dlogits,
                                   td_dtype dlogits_dtype, const void *logits,
                                   td_dtype logits_dtype, const int32_t *targets,
                                   const float *dloss, int64_t n, int64_t vocab) {
  td_cuda *c = td_cuda_enter(d);
  if (dlogits_dtype != TD_F32 && dlogits_dtype != TD_BF16)
    td_fail("cross_entropy_fused: dlogits are fp32 or bf16, not %s", td_dtype_name(dlogits_dtype));
  check_logits_dtype("cross_entropy_fused", logits_dtype);
  if (n <= 0 || vocab <= 0) return;
  with_xent_types(dlogits_dtype, logits_dtype, [&](auto t, auto l) {
    td_xent_fused_kernel<<<row_grid(n), TD_CUDA_THREADS, 0, c->stream>>>(
        losses, lse, (decltype(t) *)dlogits, (const decltype(l) *)logits, targets, dloss, n, vocab,
        c->err_dev);
  });
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
  ops->cross_entropy_fused = cu_cross_entropy_fused;
}
