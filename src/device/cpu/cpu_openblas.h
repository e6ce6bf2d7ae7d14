/* OpenBLAS, the CPU backend's second fp32 GEMM library, loaded with dlopen when
 * the process starts rather than linked, so that trident can pick its kernels
 * before it initialises.
 *
 * Why: Debian's OpenBLAS is built with DYNAMIC_ARCH and chooses its kernels from
 * cpuid when it loads (a library constructor), reading OPENBLAS_CORETYPE only
 * then. A CPU newer than the OpenBLAS build falls back to its slowest x86-64
 * kernels ("Prescott", SSE3): OpenBLAS 0.3.21 on an Emerald Rapids Xeon (family 6
 * model 207) ran the GPT-2 124M fp32 GEMMs at 45 GFLOP/s on 2 cores against 190
 * with its Cooperlake kernels, a training step 3x slower (bench/RESULTS.md,
 * issue #14). When OpenBLAS has taken the CPU for a pre-AVX one while the CPU has
 * AVX2 or AVX-512, trident unloads it and loads it again with OPENBLAS_CORETYPE
 * set to the newest kernel family the CPU runs. A user's OPENBLAS_CORETYPE is
 * left alone, and a CPU OpenBLAS knows keeps OpenBLAS's own choice. */
#ifndef TD_DEVICE_CPU_OPENBLAS_H
#define TD_DEVICE_CPU_OPENBLAS_H

#include <cblas.h>

typedef struct {
  __typeof__(cblas_sgemm) *sgemm;
  const char *config; /* openblas_get_config(): version, build options, kernels */
  const char *core;   /* the kernel family that runs (openblas_get_corename()) */
  char note[256];     /* why those kernels, when trident chose them; else "" */
} td_openblas;

/* The loaded library (loaded when the process starts, by a constructor); fails
 * with a clear message when libopenblas cannot be opened. */
const td_openblas *td_openblas_get(void);

/* The OPENBLAS_CORETYPE trident sets when OpenBLAS chose `detected` on a CPU with
 * the given instruction sets: the newest family the CPU runs when `detected` is a
 * pre-AVX family (OpenBLAS's fallback for a CPU it does not know) and the CPU has
 * AVX or better; NULL to keep OpenBLAS's choice. */
const char *td_openblas_core_for(const char *detected, int has_avx, int has_avx2, int has_avx512,
                                 int has_avx512_bf16);
/* The same for the instruction sets of the CPU that runs (cpuid, whatever
 * TRIDENT_CPU_ISA selects for trident's own kernels). */
const char *td_openblas_core_here(const char *detected);

#endif
