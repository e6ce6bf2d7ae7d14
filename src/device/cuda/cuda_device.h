/* The CUDA backend as device.c sees it (C linkage; built only with TD_HAVE_CUDA).
 *
 * One handle = one GPU, one cudaStream_t that every op of the handle runs on, a
 * cuBLASLt handle and a fixed GEMM workspace (cuda_internal.cuh). Ops are
 * asynchronous on that stream except copy_d2h and copy_h2d (both return with the
 * copy done, so the host buffer may be reused or read at once), synchronize and
 * event_synchronize. */
#ifndef TD_DEVICE_CUDA_CUDA_DEVICE_H
#define TD_DEVICE_CUDA_CUDA_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "device/device.h"

#ifdef __cplusplus
extern "C" {
#endif

const td_device_ops *td_cuda_device_ops(void);
/* Backend state for GPU *index mod the number of visible GPUs (written back to
 * *index). No GPU or no
 * driver: td_fail("no CUDA device visible: <cudaGetErrorString>"); the first
 * open loads cuBLASLt (cuda_cublaslt.cuh), and fails naming it when it cannot. */
void *td_cuda_open(int *index);
void td_cuda_close(void *impl);
/* 1 when at least one GPU is visible and the driver works; never fails. Asks
 * the driver only: cuBLASLt is not loaded until td_cuda_open. */
int td_cuda_available(void);
/* "cuDNN 9.14.0" when cuDNN's fused attention is available (it loads cuDNN),
 * else why not (cuda_cudnn_attention.cu) */
const char *td_cudnn_describe(void);
/* Attention ops (forward or backward) cuDNN has run in this process: the tests'
 * proof of which implementation took a call. */
int64_t td_cudnn_attention_calls(void);
/* td_device_describe_kernels for CUDA: which attention runs (cuDNN's or trident's) */
void td_cuda_describe_kernels(char *buf, size_t n);
/* "cuda:0 (NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB)" */
void td_cuda_describe(const void *impl, char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
