/* Megatron flags: defaults, both value forms, derived defaults, every refusal
 * with its message, notes for GPU-only flags, help and the JSON dump. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "train/args.h"

/* The single-node script of Megatron's and MindSpeed's guides (issue 3). */
#define SEED_SCRIPT                                                                                \
  "--num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "                 \
  "--max-position-embeddings 1024 --micro-batch-size 8 --global-batch-size 64 --lr 0.00015 "       \
  "--train-iters 1000 --lr-decay-iters 320000 --lr-decay-style cosine --min-lr 1.0e-5 "            \
  "--weight-decay 1e-2 --lr-warmup-fraction .01 --clip-grad 1.0 --fp16 --transformer-impl local "  \
  "--data-path my-gpt2_text_document --vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt "   \
  "--split 949,50,1 --log-interval 100 --save-interval 100 --eval-interval 1000 --eval-iters 10 "  \
  "--distributed-backend nccl --save ./ckpt --ckpt-format torch"

/* A small valid run to which each refusal adds or removes one thing. */
#define SMALL                                                                                      \
  "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "                       \
  "--max-position-embeddings 32 --micro-batch-size 2 --lr 1e-3 --mock-data "                       \
  "--tokenizer-type NullTokenizer --vocab-size 100"

/* argv from a space-separated line; the words live as long as the cmdline. */
typedef struct {
  char buf[4096];
  char *argv[256];
  int argc;
} cmdline;

static void split(cmdline *c, const char *line) {
  snprintf(c->buf, sizeof c->buf, "%s", line);
  c->argc = 0;
  c->argv[c->argc++] = "train";
  for (char *t = strtok(c->buf, " "); t; t = strtok(NULL, " "))
    c->argv[c->argc++] = t;
}

/* Parse (and validate for world_size > 0); returns 0 or -1 with err set. */
static int run(td_args *a, cmdline *c, const char *line, int world_size, char *err, size_t n) {
  split(c, line);
  if (td_args_parse(a, c->argc, c->argv, err, n)) return -1;
  return world_size > 0 ? td_args_validate(a, world_size, err, n) : 0;
}

static void test_defaults(void) {
  td_args a;
  cmdline c;
  char err[256];
  CHECK(run(&a, &c, "", 0, err, sizeof err) == 0, "empty command line parses");
  CHECK(a.hidden_dropout == 0.1 && a.attention_dropout == 0.1, "dropouts default to 0.1");
  CHECK(a.seed == 1234 && a.make_vocab_size_divisible_by == 128, "seed 1234, vocab multiple 128");
  CHECK(a.init_method_std == 0.02 && a.layernorm_epsilon == 1e-5, "init std 0.02, eps 1e-5");
  CHECK(a.initial_loss_scale == 4294967296.0 && a.min_loss_scale == 1.0, "loss scale 2^32, min 1");
  CHECK(a.loss_scale_window == 1000 && a.hysteresis == 2, "window 1000, hysteresis 2");
  CHECK(a.weight_decay == 0.01 && a.adam_beta1 == 0.9 && a.adam_beta2 == 0.999 &&
            a.adam_eps == 1e-8 && a.clip_grad == 1.0,
        "AdamW defaults");
  CHECK(a.lr_decay_style == TD_LR_LINEAR && a.min_lr == 0.0 && a.lr_warmup_iters == 0,
        "linear decay, min lr 0, no warmup");
  CHECK(a.eval_interval == 1000 && a.eval_iters == 100 && a.log_interval == 100, "eval/log");
  CHECK(a.num_workers == 2 && a.tensor_model_parallel_size == 1 &&
            a.pipeline_model_parallel_size == 1 && a.zero_stage == 0,
        "workers 2, tp 1, pp 1, zero 0");
  CHECK(a.train_iters == TD_UNSET && a.global_batch_size == TD_UNSET && isnan(a.lr) &&
            isnan(a.loss_scale) && a.tokenizer_type == -1 && !a.data_path.v && !a.save,
        "None defaults are unset");
  td_args_free(&a);
}

static void test_seed_script(void) {
  td_args a;
  cmdline c;
  char err[256] = "";
  int rc = run(&a, &c, SEED_SCRIPT, 1, err, sizeof err);
  CHECK(rc == 0, "the guide's pretrain_gpt.py flags are accepted (%s)", err);
  CHECK(a.num_layers == 24 && a.hidden_size == 1024 && a.ffn_hidden_size == 4096,
        "ffn hidden defaults to 4h");
  CHECK(a.lr == 0.00015 && a.min_lr == 1e-5 && a.lr_warmup_fraction == 0.01, "lr values");
  CHECK(a.lr_decay_style == TD_LR_COSINE && a.lr_decay_iters == 320000, "cosine over 320000");
  CHECK(a.fp16 && !a.bf16 && a.tokenizer_type == TD_TOK_GPT2BPE, "fp16, GPT-2 BPE inferred");
  CHECK(a.data_path.n == 1 && !strcmp(a.data_path.v[0], "my-gpt2_text_document") &&
            !strcmp(a.split, "949,50,1"),
        "one dataset, split 949,50,1");
  CHECK(a.data_parallel_size == 1 && a.num_micro_batches == 8, "8 micro-batches of 8");
  CHECK(a.save && !strcmp(a.save, "./ckpt") && a.save_interval == 100, "save");
  td_lr_schedule s;
  td_args_lr_schedule(&a, &s);
  CHECK(fabs(s.warmup_steps - 204800) < 1e-6 && s.decay_steps == 320000.0 * 64,
        "warmup: 1%% of 320000 iterations x 64 samples");
  CHECK(fabs(td_lr_at(&s, 102400) - 0.000075) < 1e-15, "half way through warmup: lr / 2");

  char *notes = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&notes, &len);
  td_args_print_notes(&a, f);
  fclose(f);
  CHECK(strstr(notes, "--transformer-impl: trident runs its own C kernels") != NULL,
        "note for --transformer-impl");
  CHECK(!strstr(notes, "--distributed-backend"), "--distributed-backend is a real flag, not a note");
  CHECK(a.distributed_backend == 0, "--distributed-backend nccl");
  CHECK(strstr(notes, "--ckpt-format:") && !strstr(notes, "--split"), "note for --ckpt-format");
  int lines = 0;
  for (char *p = notes; *p; p++)
    lines += *p == '\n';
  CHECK(lines == 2, "exactly two notes, one per GPU-only flag (%d)", lines);
  free(notes);
  td_args_free(&a);
}

static void test_forms(void) {
  td_args a;
  cmdline c;
  char err[256] = "";
  CHECK(run(&a, &c,
            SMALL " --train-iters=50 --lr-decay-style=WSD --lr-wsd-decay-iters=10 --norm-epsilon "
                  "1e-6 --use-distributed-optimizer --recompute-granularity=full "
                  "--recompute-method block --recompute-num-layers 2",
            1, err, sizeof err) == 0,
        "--flag=value, aliases (%s)", err);
  CHECK(a.train_iters == 50 && a.lr_decay_style == TD_LR_WSD && a.lr_wsd_decay_iters == 10,
        "values after =");
  CHECK(a.layernorm_epsilon == 1e-6, "--norm-epsilon is an alias of --layernorm-epsilon");
  CHECK(td_args_given(&a, "layernorm-epsilon") && td_args_given(&a, "norm-epsilon") &&
            !td_args_given(&a, "seed"),
        "td_args_given knows both spellings");
  CHECK(a.zero_stage == 1, "--use-distributed-optimizer is ZeRO stage 1");
  CHECK(a.recompute_granularity == TD_GRANULARITY_FULL && a.recompute_method == 1 &&
            a.recompute_num_layers == 2,
        "--recompute-granularity full --recompute-method block --recompute-num-layers 2");
  CHECK(a.start_weight_decay == a.weight_decay && a.end_weight_decay == a.weight_decay &&
            a.weight_decay_incr_style == 0,
        "start and end weight decay default to --weight-decay (constant style)");
  CHECK(a.global_batch_size == 2 && a.lr_decay_iters == 50,
        "global batch = micro x DP, decay = train");
  td_args_free(&a);

  CHECK(run(&a, &c, SMALL " --train-iters 10 --hidden-dropout=0 --sequence-parallel", 1, err,
            sizeof err) == 0,
        "switch among values (%s)", err);
  CHECK(a.hidden_dropout == 0 && !a.sequence_parallel, "sequence parallel off with tp 1");
  td_args_free(&a);

  CHECK(run(&a, &c, SMALL " --train-iters 10 --lr-warmup-iters 0 --lr-warmup-fraction 0.1", 1, err,
            sizeof err) == 0,
        "--lr-warmup-iters 0 with a fraction is fine, as in Megatron (%s)", err);
  td_args_free(&a);
}

static void test_derived(void) {
  td_args a;
  cmdline c;
  char err[256] = "";
  CHECK(run(&a, &c,
            SMALL " --train-samples 1000 --global-batch-size 16 --tensor-model-parallel-size 2", 8,
            err, sizeof err) == 0,
        "sample-based run on 8 ranks (%s)", err);
  CHECK(a.data_parallel_size == 4 && a.num_micro_batches == 2, "dp 4, 2 micro-batches");
  CHECK(a.train_iters == 62 && a.lr_decay_samples == 1000, "train iters = samples / batch");
  td_lr_schedule s;
  td_args_lr_schedule(&a, &s);
  CHECK(s.decay_steps == 1000 && s.warmup_steps == 0, "schedule in samples");
  CHECK(td_args_padded_vocab_size(&a, 101) == 256 && td_args_padded_vocab_size(&a, 50257) == 50432,
        "vocab padded to a multiple of 128 x tp");
  td_args_free(&a);

  CHECK(run(&a, &c, SMALL " --train-iters 100 --lr-warmup-iters 10 --global-batch-size 8", 2, err,
            sizeof err) == 0,
        "iteration-based run (%s)", err);
  td_args_lr_schedule(&a, &s);
  CHECK(s.warmup_steps == 80 && s.decay_steps == 800 && s.max_lr == 1e-3, "iterations x batch");
  td_loss_scaler ls;
  td_args_loss_scaler(&a, &ls);
  CHECK(!ls.dynamic && ls.scale == 1.0f, "fp32: constant scale 1");
  td_args_free(&a);

  CHECK(run(&a, &c, SMALL " --train-iters 10 --fp16", 1, err, sizeof err) == 0, "fp16");
  td_args_loss_scaler(&a, &ls);
  CHECK(ls.dynamic && ls.scale == 4294967296.0f && ls.growth_interval == 1000 && ls.hysteresis == 2,
        "fp16: dynamic from 2^32");
  td_args_free(&a);
  CHECK(run(&a, &c, SMALL " --train-iters 10 --bf16 --loss-scale 128", 1, err, sizeof err) == 0,
        "bf16");
  td_args_loss_scaler(&a, &ls);
  CHECK(!ls.dynamic && ls.scale == 128.0f, "bf16 with --loss-scale: constant");
  td_args_free(&a);

  CHECK(run(&a, &c, SMALL " --train-iters 10 --data-path 0.3 a 0.7 b", 1, err, sizeof err) == 0,
        "weighted blend (%s)", err);
  CHECK(a.data_path.n == 4 && !strcmp(a.data_path.v[3], "b"), "the words of --data-path");
  CHECK(!strcmp(a.split, "969, 30, 1"), "Megatron's legacy default split with --data-path");
  char *notes = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&notes, &len);
  td_args_print_notes(&a, f);
  fclose(f);
  CHECK(strstr(notes, "--split not given; using Megatron's legacy default") != NULL, "split note");
  free(notes);
  td_args_free(&a);
}

typedef struct {
  const char *extra; /* appended to the base */
  int world_size;
  const char *message; /* expected in err */
} refusal;

static void check_refusals(const char *base, const refusal *r, int n) {
  for (int i = 0; i < n; i++) {
    td_args a;
    cmdline c;
    char line[2048], err[512] = "";
    snprintf(line, sizeof line, "%s %s", base, r[i].extra);
    int rc = run(&a, &c, line, r[i].world_size, err, sizeof err);
    CHECK(rc == -1 && strstr(err, r[i].message), "'%s' -> %s", r[i].extra, err);
    td_args_free(&a);
  }
}

static void test_parse_errors(void) {
  static const refusal r[] = {
      {"--hiden-size 64", 0, "unknown flag '--hiden-size' (did you mean --hidden-size?)"},
      {"--num-layer 2", 0, "(did you mean --num-layers?)"},
      {"--lr-decay-iter 5", 0, "(did you mean --lr-decay-iters?)"},
      {"-lr 1", 0, "unknown flag '-lr' (did you mean --lr?)"},
      {"--deepspeed-confg x", 0, "did you mean --deepspeed-config?"},
      {"stray", 0, "unexpected argument 'stray' (flags start with --)"},
      {"--num-layers abc", 0, "--num-layers expects a positive integer; got 'abc'"},
      {"--num-layers -2", 0, "--num-layers expects a positive integer; got '-2'"},
      {"--micro-batch-size 0", 0, "--micro-batch-size expects a positive integer; got '0'"},
      {"--seq-length 1.5", 0, "--seq-length expects a positive integer; got '1.5'"},
      {"--lr fast", 0, "--lr expects a non-negative number; got 'fast'"},
      {"--lr nan", 0, "--lr expects a non-negative number; got 'nan'"},
      {"--hidden-dropout 1.5", 0, "--hidden-dropout expects a number in [0, 1); got '1.5'"},
      {"--attention-dropout 1", 0, "--attention-dropout expects a number in [0, 1); got '1'"}, /* all dropped: 1/(1-p) */
      {"--adam-beta2 1", 0, "--adam-beta2 expects a number in [0, 1); got '1'"},
      {"--lr-decay-style exp", 0,
       "--lr-decay-style expects one of constant, linear, cosine, inverse-square-root, WSD; got "
       "'exp'"},
      {"--tokenizer-type HuggingFaceTokenizer", 0,
       "--tokenizer-type expects one of GPT2BPETokenizer, NullTokenizer; got "
       "'HuggingFaceTokenizer'"},
      {"--optimizer sgd", 0, "--optimizer expects one of adam; got 'sgd'"},
      {"--transformer-impl te", 0, "--transformer-impl expects one of local, transformer_engine"},
      {"--recompute-num-layers x", 0, "--recompute-num-layers expects a positive integer"},
      {"--fp16=1", 0, "--fp16 is a switch and takes no value (got '--fp16=1')"},
      {"--lr", 0, "--lr expects a value (LR)"},
      {"--lr --fp16", 0, "--lr expects a value (LR)"},
      {"--save=", 0, "--save expects a value (DIR)"},
      {"--data-path --fp16", 0, "--data-path expects at least one dataset prefix"},
  };
  check_refusals("--num-layers 2", r, (int)(sizeof r / sizeof *r));
}

/* Every problem of a command line in one report, a suggestion only for a near
 * miss, Megatron's other flag names known, numbers by their Megatron type. */
static void test_all_at_once(void) {
  td_args a;
  cmdline c;
  char err[4096] = "";
  CHECK(run(&a, &c, SMALL " --hiden-size 64 --num-layers x stray --swiglu --foo-bar-baz 3 "
                      "--data-impl cached --num-layers-per-virtual-pipeline-stage 2",
            0, err, sizeof err) == -1,
        "bad command line refused");
  const char *want[] = {"unknown flag '--hiden-size' (did you mean --hidden-size?)",
                        "--num-layers expects a positive integer; got 'x'",
                        "unknown flag '--foo-bar-baz' (not a flag of Megatron-LM",
                        "--swiglu: trident's GPT is GPT-2",
                        "--data-impl cached: trident reads Megatron's mmap format only",
                        "--num-layers-per-virtual-pipeline-stage: the interleaved pipeline"};
  for (int i = 0; i < 6; i++) CHECK(strstr(err, want[i]) != NULL, "reported together: %s", want[i]);
  CHECK(strstr(err, "'3'") == NULL && strstr(err, "unexpected argument 'stray'"),
        "an unknown flag's value is not a stray word; a stray word is");
  int lines = 1;
  for (const char *p = err; *p; p++) lines += *p == '\n';
  CHECK(lines == 7, "one line per problem (%d)", lines);
  td_args_free(&a);
  CHECK(run(&a, &c, SMALL " --deepspeed-activation-checkpoint", 0, err, sizeof err) == -1 &&
            strstr(err, "did you mean --deepspeed-activation-checkpointing?"),
        "near miss of a long flag: %s", err);
  td_args_free(&a);
  CHECK(run(&a, &c, SMALL " --exit-on-missing-checkpointing-activations", 0, err, sizeof err) == -1 &&
            !strstr(err, "did you mean"),
        "no suggestion that means something else: %s", err);
  td_args_free(&a);
  CHECK(run(&a, &c, SMALL " --train-iters 2 --num-experts 1 1 --moe-expert-parallel-size 1 "
                      "--moe-loss-coeff 0.01 --topk 1 --mlp-type standard --data-impl mmap "
                      "--use-flash-attn-triton --profile pt-full --no-pipeline-parallel "
                      "--tp-comm-overlap-cfg x.yaml --wandb-entity me --log-energy",
            1, err, sizeof err) == 0,
        "Megatron-DeepSpeed's one-expert flags and Megatron's others are accepted (%s)", err);
  char *notes = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&notes, &len);
  td_args_print_notes(&a, f);
  fclose(f);
  CHECK(strstr(notes, "--num-experts: one expert per layer") && strstr(notes, "--log-energy: a logger") &&
            strstr(notes, "--tp-comm-overlap-cfg: a GPU kernel"),
        "each explained once");
  free(notes);
  td_args_free(&a);
}

static void test_validation_errors(void) {
  static const refusal r[] = {
      {"--train-iters 10 --num-attention-heads 5", 1,
       "--hidden-size 64 is not divisible by --num-attention-heads 5"},
      {"--train-iters 10 --global-batch-size 6", 4,
       "--global-batch-size 6 is not divisible by --micro-batch-size 2 x data-parallel size 4 (= "
       "8)"},
      {"--train-iters 10 --seq-length 64", 1,
       "--seq-length 64 is longer than --max-position-embeddings 32"},
      {"--train-iters 10 --fp16 --bf16", 1, "--fp16 and --bf16 are exclusive"},
      {"", 1, "either --train-iters or --train-samples is required"},
      {"--train-iters 10 --train-samples 100", 1,
       "--train-iters and --train-samples are exclusive"},
      {"--train-iters 10 --lr-warmup-fraction 0.1 --lr-warmup-iters 2", 1,
       "--lr-warmup-fraction and --lr-warmup-iters are exclusive"},
      {"--train-samples 100 --lr-warmup-fraction 0.1 --lr-warmup-samples 2", 1,
       "--lr-warmup-fraction and --lr-warmup-samples are exclusive"},
      {"--train-iters 10 --lr-decay-samples 100", 1,
       "--lr-decay-samples does not apply to iteration-based (--train-iters) training"},
      {"--train-samples 100 --lr-warmup-iters 3", 1,
       "--lr-warmup-iters does not apply to sample-based (--train-samples) training"},
      {"--train-iters 10 --tensor-model-parallel-size 3", 3,
       "--num-attention-heads 4 is not divisible by --tensor-model-parallel-size 3"},
      {"--train-iters 10 --tensor-model-parallel-size 2", 3,
       "3 ranks cannot be split into --tensor-model-parallel-size 2"},
      {"--train-iters 10 --pipeline-model-parallel-size 4", 4,
       "--num-layers 2 is not divisible by --pipeline-model-parallel-size 4"},
      {"--train-iters 10 --tokenizer-type GPT2BPETokenizer", 1,
       "--tokenizer-type GPT2BPETokenizer needs --vocab-file and --merge-file"},
      {"--train-samples 1 --global-batch-size 2", 1,
       "--train-samples 1 is less than one global batch"},
      {"--train-iters 10 --min-lr 1", 1, "--min-lr 1 is larger than --lr 0.001"},
      {"--train-iters 10 --lr-warmup-iters 10", 1,
       "the learning-rate warmup (20 samples) must be shorter than the decay (20 samples)"},
      {"--train-iters 10 --lr-decay-style WSD", 1,
       "--lr-decay-style WSD needs --lr-wsd-decay-iters"},
      {"--train-iters 10 --data-path 0.5 a -1 b", 1,
       "--data-path: blend weight -1 of 'b' must be a finite number >= 0"},
      {"--train-iters 10 --valid-data-path 0 a 0 b", 1,
       "--valid-data-path: the blend weights are all 0"},
      {"--train-iters 10 --data-path a --train-data-path b", 1,
       "--data-path and --train-data-path/--valid-data-path/--test-data-path are exclusive"},
      {"--train-iters 10 --split 1,2,3,4", 1, "bad --split: more than three numbers"},
      {"--train-iters 10 --split 0,0,0", 1, "bad --split '0,0,0': the weights sum to 0"},
      {"--train-iters 10 --save ckpt", 1, "--save needs --save-interval N"},
      {"--train-iters 10 --deepspeed", 1, "--deepspeed needs a config: --deepspeed_config FILE"},
      {"--train-iters 10 --deepspeed-config ds.json", 1,
       "--deepspeed_config without --deepspeed: Megatron-DeepSpeed reads the config only with "
       "--deepspeed"},
      {"--train-iters 10 --deepspeed --deepspeed-config /nonexistent/ds.json", 1,
       "--deepspeed_config /nonexistent/ds.json: cannot open"},
      {"--train-iters 10 --swiglu", 1, "--swiglu: trident's GPT is GPT-2"},
      {"--train-iters 10 --apply-layernorm-1p", 1, "--apply-layernorm-1p: trident's GPT is GPT-2"},
      {"--train-iters 10 --num-experts 8", 1, "--num-experts 8: mixture of experts is not built"},
      {"--train-iters 10 --num-experts 1 1 4", 1, "--num-experts 4: mixture of experts is not built"},
      {"--train-iters 10 --moe-expert-parallel-size 2", 1, "--moe-expert-parallel-size 2: mixture"},
      {"--train-iters 10 --data-impl lazy", 1, "--data-impl lazy: trident reads Megatron's mmap"},
      {"--train-iters 10 --decoupled-min-lr 5.0e-5", 1, "--decoupled-min-lr needs --decoupled-lr"},
      {"--train-iters 10 --fp8-format hybrid", 1, "--fp8-format: lower-precision"},
      {"--train-iters 10 --batch-size 4", 1, "--batch-size: an old flag Megatron keeps"},
      {"--train-iters 10 --kv-channels 8", 1,
       "--kv-channels 8: heads of hidden-size / num-attention-heads = 16 channels"},
      {"--train-iters 10 --num-query-groups 2", 1, "--num-query-groups: trident's GPT is GPT-2"},
      {"--train-iters 10 --use-checkpoint-args", 1, "--use-checkpoint-args needs --load"},
      {"--train-iters 10 --position-embedding-type rope", 1,
       "--position-embedding-type rope: trident's GPT is GPT-2"},
      {"--train-iters 10 --normalization RMSNorm", 1, "--normalization RMSNorm: trident's GPT is GPT-2"},
      {"--train-iters 10 --dataloader-type cyclic", 1,
       "--dataloader-type cyclic: only Megatron's 'single' pretraining sampler is built"},
      {"--train-iters 10 --start-weight-decay 0.1", 1,
       "--start-weight-decay 0.1 and --end-weight-decay 0.01 differ"},
      {"--train-iters 10 --recompute-granularity full", 1,
       "--recompute-granularity full needs --recompute-method uniform or block"},
      {"--train-iters 10 --recompute-granularity full --recompute-method uniform", 1,
       "--recompute-granularity full needs --recompute-num-layers between 1 and the layers per "
       "pipeline stage (2)"},
      {"--train-iters 10 --recompute-granularity full --recompute-method block "
       "--recompute-num-layers 3", 1, "--recompute-num-layers between 1 and the layers"},
      {"--train-iters 10 --recompute-activations --recompute-method uniform", 1,
       "--recompute-method does not apply to selective recomputation"},
      {"--train-iters 10 --recompute-granularity selective --recompute-num-layers 1", 1,
       "--recompute-num-layers does not apply to selective recomputation"},
      {"--train-iters 10 --min-loss-scale 8 --initial-loss-scale 4", 1,
       "--min-loss-scale 8 is larger than --initial-loss-scale 4"},
  };
  check_refusals(SMALL, r, (int)(sizeof r / sizeof *r));

  static const refusal missing[] = {
      {"--hidden-size 64 --num-attention-heads 4 --seq-length 8 --max-position-embeddings 8", 1,
       "--num-layers is required (number of transformer layers)"},
      {"--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 8 "
       "--max-position-embeddings 8 --micro-batch-size 1 --train-iters 5 --mock-data",
       1, "--lr is required (peak learning rate)"},
      {"--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 8 "
       "--max-position-embeddings 8 --micro-batch-size 1 --train-iters 5 --lr 1 --mock-data",
       1, "--tokenizer-type is required"},
      {"--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 8 "
       "--max-position-embeddings 8 --micro-batch-size 1 --train-iters 5 --lr 1 "
       "--tokenizer-type NullTokenizer",
       1, "--tokenizer-type NullTokenizer needs --vocab-size N"},
      {"--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 8 "
       "--max-position-embeddings 8 --micro-batch-size 1 --train-iters 5 --lr 1 --vocab-size 10",
       1, "no training data: give --data-path PREFIX"},
      {"--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 8 "
       "--max-position-embeddings 8 --micro-batch-size 1 --train-iters 5 --lr 1 --data-path d "
       "--merge-file m.txt",
       1, "--merge-file without --vocab-file: the GPT-2 tokenizer (GPT2BPETokenizer) needs both"},
      {"--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 8 "
       "--max-position-embeddings 8 --micro-batch-size 1 --train-iters 5 --lr 1 --data-path d "
       "--vocab-file v.json",
       1, "--vocab-file without --merge-file: the GPT-2 tokenizer (GPT2BPETokenizer) needs both"},
  };
  check_refusals("", missing, (int)(sizeof missing / sizeof *missing));
}

static void test_help_and_json(void) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  td_args_print_help(f);
  fclose(f);
  CHECK(strstr(text, "  --num-layers N") && strstr(text, "(required)"),
        "help lists required flags");
  CHECK(strstr(text, "--weight-decay W") && strstr(text, "(default: 0.01)"), "help shows defaults");
  CHECK(strstr(text, "--layernorm-epsilon, --norm-epsilon EPS"), "help shows aliases");
  CHECK(strstr(text, "one of: constant linear cosine inverse-square-root WSD"),
        "help shows choices");
  CHECK(strstr(text, "--transformer-impl IMPL") && strstr(text, "no Transformer Engine"),
        "help explains GPU-only flags");
  CHECK(strstr(text, "--distributed-backend NAME") && strstr(text, "(default: nccl)"),
        "help shows --distributed-backend");
  free(text);

  td_args a;
  cmdline c;
  char err[256] = "";
  CHECK(run(&a, &c, SEED_SCRIPT, 1, err, sizeof err) == 0, "seed script (%s)", err);
  cJSON *j = td_args_to_json(&a);
  CHECK(cJSON_GetObjectItem(j, "num_layers")->valuedouble == 24, "num_layers in JSON");
  CHECK(cJSON_GetObjectItem(j, "lr")->valuedouble == 0.00015, "lr in JSON");
  CHECK(!strcmp(cJSON_GetObjectItem(j, "lr_decay_style")->valuestring, "cosine"), "choice as name");
  CHECK(cJSON_IsTrue(cJSON_GetObjectItem(j, "fp16")) &&
            cJSON_IsFalse(cJSON_GetObjectItem(j, "bf16")),
        "switches as booleans");
  CHECK(cJSON_IsNull(cJSON_GetObjectItem(j, "vocab_size")) &&
            cJSON_IsNull(cJSON_GetObjectItem(j, "loss_scale")),
        "unset values are null");
  CHECK(!strcmp(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "data_path"), 0)->valuestring,
                "my-gpt2_text_document"),
        "lists as arrays");
  CHECK(cJSON_GetObjectItem(j, "ffn_hidden_size")->valuedouble == 4096 &&
            cJSON_GetObjectItem(j, "num_micro_batches")->valuedouble == 8,
        "derived values");
  CHECK(cJSON_GetObjectItem(j, "deepspeed_config") && !cJSON_GetObjectItem(j, "transformer_impl"),
        "every option, no GPU-only flag");
  cJSON_Delete(j);
  td_args_free(&a);
}

/* argparse semantics: a flag given twice keeps its last value, so overrides can be
 * appended to a script (the seed script + "--train-iters 1 --log-interval 1 ..."). */
static void test_last_wins(void) {
  td_args a;
  cmdline c;
  char err[256] = "";
  CHECK(run(&a, &c,
            SEED_SCRIPT " --train-iters 1 --log-interval 1 --eval-iters 0 --save-interval 1 "
                        "--lr-decay-style linear --lr=3e-4 --save ./other --data-path x_text_document "
                        "--split 98,2,0 --transformer-impl transformer_engine --fp16 "
                        "--distributed-backend gloo",
            1, err, sizeof err) == 0,
        "the seed script with overrides appended (%s)", err);
  CHECK(a.train_iters == 1 && a.log_interval == 1 && a.eval_iters == 0 && a.save_interval == 1,
        "integers: the last value wins");
  CHECK(a.distributed_backend == 1, "--distributed-backend gloo");
  CHECK(a.lr == 3e-4 && a.lr_decay_style == TD_LR_LINEAR, "number and choice: the last value wins");
  CHECK(!strcmp(a.save, "./other") && !strcmp(a.split, "98,2,0"), "strings: the last value wins");
  CHECK(a.data_path.n == 1 && !strcmp(a.data_path.v[0], "x_text_document"),
        "a list given twice is replaced, not appended to");
  CHECK(a.fp16 && !a.bf16, "a switch given twice stays on");
  CHECK(a.lr_decay_iters == 320000 && a.num_layers == 24, "the script's other values stay");
  char *notes = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&notes, &len);
  td_args_print_notes(&a, f);
  fclose(f);
  int lines = 0;
  for (char *p = notes; *p; p++)
    lines += *p == '\n';
  CHECK(lines == 2, "a GPU-only flag given twice is explained once (%d notes)", lines);
  free(notes);
  td_args_free(&a);
  /* A bad value is refused even when a later one would be good (argparse too). */
  CHECK(run(&a, &c, SMALL " --train-iters 2 --num-layers x --num-layers 2", 1, err, sizeof err) == -1 &&
            strstr(err, "--num-layers expects a positive integer; got 'x'"),
        "an earlier bad value is still an error: %s", err);
  td_args_free(&a);
  /* The checks see the final values: an override can make a script valid. */
  err[0] = 0;
  CHECK(run(&a, &c, SMALL " --train-iters 2 --num-attention-heads 5 --num-attention-heads 8", 1, err,
            sizeof err) == 0 &&
            a.num_attention_heads == 8,
        "validation uses the last value (%s)", err);
  td_args_free(&a);
}

static void test_help_flag(void) {
  td_args a;
  cmdline c;
  char err[256] = "";
  CHECK(run(&a, &c, "--num-layers x --help", 0, err, sizeof err) == -1,
        "a bad value before --help");
  td_args_free(&a);
  CHECK(run(&a, &c, "--num-layers 2 -h --bogus", 0, err, sizeof err) == 0 && a.help,
        "-h stops parsing and asks for help");
  td_args_free(&a);
}

int main(void) {
  test_defaults();
  test_seed_script();
  test_forms();
  test_derived();
  test_parse_errors();
  test_all_at_once();
  test_validation_errors();
  test_help_and_json();
  test_help_flag();
  test_last_wins();
  return tst_finish();
}
