/* Megatron-LM's training output, character for character (training.py:
 * training_log, evaluate_and_print_results, num_floating_point_operations).
 *
 * The iteration line, printed every --log-interval iterations:
 *  " [2026-11-22 10:11:42] iteration      100/    1000 | consumed samples:         6400 |
 *   elapsed time per iteration (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 0.2 |
 *   learning rate: 6.000000E-05 | global batch size:    64 | lm loss: 5.123456E+00 |
 *   loss scale: 65536.0 | grad norm: 1.234 | number of skipped iterations:   0 |
 *   number of nan iterations:   0 |"   (one line)
 * Throughput only with --log-throughput; grad norm only when gradients are clipped
 * (--clip-grad > 0: Megatron computes the norm there), then num zeros and params
 * norm when they were computed (their flags); lm loss only when its mean
 * is > 0 (a NaN mean, or an interval of only skipped iterations, is left out, as Megatron does); loss scale always (1.0
 * without fp16). Iteration time and loss are averaged over the interval:
 * time over all its iterations, loss over the ones not skipped.
 *
 * Run as Megatron-DeepSpeed (--deepspeed), the line is that fork's
 * (megatron/training.py training_log): no timestamp, consumed tokens after
 * consumed samples, the learning rate as %.3E, no throughput field, then after
 * the norms " curriculum seqlen: %5d |" (with a seqlen curriculum) and
 * " actual seqlen: %5d |", the skipped and nan counts, " samples per
 * second: %.3f |" (global batch over the mean iteration time) and " TFLOPs: %.2f
 * |" (td_mds_flops_per_iteration over the time and the world size):
 *  " iteration      100/    1000 | consumed samples:         6400 | consumed tokens:
 *   1638400 | elapsed time per iteration (ms): 1234.5 | learning rate: 6.000E-05 |
 *   global batch size:    64 | lm loss: 5.123456E+00 | loss scale: 1.0 | grad norm:
 *   1.234 | actual seqlen:   256 | number of skipped iterations:   0 | number of nan
 *   iterations:   0 | samples per second: 51.843 | TFLOPs: 0.12 |" */
#ifndef TD_TRAIN_TRAIN_LOG_H
#define TD_TRAIN_TRAIN_LOG_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* What happened since the last log line; zero it after printing. */
typedef struct {
  double loss_sum;  /* lm loss summed over advanced (not skipped) iterations */
  int64_t advanced; /* iterations whose update was applied */
  int64_t skipped;  /* iterations skipped for inf/NaN gradients (fp16 overflow) */
  int64_t nan;      /* skipped iterations whose loss itself was inf or NaN */
} td_log_interval;

/* Account one iteration: its global-batch mean lm loss and whether it was skipped. */
void td_log_interval_add(td_log_interval *w, double lm_loss, int skipped);

typedef struct {
  struct tm when; /* local time of the log line */
  int64_t iteration, train_iters, consumed_samples, global_batch_size;
  double interval_seconds;    /* wall time of the whole interval */
  int log_throughput;         /* --log-throughput */
  double flops_per_iteration; /* td_gpt_flops_per_iteration(global batch) */
  int world_size;
  double learning_rate, loss_scale;
  int has_decoupled_lr;           /* --decoupled-lr: its group's rate follows the learning rate */
  double decoupled_learning_rate;
  int has_grad_norm;
  double grad_norm;
  int has_num_zeros, has_params_norm; /* --log-num-zeros-in-grad, --log-params-norm */
  double num_zeros, params_norm;
  int deepspeed;           /* Megatron-DeepSpeed's line (above) */
  int has_loss_scale;      /* it prints " loss scale:" only when DeepSpeed's optimizer has one */
  int64_t consumed_tokens; /* its fields: tokens so far, the sequence length, */
  int64_t seq_length;             /* tokens per sample this iteration ("actual seqlen") */
  int curriculum;                 /* the seqlen curriculum is on: */
  int64_t curriculum_seqlen;      /* its difficulty (" curriculum seqlen: %5d |") */
  double mds_flops_per_iteration; /* and its FLOP count (td_mds_flops_per_iteration) */
} td_train_log;

/* Format the line (without newline) into buf; returns what snprintf returns. */
int td_format_train_log(char *buf, size_t n, const td_train_log *l, const td_log_interval *w);

/* The validation block: a line of dashes, " validation loss at PREFIX | lm loss value:
 * X | lm loss PPL: Y | ", the dashes again; three lines, each ending in '\n'. PREFIX
 * is "iteration N" during training, "iteration N on validation set" at the end
 * ("... on test set" for the test split). PPL = exp(min(20, loss)). */
int td_format_validation(char *buf, size_t n, const char *prefix, double lm_loss);

/* Model FLOPs of one iteration over batch_size samples, Megatron's
 * num_floating_point_operations for a GPT with standard multi-head attention,
 * GELU MLP, no MoE: every GEMM counted 3 times (forward, input grad, weight grad)
 * at 2 FLOPs per multiply-add, causal attention counted at half:
 *   B s [ L (12 h f + 6 (4 h^2 + h s)) + 6 h V ]
 * (B batch, s seq-length, L layers, h hidden, f ffn-hidden, V padded vocabulary).
 * Tied or untied output layer: the same logit GEMM, the same count. */
double td_gpt_flops_per_iteration(int64_t batch_size, int64_t seq_length, int64_t num_layers,
                                  int64_t hidden_size, int64_t ffn_hidden_size,
                                  int64_t padded_vocab_size);

/* Megatron-DeepSpeed's count (megatron/utils.py throughput_calculator) for a GPT
 * with multi-head attention and a GELU MLP: multiply-adds of the forward pass
 *   B L (4 h^2 s + 2 h s^2 + 2 f h s) + B V h s
 * (attention's two batched GEMMs counted whole, not causal half), times 3 for
 * forward and backward, plus one more forward under full recomputation (one
 * more of attention's GEMMs under selective), times 2 FLOPs per multiply-add. */
double td_mds_flops_per_iteration(int64_t batch_size, int64_t seq_length, int64_t num_layers,
                                  int64_t hidden_size, int64_t ffn_hidden_size,
                                  int64_t padded_vocab_size, int full_recompute,
                                  int selective_recompute);

#endif
