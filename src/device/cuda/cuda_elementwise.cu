/* The elementwise kernels of the CUDA backend: bias_backward, gelu forward /
 * backward, add, scale, dropout, cast (device.h has each one's math; the
 * comments here give shapes and blocking; layernorm is cuda_layernorm.cu).
 *
 * Sums over rows (bias_backward, gelu_backward's fused bias gradient) are two
 * fixed stages: column sums of row chunks whose size depends on rows alone
 * (td_rows_per_chunk), each chunk's rows in order, then the chunks in order per
 * column (td_add_partials_kernel). */
#include "device/cuda/cuda_internal.cuh"

#define COL_TILE 32  /* columns per block of a column-sum kernel (one warp wide) */
#define ROW_LANES 8  /* threads per column stepping through a chunk's rows */
#define MAX_CHUNKS 64

/* Rows per chunk of a reduction over rows: a function of rows alone. */
static int64_t td_rows_per_chunk(int64_t rows) {
  int64_t r = (rows + MAX_CHUNKS - 1) / MAX_CHUNKS;
  return r < 32 ? 32 : r;
}

/* out[c] += sum_k part[k * stride + c], k = 0 .. nparts-1 in order; c < cols */
__global__ void td_add_partials_kernel(float *out, const float *part, int64_t nparts,
                                       int64_t stride, int64_t cols) {
  TD_GRID_STRIDE(c, cols) {
    float s = 0.0f;
    for (int64_t k = 0; k < nparts; k++) s += part[k * stride + c];
    out[c] += s;
  }
}

/* ------------------------------------------------------------ column sums */

/* part[chunk, c] = sum over the chunk's rows of the value e gives at (r, c);
 * rows x cols, chunks of rc rows. grid (ceil(cols / (COL_TILE VEC)), chunks),
 * block (COL_TILE, ROW_LANES): thread x owns columns c0 .. c0 + VEC - 1, lane y
 * sums rows r0 + y, r0 + y + ROW_LANES, ... in order, then lane y = 0 adds the
 * lanes in order. The order per column does not depend on VEC, so the vector
 * and scalar forms give the same bits. e.load<VEC>(v, i) yields the values at
 * flat index i .. i + VEC - 1 (and may store a by-product: gelu's dx). */
template <int VEC, typename Elems>
__global__ void td_colsum_partial_kernel(float *part, Elems e, int64_t rows, int64_t cols,
                                         int64_t rc) {
  __shared__ float sm[ROW_LANES][COL_TILE * VEC + 1];
  const int64_t c0 = ((int64_t)blockIdx.x * COL_TILE + threadIdx.x) * VEC;
  const int64_t r0 = (int64_t)blockIdx.y * rc, r1 = min(rows, r0 + rc);
  float s[VEC];
#pragma unroll
  for (int k = 0; k < VEC; k++) s[k] = 0.0f;
  if (c0 < cols) /* VEC > 1 only when VEC divides cols: all VEC columns exist */
    for (int64_t r = r0 + threadIdx.y; r < r1; r += ROW_LANES) {
      float v[VEC];
      e.template load<VEC>(v, r * cols + c0);
#pragma unroll
      for (int k = 0; k < VEC; k++) s[k] += v[k];
    }
#pragma unroll
  for (int k = 0; k < VEC; k++) sm[threadIdx.y][threadIdx.x * VEC + k] = s[k];
  __syncthreads();
  if (threadIdx.y == 0 && c0 < cols)
#pragma unroll
    for (int k = 0; k < VEC; k++) {
      float t = 0.0f;
      for (int y = 0; y < ROW_LANES; y++) t += sm[y][threadIdx.x * VEC + k];
      part[blockIdx.y * cols + c0 + k] = t;
    }
}

/* dbias[c] += sum_r (value of e at r, c): the column-sum kernel then the chunks
 * in order. vec: e's buffers allow VEC 4 (td_vec_ok). */
template <typename Elems>
static void td_column_sums(td_cuda *c, float *dbias, const Elems &e, int64_t rows, int64_t cols,
                           int vec) {
  int64_t rc = td_rows_per_chunk(rows), nch = (rows + rc - 1) / rc;
  float *part = (float *)td_cuda_scratch(c, (size_t)(nch * cols) * sizeof(float));
  const int64_t per_block = COL_TILE * (vec ? 4 : 1);
  dim3 grid((unsigned)((cols + per_block - 1) / per_block), (unsigned)nch), block(COL_TILE, ROW_LANES);
  if (vec)
    td_colsum_partial_kernel<4><<<grid, block, 0, c->stream>>>(part, e, rows, cols, rc);
  else
    td_colsum_partial_kernel<1><<<grid, block, 0, c->stream>>>(part, e, rows, cols, rc);
  TD_CUDA_LAUNCHED();
  td_add_partials_kernel<<<td_cuda_grid(c, cols, TD_CUDA_THREADS), TD_CUDA_THREADS, 0, c->stream>>>(
      dbias, part, nch, cols, cols);
  TD_CUDA_LAUNCHED();
}

/* ------------------------------------------------------------- bias_backward */

/* The stored values of a buffer (fp32, or bf16 widened). */
template <typename T>
struct td_stored_elems {
  const T *p;
  template <int VEC>
  __device__ __forceinline__ void load(float *v, int64_t i) const { td_ld_vec<VEC>(v, p, i); }
};

/* An fp32 buffer's values, stored to a bf16 copy on the way (the cast of dY the
 * GEMMs read, fused with its bias gradient). */
struct td_cast_bf16_elems {
  const float *p;
  uint16_t *cast;
  template <int VEC>
  __device__ __forceinline__ void load(float *v, int64_t i) const {
    td_ld_vec<VEC>(v, p, i);
    td_st_vec<VEC>(cast, i, v);
  }
};

static void cu_bias_backward(td_device *d, float *dbias, const void *dout, td_dtype dout_dtype,
                             int64_t rows, int64_t cols, void *dout_cast, td_dtype cast_dtype) {
  td_cuda *c = td_cuda_enter(d);
  if (dout_dtype != TD_F32 && dout_dtype != TD_BF16) td_fail("bias_backward: dout must be fp32 or bf16");
  if (dout_cast && (dout_dtype != TD_F32 || cast_dtype != TD_BF16))
    td_fail("bias_backward: the cast of dout is fp32 to bf16, not %s to %s",
            td_dtype_name(dout_dtype), td_dtype_name(cast_dtype));
  if (rows <= 0 || cols <= 0) return;
  if (dout_cast) {
    td_column_sums(c, dbias, td_cast_bf16_elems{(const float *)dout, (uint16_t *)dout_cast}, rows,
                   cols, td_vec_ok(cols, dout, dout_cast));
    return;
  }
  int vec = td_vec_ok(cols, dout);
  if (dout_dtype == TD_F32)
    td_column_sums(c, dbias, td_stored_elems<float>{(const float *)dout}, rows, cols, vec);
  else
    td_column_sums(c, dbias, td_stored_elems<uint16_t>{(const uint16_t *)dout}, rows, cols, vec);
}

/* ------------------------------------------------- dtypes, vector access */

/* The elementwise kernels move VEC elements per thread where every buffer is
 * 16-byte aligned: 8 (one 16-byte word of bf16 / fp16, two of fp32), with the
 * dtypes template parameters (td_dt) rather than branches per element. */
#define EW_VEC 8

/* A float dtype as a template parameter: its storage T and hostdev.h's
 * conversions to and from fp32 (== dtype.h's). */
template <td_dtype DT>
struct td_dt;
template <>
struct td_dt<TD_F32> {
  typedef float T;
  static __device__ __forceinline__ float ld(float v) { return v; }
  static __device__ __forceinline__ float st(float v) { return v; }
};
template <>
struct td_dt<TD_BF16> {
  typedef uint16_t T;
  static __device__ __forceinline__ float ld(uint16_t v) { return td_hd_bf16_to_f32(v); }
  static __device__ __forceinline__ uint16_t st(float v) { return td_hd_f32_to_bf16(v); }
};
template <>
struct td_dt<TD_F16> {
  typedef uint16_t T;
  static __device__ __forceinline__ float ld(uint16_t v) { return td_hd_f16_to_f32(v); }
  static __device__ __forceinline__ uint16_t st(float v) { return td_hd_f32_to_f16(v); }
};

/* VEC elements from index i of a D buffer, as fp32 / from fp32 (td_ld_raw's
 * alignment for VEC > 1). */
template <int VEC, typename D>
__device__ __forceinline__ void td_ld_dt_vec(float *v, const void *p, int64_t i) {
  typename D::T raw[VEC];
  td_ld_raw<VEC>(raw, (const typename D::T *)p + i);
#pragma unroll
  for (int k = 0; k < VEC; k++) v[k] = D::ld(raw[k]);
}
template <int VEC, typename D>
__device__ __forceinline__ void td_st_dt_vec(void *p, int64_t i, const float *v) {
  typename D::T raw[VEC];
#pragma unroll
  for (int k = 0; k < VEC; k++) raw[k] = D::st(v[k]);
  td_st_raw<VEC>((typename D::T *)p + i, raw);
}

/* f(td_dt<dt>()) for the run-time dt, one of DTS (the caller has checked). */
template <td_dtype... DTS, typename F>
static void td_with_dtype(td_dtype dt, F f) {
  ((dt == DTS ? f(td_dt<DTS>()) : void()), ...);
}

/* ---------------------------------------------------------------------- gelu */

#define INV_SQRT_2PI 0.3989422804014327f
#define GELU_TANH_K0 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_TANH_K1 0.044715f

/* The CPU's formulas (cpu_ew_generic.c): erf form through erfc (no cancellation
 * for x < 0), tanh form through an overflow-free sigmoid pair. */
__device__ __forceinline__ float td_phi_cdf(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }

__device__ __forceinline__ void td_sigmoid_pair(float z, float *s, float *s1) {
  float e = expf(-fabsf(z)), big = 1.0f / (1.0f + e), small = e * big;
  *s = z >= 0.0f ? big : small;
  *s1 = z >= 0.0f ? small : big;
}

__device__ __forceinline__ float td_gelu_value(float x, int tanh_form) {
  if (!tanh_form) return x * td_phi_cdf(x);
  float s, s1;
  td_sigmoid_pair(2.0f * GELU_TANH_K0 * x * (1.0f + GELU_TANH_K1 * x * x), &s, &s1);
  return x * s;
}

__device__ __forceinline__ float td_gelu_grad(float x, int tanh_form) {
  if (!tanh_form) {
    float xc = fminf(fmaxf(x, -16.0f), 16.0f); /* phi(16) underflows; keeps Inf * 0 out */
    return td_phi_cdf(x) + xc * expf(-0.5f * xc * xc) * INV_SQRT_2PI;
  }
  float x2 = x * x, s, s1;
  td_sigmoid_pair(2.0f * GELU_TANH_K0 * x * (1.0f + GELU_TANH_K1 * x2), &s, &s1);
  return s + x * s * s1 * (2.0f * GELU_TANH_K0) * (1.0f + 3.0f * GELU_TANH_K1 * x2);
}

/* out[i] = gelu(x[i]); x, out: n elements of X, OUT (td_dt of fp32 or bf16) */
template <int VEC, typename OUT, typename X>
__global__ void td_gelu_forward_kernel(void *out, const void *x, int64_t n, int tanh_form) {
  td_grid_vec<VEC>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float v[W];
    td_ld_dt_vec<W, X>(v, x, i);
#pragma unroll
    for (int k = 0; k < W; k++) v[k] = td_gelu_value(v[k], tanh_form);
    td_st_dt_vec<W, OUT>(out, i, v);
  });
}

/* dx[i] = dout[i] gelu'(x[i]) in DX (an fp32 dx may alias dout: each thread
 * reads, then writes, its own elements) */
template <int VEC, typename DX, typename X>
__global__ void td_gelu_backward_kernel(void *dx, const float *dout, const void *x, int64_t n,
                                        int tanh_form) {
  td_grid_vec<VEC>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float g[W], xv[W];
    td_ld_raw<W>(g, dout + i);
    td_ld_dt_vec<W, X>(xv, x, i);
#pragma unroll
    for (int k = 0; k < W; k++) g[k] *= td_gelu_grad(xv[k], tanh_form);
    td_st_dt_vec<W, DX>(dx, i, g);
  });
}

/* gelu's gradient as the column sums read it: g = dout gelu'(x), stored to dx
 * (DX: float or bf16 as uint16_t) on the way (the fused bias gradient). */
template <typename XT, typename DXT>
struct td_gelu_grad_elems {
  const float *dout;
  const XT *x;
  DXT *dx;
  int tanh_form;
  template <int VEC>
  __device__ __forceinline__ void load(float *v, int64_t i) const {
    float xv[VEC];
    td_ld_vec<VEC>(v, dout, i);
    td_ld_vec<VEC>(xv, x, i);
#pragma unroll
    for (int k = 0; k < VEC; k++) v[k] *= td_gelu_grad(xv[k], tanh_form);
    td_st_vec<VEC>(dx, i, v);
  }
};

template <typename XT, typename DXT>
static void td_gelu_bias_backward(td_cuda *c, DXT *dx, float *dbias, const float *dout,
                                  const XT *x, int64_t rows, int64_t cols, int tanh_form) {
  td_column_sums(c, dbias, td_gelu_grad_elems<XT, DXT>{dout, x, dx, tanh_form}, rows, cols,
                 td_vec_ok(cols, dx, dout, x));
}

static void cu_gelu_forward(td_device *d, void *out, td_dtype out_dtype, const void *x,
                            td_dtype x_dtype, int64_t n, td_gelu_kind kind) {
  td_cuda *c = td_cuda_enter(d);
  if (out_dtype != TD_F32 && out_dtype != TD_BF16) td_fail("gelu output must be fp32 or bf16");
  if (x_dtype != TD_F32 && x_dtype != TD_BF16) td_fail("gelu input must be fp32 or bf16");
  if (n <= 0) return;
  td_with_dtype<TD_F32, TD_BF16>(out_dtype, [&](auto od) {
    td_with_dtype<TD_F32, TD_BF16>(x_dtype, [&](auto xd) {
      td_cuda_launch_vec<EW_VEC>(c, n, td_aligned16(out, x), [&](auto vec, unsigned grid) {
        td_gelu_forward_kernel<decltype(vec)::value, decltype(od), decltype(xd)>
            <<<grid, TD_CUDA_THREADS, 0, c->stream>>>(out, x, n, kind == TD_GELU_TANH);
      });
    });
  });
}

/* Without dbias one elementwise pass; with it, one pass of the column-sum
 * kernel that also writes dx (dout and x read once, dx written once). */
static void cu_gelu_backward(td_device *d, void *dx, td_dtype dx_dtype, float *dbias,
                             const float *dout, const void *x, td_dtype x_dtype, int64_t rows,
                             int64_t cols, td_gelu_kind kind) {
  td_cuda *c = td_cuda_enter(d);
  if (x_dtype != TD_F32 && x_dtype != TD_BF16) td_fail("gelu input must be fp32 or bf16");
  if (dx_dtype != TD_F32 && dx_dtype != TD_BF16) td_fail("gelu gradient must be fp32 or bf16");
  const int64_t n = rows * cols;
  const int tanh_form = kind == TD_GELU_TANH;
  if (rows <= 0 || cols <= 0) return;
  td_with_dtype<TD_F32, TD_BF16>(dx_dtype, [&](auto dd) {
    td_with_dtype<TD_F32, TD_BF16>(x_dtype, [&](auto xd) {
      typedef decltype(dd) DX;
      typedef decltype(xd) X;
      if (dbias)
        td_gelu_bias_backward(c, (typename DX::T *)dx, dbias, dout, (const typename X::T *)x, rows,
                              cols, tanh_form);
      else
        td_cuda_launch_vec<EW_VEC>(c, n, td_aligned16(dx, dout, x), [&](auto vec, unsigned grid) {
          td_gelu_backward_kernel<decltype(vec)::value, DX, X>
              <<<grid, TD_CUDA_THREADS, 0, c->stream>>>(dx, dout, x, n, tanh_form);
        });
    });
  });
}

/* ------------------------------------------------------- add, scale, dropout */

/* out = a + b, n elements (out may alias a or b) */
template <int VEC>
__global__ void td_add_kernel(float *out, const float *a, const float *b, int64_t n) {
  td_grid_vec<VEC>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float va[W], vb[W];
    td_ld_raw<W>(va, a + i), td_ld_raw<W>(vb, b + i);
#pragma unroll
    for (int k = 0; k < W; k++) va[k] += vb[k];
    td_st_raw<W>(out + i, va);
  });
}

/* x *= alpha */
template <int VEC>
__global__ void td_scale_kernel(float *x, int64_t n, float alpha) {
  td_grid_vec<VEC>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float v[W];
    td_ld_raw<W>(v, x + i);
#pragma unroll
    for (int k = 0; k < W; k++) v[k] *= alpha;
    td_st_raw<W>(x + i, v);
  });
}

static void cu_add(td_device *d, float *out, const float *a, const float *b, int64_t n) {
  td_cuda *c = td_cuda_enter(d);
  if (n <= 0) return;
  td_cuda_launch_vec<EW_VEC>(c, n, td_aligned16(out, a, b), [&](auto vec, unsigned grid) {
    td_add_kernel<decltype(vec)::value><<<grid, TD_CUDA_THREADS, 0, c->stream>>>(out, a, b, n);
  });
}

static void cu_scale(td_device *d, float *x, int64_t n, float alpha) {
  td_cuda *c = td_cuda_enter(d);
  if (n <= 0) return;
  td_cuda_launch_vec<EW_VEC>(c, n, td_aligned16(x), [&](auto vec, unsigned grid) {
    td_scale_kernel<decltype(vec)::value><<<grid, TD_CUDA_THREADS, 0, c->stream>>>(x, n, alpha);
  });
}

/* out[k] = (resid[k] +) (unit(td_rng_u32(seed, stream, first + k)) >= p ? x[k] * s
 * : 0), k < n, s = 1 / (1 - p) (computed by the host as the CPU does); resid may
 * be NULL, out may alias x or resid (each thread reads its elements first). One
 * thread per Philox block: thread t's block holds elements 4t - r .. 4t - r + 3
 * (r = first % 4) and is block (first / 4 + t) mod 2^62, the counters wrapping at
 * 2^64 as the CPU's do. VEC4: r == 0 and the buffers 16-byte aligned, so a block
 * whose four elements all lie in x is one float4; the blocks at the ends go
 * element by element. */
template <bool VEC4>
__global__ void td_dropout_kernel(float *out, const float *resid, const float *x, int64_t n,
                                  float p, float s, uint64_t seed, uint64_t stream,
                                  uint64_t first) {
  const int64_t r = (int64_t)(first % 4), nblocks = (r + n + 3) / 4;
  TD_GRID_STRIDE(t, nblocks) {
    const uint64_t j = (first / 4 + (uint64_t)t) & (UINT64_MAX >> 2);
    const int64_t k0 = 4 * t - r; /* the element of the block's word 0 */
    td_hd_u32x4 w = td_hd_rng_block(seed, stream, j);
    if (VEC4 && k0 + 4 <= n) {
      float v[4], rs[4];
      td_ld_raw<4>(v, x + k0);
      if (resid) td_ld_raw<4>(rs, resid + k0);
#pragma unroll
      for (int q = 0; q < 4; q++) {
        v[q] = td_hd_bits_to_unit(w.w[q]) >= p ? v[q] * s : 0.0f;
        if (resid) v[q] = rs[q] + v[q];
      }
      td_st_raw<4>(out + k0, v);
      continue;
    }
#pragma unroll
    for (int q = 0; q < 4; q++) {
      const int64_t k = k0 + q;
      if (k < 0 || k >= n) continue;
      float v = td_hd_bits_to_unit(w.w[q]) >= p ? x[k] * s : 0.0f;
      out[k] = resid ? resid[k] + v : v;
    }
  }
}

static void cu_dropout(td_device *d, float *out, const float *resid, const float *x, int64_t n,
                       float p, uint64_t seed, uint64_t stream, uint64_t first) {
  td_cuda *c = td_cuda_enter(d);
  if (!(p >= 0.0f && p <= 1.0f)) td_fail("dropout probability %g outside [0, 1]", (double)p);
  if (n <= 0) return;
  if (p == 0.0f) { /* nothing masked: the sum, or a copy */
    if (resid)
      cu_add(d, out, resid, x, n);
    else if (out != x)
      d->ops->copy_d2d(d, out, x, (size_t)n * sizeof(float));
    return;
  }
  const float s = 1.0f / (1.0f - p);
  const int64_t nblocks = ((int64_t)(first % 4) + n + 3) / 4;
  unsigned grid = td_cuda_grid(c, nblocks, TD_CUDA_THREADS);
  if (first % 4 == 0 && td_aligned16(out, resid, x))
    td_dropout_kernel<true><<<grid, TD_CUDA_THREADS, 0, c->stream>>>(out, resid, x, n, p, s, seed,
                                                                     stream, first);
  else
    td_dropout_kernel<false><<<grid, TD_CUDA_THREADS, 0, c->stream>>>(out, resid, x, n, p, s,
                                                                      seed, stream, first);
  TD_CUDA_LAUNCHED();
}

/* ---------------------------------------------------------------------- cast */

/* dst[i] = (DST) src[i] through fp32 with hostdev.h's rounding (== dtype.h's);
 * DST, SRC: td_dt of fp32, bf16, fp16. In place (equal sizes): each thread reads
 * its elements before it writes them. */
template <int VEC, typename DST, typename SRC>
__global__ void td_cast_kernel(void *dst, const void *src, int64_t n) {
  td_grid_vec<VEC>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float v[W];
    td_ld_dt_vec<W, SRC>(v, src, i);
    td_st_dt_vec<W, DST>(dst, i, v);
  });
}

static int is_float_dtype(td_dtype dt) { return dt == TD_F32 || dt == TD_BF16 || dt == TD_F16; }

/* dst = (dst_dtype) src; the same dtype is a copy. In place (dst == src) needs
 * equal element sizes, as on the CPU (each element is read before it is written). */
static void cu_cast(td_device *d, void *dst, td_dtype dst_dtype, const void *src,
                    td_dtype src_dtype, int64_t n) {
  td_cuda *c = td_cuda_enter(d);
  if (!is_float_dtype(dst_dtype) || !is_float_dtype(src_dtype))
    td_fail("cast between %s and %s: only fp32, bf16, fp16", td_dtype_name(src_dtype),
            td_dtype_name(dst_dtype));
  if (n <= 0) return;
  if (dst_dtype == src_dtype) {
    if (dst != src) d->ops->copy_d2d(d, dst, src, (size_t)n * td_dtype_size(dst_dtype));
    return;
  }
  td_with_dtype<TD_F32, TD_BF16, TD_F16>(dst_dtype, [&](auto dd) {
    td_with_dtype<TD_F32, TD_BF16, TD_F16>(src_dtype, [&](auto sd) {
      if constexpr (!std::is_same_v<decltype(dd), decltype(sd)>) /* a copy, above */
        td_cuda_launch_vec<EW_VEC>(c, n, td_aligned16(dst, src), [&](auto vec, unsigned grid) {
          td_cast_kernel<decltype(vec)::value, decltype(dd), decltype(sd)>
              <<<grid, TD_CUDA_THREADS, 0, c->stream>>>(dst, src, n);
        });
    });
  });
}

void td_cuda_register_elementwise(td_device_ops *ops) {
  ops->bias_backward = cu_bias_backward;
  ops->gelu_forward = cu_gelu_forward;
  ops->gelu_backward = cu_gelu_backward;
  ops->add = cu_add;
  ops->scale = cu_scale;
  ops->dropout = cu_dropout;
  ops->cast = cu_cast;
}
