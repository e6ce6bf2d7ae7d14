#include "train/trainer.h"

#include <cjson/cJSON.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/files.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/memory_limit.h"
#include "comm/comm.h"
#include "comm/device_comm.h"
#include "comm/topology.h"
#include "data/bpe_tokenizer.h"
#include "data/gpt_dataset.h"
#include "data/mock_data.h"
#include "data/sampler.h"
#include "device/cpu/cpu_gemm.h"
#include "device/device.h"
#include "model/gpt.h"
#include "model/gpt_config.h"
#include "optim/adamw.h"
#include "optim/nvme_state.h"
#include "train/checkpoint.h"
#include "train/curriculum.h"
#include "train/ds_config.h"
#include "parallel/pipeline.h"
#include "parallel/zero.h"
#include "train/tb_events.h"
#include "train/timers.h"
#include "train/train_log.h"
#include "train/train_memory.h"

enum { SPLIT_TRAIN = 0, SPLIT_VALID = 1, SPLIT_TEST = 2 };

typedef struct {
  td_args *a;
  td_topology topo;
  td_comm *dp;      /* the data-parallel group */
  int dp_rank, dp_size;
  int is_logger;    /* rank 0 prints the log and writes checkpoints */
  int zero_stage;   /* DeepSpeed's ZeRO stage 0-3 (--zero-stage; 1: --use-distributed-optimizer) */
  int overlap_param_gather; /* --overlap-param-gather acts (ZeRO-1/2 at DP > 1) */
  td_zero *zero;    /* data parallelism: gradient reduction, shards, stage-3 gathers */
  unsigned char *counted; /* per tensor: counted by this rank in whole-model statistics */
  td_timers timers; /* --timing-log-level */
  td_pipeline pipe; /* this rank's pipeline stage: arenas, schedule */
  td_tb_writer *tb; /* --tensorboard-dir, on the logging rank */
  td_device *dev;
  char collectives[640]; /* how collectives on device memory move (td_dcomm_setup) */
  td_gpt *model;
  td_gpt_config cfg;
  int64_t true_vocab; /* the tokenizer's vocabulary, before padding */
  td_dtype compute;
  td_adamw opt;
  td_lr_schedule lr;
  int decoupled;                 /* --decoupled-lr: the embeddings and output layer's group */
  double dec_max_lr, dec_min_lr; /* its peak and floor on lr's steps */
  td_wd_schedule wd; /* --weight-decay-incr-style */
  td_loss_scaler scaler;
  td_mock_data mock[3];           /* --mock-data */
  td_gpt_datasets *datasets;       /* --data-path and friends */
  const td_gpt_dataset *split[3];  /* NULL: split absent */
  td_sampler sampler[3];
  int32_t eod;
  uint64_t seed; /* of dropout: --seed, or the checkpoint's unless --no-load-rng */
  /* progress (saved in checkpoints) */
  int64_t iteration, consumed_train, consumed_valid, lr_steps;
  int64_t lr_tokens; /* the tokens the LR schedule has seen (Megatron-DeepSpeed's num_tokens) */
  int64_t consumed_tokens; /* Megatron-DeepSpeed's consumed_train_tokens: samples x tokens used */
  td_curriculum curriculum; /* the DeepSpeed config's seqlen curriculum (enabled: 0 without) */
  int64_t seqlen;           /* tokens per sample of this iteration (curriculum), else seq_length */
  /* this iteration's global batch and micro-batches per DP rank (a ramp-up grows them) */
  int64_t cur_batch, cur_micro;
  /* host staging of one global batch: [global_batch, seq] */
  int32_t *tokens, *targets, *sample;
  float *mask;
  /* checkpoint views of the flat buffers */
  td_ckpt_tensor *ck_params, *ck_m, *ck_v;
  char (*ck_names)[2][TD_GPT_NAME_MAX + 16];
  /* times a training step made the host wait for the device (td_device.stream_waits):
   * the fewest and most of any step, over steps_run steps */
  uint64_t waits_min, waits_max;
  int64_t steps_run;
} trainer;

/* ------------------------------------------------------------------ setup */

static td_gpt_config model_config(const td_args *a, int64_t padded_vocab) {
  return (td_gpt_config){.num_layers = a->num_layers,
                         .hidden = a->hidden_size,
                         .heads = a->num_attention_heads,
                         .ffn_hidden = a->ffn_hidden_size,
                         .seq_len = a->seq_length,
                         .max_positions = a->max_position_embeddings,
                         .vocab_size = padded_vocab,
                         .init_std = (float)a->init_method_std,
                         .layernorm_eps = (float)a->layernorm_epsilon,
                         .hidden_dropout = (float)a->hidden_dropout,
                         .attention_dropout = (float)a->attention_dropout,
                         .openai_gelu = a->openai_gelu,
                         .untie_embeddings = a->untie_embeddings_and_output_weights};
}

/* The tokenizer's vocabulary: GPT-2's (from --vocab-file / --merge-file, which
 * must load), or NullTokenizer's N + 1 with eod = N, as Megatron. */
static int64_t tokenizer_vocab(const td_args *a, int32_t *eod) {
  if (a->tokenizer_type == TD_TOK_NULL) {
    *eod = (int32_t)a->vocab_size;
    return a->vocab_size + 1;
  }
  char err[1024];
  td_bpe *bpe = td_bpe_load(a->vocab_file, a->merge_file, err, sizeof err);
  if (!bpe) td_fail("GPT2BPETokenizer: %s", err);
  *eod = td_bpe_eod(bpe);
  int64_t n = td_bpe_vocab_size(bpe);
  td_bpe_free(bpe);
  return n;
}

static void open_datasets(trainer *t) {
  const td_args *a = t->a;
  td_gpt_data_config c = {.data_path = a->data_path.v, .n_data_path = a->data_path.n,
                          .split = a->split, .seq_length = a->seq_length,
                          .seed = a->seed, .cache_dir = a->data_cache_path};
  const td_strlist *per_split[3] = {&a->train_data_path, &a->valid_data_path, &a->test_data_path};
  for (int s = 0; s < 3; s++) {
    c.split_data_path[s] = per_split[s]->v;
    c.n_split_data_path[s] = per_split[s]->n;
  }
  td_gpt_num_samples(a->train_iters, a->global_batch_size, a->eval_interval, a->eval_iters,
                     c.num_samples);
  if (a->train_samples != TD_UNSET) c.num_samples[0] = a->train_samples; /* as Megatron */
  char err[1024];
  t->datasets = td_gpt_datasets_open(&c, err, sizeof err);
  if (!t->datasets) td_fail("%s", err);
  for (int s = 0; s < 3; s++) t->split[s] = td_gpt_datasets_split(t->datasets, (td_split)s);
  if (!t->split[0]) td_fail("the training split is empty: check --split and --data-path");
}

static void setup_data(trainer *t) {
  const td_args *a = t->a;
  char err[512];
  if (a->mock_data) {
    for (int s = 0; s < 3; s++)
      td_mock_data_init(&t->mock[s], a->seq_length, t->eod, (uint64_t)a->seed, (uint64_t)s);
  } else { /* rank 0 builds the index caches first, the others then read them (as Megatron) */
    if (t->topo.rank != 0) td_comm_barrier(t->topo.world);
    open_datasets(t);
    if (t->topo.rank == 0) td_comm_barrier(t->topo.world);
  }
  for (int s = 0; s < 3; s++) {
    int64_t len = a->mock_data ? INT64_MAX / 2 : t->split[s] ? td_gpt_dataset_len(t->split[s]) : 0;
    if (len > 0 && td_sampler_init(&t->sampler[s], len, a->micro_batch_size, t->dp_rank,
                                   t->dp_size, err, sizeof err))
      td_fail("%s split: %s", td_split_name((td_split)s), err);
  }
}

/* The checkpoint views of the parameters (k 0) or of Adam's m (1) or v (2)
 * into a whole flat buffer: the model's or the optimizer's own, or a gathered or
 * to-be-sharded copy. */
/* The checkpoint views of buffer k (parameters 0, m 1, v 2) at flat: device
 * memory, or host memory (on_host: ZeRO's gathered buffers). */
static void point_views(trainer *t, int k, float *flat, int on_host) {
  td_ckpt_tensor *views[3] = {t->ck_params, t->ck_m, t->ck_v};
  for (int i = 0; i < td_gpt_num_tensors(t->model); i++) {
    views[k][i].data = flat ? flat + td_gpt_tensor_at(t->model, i)->offset : NULL;
    views[k][i].on_host = on_host;
  }
}

/* Whether buffer k (as point_views) is whole on this rank as the checkpoint
 * needs it: the parameters below stage 3, m and v without ZeRO in memory. */
static int whole_here(const trainer *t, int k) {
  return k == 0 ? t->zero_stage < 3 : t->zero_stage == 0 && !t->opt.nvme && !t->opt.host;
}

static void setup_checkpoint_views(trainer *t) {
  int n = td_gpt_num_tensors(t->model);
  t->ck_params = td_calloc(sizeof *t->ck_params * (size_t)n);
  t->ck_m = td_calloc(sizeof *t->ck_m * (size_t)n);
  t->ck_v = td_calloc(sizeof *t->ck_v * (size_t)n);
  t->ck_names = td_calloc(sizeof *t->ck_names * (size_t)n);
  for (int i = 0; i < n; i++) {
    const td_gpt_tensor *v = td_gpt_tensor_at(t->model, i);
    td_ckpt_tensor c = td_ckpt_view_of(v, td_gpt_params(t->model));
    t->ck_params[i] = c;
    snprintf(t->ck_names[i][0], sizeof t->ck_names[i][0], "%s.exp_avg", v->name);
    snprintf(t->ck_names[i][1], sizeof t->ck_names[i][1], "%s.exp_avg_sq", v->name);
    t->ck_m[i] = c, t->ck_v[i] = c;
    t->ck_m[i].name = t->ck_names[i][0], t->ck_v[i].name = t->ck_names[i][1];
  }
  if (whole_here(t, 1)) point_views(t, 1, t->opt.exp_avg, 0), point_views(t, 2, t->opt.exp_avg_sq, 0);
}

/* AdamW over this rank's shard (td_zero_runs: everything at stage 0). */
/* --cpu-optimizer / offload_optimizer.device cpu moves Adam to the host when the
 * device's memory is its own; on the CPU backend it is there already. */
static int optimizer_on_host(const trainer *t) {
  return t->a->cpu_optimizer && !td_device_has(t->dev, TD_DEVICE_HOST_MEMORY);
}
/* offload_param.device cpu (ZeRO-3): the parameter shard in host memory when the
 * device's memory is its own; the CPU backend's is host memory already. */
static int params_on_host(const trainer *t) {
  return t->a->offload_param && !td_device_has(t->dev, TD_DEVICE_HOST_MEMORY);
}

/* This rank's runs, those of the word embeddings and the output layer marked
 * for --decoupled-lr's rate (a copy: td_free it). */
static td_adam_run *optimizer_runs(const trainer *t, int *n) {
  const int *tensor;
  const td_adam_run *zr = td_zero_runs(t->zero, &tensor, n);
  td_adam_run *runs = td_malloc(sizeof *runs * (size_t)(*n ? *n : 1));
  for (int i = 0; i < *n; i++) {
    runs[i] = zr[i];
    runs[i].decoupled_lr =
        t->decoupled && td_gpt_tensor_at(t->model, tensor[i])->embedding_or_output;
  }
  return runs;
}

static void setup_optimizer(trainer *t) {
  const td_args *a = t->a;
  int n;
  td_adam_run *runs = optimizer_runs(t, &n); /* td_adamw keeps its own merged copy */
  int64_t numel = td_zero_shard_numel(t->zero);
  float b1 = (float)a->adam_beta1, b2 = (float)a->adam_beta2, eps = (float)a->adam_eps;
  float wd = (float)a->weight_decay;
  if (!a->optimizer_nvme_path && optimizer_on_host(t)) {
    td_adamw_init_host(&t->opt, t->dev, numel, runs, n, b1, b2, eps, wd);
    if (params_on_host(t)) td_adamw_params_on_host(&t->opt);
  } else if (!a->optimizer_nvme_path) {
    td_adamw_init(&t->opt, t->dev, numel, runs, n, b1, b2, eps, wd);
  } else {
    char stem[32], err[1024];
    snprintf(stem, sizeof stem, "trident_adam_rank%05d", td_comm_rank(td_comm_world()));
    if (td_adamw_init_nvme(&t->opt, t->dev, numel, runs, n, b1, b2, eps, wd,
                           a->optimizer_nvme_path, stem, TD_NVME_CHUNK, err, sizeof err))
      td_fail("zero_optimization.offload_optimizer (nvme): %s", err);
  }
  td_free(runs);
}

/* Which tensors this rank counts in whole-model statistics: under tensor
 * parallelism TP rank 0 counts the replicated tensors (equal on every TP
 * rank), each rank its slices; later pipeline stages skip their copy of tied
 * word embeddings (the first stage's tensor): each element once. */
static void setup_counted(trainer *t) {
  int n = td_gpt_num_tensors(t->model);
  t->counted = td_malloc((size_t)(n ? n : 1));
  for (int i = 0; i < n; i++) {
    const td_gpt_tensor *v = td_gpt_tensor_at(t->model, i);
    t->counted[i] = !(v->split_dim < 0 && t->topo.coord.tp != 0) &&
                    !(t->topo.coord.pp > 0 && !strcmp(v->name, "embedding.word_embeddings.weight"));
  }
}

static int64_t ddp_bucket_size(const trainer *t) {
  int64_t s = t->a->ddp_bucket_size;
  return s > 0 ? s : td_zero_default_bucket_size(t->dp_size);
}

/* This rank's place (Megatron's topology) and the data-parallel group. */
/* The DeepSpeed config's seqlen curriculum, checked over the whole run first. */
static void setup_curriculum(trainer *t) {
  const td_args *a = t->a;
  t->seqlen = a->seq_length;
  if (!td_ds_config_curriculum(a->ds, &t->curriculum)) return;
  char err[512];
  int64_t multiple = a->sequence_parallel ? t->topo.layout.tp : 1;
  if (td_curriculum_check(&t->curriculum, a->train_iters, a->seq_length, multiple, err, sizeof err))
    td_fail("%s", err);
}

static void setup_topology(trainer *t) {
  const td_args *a = t->a;
  if (a->sequence_parallel && a->seq_length % a->tensor_model_parallel_size)
    td_fail("--sequence-parallel: --seq-length %lld is not divisible by "
            "--tensor-model-parallel-size %lld (each TP rank holds an equal part of the sequence)",
            (long long)a->seq_length, (long long)a->tensor_model_parallel_size);
  td_topology_init(&t->topo, td_comm_world(), (int)a->tensor_model_parallel_size,
                   (int)a->pipeline_model_parallel_size);
  t->dp = t->topo.group[TD_GROUP_DP];
  t->dp_rank = t->topo.coord.dp;
  t->dp_size = t->topo.layout.dp;
  t->is_logger = t->topo.rank == 0;
}

/* The data-parallel engine (hooked into the model), then the pipeline stage
 * (its replicas hooked too). */
static void setup_zero_and_pipeline(trainer *t) {
  t->zero = td_zero_create(t->model, t->dp, t->zero_stage, ddp_bucket_size(t), params_on_host(t));
  td_zero_set_grad_comm_dtype(t->zero, t->a->grad_comm_dtype);
  t->overlap_param_gather = td_zero_set_overlap_param_gather(t->zero, t->a->overlap_param_gather);
  td_pipeline_init(&t->pipe, t->model, t->topo.group[TD_GROUP_PP], t->topo.coord.pp,
                   t->topo.layout.pp, t->a->num_micro_batches, &t->timers, t->zero);
}

/* The bytes of model states this rank holds against the ZeRO paper's formula
 * in trident's fp32 terms (Rajbhandari et al. 2020, with 4-byte parameters and
 * gradients and K = 8 bytes of Adam state per parameter): stage 0 16Ψ, stage 1
 * 4Ψ + 4Ψ + 8Ψ/N, stage 2 4Ψ + 12Ψ/N, stage 3 16Ψ/N (Ψ: this rank's
 * parameters, N: data-parallel ranks); the low-precision weight copy and the
 * transient unit buffers besides. */
static void print_model_states(const trainer *t, const td_zero_memory *zm) {
  double psi = (double)td_gpt_num_params(t->model), n = t->dp_size, mib = 1048576.0;
  static const double shard[4][3] = {{0, 0, 0}, {0, 0, 1}, {0, 1, 1}, {1, 1, 1}}; /* p, g, adam */
  const double *s = shard[t->zero_stage];
  double want = 4 * psi / (s[0] ? n : 1) + 4 * psi / (s[1] ? n : 1) +
                (t->opt.nvme || t->opt.host ? 0 : 8 * psi / (s[2] ? n : 1));
  double have = (double)(zm->params + zm->grads + zm->optim);
  printf(" > model states per rank (MiB): %.1f (parameters %.1f + gradients %.1f + optimizer "
         "%.1f); the ZeRO paper's stage %d in fp32: %.1f (%.1f%%)%s\n",
         have / mib, zm->params / mib, zm->grads / mib, zm->optim / mib, t->zero_stage,
         want / mib, 100 * (have - want) / want, t->opt.nvme ? ", Adam state on NVMe" : t->opt.host ? ", Adam state in host memory" : "");
}

/* Tokens whose logits exist at once (td_gpt_layout.logits_chunk; 0: all). */
static int64_t logits_chunk(const trainer *t) {
  const td_args *a = t->a;
  return a->logits_chunk_tokens != TD_UNSET ? a->logits_chunk_tokens
                                             : td_gpt_auto_logits_chunk(&t->cfg, a->micro_batch_size, t->dev);
}

static void print_summary(const trainer *t) {
  const td_args *a = t->a;
  if (!t->is_logger) return;
  td_gpt_memory mem = td_gpt_memory_report(t->model);
  td_zero_memory zm = td_zero_memory_report(t->zero, &t->opt);
  printf(" > number of parameters on (tensor, pipeline) model parallel rank (0, 0): %lld\n",
         (long long)td_gpt_num_params(t->model));
  const td_layout *l = &t->topo.layout;
  char dev[320];
  td_device_describe(t->dev, dev, sizeof dev);
  printf(" > layout: world size %d = tensor-parallel %d x pipeline-parallel %d x data-parallel %d; "
         "device %s, %d threads per rank, %s compute\n",
         l->world, l->tp, l->pp, l->dp, dev, omp_get_max_threads(), td_dtype_name(t->compute));
  if (!strcmp(t->dev->ops->name, "cpu")) { /* which GEMM library runs each shape (cpu_gemm.h) */
    char gemm[4800];
    td_cpu_gemm_describe(gemm, sizeof gemm);
    printf(" > GEMM: %s\n", gemm);
  }
  char kernels[512];
  if (td_device_describe_kernels(t->dev, kernels, sizeof kernels)) printf(" > kernels: %s\n", kernels);
  if (t->topo.layout.world > 1) printf(" > collectives on device memory: %s\n", t->collectives);
  if (t->dp_size > 1)
    printf(" > data-parallel gradient %s: %d buckets of at most %lld elements (whole layers), "
           "overlapped with backward, summed in rank order%s\n",
           t->zero_stage >= 2 ? "reduce-scatter" : "all-reduce (reduce-scatter + all-gather)",
           td_zero_num_buckets(t->zero), (long long)ddp_bucket_size(t),
           a->grad_comm_dtype == TD_BF16   ? "; sent in bf16, summed in fp32"
           : a->grad_comm_dtype == TD_F16 ? "; sent in fp16, summed in fp32"
                                          : "");
  static const char *const what[4] = {"", "Adam state", "Adam state and gradients",
                                      "Adam state, gradients and parameters"};
  if (t->opt.host)
    printf(" > optimizer offloaded to host memory (DeepSpeed's cpu offload, cpu_adam): Adam's m "
           "and v, %.1f MiB per rank, and the update on the host; %s copied each step\n",
           2.0 * (double)t->opt.numel * sizeof(float) / 1048576.0,
           t->opt.params_on_host ? "gradients" : "parameters and gradients");
  else if (a->cpu_optimizer && t->is_logger)
    fprintf(stderr, "trident: note: --cpu-optimizer / offload_optimizer.device cpu: the %s "
                    "device's memory is host memory, so Adam runs on the host already\n",
            t->dev->ops->name);
  if (zm.params_host)
    printf(" > parameters offloaded to host memory (DeepSpeed's offload_param, ZeRO-3): this "
           "rank's fp32 shard, %.1f MiB, in pinned host memory, a unit's piece copied up when the "
           "unit is gathered; Adam updates it in place on the host\n",
           zm.params_host / 1048576.0);
  if (t->opt.nvme)
    printf(" > optimizer state offloaded to NVMe (ZeRO-Infinity): %s/trident_adam_rank*.adam, "
           "%.1f MiB per rank, streamed through the step\n",
           a->optimizer_nvme_path, 2.0 * (double)t->opt.numel * sizeof(float) / 1048576.0);
  if (t->zero_stage)
    printf(" > ZeRO stage %d: %s sharded over %d data-parallel ranks, %lld of %lld elements "
           "here\n",
           t->zero_stage, what[t->zero_stage], t->dp_size,
           (long long)td_zero_shard_numel(t->zero), (long long)td_gpt_flat_numel(t->model));
  if (t->overlap_param_gather)
    printf(" > parameter all-gather after the update overlapped with the next forward: each "
           "layer waits for its own gather (--overlap-param-gather)\n");
  else if (a->overlap_param_gather && t->is_logger)
    fprintf(stderr, "trident: note: --overlap-param-gather: acts with ZeRO stage 1 or 2 "
                    "(--use-distributed-optimizer) over more than one data-parallel rank; here "
                    "there is no parameter all-gather to overlap%s\n",
            t->zero_stage == 3 ? " (ZeRO-3 prefetches each layer's gather anyway)" : "");
  char recompute[96] = "", chunks[64] = "";
  if (a->recompute_granularity == TD_GRANULARITY_FULL)
    snprintf(recompute, sizeof recompute, "; full recomputation, %s %lld",
             a->recompute_method == 0 ? "uniform" : "block", (long long)a->recompute_num_layers);
  int64_t chunk = logits_chunk(t);
  if (chunk > 0 && chunk < a->micro_batch_size * a->seq_length)
    snprintf(chunks, sizeof chunks, "; logits %lld tokens at a time", (long long)chunk);
  if (l->pp > 1)
    printf(" > pipeline stage %d of %d: layers [%lld, %lld), 1F1B with %d micro-batches in flight "
           "here (one activation arena each)\n",
           t->topo.coord.pp + 1, l->pp, (long long)(t->cfg.num_layers / l->pp * t->topo.coord.pp),
           (long long)(t->cfg.num_layers / l->pp * (t->topo.coord.pp + 1)), t->pipe.n_replicas);
  printf(" > memory per rank (MiB): parameters %.1f | gradients %.1f | optimizer state %.1f | "
         "%s weights %.1f | activations %.1f (%.2f per layer%s%s%s)\n",
         zm.params / 1048576.0, zm.grads / 1048576.0, zm.optim / 1048576.0,
         td_dtype_name(t->compute), zm.weights / 1048576.0,
         mem.activations * (double)t->pipe.n_replicas / 1048576.0,
         mem.activations_per_layer / 1048576.0, a->sequence_parallel ? ", sequence-parallel" : "",
         recompute, chunks);
  print_model_states(t, &zm);
  printf(" > global batch %lld = micro batch %lld x %lld micro-batches x data-parallel %d; "
         "padded vocab %lld\n",
         (long long)a->global_batch_size, (long long)a->micro_batch_size,
         (long long)a->num_micro_batches, t->dp_size, (long long)t->cfg.vocab_size);
  const td_curriculum *cl = &t->curriculum;
  if (cl->enabled) {
    static const char *const kinds[] = {"fixed_discrete", "fixed_root", "fixed_linear"};
    printf(" > curriculum learning (DeepSpeed's, seqlen, %s): tokens per sample from %lld to %lld "
           "(at most --seq-length %lld), evaluation on whole samples\n",
           kinds[cl->schedule], (long long)td_curriculum_seqlen(cl->min_difficulty, a->seq_length),
           (long long)td_curriculum_seqlen(cl->max_difficulty, a->seq_length),
           (long long)a->seq_length);
  }
  fflush(stdout);
}

/* ------------------------------------------------------------------ data */

static void read_sample(trainer *t, int split, int64_t index, int32_t *tokens) {
  if (t->a->mock_data)
    td_mock_data_sample(&t->mock[split], index, tokens);
  else
    td_gpt_dataset_sample(t->split[split], index, tokens);
}

/* Fill the host staging buffers with one global batch of a split, the micro-batches
 * the sampler gives this rank after `consumed` samples: tokens = sample[0:s],
 * targets = sample[1:s+1], loss mask (0 on eod inputs with --eod-mask-loss, as
 * Megatron). Returns the sum of the mask. */
static double fill_batch(trainer *t, int split, int64_t consumed, int64_t n_micro) {
  const td_args *a = t->a;
  const int64_t s = a->seq_length, mb = a->micro_batch_size;
  const td_gpt_mask_config mc = {.eod = t->eod, .eod_mask_loss = a->eod_mask_loss};
  int64_t *idx = td_malloc((size_t)mb * sizeof *idx); /* not on the stack: mb may be 10^6 */
  double mask_sum = 0;
  for (int64_t m = 0; m < n_micro; m++) {
    if (!td_sampler_micro_batch(&t->sampler[split], consumed + m * mb * a->data_parallel_size, idx))
      td_fail("the %s data is exhausted after %lld samples", td_split_name((td_split)split),
              (long long)consumed);
    for (int64_t i = 0; i < mb; i++) {
      int64_t o = (m * mb + i) * s;
      read_sample(t, split, idx[i], t->sample);
      memcpy(t->tokens + o, t->sample, (size_t)s * sizeof(int32_t));
      memcpy(t->targets + o, t->sample + 1, (size_t)s * sizeof(int32_t));
      td_gpt_masks(t->sample, s, &mc, t->mask + o, NULL, NULL);
      for (int64_t j = 0; j < s; j++) mask_sum += t->mask[o + j];
    }
  }
  td_free(idx);
  return mask_sum;
}

/* Megatron-DeepSpeed's seqlen curriculum: keep the first t->seqlen tokens of each
 * staged sample (tokens, targets, mask), packed [n_micro x micro_batch, seqlen];
 * returns the sum of the mask that is left. */
static double truncate_batch(trainer *t, int64_t n_micro) {
  const int64_t s = t->a->seq_length, k = t->seqlen, rows = n_micro * t->a->micro_batch_size;
  double mask_sum = 0;
  for (int64_t r = 0; r < rows; r++) { /* row r moves down to r * k <= r * s: in place */
    memmove(t->tokens + r * k, t->tokens + r * s, (size_t)k * sizeof(int32_t));
    memmove(t->targets + r * k, t->targets + r * s, (size_t)k * sizeof(int32_t));
    memmove(t->mask + r * k, t->mask + r * s, (size_t)k * sizeof(float));
    for (int64_t j = 0; j < k; j++) mask_sum += t->mask[r * k + j];
  }
  return mask_sum;
}

/* This iteration's tokens per sample: the curriculum's difficulty at the step
 * about to run (DeepSpeed's update_difficulty(global_steps + 1)), else all. */
static void set_seqlen(trainer *t, int64_t seqlen) {
  t->seqlen = seqlen;
  td_pipeline_set_seq_length(&t->pipe, seqlen);
}

static void curriculum_step(trainer *t) {
  if (!t->curriculum.enabled) return;
  int64_t d = td_curriculum_update(&t->curriculum, t->iteration + 1);
  set_seqlen(t, td_curriculum_seqlen(d, t->a->seq_length));
}

/* ------------------------------------------------------------------ step */

typedef struct {
  double lm_loss, grad_norm;
  double num_zeros;   /* --log-num-zeros-in-grad; -1: not counted (or skipped step) */
  double params_norm; /* --log-params-norm, after the update; -1: not computed */
  int skipped;
} step_result;

/* Sum of a double over the data-parallel group. */
static double dp_sum(trainer *t, double x) {
  td_comm_all_reduce(t->dp, &x, &x, 1, TD_F64, TD_OP_SUM);
  return x;
}

/* Sum of a double over the pipeline stages (the loss lives on the last). */
static double pp_sum(trainer *t, double x) {
  if (t->topo.layout.pp > 1) td_comm_all_reduce(t->topo.group[TD_GROUP_PP], &x, &x, 1, TD_F64, TD_OP_SUM);
  return x;
}


/* This rank's micro-batch m is the (m * dp + dp_rank)-th of the global batch (the
 * sampler's order), whose dropout seed it takes: masks do not depend on dp. */
static uint64_t micro_batch_seed(void *ctx, int64_t m) {
  const trainer *t = ctx;
  return td_gpt_dropout_seed(t->seed, t->iteration, m * t->dp_size + t->dp_rank);
}

/* The staged global batch as the pipeline schedules read it. */
static td_pipeline_batch staged_batch(trainer *t) {
  return (td_pipeline_batch){.tokens = t->tokens, .targets = t->targets, .mask = t->mask,
                             .micro_tokens = t->a->micro_batch_size * t->seqlen,
                             .seed = micro_batch_seed, .ctx = t};
}

/* A statistic of the whole model (td_zero_model_sum: this DP group's replica,
 * each element once), summed over the model-parallel group: every TP rank of
 * every stage. */
static void model_sums(trainer *t, td_zero_what what, int n, const int *squares, double *out) {
  const td_layout *l = &t->topo.layout;
  td_zero_model_sums(t->zero, what, n, squares, out, t->counted);
  if (l->tp > 1 || l->pp > 1)
    td_comm_all_reduce(t->topo.group[TD_GROUP_MP], out, out, n, TD_F64, TD_OP_SUM);
}

static double model_sum(trainer *t, td_zero_what what, int squares) {
  double s;
  model_sums(t, what, 1, &squares, &s);
  return s;
}

/* The LR schedule's step after an applied update, as Megatron-DeepSpeed's
 * scheduler.step(increment): samples advance by this iteration's global batch,
 * tokens become the tokens consumed before this iteration (the trainer counts
 * this iteration's after the step, as Megatron's loop does). --lr-decay-tokens
 * without --lr-warmup-tokens takes the tokens seen when the sample warmup ends. */
static void step_schedule(trainer *t) {
  int64_t before = t->lr_steps;
  t->lr_steps += t->cur_batch;
  t->lr_tokens = t->consumed_tokens;
  td_lr_schedule *s = &t->lr;
  if (s->has_decay_tokens && !s->has_warmup_tokens && before < s->warmup_steps &&
      (double)t->lr_steps >= s->warmup_steps)
    s->warmup_tokens = (double)t->lr_tokens, s->has_warmup_tokens = 1;
}

/* The rate the next update gives a group (Megatron logs the optimizer's): the
 * schedule's steps, with --decoupled-lr's peak and floor for that group. */
static double rate_now(const trainer *t, int decoupled) {
  td_lr_schedule s = t->lr;
  if (decoupled) s.max_lr = t->dec_max_lr, s.min_lr = t->dec_min_lr;
  return td_lr_at_tokens(&s, (double)t->lr_steps, (double)t->lr_tokens);
}

/* Norm, loss-scaler update, clipping, AdamW and the low-precision weight copy;
 * an overflowed (fp16) step is skipped. */
static void optimizer_step(trainer *t, step_result *r, float scale) {
  const td_args *a = t->a;
  td_timers *tm = &t->timers;
  td_timers_start(tm, TD_TIMER_OPTIMIZER_CLIP_MAIN_GRAD);
  /* the squares and (--log-num-zeros-in-grad) the zeros, read back together */
  const int stats[2] = {1, 0};
  double sums[2];
  model_sums(t, TD_ZERO_GRADS, a->log_num_zeros_in_grad ? 2 : 1, stats, sums);
  r->grad_norm = sqrt(sums[0]) / scale;
  int found_inf = !isfinite(r->grad_norm);
  /* fp16 overflows are expected (the scaler skips the step and lowers the scale);
   * in fp32 and bf16 a non-finite norm means the run diverged. Every rank holds
   * the same norm: rank 0 reports, the others are stopped by its abort. */
  if (found_inf && !a->fp16 && !a->no_check_for_nan_in_loss_and_grad &&
      td_comm_rank(td_comm_world()) == 0)
    td_fail("iteration %lld: found %s in the gradient norm; the run stops, as Megatron's "
            "--check-for-nan-in-loss-and-grad does (--no-check-for-nan-in-loss-and-grad skips "
            "such steps instead)",
            (long long)t->iteration + 1, isnan(r->grad_norm) ? "NaN" : "Inf");
  if (td_loss_scaler_update(&t->scaler, found_inf)) /* DeepSpeed's rule stops at the floor */
    td_fail("iteration %lld: the gradients overflow with the loss scale already at its minimum "
            "%g; DeepSpeed's dynamic loss scaler stops the run here (fp16.min_loss_scale)",
            (long long)t->iteration + 1, t->scaler.scale);
  td_timers_stop(tm, TD_TIMER_OPTIMIZER_CLIP_MAIN_GRAD);
  if (found_inf) {
    r->skipped = 1;
    return;
  }
  if (a->log_num_zeros_in_grad) r->num_zeros = sums[1];
  double clip = 1.0;
  if (a->clip_grad > 0 && r->grad_norm > a->clip_grad) clip = a->clip_grad / (r->grad_norm + 1e-6);
  double lr = rate_now(t, 0), b1, b2;
  if (t->decoupled) t->opt.decoupled_lr = (float)rate_now(t, 1);
  if (td_betas_at(&t->lr, (double)t->lr_steps, &b1, &b2)) /* DeepSpeed's OneCycle momentum */
    t->opt.beta1 = (float)b1, t->opt.beta2 = (float)b2;
  t->opt.weight_decay = (float)td_wd_at(&t->wd, (double)t->lr_steps);
  td_timers_start(tm, TD_TIMER_OPTIMIZER_INNER_STEP);
  td_zero_update(t->zero, &t->opt, (float)lr, (float)(clip / scale));
  td_timers_stop(tm, TD_TIMER_OPTIMIZER_INNER_STEP);
  if (t->zero_stage == 1 || t->zero_stage == 2) {
    td_timers_start(tm, TD_TIMER_PARAMS_ALL_GATHER);
    td_zero_gather_params(t->zero);
    td_timers_stop(tm, TD_TIMER_PARAMS_ALL_GATHER);
  }
  td_timers_start(tm, TD_TIMER_OPTIMIZER_COPY_MAIN_TO_MODEL_PARAMS);
  td_zero_params_changed(t->zero);
  td_timers_stop(tm, TD_TIMER_OPTIMIZER_COPY_MAIN_TO_MODEL_PARAMS);
  step_schedule(t);
}

/* ------------------------------------------------------------------ pipeline */

/* Tied word embeddings with pipeline stages: the first stage's and the last
 * stage's copy get the sum of their gradients (Megatron's embedding group), so
 * the two stay equal. */
static void sync_tied_embeddings(trainer *t) {
  td_comm *g = t->topo.group[TD_GROUP_EMBEDDING];
  if (t->topo.layout.pp == 1 || t->cfg.untie_embeddings || !g) return;
  const td_gpt_tensor *v = td_gpt_find_tensor(t->model, "embedding.word_embeddings.weight");
  float *grad = td_gpt_grads(t->model) + v->offset;
  td_dcomm_all_reduce(g, t->dev, grad, grad, v->numel, TD_F32, TD_OP_SUM);
}

/* Megatron's --check-for-nan-in-loss-and-grad (on by default): a NaN or Inf in
 * this rank's forward loss stops the run, naming the rank and the iteration. */
static void check_local_loss(const trainer *t, double loss_sum) {
  if (isfinite(loss_sum) || t->a->no_check_for_nan_in_loss_and_grad) return;
  td_fail("rank %d, iteration %lld: found %s in local forward loss calculation; the run stops, as "
          "Megatron's --check-for-nan-in-loss-and-grad does (--no-check-for-nan-in-loss-and-grad "
          "skips such steps instead)",
          td_comm_rank(td_comm_world()), (long long)t->iteration + 1, isnan(loss_sum) ? "NaN" : "Inf");
}

/* A step's host waits for the device, into the trainer's range. */
static void count_waits(trainer *t, uint64_t waits) {
  if (!t->steps_run || waits < t->waits_min) t->waits_min = waits;
  if (waits > t->waits_max) t->waits_max = waits;
  t->steps_run++;
}

/* On a GPU each wait idles the device while the host catches up: a step reads the
 * losses, the gradient statistics (with the zero count), the parameters' norm
 * when logged, and (without NCCL) its staged collectives, and nothing else,
 * however many layers and micro-batches it runs. */
static void print_waits(const trainer *t) {
  if (!t->is_logger || !t->steps_run) return;
  printf(" > host waits for the device per training step: %llu to %llu over %lld steps (reading "
         "the losses and the gradient norm%s%s%s)\n",
         (unsigned long long)t->waits_min, (unsigned long long)t->waits_max,
         (long long)t->steps_run, t->a->log_params_norm ? ", the parameters' norm" : "",
         td_device_has(t->dev, TD_DEVICE_HOST_MEMORY) || td_dcomm_uses_library(t->dev)
             ? ""
             : ", collectives staged through the host",
         t->timers.level > 0 ? ", --timing-log-level timers" : "");
}

static step_result train_step(trainer *t) {
  const uint64_t waits0 = t->dev->stream_waits;
  const td_args *a = t->a;
  td_timers *tm = &t->timers;
  step_result r = {.num_zeros = -1, .params_norm = -1};
  td_timers_start(tm, TD_TIMER_FORWARD_BACKWARD);
  td_timers_start(tm, TD_TIMER_BATCH_GENERATOR);
  double mask_local = fill_batch(t, SPLIT_TRAIN, t->consumed_train, t->cur_micro);
  if (t->seqlen < a->seq_length) mask_local = truncate_batch(t, t->cur_micro);
  double mask_total = dp_sum(t, mask_local);
  td_timers_stop(tm, TD_TIMER_BATCH_GENERATOR);
  double denom = mask_total > 0 ? mask_total : 1;
  float scale = t->scaler.scale;
  td_zero_zero_grads(t->zero);
  const td_pipeline_batch batch = staged_batch(t);
  double loss_sum = td_pipeline_step(&t->pipe, &batch, t->cur_micro, (float)(scale / denom));
  check_local_loss(t, loss_sum);
  td_timers_start(tm, TD_TIMER_ALL_GRADS_SYNC);
  td_zero_finish_grads(t->zero);
  if (t->zero_stage >= 2)
    td_zero_reduce_sequence_parallel_grads(t->zero, t->a->sequence_parallel && t->topo.layout.tp > 1
                                                        ? t->topo.group[TD_GROUP_TP] : NULL);
  else
    td_gpt_reduce_sequence_parallel_grads(t->model);
  sync_tied_embeddings(t);
  td_timers_stop(tm, TD_TIMER_ALL_GRADS_SYNC);
  td_timers_stop(tm, TD_TIMER_FORWARD_BACKWARD);
  r.lm_loss = pp_sum(t, dp_sum(t, loss_sum)) / denom;
  td_timers_start(tm, TD_TIMER_OPTIMIZER);
  optimizer_step(t, &r, scale);
  td_timers_stop(tm, TD_TIMER_OPTIMIZER);
  if (a->log_params_norm) r.params_norm = sqrt(model_sum(t, TD_ZERO_PARAMS, 1));
  td_zero_step_done(t->zero);
  count_waits(t, t->dev->stream_waits - waits0);
  return r;
}

/* ------------------------------------------------------------------ eval */

/* Mean lm loss over eval_iters global batches of a split, continuing where the
 * previous evaluation of that split stopped (Megatron's persistent iterator). */
static double evaluate(trainer *t, int split, int64_t *consumed) {
  const td_args *a = t->a;
  const int64_t gb = a->global_batch_size;
  double loss = 0, mask = 0;
  if (!t->a->mock_data && !t->split[split]) return NAN;
  const int64_t train_seqlen = t->seqlen;
  set_seqlen(t, a->seq_length); /* evaluation reads whole samples (curriculum or not) */
  const td_pipeline_batch batch = staged_batch(t);
  for (int64_t it = 0; it < a->eval_iters; it++) {
    fill_batch(t, split, *consumed, a->num_micro_batches);
    *consumed += gb;
    double ms;
    loss += td_pipeline_forward_only(&t->pipe, &batch, a->num_micro_batches, &ms);
    mask += ms;
  }
  loss = pp_sum(t, dp_sum(t, loss)), mask = dp_sum(t, mask);
  set_seqlen(t, train_seqlen);
  return loss / (mask > 0 ? mask : 1);
}

/* ------------------------------------------------------------------ tensorboard */

static double lr_now(const trainer *t) { return rate_now(t, 0); }

/* A Megatron scalar at this iteration and its "vs samples" twin (x: consumed
 * training samples). */
static void tb_pair(trainer *t, const char *tag, double v) {
  char err[1024], vs[128];
  snprintf(vs, sizeof vs, "%s vs samples", tag);
  if (td_tb_scalar(t->tb, tag, v, t->iteration, err, sizeof err) ||
      td_tb_scalar(t->tb, vs, v, t->consumed_train, err, sizeof err))
    td_fail("--tensorboard-dir: %s", err);
}

static void tb_flush(trainer *t) {
  char err[1024];
  if (t->tb && td_tb_flush(t->tb, err, sizeof err)) td_fail("--tensorboard-dir: %s", err);
}

/* --log-optimizer-states-to-tensorboard (Megatron-DeepSpeed's training_log):
 * sums [0..7] = squares of v, sqrt(v), m, w, then L1 of the same; max [0..3] =
 * max |v|, sqrt(v), |m|, |w|. Each element counted once, as model_sum: TP rank 0
 * takes the replicated tensors, later stages skip the tied embedding copy; each
 * rank reads only its ZeRO shard of the Adam state. */
typedef struct {
  double sum[8], max[4];
} opt_stats;

static void opt_stats_add(opt_stats *s, float v, float m, float w) {
  double x[4] = {fabs((double)v), sqrt(fabs((double)v)), fabs((double)m), fabs((double)w)};
  for (int k = 0; k < 4; k++) {
    s->sum[k] += x[k] * x[k], s->sum[4 + k] += x[k];
    if (x[k] > s->max[k]) s->max[k] = x[k];
  }
}

/* A run of this rank's AdamW (state, parameters), through host copies. */
static void opt_stats_run(trainer *t, const td_adam_run *r, opt_stats *s) {
  const td_device_ops *ops = t->dev->ops;
  enum { CHUNK = 4096 };
  float v[CHUNK], m[CHUNK], w[CHUNK];
  const float *params = td_zero_param_base(t->zero) + r->param_offset;
  for (int64_t i = 0; i < r->numel; i += CHUNK) {
    int64_t n = r->numel - i < CHUNK ? r->numel - i : CHUNK;
    td_adamw_read_state(&t->opt, 1, r->state_offset + i, n, v);
    td_adamw_read_state(&t->opt, 0, r->state_offset + i, n, m);
    ops->copy_d2h(t->dev, w, params + i, (size_t)n * sizeof(float));
    for (int64_t j = 0; j < n; j++) opt_stats_add(s, v[j], m[j], w[j]);
  }
}

/* Every rank at the TensorBoard interval (collectives); the logging rank writes. */
static void tb_optimizer_states(trainer *t) {
  const td_layout *l = &t->topo.layout;
  if (!t->a->log_optimizer_states_to_tensorboard || t->iteration % t->a->tensorboard_log_interval) return;
  opt_stats s = {0};
  int n;
  const int *tensor;
  const td_adam_run *runs = td_zero_runs(t->zero, &tensor, &n);
  for (int k = 0; k < n; k++)
    if (t->counted[tensor[k]]) opt_stats_run(t, &runs[k], &s);
  td_comm *groups[2] = {l->tp > 1 || l->pp > 1 ? t->topo.group[TD_GROUP_MP] : NULL,
                        t->zero_stage ? t->topo.group[TD_GROUP_DP] : NULL};
  for (int g = 0; g < 2; g++)
    if (groups[g]) {
      td_comm_all_reduce(groups[g], s.sum, s.sum, 8, TD_F64, TD_OP_SUM);
      td_comm_all_reduce(groups[g], s.max, s.max, 4, TD_F64, TD_OP_MAX);
    }
  if (!t->tb) return;
  static const char *names[12] = {"variance_l2", "variance_sqrt_l2", "momentum_l2", "weight_l2",
                                  "variance_l1", "variance_sqrt_l1", "momentum_l1", "weight_l1",
                                  "variance_abs_max", "variance_sqrt_abs_max", "momentum_abs_max",
                                  "weight_abs_max"};
  int64_t tokens = t->consumed_tokens;
  char err[1024], tag[96];
  for (int k = 0; k < 12; k++) {
    double x = k < 4 ? sqrt(s.sum[k]) : k < 8 ? s.sum[k] : s.max[k - 8];
    int rc = 0;
    snprintf(tag, sizeof tag, "optimizer/%s vs tokens", names[k]);
    rc |= td_tb_scalar(t->tb, tag, x, tokens, err, sizeof err);
    snprintf(tag, sizeof tag, "optimizer/%s", names[k]);
    rc |= td_tb_scalar(t->tb, tag, x, t->iteration, err, sizeof err);
    if (rc) td_fail("--tensorboard-dir: %s", err);
  }
}

/* Every --tensorboard-log-interval iterations, as Megatron's training_log. */
static void tb_iteration(trainer *t, const step_result *r) {
  const td_args *a = t->a;
  if (!t->tb || t->iteration % a->tensorboard_log_interval) return;
  tb_pair(t, "learning-rate", lr_now(t));
  tb_pair(t, "batch-size", (double)t->cur_batch);
  tb_pair(t, "lm loss", r->lm_loss);
  if (!a->no_log_loss_scale_to_tensorboard) tb_pair(t, "loss-scale", t->scaler.scale);
  if (a->log_world_size_to_tensorboard) tb_pair(t, "world-size", t->topo.layout.world);
  if (a->clip_grad > 0 && !r->skipped) tb_pair(t, "grad-norm", r->grad_norm);
  if (r->num_zeros >= 0) tb_pair(t, "num-zeros", r->num_zeros);
  if (r->params_norm >= 0) tb_pair(t, "params-norm", r->params_norm);
}

/* At a log line, with --log-timers-to-tensorboard: seconds per iteration, each
 * timer's slowest rank (NAME-time), and TFLOP/s per rank with --log-throughput. */
static void tb_timers(trainer *t, double seconds_per_iter, double flops_per_iter,
                      const td_timer_stats *s) {
  char err[1024], tag[96];
  if (!t->tb || !t->a->log_timers_to_tensorboard) return;
  int rc = td_tb_scalar(t->tb, "iteration-time", seconds_per_iter, t->iteration, err, sizeof err);
  if (t->a->log_throughput)
    rc |= td_tb_scalar(t->tb, "throughput",
                       flops_per_iter / (seconds_per_iter * 1e12 * t->topo.layout.world),
                       t->iteration, err, sizeof err);
  for (int i = 0; i < TD_TIMERS && !rc; i++) {
    if (!s->ran[i]) continue;
    snprintf(tag, sizeof tag, "%s-time", td_timer_name((td_timer_id)i));
    rc |= td_tb_scalar(t->tb, tag, s->max[i], t->iteration, err, sizeof err);
  }
  if (rc) td_fail("--tensorboard-dir: %s", err);
}

static void print_validation(trainer *t, const char *prefix, int split, int64_t *consumed) {
  char buf[1024];
  if (!t->a->mock_data && !t->split[split]) return; /* no such split (e.g. --split 100,0,0) */
  double loss = evaluate(t, split, consumed);
  td_format_validation(buf, sizeof buf, prefix, loss);
  if (!t->is_logger) return;
  /* Megatron's evaluate_and_print_results; not with --skip-train (its write_to_tensorboard) */
  if (t->tb && split == SPLIT_VALID && !t->a->skip_train) {
    tb_pair(t, "lm loss validation", loss);
    if (t->a->log_validation_ppl_to_tensorboard)
      tb_pair(t, "lm loss validation ppl", exp(fmin(20.0, loss)));
    tb_flush(t);
  }
  fputs(buf, stdout);
  fflush(stdout);
}

/* ------------------------------------------------------------------ checkpoint */

static char *state_json(const trainer *t) {
  cJSON *s = cJSON_CreateObject();
  cJSON *args = td_args_to_json(t->a);
  td_gpt_config_to_args(&t->cfg, t->true_vocab, args); /* padded and true vocabulary */
  cJSON_AddItemToObject(s, "args", args);
  cJSON_AddNumberToObject(s, "iteration", (double)t->iteration);
  cJSON_AddNumberToObject(s, "consumed_train_samples", (double)t->consumed_train);
  cJSON_AddNumberToObject(s, "consumed_valid_samples", (double)t->consumed_valid);
  cJSON_AddNumberToObject(s, "consumed_train_tokens", (double)t->consumed_tokens);
  cJSON_AddNumberToObject(s, "optimizer_step", (double)t->opt.step);
  cJSON_AddNumberToObject(s, "lr_scheduler_num_steps", (double)t->lr_steps);
  cJSON_AddNumberToObject(s, "lr_scheduler_num_tokens", (double)t->lr_tokens);
  if (t->lr.has_warmup_tokens)
    cJSON_AddNumberToObject(s, "lr_scheduler_warmup_tokens", t->lr.warmup_tokens);
  cJSON *ls = cJSON_AddObjectToObject(s, "loss_scaler");
  cJSON_AddNumberToObject(ls, "scale", t->scaler.scale);
  cJSON_AddNumberToObject(ls, "growth_tracker", t->scaler.growth_tracker);
  cJSON_AddNumberToObject(ls, "hysteresis_tracker", t->scaler.hysteresis_tracker);
  char *text = cJSON_PrintUnformatted(s);
  cJSON_Delete(s);
  return text;
}

/* Every data-parallel replica holds the same state, so the TP ranks of DP rank 0
 * write it: rank 0 prepares the directory, each writes its shard (mp_rank_RR),
 * rank 0 commits (metadata.json, rename, latest file). A failure on any rank
 * aborts the job, leaving the previous checkpoint and latest file intact. */
/* ZeRO: buffers k (parameters 0, m 1, v 2) that are not whole here gathered on
 * DP rank 0 into full[k], host memory, which the checkpoint views then point at
 * (NULL elsewhere, and for the buffers that are whole). Collective over DP. No
 * model-sized device buffer: the device may have room for its shards only. */
static void gather_whole(trainer *t, int with_optim, float *full[3]) {
  size_t bytes = (size_t)td_gpt_flat_numel(t->model) * sizeof(float);
  for (int k = 0; k < 3; k++) {
    full[k] = NULL;
    if (whole_here(t, k) || (k && !with_optim)) continue;
    if (t->dp_rank == 0) full[k] = td_malloc(bytes);
    td_zero_gather_full(t->zero, &t->opt, k, full[k]);
    if (t->dp_rank == 0) point_views(t, k, full[k], 1);
  }
}

/* --save-retain-interval: the checkpoint of iteration it, superseded by the one
 * just committed, removed as Megatron does (not a symbolic link; a failure only
 * said). */
static void prune(const char *dir, int64_t it) {
  char path[4096], err[512];
  snprintf(path, sizeof path, "%s/iter_%07lld", dir, (long long)it);
  struct stat st;
  if (!lstat(path, &st) && S_ISLNK(st.st_mode))
    printf("  skipping deleting checkpoint from iteration %7lld at %s since it is a symbolic "
           "link\n", (long long)it, dir);
  else if (td_remove_tree(path, err, sizeof err))
    printf("  encountered exception \"%s\" when trying to delete checkpoint from iteration %7lld "
           "at %s\n", err, (long long)it, dir);
  else
    printf("  successfully deleted checkpoint from iteration %7lld at %s\n", (long long)it, dir);
}

static void save_checkpoint(trainer *t) {
  const td_args *a = t->a;
  td_zero_sync_params(t->zero); /* the views read the flat parameters */
  /* Never a NaN checkpoint over a good one: weights an update overflowed (a
   * divergent run) are refused, at the price of one pass over the parameters. */
  if (!isfinite(model_sum(t, TD_ZERO_PARAMS, 1)))
    td_fail("iteration %lld: the parameters hold NaN or Inf values (the run diverged); "
            "not saving them to %s, whose latest checkpoint stays as it was",
            (long long)t->iteration, a->save);
  char *state = state_json(t), rng[128], err[1024];
  snprintf(rng, sizeof rng, "{\"seed\": %llu, \"iteration\": %lld}", (unsigned long long)t->seed,
           (long long)t->iteration);
  td_ckpt_contents c = {.iteration = t->iteration, .params = t->ck_params,
                        .n_params = td_gpt_num_tensors(t->model),
                        .exp_avg = a->no_save_optim ? NULL : t->ck_m,
                        .exp_avg_sq = a->no_save_optim ? NULL : t->ck_v, .state_json = state,
                        .rng_json = a->no_save_rng ? NULL : rng,
                        .tp_rank = t->topo.coord.tp, .tp_size = t->topo.layout.tp,
                        .pp_rank = t->topo.coord.pp, .pp_size = t->topo.layout.pp};
  double t0 = td_now_seconds();
  const char *dir = a->save;
  int rc = 0;
  int64_t prev = t->is_logger && a->save_retain_interval != TD_UNSET
                     ? td_checkpoint_latest(dir, err, sizeof err)
                     : -1; /* the latest before this save (-1: none or unreadable) */
  float *full[3]; /* ZeRO: whole buffers gathered on DP rank 0 */
  gather_whole(t, !a->no_save_optim, full);
  if (t->is_logger) rc = td_checkpoint_save_prepare(dir, t->iteration, err, sizeof err);
  if (!rc) td_comm_barrier(t->topo.world);
  if (!rc && t->dp_rank == 0) rc = td_checkpoint_save_shard(t->dev, dir, &c, err, sizeof err);
  if (!rc) td_comm_barrier(t->topo.world);
  if (!rc && t->is_logger) rc = td_checkpoint_save_commit(dir, &c, err, sizeof err);
  if (rc && t->is_logger) td_checkpoint_save_abort(dir, t->iteration); /* no half-written dir left */
  if (rc) td_fail("saving checkpoint at iteration %lld: %s", (long long)t->iteration, err);
  free(state);
  for (int k = 0; k < 3; k++)
    td_free(full[k]);
  if (t->is_logger) {
    printf("  successfully saved checkpoint at iteration %7lld to %s [ t %.3fs ]\n",
           (long long)t->iteration, dir, td_now_seconds() - t0);
    if (prev > 0 && prev != t->iteration && prev % a->save_retain_interval) prune(dir, prev);
    fflush(stdout);
  }
  td_comm_barrier(t->topo.world);
}

/* A counter of the saved state (file: its metadata.json, for the message): an
 * integer from lo to hi, or the run stops (a wrong one would resume silently
 * at the wrong place). */
static int64_t state_int(const cJSON *o, const char *key, const char *field, const char *file,
                         int64_t lo, int64_t hi) {
  char err[1024];
  int64_t v;
  if (td_ckpt_json_int(o, key, file, field, lo, hi, &v, err, sizeof err)) td_fail("--load: %s", err);
  return v;
}

/* Megatron-DeepSpeed's token counts (absent from older checkpoints: then every
 * sample counted whole, and the LR schedule's tokens those before the last step,
 * as if the batch never changed); the curriculum replayed to the iteration. */
static void restore_token_state(trainer *t, const cJSON *s, const char *file) {
  const int64_t big = TD_CKPT_MAX_INT;
  if (cJSON_GetObjectItemCaseSensitive(s, "consumed_train_tokens"))
    t->consumed_tokens = state_int(s, "consumed_train_tokens", "state.consumed_train_tokens", file, 0, big);
  else
    t->consumed_tokens = t->consumed_train * t->a->seq_length;
  if (t->curriculum.enabled) td_curriculum_replay(&t->curriculum, t->iteration);
  if (cJSON_GetObjectItemCaseSensitive(s, "lr_scheduler_num_tokens"))
    t->lr_tokens = state_int(s, "lr_scheduler_num_tokens", "state.lr_scheduler_num_tokens", file, 0, big);
  else
    t->lr_tokens = (t->consumed_train - t->a->global_batch_size > 0
                        ? t->consumed_train - t->a->global_batch_size : 0) * t->a->seq_length;
  if (cJSON_GetObjectItemCaseSensitive(s, "lr_scheduler_warmup_tokens")) {
    t->lr.warmup_tokens = (double)state_int(s, "lr_scheduler_warmup_tokens",
                                            "state.lr_scheduler_warmup_tokens", file, 0, big);
    t->lr.has_warmup_tokens = 1;
  }
}

/* Restore the trainer state saved by state_json (the optimizer step only with
 * the optimizer state) of iteration `it`, every field checked. */
static void restore_state(trainer *t, const char *text, const char *dir, int64_t it, int with_optim) {
  char file[4096], err[1024];
  td_checkpoint_path(file, sizeof file, dir, it, "metadata.json");
  cJSON *s = cJSON_Parse(text);
  if (!cJSON_IsObject(s)) td_fail("--load: %s: \"state\" is not a JSON object", file);
  const int64_t big = TD_CKPT_MAX_INT;
  t->iteration = state_int(s, "iteration", "state.iteration", file, 0, big);
  if (t->iteration != it)
    td_fail("--load: %s: state.iteration is %lld but this is iteration %lld's checkpoint (the "
            "checkpoint is damaged)", file, (long long)t->iteration, (long long)it);
  t->consumed_train = state_int(s, "consumed_train_samples", "state.consumed_train_samples", file, 0, big);
  t->consumed_valid = state_int(s, "consumed_valid_samples", "state.consumed_valid_samples", file, 0, big);
  t->lr_steps = state_int(s, "lr_scheduler_num_steps", "state.lr_scheduler_num_steps", file, 0, big);
  restore_token_state(t, s, file);
  if (with_optim) t->opt.step = state_int(s, "optimizer_step", "state.optimizer_step", file, 0, big);
  const cJSON *ls = cJSON_GetObjectItemCaseSensitive(s, "loss_scaler");
  if (cJSON_IsObject(ls) && t->scaler.dynamic) {
    double scale;
    if (td_ckpt_json_number(ls, "scale", file, "state.loss_scaler.scale", FLT_MIN, FLT_MAX, &scale,
                            err, sizeof err))
      td_fail("--load: %s", err);
    t->scaler.scale = (float)scale;
    t->scaler.growth_tracker =
        (int)state_int(ls, "growth_tracker", "state.loss_scaler.growth_tracker", file, 0, INT_MAX);
    t->scaler.hysteresis_tracker = (int)state_int(
        ls, "hysteresis_tracker", "state.loss_scaler.hysteresis_tracker", file, INT_MIN, INT_MAX);
  }
  cJSON_Delete(s);
}

/* The dropout streams continue from the checkpoint's seed (rng_dp000.json; the
 * counter is the iteration, restored with the state). A converted checkpoint
 * has an empty RNG state: --seed then stands. */
static void restore_rng(trainer *t, const char *dir, int64_t it) {
  char err[1024];
  char *text = td_checkpoint_read_rng(dir, it, err, sizeof err);
  if (!text) td_fail("--load %s: %s (or pass --no-load-rng)", dir, err);
  cJSON *r = cJSON_Parse(text);
  td_free(text);
  const cJSON *seed = cJSON_GetObjectItemCaseSensitive(r, "seed");
  if (cJSON_IsNumber(seed)) t->seed = (uint64_t)seed->valuedouble;
  cJSON_Delete(r);
}

/* The checkpoint's model (its args) must be this run's: a flag that keeps every
 * shape (heads, GELU, epsilon) would otherwise load into a different model. */
static void check_model_args(trainer *t, int64_t it) {
  char err[1024], *state = NULL;
  td_ckpt_contents probe = {.iteration = it}; /* no tensors: the state only */
  if (td_checkpoint_load(t->dev, t->a->load, it, &probe, &state, err, sizeof err))
    td_fail("--load %s: %s", t->a->load, err);
  cJSON *s = cJSON_Parse(state);
  td_free(state);
  int rc = td_gpt_config_check_args(&t->cfg, cJSON_GetObjectItemCaseSensitive(s, "args"), err,
                                    sizeof err);
  cJSON_Delete(s);
  if (rc) td_fail("--load %s: %s", t->a->load, err);
}

static void load_checkpoint(trainer *t) {
  const td_args *a = t->a;
  char err[1024];
  int64_t it = td_checkpoint_latest(a->load, err, sizeof err);
  if (it == -2) td_fail("--load %s: %s", a->load, err);
  if (it == -1 && a->exit_on_missing_checkpoint)
    td_fail("--load %s: no latest_checkpointed_iteration.txt there, and --exit-on-missing-checkpoint "
            "was given", a->load);
  if (it == -1) {
    if (t->is_logger)
      printf("WARNING: could not find the metadata file %s/latest_checkpointed_iteration.txt\n"
           "    will not load any checkpoints and will start from random\n", a->load);
    return;
  }
  check_model_args(t, it);
  int has_optim = td_checkpoint_has_optimizer_state(a->load, it);
  int with_optim = !a->no_load_optim && !a->finetune && has_optim;
  if (!has_optim && !a->no_load_optim && !a->finetune && t->is_logger)
    printf("  checkpoint %s has no optimizer state (saved with --no-save-optim, or made by "
           "trident convert): loading the parameters and starting a fresh optimizer\n", a->load);
  td_ckpt_contents c = {.iteration = it, .params = t->ck_params,
                        .n_params = td_gpt_num_tensors(t->model),
                        .exp_avg = with_optim ? t->ck_m : NULL,
                        .exp_avg_sq = with_optim ? t->ck_v : NULL};
  char *state = NULL;
  /* ZeRO: the buffers not whole here are read whole by DP rank 0 only (host
   * memory), which hands every rank its pieces; the others read the rest */
  float *full[3] = {NULL, NULL, NULL};
  int from_root[3] = {0, 0, 0};
  size_t bytes = (size_t)td_gpt_flat_numel(t->model) * sizeof(float);
  for (int k = 0; k < 3; k++)
    if (!whole_here(t, k) && (k == 0 || with_optim)) {
      from_root[k] = 1;
      if (t->dp_rank != 0) continue;
      full[k] = td_calloc(bytes); /* zeroed: the gaps between tensors */
      point_views(t, k, full[k], 1);
    }
  if (t->dp_rank != 0) {
    if (from_root[1]) c.exp_avg = c.exp_avg_sq = NULL;
    if (from_root[0]) c.n_params = 0, c.exp_avg = c.exp_avg_sq = NULL; /* stage 3: the state only */
  }
  if (td_checkpoint_load(t->dev, a->load, it, &c, &state, err, sizeof err))
    td_fail("--load %s: %s", a->load, err);
  for (int k = 0; k < 3; k++)
    if (from_root[k]) {
      td_zero_scatter_full(t->zero, &t->opt, k, full[k]);
      td_free(full[k]);
    }
  if (!a->finetune) restore_state(t, state, a->load, it, with_optim);
  if (!a->finetune && !a->no_load_rng) restore_rng(t, a->load, it);
  td_free(state);
  td_zero_params_changed(t->zero);
  if (!t->is_logger) return;
  printf("  successfully loaded checkpoint from %s [ t %d/%d, p %d/%d ] at iteration %lld\n", a->load,
         t->topo.coord.tp + 1, t->topo.layout.tp, t->topo.coord.pp + 1, t->topo.layout.pp,
         (long long)(a->finetune ? 0 : t->iteration));
  fflush(stdout);
}

/* ------------------------------------------------------------------ loop */

/* Seconds in TP collectives since the last call, over every activation arena. */
static double take_tp_comm_seconds(trainer *t) {
  double s = 0;
  s += td_pipeline_take_tp_seconds(&t->pipe);
  return s;
}

/* Megatron's report_memory after the first logged iteration, on each rank of
 * DP rank 0: device bytes allocated now and at the peak, and the process's
 * peak resident memory. */
static void report_memory(trainer *t) {
  static int reported;
  if (reported || t->dp_rank != 0) return;
  reported = 1;
  size_t now = 0, peak = 0;
  char dev[96] = "";
  if (t->dev->ops->memory_stats) {
    t->dev->ops->memory_stats(t->dev, &now, &peak);
    snprintf(dev, sizeof dev, " | allocated: %.1f | max allocated: %.1f", now / 1048576.0,
             peak / 1048576.0);
  }
  printf("[Rank %d] (after %lld iterations) memory (MB)%s | max resident: %.1f | max virtual: "
         "%.1f\n",
         td_comm_rank(td_comm_world()), (long long)t->iteration, dev,
         td_memory_self_bytes("VmHWM") / 1048576.0, td_memory_self_bytes("VmPeak") / 1048576.0);
  fflush(stdout);
}

static void log_line(trainer *t, td_log_interval *w, double seconds, const step_result *r) {
  const td_args *a = t->a;
  time_t now = time(NULL);
  td_train_log l = {.iteration = t->iteration, .train_iters = a->train_iters,
                    .consumed_samples = t->consumed_train, .global_batch_size = t->cur_batch,
                    .interval_seconds = seconds, .log_throughput = a->log_throughput,
                    .flops_per_iteration = td_gpt_flops_per_iteration(
                        t->cur_batch, a->seq_length, a->num_layers, a->hidden_size,
                        a->ffn_hidden_size, t->cfg.vocab_size),
                    .world_size = t->topo.layout.world, .learning_rate = lr_now(t),
                    .has_decoupled_lr = t->decoupled, .decoupled_learning_rate = rate_now(t, 1),
                    .loss_scale = t->scaler.scale, .has_grad_norm = a->clip_grad > 0 && !r->skipped,
                    .grad_norm = r->grad_norm, .has_num_zeros = r->num_zeros >= 0,
                    .num_zeros = r->num_zeros, .has_params_norm = r->params_norm >= 0,
                    .params_norm = r->params_norm, .deepspeed = a->deepspeed,
                    .has_loss_scale = !a->ds || td_ds_config_logs_loss_scale(a->ds, t->zero_stage),
                    .consumed_tokens = t->consumed_tokens, .seq_length = t->seqlen,
                    .curriculum = t->curriculum.enabled, .curriculum_seqlen = t->curriculum.current,
                    .mds_flops_per_iteration = td_mds_flops_per_iteration(
                        t->cur_batch, t->seqlen, a->num_layers, a->hidden_size,
                        a->ffn_hidden_size, t->cfg.vocab_size,
                        a->recompute_granularity == TD_GRANULARITY_FULL,
                        a->recompute_granularity == TD_GRANULARITY_SELECTIVE)};
  localtime_r(&now, &l.when);
  char buf[1024];
  td_format_train_log(buf, sizeof buf, &l, w);
  double iters = (double)(w->advanced + w->skipped), tp_s = take_tp_comm_seconds(t);
  double dp_s = td_zero_take_comm_seconds(t->zero);
  char timers[2048];
  td_timer_stats stats;
  td_timers_collect(&t->timers, t->topo.world, iters, &stats);
  td_timers_format(&stats, timers, sizeof timers);
  if (t->is_logger) {
    tb_timers(t, seconds / iters, l.flops_per_iteration, &stats);
    tb_flush(t);
    puts(buf);
    if (t->dp_size > 1)
      printf("  data-parallel gradient reduction not hidden behind backward: %.1f ms per iteration "
             "(%.1f%% of the iteration)\n",
             1e3 * dp_s / iters, 100 * dp_s / seconds);
    if (t->topo.layout.tp > 1)
      printf("  tensor-parallel communication: %.1f ms per iteration (%.1f%% of the iteration)\n",
             1e3 * tp_s / iters, 100 * tp_s / seconds);
    if (timers[0]) puts(timers);
    fflush(stdout);
  }
  *w = (td_log_interval){0};
}

/* --exit-signal-handler: SIGTERM (a scheduler's notice) is noted here and acted
 * on at the end of the iteration. */
static volatile sig_atomic_t g_sigterm;
static void on_sigterm(int sig) { (void)sig, g_sigterm = 1; }

static void catch_sigterm(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigterm;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, NULL);
}

/* Whether to stop after this iteration, as Megatron's train loop checks:
 * SIGTERM received on any rank (--exit-signal-handler), or training has run
 * --exit-duration-in-mins on the slowest rank. Every rank takes the same
 * decision (one all-reduce); why says which. */
static int should_exit(trainer *t, double start, char *why, size_t n) {
  const td_args *a = t->a;
  if (!a->exit_signal_handler && isnan(a->exit_duration_in_mins)) return 0;
  double v[2] = {a->exit_signal_handler && g_sigterm ? 1.0 : 0.0, (td_now_seconds() - start) / 60};
  td_comm_all_reduce(t->topo.world, v, v, 2, TD_F64, TD_OP_MAX);
  if (v[0] > 0) {
    snprintf(why, n, "after receiving SIGTERM");
    return 1;
  }
  if (!isnan(a->exit_duration_in_mins) && v[1] > a->exit_duration_in_mins) {
    snprintf(why, n, "after %.3f minutes", v[1]);
    return 1;
  }
  return 0;
}

/* Megatron-DeepSpeed's --train-tokens: the loop also ends once that many
 * tokens (samples x seq-length) are consumed. */
static int tokens_reached(const trainer *t) {
  const td_args *a = t->a;
  return a->train_tokens != TD_UNSET && t->consumed_tokens >= a->train_tokens;
}

/* This iteration's global batch: Megatron's update_num_microbatches(consumed). */
static void set_batch(trainer *t) {
  const td_args *a = t->a;
  t->cur_batch = td_args_global_batch_at(a, t->consumed_train);
  t->cur_micro = t->cur_batch / (a->micro_batch_size * a->data_parallel_size);
}

/* The validation and test sets after training (or instead of it, --skip-train),
 * as Megatron's pretrain ends. */
static void final_evaluation(trainer *t) {
  if (t->a->eval_iters <= 0) return;
  char prefix[96];
  int64_t consumed_test = 0;
  snprintf(prefix, sizeof prefix, "iteration %lld on validation set", (long long)t->iteration);
  print_validation(t, prefix, SPLIT_VALID, &t->consumed_valid);
  snprintf(prefix, sizeof prefix, "iteration %lld on test set", (long long)t->iteration);
  print_validation(t, prefix, SPLIT_TEST, &consumed_test);
}

static void train_loop(trainer *t) {
  const td_args *a = t->a;
  if (a->skip_train) {
    if (t->is_logger) printf("skipping training (--skip-train is on) ...\n");
    final_evaluation(t);
    return;
  }
  td_log_interval w = {0};
  double interval_start = td_now_seconds(), start = interval_start;
  char why[64];
  if (a->exit_signal_handler) catch_sigterm();
  int saved_last = 0;
  while (t->iteration < a->train_iters && !tokens_reached(t)) {
    set_batch(t);
    curriculum_step(t);
    step_result r = train_step(t);
    t->iteration++;
    t->consumed_train += t->cur_batch;
    t->consumed_tokens += t->cur_batch * t->seqlen;
    td_log_interval_add(&w, r.lm_loss, r.skipped);
    tb_iteration(t, &r);
    tb_optimizer_states(t);
    saved_last = 0;
    if (t->iteration % a->log_interval == 0) {
      log_line(t, &w, td_now_seconds() - interval_start, &r);
      report_memory(t);
      interval_start = td_now_seconds();
    }
    if (a->eval_interval > 0 && a->eval_iters > 0 && t->iteration % a->eval_interval == 0) {
      char prefix[64];
      snprintf(prefix, sizeof prefix, "iteration %lld", (long long)t->iteration);
      print_validation(t, prefix, SPLIT_VALID, &t->consumed_valid);
      interval_start = td_now_seconds(); /* evaluation is not training time */
      take_tp_comm_seconds(t);
    }
    if (a->save && a->save_interval > 0 && t->iteration % a->save_interval == 0) {
      save_checkpoint(t);
      saved_last = 1;
      interval_start = td_now_seconds();
    }
    if (should_exit(t, start, why, sizeof why)) {
      if (a->save && !saved_last) save_checkpoint(t);
      if (t->is_logger) printf("exiting program %s, at iteration %lld\n", why, (long long)t->iteration);
      return;
    }
    if (a->exit_interval > 0 && t->iteration % a->exit_interval == 0) {
      if (a->save && !saved_last) save_checkpoint(t);
      if (t->is_logger) printf("exiting program at iteration %lld\n", (long long)t->iteration);
      return;
    }
  }
  if (a->save && !saved_last && t->iteration > 0) save_checkpoint(t);
  final_evaluation(t);
}

static void trainer_free(trainer *t) {
  tb_flush(t);
  td_pipeline_free(&t->pipe);
  td_tb_close(t->tb);
  td_free(t->counted);
  for (int s = 0; s < 3; s++) td_mock_data_free(&t->mock[s]);
  td_gpt_datasets_close(t->datasets);
  td_free(t->tokens), td_free(t->targets), td_free(t->sample), td_free(t->mask);
  td_free(t->ck_params), td_free(t->ck_m), td_free(t->ck_v), td_free(t->ck_names);
  td_adamw_free(&t->opt);
  td_zero_free(t->zero);
  td_gpt_destroy(t->model);
  td_dcomm_release(t->dev);
  td_device_close(t->dev);
  td_topology_free(&t->topo);
}

/* This rank's part of the model: its TP slice, sequence parallelism,
 * recomputation, and (ZeRO) flat buffers that split into equal DP shards. */
static td_gpt_layout model_layout(const trainer *t) {
  const td_args *a = t->a;
  td_gpt_layout lay = td_gpt_layout_single(&t->cfg);
  lay.tp_size = t->topo.layout.tp, lay.tp_rank = t->topo.coord.tp;
  lay.tp_comm = t->topo.group[TD_GROUP_TP];
  lay.sequence_parallel = (int)a->sequence_parallel;
  int pp = t->topo.layout.pp, stage = t->topo.coord.pp; /* equal layer ranges per stage */
  lay.layer_begin = t->cfg.num_layers / pp * stage;
  lay.layer_end = t->cfg.num_layers / pp * (stage + 1);
  lay.has_embedding = stage == 0, lay.has_head = stage == pp - 1;
  if (a->recompute_granularity == TD_GRANULARITY_FULL) {
    lay.recompute = a->recompute_method == 0 ? TD_RECOMPUTE_UNIFORM : TD_RECOMPUTE_BLOCK;
    lay.recompute_num_layers = a->recompute_num_layers;
  }
  lay.unit_multiple = td_zero_unit_multiple(t->dp_size); /* equal, 64-byte aligned pieces */
  lay.no_flat_grads = t->zero_stage >= 2, lay.no_flat_params = t->zero_stage == 3;
  lay.logits_chunk = logits_chunk(t);
  lay.no_gelu_fusion = a->no_bias_gelu_fusion, lay.no_residual_fusion = a->no_bias_dropout_fusion;
  return lay;
}

int td_train(td_args *a) {
  trainer t = {.a = a, .seed = (uint64_t)a->seed};
  t.compute = a->bf16 ? TD_BF16 : a->fp16 ? TD_F16 : TD_F32;
  if (a->reset_position_ids || a->reset_attention_mask)
    td_fail("--reset-position-ids / --reset-attention-mask are not supported by trident's GPT yet");
  t.true_vocab = tokenizer_vocab(a, &t.eod);
  t.cfg = model_config(a, td_args_padded_vocab_size(a, t.true_vocab));
  setup_topology(&t);
  t.dev = td_device_open_index(td_args_device(a), td_comm_local_rank());
  td_dcomm_setup(td_comm_world(), t.dev, a->distributed_backend == 0, t.collectives,
                 sizeof t.collectives);
  /* the groups whose collectives move device memory get their library twins now,
   * before any work is in flight (the pipeline's get channels, ZeRO's copies its own) */
  td_dcomm_bind(t.topo.group[TD_GROUP_TP], t.dev);
  td_dcomm_bind(t.topo.group[TD_GROUP_DP], t.dev);
  td_dcomm_bind(t.topo.group[TD_GROUP_EMBEDDING], t.dev);
  t.zero_stage = a->zero_stage;
  if (t.zero_stage >= 2 && t.topo.layout.pp > 1)
    td_fail("--zero-stage %d with --pipeline-model-parallel-size %d: ZeRO stages 2 and 3 shard "
            "the gradients that the pipeline accumulates over its micro-batches in flight; as "
            "DeepSpeed, trident runs them without pipeline parallelism only (ZeRO-1 works with it)",
            t.zero_stage, t.topo.layout.pp);
  if (params_on_host(&t) && (!optimizer_on_host(&t) || a->optimizer_nvme_path))
    td_fail("zero_optimization.offload_param.device cpu needs offload_optimizer.device cpu too "
            "(or --cpu-optimizer): the parameters then live in host memory, where Adam updates "
            "them");
  if (a->offload_param && !params_on_host(&t) && t.is_logger)
    fprintf(stderr, "trident: note: zero_optimization.offload_param.device cpu: the %s device's "
                    "memory is host memory, so the parameters are there already\n",
            t.dev->ops->name);
  td_gpt_layout lay = model_layout(&t);
  char merr[2048]; /* the whole run's memory, before any of it is allocated */
  td_train_place place = {.pp_size = t.topo.layout.pp, .pp_rank = t.topo.coord.pp,
                          .dp_size = t.dp_size, .zero_stage = t.zero_stage, .dp_rank = t.dp_rank,
                          .device_is_host = td_device_has(t.dev, TD_DEVICE_HOST_RAM),
                          .optimizer_on_host = optimizer_on_host(&t),
                          .ranks_on_device = td_comm_same_on_host(td_comm_world(),
                                                                  (int64_t)td_device_key(t.dev)),
                          .params_on_host = params_on_host(&t)};
  char dev_name[256];
  if (!place.device_is_host && t.dev->ops->memory_info) {
    size_t free_b, total_b;
    t.dev->ops->memory_info(t.dev, &free_b, &total_b);
    td_device_describe(t.dev, dev_name, sizeof dev_name);
    place.device_free = free_b, place.device_total = total_b, place.device_name = dev_name;
  }
  if (td_train_check_memory(a, &t.cfg, &lay, t.compute, &place, td_comm_local_size(), merr, sizeof merr))
    td_fail("%s", merr);
  t.model = td_gpt_create(t.dev, &t.cfg, &lay, a->micro_batch_size, t.compute);
  td_timers_init(&t.timers, a->timing_log_level, t.dev);
  setup_zero_and_pipeline(&t);
  td_zero_init_params(t.zero, (uint64_t)a->seed);
  setup_counted(&t);
  td_args_lr_schedule(a, &t.lr); /* before the optimizer: its runs take the groups */
  if ((t.decoupled = !isnan(a->decoupled_lr))) {
    td_lr_schedule d;
    td_args_decoupled_lr_schedule(a, &d);
    t.dec_max_lr = d.max_lr, t.dec_min_lr = d.min_lr;
  }
  setup_optimizer(&t);
  setup_checkpoint_views(&t);
  td_args_wd_schedule(a, &t.wd);
  td_args_loss_scaler(a, &t.scaler);
  setup_curriculum(&t);
  setup_data(&t);
  size_t n = (size_t)(a->global_batch_size * a->seq_length);
  t.tokens = td_malloc(n * sizeof(int32_t)), t.targets = td_malloc(n * sizeof(int32_t));
  t.mask = td_malloc(n * sizeof(float)), t.sample = td_malloc((size_t)(a->seq_length + 1) * 4);
  print_summary(&t);
  if (a->tensorboard_dir && t.is_logger) {
    char err[1024];
    if (!(t.tb = td_tb_open(a->tensorboard_dir, err, sizeof err)))
      td_fail("--tensorboard-dir: %s", err);
  }
  if (a->load) load_checkpoint(&t);
  train_loop(&t);
  print_waits(&t);
  trainer_free(&t);
  return 0;
}
