/* Internal to the CPU backend: trident's own bf16 GEMMs (cpu_gemm_bf16_avx512.c),
 * used by cpu_gemm.c in place of oneDNN for the shapes where they measure faster
 * (cpu_gemm_select.c, bench/RESULTS.md). One Goto-style driver (operands packed in
 * the pair layout both instruction sets read) with two inner kernels:
 *   AMX          tile products (TDPBF16PS), on CPUs with AMX-BF16;
 *   AVX512-BF16  dot products in zmm registers (VDPBF16PS), on CPUs with
 *                AVX512-BF16 (Zen 4 and later, Cooper Lake and later). */
#ifndef TD_DEVICE_CPU_GEMM_BF16_H
#define TD_DEVICE_CPU_GEMM_BF16_H

#include "device/device.h"

/* 1 when the AMX GEMM can run: the AVX-512 ISA is selected (cpu_isa.h), the CPU has
 * AMX-BF16 and AVX512-BF16, and Linux grants the tile data state. */
int td_cpu_gemm_amx_usable(void);
/* 1 when the AVX512-BF16 GEMM can run: the AVX-512 ISA is selected and the CPU has
 * AVX512-BF16. */
int td_cpu_gemm_dpbf16_usable(void);

/* Deepest k of one pass: deeper products run in passes accumulated through C,
 * which must then be fp32. */
#define TD_GEMM_BF16_KMAX 4096

/* ops->matmul's semantics (device.h) for bf16 inputs, fp32 or bf16 output (bf16
 * only for k <= TD_GEMM_BF16_KMAX), any transposes, alpha, beta, bias and batch. Run
 * on the caller's OpenMP threads: call them outside parallel regions, from one thread
 * at a time (they keep shared packing buffers). Results do not depend on the number
 * of threads: every output element is one k-ordered chain of products. The two
 * kernels' results differ by rounding only (each adds pairs of exact bf16 products
 * in fp32, AMX in 32-deep tile steps). */
void td_cpu_gemm_amx(const td_matmul_desc *g);
void td_cpu_gemm_dpbf16(const td_matmul_desc *g);

#endif
