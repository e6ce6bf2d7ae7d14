/* Training options under Megatron-LM's flag names (pretrain_gpt.py), with
 * Megatron's defaults, so a Megatron launch script runs with `trident train`.
 *
 * One table in args.c describes every flag: its name (and alias), type, field,
 * default, allowed values, group and help. Parsing, defaults, --help, the JSON
 * dump and docs/flags.md all follow that table.
 *
 *   --flag value | --flag=value      values; switches (store_true) take none
 *   --data-path a b c                lists take every following non-flag word
 *
 * Unset options keep Megatron's None: TD_UNSET (-1) for integers, NAN for
 * numbers, NULL for strings and lists, -1 for choices. td_args_validate() then
 * fills the derived defaults (--ffn-hidden-size 4h, --lr-decay-iters
 * = --train-iters, global batch = micro x data-parallel, --split "969, 30, 1"
 * with --data-path, ...) and refuses impossible combinations with the reason.
 *
 * Flags that only mean something on GPUs (--transformer-impl, --distributed-backend,
 * --use-flash-attn, fusions, ...) are accepted; td_args_print_notes() says once
 * what each means here. */
#ifndef TD_TRAIN_ARGS_H
#define TD_TRAIN_ARGS_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/dtype.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"

#define TD_UNSET (-1)
#define TD_ARGS_MAX_FLAGS 320
#define TD_ARGS_MAX_FOREIGN 64     /* Megatron flags of train/args_foreign.h given at once */
#define TD_ARGS_MAX_BATCH_STEPS 32 /* entries of --step-batch-size-schedule */

typedef enum { TD_TOK_GPT2BPE, TD_TOK_NULL } td_tokenizer_type;
/* --recompute-granularity, in the order of its choices */
typedef enum { TD_GRANULARITY_FULL, TD_GRANULARITY_SELECTIVE } td_recompute_granularity;

/* A list flag (nargs='*'): n words; NULL when the flag was not given. The
 * --data-path lists are checked with data/blend.h's td_blend_parse, which
 * the dataset builder uses to read them. */
typedef struct {
  const char **v;
  int n;
} td_strlist;

typedef struct {
  /* model */
  int64_t num_layers, hidden_size, ffn_hidden_size, num_attention_heads;
  int64_t seq_length, max_position_embeddings, make_vocab_size_divisible_by, vocab_size;
  double init_method_std, layernorm_epsilon, hidden_dropout, attention_dropout;
  int openai_gelu, untie_embeddings_and_output_weights;
  int position_embedding_type, normalization; /* choice indices; only 0 (GPT-2's) is built */
  int64_t kv_channels;                        /* only hidden / heads is built */
  /* training */
  int64_t micro_batch_size, global_batch_size, train_iters, train_samples, exit_interval, seed;
  int skip_train; /* Megatron's --skip-train: evaluation only */
  int64_t train_tokens;          /* Megatron-DeepSpeed: stop once this many tokens are consumed */
  td_strlist rampup_batch_size;  /* START INCREMENT SAMPLES (Megatron's RampupBatchsize...) */
  const char *step_batch_size_schedule;
  int cpu_optimizer;
  int offload_param; /* DeepSpeed's zero_optimization.offload_param.device cpu (ZeRO-3) */
  int optimizer; /* index into {"adam"} */
  int device;    /* --device: index into {"auto", "cpu", "cuda"}, or -1 (td_args_device) */
  int distributed_backend; /* index into {"nccl", "gloo"} */
  double weight_decay, adam_beta1, adam_beta2, adam_eps, clip_grad;
  double start_weight_decay, end_weight_decay; /* default: weight_decay */
  int weight_decay_incr_style;                 /* 0 constant, 1 linear, 2 cosine */
  /* learning rate */
  double lr, min_lr, lr_warmup_fraction, lr_warmup_init;
  double decoupled_lr, decoupled_min_lr; /* NAN: not given (no decoupled group) */
  int lr_decay_style, lr_wsd_decay_style; /* td_lr_style, td_wsd_style */
  int64_t lr_warmup_iters, lr_warmup_samples, lr_decay_iters, lr_decay_samples;
  int64_t lr_wsd_decay_iters, lr_wsd_decay_samples;
  int64_t lr_warmup_tokens, lr_decay_tokens; /* Megatron-DeepSpeed's token-based schedule */
  /* mixed precision */
  int fp16, bf16;
  double loss_scale, initial_loss_scale, min_loss_scale;
  int64_t loss_scale_window, hysteresis;
  /* data and tokenizer */
  td_strlist data_path, train_data_path, valid_data_path, test_data_path;
  const char *split, *vocab_file, *merge_file, *data_cache_path;
  int tokenizer_type; /* td_tokenizer_type, or -1 before validation */
  int mock_data, eod_mask_loss, reset_position_ids, reset_attention_mask;
  int64_t num_workers;
  int dataloader_type; /* 0 single (only that is built) */
  int data_impl;       /* --data-impl: 0 mmap, 1 infer (= mmap); lazy and cached are refused */
  /* evaluation, checkpoints, logging */
  int64_t eval_interval, eval_iters, save_interval, log_interval;
  int64_t save_retain_interval; /* TD_UNSET: keep every checkpoint */
  int timing_log_level;
  const char *save, *load;
  int no_load_optim, no_load_rng, finetune, log_throughput;
  int use_checkpoint_args; /* the model flags not given from --load's checkpoint */
  char checkpoint_args_note[768]; /* what td_args_validate took from it (td_args_print_notes) */
  int log_params_norm, log_num_zeros_in_grad, exit_signal_handler;
  int no_save_optim, no_save_rng, exit_on_missing_checkpoint;
  int no_check_for_nan_in_loss_and_grad; /* skip non-finite steps instead of stopping */
  double distributed_timeout_minutes;     /* the communication watchdog (base/watchdog.h) */
  double exit_duration_in_mins; /* Megatron's is an int; a fraction is accepted */
  const char *tensorboard_dir;
  int64_t tensorboard_log_interval;
  int log_timers_to_tensorboard, log_validation_ppl_to_tensorboard;
  int log_optimizer_states_to_tensorboard; /* Megatron-DeepSpeed's optimizer/ scalars */
  int log_world_size_to_tensorboard, no_log_loss_scale_to_tensorboard;
  /* parallelism */
  int64_t tensor_model_parallel_size, pipeline_model_parallel_size, ddp_bucket_size;
  int zero_stage;
  /* Megatron's --grad-reduce-in-bf16; and the dtype data-parallel gradients
   * cross between ranks in (parallel/zero.h), derived from it or from DeepSpeed's
   * communication_data_type: TD_F32 unless one asks */
  int grad_reduce_in_bf16;
  int overlap_param_gather; /* Megatron's: ZeRO-1/2's parameter all-gather overlaps forward */
  td_dtype grad_comm_dtype;
  /* --deepspeed_config's zero_optimization.offload_optimizer.nvme_path with device
   * nvme: Adam's state lives in files there (points into ds; NULL: in memory) */
  const char *optimizer_nvme_path;
  int sequence_parallel, use_distributed_optimizer, deepspeed;
  int recompute_activations;
  int recompute_granularity; /* td_recompute_granularity, or -1: none */
  int recompute_method;      /* 0 uniform, 1 block, or -1 */
  int64_t recompute_num_layers;
  int64_t logits_chunk_tokens; /* TD_UNSET: td_gpt_auto_logits_chunk */
  int no_bias_gelu_fusion, no_bias_dropout_fusion; /* the separate ops where a GPU fuses */
  /* Megatron-DeepSpeed: --deepspeed with --deepspeed_config FILE or --deepspeed_config_dict
   * JSON (train/ds_config.h); --checkpoint-activations is its full recomputation */
  const char *deepspeed_config, *deepspeed_config_dict;
  int checkpoint_activations, deepspeed_activation_checkpointing;
  int64_t checkpoint_num_layers;
  struct td_ds_config_s *ds; /* the applied DeepSpeed config (td_args_validate), or NULL */
  int help; /* --help / -h was given: print td_args_print_help, nothing else is checked */

  /* derived by td_args_validate */
  int64_t world_size, data_parallel_size, num_micro_batches; /* per DP rank per iteration */
  /* the global batch grows during training (--rampup-batch-size or --step-batch-size-schedule):
   * td_args_global_batch_at; global_batch_size and num_micro_batches are the largest */
  int64_t rampup[3]; /* start, increment, samples; rampup[0] == 0: no ramp-up */
  int n_batch_steps; /* --step-batch-size-schedule: from batch_step_at[i] samples on, batch_step_size[i] */
  int64_t batch_step_at[TD_ARGS_MAX_BATCH_STEPS], batch_step_size[TD_ARGS_MAX_BATCH_STEPS];

  /* Megatron flags of train/args_foreign.h that were given (notes): group and name as typed */
  int n_foreign, foreign_group[TD_ARGS_MAX_FOREIGN];
  const char *foreign_name[TD_ARGS_MAX_FOREIGN];
  int foreign_len[TD_ARGS_MAX_FOREIGN];

  unsigned char given[TD_ARGS_MAX_FLAGS]; /* flags given on the command line, by table index */
} td_args;

/* Parse argv[1..argc-1] (argv[0] is the command name) over Megatron's defaults.
 * Returns 0, or -1 with every problem of the command line in err, one per line
 * (unknown flags, bad values, refused flags, each with its reason; an unknown
 * flag names a known one only when it is a likely misspelling of it). Call
 * td_args_free afterwards. */
int td_args_parse(td_args *a, int argc, char **argv, char *err, size_t errlen);

/* Check combinations and fill the derived fields for a run of world_size ranks.
 * Returns 0, or -1 with the reason in err. */
int td_args_validate(td_args *a, int world_size, char *err, size_t errlen);

void td_args_free(td_args *a);

/* Was --name (without dashes; either spelling) given on the command line? */
int td_args_given(const td_args *a, const char *name);

/* The device asked for: --device, else $TRIDENT_DEVICE, else "auto" (a name for
 * td_device_open; an unknown TRIDENT_DEVICE is left for it to refuse). */
const char *td_args_device(const td_args *a);

/* One line per accepted-but-inert flag that was given, saying what it means here. */
void td_args_print_notes(const td_args *a, FILE *f);

/* Usage: every flag with its default, by group. */
void td_args_print_help(FILE *f);

/* Every option under Megatron's attribute name (num_layers, lr, ...) plus the
 * derived sizes; unset values are null. The caller owns the object. */
cJSON *td_args_to_json(const td_args *a);

/* The LR schedule in samples, as Megatron's get_optimizer_param_scheduler
 * builds it (after td_args_validate). */
void td_args_lr_schedule(const td_args *a, td_lr_schedule *s);
/* The schedule of --decoupled-lr's group (Megatron's max_lr / min_lr of the word
 * embeddings and the output layer): the same steps, --decoupled-lr and
 * --decoupled-min-lr (default --min-lr) as its peak and floor. */
void td_args_decoupled_lr_schedule(const td_args *a, td_lr_schedule *s);
/* The weight-decay schedule (after td_args_validate): over all training samples. */
void td_args_wd_schedule(const td_args *a, td_wd_schedule *s);

/* fp16: constant --loss-scale or dynamic; bf16: constant --loss-scale if given;
 * otherwise a constant 1. */
void td_args_loss_scaler(const td_args *a, td_loss_scaler *s);

/* The global batch after `consumed` training samples: Megatron's ramp-up
 * (start + increment x floor(consumed / (samples / ((global - start) / increment))),
 * the final global batch past `samples`), the step schedule, or the constant
 * --global-batch-size. */
int64_t td_args_global_batch_at(const td_args *a, int64_t consumed);

/* Every flag trident knows (its own table and train/args_foreign.h's) as a
 * Markdown table: flag, what trident does (acted on / note / refused), and
 * the help, note or reason. docs/flags.md includes it. */
void td_args_print_flags_markdown(FILE *f);

/* Megatron's padded vocabulary: the tokenizer's size rounded up to a multiple
 * of --make-vocab-size-divisible-by x --tensor-model-parallel-size. */
int64_t td_args_padded_vocab_size(const td_args *a, int64_t tokenizer_vocab_size);

#endif
