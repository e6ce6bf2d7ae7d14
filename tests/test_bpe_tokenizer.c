/* GPT-2 BPE against references: the shared gpt2_cases.jsonl (tricky strings,
 * ids from OpenAI's algorithm with Python's regex module), the bundled KJV corpus
 * (its README's token counts, every chapter's round trip, the same ids from
 * several threads), invalid UTF-8 refused with its byte offset, long pieces, the
 * piece cache emptied and refilled, and damaged vocab / merges files refused. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/files.h"
#include "base/mem.h"
#include "check.h"
#include "data/bpe_tokenizer.h"

#define GPT2_DIR TD_SOURCE_DIR "/data/gpt2"
#define CASES_PATH TD_SOURCE_DIR "/tests/data/tokenizer/gpt2_cases.jsonl"
#define KJV_PATH TD_SOURCE_DIR "/data/corpus/kjv.jsonl"

static td_bpe *g_bpe;
static char g_dir[256];

typedef struct {
  int32_t *p;
  size_t n, cap;
} id_vec;

/* Encode s, expecting success. */
static void encode(td_bpe_worker *w, const char *s, size_t len, id_vec *v) {
  char err[256];
  v->n = 0;
  if (td_bpe_encode(w, s, len, &v->p, &v->n, &v->cap, err, sizeof err))
    CHECK(0, "encode failed: %s", err);
}

/* decode(ids) == s[0, len)? */
static int round_trips(const int32_t *ids, size_t n, const char *s, size_t len) {
  char err[256], *out;
  size_t out_len;
  if (td_bpe_decode(g_bpe, ids, n, &out, &out_len, err, sizeof err)) return 0;
  int ok = out_len == len && !memcmp(out, s, len) && out[len] == 0;
  td_free(out);
  return ok;
}

static int same_ids(const id_vec *v, const int32_t *ids, size_t n) {
  return v->n == n && !memcmp(v->p, ids, n * sizeof *ids);
}

/* ------------------------------------------------------------------ reference cases */

/* The case's expected ids; its text is decode(ids), which must be the case's
 * text (cJSON cuts a string at \u0000, so such a text is compared up to there;
 * tests/cli_tokenize.sh checks those cases whole). */
static int check_case(td_bpe_worker *w, const cJSON *c, id_vec *v) {
  const cJSON *text = cJSON_GetObjectItemCaseSensitive(c, "text");
  const cJSON *ids = cJSON_GetObjectItemCaseSensitive(c, "ids");
  if (!cJSON_IsString(text) || !cJSON_IsArray(ids)) return 0;
  size_t n = (size_t)cJSON_GetArraySize(ids), k = 0, len;
  int32_t *want = td_malloc((n + 1) * sizeof *want);
  for (const cJSON *it = ids->child; it; it = it->next) want[k++] = (int32_t)it->valuedouble;
  char err[256], *s;
  int ok = td_bpe_decode(g_bpe, want, n, &s, &len, err, sizeof err) == 0;
  if (ok) {
    ok = strlen(s) == strlen(text->valuestring) && !strcmp(s, text->valuestring);
    encode(w, s, len, v);
    ok = ok && same_ids(v, want, n) && round_trips(v->p, v->n, s, len);
    td_free(s);
  }
  td_free(want);
  return ok;
}

static void test_reference_cases(void) {
  if (!td_path_exists(CASES_PATH)) {
    CHECK(0, "fixture %s is missing", CASES_PATH);
    return;
  }
  char err[256];
  size_t len;
  char *file = td_read_file(CASES_PATH, &len, err, sizeof err);
  td_bpe_worker *w = td_bpe_worker_new(g_bpe);
  id_vec v = {0};
  int n = 0, bad = 0;
  for (char *line = strtok(file, "\n"); line; line = strtok(NULL, "\n"), n++) {
    cJSON *c = cJSON_Parse(line);
    if (!check_case(w, c, &v) && ++bad <= 5) printf("  case %d wrong: %.100s\n", n + 1, line);
    cJSON_Delete(c);
  }
  CHECK(n > 200 && bad == 0, "%d reference cases: ids equal GPT-2's and decode back (%d wrong)", n,
        bad);
  td_free(v.p);
  td_free(file);
  td_bpe_worker_free(w);
}

/* Strings whose pieces depend on the exact classes: U+180E is not white space
 * (PCRE2's own \s says it is), and U+0085 is. Ids from encoder.py with the
 * `regex` module. */
static void test_class_edges(void) {
  static const struct {
    const char *text;
    int32_t ids[8];
    size_t n;
  } cases[] = {
      {"a \xE1\xA0\x8E"
       "b",
       {64, 28053, 254, 236, 65},
       5},
      {"x \xC2\x85\xC2\x85y", {87, 1587, 227, 126, 227, 88}, 6},
  };
  td_bpe_worker *w = td_bpe_worker_new(g_bpe);
  id_vec v = {0};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    encode(w, cases[i].text, strlen(cases[i].text), &v);
    CHECK(same_ids(&v, cases[i].ids, cases[i].n), "white-space class edge case %zu", i);
  }
  td_free(v.p);
  td_bpe_worker_free(w);
}

/* ------------------------------------------------------------------ KJV corpus */

typedef struct {
  char **text;
  size_t *len, n;
} corpus;

static corpus load_kjv(void) {
  char err[256];
  size_t len;
  char *file = td_read_file(KJV_PATH, &len, err, sizeof err);
  corpus c = {td_malloc(2048 * sizeof(char *)), td_malloc(2048 * sizeof(size_t)), 0};
  if (!file) {
    CHECK(0, "read %s", err);
    return c;
  }
  for (char *line = strtok(file, "\n"); line && c.n < 2048; line = strtok(NULL, "\n")) {
    cJSON *doc = cJSON_Parse(line);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(doc, "text");
    if (cJSON_IsString(t)) {
      c.text[c.n] = td_strdup(t->valuestring);
      c.len[c.n] = strlen(t->valuestring);
      c.n++;
    }
    cJSON_Delete(doc);
  }
  td_free(file);
  return c;
}

/* Token counts from data/corpus/README.md, and decode(encode(x)) == x. */
static void test_kjv_counts(const corpus *c, size_t *counts) {
  td_bpe_worker *w = td_bpe_worker_new(g_bpe);
  id_vec v = {0};
  size_t total = 0, lo = SIZE_MAX, hi = 0, bad = 0;
  for (size_t d = 0; d < c->n; d++) {
    encode(w, c->text[d], c->len[d], &v);
    counts[d] = v.n;
    total += v.n;
    lo = v.n < lo ? v.n : lo;
    hi = v.n > hi ? v.n : hi;
    bad += !round_trips(v.p, v.n, c->text[d], c->len[d]);
  }
  CHECK(c->n == 1107, "KJV: %zu chapters (README: 1107)", c->n);
  CHECK(total == 1008390, "KJV: %zu tokens (README: 1,008,390)", total);
  CHECK(total + c->n == 1009497, "KJV: %zu tokens with one eod per chapter (README: 1,009,497)",
        total + c->n);
  CHECK(lo == 54 && hi == 3356, "KJV: chapters of %zu..%zu tokens (README: 54..3356)", lo, hi);
  CHECK(bad == 0, "KJV: every chapter decodes back to its text (%zu do not)", bad);
  td_free(v.p);
  td_bpe_worker_free(w);
}

/* One td_bpe shared by threads, a worker each: the same ids as one thread. */
static void test_threads(const corpus *c, const size_t *counts) {
  size_t bad = 0;
#pragma omp parallel num_threads(2) reduction(+ : bad)
  {
    td_bpe_worker *w = td_bpe_worker_new(g_bpe);
    id_vec v = {0};
#pragma omp for schedule(dynamic, 7)
    for (size_t d = 0; d < c->n; d++) {
      encode(w, c->text[d], c->len[d], &v);
      bad += v.n != counts[d] || !round_trips(v.p, v.n, c->text[d], c->len[d]);
    }
    td_free(v.p);
    td_bpe_worker_free(w);
  }
  CHECK(bad == 0, "KJV on 2 threads sharing the vocabulary: same ids (%zu chapters differ)", bad);
}

static void test_kjv(void) {
  corpus c = load_kjv();
  size_t *counts = td_malloc((c.n + 1) * sizeof *counts);
  test_kjv_counts(&c, counts);
  test_threads(&c, counts);
  for (size_t d = 0; d < c.n; d++) td_free(c.text[d]);
  td_free(c.text), td_free(c.len), td_free(counts);
}

/* ------------------------------------------------------------------ UTF-8 */

static void test_invalid_utf8(void) {
  static const struct {
    const char *s;
    size_t offset;
    const char *why;
  } cases[] = {
      {"ab\xC0\xAF", 2, "overlong"},       /* '/' in two bytes */
      {"abc\xE0\x80\xAF", 3, "overlong"},  /* '/' in three bytes */
      {"\xF0\x80\x80\xAF", 0, "overlong"}, /* '/' in four bytes */
      {"x\xED\xA0\x80", 1, "surrogate"},   /* U+D800 */
      {"xy\xED\xBF\xBF", 2, "surrogate"},  /* U+DFFF */
      {"hello \xE2\x82", 6, "truncated"},  /* € cut at the end */
      {"\xE2\x82z", 0, "truncated"},       /* € cut by an ASCII byte */
      {"12345678\xC3", 8, "truncated"},    /* after an all-ASCII word */
      {"\xF0\x9F\x98", 0, "truncated"},    /* emoji cut */
      {"ok \xFF", 3, "0xF5..0xFF"},
      {"\xFE\xFF", 0, "0xF5..0xFF"},
      {"\x80", 0, "continuation"},
      {"caf\xC3\xA9\xA9", 5, "continuation"},
      {"\xF4\x90\x80\x80", 0, "above U+10FFFF"},
  };
  td_bpe_worker *w = td_bpe_worker_new(g_bpe);
  id_vec v = {0};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char err[256], want[64];
    size_t n = 0;
    int rc = td_bpe_encode(w, cases[i].s, strlen(cases[i].s), &v.p, &n, &v.cap, err, sizeof err);
    snprintf(want, sizeof want, "byte offset %zu ", cases[i].offset);
    CHECK(rc == -1 && n == 0 && strstr(err, want) && strstr(err, cases[i].why),
          "invalid UTF-8 case %zu refused: %s", i, rc ? err : "accepted");
  }
  /* The edges of the valid ranges, and NUL, are text like any other. */
  static const char valid[] =
      "\xF4\x8F\xBF\xBF \xEF\xBF\xBF \xED\x9F\xBF \xEE\x80\x80 \xC2\x80 \0 \x7F";
  encode(w, valid, sizeof valid - 1, &v);
  CHECK(v.n > 0 && round_trips(v.p, v.n, valid, sizeof valid - 1),
        "U+10FFFF, U+FFFF, U+D7FF, U+E000, U+0080, NUL, DEL encode and decode back");
  td_free(v.p);
  td_bpe_worker_free(w);
}

/* ------------------------------------------------------------------ long pieces, cache */

/* One piece of a million bytes: merges apply in O(n log n), and the result is
 * what encoder.py gives ("aaaa" = 24794, "77" = 3324). */
static void test_long_pieces(void) {
  const size_t n = 1 << 20;
  char *s = td_malloc(n);
  td_bpe_worker *w = td_bpe_worker_new(g_bpe);
  id_vec v = {0};
  const struct {
    char c;
    int32_t id;
    size_t per;
  } runs[] = {{'a', 24794, 4}, {'7', 3324, 2}};
  for (int r = 0; r < 2; r++) {
    memset(s, runs[r].c, n);
    encode(w, s, n, &v);
    size_t wrong = v.n != n / runs[r].per;
    for (size_t i = 0; i < v.n; i++) wrong += v.p[i] != runs[r].id;
    CHECK(!wrong && round_trips(v.p, v.n, s, n), "a run of 2^20 '%c' is %zu tokens %d", runs[r].c,
          n / runs[r].per, runs[r].id);
  }
  td_free(s), td_free(v.p);
  td_bpe_worker_free(w);
}

/* More distinct words than the cache holds: it is emptied and refilled, and the
 * ids stay the same (second pass through a cache in a different state). */
static void test_cache_refill(void) {
  const size_t words = 300000;
  char *s = td_malloc(words * 8), *p = s;
  for (size_t i = 0; i < words; i++) {
    *p++ = ' ';
    for (size_t x = i; x; x /= 23) *p++ = (char)('a' + x % 23);
    *p++ = 'z';
  }
  size_t len = (size_t)(p - s);
  td_bpe_worker *w = td_bpe_worker_new(g_bpe);
  id_vec first = {0}, second = {0};
  encode(w, s, len, &first);
  encode(w, s, len, &second);
  CHECK(first.n == second.n && !memcmp(first.p, second.p, first.n * sizeof *first.p) &&
            round_trips(first.p, first.n, s, len),
        "%zu distinct words twice through the cache: same ids, decode back", words);
  td_free(s), td_free(first.p), td_free(second.p);
  td_bpe_worker_free(w);
}

/* ------------------------------------------------------------------ damaged files */

static const char *tmp_file(const char *name, const char *text, size_t len) {
  static char path[512];
  char err[256];
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  td_write_file(path, text, len, err, sizeof err);
  return path;
}

/* Load must fail with a message containing want. */
static void refused(const char *what, const char *vocab, const char *merges, const char *want) {
  char err[512] = "";
  td_bpe *b = td_bpe_load(vocab, merges, err, sizeof err);
  CHECK(!b && strstr(err, want), "%s refused: %s", what, b ? "loaded" : err);
  td_bpe_free(b);
}

/* The real file with the first occurrence of `from` replaced by `to`. */
static const char *edited(const char *name, const char *real, const char *from, const char *to) {
  char *hit = strstr(real, from);
  if (!hit) {
    CHECK(0, "the GPT-2 file has no '%s' to edit", from);
    return "/nonexistent";
  }
  size_t a = (size_t)(hit - real), nf = strlen(from), nt = strlen(to), len = strlen(real);
  char *s = td_malloc(len - nf + nt + 1);
  memcpy(s, real, a);
  memcpy(s + a, to, nt);
  memcpy(s + a + nt, hit + nf, len - a - nf + 1);
  const char *path = tmp_file(name, s, strlen(s));
  td_free(s);
  return path;
}

static void test_damaged_vocab(const char *merges, const char *v) {
  refused("missing vocab file", "/nonexistent/vocab.json", merges, "/nonexistent/vocab.json");
  refused("truncated vocab", tmp_file("cut.json", v, 1000), merges, "invalid JSON");
  refused("vocab that is an array", tmp_file("arr.json", "[1, 2]", 6), merges, "JSON object");
  refused("vocab id that is a string", edited("s.json", v, "\"!\": 0", "\"!\": \"0\""), merges,
          "must be an integer");
  refused("vocab id out of range", edited("r.json", v, "\"!\": 0", "\"!\": 50257"), merges,
          "must be an integer");
  refused("vocab id used twice", edited("d.json", v, "\"!\": 0", "\"!\": 1"), merges,
          "id 1 is given to both");
  refused("vocab token outside the byte alphabet",
          edited("a.json", v, "\"!\": 0", "\"\\u0500\": 0"), merges, "byte alphabet");
  refused("vocab without <|endoftext|>", edited("e.json", v, "<|endoftext|>", "<|endoftexx|>"),
          merges, "<|endoftext|>");
  refused("vocab without a single-byte token",
          edited("b.json", v, "\"\\u0120\": 220", "\"\\u0120\\u0120\": 220"), merges, "0x20");
}

static void test_damaged_merges(const char *vocab, const char *m) {
  size_t len = strlen(m);
  refused("missing merges file", vocab, "/nonexistent/merges.txt", "/nonexistent/merges.txt");
  refused("merges without the #version line", vocab,
          tmp_file("h.txt", strchr(m, '\n') + 1, len - (size_t)(strchr(m, '\n') + 1 - m)),
          "line 1");
  refused("merges line without a space", vocab,
          edited("s.txt", m, "\n\xC4\xA0 t\n", "\n\xC4\xA0t\n"), "line 2: expected two tokens");
  refused("merges with an unknown token", vocab,
          edited("u.txt", m, "\n\xC4\xA0 t\n", "\n\xC4\xA0 zqzqzq\n"),
          "line 2: \"zqzqzq\" is not a token");
  refused("merges with a space token", vocab,
          edited("w.txt", m, "\n\xC4\xA0 t\n", "\n\xC4\xA0  t\n"), "line 2: expected two tokens");
  refused("merges repeating a merge", vocab, edited("r.txt", m, "\n\xC4\xA0 a\n", "\n\xC4\xA0 t\n"),
          "repeats the merge on line 2");
  refused("merge whose result is not a token", vocab,
          edited("n.txt", m, "\n\xC4\xA0 t\n", "\n\xC4\xA0 \xC4\xA0\n"), "gives no token");
  refused("merges with a blank line", vocab, edited("b.txt", m, "\n\xC4\xA0 t\n", "\n\n"),
          "line 2: expected two tokens");
}

static void test_damaged_files(void) {
  const char *vocab = GPT2_DIR "/vocab.json", *merges = GPT2_DIR "/merges.txt";
  char err[256];
  size_t len;
  char *v = td_read_file(vocab, &len, err, sizeof err),
       *m = td_read_file(merges, &len, err, sizeof err);
  if (!v || !m) {
    CHECK(0, "read the GPT-2 files: %s", err);
    return;
  }
  test_damaged_vocab(merges, v);
  test_damaged_merges(vocab, m);
  td_free(v), td_free(m);
}

int main(void) {
  char err[512];
  g_bpe = td_bpe_load(GPT2_DIR "/vocab.json", GPT2_DIR "/merges.txt", err, sizeof err);
  CHECK(g_bpe != NULL, "load data/gpt2: %s", g_bpe ? "ok" : err);
  if (!g_bpe) return tst_finish();
  CHECK(td_bpe_vocab_size(g_bpe) == 50257 && td_bpe_eod(g_bpe) == 50256,
        "vocabulary of %lld, <|endoftext|> = %d", (long long)td_bpe_vocab_size(g_bpe),
        td_bpe_eod(g_bpe));
  snprintf(g_dir, sizeof g_dir, "/tmp/trident_test_bpe_%d", (int)getpid());
  td_mkdir_p(g_dir, err, sizeof err);
  test_reference_cases();
  test_class_edges();
  test_kjv();
  test_invalid_utf8();
  test_long_pieces();
  test_cache_refill();
  test_damaged_files();
  td_remove_tree(g_dir, err, sizeof err);
  td_bpe_free(g_bpe);
  return tst_finish();
}
