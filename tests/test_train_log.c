/* Megatron's log lines character for character, and its FLOP count, for given
 * inputs (expected strings written out from Megatron's format specifiers). */
#include <math.h>
#include <string.h>

#include "check.h"
#include "train/train_log.h"

static td_train_log sample_line(void) {
  td_train_log l = {
      .when =
          {.tm_year = 126, .tm_mon = 10, .tm_mday = 22, .tm_hour = 10, .tm_min = 11, .tm_sec = 42},
      .iteration = 100,
      .train_iters = 1000,
      .consumed_samples = 6400,
      .global_batch_size = 64,
      .interval_seconds = 12.8,
      .log_throughput = 1,
      .flops_per_iteration = 2.56e13,
      .world_size = 1,
      .learning_rate = 6e-5,
      .loss_scale = 65536.0,
      .has_grad_norm = 1,
      .grad_norm = 1.2344};
  return l;
}

static void test_full_line(void) {
  td_train_log l = sample_line();
  td_log_interval w = {.loss_sum = 512.3456, .advanced = 100};
  char buf[1024];
  int n = td_format_train_log(buf, sizeof buf, &l, &w);
  const char *want =
      " [2026-11-22 10:11:42] iteration      100/    1000 | consumed samples:         6400 |"
      " elapsed time per iteration (ms): 128.0 | throughput per GPU (TFLOP/s/GPU): 200.0 |"
      " learning rate: 6.000000E-05 | global batch size:    64 | lm loss: 5.123456E+00 |"
      " loss scale: 65536.0 | grad norm: 1.234 | number of skipped iterations:   0 |"
      " number of nan iterations:   0 |";
  CHECK(!strcmp(buf, want) && n == (int)strlen(want), "the full line:\n%s\n%s", buf, want);

  char small[40];
  int m = td_format_train_log(small, sizeof small, &l, &w);
  CHECK(m == n && strlen(small) == sizeof small - 1 && !strncmp(small, want, sizeof small - 1),
        "truncated like snprintf, full length returned");
}

/* --log-num-zeros-in-grad and --log-params-norm: after grad norm, in Megatron's
 * order and formats ({:.1f} and {:.3f}). */
static void test_zeros_and_params_norm(void) {
  td_train_log l = sample_line();
  l.log_throughput = 0;
  l.has_num_zeros = 1, l.num_zeros = 12;
  l.has_params_norm = 1, l.params_norm = 183.45678;
  td_log_interval w = {.loss_sum = 512.3456, .advanced = 100};
  char buf[1024];
  td_format_train_log(buf, sizeof buf, &l, &w);
  CHECK(strstr(buf, " grad norm: 1.234 | num zeros: 12.0 | params norm: 183.457 |"
                    " number of skipped iterations:") != NULL,
        "num zeros and params norm after grad norm: %s", buf);
}

static void test_skips_and_options(void) {
  td_train_log l = sample_line();
  l.log_throughput = 0, l.has_grad_norm = 0, l.loss_scale = 1.0, l.interval_seconds = 20.0;
  td_log_interval w = {0};
  for (int i = 0; i < 98; i++)
    td_log_interval_add(&w, 5.0, 0);
  td_log_interval_add(&w, 7.0, 1);
  td_log_interval_add(&w, NAN, 1);
  CHECK(w.advanced == 98 && w.skipped == 2 && w.nan == 1, "interval counts");
  char buf[1024];
  td_format_train_log(buf, sizeof buf, &l, &w);
  const char *want =
      " [2026-11-22 10:11:42] iteration      100/    1000 | consumed samples:         6400 |"
      " elapsed time per iteration (ms): 200.0 | learning rate: 6.000000E-05 |"
      " global batch size:    64 | lm loss: 5.000000E+00 | loss scale: 1.0 |"
      " number of skipped iterations:   2 | number of nan iterations:   1 |";
  CHECK(!strcmp(buf, want), "time over all iterations, loss over advanced ones:\n%s\n%s", buf,
        want);

  td_log_interval_add(&w, NAN, 0); /* bf16: a NaN loss is not skipped, and not printed */
  td_format_train_log(buf, sizeof buf, &l, &w);
  CHECK(!strstr(buf, "lm loss") && strstr(buf, "| loss scale: 1.0 |"), "NaN mean loss left out");
}

static void test_validation(void) {
  char buf[1024];
  int n = td_format_validation(buf, sizeof buf, "iteration 100", 2.5);
  const char *line = " validation loss at iteration 100 | lm loss value: 2.500000E+00 | lm loss "
                     "PPL: 1.218249E+01 | ";
  char want[1024], dashes[200];
  memset(dashes, '-', 95), dashes[95] = 0; /* len(line) + 1 */
  snprintf(want, sizeof want, "%s\n%s\n%s\n", dashes, line, dashes);
  CHECK(!strcmp(buf, want) && n == (int)strlen(want), "validation block:\n%s", buf);

  td_format_validation(buf, sizeof buf, "iteration 1000 on validation set", 25.0);
  CHECK(strstr(buf, "| lm loss value: 2.500000E+01 | lm loss PPL: 4.851652E+08 | ") &&
            strstr(buf, " validation loss at iteration 1000 on validation set |"),
        "PPL capped at exp(20)");
}

static void test_flops(void) {
  /* B s [L (12 h f + 6 (4 h^2 + h s)) + 6 h V] = 8 * (4800 + 768) */
  CHECK(td_gpt_flops_per_iteration(2, 4, 1, 8, 32, 16) == 44544.0, "tiny model: 44544 FLOPs");
  /* GPT-2 124M, global batch 8 x 1024, vocab padded to 50304 (Megatron's formula) */
  double f = td_gpt_flops_per_iteration(8, 1024, 12, 768, 3072, 50304);
  CHECK(f == 6537477095424.0, "GPT-2 124M: %.1f FLOPs per iteration", f);
}

/* Run as Megatron-DeepSpeed (--deepspeed): that fork's line, written out from
 * its training_log's format specifiers. */
static void test_megatron_deepspeed_line(void) {
  td_train_log l = sample_line();
  l.deepspeed = 1, l.consumed_tokens = 6400 * 256, l.seq_length = 256;
  l.mds_flops_per_iteration = 2.56e13, l.loss_scale = 1.0, l.has_loss_scale = 1;
  td_log_interval w = {.loss_sum = 512.3456, .advanced = 100};
  char buf[1024];
  int n = td_format_train_log(buf, sizeof buf, &l, &w);
  const char *want =
      " iteration      100/    1000 | consumed samples:         6400 | consumed tokens:      1638400 |"
      " elapsed time per iteration (ms): 128.0 | learning rate: 6.000E-05 |"
      " global batch size:    64 | lm loss: 5.123456E+00 | loss scale: 1.0 | grad norm: 1.234 |"
      " actual seqlen:   256 | number of skipped iterations:   0 | number of nan iterations:   0 |"
      " samples per second: 500.000 | TFLOPs: 200.00 |";
  CHECK(!strcmp(buf, want) && n == (int)strlen(want), "Megatron-DeepSpeed's line:\n%s\n%s", buf,
        want);
  /* an optimizer without a loss scale (DeepSpeed's bare or BF16_Optimizer): the field goes */
  l.has_loss_scale = 0;
  td_format_train_log(buf, sizeof buf, &l, &w);
  CHECK(strstr(buf, " | lm loss: 5.123456E+00 | grad norm: 1.234 |") && !strstr(buf, "loss scale"),
        "without DeepSpeed's loss scale: %s", buf);
}

/* throughput_calculator's count, term by term as Megatron-DeepSpeed writes it
 * (multi-head attention: gqa 1; GELU MLP: ffn_multiplier 2). */
static void test_mds_flops(void) {
  const double B = 8, s = 1024, L = 12, h = 768, heads = 12, f = 3072, V = 50304;
  double pre_post = B * L * (1 + 2 / 1 + 1) * h * h * s;
  double mha = B * L * 2 * (h / heads) * heads * s * s;
  double ffn = B * L * 2 * f * h * s, logit = B * V * h * s;
  double fwd = pre_post + mha + ffn + logit;
  double want[3] = {2 * 3 * fwd, 2 * 4 * fwd, 2 * (3 * fwd + mha)};
  double got[3] = {td_mds_flops_per_iteration(8, 1024, 12, 768, 3072, 50304, 0, 0),
                   td_mds_flops_per_iteration(8, 1024, 12, 768, 3072, 50304, 1, 0),
                   td_mds_flops_per_iteration(8, 1024, 12, 768, 3072, 50304, 0, 1)};
  for (int i = 0; i < 3; i++)
    CHECK(fabs(got[i] - want[i]) <= 1e-12 * want[i],
          "Megatron-DeepSpeed FLOPs (recompute %s): %.6e vs %.6e",
          i == 0 ? "none" : i == 1 ? "full" : "selective", got[i], want[i]);
}

int main(void) {
  test_megatron_deepspeed_line();
  test_mds_flops();
  test_full_line();
  test_zeros_and_params_norm();
  test_skips_and_options();
  test_validation();
  test_flops();
  return tst_finish();
}
