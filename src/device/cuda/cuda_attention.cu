/* Causal self-attention on the CUDA backend (td_attention_desc in device.h):
 * FlashAttention-2's algorithm in plain CUDA cores (fp32 math, shared-memory
 * tiles), O(T) memory beyond inputs and outputs. bf16 calls without dropout go to
 * cuDNN's fused attention on the tensor cores first (cuda_cudnn_attention.cu);
 * these kernels run fp32, dropout (td_rng_u32's masks) and what cuDNN refuses.
 *
 * Tiles are BT x BT (query rows x key rows) with BT chosen by the head dim D:
 * 64 for D <= 64, 32 for D <= 128, 16 for D <= 256 (so BT * D <= 4096 and every
 * thread keeps 16 output columns). A block has 256 threads: TPR = 256 / BT
 * threads per tile row (lanes s = 0 .. TPR-1 of one warp), thread (r, s) owns
 * tile columns s, s + TPR, ... of row r (NJ = BT / TPR of them) and output
 * columns d = s, s + TPR, ... (ND = 16). Shared-memory rows are padded to D + 1
 * floats so the threads of a warp read different banks.
 *
 *   forward  (td_attn_fwd_kernel): one block per (query tile, batch*head), key
 *            tiles 0 .. the diagonal: S = scale Q K^T (causal mask), online
 *            softmax (running max m, sum l over undropped P), O += dropout(P) V;
 *            O = acc / l, lse = m + log l.
 *   backward: D_i = rowsum(dO_i * O_i) first (td_attn_dvec_kernel), then
 *            dQ per query tile (td_attn_dq_kernel): P = exp(scale Q K^T - lse),
 *            dP' = dO V^T, dS = P (dP' keep - D), dQ = scale dS K; and dK, dV per
 *            key tile (td_attn_dkdv_kernel) over the query tiles from the
 *            diagonal on: dV = P'^T dO, dK = scale dS^T Q. Each output element
 *            is one thread's sum in a fixed order: no atomics, results
 *            reproducible bit for bit.
 *
 * Dropout: element (b, h, i, j) draws td_rng_u32(seed, stream, ((b*Ht + h0 + h)*T
 * + i)*T + j) and is dropped iff that is < thr = round(p 2^32) (cpu_attention.h's
 * rule, bit-identical masks); kept values are scaled by 1/(1 - p). Each tile's
 * keep bits are drawn once into shared memory (td_attn_mask_tile: one Philox
 * block serves four neighbouring keys). */
#include <math.h>
#include <string.h>

#include "device/cuda/cuda_internal.cuh"

#define ATTN_THREADS 256

typedef struct {
  const void *qkv;
  void *out;
  float *lse;
  const void *dout;
  void *dqkv;
  float *dvec; /* [B, H, T] rowsum(dO * O), backward only */
  int64_t B, T, H, D;
  int64_t nt; /* tiles per head: ceil(T / BT) */
  float scale, keep_scale;
  uint32_t thr; /* 0: no dropout */
  uint64_t seed, stream;
  int64_t heads_total, head_start;
} attn_args;

/* dst[rr * DP + d] = src row (row0 + rr), element d, as fp32, for rr < BT, d < D;
 * rows at or past nvalid are zeros. src points at row 0; rows are ld elements apart. */
template <int BT, typename ST>
__device__ __forceinline__ void td_attn_load_rows(float *dst, const ST *src, int64_t row0,
                                                  int64_t nvalid, int64_t ld, int D, int DP) {
  for (int idx = threadIdx.x; idx < BT * D; idx += ATTN_THREADS) {
    int rr = idx / D, d = idx - rr * D;
    dst[rr * DP + d] = rr < nvalid ? td_ld(src, (row0 + rr) * ld + d) : 0.0f;
  }
}

/* Keep bits of the tile (query rows i0 .., key columns j0 ..): bit jj % 32 of
 * mask[r * MW + jj / 32] is set iff element (i0 + r, j0 + jj) is kept. The mask
 * must be zero on entry (and the block synchronised after zeroing it). */
template <int BT>
__device__ void td_attn_mask_tile(uint32_t *mask, const attn_args &a, uint64_t base, int64_t i0,
                                  int64_t j0) {
  constexpr int MW = (BT + 31) / 32, NBLK = BT / 4 + 1;
  for (int task = threadIdx.x; task < BT * NBLK; task += ATTN_THREADS) {
    const int r = task / NBLK, q = task - r * NBLK;
    const int64_t i = i0 + r;
    if (i >= a.T) continue;
    const uint64_t c0 = base + (uint64_t)i * (uint64_t)a.T + (uint64_t)j0; /* counter of (i, j0) */
    const uint64_t blk = c0 / 4 + (uint64_t)q;
    if (4 * blk >= c0 + BT) continue;
    const td_hd_u32x4 w = td_hd_rng_block(a.seed, a.stream, blk);
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const uint64_t cc = 4 * blk + (uint64_t)e;
      if (cc < c0 || cc >= c0 + BT || w.w[e] < a.thr) continue;
      const int jj = (int)(cc - c0);
      atomicOr(&mask[r * MW + (jj >> 5)], 1u << (jj & 31)); /* bitwise: order-free */
    }
  }
}

template <int BT>
__device__ __forceinline__ float td_attn_keep(const uint32_t *mask, const attn_args &a, int r,
                                              int jj) {
  constexpr int MW = (BT + 31) / 32;
  if (!a.thr) return 1.0f;
  return (mask[r * MW + (jj >> 5)] >> (jj & 31)) & 1u ? a.keep_scale : 0.0f;
}

/* Zero the mask, draw the tile's bits (dropout only); the caller synchronises after. */
template <int BT>
__device__ __forceinline__ void td_attn_draw_mask(uint32_t *mask, const attn_args &a,
                                                  uint64_t base, int64_t i0, int64_t j0) {
  constexpr int MW = (BT + 31) / 32;
  if (!a.thr) return; /* uniform over the grid */
  for (int w = threadIdx.x; w < BT * MW; w += ATTN_THREADS) mask[w] = 0;
  __syncthreads();
  td_attn_mask_tile<BT>(mask, a, base, i0, j0);
}

/* Where head (b, h)'s rows start: q of token 0 in qkv (k at +D, v at +2D; tokens
 * 3*H*D apart), token 0 in out / dout (tokens H*D apart), and its dropout counter base. */
__device__ __forceinline__ int64_t td_attn_qkv0(const attn_args &a, int64_t b, int64_t h) {
  return (b * a.T * a.H + h) * 3 * a.D;
}
__device__ __forceinline__ int64_t td_attn_o0(const attn_args &a, int64_t b, int64_t h) {
  return (b * a.T * a.H + h) * a.D;
}
__device__ __forceinline__ uint64_t td_attn_base(const attn_args &a, int64_t b, int64_t h) {
  const int64_t ht = a.heads_total ? a.heads_total : a.H;
  return (uint64_t)((b * ht + a.head_start + h) * a.T * a.T);
}

/* ------------------------------------------------------------------ forward */

/* grid nt * B*H blocks (largest query tiles first), ATTN_THREADS threads; shared
 * sQ [BT][D+1], sKV [BT][D+1] (K, then V of the key tile), sS [BT][BT+1] (P'),
 * mask [BT][MW]. Writes out [B, T, H, D] and lse [B, H, T]. */
template <int BT, typename ST>
__global__ void __launch_bounds__(ATTN_THREADS) td_attn_fwd_kernel(attn_args a) {
  constexpr int TPR = ATTN_THREADS / BT, NJ = BT / TPR, ND = 16;
  extern __shared__ float smem[];
  const int D = (int)a.D, DP = D + 1;
  float *sQ = smem, *sKV = sQ + BT * DP, *sS = sKV + BT * DP;
  uint32_t *mask = (uint32_t *)(sS + BT * (BT + 1));
  const int64_t BH = a.B * a.H, T = a.T, ld = 3 * a.H * a.D, ldo = a.H * a.D;
  const int64_t qt = a.nt - 1 - (int64_t)blockIdx.x / BH, bh = (int64_t)blockIdx.x % BH;
  const int64_t b = bh / a.H, h = bh % a.H, i0 = qt * BT;
  const int r = threadIdx.x / TPR, s = threadIdx.x % TPR;
  const int64_t i = i0 + r;
  const ST *q = (const ST *)a.qkv + td_attn_qkv0(a, b, h);
  const uint64_t base = td_attn_base(a, b, h);

  td_attn_load_rows<BT>(sQ, q, i0, T - i0, ld, D, DP);
  float acc[ND], m = -INFINITY, l = 0.0f;
#pragma unroll
  for (int k = 0; k < ND; k++) acc[k] = 0.0f;
  for (int64_t kt = 0; kt <= qt; kt++) {
    const int64_t j0 = kt * BT, nk = min((int64_t)BT, T - j0);
    __syncthreads(); /* the previous tile's readers of sKV and sS are done */
    td_attn_load_rows<BT>(sKV, q + a.D, j0, nk, ld, D, DP);
    td_attn_draw_mask<BT>(mask, a, base, i0, j0);
    __syncthreads();
    float sc[NJ];
#pragma unroll
    for (int k = 0; k < NJ; k++) sc[k] = 0.0f;
    for (int d = 0; d < D; d++) {
      const float qv = sQ[r * DP + d];
#pragma unroll
      for (int k = 0; k < NJ; k++) sc[k] += qv * sKV[(s + TPR * k) * DP + d];
    }
    float mt = -INFINITY;
#pragma unroll
    for (int k = 0; k < NJ; k++) {
      const int64_t j = j0 + s + TPR * k;
      sc[k] = j <= i && j < T && i < T ? sc[k] * a.scale : -INFINITY;
      mt = fmaxf(mt, sc[k]);
    }
#pragma unroll
    for (int o = TPR / 2; o > 0; o >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o));
    const float mn = fmaxf(m, mt), mref = mn == -INFINITY ? 0.0f : mn;
    const float alpha = expf(m - mref);
    float ls = 0.0f;
#pragma unroll
    for (int k = 0; k < NJ; k++) {
      const int jj = s + TPR * k;
      const float e = expf(sc[k] - mref);
      ls += e;
      sS[r * (BT + 1) + jj] = e * td_attn_keep<BT>(mask, a, r, jj);
    }
#pragma unroll
    for (int o = TPR / 2; o > 0; o >>= 1) ls += __shfl_xor_sync(0xffffffffu, ls, o);
    l = l * alpha + ls;
    m = mn;
#pragma unroll
    for (int k = 0; k < ND; k++) acc[k] *= alpha;
    __syncthreads(); /* K read, sS written */
    td_attn_load_rows<BT>(sKV, q + 2 * a.D, j0, nk, ld, D, DP);
    __syncthreads();
    for (int jj = 0; jj < nk; jj++) {
      const float p = sS[r * (BT + 1) + jj];
#pragma unroll
      for (int k = 0; k < ND; k++) {
        const int d = s + TPR * k;
        if (d < D) acc[k] += p * sKV[jj * DP + d];
      }
    }
  }
  if (i < T) {
    ST *o = (ST *)a.out + td_attn_o0(a, b, h) + i * ldo;
    const float inv = 1.0f / l;
#pragma unroll
    for (int k = 0; k < ND; k++) {
      const int d = s + TPR * k;
      if (d < D) td_st(o, d, acc[k] * inv);
    }
    if (s == 0) a.lse[bh * T + i] = m + logf(l);
  }
}

/* ----------------------------------------------------------------- backward */

/* dvec[(b*H + h)*T + i] = sum_d dout[b, i, h, d] out[b, i, h, d]: one warp per
 * (b, i, h) row, the butterfly sum. */
template <typename ST>
__global__ void td_attn_dvec_kernel(attn_args a) {
  const int64_t rows = a.B * a.T * a.H, lane = threadIdx.x & 31;
  const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
  for (int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < rows; w += warps) {
    const ST *o = (const ST *)a.out + w * a.D, *g = (const ST *)a.dout + w * a.D;
    float s = 0.0f;
    for (int64_t d = lane; d < a.D; d += 32) s += td_ld(g, d) * td_ld(o, d);
    s = td_warp_sum(s);
    if (lane == 0) { /* row w = (b*T + i)*H + h */
      const int64_t h = w % a.H, bi = w / a.H, b = bi / a.T, i = bi % a.T;
      a.dvec[(b * a.H + h) * a.T + i] = s;
    }
  }
}

/* dQ of one query tile: grid nt * B*H (largest first), shared sQ, sdO [BT][D+1]
 * (the tile's rows), sK, sV [BT][D+1] (each key tile), sS [BT][BT+1] (dS), mask.
 * Writes the q part of dqkv. */
template <int BT, typename ST>
__global__ void __launch_bounds__(ATTN_THREADS) td_attn_dq_kernel(attn_args a) {
  constexpr int TPR = ATTN_THREADS / BT, NJ = BT / TPR, ND = 16;
  extern __shared__ float smem[];
  const int D = (int)a.D, DP = D + 1;
  float *sQ = smem, *sdO = sQ + BT * DP, *sK = sdO + BT * DP, *sV = sK + BT * DP;
  float *sS = sV + BT * DP;
  uint32_t *mask = (uint32_t *)(sS + BT * (BT + 1));
  const int64_t BH = a.B * a.H, T = a.T, ld = 3 * a.H * a.D, ldo = a.H * a.D;
  const int64_t qt = a.nt - 1 - (int64_t)blockIdx.x / BH, bh = (int64_t)blockIdx.x % BH;
  const int64_t b = bh / a.H, h = bh % a.H, i0 = qt * BT;
  const int r = threadIdx.x / TPR, s = threadIdx.x % TPR;
  const int64_t i = i0 + r;
  const ST *q = (const ST *)a.qkv + td_attn_qkv0(a, b, h);
  const ST *dout = (const ST *)a.dout + td_attn_o0(a, b, h);
  const uint64_t base = td_attn_base(a, b, h);

  td_attn_load_rows<BT>(sQ, q, i0, T - i0, ld, D, DP);
  td_attn_load_rows<BT>(sdO, dout, i0, T - i0, ldo, D, DP);
  const float lse_i = i < T ? a.lse[bh * T + i] : 0.0f, d_i = i < T ? a.dvec[bh * T + i] : 0.0f;
  float dq[ND];
#pragma unroll
  for (int k = 0; k < ND; k++) dq[k] = 0.0f;
  for (int64_t kt = 0; kt <= qt; kt++) {
    const int64_t j0 = kt * BT, nk = min((int64_t)BT, T - j0);
    __syncthreads(); /* the previous tile's readers of sK and sS are done */
    td_attn_load_rows<BT>(sK, q + a.D, j0, nk, ld, D, DP);
    td_attn_load_rows<BT>(sV, q + 2 * a.D, j0, nk, ld, D, DP);
    td_attn_draw_mask<BT>(mask, a, base, i0, j0);
    __syncthreads();
    float sc[NJ], dp[NJ];
#pragma unroll
    for (int k = 0; k < NJ; k++) sc[k] = dp[k] = 0.0f;
    for (int d = 0; d < D; d++) {
      const float qv = sQ[r * DP + d], gv = sdO[r * DP + d];
#pragma unroll
      for (int k = 0; k < NJ; k++) {
        sc[k] += qv * sK[(s + TPR * k) * DP + d];
        dp[k] += gv * sV[(s + TPR * k) * DP + d];
      }
    }
#pragma unroll
    for (int k = 0; k < NJ; k++) {
      const int jj = s + TPR * k;
      const int64_t j = j0 + jj;
      const float p = j <= i && j < T && i < T ? expf(sc[k] * a.scale - lse_i) : 0.0f;
      sS[r * (BT + 1) + jj] = p * (dp[k] * td_attn_keep<BT>(mask, a, r, jj) - d_i);
    }
    __syncthreads();
    for (int jj = 0; jj < nk; jj++) {
      const float ds = sS[r * (BT + 1) + jj];
#pragma unroll
      for (int k = 0; k < ND; k++) {
        const int d = s + TPR * k;
        if (d < D) dq[k] += ds * sK[jj * DP + d];
      }
    }
  }
  if (i < T) {
    ST *o = (ST *)a.dqkv + td_attn_qkv0(a, b, h) + i * ld;
#pragma unroll
    for (int k = 0; k < ND; k++) {
      const int d = s + TPR * k;
      if (d < D) td_st(o, d, a.scale * dq[k]);
    }
  }
}

/* dK, dV of one key tile: grid nt * B*H (key tile kt = blockIdx.x / BH: the
 * longest first), thread (r, s) owns key row j0 + r; shared sK, sV [BT][D+1] (the
 * tile's keys), sQ, sdO [BT][D+1] (each query tile), sP, sdS [BT][BT+1] indexed
 * [key][query], sL, sDv [BT] (the query tile's lse and D), mask [query][key words].
 * Writes the k and v parts of dqkv. */
template <int BT, typename ST>
__global__ void __launch_bounds__(ATTN_THREADS) td_attn_dkdv_kernel(attn_args a) {
  constexpr int TPR = ATTN_THREADS / BT, NJ = BT / TPR, ND = 16;
  extern __shared__ float smem[];
  const int D = (int)a.D, DP = D + 1;
  float *sK = smem, *sV = sK + BT * DP, *sQ = sV + BT * DP, *sdO = sQ + BT * DP;
  float *sP = sdO + BT * DP, *sdS = sP + BT * (BT + 1), *sL = sdS + BT * (BT + 1), *sDv = sL + BT;
  uint32_t *mask = (uint32_t *)(sDv + BT);
  const int64_t BH = a.B * a.H, T = a.T, ld = 3 * a.H * a.D;
  const int64_t kt = (int64_t)blockIdx.x / BH, bh = (int64_t)blockIdx.x % BH;
  const int64_t b = bh / a.H, h = bh % a.H, j0 = kt * BT;
  const int r = threadIdx.x / TPR, s = threadIdx.x % TPR;
  const int64_t j = j0 + r;
  const ST *q = (const ST *)a.qkv + td_attn_qkv0(a, b, h);
  const ST *dout = (const ST *)a.dout + td_attn_o0(a, b, h);
  const uint64_t base = td_attn_base(a, b, h);

  td_attn_load_rows<BT>(sK, q + a.D, j0, T - j0, ld, D, DP);
  td_attn_load_rows<BT>(sV, q + 2 * a.D, j0, T - j0, ld, D, DP);
  float dk[ND], dv[ND];
#pragma unroll
  for (int k = 0; k < ND; k++) dk[k] = dv[k] = 0.0f;
  for (int64_t qt = kt; qt < a.nt; qt++) {
    const int64_t i0 = qt * BT, nq = min((int64_t)BT, T - i0);
    __syncthreads(); /* the previous tile's readers of sQ, sdO, sP, sdS are done */
    td_attn_load_rows<BT>(sQ, q, i0, nq, ld, D, DP);
    td_attn_load_rows<BT>(sdO, dout, i0, nq, a.H * a.D, D, DP);
    for (int x = threadIdx.x; x < BT; x += ATTN_THREADS) {
      sL[x] = x < nq ? a.lse[bh * T + i0 + x] : 0.0f;
      sDv[x] = x < nq ? a.dvec[bh * T + i0 + x] : 0.0f;
    }
    td_attn_draw_mask<BT>(mask, a, base, i0, j0);
    __syncthreads();
    float sc[NJ], dp[NJ];
#pragma unroll
    for (int k = 0; k < NJ; k++) sc[k] = dp[k] = 0.0f;
    for (int d = 0; d < D; d++) {
      const float kv = sK[r * DP + d], vv = sV[r * DP + d];
#pragma unroll
      for (int k = 0; k < NJ; k++) {
        sc[k] += sQ[(s + TPR * k) * DP + d] * kv;
        dp[k] += sdO[(s + TPR * k) * DP + d] * vv;
      }
    }
#pragma unroll
    for (int k = 0; k < NJ; k++) {
      const int ii = s + TPR * k;
      const int64_t i = i0 + ii;
      const float p = j <= i && i < T && j < T ? expf(sc[k] * a.scale - sL[ii]) : 0.0f;
      const float keep = td_attn_keep<BT>(mask, a, ii, r);
      sP[r * (BT + 1) + ii] = p * keep;
      sdS[r * (BT + 1) + ii] = p * (dp[k] * keep - sDv[ii]);
    }
    __syncthreads();
    for (int ii = 0; ii < nq; ii++) {
      const float pv = sP[r * (BT + 1) + ii], ds = sdS[r * (BT + 1) + ii];
#pragma unroll
      for (int k = 0; k < ND; k++) {
        const int d = s + TPR * k;
        if (d < D) {
          dv[k] += pv * sdO[ii * DP + d];
          dk[k] += ds * sQ[ii * DP + d];
        }
      }
    }
  }
  if (j < T) {
    ST *o = (ST *)a.dqkv + td_attn_qkv0(a, b, h) + j * ld;
#pragma unroll
    for (int k = 0; k < ND; k++) {
      const int d = s + TPR * k;
      if (d < D) {
        td_st(o, a.D + d, a.scale * dk[k]);
        td_st(o, 2 * a.D + d, dv[k]);
      }
    }
  }
}

/* ------------------------------------------------------------------ host */

static size_t mask_bytes(int bt) { return (size_t)bt * (size_t)((bt + 31) / 32) * 4; }
static size_t fwd_smem(int bt, int64_t D) {
  return (size_t)(2 * bt * (D + 1) + bt * (bt + 1)) * 4 + mask_bytes(bt);
}
static size_t dq_smem(int bt, int64_t D) {
  return (size_t)(4 * bt * (D + 1) + bt * (bt + 1)) * 4 + mask_bytes(bt);
}
static size_t dkdv_smem(int bt, int64_t D) {
  return (size_t)(4 * bt * (D + 1) + 2 * bt * (bt + 1) + 2 * bt) * 4 + mask_bytes(bt);
}

/* The checks of the CPU backend (cpu_attention.c shape_of), before either
 * implementation runs: cuDNN's would turn p = 1 into an infinite keep scale
 * (NaN everywhere) and p < 0 into an undefined threshold. */
static void attn_check(const td_attention_desc *ad) {
  if (!(ad->batch > 0 && ad->seq > 0 && ad->heads > 0 && ad->head_dim > 0))
    td_fail("empty attention B=%lld T=%lld H=%lld D=%lld", (long long)ad->batch,
            (long long)ad->seq, (long long)ad->heads, (long long)ad->head_dim);
  if (ad->dtype != TD_F32 && ad->dtype != TD_BF16) td_fail("attention dtype must be fp32 or bf16");
  if (!(ad->dropout_p >= 0.0f && ad->dropout_p < 1.0f))
    td_fail("attention dropout p = %g not in [0, 1)", (double)ad->dropout_p);
  if (!(ad->head_start >= 0 && (ad->heads_total ? ad->head_start + ad->heads <= ad->heads_total
                                                 : ad->head_start == 0)))
    td_fail("attention heads [%lld, %lld) of %lld", (long long)ad->head_start,
            (long long)(ad->head_start + ad->heads), (long long)ad->heads_total);
}

/* The limits of trident's kernels, the tile size, and their arguments. */
static attn_args attn_setup(const td_cuda *c, const td_attention_desc *ad, int *bt) {
  (void)c;
  if (ad->head_dim > 256)
    td_fail("attention head_dim %lld: the CUDA attention kernel supports head_dim <= 256",
            (long long)ad->head_dim);
  *bt = ad->head_dim <= 64 ? 64 : ad->head_dim <= 128 ? 32 : 16;
  attn_args a;
  memset(&a, 0, sizeof a);
  a.qkv = ad->qkv, a.out = ad->out, a.lse = ad->lse, a.dout = ad->dout, a.dqkv = ad->dqkv;
  a.B = ad->batch, a.T = ad->seq, a.H = ad->heads, a.D = ad->head_dim;
  a.nt = (a.T + *bt - 1) / *bt;
  a.scale = ad->scale;
  a.thr = td_attn_dropout_threshold(ad->dropout_p);
  a.keep_scale = 1.0f / (1.0f - ad->dropout_p);
  a.seed = ad->seed, a.stream = ad->stream;
  a.heads_total = ad->heads_total, a.head_start = ad->head_start;
  if (a.nt * a.B * a.H > INT32_MAX)
    td_fail("attention B=%lld T=%lld H=%lld: too many tiles for one launch", (long long)a.B,
            (long long)a.T, (long long)a.H);
  return a;
}

/* One kernel of the family at tile size BT, with its shared memory. */
#define TD_ATTN_LAUNCH(KERNEL, SMEM, BT, ST, WHAT)                                          \
  do {                                                                                     \
    size_t bytes_ = SMEM(BT, a.D);                                                         \
    td_cuda_smem_optin(c, (const void *)KERNEL<BT, ST>, bytes_, WHAT);                     \
    KERNEL<BT, ST><<<(unsigned)(a.nt * a.B * a.H), ATTN_THREADS, bytes_, c->stream>>>(a);  \
    TD_CUDA_LAUNCHED();                                                                    \
  } while (0)

#define TD_ATTN_BY_TILE(KERNEL, SMEM, ST, WHAT)                                \
  do {                                                                         \
    if (bt == 64)                                                              \
      TD_ATTN_LAUNCH(KERNEL, SMEM, 64, ST, WHAT);                              \
    else if (bt == 32)                                                         \
      TD_ATTN_LAUNCH(KERNEL, SMEM, 32, ST, WHAT);                              \
    else                                                                       \
      TD_ATTN_LAUNCH(KERNEL, SMEM, 16, ST, WHAT);                              \
  } while (0)

static void cu_attention_forward(td_device *d, const td_attention_desc *ad) {
  td_cuda *c = td_cuda_enter(d);
  attn_check(ad);
  if (td_cudnn_attention(c, ad, 0)) return;
  int bt;
  attn_args a = attn_setup(c, ad, &bt);
  if (ad->dtype == TD_BF16)
    TD_ATTN_BY_TILE(td_attn_fwd_kernel, fwd_smem, uint16_t, "attention_forward");
  else
    TD_ATTN_BY_TILE(td_attn_fwd_kernel, fwd_smem, float, "attention_forward");
}

static void cu_attention_backward(td_device *d, const td_attention_desc *ad) {
  td_cuda *c = td_cuda_enter(d);
  attn_check(ad);
  if (td_cudnn_attention(c, ad, 1)) return;
  int bt;
  attn_args a = attn_setup(c, ad, &bt);
  a.dvec = (float *)td_cuda_scratch(c, (size_t)(a.B * a.H * a.T) * sizeof(float));
  unsigned dgrid = td_cuda_grid(c, a.B * a.T * a.H * 32, TD_CUDA_THREADS);
  if (ad->dtype == TD_BF16) {
    td_attn_dvec_kernel<uint16_t><<<dgrid, TD_CUDA_THREADS, 0, c->stream>>>(a);
    TD_CUDA_LAUNCHED();
    TD_ATTN_BY_TILE(td_attn_dq_kernel, dq_smem, uint16_t, "attention_backward");
    TD_ATTN_BY_TILE(td_attn_dkdv_kernel, dkdv_smem, uint16_t, "attention_backward");
  } else {
    td_attn_dvec_kernel<float><<<dgrid, TD_CUDA_THREADS, 0, c->stream>>>(a);
    TD_CUDA_LAUNCHED();
    TD_ATTN_BY_TILE(td_attn_dq_kernel, dq_smem, float, "attention_backward");
    TD_ATTN_BY_TILE(td_attn_dkdv_kernel, dkdv_smem, float, "attention_backward");
  }
}

/* ------------------------------------------------------------ rows (generation) */

/* attention_forward_rows: one block per (query row i in [q0, q0 + nq), head h) of
 * batch 0, ATTN_THREADS threads. S (global scratch, i + 1 floats of this block's
 * row) holds the scaled scores, then P; the softmax's max and sum over the block
 * (td_block_max / td_block_sum: a fixed order), lse = m + log l; then output
 * column e is summed by the threads of column e, one slice of the keys each
 * (keys j = slice, slice + slices, ...), and the slices' sums added in slice
 * order: results reproducible bit for bit. Dropout as the forward kernel's. A
 * generated token is one row: nothing here is tiled for reuse. */
template <typename ST>
__global__ void __launch_bounds__(ATTN_THREADS)
    td_attn_rows_kernel(const attn_args a, int64_t q0, float *S, int64_t ld_s) {
  extern __shared__ float rows_smem[];
  const int D = (int)a.D, t = threadIdx.x;
  float *q = rows_smem, *part = q + D, *red = part + ATTN_THREADS;
  const int64_t h = blockIdx.x % a.H, i = q0 + blockIdx.x / a.H, n = i + 1;
  const int64_t ld = 3 * a.H * a.D;
  const ST *qkv = (const ST *)a.qkv;
  float *s = S + (int64_t)blockIdx.x * ld_s;
  for (int e = t; e < D; e += ATTN_THREADS) q[e] = td_ld(qkv, i * ld + h * 3 * D + e);
  __syncthreads();
  float mx = -INFINITY;
  for (int64_t j = t; j < n; j += ATTN_THREADS) {
    const int64_t k0 = j * ld + h * 3 * D + D;
    float dot = 0.0f;
    for (int e = 0; e < D; e++) dot = fmaf(q[e], td_ld(qkv, k0 + e), dot);
    s[j] = a.scale * dot;
    mx = fmaxf(mx, s[j]);
  }
  mx = td_block_max(mx, red);
  float sum = 0.0f;
  for (int64_t j = t; j < n; j += ATTN_THREADS) {
    s[j] = expf(s[j] - mx);
    sum += s[j];
  }
  sum = td_block_sum(sum, red); /* synchronises: every s[j] is written */
  if (t == 0) a.lse[h * a.T + i] = mx + logf(sum);
  const float inv = 1.0f / sum;
  const uint64_t row = td_attn_base(a, 0, h) + (uint64_t)i * (uint64_t)a.T;
  const int slices = ATTN_THREADS / D, e = t % D, slice = t / D;
  float acc = 0.0f;
  if (slice < slices)
    for (int64_t j = slice; j < n; j += slices) {
      float p = s[j] * inv;
      if (a.thr)
        p = td_hd_rng_u32(a.seed, a.stream, row + (uint64_t)j) >= a.thr ? p * a.keep_scale : 0.0f;
      acc = fmaf(p, td_ld(qkv, j * ld + h * 3 * D + 2 * D + e), acc);
    }
  part[t] = acc;
  __syncthreads();
  if (t < D) {
    float o = 0.0f;
    for (int k = 0; k < slices; k++) o += part[k * D + t];
    td_st((ST *)a.out, (i * a.H + h) * a.D + t, o);
  }
}

static void cu_attention_forward_rows(td_device *d, const td_attention_desc *ad, int64_t q0,
                                      int64_t nq) {
  td_cuda *c = td_cuda_enter(d);
  attn_check(ad);
  if (!(ad->batch == 1 && q0 >= 0 && nq > 0 && q0 + nq <= ad->seq))
    td_fail("attention rows [%lld, %lld) of a sequence of %lld (batch %lld; one sequence only)",
            (long long)q0, (long long)(q0 + nq), (long long)ad->seq, (long long)ad->batch);
  int bt;
  attn_args a = attn_setup(c, ad, &bt);
  if (nq * a.H > INT32_MAX)
    td_fail("attention rows: %lld rows x %lld heads, too many blocks for one launch",
            (long long)nq, (long long)a.H);
  const int64_t ld_s = q0 + nq; /* the longest row's keys */
  float *S = (float *)td_cuda_scratch(c, (size_t)(nq * a.H * ld_s) * sizeof(float));
  const size_t smem = (size_t)(a.D + ATTN_THREADS + 33) * sizeof(float);
  const unsigned grid = (unsigned)(nq * a.H);
  if (ad->dtype == TD_BF16)
    td_attn_rows_kernel<uint16_t><<<grid, ATTN_THREADS, smem, c->stream>>>(a, q0, S, ld_s);
  else
    td_attn_rows_kernel<float><<<grid, ATTN_THREADS, smem, c->stream>>>(a, q0, S, ld_s);
  TD_CUDA_LAUNCHED();
}

void td_cuda_register_attention(td_device_ops *ops) {
  ops->attention_forward = cu_attention_forward;
  ops->attention_forward_rows = cu_attention_forward_rows;
  ops->attention_backward = cu_attention_backward;
}
