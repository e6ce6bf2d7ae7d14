/* trident bench tokenizer: GPT-2 BPE encoding speed on one core, in MB/s of
 * UTF-8 text and tokens/s, over a JSON-lines corpus (default: the bundled KJV).
 * "cold" is one pass with an empty piece cache, as a preprocess worker starts
 * on new data; "warm" is the median of further passes with the cache kept. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/files.h"
#include "base/mem.h"
#include "data/bpe_tokenizer.h"

typedef struct {
  const char *vocab, *merges, *input, *key;
  double min_seconds;
  int json;
} bench_args;

typedef struct {
  char **text;
  size_t *len, n_docs, bytes;
} corpus;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: trident bench tokenizer [--vocab-file V] [--merge-file M] [--input F.jsonl]\n"
      "                               [--json-keys KEY] [--seconds S] [--json]\n"
      "  Single-threaded GPT-2 BPE encode speed (MB/s of text, tokens/s), cold and warm cache.\n"
      "  --vocab-file V   default data/gpt2/vocab.json\n"
      "  --merge-file M   default data/gpt2/merges.txt\n"
      "  --input F        JSON lines with the texts (default data/corpus/kjv.jsonl)\n"
      "  --json-keys KEY  the text's key (default text)\n"
      "  --seconds S      minimum time of the warm passes (default 1)\n"
      "  --json           one JSON object per line\n");
}

static void parse(bench_args *a, int argc, char **argv) {
  *a = (bench_args){
      "data/gpt2/vocab.json", "data/gpt2/merges.txt", "data/corpus/kjv.jsonl", "text", 1.0, 0};
  for (int i = 1; i < argc; i++) {
    const char *f = argv[i];
    int has_value = i + 1 < argc;
    if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
      usage(stdout);
      exit(0);
    } else if (!strcmp(f, "--json")) {
      a->json = 1;
    } else if (has_value && !strcmp(f, "--vocab-file")) {
      a->vocab = argv[++i];
    } else if (has_value && !strcmp(f, "--merge-file")) {
      a->merges = argv[++i];
    } else if (has_value && !strcmp(f, "--input")) {
      a->input = argv[++i];
    } else if (has_value && !strcmp(f, "--json-keys")) {
      a->key = argv[++i];
    } else if (has_value && !strcmp(f, "--seconds")) {
      char *end;
      a->min_seconds = strtod(argv[++i], &end);
      if (*end || !(a->min_seconds >= 0))
        td_fail("--seconds '%s': expected a number >= 0", argv[i]);
    } else {
      td_fail("unknown flag '%s' for 'trident bench tokenizer' (see --help)", f);
    }
  }
}

/* Each line's text (cJSON: fine for measuring, a text with \u0000 is cut there). */
static corpus load_corpus(const bench_args *a) {
  char err[512];
  size_t len;
  char *file = td_read_file(a->input, &len, err, sizeof err);
  if (!file) td_fail("%s", err);
  corpus c = {0};
  size_t cap = 0, ln = 0;
  for (char *p = file, *nl; p < file + len; p = nl + 1) {
    nl = memchr(p, '\n', (size_t)(file + len - p));
    if (!nl) nl = file + len;
    *nl = 0, ln++;
    cJSON *doc = cJSON_Parse(p);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(doc, a->key);
    if (!cJSON_IsString(t))
      td_fail("%s line %zu: not a JSON object with a string \"%s\"", a->input, ln, a->key);
    if (c.n_docs == cap) {
      cap = cap ? 2 * cap : 1024;
      char **text = td_malloc(cap * sizeof *text);
      size_t *lens = td_malloc(cap * sizeof *lens);
      if (c.n_docs)
        memcpy(text, c.text, c.n_docs * sizeof *text), memcpy(lens, c.len, c.n_docs * sizeof *lens);
      td_free(c.text), td_free(c.len);
      c.text = text, c.len = lens;
    }
    c.text[c.n_docs] = td_strdup(t->valuestring);
    c.len[c.n_docs] = strlen(t->valuestring);
    c.bytes += c.len[c.n_docs++];
    cJSON_Delete(doc);
  }
  td_free(file);
  return c;
}

/* Seconds to encode every document once; *tokens gets the count. */
static double encode_pass(td_bpe_worker *w, const corpus *c, int32_t **ids, size_t *cap,
                          size_t *tokens) {
  char err[256];
  double t0 = td_now_seconds();
  *tokens = 0;
  for (size_t d = 0; d < c->n_docs; d++) {
    size_t n = 0;
    if (td_bpe_encode(w, c->text[d], c->len[d], ids, &n, cap, err, sizeof err))
      td_fail("document %zu: %s", d + 1, err);
    *tokens += n;
  }
  return td_now_seconds() - t0;
}

static void report(const bench_args *a, const corpus *c, const char *cache, double seconds,
                   size_t tokens) {
  double mbps = c->bytes / seconds / 1e6, mtps = tokens / seconds / 1e6;
  if (a->json)
    printf(
        "{\"benchmark\": \"tokenizer\", \"cache\": \"%s\", \"bytes\": %zu, \"tokens\": %zu, "
        "\"seconds\": %.4f, \"mb_per_s\": %.2f, \"mtokens_per_s\": %.3f}\n",
        cache, c->bytes, tokens, seconds, mbps, mtps);
  else
    printf("tokenizer  %s cache  %8.2f MB/s  %7.3f M tokens/s  (%.3f s)\n", cache, mbps, mtps,
           seconds);
}

int td_bench_tokenizer(int argc, char **argv) {
  bench_args a;
  parse(&a, argc, argv);
  char err[512];
  td_bpe *bpe = td_bpe_load(a.vocab, a.merges, err, sizeof err);
  if (!bpe) td_fail("%s", err);
  corpus c = load_corpus(&a);
  if (!a.json)
    printf("trident bench tokenizer: %s, %zu documents, %.2f MB of text, 1 thread\n", a.input,
           c.n_docs, c.bytes / 1e6);
  td_bpe_worker *w = td_bpe_worker_new(bpe);
  int32_t *ids = NULL;
  size_t cap = 0, tokens;
  double cold = encode_pass(w, &c, &ids, &cap, &tokens);
  report(&a, &c, "cold", cold, tokens);
  double t[64], start = td_now_seconds();
  int n = 0;
  while (n < 64 && (n < 3 || td_now_seconds() - start < a.min_seconds))
    t[n++] = encode_pass(w, &c, &ids, &cap, &tokens);
  qsort(t, (size_t)n, sizeof *t, cmp_double);
  report(&a, &c, "warm", t[n / 2], tokens);
  for (size_t d = 0; d < c.n_docs; d++) td_free(c.text[d]);
  td_free(c.text), td_free(c.len), td_free(ids);
  td_bpe_worker_free(w);
  td_bpe_free(bpe);
  return 0;
}
