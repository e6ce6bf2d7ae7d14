/* trident bench kernels: GFLOP/s (matmul, attention) or GB/s (memory-bound
 * kernels) of every device kernel at GPT-2 124M training shapes
 * (tokens 4096 = micro-batch 4 x seq 1024, hidden 768, ffn 3072, vocab 50304,
 * 12 heads of 64), in fp32 and bf16. Each matmul shape is also run through
 * every GEMM library directly, so the device's rate is shown next to the best
 * library's own rate; a device rate below 70% of it is flagged (a WARNING line,
 * "below_70pct" in JSON) and counted in a closing summary. Times are the median
 * of repeated runs. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "base/rng.h"
#include "bench_common.h"
#include "device/cpu/cpu_gemm.h"
#include "device/device.h"

typedef struct {
  int json;
  double min_seconds; /* keep repeating a kernel until this much time has passed */
  const char *only;   /* run only kernels whose name contains this */
  int do_fp32, do_bf16;
  const char *device; /* --device / $TRIDENT_DEVICE / auto */
  int is_cpu;         /* the GEMM libraries' own rates are shown for the CPU only */
  td_device *dev;
  double best_gflops[2]; /* best matmul rate seen, [fp32, bf16] */
  int mm_shapes, mm_slow; /* matmul shapes run, and those below SLOW_FRACTION of the best library */
} bench_ctx;

/* A device GEMM under this fraction of the best library's rate at its shape is
 * flagged: a library that does not know the CPU (issue #14: Debian's OpenBLAS on
 * Sapphire Rapids ran at 13-26% of oneDNN) or a wrong measured choice. */
#define SLOW_FRACTION 0.70

/* A kernel call and the wait for its device: a GPU returns before the work is done. */
typedef struct {
  void (*fn)(void *);
  void *arg;
  td_device *dev;
} synced_call;

static void run_synced(void *p) {
  synced_call *s = p;
  s->fn(s->arg);
  s->dev->ops->synchronize(s->dev);
}

/* Median seconds of fn(arg), repeated for at least c->min_seconds. */
static double time_median(const bench_ctx *c, void (*fn)(void *), void *arg) {
  synced_call s = {fn, arg, c->dev};
  return td_bench_time_median(c->min_seconds, run_synced, &s);
}

static int selected(const bench_ctx *c, const char *name) {
  return !c->only || strstr(name, c->only) != NULL;
}

/* ------------------------------------------------------------------ matmul */

typedef struct {
  bench_ctx *c;
  td_matmul_desc g;
  int lib; /* -1: the device's ops->matmul */
} mm_run;

static void mm_call(void *p) {
  mm_run *r = p;
  if (r->lib < 0)
    r->c->dev->ops->matmul(r->c->dev, &r->g);
  else
    td_cpu_gemm_with(&r->g, (td_gemm_library)r->lib);
}

/* The library ops->matmul runs this call on (the CPU's choice), or "device". */
static const char *device_library(const bench_ctx *c, const td_matmul_desc *g) {
  return c->is_cpu ? td_gemm_library_name(td_cpu_gemm_choose(g)) : "device";
}

static void warn_slow(const bench_ctx *c, const td_matmul_desc *g, td_dtype dt, const char *what,
                      double gf, const char *best_name, double lib_best) {
  const char *lib = device_library(c, g);
  printf("WARNING: matmul %s %s at %.0f%% of the best library (%s %.1f GFLOP/s; the device "
         "runs %s)%s\n",
         td_dtype_name(dt), what, 100 * gf / lib_best, best_name, lib_best, lib,
         !strcmp(lib, best_name) ? ": the same library, so the machine was busy: measure again"
         : dt == TD_BF16        ? ": see TRIDENT_GEMM_BF16 and the GEMM cache, docs/device.md"
                                : ": see TRIDENT_GEMM_FP32 and the GEMM cache, docs/device.md");
}

/* How many matmul shapes ran below SLOW_FRACTION of the best library, and (CPU)
 * which library the device chose per shape class. */
static void matmul_summary(const bench_ctx *c) {
  char choice[4800] = "";
  if (c->is_cpu) td_cpu_gemm_describe(choice, sizeof choice);
  if (c->json) {
    printf("{\"kernel\": \"matmul_summary\", \"shapes\": %d, \"below_70pct\": %d, "
           "\"gemm_choice\": \"", c->mm_shapes, c->mm_slow);
    td_bench_print_json_text(choice);
    printf("\"}\n");
    return;
  }
  if (c->mm_slow)
    printf("WARNING: %d of %d matmul shapes ran below %.0f%% of the best library's rate\n",
           c->mm_slow, c->mm_shapes, 100 * SLOW_FRACTION);
  else
    printf("matmul: all %d shapes ran at %.0f%% or more of the best library's rate\n",
           c->mm_shapes, 100 * SLOW_FRACTION);
  if (*choice) printf("GEMM choice: %s\n", choice);
}

static void bench_matmul_shape(bench_ctx *c, td_dtype dt, int64_t m, int64_t n, int64_t k, int ta,
                               int tb, const char *what) {
  td_device *dev = c->dev;
  void *a = td_bench_alloc_random(dev, m * k, dt, 1);
  void *b = td_bench_alloc_random(dev, k * n, dt, 2);
  float *out = dev->ops->alloc(dev, (size_t)(m * n) * sizeof(float));
  mm_run r = {.c = c,
              .g = {.m = m, .n = n, .k = k, .ab_dtype = dt, .c_dtype = TD_F32, .a = a,
                    .lda = ta ? m : k, .trans_a = ta, .b = b, .ldb = tb ? k : n, .trans_b = tb,
                    .c = out, .ldc = n, .alpha = 1, .beta = 0, .batch = 1}};
  double flops = 2.0 * m * n * k, lib_best = 0;
  const char *best_name = "";
  for (int lib = 0; c->is_cpu && lib < (int)TD_GEMM_LIBRARIES; lib++) {
    if (!td_cpu_gemm_library_serves((td_gemm_library)lib, dt)) continue; /* e.g. OpenBLAS bf16 */
    r.lib = lib;
    double gf = flops / time_median(c, mm_call, &r) / 1e9;
    if (gf > lib_best) lib_best = gf, best_name = td_gemm_library_name((td_gemm_library)lib);
    if (c->json)
      printf("{\"kernel\": \"matmul_library\", \"library\": \"%s\", \"dtype\": \"%s\", \"m\": %lld, "
             "\"k\": %lld, \"n\": %lld, \"trans_a\": %d, \"trans_b\": %d, \"gflops\": %.1f}\n",
             td_gemm_library_name((td_gemm_library)lib), td_dtype_name(dt), (long long)m,
             (long long)k, (long long)n, ta, tb, gf);
  }
  r.lib = -1;
  double gf = flops / time_median(c, mm_call, &r) / 1e9;
  if (!c->is_cpu) lib_best = gf, best_name = "device"; /* no CPU library to compare with */
  int slow = gf < SLOW_FRACTION * lib_best;
  c->mm_shapes++, c->mm_slow += slow;
  int di = dt == TD_BF16;
  if (gf > c->best_gflops[di]) c->best_gflops[di] = gf;
  if (lib_best > c->best_gflops[di]) c->best_gflops[di] = lib_best;
  if (c->json)
    printf("{\"kernel\": \"matmul\", \"dtype\": \"%s\", \"m\": %lld, \"k\": %lld, \"n\": %lld, "
           "\"trans_a\": %d, \"trans_b\": %d, \"gflops\": %.1f, \"best_library\": \"%s\", "
           "\"best_library_gflops\": %.1f, \"fraction_of_best_library\": %.3f, "
           "\"device_library\": \"%s\", \"below_70pct\": %s}\n",
           td_dtype_name(dt), (long long)m, (long long)k, (long long)n, ta, tb, gf, best_name,
           lib_best, gf / lib_best, device_library(c, &r.g), slow ? "true" : "false");
  else
    printf("matmul  %-4s %-22s m=%-5lld k=%-5lld n=%-5lld ta=%d tb=%d %8.1f GFLOP/s  "
           "(best library %s %8.1f: %5.1f%%)\n",
           td_dtype_name(dt), what, (long long)m, (long long)k, (long long)n, ta, tb, gf, best_name,
           lib_best, 100 * gf / lib_best);
  if (slow && !c->json) warn_slow(c, &r.g, dt, what, gf, best_name, lib_best);
  fflush(stdout);
  dev->ops->free(dev, a), dev->ops->free(dev, b), dev->ops->free(dev, out);
}

/* The three products of every linear layer of GPT-2 124M at 4096 tokens:
 * forward Y = X W^T, input grad dX = dY W, weight grad dW = dY^T X. */
static void bench_matmuls(bench_ctx *c, td_dtype dt) {
  static const struct {
    const char *name;
    int64_t in, out;
  } layers[] = {{"qkv", 768, 2304}, {"attn_proj", 768, 768}, {"fc1", 768, 3072},
                {"fc2", 3072, 768}, {"lm_head", 768, 50304}};
  const int64_t tokens = 4096;
  for (size_t i = 0; i < sizeof layers / sizeof *layers; i++) {
    char what[64];
    int64_t in = layers[i].in, out = layers[i].out;
    snprintf(what, sizeof what, "%s fwd", layers[i].name);
    bench_matmul_shape(c, dt, tokens, out, in, 0, 1, what);
    snprintf(what, sizeof what, "%s bwd-input", layers[i].name);
    bench_matmul_shape(c, dt, tokens, in, out, 0, 0, what);
    snprintf(what, sizeof what, "%s bwd-weight", layers[i].name);
    bench_matmul_shape(c, dt, out, in, tokens, 1, 0, what);
  }
}

/* ------------------------------------------------------ other kernels */

static void report(const bench_ctx *c, const char *kernel, td_dtype dt, const char *shape_json,
                     const char *shape_text, double seconds, double flops, double bytes) {
  int di = dt == TD_BF16;
  /* the fraction of the dtype's best matmul rate, where a matmul ran (not under --only) */
  const double best = c->best_gflops[di];
  if (c->json) {
    if (flops > 0 && best > 0)
      printf("{\"kernel\": \"%s\", \"dtype\": \"%s\", %s, \"gflops\": %.1f, "
             "\"fraction_of_matmul\": %.3f}\n",
             kernel, td_dtype_name(dt), shape_json, flops / seconds / 1e9,
             flops / seconds / 1e9 / best);
    else if (flops > 0)
      printf("{\"kernel\": \"%s\", \"dtype\": \"%s\", %s, \"gflops\": %.1f}\n", kernel,
             td_dtype_name(dt), shape_json, flops / seconds / 1e9);
    else
      printf("{\"kernel\": \"%s\", \"dtype\": \"%s\", %s, \"gbps\": %.2f}\n", kernel,
             td_dtype_name(dt), shape_json, bytes / seconds / 1e9);
  } else {
    if (flops > 0 && best > 0)
      printf("%-22s %-4s %-28s %8.1f GFLOP/s  (%5.1f%% of best %s matmul %.1f)\n", kernel,
             td_dtype_name(dt), shape_text, flops / seconds / 1e9,
             100 * flops / seconds / 1e9 / best, td_dtype_name(dt), best);
    else if (flops > 0)
      printf("%-22s %-4s %-28s %8.1f GFLOP/s\n", kernel, td_dtype_name(dt), shape_text,
             flops / seconds / 1e9);
    else
      printf("%-22s %-4s %-28s %8.2f GB/s   (%.3f ms)\n", kernel, td_dtype_name(dt), shape_text,
             bytes / seconds / 1e9, seconds * 1e3);
  }
  fflush(stdout);
}

/* One memory-bound (or attention) kernel run: buffers and a closure. */
typedef struct {
  td_device *dev;
  float *x, *y, *z, *w, *b, *mean, *rstd;
  void *out;
  int32_t *ids;
  int64_t rows, cols;
  td_dtype dt;
  td_attention_desc att;
} kargs;

static void k_ln_fwd(void *p) {
  kargs *a = p;
  a->dev->ops->layernorm_forward(a->dev, a->out, a->dt, a->mean, a->rstd, a->x, a->w, a->b,
                                 a->rows, a->cols, 1e-5f);
}
static void k_ln_bwd(void *p) {
  kargs *a = p;
  /* dw, db accumulate into z's tail (not into the weights w) */
  a->dev->ops->layernorm_backward(a->dev, a->z, a->z + a->rows * a->cols, a->b, a->y, a->x, a->w,
                                  a->mean, a->rstd, a->rows, a->cols);
}
static void k_gelu_fwd(void *p) {
  kargs *a = p;
  a->dev->ops->gelu_forward(a->dev, a->out, a->dt, a->x, TD_F32, a->rows * a->cols, TD_GELU_ERF);
}
/* bf16: the training step's form, bf16 x (out) and dx with the bias gradient fused */
static void k_gelu_bwd(void *p) {
  kargs *a = p;
  if (a->dt == TD_BF16)
    a->dev->ops->gelu_backward(a->dev, a->z, TD_BF16, a->w, a->y, a->out, TD_BF16, a->rows,
                               a->cols, TD_GELU_TANH);
  else
    a->dev->ops->gelu_backward(a->dev, a->z, TD_F32, NULL, a->y, a->x, TD_F32, a->rows, a->cols,
                               TD_GELU_ERF);
}
static void k_add(void *p) {
  kargs *a = p;
  a->dev->ops->add(a->dev, a->z, a->x, a->y, a->rows * a->cols);
}
static void k_dropout_add(void *p) { /* z = y + dropout(x): the bias-dropout-add */
  kargs *a = p;
  a->dev->ops->dropout(a->dev, a->z, a->y, a->x, a->rows * a->cols, 0.1f, 1, 2, 0);
}
static void k_bias_bwd(void *p) {
  kargs *a = p;
  a->dev->ops->bias_backward(a->dev, a->w, a->dt == TD_BF16 ? a->out : (void *)a->x, a->dt,
                             a->rows, a->cols, NULL, TD_F32);
}
static void k_emb_fwd(void *p) { /* rows = tokens, cols = hidden, table = y (vocab x hidden) */
  kargs *a = p;
  a->dev->ops->embedding_forward(a->dev, a->z, a->ids, a->rows, a->y, 0, 50304, a->cols, 0);
}
static void k_emb_bwd(void *p) {
  kargs *a = p;
  a->dev->ops->embedding_backward(a->dev, a->y, a->z, a->ids, a->rows, 0, 50304, a->cols);
}
/* rows = tokens, cols = vocab; the logits in the step's dtype (bf16: out, whose
 * backward runs in place as the model's does) */
static const void *xent_logits(const kargs *a) { return a->dt == TD_BF16 ? a->out : (void *)a->x; }
static void k_xent_fwd(void *p) {
  kargs *a = p;
  a->dev->ops->cross_entropy_forward(a->dev, a->mean, a->rstd, xent_logits(a), a->dt, a->ids,
                                     a->rows, a->cols);
}
static void k_xent_bwd(void *p) {
  kargs *a = p;
  a->dev->ops->cross_entropy_backward(a->dev, a->out, a->dt, xent_logits(a), a->dt, a->rstd,
                                      a->ids, a->mean, a->rows, a->cols, 0);
}
static void k_adamw(void *p) { /* rows x cols = parameter count */
  kargs *a = p;
  a->dev->ops->adamw(a->dev, a->x, a->y, a->z, a->w, a->rows * a->cols, 1e-4f, 0.9f, 0.95f, 1e-8f,
                     0.1f, 1.0f, 10, NULL, TD_F32);
}
static void k_cast(void *p) {
  kargs *a = p;
  a->dev->ops->cast(a->dev, a->out, a->dt, a->x, TD_F32, a->rows * a->cols);
}
static void k_scale(void *p) {
  kargs *a = p;
  a->dev->ops->scale(a->dev, a->z, a->rows * a->cols, 0.999f);
}
static void k_sumsq(void *p) {
  kargs *a = p;
  a->dev->ops->sum_squares(a->dev, (double *)a->w, a->x, a->rows * a->cols); /* into w's start */
}
static void k_att_fwd(void *p) {
  kargs *a = p;
  a->dev->ops->attention_forward(a->dev, &a->att);
}
static void k_att_bwd(void *p) {
  kargs *a = p;
  a->dev->ops->attention_backward(a->dev, &a->att);
}
static void k_att_both(void *p) {
  k_att_fwd(p);
  k_att_bwd(p);
}

/* Buffers big enough for every kernel below: up to 4096 x 50304 floats each. */
static kargs kargs_alloc(td_device *dev) {
  const int64_t n = 4096LL * 50304;
  kargs a = {.dev = dev};
  a.x = td_bench_alloc_random(dev, n, TD_F32, 11), a.y = td_bench_alloc_random(dev, n, TD_F32, 12);
  a.z = td_bench_alloc_random(dev, n, TD_F32, 13), a.w = td_bench_alloc_random(dev, n, TD_F32, 14);
  a.b = td_bench_alloc_random(dev, 50304, TD_F32, 15);
  a.mean = td_bench_alloc_random(dev, 4096, TD_F32, 16);
  a.rstd = td_bench_alloc_random(dev, 4096, TD_F32, 17);
  a.out = td_bench_alloc_random(dev, 2 * n, TD_BF16, 19); /* n floats; bf16 inputs when read so */
  int32_t *ids = td_malloc(4096 * sizeof(int32_t));
  for (int i = 0; i < 4096; i++) ids[i] = (int32_t)(td_rng_u32(1, 18, (uint64_t)i) % 50304);
  a.ids = dev->ops->alloc(dev, 4096 * sizeof(int32_t));
  dev->ops->copy_h2d(dev, a.ids, ids, 4096 * sizeof(int32_t));
  td_free(ids);
  return a;
}

static void kargs_free(kargs *a) {
  td_device *d = a->dev;
  void *bufs[] = {a->x, a->y, a->z, a->w, a->b, a->mean, a->rstd, a->out, a->ids};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) d->ops->free(d, bufs[i]);
}

/* A memory-bound kernel over rows x cols elements, and the bytes it moves per
 * element: reads + writes in fp32 (4 each), or with its bf16 output (0: none). */
typedef struct {
  const char *name;
  void (*fn)(void *);
  int64_t rows, cols;
  double bytes_fp32, bytes_bf16;
} mem_kernel;

static void bench_memory_kernels(bench_ctx *c, kargs *a, td_dtype dt) {
  const int64_t N = 4096, C = 768, F = 3072, V = 50304, P = 124475904 / 4096;
  const mem_kernel ks[] = {
      {"layernorm_forward", k_ln_fwd, N, C, 8, 6},
      {"layernorm_backward", k_ln_bwd, N, C, 16, 0},
      {"gelu_forward", k_gelu_fwd, N, F, 8, 6},
      {"gelu_backward", k_gelu_bwd, N, F, 12, 8},
      {"add", k_add, N, C, 12, 0},
      {"dropout_add", k_dropout_add, N, C, 12, 0},
      {"bias_backward", k_bias_bwd, N, F, 4, 2},
      {"embedding_forward", k_emb_fwd, N, C, 8, 0},
      {"embedding_backward", k_emb_bwd, N, C, 12, 0},
      {"cross_entropy_forward", k_xent_fwd, N, V, 4, 2},
      {"cross_entropy_backward", k_xent_bwd, N, V, 8, 4},
      {"adamw", k_adamw, 4096, P, 28, 0},
      {"cast", k_cast, 4096, P, 8, 6},
      {"scale", k_scale, 4096, P, 8, 0},
      {"sum_squares", k_sumsq, 4096, P, 4, 0},
  };
  for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
    const mem_kernel *k = &ks[i];
    double bpe = dt == TD_BF16 ? k->bytes_bf16 : k->bytes_fp32;
    if (bpe == 0 || !selected(c, k->name)) continue;
    a->rows = k->rows, a->cols = k->cols, a->dt = dt;
    double sec = time_median(c, k->fn, a);
    char js[96], tx[64];
    snprintf(js, sizeof js, "\"rows\": %lld, \"cols\": %lld", (long long)k->rows,
             (long long)k->cols);
    snprintf(tx, sizeof tx, "%lld x %lld", (long long)k->rows, (long long)k->cols);
    report(c, k->name, dt, js, tx, sec, 0, bpe * (double)(k->rows * k->cols));
  }
}

/* Causal attention at B=4, T=1024, H=12, D=64. FLOPs (FlashAttention's count):
 * forward 4*B*H*T*T*D / 2 (two GEMMs, halved by the causal mask), backward 2.5x. */
static void bench_attention(bench_ctx *c, kargs *a, td_dtype dt) {
  const int64_t B = 4, T = 1024, H = 12, D = 64;
  td_device *dev = c->dev;
  td_attention_desc *t = &a->att;
  *t = (td_attention_desc){.batch = B, .seq = T, .heads = H, .head_dim = D, .dtype = dt,
                           .scale = 1.0f / sqrtf((float)D)};
  t->qkv = td_bench_alloc_random(dev, B * T * H * 3 * D, dt, 21);
  t->dout = td_bench_alloc_random(dev, B * T * H * D, dt, 22);
  t->out = dev->ops->alloc(dev, (size_t)(B * T * H * D) * td_dtype_size(dt));
  t->dqkv = dev->ops->alloc(dev, (size_t)(B * T * H * 3 * D) * td_dtype_size(dt));
  t->lse = dev->ops->alloc(dev, (size_t)(B * H * T) * sizeof(float));
  const double fwd = 4.0 * B * H * T * T * D / 2;
  const char *js = "\"batch\": 4, \"seq\": 1024, \"heads\": 12, \"head_dim\": 64";
  const char *tx = "B=4 T=1024 H=12 D=64";
  static const struct {
    const char *name;
    void (*fn)(void *);
    double flops_per_fwd;
  } runs[] = {{"attention_forward", k_att_fwd, 1.0},
              {"attention_backward", k_att_bwd, 2.5},
              {"attention_fwd_bwd", k_att_both, 3.5}};
  dev->ops->attention_forward(dev, t); /* lse and out for the backward */
  for (size_t i = 0; i < sizeof runs / sizeof *runs; i++)
    if (selected(c, runs[i].name))
      report(c, runs[i].name, dt, js, tx, time_median(c, runs[i].fn, a),
             runs[i].flops_per_fwd * fwd, 0);
  void *bufs[] = {(void *)t->qkv, (void *)t->dout, t->out, t->dqkv, t->lse};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) dev->ops->free(dev, bufs[i]);
}

/* ------------------------------------------------------------------ entry */

static void usage(FILE *f) {
  fprintf(f,
          "usage: trident bench kernels [--json] [--dtype fp32|bf16] [--only NAME] [--seconds S]\n"
          "                             [--device cpu|cuda|auto]\n"
          "  GFLOP/s or GB/s of each device kernel at GPT-2 124M shapes (tokens 4096, hidden 768,\n"
          "  ffn 3072, vocab 50304, seq 1024, 12 heads), matmul next to each GEMM library's rate.\n"
          "  --json       one JSON object per line\n"
          "  --dtype D    only fp32 or only bf16 (default: both)\n"
          "  --only NAME  only kernels whose name contains NAME (e.g. matmul, attention)\n"
          "  --seconds S  minimum time per measurement (default 0.5)\n"
          "  --device D   cpu, cuda or auto (default: $TRIDENT_DEVICE, else auto: cuda when this\n"
          "               trident has the CUDA backend and a GPU is visible)\n");
}

static int parse(bench_ctx *c, int argc, char **argv) {
  c->min_seconds = 0.5, c->do_fp32 = 1, c->do_bf16 = 1;
  const char *env = getenv("TRIDENT_DEVICE");
  c->device = env && *env ? env : "auto";
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--json")) {
      c->json = 1;
    } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      exit(0);
    } else if (i + 1 < argc && !strcmp(a, "--dtype")) {
      const char *d = argv[++i];
      if (strcmp(d, "fp32") && strcmp(d, "bf16"))
        td_fail("--dtype '%s': expected fp32 or bf16", d);
      c->do_fp32 = !strcmp(d, "fp32"), c->do_bf16 = !strcmp(d, "bf16");
    } else if (i + 1 < argc && !strcmp(a, "--device")) {
      c->device = argv[++i];
    } else if (i + 1 < argc && !strcmp(a, "--only")) {
      c->only = argv[++i];
    } else if (i + 1 < argc && !strcmp(a, "--seconds")) {
      char *end;
      c->min_seconds = strtod(argv[++i], &end);
      if (*end || !(c->min_seconds >= 0)) td_fail("--seconds '%s': expected a number >= 0", argv[i]);
    } else {
      td_fail("unknown flag '%s' for 'trident bench kernels' (see --help)", a);
    }
  }
  return 0;
}

int td_bench_kernels(int argc, char **argv) {
  bench_ctx c = {0};
  parse(&c, argc, argv);
  c.dev = td_device_open(c.device);
  c.is_cpu = !strcmp(c.dev->ops->name, "cpu");
  char dev[320];
  td_device_describe(c.dev, dev, sizeof dev);
  if (!c.json) printf("trident bench kernels: device %s, %d threads\n", dev, omp_get_max_threads());
  char kernels[512];
  if (!c.json && td_device_describe_kernels(c.dev, kernels, sizeof kernels))
    printf("kernels: %s\n", kernels);
  for (int di = 0; di < 2; di++) {
    td_dtype dt = di ? TD_BF16 : TD_F32;
    if ((di == 0 && !c.do_fp32) || (di == 1 && !c.do_bf16)) continue;
    if (selected(&c, "matmul")) bench_matmuls(&c, dt);
    kargs a = kargs_alloc(c.dev);
    bench_memory_kernels(&c, &a, dt);
    if (selected(&c, "attention")) bench_attention(&c, &a, dt);
    kargs_free(&a);
  }
  if (c.mm_shapes) matmul_summary(&c);
  td_device_close(c.dev);
  return 0;
}
