/* cuBLASLt, loaded at run time (cuda_cublaslt.cu): the backend calls it only
 * through td_lt, a table of the library's functions resolved with dlsym.
 *
 * Why not link it: libcublasLt.so runs thousands of static initialisers when it
 * is loaded, which costs every process that links it ~0.1 s and ~200 MB of RSS
 * at start-up, CPU runs, --help and every test included. Loaded here, only a
 * process that opens a GPU pays that. */
#ifndef TD_DEVICE_CUDA_CUDA_CUBLASLT_CUH
#define TD_DEVICE_CUDA_CUDA_CUBLASLT_CUH

#include <cublasLt.h>

/* Every cuBLASLt function the backend calls; one more is one more line here. */
#define TD_CUBLASLT_FUNCTIONS(X)            \
  X(cublasLtGetVersion)                     \
  X(cublasLtCreate)                         \
  X(cublasLtDestroy)                        \
  X(cublasLtMatmul)                         \
  X(cublasLtMatmulAlgoGetHeuristic)         \
  X(cublasLtMatmulDescCreate)               \
  X(cublasLtMatmulDescDestroy)              \
  X(cublasLtMatmulDescSetAttribute)         \
  X(cublasLtMatmulPreferenceCreate)         \
  X(cublasLtMatmulPreferenceDestroy)        \
  X(cublasLtMatmulPreferenceSetAttribute)   \
  X(cublasLtMatrixLayoutCreate)             \
  X(cublasLtMatrixLayoutDestroy)            \
  X(cublasLtMatrixLayoutSetAttribute)

/* Members named as the functions and typed from their declarations in
 * cublasLt.h, so a call through the table is checked like a direct call. */
typedef struct td_cublaslt_api {
#define TD_CUBLASLT_MEMBER(fn) decltype(&::fn) fn;
  TD_CUBLASLT_FUNCTIONS(TD_CUBLASLT_MEMBER)
#undef TD_CUBLASLT_MEMBER
} td_cublaslt_api;

/* Filled by td_cublaslt_load; all NULL before it. */
extern td_cublaslt_api td_lt;

/* Loads libcublasLt.so.<major of the headers> (else libcublasLt.so) once and
 * resolves td_lt; later calls return at once. A missing library, a missing
 * function or another major version is a td_fail naming the library and what to
 * install. Thread-safe. */
void td_cublaslt_load(void);

#endif
