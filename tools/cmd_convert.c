/* trident convert: Hugging Face GPT-2 <-> trident checkpoints (docs/hf_convert.md).
 *
 *   --from hf --to trident: config.json + model.safetensors -> a checkpoint at
 *     iteration 0 with parameters only (training starts a fresh optimizer), the
 *     model's args in its metadata (the trainer checks its flags against them);
 *   --from trident --to hf: the latest iteration of a checkpoint -> config.json +
 *     model.safetensors that transformers' GPT2LMHeadModel.from_pretrained loads.
 *
 * The tool runs on the CPU device, whose memory is host memory: parameters are
 * converted in the device buffer the checkpoint code reads and writes, without a
 * second copy of the model. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/files.h"
#include "base/mem.h"
#include "cmd_flags.h"
#include "commands.h"
#include "device/device.h"
#include "model/gpt.h"
#include "model/gpt_config.h"
#include "model/hf_convert.h"
#include "train/checkpoint.h"

#define DEFAULT_DIVISIBLE_BY 128 /* Megatron's --make-vocab-size-divisible-by */

typedef struct {
  const char *from, *to, *input, *output;
  int64_t divisible_by, vocab_size; /* 0: not given */
} conv_args;

static void usage(FILE *f) {
  fprintf(f,
          "usage: trident convert --from hf --to trident --input HF_DIR --output CKPT_DIR\n"
          "                       [--make-vocab-size-divisible-by N]\n"
          "       trident convert --from trident --to hf --input CKPT_DIR --output HF_DIR\n"
          "                       [--vocab-size N]\n"
          "  Hugging Face GPT-2 (config.json + model.safetensors, GPT2LMHeadModel) to a trident\n"
          "  checkpoint at iteration 0 without optimizer state, which `trident train --load\n"
          "  CKPT_DIR` fine-tunes with the model flags the import prints; or the latest\n"
          "  iteration of a trident checkpoint to Hugging Face (docs/hf_convert.md).\n"
          "  --from FORMAT, --to FORMAT          hf or trident, one of each\n"
          "  --input DIR                         the directory to read\n"
          "  --output DIR                        the directory to write (must not hold a\n"
          "                                      checkpoint or model already)\n"
          "  --make-vocab-size-divisible-by N    import: pad the vocabulary to a multiple of N\n"
          "                                      as trident train will (default %d)\n"
          "  --vocab-size N                      export: the tokens before padding (default:\n"
          "                                      what the checkpoint records)\n",
          DEFAULT_DIVISIBLE_BY);
}

static int64_t positive(const char *flag, const char *v) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || end == v || *end || x < 1)
    td_fail("%s expects a positive integer, got '%s'", flag, v);
  return x;
}

static void check_args(const conv_args *a) {
  if (!a->from || !a->to || !a->input || !a->output)
    td_fail("trident convert needs --from, --to, --input and --output (see --help)");
  int import = !strcmp(a->from, "hf") && !strcmp(a->to, "trident");
  int export = !strcmp(a->from, "trident") && !strcmp(a->to, "hf");
  if (!import && !export)
    td_fail("--from %s --to %s: trident convert goes from hf to trident or from trident to hf",
            a->from, a->to);
  if (import && a->vocab_size)
    td_fail("--vocab-size is for --to hf; an import takes the vocabulary from config.json");
  if (export && a->divisible_by)
    td_fail(
        "--make-vocab-size-divisible-by is for --to trident; an export reads the padding "
        "from the checkpoint");
}

/* Returns 1 when --help was asked for. */
static int parse_args(conv_args *a, int argc, char **argv) {
  *a = (conv_args){0};
  for (int i = 1; i < argc; i++) {
    const char *v;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 1;
    } else if ((v = td_cmd_flag_value(argc, argv, &i, "--from", "convert"))) {
      a->from = v;
    } else if ((v = td_cmd_flag_value(argc, argv, &i, "--to", "convert"))) {
      a->to = v;
    } else if ((v = td_cmd_flag_value(argc, argv, &i, "--input", "convert"))) {
      a->input = v;
    } else if ((v = td_cmd_flag_value(argc, argv, &i, "--output", "convert"))) {
      a->output = v;
    } else if ((v = td_cmd_flag_value(argc, argv, &i, "--make-vocab-size-divisible-by", "convert"))) {
      a->divisible_by = positive("--make-vocab-size-divisible-by", v);
    } else if ((v = td_cmd_flag_value(argc, argv, &i, "--vocab-size", "convert"))) {
      a->vocab_size = positive("--vocab-size", v);
    } else {
      td_fail("unknown argument '%s' for 'trident convert' (see --help)", argv[i]);
    }
  }
  check_args(a);
  return 0;
}

/* ------------------------------------------------------------------ shared */

/* The output must not hold what we would overwrite. */
static void refuse_existing(const char *dir, const char *file, const char *what) {
  char p[4096];
  snprintf(p, sizeof p, "%s/%s", dir, file);
  if (td_path_exists(p))
    td_fail("--output %s already holds %s (%s): choose another directory or remove it", dir, what,
            file);
}

/* The parameters of cfg: views into one flat device buffer, as checkpoint tensors. */
typedef struct {
  td_device *dev;
  td_gpt_tensor *tensors;
  int n;
  float *flat;
  td_ckpt_tensor *ck;
} params;

static params params_alloc(td_device *dev, const td_gpt_config *cfg) {
  params p = {.dev = dev};
  int64_t flat_numel;
  p.tensors = td_gpt_single_tensors(cfg, &p.n, &flat_numel);
  p.flat = p.dev->ops->alloc(p.dev, (size_t)flat_numel * sizeof(float));
  p.ck = td_calloc((size_t)p.n * sizeof *p.ck);
  for (int i = 0; i < p.n; i++) p.ck[i] = td_ckpt_view_of(&p.tensors[i], p.flat);
  return p;
}

static int64_t params_count(const params *p) {
  int64_t n = 0;
  for (int i = 0; i < p->n; i++) n += p->tensors[i].numel;
  return n;
}

static void params_free(params *p) {
  p->dev->ops->free(p->dev, p->flat);
  td_free(p->ck), td_free(p->tensors);
}

/* ------------------------------------------------------------------ import */

/* The trainer state of a fresh model: iteration 0, nothing consumed, and the
 * args the model needs. */
static char *import_state(const td_gpt_config *cfg, int64_t vocab, int64_t divisible_by,
                          const char *source) {
  cJSON *s = cJSON_CreateObject(), *args = cJSON_AddObjectToObject(s, "args");
  td_gpt_config_to_args(cfg, vocab, args);
  cJSON_AddNumberToObject(args, "make_vocab_size_divisible_by", (double)divisible_by);
  cJSON_AddNumberToObject(args, "tensor_model_parallel_size", 1);
  const char *zero[] = {"iteration", "consumed_train_samples", "consumed_valid_samples",
                        "optimizer_step", "lr_scheduler_num_steps"};
  for (size_t i = 0; i < sizeof zero / sizeof *zero; i++) cJSON_AddNumberToObject(s, zero[i], 0);
  cJSON *from = cJSON_AddObjectToObject(s, "converted_from");
  cJSON_AddStringToObject(from, "format", "huggingface-gpt2");
  cJSON_AddStringToObject(from, "path", source);
  char *text = cJSON_PrintUnformatted(s);
  cJSON_Delete(s);
  return text;
}

/* The model flags `trident train` needs to load this checkpoint. */
static void print_train_flags(const td_gpt_config *c, int64_t vocab, int64_t divisible_by) {
  printf(
      "  model flags for trident train: --num-layers %lld --hidden-size %lld "
      "--num-attention-heads %lld --ffn-hidden-size %lld --max-position-embeddings %lld "
      "--layernorm-epsilon %g%s%s",
      (long long)c->num_layers, (long long)c->hidden, (long long)c->heads, (long long)c->ffn_hidden,
      (long long)c->max_positions, td_float_shortest(c->layernorm_eps),
      c->openai_gelu ? " --openai-gelu" : "",
      c->untie_embeddings ? " --untie-embeddings-and-output-weights" : "");
  if (divisible_by != DEFAULT_DIVISIBLE_BY)
    printf(" --make-vocab-size-divisible-by %lld", (long long)divisible_by);
  printf(
      "\n  and a tokenizer of %lld tokens (GPT2BPETokenizer's is 50257; NullTokenizer "
      "--vocab-size %lld)\n",
      (long long)vocab, (long long)(vocab - 1));
}

static int import_hf(const conv_args *a) {
  char err[1024];
  int64_t divisible_by = a->divisible_by ? a->divisible_by : DEFAULT_DIVISIBLE_BY;
  refuse_existing(a->output, "latest_checkpointed_iteration.txt", "a checkpoint");
  td_hf_gpt2 *h = td_hf_open(a->input, divisible_by, err, sizeof err);
  if (!h) td_fail("--input %s", err);
  td_gpt_config cfg = *td_hf_config(h);
  int64_t vocab = td_hf_vocab_size(h);
  td_device *dev = td_device_open("cpu");
  params p = params_alloc(dev, &cfg);
  if (td_hf_read_params(h, p.tensors, p.n, p.flat, err, sizeof err))
    td_fail("--input %s: %s", a->input, err);
  td_hf_close(h);
  char *state = import_state(&cfg, vocab, divisible_by, a->input);
  td_ckpt_contents c = {.iteration = 0, .params = p.ck, .n_params = p.n, .state_json = state};
  if (td_checkpoint_save(dev, a->output, &c, err, sizeof err)) td_fail("--output %s", err);
  cJSON_free(state);
  printf(
      "imported Hugging Face GPT-2 %s into %s at iteration 0 (parameters only): %lld "
      "parameters, vocabulary %lld padded to %lld\n",
      a->input, a->output, (long long)params_count(&p), (long long)vocab,
      (long long)cfg.vocab_size);
  print_train_flags(&cfg, vocab, divisible_by);
  params_free(&p);
  td_device_close(dev);
  return 0;
}

/* ------------------------------------------------------------------ export */

static int64_t args_int(const cJSON *args, const char *key, int64_t dflt) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(args, key);
  return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : dflt;
}

/* The tokens before padding: --vocab-size, what the checkpoint records, or
 * NullTokenizer's N + 1; 0 when none says. */
static int64_t recorded_vocab(const conv_args *a, const cJSON *args, int64_t true_vocab) {
  if (a->vocab_size) return a->vocab_size;
  if (true_vocab) return true_vocab;
  const char *tok = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(args, "tokenizer_type"));
  int64_t n = args_int(args, "vocab_size", 0);
  return tok && !strcmp(tok, "NullTokenizer") && n > 0 ? n + 1 : 0;
}

/* cfg->vocab_size (padded) and the rows to export. */
static int64_t export_vocab(const conv_args *a, const cJSON *args, td_gpt_config *cfg,
                            int64_t true_vocab) {
  int64_t vocab = recorded_vocab(a, args, true_vocab);
  if (!cfg->vocab_size && !vocab)
    td_fail(
        "--input %s: the checkpoint does not record its vocabulary size (a GPT2BPETokenizer "
        "run): pass --vocab-size N (50257 for GPT-2's vocabulary)",
        a->input);
  if (!cfg->vocab_size) {
    int64_t multiple = args_int(args, "make_vocab_size_divisible_by", DEFAULT_DIVISIBLE_BY);
    int tp = (int)args_int(args, "tensor_model_parallel_size", 1);
    cfg->vocab_size = td_gpt_padded_vocab(vocab, multiple, tp);
  }
  if (vocab > cfg->vocab_size)
    td_fail("--vocab-size %lld is larger than the checkpoint's vocabulary (%lld rows)",
            (long long)vocab, (long long)cfg->vocab_size);
  if (!vocab)
    fprintf(stderr,
            "trident: note: the checkpoint does not say how many of its %lld vocabulary "
            "rows are padding: exporting all (pass --vocab-size N to drop the padding)\n",
            (long long)cfg->vocab_size);
  return vocab ? vocab : cfg->vocab_size;
}

/* The model config from the checkpoint's metadata (its state's args). */
static td_gpt_config export_config(const conv_args *a, td_device *dev, int64_t it, int64_t *vocab) {
  char err[1024], *state = NULL;
  td_ckpt_contents probe = {.iteration = it}; /* no tensors: only the state */
  if (td_checkpoint_load(dev, a->input, it, &probe, &state, err, sizeof err))
    td_fail("--input %s", err);
  cJSON *s = cJSON_Parse(state);
  td_free(state);
  const cJSON *args = cJSON_GetObjectItemCaseSensitive(s, "args");
  td_gpt_config cfg;
  int64_t true_vocab;
  if (td_gpt_config_from_args(args, &cfg, &true_vocab, err, sizeof err))
    td_fail("--input %s: %s (not written by trident train or trident convert?)", a->input, err);
  *vocab = export_vocab(a, args, &cfg, true_vocab);
  cJSON_Delete(s);
  return cfg;
}

static int export_hf(const conv_args *a) {
  char err[1024];
  refuse_existing(a->output, "config.json", "a model");
  refuse_existing(a->output, "model.safetensors", "a model");
  int64_t it = td_checkpoint_latest(a->input, err, sizeof err), vocab;
  if (it == -2) td_fail("--input %s", err);
  if (it == -1)
    td_fail("--input %s: no latest_checkpointed_iteration.txt: not a trident checkpoint directory",
            a->input);
  td_device *dev = td_device_open("cpu");
  td_gpt_config cfg = export_config(a, dev, it, &vocab);
  params p = params_alloc(dev, &cfg);
  td_ckpt_contents c = {.iteration = it, .params = p.ck, .n_params = p.n};
  if (td_checkpoint_load(dev, a->input, it, &c, NULL, err, sizeof err)) td_fail("--input %s", err);
  if (td_hf_write(a->output, &cfg, vocab, p.tensors, p.n, p.flat, err, sizeof err))
    td_fail("--output %s", err);
  printf(
      "exported iteration %lld of %s to %s (GPT2LMHeadModel: config.json, model.safetensors), "
      "vocabulary %lld of %lld rows\n",
      (long long)it, a->input, a->output, (long long)vocab, (long long)cfg.vocab_size);
  params_free(&p);
  td_device_close(dev);
  return 0;
}

int td_cmd_convert(int argc, char **argv) {
  conv_args a;
  if (parse_args(&a, argc, argv)) return 0;
  return !strcmp(a.to, "trident") ? import_hf(&a) : export_hf(&a);
}
