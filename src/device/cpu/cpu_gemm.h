/* The CPU backend's GEMM libraries, for the benchmark and for tests that compare
 * them; everything else goes through ops->matmul / td_cpu_gemm. */
#ifndef TD_DEVICE_CPU_GEMM_H
#define TD_DEVICE_CPU_GEMM_H

#include <stddef.h>

#include "device/device.h"

/* TD_GEMM_AMX and TD_GEMM_DPBF16 are trident's own bf16 GEMM on AMX tiles and on
 * AVX512-BF16 dot products (cpu_gemm_bf16.h). */
typedef enum {
  TD_GEMM_ONEDNN = 0,
  TD_GEMM_OPENBLAS = 1,
  TD_GEMM_AMX = 2,
  TD_GEMM_DPBF16 = 3,
  TD_GEMM_LIBRARIES = 4
} td_gemm_library;

/* The default library for inputs of this dtype: the one TRIDENT_GEMM_FP32 /
 * TRIDENT_GEMM_BF16 force, else fp32 OpenBLAS and bf16 AMX where it can run, else
 * oneDNN. It runs the calls that are not measured (cpu_gemm_select.c: small
 * products, calls from inside parallel regions). */
td_gemm_library td_cpu_gemm_library(td_dtype ab_dtype);
/* The library ops->matmul runs this call on: forced by the environment, else the
 * fastest measured on this machine for the call's shape class (at the class's first
 * call each library runs the call's product, reading its A and B, writing a scratch
 * C; then kept, and cached in a file per machine: TRIDENT_GEMM_CACHE=PATH|off), else
 * the default. Safe to call from any thread; measures only outside parallel regions. */
td_gemm_library td_cpu_gemm_choose(const td_matmul_desc *desc);
/* One line for a start-up summary: per dtype the library or how many shape classes
 * each library won, and where the choices are cached. "fp32 measured per shape
 * (oneDNN 12, OpenBLAS 3; small products OpenBLAS), bf16 oneDNN (the only library
 * here); choices cached in /home/u/.cache/trident/gemm-0123456789abcdef.json". */
void td_cpu_gemm_describe(char *buf, size_t n);
/* Forget every choice and re-read the environment (tests). */
void td_cpu_gemm_select_reset(void);
const char *td_gemm_library_name(td_gemm_library lib);
/* 1 when oneDNN has bf16 matmul kernels for this CPU (AVX-512 and newer); where it
 * has none, its bf16 calls run as fp32 GEMMs on inputs widened to fp32. */
int td_cpu_gemm_onednn_bf16(void);
/* 1 when lib can run inputs of this dtype here (OpenBLAS: fp32 only; AMX: bf16
 * only, on a CPU with AMX-BF16; AVX512-BF16: bf16 only, on a CPU with it). */
int td_cpu_gemm_library_serves(td_gemm_library lib, td_dtype ab_dtype);
/* Run a matmul through a given library (same semantics as ops->matmul). A library
 * that cannot serve the dtype (td_cpu_gemm_library_serves), and trident's bf16 GEMM
 * inside a parallel region, leave the call to oneDNN. */
void td_cpu_gemm_with(const td_matmul_desc *desc, td_gemm_library lib);

#endif
