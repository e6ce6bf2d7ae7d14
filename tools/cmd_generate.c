/* trident generate: text from a trained checkpoint, as Megatron's text
 * generation does it (tools/generate_samples_gpt.py's flags): the prompt is
 * tokenized with the GPT-2 BPE, then each new token is chosen from the logits of
 * the last position (greedy, or sampled with temperature / top-k / top-p, from
 * a seeded counter-based generator), until --out-seq-length tokens or the
 * end-of-document token. The model, its sizes from the checkpoint's metadata,
 * is loaded at tensor-parallel size 1 whatever size it was saved with. The
 * context is at most seq-length tokens (the last ones when longer); each new
 * token runs one row through the model against the keys and values the earlier
 * rows left (a key/value cache) until the context slides. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "base/rng.h"
#include "cmd_flags.h"
#include "commands.h"
#include "data/bpe_tokenizer.h"
#include "device/device.h"
#include "model/gpt.h"
#include "model/gpt_config.h"
#include "model/sampling.h"
#include "train/checkpoint.h"

typedef struct {
  const char *load, *vocab, *merges, *prompt, *device;
  int64_t out_len, num_samples, seed;
  int json;
  td_sample_params sample;
} gen_args;

static void usage(FILE *f) {
  fprintf(f,
          "usage: trident generate --load CKPT --vocab-file V --merge-file M --prompt TEXT\n"
          "                        [--out-seq-length N] [--greedy] [--temperature T]\n"
          "                        [--top_k K] [--top_p P] [--seed S] [--num-samples N] [--json]\n"
          "                        [--device cpu|cuda|auto]\n"
          "  Continues TEXT with the model of CKPT's latest checkpoint (any tensor-parallel size).\n"
          "  --load CKPT         a trident train --save directory (or trident convert output)\n"
          "  --vocab-file V      GPT-2 vocab.json the model was trained with\n"
          "  --merge-file M      GPT-2 merges.txt\n"
          "  --prompt TEXT       the text to continue (\"\": start after an end-of-document token)\n"
          "  --out-seq-length N  tokens to generate (default 64 or the model's positions, if\n"
          "                      fewer; at most its positions); stops early at <|endoftext|>\n"
          "  --greedy            always the most likely token\n"
          "  --temperature T     sampling temperature > 0 (default 1.0)\n"
          "  --top_k K           sample from the K most likely tokens (default 0: all)\n"
          "  --top_p P           sample from the nucleus of probability P in (0, 1] (default 0: all)\n"
          "  --seed S            random seed of the sampling (default 1234)\n"
          "  --num-samples N     continuations to generate (default 1), each its own stream\n"
          "  --json              one JSON object per sample: prompt, text, tokens\n"
          "  --device D          cpu, cuda or auto (default: $TRIDENT_DEVICE, else auto: cuda\n"
          "                      when this trident has the CUDA backend and a GPU is visible)\n");
}

static double number(const char *flag, const char *v, double lo, double hi, int lo_open) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || *end || !(lo_open ? x > lo : x >= lo) || x > hi)
    td_fail("%s expects a number in %s%g, %g]; got '%s'", flag, lo_open ? "(" : "[", lo, hi, v);
  return x;
}

static int64_t count(const char *flag, const char *v, int64_t lo) {
  double x = number(flag, v, (double)lo, 1e15, 0);
  if (x != floor(x)) td_fail("%s expects an integer >= %lld; got '%s'", flag, (long long)lo, v);
  return (int64_t)x;
}

/* Returns 1 when --help was asked for. */
static int parse_args(gen_args *a, int argc, char **argv) {
  *a = (gen_args){.out_len = 0, .num_samples = 1, .seed = 1234, .sample = {.temperature = 1.0}};
  const char *env = getenv("TRIDENT_DEVICE");
  a->device = env && *env ? env : "auto";
  for (int i = 1; i < argc; i++) {
    const char *v;
#define FLAG(name) (v = td_cmd_flag_value(argc, argv, &i, name, "generate"))
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 1;
    } else if (!strcmp(argv[i], "--greedy")) {
      a->sample.greedy = 1;
    } else if (!strcmp(argv[i], "--json")) {
      a->json = 1;
    } else if (FLAG("--load")) {
      a->load = v;
    } else if (FLAG("--vocab-file")) {
      a->vocab = v;
    } else if (FLAG("--merge-file")) {
      a->merges = v;
    } else if (FLAG("--prompt")) {
      a->prompt = v;
    } else if (FLAG("--device")) {
      a->device = v;
    } else if (FLAG("--out-seq-length")) {
      a->out_len = count("--out-seq-length", v, 1);
    } else if (FLAG("--num-samples")) {
      a->num_samples = count("--num-samples", v, 1);
    } else if (FLAG("--seed")) {
      a->seed = count("--seed", v, 0);
    } else if (FLAG("--temperature")) {
      a->sample.temperature = number("--temperature", v, 0, 1e6, 1);
    } else if (FLAG("--top_k") || FLAG("--top-k")) {
      a->sample.top_k = count("--top_k", v, 0);
    } else if (FLAG("--top_p") || FLAG("--top-p")) {
      a->sample.top_p = number("--top_p", v, 0, 1, 0);
    } else {
      td_fail("unknown argument '%s' for 'trident generate' (see --help)", argv[i]);
    }
#undef FLAG
  }
  if (!a->load || !a->vocab || !a->merges || !a->prompt)
    td_fail("trident generate needs --load, --vocab-file, --merge-file and --prompt (see --help)");
  return 0;
}

/* ------------------------------------------------------------------ the model */

typedef struct {
  td_device *dev;
  td_gpt *model;
  int64_t true_vocab; /* rows the tokenizer uses; the rest is padding */
} loaded;

/* The latest checkpoint of dir as a single-rank model for micro-batches of one. */
static loaded load_model(const char *dir, const char *device) {
  char err[1024], *state = NULL;
  loaded l = {.dev = td_device_open(device)};
  int64_t it = td_checkpoint_latest(dir, err, sizeof err);
  if (it == -2) td_fail("--load %s", err);
  if (it == -1) td_fail("--load %s: no latest_checkpointed_iteration.txt: not a checkpoint directory", dir);
  td_ckpt_contents probe = {.iteration = it};
  if (td_checkpoint_load(l.dev, dir, it, &probe, &state, err, sizeof err)) td_fail("--load %s", err);
  cJSON *s = cJSON_Parse(state);
  td_free(state);
  td_gpt_config cfg;
  if (td_gpt_config_from_args(cJSON_GetObjectItemCaseSensitive(s, "args"), &cfg, &l.true_vocab,
                              err, sizeof err))
    td_fail("--load %s: %s", dir, err);
  cJSON_Delete(s);
  if (!l.true_vocab) l.true_vocab = cfg.vocab_size;
  td_gpt_layout lay = td_gpt_layout_single(&cfg);
  l.model = td_gpt_create(l.dev, &cfg, &lay, 1, TD_F32);
  int n = td_gpt_num_tensors(l.model);
  td_ckpt_tensor *views = td_calloc((size_t)n * sizeof *views);
  for (int i = 0; i < n; i++)
    views[i] = td_ckpt_view_of(td_gpt_tensor_at(l.model, i), td_gpt_params(l.model));
  td_ckpt_contents c = {.iteration = it, .params = views, .n_params = n};
  if (td_checkpoint_load(l.dev, dir, it, &c, NULL, err, sizeof err)) td_fail("--load %s", err);
  td_free(views);
  td_gpt_cast_weights(l.model);
  return l;
}

/* ------------------------------------------------------------------ generation */

/* Rows [0, rows) of a context that starts at ids[from], held by the model. */
typedef struct {
  int64_t rows, from;
} held_rows;

/* Continue ids[0..*n) (capacity *n + out_len) by up to out_len tokens; stops
 * after an end-of-document token. Sample k draws from RNG stream k. The context
 * is the last T tokens at positions 0..T-1; while it only grows, each token runs
 * one row through the model against the cached keys and values of the rows
 * before (td_gpt_forward_rows); once it slides, every row moves to a new
 * position and the whole context runs again. *prompt: the rows of the prompt's
 * context an earlier sample left (all but its last, whose logits are needed),
 * updated for the next sample (none once the context slid over them). */
static void generate(const loaded *l, const gen_args *a, int32_t eod, int64_t k, int32_t *ids,
                     int64_t *n, held_rows *prompt) {
  const td_gpt_config *cfg = td_gpt_get_config(l->model);
  const int64_t T = cfg->seq_len;
  float *row = td_malloc((size_t)cfg->vocab_size * sizeof *row);
  int64_t cached = prompt->rows, cached_from = prompt->rows ? prompt->from : -1;
  held_rows first = {0, 0};
  int slid = 0;
  for (int64_t step = 0; step < a->out_len; step++) {
    int64_t L = *n < T ? *n : T, from = *n - L; /* the context: the last T tokens */
    if (step == 0) first = (held_rows){L - 1, from};
    slid |= from != first.from;
    if (from != cached_from) cached = 0;
    td_gpt_forward_rows(l->model, ids + from, cached, L, row);
    cached = L, cached_from = from;
    double u = (td_rng_u32((uint64_t)a->seed, (uint64_t)k, (uint64_t)step) + 0.5) / 4294967296.0;
    int32_t next = (int32_t)td_sample_token(row, l->true_vocab, &a->sample, u);
    ids[(*n)++] = next;
    if (next == eod) break;
  }
  *prompt = slid ? (held_rows){0, 0} : first;
  td_free(row);
}

static void print_sample(const td_bpe *bpe, const gen_args *a, const int32_t *ids, int64_t first,
                         int64_t n) {
  char *text, err[256];
  size_t len;
  if (td_bpe_decode(bpe, ids + first, (size_t)(n - first), &text, &len, err, sizeof err))
    td_fail("decoding the generated tokens: %s", err);
  if (!a->json) {
    printf("%s%.*s\n", a->prompt, (int)len, text);
  } else {
    cJSON *o = cJSON_CreateObject(), *tok = cJSON_AddArrayToObject(o, "tokens");
    char *t = td_malloc(len + 1);
    memcpy(t, text, len), t[len] = 0;
    cJSON_AddStringToObject(o, "prompt", a->prompt);
    cJSON_AddStringToObject(o, "text", t);
    for (int64_t i = first; i < n; i++) cJSON_AddItemToArray(tok, cJSON_CreateNumber(ids[i]));
    char *line = cJSON_PrintUnformatted(o);
    puts(line);
    free(line), td_free(t), cJSON_Delete(o);
  }
  fflush(stdout);
  td_free(text);
}

int td_cmd_generate(int argc, char **argv) {
  gen_args a;
  if (parse_args(&a, argc, argv)) return 0;
  char err[1024];
  td_bpe *bpe = td_bpe_load(a.vocab, a.merges, err, sizeof err);
  if (!bpe) td_fail("%s", err);
  loaded l = load_model(a.load, a.device);
  int64_t positions = td_gpt_get_config(l.model)->max_positions;
  if (!a.out_len) a.out_len = positions < 64 ? positions : 64; /* not given: 64, or all positions */
  if (a.out_len > positions) /* before the ids buffer of prompt + out_len tokens is sized */
    td_fail("--out-seq-length %lld: at most the model's %lld positions (its "
            "max_position_embeddings: Megatron's generation refuses more tokens than the model "
            "has positions)",
            (long long)a.out_len, (long long)positions);
  if (td_bpe_vocab_size(bpe) > l.true_vocab)
    td_fail("--vocab-file has %lld entries; the model in %s has %lld vocabulary rows: another "
            "tokenizer than the one it was trained with?",
            (long long)td_bpe_vocab_size(bpe), a.load, (long long)l.true_vocab);
  td_bpe_worker *w = td_bpe_worker_new(bpe);
  int32_t *prompt_ids = NULL, eod = td_bpe_eod(bpe);
  size_t np = 0, cap = 0;
  if (td_bpe_encode(w, a.prompt, strlen(a.prompt), &prompt_ids, &np, &cap, err, sizeof err))
    td_fail("--prompt: %s", err);
  /* an empty prompt starts after an end of document, as GPT-2 samples unconditionally */
  int64_t start = np ? (int64_t)np : 1;
  int32_t *ids = td_malloc((size_t)(start + a.out_len) * sizeof *ids);
  held_rows prompt = {0, 0}; /* the prompt runs through the model once for all samples */
  for (int64_t k = 0; k < a.num_samples; k++) {
    int64_t n = start;
    if (np) memcpy(ids, prompt_ids, np * sizeof *ids);
    else ids[0] = eod;
    generate(&l, &a, eod, k, ids, &n, &prompt);
    print_sample(bpe, &a, ids, start, n);
  }
  td_free(ids), td_free(prompt_ids);
  td_bpe_worker_free(w);
  td_bpe_free(bpe);
  td_gpt_destroy(l.model);
  td_device_close(l.dev);
  return 0;
}
