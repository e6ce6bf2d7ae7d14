/* LayerNorm forward and backward (device.h has the math), one warp per row.
 *
 * Rows up to 1024 columns with cols % 4 == 0 and 16-byte-aligned buffers (float4),
 * or up to 256 columns otherwise (scalar), live in registers: lane l holds the
 * N vectors of VEC floats at columns (k * 32 + l) * VEC, k < N (coalesced; k is a
 * compile-time index, so nothing goes to local memory). x and dout are then read
 * from memory once. Row sums are in double, each lane's in column order, then
 * td_warp_sum's fixed butterfly. Wider rows take a loop path that reads the row
 * again for each pass (from L1 / L2).
 *
 * The backward computes dw / db in the same pass as dx: the rows are cut into
 * chunks of ln_rows_per_chunk(rows) rows (at most ~LN_CHUNKS of them); one block
 * per chunk, warp w takes the chunk's rows w, w + 8, ... in order and sums
 * dout xhat and dout per column in registers; a fixed tree over the 8 warps in
 * shared memory makes the chunk's partial, and ln_add_chunks_kernel adds the
 * chunks in order per column. The blocking depends on rows alone, so the bits do
 * too. The backward then moves dout, x and dx (read, write) once, plus ~3 MB of
 * partials at GPT-2 124M's 16384 x 768. */
#include "device/cuda/cuda_internal.cuh"

#define LN_WARPS 8 /* rows in flight per block (one warp each) */
#define LN_THREADS (LN_WARPS * 32)
#define LN_MAX_V4 8     /* float4 per lane in registers: cols <= 1024 */
#define LN_MAX_S 8      /* floats per lane in registers (scalar path): cols <= 256 */
#define LN_CHUNKS 512   /* backward: row chunks, about at most */
#define LN_ADD_Y 32     /* ln_add_chunks_kernel: threads per column */

/* Backward rows per chunk: a multiple of LN_WARPS, a function of rows alone. */
static int64_t ln_rows_per_chunk(int64_t rows) {
  const int64_t per = (int64_t)LN_WARPS * LN_CHUNKS;
  return LN_WARPS * ((rows + per - 1) / per);
}

/* ------------------------------------------------------------------- forward */

/* out = (x - mean) rstd w + b for a row already reduced; v: VEC floats of x at column c */
template <int VEC>
__device__ __forceinline__ void ln_out(void *out, int out_bf16, int64_t at, const float *v,
                                       const float *w, const float *b, float m, float rs) {
  float wv[VEC], bv[VEC], y[VEC];
  td_ld_vec<VEC>(wv, w, 0), td_ld_vec<VEC>(bv, b, 0);
#pragma unroll
  for (int e = 0; e < VEC; e++) y[e] = (v[e] - m) * rs * wv[e] + bv[e];
  if (out_bf16)
    td_st_vec<VEC>((uint16_t *)out + at, 0, y);
  else
    td_st_vec<VEC>((float *)out + at, 0, y);
}

/* One warp per row (grid-stride over rows), the row in registers: cols <= 32 N VEC. */
template <int VEC, int N>
__global__ void __launch_bounds__(LN_THREADS)
    ln_forward_reg_kernel(void *out, int out_bf16, float *mean, float *rstd, const float *x,
                          const float *w, const float *b, int64_t rows, int cols, float eps) {
  const int lane = threadIdx.x & 31;
  for (int64_t r = (int64_t)blockIdx.x * LN_WARPS + (threadIdx.x >> 5); r < rows;
       r += (int64_t)gridDim.x * LN_WARPS) {
    const float *xr = x + r * cols;
    float v[N * VEC] = {};
    double s = 0, ss = 0;
#pragma unroll
    for (int k = 0; k < N; k++) {
      const int c = (k * 32 + lane) * VEC;
      if (c < cols) {
        td_ld_vec<VEC>(v + k * VEC, xr + c, 0);
#pragma unroll
        for (int e = 0; e < VEC; e++) s += v[k * VEC + e];
      }
    }
    const float m = (float)(td_warp_sum(s) / (double)cols);
#pragma unroll
    for (int k = 0; k < N; k++)
      if ((k * 32 + lane) * VEC < cols)
#pragma unroll
        for (int e = 0; e < VEC; e++) {
          const double dv = (double)v[k * VEC + e] - m;
          ss += dv * dv;
        }
    const float rs = (float)(1.0 / sqrt(td_warp_sum(ss) / (double)cols + eps));
#pragma unroll
    for (int k = 0; k < N; k++) {
      const int c = (k * 32 + lane) * VEC;
      if (c < cols) ln_out<VEC>(out, out_bf16, r * cols + c, v + k * VEC, w + c, b + c, m, rs);
    }
    if (lane == 0) {
      if (mean) mean[r] = m;
      if (rstd) rstd[r] = rs;
    }
  }
}

/* One warp per row, any cols: three passes over the row (the last two from cache). */
template <int VEC>
__global__ void __launch_bounds__(LN_THREADS)
    ln_forward_loop_kernel(void *out, int out_bf16, float *mean, float *rstd, const float *x,
                           const float *w, const float *b, int64_t rows, int64_t cols, float eps) {
  const int lane = threadIdx.x & 31;
  for (int64_t r = (int64_t)blockIdx.x * LN_WARPS + (threadIdx.x >> 5); r < rows;
       r += (int64_t)gridDim.x * LN_WARPS) {
    const float *xr = x + r * cols;
    float v[VEC];
    double s = 0, ss = 0;
    for (int64_t c = (int64_t)lane * VEC; c < cols; c += 32 * VEC) {
      td_ld_vec<VEC>(v, xr + c, 0);
#pragma unroll
      for (int e = 0; e < VEC; e++) s += v[e];
    }
    const float m = (float)(td_warp_sum(s) / (double)cols);
    for (int64_t c = (int64_t)lane * VEC; c < cols; c += 32 * VEC) {
      td_ld_vec<VEC>(v, xr + c, 0);
#pragma unroll
      for (int e = 0; e < VEC; e++) {
        const double dv = (double)v[e] - m;
        ss += dv * dv;
      }
    }
    const float rs = (float)(1.0 / sqrt(td_warp_sum(ss) / (double)cols + eps));
    for (int64_t c = (int64_t)lane * VEC; c < cols; c += 32 * VEC) {
      td_ld_vec<VEC>(v, xr + c, 0);
      ln_out<VEC>(out, out_bf16, r * cols + c, v, w + c, b + c, m, rs);
    }
    if (lane == 0) {
      if (mean) mean[r] = m;
      if (rstd) rstd[r] = rs;
    }
  }
}

template <int VEC, int N>
static void ln_forward_reg(td_cuda *c, unsigned grid, void *out, int bf, float *mean,
                           float *rstd, const float *x, const float *w, const float *b,
                           int64_t rows, int64_t cols, float eps) {
  ln_forward_reg_kernel<VEC, N><<<grid, LN_THREADS, 0, c->stream>>>(out, bf, mean, rstd, x, w, b,
                                                                     rows, (int)cols, eps);
}

static int ln_aligned(const void *p, unsigned bytes) { return ((uintptr_t)p & (bytes - 1)) == 0; }

static void cu_layernorm_forward(td_device *d, void *out, td_dtype out_dtype, float *mean,
                                 float *rstd, const float *x, const float *w, const float *b,
                                 int64_t rows, int64_t cols, float eps) {
  td_cuda *c = td_cuda_enter(d);
  if (out_dtype != TD_F32 && out_dtype != TD_BF16) td_fail("layernorm output must be fp32 or bf16");
  if (rows <= 0 || cols <= 0) return;
  const int bf = out_dtype == TD_BF16;
  const int v4 = cols % 4 == 0 && ln_aligned(x, 16) && ln_aligned(w, 16) && ln_aligned(b, 16) &&
                 ln_aligned(out, bf ? 8 : 16);
  const unsigned grid = td_cuda_grid(c, rows, LN_WARPS);
  const int64_t nv = v4 ? (cols / 4 + 31) / 32 : (cols + 31) / 32; /* vectors per lane */
#define LN_FWD(VEC, N) ln_forward_reg<VEC, N>(c, grid, out, bf, mean, rstd, x, w, b, rows, cols, eps)
  if (v4 && nv <= LN_MAX_V4) {
    switch (nv) {
      case 1: LN_FWD(4, 1); break;
      case 2: LN_FWD(4, 2); break;
      case 3: LN_FWD(4, 3); break;
      case 4: LN_FWD(4, 4); break;
      case 5: LN_FWD(4, 5); break;
      case 6: LN_FWD(4, 6); break;
      case 7: LN_FWD(4, 7); break;
      default: LN_FWD(4, 8); break;
    }
  } else if (!v4 && nv <= LN_MAX_S) {
    if (nv == 1)
      LN_FWD(1, 1);
    else if (nv == 2)
      LN_FWD(1, 2);
    else if (nv <= 4)
      LN_FWD(1, 4);
    else
      LN_FWD(1, 8);
  } else if (v4) {
    ln_forward_loop_kernel<4><<<grid, LN_THREADS, 0, c->stream>>>(out, bf, mean, rstd, x, w, b,
                                                                   rows, cols, eps);
  } else {
    ln_forward_loop_kernel<1><<<grid, LN_THREADS, 0, c->stream>>>(out, bf, mean, rstd, x, w, b,
                                                                   rows, cols, eps);
  }
#undef LN_FWD
  TD_CUDA_LAUNCHED();
}

/* ------------------------------------------------------------------ backward */

/* One block per row chunk (grid-stride over chunks), one warp per row, the row in
 * registers (cols <= 32 N VEC). With xhat = (x - mean) rstd and g = dout w:
 *   dx[r, c] += rstd (g - mean_c(g) - xhat mean_c(g xhat))   (the means in double);
 * part[chunk] = [sum dout xhat (cols) | sum dout (cols)] over the chunk's rows:
 * each warp its rows in order, then the warps by a fixed tree (smem: 32 cols bytes). */
template <int VEC, int N>
__global__ void __launch_bounds__(LN_THREADS, N * VEC <= 24 ? 2 : 1)
    ln_backward_reg_kernel(float *dx, float *part, const float *dout, const float *x,
                           const float *w, const float *mean, const float *rstd, int64_t rows,
                           int cols, int64_t rc, int64_t nch) {
  extern __shared__ float4 ln_smem[]; /* LN_WARPS / 2 slots of [dw | db] partials */
  float *sm = (float *)ln_smem;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t ch = blockIdx.x; ch < nch; ch += gridDim.x) {
    float aw[N * VEC] = {}, ab[N * VEC] = {};
    const int64_t r1 = min(rows, (ch + 1) * rc);
    for (int64_t r = ch * rc + warp; r < r1; r += LN_WARPS) {
      const float *xr = x + r * cols, *gr = dout + r * cols;
      const float m = mean[r], rs = rstd[r];
      float xv[N * VEC] = {}, gv[N * VEC] = {};
#pragma unroll
      for (int k = 0; k < N; k++) {
        const int c = (k * 32 + lane) * VEC;
        if (c < cols) {
          td_ld_vec<VEC>(xv + k * VEC, xr + c, 0);
          td_ld_vec<VEC>(gv + k * VEC, gr + c, 0);
        }
      }
      double s_dy = 0, s_dyx = 0;
#pragma unroll
      for (int k = 0; k < N; k++) {
        const int c = (k * 32 + lane) * VEC;
        if (c < cols) {
          float wv[VEC];
          td_ld_vec<VEC>(wv, w + c, 0);
#pragma unroll
          for (int e = 0; e < VEC; e++) {
            const int i = k * VEC + e;
            /* dyw rounded on its own (__fmul_rn: never fused into the subtraction
             * below), so dyw - m_dy cancels exactly when the row is constant (cols =
             * 1, say), where rstd = 1/sqrt(eps) would magnify a fused product's
             * rounding ~300-fold */
            const float xhat = (xv[i] - m) * rs, dyw = __fmul_rn(gv[i], wv[e]);
            aw[i] += gv[i] * xhat;
            ab[i] += gv[i];
            s_dy += dyw;
            s_dyx += (double)dyw * xhat;
            xv[i] = xhat, gv[i] = dyw;
          }
        }
      }
      const float m_dy = (float)(td_warp_sum(s_dy) / (double)cols);
      const float m_dyx = (float)(td_warp_sum(s_dyx) / (double)cols);
#pragma unroll
      for (int i = 0; i < N * VEC; i++) gv[i] = rs * (gv[i] - m_dy - xv[i] * m_dyx);
      float *dxr = dx + r * cols;
#pragma unroll
      for (int k = 0; k < N; k++) { /* all loads of dx, then all stores */
        const int c = (k * 32 + lane) * VEC;
        if (c < cols) td_ld_vec<VEC>(xv + k * VEC, dxr + c, 0);
      }
#pragma unroll
      for (int k = 0; k < N; k++) {
        const int c = (k * 32 + lane) * VEC;
        if (c < cols) {
#pragma unroll
          for (int e = 0; e < VEC; e++) xv[k * VEC + e] += gv[k * VEC + e];
          td_st_vec<VEC>(dxr + c, 0, xv + k * VEC);
        }
      }
    }
    /* warps [h, 2h) hand their sums to warps [0, h): h = 4, 2, 1 */
#pragma unroll
    for (int h = LN_WARPS / 2; h >= 1; h >>= 1) {
      if (warp >= h && warp < 2 * h) {
        float *slot = sm + (int64_t)(warp - h) * 2 * cols;
#pragma unroll
        for (int k = 0; k < N; k++) {
          const int c = (k * 32 + lane) * VEC;
          if (c < cols) {
            td_st_vec<VEC>(slot + c, 0, aw + k * VEC);
            td_st_vec<VEC>(slot + cols + c, 0, ab + k * VEC);
          }
        }
      }
      __syncthreads();
      if (warp < h) {
        const float *slot = sm + (int64_t)warp * 2 * cols;
#pragma unroll
        for (int k = 0; k < N; k++) {
          const int c = (k * 32 + lane) * VEC;
          if (c < cols) {
            float tw[VEC], tb[VEC];
            td_ld_vec<VEC>(tw, slot + c, 0), td_ld_vec<VEC>(tb, slot + cols + c, 0);
#pragma unroll
            for (int e = 0; e < VEC; e++) aw[k * VEC + e] += tw[e], ab[k * VEC + e] += tb[e];
          }
        }
      }
      __syncthreads();
    }
    if (warp == 0) {
      float *pc = part + ch * 2 * cols;
#pragma unroll
      for (int k = 0; k < N; k++) {
        const int c = (k * 32 + lane) * VEC;
        if (c < cols) {
          td_st_vec<VEC>(pc + c, 0, aw + k * VEC);
          td_st_vec<VEC>(pc + cols + c, 0, ab + k * VEC);
        }
      }
    }
  }
}

/* Loop path, dx only: one warp per row, two passes over the row. */
template <int VEC>
__global__ void __launch_bounds__(LN_THREADS)
    ln_backward_dx_loop_kernel(float *dx, const float *dout, const float *x, const float *w,
                               const float *mean, const float *rstd, int64_t rows, int64_t cols) {
  const int lane = threadIdx.x & 31;
  for (int64_t r = (int64_t)blockIdx.x * LN_WARPS + (threadIdx.x >> 5); r < rows;
       r += (int64_t)gridDim.x * LN_WARPS) {
    const float *xr = x + r * cols, *gr = dout + r * cols;
    const float m = mean[r], rs = rstd[r];
    float xv[VEC], gv[VEC], wv[VEC], dv[VEC];
    double s_dy = 0, s_dyx = 0;
    for (int64_t c = (int64_t)lane * VEC; c < cols; c += 32 * VEC) {
      td_ld_vec<VEC>(xv, xr + c, 0), td_ld_vec<VEC>(gv, gr + c, 0), td_ld_vec<VEC>(wv, w + c, 0);
#pragma unroll
      for (int e = 0; e < VEC; e++) { /* __fmul_rn: see ln_backward_reg_kernel */
        const float xhat = (xv[e] - m) * rs, dyw = __fmul_rn(gv[e], wv[e]);
        s_dy += dyw;
        s_dyx += (double)dyw * xhat;
      }
    }
    const float m_dy = (float)(td_warp_sum(s_dy) / (double)cols);
    const float m_dyx = (float)(td_warp_sum(s_dyx) / (double)cols);
    for (int64_t c = (int64_t)lane * VEC; c < cols; c += 32 * VEC) {
      td_ld_vec<VEC>(xv, xr + c, 0), td_ld_vec<VEC>(gv, gr + c, 0), td_ld_vec<VEC>(wv, w + c, 0);
      td_ld_vec<VEC>(dv, dx + r * cols + c, 0);
#pragma unroll
      for (int e = 0; e < VEC; e++) {
        const float xhat = (xv[e] - m) * rs, dyw = __fmul_rn(gv[e], wv[e]);
        dv[e] += rs * (dyw - m_dy - xhat * m_dyx);
      }
      td_st_vec<VEC>(dx + r * cols + c, 0, dv);
    }
  }
}

/* Loop path, dw / db partials: part[chunk] as ln_backward_reg_kernel's, with the
 * same chunks. grid (ceil(cols / 32), chunks), block (32, 8): lane y sums rows
 * r0 + y, r0 + y + 8, ... in order, then lane y = 0 adds the lanes in order. */
__global__ void ln_dwdb_loop_kernel(float *part, const float *dout, const float *x,
                                    const float *mean, const float *rstd, int64_t rows,
                                    int64_t cols, int64_t rc) {
  __shared__ float sw[8][33], sb[8][33];
  const int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x;
  const int64_t r0 = (int64_t)blockIdx.y * rc, r1 = min(rows, r0 + rc);
  float aw = 0.0f, ab = 0.0f;
  if (c < cols)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
      const float g = dout[r * cols + c], xhat = (x[r * cols + c] - mean[r]) * rstd[r];
      aw += g * xhat;
      ab += g;
    }
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float tw = 0.0f, tb = 0.0f;
    for (int y = 0; y < 8; y++) tw += sw[y][threadIdx.x], tb += sb[y][threadIdx.x];
    part[blockIdx.y * 2 * cols + c] = tw;
    part[blockIdx.y * 2 * cols + cols + c] = tb;
  }
}

/* dw[c] += sum_k part[k][c], db[c] += sum_k part[k][cols + c], k < nch: column j of
 * [dw | db] by blockIdx.x * 32 + threadIdx.x; thread y adds k = y, y + LN_ADD_Y, ...
 * in order, then thread y = 0 adds the threads in order. */
__global__ void ln_add_chunks_kernel(float *dw, float *db, const float *part, int64_t nch,
                                     int64_t cols) {
  __shared__ float sm[LN_ADD_Y][33];
  const int64_t j = (int64_t)blockIdx.x * 32 + threadIdx.x;
  float s = 0.0f;
  if (j < 2 * cols)
#pragma unroll 8
    for (int64_t k = threadIdx.y; k < nch; k += LN_ADD_Y) s += part[k * 2 * cols + j];
  sm[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < 2 * cols) {
    float t = 0.0f;
    for (int y = 0; y < LN_ADD_Y; y++) t += sm[y][threadIdx.x];
    if (j < cols)
      dw[j] += t;
    else
      db[j - cols] += t;
  }
}

template <int VEC, int N>
static void ln_backward_reg(td_cuda *c, float *dx, float *part, const float *dout, const float *x,
                            const float *w, const float *mean, const float *rstd, int64_t rows,
                            int64_t cols, int64_t rc, int64_t nch) {
  const size_t smem = (size_t)(LN_WARPS / 2) * 2 * (size_t)cols * sizeof(float);
  ln_backward_reg_kernel<VEC, N><<<(unsigned)nch, LN_THREADS, smem, c->stream>>>(
      dx, part, dout, x, w, mean, rstd, rows, (int)cols, rc, nch);
}

/* dx += ..., dw += sum_r dout xhat, db += sum_r dout (device.h). A row's dx is
 * written after its dout and x are read, and no other warp reads that row, so dx
 * may be any buffer but dout's and x's. */
static void cu_layernorm_backward(td_device *d, float *dx, float *dw, float *db, const float *dout,
                                  const float *x, const float *w, const float *mean,
                                  const float *rstd, int64_t rows, int64_t cols) {
  td_cuda *c = td_cuda_enter(d);
  if (rows <= 0 || cols <= 0) return;
  const int64_t rc = ln_rows_per_chunk(rows), nch = (rows + rc - 1) / rc;
  float *part = (float *)td_cuda_scratch(c, (size_t)(2 * nch * cols) * sizeof(float));
  const int v4 = cols % 4 == 0 && ln_aligned(dx, 16) && ln_aligned(dout, 16) &&
                 ln_aligned(x, 16) && ln_aligned(w, 16);
  const int64_t nv = v4 ? (cols / 4 + 31) / 32 : (cols + 31) / 32;
#define LN_BWD(VEC, N) ln_backward_reg<VEC, N>(c, dx, part, dout, x, w, mean, rstd, rows, cols, rc, nch)
  if (v4 && nv <= LN_MAX_V4) {
    switch (nv) {
      case 1: LN_BWD(4, 1); break;
      case 2: LN_BWD(4, 2); break;
      case 3: LN_BWD(4, 3); break;
      case 4: LN_BWD(4, 4); break;
      case 5: LN_BWD(4, 5); break;
      case 6: LN_BWD(4, 6); break;
      case 7: LN_BWD(4, 7); break;
      default: LN_BWD(4, 8); break;
    }
    TD_CUDA_LAUNCHED();
  } else if (!v4 && nv <= LN_MAX_S) {
    if (nv == 1)
      LN_BWD(1, 1);
    else if (nv == 2)
      LN_BWD(1, 2);
    else if (nv <= 4)
      LN_BWD(1, 4);
    else
      LN_BWD(1, 8);
    TD_CUDA_LAUNCHED();
  } else {
    dim3 grid((unsigned)((cols + 31) / 32), (unsigned)nch), block(32, 8);
    ln_dwdb_loop_kernel<<<grid, block, 0, c->stream>>>(part, dout, x, mean, rstd, rows, cols, rc);
    TD_CUDA_LAUNCHED();
    const unsigned gr = td_cuda_grid(c, rows, LN_WARPS);
    if (v4)
      ln_backward_dx_loop_kernel<4><<<gr, LN_THREADS, 0, c->stream>>>(dx, dout, x, w, mean, rstd,
                                                                       rows, cols);
    else
      ln_backward_dx_loop_kernel<1><<<gr, LN_THREADS, 0, c->stream>>>(dx, dout, x, w, mean, rstd,
                                                                       rows, cols);
    TD_CUDA_LAUNCHED();
  }
#undef LN_BWD
  ln_add_chunks_kernel<<<(unsigned)((2 * cols + 31) / 32), dim3(32, LN_ADD_Y), 0, c->stream>>>(
      dw, db, part, nch, cols);
  TD_CUDA_LAUNCHED();
}

void td_cuda_register_layernorm(td_device_ops *ops) {
  ops->layernorm_forward = cu_layernorm_forward;
  ops->layernorm_backward = cu_layernorm_backward;
}
