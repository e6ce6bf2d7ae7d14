/* The CPU backend: host memory, OpenMP threads, kernels from the groups in
 * cpu_kernels.h. */
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "device/cpu/cpu_kernels.h"
#include "device/device.h"

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

/* A closed CPU device hands the blocks kept for reuse back (cpu_memory.c). */
void td_cpu_close(void *impl) {
  (void)impl;
  td_cpu_release_cached_memory();
}

const td_device_ops *td_cpu_device_ops(void) {
  static td_device_ops ops;
  static int ready;
  if (!ready) {
#pragma omp critical(td_cpu_ops_init)
    if (!ready) {
      ops.name = "cpu";
      ops.caps = TD_DEVICE_HOST_MEMORY | TD_DEVICE_HOST_RAM;
      td_cpu_register_memory(&ops);
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
      td_cpu_register_gemm(&ops);
      td_cpu_register_elementwise(&ops);
      td_cpu_register_attention(&ops);
      ready = 1;
    }
  }
  return &ops;
}
