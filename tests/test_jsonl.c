/* data/jsonl: a line is accepted exactly when Python's json.loads accepts it (the
 * cases below were checked against Python 3.11), the text comes out decoded (escapes,
 * \u0000 inside, surrogate pairs, the last of a repeated key, an escaped key), and
 * every refusal names its byte offset. */
#include <string.h>

#include "base/mem.h"
#include "check.h"
#include "data/jsonl.h"

typedef struct {
  const char *line;
  size_t len;        /* 0: strlen(line) */
  const char *text;  /* the expected text, or NULL for an error */
  size_t text_len;   /* 0: strlen(text) */
  const char *error; /* a part of the expected message */
} jcase;

/* Python's json.loads accepts these; the text is their "text". */
static const jcase k_accepted[] = {
    {.line = "{\"text\": \"hello\"}", .text = "hello"},
    {.line = " {\"text\" : \"x\" } \r", .text = "x"},
    {.line = "{\"text\": \"\\\" \\\\ \\/ \\b \\f \\n \\r \\t\"}", .text = "\" \\ / \b \f \n \r \t"},
    {.line = "{\"text\": \"a\\u0000b\"}", .text = "a\0b", .text_len = 3},
    {.line = "{\"text\": \"\\u00e9\\u4e2d\\ud83d\\ude00\"}",
     .text = "\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80"},
    {.line = "{\"text\": \"caf\xC3\xA9 \xF0\x9F\x98\x80\"}",
     .text = "caf\xC3\xA9 \xF0\x9F\x98\x80"},
    {.line = "{\"t\\u0065xt\": \"escaped key\"}", .text = "escaped key"},
    {.line = "{\"text\": 5, \"text\": \"last wins\"}", .text = "last wins"},
    {.line = "{\"a\": \"\\ud800\", \"text\": \"a lone surrogate elsewhere is fine\"}",
     .text = "a lone surrogate elsewhere is fine"},
    {.line = "{\"a\": NaN, \"b\": Infinity, \"c\": -Infinity, \"text\": \"\"}", .text = ""},
    {.line = "{\"a\": -0, \"b\": 1.5e+10, \"c\": 0.1E-2, \"d\": 12, \"text\": \"n\"}", .text = "n"},
    {.line = "{\"a\": [], \"b\": {}, \"c\": [1, [true, false, null], {\"text\": \"inner\"}], "
             "\"text\": \"outer\"}",
     .text = "outer"},
    {.line = "{\"text\":\"tight\",\"meta\":{\"k\":[\"}\",\"]\"]}}", .text = "tight"},
};

/* Python refuses these (or, for the text's own lone surrogate, Megatron's tokenizer). */
static const jcase k_refused[] = {
    {.line = "", .error = "malformed JSON at byte offset 0"},
    {.line = "{\"text\": \"x\"",
     .error = "malformed JSON at byte offset 12: expecting ',' delimiter"},
    {.line = "{\"text\": \"x\",}", .error = "byte offset 13: expecting property name"},
    {.line = "{'text': 'x'}", .error = "byte offset 1: expecting property name"},
    {.line = "{\"a\" \"b\"}", .error = "byte offset 5: expecting ':' delimiter"},
    {.line = "{\"a\":}", .error = "byte offset 5: expecting value"},
    {.line = "{\"a\": 01}", .error = "byte offset 7: expecting ',' delimiter"},
    {.line = "{\"a\": 1.}", .error = "byte offset 7: expecting ',' delimiter"},
    {.line = "{\"a\": .5}", .error = "byte offset 6: expecting value"},
    {.line = "{\"a\": +1}", .error = "byte offset 6: expecting value"},
    {.line = "{\"a\": -}", .error = "byte offset 6: expecting value"},
    {.line = "{\"a\": 1e}", .error = "byte offset 7: expecting ',' delimiter"},
    {.line = "{\"a\": tru}", .error = "byte offset 6: expecting value"},
    {.line = "{\"a\": truex}", .error = "byte offset 10: expecting ',' delimiter"},
    {.line = "{\"a\": [1,]}", .error = "byte offset 9: expecting value"},
    {.line = "{\"a\": [,1]}", .error = "byte offset 7: expecting value"},
    {.line = "{\"text\": \"x\"} {}", .error = "byte offset 14: extra data"},
    {.line = "{\"text\": \"x\"}\f", .error = "byte offset 13: extra data"},
    {.line = "\v{\"text\": \"x\"}", .error = "byte offset 0: expecting value"},
    {.line = "\xEF\xBB\xBF{\"text\": \"x\"}", .error = "byte offset 0: expecting value"},
    {.line = "{\"text\": \"a\tb\"}", .error = "byte offset 11: raw control character 0x09"},
    {.line = "{\"text\": \"unterminated}", .error = "byte offset 9: unterminated string"},
    {.line = "{\"text\": \"\\x\"}", .error = "byte offset 10: invalid escape"},
    {.line = "{\"text\": \"\\U0041\"}", .error = "byte offset 10: invalid escape"},
    {.line = "{\"text\": \"\\u12\"}", .error = "malformed \\u escape at byte offset 10"},
    {.line = "{\"text\": \"a\"}\0", .len = 14, .error = "NUL byte at byte offset 13"},
    {.line = "{\"text\": \"a\0\"}", .len = 14, .error = "NUL byte at byte offset 11"},
    {.line = "{\"text\": \"caf\xC3\"}", .error = "invalid UTF-8 at byte offset 13 (byte 0xC3)"},
    {.line = "{\"text\": \"\xC0\x80\"}",
     .error = "invalid UTF-8 at byte offset 10 (byte 0xC0): overlong"},
    {.line = "[\"text\"]",
     .error = "expected a JSON object like {\"text\": \"...\"}, found an array"},
    {.line = "\"text\"", .error = "found a string"},
    {.line = "{}", .error = "no key \"text\""},
    {.line = "{\"a\": {\"text\": \"nested\"}}", .error = "no key \"text\""},
    {.line = "{\"text\": \"x\", \"text\": 5}",
     .error = "no string value for the key \"text\" (it is a number)"},
    {.line = "{\"text\": [\"a\", \"b\"]}", .error = "(it is an array)"},
    {.line = "{\"text\": null}", .error = "(it is null)"},
    {.line = "{\"text\": \"a\\ud83dx\"}", .error = "lone surrogate \\ud83d at byte offset 11"},
    {.line = "{\"text\": \"\\uDC00\"}", .error = "lone surrogate \\uDC00 at byte offset 10"},
};

static void test_accepted(char **buf, size_t *cap) {
  for (size_t i = 0; i < sizeof k_accepted / sizeof *k_accepted; i++) {
    const jcase *c = &k_accepted[i];
    size_t len = c->len ? c->len : strlen(c->line),
           want = c->text_len ? c->text_len : strlen(c->text), n = 0;
    char err[512] = "";
    int rc = td_jsonl_get_string(c->line, len, "text", buf, cap, &n, err, sizeof err);
    CHECK(rc == 0 && n == want && !memcmp(*buf, c->text, n) && (*buf)[n] == 0,
          "accepted: %s -> %zu bytes %s", c->line, n, err);
  }
}

static void test_refused(char **buf, size_t *cap) {
  for (size_t i = 0; i < sizeof k_refused / sizeof *k_refused; i++) {
    const jcase *c = &k_refused[i];
    size_t len = c->len ? c->len : strlen(c->line), n;
    char err[512] = "";
    int rc = td_jsonl_get_string(c->line, len, "text", buf, cap, &n, err, sizeof err);
    CHECK(rc == -1 && strstr(err, c->error), "refused: %s -> %s", c->line, err);
  }
}

/* Nesting: TD_JSONL_MAX_DEPTH levels are read, one more is refused (Python's
 * recursion limit refuses about as deep). */
static void test_depth(char **buf, size_t *cap) {
  int depth = TD_JSONL_MAX_DEPTH;
  size_t len = 2 * (size_t)depth + 64, n;
  char *line = td_malloc(len), err[512] = "";
  for (int extra = 0; extra < 2; extra++) {
    int arrays = depth - 1 + extra; /* inside the top-level object */
    size_t k = (size_t)sprintf(line, "{\"text\": \"deep\", \"a\": ");
    memset(line + k, '[', (size_t)arrays), k += (size_t)arrays;
    memset(line + k, ']', (size_t)arrays), k += (size_t)arrays;
    line[k++] = '}';
    int rc = td_jsonl_get_string(line, k, "text", buf, cap, &n, err, sizeof err);
    if (extra)
      CHECK(rc == -1 && strstr(err, "nested deeper than"), "%d levels refused: %s", depth + 1, err);
    else
      CHECK(rc == 0 && n == 4, "%d levels read: %s", depth, rc ? err : "ok");
  }
  td_free(line);
}

/* Other keys, and a value longer than the buffer so far. */
static void test_keys_and_growth(char **buf, size_t *cap) {
  char err[512] = "", big[5000];
  size_t n;
  int rc =
      td_jsonl_get_string("{\"\xCF\x84\": \"tau\"}", 13, "\xCF\x84", buf, cap, &n, err, sizeof err);
  CHECK(rc == 0 && n == 3 && !strcmp(*buf, "tau"), "a non-ASCII key: %s", err);
  memcpy(big, "{\"title\": \"", 11);
  memset(big + 11, 'z', 4000);
  memcpy(big + 4011, "\"}", 2);
  rc = td_jsonl_get_string(big, 4013, "title", buf, cap, &n, err, sizeof err);
  CHECK(rc == 0 && n == 4000 && *cap > 4000 && (*buf)[3999] == 'z',
        "a 4000-byte value grows the buffer: %s", err);
}

int main(void) {
  char *buf = NULL;
  size_t cap = 0;
  test_accepted(&buf, &cap);
  test_refused(&buf, &cap);
  test_depth(&buf, &cap);
  test_keys_and_growth(&buf, &cap);
  td_free(buf);
  return tst_finish();
}
