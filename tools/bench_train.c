/* trident bench train: training steps of a GPT (default GPT-2 124M: 12 layers,
 * hidden 768, 12 heads, vocabulary 50257 padded to 50304, seq 256, micro-batch 4)
 * on random tokens, through the model and AdamW code `trident train` uses (one
 * step = zero grads, forward, backward, grad norm, clip, AdamW, weight cast: the
 * trainer's train_step with one micro-batch). Prints per-step time, tokens/s,
 * model TFLOP/s (Megatron's count), MFU against the best matmul rate of the dtype
 * measured in the same run (ops->matmul at the lm_head and fc1 shapes of this
 * batch), and where the step time goes (a profiling wrapper device times every
 * kernel: matmul, attention, other kernels, optimizer). Model settings match the
 * PyTorch peer (bench/peer_torch.py): tanh GELU, no dropout, AdamW
 * (0.9, 0.95, eps 1e-8, weight decay 0.1 on matrices), clip 1.0. */
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
#include "device/profile_device.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "train/train_log.h"

typedef struct {
  int64_t layers, hidden, heads, seq, micro_batch, vocab;
  td_dtype dtype;
  int steps, warmup, threads, json, top;
  int erf_gelu;
  float dropout; /* hidden and attention dropout (0: none, the peer's) */
  int64_t logits_chunk; /* -1: td_gpt_auto_logits_chunk, as trident train */
  const char *device; /* cpu, cuda, auto, sealed */
  int breakdown;      /* time every op (-1: where the device's ops are synchronous) */
} opts;

/* ------------------------------------------------------------------ options */

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: trident bench train [--dtype fp32|bf16] [--seq-len T] [--micro-batch B]\n"
      "                           [--steps N] [--warmup W] [--threads P] [--json]\n"
      "                           [--device cpu|cuda|auto] [--breakdown 0|1] ...\n"
      "  Training steps of GPT-2 124M on random tokens through trident's model and AdamW:\n"
      "  step time, tokens/s, model TFLOP/s, MFU against the best matmul rate of the dtype\n"
      "  (measured after the steps), the peak device memory, and the time per kernel and phase.\n"
      "  --dtype D          fp32 (default) or bf16 (bf16 matmuls, fp32 master weights)\n"
      "  --seq-len T        sequence length (default 256)\n"
      "  --micro-batch B    sequences per step (default 4)\n"
      "  --steps N          measured steps (default 6)\n"
      "  --warmup W         steps run first and not measured (default 2)\n"
      "  --threads P        OpenMP threads (default: OMP_NUM_THREADS or all cores)\n"
      "  --num-layers L, --hidden-size H, --num-heads A, --vocab V\n"
      "                     model size (default 12, 768, 12, 50257; V is padded to a\n"
      "                     multiple of 128 as Megatron does)\n"
      "  --logits-chunk-tokens K\n"
      "                     tokens whose logits exist at once (0: all; default: trident\n"
      "                     train's, all while a micro-batch's fp32 logits fit 256 MiB on\n"
      "                     a CPU, 4 GiB on a GPU)\n"
      "  --erf-gelu         exact GELU (Megatron's default) instead of tanh (GPT-2's, the peer's)\n"
      "  --dropout P        hidden and attention dropout (default 0, the peer's; Megatron's\n"
      "                     default is 0.1)\n"
      "  --top K            kernels listed in the breakdown (default 12)\n"
      "  --device D         cpu, cuda or auto (default: $TRIDENT_DEVICE, else auto: cuda\n"
      "                     when this trident has the CUDA backend and a GPU is visible)\n"
      "  --breakdown 0|1    time every op (it waits for the device after each one, so on\n"
      "                     a GPU the step slows; default 1 on the CPU, 0 on a GPU)\n"
      "  --json             one JSON object per line\n");
}

static int64_t parse_int(const char *flag, const char *v, int64_t min) {
  char *end;
  long long x = strtoll(v, &end, 10);
  if (*v == '\0' || *end || x < min)
    td_fail("%s '%s': expected an integer >= %lld", flag, v, (long long)min);
  return (int64_t)x;
}

static opts parse(int argc, char **argv) {
  opts o = {.layers = 12,
            .hidden = 768,
            .heads = 12,
            .seq = 256,
            .micro_batch = 4,
            .vocab = 50257,
            .dtype = TD_F32,
            .steps = 6,
            .warmup = 2,
            .top = 12,
            .logits_chunk = -1,
            .breakdown = -1};
  const char *env = getenv("TRIDENT_DEVICE");
  o.device = env && *env ? env : "auto";
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      exit(0);
    } else if (!strcmp(a, "--json")) {
      o.json = 1;
    } else if (!strcmp(a, "--erf-gelu")) {
      o.erf_gelu = 1;
    } else if (!v) {
      td_fail("unknown flag or missing value '%s' for 'trident bench train' (see --help)", a);
    } else if (!strcmp(a, "--dtype")) {
      if (strcmp(v, "fp32") && strcmp(v, "bf16")) td_fail("--dtype '%s': expected fp32 or bf16", v);
      o.dtype = strcmp(v, "bf16") ? TD_F32 : TD_BF16, i++;
    } else if (!strcmp(a, "--seq-len")) {
      o.seq = parse_int(a, v, 1), i++;
    } else if (!strcmp(a, "--micro-batch")) {
      o.micro_batch = parse_int(a, v, 1), i++;
    } else if (!strcmp(a, "--steps")) {
      o.steps = (int)parse_int(a, v, 1), i++;
    } else if (!strcmp(a, "--warmup")) {
      o.warmup = (int)parse_int(a, v, 0), i++;
    } else if (!strcmp(a, "--threads")) {
      o.threads = (int)parse_int(a, v, 1), i++;
    } else if (!strcmp(a, "--num-layers")) {
      o.layers = parse_int(a, v, 1), i++;
    } else if (!strcmp(a, "--hidden-size")) {
      o.hidden = parse_int(a, v, 1), i++;
    } else if (!strcmp(a, "--num-heads")) {
      o.heads = parse_int(a, v, 1), i++;
    } else if (!strcmp(a, "--vocab")) {
      o.vocab = parse_int(a, v, 2), i++;
    } else if (!strcmp(a, "--logits-chunk-tokens")) {
      o.logits_chunk = parse_int(a, v, 0), i++;
    } else if (!strcmp(a, "--dropout")) {
      char *end;
      double p = strtod(v, &end);
      if (*v == '\0' || *end || !(p >= 0.0 && p < 1.0))
        td_fail("--dropout '%s': expected a probability in [0, 1)", v);
      o.dropout = (float)p, i++;
    } else if (!strcmp(a, "--top")) {
      o.top = (int)parse_int(a, v, 0), i++;
    } else if (!strcmp(a, "--device")) {
      o.device = v, i++;
    } else if (!strcmp(a, "--breakdown")) {
      if (strcmp(v, "0") && strcmp(v, "1")) td_fail("--breakdown '%s': expected 0 or 1", v);
      o.breakdown = v[0] == '1', i++;
    } else {
      td_fail("unknown flag '%s' for 'trident bench train' (see --help)", a);
    }
  }
  if (o.hidden % o.heads)
    td_fail("--hidden-size %lld is not divisible by --num-heads %lld", (long long)o.hidden,
            (long long)o.heads);
  return o;
}

/* ------------------------------------------------------------ GEMM ceiling */

typedef struct {
  td_device *dev;
  td_matmul_desc g;
} gemm_run;

/* One product, waited for: a GPU's matmul only enqueues it (timing the enqueue
 * read as a rate of 10^8 GFLOP/s on an H100) */
static void gemm_call(void *p) {
  gemm_run *r = p;
  r->dev->ops->matmul(r->dev, &r->g);
  r->dev->ops->synchronize(r->dev);
}

/* GFLOP/s of ops->matmul for C[m x n] = op(A) op(B), fp32 output. */
static double gemm_rate(td_device *dev, td_dtype dt, int64_t m, int64_t n, int64_t k, int ta,
                        int tb) {
  void *a = td_bench_alloc_random(dev, m * k, dt, 1), *b = td_bench_alloc_random(dev, k * n, dt, 2);
  float *c = dev->ops->alloc(dev, (size_t)(m * n) * sizeof(float));
  gemm_run r = {.dev = dev,
                .g = {.m = m,
                      .n = n,
                      .k = k,
                      .ab_dtype = dt,
                      .c_dtype = TD_F32,
                      .a = a,
                      .lda = ta ? m : k,
                      .trans_a = ta,
                      .b = b,
                      .ldb = tb ? k : n,
                      .trans_b = tb,
                      .c = c,
                      .ldc = n,
                      .alpha = 1,
                      .beta = 0,
                      .batch = 1}};
  double gflops =
      2.0 * (double)m * (double)n * (double)k / td_bench_time_median(0.3, gemm_call, &r) / 1e9;
  dev->ops->free(dev, a), dev->ops->free(dev, b), dev->ops->free(dev, c);
  return gflops;
}

/* The best rate over the forward, input-gradient and weight-gradient products of
 * the lm_head (C -> V) and fc1 (C -> F) layers at N tokens. */
static double gemm_ceiling(td_device *dev, const opts *o, int64_t N, int64_t C, int64_t F,
                           int64_t V) {
  const struct {
    const char *layer;
    int64_t in, out;
  } layers[] = {{"lm_head", C, V}, {"fc1", C, F}};
  double best = 0;
  for (int l = 0; l < 2; l++) {
    int64_t in = layers[l].in, out = layers[l].out;
    const struct {
      const char *what;
      int64_t m, n, k;
      int ta, tb;
    } shapes[] = {{"fwd", N, out, in, 0, 1},
                  {"bwd-input", N, in, out, 0, 0},
                  {"bwd-weight", out, in, N, 1, 0}};
    for (int s = 0; s < 3; s++) {
      double gf = gemm_rate(dev, o->dtype, shapes[s].m, shapes[s].n, shapes[s].k, shapes[s].ta,
                            shapes[s].tb);
      if (gf > best) best = gf;
      if (o->json)
        printf(
            "{\"event\": \"gemm\", \"dtype\": \"%s\", \"layer\": \"%s\", \"product\": \"%s\", "
            "\"m\": %lld, \"n\": %lld, \"k\": %lld, \"gflops\": %.1f}\n",
            td_dtype_name(o->dtype), layers[l].layer, shapes[s].what, (long long)shapes[s].m,
            (long long)shapes[s].n, (long long)shapes[s].k, gf);
      else
        printf("gemm  %-4s %-7s %-10s m=%-6lld n=%-6lld k=%-6lld %8.1f GFLOP/s\n",
               td_dtype_name(o->dtype), layers[l].layer, shapes[s].what, (long long)shapes[s].m,
               (long long)shapes[s].n, (long long)shapes[s].k, gf);
      fflush(stdout);
    }
  }
  return best;
}

/* ------------------------------------------------------------------ training */

typedef struct {
  const opts *o;
  td_device *dev;  /* the model's device: the profiling wrapper when o->breakdown */
  td_device *prof; /* that wrapper, or NULL */
  td_gpt *model;
  td_adamw opt;
  int32_t *tokens, *targets;
  float *mask;
  double *stats; /* device: the step's loss sum and gradient sum of squares */
} bench;

static void setup_optimizer(bench *b) {
  int n = td_gpt_num_tensors(b->model);
  td_adam_run *r = td_malloc(sizeof *r * (size_t)n);
  for (int i = 0; i < n; i++) {
    const td_gpt_tensor *v = td_gpt_tensor_at(b->model, i);
    r[i] = (td_adam_run){.state_offset = v->offset, .param_offset = v->offset,
                         .grad_offset = v->offset, .numel = v->numel,
                         .weight_decay = v->weight_decay};
  }
  td_adamw_init(&b->opt, b->dev, td_gpt_flat_numel(b->model), r, n, 0.9f, 0.95f, 1e-8f, 0.1f);
  td_free(r);
}

/* Random tokens of step `step`: sample[i] for i <= T, tokens = sample[0:T],
 * targets = sample[1:T+1] per sequence. */
static void fill_tokens(bench *b, int64_t step) {
  const int64_t T = b->o->seq;
  for (int64_t s = 0; s < b->o->micro_batch; s++)
    for (int64_t t = 0; t < T; t++) {
      uint64_t base = (uint64_t)((step * b->o->micro_batch + s) * (T + 1) + t);
      b->tokens[s * T + t] = (int32_t)(td_rng_u32(7, 0, base) % (uint32_t)b->o->vocab);
      b->targets[s * T + t] = (int32_t)(td_rng_u32(7, 0, base + 1) % (uint32_t)b->o->vocab);
    }
}

typedef struct {
  double seconds, loss, grad_norm;
} step_result;

static void region(bench *b, const char *name) {
  if (b->prof) td_profile_set_region(b->prof, name);
}

/* One training step as trident train's train_step runs it (one micro-batch). */
static step_result train_step(bench *b, int64_t step) {
  const double clip_grad = 1.0, lr = 6e-4;
  td_device *dev = b->dev;
  step_result r;
  fill_tokens(b, step);
  double t0 = td_now_seconds();
  region(b, "optimizer");
  td_gpt_zero_grads(b->model);
  region(b, "forward");
  double ms = 0, host[2]; /* loss sum, sum of squares: read back with one wait */
  for (int64_t i = 0; i < b->o->micro_batch * b->o->seq; i++) ms += b->mask[i];
  const float dloss_scale = (float)(1.0 / ms);
  td_gpt_forward_train_to(b->model, b->tokens, b->targets, b->mask,
                          td_gpt_dropout_seed(1234, step, 0), dloss_scale, b->stats, &ms);
  region(b, "backward");
  td_gpt_backward(b->model, dloss_scale);
  region(b, "optimizer");
  dev->ops->sum_squares(dev, b->stats + 1, td_gpt_grads(b->model), td_gpt_flat_numel(b->model));
  dev->ops->copy_d2h(dev, host, b->stats, sizeof host);
  double loss_sum = host[0];
  r.grad_norm = sqrt(host[1]);
  double clip = r.grad_norm > clip_grad ? clip_grad / (r.grad_norm + 1e-6) : 1.0;
  void *copy = td_gpt_weight_dtype(b->model) == TD_BF16 ? td_gpt_weights(b->model) : NULL;
  if (!td_adamw_step_copy(&b->opt, td_gpt_params(b->model), td_gpt_grads(b->model), copy, TD_BF16,
                          (float)lr, (float)clip))
    td_gpt_cast_weights(b->model); /* fp32: nothing to copy */
  dev->ops->synchronize(dev);
  r.seconds = td_now_seconds() - t0;
  r.loss = loss_sum / ms;
  return r;
}

/* ------------------------------------------------------------------ report */

typedef struct {
  double step_seconds, flops_per_step, gemm_gflops;
  int64_t tokens;
  double peak_bytes; /* the device backend's peak of live allocations; -1: not tracked */
} summary;

static int cmp_entry_seconds(const void *x, const void *y) {
  const td_profile_entry *a = *(const td_profile_entry *const *)x;
  const td_profile_entry *b = *(const td_profile_entry *const *)y;
  return (a->seconds < b->seconds) - (a->seconds > b->seconds);
}

/* Phase of an entry: optimizer region as a whole, else its kind. */
enum { PH_MATMUL, PH_ATTENTION, PH_KERNELS, PH_OPTIMIZER, PH_HOST, PH_COUNT };
static const char *const k_phase_names[PH_COUNT] = {"matmul", "attention", "other_kernels",
                                                    "optimizer", "untimed_host"};

static int phase_of(const td_profile_entry *e) {
  if (!strcmp(e->region, "optimizer")) return PH_OPTIMIZER;
  return e->kind == TD_PROF_MATMUL      ? PH_MATMUL
         : e->kind == TD_PROF_ATTENTION ? PH_ATTENTION
                                        : PH_KERNELS;
}

static void print_phases(const bench *b, const summary *s, double measured_seconds) {
  const opts *o = b->o;
  double sec[PH_COUNT] = {0}, flops[PH_COUNT] = {0}, timed = 0;
  const char *regions[] = {"forward", "backward", "optimizer"};
  double region_sec[3] = {0};
  int n = td_profile_count(b->prof);
  for (int i = 0; i < n; i++) {
    const td_profile_entry *e = td_profile_entry_at(b->prof, i);
    int ph = phase_of(e);
    sec[ph] += e->seconds, flops[ph] += e->flops, timed += e->seconds;
    for (int r = 0; r < 3; r++)
      if (!strcmp(e->region, regions[r])) region_sec[r] += e->seconds;
  }
  sec[PH_HOST] = measured_seconds - timed;
  const double steps = o->steps;
  if (!o->json) printf("\nwhere a step's time goes (mean over the measured steps):\n");
  for (int ph = 0; ph < PH_COUNT; ph++) {
    double ms = 1e3 * sec[ph] / steps, frac = sec[ph] / measured_seconds;
    double gf = sec[ph] > 0 && flops[ph] > 0 ? flops[ph] / sec[ph] / 1e9 : 0;
    if (o->json)
      printf(
          "{\"event\": \"phase\", \"phase\": \"%s\", \"ms_per_step\": %.2f, \"fraction\": %.4f, "
          "\"gflops\": %.1f}\n",
          k_phase_names[ph], ms, frac, gf);
    else if (gf > 0)
      printf("  %-14s %9.1f ms  %5.1f%%   %7.1f GFLOP/s (%.0f%% of the GEMM ceiling)\n",
             k_phase_names[ph], ms, 100 * frac, gf, 100 * gf / s->gemm_gflops);
    else
      printf("  %-14s %9.1f ms  %5.1f%%\n", k_phase_names[ph], ms, 100 * frac);
  }
  for (int r = 0; r < 3; r++) {
    double ms = 1e3 * region_sec[r] / steps;
    if (o->json)
      printf("{\"event\": \"region\", \"region\": \"%s\", \"ms_per_step\": %.2f}\n", regions[r],
             ms);
    else
      printf("  region %-9s %7.1f ms\n", regions[r], ms);
  }
}

static void print_top_ops(const bench *b) {
  const opts *o = b->o;
  int n = td_profile_count(b->prof);
  const td_profile_entry **e = td_malloc(sizeof *e * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++) e[i] = td_profile_entry_at(b->prof, i);
  qsort(e, (size_t)n, sizeof *e, cmp_entry_seconds);
  if (!o->json && o->top > 0)
    printf("\nslowest kernels (region, calls per step, ms per step, GFLOP/s):\n");
  for (int i = 0; i < n; i++) {
    double ms = 1e3 * e[i]->seconds / o->steps, calls = (double)e[i]->calls / o->steps;
    double gf = e[i]->flops > 0 ? e[i]->flops / e[i]->seconds / 1e9 : 0;
    if (o->json)
      printf(
          "{\"event\": \"op\", \"region\": \"%s\", \"kind\": \"%s\", \"name\": \"%s\", "
          "\"calls_per_step\": %.2f, \"ms_per_step\": %.3f, \"gflops\": %.1f}\n",
          e[i]->region, td_prof_kind_name(e[i]->kind), e[i]->name, calls, ms, gf);
    else if (i < o->top)
      printf("  %-9s %-56s %5.1f %8.2f ms %8.1f\n", e[i]->region, e[i]->name, calls, ms, gf);
  }
  td_free(e);
}

static void print_summary(const bench *b, const summary *s) {
  const opts *o = b->o;
  double tok_s = (double)s->tokens / s->step_seconds;
  double tflops = s->flops_per_step / s->step_seconds / 1e12;
  double mfu = tflops * 1e3 / s->gemm_gflops;
  if (o->json)
    printf(
        "{\"event\": \"summary\", \"dtype\": \"%s\", \"seq_len\": %lld, \"micro_batch\": %lld, "
        "\"threads\": %d, \"steps\": %d, \"median_step_ms\": %.3f, \"tokens_per_s\": %.1f, "
        "\"model_tflops\": %.4f, \"gemm_ceiling_gflops\": %.1f, \"mfu\": %.4f, "
        "\"max_mem_bytes\": %.0f, \"max_mem_gib\": %.2f}\n",
        td_dtype_name(o->dtype), (long long)o->seq, (long long)o->micro_batch,
        omp_get_max_threads(), o->steps, 1e3 * s->step_seconds, tok_s, tflops, s->gemm_gflops, mfu,
        s->peak_bytes, s->peak_bytes < 0 ? -1.0 : s->peak_bytes / (1 << 30));
  else
    printf(
        "\nRESULT %s seq %lld micro-batch %lld, %d threads: median %.1f ms/step | %.1f tokens/s | "
        "model %.3f TFLOP/s | MFU %.1f%% of the %s GEMM ceiling %.1f GFLOP/s | peak device "
        "memory %.3f GiB\n",
        td_dtype_name(o->dtype), (long long)o->seq, (long long)o->micro_batch,
        omp_get_max_threads(), 1e3 * s->step_seconds, tok_s, tflops, 100 * mfu,
        td_dtype_name(o->dtype), s->gemm_gflops, s->peak_bytes < 0 ? -1.0 : s->peak_bytes / (1 << 30));
}

/* Which GEMM library ran each product class, on the CPU (after the run, so the
 * classes it measured count), and the kernels trident chose for OpenBLAS. */
static void print_gemm_choice(td_device *raw, const opts *o) {
  if (strcmp(raw->ops->name, "cpu")) return;
  char gemm[4800];
  td_cpu_gemm_describe(gemm, sizeof gemm);
  if (o->json) {
    printf("{\"event\": \"gemm_choice\", \"gemm_choice\": \"");
    td_bench_print_json_text(gemm);
    printf("\"}\n");
  } else {
    printf("GEMM: %s\n", gemm);
  }
}

/* ------------------------------------------------------------------ entry */

int td_bench_train(int argc, char **argv) {
  opts o = parse(argc, argv);
  if (o.threads > 0) omp_set_num_threads(o.threads);
  td_device *raw = td_device_open(o.device);
  if (o.breakdown < 0) o.breakdown = td_device_has(raw, TD_DEVICE_HOST_MEMORY);
  char devname[320];
  td_device_describe(raw, devname, sizeof devname);
  td_gpt_config cfg = {.num_layers = o.layers,
                       .hidden = o.hidden,
                       .heads = o.heads,
                       .ffn_hidden = 4 * o.hidden,
                       .seq_len = o.seq,
                       .max_positions = o.seq > 1024 ? o.seq : 1024,
                       .vocab_size = td_gpt_padded_vocab(o.vocab, 128, 1),
                       .init_std = 0.02f,
                       .layernorm_eps = 1e-5f,
                       .openai_gelu = !o.erf_gelu,
                       .hidden_dropout = o.dropout,
                       .attention_dropout = o.dropout};
  const int64_t N = o.micro_batch * o.seq;
  if (o.json)
    printf(
        "{\"event\": \"config\", \"layers\": %lld, \"hidden\": %lld, \"heads\": %lld, "
        "\"seq_len\": %lld, \"micro_batch\": %lld, \"vocab\": %lld, \"padded_vocab\": %lld, "
        "\"dtype\": \"%s\", \"threads\": %d, \"gelu\": \"%s\", \"dropout\": %g, "
        "\"device\": \"%s\"}\n",
        (long long)o.layers, (long long)o.hidden, (long long)o.heads, (long long)o.seq,
        (long long)o.micro_batch, (long long)o.vocab, (long long)cfg.vocab_size,
        td_dtype_name(o.dtype), omp_get_max_threads(), o.erf_gelu ? "erf" : "tanh",
        (double)o.dropout, devname);
  else
    printf(
        "trident bench train: GPT %lld layers, hidden %lld, %lld heads, vocab %lld (padded "
        "%lld), seq %lld, micro-batch %lld, %s, %d threads, %s GELU, dropout %g, device %s\n",
        (long long)o.layers, (long long)o.hidden, (long long)o.heads, (long long)o.vocab,
        (long long)cfg.vocab_size, (long long)o.seq, (long long)o.micro_batch,
        td_dtype_name(o.dtype), omp_get_max_threads(), o.erf_gelu ? "erf" : "tanh",
        (double)o.dropout, devname);
  char kernels[512];
  if (!o.json && td_device_describe_kernels(raw, kernels, sizeof kernels))
    printf("kernels: %s\n", kernels);
  fflush(stdout);

  summary s = {.tokens = N};
  s.flops_per_step = td_gpt_flops_per_iteration(o.micro_batch, o.seq, o.layers, o.hidden,
                                                cfg.ffn_hidden, cfg.vocab_size);

  bench b = {.o = &o};
  b.prof = o.breakdown ? td_profile_device_open(raw) : NULL;
  b.dev = b.prof ? b.prof : raw;
  td_gpt_layout lay = td_gpt_layout_single(&cfg);
  lay.logits_chunk =
      o.logits_chunk >= 0 ? o.logits_chunk : td_gpt_auto_logits_chunk(&cfg, o.micro_batch, raw);
  b.model = td_gpt_create(b.dev, &cfg, &lay, o.micro_batch, o.dtype);
  b.stats = b.dev->ops->alloc(b.dev, 2 * sizeof(double));
  td_gpt_init_params(b.model, 1234);
  setup_optimizer(&b);
  b.tokens = td_malloc((size_t)N * sizeof(int32_t));
  b.targets = td_malloc((size_t)N * sizeof(int32_t));
  b.mask = td_malloc((size_t)N * sizeof(float));
  for (int64_t i = 0; i < N; i++) b.mask[i] = 1.0f;

  double *times = td_malloc(sizeof *times * (size_t)o.steps), measured = 0;
  for (int i = 0; i < o.warmup + o.steps; i++) {
    int warm = i < o.warmup;
    if (i == o.warmup && b.prof) td_profile_reset(b.prof);
    step_result r = train_step(&b, i);
    if (!warm) times[i - o.warmup] = r.seconds, measured += r.seconds;
    double tflops = s.flops_per_step / r.seconds / 1e12;
    if (o.json)
      printf(
          "{\"event\": \"step\", \"step\": %d, \"warmup\": %s, \"ms\": %.1f, "
          "\"tokens_per_s\": %.1f, \"model_tflops\": %.4f, \"loss\": %.6f, "
          "\"grad_norm\": %.4f}\n",
          i, warm ? "true" : "false", 1e3 * r.seconds, (double)N / r.seconds, tflops, r.loss,
          r.grad_norm);
    else
      printf("step %3d%s | %9.1f ms | %8.1f tokens/s | %.3f TFLOP/s | loss %.4f | grad norm %.3f\n",
             i, warm ? " (warm-up)" : "          ", 1e3 * r.seconds, (double)N / r.seconds, tflops,
             r.loss, r.grad_norm);
    fflush(stdout);
  }
  s.step_seconds = td_bench_median(times, o.steps);
  /* as PyTorch's max_memory_allocated (the peer's max_mem_gib): the backend's
   * live allocations at their peak over the run so far (model, optimizer,
   * activations), not the kernels' scratch or cuBLASLt's workspace; read
   * before the GEMM ceiling's buffers exist */
  size_t now_b, peak_b;
  s.peak_bytes = -1;
  if (raw->ops->memory_stats) {
    raw->ops->memory_stats(raw, &now_b, &peak_b);
    s.peak_bytes = (double)peak_b;
  }
  s.gemm_gflops = gemm_ceiling(raw, &o, N, cfg.hidden, cfg.ffn_hidden, cfg.vocab_size);
  print_summary(&b, &s);
  print_gemm_choice(raw, &o);
  if (b.prof) {
    print_phases(&b, &s, measured);
    print_top_ops(&b);
  }
  fflush(stdout);

  td_free(times), td_free(b.tokens), td_free(b.targets), td_free(b.mask);
  td_adamw_free(&b.opt);
  b.dev->ops->free(b.dev, b.stats);
  td_gpt_destroy(b.model);
  if (b.prof) td_profile_device_close(b.prof);
  td_device_close(raw);
  return 0;
}
