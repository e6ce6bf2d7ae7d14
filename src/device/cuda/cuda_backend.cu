/* The CUDA backend: opening a GPU (stream, cuBLASLt handle), memory,
 * copies, fill, synchronize, and the ops table the kernel files fill in.
 *
 * Memory comes from the device's stream-ordered pool (cudaMallocAsync /
 * cudaFreeAsync on the handle's stream, the pool keeping what is freed, as
 * PyTorch's caching allocator does; never managed memory), zeroed on the
 * stream (alloc_scratch: not zeroed, for ZeRO's per-unit buffers, which their
 * users write whole): an alloc or free never makes the host or the device wait, where
 * cudaFree waits for the whole device (every stream, NCCL's included) and
 * would serialise ZeRO's per-unit buffers with the communication they overlap.
 * A GPU without memory pools gets cudaMalloc / cudaFree. copy_h2d and
 * copy_d2h return with the copy done; copy_d2d, fill and the async copies are
 * asynchronous on the stream like the kernels. cuBLASLt's workspace is made at
 * a handle's first matmul: handles that only carry communication (device_comm's
 * streams) never have one. Events are cudaEvent_t without timing (the cheapest kind); host_alloc
 * is cudaMallocHost (page-locked, so the async copies really are). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/cuda/cuda_internal.cuh"

/* ------------------------------------------------------------------ errors */

void td_cuda_check(cudaError_t e, const char *what, const char *file, int line) {
  if (e == cudaSuccess) return;
  td_fail("CUDA error at %s:%d (%s): %s (%s)", file, line, what, cudaGetErrorString(e),
          cudaGetErrorName(e));
}

void td_cuda_lt_check(cublasStatus_t s, const char *what, const char *file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  td_fail("cuBLASLt error at %s:%d (%s): status %d", file, line, what, (int)s);
}

/* ready(): cudaStreamQuery or cudaEventQuery. With NCCL communicators alive the
 * host polls, so an error NCCL meets on the GPU (a peer gone) fails the run with
 * NCCL's reason; else it blocks in the CUDA call. */
template <typename Ready, typename Block>
static cudaError_t wait_polling_nccl(Ready ready, Block block) {
  if (!td_nccl_live()) return block();
  cudaError_t e;
  while ((e = ready()) == cudaErrorNotReady) {
    (void)cudaGetLastError(); /* an answer, not an error a later launch check would see */
    td_nccl_check_async();
    usleep(50);
  }
  return e;
}

/* The host waits for c's stream under the watchdog (base/watchdog.h): with NCCL a
 * stream can wait forever for a rank that is gone. */
void td_cuda_wait_stream(td_cuda *c) {
  td_watchdog_enter("a wait for the GPU's stream (cudaStreamSynchronize: kernels, copies, NCCL)");
  cudaError_t e = wait_polling_nccl([c] { return cudaStreamQuery(c->stream); },
                                    [c] { return cudaStreamSynchronize(c->stream); });
  td_watchdog_leave();
  TD_CUDA_OK(e);
}

td_cuda *td_cuda_enter(td_device *d) {
  td_cuda *c = (td_cuda *)d->impl;
  TD_CUDA_OK(cudaSetDevice(c->index));
  return c;
}

void td_cuda_sync(td_cuda *c) {
  td_cuda_wait_stream(c);
  int flags = *(volatile int *)c->err_host;
  if (!flags) return;
  *(volatile int *)c->err_host = 0;
  if (flags & TD_CUDA_ERR_TARGET)
    td_fail("cross-entropy: a target id is outside the vocabulary [0, vocab) (found on cuda:%d)",
            c->index);
  td_fail("cuda:%d: a kernel reported bad input (flags %#x)", c->index, (unsigned)flags);
}

/* Device memory of bytes into *p: from the stream-ordered pool (usable in c's
 * stream order), else cudaMalloc. A pool out of room gives back what it keeps
 * (after the stream, so the frees issued are done) and tries once more, so
 * memory it caches never fails an allocation. */
cudaError_t td_cuda_malloc(td_cuda *c, void **p, size_t bytes) {
  if (!c->pools) return cudaMalloc(p, bytes);
  cudaError_t e = cudaMallocAsync(p, bytes, c->stream);
  if (e != cudaErrorMemoryAllocation) return e;
  (void)cudaGetLastError();
  cudaMemPool_t pool;
  td_cuda_wait_stream(c);
  TD_CUDA_OK(cudaDeviceGetDefaultMemPool(&pool, c->index));
  TD_CUDA_OK(cudaMemPoolTrimTo(pool, 0));
  return cudaMallocAsync(p, bytes, c->stream);
}
void td_cuda_free(td_cuda *c, void *p) {
  TD_CUDA_OK(c->pools ? cudaFreeAsync(p, c->stream) : cudaFree(p));
}

static void live_add(void *p, size_t bytes); /* memory_stats' table, below */
static int live_remove(void *p);

void *td_cuda_workspace(td_cuda *c) {
  if (c->workspace) return c->workspace;
  if (cudaMalloc(&c->workspace, TD_CUDA_WORKSPACE_BYTES) != cudaSuccess) {
    (void)cudaGetLastError();
    td_fail("cuda:%d: cannot allocate cuBLASLt's %d MiB workspace", c->index,
            (int)(TD_CUDA_WORKSPACE_BYTES >> 20));
  }
  live_add(c->workspace, TD_CUDA_WORKSPACE_BYTES); /* in memory_stats, as the ops' buffers */
  return c->workspace;
}

void *td_cuda_scratch(td_cuda *c, size_t bytes) {
  if (bytes <= c->scratch_bytes) return c->scratch;
  if (!c->pools) td_cuda_wait_stream(c); /* the old buffer may still be in use */
  if (c->scratch) td_cuda_free_counted(c, c->scratch);
  c->scratch = NULL, c->scratch_bytes = 0;
  size_t grown = bytes + bytes / 4;
  if (td_cuda_malloc_counted(c, &c->scratch, grown) != cudaSuccess) {
    (void)cudaGetLastError();
    td_fail("cuda:%d: cannot allocate %.1f MiB of kernel scratch", c->index, grown / 1048576.0);
  }
  c->scratch_bytes = grown;
  return c->scratch;
}

void td_cuda_smem_optin(const td_cuda *c, const void *kernel, size_t bytes, const char *what) {
  if (bytes > c->smem_optin)
    td_fail("%s needs %zu bytes of shared memory per block; cuda:%d (%s) allows %zu", what, bytes,
            c->index, c->name, c->smem_optin);
  if (bytes > 48 * 1024)
    TD_CUDA_OK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)bytes));
}

/* ------------------------------------------------------------ open, close */

/* A GPU is usable when the driver answers and device 0 is compute capability 8.0
 * or newer (what the kernels are built for). */
extern "C" int td_cuda_available(void) {
  int count = 0, major = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaSuccess && count > 0) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  (void)cudaGetLastError(); /* a missing driver is an answer here, not an error */
  return e == cudaSuccess && count > 0 && major >= 8;
}

/* The runtime loads the driver itself (linked statically) and reports a missing
 * one as too old: say both. */
static const char *no_device_hint(cudaError_t e) {
  return e == cudaErrorInsufficientDriver
             ? " (no NVIDIA driver (libcuda.so.1) found, or one older than trident's CUDA runtime)"
             : "";
}

extern "C" void *td_cuda_open(int *index) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    td_fail("no CUDA device visible: %s%s", cudaGetErrorString(e), no_device_hint(e));
  }
  if (count == 0) td_fail("no CUDA device visible: %s", cudaGetErrorString(cudaErrorNoDevice));
  td_cuda *c = (td_cuda *)td_calloc(sizeof *c);
  c->index = (*index < 0 ? 0 : *index) % count;
  *index = c->index;
  TD_CUDA_OK(cudaSetDevice(c->index));
  cudaDeviceProp prop;
  TD_CUDA_OK(cudaGetDeviceProperties(&prop, c->index));
  snprintf(c->name, sizeof c->name, "%s", prop.name);
  c->cc_major = prop.major, c->cc_minor = prop.minor, c->sm_count = prop.multiProcessorCount;
  c->smem_optin = prop.sharedMemPerBlockOptin, c->mem_total = prop.totalGlobalMem;
  c->uuid_key = 1469598103934665603ull; /* FNV-1a over the 16 bytes of the UUID */
  for (int i = 0; i < 16; i++)
    c->uuid_key = (c->uuid_key ^ (unsigned char)prop.uuid.bytes[i]) * 1099511628211ull;
  if (prop.major < 8)
    td_fail("cuda:%d (%s) has compute capability %d.%d; trident's CUDA kernels are built for "
            "8.0 (A100) and newer", c->index, prop.name, prop.major, prop.minor);
  TD_CUDA_OK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  int pools = 0;
  TD_CUDA_OK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, c->index));
  if (pools) { /* the pool keeps freed memory for the next alloc instead of unmapping it */
    cudaMemPool_t pool;
    uint64_t keep = UINT64_MAX;
    TD_CUDA_OK(cudaDeviceGetDefaultMemPool(&pool, c->index));
    TD_CUDA_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  }
  c->pools = pools;
  td_cublaslt_load(); /* here, not at start-up: only a process that opens a GPU pays for it */
  TD_LT_OK(td_lt.cublasLtCreate(&c->lt));
  TD_CUDA_OK(cudaMalloc(&c->reduce, 16));
  TD_CUDA_OK(cudaHostAlloc((void **)&c->err_host, sizeof(int), cudaHostAllocMapped));
  TD_CUDA_OK(cudaHostGetDevicePointer((void **)&c->err_dev, c->err_host, 0));
  *c->err_host = 0;
  const char *tf32 = getenv("TRIDENT_CUDA_TF32");
  c->tf32 = tf32 && !strcmp(tf32, "1");
  const char *fuse = getenv("TRIDENT_CUDA_FUSE");
  c->fuse = !(fuse && !strcmp(fuse, "0"));
  return c;
}

extern "C" void td_cuda_close(void *impl) {
  td_cuda *c = (td_cuda *)impl;
  if (!c) return;
  TD_CUDA_OK(cudaSetDevice(c->index));
  td_cuda_wait_stream(c);
  td_cuda_gemm_release(c);
  td_cudnn_release(c);
  td_cuda_adam_release(c);
  if (c->scratch) td_cuda_free_counted(c, c->scratch);
  if (c->workspace) {
    live_remove(c->workspace);
    TD_CUDA_OK(cudaFree(c->workspace));
  }
  TD_CUDA_OK(cudaFree(c->reduce));
  TD_CUDA_OK(cudaFreeHost(c->err_host));
  TD_LT_OK(td_lt.cublasLtDestroy(c->lt));
  TD_CUDA_OK(cudaStreamDestroy(c->stream));
  td_free(c);
}

extern "C" void td_cuda_describe(const void *impl, char *buf, size_t n) {
  const td_cuda *c = (const td_cuda *)impl;
  snprintf(buf, n, "cuda:%d (%s, sm_%d%d, %d SMs, %.1f GiB%s%s)", c->index, c->name, c->cc_major,
           c->cc_minor, c->sm_count, c->mem_total / 1073741824.0,
           c->tf32 ? ", fp32 GEMMs in TF32" : "", c->fuse ? "" : ", GEMM epilogues off");
}

/* ------------------------------------------------------------------ memory */

/* Live allocations and their sizes, for memory_stats (Megatron's "allocated" /
 * "max allocated", which torch.cuda reads from its caching allocator): an
 * open-addressing table keyed by pointer, on the host, for every handle of the
 * process (a lock: handles may live on different threads). */
static struct {
  pthread_mutex_t lock;
  void **ptr;
  size_t *bytes;
  size_t cap, used, tombstones, allocated, peak;
} g_live = {PTHREAD_MUTEX_INITIALIZER, NULL, NULL, 0, 0, 0, 0, 0};
#define TD_LIVE_TOMBSTONE ((void *)1)

static size_t live_slot(void *p, size_t cap) {
  uintptr_t h = (uintptr_t)p >> 8; /* cudaMalloc aligns to 256 bytes */
  h ^= h >> 17, h *= 0x9E3779B97F4A7C15ull, h ^= h >> 29;
  return (size_t)h & (cap - 1);
}

static void live_put(void *p, size_t bytes);

/* Double the table (or start it) and reinsert the live entries. */
static void live_grow(void) {
  void **old_p = g_live.ptr;
  size_t *old_b = g_live.bytes, old_cap = g_live.cap;
  g_live.cap = old_cap ? 2 * old_cap : 1024;
  g_live.ptr = (void **)td_calloc(g_live.cap * sizeof *g_live.ptr);
  g_live.bytes = (size_t *)td_calloc(g_live.cap * sizeof *g_live.bytes);
  g_live.used = g_live.tombstones = 0;
  for (size_t i = 0; i < old_cap; i++)
    if (old_p[i] && old_p[i] != TD_LIVE_TOMBSTONE) live_put(old_p[i], old_b[i]);
  td_free(old_p), td_free(old_b);
}

static void live_put(void *p, size_t bytes) {
  if (2 * (g_live.used + g_live.tombstones + 1) > g_live.cap) live_grow();
  size_t i = live_slot(p, g_live.cap);
  while (g_live.ptr[i] && g_live.ptr[i] != TD_LIVE_TOMBSTONE) i = (i + 1) & (g_live.cap - 1);
  if (g_live.ptr[i] == TD_LIVE_TOMBSTONE) g_live.tombstones--;
  g_live.ptr[i] = p, g_live.bytes[i] = bytes;
  g_live.used++;
}

static void live_add(void *p, size_t bytes) {
  pthread_mutex_lock(&g_live.lock);
  live_put(p, bytes);
  g_live.allocated += bytes;
  if (g_live.allocated > g_live.peak) g_live.peak = g_live.allocated;
  pthread_mutex_unlock(&g_live.lock);
}

/* 1 when p was a live allocation (now forgotten). */
static int live_remove(void *p) {
  pthread_mutex_lock(&g_live.lock);
  int found = 0;
  if (g_live.cap) {
    size_t i = live_slot(p, g_live.cap);
    while (g_live.ptr[i] && g_live.ptr[i] != p) i = (i + 1) & (g_live.cap - 1);
    if (g_live.ptr[i] == p) {
      g_live.allocated -= g_live.bytes[i];
      g_live.ptr[i] = TD_LIVE_TOMBSTONE, g_live.used--, g_live.tombstones++;
      found = 1;
    }
  }
  pthread_mutex_unlock(&g_live.lock);
  return found;
}

cudaError_t td_cuda_malloc_counted(td_cuda *c, void **p, size_t bytes) {
  cudaError_t e = td_cuda_malloc(c, p, bytes);
  if (e == cudaSuccess) live_add(*p, bytes);
  return e;
}

void td_cuda_free_counted(td_cuda *c, void *p) {
  live_remove(p);
  td_cuda_free(c, p);
}

static void cu_memory_stats(td_device *d, size_t *allocated, size_t *peak) {
  (void)d;
  pthread_mutex_lock(&g_live.lock);
  *allocated = g_live.allocated, *peak = g_live.peak;
  pthread_mutex_unlock(&g_live.lock);
}

static uint64_t cu_device_key(const td_device *d) { return ((const td_cuda *)d->impl)->uuid_key; }

static void cu_memory_info(td_device *d, size_t *free_bytes, size_t *total_bytes) {
  td_cuda_enter(d);
  TD_CUDA_OK(cudaMemGetInfo(free_bytes, total_bytes));
}

/* zero: alloc's contract; alloc_scratch's user writes the buffer whole first */
static void *alloc_block(td_device *d, size_t bytes, int zero) {
  td_cuda *c = td_cuda_enter(d);
  void *p = NULL;
  if (td_cuda_malloc(c, &p, bytes ? bytes : 1) != cudaSuccess) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    td_fail("cuda:%d: cannot allocate %.1f MiB of device memory (%.1f of %.1f MiB free)",
            c->index, bytes / 1048576.0, free_b / 1048576.0, total_b / 1048576.0);
  }
  if (zero && bytes) {
    TD_CUDA_OK(cudaMemsetAsync(p, 0, bytes, c->stream));
    if (!c->pools) td_cuda_wait_stream(c);
  }
  live_add(p, bytes);
  return p;
}

static void *cu_alloc(td_device *d, size_t bytes) { return alloc_block(d, bytes, 1); }

static void *cu_alloc_scratch(td_device *d, size_t bytes) { return alloc_block(d, bytes, 0); }

static void cu_free(td_device *d, void *p) {
  td_cuda *c = td_cuda_enter(d);
  if (!p) return;
  if (!live_remove(p))
    td_fail("cuda:%d: free(%p): not a live allocation of this backend", c->index, p);
  td_cuda_free(c, p);
}

/* Host buffers may be reused as soon as this returns (pinned or not). */
static void cu_copy_h2d(td_device *d, void *dst, const void *src, size_t bytes) {
  td_cuda *c = td_cuda_enter(d);
  d->stream_waits++;
  if (!bytes) return;
  TD_CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
  td_cuda_wait_stream(c);
}

static void cu_copy_d2h(td_device *d, void *dst, const void *src, size_t bytes) {
  td_cuda *c = td_cuda_enter(d);
  d->stream_waits++;
  if (bytes) TD_CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
  td_cuda_sync(c);
}

/* Overlapping ranges (memmove on the CPU) go through scratch. */
static void cu_copy_d2d(td_device *d, void *dst, const void *src, size_t bytes) {
  td_cuda *c = td_cuda_enter(d);
  if (!bytes || dst == src) return;
  uintptr_t a = (uintptr_t)dst, b = (uintptr_t)src;
  if (a < b + bytes && b < a + bytes) {
    void *tmp = td_cuda_scratch(c, bytes);
    TD_CUDA_OK(cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
    src = tmp;
  }
  TD_CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
}

static void cu_synchronize(td_device *d) {
  d->stream_waits++;
  td_cuda_sync(td_cuda_enter(d));
}

/* ------------------------------------------------------- events, pinned memory */

struct td_event {
  cudaEvent_t ev;
};

static td_event *cu_event_create(td_device *d) {
  td_cuda_enter(d);
  td_event *e = (td_event *)td_calloc(sizeof *e);
  TD_CUDA_OK(cudaEventCreateWithFlags(&e->ev, cudaEventDisableTiming));
  return e;
}
static void cu_event_destroy(td_device *d, td_event *e) {
  td_cuda_enter(d);
  if (!e) return;
  TD_CUDA_OK(cudaEventDestroy(e->ev));
  td_free(e);
}
static void cu_event_record(td_device *d, td_event *e) {
  td_cuda *c = td_cuda_enter(d);
  TD_CUDA_OK(cudaEventRecord(e->ev, c->stream));
}
static void cu_event_wait(td_device *d, td_event *e) {
  td_cuda *c = td_cuda_enter(d);
  TD_CUDA_OK(cudaStreamWaitEvent(c->stream, e->ev, 0));
}
/* Kernels flag bad input through err_host; a wait on the handle's own work reports it. */
static void cu_event_synchronize(td_device *d, td_event *e) {
  td_cuda_enter(d);
  td_watchdog_enter("a wait for a GPU event (cudaEventSynchronize: kernels, copies, NCCL)");
  cudaError_t r = wait_polling_nccl([e] { return cudaEventQuery(e->ev); },
                                    [e] { return cudaEventSynchronize(e->ev); });
  td_watchdog_leave();
  TD_CUDA_OK(r);
}

static int cu_event_query(td_device *d, td_event *e) {
  td_cuda_enter(d);
  cudaError_t r = cudaEventQuery(e->ev);
  if (r == cudaErrorNotReady) {
    (void)cudaGetLastError(); /* an answer, not an error */
    return 0;
  }
  TD_CUDA_OK(r);
  return 1;
}

static void *cu_host_alloc(td_device *d, size_t bytes) {
  td_cuda *c = td_cuda_enter(d);
  void *p = NULL;
  if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) {
    (void)cudaGetLastError();
    td_fail("cuda:%d: cannot allocate %.1f MiB of pinned host memory", c->index,
            bytes / 1048576.0);
  }
  memset(p, 0, bytes);
  return p;
}
static void cu_host_free(td_device *d, void *p) {
  td_cuda_enter(d);
  if (p) TD_CUDA_OK(cudaFreeHost(p));
}

static void cu_copy_h2d_async(td_device *d, void *dst, const void *src, size_t bytes) {
  td_cuda *c = td_cuda_enter(d);
  if (bytes) TD_CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
}
static void cu_copy_d2h_async(td_device *d, void *dst, const void *src, size_t bytes) {
  td_cuda *c = td_cuda_enter(d);
  if (bytes) TD_CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
}

/* dst[i] = pattern, n elements of 2, 4 or 8 bytes, VEC (16 bytes' worth, or 1) at a time */
template <int VEC, typename U>
__global__ void fill_kernel(U *dst, int64_t n, U pattern) {
  U v[VEC];
#pragma unroll
  for (int k = 0; k < VEC; k++) v[k] = pattern;
  td_grid_vec<VEC>(n, [&](int64_t i, auto w) { td_st_raw<decltype(w)::value>(dst + i, v); });
}

template <typename U>
static void fill_launch(td_cuda *c, void *dst, int64_t n, U pattern) {
  td_cuda_launch_vec<16 / sizeof(U)>(c, n, td_aligned16(dst), [&](auto vec, unsigned grid) {
    fill_kernel<decltype(vec)::value><<<grid, TD_CUDA_THREADS, 0, c->stream>>>((U *)dst, n, pattern);
  });
}

/* dst[i] = value converted to dt, as the CPU backend converts it (integers truncate). */
static void cu_fill(td_device *d, void *dst, td_dtype dt, int64_t n, float value) {
  td_cuda *c = td_cuda_enter(d);
  const uint64_t pattern = td_dtype_bits_of(dt, value);
  if (n <= 0) return;
  size_t es = td_dtype_size(dt);
  if (pattern == 0) {
    TD_CUDA_OK(cudaMemsetAsync(dst, 0, (size_t)n * es, c->stream));
    return;
  }
  if (es == 2)
    fill_launch(c, dst, n, (uint16_t)pattern);
  else if (es == 4)
    fill_launch(c, dst, n, (uint32_t)pattern);
  else
    fill_launch(c, dst, n, pattern);
}

void td_cuda_register_memory(td_device_ops *ops) {
  ops->alloc = cu_alloc;
  ops->alloc_scratch = cu_alloc_scratch;
  ops->free = cu_free;
  ops->copy_h2d = cu_copy_h2d;
  ops->copy_d2h = cu_copy_d2h;
  ops->copy_d2d = cu_copy_d2d;
  ops->fill = cu_fill;
  ops->synchronize = cu_synchronize;
  ops->memory_stats = cu_memory_stats;
  ops->memory_info = cu_memory_info;
  ops->device_key = cu_device_key;
  ops->event_create = cu_event_create;
  ops->event_destroy = cu_event_destroy;
  ops->event_record = cu_event_record;
  ops->event_wait = cu_event_wait;
  ops->event_synchronize = cu_event_synchronize;
  ops->event_query = cu_event_query;
  ops->host_alloc = cu_host_alloc;
  ops->host_free = cu_host_free;
  ops->copy_h2d_async = cu_copy_h2d_async;
  ops->copy_d2h_async = cu_copy_d2h_async;
}

/* ------------------------------------------------------------------ table */

extern "C" const td_device_ops *td_cuda_device_ops(void) {
  static td_device_ops ops;
  static int ready;
  if (!ready) { /* device.c's registry calls this from one thread at start-up */
    ops.name = "cuda";
    ops.caps = 0; /* device memory: the host reaches it through copies only */
    td_cuda_register_memory(&ops);
    td_cuda_register_gemm(&ops);
    td_cuda_register_elementwise(&ops);
    td_cuda_register_layernorm(&ops);
    td_cuda_register_embedding(&ops);
    td_cuda_register_loss(&ops);
    td_cuda_register_optim(&ops);
    td_cuda_register_attention(&ops);
    ready = 1;
  }
  return &ops;
}
