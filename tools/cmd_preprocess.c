/* trident preprocess: Megatron's tools/preprocess_data.py under its flags, writing
 * PREFIX_KEY_document.bin / .idx byte for byte as Megatron does (src/data/preprocess.h),
 * with --partitions N as Megatron splits, processes and merges (src/data/partition.h).
 * Flags of preprocess_data.py that would change the output and are not implemented
 * (--split-sentences, other tokenizers) are refused; flags that
 * change nothing for GPT2BPETokenizer without --split-sentences are accepted with a
 * note on stderr. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "cmd_flags.h"
#include "commands.h"
#include "data/bpe_tokenizer.h"
#include "data/indexed_dataset.h"
#include "data/partition.h"
#include "data/preprocess.h"

typedef struct {
  td_preprocess_opts o;
  const char *vocab, *merges, *tokenizer;
  const char **keys;
  int n_keys;
  int partitions;      /* --partitions: input partition files, 1: none */
  int keep_sequential; /* --keep-sequential-samples: partitions of consecutive lines */
} pre_args;

/* preprocess_data.py flags that change nothing here: name, value count (0, 1, or -1
 * for one or more words), and why. */
static const struct {
  const char *name;
  int values;
  const char *why;
} k_inert[] = {
    {"--keep-newlines", 0, "only matters with --split-sentences"},
    {"--lang", 1, "NLTK's sentence-splitter language: only matters with --split-sentences"},
    {"--vocab-extra-ids", 1, "preprocess_data.py resets it to 0"},
    {"--vocab-size", 1, "NullTokenizer's vocabulary; GPT2BPETokenizer's is --vocab-file"},
    {"--tokenizer-model", 1, "for SentencePiece, Hugging Face and tiktoken tokenizers"},
    {"--tiktoken-pattern", 1, "for the tiktoken tokenizer"},
    {"--tiktoken-num-special-tokens", 1, "for the tiktoken tokenizer"},
    {"--tiktoken-special-tokens", -1, "for the tiktoken tokenizer"},
};
#define N_INERT (sizeof k_inert / sizeof *k_inert)

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: trident preprocess --input F.jsonl --output-prefix P --vocab-file V --merge-file M\n"
      "                          [--json-keys K ...] [--append-eod] [--workers N]\n"
      "                          [--log-interval N] [--skip-bad-lines]\n"
      "                          [--partitions N [--keep-sequential-samples]]\n"
      "  Megatron's tools/preprocess_data.py: every line of F.jsonl is one JSON document;\n"
      "  the text of each key K becomes one sequence of GPT-2 BPE ids in P_K_document.bin\n"
      "  and P_K_document.idx (MMapIndexedDataset, the same bytes as Megatron's). Train on\n"
      "  it with trident train --data-path P_text_document.\n"
      "  --input F             JSON lines, one object per line (- for stdin)\n"
      "  --output-prefix P     output path prefix\n"
      "  --json-keys K ...     keys to tokenize, one output per key (default: text)\n"
      "  --tokenizer-type T    GPT2BPETokenizer (the only one implemented; the default)\n"
      "  --vocab-file V        GPT-2 vocab.json (e.g. data/gpt2/vocab.json)\n"
      "  --merge-file M        GPT-2 merges.txt (e.g. data/gpt2/merges.txt)\n"
      "  --append-eod          end every non-empty document with <|endoftext|>\n"
      "  --workers N           tokenizing threads (default: 1); the output is the same for\n"
      "                        any N\n"
      "  --log-interval N      progress on stderr every N documents (default: 1000; 0: none)\n"
      "  --skip-bad-lines      skip lines that are not a JSON object with string keys K (or\n"
      "                        not UTF-8) and count them, instead of stopping at the first\n"
      "                        (trident's own flag; Megatron stops with a traceback)\n"
      "  --partitions N        split F (a file or a glob pattern, F = STEM.EXT) into N files\n"
      "                        STEM_i.EXT by line, round-robin, write each one's P_i_K_document\n"
      "                        .bin / .idx, then merge them in order into P_K_document (as\n"
      "                        Megatron; existing partition files are reused; --workers\n"
      "                        must be a multiple of N). --workers alone is faster: the\n"
      "                        same bytes for one partition whatever the workers\n"
      "  --keep-sequential-samples  partitions of consecutive lines (ceil(lines / N) each),\n"
      "                        so the merged dataset keeps the input's order\n"
      "  --split-sentences     not implemented (needs NLTK's punkt splitter): refused\n"
      "  accepted and ignored, as they change nothing here: --keep-newlines, --lang,\n"
      "  --vocab-extra-ids, --vocab-size, --tokenizer-model,\n"
      "  --tiktoken-pattern, --tiktoken-num-special-tokens, --tiktoken-special-tokens\n");
}

static int is_flag(const char *s) { return !strncmp(s, "--", 2); }

static int64_t int_value(const char *name, const char *v, int64_t lo) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || end == v || *end || x < lo)
    td_fail("%s expects an integer >= %lld (got '%s')", name, (long long)lo, v);
  return x;
}

/* --json-keys K ...: every following word that is not a flag. */
static void take_keys(pre_args *a, int argc, char **argv, int *i) {
  const char *eq = strchr(argv[*i], '=');
  a->n_keys = 0;
  if (eq)
    a->keys[a->n_keys++] = eq + 1;
  while (*i + 1 < argc && !is_flag(argv[*i + 1]))
    a->keys[a->n_keys++] = argv[++*i];
  if (!a->n_keys)
    td_fail("--json-keys needs at least one key");
}

/* An accepted-but-inert flag at argv[*i]: note it and skip its values. */
static int take_inert(int argc, char **argv, int *i) {
  for (size_t k = 0; k < N_INERT; k++) {
    size_t n = strlen(k_inert[k].name);
    const char *a = argv[*i];
    if (strncmp(a, k_inert[k].name, n) || (a[n] && a[n] != '='))
      continue;
    int values = a[n] == '=' ? 0 : k_inert[k].values;
    for (int v = 0; v != values && *i + 1 < argc && !is_flag(argv[*i + 1]); v++)
      ++*i;
    fprintf(stderr, "trident: note: %s: %s; ignored\n", k_inert[k].name, k_inert[k].why);
    return 1;
  }
  return 0;
}

static void refuse(const char *flag) {
  if (!strcmp(flag, "--split-sentences"))
    td_fail("--split-sentences is not implemented in trident preprocess (Megatron splits "
            "with NLTK's punkt model); drop it to write one sequence per document");
  td_fail("unknown argument '%s' for 'trident preprocess' (see --help)", flag);
}

/* A flag with a value at argv[*i]; returns 0 if argv[*i] is none of them. */
static int take_value_flag(pre_args *a, int argc, char **argv, int *i) {
  const char *v;
  if ((v = td_cmd_flag_value(argc, argv, i, "--input", "preprocess")))
    a->o.input = v;
  else if ((v = td_cmd_flag_value(argc, argv, i, "--output-prefix", "preprocess")))
    a->o.output_prefix = v;
  else if ((v = td_cmd_flag_value(argc, argv, i, "--vocab-file", "preprocess")))
    a->vocab = v;
  else if ((v = td_cmd_flag_value(argc, argv, i, "--merge-file", "preprocess")))
    a->merges = v;
  else if ((v = td_cmd_flag_value(argc, argv, i, "--tokenizer-type", "preprocess")))
    a->tokenizer = v;
  else if ((v = td_cmd_flag_value(argc, argv, i, "--workers", "preprocess")))
    a->o.workers = (int)int_value("--workers", v, 1);
  else if ((v = td_cmd_flag_value(argc, argv, i, "--log-interval", "preprocess")))
    a->o.log_interval = int_value("--log-interval", v, 0);
  else if ((v = td_cmd_flag_value(argc, argv, i, "--partitions", "preprocess")))
    a->partitions = (int)int_value("--partitions", v, 1);
  return v != NULL;
}

/* One flag at argv[*i]; returns 1 when --help was asked for. */
static int take_flag(pre_args *a, int argc, char **argv, int *i) {
  const char *f = argv[*i];
  if (!strcmp(f, "--help") || !strcmp(f, "-h"))
    return usage(stdout), 1;
  if (!strcmp(f, "--append-eod"))
    a->o.append_eod = 1;
  else if (!strcmp(f, "--keep-sequential-samples"))
    a->keep_sequential = 1;
  else if (!strcmp(f, "--skip-bad-lines"))
    a->o.skip_bad_lines = 1;
  else if (!strncmp(f, "--json-keys", 11) && (!f[11] || f[11] == '='))
    take_keys(a, argc, argv, i);
  else if (!take_value_flag(a, argc, argv, i) && !take_inert(argc, argv, i))
    refuse(f);
  return 0;
}

static void check_args(const pre_args *a) {
  if (!a->o.input || !a->o.output_prefix)
    td_fail("trident preprocess needs --input and --output-prefix (see --help)");
  if (a->tokenizer && strcmp(a->tokenizer, "GPT2BPETokenizer"))
    td_fail("--tokenizer-type %s is not implemented: trident preprocess has GPT2BPETokenizer",
            a->tokenizer);
  if (!a->vocab || !a->merges)
    td_fail("GPT2BPETokenizer needs --vocab-file and --merge-file (e.g. data/gpt2/vocab.json "
            "and data/gpt2/merges.txt)");
  if (a->partitions > 1 && !strcmp(a->o.input, "-"))
    td_fail("--partitions %d splits --input into files: it needs a file or a glob pattern, "
            "not stdin", a->partitions);
  if (a->o.workers % a->partitions)
    td_fail("--workers %d is not a multiple of --partitions %d (Megatron gives each partition "
            "workers / partitions processes)", a->o.workers, a->partitions);
}

/* Returns 1 when --help was asked for. */
static int parse_args(pre_args *a, int argc, char **argv) {
  static const char *default_keys[] = {"text"};
  a->keys = td_malloc(sizeof *a->keys * (size_t)argc);
  a->o = (td_preprocess_opts){
      .json_keys = default_keys, .n_keys = 1, .workers = 1, .log_interval = 1000, .log = stderr};
  a->partitions = 1;
  for (int i = 1; i < argc; i++)
    if (take_flag(a, argc, argv, &i))
      return 1;
  if (a->n_keys)
    a->o.json_keys = a->keys, a->o.n_keys = a->n_keys;
  check_args(a);
  return 0;
}

static void report(const pre_args *a, const td_preprocess_stats *st) {
  double mb = (double)st->bytes / 1024 / 1024;
  printf("Done: %lld documents, %lld tokens, %.2f MB in %.3f s (%.2f MB/s, %.0f docs/s) with %d "
         "worker%s.\n",
         (long long)st->documents, (long long)st->tokens, mb, st->seconds,
         st->seconds > 0 ? mb / st->seconds : 0.0,
         st->seconds > 0 ? (double)st->documents / st->seconds : 0.0, a->o.workers,
         a->o.workers == 1 ? "" : "s");
  if (st->bad_lines)
    printf("Skipped %lld bad line%s (--skip-bad-lines).\n", (long long)st->bad_lines,
           st->bad_lines == 1 ? "" : "s");
  for (int k = 0; k < a->o.n_keys; k++) {
    char *name = td_preprocess_output_name(a->o.output_prefix, a->o.json_keys[k]);
    printf("Wrote %s.bin and %s.idx\n", name, name);
    td_free(name);
  }
}

/* "PREFIX_i": partition i's output prefix (Megatron's name; td_malloc'ed). */
static char *partition_prefix(const char *prefix, int i) {
  size_t n = strlen(prefix) + 16;
  char *s = td_malloc(n);
  snprintf(s, n, "%s_%d", prefix, i);
  return s;
}

/* Merge the partitions' datasets of each key, in partition order. */
static void merge_partitions(const pre_args *a, td_idx_dtype dtype) {
  char err[1024];
  for (int k = 0; k < a->o.n_keys; k++) {
    char *out = td_preprocess_output_name(a->o.output_prefix, a->o.json_keys[k]);
    td_idx_builder *b = td_idx_builder_open(out, dtype, err, sizeof err);
    if (!b) td_fail("%s", err);
    for (int i = 0; i < a->partitions; i++) {
      char *pp = partition_prefix(a->o.output_prefix, i);
      char *part = td_preprocess_output_name(pp, a->o.json_keys[k]);
      int rc = td_idx_builder_add_index(b, part, err, sizeof err);
      td_free(part), td_free(pp);
      if (rc) {
        td_idx_builder_abort(b);
        td_fail("merging the partitions into %s: %s", out, err);
      }
    }
    if (td_idx_builder_finalize(b, err, sizeof err)) td_fail("%s", err);
    td_free(out);
  }
}

/* --partitions N > 1: split, preprocess each partition, merge (data/partition.h). */
static void run_partitions(pre_args *a, td_preprocess_stats *st) {
  char err[1024];
  int n_inputs, reused;
  char **inputs = td_partition_inputs(a->o.input, &n_inputs, err, sizeof err);
  if (!inputs) td_fail("%s", err);
  if (td_partition_split(a->o.input, inputs, n_inputs, a->partitions, a->keep_sequential,
                         &reused, err, sizeof err))
    td_fail("%s", err);
  td_partition_free_names(inputs, n_inputs);
  char *first = td_partition_file_name(a->o.input, 0);
  if (reused)
    fprintf(stderr, "trident: note: the %d partition files %s, ... exist: using them as they "
            "are (as Megatron does; delete them to split --input again)\n", a->partitions, first);
  td_free(first);
  memset(st, 0, sizeof *st);
  for (int i = 0; i < a->partitions; i++) {
    td_preprocess_opts o = a->o;
    char *in = td_partition_file_name(a->o.input, i), *out = partition_prefix(a->o.output_prefix, i);
    o.input = in, o.output_prefix = out;
    td_preprocess_stats p;
    if (td_preprocess(&o, &p, err, sizeof err)) td_fail("%s", err);
    st->documents += p.documents, st->bad_lines += p.bad_lines, st->tokens += p.tokens;
    st->bytes += p.bytes, st->seconds += p.seconds;
    td_free(in), td_free(out);
  }
  merge_partitions(a, td_idx_dtype_for_vocab(td_bpe_vocab_size(a->o.bpe)));
}

int td_cmd_preprocess(int argc, char **argv) {
  pre_args a = {0};
  if (parse_args(&a, argc, argv))
    return td_free(a.keys), 0;
  char err[1024];
  td_bpe *bpe = td_bpe_load(a.vocab, a.merges, err, sizeof err);
  if (!bpe)
    td_fail("%s", err);
  a.o.bpe = bpe;
  td_preprocess_stats st;
  if (a.partitions > 1)
    run_partitions(&a, &st);
  else if (td_preprocess(&a.o, &st, err, sizeof err))
    td_fail("%s", err);
  report(&a, &st);
  if (fflush(stdout))
    td_fail("writing to stdout: %s", strerror(errno));
  td_bpe_free(bpe);
  td_free(a.keys);
  return 0;
}
