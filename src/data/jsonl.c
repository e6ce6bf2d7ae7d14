#include "data/jsonl.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/mem.h"
#include "data/bpe_tokenizer.h"

/* Value types, as the messages name them. */
typedef enum { V_NONE, V_STRING, V_NUMBER, V_OBJECT, V_ARRAY, V_BOOL, V_NULL } vtype;

static const char *const k_type_names[] = {"nothing",  "a string",      "a number", "an object",
                                           "an array", "true or false", "null"};

/* A recursive-descent check of one line (Python's json grammar) that also notes
 * where the top-level object's last value of key starts. */
typedef struct {
  const char *s;
  size_t len, i;
  const char *key;
  size_t klen;
  vtype found; /* type of the key's last value, V_NONE: no such key */
  size_t found_at;
  char *err;
  size_t errlen;
} parser;

static int failf(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int failf(parser *p, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->err, p->errlen, fmt, ap);
  va_end(ap);
  return -1;
}

static int malformed(parser *p, size_t at, const char *what) {
  if (at < p->len && p->s[at] == 0)
    return failf(p, "NUL byte at byte offset %zu", at);
  return failf(p, "malformed JSON at byte offset %zu: %s", at, what);
}

static int peek(const parser *p) { return p->i < p->len ? (unsigned char)p->s[p->i] : -1; }

static void skip_ws(parser *p) {
  while (p->i < p->len) {
    char c = p->s[p->i];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
      return;
    p->i++;
  }
}

static int is_digit(int c) { return c >= '0' && c <= '9'; }

static int is_hex(int c) { return is_digit(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f'); }

/* ------------------------------------------------------------------ strings */

/* The length of the escape at s[i] == '\\' (2, or 6 for \uXXXX), 0 if malformed. */
static int escape_len(const char *s, size_t len, size_t i) {
  if (i + 1 >= len)
    return 0;
  char c = s[i + 1];
  if (c != 'u')
    return c && strchr("\"\\/bfnrt", c) ? 2 : 0;
  for (size_t k = 2; k < 6; k++)
    if (i + k >= len || !is_hex((unsigned char)s[i + k]))
      return 0;
  return 6;
}

static int bad_escape(parser *p, size_t at) {
  if (at + 1 >= p->len)
    return malformed(p, at, "unterminated string");
  if (p->s[at + 1] == 'u')
    return failf(p, "malformed \\u escape at byte offset %zu (\\u takes four hex digits)", at);
  return malformed(p, at, "invalid escape (JSON has \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
}

static int scan_string(parser *p) {
  size_t start = p->i++;
  while (p->i < p->len) {
    unsigned char c = (unsigned char)p->s[p->i];
    if (c == '"') {
      p->i++;
      return 0;
    }
    if (c < 0x20) {
      if (!c)
        return malformed(p, p->i, "");
      return failf(p,
                   "malformed JSON at byte offset %zu: raw control character 0x%02X in a string "
                   "(JSON writes it as an escape, e.g. \\n or \\u%04x)",
                   p->i, c, c);
    }
    int n = c == '\\' ? escape_len(p->s, p->len, p->i) : 1;
    if (!n)
      return bad_escape(p, p->i);
    p->i += (size_t)n;
  }
  return malformed(p, start, "unterminated string");
}

static unsigned hex4(const char *s) {
  unsigned v = 0;
  for (int k = 0; k < 4; k++) {
    char c = s[k];
    v = v << 4 | (unsigned)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
  }
  return v;
}

static int put_utf8(char *d, unsigned cp) {
  if (cp < 0x80)
    return d[0] = (char)cp, 1;
  if (cp < 0x800)
    return d[0] = (char)(0xC0 | cp >> 6), d[1] = (char)(0x80 | (cp & 63)), 2;
  if (cp < 0x10000) {
    d[0] = (char)(0xE0 | cp >> 12), d[1] = (char)(0x80 | (cp >> 6 & 63));
    d[2] = (char)(0x80 | (cp & 63));
    return 3;
  }
  d[0] = (char)(0xF0 | cp >> 18), d[1] = (char)(0x80 | (cp >> 12 & 63));
  d[2] = (char)(0x80 | (cp >> 6 & 63)), d[3] = (char)(0x80 | (cp & 63));
  return 4;
}

/* One character of a checked string body at s[*i] (not the closing quote): its
 * bytes into d, the count returned. A surrogate pair becomes its character, as
 * Python combines it; a lone surrogate gets *lone = 1 (and its 3-byte form). */
static int decode_char(const char *s, size_t *i, char d[4], int *lone) {
  static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
  *lone = 0;
  if (s[*i] != '\\')
    return d[0] = s[(*i)++], 1;
  if (s[*i + 1] != 'u') {
    d[0] = to[strchr(from, s[*i + 1]) - from];
    *i += 2;
    return 1;
  }
  unsigned cp = hex4(s + *i + 2);
  *i += 6;
  if (cp >= 0xD800 && cp < 0xDC00 && s[*i] == '\\' && s[*i + 1] == 'u') {
    unsigned lo = hex4(s + *i + 2);
    if (lo >= 0xDC00 && lo < 0xE000) {
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      *i += 6;
    }
  }
  *lone = cp >= 0xD800 && cp < 0xE000;
  return put_utf8(d, cp);
}

/* Does the checked string literal at s[at] == '"' decode to p->key? */
static int key_equals(const parser *p, size_t at) {
  size_t i = at + 1, k = 0;
  char d[4];
  int lone;
  while (p->s[i] != '"') {
    size_t n = (size_t)decode_char(p->s, &i, d, &lone);
    if (k + n > p->klen || memcmp(d, p->key + k, n))
      return 0;
    k += n;
  }
  return k == p->klen;
}

/* ------------------------------------------------------------------ values */

static int scan_value(parser *p, int depth, vtype *t);

static int scan_number(parser *p) {
  const char *s = p->s;
  size_t i = p->i, len = p->len;
  if (s[i] == '-')
    i++;
  if (i < len && s[i] == '0') {
    i++;
  } else if (i < len && is_digit((unsigned char)s[i])) {
    while (i < len && is_digit((unsigned char)s[i]))
      i++;
  } else {
    return malformed(p, p->i, "expecting value");
  }
  if (i + 1 < len && s[i] == '.' && is_digit((unsigned char)s[i + 1]))
    for (i++; i < len && is_digit((unsigned char)s[i]);)
      i++;
  if (i < len && (s[i] == 'e' || s[i] == 'E')) {
    size_t j = i + 1 + (i + 1 < len && (s[i + 1] == '+' || s[i + 1] == '-'));
    if (j < len && is_digit((unsigned char)s[j]))
      for (i = j; i < len && is_digit((unsigned char)s[i]);)
        i++;
  }
  p->i = i;
  return 0;
}

/* true, false, null and Python's NaN, Infinity, -Infinity. */
static int scan_literal(parser *p, vtype *t) {
  static const struct {
    const char *word;
    vtype t;
  } k_words[] = {{"true", V_BOOL},  {"false", V_BOOL},      {"null", V_NULL},
                 {"NaN", V_NUMBER}, {"Infinity", V_NUMBER}, {"-Infinity", V_NUMBER}};
  for (size_t w = 0; w < sizeof k_words / sizeof *k_words; w++) {
    size_t n = strlen(k_words[w].word);
    if (p->len - p->i >= n && !memcmp(p->s + p->i, k_words[w].word, n)) {
      p->i += n;
      *t = k_words[w].t;
      return 1;
    }
  }
  return 0;
}

static int too_deep(parser *p) {
  return failf(p, "malformed JSON at byte offset %zu: nested deeper than %d levels", p->i,
               TD_JSONL_MAX_DEPTH);
}

/* After a member or element: ',' (1, more follow) or the closing bracket (0). */
static int scan_delimiter(parser *p, char close) {
  skip_ws(p);
  int c = peek(p);
  if (c != ',' && c != close)
    return malformed(p, p->i, "expecting ',' delimiter");
  p->i++;
  skip_ws(p);
  return c == ',';
}

static int scan_member(parser *p, int depth) {
  if (peek(p) != '"')
    return malformed(p, p->i, "expecting property name enclosed in double quotes");
  size_t key_at = p->i;
  if (scan_string(p))
    return -1;
  skip_ws(p);
  if (peek(p) != ':')
    return malformed(p, p->i, "expecting ':' delimiter");
  p->i++;
  skip_ws(p);
  size_t value_at = p->i;
  vtype t;
  if (scan_value(p, depth, &t))
    return -1;
  if (depth == 1 && key_equals(p, key_at))
    p->found = t, p->found_at = value_at;
  return 0;
}

static int scan_object(parser *p, int depth) {
  if (depth > TD_JSONL_MAX_DEPTH)
    return too_deep(p);
  p->i++;
  skip_ws(p);
  if (peek(p) == '}')
    return p->i++, 0;
  for (int more = 1; more;) {
    if (scan_member(p, depth))
      return -1;
    if ((more = scan_delimiter(p, '}')) < 0)
      return -1;
  }
  return 0;
}

static int scan_array(parser *p, int depth) {
  if (depth > TD_JSONL_MAX_DEPTH)
    return too_deep(p);
  p->i++;
  skip_ws(p);
  if (peek(p) == ']')
    return p->i++, 0;
  for (int more = 1; more;) {
    vtype t;
    if (scan_value(p, depth, &t))
      return -1;
    if ((more = scan_delimiter(p, ']')) < 0)
      return -1;
  }
  return 0;
}

static int scan_value(parser *p, int depth, vtype *t) {
  int c = peek(p);
  if (c == '"')
    return *t = V_STRING, scan_string(p);
  if (c == '{')
    return *t = V_OBJECT, scan_object(p, depth + 1);
  if (c == '[')
    return *t = V_ARRAY, scan_array(p, depth + 1);
  if (scan_literal(p, t))
    return 0;
  if (c == '-' || is_digit(c))
    return *t = V_NUMBER, scan_number(p);
  return malformed(p, p->i,
                   c < 0 && !p->len ? "expecting value (the line is empty)" : "expecting value");
}

/* The whole line: one object, nothing after it but white space. */
static int scan_line(parser *p) {
  size_t bad;
  const char *why;
  if (td_utf8_validate(p->s, p->len, &bad, &why))
    return failf(p, "invalid UTF-8 at byte offset %zu (byte 0x%02X): %s", bad,
                 (unsigned char)p->s[bad], why);
  skip_ws(p);
  vtype t;
  if (scan_value(p, 0, &t))
    return -1;
  skip_ws(p);
  if (p->i < p->len)
    return malformed(p, p->i, "extra data after the JSON value");
  if (t != V_OBJECT)
    return failf(p, "expected a JSON object like {\"%s\": \"...\"}, found %s", p->key,
                 k_type_names[t]);
  return 0;
}

/* ------------------------------------------------------------------ the value */

static int decode_found(parser *p, char *d, size_t *n) {
  size_t i = p->found_at + 1, k = 0;
  while (p->s[i] != '"') {
    size_t at = i;
    int lone;
    k += (size_t)decode_char(p->s, &i, d + k, &lone);
    if (lone)
      return failf(p,
                   "lone surrogate \\u%.4s at byte offset %zu in the text of \"%s\" (it has no "
                   "UTF-8 form; Megatron's tokenizer fails on it too)",
                   p->s + at + 2, at, p->key);
  }
  d[k] = 0;
  *n = k;
  return 0;
}

int td_jsonl_get_string(const char *s, size_t len, const char *key, char **buf, size_t *cap,
                        size_t *n, char *err, size_t errlen) {
  parser p = {.s = s, .len = len, .key = key, .klen = strlen(key), .err = err, .errlen = errlen};
  if (scan_line(&p))
    return -1;
  if (p.found == V_NONE)
    return failf(&p, "no key \"%s\"", key);
  if (p.found != V_STRING)
    return failf(&p, "no string value for the key \"%s\" (it is %s)", key, k_type_names[p.found]);
  /* a decoded string is never longer than its literal */
  if (*cap < len - p.found_at + 1) {
    td_free(*buf);
    *cap = 2 * (len - p.found_at + 1);
    *buf = td_malloc(*cap);
  }
  return decode_found(&p, *buf, n);
}
