/* The CPU backend's GEMM libraries, for the benchmark and for tests that compare
 * them; everything else goes through ops->matmul / td_cpu_gemm. */
#ifndef TD_DEVICE_CPU_GEMM_H
#define TD_DEVICE_CPU_GEMM_H

#include "device/device.h"

/* TD_GEMM_AMX is trident's own bf16 GEMM on AMX tiles (cpu_gemm_amx.h). */
typedef enum {
  TD_GEMM_ONEDNN = 0,
  TD_GEMM_OPENBLAS = 1,
  TD_GEMM_AMX = 2,
  TD_GEMM_LIBRARIES = 3
} td_gemm_library;

/* The library used for inputs of this dtype: fp32 OpenBLAS unless
 * TRIDENT_GEMM_FP32=onednn; bf16 AMX where it can run, else oneDNN, unless
 * TRIDENT_GEMM_BF16=onednn. */
td_gemm_library td_cpu_gemm_library(td_dtype ab_dtype);
const char *td_gemm_library_name(td_gemm_library lib);
/* 1 when lib can run inputs of this dtype here (OpenBLAS: fp32 only; AMX: bf16
 * only, on a CPU with AMX-BF16). */
int td_cpu_gemm_library_serves(td_gemm_library lib, td_dtype ab_dtype);
/* Run a matmul through a given library (same semantics as ops->matmul). A library
 * that cannot serve the dtype (td_cpu_gemm_library_serves), and AMX inside a
 * parallel region, leave the call to oneDNN. */
void td_cpu_gemm_with(const td_matmul_desc *desc, td_gemm_library lib);

#endif
