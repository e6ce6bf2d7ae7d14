#include "train/ds_config.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/error.h"
#include "base/files.h"
#include "base/mem.h"
#include "base/spelling.h"

/* ------------------------------------------------------------------ the schema */

typedef enum {
  J_BOOL,   /* int */
  J_INT,    /* int64_t */
  J_NUM,    /* double */
  J_STR,    /* char * (owned) */
  J_CHOICE, /* int: index into choices (matched without case, as DeepSpeed's optimizer names) */
  J_BATCH,  /* int64_t: a positive integer or "auto" (TD_DS_AUTO) */
  J_BETAS,  /* double[2] */
  J_INTS,   /* td_ds_ints: a list of integers in the key's range */
  J_OBJ,    /* int: 1 when present */
  J_ANY,    /* any value, no field (a list of names, ...) */
} jtype;

typedef enum { R_ANY, R_POS, R_NONNEG, R_UNIT, R_STAGE } range;

/* When a key's note or refusal applies: on presence, or on a true / false value. */
typedef enum { W_PRESENT, W_TRUE, W_FALSE } when;

typedef struct dskey {
  const char *name;
  jtype t;
  size_t at; /* offsetof(td_ds_config, field) + 1; 0: no field */
  range r;
  const char *const *choices;
  const struct dskey *sub; /* J_OBJ: its keys, ended by a NULL name */
  int open; /* J_OBJ: any other key inside is accepted (covered by the block's word) */
  when w;
  const char *note;   /* accepted, changes nothing here: said once */
  const char *refuse; /* would train something else if ignored: an error with this reason */
} dskey;

#define AT(f) .at = offsetof(td_ds_config, f) + 1
#define B(n) .name = n, .t = J_BOOL
#define I(n) .name = n, .t = J_INT
#define N(n) .name = n, .t = J_NUM
#define S(n) .name = n, .t = J_STR
#define C(n, c) .name = n, .t = J_CHOICE, .choices = c
#define O(n, s) .name = n, .t = J_OBJ, .sub = s
#define L(n) .name = n, .t = J_INTS
#define NOT_BUILT "not yet implemented in trident"
#define NOTE_Z3                                                                                    \
  "a ZeRO stage 3 tuning knob; trident's stage 3 gathers one layer at a time into three slots " \
  "and prefetches the next, so it changes nothing"
#define NOTE_HOST "the optimizer's host buffers are not pinned here (their copies are synchronous); offload_param's parameter shard always is"
#define NOTE_ALLGATHER                                                                             \
  "the parameter all-gather after the update runs one layer at a time here"
#define NOTE_MONITOR "is not built; the scalars go to stdout and to --tensorboard-dir"

static const char *const k_optimizers[] = {
    "Adam", "AdamW",  "Lamb",    "OneBitAdam", "ZeroOneAdam", "OneBitLamb", "Adagrad",
    "Lion", "MuAdam", "MuAdamW", "MuSGD",      "Muon",        NULL};
static const char *const k_schedulers[] = {"WarmupLR",    "WarmupDecayLR", "WarmupCosineLR",
                                           "LRRangeTest", "OneCycle",      NULL};
static const char *const k_warmup_types[] = {"log", "linear", NULL};
static const char *const k_devices[] = {"none", "cpu", "nvme", NULL};
static const char *const k_dtypes[] = {"fp32", "fp16", "bf16", NULL};
static const char *const k_tag_validation[] = {"Ignore", "Warn", "Fail", NULL};

// clang-format off
static const dskey k_fp16[] = {
    {B("enabled"), AT(fp16.enabled)},
    {N("loss_scale"), AT(fp16.loss_scale), .r = R_NONNEG},
    {I("initial_scale_power"), AT(fp16.initial_scale_power), .r = R_NONNEG},
    {I("loss_scale_window"), AT(fp16.loss_scale_window), .r = R_POS},
    {I("hysteresis"), AT(fp16.hysteresis), .r = R_POS},
    {B("consecutive_hysteresis"), AT(fp16.consecutive_hysteresis)},
    {N("min_loss_scale"), AT(fp16.min_loss_scale), .r = R_POS},
    {B("auto_cast"), .note = "the model casts its own inputs to the compute type"},
    {B("fp16_master_weights_and_grads"), .w = W_TRUE,
     .refuse = "fp16 master weights and gradients are " NOT_BUILT " (they are fp32 here)"},
    {0}};

static const dskey k_bf16[] = {
    {B("enabled"), AT(bf16.enabled)},
    {B("immediate_grad_update"), .note = "the update always follows the gradient reduction here"},
    {B("check_grad_overflow"),
     .note = "every step's gradient norm is checked here: a NaN or Inf stops the run "
             "(--no-check-for-nan-in-loss-and-grad skips it)"},
    {B("bf16_master_weights_and_grads"), .w = W_TRUE,
     .refuse = "bf16 master weights and gradients are " NOT_BUILT " (they are fp32 here)"},
    {B("bf16_optimizer_states"), .w = W_TRUE,
     .refuse = "bf16 optimizer states are " NOT_BUILT " (Adam's m and v are fp32 here)"},
    {0}};

static const dskey k_opt_params[] = {
    {N("lr"), AT(optimizer.lr), .r = R_NONNEG},
    {.name = "betas", .t = J_BETAS, AT(optimizer.betas)},
    {N("eps"), AT(optimizer.eps), .r = R_POS},
    {N("weight_decay"), AT(optimizer.weight_decay), .r = R_NONNEG},
    {B("adam_w_mode"), AT(optimizer.adam_w_mode)},
    {B("torch_adam"), .note = "torch's Adam(W) or DeepSpeed's fused kernel: the same update, run "
                              "here by trident's own kernel"},
    {B("bias_correction"), .w = W_FALSE, .refuse = "Adam without bias correction is " NOT_BUILT},
    {B("amsgrad"), .w = W_TRUE, .refuse = "AMSGrad is " NOT_BUILT},
    {N("max_grad_norm"), .refuse = "DeepSpeed refuses it as well: clipping is the top-level "
                                   "gradient_clipping"},
    {0}};

static const dskey k_optimizer[] = {
    {C("type", k_optimizers), AT(optimizer.type)},
    {O("params", k_opt_params), AT(optimizer.params)},
    {B("legacy_fusion"), .note = "there is one Adam kernel here"},
    {0}};

/* Every parameter of DeepSpeed's schedules; which belong to the chosen type is
 * checked after parsing (k_sched_params). */
#define NO_STAIRS "DeepSpeed's OneCycle stores the stair counts and never reads them: no stairs " \
                  "there or here"
static const dskey k_sched_params[] = {
    {N("warmup_min_lr"), AT(scheduler.warmup_min_lr), .r = R_NONNEG},
    {N("warmup_max_lr"), AT(scheduler.warmup_max_lr), .r = R_NONNEG},
    {I("warmup_num_steps"), AT(scheduler.warmup_num_steps), .r = R_POS},
    {C("warmup_type", k_warmup_types), AT(scheduler.warmup_type)},
    {I("total_num_steps"), AT(scheduler.total_num_steps), .r = R_POS},
    {N("warmup_min_ratio"), AT(scheduler.warmup_min_ratio), .r = R_UNIT},
    {N("cos_min_ratio"), AT(scheduler.cos_min_ratio), .r = R_UNIT},
    {I("last_batch_iteration"), .refuse = "the schedule's position is the checkpoint's (--load); "
                                          "starting it elsewhere is " NOT_BUILT},
    {N("lr_range_test_min_lr"), AT(scheduler.range_min_lr), .r = R_NONNEG},
    {N("lr_range_test_step_rate"), AT(scheduler.range_step_rate), .r = R_NONNEG},
    {I("lr_range_test_step_size"), AT(scheduler.range_step_size), .r = R_POS},
    {B("lr_range_test_staircase"), AT(scheduler.range_staircase)},
    {I("cycle_first_step_size"), AT(scheduler.cycle_first_step_size), .r = R_POS},
    {I("cycle_second_step_size"), AT(scheduler.cycle_second_step_size), .r = R_POS},
    {I("cycle_first_stair_count"), .r = R_NONNEG, .note = NO_STAIRS},
    {I("cycle_second_stair_count"), .r = R_NONNEG, .note = NO_STAIRS},
    {I("decay_step_size"), AT(scheduler.decay_step_size), .r = R_NONNEG},
    {N("cycle_min_lr"), AT(scheduler.cycle_min_lr), .r = R_NONNEG},
    {N("cycle_max_lr"), AT(scheduler.cycle_max_lr), .r = R_NONNEG},
    {N("decay_lr_rate"), AT(scheduler.decay_lr_rate), .r = R_NONNEG},
    {B("cycle_momentum"), AT(scheduler.cycle_momentum)},
    {N("cycle_min_mom"), AT(scheduler.cycle_min_mom), .r = R_UNIT},
    {N("cycle_max_mom"), AT(scheduler.cycle_max_mom), .r = R_UNIT},
    {N("decay_mom_rate"), AT(scheduler.decay_mom_rate), .r = R_NONNEG},
    {0}};

static const dskey k_scheduler[] = {
    {C("type", k_schedulers), AT(scheduler.type)},
    {O("params", k_sched_params), AT(scheduler.params)},
    {0}};

static const dskey k_offload_optimizer[] = {
    {C("device", k_devices), AT(zero.offload_optimizer_device)},
    {S("nvme_path"), AT(zero.offload_optimizer_nvme_path)},
    {I("buffer_count"), .r = R_POS, .note = "NVMe offload streams through three buffers"},
    {B("pin_memory"), .note = NOTE_HOST}, {B("pipeline_read")}, {B("pipeline_write")},
    {B("fast_init")}, {N("ratio"), .r = R_UNIT},
    {0}};

static const dskey k_offload_param[] = {
    {C("device", k_devices), AT(zero.offload_param_device)},
    {S("nvme_path")}, {I("buffer_count"), .r = R_POS}, {I("buffer_size"), .r = R_POS},
    {I("max_in_cpu"), .r = R_NONNEG}, {B("pin_memory"), .note = NOTE_HOST},
    {0}};

static const dskey k_zero[] = {
    {I("stage"), AT(zero.stage), .r = R_STAGE},
    {I("reduce_bucket_size"), AT(zero.reduce_bucket_size), .r = R_POS},
    {B("contiguous_gradients"),
     .note = "the gradient shard is always one contiguous buffer here"},
    {B("overlap_comm"),
     .note = "the data-parallel gradient reduction always overlaps backward here"},
    {B("reduce_scatter"),
     .note = "gradients are always reduce-scattered here (an all-to-all summed in rank order), "
             "then all-gathered below stage 2"},
    {I("allgather_bucket_size"), .r = R_NONNEG, .note = NOTE_ALLGATHER},
    {B("allgather_partitions"), .note = NOTE_ALLGATHER},
    {B("use_multi_rank_bucket_allreduce"),
     .note = "the gradient buckets are all-reduced as they are"},
    {B("round_robin_gradients"), .note = "a schedule for copying gradients to an offloaded "
                                         "optimizer; nothing is copied here"},
    {B("load_from_fp32_weights"), .note = "checkpoints always hold the fp32 master weights"},
    {B("elastic_checkpoint"), .note = "checkpoints load at any data-parallel size here"},
    {B("ignore_unused_parameters"), .note = "every parameter of the GPT is used"},
    {B("legacy_stage1"), .note = "there is one ZeRO-1 implementation"},
    {O("offload_optimizer", k_offload_optimizer)},
    {O("offload_param", k_offload_param)},
    {B("cpu_offload"), AT(zero.cpu_offload)},
    {B("cpu_offload_param"), .note = NOTE_Z3},
    {B("cpu_offload_use_pin_memory"), .note = NOTE_HOST},
    {I("sub_group_size"), .r = R_NONNEG, .note = NOTE_Z3},
    {I("stage3_prefetch_bucket_size"), .r = R_NONNEG, .note = NOTE_Z3},
    {I("stage3_param_persistence_threshold"), .r = R_NONNEG, .note = NOTE_Z3},
    {I("stage3_model_persistence_threshold"), .r = R_NONNEG, .note = NOTE_Z3},
    {I("stage3_max_live_parameters"), .r = R_NONNEG, .note = NOTE_Z3},
    {I("stage3_max_reuse_distance"), .r = R_NONNEG, .note = NOTE_Z3},
    {B("stage3_gather_16bit_weights_on_model_save"), .note = NOTE_Z3},
    {B("stage3_gather_fp16_weights_on_model_save"), .note = NOTE_Z3},
    {I("stage3_module_granularity_threshold"), .note = NOTE_Z3},
    {B("stage3_use_all_reduce_for_fetch_params"), .note = NOTE_Z3},
    {B("stage3_allgather_sequential"), .note = NOTE_Z3},
    {I("zero_hpz_partition_size"), .r = R_NONNEG, .note = NOTE_Z3},
    {B("zero_quantized_weights"), .w = W_TRUE,
     .refuse = "quantized weight communication (ZeRO++) would change the numbers; " NOT_BUILT},
    {B("zero_quantized_gradients"), .w = W_TRUE,
     .refuse = "quantized gradient communication (ZeRO++) would change the numbers; " NOT_BUILT},
    {B("zero_quantized_nontrainable_weights"), .note = NOTE_Z3},
    {I("mics_shard_size"), .note = "MiCS sharding groups are " NOT_BUILT "; every ZeRO stage shards over "
                                   "all data-parallel ranks (the same numbers)"},
    {B("mics_hierarchical_params_gather"), .note = NOTE_Z3},
    {B("memory_efficient_linear"), .note = NOTE_Z3},
    {B("pipeline_loading_checkpoint"), .note = NOTE_Z3},
    {B("override_module_apply"), .note = NOTE_Z3},
    {B("log_trace_cache_warnings"), .note = NOTE_Z3},
    {B("enable_sanity_checks"), .note = "there are no extra ZeRO checks to enable"},
    {0}};

static const dskey k_activation_checkpointing[] = {
    {B("partition_activations"), .note = "splits each checkpoint over the tensor-parallel ranks; "
                                         "trident keeps it whole"},
    {B("contiguous_memory_optimization"), .note = "the checkpoints already share one activation "
                                                  "arena sized at start-up"},
    {B("cpu_checkpointing"), .note = "keeps the checkpoints in host memory, which is where the CPU "
                                     "backend keeps them anyway"},
    {I("number_checkpoints"), .r = R_POS, .note = "sizes DeepSpeed's contiguous checkpoint buffer; "
                                                  "trident's arena is sized at start-up"},
    {B("synchronize_checkpoint_boundary"), .note = "synchronizes the device at each checkpoint; "
                                                   "the CPU backend runs synchronously"},
    {B("profile"), .note = "times DeepSpeed's checkpointed forward; --timing-log-level 2 times "
                           "forward and backward here"},
    {0}};

static const dskey k_tensorboard[] = {
    {B("enabled"), AT(tensorboard.enabled)},
    {S("output_path"), AT(tensorboard.output_path)},
    {S("job_name"), AT(tensorboard.job_name)},
    {0}};

static const dskey k_wandb[] = {
    {B("enabled"), .w = W_TRUE, .note = "Weights & Biases " NOTE_MONITOR},
    {S("group")}, {S("team")}, {S("project")},
    {0}};

static const dskey k_csv_monitor[] = {
    {B("enabled"), .w = W_TRUE, .note = "a CSV monitor " NOTE_MONITOR},
    {S("output_path")}, {S("job_name")},
    {0}};

static const dskey k_comet[] = {{B("enabled"), .w = W_TRUE, .note = "Comet " NOTE_MONITOR}, {0}};

static const dskey k_flops_profiler[] = {
    {B("enabled"), .w = W_TRUE,
     .note = "no FLOPs profiler is built: --log-throughput gives the model TFLOP/s per rank, "
             "`trident bench train` each kernel"},
    {I("profile_step"), .r = R_NONNEG}, {I("module_depth")}, {I("top_modules"), .r = R_NONNEG},
    {B("detailed")}, {S("output_file")}, {N("recompute_fwd_factor"), .r = R_NONNEG},
    {0}};

static const dskey k_comms_logger[] = {
    {B("enabled"), .w = W_TRUE,
     .note = "no communication logger is built: --timing-log-level 1 times the gradient "
             "all-reduce and the parameter all-gather"},
    {B("verbose")}, {B("prof_all")}, {B("debug")}, {.name = "prof_ops", .t = J_ANY},
    {0}};

static const dskey k_aio[] = {
    {I("block_size"), .r = R_POS}, {I("queue_depth"), .r = R_POS},
    {I("intra_op_parallelism"), .r = R_POS}, {I("thread_count"), .r = R_POS},
    {B("single_submit")}, {B("overlap_events")}, {B("use_gds")},
    {0}};

static const dskey k_checkpoint[] = {
    {C("tag_validation", k_tag_validation),
     .note = "checkpoints are checked tensor by tensor on load"},
    {B("load_universal"),
     .note = "trident's checkpoints reshard on load (any TP, PP and DP layout), "
             "which is what a universal checkpoint is for"},
    {B("use_node_local_storage"), .note = "the TP ranks of DP rank 0 write each checkpoint; every "
                                          "rank must see --save and --load"},
    {.name = "parallel_write", .t = J_OBJ, .open = 1,
     .note = "the TP ranks of DP rank 0 write each checkpoint"},
    {0}};

static const dskey k_data_types[] = {{C("grad_accum_dtype", k_dtypes)}, {0}};

#define REFUSED_WHEN_ENABLED(n, why) \
  static const dskey n[] = {{B("enabled"), .w = W_TRUE, .refuse = why}, {0}}
static const char *const k_curriculum_types[] = {"seqlen", NULL};
static const char *const k_curriculum_schedules[] = {"fixed_discrete", "fixed_root", "fixed_linear",
                                                     NULL};
static const dskey k_curriculum_schedule[] = {
    {I("total_curriculum_step"), AT(curriculum.total_curriculum_step), .r = R_POS},
    {I("difficulty_step"), AT(curriculum.difficulty_step), .r = R_POS},
    {N("root_degree"), AT(curriculum.root_degree), .r = R_POS},
    {L("difficulty"), AT(curriculum.difficulty), .r = R_POS},
    {L("max_step"), AT(curriculum.max_step), .r = R_POS},
    {0}};
static const dskey k_curriculum[] = {
    {B("enabled"), AT(curriculum.enabled)},
    {C("curriculum_type", k_curriculum_types), AT(curriculum.type)},
    {I("min_difficulty"), AT(curriculum.min_difficulty), .r = R_POS},
    {I("max_difficulty"), AT(curriculum.max_difficulty), .r = R_POS},
    {C("schedule_type", k_curriculum_schedules), AT(curriculum.schedule_type)},
    {O("schedule_config", k_curriculum_schedule), AT(curriculum.schedule_config)},
    {0}};
REFUSED_WHEN_ENABLED(k_data_efficiency,
                     "data efficiency (curriculum sampling, random-LTD) is " NOT_BUILT);
REFUSED_WHEN_ENABLED(k_elasticity, "elastic training would take over the batch sizes; " NOT_BUILT);
REFUSED_WHEN_ENABLED(k_pld, "progressive layer drop is " NOT_BUILT);
REFUSED_WHEN_ENABLED(k_quantize, "quantization-aware training is " NOT_BUILT);
REFUSED_WHEN_ENABLED(k_hybrid, "the hybrid (RLHF) engine is " NOT_BUILT);
REFUSED_WHEN_ENABLED(k_eigenvalue, "eigenvalue-based quantization is " NOT_BUILT);
REFUSED_WHEN_ENABLED(k_amp, "Apex AMP is " NOT_BUILT "; use the fp16 or bf16 block");
REFUSED_WHEN_ENABLED(k_autocast, "torch autocast is " NOT_BUILT "; use the fp16 or bf16 block");

#define WHEN_OPEN(n, s) .name = n, .t = J_OBJ, .sub = s, .open = 1
static const dskey k_top[] = {
    {.name = "train_batch_size", .t = J_BATCH, AT(train_batch_size)},
    {.name = "train_micro_batch_size_per_gpu", .t = J_BATCH, AT(train_micro_batch_size_per_gpu)},
    {I("gradient_accumulation_steps"), AT(gradient_accumulation_steps), .r = R_POS},
    {I("steps_per_print"), AT(steps_per_print), .r = R_POS,
     .note = "DeepSpeed's own progress line; trident prints Megatron's log line every "
             "--log-interval"},
    {B("wall_clock_breakdown"), AT(wall_clock_breakdown)},
    {N("gradient_clipping"), AT(gradient_clipping), .r = R_NONNEG},
    {O("fp16", k_fp16)},
    {O("bf16", k_bf16)},
    {O("bfloat16", k_bf16)},
    {O("optimizer", k_optimizer), AT(optimizer.present)},
    {O("scheduler", k_scheduler), AT(scheduler.present)},
    {O("zero_optimization", k_zero), AT(zero.present)},
    {O("activation_checkpointing", k_activation_checkpointing), AT(activation_checkpointing)},
    {O("tensorboard", k_tensorboard)},
    {O("wandb", k_wandb)},
    {O("csv_monitor", k_csv_monitor)},
    {WHEN_OPEN("comet", k_comet)},
    {O("flops_profiler", k_flops_profiler)},
    {O("comms_logger", k_comms_logger)},
    {O("aio", k_aio), .note = "NVMe offload streams through its own I/O thread; these settings change nothing"},
    {O("checkpoint", k_checkpoint)},
    {O("data_types", k_data_types)},
    {C("communication_data_type", k_dtypes), AT(communication_data_type)},
    {B("prescale_gradients"), .w = W_TRUE,
     .note = "pre-scaling guards fp16 communication against overflow; here every rank's "
             "gradients are already divided by the global batch before they are reduced"},
    {N("gradient_predivide_factor"), .r = R_POS,
     .note = "every rank's gradients are already divided by the global batch before they are "
             "reduced (summed in fp32 whatever the communication dtype), so a factor changes "
             "nothing"},
    {B("sparse_gradients"), .note = "the embedding gradient is reduced dense here: the same sum"},
    {B("zero_allow_untested_optimizer"), .note = "ZeRO runs trident's Adam; there is no untested "
                                                 "optimizer to allow"},
    {B("zero_force_ds_cpu_optimizer"), .note = "there is one Adam kernel here"},
    {B("memory_breakdown"), .note = "the start-up report gives the memory per rank"},
    {B("dump_state"),
     .note = "the start-up report and the checkpoint's metadata.json give the state"},
    {B("disable_allgather"), .note = NOTE_ALLGATHER},
    {B("dataloader_drop_last"),
     .note = "the sampler always leaves out an incomplete last batch, as "
             "Megatron's"},
    {I("vocabulary_size"), .note = "the vocabulary comes from the tokenizer flags"},
    {O("curriculum_learning", k_curriculum)},
    {WHEN_OPEN("data_efficiency", k_data_efficiency)},
    {WHEN_OPEN("elasticity", k_elasticity)},
    {WHEN_OPEN("progressive_layer_drop", k_pld)},
    {WHEN_OPEN("quantize_training", k_quantize)},
    {WHEN_OPEN("hybrid_engine", k_hybrid)},
    {WHEN_OPEN("eigenvalue", k_eigenvalue)},
    {WHEN_OPEN("amp", k_amp)},
    {WHEN_OPEN("torch_autocast", k_autocast)},
    {.name = "compression_training", .t = J_OBJ, .open = 1,
     .refuse = "Megatron-DeepSpeed turns compression training on by this key; " NOT_BUILT},
    {.name = "sparse_attention", .t = J_OBJ, .open = 1,
     .refuse = "sparse attention would change the model; " NOT_BUILT},
    {.name = "pipeline", .t = J_OBJ, .open = 1,
     .note = "DeepSpeed's pipeline engine settings; trident's 1F1B schedule runs the "
             "--pipeline-model-parallel-size stages"},
    {.name = "autotuning", .t = J_OBJ, .open = 1, .note = "there is no autotuner"},
    {.name = "nebula", .t = J_OBJ, .open = 1, .note = "checkpoints are written by trident itself"},
    {.name = "tensor_parallel", .t = J_OBJ, .open = 1,
     .note = "tensor parallelism is --tensor-model-parallel-size here"},
    {0}};
// clang-format on

/* ------------------------------------------------------------------ errors and notes */

typedef struct {
  td_ds_config *c;
  const cJSON *root;
} parse_ctx;

static void append(char **buf, size_t *len, const char *line) {
  size_t n = strlen(line);
  char *grown = td_malloc(*len + n + 2);
  if (*len) memcpy(grown, *buf, *len);
  memcpy(grown + *len, line, n);
  grown[*len + n] = '\n', grown[*len + n + 1] = 0;
  td_free(*buf);
  *buf = grown, *len += n + 1;
}

static void add_error(td_ds_config *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_error(td_ds_config *c, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  append(&c->errors, &c->errors_len, line);
  c->n_errors++;
}

static void add_note(td_ds_config *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_note(td_ds_config *c, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  char **grown = td_malloc(sizeof *grown * (size_t)(c->n_notes + 1));
  if (c->n_notes) memcpy(grown, c->notes, sizeof *grown * (size_t)c->n_notes);
  td_free(c->notes);
  c->notes = grown;
  c->notes[c->n_notes++] = td_strdup(line);
}

/* A JSON value as it appears in the file, cut short: for "got ..." in messages. */
static void value_text(const cJSON *v, char *out, size_t n) {
  char *s = cJSON_PrintUnformatted(v);
  snprintf(out, n, "%s", s ? s : "?");
  if (s && strlen(s) >= n && n > 4) strcpy(out + n - 4, "...");
  free(s);
}

/* ------------------------------------------------------------------ types */

static void *field(td_ds_config *c, const dskey *k) { return (char *)c + k->at - 1; }

static int in_range(range r, double v) {
  switch (r) {
  case R_POS: return v > 0;
  case R_NONNEG: return v >= 0;
  case R_UNIT: return v >= 0 && v <= 1;
  case R_STAGE: return v == 0 || v == 1 || v == 2 || v == 3;
  case R_ANY: break;
  }
  return 1;
}

static int is_integer(const cJSON *v) {
  return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) &&
         fabs(v->valuedouble) < 9.2e18;
}

static const char *number_words(jtype t, range r) {
  static const char *const ints[] = {"an integer", "a positive integer", "a non-negative integer",
                                     "0 or 1", "0, 1, 2 or 3"};
  static const char *const nums[] = {"a number", "a positive number", "a non-negative number",
                                     "a number in [0, 1]", "0, 1, 2 or 3"};
  return t == J_NUM ? nums[r] : ints[r];
}

static int find_choice(const char *const *choices, const char *s) {
  for (int i = 0; choices[i]; i++)
    if (!strcasecmp(choices[i], s)) return i;
  return -1;
}

static void choices_text(const char *const *choices, char *out, size_t n) {
  out[0] = 0;
  for (int i = 0; choices[i]; i++) {
    size_t len = strlen(out);
    snprintf(out + len, n - len, "%s\"%s\"", i ? ", " : "", choices[i]);
  }
}

/* What a key expects, in words, when its value is of the wrong type or range. */
static void expected(const dskey *k, char *out, size_t n) {
  switch (k->t) {
  case J_BOOL: snprintf(out, n, "true or false"); return;
  case J_INT:
  case J_NUM: snprintf(out, n, "%s", number_words(k->t, k->r)); return;
  case J_STR: snprintf(out, n, "a string"); return;
  case J_BATCH: snprintf(out, n, "a positive integer or \"auto\""); return;
  case J_BETAS: snprintf(out, n, "[beta1, beta2], two numbers in [0, 1)"); return;
  case J_INTS:
    snprintf(out, n, "a list of 1 to %d integers, each %s", TD_DS_MAX_INTS,
             number_words(J_INT, k->r));
    return;
  case J_OBJ: snprintf(out, n, "an object {...}"); return;
  case J_ANY: break;
  case J_CHOICE: {
    char list[256];
    choices_text(k->choices, list, sizeof list);
    snprintf(out, n, "one of %s", list);
    return;
  }
  }
}

static int betas_ok(const cJSON *v) {
  if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2) return 0;
  for (const cJSON *b = v->child; b; b = b->next)
    if (!cJSON_IsNumber(b) || b->valuedouble < 0 || b->valuedouble >= 1) return 0;
  return 1;
}

static int ints_ok(const dskey *k, const cJSON *v) {
  int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
  if (n < 1 || n > TD_DS_MAX_INTS) return 0;
  for (const cJSON *x = v->child; x; x = x->next)
    if (!is_integer(x) || !in_range(k->r, x->valuedouble)) return 0;
  return 1;
}

static int type_ok(const dskey *k, const cJSON *v) {
  switch (k->t) {
  case J_BOOL: return cJSON_IsBool(v);
  case J_INT: return is_integer(v) && in_range(k->r, v->valuedouble);
  case J_NUM:
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) && in_range(k->r, v->valuedouble);
  case J_STR: return cJSON_IsString(v);
  case J_CHOICE: return cJSON_IsString(v) && find_choice(k->choices, v->valuestring) >= 0;
  case J_BATCH:
    return (cJSON_IsString(v) && !strcmp(v->valuestring, "auto")) ||
           (is_integer(v) && v->valuedouble > 0);
  case J_BETAS: return betas_ok(v);
  case J_INTS: return ints_ok(k, v);
  case J_OBJ: return cJSON_IsObject(v);
  case J_ANY: return 1;
  }
  return 0;
}

static void store(td_ds_config *c, const dskey *k, const cJSON *v) {
  if (!k->at) return;
  void *f = field(c, k);
  switch (k->t) {
  case J_BOOL: *(int *)f = cJSON_IsTrue(v); break;
  case J_INT: *(int64_t *)f = (int64_t)v->valuedouble; break;
  case J_NUM: *(double *)f = v->valuedouble; break;
  case J_STR: *(char **)f = td_strdup(v->valuestring); break;
  case J_CHOICE: *(int *)f = find_choice(k->choices, v->valuestring); break;
  case J_BATCH: *(int64_t *)f = cJSON_IsString(v) ? TD_DS_AUTO : (int64_t)v->valuedouble; break;
  case J_BETAS:
    ((double *)f)[0] = v->child->valuedouble, ((double *)f)[1] = v->child->next->valuedouble;
    break;
  case J_INTS: {
    td_ds_ints *l = f;
    l->n = 0;
    for (const cJSON *x = v->child; x; x = x->next) l->v[l->n++] = (int64_t)x->valuedouble;
    break;
  }
  case J_OBJ: *(int *)f = 1; break;
  case J_ANY: break;
  }
}

/* Every field of the schema to "absent" (the same field may appear twice: bf16 and bfloat16). */
static void set_absent(td_ds_config *c, const dskey *keys) {
  for (const dskey *k = keys; k->name; k++) {
    if (k->sub) set_absent(c, k->sub);
    if (!k->at) continue;
    void *f = field(c, k);
    switch (k->t) {
    case J_BOOL:
    case J_CHOICE: *(int *)f = -1; break;
    case J_INT:
    case J_BATCH: *(int64_t *)f = TD_DS_ABSENT; break;
    case J_NUM: *(double *)f = NAN; break;
    case J_BETAS: ((double *)f)[0] = ((double *)f)[1] = NAN; break;
    case J_INTS: ((td_ds_ints *)f)->n = -1; break;
    case J_STR: *(char **)f = NULL; break;
    case J_OBJ: *(int *)f = 0; break;
    case J_ANY: break;
    }
  }
}

/* ------------------------------------------------------------------ the walk */

static const dskey *find_key(const dskey *keys, const char *name) {
  for (const dskey *k = keys; k && k->name; k++)
    if (!strcmp(k->name, name)) return k;
  return NULL;
}

static const char *closest_key(const dskey *keys, const char *name) {
  const char *best = NULL;
  int best_d = 1 << 30;
  for (const dskey *k = keys; k && k->name; k++) {
    int d = td_edit_distance(name, strlen(name), k->name, strlen(k->name));
    if (d < best_d) best_d = d, best = k->name;
  }
  return best;
}

static void join(char *out, size_t n, const char *path, const char *name) {
  snprintf(out, n, "%s%s%s", path, *path ? "." : "", name);
}

static int applies(when w, const cJSON *v) {
  return w == W_PRESENT || (w == W_TRUE && cJSON_IsTrue(v)) || (w == W_FALSE && cJSON_IsFalse(v));
}

static int duplicate(const cJSON *obj, const cJSON *item) {
  for (const cJSON *e = obj->child; e != item; e = e->next)
    if (!strcmp(e->string, item->string)) return 1;
  return 0;
}

static void unknown_key(td_ds_config *c, const dskey *keys, const char *path, const char *name) {
  char p[512], near[512];
  join(p, sizeof p, path, name);
  const char *best = closest_key(keys, name);
  if (!best) {
    add_error(c, "%s: unknown key", p);
    return;
  }
  join(near, sizeof near, path, best);
  add_error(c, "%s: unknown key (did you mean %s?)", p, near);
}

static void walk(td_ds_config *c, const cJSON *obj, const dskey *keys, int open, const char *path);

static void take_key(td_ds_config *c, const dskey *k, const cJSON *v, const char *p) {
  if (!type_ok(k, v)) {
    char want[320], got[64];
    expected(k, want, sizeof want);
    value_text(v, got, sizeof got);
    add_error(c, "%s: expects %s; got %s", p, want, got);
    return;
  }
  store(c, k, v);
  if (k->refuse && applies(k->w, v)) add_error(c, "%s: %s", p, k->refuse);
  if (k->note && applies(k->w, v)) add_note(c, "%s: %s", p, k->note);
  if (k->t == J_OBJ) walk(c, v, k->sub, k->open, p);
}

static void walk(td_ds_config *c, const cJSON *obj, const dskey *keys, int open, const char *path) {
  for (const cJSON *v = obj->child; v; v = v->next) {
    char p[512];
    join(p, sizeof p, path, v->string);
    if (duplicate(obj, v)) {
      add_error(c, "%s: duplicate key (DeepSpeed's loader refuses duplicates too)", p);
      continue;
    }
    const dskey *k = find_key(keys, v->string);
    if (k)
      take_key(c, k, v, p);
    else if (!open)
      unknown_key(c, keys, path, v->string);
  }
}

/* ------------------------------------------------------------------ what the keys mean */

static const cJSON *lookup(const cJSON *root, const char *block, const char *key) {
  const cJSON *b = cJSON_GetObjectItemCaseSensitive(root, block);
  return key && cJSON_IsObject(b) ? cJSON_GetObjectItemCaseSensitive(b, key) : key ? NULL : b;
}

static void check_precision(td_ds_config *c) {
  if (c->fp16.enabled == 1 && c->bf16.enabled == 1)
    add_error(c, "fp16.enabled and bf16.enabled are both true (DeepSpeed refuses that too: "
                 "one precision at a time)");
}

static void check_optimizer(td_ds_config *c, const cJSON *root) {
  if (!c->optimizer.present) return;
  if (c->optimizer.type < 0) { /* absent (a bad one is reported already) */
    if (!lookup(root, "optimizer", "type")) add_error(c, "optimizer: no \"type\" (Adam or AdamW)");
    return;
  }
  if (c->optimizer.type > TD_DS_OPT_ADAMW)
    add_error(c,
              "optimizer.type %s: %s; trident's optimizer is Adam with decoupled weight decay "
              "(\"Adam\", \"AdamW\")",
              k_optimizers[c->optimizer.type], NOT_BUILT);
  double wd = isnan(c->optimizer.weight_decay) ? 0.0 : c->optimizer.weight_decay;
  if (c->optimizer.type == TD_DS_OPT_ADAM && c->optimizer.adam_w_mode == 0 && wd > 0)
    add_error(c,
              "optimizer.params.adam_w_mode false: Adam with L2 regularisation (the weight decay "
              "added to the gradient) is %s; trident decays the weights directly, as "
              "DeepSpeed's Adam does by default (adam_w_mode true)",
              NOT_BUILT);
  if (c->optimizer.type == TD_DS_OPT_ADAMW && c->optimizer.adam_w_mode == 0)
    add_note(c, "optimizer.params.adam_w_mode: false is ignored for AdamW, as in DeepSpeed");
}

/* The parameters each of DeepSpeed's schedules takes (its constructor's arguments). */
static int sched_takes(int type, const char *name) {
  static const char *const warmup[] = {"warmup_min_lr", "warmup_max_lr",        "warmup_num_steps",
                                       "warmup_type",   "last_batch_iteration", NULL};
  static const char *const cosine[] = {"total_num_steps",
                                       "warmup_min_ratio",
                                       "warmup_num_steps",
                                       "cos_min_ratio",
                                       "warmup_type",
                                       "last_batch_iteration",
                                       NULL};
  static const char *const range[] = {"lr_range_test_min_lr",    "lr_range_test_step_size",
                                      "lr_range_test_step_rate", "lr_range_test_staircase",
                                      "last_batch_iteration",    NULL};
  static const char *const cycle[] = {
      "cycle_min_lr",           "cycle_max_lr",          "decay_lr_rate",
      "cycle_first_step_size",  "cycle_second_step_size", "cycle_first_stair_count",
      "cycle_second_stair_count", "decay_step_size",      "cycle_momentum",
      "cycle_min_mom",          "cycle_max_mom",         "decay_mom_rate",
      "last_batch_iteration",   NULL};
  if (type == TD_DS_SCHED_WARMUP_DECAY_LR && !strcmp(name, "total_num_steps")) return 1;
  const char *const *list = type == TD_DS_SCHED_WARMUP_COSINE_LR ? cosine
                            : type == TD_DS_SCHED_LR_RANGE_TEST  ? range
                            : type == TD_DS_SCHED_ONE_CYCLE      ? cycle
                                                                 : warmup;
  for (int i = 0; list[i]; i++)
    if (!strcmp(list[i], name)) return 1;
  return 0;
}

static void check_scheduler(td_ds_config *c, const cJSON *root) {
  if (!c->scheduler.present) return;
  int type = c->scheduler.type;
  if (type < 0) { /* absent (a bad one is reported already) */
    if (!lookup(root, "scheduler", "type"))
      add_error(c, "scheduler: no \"type\" (WarmupLR, WarmupDecayLR, WarmupCosineLR, "
                   "LRRangeTest or OneCycle)");
    return;
  }
  const cJSON *params = lookup(root, "scheduler", "params");
  for (const cJSON *p = cJSON_IsObject(params) ? params->child : NULL; p; p = p->next)
    if (find_key(k_sched_params, p->string) && !sched_takes(type, p->string))
      add_error(c, "scheduler.params.%s: not a parameter of %s (DeepSpeed would stop on it)",
                p->string, k_schedulers[type]);
  if ((type == TD_DS_SCHED_WARMUP_DECAY_LR || type == TD_DS_SCHED_WARMUP_COSINE_LR) &&
      c->scheduler.total_num_steps == TD_DS_ABSENT)
    add_error(c, "scheduler.params.total_num_steps: %s needs it (DeepSpeed has no default)",
              k_schedulers[type]);
  if (type == TD_DS_SCHED_ONE_CYCLE &&
      (isnan(c->scheduler.cycle_min_lr) || isnan(c->scheduler.cycle_max_lr)))
    add_error(c, "scheduler.params: OneCycle needs cycle_min_lr and cycle_max_lr (DeepSpeed's "
                 "constructor has no default for them)");
  if (type == TD_DS_SCHED_ONE_CYCLE && c->scheduler.cycle_momentum != 0)
    add_note(c, "scheduler OneCycle: cycle_momentum (on unless false) sets Adam's betas every "
                "step, as DeepSpeed does: beta1 cycles inversely to the rate between "
                "cycle_min_mom and cycle_max_mom, beta2 is 0.99, whatever the optimizer's betas");
  if (type >= TD_DS_SCHED_LR_RANGE_TEST)
    add_note(c, "scheduler %s sets the learning rate itself: --lr (the optimizer's lr) is not "
                "used", k_schedulers[type]);
}

static void check_offload(td_ds_config *c) {
  if (c->zero.offload_param_device == 2)
    add_error(c, "zero_optimization.offload_param.device nvme: parameter offload to NVMe "
                 "(ZeRO-Infinity) is %s; offload_optimizer.device nvme is built",
              NOT_BUILT);
  if (c->zero.offload_optimizer_device == 2 && !c->zero.offload_optimizer_nvme_path)
    add_error(c, "zero_optimization.offload_optimizer.device nvme needs "
                 "zero_optimization.offload_optimizer.nvme_path (a directory for the Adam state "
                 "files)");
}

static void check_zero(td_ds_config *c) { check_offload(c); }

/* What DeepSpeed's CurriculumScheduler asserts, when the block is enabled. */
static void check_curriculum(td_ds_config *c, const cJSON *root) {
  const __typeof__(c->curriculum) *k = &c->curriculum;
  if (k->enabled != 1) return;
  static const char *const required[] = {"curriculum_type", "min_difficulty", "max_difficulty",
                                         "schedule_type"};
  for (int i = 0; i < 4; i++) /* absent (a bad value is reported already) */
    if (!lookup(root, "curriculum_learning", required[i]))
      add_error(c, "curriculum_learning: enabled needs \"%s\" (DeepSpeed asserts it)", required[i]);
  const cJSON *sc = lookup(root, "curriculum_learning", "schedule_config");
  if (sc && !cJSON_IsObject(sc)) return; /* reported already */
  if (k->min_difficulty != TD_DS_ABSENT && k->max_difficulty != TD_DS_ABSENT &&
      k->min_difficulty > k->max_difficulty)
    add_error(c, "curriculum_learning: min_difficulty %lld is above max_difficulty %lld",
              (long long)k->min_difficulty, (long long)k->max_difficulty);
  if (k->schedule_type < 0) return;
  const char *type = k_curriculum_schedules[k->schedule_type];
  if (k->schedule_type == TD_CURRICULUM_FIXED_DISCRETE) {
    if (!cJSON_GetObjectItemCaseSensitive(sc, "difficulty") ||
        !cJSON_GetObjectItemCaseSensitive(sc, "max_step"))
      add_error(c, "curriculum_learning.schedule_config: fixed_discrete needs \"difficulty\" and "
                   "\"max_step\" (DeepSpeed asserts them)");
    else if (k->difficulty.n > 0 && k->max_step.n > 0 && k->difficulty.n != k->max_step.n + 1)
      add_error(c, "curriculum_learning.schedule_config: fixed_discrete needs one more difficulty "
                   "than max_step (the last difficulty holds after the last step); got %d and %d",
                k->difficulty.n, k->max_step.n);
    return;
  }
  if (k->total_curriculum_step == TD_DS_ABSENT || k->difficulty_step == TD_DS_ABSENT ||
      (k->schedule_type == TD_CURRICULUM_FIXED_ROOT && isnan(k->root_degree)))
    add_error(c, "curriculum_learning.schedule_config: %s needs \"total_curriculum_step\", "
                 "\"difficulty_step\"%s (DeepSpeed asserts them)",
              type, k->schedule_type == TD_CURRICULUM_FIXED_ROOT ? " and \"root_degree\"" : "");
}

/* A dtype key: fp32 is what happens anyway (a note), fp16 / bf16 would change the numbers. */
static void check_dtype(td_ds_config *c, const cJSON *v, const char *path, const char *what) {
  if (!cJSON_IsString(v) || find_choice(k_dtypes, v->valuestring) < 0) return;
  if (!strcasecmp(v->valuestring, "fp32"))
    add_note(c, "%s: fp32: %s in fp32 here anyway", path, what);
  else
    add_error(c, "%s %s: %s in fp32 here; in %s they would give other numbers: %s", path,
              v->valuestring, what, v->valuestring, NOT_BUILT);
}

static void check_meaning(td_ds_config *c, const cJSON *root) {
  check_precision(c);
  check_optimizer(c, root);
  check_scheduler(c, root);
  check_zero(c);
  check_curriculum(c, root);
  if (c->communication_data_type == 0)
    add_note(c, "communication_data_type: fp32: gradients are reduced in fp32 here anyway");
  const cJSON *acc = lookup(root, "data_types", "grad_accum_dtype");
  check_dtype(c, acc, "data_types.grad_accum_dtype", "gradients are accumulated");
  c->grad_accum_fp32 = cJSON_IsString(acc) && !strcasecmp(acc->valuestring, "fp32");
}

int td_ds_config_logs_loss_scale(const td_ds_config *c, int zero_stage) {
  if (c->fp16.enabled == 1) return 1;
  if (zero_stage == 0) return 0;
  int offload = c->zero.offload_optimizer_device == 1 || c->zero.offload_optimizer_device == 2 ||
                c->zero.cpu_offload == 1;
  return !(c->bf16.enabled == 1 && zero_stage == 1 && c->grad_accum_fp32 && !offload);
}

/* ------------------------------------------------------------------ parse */

static void json_syntax_error(td_ds_config *c, const char *text, const char *end) {
  int line = 1, col = 1;
  for (const char *p = text; end && p < end && *p; p++) {
    if (*p == '\n')
      line++, col = 1;
    else
      col++;
  }
  add_error(c, "not valid JSON at line %d, column %d", line, col);
}

/* "SOURCE: ERROR", or "SOURCE: N errors:" and one indented line each; as many
 * lines as fit in err, then how many more there are. */
static int format_errors(const td_ds_config *c, char *err, size_t errlen) {
  if (c->n_errors == 1) {
    char line[1024];
    snprintf(line, sizeof line, "%s", c->errors);
    line[strcspn(line, "\n")] = 0;
    return td_errorf(err, errlen, "%s: %s", c->source, line);
  }
  if (!err || !errlen) return -1;
  int shown = 0;
  size_t used = (size_t)snprintf(err, errlen, "%s: %d errors:", c->source, c->n_errors);
  for (const char *p = c->errors; *p && used < errlen; shown++) {
    size_t n = strcspn(p, "\n");
    if (used + n + 40 >= errlen) break; /* keep room for the "and N more" line */
    used += (size_t)snprintf(err + used, errlen - used, "\n  %.*s", (int)n, p);
    p += n + (p[n] == '\n');
  }
  if (shown < c->n_errors && used < errlen)
    snprintf(err + used, errlen - used, "\n  ... and %d more", c->n_errors - shown);
  return -1;
}

static td_ds_config *new_config(const char *source) {
  td_ds_config *c = td_calloc(sizeof *c);
  c->source = td_strdup(source);
  set_absent(c, k_top);
  return c;
}

td_ds_config *td_ds_config_parse(const char *text, const char *source, char *err, size_t errlen) {
  td_ds_config *c = new_config(source);
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
  if (!root)
    json_syntax_error(c, text, end);
  else if (!cJSON_IsObject(root))
    add_error(c, "expects a JSON object {...} at the top");
  else {
    walk(c, root, k_top, 0, "");
    check_meaning(c, root);
  }
  cJSON_Delete(root);
  if (!c->n_errors) return c;
  format_errors(c, err, errlen);
  td_ds_config_free(c);
  return NULL;
}

/* ------------------------------------------------------------------ apply: batch */

/* A Megatron flag given on the command line that the file contradicts. */
static int conflict_num(td_ds_config *c, const td_args *a, const char *flag, double flag_value,
                        const char *key, double value, const char *absent_why) {
  if (!td_args_given(a, flag) || flag_value == value) return 0;
  if (absent_why)
    add_error(c, "--%s %g vs %s (not in the file: %s): give one, or make them agree", flag,
              flag_value, key, absent_why);
  else
    add_error(c, "--%s %g vs %s %g in the file: give one, or make them agree", flag, flag_value,
              key, value);
  return 1;
}

/* A Megatron flag given on the command line that DeepSpeed's engine does not read
 * (its clipping and loss scaling come from the file: Megatron-DeepSpeed hands the
 * engine Megatron's bare optimizer). The file's value runs, as there; a note
 * says the flag was not used. */
static void ignored_num(td_ds_config *c, const td_args *a, const char *flag, double flag_value,
                        const char *key, double value, const char *absent_why) {
  if (!td_args_given(a, flag) || flag_value == value) return;
  if (absent_why)
    add_note(c, "--%s %g is not read under DeepSpeed: %s (not in the file: %s) applies, as in "
                "Megatron-DeepSpeed, whose DeepSpeed engine takes it from the config",
             flag, flag_value, key, absent_why);
  else
    add_note(c, "--%s %g is not read under DeepSpeed: %s %g from the file applies, as in "
                "Megatron-DeepSpeed, whose DeepSpeed engine takes it from the config",
             flag, flag_value, key, value);
}

/* "auto": Megatron-DeepSpeed's placeholder for the flag's value. */
static int64_t resolve_auto(td_ds_config *c, const td_args *a, int64_t v, const char *key) {
  if (v != TD_DS_AUTO) return v;
  int micro = !strcmp(key, "train_micro_batch_size_per_gpu");
  if (td_args_given(a, micro ? "micro-batch-size" : "global-batch-size"))
    return micro ? a->micro_batch_size : a->global_batch_size;
  if (!micro && td_args_given(a, "micro-batch-size")) /* Megatron's default global batch */
    return a->micro_batch_size * c->dp_size;
  add_error(c, "%s \"auto\" takes --%s, which is not given", key,
            micro ? "micro-batch-size" : "global-batch-size");
  return TD_DS_ABSENT;
}

/* DeepSpeed's _set_batch_related_parameters: any two of the three give the third
 * (integer division, as DeepSpeed does), one alone sets the accumulation to 1. */
static int infer_batch(td_ds_config *c, int64_t *tb, int64_t *mb, int64_t *gas) {
  int64_t dp = c->dp_size;
  int has_tb = *tb != TD_DS_ABSENT, has_mb = *mb != TD_DS_ABSENT, has_gas = *gas != TD_DS_ABSENT;
  if (has_tb && has_mb && !has_gas)
    *gas = *tb / *mb / dp;
  else if (has_tb && has_gas && !has_mb)
    *mb = *tb / dp / *gas;
  else if (has_mb && has_gas && !has_tb)
    *tb = *mb * *gas * dp;
  else if (has_tb && !has_mb)
    *gas = 1, *mb = *tb / dp;
  else if (has_mb && !has_tb)
    *tb = *mb * dp, *gas = 1;
  else if (!has_tb && !has_mb) {
    add_error(c, "either train_batch_size or train_micro_batch_size_per_gpu is needed (as in "
                 "DeepSpeed)");
    return -1;
  }
  return 0;
}

/* DeepSpeed's _batch_assertion. */
static int assert_batch(td_ds_config *c, int64_t tb, int64_t mb, int64_t gas) {
  const char *names[3] = {"train_batch_size", "train_micro_batch_size_per_gpu",
                          "gradient_accumulation_steps"};
  int64_t v[3] = {tb, mb, gas};
  for (int i = 0; i < 3; i++)
    if (v[i] <= 0) {
      add_error(c,
                "%s comes out as %lld with data-parallel size %lld; it has to be greater than 0 "
                "(train_batch_size = train_micro_batch_size_per_gpu x "
                "gradient_accumulation_steps x data-parallel size, as DeepSpeed checks)",
                names[i], (long long)v[i], (long long)c->dp_size);
      return -1;
    }
  if (tb == mb * gas * c->dp_size) return 0;
  add_error(c,
            "train_batch_size %lld is not train_micro_batch_size_per_gpu %lld x "
            "gradient_accumulation_steps %lld x data-parallel size %lld (= %lld), as DeepSpeed "
            "requires",
            (long long)tb, (long long)mb, (long long)gas, (long long)c->dp_size,
            (long long)(mb * gas * c->dp_size));
  return -1;
}

static void apply_batch(td_ds_config *c, td_args *a) {
  if (c->dp_size <= 0) return; /* ranks not divisible by TP x PP: check_layout says so */
  int64_t tb = resolve_auto(c, a, c->train_batch_size, "train_batch_size");
  int64_t mb =
      resolve_auto(c, a, c->train_micro_batch_size_per_gpu, "train_micro_batch_size_per_gpu");
  int64_t gas = c->gradient_accumulation_steps;
  if ((c->train_batch_size == TD_DS_AUTO && tb == TD_DS_ABSENT) ||
      (c->train_micro_batch_size_per_gpu == TD_DS_AUTO && mb == TD_DS_ABSENT))
    return;
  if (infer_batch(c, &tb, &mb, &gas) || assert_batch(c, tb, mb, gas)) return;
  /* Megatron-DeepSpeed feeds DeepSpeed's engine with Megatron's batches: they must agree */
  int bad = conflict_num(c, a, "micro-batch-size", (double)a->micro_batch_size,
                         "train_micro_batch_size_per_gpu", (double)mb, NULL);
  bad |= conflict_num(c, a, "global-batch-size", (double)a->global_batch_size, "train_batch_size",
                      (double)tb, NULL);
  if (bad) return;
  a->micro_batch_size = mb, a->global_batch_size = tb;
  c->train_batch_size = tb, c->train_micro_batch_size_per_gpu = mb;
  c->gradient_accumulation_steps = gas;
}

/* ------------------------------------------------------------------ apply: precision */

/* --fp16 / --bf16 against the file's blocks: the model's precision and the
 * engine's must be one (Megatron-DeepSpeed casts the model by the flag, DeepSpeed
 * runs the optimizer by the block). */
static void dtype_conflict(td_ds_config *c, const char *flag, int mine, int other_on,
                           const char *other) {
  if (other_on)
    add_error(c, "--%s vs %s.enabled true in the file: one precision; give it in both places", flag,
              other);
  else
    add_error(c,
              "--%s vs %s.enabled %s: give \"%s\": {\"enabled\": true} in the file, or drop "
              "--%s",
              flag, flag, mine == 0 ? "false" : "(absent: DeepSpeed's default false)", flag, flag);
}

static void apply_dtype(td_ds_config *c, td_args *a) {
  int fp16 = c->fp16.enabled == 1, bf16 = c->bf16.enabled == 1;
  if (a->fp16 && !fp16) dtype_conflict(c, "fp16", c->fp16.enabled, bf16, "bf16");
  if (a->bf16 && !bf16) dtype_conflict(c, "bf16", c->bf16.enabled, fp16, "fp16");
  a->fp16 = fp16, a->bf16 = bf16;
}

static void apply_loss_scale(td_ds_config *c, td_args *a) {
  if (c->bf16.enabled == 1 && td_args_given(a, "loss-scale"))
    add_note(c, "--loss-scale %g is not read under DeepSpeed: bf16.enabled true, and DeepSpeed "
                "does not scale bf16 losses",
             a->loss_scale);
  if (c->fp16.enabled != 1) return;
  int dynamic = isnan(c->fp16.loss_scale) || c->fp16.loss_scale == 0;
  int64_t power = c->fp16.initial_scale_power != TD_DS_ABSENT ? c->fp16.initial_scale_power : 16;
  double init = ldexp(1.0, (int)power);
  double min = isnan(c->fp16.min_loss_scale) ? 1.0 : c->fp16.min_loss_scale;
  int64_t window = c->fp16.loss_scale_window != TD_DS_ABSENT ? c->fp16.loss_scale_window : 1000;
  int64_t hyst = c->fp16.hysteresis != TD_DS_ABSENT ? c->fp16.hysteresis : 2;
  if (dynamic && td_args_given(a, "loss-scale"))
    add_note(c, "--loss-scale %g is not read under DeepSpeed: fp16.loss_scale 0 (dynamic, "
                "DeepSpeed's default) applies, as in Megatron-DeepSpeed, whose DeepSpeed engine "
                "takes it from the config",
             a->loss_scale);
  else if (!dynamic)
    ignored_num(c, a, "loss-scale", a->loss_scale, "fp16.loss_scale", c->fp16.loss_scale, NULL);
  if (dynamic) {
    char key[64];
    snprintf(key, sizeof key, "2^fp16.initial_scale_power = %g", init);
    ignored_num(c, a, "initial-loss-scale", a->initial_loss_scale, key, init,
                 c->fp16.initial_scale_power == TD_DS_ABSENT ? "DeepSpeed's default 2^16" : NULL);
    ignored_num(c, a, "min-loss-scale", a->min_loss_scale, "fp16.min_loss_scale", min,
                 isnan(c->fp16.min_loss_scale) ? "DeepSpeed's default 1" : NULL);
    ignored_num(c, a, "loss-scale-window", (double)a->loss_scale_window, "fp16.loss_scale_window",
                 (double)window,
                 c->fp16.loss_scale_window == TD_DS_ABSENT ? "DeepSpeed's default 1000" : NULL);
    ignored_num(c, a, "hysteresis", (double)a->hysteresis, "fp16.hysteresis", (double)hyst,
                 c->fp16.hysteresis == TD_DS_ABSENT ? "DeepSpeed's default 2" : NULL);
  }
  a->loss_scale = dynamic ? NAN : c->fp16.loss_scale;
  a->initial_loss_scale = init, a->min_loss_scale = min;
  a->loss_scale_window = window, a->hysteresis = hyst;
}

/* DeepSpeed clips by gradient_clipping (its default 0: no clipping); Megatron's
 * --clip-grad is not read under DeepSpeed (a note says so when they differ). */
static void apply_clip(td_ds_config *c, td_args *a) {
  int absent = isnan(c->gradient_clipping);
  double clip = absent ? 0.0 : c->gradient_clipping;
  ignored_num(c, a, "clip-grad", a->clip_grad, "gradient_clipping", clip,
               absent ? "DeepSpeed's default 0, no clipping" : NULL);
  if (absent && !td_args_given(a, "clip-grad"))
    add_note(c, "gradient_clipping: not in the file: DeepSpeed's default 0 (no clipping) replaces "
                "--clip-grad's default 1.0");
  a->clip_grad = clip;
}

/* ------------------------------------------------------------------ apply: optimizer */

/* One Adam parameter: the file's, else DeepSpeed's default (FusedAdam's); a flag
 * given on the command line must agree. */
static double adam_param(td_ds_config *c, const td_args *a, double v, const char *key,
                         const char *flag, double flag_value, double ds_default, char *defaults,
                         size_t n) {
  if (!isnan(v)) {
    conflict_num(c, a, flag, flag_value, key, v, NULL);
    return v;
  }
  char why[96];
  snprintf(why, sizeof why, "DeepSpeed's default %g", ds_default);
  conflict_num(c, a, flag, flag_value, key, ds_default, why);
  size_t len = strlen(defaults);
  snprintf(defaults + len, n - len, "%s%s %g", len ? ", " : "", strrchr(key, '.') + 1, ds_default);
  return ds_default;
}

/* In Megatron-DeepSpeed Megatron builds the optimizer from its flags and DeepSpeed
 * takes it; a JSON optimizer block defines it instead here (docs/deepspeed.md). */
static void apply_optimizer(td_ds_config *c, td_args *a) {
  if (!c->optimizer.present || c->optimizer.type < 0) return;
  char defaults[256] = "";
  const double *b = c->optimizer.betas;
  a->lr = adam_param(c, a, c->optimizer.lr, "optimizer.params.lr", "lr", a->lr, 1e-3, defaults,
                     sizeof defaults);
  a->adam_beta1 = adam_param(c, a, b[0], "optimizer.params.betas[0]", "adam-beta1", a->adam_beta1,
                             0.9, defaults, sizeof defaults);
  a->adam_beta2 = adam_param(c, a, b[1], "optimizer.params.betas[1]", "adam-beta2", a->adam_beta2,
                             0.999, defaults, sizeof defaults);
  a->adam_eps = adam_param(c, a, c->optimizer.eps, "optimizer.params.eps", "adam-eps", a->adam_eps,
                           1e-8, defaults, sizeof defaults);
  a->weight_decay = adam_param(c, a, c->optimizer.weight_decay, "optimizer.params.weight_decay",
                               "weight-decay", a->weight_decay, 0.0, defaults, sizeof defaults);
  if (defaults[0])
    add_note(c, "optimizer.params: not in the file, so DeepSpeed's defaults: %s", defaults);
}

/* Megatron's schedule flags: a DeepSpeed scheduler in the file replaces them. */
static void apply_scheduler(td_ds_config *c, td_args *a) {
  static const char *const flags[] = {
      "lr-decay-style",     "lr-warmup-iters",    "lr-warmup-samples",    "lr-warmup-fraction",
      "lr-warmup-init",     "lr-decay-iters",     "lr-decay-samples",     "min-lr",
      "lr-wsd-decay-style", "lr-wsd-decay-iters", "lr-wsd-decay-samples", NULL};
  int type = c->scheduler.type;
  if (!c->scheduler.present || type < 0) return;
  for (int i = 0; flags[i]; i++)
    if (td_args_given(a, flags[i]))
      add_error(c,
                "--%s vs scheduler %s in the file: DeepSpeed's schedule replaces Megatron's, so "
                "the flag would be ignored; give the schedule in one place",
                flags[i], k_schedulers[type]);
  /* WarmupCosineLR scales the optimizer's lr; LRRangeTest and OneCycle set their own */
  if (type >= TD_DS_SCHED_WARMUP_COSINE_LR) return;
  /* WarmupLR's peak defaults to the optimizer's lr, WarmupDecayLR's to 0.001 */
  double peak = c->scheduler.warmup_max_lr;
  if (isnan(peak) && type == TD_DS_SCHED_WARMUP_DECAY_LR)
    conflict_num(c, a, "lr", a->lr, "scheduler.params.warmup_max_lr", 1e-3,
                 "WarmupDecayLR's default 0.001");
  else if (!isnan(peak) && !c->optimizer.present)
    conflict_num(c, a, "lr", a->lr, "scheduler.params.warmup_max_lr", peak, NULL);
}

/* ------------------------------------------------------------------ apply: the rest */

/* Megatron-DeepSpeed hands --zero-stage only to deepspeed.zero.Init (stage 3's
 * partitioning of the parameters as they are built); DeepSpeed's engine runs the
 * file's stage. So a disagreement trains at the file's stage, as there, with a
 * note; except --zero-stage 3 over a file below it, which there builds
 * partitioned parameters for an engine that does not expect them: refused. */
static void zero_stage_from_file(td_ds_config *c, const td_args *a, int64_t stage) {
  if (!td_args_given(a, "zero-stage") || a->zero_stage == stage) return;
  const char *where = c->zero.stage == TD_DS_ABSENT ? " (absent: DeepSpeed's default)" : "";
  if (a->zero_stage == 3)
    add_error(c,
              "--zero-stage 3 vs zero_optimization.stage %lld%s: Megatron-DeepSpeed builds the "
              "model partitioned for stage 3 (deepspeed.zero.Init) by the flag, and DeepSpeed "
              "runs the file's stage %lld on it; make them agree",
              (long long)stage, where, (long long)stage);
  else
    add_note(c,
             "--zero-stage %d vs zero_optimization.stage %lld%s: ZeRO stage %lld runs, as in "
             "DeepSpeed, whose engine reads the file (Megatron-DeepSpeed passes the flag only to "
             "deepspeed.zero.Init)",
             a->zero_stage, (long long)stage, where, (long long)stage);
}

static void apply_zero(td_ds_config *c, td_args *a) {
  int64_t stage = c->zero.stage != TD_DS_ABSENT ? c->zero.stage : 0;
  zero_stage_from_file(c, a, stage);
  if (a->use_distributed_optimizer && stage == 0)
    add_error(c, "--use-distributed-optimizer (ZeRO-1) vs zero_optimization.stage 0%s",
              c->zero.stage == TD_DS_ABSENT ? " (absent: DeepSpeed's default)" : "");
  a->zero_stage = (int)stage;
  if (c->zero.offload_optimizer_device == 2) a->optimizer_nvme_path = c->zero.offload_optimizer_nvme_path;
  if (c->zero.reduce_bucket_size == TD_DS_ABSENT) return;
  /* DeepSpeed counts the bucket in elements, as --ddp-bucket-size does */
  if (!conflict_num(c, a, "ddp-bucket-size", (double)a->ddp_bucket_size,
                    "zero_optimization.reduce_bucket_size", (double)c->zero.reduce_bucket_size,
                    NULL))
    a->ddp_bucket_size = c->zero.reduce_bucket_size;
}

/* Optimizer offload to cpu is --cpu-optimizer (the trainer runs Adam on the host
 * when the device's memory is its own). Parameter offload to cpu (ZeRO-3 only,
 * as in DeepSpeed) keeps the fp32 parameter shard in host memory; the trainer
 * makes it the identity on the CPU backend and needs the optimizer on the host
 * elsewhere (the update writes the parameters where they are). */
static void apply_offload(td_ds_config *c, td_args *a) {
  if (c->zero.cpu_offload == 1 || c->zero.offload_optimizer_device == 1) a->cpu_optimizer = 1;
  if (c->zero.offload_param_device != 1) return;
  if (a->zero_stage != 3)
    add_error(c, "zero_optimization.offload_param.device cpu: parameter offload is a ZeRO-3 "
                 "feature (zero_optimization.stage 3), as in DeepSpeed; the stage here is %d",
              a->zero_stage);
  a->offload_param = 1;
}

static int same_str(const char *a, const char *b) { return a && b && !strcmp(a, b); }

static void apply_tensorboard(td_ds_config *c, td_args *a) {
  if (c->tensorboard.enabled != 1) return;
  /* DeepSpeed's monitor writes to os.path.join(output_path, job_name) */
  const char *base = c->tensorboard.output_path ? c->tensorboard.output_path : "";
  const char *job = c->tensorboard.job_name ? c->tensorboard.job_name : "DeepSpeedJobName";
  size_t n = strlen(base) + strlen(job) + 2;
  c->tensorboard_dir = td_malloc(n);
  int slash = *base && base[strlen(base) - 1] != '/';
  snprintf(c->tensorboard_dir, n, "%s%s%s", base, slash ? "/" : "", job);
  if (a->tensorboard_dir && !same_str(a->tensorboard_dir, c->tensorboard_dir)) {
    add_error(c,
              "--tensorboard-dir %s vs tensorboard (output_path/job_name) %s in the file: give "
              "one, or make them agree",
              a->tensorboard_dir, c->tensorboard_dir);
    return;
  }
  a->tensorboard_dir = c->tensorboard_dir;
  add_note(c,
           "tensorboard: the events go to %s with Megatron's tags (lm loss, learning-rate, "
           "loss-scale, ...), not DeepSpeed's Train/Samples/* ones",
           c->tensorboard_dir);
}

static void apply_timers(td_ds_config *c, td_args *a) {
  if (c->wall_clock_breakdown != 1) return;
  if (!td_args_given(a, "timing-log-level")) {
    a->timing_log_level = 1; /* the forward / backward / optimizer times, with the log line */
    return;
  }
  if (a->timing_log_level == 0)
    add_error(c, "--timing-log-level 0 vs wall_clock_breakdown true: give one, or make them agree");
}

/* Megatron-DeepSpeed's recomputation switches: --checkpoint-activations turns it
 * on; --deepspeed-activation-checkpointing picks DeepSpeed's implementation,
 * which the JSON's activation_checkpointing block tunes. */
static void note_recompute(td_ds_config *c, const td_args *a) {
  if (a->deepspeed_activation_checkpointing && !a->checkpoint_activations)
    add_note(c, "--deepspeed-activation-checkpointing: recomputes nothing by itself; "
                "--checkpoint-activations switches recomputation on (as in Megatron-DeepSpeed)");
  if (a->deepspeed_activation_checkpointing && a->checkpoint_activations)
    add_note(c, "--deepspeed-activation-checkpointing: trident's full recomputation (uniform "
                "chunks of --checkpoint-num-layers) runs in place of DeepSpeed's checkpointing");
  if (c->activation_checkpointing && !a->checkpoint_activations)
    add_note(c,
             "activation_checkpointing: only tunes recomputation, which --checkpoint-activations "
             "switches on (as in Megatron-DeepSpeed); this run recomputes nothing");
}

/* communication_data_type: the dtype data-parallel gradients cross in
 * (parallel/zero.h: rounded on the way out, summed in fp32 in rank order, the
 * sum rounded once); fp32 is the default here, where DeepSpeed's default is
 * the training dtype. args.c checks fp16's loss scale. */
static void apply_comm_dtype(td_ds_config *c, td_args *a) {
  static const td_dtype dt[] = {TD_F32, TD_F16, TD_BF16};
  if (c->communication_data_type < 0) return;
  if (a->grad_reduce_in_bf16 && dt[c->communication_data_type] != TD_BF16)
    add_error(c, "--grad-reduce-in-bf16 vs communication_data_type %s in the file: give one, or "
                 "make them agree",
              k_dtypes[c->communication_data_type]);
  a->grad_comm_dtype = dt[c->communication_data_type];
}

static void apply_all(td_ds_config *c, td_args *a) {
  apply_batch(c, a);
  apply_dtype(c, a);
  apply_comm_dtype(c, a);
  apply_loss_scale(c, a);
  apply_clip(c, a);
  apply_optimizer(c, a);
  apply_scheduler(c, a);
  apply_zero(c, a);
  apply_offload(c, a);
  apply_tensorboard(c, a);
  apply_timers(c, a);
  note_recompute(c, a);
}

/* ------------------------------------------------------------------ public */

/* The flags that bring a config, checked as Megatron-DeepSpeed and DeepSpeed do. */
static int check_flags(const td_args *a, char *err, size_t errlen) {
  if (a->deepspeed_config && a->deepspeed_config_dict)
    return td_errorf(err, errlen,
                     "--deepspeed_config and --deepspeed_config_dict are exclusive (DeepSpeed "
                     "refuses two configs too)");
  if (!a->deepspeed && (a->deepspeed_config || a->deepspeed_config_dict))
    return td_errorf(err, errlen,
                     "--%s without --deepspeed: Megatron-DeepSpeed reads the config only with "
                     "--deepspeed, so it would be ignored; add --deepspeed",
                     a->deepspeed_config ? "deepspeed_config" : "deepspeed_config_dict");
  if (a->deepspeed && !a->deepspeed_config && !a->deepspeed_config_dict)
    return td_errorf(err, errlen,
                     "--deepspeed needs a config: --deepspeed_config FILE (or "
                     "--deepspeed_config_dict JSON)");
  return 0;
}

static td_ds_config *load(const td_args *a, char *err, size_t errlen) {
  char source[1100];
  if (a->deepspeed_config_dict)
    return td_ds_config_parse(a->deepspeed_config_dict, "--deepspeed_config_dict", err, errlen);
  snprintf(source, sizeof source, "--deepspeed_config %s", a->deepspeed_config);
  char why[1024];
  char *text = td_read_file(a->deepspeed_config, NULL, why, sizeof why);
  if (!text) {
    td_errorf(err, errlen, "%s: %s", source, why);
    return NULL;
  }
  td_ds_config *c = td_ds_config_parse(text, source, err, errlen);
  td_free(text);
  return c;
}

int td_ds_config_apply(td_args *a, int world_size, char *err, size_t errlen) {
  if (a->ds || check_flags(a, err, errlen)) return a->ds ? 0 : -1;
  if (!a->deepspeed) return 0;
  td_ds_config *c = load(a, err, errlen);
  if (!c) return -1;
  int64_t mp = a->tensor_model_parallel_size * a->pipeline_model_parallel_size;
  c->dp_size = world_size > 0 && mp > 0 && world_size % mp == 0 ? world_size / mp : 0;
  apply_all(c, a);
  if (c->n_errors) {
    format_errors(c, err, errlen);
    td_ds_config_free(c);
    return -1;
  }
  a->ds = c;
  return 0;
}

void td_ds_config_print_notes(const td_ds_config *c, FILE *f) {
  for (int i = 0; c && i < c->n_notes; i++) /* a flag's note stands alone, a key's names the file */
    if (!strncmp(c->notes[i], "--", 2))
      fprintf(f, "trident: note: %s\n", c->notes[i]);
    else
      fprintf(f, "trident: note: %s: %s\n", c->source, c->notes[i]);
}

int td_ds_config_loss_scaler(const td_ds_config *c, td_loss_scaler *s) {
  if (!c || c->fp16.enabled != 1) return 0;
  if (!isnan(c->fp16.loss_scale) && c->fp16.loss_scale > 0) {
    td_loss_scaler_init_constant(s, (float)c->fp16.loss_scale);
    return 1;
  }
  int64_t power = c->fp16.initial_scale_power != TD_DS_ABSENT ? c->fp16.initial_scale_power : 16;
  td_loss_scaler_init_deepspeed(
      s, (float)ldexp(1.0, (int)power),
      isnan(c->fp16.min_loss_scale) ? 1.0f : (float)c->fp16.min_loss_scale,
      c->fp16.loss_scale_window != TD_DS_ABSENT ? (int)c->fp16.loss_scale_window : 1000,
      c->fp16.hysteresis != TD_DS_ABSENT ? (int)c->fp16.hysteresis : 2,
      c->fp16.consecutive_hysteresis == 1);
  return 1;
}

static double or_default(double v, double d) { return isnan(v) ? d : v; }

int td_ds_config_curriculum(const td_ds_config *c, td_curriculum *cl) {
  if (!c || c->curriculum.enabled != 1) return 0;
  const __typeof__(c->curriculum) *k = &c->curriculum;
  *cl = (td_curriculum){.enabled = 1, .schedule = (td_curriculum_schedule)k->schedule_type,
                        .min_difficulty = k->min_difficulty, .max_difficulty = k->max_difficulty,
                        .current = k->min_difficulty, .total_step = k->total_curriculum_step,
                        .difficulty_step = k->difficulty_step, .root_degree = k->root_degree};
  if (k->schedule_type == TD_CURRICULUM_FIXED_DISCRETE) {
    cl->n_difficulty = k->difficulty.n, cl->n_max_step = k->max_step.n;
    memcpy(cl->difficulty, k->difficulty.v, sizeof(int64_t) * (size_t)k->difficulty.n);
    memcpy(cl->max_step, k->max_step.v, sizeof(int64_t) * (size_t)k->max_step.n);
  }
  return 1;
}

/* LRRangeTest's and OneCycle's parameters, with DeepSpeed's defaults. */
static void range_and_cycle_params(const td_ds_config *c, td_ds_lr *d) {
  const __typeof__(c->scheduler) *k = &c->scheduler;
  d->min_lr = or_default(k->range_min_lr, 1e-3);
  d->range_step_size = (double)(k->range_step_size != TD_DS_ABSENT ? k->range_step_size : 2000);
  d->range_step_rate = or_default(k->range_step_rate, 1.0);
  d->range_staircase = k->range_staircase == 1;
  d->cycle_lo = k->cycle_min_lr, d->cycle_hi = k->cycle_max_lr;
  d->cycle_first =
      (double)(k->cycle_first_step_size != TD_DS_ABSENT ? k->cycle_first_step_size : 2000);
  d->cycle_total = d->cycle_first + (k->cycle_second_step_size != TD_DS_ABSENT
                                         ? (double)k->cycle_second_step_size
                                         : d->cycle_first);
  d->decay_step_size = (double)(k->decay_step_size != TD_DS_ABSENT ? k->decay_step_size : 0);
  d->decay_lr_rate = or_default(k->decay_lr_rate, 0.0);
  d->cycle_momentum = k->cycle_momentum != 0; /* absent (-1): on */
  d->mom_lo = or_default(k->cycle_min_mom, 0.8), d->mom_hi = or_default(k->cycle_max_mom, 0.9);
  d->decay_mom_rate = or_default(k->decay_mom_rate, 0.0);
}

int td_ds_config_lr_schedule(const td_ds_config *c, const td_args *a, td_lr_schedule *s) {
  int type = c ? c->scheduler.type : -1;
  if (!c || !c->scheduler.present || type < 0) return 0;
  static const td_ds_lr_type types[] = {TD_DS_LR_WARMUP, TD_DS_LR_WARMUP_DECAY,
                                        TD_DS_LR_WARMUP_COSINE, TD_DS_LR_RANGE_TEST,
                                        TD_DS_LR_ONE_CYCLE};
  int64_t w = c->scheduler.warmup_num_steps != TD_DS_ABSENT ? c->scheduler.warmup_num_steps : 1000;
  double lr = a->lr; /* the optimizer's: the file's optimizer.params.lr or --lr */
  *s = (td_lr_schedule){.max_lr = lr, .init_lr = lr, .min_lr = lr};
  s->ds = (td_ds_lr){
      .type = types[type],
      .linear_warmup = c->scheduler.warmup_type == 1,
      .min_lr = or_default(c->scheduler.warmup_min_lr, 0.0),
      .max_lr = or_default(c->scheduler.warmup_max_lr, type == TD_DS_SCHED_WARMUP_LR ? lr : 1e-3),
      .base_lr = lr,
      .warmup_min_ratio = or_default(c->scheduler.warmup_min_ratio, 0.0),
      .cos_min_ratio = or_default(c->scheduler.cos_min_ratio, 1e-4),
      .warmup_steps = (double)(w > 2 ? w : 2),
      .total_steps = (double)c->scheduler.total_num_steps,
      .samples_per_step = (double)a->global_batch_size};
  if (type >= TD_DS_SCHED_LR_RANGE_TEST) range_and_cycle_params(c, &s->ds);
  return 1;
}

void td_ds_config_free(td_ds_config *c) {
  if (!c) return;
  for (int i = 0; i < c->n_notes; i++)
    td_free(c->notes[i]);
  td_free(c->notes);
  td_free(c->errors);
  td_free(c->source);
  td_free(c->tensorboard.output_path);
  td_free(c->tensorboard.job_name);
  td_free(c->zero.offload_optimizer_nvme_path);
  td_free(c->tensorboard_dir);
  td_free(c);
}
