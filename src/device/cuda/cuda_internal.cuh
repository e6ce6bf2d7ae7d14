/* Internal to the CUDA backend (the .cu files of src/device/cuda): the handle's state, error
 * checking, launch helpers and the deterministic reductions the kernels share.
 *
 * Conventions of every kernel here:
 *  - it runs on the handle's stream (td_cuda::stream), never the default stream;
 *  - element offsets are int64_t; grid-stride loops, so any n fits the grid;
 *  - no floating-point atomics: every output element is written by one thread,
 *    and sums over many threads go through td_block_sum (a fixed shuffle tree)
 *    or a fixed two-stage blocking, so results are bitwise reproducible. */
#ifndef TD_DEVICE_CUDA_CUDA_INTERNAL_CUH
#define TD_DEVICE_CUDA_CUDA_INTERNAL_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include <type_traits>

extern "C" {
#include "base/log.h"
#include "base/mem.h"
#include "base/watchdog.h"
#include "device/device.h"
/* base/error.h spells noreturn the C11 way; the same functions for C++: */
[[noreturn]] void td_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
}
#include "base/hostdev.h"
#include "device/cuda/cuda_cublaslt.cuh" /* cuBLASLt: called through td_lt only */
#include "device/cuda/cuda_device.h"

#define TD_CUDA_THREADS 256
#define TD_CUDA_WORKSPACE_BYTES ((size_t)32 << 20) /* cuBLASLt's, fixed: Hopper's advice */

typedef struct td_cuda_gemm_cache td_cuda_gemm_cache;

typedef struct td_cuda {
  int index;                 /* CUDA device ordinal */
  cudaStream_t stream;       /* every op of the handle runs on it */
  cublasLtHandle_t lt;
  void *workspace;           /* TD_CUDA_WORKSPACE_BYTES for cuBLASLt (td_cuda_workspace) */
  void *scratch;             /* kernels' partial sums and staging; grows, never shrinks */
  size_t scratch_bytes;
  void *reduce;              /* 16 device bytes: count_zeros' counter */
  int *err_host, *err_dev;   /* mapped pinned flag: kernels report bad input (TD_CUDA_ERR_*) */
  td_cuda_gemm_cache *gemm;  /* cuBLASLt plans per shape (cuda_gemm.cu) */
  struct td_cudnn *cudnn;    /* cuDNN handle and attention graphs (cuda_cudnn_attention.cu) */
  struct td_cuda_adam *adam; /* adamw_runs' chunk table on the device (cuda_optim.cu) */
  int tf32;                  /* TRIDENT_CUDA_TF32=1: fp32 GEMMs on TF32 tensor cores */
  int fuse;                  /* matmul_fuses may say 1 (TRIDENT_CUDA_FUSE=0: never) */
  int pools;                 /* alloc/free from the stream-ordered pool (cudaMallocAsync) */
  uint64_t uuid_key;         /* a hash of the GPU's UUID (device_key) */
  int sm_count, cc_major, cc_minor;
  size_t smem_optin;         /* dynamic shared memory a block may opt in to */
  size_t mem_total;
  char name[256];
} td_cuda;

/* Values of the error flag (mapped pinned memory: kernels store, never add, and
 * the host reads it after a stream synchronisation): input found out of range. */
#define TD_CUDA_ERR_TARGET 1 /* cross_entropy_forward: target outside [0, vocab) */

/* ------------------------------------------------------------------ errors */

void td_cuda_check(cudaError_t e, const char *what, const char *file, int line);
void td_cuda_lt_check(cublasStatus_t s, const char *what, const char *file, int line);
#define TD_CUDA_OK(call) td_cuda_check((call), #call, __FILE__, __LINE__)
#define TD_LT_OK(call) td_cuda_lt_check((call), #call, __FILE__, __LINE__)
/* After a <<<...>>> launch: a bad configuration is reported here, not later. */
#define TD_CUDA_LAUNCHED() td_cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

/* The handle's state, with its device made current (every op starts here). */
td_cuda *td_cuda_enter(td_device *d);

/* cuBLASLt's workspace, made at the first call (fails naming the device). */
void *td_cuda_workspace(td_cuda *c);
/* The host waits for c's stream (under the watchdog; while NCCL communicators
 * exist, polling their asynchronous errors). */
void td_cuda_wait_stream(td_cuda *c);
/* cuda_nccl.cu: 1 while any NCCL communicator exists; fail with NCCL's reason (the
 * communicators aborted) when one has met an error while its operations ran. */
extern "C" int td_nccl_live(void);
extern "C" void td_nccl_check_async(void);
/* Wait for the stream, then fail with the message of any input error a kernel flagged. */
void td_cuda_sync(td_cuda *c);

/* Device memory of bytes into *p from the stream-ordered pool (usable in c's
 * stream order; a pool out of room gives back what it keeps and tries once more),
 * else cudaMalloc; the error is returned, not raised. td_cuda_free is in c's
 * stream order with the pool: the work issued on c that uses p comes first. */
cudaError_t td_cuda_malloc(td_cuda *c, void **p, size_t bytes);
void td_cuda_free(td_cuda *c, void *p);
/* The same for the backend's own buffers (kernel scratch, cuDNN's dropout mask),
 * counted in memory_stats with the ops' allocations, as PyTorch's allocator
 * counts its workspaces in its peak. */
cudaError_t td_cuda_malloc_counted(td_cuda *c, void **p, size_t bytes);
void td_cuda_free_counted(td_cuda *c, void *p);

/* Device scratch of at least bytes (256-byte aligned), valid until the next call
 * that asks for more; stream order keeps one op's use apart from the next's. */
void *td_cuda_scratch(td_cuda *c, size_t bytes);

/* Blocks for a grid-stride loop over n items of `threads` each: enough to fill the
 * GPU, never more than the items need. */
static inline unsigned td_cuda_grid(const td_cuda *c, int64_t n, int threads) {
  int64_t need = (n + threads - 1) / threads, cap = (int64_t)c->sm_count * 32;
  if (need < 1) need = 1;
  return (unsigned)(need < cap ? need : cap);
}

/* Dynamic shared memory above 48 KiB must be asked for per kernel. */
void td_cuda_smem_optin(const td_cuda *c, const void *kernel, size_t bytes, const char *what);

/* ------------------------------------------------------- kernel registration */

void td_cuda_register_memory(td_device_ops *ops);      /* alloc .. synchronize (cuda_backend.cu) */
void td_cuda_register_gemm(td_device_ops *ops);        /* matmul */
void td_cuda_register_elementwise(td_device_ops *ops); /* bias_backward, gelu, add, scale,
                                                          dropout, cast */
void td_cuda_register_embedding(td_device_ops *ops);   /* embedding_forward/backward */
void td_cuda_register_loss(td_device_ops *ops);        /* cross_entropy_* */
void td_cuda_register_optim(td_device_ops *ops);       /* adamw, sum_squares, count_zeros */
void td_cuda_register_attention(td_device_ops *ops);   /* attention_forward/backward */
void td_cuda_register_layernorm(td_device_ops *ops);   /* layernorm_forward/backward */

void td_cuda_gemm_release(td_cuda *c); /* frees the plan cache */
void td_cuda_adam_release(td_cuda *c); /* frees adamw_runs' chunk table */

/* cuDNN's fused attention (cuda_cudnn_attention.cu): runs the op on c's stream and
 * returns 1, or returns 0 when it does not take this call (not bf16, dropout,
 * cuDNN missing or refusing the shape; TRIDENT_CUDA_ATTENTION=native) and the
 * caller runs trident's kernels. TRIDENT_CUDA_ATTENTION=cudnn fails instead. */
int td_cudnn_attention(td_cuda *c, const td_attention_desc *ad, int backward);
void td_cudnn_release(td_cuda *c);

/* ------------------------------------------------------------ device helpers */

/* Loads and stores by storage type: float, or bf16 held as uint16_t. */
__device__ __forceinline__ float td_ld(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float td_ld(const uint16_t *p, int64_t i) {
  return td_hd_bf16_to_f32(p[i]);
}
__device__ __forceinline__ void td_st(float *p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void td_st(uint16_t *p, int64_t i, float v) {
  p[i] = td_hd_f32_to_bf16(v);
}

/* An fp32 or bf16 element of a buffer whose dtype is known at run time. */
__device__ __forceinline__ float td_ld_dt(const void *p, int bf16, int64_t i) {
  return bf16 ? td_hd_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}
__device__ __forceinline__ void td_st_dt(void *p, int bf16, int64_t i, float v) {
  if (bf16)
    ((uint16_t *)p)[i] = td_hd_f32_to_bf16(v);
  else
    ((float *)p)[i] = v;
}

/* VEC consecutive elements from i (VEC 4: i and the buffer 16-byte aligned for
 * fp32, 8-byte for bf16; td_vec_ok checks it on the host), as fp32. */
template <int VEC>
__device__ __forceinline__ void td_ld_vec(float *v, const float *p, int64_t i) {
  if constexpr (VEC == 4) {
    float4 q = *reinterpret_cast<const float4 *>(p + i);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  } else {
#pragma unroll
    for (int k = 0; k < VEC; k++) v[k] = p[i + k];
  }
}
template <int VEC>
__device__ __forceinline__ void td_ld_vec(float *v, const uint16_t *p, int64_t i) {
  if constexpr (VEC == 4) {
    uint2 q = *reinterpret_cast<const uint2 *>(p + i); /* little-endian: element i low */
    v[0] = td_hd_bf16_to_f32((uint16_t)(q.x & 0xffffu)), v[1] = td_hd_bf16_to_f32((uint16_t)(q.x >> 16));
    v[2] = td_hd_bf16_to_f32((uint16_t)(q.y & 0xffffu)), v[3] = td_hd_bf16_to_f32((uint16_t)(q.y >> 16));
  } else {
#pragma unroll
    for (int k = 0; k < VEC; k++) v[k] = td_hd_bf16_to_f32(p[i + k]);
  }
}
template <int VEC>
__device__ __forceinline__ void td_st_vec(float *p, int64_t i, const float *v) {
  if constexpr (VEC == 4) {
    *reinterpret_cast<float4 *>(p + i) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
#pragma unroll
    for (int k = 0; k < VEC; k++) p[i + k] = v[k];
  }
}
template <int VEC>
__device__ __forceinline__ void td_st_vec(uint16_t *p, int64_t i, const float *v) {
  if constexpr (VEC == 4) {
    uint2 q;
    q.x = (uint32_t)td_hd_f32_to_bf16(v[0]) | (uint32_t)td_hd_f32_to_bf16(v[1]) << 16;
    q.y = (uint32_t)td_hd_f32_to_bf16(v[2]) | (uint32_t)td_hd_f32_to_bf16(v[3]) << 16;
    *reinterpret_cast<uint2 *>(p + i) = q;
  } else {
#pragma unroll
    for (int k = 0; k < VEC; k++) p[i + k] = td_hd_f32_to_bf16(v[k]);
  }
}

/* Whether rows of cols elements can be read 4 at a time: cols % 4 == 0 and every
 * buffer 16-byte aligned (NULL passes). */
static inline int td_vec_ok(int64_t cols, const void *a, const void *b = NULL, const void *c = NULL) {
  const void *ps[] = {a, b, c};
  if (cols % 4) return 0;
  for (const void *p : ps)
    if ((uintptr_t)p % 16) return 0;
  return 1;
}

/* Whether every buffer is 16-byte aligned (NULL passes): td_grid_vec may then
 * move 16 bytes at a time (its tail goes element by element, so n is free). */
static inline int td_aligned16(const void *a, const void *b = NULL, const void *c = NULL) {
  return td_vec_ok(0, a, b, c);
}

/* Sum over a warp by a xor butterfly: every lane gets the same bits (each step
 * adds the same two values, only commuted). */
template <typename T>
__device__ __forceinline__ T td_warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
/* Maximum over a warp (fmaxf: a NaN loses to a number, as on the CPU). */
__device__ __forceinline__ float td_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024), returned to every
 * thread: warps by the butterfly, then the warp sums in warp order by warp 0.
 * Every thread of the block must call it (it synchronises); red holds 33 T. */
template <typename T>
__device__ T td_block_sum(T v, T *red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = td_warp_sum(v);
  __syncthreads(); /* red may still be read by a previous call */
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = lane < nw ? red[lane] : (T)0;
    w = td_warp_sum(w);
    if (lane == 0) red[32] = w;
  }
  __syncthreads();
  return red[32];
}

/* Maximum over the block, as td_block_sum. */
__device__ __forceinline__ float td_block_max(float v, float *red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = td_warp_max(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < nw ? red[lane] : -INFINITY;
    w = td_warp_max(w);
    if (lane == 0) red[32] = w;
  }
  __syncthreads();
  return red[32];
}

#define TD_GRID_STRIDE(i, n)                                                          \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);           \
       i += (int64_t)gridDim.x * blockDim.x)

/* Attention dropout drops a probability whose counter's word is below this:
 * round(p 2^32), 0 for no dropout (cpu_attention.h's rule; cuda_attention.cu and
 * the cuDNN path's mask share it). */
static inline uint32_t td_attn_dropout_threshold(float p) {
  const double thr = nearbyint((double)p * 4294967296.0);
  return thr > 4294967295.0 ? 4294967295u : (uint32_t)thr;
}

/* ------------------------------------------------- vectorised elementwise loops */

template <int N>
using td_int = std::integral_constant<int, N>;

/* VEC elements at p, bits unchanged: one element for VEC 1, else whole 16-byte
 * words (p 16-byte aligned, VEC * sizeof(T) a multiple of 16). */
template <int VEC, typename T>
__device__ __forceinline__ void td_ld_raw(T *v, const T *p) {
  if constexpr (VEC == 1) {
    v[0] = *p;
  } else {
    static_assert(VEC * sizeof(T) % 16 == 0, "td_ld_raw moves whole 16-byte words");
    uint4 w[VEC * sizeof(T) / 16];
#pragma unroll
    for (int k = 0; k < (int)(VEC * sizeof(T) / 16); k++) w[k] = reinterpret_cast<const uint4 *>(p)[k];
    memcpy(v, w, sizeof w); /* register moves, no local memory */
  }
}
template <int VEC, typename T>
__device__ __forceinline__ void td_st_raw(T *p, const T *v) {
  if constexpr (VEC == 1) {
    *p = v[0];
  } else {
    static_assert(VEC * sizeof(T) % 16 == 0, "td_st_raw moves whole 16-byte words");
    uint4 w[VEC * sizeof(T) / 16];
    memcpy(w, v, sizeof w);
#pragma unroll
    for (int k = 0; k < (int)(VEC * sizeof(T) / 16); k++) reinterpret_cast<uint4 *>(p)[k] = w[k];
  }
}

/* A grid-stride loop over n elements, VEC at a time: f(i, td_int<VEC>()) for
 * i = 0, VEC, 2 VEC, ... below n - n % VEC, then f(i, td_int<1>()) for each of
 * the n % VEC elements left (threads of block 0). One thread per element, which
 * it reads before it writes: in-place use works as in a scalar loop. */
template <int VEC, typename F>
__device__ __forceinline__ void td_grid_vec(int64_t n, F f) {
  const int64_t nv = n / VEC, tail = nv * VEC + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  TD_GRID_STRIDE(v, nv) f(v * VEC, td_int<VEC>());
  if (VEC > 1 && tail < n) f(tail, td_int<1>());
}

/* Launches a td_grid_vec kernel: launch(td_int<VEC>(), grid) when the buffers
 * are 16-byte aligned (td_aligned16), else launch(td_int<1>(), grid); the grid
 * covers n / VEC vectors. */
template <int VEC, typename F>
static inline void td_cuda_launch_vec(const td_cuda *c, int64_t n, int aligned, F launch) {
  if (aligned)
    launch(td_int<VEC>(), td_cuda_grid(c, n / VEC, TD_CUDA_THREADS));
  else
    launch(td_int<1>(), td_cuda_grid(c, n, TD_CUDA_THREADS));
  TD_CUDA_LAUNCHED();
}

#endif
