#include "train/args.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "base/error.h"
#include "base/mem.h"
#include "base/spelling.h"
#include "data/blend.h"
#include "model/gpt_config.h"
#include "train/checkpoint.h"
#include "train/args_foreign.h"
#include "train/ds_config.h"

/* ------------------------------------------------------------------ the table */

typedef enum {
  K_INT,    /* int64_t */
  K_FLOAT,  /* double */
  K_BOOL,   /* int, store_true */
  K_STR,    /* const char * */
  K_CHOICE, /* int: index into choices */
  K_LIST,   /* td_strlist, nargs='*' */
  K_NOTE,   /* accepted, no field: a switch, or a value when meta is set */
  K_REFUSED, /* parsed like K_NOTE, then refused by validation with its note as the reason */
} kind;

typedef enum { C_ANY, C_POS, C_NONNEG, C_UNIT, C_BETA } constraint;

typedef enum { G_MODEL, G_TRAIN, G_LR, G_PREC, G_DATA, G_LOG, G_PARALLEL, G_COMPAT, G_REFUSED, G_COUNT } group;

static const char *const k_group_titles[G_COUNT] = {
    "model",
    "training",
    "learning rate",
    "mixed precision",
    "data and tokenizer",
    "evaluation, checkpoints and logging",
    "parallelism",
    "accepted for compatibility (they change nothing here; trident says why once on stderr)",
    "Megatron features trident's GPT-2 does not have (refused with the reason)"};

typedef struct {
  const char *name, *alias; /* without the leading "--" */
  kind k;
  size_t off;
  const char *def;    /* default, parsed like a command-line value; NULL: unset */
  const char *defdoc; /* the default in words when it is derived */
  constraint c;
  const char *const *choices;
  group g;
  int required;
  const char *meta, *help;
  const char *note; /* K_NOTE: what the flag means here; K_REFUSED: why it is refused */
  int fl;           /* K_NOTE / K_REFUSED with a value: the value is a number (float), not an integer */
  const char *one;  /* K_NOTE: every value must be this (e.g. "1" expert), else refused with why */
  const char *why;
} flag;

static const char *const k_optimizers[] = {"adam", NULL};
static const char *const k_tokenizers[] = {"GPT2BPETokenizer", "NullTokenizer", NULL};
static const char *const k_levels[] = {"0", "1", "2", NULL};
static const char *const k_zero_stages[] = {"0", "1", "2", "3", NULL};
static const char *const k_impls[] = {"local", "transformer_engine", NULL};
static const char *const k_backends[] = {"nccl", "gloo", NULL};
static const char *const k_ckpt_formats[] = {"torch",     "torch_dist",   "zarr",
                                             "torch_dcp", "fsdp_dtensor", NULL};
static const char *const k_granularities[] = {"full", "selective", NULL};
static const char *const k_position_embeddings[] = {"learned_absolute", "rope", "mrope", "relative",
                                                    "none", NULL};
static const char *const k_normalizations[] = {"LayerNorm", "RMSNorm", NULL};
static const char *const k_dataloaders[] = {"single", "cyclic", "external", NULL};
static const char *const k_wd_styles[] = {"constant", "linear", "cosine", NULL};
static const char *const k_attention_backends[] = {"flash", "fused", "unfused", "local", "auto", NULL};
static const char *const k_rerun_modes[] = {"disabled", "validate_results", "report_stats", NULL};
static const char *const k_recompute_methods[] = {"uniform", "block", NULL};
/* td_args.device; "sealed" is a test device (docs/device.md) */
static const char *const k_devices[] = {"auto", "cpu", "cuda", "sealed", NULL};
static const char *const k_data_impls[] = {"mmap", "infer", "lazy", "cached", NULL};

#define F(field) offsetof(td_args, field)
#define INT(field) .k = K_INT, .off = F(field)
#define FLOAT(field) .k = K_FLOAT, .off = F(field)
#define BOOL(field) .k = K_BOOL, .off = F(field)
#define STR(field) .k = K_STR, .off = F(field)
#define LIST(field) .k = K_LIST, .off = F(field)
#define CHOICE(field) .k = K_CHOICE, .off = F(field)
#define NOTE .k = K_NOTE
#define REFUSED .k = K_REFUSED, .g = G_REFUSED
#define NOTE_GPT2 "trident's GPT is GPT-2 (learned absolute positions, LayerNorm, GELU MLP, biases, multi-head attention)"
#define NOTE_FUSION                                                                       \
  "trident fuses where the device can, with the separate ops' results (bit for bit, or "   \
  "within a rounding for a GPU's GEMM epilogues); TRIDENT_CUDA_FUSE=0 turns the epilogues off"
#define NOTE_QK_SCALING "the attention scores and softmax are always fp32; the scaling would change nothing"
#define NOTE_TB_DEFAULT "written by default with --tensorboard-dir"
#define NOTE_SCHEDULER "the schedule comes from the command line; the checkpoint gives its step count"
#define NOTE_WANDB "Weights & Biases is not built in; the scalars go to stdout and to --tensorboard-dir"
#define NOTE_ONE_EXPERT "with one expert, Megatron-DeepSpeed's MoE layer is the dense MLP; trident's dense MLP runs"
#define WHY_MOE "mixture of experts is not built: trident's MLP is dense (one expert, the dense model, is accepted)"
#define NOTE_FLASH                                                                        \
  "attention is flash-style on every device (exact softmax, O(seq) memory per head): "     \
  "trident's kernels, and cuDNN's fused ones on a GPU where they take the call"
#define NOTE_DS_CKPT "a DeepSpeed activation-checkpointing option; trident's own recomputation (--checkpoint-activations) runs, with the same results"
#define NOTE_NAN "on by default, as in Megatron: a NaN or Inf loss (or, in fp32 and bf16, gradient norm) stops the run"

// clang-format off
static const flag k_flags[] = {
    /* model */
    {.name = "num-layers", INT(num_layers), .c = C_POS, .g = G_MODEL, .required = 1, .meta = "N",
     .help = "number of transformer layers"},
    {.name = "hidden-size", INT(hidden_size), .c = C_POS, .g = G_MODEL, .required = 1, .meta = "N",
     .help = "transformer hidden size"},
    {.name = "ffn-hidden-size", INT(ffn_hidden_size), .defdoc = "4 x hidden-size", .c = C_POS, .g = G_MODEL, .meta = "N",
     .help = "MLP hidden size"},
    {.name = "num-attention-heads", INT(num_attention_heads), .c = C_POS, .g = G_MODEL, .required = 1, .meta = "N",
     .help = "attention heads"},
    {.name = "seq-length", INT(seq_length), .c = C_POS, .g = G_MODEL, .required = 1, .meta = "N",
     .help = "tokens per sample"},
    {.name = "max-position-embeddings", INT(max_position_embeddings), .c = C_POS, .g = G_MODEL, .required = 1, .meta = "N",
     .help = "rows of the learned position embedding"},
    {.name = "make-vocab-size-divisible-by", INT(make_vocab_size_divisible_by), .def = "128", .c = C_POS, .g = G_MODEL, .meta = "N",
     .help = "pad the vocabulary to a multiple of this times the TP size"},
    {.name = "vocab-size", INT(vocab_size), .c = C_POS, .g = G_MODEL, .meta = "N",
     .help = "vocabulary before the end-of-document token and padding (NullTokenizer)"},
    {.name = "kv-channels", INT(kv_channels), .defdoc = "hidden-size / num-attention-heads", .c = C_POS, .g = G_MODEL, .meta = "N",
     .help = "channels per attention head (only hidden-size / heads is built)"},
    {.name = "position-embedding-type", CHOICE(position_embedding_type), .def = "learned_absolute", .choices = k_position_embeddings, .g = G_MODEL, .meta = "TYPE",
     .help = "position embeddings: learned_absolute (GPT-2's; the others are refused)"},
    {.name = "normalization", CHOICE(normalization), .def = "LayerNorm", .choices = k_normalizations, .g = G_MODEL, .meta = "NORM",
     .help = "LayerNorm (GPT-2's; RMSNorm is refused)"},
    {.name = "init-method-std", FLOAT(init_method_std), .def = "0.02", .c = C_NONNEG, .g = G_MODEL, .meta = "STD",
     .help = "std of the normal weight initialisation"},
    {.name = "layernorm-epsilon", .alias = "norm-epsilon", FLOAT(layernorm_epsilon), .def = "1e-5", .c = C_POS, .g = G_MODEL, .meta = "EPS",
     .help = "LayerNorm epsilon"},
    {.name = "hidden-dropout", FLOAT(hidden_dropout), .def = "0.1", .c = C_BETA, .g = G_MODEL, .meta = "P",
     .help = "dropout on the hidden states"},
    {.name = "attention-dropout", FLOAT(attention_dropout), .def = "0.1", .c = C_BETA, .g = G_MODEL, .meta = "P",
     .help = "dropout on the attention probabilities"},
    {.name = "openai-gelu", BOOL(openai_gelu), .g = G_MODEL,
     .help = "GELU's tanh approximation (GPT-2's) instead of the exact erf form"},
    {.name = "untie-embeddings-and-output-weights", BOOL(untie_embeddings_and_output_weights), .g = G_MODEL,
     .help = "separate output layer instead of the word embeddings"},
    /* training */
    {.name = "micro-batch-size", INT(micro_batch_size), .c = C_POS, .g = G_TRAIN, .required = 1, .meta = "N",
     .help = "samples per forward/backward on one data-parallel rank"},
    {.name = "global-batch-size", INT(global_batch_size), .defdoc = "micro-batch-size x data-parallel size", .c = C_POS, .g = G_TRAIN, .meta = "N",
     .help = "samples per iteration (gradient accumulation = global / (micro x DP))"},
    {.name = "train-iters", INT(train_iters), .c = C_POS, .g = G_TRAIN, .meta = "N",
     .help = "iterations to train (or --train-samples)"},
    {.name = "train-samples", INT(train_samples), .c = C_POS, .g = G_TRAIN, .meta = "N",
     .help = "samples to train (or --train-iters)"},
    {.name = "train-tokens", INT(train_tokens), .c = C_POS, .g = G_TRAIN, .meta = "N",
     .help = "Megatron-DeepSpeed: also stop once N tokens (samples x seq-length) are consumed"},
    {.name = "rampup-batch-size", LIST(rampup_batch_size), .g = G_TRAIN, .meta = "START INCR SAMPLES",
     .help = "grow the global batch from START by INCR over SAMPLES samples (with --train-samples)"},
    {.name = "step-batch-size-schedule", STR(step_batch_size_schedule), .g = G_TRAIN, .meta = "\"T:B ...\"",
     .help = "global batch B from T consumed tokens on (suffix K, M, B, T; first T is 0; with --train-samples)"},
    {.name = "cpu-optimizer", BOOL(cpu_optimizer), .g = G_TRAIN,
     .help = "Megatron-DeepSpeed: Adam's state and update in host memory (DeepSpeed's cpu_adam) when the device's memory is its own (the CPU backend runs Adam on the host already)"},
    {.name = "exit-interval", INT(exit_interval), .c = C_POS, .g = G_TRAIN, .meta = "N",
     .help = "exit after an iteration divisible by N"},
    {.name = "skip-train", BOOL(skip_train), .g = G_TRAIN,
     .help = "train nothing: evaluate the model (of --load) on the validation and test sets (--eval-iters batches each) and exit"},
    {.name = "seed", INT(seed), .def = "1234", .c = C_NONNEG, .g = G_TRAIN, .meta = "N",
     .help = "seed of initialisation, dropout and data order"},
    {.name = "distributed-backend", CHOICE(distributed_backend), .def = "nccl", .choices = k_backends, .g = G_PARALLEL, .meta = "NAME",
     .help = "collectives on device memory: nccl (the device's collective library, NCCL on CUDA, "
             "when every rank has a GPU of its own) or gloo (MPI through host copies); the CPU's "
             "memory is MPI's own either way"},
    {.name = "device", CHOICE(device), .defdoc = "$TRIDENT_DEVICE, else auto", .choices = k_devices, .g = G_TRAIN, .meta = "D",
     .help = "where the model runs: cpu, cuda, or auto (cuda when built in and a GPU is visible); "
             "sealed: the CPU with device memory the host cannot touch (a test device)"},
    {.name = "optimizer", CHOICE(optimizer), .def = "adam", .choices = k_optimizers, .g = G_TRAIN, .meta = "NAME",
     .help = "Adam with decoupled weight decay (AdamW), fp32 state"},
    {.name = "weight-decay", FLOAT(weight_decay), .def = "0.01", .c = C_NONNEG, .g = G_TRAIN, .meta = "W",
     .help = "weight decay (not on biases and norm weights)"},
    {.name = "start-weight-decay", FLOAT(start_weight_decay), .defdoc = "--weight-decay", .c = C_NONNEG, .g = G_TRAIN, .meta = "W",
     .help = "weight decay at the start of the --weight-decay-incr-style schedule"},
    {.name = "end-weight-decay", FLOAT(end_weight_decay), .defdoc = "--weight-decay", .c = C_NONNEG, .g = G_TRAIN, .meta = "W",
     .help = "weight decay at the end of training"},
    {.name = "weight-decay-incr-style", CHOICE(weight_decay_incr_style), .def = "constant", .choices = k_wd_styles, .g = G_TRAIN, .meta = "STYLE",
     .help = "weight decay from start to end over training: constant, linear or cosine"},
    {.name = "adam-beta1", FLOAT(adam_beta1), .def = "0.9", .c = C_BETA, .g = G_TRAIN, .meta = "B",
     .help = "Adam beta1"},
    {.name = "adam-beta2", FLOAT(adam_beta2), .def = "0.999", .c = C_BETA, .g = G_TRAIN, .meta = "B",
     .help = "Adam beta2"},
    {.name = "adam-eps", FLOAT(adam_eps), .def = "1e-08", .c = C_POS, .g = G_TRAIN, .meta = "EPS",
     .help = "Adam epsilon"},
    {.name = "clip-grad", FLOAT(clip_grad), .def = "1.0", .c = C_NONNEG, .g = G_TRAIN, .meta = "NORM",
     .help = "clip gradients to this global L2 norm (0: no clipping)"},
    /* learning rate */
    {.name = "lr", FLOAT(lr), .c = C_NONNEG, .g = G_LR, .required = 1, .meta = "LR",
     .help = "peak learning rate"},
    {.name = "min-lr", FLOAT(min_lr), .def = "0.0", .c = C_NONNEG, .g = G_LR, .meta = "LR",
     .help = "learning rate at the end of the decay"},
    {.name = "decoupled-lr", FLOAT(decoupled_lr), .c = C_NONNEG, .g = G_LR, .meta = "LR",
     .help = "peak learning rate of the word embeddings and the output layer (their own group, on the same schedule)"},
    {.name = "decoupled-min-lr", FLOAT(decoupled_min_lr), .defdoc = "--min-lr", .c = C_NONNEG, .g = G_LR, .meta = "LR",
     .help = "with --decoupled-lr: that group's learning rate at the end of the decay"},
    {.name = "lr-decay-style", CHOICE(lr_decay_style), .def = "linear", .choices = td_lr_style_names, .g = G_LR, .meta = "STYLE",
     .help = "decay after warmup"},
    {.name = "lr-wsd-decay-style", CHOICE(lr_wsd_decay_style), .def = "exponential", .choices = td_wsd_style_names, .g = G_LR, .meta = "STYLE",
     .help = "annealing of the WSD schedule"},
    {.name = "lr-warmup-iters", INT(lr_warmup_iters), .def = "0", .c = C_NONNEG, .g = G_LR, .meta = "N",
     .help = "linear warmup over N iterations"},
    {.name = "lr-warmup-samples", INT(lr_warmup_samples), .def = "0", .c = C_NONNEG, .g = G_LR, .meta = "N",
     .help = "linear warmup over N samples"},
    {.name = "lr-warmup-fraction", FLOAT(lr_warmup_fraction), .c = C_UNIT, .g = G_LR, .meta = "F",
     .help = "warmup over this fraction of the decay"},
    {.name = "lr-warmup-init", FLOAT(lr_warmup_init), .def = "0.0", .c = C_NONNEG, .g = G_LR, .meta = "LR",
     .help = "learning rate at the start of the warmup"},
    {.name = "lr-decay-iters", INT(lr_decay_iters), .defdoc = "--train-iters", .c = C_POS, .g = G_LR, .meta = "N",
     .help = "iterations to decay over"},
    {.name = "lr-decay-samples", INT(lr_decay_samples), .defdoc = "--train-samples", .c = C_POS, .g = G_LR, .meta = "N",
     .help = "samples to decay over"},
    {.name = "lr-warmup-tokens", INT(lr_warmup_tokens), .c = C_NONNEG, .g = G_LR, .meta = "N",
     .help = "Megatron-DeepSpeed: linear warmup over N consumed tokens"},
    {.name = "lr-decay-tokens", INT(lr_decay_tokens), .c = C_POS, .g = G_LR, .meta = "N",
     .help = "Megatron-DeepSpeed: decay over N consumed tokens (instead of iterations or samples)"},
    {.name = "lr-wsd-decay-iters", INT(lr_wsd_decay_iters), .c = C_POS, .g = G_LR, .meta = "N",
     .help = "iterations of WSD annealing"},
    {.name = "lr-wsd-decay-samples", INT(lr_wsd_decay_samples), .c = C_POS, .g = G_LR, .meta = "N",
     .help = "samples of WSD annealing"},
    /* mixed precision */
    {.name = "fp16", BOOL(fp16), .g = G_PREC,
     .help = "fp16 weights and activations, fp32 master weights, loss scaling"},
    {.name = "bf16", BOOL(bf16), .g = G_PREC,
     .help = "bf16 matmul inputs, fp32 accumulation, master weights and gradients"},
    {.name = "loss-scale", FLOAT(loss_scale), .defdoc = "dynamic", .c = C_POS, .g = G_PREC, .meta = "S",
     .help = "static loss scale"},
    {.name = "initial-loss-scale", FLOAT(initial_loss_scale), .def = "4294967296", .c = C_POS, .g = G_PREC, .meta = "S",
     .help = "first dynamic loss scale (2^32)"},
    {.name = "min-loss-scale", FLOAT(min_loss_scale), .def = "1.0", .c = C_POS, .g = G_PREC, .meta = "S",
     .help = "floor of the dynamic loss scale"},
    {.name = "loss-scale-window", INT(loss_scale_window), .def = "1000", .c = C_POS, .g = G_PREC, .meta = "N",
     .help = "double the scale after N steps without overflow"},
    {.name = "hysteresis", INT(hysteresis), .def = "2", .c = C_POS, .g = G_PREC, .meta = "N",
     .help = "overflows tolerated before the scale is halved"},
    /* data */
    {.name = "data-path", LIST(data_path), .g = G_DATA, .meta = "[W] PREFIX ...",
     .help = "datasets (preprocess_data.py output without .bin/.idx), optionally weighted, split by --split"},
    {.name = "split", STR(split), .defdoc = "969, 30, 1", .g = G_DATA, .meta = "T,V,T",
     .help = "train, validation, test proportions of --data-path"},
    {.name = "train-data-path", LIST(train_data_path), .g = G_DATA, .meta = "[W] PREFIX ...",
     .help = "training datasets (instead of --data-path)"},
    {.name = "valid-data-path", LIST(valid_data_path), .g = G_DATA, .meta = "[W] PREFIX ...",
     .help = "validation datasets"},
    {.name = "test-data-path", LIST(test_data_path), .g = G_DATA, .meta = "[W] PREFIX ...",
     .help = "test datasets"},
    {.name = "data-impl", CHOICE(data_impl), .def = "infer", .choices = k_data_impls, .g = G_DATA, .meta = "IMPL",
     .help = "mmap (infer means mmap for .bin/.idx); lazy and cached are refused"},
    {.name = "mock-data", BOOL(mock_data), .g = G_DATA,
     .help = "deterministic pseudo-random tokens instead of a dataset"},
    {.name = "tokenizer-type", CHOICE(tokenizer_type), .defdoc = "GPT2BPETokenizer with --vocab-file and --merge-file, NullTokenizer with --vocab-size", .choices = k_tokenizers, .g = G_DATA, .meta = "TYPE",
     .help = "tokenizer"},
    {.name = "vocab-file", STR(vocab_file), .g = G_DATA, .meta = "FILE",
     .help = "GPT-2 vocab.json"},
    {.name = "merge-file", STR(merge_file), .g = G_DATA, .meta = "FILE",
     .help = "GPT-2 merges.txt"},
    {.name = "data-cache-path", STR(data_cache_path), .defdoc = "beside the data", .g = G_DATA, .meta = "DIR",
     .help = "where the dataset index caches go"},
    {.name = "eod-mask-loss", BOOL(eod_mask_loss), .g = G_DATA,
     .help = "no loss on end-of-document tokens"},
    {.name = "reset-position-ids", BOOL(reset_position_ids), .g = G_DATA,
     .help = "restart positions after each end-of-document token"},
    {.name = "reset-attention-mask", BOOL(reset_attention_mask), .g = G_DATA,
     .help = "no attention across end-of-document tokens"},
    {.name = "dataloader-type", CHOICE(dataloader_type), .def = "single", .choices = k_dataloaders, .g = G_DATA, .meta = "TYPE",
     .help = "single: Megatron's pretraining sampler (cyclic and external are refused)"},
    {.name = "num-workers", INT(num_workers), .def = "2", .c = C_NONNEG, .g = G_DATA, .meta = "N",
     .help = "data loader workers (the mmap'ed dataset is read in the training process)"},
    /* evaluation, checkpoints, logging */
    {.name = "eval-interval", INT(eval_interval), .def = "1000", .c = C_POS, .g = G_LOG, .meta = "N",
     .help = "validate every N iterations"},
    {.name = "eval-iters", INT(eval_iters), .def = "100", .c = C_NONNEG, .g = G_LOG, .meta = "N",
     .help = "global batches per validation"},
    {.name = "save", STR(save), .g = G_LOG, .meta = "DIR", .help = "checkpoint directory to write"},
    {.name = "save-interval", INT(save_interval), .c = C_POS, .g = G_LOG, .meta = "N",
     .help = "save every N iterations (needed with --save)"},
    {.name = "save-retain-interval", INT(save_retain_interval), .c = C_POS, .g = G_LOG, .meta = "N",
     .help = "keep the checkpoints of iterations divisible by N and the latest one; each save deletes the one before it otherwise"},
    {.name = "load", STR(load), .g = G_LOG, .meta = "DIR",
     .help = "checkpoint directory to resume from"},
    {.name = "no-load-optim", BOOL(no_load_optim), .g = G_LOG,
     .help = "do not load the optimizer state"},
    {.name = "no-load-rng", BOOL(no_load_rng), .g = G_LOG, .help = "do not load the RNG state"},
    {.name = "no-save-optim", BOOL(no_save_optim), .g = G_LOG,
     .help = "save no optimizer state (a load then starts a fresh optimizer)"},
    {.name = "no-save-rng", BOOL(no_save_rng), .g = G_LOG,
     .help = "save no RNG state (a load then keeps --seed)"},
    {.name = "exit-on-missing-checkpoint", BOOL(exit_on_missing_checkpoint), .g = G_LOG,
     .help = "with --load: fail instead of starting from random when there is no checkpoint"},
    {.name = "finetune", BOOL(finetune), .g = G_LOG,
     .help = "load only the weights and start at iteration 0"},
    {.name = "use-checkpoint-args", BOOL(use_checkpoint_args), .g = G_LOG,
     .help = "take the model flags not given (sizes, sequence length, tokenizer type, vocabulary padding) from the --load checkpoint"},
    {.name = "log-interval", INT(log_interval), .def = "100", .c = C_POS, .g = G_LOG, .meta = "N",
     .help = "print the training log line every N iterations"},
    {.name = "tensorboard-dir", STR(tensorboard_dir), .g = G_LOG, .meta = "DIR",
     .help = "write TensorBoard scalars (loss, learning rate, grad norm, ...) to DIR"},
    {.name = "tensorboard-log-interval", INT(tensorboard_log_interval), .def = "1", .c = C_POS, .g = G_LOG, .meta = "N",
     .help = "write the per-iteration TensorBoard scalars every N iterations"},
    {.name = "log-timers-to-tensorboard", BOOL(log_timers_to_tensorboard), .g = G_LOG,
     .help = "also write iteration time and the --timing-log-level timers"},
    {.name = "log-validation-ppl-to-tensorboard", BOOL(log_validation_ppl_to_tensorboard), .g = G_LOG,
     .help = "also write the validation perplexity"},
    {.name = "log-world-size-to-tensorboard", BOOL(log_world_size_to_tensorboard), .g = G_LOG,
     .help = "also write the world size"},
    {.name = "no-log-loss-scale-to-tensorboard", BOOL(no_log_loss_scale_to_tensorboard), .g = G_LOG,
     .help = "do not write the loss scale"},
    {.name = "log-optimizer-states-to-tensorboard", BOOL(log_optimizer_states_to_tensorboard), .g = G_LOG,
     .help = "Megatron-DeepSpeed: write optimizer/* (L2, L1 and max-abs of Adam's moments and the weights, whole model) every --tensorboard-log-interval"},
    {.name = "log-params-norm", BOOL(log_params_norm), .g = G_LOG,
     .help = "add the parameters' L2 norm to the log line"},
    {.name = "log-num-zeros-in-grad", BOOL(log_num_zeros_in_grad), .g = G_LOG,
     .help = "add the number of zero gradient elements to the log line"},
    {.name = "exit-duration-in-mins", FLOAT(exit_duration_in_mins), .c = C_POS, .g = G_LOG, .meta = "M",
     .help = "save (with --save) and exit once training has run M minutes"},
    {.name = "exit-signal-handler", BOOL(exit_signal_handler), .g = G_LOG,
     .help = "on SIGTERM, finish the iteration, save (with --save) and exit 0"},
    {.name = "log-throughput", BOOL(log_throughput), .g = G_LOG,
     .help = "add TFLOP/s per rank to the log line"},
    {.name = "timing-log-level", CHOICE(timing_log_level), .def = "0", .choices = k_levels, .g = G_LOG, .meta = "L",
     .help = "detail of the timers printed with the log line"},
    /* parallelism */
    {.name = "tensor-model-parallel-size", INT(tensor_model_parallel_size), .def = "1", .c = C_POS, .g = G_PARALLEL, .meta = "N",
     .help = "tensor-parallel ranks"},
    {.name = "pipeline-model-parallel-size", INT(pipeline_model_parallel_size), .def = "1", .c = C_POS, .g = G_PARALLEL, .meta = "N",
     .help = "pipeline stages"},
    {.name = "sequence-parallel", BOOL(sequence_parallel), .g = G_PARALLEL,
     .help = "split LayerNorm and dropout along the sequence over the TP ranks"},
    {.name = "ddp-bucket-size", INT(ddp_bucket_size), .defdoc = "max(40M, 1M x data-parallel size)", .c = C_POS, .g = G_PARALLEL, .meta = "N",
     .help = "gradient elements per data-parallel all-reduce bucket"},
    {.name = "grad-reduce-in-bf16", BOOL(grad_reduce_in_bf16), .g = G_PARALLEL,
     .help = "with --bf16: data-parallel gradients cross between ranks in bf16 (half the bytes), summed in fp32, accumulated in fp32"},
    {.name = "overlap-param-gather", BOOL(overlap_param_gather), .g = G_PARALLEL,
     .help = "ZeRO-1/2: the parameter all-gather after the update overlaps the next forward (each layer waits for its own)"},
    {.name = "use-distributed-optimizer", BOOL(use_distributed_optimizer), .g = G_PARALLEL,
     .help = "ZeRO-1: shard the Adam state over the data-parallel ranks"},
    {.name = "deepspeed", BOOL(deepspeed), .g = G_PARALLEL,
     .help = "apply a DeepSpeed JSON config (--deepspeed_config); docs/deepspeed.md"},
    {.name = "deepspeed_config", .alias = "deepspeed-config", STR(deepspeed_config), .g = G_PARALLEL, .meta = "FILE",
     .help = "DeepSpeed JSON config (batch, precision, clipping, optimizer, schedule, ZeRO), with --deepspeed"},
    {.name = "deepspeed_config_dict", .alias = "deepspeed-config-dict", STR(deepspeed_config_dict), .g = G_PARALLEL, .meta = "JSON",
     .help = "the DeepSpeed config given inline, instead of --deepspeed_config"},
    {.name = "checkpoint-activations", BOOL(checkpoint_activations), .g = G_PARALLEL,
     .help = "Megatron-DeepSpeed: full recomputation, uniform chunks of --checkpoint-num-layers"},
    {.name = "checkpoint-num-layers", INT(checkpoint_num_layers), .def = "1", .c = C_POS, .g = G_PARALLEL, .meta = "N",
     .help = "layers per recomputed chunk with --checkpoint-activations"},
    {.name = "deepspeed-activation-checkpointing", BOOL(deepspeed_activation_checkpointing), .g = G_PARALLEL,
     .help = "Megatron-DeepSpeed: DeepSpeed's checkpointing for --checkpoint-activations (trident's recomputation runs, with a note)"},
    {.name = "no-pipeline-parallel", NOTE, .g = G_COMPAT,
     .note = "Megatron-DeepSpeed's switch off DeepSpeed's pipeline engine; trident's own 1F1B schedule runs the --pipeline-model-parallel-size stages either way"},
    {.name = "zero-stage", CHOICE(zero_stage), .def = "0", .choices = k_zero_stages, .g = G_PARALLEL, .meta = "N",
     .help = "ZeRO stage: 1 shards the Adam state, 2 the gradients too, 3 the parameters too"},
    {.name = "recompute-activations", BOOL(recompute_activations), .g = G_PARALLEL,
     .help = "selective recomputation (--recompute-granularity selective)"},
    {.name = "recompute-granularity", CHOICE(recompute_granularity), .choices = k_granularities, .g = G_PARALLEL, .meta = "G",
     .help = "full: recompute whole layers in backward; selective: the attention core"},
    {.name = "recompute-method", .alias = "activations-checkpoint-method", CHOICE(recompute_method), .choices = k_recompute_methods, .g = G_PARALLEL, .meta = "M",
     .help = "with full: uniform (chunks of N layers) or block (the first N layers)"},
    {.name = "recompute-num-layers", .alias = "activations-checkpoint-num-layers", INT(recompute_num_layers), .c = C_POS, .g = G_PARALLEL, .meta = "N",
     .help = "with full: layers per chunk (uniform) or layers recomputed (block)"},
    {.name = "logits-chunk-tokens", INT(logits_chunk_tokens), .c = C_NONNEG, .g = G_PARALLEL, .meta = "N",
     .defdoc = "all tokens while a micro-batch's fp32 logits take at most 256 MiB on a CPU, 4 GiB on a GPU, else a "
               "power of two within that",
     .help = "tokens whose logits exist at once: the output layer and the loss run chunk by chunk, each chunk's "
             "backward with its forward (0: the whole micro-batch)"},
    /* accepted for compatibility */
    {.name = "num-experts", .alias = "ds-num-experts", NOTE, .g = G_COMPAT, .meta = "N [N ...]", .one = "1",
     .why = WHY_MOE, .note = "one expert per layer is Megatron-DeepSpeed's dense model, which trident trains"},
    {.name = "moe-expert-parallel-size", NOTE, .g = G_COMPAT, .meta = "N", .one = "1", .why = WHY_MOE,
     .note = NOTE_ONE_EXPERT},
    {.name = "expert-model-parallel-size", NOTE, .g = G_COMPAT, .meta = "N", .one = "1", .why = WHY_MOE,
     .note = NOTE_ONE_EXPERT},
    {.name = "topk", NOTE, .g = G_COMPAT, .meta = "K", .one = "1", .why = WHY_MOE, .note = NOTE_ONE_EXPERT},
    {.name = "mlp-type", NOTE, .g = G_COMPAT, .meta = "TYPE", .one = "standard",
     .why = WHY_MOE "; the residual MoE is not built", .note = NOTE_ONE_EXPERT},
    {.name = "expert-interval", NOTE, .g = G_COMPAT, .meta = "N", .c = C_POS, .note = NOTE_ONE_EXPERT},
    {.name = "moe-loss-coeff", NOTE, .g = G_COMPAT, .meta = "C", .fl = 1, .c = C_NONNEG, .note = NOTE_ONE_EXPERT},
    {.name = "moe-train-capacity-factor", NOTE, .g = G_COMPAT, .meta = "F", .fl = 1, .c = C_POS, .note = NOTE_ONE_EXPERT},
    {.name = "moe-eval-capacity-factor", NOTE, .g = G_COMPAT, .meta = "F", .fl = 1, .c = C_POS, .note = NOTE_ONE_EXPERT},
    {.name = "moe-min-capacity", NOTE, .g = G_COMPAT, .meta = "N", .c = C_NONNEG, .note = NOTE_ONE_EXPERT},
    {.name = "create-moe-param-group", NOTE, .g = G_COMPAT, .note = NOTE_ONE_EXPERT},
    {.name = "disable-moe-token-dropping", NOTE, .g = G_COMPAT, .note = NOTE_ONE_EXPERT},
    {.name = "disable-moe-top2-2nd-expert-sampling", NOTE, .g = G_COMPAT, .note = NOTE_ONE_EXPERT},
    {.name = "use-tutel", NOTE, .g = G_COMPAT, .note = NOTE_ONE_EXPERT},
    {.name = "context-parallel-size", NOTE, .g = G_COMPAT, .meta = "N", .one = "1",
     .why = "context parallelism is not built (the sequence stays whole on a rank; --sequence-parallel splits LayerNorm and dropout)",
     .note = "one context-parallel rank is no context parallelism"},
    {.name = "ds-sequence-parallel-size", NOTE, .g = G_COMPAT, .meta = "N", .one = "1",
     .why = "DeepSpeed's (Ulysses) sequence parallelism is not built",
     .note = "one rank is no DeepSpeed sequence parallelism"},
    {.name = "use-flash-attn-v1", NOTE, .g = G_COMPAT, .note = NOTE_FLASH},
    {.name = "use-flash-attn-v2", NOTE, .g = G_COMPAT, .note = NOTE_FLASH},
    {.name = "use-flash-attn-triton", NOTE, .g = G_COMPAT, .note = NOTE_FLASH},
    {.name = "use-flash-attn-builder", NOTE, .g = G_COMPAT, .note = NOTE_FLASH},
    {.name = "partition-activations", NOTE, .g = G_COMPAT, .note = NOTE_DS_CKPT},
    {.name = "contigious-checkpointing", NOTE, .g = G_COMPAT, .note = NOTE_DS_CKPT},
    {.name = "checkpoint-in-cpu", NOTE, .g = G_COMPAT, .note = NOTE_DS_CKPT},
    {.name = "synchronize-each-layer", NOTE, .g = G_COMPAT, .note = NOTE_DS_CKPT},
    {.name = "profile-backward", NOTE, .g = G_COMPAT, .note = NOTE_DS_CKPT},
    {.name = "distribute-checkpointed-activations", NOTE, .g = G_COMPAT, .note = NOTE_DS_CKPT},
    {.name = "profile-step-start", NOTE, .g = G_COMPAT, .meta = "N", .c = C_NONNEG,
     .note = "Megatron's nsys/torch profiler window; there is no profiler to open here (`trident bench train` times every kernel)"},
    {.name = "profile-step-end", NOTE, .g = G_COMPAT, .meta = "N", .c = C_NONNEG,
     .note = "Megatron's nsys/torch profiler window; there is no profiler to open here (`trident bench train` times every kernel)"},
    {.name = "transformer-impl", NOTE, .choices = k_impls, .g = G_COMPAT, .meta = "IMPL",
     .note = "trident runs its own C kernels; there is no Transformer Engine, so local and transformer_engine are the same model"},
    {.name = "ckpt-format", NOTE, .choices = k_ckpt_formats, .g = G_COMPAT, .meta = "FMT",
     .note = "checkpoints use Megatron's directory layout with safetensors tensors and JSON metadata, whatever the format named"},
    {.name = "use-flash-attn", NOTE, .g = G_COMPAT,
     .note = NOTE_FLASH},
    {.name = "use-mcore-models", NOTE, .g = G_COMPAT,
     .note = "trident has one GPT implementation, with Megatron-core's parameter layout"},
    {.name = "use-legacy-models", NOTE, .g = G_COMPAT,
     .note = "trident has one GPT implementation, with Megatron-core's parameter layout"},
    {.name = "no-gradient-accumulation-fusion", NOTE, .g = G_COMPAT,
     .note = "there is no fused CUDA weight-gradient accumulation; the GEMMs accumulate into fp32 gradients anyway"},
    {.name = "no-masked-softmax-fusion", NOTE, .g = G_COMPAT, .note = NOTE_FUSION},
    {.name = "no-bias-gelu-fusion", BOOL(no_bias_gelu_fusion), .g = G_PARALLEL,
     .help = "the MLP's bias and GELU, and GELU's gradient, as their own passes where a GPU would run them "
             "in cuBLASLt's epilogues (the tanh GELU); the CPU runs them apart anyway"},
    {.name = "no-bias-dropout-fusion", BOOL(no_bias_dropout_fusion), .g = G_PARALLEL,
     .help = "the residual added by its own pass where a GPU's GEMM would add it (no dropout, TP 1); "
             "dropout and the add stay one pass everywhere (the separate ops' bits)"},
    {.name = "attention-softmax-in-fp32", NOTE, .g = G_COMPAT,
     .note = "the attention softmax is always computed in fp32 here"},
    {.name = "accumulate-allreduce-grads-in-fp32", NOTE, .g = G_COMPAT,
     .note = "gradients are always accumulated and summed in fp32 here (--grad-reduce-in-bf16 only sends them in bf16)"},
    {.name = "use-cpu-initialization", NOTE, .g = G_COMPAT,
     .note = "weights are always initialised on the host from the global seed, identical for every TP/PP layout"},
    {.name = "distributed-timeout-minutes", FLOAT(distributed_timeout_minutes), .def = "10", .c = C_POS, .g = G_PARALLEL, .meta = "M",
     .help = "a communication call blocked this long (a lost rank or host) ends the job with a message naming it; fractions allowed"},
    {.name = "no-async-tensor-model-parallel-allreduce", NOTE, .g = G_COMPAT,
     .note = "deprecated in Megatron as well; ignored"},
    {.name = "empty-unused-memory-level", NOTE, .choices = k_levels, .g = G_COMPAT, .meta = "L",
     .note = "there is no CUDA caching allocator; buffers are sized once at start-up"},
    {.name = "tensorboard-queue-size", NOTE, .c = C_POS, .g = G_COMPAT, .meta = "N",
     .note = "events are written as they happen and flushed at every --log-interval"},
    {.name = "log-memory-to-tensorboard", NOTE, .g = G_COMPAT,
     .note = "CUDA memory statistics do not exist here; the start-up report gives the memory"},
    {.name = "apply-query-key-layer-scaling", NOTE, .g = G_COMPAT, .note = NOTE_QK_SCALING},
    {.name = "no-query-key-layer-scaling", NOTE, .g = G_COMPAT, .note = NOTE_QK_SCALING},
    {.name = "fp32-residual-connection", NOTE, .g = G_COMPAT,
     .note = "the residual stream is always fp32 here"},
    {.name = "no-persist-layer-norm", NOTE, .g = G_COMPAT, .note = NOTE_FUSION},
    {.name = "no-bias-swiglu-fusion", NOTE, .g = G_COMPAT, .note = NOTE_FUSION},
    {.name = "no-rope-fusion", NOTE, .g = G_COMPAT, .note = NOTE_FUSION},
    {.name = "cross-entropy-loss-fusion", NOTE, .g = G_COMPAT, .note = NOTE_FUSION},
    {.name = "log-learning-rate-to-tensorboard", NOTE, .g = G_COMPAT, .note = NOTE_TB_DEFAULT},
    {.name = "log-batch-size-to-tensorboard", NOTE, .g = G_COMPAT, .note = NOTE_TB_DEFAULT},
    {.name = "log-loss-scale-to-tensorboard", NOTE, .g = G_COMPAT, .note = NOTE_TB_DEFAULT},
    {.name = "mmap-bin-files", NOTE, .g = G_COMPAT, .note = "the .bin files are always memory-mapped"},
    {.name = "no-mmap-bin-files", NOTE, .g = G_COMPAT, .note = "the .bin files are always memory-mapped"},
    {.name = "num-dataset-builder-threads", NOTE, .c = C_POS, .g = G_COMPAT, .meta = "N",
     .note = "rank 0 builds the dataset index caches; the other ranks read them"},
    {.name = "no-shared-storage", NOTE, .g = G_COMPAT,
     .note = "rank 0 builds the dataset index caches in --data-cache-path, which every rank must see"},
    {.name = "deterministic-mode", NOTE, .g = G_COMPAT,
     .note = "trident is always deterministic: fixed reduction orders, counter-based dropout"},
    {.name = "override-opt_param-scheduler", NOTE, .g = G_COMPAT, .note = NOTE_SCHEDULER},
    {.name = "use-checkpoint-opt_param-scheduler", NOTE, .g = G_COMPAT, .note = NOTE_SCHEDULER},
    {.name = "dist-ckpt-strictness", NOTE, .g = G_COMPAT, .meta = "S",
     .note = "checkpoints are safetensors + JSON; every tensor is checked on load"},
    {.name = "ckpt-assume-constant-structure", NOTE, .g = G_COMPAT,
     .note = "checkpoints are safetensors + JSON; there is no distributed-checkpoint plan to cache"},
    {.name = "profile", NOTE, .g = G_COMPAT,
     .note = "no torch profiler; `trident bench train` gives the time of every kernel"},
    {.name = "record-memory-history", NOTE, .g = G_COMPAT,
     .note = "buffers are sized once at start-up; the start-up report gives the memory"},
    {.name = "sgd-momentum", NOTE, .c = C_NONNEG, .g = G_COMPAT, .meta = "M",
     .note = "only SGD reads it; the optimizer is Adam"},
    {.name = "tokenizer-model", NOTE, .g = G_COMPAT, .meta = "PATH",
     .note = "GPT2BPETokenizer and NullTokenizer, the tokenizers built here, do not read it"},
    {.name = "wandb-project", NOTE, .g = G_COMPAT, .meta = "NAME", .note = NOTE_WANDB},
    {.name = "wandb-exp-name", NOTE, .g = G_COMPAT, .meta = "NAME", .note = NOTE_WANDB},
    {.name = "wandb-save-dir", NOTE, .g = G_COMPAT, .meta = "DIR", .note = NOTE_WANDB},
    {.name = "overlap-grad-reduce", NOTE, .g = G_COMPAT,
     .note = "the data-parallel gradient reduction always overlaps backward (--ddp-bucket-size buckets)"},
    {.name = "manual-gc", NOTE, .g = G_COMPAT, .note = "there is no garbage collector to manage"},
    {.name = "manual-gc-interval", NOTE, .c = C_NONNEG, .g = G_COMPAT, .meta = "N",
     .note = "there is no garbage collector to manage"},
    {.name = "async-save", NOTE, .g = G_COMPAT,
     .note = "checkpoints are written synchronously: fsynced, renamed, then the latest file"},
    {.name = "attention-backend", NOTE, .choices = k_attention_backends, .g = G_COMPAT, .meta = "B",
     .note = "trident's CPU attention kernel (flash-style, exact softmax) runs for every backend"},
    {.name = "tp-comm-overlap", NOTE, .g = G_COMPAT,
     .note = "the tensor-parallel collectives are not overlapped with the GEMMs"},
    {.name = "no-create-attention-mask-in-dataloader", NOTE, .g = G_COMPAT,
     .note = "the causal mask is implicit in the attention kernel; no mask tensor is built"},
    {.name = "calculate-per-token-loss", NOTE, .g = G_COMPAT,
     .note = "the lm loss is always the per-token mean over the global batch, what this flag selects in Megatron"},
    {.name = "check-for-nan-in-loss-and-grad", NOTE, .g = G_COMPAT, .note = NOTE_NAN},
    {.name = "no-check-for-nan-in-loss-and-grad", BOOL(no_check_for_nan_in_loss_and_grad), .g = G_LOG,
     .help = "skip (and count as nan iterations) steps whose loss or gradient norm is NaN or Inf, instead of stopping"},
    {.name = "log-progress", NOTE, .g = G_COMPAT,
     .note = "no progress.txt is written; the log line gives the progress"},
    {.name = "log-straggler", NOTE, .g = G_COMPAT,
     .note = "there is no straggler detector; --timing-log-level 1 gives each phase's min and max over ranks"},
    {.name = "rerun-mode", NOTE, .choices = k_rerun_modes, .g = G_COMPAT, .meta = "MODE",
     .note = "there is no re-run state machine; a run is deterministic (same flags, same bits)"},
    /* Megatron features the GPT-2 model does not have */
    {.name = "swiglu", REFUSED, .note = NOTE_GPT2 "; SwiGLU is not built"},
    {.name = "squared-relu", REFUSED, .note = NOTE_GPT2 "; squared ReLU is not built"},
    {.name = "disable-bias-linear", REFUSED, .note = NOTE_GPT2 "; bias-free linear layers are not built"},
    {.name = "use-rotary-position-embeddings", REFUSED, .note = NOTE_GPT2 "; rotary embeddings are not built"},
    {.name = "no-position-embedding", REFUSED, .note = NOTE_GPT2 "; a model without position embeddings is not built"},
    {.name = "group-query-attention", REFUSED, .note = NOTE_GPT2 "; grouped-query attention is not built"},
    {.name = "num-query-groups", REFUSED, .c = C_POS, .meta = "N", .note = NOTE_GPT2 "; grouped-query attention is not built"},
    {.name = "num-layers-per-virtual-pipeline-stage", REFUSED, .c = C_POS, .meta = "N",
     .note = "the interleaved pipeline schedule is not built (stages run 1F1B)"},
    {.name = "apply-residual-connection-post-layernorm", REFUSED, .note = NOTE_GPT2 "; post-LayerNorm residuals are not built"},
    {.name = "apply-layernorm-1p", REFUSED, .note = NOTE_GPT2 "; the 1 + w LayerNorm is not built"},
    {.name = "qk-layernorm", REFUSED, .note = NOTE_GPT2 "; LayerNorm on queries and keys is not built"},
};
// clang-format on
#define N_FLAGS ((int)(sizeof k_flags / sizeof *k_flags))
_Static_assert(sizeof k_flags / sizeof *k_flags <= TD_ARGS_MAX_FLAGS, "raise TD_ARGS_MAX_FLAGS");

#define FIELD(a, f, type) ((type *)((char *)(a) + (f)->off))

/* ------------------------------------------------------------------ values */

static int parse_int(const char *s, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (end == s || *end || errno) return -1;
  *out = v;
  return 0;
}

static int parse_float(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || errno || !isfinite(v)) return -1;
  *out = v;
  return 0;
}

static int in_range(constraint c, double v) {
  switch (c) {
  case C_POS: return v > 0;
  case C_NONNEG: return v >= 0;
  case C_UNIT: return v >= 0 && v <= 1;
  case C_BETA: return v >= 0 && v < 1;
  case C_ANY: break;
  }
  return 1;
}

static const char *expected(kind k, constraint c) {
  static const char *const ints[] = {"an integer", "a positive integer", "a non-negative integer"};
  static const char *const nums[] = {"a number", "a positive number", "a non-negative number",
                                     "a number in [0, 1]", "a number in [0, 1)"};
  return k == K_FLOAT ? nums[c] : ints[c < C_UNIT ? c : 0];
}

static int find_choice(const char *const *choices, const char *v) {
  for (int i = 0; choices[i]; i++)
    if (!strcmp(choices[i], v)) return i;
  return -1;
}

static int bad_choice(const flag *f, const char *v, char *err, size_t errlen) {
  char list[256] = "";
  for (int i = 0; f->choices[i]; i++) {
    size_t len = strlen(list);
    snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", f->choices[i]);
  }
  return td_errorf(err, errlen, "--%s expects one of %s; got '%s'", f->name, list, v);
}

static int set_number(td_args *a, const flag *f, const char *v, char *err, size_t errlen) {
  int64_t i = 0;
  double d = 0;
  int is_float = f->k == K_FLOAT || f->fl; /* Megatron's type=float, e.g. 5.0e-4 */
  int ok = is_float ? parse_float(v, &d) == 0 : parse_int(v, &i) == 0;
  if (!is_float) d = (double)i;
  if (!ok || !in_range(f->c, d))
    return td_errorf(err, errlen, "--%s expects %s; got '%s'", f->name,
                     expected(is_float ? K_FLOAT : K_INT, f->c), v);
  if (f->k == K_FLOAT) *FIELD(a, f, double) = d;
  if (f->k == K_INT) *FIELD(a, f, int64_t) = i;
  return 0;
}

/* Store one value (K_INT, K_FLOAT, K_STR, K_CHOICE, K_NOTE with a value). */
static int set_value(td_args *a, const flag *f, const char *v, char *err, size_t errlen) {
  if (f->choices) {
    int c = find_choice(f->choices, v);
    if (c < 0) return bad_choice(f, v, err, errlen);
    if (f->k == K_CHOICE) *FIELD(a, f, int) = c;
    return 0;
  }
  if (f->k == K_STR) {
    *FIELD(a, f, const char *) = v;
    return 0;
  }
  if ((f->k == K_NOTE || f->k == K_REFUSED) && f->c == C_ANY) return 0;
  return set_number(a, f, v, err, errlen);
}

static void set_unset(td_args *a, const flag *f) {
  switch (f->k) {
  case K_INT: *FIELD(a, f, int64_t) = TD_UNSET; break;
  case K_FLOAT: *FIELD(a, f, double) = NAN; break;
  case K_CHOICE: *FIELD(a, f, int) = -1; break;
  default: break; /* zero: off, NULL, empty */
  }
}

static void set_defaults(td_args *a) {
  memset(a, 0, sizeof *a);
  char err[256];
  for (int i = 0; i < N_FLAGS; i++) {
    set_unset(a, &k_flags[i]);
    if (k_flags[i].def)
      TD_CHECK(set_value(a, &k_flags[i], k_flags[i].def, err, sizeof err) == 0, "%s", err);
  }
}

/* ------------------------------------------------------------------ parsing */

static int name_is(const char *s, size_t len, const char *name) {
  return name && strlen(name) == len && !strncmp(s, name, len);
}

static int find_flag(const char *s, size_t len) {
  for (int i = 0; i < N_FLAGS; i++)
    if (name_is(s, len, k_flags[i].name) || name_is(s, len, k_flags[i].alias)) return i;
  return -1;
}

/* The known flag s[0..len) is a likely misspelling of, or NULL. Only a near
 * miss counts: at most max(2, len / 5) edits, so a long flag is never "corrected"
 * into a different concept (--deepspeed-activation-checkpointing is not
 * --exit-on-missing-checkpoint). */
static const char *closest_flag(const char *s, size_t len) {
  const char *best = NULL;
  int best_d = (int)(len / 5 > 2 ? len / 5 : 2) + 1;
  for (int i = 0; i < N_FLAGS; i++) {
    const char *names[2] = {k_flags[i].name, k_flags[i].alias};
    for (int k = 0; k < 2 && names[k]; k++) {
      int d = td_edit_distance(s, len, names[k], strlen(names[k]));
      if (d < best_d) best_d = d, best = names[k];
    }
  }
  return best;
}

/* A word that starts a flag: "-x..." or "--...", but not a negative number. */
static int looks_like_flag(const char *s) {
  return s[0] == '-' && s[1] && !isdigit((unsigned char)s[1]) && s[1] != '.';
}

static void free_list(td_strlist *l) {
  td_free(l->v);
  *l = (td_strlist){0};
}

/* Every problem of a command line, one line each (td_args_parse reports them
 * together: a user fixes a script once, not once per rerun). */
typedef struct {
  char *buf;
  size_t cap, used;
  int n;
} errlist;

/* msg is already one of e's lines (a refused value repeated in a list) */
static int has_error(const errlist *e, const char *msg) {
  size_t n = strlen(msg);
  for (const char *p = e->buf; e->n && p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
    if (!strncmp(p, msg, n) && (p[n] == '\n' || p[n] == 0)) return 1;
  return 0;
}

static void add_error(errlist *e, const char *msg) {
  if (e->used + 1 >= e->cap) return; /* full: the first ones are the ones shown */
  if (has_error(e, msg)) return;
  int w = snprintf(e->buf + e->used, e->cap - e->used, "%s%s", e->n ? "\n" : "", msg);
  e->used = w < 0 ? e->used : e->used + (size_t)w < e->cap ? e->used + (size_t)w : e->cap - 1;
  e->n++;
}

/* The words after argv[*i] up to the next flag (nargs='*'); "--f=x" is one word. */
static int count_values(int argc, char **argv, int i, const char *eq) {
  int n = 0;
  if (eq) return 1;
  while (i + 1 + n < argc && !looks_like_flag(argv[i + 1 + n]))
    n++;
  return n;
}

/* nargs='*': "--f=x" is one word, "--f x y z" takes words up to the next flag. */
static int take_list(td_args *a, const flag *f, const char *eq, int argc, char **argv, int *i,
                     char *err, size_t errlen) {
  int n = count_values(argc, argv, *i, eq);
  if (!eq) *i += n;
  if (n == 0 || (eq && !eq[1]))
    return td_errorf(err, errlen, "--%s expects at least one %s", f->name,
                     strstr(f->meta, "PREFIX") ? "dataset prefix" : "value");
  td_strlist *l = FIELD(a, f, td_strlist);
  free_list(l);
  l->v = td_malloc(sizeof *l->v * (size_t)n);
  l->n = n;
  for (int k = 0; k < n; k++)
    l->v[k] = eq ? eq + 1 : argv[*i - n + 1 + k];
  return 0;
}

static int is_switch(const flag *f) {
  return f->k == K_BOOL || ((f->k == K_NOTE || f->k == K_REFUSED) && !f->meta);
}

/* Is v the one value a .one flag accepts ("1" and "1.0" are the same number)? */
static int is_the_one(const flag *f, const char *v) {
  double x, y;
  if (!parse_float(v, &x) && !parse_float(f->one, &y)) return x == y;
  return !strcmp(v, f->one);
}

/* The values of a note or refused flag: Megatron's nargs vary (--num-experts
 * 1 1 1, --profile pt-full), so every following word that is not a flag is its
 * value; each is checked as the table says. A refused flag's values are not
 * checked: its reason is the answer. */
static void take_note_values(td_args *a, const flag *f, const char *eq, int argc, char **argv,
                             int *i, errlist *e) {
  int n = count_values(argc, argv, *i, eq);
  char msg[512];
  if (n == 0 && f->meta && f->k == K_NOTE) {
    snprintf(msg, sizeof msg, "--%s expects a value (%s)", f->name, f->meta);
    add_error(e, msg);
  }
  for (int k = 0; k < n && f->k == K_NOTE; k++) {
    const char *v = eq ? eq + 1 : argv[*i + 1 + k];
    if (f->one && !is_the_one(f, v)) {
      snprintf(msg, sizeof msg, "--%s %s: %s", f->name, v, f->why);
      add_error(e, msg);
    } else if (!f->one && (f->choices || f->c != C_ANY) && set_value(a, f, v, msg, sizeof msg)) {
      add_error(e, msg);
    }
  }
  if (!eq) *i += n;
}

/* A Megatron flag trident does not act on (args_foreign.h): remembered for its
 * note, or refused with its reason; its values are skipped. */
static void take_foreign(td_args *a, int g, const char *name, size_t len, int argc, char **argv,
                         int *i, const char *eq, errlist *e) {
  *i += count_values(argc, argv, *i, eq) * !eq;
  if (td_foreign_groups[g].refused) {
    char msg[768];
    snprintf(msg, sizeof msg, "--%.*s: %s", (int)len, name, td_foreign_groups[g].why);
    add_error(e, msg);
  } else if (a->n_foreign < TD_ARGS_MAX_FOREIGN) {
    a->foreign_group[a->n_foreign] = g, a->foreign_name[a->n_foreign] = name;
    a->foreign_len[a->n_foreign++] = (int)len;
  }
}

static void unknown_flag(const char *arg, const char *name, size_t len, errlist *e) {
  char msg[512];
  const char *near = closest_flag(name, len);
  int shown = (int)(len + (size_t)(name - arg));
  if (near)
    snprintf(msg, sizeof msg, "unknown flag '%.*s' (did you mean --%s?)", shown, arg, near);
  else
    snprintf(msg, sizeof msg,
             "unknown flag '%.*s' (not a flag of Megatron-LM or Megatron-DeepSpeed that trident "
             "knows; `trident train --help` lists them)",
             shown, arg);
  add_error(e, msg);
}

/* One flag at argv[*i]; *i is advanced past the words it consumed. */
static void take_flag(td_args *a, int argc, char **argv, int *i, errlist *e) {
  const char *arg = argv[*i], *name = arg + (arg[1] == '-' ? 2 : 1);
  const char *eq = strchr(name, '=');
  size_t len = eq ? (size_t)(eq - name) : strlen(name);
  int idx = arg[1] == '-' ? find_flag(name, len) : -1;
  char msg[768] = "";
  if (idx < 0) {
    int g = arg[1] == '-' ? td_foreign_find(name, len) : -1;
    if (g >= 0) return take_foreign(a, g, name, len, argc, argv, i, eq, e);
    *i += count_values(argc, argv, *i, eq) * !eq; /* its values are not stray words */
    return unknown_flag(arg, name, len, e);
  }
  const flag *f = &k_flags[idx];
  a->given[idx] = 1;
  if (f->k == K_NOTE || f->k == K_REFUSED) return take_note_values(a, f, eq, argc, argv, i, e);
  if (is_switch(f)) {
    if (eq) snprintf(msg, sizeof msg, "--%s is a switch and takes no value (got '%s')", f->name, arg);
    if (f->k == K_BOOL) *FIELD(a, f, int) = 1;
  } else if (f->k == K_LIST) {
    take_list(a, f, eq, argc, argv, i, msg, sizeof msg);
  } else {
    const char *v = eq ? eq + 1 : NULL;
    if (!v && *i + 1 < argc && !looks_like_flag(argv[*i + 1])) v = argv[++*i];
    if (!v || !*v)
      snprintf(msg, sizeof msg, "--%s expects a value (%s)", f->name, f->meta);
    else
      set_value(a, f, v, msg, sizeof msg);
  }
  if (msg[0]) add_error(e, msg);
}

/* Flags refused whatever their value, and values refused by what they mean. */
static void check_refusals(const td_args *a, errlist *e) {
  char msg[768];
  for (int i = 0; i < N_FLAGS; i++)
    if (a->given[i] && k_flags[i].k == K_REFUSED) {
      snprintf(msg, sizeof msg, "--%s: %s", k_flags[i].name, k_flags[i].note);
      add_error(e, msg);
    }
  if (a->data_impl >= 2) {
    snprintf(msg, sizeof msg,
             "--data-impl %s: trident reads Megatron's mmap format only (the .bin/.idx files of "
             "preprocess_data.py, which every --data-impl reads); use --data-impl mmap",
             k_data_impls[a->data_impl]);
    add_error(e, msg);
  }
  if (a->position_embedding_type > 0) {
    snprintf(msg, sizeof msg, "--position-embedding-type %s: %s; only learned_absolute is built",
             k_position_embeddings[a->position_embedding_type], NOTE_GPT2);
    add_error(e, msg);
  }
  if (a->normalization > 0) {
    snprintf(msg, sizeof msg, "--normalization %s: %s; only LayerNorm is built",
             k_normalizations[a->normalization], NOTE_GPT2);
    add_error(e, msg);
  }
  if (a->dataloader_type > 0) {
    snprintf(msg, sizeof msg,
             "--dataloader-type %s: only Megatron's 'single' pretraining sampler is built (each "
             "sample once per epoch, in the dataset's shuffled order)",
             k_dataloaders[a->dataloader_type]);
    add_error(e, msg);
  }
}

int td_args_parse(td_args *a, int argc, char **argv, char *err, size_t errlen) {
  set_defaults(a);
  errlist e = {.buf = err, .cap = errlen};
  if (errlen) err[0] = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      a->help = !e.n; /* what came before is still reported */
      return e.n ? -1 : 0;
    }
    if (looks_like_flag(argv[i])) {
      take_flag(a, argc, argv, &i, &e);
      continue;
    }
    char msg[512];
    snprintf(msg, sizeof msg, "unexpected argument '%s' (flags start with --)", argv[i]);
    add_error(&e, msg);
  }
  check_refusals(a, &e);
  return e.n ? -1 : 0;
}

int td_args_given(const td_args *a, const char *name) {
  int idx = find_flag(name, strlen(name));
  return idx >= 0 && a->given[idx];
}

void td_args_free(td_args *a) {
  td_strlist *lists[] = {&a->data_path, &a->train_data_path, &a->valid_data_path,
                         &a->test_data_path, &a->rampup_batch_size};
  for (int i = 0; i < 5; i++)
    free_list(lists[i]);
  td_ds_config_free(a->ds);
  a->ds = NULL;
}

/* ------------------------------------------------------------------ validation */

static int check_required(td_args *a, char *err, size_t errlen) {
  for (int i = 0; i < N_FLAGS; i++) {
    const flag *f = &k_flags[i];
    if (!f->required) continue;
    int unset = f->k == K_INT ? *FIELD(a, f, int64_t) == TD_UNSET : isnan(*FIELD(a, f, double));
    if (unset) return td_errorf(err, errlen, "--%s is required (%s)", f->name, f->help);
  }
  return 0;
}

static int check_model(td_args *a, char *err, size_t errlen) {
  if (a->hidden_size % a->num_attention_heads)
    return td_errorf(
        err, errlen,
        "--hidden-size %lld is not divisible by --num-attention-heads %lld (every head gets "
        "hidden-size / heads channels)",
        (long long)a->hidden_size, (long long)a->num_attention_heads);
  if (a->seq_length > a->max_position_embeddings)
    return td_errorf(
        err, errlen,
        "--seq-length %lld is longer than --max-position-embeddings %lld (positions past the "
        "table have no embedding)",
        (long long)a->seq_length, (long long)a->max_position_embeddings);
  if (a->ffn_hidden_size == TD_UNSET) a->ffn_hidden_size = 4 * a->hidden_size;
  if (a->kv_channels != TD_UNSET && a->kv_channels != a->hidden_size / a->num_attention_heads)
    return td_errorf(err, errlen,
                     "--kv-channels %lld: heads of hidden-size / num-attention-heads = %lld channels "
                     "are the only ones built (as GPT-2)",
                     (long long)a->kv_channels, (long long)(a->hidden_size / a->num_attention_heads));
  return 0;
}

/* The dtype data-parallel gradients cross in: fp32, or DeepSpeed's
 * communication_data_type (set by the config), or bf16 for Megatron's
 * --grad-reduce-in-bf16 under --bf16 (elsewhere Megatron's gradient buffer is
 * in the parameters' dtype, and the flag changes nothing there either). fp16
 * needs fp16 training: its loss scale keeps gradients inside fp16's range, and
 * the scaler skips a step whose sum overflowed. */
static int check_grad_comm(td_args *a, char *err, size_t errlen) {
  if (a->grad_reduce_in_bf16 && a->bf16) a->grad_comm_dtype = TD_BF16;
  if (a->grad_comm_dtype == TD_F16 && !a->fp16)
    return td_errorf(err, errlen,
                     "communication_data_type fp16 needs fp16 training (fp16.enabled true): "
                     "without a loss scale, gradients leave fp16's range; use bf16");
  return 0;
}

static int check_precision(td_args *a, char *err, size_t errlen) {
  if (a->fp16 && a->bf16)
    return td_errorf(err, errlen, "--fp16 and --bf16 are exclusive (neither means fp32)");
  if (check_grad_comm(a, err, errlen)) return -1;
  if (a->min_loss_scale > a->initial_loss_scale)
    return td_errorf(err, errlen, "--min-loss-scale %g is larger than --initial-loss-scale %g",
                a->min_loss_scale, a->initial_loss_scale);
  return 0;
}

/* Does the integer option --name hold something other than its default? */
static int int_is_set(const td_args *a, const char *name) {
  const flag *f = &k_flags[find_flag(name, strlen(name))];
  int64_t def = TD_UNSET;
  if (f->def) parse_int(f->def, &def);
  return *FIELD(a, f, int64_t) != def;
}

/* An option of the other training mode, as Megatron checks it: "--lr-decay-samples"
 * set with --train-iters. */
static int wrong_mode(const td_args *a, const char *const *names, const char *mode, char *err,
                      size_t errlen) {
  for (int i = 0; names[i]; i++)
    if (int_is_set(a, names[i]))
      return td_errorf(err, errlen, "--%s does not apply to %s training; use the %s form", names[i],
                  mode, strstr(names[i], "samples") ? "-iters" : "-samples");
  return 0;
}

static int check_length(td_args *a, char *err, size_t errlen) {
  static const char *const sample_flags[] = {"lr-decay-samples", "lr-warmup-samples",
                                             "lr-wsd-decay-samples", NULL};
  static const char *const iter_flags[] = {"lr-decay-iters", "lr-warmup-iters",
                                           "lr-wsd-decay-iters", NULL};
  int by_iters = a->train_iters != TD_UNSET, by_samples = a->train_samples != TD_UNSET;
  if (!by_iters && !by_samples)
    return td_errorf(err, errlen, "either --train-iters or --train-samples is required");
  if (by_iters && by_samples)
    return td_errorf(err, errlen,
                "--train-iters and --train-samples are exclusive (iteration-based or "
                "sample-based training)");
  if (a->lr_warmup_tokens != TD_UNSET && a->lr_decay_tokens != TD_UNSET &&
      a->lr_warmup_tokens >= a->lr_decay_tokens)
    return td_errorf(err, errlen, "--lr-warmup-tokens %lld must be less than --lr-decay-tokens %lld",
                     (long long)a->lr_warmup_tokens, (long long)a->lr_decay_tokens);
  if (a->lr_decay_style == TD_LR_WSD && (a->lr_decay_tokens != TD_UNSET || a->lr_warmup_tokens != TD_UNSET))
    return td_errorf(err, errlen, "--lr-decay-style WSD has no token-based form (Megatron-DeepSpeed's "
                     "--lr-*-tokens schedule has linear, cosine and inverse-square-root)");
  const char *warmup = by_iters ? "lr-warmup-iters" : "lr-warmup-samples";
  if (!isnan(a->lr_warmup_fraction) && int_is_set(a, warmup))
    return td_errorf(err, errlen, "--lr-warmup-fraction and --%s are exclusive", warmup);
  return by_iters ? wrong_mode(a, sample_flags, "iteration-based (--train-iters)", err, errlen)
                  : wrong_mode(a, iter_flags, "sample-based (--train-samples)", err, errlen);
}

static int check_split(const td_args *a, char *err, size_t errlen) {
  int64_t tp = a->tensor_model_parallel_size, pp = a->pipeline_model_parallel_size;
  if (a->num_attention_heads % tp)
    return td_errorf(err, errlen,
                "--num-attention-heads %lld is not divisible by --tensor-model-parallel-size %lld "
                "(every TP rank holds whole heads)",
                (long long)a->num_attention_heads, (long long)tp);
  if (a->ffn_hidden_size % tp)
    return td_errorf(err, errlen,
                "--ffn-hidden-size %lld is not divisible by --tensor-model-parallel-size %lld",
                (long long)a->ffn_hidden_size, (long long)tp);
  if (a->num_layers % pp)
    return td_errorf(err, errlen,
                "--num-layers %lld is not divisible by --pipeline-model-parallel-size %lld (every "
                "stage holds the same number of layers)",
                (long long)a->num_layers, (long long)pp);
  return 0;
}

static int check_layout(td_args *a, int world_size, char *err, size_t errlen) {
  int64_t tp = a->tensor_model_parallel_size, pp = a->pipeline_model_parallel_size, mp;
  if (check_split(a, err, errlen)) return -1;
  if (td_mul_i64(tp, pp, &mp) || world_size % mp)
    return td_errorf(err, errlen,
                "%d ranks cannot be split into --tensor-model-parallel-size %lld x "
                "--pipeline-model-parallel-size %lld groups",
                world_size, (long long)tp, (long long)pp);
  a->world_size = world_size;
  a->data_parallel_size = world_size / (tp * pp);
  if (tp == 1) a->sequence_parallel = 0; /* as Megatron: nothing to split */
  return 0;
}

int64_t td_args_global_batch_at(const td_args *a, int64_t consumed) {
  if (a->n_batch_steps > 0) { /* the last threshold reached */
    int64_t b = a->batch_step_size[0];
    for (int i = 0; i < a->n_batch_steps && consumed >= a->batch_step_at[i]; i++)
      b = a->batch_step_size[i];
    return b;
  }
  if (a->rampup[0] <= 0 || consumed > a->rampup[2]) return a->global_batch_size;
  /* Megatron's RampupBatchsizeNumMicroBatches: (global - start) / increment steps,
   * each over samples / steps consumed samples */
  double per_increment =
      (double)a->rampup[2] / (double)((a->global_batch_size - a->rampup[0]) / a->rampup[1]);
  return a->rampup[0] + (int64_t)((double)consumed / per_increment) * a->rampup[1];
}

/* Megatron's update_train_iters with a growing batch: the ramp-up iterations one
 * by one, then the rest of --train-samples in whole final batches. */
static int64_t count_iterations(const td_args *a) {
  int64_t it = 0, consumed = 0;
  if (a->rampup[0] > 0) {
    while (consumed <= a->rampup[2]) consumed += td_args_global_batch_at(a, consumed), it++;
    return it + (a->train_samples - consumed) / a->global_batch_size;
  }
  while (consumed + td_args_global_batch_at(a, consumed) <= a->train_samples)
    consumed += td_args_global_batch_at(a, consumed), it++;
  return it;
}

/* "250B" -> 250e9: Megatron's K, M, B, T suffixes. */
static int parse_suffixed(const char *s, size_t n, int64_t *out) {
  char buf[64], *end;
  if (n == 0 || n >= sizeof buf) return -1;
  memcpy(buf, s, n), buf[n] = 0;
  double m = 1, v;
  const char *suf = "KMBT";
  const char *p = strchr(suf, toupper((unsigned char)buf[n - 1]));
  if (p && *p) m = pow(1000.0, (double)(p - suf + 1)), buf[n - 1] = 0;
  v = strtod(buf, &end);
  if (end == buf || *end || !(v >= 0) || v * m > 9e18) return -1;
  *out = (int64_t)(v * m);
  return 0;
}

/* --step-batch-size-schedule "T:B T:B ...": thresholds in tokens (converted to
 * samples by seq-length, as Megatron-LM does), sorted, the first 0. */
static int parse_batch_steps(td_args *a, char *err, size_t errlen) {
  const char *p = a->step_batch_size_schedule;
  a->n_batch_steps = 0;
  while (*p) {
    while (*p == ' ' || *p == ',') p++;
    if (!*p) break;
    size_t n = strcspn(p, " ,"), c = strcspn(p, ":");
    int64_t t, b;
    if (a->n_batch_steps == TD_ARGS_MAX_BATCH_STEPS || c >= n ||
        parse_suffixed(p, c, &t) || parse_suffixed(p + c + 1, n - c - 1, &b) || b <= 0)
      return td_errorf(err, errlen, "--step-batch-size-schedule: '%.*s' is not THRESHOLD:BATCH "
                       "(tokens:samples, at most %d entries)", (int)n, p, TD_ARGS_MAX_BATCH_STEPS);
    int k = a->n_batch_steps++;
    a->batch_step_at[k] = t / a->seq_length, a->batch_step_size[k] = b;
    if (k > 0 && a->batch_step_at[k] <= a->batch_step_at[k - 1])
      return td_errorf(err, errlen, "--step-batch-size-schedule: thresholds must grow");
    p += n;
  }
  if (a->n_batch_steps == 0 || a->batch_step_at[0] != 0)
    return td_errorf(err, errlen, "--step-batch-size-schedule: the first threshold must be 0");
  return 0;
}

static int parse_rampup(td_args *a, char *err, size_t errlen) {
  const td_strlist *l = &a->rampup_batch_size;
  for (int i = 0; i < 3 && l->n == 3; i++)
    if (parse_int(l->v[i], &a->rampup[i]) || a->rampup[i] < (i < 2))
      a->rampup[0] = -1;
  if (l->n != 3 || a->rampup[0] <= 0)
    return td_errorf(err, errlen, "--rampup-batch-size expects START INCREMENT SAMPLES (positive "
                     "integers; SAMPLES may be 0), e.g. --rampup-batch-size 16 16 5859375");
  int64_t diff = a->global_batch_size - a->rampup[0];
  if (diff < 0 || diff % a->rampup[1])
    return td_errorf(err, errlen, "--rampup-batch-size: --global-batch-size %lld minus the start "
                     "%lld must be a non-negative multiple of the increment %lld (as Megatron)",
                     (long long)a->global_batch_size, (long long)a->rampup[0],
                     (long long)a->rampup[1]);
  if (diff == 0) a->rampup[0] = 0; /* nothing to ramp (Megatron would divide by zero) */
  return 0;
}

/* Every batch of the schedule must split into micro-batches on every DP rank. */
static int check_schedule_batches(td_args *a, int64_t per_step, char *err, size_t errlen) {
  int64_t worst = 0;
  for (int64_t b = a->rampup[0]; a->rampup[0] > 0 && b <= a->global_batch_size; b += a->rampup[1])
    if (b % per_step) worst = b;
  for (int i = 0; i < a->n_batch_steps; i++)
    if (a->batch_step_size[i] % per_step) worst = a->batch_step_size[i];
  if (worst)
    return td_errorf(err, errlen, "the global batch %lld of the schedule is not divisible by "
                     "--micro-batch-size %lld x data-parallel size %lld",
                     (long long)worst, (long long)a->micro_batch_size,
                     (long long)a->data_parallel_size);
  return 0;
}

/* --rampup-batch-size / --step-batch-size-schedule: Megatron's rules (sample-based
 * training only; the step schedule gives the global batch itself), then
 * train_iters as Megatron counts them. */
static int check_growing_batch(td_args *a, int64_t per_step, char *err, size_t errlen) {
  int ramp = a->rampup_batch_size.v != NULL, steps = a->step_batch_size_schedule != NULL;
  if (!ramp && !steps) return 0;
  const char *name = ramp ? "--rampup-batch-size" : "--step-batch-size-schedule";
  if (ramp && steps)
    return td_errorf(err, errlen, "--rampup-batch-size and --step-batch-size-schedule are exclusive");
  if (a->train_samples == TD_UNSET)
    return td_errorf(err, errlen, "%s needs --train-samples (Megatron: no batch-size ramp-up for "
                     "iteration-based training)", name);
  if (steps && td_args_given(a, "global-batch-size"))
    return td_errorf(err, errlen, "--step-batch-size-schedule gives the global batch: drop "
                     "--global-batch-size (as Megatron-LM)");
  if (ramp ? parse_rampup(a, err, errlen) : parse_batch_steps(a, err, errlen)) return -1;
  if (steps) {
    a->global_batch_size = 0;
    for (int i = 0; i < a->n_batch_steps; i++)
      if (a->batch_step_size[i] > a->global_batch_size) a->global_batch_size = a->batch_step_size[i];
  }
  if (check_schedule_batches(a, per_step, err, errlen)) return -1;
  a->num_micro_batches = a->global_batch_size / per_step; /* the staging is sized for the largest */
  a->train_iters = count_iterations(a);
  if (a->train_iters < 1)
    return td_errorf(err, errlen, "--train-samples %lld is less than one global batch",
                     (long long)a->train_samples);
  return 0;
}

static int check_batch(td_args *a, char *err, size_t errlen) {
  int64_t per_step;
  if (td_mul_i64(a->micro_batch_size, a->data_parallel_size, &per_step))
    return td_errorf(err, errlen,
                     "--micro-batch-size %lld x data-parallel size %lld samples per step overflow "
                     "a 64-bit count",
                     (long long)a->micro_batch_size, (long long)a->data_parallel_size);
  if (a->global_batch_size == TD_UNSET) a->global_batch_size = per_step;
  if (a->global_batch_size % per_step)
    return td_errorf(err, errlen,
                "--global-batch-size %lld is not divisible by --micro-batch-size %lld x "
                "data-parallel size %lld (= %lld)",
                (long long)a->global_batch_size, (long long)a->micro_batch_size,
                (long long)a->data_parallel_size, (long long)per_step);
  a->num_micro_batches = a->global_batch_size / per_step;
  if (check_growing_batch(a, per_step, err, errlen)) return -1;
  if (a->rampup[0] > 0 || a->n_batch_steps > 0) return 0; /* train_iters: count_iterations */
  if (a->train_samples != TD_UNSET) {
    if (a->train_samples < a->global_batch_size)
      return td_errorf(err, errlen, "--train-samples %lld is less than one global batch (%lld)",
                  (long long)a->train_samples, (long long)a->global_batch_size);
    a->train_iters = a->train_samples / a->global_batch_size; /* as Megatron's update_train_iters */
  }
  return 0;
}

/* The flag (with its value) that set the warmup, or the decay, for messages. */
static const char *warmup_flag(const td_args *a, char *out, size_t n) {
  int by_iters = a->train_samples == TD_UNSET;
  if (!isnan(a->lr_warmup_fraction))
    snprintf(out, n, "--lr-warmup-fraction %g", a->lr_warmup_fraction);
  else
    snprintf(out, n, "--lr-warmup-%s %lld", by_iters ? "iters" : "samples",
             (long long)(by_iters ? a->lr_warmup_iters : a->lr_warmup_samples));
  return out;
}

static const char *decay_flag(const td_args *a, char *out, size_t n) {
  int by_iters = a->train_samples == TD_UNSET;
  snprintf(out, n, "--lr-decay-%s %lld%s", by_iters ? "iters" : "samples",
           (long long)(by_iters ? a->lr_decay_iters : a->lr_decay_samples),
           td_args_given(a, by_iters ? "lr-decay-iters" : "lr-decay-samples")
               ? ""
               : by_iters ? " (default: --train-iters)" : " (default: --train-samples)");
  return out;
}

static int check_schedule(td_args *a, char *err, size_t errlen) {
  char wflag[64], dflag[96];
  if (a->train_samples == TD_UNSET && a->lr_decay_iters == TD_UNSET)
    a->lr_decay_iters = a->train_iters;
  if (a->train_samples != TD_UNSET && a->lr_decay_samples == TD_UNSET)
    a->lr_decay_samples = a->train_samples;
  if (a->min_lr > a->lr)
    return td_errorf(err, errlen, "--min-lr %g is larger than --lr %g", a->min_lr, a->lr);
  if (!isnan(a->decoupled_min_lr) && isnan(a->decoupled_lr))
    return td_errorf(err, errlen,
                     "--decoupled-min-lr needs --decoupled-lr (the group's peak rate)");
  if (a->lr_decay_style == TD_LR_WSD && a->lr_wsd_decay_iters == TD_UNSET &&
      a->lr_wsd_decay_samples == TD_UNSET)
    return td_errorf(err, errlen,
                "--lr-decay-style WSD needs --lr-wsd-decay-iters (or --lr-wsd-decay-samples)");
  td_lr_schedule s;
  td_args_lr_schedule(a, &s);
  if (!isnan(a->decoupled_lr) && s.ds.type != TD_DS_LR_NONE)
    return td_errorf(err, errlen,
                     "--decoupled-lr with the DeepSpeed config's scheduler: DeepSpeed's schedules "
                     "have one rate (drop one of them)");
  if (s.ds.type == TD_DS_LR_NONE && s.warmup_steps >= s.decay_steps) /* DeepSpeed's: its own rules */
    return td_errorf(err, errlen,
                "the learning-rate warmup (%.0f samples) must be shorter than the decay (%.0f "
                "samples): check %s against %s",
                s.warmup_steps, s.decay_steps, warmup_flag(a, wflag, sizeof wflag),
                decay_flag(a, dflag, sizeof dflag));
  return 0;
}

static int check_tokenizer(td_args *a, char *err, size_t errlen) {
  if (a->tokenizer_type < 0 && a->vocab_size == TD_UNSET && !a->vocab_file != !a->merge_file)
    return td_errorf(err, errlen,
                "%s: the GPT-2 tokenizer (GPT2BPETokenizer) needs both --vocab-file and "
                "--merge-file",
                a->vocab_file ? "--vocab-file without --merge-file"
                              : "--merge-file without --vocab-file");
  if (a->tokenizer_type < 0 && a->vocab_file && a->merge_file) a->tokenizer_type = TD_TOK_GPT2BPE;
  if (a->tokenizer_type < 0 && a->vocab_size != TD_UNSET) a->tokenizer_type = TD_TOK_NULL;
  if (a->tokenizer_type < 0)
    return td_errorf(err, errlen,
                "--tokenizer-type is required: GPT2BPETokenizer (with --vocab-file and "
                "--merge-file) or NullTokenizer (with --vocab-size)");
  if (a->tokenizer_type == TD_TOK_GPT2BPE && !(a->vocab_file && a->merge_file))
    return td_errorf(err, errlen,
                "--tokenizer-type GPT2BPETokenizer needs --vocab-file and --merge-file");
  if (a->tokenizer_type == TD_TOK_NULL && a->vocab_size == TD_UNSET)
    return td_errorf(err, errlen,
                "--tokenizer-type NullTokenizer needs --vocab-size N (token ids 0..N-1; "
                "N is the end-of-document id)");
  return 0;
}

/* A --data-path style list, read as the dataset builder will read it. */
static int check_blend(const td_strlist *l, const char *name, char *err, size_t errlen) {
  if (!l->v) return 0;
  td_blend b;
  char why[256];
  if (td_blend_parse(&b, l->v, l->n, why, sizeof why))
    return td_errorf(err, errlen, "--%s: %s", name, why);
  td_blend_free(&b);
  return 0;
}

static int check_data(td_args *a, char *err, size_t errlen) {
  const td_strlist *lists[] = {&a->data_path, &a->train_data_path, &a->valid_data_path,
                               &a->test_data_path};
  const char *names[] = {"data-path", "train-data-path", "valid-data-path", "test-data-path"};
  for (int i = 0; i < 4; i++)
    if (check_blend(lists[i], names[i], err, errlen)) return -1;
  int per_split = a->train_data_path.v || a->valid_data_path.v || a->test_data_path.v;
  if (a->data_path.v && per_split)
    return td_errorf(err, errlen,
                "--data-path and --train-data-path/--valid-data-path/--test-data-path "
                "are exclusive");
  if (!a->mock_data && !a->data_path.v && !a->train_data_path.v)
    return td_errorf(err, errlen,
                "no training data: give --data-path PREFIX (preprocess_data.py output, "
                "without .bin/.idx), --train-data-path, or --mock-data");
  if (a->data_path.v && !a->split) a->split = "969, 30, 1"; /* Megatron's legacy default */
  double m[3][2];
  int present[3];
  return a->split ? td_split_parse(a->split, m, present, err, errlen) : 0;
}

static int check_run(td_args *a, char *err, size_t errlen) {
  if (a->save && a->save_interval == TD_UNSET)
    return td_errorf(err, errlen, "--save needs --save-interval N (as in Megatron)");
  if (a->save_retain_interval != TD_UNSET && !a->save)
    return td_errorf(err, errlen, "--save-retain-interval needs --save (the checkpoints to prune)");
  if (a->save_retain_interval != TD_UNSET && a->save_retain_interval % a->save_interval)
    return td_errorf(err, errlen,
                     "--save-retain-interval %lld is not a multiple of --save-interval %lld (as "
                     "Megatron asserts: the retained iterations must be saved ones)",
                     (long long)a->save_retain_interval, (long long)a->save_interval);
  if (a->use_distributed_optimizer && a->zero_stage == 0) a->zero_stage = 1;
  return 0;
}

/* Megatron's rules (TransformerConfig): --recompute-activations means selective;
 * full needs a method and 1 <= N <= the layers of a pipeline stage; selective
 * takes neither. */
static int check_recompute(td_args *a, char *err, size_t errlen) {
  if (a->recompute_activations) a->recompute_granularity = TD_GRANULARITY_SELECTIVE;
  if (a->checkpoint_activations) { /* Megatron-DeepSpeed's: full, in chunks of N layers */
    a->recompute_granularity = TD_GRANULARITY_FULL;
    if (a->recompute_method < 0) a->recompute_method = 0;
    if (a->recompute_num_layers == TD_UNSET) a->recompute_num_layers = a->checkpoint_num_layers;
  }
  int64_t stage_layers = a->num_layers / a->pipeline_model_parallel_size;
  if (a->recompute_granularity == TD_GRANULARITY_SELECTIVE &&
      (a->recompute_method >= 0 || a->recompute_num_layers != TD_UNSET))
    return td_errorf(err, errlen,
                     "--recompute-%s does not apply to selective recomputation (as in Megatron): "
                     "use --recompute-granularity full",
                     a->recompute_method >= 0 ? "method" : "num-layers");
  if (a->recompute_granularity != TD_GRANULARITY_FULL) return 0;
  if (a->recompute_method < 0)
    return td_errorf(err, errlen,
                     "--recompute-granularity full needs --recompute-method uniform or block");
  char got[64] = ""; /* the value and the flag it came from */
  if (a->recompute_num_layers != TD_UNSET)
    snprintf(got, sizeof got, "; got --%s %lld",
             a->checkpoint_activations && !td_args_given(a, "recompute-num-layers")
                 ? "checkpoint-num-layers"
                 : "recompute-num-layers",
             (long long)a->recompute_num_layers);
  if (a->recompute_num_layers == TD_UNSET || a->recompute_num_layers > stage_layers)
    return td_errorf(err, errlen,
                     "--recompute-granularity full needs --recompute-num-layers between 1 and the "
                     "layers per pipeline stage (%lld)%s",
                     (long long)stage_layers, got);
  return 0;
}

/* Megatron's weight-decay schedule: start and end default to --weight-decay, and
 * the constant style needs them equal. */
static int check_weight_decay(td_args *a, char *err, size_t errlen) {
  if (isnan(a->start_weight_decay)) a->start_weight_decay = a->weight_decay;
  if (isnan(a->end_weight_decay)) a->end_weight_decay = a->weight_decay;
  if (a->weight_decay_incr_style == 0 && a->start_weight_decay != a->end_weight_decay)
    return td_errorf(err, errlen,
                     "--start-weight-decay %g and --end-weight-decay %g differ: give "
                     "--weight-decay-incr-style linear or cosine (constant keeps one value)",
                     a->start_weight_decay, a->end_weight_decay);
  return 0;
}

/* ------------------------------------------------------------------ sizes
 * Every size flag is bounded before anything is computed from it: a product
 * that wraps would size a buffer too small, or a cast to int would turn a
 * count negative (model/gpt_config.h has the model's limits and why). Values
 * that are only compared or counted against (intervals, iterations) are free. */

/* int fields downstream: the loss scaler's window and hysteresis. */
static int check_int_fields(const td_args *a, char *err, size_t errlen) {
  const char *names[] = {"loss-scale-window", "hysteresis"};
  const int64_t v[] = {a->loss_scale_window, a->hysteresis};
  for (int i = 0; i < 2; i++)
    if (v[i] > INT32_MAX)
      return td_errorf(err, errlen, "--%s %lld is too large: at most %d (the loss scaler counts "
                       "steps in a 32-bit int)", names[i], (long long)v[i], INT32_MAX);
  return 0;
}

/* --vocab-size N: ids 0..N, the end-of-document token being N; padded to a
 * multiple of --make-vocab-size-divisible-by x TP. Token ids are int32. */
static int check_vocab(const td_args *a, char *err, size_t errlen) {
  int64_t m, padded = 0;
  if (td_mul_i64(a->make_vocab_size_divisible_by, a->tensor_model_parallel_size, &m) ||
      m > TD_GPT_MAX_DIM)
    return td_errorf(err, errlen,
                     "--make-vocab-size-divisible-by %lld x --tensor-model-parallel-size %lld is "
                     "too large: the vocabulary is padded to a multiple of it, and token ids are "
                     "32-bit ints (at most %d)",
                     (long long)a->make_vocab_size_divisible_by,
                     (long long)a->tensor_model_parallel_size, INT32_MAX);
  if (a->vocab_size == TD_UNSET) return 0; /* the tokenizer's: checked when the model is built */
  if (a->vocab_size > TD_GPT_MAX_DIM - 1)
    return td_errorf(err, errlen,
                     "--vocab-size %lld is too large: at most %d (token ids are 32-bit ints, and "
                     "the end-of-document token takes id --vocab-size)",
                     (long long)a->vocab_size, INT32_MAX - 1);
  padded = (a->vocab_size + m) / m * m; /* N + 1 tokens, rounded up */
  if (padded > TD_GPT_MAX_DIM)
    return td_errorf(err, errlen,
                     "--vocab-size %lld padded to a multiple of --make-vocab-size-divisible-by "
                     "%lld x --tensor-model-parallel-size %lld is %lld tokens: at most %d (token "
                     "ids are 32-bit ints)",
                     (long long)a->vocab_size, (long long)a->make_vocab_size_divisible_by,
                     (long long)a->tensor_model_parallel_size, (long long)padded, INT32_MAX);
  return 0;
}

/* The model's sizes under their flag names (td_gpt_check_sizes), the default
 * --ffn-hidden-size (4 x hidden) only once the hidden size is known to fit. */
static int check_sizes(const td_args *a, char *err, size_t errlen) {
  if (check_int_fields(a, err, errlen) || check_vocab(a, err, errlen)) return -1;
  td_gpt_config c = {.num_layers = a->num_layers, .hidden = a->hidden_size,
                     .heads = a->num_attention_heads, .ffn_hidden = a->ffn_hidden_size,
                     .seq_len = a->seq_length, .max_positions = a->max_position_embeddings,
                     .vocab_size = 1};
  const char *names[TD_GPT_SIZE_COUNT];
  memcpy(names, td_gpt_flag_names, sizeof names);
  if (c.ffn_hidden == TD_UNSET) { /* name the default, which the user did not type */
    c.ffn_hidden = c.hidden <= TD_GPT_MAX_HIDDEN ? 4 * c.hidden : 1;
    names[TD_GPT_SIZE_FFN] = "--ffn-hidden-size (by default 4 x --hidden-size)";
  }
  return td_gpt_check_sizes(&c, a->micro_batch_size, names, err, errlen);
}

/* Megatron's sample counts (td_gpt_num_samples) and one global batch's tokens
 * must fit 64 bits: train = iterations x global batch, validation = (train-iters
 * / eval-interval + 1) x eval-iters x global batch. */
static int check_samples(const td_args *a, char *err, size_t errlen) {
  int64_t gbs = a->global_batch_size, n, evals = a->train_iters / a->eval_interval + 1;
  if (td_mul_i64(a->train_iters, gbs, &n))
    return td_errorf(err, errlen,
                     "--train-iters %lld x --global-batch-size %lld samples overflow a 64-bit "
                     "count",
                     (long long)a->train_iters, (long long)gbs);
  if (td_mul_i64(a->eval_iters, gbs, &n) || td_mul_i64(evals, n, &n))
    return td_errorf(err, errlen,
                     "--eval-iters %lld x --global-batch-size %lld x %lld evaluations (--train-iters "
                     "/ --eval-interval + 1) validation samples overflow a 64-bit count",
                     (long long)a->eval_iters, (long long)gbs, (long long)evals);
  if (td_mul_i64(gbs, a->seq_length + 1, &n))
    return td_errorf(err, errlen,
                     "--global-batch-size %lld x --seq-length %lld tokens per iteration overflow a "
                     "64-bit count",
                     (long long)gbs, (long long)a->seq_length);
  return 0;
}

/* ------------------------------------------------------------ --use-checkpoint-args */

/* Megatron's load_args_from_checkpoint: the flags it takes from the checkpoint,
 * those it takes even when given (force: the architecture's switches), and
 * trident's own architecture flags that --load checks (LayerNorm epsilon, tanh
 * GELU) and that fix the padded vocabulary (Megatron stores padded_vocab_size).
 * The parallel layout is not taken: trident's checkpoints load at any. */
static const struct {
  const char *flag;
  int force;
} k_checkpoint_args[] = {
    {"num-layers", 0},          {"hidden-size", 0},
    {"ffn-hidden-size", 0},     {"seq-length", 0},
    {"num-attention-heads", 0}, {"kv-channels", 0},
    {"max-position-embeddings", 0},
    {"position-embedding-type", 1},
    {"untie-embeddings-and-output-weights", 1},
    {"normalization", 1},       {"tokenizer-type", 0},
    {"make-vocab-size-divisible-by", 0},
    {"vocab-size", 0},          {"layernorm-epsilon", 0},
    {"openai-gelu", 0},
};

/* Flag f's key in the args JSON (td_args_to_json, a checkpoint's "args"): the
 * name with underscores. */
static void json_key(const flag *f, char *key, size_t n) {
  snprintf(key, n, "%s", f->name);
  for (char *c = key; *c; c++)
    if (*c == '-') *c = '_';
}

/* The checkpoint's value of flag f (its args key: the name with underscores) as
 * the command line would give it; 1 when the checkpoint has none (null, absent). */
static int checkpoint_value(const cJSON *args, const flag *f, char *text, size_t n, char *err,
                            size_t errlen) {
  char key[64];
  json_key(f, key, sizeof key);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(args, key);
  if (!v || cJSON_IsNull(v)) return 1;
  if (f->k == K_BOOL && cJSON_IsBool(v)) return snprintf(text, n, "%d", cJSON_IsTrue(v)), 0;
  if (f->k == K_INT && cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) &&
      fabs(v->valuedouble) < 9e15)
    return snprintf(text, n, "%.0f", v->valuedouble), 0;
  if (f->k == K_FLOAT && cJSON_IsNumber(v)) { /* the shortest text of the same double */
    snprintf(text, n, "%.15g", v->valuedouble);
    if (strtod(text, NULL) != v->valuedouble) snprintf(text, n, "%.17g", v->valuedouble);
    return 0;
  }
  if (f->k == K_CHOICE && cJSON_IsString(v)) return snprintf(text, n, "%s", v->valuestring), 0;
  return td_errorf(err, errlen,
                   "--use-checkpoint-args: the checkpoint's \"%s\" is not a value of --%s", key,
                   f->name);
}

/* The flags of k_checkpoint_args from args (the checkpoint's), noted in
 * a->checkpoint_args_note for td_args_print_notes. */
static int take_checkpoint_flags(td_args *a, const cJSON *args, int64_t it, char *err,
                                 size_t errlen) {
  size_t len = (size_t)snprintf(a->checkpoint_args_note, sizeof a->checkpoint_args_note,
                                "from the checkpoint of iteration %lld in %s:", (long long)it,
                                a->load);
  int taken = 0;
  for (size_t i = 0; i < sizeof k_checkpoint_args / sizeof *k_checkpoint_args; i++) {
    const int idx = find_flag(k_checkpoint_args[i].flag, strlen(k_checkpoint_args[i].flag));
    TD_CHECK(idx >= 0, "--use-checkpoint-args: no flag --%s", k_checkpoint_args[i].flag);
    const flag *f = &k_flags[idx];
    char text[64], msg[256];
    if (a->given[idx] && !k_checkpoint_args[i].force) continue;
    int rc = checkpoint_value(args, f, text, sizeof text, err, errlen);
    if (rc < 0) return -1;
    if (rc > 0) continue;
    if (f->k == K_BOOL)
      *FIELD(a, f, int) = text[0] == '1';
    else if (set_value(a, f, text, msg, sizeof msg))
      return td_errorf(err, errlen, "--use-checkpoint-args: the checkpoint's value: %s", msg);
    a->given[idx] = 1;
    if (len < sizeof a->checkpoint_args_note)
      len += (size_t)snprintf(a->checkpoint_args_note + len, sizeof a->checkpoint_args_note - len,
                              "%s --%s%s%s", taken++ ? "," : "", f->name,
                              f->k == K_BOOL ? "=" : " ",
                              f->k == K_BOOL ? (text[0] == '1' ? "on" : "off") : text);
  }
  if (!taken && len < sizeof a->checkpoint_args_note) /* (a --load path may fill it) */
    snprintf(a->checkpoint_args_note + len, sizeof a->checkpoint_args_note - len, " nothing");
  if (a->position_embedding_type > 0 || a->normalization > 0)
    return td_errorf(err, errlen,
                     "--use-checkpoint-args: the checkpoint's model has --position-embedding-type "
                     "%s and --normalization %s; trident builds learned_absolute and LayerNorm",
                     k_position_embeddings[a->position_embedding_type],
                     k_normalizations[a->normalization]);
  return 0;
}

/* --use-checkpoint-args: the model flags of --load's latest checkpoint, as
 * Megatron takes them before its checks; without a checkpoint there (a first
 * run) the flags stay as given, as in Megatron. */
static int use_checkpoint_args(td_args *a, char *err, size_t errlen) {
  if (!a->use_checkpoint_args) return 0;
  if (!a->load)
    return td_errorf(err, errlen, "--use-checkpoint-args needs --load (the checkpoint whose "
                                  "model flags to take)");
  char why[768], *state = NULL;
  int64_t it = td_checkpoint_latest(a->load, why, sizeof why);
  if (it == -2) return td_errorf(err, errlen, "--use-checkpoint-args: --load %s", why);
  if (it == -1) {
    snprintf(a->checkpoint_args_note, sizeof a->checkpoint_args_note,
             "no checkpoint in %s: the flags as given", a->load);
    return 0;
  }
  td_ckpt_contents probe = {.iteration = it}; /* no tensors: the metadata only */
  if (td_checkpoint_load(NULL, a->load, it, &probe, &state, why, sizeof why))
    return td_errorf(err, errlen, "--use-checkpoint-args: --load %s", why);
  cJSON *root = cJSON_Parse(state);
  td_free(state);
  const cJSON *args = cJSON_GetObjectItemCaseSensitive(root, "args");
  int rc = cJSON_IsObject(args)
               ? take_checkpoint_flags(a, args, it, err, errlen)
               : td_errorf(err, errlen,
                           "--use-checkpoint-args: the checkpoint of iteration %lld in %s saved no "
                           "\"args\"",
                           (long long)it, a->load);
  cJSON_Delete(root);
  return rc;
}

int td_args_validate(td_args *a, int world_size, char *err, size_t errlen) {
  /* the DeepSpeed config first: it sets the flags the checks below read (the
   * data-parallel size of its batch identity comes from world_size); then the
   * checkpoint's model flags, before the checks that need them */
  /* refused flags and values were reported by td_args_parse, all at once */
  if (td_ds_config_apply(a, world_size, err, errlen) || use_checkpoint_args(a, err, errlen) ||
      check_weight_decay(a, err, errlen) || check_required(a, err, errlen) || check_sizes(a, err, errlen) || check_model(a, err, errlen) ||
      check_precision(a, err, errlen) || check_length(a, err, errlen) ||
      check_layout(a, world_size, err, errlen) || check_batch(a, err, errlen) || check_samples(a, err, errlen) ||
      check_schedule(a, err, errlen) || check_tokenizer(a, err, errlen) ||
      check_data(a, err, errlen) || check_run(a, err, errlen) ||
      check_recompute(a, err, errlen))
    return -1;
  return 0;
}

/* ------------------------------------------------------------------ derived objects */

void td_args_decoupled_lr_schedule(const td_args *a, td_lr_schedule *s) {
  td_args_lr_schedule(a, s);
  s->max_lr = a->decoupled_lr;
  s->min_lr = isnan(a->decoupled_min_lr) ? a->min_lr : a->decoupled_min_lr;
}

void td_args_lr_schedule(const td_args *a, td_lr_schedule *s) {
  if (td_ds_config_lr_schedule(a->ds, a, s)) return; /* the config's scheduler replaces Megatron's */
  int by_iters = a->train_samples == TD_UNSET;
  double gbs = (double)a->global_batch_size;
  double decay = by_iters ? (double)a->lr_decay_iters * gbs : (double)a->lr_decay_samples;
  double warmup = by_iters ? (double)a->lr_warmup_iters * gbs : (double)a->lr_warmup_samples;
  double wsd = by_iters ? (double)a->lr_wsd_decay_iters * gbs : (double)a->lr_wsd_decay_samples;
  *s = (td_lr_schedule){.init_lr = a->lr_warmup_init,
                        .max_lr = a->lr,
                        .min_lr = a->min_lr,
                        .decay_steps = decay,
                        .warmup_steps =
                            isnan(a->lr_warmup_fraction) ? warmup : a->lr_warmup_fraction * decay,
                        .wsd_decay_steps = wsd,
                        .style = (td_lr_style)a->lr_decay_style,
                        .wsd_style = (td_wsd_style)a->lr_wsd_decay_style};
  /* Megatron-DeepSpeed's token-based schedule; --lr-decay-tokens alone takes the
   * tokens seen when the sample warmup ends (the trainer fills it in), 0 without one */
  s->has_warmup_tokens = a->lr_warmup_tokens != TD_UNSET || (a->lr_decay_tokens != TD_UNSET &&
                                                            s->warmup_steps <= 0);
  s->warmup_tokens = a->lr_warmup_tokens != TD_UNSET ? (double)a->lr_warmup_tokens : 0.0;
  s->has_decay_tokens = a->lr_decay_tokens != TD_UNSET;
  s->decay_tokens = (double)a->lr_decay_tokens;
}

void td_args_wd_schedule(const td_args *a, td_wd_schedule *s) {
  double samples = a->train_samples != TD_UNSET ? (double)a->train_samples
                                                : (double)a->train_iters * (double)a->global_batch_size;
  *s = (td_wd_schedule){.start = a->start_weight_decay, .end = a->end_weight_decay,
                        .incr_steps = samples, .style = (td_wd_style)a->weight_decay_incr_style};
}

void td_args_loss_scaler(const td_args *a, td_loss_scaler *s) {
  if (td_ds_config_loss_scaler(a->ds, s)) return; /* DeepSpeed's rule, from the config's fp16 */
  if ((a->fp16 || a->bf16) && !isnan(a->loss_scale))
    td_loss_scaler_init_constant(s, (float)a->loss_scale);
  else if (a->fp16)
    td_loss_scaler_init_dynamic(s, (float)a->initial_loss_scale, (float)a->min_loss_scale,
                                (int)a->loss_scale_window, (int)a->hysteresis);
  else
    td_loss_scaler_init_constant(s, 1.0f);
}

int64_t td_args_padded_vocab_size(const td_args *a, int64_t tokenizer_vocab_size) {
  int64_t m = a->make_vocab_size_divisible_by * a->tensor_model_parallel_size;
  return (tokenizer_vocab_size + m - 1) / m * m;
}

/* ------------------------------------------------------------------ notes, help, JSON */

void td_args_print_notes(const td_args *a, FILE *f) {
  if (a->use_checkpoint_args && a->checkpoint_args_note[0])
    fprintf(f, "trident: note: --use-checkpoint-args: %s\n", a->checkpoint_args_note);
  for (int i = 0; i < N_FLAGS; i++)
    if (a->given[i] && k_flags[i].k == K_NOTE)
      fprintf(f, "trident: note: --%s: %s\n", k_flags[i].name, k_flags[i].note);
  for (int i = 0; i < a->n_foreign; i++)
    fprintf(f, "trident: note: --%.*s: %s\n", a->foreign_len[i], a->foreign_name[i],
            td_foreign_groups[a->foreign_group[i]].why);
  if (td_args_given(a, "sequence-parallel") && a->tensor_model_parallel_size == 1)
    fprintf(f, "trident: note: --sequence-parallel: off, because tensor parallelism is off (as in "
               "Megatron)\n");
  td_ds_config_print_notes(a->ds, f);
  if (a->grad_reduce_in_bf16 && !a->bf16)
    fprintf(f, "trident: note: --grad-reduce-in-bf16: acts with --bf16 only (as in Megatron, "
               "whose gradient buffer is otherwise in the parameters' dtype); gradients cross "
               "between ranks in %s\n",
            td_dtype_name(a->grad_comm_dtype));
  if (a->recompute_granularity == TD_GRANULARITY_SELECTIVE)
    fprintf(f, "trident: note: --recompute-%s: selective recomputation keeps no attention "
               "scores, and trident's attention never stores them (flash-style, O(seq) per "
               "head): nothing more to recompute\n",
            a->recompute_activations ? "activations" : "granularity selective");
  if (a->recompute_granularity < 0 &&
      (a->recompute_method >= 0 || a->recompute_num_layers != TD_UNSET))
    fprintf(f, "trident: note: --recompute-method / --recompute-num-layers: no effect without "
               "--recompute-granularity full (as in Megatron)\n");
  if (a->data_path.v && !td_args_given(a, "split"))
    fprintf(f,
            "trident: note: --split not given; using Megatron's legacy default \"969, 30, 1\"\n");
}

static void help_default(const flag *f, char *out, size_t n) {
  if (f->k == K_NOTE || f->k == K_REFUSED)
    snprintf(out, n, " [%s]", f->note);
  else if (f->required)
    snprintf(out, n, " (required)");
  else if (f->def)
    snprintf(out, n, " (default: %s)", f->def);
  else if (f->defdoc)
    snprintf(out, n, " (default: %s)", f->defdoc);
  else
    out[0] = 0;
}

static void help_flag(FILE *out, const flag *f) {
  char left[96], def[160];
  int len = snprintf(left, sizeof left, "  --%s%s%s%s%s", f->name, f->alias ? ", --" : "",
                     f->alias ? f->alias : "", f->meta ? " " : "", f->meta ? f->meta : "");
  help_default(f, def, sizeof def);
  fprintf(out, "%s%*s%s%s\n", left, len < 44 ? 44 - len : 1, "", f->help ? f->help : "",
          f->help ? def : def + 1);
  if (!f->choices) return;
  fprintf(out, "      one of:");
  for (int i = 0; f->choices[i]; i++)
    fprintf(out, " %s", f->choices[i]);
  fputc('\n', out);
}

void td_args_print_help(FILE *out) {
  fprintf(out, "usage: mpirun -np N trident train [flags]\n\n"
               "Megatron-LM's pretrain_gpt.py flags, as --flag value or --flag=value.\n");
  for (int g = 0; g < G_COUNT; g++) {
    fprintf(out, "\n%s:\n", k_group_titles[g]);
    for (int i = 0; i < N_FLAGS; i++)
      if (k_flags[i].g == (group)g) help_flag(out, &k_flags[i]);
  }
}

/* Markdown table cells: a '|' would end the cell. */
static void md_text(FILE *out, const char *s) {
  for (; *s; s++) {
    if (*s == '|') fputc('\\', out);
    fputc(*s, out);
  }
}

static const char *md_status(const flag *f) {
  if (f->k == K_REFUSED) return "refused";
  if (f->k == K_NOTE) return f->one ? "note (other values refused)" : "note";
  return "acted on";
}

static void md_flag(FILE *out, const flag *f) {
  char def[320];
  fprintf(out, "| `--%s%s%s`", f->name, f->meta ? " " : "", f->meta ? f->meta : "");
  if (f->alias) fprintf(out, ", `--%s`", f->alias);
  fprintf(out, " | %s | ", md_status(f));
  help_default(f, def, sizeof def);
  if (f->k == K_NOTE || f->k == K_REFUSED) {
    md_text(out, f->note);
    if (f->one) fprintf(out, " (a value other than %s is refused: ", f->one), md_text(out, f->why),
                fputc(')', out);
  } else {
    md_text(out, f->help), md_text(out, def);
  }
  fputs(" |\n", out);
}

void td_args_print_flags_markdown(FILE *out) {
  fprintf(out, "Generated by `trident train --help-flags-markdown` from the flag table "
               "(src/train/args.c, src/train/args_foreign.c); tests/cli_flags_doc.sh checks it.\n");
  for (int g = 0; g < G_COUNT; g++) {
    fprintf(out, "\n### %s\n\n| Flag | trident | What it does here |\n| --- | --- | --- |\n",
            k_group_titles[g]);
    for (int i = 0; i < N_FLAGS; i++)
      if (k_flags[i].g == (group)g) md_flag(out, &k_flags[i]);
  }
  fprintf(out, "\n### Megatron-LM's and Megatron-DeepSpeed's other flags\n\n"
               "Each takes the words after it up to the next flag as its values.\n");
  for (int g = 0; g < td_foreign_group_count; g++) {
    const td_foreign_group *fg = &td_foreign_groups[g];
    fprintf(out, "\n**%s**: ", fg->refused ? "refused" : "note");
    md_text(out, fg->why);
    fputs(":", out);
    for (const char *p = fg->names; *p;) {
      const char *e = strchr(p, ' ');
      int n = e ? (int)(e - p) : (int)strlen(p);
      fprintf(out, " `--%.*s`", n, p);
      if (!e) break;
      p = e + 1;
    }
    fputc('\n', out);
  }
}

static cJSON *list_json(const td_strlist *l) {
  if (!l->v) return cJSON_CreateNull();
  cJSON *arr = cJSON_CreateArray();
  for (int i = 0; i < l->n; i++)
    cJSON_AddItemToArray(arr, cJSON_CreateString(l->v[i]));
  return arr;
}

static cJSON *value_json(const td_args *a, const flag *f) {
  switch (f->k) {
  case K_INT: {
    int64_t v = *FIELD(a, f, int64_t);
    return v == TD_UNSET ? cJSON_CreateNull() : cJSON_CreateNumber((double)v);
  }
  case K_FLOAT: {
    double v = *FIELD(a, f, double);
    return isnan(v) ? cJSON_CreateNull() : cJSON_CreateNumber(v);
  }
  case K_BOOL: return cJSON_CreateBool(*FIELD(a, f, int));
  case K_STR: {
    const char *v = *FIELD(a, f, const char *);
    return v ? cJSON_CreateString(v) : cJSON_CreateNull();
  }
  case K_CHOICE: {
    int v = *FIELD(a, f, int);
    return v < 0 ? cJSON_CreateNull() : cJSON_CreateString(f->choices[v]);
  }
  case K_LIST: return list_json(FIELD(a, f, td_strlist));
  case K_NOTE:
  case K_REFUSED: break;
  }
  return NULL;
}

cJSON *td_args_to_json(const td_args *a) {
  cJSON *o = cJSON_CreateObject();
  for (int i = 0; i < N_FLAGS; i++) {
    const flag *f = &k_flags[i];
    if (f->k == K_NOTE || f->k == K_REFUSED) continue;
    char key[64];
    json_key(f, key, sizeof key);
    cJSON_AddItemToObject(o, key, value_json(a, f));
  }
  cJSON_AddNumberToObject(o, "world_size", (double)a->world_size);
  cJSON_AddNumberToObject(o, "data_parallel_size", (double)a->data_parallel_size);
  cJSON_AddNumberToObject(o, "num_micro_batches", (double)a->num_micro_batches);
  return o;
}

const char *td_args_device(const td_args *a) {
  if (a->device >= 0) return k_devices[a->device];
  const char *e = getenv("TRIDENT_DEVICE");
  return e && *e ? e : "auto";
}
