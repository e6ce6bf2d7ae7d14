/* GEMM for the CPU backend through a vendor library. */
#include <cblas.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "device/cpu/cpu_kernels.h"

static void gemm_openblas_f32(const td_matmul_desc *g) {
  for (int64_t b = 0; b < g->batch; b++) {
    const float *a = (const float *)g->a + b * g->stride_a;
    const float *bb = (const float *)g->b + b * g->stride_b;
    float *c = (float *)g->c + b * g->stride_c;
    float beta = g->beta;
    if (g->bias) {
      for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++) c[i * g->ldc + j] = beta * c[i * g->ldc + j] * (beta != 0) + g->bias[j];
      beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans,
                g->trans_b ? CblasTrans : CblasNoTrans, (int)g->m, (int)g->n, (int)g->k, g->alpha,
                a, (int)g->lda, bb, (int)g->ldb, beta, c, (int)g->ldc);
  }
}

void td_cpu_gemm(const td_matmul_desc *g, int threads) {
  (void)threads;
  TD_CHECK(g->ab_dtype == TD_F32 && g->c_dtype == TD_F32, "dtype");
  gemm_openblas_f32(g);
}

static void cpu_matmul(td_device *d, const td_matmul_desc *g) {
  (void)d;
  td_cpu_gemm(g, 0);
}

void td_cpu_register_gemm(td_device_ops *ops) { ops->matmul = cpu_matmul; }
