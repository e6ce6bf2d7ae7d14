/* trident tokenize: the GPT-2 BPE ids of each JSON line's text, one JSON array
 * per input line on stdout, for scripting and for checks against other
 * tokenizers; --decode turns such arrays back into {"text": ...} lines.
 * A bad input line (malformed JSON, invalid UTF-8, no text) stops the command
 * with its line number and byte offset, exit code 1. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "cmd_flags.h"
#include "commands.h"
#include "data/bpe_tokenizer.h"
#include "data/jsonl.h"

typedef struct {
  const char *vocab, *merges, *input, *key;
  int decode;
} tok_args;

/* Output text, flushed to stdout as it grows. */
typedef struct {
  char *p;
  size_t n, cap;
} out_buf;

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: trident tokenize --vocab-file V --merge-file M --input F.jsonl [--json-keys KEY]\n"
      "                        [--decode]\n"
      "  Prints, for each line of F.jsonl (one JSON object per line), the GPT-2 BPE token ids\n"
      "  of its KEY string as one JSON array per line, e.g. [15496, 995]. No end-of-document\n"
      "  id is added. With --decode, F holds such arrays and each becomes {\"KEY\": \"...\"}.\n"
      "  --vocab-file V   GPT-2 vocab.json (e.g. data/gpt2/vocab.json)\n"
      "  --merge-file M   GPT-2 merges.txt (e.g. data/gpt2/merges.txt)\n"
      "  --input F        input file, or - for stdin\n"
      "  --json-keys KEY  the text's key (default: text)\n"
      "  --decode         token ids in, text out\n");
}

/* Returns 1 when --help was asked for. */
static int parse_args(tok_args *a, int argc, char **argv) {
  *a = (tok_args){.key = "text"};
  for (int i = 1; i < argc; i++) {
    const char *v;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 1;
    } else if (!strcmp(argv[i], "--decode")) {
      a->decode = 1;
    } else if ((v = td_cmd_flag_value(argc, argv, &i, "--vocab-file", "tokenize"))) {
      a->vocab = v;
    } else if ((v = td_cmd_flag_value(argc, argv, &i, "--merge-file", "tokenize"))) {
      a->merges = v;
    } else if ((v = td_cmd_flag_value(argc, argv, &i, "--input", "tokenize"))) {
      a->input = v;
    } else if ((v = td_cmd_flag_value(argc, argv, &i, "--json-keys", "tokenize"))) {
      a->key = v;
      if (i + 1 < argc && strncmp(argv[i + 1], "--", 2))
        td_fail("trident tokenize takes one --json-keys key (got '%s' and '%s')", v, argv[i + 1]);
    } else {
      td_fail("unknown argument '%s' for 'trident tokenize' (see --help)", argv[i]);
    }
  }
  if (!a->vocab || !a->merges || !a->input)
    td_fail("trident tokenize needs --vocab-file, --merge-file and --input (see --help)");
  return 0;
}

/* ------------------------------------------------------------------ output */

static void out_reserve(out_buf *o, size_t more) {
  if (o->n + more <= o->cap) return;
  size_t cap = o->cap ? o->cap : 1 << 16;
  while (cap < o->n + more) cap *= 2;
  char *p = td_malloc(cap);
  if (o->n) memcpy(p, o->p, o->n);
  td_free(o->p);
  o->p = p, o->cap = cap;
}

static void out_bytes(out_buf *o, const char *s, size_t n) {
  out_reserve(o, n);
  memcpy(o->p + o->n, s, n);
  o->n += n;
}

static void out_str(out_buf *o, const char *s) { out_bytes(o, s, strlen(s)); }

static void out_flush(out_buf *o) {
  if (o->n && fwrite(o->p, 1, o->n, stdout) != o->n)
    td_fail("writing to stdout: %s", strerror(errno));
  o->n = 0;
}

/* A JSON string of the bytes s[0, n) as json.dumps(ensure_ascii=False) writes
 * it; bytes that are not UTF-8 become U+FFFD, one per maximal invalid subpart,
 * as Python's errors='replace' decoding (Megatron's detokenize) gives them. */
static void out_json_string(out_buf *o, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  out_reserve(o, 2);
  o->p[o->n++] = '"';
  for (size_t i = 0; i < n;) {
    unsigned char c = (unsigned char)s[i];
    int k = td_utf8_char_len(s + i, n - i);
    const char *esc = c == '"'    ? "\\\""
                      : c == '\\' ? "\\\\"
                      : c == '\n' ? "\\n"
                      : c == '\r' ? "\\r"
                      : c == '\t' ? "\\t"
                      : c == '\b' ? "\\b"
                      : c == '\f' ? "\\f"
                                  : NULL;
    if (esc) {
      out_str(o, esc);
    } else if (c < 0x20) {
      char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
      out_bytes(o, u, 6);
    } else if (k < 0) {
      out_str(o, "\xEF\xBF\xBD");
    } else {
      out_bytes(o, s + i, (size_t)k);
    }
    i += (size_t)(k < 0 ? -k : k);
  }
  out_str(o, "\"");
}

static void out_ids(out_buf *o, const int32_t *ids, size_t n) {
  out_reserve(o, 2 + n * 13);
  o->p[o->n++] = '[';
  for (size_t i = 0; i < n; i++) o->n += (size_t)sprintf(o->p + o->n, i ? ", %d" : "%d", ids[i]);
  o->p[o->n++] = ']';
  o->p[o->n++] = '\n';
}

/* ------------------------------------------------------------------ the command */

typedef struct {
  const tok_args *a;
  const char *name; /* input name for messages */
  char *line;       /* current line, newline removed, NUL-terminated */
  size_t len, ln;   /* its length and 1-based number */
  char *text;
  size_t text_cap;
  int32_t *ids;
  size_t n_ids, ids_cap;
  out_buf out;
} tok_ctx;

/* A --decode line: a JSON array of ids, read with cJSON. */
static cJSON *parse_ids_line(const tok_ctx *c) {
  const char *end = NULL, *nul = memchr(c->line, 0, c->len);
  if (nul) /* never valid in JSON; cJSON would take it for white space */
    td_fail("%s line %zu: NUL byte at byte offset %zu", c->name, c->ln, (size_t)(nul - c->line));
  /* length + 1 with require_null_terminated: nothing may follow the value */
  cJSON *root = cJSON_ParseWithLengthOpts(c->line, c->len + 1, &end, 1);
  if (!root) {
    const char *at = cJSON_GetErrorPtr();
    td_fail("%s line %zu: malformed JSON at byte offset %zu", c->name, c->ln,
            at ? (size_t)(at - c->line) : 0);
  }
  return root;
}

/* The key's text of the current line into c->text; returns its length. */
static size_t line_text(tok_ctx *c) {
  size_t n;
  char err[512];
  if (td_jsonl_get_string(c->line, c->len, c->a->key, &c->text, &c->text_cap, &n, err, sizeof err))
    td_fail("%s line %zu: %s", c->name, c->ln, err);
  return n;
}

static void encode_line(tok_ctx *c, td_bpe_worker *w) {
  size_t n = line_text(c);
  char err[256];
  c->n_ids = 0;
  if (td_bpe_encode(w, c->text, n, &c->ids, &c->n_ids, &c->ids_cap, err, sizeof err))
    td_fail("%s line %zu: %s", c->name, c->ln, err);
  out_ids(&c->out, c->ids, c->n_ids);
}

static void decode_line(tok_ctx *c, const td_bpe *bpe) {
  cJSON *root = parse_ids_line(c);
  if (!cJSON_IsArray(root))
    td_fail("%s line %zu: expected a JSON array of token ids", c->name, c->ln);
  c->n_ids = 0;
  for (cJSON *it = root->child; it; it = it->next, c->n_ids++) {
    double v = it->valuedouble;
    if (!cJSON_IsNumber(it) || !(v >= -2147483648.0 && v <= 2147483647.0) ||
        v != (double)(int32_t)v)
      td_fail("%s line %zu: element %zu is not an integer token id", c->name, c->ln, c->n_ids);
    if (c->n_ids == c->ids_cap) {
      int32_t *p = td_malloc((c->ids_cap = c->ids_cap ? 2 * c->ids_cap : 1024) * sizeof *p);
      if (c->n_ids) memcpy(p, c->ids, c->n_ids * sizeof *p);
      td_free(c->ids);
      c->ids = p;
    }
    c->ids[c->n_ids] = (int32_t)v;
  }
  cJSON_Delete(root);
  char err[256], *text;
  size_t n;
  if (td_bpe_decode(bpe, c->ids, c->n_ids, &text, &n, err, sizeof err))
    td_fail("%s line %zu: %s", c->name, c->ln, err);
  out_str(&c->out, "{");
  out_json_string(&c->out, c->a->key, strlen(c->a->key));
  out_str(&c->out, ": ");
  out_json_string(&c->out, text, n);
  out_str(&c->out, "}\n");
  td_free(text);
}

static void run(tok_ctx *c, FILE *in, const td_bpe *bpe) {
  td_bpe_worker *w = c->a->decode ? NULL : td_bpe_worker_new(bpe);
  size_t line_cap = 0;
  ssize_t got;
  while ((got = getline(&c->line, &line_cap, in)) >= 0) {
    c->len = (size_t)got, c->ln++;
    if (c->len && c->line[c->len - 1] == '\n') c->line[--c->len] = 0;
    if (c->a->decode)
      decode_line(c, bpe);
    else
      encode_line(c, w);
    if (c->out.n >= 1 << 16) out_flush(&c->out);
  }
  if (ferror(in)) td_fail("reading %s: %s", c->name, strerror(errno));
  out_flush(&c->out);
  free(c->line); /* getline's buffer comes from malloc */
  td_bpe_worker_free(w);
}

int td_cmd_tokenize(int argc, char **argv) {
  tok_args a;
  if (parse_args(&a, argc, argv)) return 0;
  char err[512];
  td_bpe *bpe = td_bpe_load(a.vocab, a.merges, err, sizeof err);
  if (!bpe) td_fail("%s", err);
  int from_stdin = !strcmp(a.input, "-");
  FILE *in = from_stdin ? stdin : fopen(a.input, "rb");
  if (!in) td_fail("cannot open --input %s: %s", a.input, strerror(errno));
  tok_ctx c = {.a = &a, .name = from_stdin ? "stdin" : a.input};
  run(&c, in, bpe);
  if (!from_stdin) fclose(in);
  if (fflush(stdout)) td_fail("writing to stdout: %s", strerror(errno));
  td_free(c.text), td_free(c.ids), td_free(c.out.p);
  td_bpe_free(bpe);
  return 0;
}
