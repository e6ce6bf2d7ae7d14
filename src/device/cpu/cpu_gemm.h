/* The CPU backend's GEMM libraries, for the benchmark and for tests that compare
 * them; everything else goes through ops->matmul / td_cpu_gemm. */
#ifndef TD_DEVICE_CPU_GEMM_H
#define TD_DEVICE_CPU_GEMM_H

#include "device/device.h"

typedef enum { TD_GEMM_ONEDNN = 0, TD_GEMM_OPENBLAS = 1 } td_gemm_library;

/* The library used for inputs of this dtype: bf16 always oneDNN; fp32 OpenBLAS unless
 * TRIDENT_GEMM_FP32=onednn. */
td_gemm_library td_cpu_gemm_library(td_dtype ab_dtype);
const char *td_gemm_library_name(td_gemm_library lib);
/* Run a matmul through a given library (same semantics as ops->matmul; bf16 inputs
 * always go to oneDNN). */
void td_cpu_gemm_with(const td_matmul_desc *desc, td_gemm_library lib);

#endif
