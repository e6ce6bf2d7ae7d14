/* Internal to the CPU backend: each kernel group fills its entries of the ops
 * table, and does its own ISA dispatch (cpu_isa.h). */
#ifndef TD_DEVICE_CPU_KERNELS_H
#define TD_DEVICE_CPU_KERNELS_H

#include "device/device.h"

void td_cpu_register_memory(td_device_ops *ops);      /* alloc, alloc_scratch, free,
                                                         memory_stats */
/* The bytes of the blocks cpu_memory.c keeps for reuse, and freeing them. */
size_t td_cpu_cached_memory(void);
void td_cpu_release_cached_memory(void);
/* A kernel's workspace, one per thread (declare it static __thread): a buffer that
 * only grows, kept between calls as oneDNN keeps its scratchpad (the GEMM's
 * scratchpad and widened bf16 operands, the attention's per-head tiles). Its
 * bytes are not device memory: memory_stats does not count them. */
typedef struct {
  void *p;
  size_t bytes;
} td_cpu_workspace;
/* w's buffer, at least bytes long (64-byte aligned, contents undefined) */
void *td_cpu_workspace_get(td_cpu_workspace *w, size_t bytes);

void td_cpu_register_gemm(td_device_ops *ops);        /* matmul */
void td_cpu_register_elementwise(td_device_ops *ops); /* fill, bias_backward, norm, gelu, add,
                                                         dropout, embedding, loss, adamw, cast,
                                                         scale, sum_squares */
void td_cpu_register_attention(td_device_ops *ops);   /* attention_forward/backward */

/* GEMM usable from inside an OpenMP parallel region (attention blocks):
 * threads = 1 runs on the calling thread only. Same semantics as ops->matmul. */
void td_cpu_gemm(const td_matmul_desc *desc, int threads);

#endif
