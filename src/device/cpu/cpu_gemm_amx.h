/* Internal to the CPU backend: trident's own bf16 GEMM on AMX tiles
 * (cpu_gemm_amx_avx512.c), used by cpu_gemm.c in place of oneDNN where it is
 * faster (bench/RESULTS.md). */
#ifndef TD_DEVICE_CPU_GEMM_AMX_H
#define TD_DEVICE_CPU_GEMM_AMX_H

#include "device/device.h"

/* 1 when the AMX GEMM can run: the AVX-512 ISA is selected (cpu_isa.h), the CPU has
 * AMX-BF16 and AVX512-BF16, and Linux grants the tile data state. */
int td_cpu_gemm_amx_usable(void);

/* Deepest k of one pass: deeper products run in passes accumulated through C,
 * which must then be fp32. */
#define TD_GEMM_AMX_KMAX 4096

/* ops->matmul's semantics (device.h) for bf16 inputs, fp32 or bf16 output (bf16
 * only for k <= TD_GEMM_AMX_KMAX), any transposes, alpha, beta, bias and batch. Runs on the
 * caller's OpenMP threads: call it outside parallel regions, from one thread at a time (it keeps
 * shared packing buffers). Results do not depend on the number of threads: every output element is
 * one K-ordered chain of tile products. */
void td_cpu_gemm_amx(const td_matmul_desc *g);

#endif
