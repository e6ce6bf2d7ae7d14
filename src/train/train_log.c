#include "train/train_log.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void td_log_interval_add(td_log_interval *w, double lm_loss, int skipped) {
  if (skipped) {
    w->skipped++;
    w->nan += !isfinite(lm_loss);
    return;
  }
  w->advanced++;
  w->loss_sum += lm_loss;
}

/* Append to buf at *len, keeping the snprintf convention (count what did not fit). */
static void append(char *buf, size_t n, int *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t n, int *len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t at = (size_t)*len < n ? (size_t)*len : n;
  int k = vsnprintf(buf ? buf + at : NULL, n - at, fmt, ap);
  va_end(ap);
  *len += k > 0 ? k : 0;
}

/* The norms, shared by both lines. */
static void norms(char *buf, size_t n, int *len, const td_train_log *l) {
  if (l->has_grad_norm) append(buf, n, len, " grad norm: %.3f |", l->grad_norm);
  if (l->has_num_zeros) append(buf, n, len, " num zeros: %.1f |", l->num_zeros);
  if (l->has_params_norm) append(buf, n, len, " params norm: %.3f |", l->params_norm);
}

/* Megatron-DeepSpeed's line (train_log.h). */
static int format_mds(char *buf, size_t n, const td_train_log *l, const td_log_interval *w,
                      double sec_per_iter, double loss) {
  int len = 0;
  append(buf, n, &len, " iteration %8lld/%8lld | consumed samples: %12lld | consumed tokens: %12lld |",
         (long long)l->iteration, (long long)l->train_iters, (long long)l->consumed_samples,
         (long long)l->consumed_tokens);
  append(buf, n, &len, " elapsed time per iteration (ms): %.1f |", sec_per_iter * 1000.0);
  append(buf, n, &len, " learning rate: %.3E |", l->learning_rate);
  if (l->has_decoupled_lr)
    append(buf, n, &len, " decoupled learning rate: %.3E |", l->decoupled_learning_rate);
  append(buf, n, &len, " global batch size: %5lld |", (long long)l->global_batch_size);
  if (loss > 0.0) append(buf, n, &len, " lm loss: %.6E |", loss);
  if (l->has_loss_scale) append(buf, n, &len, " loss scale: %.1f |", l->loss_scale);
  norms(buf, n, &len, l);
  if (l->curriculum)
    append(buf, n, &len, " curriculum seqlen: %5lld |", (long long)l->curriculum_seqlen);
  append(buf, n, &len, " actual seqlen: %5lld |", (long long)l->seq_length);
  append(buf, n, &len, " number of skipped iterations: %3lld | number of nan iterations: %3lld |",
         (long long)w->skipped, (long long)w->nan);
  append(buf, n, &len, " samples per second: %.3f |", (double)l->global_batch_size / sec_per_iter);
  append(buf, n, &len, " TFLOPs: %.2f |",
         l->mds_flops_per_iteration / (sec_per_iter * l->world_size * 1e12));
  return len;
}

int td_format_train_log(char *buf, size_t n, const td_train_log *l, const td_log_interval *w) {
  int len = 0;
  int64_t iters = w->advanced + w->skipped;
  double sec_per_iter = l->interval_seconds / (double)(iters > 0 ? iters : 1);
  double loss = w->loss_sum / (double)(w->advanced > 0 ? w->advanced : 1);
  if (l->deepspeed) return format_mds(buf, n, l, w, sec_per_iter, loss);
  char when[32];
  strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &l->when);
  append(buf, n, &len, " [%s] iteration %8lld/%8lld | consumed samples: %12lld |", when,
         (long long)l->iteration, (long long)l->train_iters, (long long)l->consumed_samples);
  append(buf, n, &len, " elapsed time per iteration (ms): %.1f |", sec_per_iter * 1000.0);
  if (l->log_throughput)
    append(buf, n, &len, " throughput per GPU (TFLOP/s/GPU): %.1f |",
           l->flops_per_iteration / (sec_per_iter * 1e12 * l->world_size));
  append(buf, n, &len, " learning rate: %.6E |", l->learning_rate);
  if (l->has_decoupled_lr) /* Megatron's: on the stages holding the embeddings or the head */
    append(buf, n, &len, " decoupled learning rate: %.6E |", l->decoupled_learning_rate);
  append(buf, n, &len, " global batch size: %5lld |", (long long)l->global_batch_size);
  if (loss > 0.0) append(buf, n, &len, " lm loss: %.6E |", loss); /* as Megatron: avg > 0 */
  append(buf, n, &len, " loss scale: %.1f |", l->loss_scale);
  norms(buf, n, &len, l);
  append(buf, n, &len, " number of skipped iterations: %3lld | number of nan iterations: %3lld |",
         (long long)w->skipped, (long long)w->nan);
  return len;
}

int td_format_validation(char *buf, size_t n, const char *prefix, double lm_loss) {
  char line[512];
  int k = snprintf(line, sizeof line,
                   " validation loss at %s | lm loss value: %.6E | lm loss PPL: %.6E | ", prefix,
                   lm_loss, exp(fmin(20.0, lm_loss)));
  char dashes[sizeof line + 1];
  size_t nd = (k < (int)sizeof line ? (size_t)k : sizeof line - 1) + 1; /* Megatron: len + 1 */
  memset(dashes, '-', nd);
  dashes[nd] = 0;
  int len = 0;
  append(buf, n, &len, "%s\n%s\n%s\n", dashes, line, dashes);
  return len;
}

double td_gpt_flops_per_iteration(int64_t batch_size, int64_t seq_length, int64_t num_layers,
                                  int64_t hidden_size, int64_t ffn_hidden_size,
                                  int64_t padded_vocab_size) {
  double B = (double)batch_size, s = (double)seq_length, L = (double)num_layers;
  double h = (double)hidden_size, f = (double)ffn_hidden_size, V = (double)padded_vocab_size;
  double mlp = 3 * 2 * h * f * 2; /* h->f and f->h GEMMs */
  double attn = 3 * 2 *
                (h * 3 * h       /* QKV projection */
                 + h * s / 2 * 2 /* QK^T and (QK^T)V, causal half */
                 + h * h);       /* output projection */
  double logits = 3 * 2 * h * V;
  return B * s * (L * (mlp + attn) + logits);
}

double td_mds_flops_per_iteration(int64_t batch_size, int64_t seq_length, int64_t num_layers,
                                  int64_t hidden_size, int64_t ffn_hidden_size,
                                  int64_t padded_vocab_size, int full_recompute,
                                  int selective_recompute) {
  double B = (double)batch_size, s = (double)seq_length, L = (double)num_layers;
  double h = (double)hidden_size, f = (double)ffn_hidden_size, V = (double)padded_vocab_size;
  double attention = B * L * 2 * h * s * s;
  double fwd = B * L * (4 * h * h * s + 2 * f * h * s) + attention + B * V * h * s;
  double macs = 3 * fwd + (full_recompute ? fwd : 0) + (selective_recompute ? attention : 0);
  return 2 * macs;
}
