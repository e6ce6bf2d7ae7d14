/* The CPU backend: host memory, OpenMP threads, kernels from the groups in
 * cpu_kernels.h. */
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "device/cpu/cpu_kernels.h"
#include "device/device.h"

static void *cpu_alloc(td_device *d, size_t bytes) {
  (void)d;
  return td_calloc(bytes);
}
static void cpu_free(td_device *d, void *p) {
  (void)d;
  td_free(p);
}
static void cpu_copy(td_device *d, void *dst, const void *src, size_t bytes) {
  (void)d;
  if (bytes) memmove(dst, src, bytes);
}
static void cpu_synchronize(td_device *d) { (void)d; }

const td_device_ops *td_cpu_device_ops(void) {
  static td_device_ops ops;
  static int ready;
  if (!ready) {
#pragma omp critical(td_cpu_ops_init)
    if (!ready) {
      ops.name = "cpu";
      ops.alloc = cpu_alloc;
      ops.free = cpu_free;
      ops.copy_h2d = cpu_copy;
      ops.copy_d2h = cpu_copy;
      ops.copy_d2d = cpu_copy;
      ops.synchronize = cpu_synchronize;
      td_cpu_register_gemm(&ops);
      td_cpu_register_elementwise(&ops);
      td_cpu_register_attention(&ops);
      ready = 1;
    }
  }
  return &ops;
}
