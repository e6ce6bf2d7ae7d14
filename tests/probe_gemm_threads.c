/* Does a GEMM library give the same bits on two thread counts on this CPU?
 * (a helper of cli_train_threads.sh, not a test itself)
 *
 * Usage: probe_gemm_threads LIBRARY fp32|bf16 T1 T2
 * Runs the products of that test's model (512 tokens, hidden 128, MLP 512,
 * padded vocabulary 1024: QKV, projection, fc1, fc2, output layer; forward NT
 * with a bias, input gradients NN, weight gradients TN accumulating) and
 * GPT-2 124M's MLP through td_cpu_gemm_with
 * on T1 and on T2 OpenMP threads, and compares C byte for byte.
 * Exit 0: every product the same; 1: some differ (named on stdout); 77: the
 * library cannot run this dtype here; 2: bad arguments.
 *
 * The libraries split a product among their threads as they see fit, and on
 * some CPUs that changes the rounding (OpenBLAS's Haswell / Zen kernels and
 * oneDNN's AVX2 ones on an AMD Zen 3, measured); trident's own kernels never
 * let the thread count reach the arithmetic. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "device/cpu/cpu_gemm.h"

typedef struct {
  int64_t m, n, k;
  int trans_a, trans_b, bias, accumulate;
} shape;

static const shape k_shapes[] = {
    {512, 384, 128, 0, 1, 1, 0}, {512, 128, 384, 0, 0, 0, 0}, {384, 128, 512, 1, 0, 0, 1},
    {512, 128, 128, 0, 1, 1, 0}, {512, 128, 128, 0, 0, 0, 0}, {128, 128, 512, 1, 0, 0, 1},
    {512, 512, 128, 0, 1, 1, 0}, {512, 128, 512, 0, 0, 0, 0}, {512, 128, 512, 1, 0, 0, 1},
    {512, 128, 512, 0, 1, 1, 0}, {512, 512, 128, 0, 0, 0, 0}, {128, 512, 512, 1, 0, 0, 1},
    {512, 1024, 128, 0, 1, 0, 0}, {512, 128, 1024, 0, 0, 0, 0}, {1024, 128, 512, 1, 0, 0, 1},
    {1024, 3072, 768, 0, 1, 1, 0}, {1024, 768, 3072, 0, 0, 0, 0}, {3072, 768, 1024, 1, 0, 0, 1},
};

/* C of one product on `threads` threads (fresh copies of the same inputs) */
static void *run(const shape *s, td_gemm_library lib, td_dtype dt, int threads, const void *a,
                 const void *b, const float *bias, const float *c0) {
  float *c = malloc((size_t)(s->m * s->n) * 4);
  memcpy(c, c0, (size_t)(s->m * s->n) * 4);
  td_matmul_desc g = {.m = s->m,
                      .n = s->n,
                      .k = s->k,
                      .batch = 1,
                      .ab_dtype = dt,
                      .c_dtype = TD_F32,
                      .a = a,
                      .lda = s->trans_a ? s->m : s->k,
                      .trans_a = s->trans_a,
                      .b = b,
                      .ldb = s->trans_b ? s->k : s->n,
                      .trans_b = s->trans_b,
                      .c = c,
                      .ldc = s->n,
                      .alpha = 1.0f,
                      .beta = s->accumulate ? 1.0f : 0.0f,
                      .bias = s->bias ? bias : NULL};
  omp_set_num_threads(threads);
  td_cpu_gemm_with(&g, lib);
  return c;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: probe_gemm_threads LIBRARY fp32|bf16 T1 T2\n");
    return 2;
  }
  td_gemm_library lib = TD_GEMM_LIBRARIES;
  for (int l = 0; l < TD_GEMM_LIBRARIES; l++)
    if (!strcmp(argv[1], td_gemm_library_name((td_gemm_library)l))) lib = (td_gemm_library)l;
  const td_dtype dt = !strcmp(argv[2], "bf16") ? TD_BF16 : TD_F32;
  const int t1 = atoi(argv[3]), t2 = atoi(argv[4]);
  if (lib == TD_GEMM_LIBRARIES || t1 < 1 || t2 < 1 || (dt == TD_F32 && strcmp(argv[2], "fp32"))) {
    fprintf(stderr, "probe_gemm_threads: bad arguments (library onednn|openblas|amx|avx512bf16)\n");
    return 2;
  }
  if (!td_cpu_gemm_library_serves(lib, dt)) {
    printf("%s does not run %s products here\n", argv[1], argv[2]);
    return 77;
  }
  const size_t big = (size_t)3072 * 1024;
  float *x = malloc(big * 4), *bias = malloc(3072 * 4), *c0 = malloc(big * 4);
  uint16_t *xb = malloc(big * 2), *yb = malloc(big * 2);
  float *y = malloc(big * 4);
  uint64_t r = 88172645463325252ull; /* xorshift: inputs in [-1, 1) */
  for (size_t i = 0; i < big; i++) {
    float v[3];
    for (int j = 0; j < 3; j++) {
      r ^= r << 13, r ^= r >> 7, r ^= r << 17;
      v[j] = (float)((r >> 40) * (1.0 / 8388608.0)) - 1.0f;
    }
    x[i] = v[0], y[i] = v[1], c0[i] = v[2];
    xb[i] = td_f32_to_bf16(v[0]), yb[i] = td_f32_to_bf16(v[1]);
  }
  for (int j = 0; j < 3072; j++) bias[j] = c0[j];
  const void *a = dt == TD_BF16 ? (const void *)xb : x, *b = dt == TD_BF16 ? (const void *)yb : y;
  int differ = 0;
  for (size_t i = 0; i < sizeof k_shapes / sizeof *k_shapes; i++) {
    const shape *s = &k_shapes[i];
    float *c1 = run(s, lib, dt, t1, a, b, bias, c0), *c2 = run(s, lib, dt, t2, a, b, bias, c0);
    int64_t n = 0;
    for (int64_t e = 0; e < s->m * s->n; e++) n += memcmp(&c1[e], &c2[e], 4) != 0;
    if (n) {
      printf("%s %s m=%lld n=%lld k=%lld %c%c: %lld of %lld elements differ on %d and %d threads\n",
             argv[1], argv[2], (long long)s->m, (long long)s->n, (long long)s->k,
             s->trans_a ? 'T' : 'N', s->trans_b ? 'T' : 'N', (long long)n,
             (long long)(s->m * s->n), t1, t2);
      differ = 1;
    }
    free(c1), free(c2);
  }
  if (!differ)
    printf("%s %s: every product the same bits on %d and %d threads\n", argv[1], argv[2], t1, t2);
  free(x), free(y), free(bias), free(c0), free(xb), free(yb);
  return differ;
}
