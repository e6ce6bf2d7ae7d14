/* DeepSpeed's JSON config, as Megatron-DeepSpeed takes it:
 *   --deepspeed --deepspeed_config ds_config.json     (or --deepspeed_config_dict '{...}')
 *
 * Two steps. td_ds_config_parse reads the JSON into a td_ds_config, checking
 * every key against the schema below (an unknown key names its JSON path and
 * the closest known key at that level; a wrong type names the expected type;
 * duplicate keys are refused, as DeepSpeed's loader does), and checks what the
 * keys mean here (a feature that would train something else if ignored is
 * refused with the reason, a key accepted but not acted on gets one note).
 * td_ds_config_apply then lays the config onto the Megatron flags: DeepSpeed's
 * batch identity with the data-parallel size (known once MPI is up, which is
 * why td_args_validate calls it), precision and loss scaling, clipping,
 * optimizer, schedule, ZeRO stage, buckets, TensorBoard. A Megatron flag given
 * on the command line that says otherwise than the file is an error naming
 * both. Every error of the file is collected and reported at once.
 *
 * What each key does here: docs/deepspeed.md. */
#ifndef TD_TRAIN_DS_CONFIG_H
#define TD_TRAIN_DS_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "train/args.h"
#include "train/curriculum.h"

#define TD_DS_ABSENT INT64_MIN     /* an integer key the file does not have */
#define TD_DS_AUTO (INT64_MIN + 1) /* "auto": Megatron-DeepSpeed puts the flag's value there */

/* DeepSpeed's optimizer and scheduler names, indices of the choices in ds_config.c. */
typedef enum { TD_DS_OPT_ADAM, TD_DS_OPT_ADAMW } td_ds_optimizer;
typedef enum {
  TD_DS_SCHED_WARMUP_LR,
  TD_DS_SCHED_WARMUP_DECAY_LR,
  TD_DS_SCHED_WARMUP_COSINE_LR,
  TD_DS_SCHED_LR_RANGE_TEST,
  TD_DS_SCHED_ONE_CYCLE
} td_ds_scheduler;

/* A list of integers (n = -1: absent). */
#define TD_DS_MAX_INTS 64
typedef struct {
  int n;
  int64_t v[TD_DS_MAX_INTS];
} td_ds_ints;

/* Absent values: TD_DS_ABSENT for integers, NAN for numbers, -1 for switches
 * and choices, 0 for blocks (1: the block is in the file), NULL for strings. */
typedef struct td_ds_config_s {
  char *source; /* "--deepspeed_config FILE" or "--deepspeed_config_dict", for messages */
  int64_t train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps;
  int64_t steps_per_print;
  double gradient_clipping;
  int wall_clock_breakdown;
  struct {
    int enabled, consecutive_hysteresis;
    double loss_scale, min_loss_scale;
    int64_t initial_scale_power, loss_scale_window, hysteresis;
  } fp16;
  struct {
    int enabled;
  } bf16;
  struct {
    int present, type; /* type: td_ds_optimizer, or a name refused in parse */
    int params, adam_w_mode;
    double lr, eps, weight_decay, betas[2];
  } optimizer;
  struct {
    int present, type;       /* td_ds_scheduler */
    int params, warmup_type; /* 0 log, 1 linear */
    double warmup_min_lr, warmup_max_lr, warmup_min_ratio, cos_min_ratio;
    int64_t warmup_num_steps, total_num_steps;
    double range_min_lr, range_step_rate; /* LRRangeTest */
    int64_t range_step_size;
    int range_staircase;
    double cycle_min_lr, cycle_max_lr, decay_lr_rate, cycle_min_mom, cycle_max_mom,
        decay_mom_rate; /* OneCycle */
    int64_t cycle_first_step_size, cycle_second_step_size, decay_step_size;
    int cycle_momentum;
  } scheduler;
  struct {
    int present;
    int64_t stage, reduce_bucket_size;
    int offload_optimizer_device, offload_param_device; /* 0 none, 1 cpu, 2 nvme */
    char *offload_optimizer_nvme_path; /* offload_optimizer.nvme_path (owned) */
    int cpu_offload;
  } zero;
  int activation_checkpointing; /* the block is there (it only tunes --checkpoint-activations) */
  int grad_accum_fp32;          /* data_types.grad_accum_dtype "fp32" (the only one accepted) */
  int communication_data_type;  /* 0 fp32, 1 fp16, 2 bf16 (ds_config.c's k_dtypes), -1 absent */
  struct {                      /* legacy curriculum_learning (train/curriculum.h) */
    int enabled, type, schedule_type, schedule_config; /* type: 0 "seqlen" */
    int64_t min_difficulty, max_difficulty, total_curriculum_step, difficulty_step;
    double root_degree;
    td_ds_ints difficulty, max_step; /* fixed_discrete's lists */
  } curriculum;
  struct {
    int enabled;
    char *output_path, *job_name;
  } tensorboard;
  /* derived by td_ds_config_apply */
  int64_t dp_size;
  char *tensorboard_dir; /* output_path/job_name, as DeepSpeed's monitor joins them */
  /* one line per accepted-but-inert key (and flag), said once by td_args_print_notes */
  char **notes;
  int n_notes;
  /* every error found (parse and apply), one per line */
  char *errors;
  size_t errors_len;
  int n_errors;
} td_ds_config;

/* Parse JSON text; source names it in messages. Returns the config (with
 * n_errors == 0) or NULL with every error of the text in err. */
td_ds_config *td_ds_config_parse(const char *text, const char *source, char *err, size_t errlen);

/* For td_args_validate: with --deepspeed, read --deepspeed_config FILE or
 * --deepspeed_config_dict, and apply it onto a for a run of world_size ranks
 * (a->ds keeps it for the trainer). Without --deepspeed: 0, nothing done.
 * Returns 0, or -1 with every error in err. */
int td_ds_config_apply(td_args *a, int world_size, char *err, size_t errlen);

/* The notes collected by parse and apply, one "trident: note: ..." line each. */
void td_ds_config_print_notes(const td_ds_config *c, FILE *f);

/* DeepSpeed's loss scaler for the config's fp16 block (1: s set); 0 without fp16. */
int td_ds_config_loss_scaler(const td_ds_config *c, td_loss_scaler *s);

/* The config's scheduler onto s (1: set), whose peak is the optimizer's lr and
 * step unit the global batch; 0 when the file has none. */
int td_ds_config_lr_schedule(const td_ds_config *c, const td_args *a, td_lr_schedule *s);

/* Whether DeepSpeed's optimizer wrapper for this config has a loss scale
 * (cur_scale), which Megatron-DeepSpeed's log line prints only then: fp16
 * (FP16_Optimizer or ZeRO's) and ZeRO stages 1-3 (DeepSpeedZeroOptimizer) do;
 * without ZeRO, fp32 runs the bare optimizer and bf16 its BF16_Optimizer, and so
 * does bf16 at ZeRO-1 with fp32 gradient accumulation and no offload; those do
 * not. zero_stage: the stage that runs. */
int td_ds_config_logs_loss_scale(const td_ds_config *c, int zero_stage);

/* The config's seqlen curriculum onto cl (1: enabled and set); 0 without one. */
int td_ds_config_curriculum(const td_ds_config *c, td_curriculum *cl);
void td_ds_config_free(td_ds_config *c);

#endif
