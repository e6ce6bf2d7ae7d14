/* DeepSpeed JSON configs (train/ds_config.h): parsing into the struct, DeepSpeed's
 * batch inference and checks at several data-parallel sizes, every error of a
 * file reported together, unknown keys with the closest known one, conflicts
 * with Megatron flags, what lands in td_args, and the two DeepSpeed pieces with
 * their own arithmetic: the DynamicLossScaler rule on a scripted overflow
 * sequence, the WarmupLR / WarmupDecayLR / WarmupCosineLR formulas, and
 * LRRangeTest and OneCycle (rates and Adam betas) step for step against their
 * objects as lr_schedules.py runs them. Every expected number is worked out here
 * from DeepSpeed's rules. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "train/args.h"
#include "train/ds_config.h"

#define SMALL                                                                                      \
  "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "                       \
  "--max-position-embeddings 32 --train-iters 10 --mock-data "                                     \
  "--tokenizer-type NullTokenizer --vocab-size 100 --deepspeed"

/* Megatron-DeepSpeed's examples_deepspeed GPT config, with its placeholders filled. */
static const char *const k_example =
    "{\n"
    "  \"train_batch_size\" : 16,\n"
    "  \"train_micro_batch_size_per_gpu\": 2,\n"
    "  \"steps_per_print\": 10,\n"
    "  \"zero_optimization\": { \"stage\": 1 },\n"
    "  \"gradient_clipping\": 1.0,\n"
    "  \"prescale_gradients\": false,\n"
    "  \"fp16\": { \"enabled\": true, \"loss_scale\": 0, \"loss_scale_window\": 500,\n"
    "            \"hysteresis\": 2, \"min_loss_scale\": 1, \"initial_scale_power\": 11 },\n"
    "  \"wall_clock_breakdown\" : false\n"
    "}\n";

typedef struct {
  char buf[4096];
  char *argv[256];
  int argc;
} cmdline;

/* argv: the words of line, then --deepspeed_config_dict json (when json). */
static void split(cmdline *c, const char *line, const char *json) {
  snprintf(c->buf, sizeof c->buf, "%s", line);
  c->argc = 0;
  c->argv[c->argc++] = "train";
  for (char *t = strtok(c->buf, " "); t; t = strtok(NULL, " "))
    c->argv[c->argc++] = t;
  if (!json) return;
  c->argv[c->argc++] = "--deepspeed_config_dict";
  c->argv[c->argc++] = (char *)json;
}

/* Parse and validate SMALL + extra with the config on world_size ranks; --lr 1e-3
 * is added unless extra gives --lr or the config has an optimizer block. */
static int run(td_args *a, const char *extra, const char *json, int world_size, char *err,
               size_t n) {
  static cmdline c;
  char line[2048];
  int lr = !strstr(extra, "--lr ") && !(json && strstr(json, "\"optimizer\""));
  snprintf(line, sizeof line, "%s %s%s", SMALL, extra, lr ? " --lr 1e-3" : "");
  split(&c, line, json);
  err[0] = 0;
  if (td_args_parse(a, c.argc, c.argv, err, n)) return -1;
  return td_args_validate(a, world_size, err, n);
}

static void expect_error(const char *extra, const char *json, int world, const char *want) {
  td_args a;
  char err[4096];
  int rc = run(&a, extra, json, world, err, sizeof err);
  CHECK(rc == -1 && strstr(err, want), "%s %s (np %d) -> '%s' (want '%s')", extra, json, world, err,
        want);
  td_args_free(&a);
}

/* ------------------------------------------------------------------ parse */

static void test_parse_example(void) {
  char err[1024];
  td_ds_config *c = td_ds_config_parse(k_example, "example", err, sizeof err);
  CHECK(c != NULL, "Megatron-DeepSpeed's example config parses (%s)", c ? "" : err);
  if (!c) return;
  CHECK(c->train_batch_size == 16 && c->train_micro_batch_size_per_gpu == 2 &&
            c->gradient_accumulation_steps == TD_DS_ABSENT,
        "batch keys read, the absent one marked absent");
  CHECK(c->zero.present && c->zero.stage == 1 && c->gradient_clipping == 1.0, "ZeRO 1, clip 1.0");
  CHECK(c->fp16.enabled == 1 && c->fp16.loss_scale == 0 && c->fp16.initial_scale_power == 11 &&
            c->fp16.loss_scale_window == 500 && c->fp16.hysteresis == 2 &&
            c->fp16.min_loss_scale == 1 && c->fp16.consecutive_hysteresis == -1,
        "fp16 block read");
  CHECK(c->bf16.enabled == -1 && !c->optimizer.present && !c->scheduler.present,
        "absent blocks stay absent");
  CHECK(c->n_notes == 1 && strstr(c->notes[0], "steps_per_print"),
        "one note, for steps_per_print (prescale_gradients false is DeepSpeed's default)");
  td_ds_config_free(c);
}

static void test_parse_values(void) {
  char err[1024];
  const char *text =
      "{\"train_micro_batch_size_per_gpu\": \"auto\", \"bfloat16\": {\"enabled\": true},"
      " \"optimizer\": {\"type\": \"adamw\", \"params\": {\"lr\": 3e-4, \"betas\": [0.9, 0.95],"
      " \"eps\": 1e-8, \"weight_decay\": 0.1}},"
      " \"zero_optimization\": {\"stage\": 2, \"reduce_bucket_size\": 5e8,"
      " \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}},"
      " \"comms_logger\": {\"enabled\": false, \"prof_ops\": [\"all_reduce\"]}}";
  td_ds_config *c = td_ds_config_parse(text, "t", err, sizeof err);
  CHECK(c != NULL, "a config with every value type parses (%s)", c ? "" : err);
  if (!c) return;
  CHECK(c->train_micro_batch_size_per_gpu == TD_DS_AUTO, "\"auto\" kept for Megatron's flag");
  CHECK(c->bf16.enabled == 1, "the old name bfloat16 is bf16");
  CHECK(c->optimizer.type == TD_DS_OPT_ADAMW, "optimizer names match without case, as DeepSpeed's");
  CHECK(c->optimizer.lr == 3e-4 && c->optimizer.betas[0] == 0.9 && c->optimizer.betas[1] == 0.95 &&
            c->optimizer.weight_decay == 0.1,
        "optimizer params");
  CHECK(c->zero.reduce_bucket_size == 500000000,
        "5e8 is an integer (DeepSpeed's own default form)");
  CHECK(c->zero.offload_optimizer_device == 1, "offload device cpu");
  int stage_note = 0, offload_note = 0;
  for (int i = 0; i < c->n_notes; i++) {
    stage_note += strstr(c->notes[i], "zero_optimization.stage") != NULL;
    offload_note += strstr(c->notes[i], "identity") != NULL;
  }
  CHECK(stage_note == 0 && offload_note == 0, "stage 2 runs as itself, offload_optimizer cpu is "
                                              "applied (as --cpu-optimizer): no notes");
  td_ds_config_free(c);
}

/* Every error of a file at once, each naming its JSON path. */
static void test_errors_collected(void) {
  static const char *const text =
      "{\"zero_optimization\": {\"stage4\": 1, \"stage\": 5},\n"
      " \"fp16\": {\"enabled\": \"yes\", \"loss_scale_windw\": 10},\n"
      " \"gradient_clip\": 1.0,\n"
      " \"optimizer\": {\"type\": \"Lamb\"},\n"
      " \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"cos_min_ratio\": 0.1}},\n"
      " \"curriculum_learning\": {\"enabled\": true, \"curriculum_type\": \"seqlen\"},\n"
      " \"steps_per_print\": 10, \"steps_per_print\": 20}";
  static const char *const want[] = {
      "12 errors:",
      "zero_optimization.stage4: unknown key (did you mean zero_optimization.stage?)",
      "zero_optimization.stage: expects 0, 1, 2 or 3; got 5",
      "fp16.enabled: expects true or false; got \"yes\"",
      "fp16.loss_scale_windw: unknown key (did you mean fp16.loss_scale_window?)",
      "gradient_clip: unknown key (did you mean gradient_clipping?)",
      "optimizer.type Lamb: not yet implemented",
      "scheduler.params.cos_min_ratio: not a parameter of WarmupDecayLR",
      "scheduler.params.total_num_steps: WarmupDecayLR needs it",
      "curriculum_learning: enabled needs \"min_difficulty\" (DeepSpeed asserts it)",
      "curriculum_learning: enabled needs \"max_difficulty\"",
      "curriculum_learning: enabled needs \"schedule_type\"",
      "steps_per_print: duplicate key",
      NULL};
  char err[4096];
  td_ds_config *c = td_ds_config_parse(text, "--deepspeed_config bad.json", err, sizeof err);
  CHECK(c == NULL, "a bad config is refused");
  CHECK(!strncmp(err, "--deepspeed_config bad.json: ", 29), "the message names the file");
  for (int i = 0; want[i]; i++)
    CHECK(strstr(err, want[i]), "reported: %s", want[i]);
}

/* More errors than the caller's buffer holds: as many lines as fit, then how many more. */
static void test_errors_truncated(void) {
  char text[4096] = "{", err[300];
  for (int i = 0; i < 40; i++)
    snprintf(text + strlen(text), sizeof text - strlen(text), "%s\"unknown_key_%d\": 1",
             i ? ", " : "", i);
  strcat(text, "}");
  td_ds_config *c = td_ds_config_parse(text, "x", err, sizeof err);
  const char *more = strstr(err, "... and ");
  int shown = 0;
  for (const char *p = err; (p = strstr(p, "unknown_key_")); p++)
    shown++;
  CHECK(!c && strstr(err, "x: 40 errors:") && more && atoi(more + 8) == 40 - shown && shown > 0,
        "40 errors in 300 bytes: %d shown, then '%s'", shown, more ? more : "(none)");
}

static void test_error_kinds(void) {
  static const struct {
    const char *text, *want;
  } r[] = {
      {"{\"train_batch_size\": 8,", "not valid JSON at line 1"},
      {"[1, 2]", "expects a JSON object {...} at the top"},
      {"{\"train_batch_size\": 0}",
       "train_batch_size: expects a positive integer or \"auto\"; got 0"},
      {"{\"gradient_accumulation_steps\": 2.5}", "expects a positive integer; got 2.5"},
      {"{\"gradient_clipping\": -1}", "gradient_clipping: expects a non-negative number; got -1"},
      {"{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"betas\": [0.9, 1.5]}}}",
       "optimizer.params.betas: expects [beta1, beta2], two numbers in [0, 1)"},
      {"{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"max_grad_norm\": 1.0}}}",
       "optimizer.params.max_grad_norm: DeepSpeed refuses it as well"},
      {"{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"adam_w_mode\": false, "
       "\"weight_decay\": 0.1}}}",
       "adam_w_mode false: Adam with L2 regularisation"},
      {"{\"optimizer\": {\"type\": \"Adagrad\"}}", "optimizer.type Adagrad: not yet implemented"},
      {"{\"optimizer\": {\"type\": \"SGD\"}}",
       "optimizer.type: expects one of \"Adam\", \"AdamW\""},
      {"{\"scheduler\": {\"type\": \"OneCycle\"}}",
       "scheduler.params: OneCycle needs cycle_min_lr and cycle_max_lr"},
      {"{\"scheduler\": {\"type\": \"LRRangeTest\", \"params\": {\"warmup_num_steps\": 5}}}",
       "scheduler.params.warmup_num_steps: not a parameter of LRRangeTest"},
      {"{\"scheduler\": {\"type\": \"OneCycle\", \"params\": {\"cycle_min_lr\": 1e-4, "
       "\"cycle_max_lr\": 1e-3, \"cycle_min_mom\": 1.5}}}",
       "scheduler.params.cycle_min_mom: expects"},
      {"{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_type\": \"cosine\"}}}",
       "warmup_type: expects one of \"log\", \"linear\""},
      {"{\"fp16\": {\"enabled\": true}, \"bf16\": {\"enabled\": true}}",
       "fp16.enabled and bf16.enabled are both true"},
      {"{\"zero_optimization\": {\"offload_optimizer\": {\"device\": \"nvme\"}}}",
       "offload_optimizer.device nvme needs zero_optimization.offload_optimizer.nvme_path"},
      {"{\"zero_optimization\": {\"offload_param\": {\"device\": \"nvme\"}}}",
       "offload_param.device nvme: parameter offload to NVMe (ZeRO-Infinity) is not yet implemented"},
      {"{\"zero_optimization\": {\"zero_quantized_gradients\": true}}",
       "zero_quantized_gradients: quantized gradient communication"},
      {"{\"data_efficiency\": {\"enabled\": true}}", "data_efficiency.enabled: data efficiency"},
      {"{\"elasticity\": {\"enabled\": true, \"max_train_batch_size\": 64}}",
       "elasticity.enabled: elastic training would take over the batch sizes"},
      {"{\"compression_training\": {}}", "compression_training: Megatron-DeepSpeed turns"},
      {"{\"fp16\": {\"enabled\": true, \"fp16_master_weights_and_grads\": true}}",
       "fp16_master_weights_and_grads: fp16 master weights"},
  };
  for (size_t i = 0; i < sizeof r / sizeof *r; i++) {
    char err[2048] = "";
    td_ds_config *c = td_ds_config_parse(r[i].text, "x", err, sizeof err);
    CHECK(!c && strstr(err, r[i].want), "%s -> '%s' (want '%s')", r[i].text, err, r[i].want);
    td_ds_config_free(c);
  }
  /* disabled features are accepted as they are */
  char err[256];
  td_ds_config *c = td_ds_config_parse(
      "{\"curriculum_learning\": {\"enabled\": false, \"curriculum_type\": \"seqlen\"}, "
      "\"communication_data_type\": \"fp32\", \"wandb\": {\"enabled\": false}}",
      "x", err, sizeof err);
  CHECK(c && c->n_notes == 1 && strstr(c->notes[0], "communication_data_type: fp32"),
        "disabled curriculum and wandb say nothing, fp32 communication one note");
  td_ds_config_free(c);
}

/* ------------------------------------------------------------------ batch */

/* DeepSpeed's inference: any two of train_batch_size (TB), micro batch (MB) and
 * accumulation (GAS) give the third with integer division, one alone sets GAS 1. */
static void test_batch_inference(void) {
  static const struct {
    const char *json;
    int world;
    int64_t tb, mb, gas;
  } r[] = {
      {"{\"train_batch_size\": 16, \"train_micro_batch_size_per_gpu\": 2}", 2, 16, 2, 16 / 2 / 2},
      {"{\"train_batch_size\": 16, \"gradient_accumulation_steps\": 2}", 4, 16, 16 / 4 / 2, 2},
      {"{\"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": 3}", 2, 2 * 3 * 2,
       2, 3},
      {"{\"train_batch_size\": 8}", 2, 8, 8 / 2, 1},
      {"{\"train_micro_batch_size_per_gpu\": 3}", 4, 3 * 4, 3, 1},
      {"{\"train_batch_size\": 24, \"train_micro_batch_size_per_gpu\": 3, "
       "\"gradient_accumulation_steps\": 4}",
       2, 24, 3, 4},
  };
  for (size_t i = 0; i < sizeof r / sizeof *r; i++) {
    td_args a;
    char err[1024];
    int rc = run(&a, "", r[i].json, r[i].world, err, sizeof err);
    CHECK(rc == 0 && a.global_batch_size == r[i].tb && a.micro_batch_size == r[i].mb &&
              a.num_micro_batches == r[i].gas && a.ds->gradient_accumulation_steps == r[i].gas,
          "%s at DP %d: global %lld micro %lld accumulation %lld (want %lld %lld %lld) %s",
          r[i].json, r[i].world, (long long)a.global_batch_size, (long long)a.micro_batch_size,
          (long long)a.num_micro_batches, (long long)r[i].tb, (long long)r[i].mb,
          (long long)r[i].gas, rc ? err : "");
    td_args_free(&a);
  }
  /* DP is ranks / (TP x PP): 4 ranks at TP 2 are DP 2 */
  td_args a;
  char err[1024];
  int rc =
      run(&a, "--tensor-model-parallel-size 2", "{\"train_batch_size\": 8}", 4, err, sizeof err);
  CHECK(rc == 0 && a.micro_batch_size == 8 / 2, "TP 2 of 4 ranks: DP 2, micro batch 4 (%s)", err);
  td_args_free(&a);
}

static void test_batch_auto_and_errors(void) {
  td_args a;
  char err[1024];
  int rc = run(&a, "--micro-batch-size 2 --global-batch-size 8",
               "{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": \"auto\"}", 2,
               err, sizeof err);
  CHECK(rc == 0 && a.global_batch_size == 8 && a.micro_batch_size == 2 && a.num_micro_batches == 2,
        "\"auto\" takes Megatron's flags, as Megatron-DeepSpeed fills them in (%s)", err);
  td_args_free(&a);
  rc = run(&a, "--micro-batch-size 2", "{\"train_batch_size\": \"auto\"}", 2, err, sizeof err);
  CHECK(rc == 0 && a.global_batch_size == 2 * 2, "\"auto\" global batch: Megatron's micro x DP");
  td_args_free(&a);
  expect_error(
      "", "{\"train_micro_batch_size_per_gpu\": \"auto\"}", 1,
      "train_micro_batch_size_per_gpu \"auto\" takes --micro-batch-size, which is not given");
  expect_error("", "{\"gradient_accumulation_steps\": 2}", 1,
               "either train_batch_size or train_micro_batch_size_per_gpu is needed");
  expect_error("", "{}", 1, "either train_batch_size or train_micro_batch_size_per_gpu is needed");
  /* 10 / 4 / 1 = 2 accumulation steps, and 4 x 2 x 1 = 8 != 10 */
  expect_error("", "{\"train_batch_size\": 10, \"train_micro_batch_size_per_gpu\": 4}", 1,
               "train_batch_size 10 is not train_micro_batch_size_per_gpu 4 x "
               "gradient_accumulation_steps 2 x data-parallel size 1 (= 8)");
  /* 4 samples over 8 ranks: 4 / 8 = 0 per rank */
  expect_error("", "{\"train_batch_size\": 4}", 8,
               "train_micro_batch_size_per_gpu comes out as 0 with data-parallel size 8");
  expect_error("--global-batch-size 16",
               "{\"train_batch_size\": 8, \"train_micro_batch_size_per_gpu\": 2}", 2,
               "--global-batch-size 16 vs train_batch_size 8 in the file");
  expect_error("--micro-batch-size 4",
               "{\"train_batch_size\": 8, \"train_micro_batch_size_per_gpu\": 2}", 2,
               "--micro-batch-size 4 vs train_micro_batch_size_per_gpu 2 in the file");
}

/* ------------------------------------------------------------------ onto the flags */

static void test_applied(void) {
  td_args a;
  char err[1024];
  int rc = run(&a, "--micro-batch-size 2 --global-batch-size 16 --zero-stage 1 --fp16", k_example,
               2, err, sizeof err);
  CHECK(rc == 0, "the example with Megatron-DeepSpeed's agreeing flags validates (%s)", err);
  CHECK(a.fp16 && !a.bf16 && a.zero_stage == 1 && a.clip_grad == 1.0, "fp16, ZeRO-1, clip 1.0");
  CHECK(a.initial_loss_scale == 2048.0 && a.loss_scale_window == 500 && a.hysteresis == 2 &&
            isnan(a.loss_scale),
        "dynamic scale from 2^11, window 500");
  td_loss_scaler s;
  td_args_loss_scaler(&a, &s);
  CHECK(s.dynamic && s.deepspeed && s.scale == 2048.0f && s.growth_interval == 500 &&
            s.hysteresis == 2 && !s.consecutive_hysteresis,
        "the trainer gets DeepSpeed's scaler");
  td_args_free(&a);

  rc = run(&a, "",
           "{\"train_batch_size\": 8, \"bf16\": {\"enabled\": true}, "
           "\"zero_optimization\": {\"stage\": 2, \"reduce_bucket_size\": 3000}, "
           "\"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": 3e-4, "
           "\"betas\": [0.9, 0.95]}}, \"wall_clock_breakdown\": true, "
           "\"tensorboard\": {\"enabled\": true, \"output_path\": \"tb/\", "
           "\"job_name\": \"gpt\"}}",
           1, err, sizeof err);
  CHECK(rc == 0, "a config with optimizer, ZeRO-2, buckets, timers and TensorBoard (%s)", err);
  CHECK(a.bf16 && a.clip_grad == 0.0, "bf16; no gradient_clipping: DeepSpeed's 0");
  CHECK(a.lr == 3e-4 && a.adam_beta2 == 0.95 && a.adam_eps == 1e-8 && a.weight_decay == 0.0,
        "the optimizer block's params, DeepSpeed's defaults for the rest (weight decay 0)");
  CHECK(a.zero_stage == 2 && a.ddp_bucket_size == 3000,
        "stage 2, bucket 3000 elements");
  CHECK(a.timing_log_level == 1, "wall_clock_breakdown: --timing-log-level 1");
  CHECK(a.tensorboard_dir && !strcmp(a.tensorboard_dir, "tb/gpt"), "output_path/job_name");
  td_loss_scaler s2;
  td_args_loss_scaler(&a, &s2);
  CHECK(!s2.dynamic && s2.scale == 1.0f, "bf16: no loss scaling");
  char *notes = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&notes, &len);
  td_args_print_notes(&a, f);
  fclose(f);
  CHECK(strstr(notes, "gradient_clipping: not in the file: DeepSpeed's default 0") &&
            !strstr(notes, "zero_optimization.stage 2") && !strstr(notes, "note: --zero-stage 2") &&
            strstr(notes, "optimizer.params: not in the file, so DeepSpeed's defaults: eps 1e-08, "
                          "weight_decay 0"),
        "notes: clipping default, none for stage 2 (it runs), optimizer defaults:\n%s",
        notes);
  free(notes);
  td_args_free(&a);
}

/* --zero-stage against the file (but 3 over a file below it): the file's stage
 * runs, with a note (Megatron-DeepSpeed passes the flag only to deepspeed.zero.Init). */
static void test_zero_stage_from_file(void) {
  static const struct {
    const char *flag, *json, *note;
    int stage;
  } cases[] = {
      {"--zero-stage 1", "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 2}}",
       "--zero-stage 1 vs zero_optimization.stage 2: ZeRO stage 2 runs, as in DeepSpeed", 2},
      {"--zero-stage 1", "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3}}",
       "--zero-stage 1 vs zero_optimization.stage 3: ZeRO stage 3 runs", 3},
      {"--zero-stage 2", "{\"train_batch_size\": 8}",
       "--zero-stage 2 vs zero_optimization.stage 0 (absent: DeepSpeed's default): ZeRO stage 0 "
       "runs", 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    td_args a;
    char err[1024];
    int rc = run(&a, cases[i].flag, cases[i].json, 2, err, sizeof err);
    char *notes = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&notes, &len);
    if (rc == 0) td_args_print_notes(&a, f);
    fclose(f);
    CHECK(rc == 0 && a.zero_stage == cases[i].stage && strstr(notes, cases[i].note),
          "%s with %s: stage %d runs, noted (rc %d, %s):\n%s", cases[i].flag, cases[i].json,
          cases[i].stage, rc, err, notes);
    free(notes);
    td_args_free(&a);
  }
}

/* A flag DeepSpeed's engine does not read (clipping, loss scaling): the file's
 * value runs and a note names the flag. */
static void expect_note(const char *extra, const char *json, const char *want) {
  td_args a;
  char err[4096];
  int rc = run(&a, extra, json, 1, err, sizeof err);
  char *notes = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&notes, &len);
  if (rc == 0) td_args_print_notes(&a, f);
  fclose(f);
  CHECK(rc == 0 && strstr(notes, want), "%s %s: runs, noted '%s' (rc %d, %s):\n%s", extra, json,
        want, rc, err, notes);
  free(notes);
  td_args_free(&a);
}

/* The dtype data-parallel gradients cross in: fp32 unless Megatron's
 * --grad-reduce-in-bf16 (under --bf16 only, as Megatron) or DeepSpeed's
 * communication_data_type asks; the config's fp16 needs fp16 training. */
static void test_grad_comm_dtype(void) {
#define BF16_ON "{\"train_batch_size\": 8, \"bf16\": {\"enabled\": true}}"
  static const struct {
    const char *extra, *json;
    td_dtype want;
  } r[] = {
      {"", "{\"train_batch_size\": 8}", TD_F32},
      {"--bf16", BF16_ON, TD_F32},
      {"--bf16 --grad-reduce-in-bf16", BF16_ON, TD_BF16},
      {"--grad-reduce-in-bf16", "{\"train_batch_size\": 8}", TD_F32},
      {"--fp16 --grad-reduce-in-bf16", "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true}}",
       TD_F32},
      {"", "{\"train_batch_size\": 8, \"bf16\": {\"enabled\": true}, "
           "\"communication_data_type\": \"bf16\"}", TD_BF16},
      {"", "{\"train_batch_size\": 8, \"communication_data_type\": \"bf16\"}", TD_BF16},
      {"", "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true}, "
           "\"communication_data_type\": \"fp16\"}", TD_F16},
      {"", "{\"train_batch_size\": 8, \"bf16\": {\"enabled\": true}, "
           "\"communication_data_type\": \"fp32\"}", TD_F32},
  };
  for (size_t i = 0; i < sizeof r / sizeof *r; i++) {
    td_args a;
    char err[1024];
    int rc = run(&a, r[i].extra, r[i].json, 1, err, sizeof err);
    CHECK(rc == 0 && a.grad_comm_dtype == r[i].want, "'%s' %s: gradients cross in %s (rc %d, %s)",
          r[i].extra, r[i].json, td_dtype_name(r[i].want), rc, err);
    td_args_free(&a);
  }
  expect_note("--grad-reduce-in-bf16", "{\"train_batch_size\": 8}",
              "--grad-reduce-in-bf16: acts with --bf16 only");
#undef BF16_ON
}

/* Which of DeepSpeed's optimizer wrappers runs, by whether it has a loss scale
 * (Megatron-DeepSpeed's log line prints it only then). */
static void test_logs_loss_scale(void) {
  static const struct {
    const char *json;
    int stage, want;
  } cases[] = {
      {"\"fp16\": {\"enabled\": true}}", 0, 1},                        /* FP16_Optimizer */
      {"\"fp16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": 2}}", 2, 1},
      {"\"steps_per_print\": 1}", 0, 0},                                 /* fp32: bare optimizer */
      {"\"zero_optimization\": {\"stage\": 1}}", 1, 1},                 /* DeepSpeedZeroOptimizer */
      {"\"bf16\": {\"enabled\": true}}", 0, 0},                        /* BF16_Optimizer */
      {"\"bf16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": 1}}", 1, 1},
      {"\"bf16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": 1}, "
       "\"data_types\": {\"grad_accum_dtype\": \"fp32\"}}", 1, 0},       /* BF16_Optimizer */
      {"\"bf16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": 2}, "
       "\"data_types\": {\"grad_accum_dtype\": \"fp32\"}}", 2, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char json[512], err[1024];
    snprintf(json, sizeof json, "{\"train_batch_size\": 8, %s", cases[i].json);
    td_ds_config *c = td_ds_config_parse(json, "test", err, sizeof err);
    int got = c ? td_ds_config_logs_loss_scale(c, cases[i].stage) : -1;
    CHECK(got == cases[i].want, "%s at ZeRO %d: loss scale logged %d (want %d) %s", json,
          cases[i].stage, got, cases[i].want, c ? "" : err);
    td_ds_config_free(c);
  }
}

static void test_conflicts(void) {
  const char *base = "{\"train_batch_size\": 8, ";
  char j[512];
#define JSON(rest) (snprintf(j, sizeof j, "%s%s", base, rest), j)
  expect_note("--clip-grad 1.0", JSON("\"gradient_clipping\": 0.5}"),
              "--clip-grad 1 is not read under DeepSpeed: gradient_clipping 0.5 from the file "
              "applies");
  expect_note("--clip-grad 1.0", JSON("\"steps_per_print\": 1}"),
              "--clip-grad 1 is not read under DeepSpeed: gradient_clipping (not in the file: "
              "DeepSpeed's default 0");
  expect_error("--fp16", JSON("\"bf16\": {\"enabled\": true}}"), 1,
               "--fp16 vs bf16.enabled true in the file");
  expect_error("--bf16", JSON("\"steps_per_print\": 1}"), 1,
               "--bf16 vs bf16.enabled (absent: DeepSpeed's default false)");
  expect_error("--lr 1e-3",
               JSON("\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 3e-4}}}"), 1,
               "--lr 0.001 vs optimizer.params.lr 0.0003 in the file");
  expect_error("--weight-decay 0.1", JSON("\"optimizer\": {\"type\": \"AdamW\", \"params\": {}}}"),
               1,
               "--weight-decay 0.1 vs optimizer.params.weight_decay (not in the file: DeepSpeed's "
               "default 0)");
  expect_error("--zero-stage 3", JSON("\"zero_optimization\": {\"stage\": 1}}"), 1,
               "--zero-stage 3 vs zero_optimization.stage 1: Megatron-DeepSpeed builds the model "
               "partitioned for stage 3");
  expect_error("--use-distributed-optimizer", JSON("\"steps_per_print\": 1}"), 1,
               "--use-distributed-optimizer (ZeRO-1) vs zero_optimization.stage 0");
  expect_error("--bf16 --grad-reduce-in-bf16",
               JSON("\"bf16\": {\"enabled\": true}, \"communication_data_type\": \"fp32\"}"), 1,
               "--grad-reduce-in-bf16 vs communication_data_type fp32 in the file");
  expect_error("--bf16", JSON("\"bf16\": {\"enabled\": true}, \"communication_data_type\": \"fp16\"}"),
               1, "communication_data_type fp16 needs fp16 training (fp16.enabled true)");
  expect_error("--ddp-bucket-size 100",
               JSON("\"zero_optimization\": {\"reduce_bucket_size\": 200}}"), 1,
               "--ddp-bucket-size 100 vs zero_optimization.reduce_bucket_size 200");
  expect_note("--hysteresis 4", JSON("\"fp16\": {\"enabled\": true}}"),
              "--hysteresis 4 is not read under DeepSpeed: fp16.hysteresis (not in the file: "
              "DeepSpeed's default 2)");
  expect_note("--loss-scale 128", JSON("\"fp16\": {\"enabled\": true, \"loss_scale\": 0}}"),
              "--loss-scale 128 is not read under DeepSpeed: fp16.loss_scale 0 (dynamic");
  expect_note("--loss-scale 12", JSON("\"bf16\": {\"enabled\": true}}"),
              "--loss-scale 12 is not read under DeepSpeed: bf16.enabled true");
  expect_error(
      "--lr-decay-style cosine",
      JSON("\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_num_steps\": 5}}}"), 1,
      "--lr-decay-style vs scheduler WarmupLR in the file: DeepSpeed's schedule replaces");
  expect_error(
      "--tensorboard-dir tb",
      JSON("\"tensorboard\": {\"enabled\": true, \"output_path\": \"x\", \"job_name\": \"y\"}}"), 1,
      "--tensorboard-dir tb vs tensorboard (output_path/job_name) x/y");
  /* several conflicts, one message */
  expect_error("--clip-grad 2 --fp16 --lr 1e-3",
               JSON("\"gradient_clipping\": 0.5, \"bf16\": {\"enabled\": true}, \"optimizer\": "
                    "{\"type\": \"Adam\", \"params\": {\"lr\": 2e-3}}}"),
               1, "2 errors:");
  expect_error("--device cuda", JSON("\"zero_optimization\": {\"stage\": 2, \"offload_param\": "
                                     "{\"device\": \"cpu\"}}}"),
               1, "offload_param.device cpu: parameter offload is a ZeRO-3 feature");
  {
    td_args a;
    char err[4096];
    int rc = run(&a, "--device cuda", JSON("\"zero_optimization\": {\"stage\": 3, \"offload_param\": "
                                           "{\"device\": \"cpu\"}, \"offload_optimizer\": {\"device\": \"cpu\"}}}"),
                 1, err, sizeof err);
    CHECK(rc == 0 && a.offload_param == 1 && a.cpu_optimizer == 1 && a.zero_stage == 3,
          "ZeRO-3 with offload_param and offload_optimizer cpu: both taken (%s)", err);
    td_args_free(&a);
  }
  /* offload_optimizer cpu and the old cpu_offload switch are --cpu-optimizer */
  const char *const offloads[] = {
      "\"zero_optimization\": {\"stage\": 1, \"offload_optimizer\": {\"device\": \"cpu\"}}}",
      "\"zero_optimization\": {\"stage\": 1, \"cpu_offload\": true}}"};
  for (int i = 0; i < 2; i++) {
    td_args a;
    char err[4096];
    int rc = run(&a, "--device cuda --use-distributed-optimizer", JSON(offloads[i]), 1, err,
                 sizeof err);
    CHECK(rc == 0 && a.cpu_optimizer == 1, "%s: Adam offloaded to the host (%s)", j, err);
    td_args_free(&a);
  }
#undef JSON
  expect_error("--deepspeed_config ds.json", "{}", 1,
               "--deepspeed_config and --deepspeed_config_dict are exclusive");
}

/* ------------------------------------------------------------------ DeepSpeed's loss scaler */

typedef struct {
  int inf;
  float scale;
} scripted;

static void run_script(td_loss_scaler *s, const scripted *steps, int n, const char *what) {
  int ok = 1;
  for (int i = 0; i < n; i++) {
    int rc = td_loss_scaler_update(s, steps[i].inf);
    if (rc || s->scale != steps[i].scale) {
      CHECK(0, "%s step %d (inf=%d): scale %g rc %d, expected %g", what, i + 1, steps[i].inf,
            s->scale, rc, steps[i].scale);
      ok = 0;
    }
  }
  CHECK(ok, "%s follows the script over %d steps", what, n);
}

/* Window 3, hysteresis 2. n counts updates since the last overflow; a good
 * step doubles when n > 0 and n % 3 == 0, then n += 1; an overflow halves when
 * the budget is 1 (else spends one unit), and sets n = 0. */
static void test_scaler_script(void) {
  static const scripted steps[] = {
      {0, 65536},  {0, 65536},
      {0, 65536},  /* n = 0, 1, 2: no growth yet (Megatron grows at the 3rd) */
      {0, 131072}, /* n = 3: 3 % 3 == 0, double, budget back to 2 */
      {1, 131072}, /* budget 2 -> 1, no change; n = 0 */
      {1, 65536},  /* budget 1: halve */
      {1, 32768},  /* still 1: halve again */
      {0, 32768},  {0, 32768},
      {0, 32768}, /* n = 0, 1, 2 */
      {0, 65536}, /* n = 3: double, budget 2 */
      {1, 65536}, /* budget 2 -> 1 */
      {0, 65536}, /* a good step does not refill (not consecutive)... */
      {1, 32768}, /* ...so this overflow halves at once */
  };
  td_loss_scaler s;
  td_loss_scaler_init_deepspeed(&s, 65536.0f, 1.0f, 3, 2, 0);
  run_script(&s, steps, (int)(sizeof steps / sizeof *steps), "DeepSpeed's rule");
  /* Megatron's rule on the first four steps grows one step earlier */
  td_loss_scaler m;
  td_loss_scaler_init_dynamic(&m, 65536.0f, 1.0f, 3, 2);
  for (int i = 0; i < 3; i++)
    td_loss_scaler_update(&m, 0);
  CHECK(m.scale == 131072.0f, "Megatron doubles on the 3rd good step, DeepSpeed on the 4th");
}

/* consecutive_hysteresis: every good step refills the budget. */
static void test_scaler_consecutive(void) {
  static const scripted steps[] = {
      {1, 8}, /* budget 2 -> 1 */
      {0, 8}, /* refilled to 2 */
      {1, 8}, /* 2 -> 1 again: without the refill this would halve */
      {1, 4}, /* budget 1: halve */
  };
  td_loss_scaler s;
  td_loss_scaler_init_deepspeed(&s, 8.0f, 1.0f, 100, 2, 1);
  run_script(&s, steps, 4, "consecutive hysteresis");
}

/* DeepSpeed stops when an overflow finds the scale at its minimum. */
static void test_scaler_floor(void) {
  td_loss_scaler s;
  td_loss_scaler_init_deepspeed(&s, 4.0f, 2.0f, 1000, 1, 0);
  CHECK(td_loss_scaler_update(&s, 1) == 0 && s.scale == 2.0f, "hysteresis 1: halve to the floor 2");
  CHECK(td_loss_scaler_update(&s, 1) == -1 && s.scale == 2.0f,
        "an overflow at the floor: -1 (DeepSpeed raises), the scale left as it was");
  td_loss_scaler_init_deepspeed(&s, 3.0f, 2.0f, 1000, 1, 0);
  td_loss_scaler_update(&s, 1);
  CHECK(s.scale == 2.0f, "max(3 / 2, 2) = 2: clamped to the floor");
  td_loss_scaler_init_deepspeed(&s, 1.0f, 1.0f, 1, 1, 0);
  td_loss_scaler_update(&s, 0); /* n = 0 */
  td_loss_scaler_update(&s, 0); /* n = 1: 1 % 1 == 0 */
  CHECK(s.scale == 2.0f, "window 1: the second good step doubles");
}

/* ------------------------------------------------------------------ DeepSpeed's schedules */

static int close_to(double got, double want) {
  return fabs(got - want) <= 1e-12 * fabs(want) + 1e-18;
}

/* The rate of optimizer step k (0-based): DeepSpeed's get_lr at iteration k - 1,
 * with trident's counter in samples (8 per step here). */
#define LR_AT_STEP(s, k) td_lr_at(s, 8.0 * (k))
#define CHECK_STEP(s, k, want)                                                                     \
  CHECK(close_to(LR_AT_STEP(s, k), want), "%s step %d: %.12g (want %.12g)", #want, k,              \
        LR_AT_STEP(s, k), (double)(want))

static td_lr_schedule ds_schedule(td_ds_lr_type type, int linear) {
  td_lr_schedule s = {0};
  s.ds = (td_ds_lr){.type = type,
                    .linear_warmup = linear,
                    .min_lr = 1e-5,
                    .max_lr = 1e-3,
                    .base_lr = 1e-3,
                    .warmup_min_ratio = 0.1,
                    .cos_min_ratio = 0.01,
                    .warmup_steps = 10,
                    .total_steps = 110,
                    .samples_per_step = 8};
  return s;
}

static void test_warmup_lr(void) {
  const double lo = 1e-5, d = 1e-3 - 1e-5;
  td_lr_schedule s = ds_schedule(TD_DS_LR_WARMUP, 0);
  CHECK_STEP(&s, 0, lo);                              /* iteration -1: warmup_min_lr */
  CHECK_STEP(&s, 1, lo + d * log(1.0) / log(10.0));   /* iteration 0: log(1) = 0 */
  CHECK_STEP(&s, 4, lo + d * log(4.0) / log(10.0));   /* iteration 3 */
  CHECK_STEP(&s, 10, lo + d * log(10.0) / log(10.0)); /* iteration 9: the peak */
  CHECK_STEP(&s, 500, 1e-3);
  s = ds_schedule(TD_DS_LR_WARMUP, 1);
  CHECK_STEP(&s, 4, lo + d * 3.0 / 10.0); /* linear: i / W */
  CHECK_STEP(&s, 11, 1e-3);
}

static void test_warmup_decay_lr(void) {
  const double lo = 1e-5, d = 1e-3 - 1e-5;
  td_lr_schedule s = ds_schedule(TD_DS_LR_WARMUP_DECAY, 1);
  s.ds.total_steps = 100;
  CHECK_STEP(&s, 5, lo + d * 4.0 / 10.0);                 /* warmup, iteration 4 */
  CHECK_STEP(&s, 11, lo + d * (100.0 - 10) / (100 - 10)); /* iteration 10: decay starts at 1 */
  CHECK_STEP(&s, 56, lo + d * (100.0 - 55) / (100 - 10)); /* iteration 55: half way */
  CHECK_STEP(&s, 101, lo);                                /* iteration 100: the floor */
  CHECK_STEP(&s, 300, lo);                                /* max(0, negative) */
}

static void test_warmup_cosine_lr(void) {
  td_lr_schedule s = ds_schedule(TD_DS_LR_WARMUP_COSINE, 0);
  const double base = 1e-3, wmin = 0.1, cmin = 0.01, pi = acos(-1.0);
  CHECK_STEP(&s, 0, 0.0);         /* iteration -1: ratio 0 */
  CHECK_STEP(&s, 1, base * wmin); /* iteration 0: log(1) = 0 */
  CHECK_STEP(&s, 5, base * (wmin + log(5.0) / log(10.0) * (1 - wmin))); /* iteration 4 */
  /* iteration 10: p = (10 - 10 + 1) / (110 - 10) */
  CHECK_STEP(&s, 11, base * (cmin + (1 - cmin) * (1 + cos(pi * 0.01)) / 2));
  CHECK_STEP(&s, 60, base * (cmin + (1 - cmin) * 0.5)); /* iteration 59: p = 1/2 */
  CHECK_STEP(&s, 110, base * cmin);                     /* iteration 109: p = 1 */
  CHECK_STEP(&s, 1000, base * cmin);                    /* p clamped at 1 */
}

/* DeepSpeed's LRRangeTest and OneCycle as objects: constructed (iteration -1),
 * then step() after every optimizer step, get_lr() / get_mom() read at each
 * call, as lr_schedules.py runs them; the rate and betas of each step. */
typedef struct {
  double lr, beta1, beta2;
} ref_values;

typedef struct {
  int one_cycle;
  double min_lr, step_size, step_rate; /* LRRangeTest */
  int staircase;
  double lo, hi, first, second, decay_step, decay_lr, mlo, mhi, decay_mom; /* OneCycle */
  int last; /* last_batch_iteration */
} ref_sched;

static double ref_scale(const ref_sched *r) {
  double total = r->first + r->second, ratio = r->first / total, n = r->last + 1.0;
  double cycle = floor(1.0 + n / total), x = 1.0 + n / total - cycle;
  return x <= ratio ? x / ratio : (x - 1.0) / (ratio - 1.0);
}

static ref_values ref_get(const ref_sched *r) {
  if (!r->one_cycle) {
    double interval = (r->last + 1.0) / r->step_size;
    if (r->staircase) interval = floor(interval);
    return (ref_values){r->min_lr * (1.0 + r->step_rate * interval), NAN, NAN};
  }
  double total = r->first + r->second;
  if (r->last < total) {
    double h = ref_scale(r);
    return (ref_values){r->lo + (r->hi - r->lo) * h, r->mhi - (r->mhi - r->mlo) * h, 0.99};
  }
  double d = r->last - total + 1.0;
  double lr = r->decay_step == 0 || r->decay_lr == 0 ? r->lo : r->lo / (1.0 + r->decay_lr * d / r->decay_step);
  double m = r->decay_step == 0 || r->decay_mom == 0 ? r->mhi : r->mhi * (1.0 + r->decay_mom * d / r->decay_step);
  return (ref_values){lr, m, 0.99};
}

/* Steps 0 .. n-1 of the reference against td_lr_at / td_betas_at (8 samples a step). */
static void check_against_reference(const td_lr_schedule *s, ref_sched r, int n, const char *what) {
  ref_values v = r.one_cycle ? (ref_values){r.lo, r.mlo, 0.99} : (ref_values){r.min_lr, NAN, NAN};
  double worst = 0;
  int betas_ok = 1;
  for (int k = 0; k < n; k++) { /* step k runs with v, then step() */
    double lr = td_lr_at(s, 8.0 * k), b1 = NAN, b2 = NAN;
    int has = td_betas_at(s, 8.0 * k, &b1, &b2);
    worst = fmax(worst, fabs(lr - v.lr) / fmax(fabs(v.lr), 1e-30));
    if (r.one_cycle) betas_ok &= has && fabs(b1 - v.beta1) <= 1e-12 && b2 == 0.99;
    else betas_ok &= !has;
    r.last++;
    v = ref_get(&r);
  }
  CHECK(worst <= 1e-12 && betas_ok, "%s: %d steps' rates within %.3g of DeepSpeed's object, betas %s",
        what, n, worst, betas_ok ? "too" : "DIFFER");
}

static void test_range_test_and_one_cycle(void) {
  td_lr_schedule s = {0};
  s.ds = (td_ds_lr){.type = TD_DS_LR_RANGE_TEST, .min_lr = 2e-4, .range_step_size = 7,
                    .range_step_rate = 0.5, .samples_per_step = 8};
  ref_sched r = {.min_lr = 2e-4, .step_size = 7, .step_rate = 0.5, .last = -1};
  check_against_reference(&s, r, 40, "LRRangeTest, continuous");
  s.ds.range_staircase = r.staircase = 1;
  check_against_reference(&s, r, 40, "LRRangeTest, staircase");
  s.ds = (td_ds_lr){.type = TD_DS_LR_ONE_CYCLE, .cycle_lo = 1e-4, .cycle_hi = 1e-3,
                    .cycle_first = 10, .cycle_total = 25, .cycle_momentum = 1, .mom_lo = 0.8,
                    .mom_hi = 0.95, .samples_per_step = 8};
  r = (ref_sched){.one_cycle = 1, .lo = 1e-4, .hi = 1e-3, .first = 10, .second = 15,
                  .mlo = 0.8, .mhi = 0.95, .last = -1};
  check_against_reference(&s, r, 60, "OneCycle 10 up, 15 down, no decay");
  s.ds.decay_step_size = r.decay_step = 4;
  s.ds.decay_lr_rate = r.decay_lr = 0.3;
  s.ds.decay_mom_rate = r.decay_mom = 0.01;
  check_against_reference(&s, r, 60, "OneCycle with the lr and momentum decay after the cycle");
  s.ds.cycle_momentum = 0;
  double b1, b2;
  CHECK(!td_betas_at(&s, 8.0 * 3, &b1, &b2), "OneCycle without cycle_momentum leaves the betas");
}

/* The schedule a config gives the trainer (through td_args); *rc td_args_validate's. */
static td_lr_schedule schedule_of(const char *json, int *rc, char *err, size_t errlen) {
  td_args a;
  td_lr_schedule s = {0};
  *rc = run(&a, "", json, 1, err, errlen);
  if (*rc == 0) td_args_lr_schedule(&a, &s);
  td_args_free(&a);
  return s;
}

/* The config's scheduler through td_args, as the trainer gets it. */
static void test_schedule_from_config(void) {
  char err[1024];
  int rc;
  td_lr_schedule s = schedule_of(
      "{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
      "{\"warmup_num_steps\": 1, \"warmup_min_lr\": 0}}}",
      &rc, err, sizeof err);
  CHECK(rc == 0, "WarmupLR from the file validates (%s)", err);
  CHECK(s.ds.type == TD_DS_LR_WARMUP && s.ds.samples_per_step == 8 && s.ds.warmup_steps == 2 &&
            s.ds.max_lr == 1e-3,
        "WarmupLR: W = max(2, 1), peak = the optimizer's lr (--lr), step = the global batch");
  CHECK(close_to(td_lr_at(&s, 8.0 * 2), 1e-3 * log(2.0) / log(2.0)), "step 2: iteration 1 of W=2");
  s = schedule_of("{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"params\": "
                  "{\"lr\": 6e-4}}, \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": "
                  "{\"total_num_steps\": 100}}}",
                  &rc, err, sizeof err);
  CHECK(rc == 0 && s.ds.type == TD_DS_LR_WARMUP_COSINE && s.ds.base_lr == 6e-4 &&
            s.ds.cos_min_ratio == 1e-4 && s.ds.warmup_min_ratio == 0.0 && s.ds.warmup_steps == 1000,
        "WarmupCosineLR scales the optimizer's lr, DeepSpeed's defaults (%s)", err);
  s = schedule_of("{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"OneCycle\", \"params\": "
                  "{\"cycle_min_lr\": 1e-4, \"cycle_max_lr\": 1e-3, \"cycle_first_step_size\": 30, "
                  "\"decay_step_size\": 5}}}",
                  &rc, err, sizeof err);
  CHECK(rc == 0 && s.ds.type == TD_DS_LR_ONE_CYCLE && s.ds.cycle_lo == 1e-4 &&
            s.ds.cycle_hi == 1e-3 && s.ds.cycle_first == 30 && s.ds.cycle_total == 60 &&
            s.ds.decay_step_size == 5 && s.ds.decay_lr_rate == 0 && s.ds.cycle_momentum &&
            s.ds.mom_lo == 0.8 && s.ds.mom_hi == 0.9,
        "OneCycle: the second half defaults to the first, DeepSpeed's momentum defaults (%s)", err);
  s = schedule_of("{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"LRRangeTest\"}}", &rc,
                  err, sizeof err);
  CHECK(rc == 0 && s.ds.type == TD_DS_LR_RANGE_TEST && s.ds.min_lr == 1e-3 &&
            s.ds.range_step_size == 2000 && s.ds.range_step_rate == 1.0 && !s.ds.range_staircase,
        "LRRangeTest: DeepSpeed's defaults (%s)", err);
  expect_error("--lr 3e-4",
               "{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": "
               "{\"total_num_steps\": 10}}}",
               1,
               "--lr 0.0003 vs scheduler.params.warmup_max_lr (not in the file: WarmupDecayLR's "
               "default 0.001)");
}

/* --checkpoint-activations: Megatron-DeepSpeed's full recomputation. */
static void test_recompute_flags(void) {
  td_args a;
  char err[1024];
  int rc =
      run(&a,
          "--checkpoint-activations --checkpoint-num-layers 2 "
          "--deepspeed-activation-checkpointing",
          "{\"train_batch_size\": 8, \"activation_checkpointing\": {\"partition_activations\": "
          "true, \"cpu_checkpointing\": false}}",
          1, err, sizeof err);
  CHECK(rc == 0 && a.recompute_granularity == TD_GRANULARITY_FULL && a.recompute_method == 0 &&
            a.recompute_num_layers == 2,
        "--checkpoint-activations: full, uniform chunks of --checkpoint-num-layers (%s)", err);
  int partition = 0;
  for (int i = 0; a.ds && i < a.ds->n_notes; i++)
    partition += strstr(a.ds->notes[i], "partition_activations") != NULL;
  CHECK(partition == 1, "the activation_checkpointing keys get their notes");
  td_args_free(&a);
}

/* curriculum_learning: parsed into DeepSpeed's scheduler, with its assertions. */
static void test_curriculum_config(void) {
  char err[4096];
  td_ds_config *c = td_ds_config_parse(
      "{\"curriculum_learning\": {\"enabled\": true, \"curriculum_type\": \"seqlen\", "
      "\"min_difficulty\": 8, \"max_difficulty\": 64, \"schedule_type\": \"fixed_discrete\", "
      "\"schedule_config\": {\"difficulty\": [8, 32, 64], \"max_step\": [10, 20]}}}",
      "cl.json", err, sizeof err);
  td_curriculum cl;
  CHECK(c && td_ds_config_curriculum(c, &cl) && cl.schedule == TD_CURRICULUM_FIXED_DISCRETE &&
            cl.n_difficulty == 3 && cl.difficulty[1] == 32 && cl.n_max_step == 2 &&
            cl.max_step[1] == 20 && cl.min_difficulty == 8 && cl.current == 8 &&
            td_curriculum_difficulty(&cl, 15) == 32,
        "a fixed_discrete curriculum is read: %s", c ? "" : err);
  td_ds_config_free(c);
  c = td_ds_config_parse("{\"curriculum_learning\": {\"enabled\": false, \"min_difficulty\": 8}}",
                         "off.json", err, sizeof err);
  CHECK(c && !td_ds_config_curriculum(c, &cl), "enabled false: no curriculum");
  td_ds_config_free(c);
  static const struct {
    const char *text, *want;
  } bad[] = {
      {"{\"curriculum_learning\": {\"enabled\": true, \"curriculum_type\": \"seqlen\", "
       "\"min_difficulty\": 8, \"max_difficulty\": 64, \"schedule_type\": \"fixed_discrete\", "
       "\"schedule_config\": {\"difficulty\": [8, 64], \"max_step\": [10, 20]}}}",
       "fixed_discrete needs one more difficulty than max_step"},
      {"{\"curriculum_learning\": {\"enabled\": true, \"curriculum_type\": \"seqlen\", "
       "\"min_difficulty\": 8, \"max_difficulty\": 64, \"schedule_type\": \"fixed_root\", "
       "\"schedule_config\": {\"total_curriculum_step\": 10, \"difficulty_step\": 8}}}",
       "fixed_root needs \"total_curriculum_step\", \"difficulty_step\" and \"root_degree\""},
      {"{\"curriculum_learning\": {\"enabled\": true, \"curriculum_type\": \"seqlen\", "
       "\"min_difficulty\": 8, \"max_difficulty\": 64, \"schedule_type\": \"fixed_discrete\", "
       "\"schedule_config\": {\"difficulty\": [8, \"x\", 64], \"max_step\": [10, 20]}}}",
       "curriculum_learning.schedule_config.difficulty: expects a list of 1 to 64 integers"},
      {"{\"curriculum_learning\": {\"enabled\": true, \"curriculum_type\": \"vocab\", "
       "\"min_difficulty\": 8, \"max_difficulty\": 64, \"schedule_type\": \"fixed_linear\", "
       "\"schedule_config\": {\"total_curriculum_step\": 10, \"difficulty_step\": 8}}}",
       "curriculum_learning.curriculum_type: expects one of \"seqlen\""},
      {"{\"curriculum_learning\": {\"enabled\": true, \"curriculum_type\": \"seqlen\", "
       "\"min_difficulty\": 80, \"max_difficulty\": 64, \"schedule_type\": \"fixed_linear\", "
       "\"schedule_config\": {\"total_curriculum_step\": 10, \"difficulty_step\": 8}}}",
       "min_difficulty 80 is above max_difficulty 64"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    err[0] = 0;
    td_ds_config *b = td_ds_config_parse(bad[i].text, "cl.json", err, sizeof err);
    CHECK(!b && strstr(err, bad[i].want), "refused: %s (got: %s)", bad[i].want, err);
    td_ds_config_free(b);
  }
}

int main(void) {
  test_range_test_and_one_cycle();
  test_curriculum_config();
  test_parse_example();
  test_parse_values();
  test_errors_collected();
  test_errors_truncated();
  test_error_kinds();
  test_batch_inference();
  test_batch_auto_and_errors();
  test_applied();
  test_conflicts();
  test_grad_comm_dtype();
  test_zero_stage_from_file();
  test_logs_loss_scale();
  test_scaler_script();
  test_scaler_consecutive();
  test_scaler_floor();
  test_warmup_lr();
  test_warmup_decay_lr();
  test_warmup_cosine_lr();
  test_schedule_from_config();
  test_recompute_flags();
  return tst_finish();
}
