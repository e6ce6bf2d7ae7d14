/* trident dataset: the GPT dataset that trident train (and Megatron's pretrain_gpt.py)
 * builds from the same data flags, for inspection and for checks against Megatron.
 * --first K prints the first K samples of a split (--which), one JSON array of
 * seq_length + 1 token ids per line; --summary (the default) prints the files'
 * document / sequence / token counts and each split's samples and epochs as JSON.
 *
 * The flags are trident train's (src/train/args.h): the model and optimizer flags
 * that train requires are filled with placeholders when absent, and the parallel
 * layout is ignored, since neither changes the data. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "base/error.h"
#include "base/mem.h"
#include "base/memory_limit.h"
#include "cmd_flags.h"
#include "commands.h"
#include "data/blend.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "train/args.h"

typedef struct {
  td_split which;
  int64_t first; /* -1: print the summary */
} ds_opts;

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: trident dataset [training data flags] [--which train|valid|test] [--first K | "
      "--summary]\n"
      "  The GPT dataset trident train builds from the same flags: --data-path (or\n"
      "  --train-data-path / --valid-data-path / --test-data-path), --split, --seq-length,\n"
      "  --seed, --train-iters or --train-samples, --global-batch-size, --micro-batch-size,\n"
      "  --eval-interval, --eval-iters, --data-cache-path (see trident train --help). Model\n"
      "  and optimizer flags are accepted and not needed.\n"
      "  --which S     the split to print: train (default), valid or test\n"
      "  --first K     print its first K samples, one JSON array of seq-length + 1 ids per line\n"
      "  --summary     print the files' and every split's counts as JSON (the default)\n"
      "  Samples asked per split, as Megatron: train = --train-samples or train-iters x global\n"
      "  batch; valid = (train-iters / eval-interval + 1) x eval-iters x global batch;\n"
      "  test = eval-iters x global batch. A split with none asked is not built.\n");
}

static td_split parse_which(const char *v) {
  for (int s = 0; s < 3; s++)
    if (!strcmp(v, td_split_name((td_split)s)))
      return (td_split)s;
  td_fail("--which expects train, valid or test (got '%s')", v);
}

static int64_t parse_first(const char *v) {
  char *end;
  errno = 0;
  long long k = strtoll(v, &end, 10);
  if (errno || *end || end == v || k < 0)
    td_fail("--first expects a count >= 0 (got '%s')", v);
  return k;
}

/* --which / --first / --summary / --help come out of argv; the rest, for the
 * training flags parser, go to rest. Returns 1 when --help was asked for. */
static int take_own_flags(int argc, char **argv, ds_opts *d, char **rest, int *n_rest) {
  *d = (ds_opts){.which = TD_SPLIT_TRAIN, .first = -1};
  *n_rest = 0;
  for (int i = 0; i < argc; i++) {
    const char *v;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
      return 1;
    if (!strcmp(argv[i], "--summary"))
      d->first = -1;
    else if ((v = td_cmd_flag_value(argc, argv, &i, "--which", "dataset")))
      d->which = parse_which(v);
    else if ((v = td_cmd_flag_value(argc, argv, &i, "--first", "dataset")))
      d->first = parse_first(v);
    else
      rest[(*n_rest)++] = argv[i];
  }
  return 0;
}

/* What train requires and the data does not depend on. */
static void fill_placeholders(td_args *a) {
  int64_t *sizes[] = {&a->num_layers, &a->hidden_size, &a->num_attention_heads,
                      &a->micro_batch_size};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
    if (*sizes[i] == TD_UNSET)
      *sizes[i] = 1;
  if (a->max_position_embeddings == TD_UNSET)
    a->max_position_embeddings = a->seq_length;
  if (isnan(a->lr))
    a->lr = 0;
  a->tensor_model_parallel_size = a->pipeline_model_parallel_size = 1;
  if (a->tokenizer_type < 0 && !(a->vocab_file && a->merge_file) && a->vocab_size == TD_UNSET)
    a->tokenizer_type = TD_TOK_NULL, a->vocab_size = 1; /* the ids are only printed */
}

static void parse_flags(td_args *a, int argc, char **argv) {
  char err[1024];
  if (td_args_parse(a, argc, argv, err, sizeof err))
    td_fail("%s", err);
  if (a->mock_data)
    td_fail("--mock-data has no files to inspect; give --data-path");
  fill_placeholders(a);
  if (td_args_validate(a, 1, err, sizeof err))
    td_fail("%s", err);
  td_args_print_notes(a, stderr);
}

/* Megatron's get_train_valid_test_num_samples. */
static void samples_asked(const td_args *a, int64_t n[3]) {
  td_gpt_num_samples(a->train_iters, a->global_batch_size, a->eval_interval, a->eval_iters, n);
  if (a->train_samples != TD_UNSET)
    n[TD_SPLIT_TRAIN] = a->train_samples;
}

/* The data config of the flags, with samples asked of split `only` alone. */
static td_gpt_data_config data_config(const td_args *a, td_split only) {
  td_gpt_data_config c = {.data_path = a->data_path.v,
                          .n_data_path = a->data_path.n,
                          .split = a->split,
                          .seq_length = a->seq_length,
                          .seed = a->seed,
                          .cache_dir = a->data_cache_path};
  const td_strlist *per_split[3] = {&a->train_data_path, &a->valid_data_path, &a->test_data_path};
  samples_asked(a, c.num_samples);
  for (int s = 0; s < 3; s++) {
    c.split_data_path[s] = per_split[s]->v;
    c.n_split_data_path[s] = per_split[s]->n;
    if (s != (int)only)
      c.num_samples[s] = 0;
  }
  return c;
}

/* ------------------------------------------------------------------ --first */

static void print_sample(const int32_t *t, int64_t n, char *line) {
  size_t len = 0;
  line[len++] = '[';
  for (int64_t i = 0; i < n; i++)
    len += (size_t)sprintf(line + len, i ? ", %d" : "%d", t[i]);
  line[len++] = ']';
  line[len++] = '\n';
  if (fwrite(line, 1, len, stdout) != len)
    td_fail("writing to stdout: %s", strerror(errno));
}

static void print_first(const td_args *a, const ds_opts *d) {
  const char *name = td_split_name(d->which);
  td_gpt_data_config c = data_config(a, d->which);
  if (!c.num_samples[d->which])
    td_fail("no %s samples are asked with these flags (see trident dataset --help), so Megatron "
            "builds no %s split",
            name, name);
  char err[1024];
  td_gpt_datasets *ds = td_gpt_datasets_open(&c, err, sizeof err);
  if (!ds)
    td_fail("%s", err);
  const td_gpt_dataset *split = td_gpt_datasets_split(ds, d->which);
  if (!split)
    td_fail("the %s split is empty: check --split and the data paths", name);
  int64_t n = td_gpt_dataset_len(split), k = d->first < n ? d->first : n;
  if (d->first > n)
    fprintf(stderr, "trident: note: the %s split has %lld samples; printing them all\n", name,
            (long long)n);
  /* a sample's ids, and its line of up to 13 characters per id ("-2147483648, ") */
  uint64_t ids = (uint64_t)a->seq_length + 1, bytes = td_sat_mul(ids, sizeof(int32_t) + 13);
  char why[1024];
  if (td_memory_check(bytes, 1, "printing one sample of --seq-length + 1 tokens", NULL, why,
                      sizeof why))
    td_fail("%s", why);
  int32_t *tokens = td_malloc(sizeof *tokens * (size_t)ids);
  char *line = td_malloc((size_t)ids * 13 + 4);
  for (int64_t i = 0; i < k; i++) {
    td_gpt_dataset_sample(split, i, tokens);
    print_sample(tokens, a->seq_length + 1, line);
  }
  td_free(line), td_free(tokens);
  td_gpt_datasets_close(ds);
}

/* ------------------------------------------------------------------ --summary */

static void add_int(cJSON *o, const char *key, int64_t v) {
  cJSON_AddNumberToObject(o, key, (double)v);
}

/* The files behind one path list, each once (already in `files`: skipped). */
static void add_files(cJSON *files, const td_strlist *l) {
  td_blend b;
  char err[1024];
  if (!l->v)
    return;
  if (td_blend_parse(&b, l->v, l->n, err, sizeof err))
    td_fail("%s", err);
  for (int k = 0; k < b.n; k++) {
    if (cJSON_GetObjectItemCaseSensitive(files, b.prefixes[k]))
      continue;
    td_indexed_dataset ds;
    if (td_indexed_dataset_open(&ds, b.prefixes[k], err, sizeof err))
      td_fail("%s", err);
    cJSON *f = cJSON_AddObjectToObject(files, b.prefixes[k]);
    cJSON_AddStringToObject(f, "dtype", td_idx_dtype_name(ds.dtype));
    add_int(f, "documents", ds.n_document_indices - 1);
    add_int(f, "sequences", ds.n_sequences);
    add_int(f, "tokens", ds.n_tokens);
    td_indexed_dataset_close(&ds);
  }
  td_blend_free(&b);
}

static cJSON *part_json(const td_gpt_index *gi) {
  cJSON *p = cJSON_CreateObject();
  cJSON_AddStringToObject(p, "prefix", gi->p.data->prefix);
  cJSON *range = cJSON_AddArrayToObject(p, "sequences");
  cJSON_AddItemToArray(range, cJSON_CreateNumber((double)gi->p.doc_begin));
  cJSON_AddItemToArray(range, cJSON_CreateNumber((double)gi->p.doc_end));
  add_int(p, "samples_asked", gi->p.num_samples);
  add_int(p, "tokens_per_epoch", gi->tokens_per_epoch);
  add_int(p, "epochs", gi->num_epochs);
  cJSON_AddBoolToObject(p, "separate_final_epoch", gi->separate_final_epoch);
  add_int(p, "samples", gi->n_samples);
  cJSON_AddBoolToObject(p, "from_cache", gi->loaded_from_cache);
  return p;
}

/* One split, opened on its own so that a split that cannot be built shows its reason
 * while the others still show. */
static cJSON *split_json(const td_args *a, td_split s) {
  td_gpt_data_config c = data_config(a, s);
  cJSON *o = cJSON_CreateObject();
  add_int(o, "samples_asked", c.num_samples[s]);
  char err[1024];
  td_gpt_datasets *d = c.num_samples[s] ? td_gpt_datasets_open(&c, err, sizeof err) : NULL;
  const td_gpt_dataset *ds = d ? td_gpt_datasets_split(d, s) : NULL;
  if (c.num_samples[s] && !d)
    cJSON_AddStringToObject(o, "error", err);
  add_int(o, "samples", ds ? td_gpt_dataset_len(ds) : 0);
  cJSON *parts = cJSON_AddArrayToObject(o, "datasets");
  for (int k = 0; ds && k < td_gpt_dataset_n_parts(ds); k++)
    cJSON_AddItemToArray(parts, part_json(td_gpt_dataset_part(ds, k)));
  td_gpt_datasets_close(d);
  return o;
}

static void print_summary(const td_args *a) {
  cJSON *o = cJSON_CreateObject();
  add_int(o, "seq_length", a->seq_length);
  add_int(o, "seed", a->seed);
  if (a->split)
    cJSON_AddStringToObject(o, "split", a->split);
  add_int(o, "global_batch_size", a->global_batch_size);
  add_int(o, "train_iters", a->train_iters);
  cJSON *files = cJSON_AddObjectToObject(o, "files");
  const td_strlist *lists[] = {&a->data_path, &a->train_data_path, &a->valid_data_path,
                               &a->test_data_path};
  for (int i = 0; i < 4; i++)
    add_files(files, lists[i]);
  for (int s = 0; s < 3; s++)
    cJSON_AddItemToObject(o, td_split_name((td_split)s), split_json(a, (td_split)s));
  char *text = cJSON_Print(o);
  printf("%s\n", text);
  cJSON_free(text);
  cJSON_Delete(o);
}

int td_cmd_dataset(int argc, char **argv) {
  ds_opts d;
  char **rest = td_malloc(sizeof *rest * (size_t)(argc + 1));
  int n_rest;
  if (take_own_flags(argc, argv, &d, rest, &n_rest)) {
    usage(stdout);
    td_free(rest);
    return 0;
  }
  td_args a;
  parse_flags(&a, n_rest, rest);
  if (d.first >= 0)
    print_first(&a, &d);
  else
    print_summary(&a);
  if (fflush(stdout))
    td_fail("writing to stdout: %s", strerror(errno));
  td_args_free(&a);
  td_free(rest);
  return 0;
}
