/* Sizes (issue 16, items 2 and 3): checked arithmetic, the model's size limits
 * under each naming (flags, checkpoint args, config.json), the memory plan
 * against what td_gpt_create then allocates (td_gpt_memory_report) for every
 * recomputation layout and dtype, the plan of a billion layers without building
 * it, the parameter count of split layouts against their built tensors, the
 * memory limit (TRIDENT_MEMORY_LIMIT), and the flag refusals of sizes that would
 * overflow. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "base/checked.h"
#include "base/mem.h"
#include "base/memory_limit.h"
#include "check.h"
#include "data/gpt_dataset.h"
#include "model/gpt.h"
#include "model/gpt_config.h"
#include "model/gpt_impl.h"
#include "train/args.h"
#include "train/train_memory.h"

static td_gpt_config small_config(int64_t layers) {
  return (td_gpt_config){.num_layers = layers, .hidden = 32, .heads = 4, .ffn_hidden = 96,
                         .seq_len = 16, .max_positions = 24, .vocab_size = 128,
                         .init_std = 0.02f, .layernorm_eps = 1e-5f};
}

static void test_checked(void) {
  int64_t r;
  CHECK(td_mul_i64(3037000499, 3037000499, &r) == 0 && r == 3037000499LL * 3037000499LL,
        "the largest square that fits int64 multiplies");
  CHECK(td_mul_i64(3037000500, 3037000500, &r) == -1, "the next one overflows");
  CHECK(td_mul_i64(INT64_MAX, -1, &r) == 0 && r == -INT64_MAX, "INT64_MAX x -1 fits");
  CHECK(td_add_i64(INT64_MAX, 1, &r) == -1 && td_add_i64(INT64_MAX - 1, 1, &r) == 0,
        "add overflows at INT64_MAX");
  CHECK(td_sat_mul((uint64_t)1 << 32, (uint64_t)1 << 32) == TD_SIZE_HUGE &&
            td_sat_mul((uint64_t)1 << 31, (uint64_t)1 << 32) == (uint64_t)1 << 63,
        "saturating multiply");
  CHECK(td_sat_add(TD_SIZE_HUGE - 1, 2) == TD_SIZE_HUGE && td_sat_add(1, 2) == 3, "saturating add");
  CHECK(td_sat_bytes(-1, 4) == TD_SIZE_HUGE && td_sat_bytes(5, 4) == 20,
        "a negative count (an overflow upstream) is huge");
  CHECK(td_gpt_padded_vocab(50257, 128, 1) == 50304 && td_gpt_padded_vocab(50257, 128, 8) == 51200,
        "Megatron's padding: 50257 -> 50304, at TP 8 -> 51200");
  CHECK(td_gpt_padded_vocab(INT64_MAX - 5, 128, 1) == INT64_MAX &&
            td_gpt_padded_vocab(5, INT64_MAX / 2, 4) == INT64_MAX,
        "a padding that overflows is INT64_MAX (then refused by the size check)");
}

static void check_one(const td_gpt_config *c, int64_t micro, const char *const *names,
                      const char *want) {
  char err[512] = "";
  int rc = td_gpt_check_sizes(c, micro, names, err, sizeof err);
  CHECK(rc == -1 && strstr(err, want), "refused with '%s': %s", want, err);
}

static void test_size_limits(void) {
  const td_gpt_config ok = small_config(2);
  char err[512];
  CHECK(td_gpt_check_sizes(&ok, 8, NULL, err, sizeof err) == 0, "a small model passes");
  const int64_t big[] = {(int64_t)1 << 31, (int64_t)1 << 53, (int64_t)1 << 58, (int64_t)1 << 62,
                         INT64_MAX};
  for (size_t i = 0; i < sizeof big / sizeof *big; i++) {
    int64_t v = big[i];
    char want[256];
    td_gpt_config c = ok;
    c.hidden = v, c.heads = 1;
    snprintf(want, sizeof want, "--hidden-size %lld is too large: at most %d", (long long)v,
             TD_GPT_MAX_HIDDEN);
    check_one(&c, 1, NULL, want);
    c = ok, c.ffn_hidden = v;
    snprintf(want, sizeof want, "--ffn-hidden-size %lld is too large", (long long)v);
    check_one(&c, 1, NULL, want);
    c = ok, c.max_positions = v;
    snprintf(want, sizeof want, "--max-position-embeddings %lld is too large", (long long)v);
    check_one(&c, 1, NULL, want);
    c = ok, c.seq_len = v, c.max_positions = v;
    snprintf(want, sizeof want, "--seq-length %lld is too large", (long long)v);
    check_one(&c, 1, NULL, want);
    c = ok, c.vocab_size = v;
    snprintf(want, sizeof want, "vocabulary (--vocab-size + 1 or the tokenizer's, rounded up to a "
             "multiple of --make-vocab-size-divisible-by x --tensor-model-parallel-size) %lld is too large",
             (long long)v);
    check_one(&c, 1, NULL, want);
    snprintf(want, sizeof want, "--micro-batch-size %lld x --seq-length 16 tokens per micro-batch is too many",
             (long long)v);
    check_one(&ok, v, NULL, want);
    c = ok, c.heads = v;
    check_one(&c, 0, (const char *const[]){"num_layers", "hidden_size", "num_attention_heads", "f",
                                           "s", "p", "v", "m"},
              "hidden_size 32 is not divisible by num_attention_heads");
  }
  td_gpt_config c = ok;
  c.num_layers = (int64_t)1 << 40; /* the layer count is bounded after the memory check */
  CHECK(td_gpt_check_sizes(&c, 1, NULL, err, sizeof err) == 0, "2^40 layers pass the size check");
  CHECK(td_gpt_check_layers(&c, "--num-layers", err, sizeof err) == -1 &&
            strstr(err, "--num-layers 1099511627776 is too large"),
        "and are refused by the layer check: %s", err);
  c.num_layers = TD_GPT_MAX_LAYERS;
  CHECK(td_gpt_check_layers(&c, "--num-layers", err, sizeof err) == 0, "TD_GPT_MAX_LAYERS passes");
  c = ok, c.seq_len = 25;
  check_one(&c, 1, NULL, "--seq-length 25 is longer than --max-position-embeddings 24");
  c = ok, c.hidden = 0;
  check_one(&c, 1, NULL, "--hidden-size must be a positive integer; got 0");
}

/* The plan and the built model agree on every figure. */
static void plan_matches(const td_gpt_config *cfg, const td_gpt_layout *lay, int64_t micro,
                         td_dtype cd, const char *what) {
  td_gpt_memory plan;
  td_gpt_param_count counts;
  char err[512];
  if (td_gpt_plan(cfg, lay, micro, cd, &plan, &counts, err, sizeof err)) {
    CHECK(0, "%s: plan: %s", what, err);
    return;
  }
  td_gpt *m = td_gpt_create(tst_device(), cfg, lay, micro, cd);
  td_gpt_memory got = td_gpt_memory_report(m);
  int same = got.params == plan.params && got.grads == plan.grads &&
             got.weights_bf16 == plan.weights_bf16 && got.activations == plan.activations &&
             got.activations_per_layer == plan.activations_per_layer &&
             counts.num_params == (uint64_t)td_gpt_num_params(m) &&
             counts.flat_numel == (uint64_t)td_gpt_flat_numel(m) &&
             counts.n_tensors == (uint64_t)td_gpt_num_tensors(m);
  CHECK(same, "%s: plan params %zu acts %zu (per layer %zu), built %zu / %zu (%zu)", what,
        plan.params, plan.activations, plan.activations_per_layer, got.params, got.activations,
        got.activations_per_layer);
  td_gpt_destroy(m);
}

static void test_plan_matches_model(void) {
  const td_dtype dtypes[] = {TD_F32, TD_BF16, TD_F16};
  int n = 0;
  for (int d = 0; d < 3; d++)
    for (int64_t layers = 1; layers <= 5; layers += 2)
      for (int rc = 0; rc < 3; rc++)
        for (int64_t k = 1; k <= (rc ? layers : 1); k++)
          for (int64_t micro = 1; micro <= 3; micro += 2) {
            td_gpt_config cfg = small_config(layers);
            cfg.untie_embeddings = (int)(k % 2);
            td_gpt_layout lay = td_gpt_layout_single(&cfg);
            lay.recompute = (td_recompute)rc, lay.recompute_num_layers = rc ? k : 0;
            lay.unit_multiple = micro == 3 ? 48 : 1;
            char what[128];
            snprintf(what, sizeof what, "%s, %lld layers, recompute %d k %lld, micro %lld",
                     td_dtype_name(dtypes[d]), (long long)layers, rc, (long long)k, (long long)micro);
            plan_matches(&cfg, &lay, micro, dtypes[d], what);
            n++;
          }
  CHECK(n > 50, "%d layouts compared", n);
}

/* Split layouts (TP ranks, pipeline stages) cannot be built here without their
 * communicators, but their tensor tables can: counted = built. */
static void test_count_split_layouts(void) {
  int bad = 0, n = 0;
  for (int tp = 1; tp <= 4; tp *= 2)
    for (int stage = 0; stage < 3; stage++)
      for (int untie = 0; untie < 2; untie++) {
        td_gpt_config cfg = small_config(6);
        cfg.untie_embeddings = untie;
        td_gpt m;
        memset(&m, 0, sizeof m);
        m.cfg = cfg;
        m.lay = td_gpt_layout_single(&cfg);
        m.lay.tp_size = tp, m.lay.tp_rank = tp - 1;
        m.lay.layer_begin = 2 * stage, m.lay.layer_end = 2 * stage + 2;
        m.lay.has_embedding = stage == 0, m.lay.has_head = stage == 2;
        m.lay.unit_multiple = 16 * 3;
        td_gpt_param_count c = td_gpt_count_params(&cfg, &m.lay);
        td_gpt_build_tensors(&m);
        int64_t largest = 0;
        for (int i = 0; i < m.n_tensors; i++)
          largest = m.tensors[i].numel > largest ? m.tensors[i].numel : largest;
        bad += c.flat_numel != (uint64_t)m.flat_numel || c.num_params != (uint64_t)m.num_params ||
               c.n_tensors != (uint64_t)m.n_tensors || c.largest != (uint64_t)largest;
        td_free(m.tensors), td_free(m.units), td_free(m.unit_of);
        n++;
      }
  CHECK(bad == 0, "parameter counts of %d TP / pipeline layouts equal their built tables (%d differ)",
        n, bad);
}

/* A billion layers is measured (linear in the layers: a + b L), not built. */
static void test_plan_huge(void) {
  td_gpt_memory m1, m2, mg;
  char err[512];
  td_gpt_config c1 = small_config(1), c2 = small_config(2), cg = small_config(1000000000);
  td_gpt_layout l1 = td_gpt_layout_single(&c1), l2 = td_gpt_layout_single(&c2),
                lg = td_gpt_layout_single(&cg);
  int ok = !td_gpt_plan(&c1, &l1, 1, TD_F32, &m1, NULL, err, sizeof err) &&
           !td_gpt_plan(&c2, &l2, 1, TD_F32, &m2, NULL, err, sizeof err) &&
           !td_gpt_plan(&cg, &lg, 1, TD_F32, &mg, NULL, err, sizeof err);
  CHECK(ok, "plans: %s", ok ? "" : err);
  uint64_t per_layer = m2.params - m1.params, per_layer_acts = m2.activations - m1.activations;
  CHECK(mg.params == m1.params + 999999999 * per_layer &&
            mg.activations == m1.activations + 999999999 * per_layer_acts,
        "10^9 layers: parameters %zu = %zu + (10^9 - 1) x %llu", mg.params, m1.params,
        (unsigned long long)per_layer);
  td_gpt_config cs = small_config(INT64_MAX);
  cs.hidden = TD_GPT_MAX_HIDDEN - TD_GPT_MAX_HIDDEN % 4;
  cs.ffn_hidden = TD_GPT_MAX_DIM, cs.vocab_size = TD_GPT_MAX_DIM, cs.max_positions = TD_GPT_MAX_DIM;
  cs.seq_len = TD_GPT_MAX_DIM;
  td_gpt_layout ls = td_gpt_layout_single(&cs);
  CHECK(!td_gpt_plan(&cs, &ls, 1, TD_BF16, &mg, NULL, err, sizeof err) && mg.params == TD_SIZE_HUGE &&
            td_gpt_memory_total(&mg) == TD_SIZE_HUGE,
        "every size at its limit and INT64_MAX layers saturate (%s)", err);
}

static void test_memory_limit(void) {
  uint64_t b;
  const struct {
    const char *text;
    uint64_t bytes;
  } good[] = {{"100", 100},           {"1K", 1024},
              {"512M", 512ull << 20}, {"1.5G", 3ull << 29},
              {"2GiB", 2ull << 30},   {"3tb", 3ull << 40},
              {"7kB", 7 << 10},       {"unlimited", TD_SIZE_HUGE}};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++)
    CHECK(td_memory_parse(good[i].text, &b) == 0 && b == good[i].bytes, "'%s' = %llu bytes",
          good[i].text, (unsigned long long)good[i].bytes);
  const char *bad[] = {"", "lots", "-1", "1X", "1 G", "1e30", "nan", "2GiBs"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    CHECK(td_memory_parse(bad[i], &b) == -1, "'%s' is refused", bad[i]);
  char t[32];
  td_bytes_text(0, t, sizeof t);
  CHECK(!strcmp(t, "0 B"), "0 bytes: '%s'", t);
  td_bytes_text(1536, t, sizeof t);
  CHECK(!strcmp(t, "1.50 KiB"), "1536 bytes: '%s'", t);
  td_bytes_text(TD_SIZE_HUGE, t, sizeof t);
  CHECK(!strcmp(t, "more than 16 EiB"), "saturated: '%s'", t);

  char err[1024];
  setenv("TRIDENT_MEMORY_LIMIT", "1M", 1);
  CHECK(td_memory_check(1 << 20, 4, "x", NULL, err, sizeof err) == 0,
        "exactly the limit fits (the variable is per process: ranks do not divide it)");
  CHECK(td_memory_check((1 << 20) + 1, 1, "the thing", "why", err, sizeof err) == -1 &&
            strstr(err, "the thing needs 1.00 MiB (why), more than the 1.00 MiB available "
                        "(TRIDENT_MEMORY_LIMIT=1M"),
        "one byte more is refused: %s", err);
  CHECK(td_memory_check(TD_SIZE_HUGE, 1, "y", NULL, err, sizeof err) == -1 &&
            strstr(err, "y needs more than 16 EiB"),
        "a saturated need is refused: %s", err);
  setenv("TRIDENT_MEMORY_LIMIT", "unlimited", 1);
  CHECK(td_memory_check(TD_SIZE_HUGE, 1, "z", NULL, err, sizeof err) == 0, "unlimited: no check");
  setenv("TRIDENT_MEMORY_LIMIT", "12 apples", 1);
  CHECK(td_memory_check(1, 1, "z", NULL, err, sizeof err) == -1 &&
            strstr(err, "TRIDENT_MEMORY_LIMIT='12 apples': expected"),
        "a malformed limit: %s", err);
  unsetenv("TRIDENT_MEMORY_LIMIT");
  td_memory_limit l;
  int rc = td_memory_limit_get(1, &l, err, sizeof err);
  CHECK(rc == 0 && l.bytes > 0 && l.bytes != TD_SIZE_HUGE, "this machine's limit: %llu bytes (%s)",
        (unsigned long long)l.bytes, l.source);
  td_memory_limit l2;
  td_memory_limit_get(2, &l2, err, sizeof err);
  CHECK(l2.bytes <= l.bytes, "two ranks on the node get at most one's share");
}

/* A file under root with the given text (directories made on the way). */
static void put_file(const char *root, const char *rel, const char *text) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", root, rel);
  for (char *s = strchr(path + strlen(root) + 1, '/'); s; s = strchr(s + 1, '/')) {
    *s = 0;
    mkdir(path, 0700);
    *s = '/';
  }
  FILE *f = fopen(path, "w");
  fputs(text, f);
  fclose(f);
}

/* The memory cgroup's room from fake /proc/self/cgroup files and cgroup trees:
 * v2 with the limit on a parent, v1 (Slurm's layout: the job's limit above the
 * step's unlimited one; a hybrid system's "0::" line beside it), v1 with the memory controller among others, v1 in a
 * container whose path is not under the mount (the mount's own files), and no
 * limit anywhere. */
static void test_cgroup_room(void) {
  char root[] = "/tmp/td_cgroup_XXXXXX", proc[600], sys[600], what[600];
  if (!mkdtemp(root)) {
    CHECK(0, "mkdtemp for the fake cgroup trees");
    return;
  }
  snprintf(proc, sizeof proc, "%s/cgroup", root);
  snprintf(sys, sizeof sys, "%s/sys", root);
  const char *unl = "9223372036854771712\n";
  put_file(root, "cgroup", "0::/a/b\n");
  put_file(root, "sys/a/b/memory.max", "max\n"), put_file(root, "sys/a/b/memory.current", "100\n");
  put_file(root, "sys/a/memory.max", "1000\n"), put_file(root, "sys/a/memory.current", "300\n");
  uint64_t r = td_memory_cgroup_room(proc, sys, what, sizeof what);
  CHECK(r == 700 && strstr(what, "/a memory.max minus memory.current"),
        "v2: the parent's memory.max 1000 - memory.current 300 = %llu (%s)", (unsigned long long)r,
        what);
  put_file(root, "cgroup", "12:pids:/x\n4:memory:/slurm/job_1/step_0\n3:cpu,cpuacct:/y\n0::/z\n");
  put_file(root, "sys/memory/slurm/job_1/step_0/memory.limit_in_bytes", unl);
  put_file(root, "sys/memory/slurm/job_1/step_0/memory.usage_in_bytes", "50\n");
  put_file(root, "sys/memory/slurm/job_1/memory.limit_in_bytes", "4096\n");
  put_file(root, "sys/memory/slurm/job_1/memory.usage_in_bytes", "1000\n");
  r = td_memory_cgroup_room(proc, sys, what, sizeof what);
  CHECK(r == 3096 && strstr(what, "(v1) /slurm/job_1 memory.limit_in_bytes"),
        "v1: the job's limit above the step's: 4096 - 1000 = %llu (%s)", (unsigned long long)r, what);
  put_file(root, "cgroup", "5:cpu,memory,pids:/slurm/job_1\n");
  r = td_memory_cgroup_room(proc, sys, what, sizeof what);
  CHECK(r == 3096, "v1: memory among the line's controllers: %llu", (unsigned long long)r);
  put_file(root, "cgroup", "4:memory:/docker/0123abcd\n");
  put_file(root, "sys/memory/memory.limit_in_bytes", "2048\n");
  put_file(root, "sys/memory/memory.usage_in_bytes", "48\n");
  r = td_memory_cgroup_room(proc, sys, what, sizeof what);
  CHECK(r == 2000, "v1 in a container (its path not under the mount): the mount's 2048 - 48 = %llu",
        (unsigned long long)r);
  put_file(root, "sys/memory/memory.limit_in_bytes", unl);
  put_file(root, "sys/memory.max", "max\n");
  const char *unlimited[] = {"0::/\n", "4:memory:/docker/0123abcd\n", "3:cpu:/\n"};
  int none = 1;
  for (int i = 0; i < 3; i++) {
    put_file(root, "cgroup", unlimited[i]);
    none &= td_memory_cgroup_room(proc, sys, NULL, 0) == TD_SIZE_HUGE;
  }
  CHECK(none, "no limit (v2 max, v1 unlimited, no memory controller): none");
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  CHECK(system(cmd) == 0, "fake cgroup trees removed");
}

/* Checkpoint args beyond the limits (a damaged or hostile metadata.json). */
static void test_checkpoint_args(void) {
  const struct {
    const char *json, *want;
  } cases[] = {
      {"\"num_layers\": 1e30", "malformed \"num_layers\""},
      {"\"hidden_size\": 4611686018427387904", "hidden_size 4611686018427387904 is too large"},
      {"\"max_position_embeddings\": 2147483648", "max_position_embeddings 2147483648 is too large"},
      {"\"num_layers\": 1000000000", "num_layers 1000000000 is too large"},
      {"\"padded_vocab_size\": 9007199254740992", "padded_vocab_size 9007199254740992 is too large"},
      {"\"num_attention_heads\": 3", "hidden_size 64 is not divisible by num_attention_heads 3"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char text[1024], err[512] = "";
    snprintf(text, sizeof text,
             "{\"num_layers\": 2, \"hidden_size\": 64, \"num_attention_heads\": 4, "
             "\"ffn_hidden_size\": 256, \"max_position_embeddings\": 32, \"padded_vocab_size\": 128, "
             "\"layernorm_epsilon\": 1e-5, \"openai_gelu\": false, "
             "\"untie_embeddings_and_output_weights\": false}");
    cJSON *args = cJSON_Parse(text);
    char key[64];
    sscanf(cases[i].json, "\"%63[^\"]\"", key);
    cJSON_ReplaceItemInObject(args, key, cJSON_Parse(strchr(cases[i].json, ':') + 1));
    td_gpt_config c;
    int64_t tv;
    int rc = td_gpt_config_from_args(args, &c, &tv, err, sizeof err);
    CHECK(rc == -1 && strstr(err, cases[i].want), "args %s: %s", cases[i].json, err);
    cJSON_Delete(args);
  }
}

/* Flags: refusals of what would overflow, and the memory plan of a run. */
static int validate(const char *extra, char *err, size_t n, td_args *a) {
  char line[1024], *argv[64];
  snprintf(line, sizeof line,
           "train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
           "--max-position-embeddings 32 --micro-batch-size 2 --lr 1e-3 --mock-data "
           "--tokenizer-type NullTokenizer --vocab-size 100 %s",
           extra);
  int argc = 0;
  for (char *t = strtok(line, " "); t && argc < 64; t = strtok(NULL, " ")) argv[argc++] = t;
  if (td_args_parse(a, argc, argv, err, n)) return -1;
  return td_args_validate(a, 1, err, n);
}

static void test_flags(void) {
  const struct {
    const char *flags, *want;
  } r[] = {
      {"--train-iters 4611686018427387904 --global-batch-size 4",
       "--train-iters 4611686018427387904 x --global-batch-size 4 samples overflow"},
      {"--train-iters 10 --eval-iters 4611686018427387904 --global-batch-size 2",
       "--eval-iters 4611686018427387904 x --global-batch-size 2 x 1 evaluations"},
      {"--train-iters 10 --eval-iters 0 --global-batch-size 288230376151711744",
       "--global-batch-size 288230376151711744 x --seq-length 32 tokens per iteration overflow"},
      {"--train-iters 10 --micro-batch-size 67108864",
       "--micro-batch-size 67108864 x --seq-length 32 tokens per micro-batch is too many"},
      {"--train-iters 10 --hidden-size 536870912 --num-attention-heads 2",
       "--ffn-hidden-size (by default 4 x --hidden-size) 2147483648 is too large"},
      {"--train-iters 10 --vocab-size 2147483647", "--vocab-size 2147483647 is too large: at most 2147483646"},
      {"--train-iters 10 --vocab-size 2147483600",
       "--vocab-size 2147483600 padded to a multiple of --make-vocab-size-divisible-by 128"},
      {"--train-iters 10 --make-vocab-size-divisible-by 4611686018427387904",
       "--make-vocab-size-divisible-by 4611686018427387904 x --tensor-model-parallel-size 1 is too large"},
      {"--train-iters 10 --loss-scale-window 2147483648", "--loss-scale-window 2147483648 is too large"},
      {"--train-iters 10 --pipeline-model-parallel-size 4611686018427387904 --num-layers "
       "4611686018427387904 --tensor-model-parallel-size 4",
       "1 ranks cannot be split into --tensor-model-parallel-size 4"},
  };
  for (size_t i = 0; i < sizeof r / sizeof *r; i++) {
    td_args a;
    char err[1024] = "";
    int rc = validate(r[i].flags, err, sizeof err, &a);
    CHECK(rc == -1 && strstr(err, r[i].want), "%s: %s", r[i].flags, err);
    td_args_free(&a);
  }
  /* the run's memory: the parts add up to the total, and the pipeline's arenas */
  td_args a;
  char err[1024];
  CHECK(validate("--train-iters 10 --global-batch-size 8", err, sizeof err, &a) == 0, "%s", err);
  td_gpt_config cfg = {.num_layers = 2, .hidden = 64, .heads = 4, .ffn_hidden = 256, .seq_len = 32,
                       .max_positions = 32, .vocab_size = 128};
  td_gpt_layout lay = td_gpt_layout_single(&cfg);
  td_train_memory m, p2;
  td_train_place one = {.pp_size = 1, .dp_size = 1, .device_is_host = 1};
  td_train_place pp = {.pp_size = 2, .dp_size = 1, .device_is_host = 1};
  td_train_place gpu = {.pp_size = 1, .dp_size = 1};
  td_train_place gpu_offload = {.pp_size = 1, .dp_size = 1, .optimizer_on_host = 1};
  td_train_memory on_gpu, offload;
  lay.layer_end = 1, lay.has_head = 0;
  int ok = !td_train_memory_plan(&a, &cfg, &lay, TD_F32, &pp, &p2, err, sizeof err);
  lay = td_gpt_layout_single(&cfg);
  ok = ok && !td_train_memory_plan(&a, &cfg, &lay, TD_F32, &one, &m, err, sizeof err) &&
       !td_train_memory_plan(&a, &cfg, &lay, TD_F32, &gpu, &on_gpu, err, sizeof err) &&
       !td_train_memory_plan(&a, &cfg, &lay, TD_F32, &gpu_offload, &offload, err, sizeof err);
  uint64_t sum = m.model.params + m.model.grads + m.model.weights_bf16 + m.activations + m.optimizer +
                 m.checkpoint + m.staging + m.tables;
  CHECK(ok && m.total == sum && m.optimizer == 2 * m.model.params && m.arenas == 1 &&
            m.staging == (uint64_t)8 * 32 * 12 + 33 * 4,
        "a run's figures add up (total %llu, optimizer 2 x parameters, staging 8 x 32 x 12 + a sample)",
        (unsigned long long)m.total);
  CHECK(on_gpu.total == m.staging + m.tables, "on a GPU only the host's part counts against the host");
  CHECK(on_gpu.device == m.total - m.staging - m.tables && m.device == on_gpu.device,
        "the device's part: parameters, gradients, activations, Adam (%llu bytes)",
        (unsigned long long)on_gpu.device);
  /* a device with memory of its own: its part against what it has free */
  td_train_place small = gpu;
  small.device_free = on_gpu.device - 1, small.device_total = 80ull << 30;
  small.device_name = "cuda:0 (a test GPU)";
  CHECK(td_train_check_memory(&a, &cfg, &lay, TD_F32, &small, 1, err, sizeof err) == -1 &&
            strstr(err, "of device memory on cuda:0 (a test GPU)") && strstr(err, "free of its 80.0 GiB"),
        "one byte short of the device's free memory: %s", err);
  td_train_place roomy = small;
  roomy.device_free = on_gpu.device;
  CHECK(td_train_check_memory(&a, &cfg, &lay, TD_F32, &roomy, 1, err, sizeof err) == 0,
        "exactly the device's free memory fits (%s)", err);
  td_train_place shared = roomy; /* two ranks on one GPU: each has half of its free memory */
  shared.ranks_on_device = 2;
  CHECK(td_train_check_memory(&a, &cfg, &lay, TD_F32, &shared, 1, err, sizeof err) == -1 &&
            strstr(err, "for each of the 2 ranks that share it"),
        "two ranks sharing the device: each needs its part of the free memory: %s", err);
  shared.device_free = 2 * on_gpu.device;
  CHECK(td_train_check_memory(&a, &cfg, &lay, TD_F32, &shared, 1, err, sizeof err) == 0,
        "two ranks sharing a device with twice the room fit (%s)", err);
  /* ZeRO with --save: the checkpoint's whole buffers are gathered in host memory */
  td_args az;
  CHECK(validate("--train-iters 10 --global-batch-size 8 --save ck --save-interval 5", err, sizeof err, &az) == 0, "%s", err);
  td_train_place z3 = {.pp_size = 1, .dp_size = 2, .zero_stage = 3};
  td_train_memory zm;
  int planned = !td_train_memory_plan(&az, &cfg, &lay, TD_F32, &z3, &zm, err, sizeof err);
  CHECK(planned &&
            zm.checkpoint >= 3 * (uint64_t)cfg.num_layers * 12 * 64 * 64 &&
            zm.total == zm.staging + zm.tables + zm.checkpoint &&
            zm.device == zm.model.params + zm.model.grads + zm.model.weights_bf16 + zm.activations +
                             zm.optimizer + zm.shards + zm.transient,
        "ZeRO-3 with --save: parameters, m and v gathered in host memory (%llu bytes), none on "
        "the device", (unsigned long long)zm.checkpoint);
  /* data parallelism's receive buffers at every stage: none at DP=1; a
   * half-precision wire's larger than fp32's; the CPU keeps one unit more */
  td_args aw;
  CHECK(validate("--train-iters 10 --global-batch-size 8 --bf16 --grad-reduce-in-bf16", err,
                 sizeof err, &aw) == 0, "%s", err);
  td_train_place dp1 = {.pp_size = 1, .dp_size = 1}, dp2 = {.pp_size = 1, .dp_size = 2};
  td_train_place dp2_cpu = dp2;
  dp2_cpu.device_is_host = 1;
  td_train_memory t1, t2, t2w, t2c;
  planned = !td_train_memory_plan(&az, &cfg, &lay, TD_F32, &dp1, &t1, err, sizeof err) &&
            !td_train_memory_plan(&az, &cfg, &lay, TD_F32, &dp2, &t2, err, sizeof err) &&
            !td_train_memory_plan(&aw, &cfg, &lay, TD_BF16, &dp2, &t2w, err, sizeof err) &&
            !td_train_memory_plan(&az, &cfg, &lay, TD_F32, &dp2_cpu, &t2c, err, sizeof err);
  const uint64_t unit = t2.transient / 2; /* two fp32 receive buffers of the largest unit */
  CHECK(planned && t1.transient == 0 && t2.transient > 0 && t2.transient % 8 == 0 &&
            t2w.transient == 2 * t2.transient && t2c.transient == t2.transient + unit,
        "DP receive buffers: none at DP=1, 2 units at DP=2 (%llu bytes); a bf16 wire twice that "
        "at DP=2 (the unit sent and received in bf16, and 2 fp32 pieces of half a unit: %llu); "
        "the CPU one unit more (%llu)",
        (unsigned long long)t2.transient, (unsigned long long)t2w.transient,
        (unsigned long long)t2c.transient);
  td_args_free(&aw);
  td_train_place z3_other = z3;
  z3_other.dp_rank = 1;
  td_train_memory zr1;
  planned = !td_train_memory_plan(&az, &cfg, &lay, TD_F32, &z3_other, &zr1, err, sizeof err);
  CHECK(planned && zr1.checkpoint == 0 && zr1.total == zm.total - zm.checkpoint,
        "ZeRO-3 with --save on DP rank 1: no whole checkpoint buffers (DP rank 0 holds them)");
  td_train_place z3_off = z3;
  z3_off.params_on_host = 1;
  td_train_memory zo;
  planned = !td_train_memory_plan(&az, &cfg, &lay, TD_F32, &z3_off, &zo, err, sizeof err);
  CHECK(planned && zo.device + zo.shards / 2 == zm.device && zo.total == zm.total + zm.shards / 2,
        "offload_param: ZeRO-3's parameter shard (half of its shards) moves from the device to the "
        "host (%llu bytes)", (unsigned long long)(zm.shards / 2));
  td_args_free(&az);
  CHECK(offload.optimizer == 4 * m.model.params && offload.total == m.staging + m.tables + offload.optimizer,
        "Adam offloaded to the host: m, v and host copies of parameters and gradients count against "
        "the host (%llu)", (unsigned long long)offload.optimizer);
  CHECK(p2.arenas == 2 && p2.activations == 2 * p2.model.activations,
        "the first of 2 pipeline stages keeps 2 micro-batches in flight: 2 arenas");
  setenv("TRIDENT_MEMORY_LIMIT", "1K", 1);
  CHECK(td_train_check_memory(&a, &cfg, &lay, TD_F32, &one, 1, err, sizeof err) == -1 &&
            strstr(err, "each rank of this run needs") && strstr(err, "the largest, "),
        "over the limit: %s", err);
  unsetenv("TRIDENT_MEMORY_LIMIT");
  td_args_free(&a);
  int64_t n[3];
  td_gpt_num_samples(10, 8, 4, 3, n);
  CHECK(n[0] == 10 * 8 && n[1] == (10 / 4 + 1) * 3 * 8 && n[2] == 3 * 8, "Megatron's sample counts");
}

int main(void) {
  test_checked();
  test_size_limits();
  test_plan_matches_model();
  test_count_split_layouts();
  test_plan_huge();
  test_memory_limit();
  test_cgroup_room();
  test_checkpoint_args();
  test_flags();
  return tst_finish();
}
