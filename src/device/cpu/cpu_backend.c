/* The CPU backend: host memory, OpenMP threads, kernels from the groups in
 * cpu_kernels.h. */
#include <omp.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "device/cpu/cpu_kernels.h"
#include "device/device.h"

/* Every allocation carries its size in a 64-byte header (the alignment kept),
 * so memory_stats can count what is allocated and its peak. */
enum { HEADER = 64 };
static size_t g_allocated, g_peak; /* atomics (__atomic builtins) */

/* A large buffer is zeroed by the threads that will use it. A page lands on the
 * NUMA node of the thread that first writes it, and the flat kernels give thread
 * t the t-th contiguous block of their 16384-element pieces (schedule(static));
 * zeroing fp32 pieces of the same size the same way puts each thread's share of
 * the parameters, gradients and Adam state on its own node, as PyTorch's
 * first-touch advice has it. Small buffers are zeroed by the caller's thread. */
enum { FIRST_TOUCH_PIECE = 16384 * sizeof(float), FIRST_TOUCH_MIN = 1 << 20 };
static void zero_first_touch(char *p, size_t bytes) {
  if (bytes < FIRST_TOUCH_MIN || omp_get_max_threads() == 1) {
    memset(p, 0, bytes);
    return;
  }
  const int64_t pieces = (int64_t)((bytes + FIRST_TOUCH_PIECE - 1) / FIRST_TOUCH_PIECE);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < pieces; i++) {
    size_t at = (size_t)i * FIRST_TOUCH_PIECE;
    memset(p + at, 0, bytes - at < FIRST_TOUCH_PIECE ? bytes - at : FIRST_TOUCH_PIECE);
  }
}

static void *cpu_alloc(td_device *d, size_t bytes) {
  (void)d;
  char *p = td_malloc(bytes + HEADER);
  zero_first_touch(p + HEADER, bytes);
  memcpy(p, &bytes, sizeof bytes);
  size_t now = __atomic_add_fetch(&g_allocated, bytes, __ATOMIC_RELAXED);
  size_t peak = __atomic_load_n(&g_peak, __ATOMIC_RELAXED);
  while (now > peak &&
         !__atomic_compare_exchange_n(&g_peak, &peak, now, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return p + HEADER;
}
static void cpu_free(td_device *d, void *p) {
  (void)d;
  if (!p) return;
  char *base = (char *)p - HEADER;
  size_t bytes;
  memcpy(&bytes, base, sizeof bytes);
  __atomic_sub_fetch(&g_allocated, bytes, __ATOMIC_RELAXED);
  td_free(base);
}
static void cpu_memory_stats(td_device *d, size_t *allocated, size_t *peak) {
  (void)d;
  *allocated = __atomic_load_n(&g_allocated, __ATOMIC_RELAXED);
  *peak = __atomic_load_n(&g_peak, __ATOMIC_RELAXED);
}
static void cpu_copy(td_device *d, void *dst, const void *src, size_t bytes) {
  (void)d;
  if (bytes) memmove(dst, src, bytes);
}
/* The blocking forms: nothing to wait for, but counted (td_device.stream_waits). */
static void cpu_copy_wait(td_device *d, void *dst, const void *src, size_t bytes) {
  d->stream_waits++;
  if (bytes) memmove(dst, src, bytes);
}
static void cpu_synchronize(td_device *d) { d->stream_waits++; }

/* Every op is done when it returns: an event has nothing to mark, but each is
 * its own allocation so create/destroy pair up under the sanitizers. */
struct td_event {
  int unused;
};
static td_event *cpu_event_create(td_device *d) {
  (void)d;
  return td_calloc(sizeof(td_event));
}
static void cpu_event_destroy(td_device *d, td_event *e) {
  (void)d;
  td_free(e);
}
static void cpu_event_noop(td_device *d, td_event *e) { (void)d, (void)e; }
static int cpu_event_done(td_device *d, td_event *e) { return (void)d, (void)e, 1; }

/* Host memory is all the CPU has: "pinned" memory is plain memory. */
static void *cpu_host_alloc(td_device *d, size_t bytes) {
  (void)d;
  return td_calloc(bytes ? bytes : 1);
}
static void cpu_host_free(td_device *d, void *p) {
  (void)d;
  td_free(p);
}

const td_device_ops *td_cpu_device_ops(void) {
  static td_device_ops ops;
  static int ready;
  if (!ready) {
#pragma omp critical(td_cpu_ops_init)
    if (!ready) {
      ops.name = "cpu";
      ops.caps = TD_DEVICE_HOST_MEMORY | TD_DEVICE_HOST_RAM;
      ops.alloc = cpu_alloc;
      ops.free = cpu_free;
      ops.copy_h2d = cpu_copy_wait;
      ops.copy_d2h = cpu_copy_wait;
      ops.copy_d2d = cpu_copy;
      ops.synchronize = cpu_synchronize;
      ops.event_create = cpu_event_create;
      ops.event_destroy = cpu_event_destroy;
      ops.event_record = cpu_event_noop;
      ops.event_wait = cpu_event_noop;
      ops.event_synchronize = cpu_event_noop;
      ops.event_query = cpu_event_done;
      ops.host_alloc = cpu_host_alloc;
      ops.host_free = cpu_host_free;
      ops.copy_h2d_async = cpu_copy;
      ops.copy_d2h_async = cpu_copy;
      ops.memory_stats = cpu_memory_stats;
      td_cpu_register_gemm(&ops);
      td_cpu_register_elementwise(&ops);
      td_cpu_register_attention(&ops);
      ready = 1;
    }
  }
  return &ops;
}
