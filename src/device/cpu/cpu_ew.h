/* Inner kernels of the CPU elementwise group, one table per ISA.
 *
 * Each entry is single-threaded and works on one row or one contiguous range;
 * cpu_elementwise.c splits the work over OpenMP threads with a blocking that
 * does not depend on the number of threads, then picks the table by
 * td_cpu_isa_get(). The three tables compute the same math (they may differ in
 * the last bits: the AVX2 and AVX-512 ones use FMA and their own exp / erfc). */
#ifndef TD_DEVICE_CPU_EW_H
#define TD_DEVICE_CPU_EW_H

#include <stdint.h>

#include "device/device.h"

/* AdamW constants of one step: bias corrections are 1 / (1 - beta^t). */
typedef struct td_ew_adamw {
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
  float inv_bc1, inv_bc2;
} td_ew_adamw;

typedef struct td_ew_isa {
  /* One row of cols: y = (x - mean) rstd w + b into out (out_dtype); returns
   * the row's mean and rstd through the pointers. */
  void (*layernorm_row)(void *out, td_dtype out_dtype, float *mean, float *rstd, const float *x,
                        const float *w, const float *b, int64_t cols, float eps);
  /* One row: dx += rstd (dout w - mean(dout w) - xhat mean(dout w xhat)),
   * dw_acc += dout xhat, db_acc += dout, with xhat = (x - mean) rstd. */
  void (*layernorm_backward_row)(float *dx, float *dw_acc, float *db_acc, const float *dout,
                                 const float *x, const float *w, float mean, float rstd,
                                 int64_t cols);
  /* out[i] = gelu(x[i]) (out_dtype), i < n */
  void (*gelu_forward)(void *out, td_dtype out_dtype, const float *x, int64_t n,
                       td_gelu_kind kind);
  /* dx[i] = dout[i] gelu'(x[i]); dx may alias dout */
  void (*gelu_backward)(float *dx, const float *dout, const float *x, int64_t n,
                        td_gelu_kind kind);
  /* Optional (NULL: x widened to fp32 first, then the passes one after another):
   * the two above in one pass over x in fp32 or bf16, with those passes' bits
   * (cpu_elementwise.c calls them where they save a pass).
   * gelu_forward_x: out[i] = gelu(x[i]) in out_dtype. gelu_backward_x: g =
   * dout[i] gelu'(x[i]), dx[i] = g rounded to dx_dtype as cast rounds it (an fp32
   * dx may alias dout), and acc[i] += g where acc is not NULL (the bias gradient's
   * row sum). */
  void (*gelu_forward_x)(void *out, td_dtype out_dtype, const void *x, td_dtype x_dtype,
                         int64_t n, td_gelu_kind kind);
  void (*gelu_backward_x)(void *dx, td_dtype dx_dtype, float *acc, const float *dout,
                          const void *x, td_dtype x_dtype, int64_t n, td_gelu_kind kind);
  void (*add)(float *out, const float *a, const float *b, int64_t n); /* out = a + b */
  void (*scale)(float *x, int64_t n, float alpha);                    /* x *= alpha */
  /* out = (resid +) dropout(x) over elements [i0, i1) (resid may be NULL; out
   * may alias x or resid); element i draws counter first + i. */
  void (*dropout)(float *out, const float *resid, const float *x, int64_t i0, int64_t i1, float p,
                  uint64_t seed, uint64_t stream, uint64_t first);
  /* logsumexp of one row of vocab logits (logits_dtype: TD_F32 or TD_BF16) */
  float (*logsumexp_row)(const void *logits, td_dtype logits_dtype, int64_t vocab);
  /* dlogits[j] = exp(logits[j] - lse) dloss, minus dloss at j == target (after the
   * product, in fp32), j < vocab, stored as dtype (bf16: rounded as cast rounds);
   * dlogits may alias logits of the same dtype */
  void (*softmax_grad_row)(void *dlogits, td_dtype dtype, const void *logits,
                           td_dtype logits_dtype, float lse, float dloss, int64_t target,
                           int64_t vocab);
  /* copy_bf16 (NULL: none) gets the new param rounded to bf16 as cast would */
  void (*adamw)(float *param, const float *grad, float *m, float *v, int64_t n,
                const td_ew_adamw *c, uint16_t *copy_bf16);
  /* dst = (dst_dtype) src, n elements, dtypes in {F32, BF16, F16}, dtypes differ */
  void (*cast)(void *dst, td_dtype dst_dtype, const void *src, td_dtype src_dtype, int64_t n);
  /* dst[0, bytes) = 0; stream: with non-temporal stores where the ISA has them (a
   * buffer too large to stay in cache; fenced before returning) */
  void (*zero)(void *dst, size_t bytes, int stream);
  /* sum of x[i]^2 in double, in an order fixed by n alone */
  double (*sum_squares)(const float *x, int64_t n);
  /* optional (NULL: sum_squares per piece): out[p] = sum_squares(x + p piece,
   * piece) for p < 4, bit for bit, the four pieces read side by side (more loads
   * in flight than one stream from memory keeps) */
  void (*sum_squares4)(const float *x, int64_t piece, double out[4]);
} td_ew_isa;

extern const td_ew_isa td_cpu_ew_generic; /* cpu_ew_generic.c: portable C, libm */
extern const td_ew_isa td_cpu_ew_avx512;  /* cpu_ew_avx512.c: AVX-512 F/BW/VL/DQ + FMA */
extern const td_ew_isa td_cpu_ew_avx2;    /* cpu_ew_avx2.c: AVX2 + FMA + F16C, 8 lanes */

/* The table of the ISA td_cpu_isa_get() chose (cpu_elementwise.c). */
const td_ew_isa *td_cpu_ew_isa(void);

#endif
