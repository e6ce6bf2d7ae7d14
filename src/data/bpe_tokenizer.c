#include "data/bpe_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <pcre2.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "base/files.h"
#include "base/mem.h"

/* ------------------------------------------------------------------ pattern */

/* GPT-2's pre-tokenizer with the Python `regex` module's classes spelled out.
 * \s there is Unicode White_Space; PCRE2 10.42's own \s also takes U+180E (not
 * White_Space since Unicode 6.3), which would split "a \u180eb" differently.
 * \p{L} / \p{N}: the reference ids use Unicode 15.0 and PCRE2 10.42 has 14.0, so
 * the letters and numbers that 15.0 assigned are added (ICU 72's u_charType
 * against PCRE2 10.42 over all code points; 15.0 moved none out). A newer PCRE2
 * may also take letters assigned after 15.0, as newer `regex` versions do. */
#define TD_WS "\\t-\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}" \
              "\\x{205f}\\x{3000}"
#define TD_L                                                                                  \
  "\\p{L}\\x{1123f}-\\x{11240}\\x{11f02}\\x{11f04}-\\x{11f10}\\x{11f12}-\\x{11f33}\\x{1342f}" \
  "\\x{13441}-\\x{13446}\\x{1b132}\\x{1b155}\\x{1df25}-\\x{1df2a}\\x{1e030}-\\x{1e06d}"       \
  "\\x{1e4d0}-\\x{1e4eb}\\x{2b739}\\x{31350}-\\x{323af}"
#define TD_N "\\p{N}\\x{11f50}-\\x{11f59}\\x{1d2c0}-\\x{1d2d3}\\x{1e4f0}-\\x{1e4f9}"

static const char k_pattern[] = "'s|'t|'re|'ve|'m|'ll|'d"
                                "| ?[" TD_L "]+"
                                "| ?[" TD_N "]+"
                                "| ?[^" TD_WS TD_L TD_N "]+"
                                "|[" TD_WS "]+(?![^" TD_WS "])"
                                "|[" TD_WS "]+";

/* ------------------------------------------------------------------ tables */

/* Merge table: open addressing on (left id, right id). */
typedef struct {
  uint64_t key; /* left << 32 | right; TD_EMPTY_KEY when free */
  int32_t rank, id;
} td_merge_slot;
#define TD_EMPTY_KEY UINT64_MAX

struct td_bpe {
  int64_t n_vocab;
  int32_t eod;
  int32_t byte_id[256]; /* id of the token that is this single byte */
  uint32_t *tok_off;    /* token i is tok_bytes[tok_off[i], tok_off[i+1]) */
  char *tok_bytes;
  td_merge_slot *merges;
  int merge_bits;          /* table has 1 << merge_bits slots */
  int32_t (*by_rank)[3];   /* merge of rank r: left id, right id, merged id */
  int32_t n_ranks;         /* ranks are 0 .. n_ranks - 1 (merges.txt's lines) */
  pcre2_code *re;
  int jit; /* re was JIT-compiled (not every platform has the JIT) */
};

static inline uint64_t hash_u64(uint64_t x) { return x * 0x9E3779B97F4A7C15ull; }

/* Bytes hash for the piece cache and the load-time token map (pieces are short). */
static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 0x243F6A8885A308D3ull ^ n;
  for (; n >= 8; s += 8, n -= 8) {
    uint64_t w;
    memcpy(&w, s, 8);
    h = hash_u64(h ^ w) ^ (h >> 29);
  }
  uint64_t w = 0;
  memcpy(&w, s, n);
  h = hash_u64(h ^ w);
  return h ^ (h >> 32);
}

static inline uint64_t merge_key(int32_t a, int32_t b) {
  return (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
}

/* Rank of merging (a, b), or -1; *id gets the merged token. */
static inline int32_t merge_rank(const td_bpe *bpe, int32_t a, int32_t b, int32_t *id) {
  uint64_t key = merge_key(a, b), mask = ((uint64_t)1 << bpe->merge_bits) - 1;
  for (uint64_t i = hash_u64(key) >> (64 - bpe->merge_bits);; i = (i + 1) & mask) {
    const td_merge_slot *s = &bpe->merges[i];
    if (s->key == key) {
      *id = s->id;
      return s->rank;
    }
    if (s->key == TD_EMPTY_KEY) return -1;
  }
}

/* Returns the rank already stored for (a, b), or -1 after inserting it. */
static int32_t merge_insert(td_bpe *bpe, int32_t a, int32_t b, int32_t rank, int32_t id) {
  uint64_t key = merge_key(a, b), mask = ((uint64_t)1 << bpe->merge_bits) - 1;
  for (uint64_t i = hash_u64(key) >> (64 - bpe->merge_bits);; i = (i + 1) & mask) {
    td_merge_slot *s = &bpe->merges[i];
    if (s->key == key) return s->rank;
    if (s->key == TD_EMPTY_KEY) {
      *s = (td_merge_slot){key, rank, id};
      return -1;
    }
  }
}

/* ------------------------------------------------------------------ UTF-8 */

/* Unicode's table 3-7 of well-formed sequences: after a lead byte, the first
 * continuation byte has a narrower range for E0 (no overlong forms), ED (no
 * surrogates), F0 (no overlong forms) and F4 (nothing above U+10FFFF). */
int td_utf8_char_len(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  unsigned b = u[0], lo = 0x80, hi = 0xBF;
  int need;
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need = 2, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
  } else if (b >= 0xF0 && b <= 0xF4) {
    need = 3, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
  } else {
    return -1;
  }
  for (int k = 1; k <= need; k++) {
    unsigned c = (size_t)k < n ? u[k] : 0;
    if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return -k;
  }
  return need + 1;
}

/* Why the sequence at u[0, n) is not UTF-8 (td_utf8_char_len said so). */
static const char *utf8_problem(const unsigned char *u, size_t n) {
  unsigned b = u[0], c = n > 1 ? u[1] : 0;
  if (b >= 0x80 && b <= 0xBF) return "continuation byte without a lead byte";
  if (b == 0xC0 || b == 0xC1) return "overlong encoding";
  if (b >= 0xF5) return "byte 0xF5..0xFF never appears in UTF-8";
  if (n < 2 || c < 0x80 || c > 0xBF) return "truncated sequence";
  if (b == 0xE0 && c < 0xA0) return "overlong encoding";
  if (b == 0xF0 && c < 0x90) return "overlong encoding";
  if (b == 0xED && c > 0x9F) return "UTF-16 surrogate (U+D800..U+DFFF)";
  if (b == 0xF4 && c > 0x8F) return "code point above U+10FFFF";
  return "truncated sequence";
}

int td_utf8_validate(const char *s, size_t len, size_t *bad_offset, const char **why) {
  size_t i = 0;
  while (i < len) {
    uint64_t w8;
    if (i + 8 <= len && (memcpy(&w8, s + i, 8), !(w8 & 0x8080808080808080ull))) {
      i += 8; /* eight ASCII bytes at once: most text is mostly ASCII */
      continue;
    }
    int k = td_utf8_char_len(s + i, len - i);
    if (k < 0) {
      *bad_offset = i;
      *why = utf8_problem((const unsigned char *)s + i, len - i);
      return -1;
    }
    i += (size_t)k;
  }
  return 0;
}

/* ------------------------------------------------------------------ byte alphabet */

/* GPT-2's bytes_to_unicode(): the printable bytes '!'..'~', 0xA1..0xAC and
 * 0xAE..0xFF stand for themselves; the other 68 (0x00..0x20, 0x7F..0xA0, 0xAD)
 * take U+0100..U+0143 in increasing byte order, so every token is printable.
 * Returns the byte that code point cp stands for, or -1. */
static int alphabet_byte(uint32_t cp) {
  if (cp < 256) {
    int printable = (cp >= '!' && cp <= '~') || (cp >= 0xA1 && cp <= 0xAC) || cp >= 0xAE;
    return printable ? (int)cp : -1;
  }
  if (cp >= 0x144) return -1;
  uint32_t k = cp - 0x100; /* the k-th non-printable byte */
  return k < 33 ? (int)k : k < 67 ? (int)(0x7F + k - 33) : 0xAD;
}

/* Token text in the alphabet (UTF-8) -> the bytes it stands for; out holds at
 * least n bytes. Returns the byte count, or -1 if a character is not in the
 * alphabet (or s is not UTF-8). */
static long alphabet_to_bytes(const char *s, size_t n, char *out) {
  size_t bad;
  const char *why;
  if (td_utf8_validate(s, n, &bad, &why)) return -1;
  const unsigned char *u = (const unsigned char *)s;
  long m = 0;
  for (size_t i = 0; i < n;) {
    uint32_t cp = u[i];
    size_t k = cp < 0x80 ? 1 : cp < 0xE0 ? 2 : cp < 0xF0 ? 3 : 4;
    if (k == 2) cp = (cp & 0x1F) << 6 | (u[i + 1] & 0x3F);
    int b = k <= 2 ? alphabet_byte(cp) : -1; /* the alphabet ends at U+0143 */
    if (b < 0) return -1;
    out[m++] = (char)b;
    i += k;
  }
  return m;
}

/* ------------------------------------------------------------------ loading */

/* Token bytes -> id, used while loading (merges name their tokens by text). */
typedef struct {
  const td_bpe *bpe;
  int32_t *slots; /* id, or -1 */
  int bits;
} td_token_map;

static const char *tok_ptr(const td_bpe *bpe, int32_t id) {
  return bpe->tok_bytes + bpe->tok_off[id];
}
static size_t tok_len(const td_bpe *bpe, int32_t id) {
  return bpe->tok_off[id + 1] - bpe->tok_off[id];
}

/* Id of the token with bytes s[0, n), or -1; *slot gets where it is or would go. */
static int32_t token_find(const td_token_map *m, const char *s, size_t n, size_t *slot) {
  size_t mask = ((size_t)1 << m->bits) - 1;
  for (size_t i = hash_bytes(s, n) >> (64 - m->bits);; i = (i + 1) & mask) {
    int32_t id = m->slots[i];
    if (id < 0 || (tok_len(m->bpe, id) == n && !memcmp(tok_ptr(m->bpe, id), s, n))) {
      if (slot) *slot = i;
      return id;
    }
  }
}

static const char *json_error_context(const char *text) {
  const char *p = cJSON_GetErrorPtr();
  return p ? p : text;
}

/* vocab.json -> n_vocab and each id's bytes; const char *keys[id] while parsing. */
static int vocab_ids(td_bpe *bpe, cJSON *root, const char *path, const char **key_of, char *err,
                     size_t errlen) {
  for (cJSON *it = root->child; it; it = it->next) {
    double v = it->valuedouble;
    if (!cJSON_IsNumber(it) || !(v >= 0 && v < (double)bpe->n_vocab) || v != (double)(int32_t)v) {
      td_errorf(err, errlen,
              "%s: token \"%.40s\": the id must be an integer in 0..%lld (one per token)", path,
              it->string, (long long)bpe->n_vocab - 1);
      return -1;
    }
    if (key_of[(int32_t)v]) {
      td_errorf(err, errlen, "%s: id %d is given to both \"%.40s\" and \"%.40s\"", path, (int32_t)v,
              key_of[(int32_t)v], it->string);
      return -1;
    }
    key_of[(int32_t)v] = it->string;
  }
  return 0;
}

static int vocab_bytes(td_bpe *bpe, const char **key_of, const char *path, char *err,
                       size_t errlen) {
  size_t total = 0;
  for (int64_t i = 0; i < bpe->n_vocab; i++) total += strlen(key_of[i]);
  bpe->tok_off = td_malloc((size_t)(bpe->n_vocab + 1) * sizeof *bpe->tok_off);
  bpe->tok_bytes = td_malloc(total + 1);
  bpe->tok_off[0] = 0;
  for (int64_t i = 0; i < bpe->n_vocab; i++) {
    long m = alphabet_to_bytes(key_of[i], strlen(key_of[i]), bpe->tok_bytes + bpe->tok_off[i]);
    if (m <= 0) {
      td_errorf(err, errlen,
              "%s: token %lld (\"%.40s\") is empty or not written in GPT-2's byte alphabet", path,
              (long long)i, key_of[i]);
      return -1;
    }
    if (m > UINT16_MAX) { /* a symbol of bpe_piece holds a token's length in 16 bits */
      td_errorf(err, errlen, "%s: token %lld (\"%.40s\") is %ld bytes long: at most %d", path,
                (long long)i, key_of[i], m, UINT16_MAX);
      return -1;
    }
    bpe->tok_off[i + 1] = bpe->tok_off[i] + (uint32_t)m;
  }
  return 0;
}

static int load_vocab(td_bpe *bpe, const char *path, char *err, size_t errlen) {
  size_t len;
  char *text = td_read_file(path, &len, err, errlen);
  if (!text) return -1;
  cJSON *root = cJSON_ParseWithLength(text, len);
  int rc = -1;
  if (!root || !cJSON_IsObject(root) || !root->child) {
    if (!root)
      td_errorf(err, errlen, "%s: invalid JSON at byte %zu", path,
              (size_t)(json_error_context(text) - text));
    else
      td_errorf(err, errlen, "%s: expected a JSON object mapping each token to its id", path);
  } else {
    bpe->n_vocab = cJSON_GetArraySize(root);
    const char **key_of = td_calloc((size_t)bpe->n_vocab * sizeof *key_of);
    rc = vocab_ids(bpe, root, path, key_of, err, errlen);
    if (!rc) rc = vocab_bytes(bpe, key_of, path, err, errlen);
    td_free(key_of);
  }
  cJSON_Delete(root);
  td_free(text);
  return rc;
}

static int build_token_map(td_token_map *m, const td_bpe *bpe, const char *path, char *err,
                           size_t errlen) {
  m->bpe = bpe;
  for (m->bits = 4; ((int64_t)1 << m->bits) < 2 * bpe->n_vocab;) m->bits++;
  m->slots = td_malloc(sizeof *m->slots << m->bits);
  memset(m->slots, 0xff, sizeof *m->slots << m->bits);
  for (int32_t id = 0; id < bpe->n_vocab; id++) {
    size_t slot;
    int32_t other = token_find(m, tok_ptr(bpe, id), tok_len(bpe, id), &slot);
    if (other >= 0) {
      td_errorf(err, errlen, "%s: ids %d and %d are the same token", path, other, id);
      return -1;
    }
    m->slots[slot] = id;
  }
  return 0;
}

/* The end-of-document token and the 256 single-byte tokens must exist. */
static int find_special_tokens(td_bpe *bpe, const td_token_map *m, const char *path, char *err,
                               size_t errlen) {
  static const char eod[] = "<|endoftext|>";
  bpe->eod = token_find(m, eod, sizeof eod - 1, NULL);
  if (bpe->eod < 0) {
    td_errorf(err, errlen, "%s: no \"%s\" token", path, eod);
    return -1;
  }
  for (int b = 0; b < 256; b++) {
    char c = (char)b;
    bpe->byte_id[b] = token_find(m, &c, 1, NULL);
    if (bpe->byte_id[b] < 0) {
      td_errorf(err, errlen, "%s: no token for the single byte 0x%02X", path, b);
      return -1;
    }
  }
  return 0;
}

/* One merges.txt line "A B" (line number ln, rank) into the merge table; scratch
 * holds at least 2 * len bytes. */
static int add_merge(td_bpe *bpe, const td_token_map *m, const char *line, size_t len, int32_t rank,
                     size_t ln, char *scratch, const char *path, char *err, size_t errlen) {
  const char *sp = memchr(line, ' ', len);
  if (!sp || sp == line || sp + 1 == line + len ||
      memchr(sp + 1, ' ', (size_t)(line + len - sp - 1))) {
    td_errorf(err, errlen, "%s: line %zu: expected two tokens separated by one space", path, ln);
    return -1;
  }
  const char *part[2] = {line, sp + 1};
  size_t part_len[2] = {(size_t)(sp - line), (size_t)(line + len - sp - 1)};
  int32_t id[2];
  long at = 0;
  for (int k = 0; k < 2; k++) {
    long nb = alphabet_to_bytes(part[k], part_len[k], scratch + at);
    id[k] = nb > 0 ? token_find(m, scratch + at, (size_t)nb, NULL) : -1;
    if (id[k] < 0) {
      td_errorf(err, errlen, "%s: line %zu: \"%.*s\" is not a token of the vocabulary", path, ln,
              (int)part_len[k], part[k]);
      return -1;
    }
    at += nb;
  }
  int32_t merged = token_find(m, scratch, (size_t)at, NULL);
  if (merged < 0) {
    td_errorf(err, errlen, "%s: line %zu: merging \"%.*s\" gives no token of the vocabulary", path,
            ln, (int)len, line);
    return -1;
  }
  int32_t prev = merge_insert(bpe, id[0], id[1], rank, merged);
  if (prev >= 0) {
    td_errorf(err, errlen, "%s: line %zu repeats the merge on line %d", path, ln, prev + 2);
    return -1;
  }
  bpe->by_rank[rank][0] = id[0], bpe->by_rank[rank][1] = id[1], bpe->by_rank[rank][2] = merged;
  return 0;
}

static int parse_merges(td_bpe *bpe, const td_token_map *m, const char *text, size_t len,
                        const char *path, char *err, size_t errlen) {
  if (len < 1 || text[0] != '#') {
    td_errorf(err, errlen, "%s: line 1 should be the \"#version\" header of a merges file", path);
    return -1;
  }
  const char *end = text + len, *p = memchr(text, '\n', len);
  p = p ? p + 1 : end; /* the first merge line */
  size_t lines = 0;
  for (const char *q = p; q < end; q++) lines += *q == '\n';
  for (bpe->merge_bits = 4; ((size_t)1 << bpe->merge_bits) < 2 * (lines + 1);) bpe->merge_bits++;
  bpe->merges = td_malloc(sizeof *bpe->merges << bpe->merge_bits);
  memset(bpe->merges, 0xff, sizeof *bpe->merges << bpe->merge_bits);
  if (lines + 1 > INT32_MAX) {
    td_errorf(err, errlen, "%s: more than %d merges", path, INT32_MAX - 1);
    return -1;
  }
  bpe->n_ranks = (int32_t)lines + 1; /* the last line may lack its newline */
  bpe->by_rank = td_calloc(sizeof *bpe->by_rank * (size_t)bpe->n_ranks);
  char *scratch = td_malloc(2 * len);
  int rc = 0;
  size_t ln = 2;
  for (; p < end && !rc; ln++) { /* each line from p; the final newline may be missing */
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *e = nl ? nl : end;
    rc = add_merge(bpe, m, p, (size_t)(e - p), (int32_t)(ln - 2), ln, scratch, path, err, errlen);
    p = e + 1;
  }
  td_free(scratch);
  return rc;
}

static int load_merges(td_bpe *bpe, const td_token_map *m, const char *path, char *err,
                       size_t errlen) {
  size_t len;
  char *text = td_read_file(path, &len, err, errlen);
  if (!text) return -1;
  int rc = parse_merges(bpe, m, text, len, path, err, errlen);
  td_free(text);
  return rc;
}

static int compile_pattern(td_bpe *bpe, char *err, size_t errlen) {
  int code;
  PCRE2_SIZE at;
  /* Anchored: every position starts a piece (each character is white space, a
   * letter, a number or other), so pieces are matched back to back. */
  bpe->re = pcre2_compile((PCRE2_SPTR)k_pattern, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &code, &at, NULL);
  if (!bpe->re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(code, msg, sizeof msg);
    td_errorf(err, errlen, "GPT-2 pre-tokenizer pattern: PCRE2 (needs Unicode support): %s", msg);
    return -1;
  }
  bpe->jit = pcre2_jit_compile(bpe->re, PCRE2_JIT_COMPLETE) == 0;
  return 0;
}

td_bpe *td_bpe_load(const char *vocab_json_path, const char *merges_path, char *err,
                    size_t errlen) {
  td_bpe *bpe = td_calloc(sizeof *bpe);
  td_token_map map = {0};
  int rc = load_vocab(bpe, vocab_json_path, err, errlen);
  if (!rc) rc = build_token_map(&map, bpe, vocab_json_path, err, errlen);
  if (!rc) rc = find_special_tokens(bpe, &map, vocab_json_path, err, errlen);
  if (!rc) rc = load_merges(bpe, &map, merges_path, err, errlen);
  if (!rc) rc = compile_pattern(bpe, err, errlen);
  td_free(map.slots);
  if (rc) {
    td_bpe_free(bpe);
    return NULL;
  }
  return bpe;
}

void td_bpe_free(td_bpe *bpe) {
  if (!bpe) return;
  td_free(bpe->tok_off);
  td_free(bpe->tok_bytes);
  td_free(bpe->merges);
  td_free(bpe->by_rank);
  pcre2_code_free(bpe->re);
  td_free(bpe);
}

int32_t td_bpe_eod(const td_bpe *bpe) { return bpe->eod; }
int64_t td_bpe_vocab_size(const td_bpe *bpe) { return bpe->n_vocab; }

/* ------------------------------------------------------------------ worker */

/* Pieces up to this many bytes are cached: nearly every repeated piece is a word,
 * and long pieces (runs of CJK, digits) rarely repeat. When the table is full it
 * is emptied, so memory stays bounded on any corpus. */
#define TD_CACHE_MAX_PIECE 64
#define TD_CACHE_MIN_BITS 12
#define TD_CACHE_MAX_BITS 19 /* 512K slots, at most half of them used */

typedef struct {
  uint64_t hash;
  uint32_t key_off, key_len; /* key_len 0: free (cached pieces have >= 2 bytes) */
  uint32_t ids_off, ids_n;
} td_cache_slot;

/* A symbol of a piece: bytes [p, p + len) where p is its index (symbols are
 * contiguous byte ranges), so its neighbours are p + len and p - prev_len; a
 * token's bytes fit 16 bits (checked on load), and a symbol is 8 bytes. */
typedef struct {
  int32_t id; /* -1: merged into its left neighbour */
  uint16_t len, prev_len;
} td_sym;

/* A queued pair: the symbol at pos and its right neighbour, in the list of its
 * merge rank (next: the following entry of that list, or of the free list). */
typedef struct {
  uint32_t pos, next;
} td_entry;
#define TD_NO_ENTRY UINT32_MAX
/* Entries alive at once: the n - 1 first pairs and two per merge, at most. */
#define TD_MAX_PIECE ((size_t)(TD_NO_ENTRY - 1) / 3)

struct td_bpe_worker {
  const td_bpe *bpe;
  pcre2_match_data *md;
  /* piece cache */
  td_cache_slot *slots;
  int bits;
  size_t used;
  char *keys;
  size_t keys_n, keys_cap;
  int32_t *ids;
  size_t ids_n, ids_cap;
  /* bpe_piece's queue: a list of entries per merge rank (head[rank]), and a
   * two-level bitmap of the ranks whose list is not empty (bit r of rank_bits,
   * bit r / 64 of word_bits), so the lowest rank is found in a few words */
  uint32_t *head;
  uint64_t *rank_bits, *word_bits;
  size_t n_rank_words, n_word_words;
  td_entry *pool; /* entries; the free ones are a list from free_entry */
  size_t pool_n, pool_cap;
  uint32_t free_entry;
  uint32_t round_rank, round_next; /* merge_round's rank, and its entries not yet read */
  /* bpe_piece's symbols, sized for the longest piece so far (a long one is
   * released after use) */
  td_sym *sym;
  size_t piece_cap;
  int32_t piece_n; /* bytes of the piece in sym */
};

/* Grow a td_malloc'ed array to hold at least need elements, keeping the first used. */
static void *grow(void *p, size_t *cap, size_t need, size_t used, size_t elem) {
  if (need <= *cap) return p;
  size_t c = *cap ? *cap : 64;
  while (c < need) c *= 2;
  void *q = td_malloc(c * elem);
  if (used) memcpy(q, p, used * elem);
  td_free(p);
  *cap = c;
  return q;
}

static void cache_alloc(td_bpe_worker *w, int bits) {
  w->bits = bits;
  w->slots = td_calloc(sizeof *w->slots << bits);
}

td_bpe_worker *td_bpe_worker_new(const td_bpe *bpe) {
  td_bpe_worker *w = td_calloc(sizeof *w);
  w->bpe = bpe;
  w->md = pcre2_match_data_create_from_pattern(bpe->re, NULL);
  TD_CHECK(w->md != NULL, "out of memory for PCRE2 match data");
  cache_alloc(w, TD_CACHE_MIN_BITS);
  size_t ranks = bpe->n_ranks ? (size_t)bpe->n_ranks : 1;
  w->head = td_malloc(ranks * sizeof *w->head);
  memset(w->head, 0xff, ranks * sizeof *w->head);
  w->n_rank_words = (ranks + 63) / 64, w->n_word_words = (w->n_rank_words + 63) / 64;
  w->rank_bits = td_calloc(w->n_rank_words * sizeof *w->rank_bits);
  w->word_bits = td_calloc(w->n_word_words * sizeof *w->word_bits);
  w->free_entry = w->round_next = TD_NO_ENTRY;
  return w;
}

void td_bpe_worker_free(td_bpe_worker *w) {
  if (!w) return;
  pcre2_match_data_free(w->md);
  void *bufs[] = {w->slots, w->keys, w->ids, w->sym, w->head, w->rank_bits, w->word_bits, w->pool};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) td_free(bufs[i]);
  td_free(w);
}

/* ------------------------------------------------------------------ BPE of one piece
 * encoder.py's bpe(): while some adjacent pair has a merge, take the lowest rank
 * and merge each of its non-overlapping occurrences left to right. Here every
 * adjacent pair with a merge is queued in the list of its rank when it appears;
 * a round takes the lowest non-empty rank's whole list (pairs queued meanwhile
 * wait for a later round, as in encoder.py: a round cannot create a pair of its
 * own rank, the merged token being longer than either part) and applies the
 * entries still valid. Occurrences of a pair (A, B) with A != B cannot overlap,
 * so their order does not matter; for (A, A) a run of A's is merged from its
 * left end, pairwise, as encoder.py's scan does. A pair that changed since it
 * was queued is skipped (ids only grow longer, so equal ids mean the same two
 * symbols). Each round costs its entries plus a few bitmap words, so a piece of
 * n bytes takes O(n) entries of 8 bytes and 12 bytes of symbols per byte, and
 * time linear in the merges applied: a 30 MB word is one piece like any other. */

static void mark_rank(td_bpe_worker *w, uint32_t r) {
  w->rank_bits[r / 64] |= (uint64_t)1 << (r % 64);
  w->word_bits[r / 4096] |= (uint64_t)1 << (r / 64 % 64);
}

static void unmark_rank(td_bpe_worker *w, uint32_t r) {
  uint64_t *word = &w->rank_bits[r / 64];
  *word &= ~((uint64_t)1 << (r % 64));
  if (!*word) w->word_bits[r / 4096] &= ~((uint64_t)1 << (r / 64 % 64));
}

/* The lowest rank with a non-empty list, or -1. */
static int64_t lowest_rank(const td_bpe_worker *w) {
  for (size_t t = 0; t < w->n_word_words; t++)
    if (w->word_bits[t]) {
      size_t word = t * 64 + (size_t)__builtin_ctzll(w->word_bits[t]);
      return (int64_t)(word * 64 + (size_t)__builtin_ctzll(w->rank_bits[word]));
    }
  return -1;
}

static int pair_is(const td_bpe_worker *w, int32_t p, int32_t a, int32_t b);

static int run_start(const td_bpe_worker *w, int32_t p, int32_t a);

/* The entries of list *head whose pair is still rank's (with runs_only, and
 * starts a run of (a, a): merge_round), relinked; the others freed. Returns how
 * many were freed. */
static size_t filter_list(td_bpe_worker *w, uint32_t *head, uint32_t rank, int runs_only) {
  const int32_t *m = w->bpe->by_rank[rank];
  size_t freed = 0;
  for (uint32_t *link = head; *link != TD_NO_ENTRY;) {
    uint32_t e = *link;
    int32_t p = (int32_t)w->pool[e].pos;
    if (pair_is(w, p, m[0], m[1]) && (!runs_only || run_start(w, p, m[0]))) {
      link = &w->pool[e].next;
    } else {
      *link = w->pool[e].next;
      w->pool[e].next = w->free_entry, w->free_entry = e, freed++;
    }
  }
  return freed;
}

/* A full pool: first drop the entries of pairs that changed since they were
 * queued (every list, and what is left of the round's), so the pool keeps about
 * one entry per live pair instead of growing with every merge; grow it when
 * that frees less than a quarter. */
static void make_room(td_bpe_worker *w) {
  size_t freed = 0;
  for (size_t word = 0; word < w->n_rank_words; word++)
    for (uint64_t bits = w->rank_bits[word]; bits; bits &= bits - 1) {
      uint32_t r = (uint32_t)(word * 64 + (size_t)__builtin_ctzll(bits));
      freed += filter_list(w, &w->head[r], r, 0);
      if (w->head[r] == TD_NO_ENTRY) unmark_rank(w, r);
    }
  if (w->round_next != TD_NO_ENTRY) freed += filter_list(w, &w->round_next, w->round_rank, 0);
  if (4 * freed < w->pool_cap)
    w->pool = grow(w->pool, &w->pool_cap, w->pool_cap + 1, w->pool_n, sizeof *w->pool);
}

static void push_entry(td_bpe_worker *w, uint32_t rank, uint32_t pos) {
  if (w->free_entry == TD_NO_ENTRY && w->pool_n == w->pool_cap) make_room(w);
  uint32_t e = w->free_entry;
  if (e != TD_NO_ENTRY)
    w->free_entry = w->pool[e].next;
  else
    e = (uint32_t)w->pool_n++;
  w->pool[e] = (td_entry){pos, w->head[rank]};
  if (w->head[rank] == TD_NO_ENTRY) mark_rank(w, rank);
  w->head[rank] = e;
}

/* The symbols after and before symbol p (a live one), or -1. */
static inline int32_t next_of(const td_bpe_worker *w, int32_t p) {
  int32_t q = p + w->sym[p].len;
  return q < w->piece_n ? q : -1;
}
static inline int32_t prev_of(const td_bpe_worker *w, int32_t p) {
  return p ? p - w->sym[p].prev_len : -1;
}

/* Queue the pair (symbol pos, its right neighbour) if the merges have it. */
static void queue_pair(td_bpe_worker *w, int32_t pos) {
  int32_t r = pos < 0 ? -1 : next_of(w, pos), merged;
  if (r < 0) return;
  int32_t rank = merge_rank(w->bpe, w->sym[pos].id, w->sym[r].id, &merged);
  if (rank >= 0) push_entry(w, (uint32_t)rank, (uint32_t)pos);
}

/* Symbol p takes in its right neighbour as token `merged`; the pairs on either
 * side are new. */
static void merge_at(td_bpe_worker *w, int32_t p, int32_t merged) {
  td_sym *s = w->sym;
  int32_t r = next_of(w, p);
  s[p].id = merged;
  s[p].len = (uint16_t)(s[p].len + s[r].len); /* a token's length: fits (td_bpe_load) */
  s[r].id = -1;
  int32_t q = next_of(w, p);
  if (q >= 0) s[q].prev_len = s[p].len;
  queue_pair(w, prev_of(w, p));
  queue_pair(w, p);
}

/* Is the pair at p still (a, b)? */
static int pair_is(const td_bpe_worker *w, int32_t p, int32_t a, int32_t b) {
  int32_t r = w->sym[p].id == a ? next_of(w, p) : -1;
  return r >= 0 && w->sym[r].id == b;
}

/* Is symbol p (an a) the first of its run of a's? */
static int run_start(const td_bpe_worker *w, int32_t p, int32_t a) {
  int32_t q = prev_of(w, p);
  return q < 0 || w->sym[q].id != a;
}

/* A run of a's from its first, p: merged pairwise from the left, as encoder.py's
 * scan does (an odd a is left at its end). */
static void merge_run(td_bpe_worker *w, int32_t p, int32_t a, int32_t merged) {
  for (; p >= 0 && pair_is(w, p, a, a); p = next_of(w, p)) merge_at(w, p, merged);
}

/* One round: the whole list of `rank`, its valid entries applied (the list
 * being read is round_next, which make_room may filter meanwhile). For (a, a),
 * the entries are first reduced to the runs' first pairs (each run's is in the
 * list: it is a pair of this rank), so a long run merged at once does not
 * leave the rest of its entries waiting while its merges queue new ones. */
static void merge_round(td_bpe_worker *w, uint32_t rank) {
  const int32_t *m = w->bpe->by_rank[rank];
  w->round_rank = rank, w->round_next = w->head[rank];
  w->head[rank] = TD_NO_ENTRY;
  unmark_rank(w, rank);
  if (m[0] == m[1]) filter_list(w, &w->round_next, rank, 1);
  while (w->round_next != TD_NO_ENTRY) {
    uint32_t e = w->round_next;
    int32_t p = (int32_t)w->pool[e].pos;
    w->round_next = w->pool[e].next;
    w->pool[e].next = w->free_entry, w->free_entry = e;
    if (m[0] == m[1])
      merge_run(w, p, m[0], m[2]);
    else if (pair_is(w, p, m[0], m[1]))
      merge_at(w, p, m[2]);
  }
}

/* Scratch beyond this many symbols is released after its piece. */
#define TD_KEEP_PIECE ((size_t)1 << 16)

/* The BPE of the bytes p[0, n), 2 <= n <= TD_MAX_PIECE, left in w->sym: symbol
 * 0 onwards through next_of (symbol 0 never merges away). */
static void bpe_piece(td_bpe_worker *w, const unsigned char *p, size_t n) {
  if (n > w->piece_cap) {
    td_free(w->sym);
    w->piece_cap = n;
    w->sym = td_malloc(n * sizeof *w->sym);
  }
  for (size_t i = 0; i < n; i++) w->sym[i] = (td_sym){w->bpe->byte_id[p[i]], 1, i ? 1 : 0};
  w->piece_n = (int32_t)n;
  w->pool_n = 0, w->free_entry = w->round_next = TD_NO_ENTRY;
  if (w->pool_cap < n) { /* the first pairs at once: no doubling on a long piece */
    td_free(w->pool);
    w->pool_cap = n;
    w->pool = td_malloc(n * sizeof *w->pool);
  }
  for (size_t i = 0; i + 1 < n; i++) queue_pair(w, (int32_t)i);
  for (int64_t r; (r = lowest_rank(w)) >= 0;) merge_round(w, (uint32_t)r);
}

/* Release a long piece's scratch, so one 30 MB word does not hold its 600 MB
 * of symbols and entries for the rest of the run. */
static void trim_scratch(td_bpe_worker *w) {
  if (w->piece_cap > TD_KEEP_PIECE) td_free(w->sym), w->sym = NULL, w->piece_cap = 0;
  if (w->pool_cap > 3 * TD_KEEP_PIECE) td_free(w->pool), w->pool = NULL, w->pool_cap = 0;
}

/* ------------------------------------------------------------------ piece cache */

static td_cache_slot *cache_find(td_bpe_worker *w, const char *s, size_t n, uint64_t h) {
  size_t mask = ((size_t)1 << w->bits) - 1;
  for (size_t i = h >> (64 - w->bits);; i = (i + 1) & mask) {
    td_cache_slot *c = &w->slots[i];
    if (!c->key_len || (c->hash == h && c->key_len == n && !memcmp(w->keys + c->key_off, s, n)))
      return c;
  }
}

/* Make room for one more entry: double the table, or empty it at its limit. */
static void cache_make_room(td_bpe_worker *w) {
  if (2 * (w->used + 1) <= ((size_t)1 << w->bits)) return;
  td_cache_slot *old = w->slots;
  size_t n_old = (size_t)1 << w->bits;
  if (w->bits == TD_CACHE_MAX_BITS) {
    memset(old, 0, n_old * sizeof *old);
    w->used = w->keys_n = w->ids_n = 0;
    return;
  }
  cache_alloc(w, w->bits + 1);
  for (size_t i = 0; i < n_old; i++)
    if (old[i].key_len)
      *cache_find(w, w->keys + old[i].key_off, old[i].key_len, old[i].hash) = old[i];
  td_free(old);
}

static void cache_put(td_bpe_worker *w, const char *s, size_t n, uint64_t h, const int32_t *ids,
                      size_t k) {
  cache_make_room(w);
  td_cache_slot *c = cache_find(w, s, n, h);
  w->keys = grow(w->keys, &w->keys_cap, w->keys_n + n, w->keys_n, 1);
  w->ids = grow(w->ids, &w->ids_cap, w->ids_n + k, w->ids_n, sizeof *w->ids);
  memcpy(w->keys + w->keys_n, s, n);
  memcpy(w->ids + w->ids_n, ids, k * sizeof *ids);
  *c = (td_cache_slot){h, (uint32_t)w->keys_n, (uint32_t)n, (uint32_t)w->ids_n, (uint32_t)k};
  w->keys_n += n, w->ids_n += k, w->used++;
}

/* ------------------------------------------------------------------ encode / decode */

static void append_ids(const int32_t *src, size_t k, int32_t **ids, size_t *n, size_t *cap) {
  *ids = grow(*ids, cap, *n + k, *n, sizeof **ids);
  memcpy(*ids + *n, src, k * sizeof *src);
  *n += k;
}

/* Append the ids of the symbols bpe_piece left (counted first: one growth). */
static void append_symbols(const td_bpe_worker *w, int32_t **ids, size_t *n, size_t *cap) {
  size_t k = 0;
  for (int32_t i = 0; i >= 0; i = next_of(w, i)) k++;
  *ids = grow(*ids, cap, *n + k, *n, sizeof **ids);
  for (int32_t i = 0; i >= 0; i = next_of(w, i)) (*ids)[(*n)++] = w->sym[i].id;
}

static void encode_piece(td_bpe_worker *w, const unsigned char *p, size_t len, int32_t **ids,
                         size_t *n, size_t *cap) {
  if (len == 1) {
    append_ids(&w->bpe->byte_id[p[0]], 1, ids, n, cap);
    return;
  }
  const char *s = (const char *)p;
  uint64_t h = 0;
  if (len <= TD_CACHE_MAX_PIECE) {
    h = hash_bytes(s, len);
    const td_cache_slot *c = cache_find(w, s, len, h);
    if (c->key_len) {
      append_ids(w->ids + c->ids_off, c->ids_n, ids, n, cap);
      return;
    }
  }
  size_t first = *n;
  bpe_piece(w, p, len);
  append_symbols(w, ids, n, cap);
  if (len <= TD_CACHE_MAX_PIECE) cache_put(w, s, len, h, *ids + first, *n - first);
  trim_scratch(w);
}

int td_bpe_encode(td_bpe_worker *w, const char *text, size_t len, int32_t **ids, size_t *n,
                  size_t *cap, char *err, size_t errlen) {
  size_t bad;
  const char *why;
  if (len > INT32_MAX) { /* symbol positions in bpe_piece are int32 */
    td_errorf(err, errlen, "text of %zu bytes: at most %d bytes per call", len, INT32_MAX);
    return -1;
  }
  if (td_utf8_validate(text, len, &bad, &why)) {
    td_errorf(err, errlen, "invalid UTF-8 at byte offset %zu (byte 0x%02X): %s", bad,
            (unsigned char)text[bad], why);
    return -1;
  }
  const unsigned char *t = (const unsigned char *)text;
  PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
  size_t start = *n;
  for (size_t pos = 0; pos < len; pos = ov[1]) {
    /* UTF-8 was checked above: skip PCRE2's own check on every call. */
    int rc = w->bpe->jit ? pcre2_jit_match(w->bpe->re, t, len, pos, 0, w->md, NULL)
                         : pcre2_match(w->bpe->re, t, len, pos, PCRE2_NO_UTF_CHECK, w->md, NULL);
    TD_CHECK(rc > 0 && ov[0] == pos && ov[1] > pos, "pre-tokenizer: no piece at byte %zu (%d)", pos,
             rc);
    if (ov[1] - pos > TD_MAX_PIECE) {
      *n = start; /* nothing appended */
      return td_errorf(err, errlen, "a pre-token of %zu bytes at byte offset %zu: at most %zu",
                       (size_t)(ov[1] - pos), pos, TD_MAX_PIECE);
    }
    encode_piece(w, t + pos, ov[1] - pos, ids, n, cap);
  }
  return 0;
}

int td_bpe_decode(const td_bpe *bpe, const int32_t *ids, size_t n, char **out, size_t *len,
                  char *err, size_t errlen) {
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= bpe->n_vocab) {
      td_errorf(err, errlen, "token id %d at position %zu is outside the vocabulary (0..%lld)",
              ids[i], i, (long long)bpe->n_vocab - 1);
      return -1;
    }
    total += tok_len(bpe, ids[i]);
  }
  char *s = td_malloc(total + 1);
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    memcpy(s + at, tok_ptr(bpe, ids[i]), tok_len(bpe, ids[i]));
    at += tok_len(bpe, ids[i]);
  }
  s[at] = 0;
  *out = s;
  *len = at;
  return 0;
}
