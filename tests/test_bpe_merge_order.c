/* The BPE merge loop (bpe_tokenizer.c's bpe_piece: a queue per merge rank,
 * runs of equal symbols merged from their left end) against encoder.py's bpe()
 * written out plainly: while some adjacent pair has a merge, take the lowest
 * rank and merge its non-overlapping occurrences left to right. Over synthetic
 * vocabularies (every byte, plus tokens of the letters a, b, c made by random
 * merges) whose ranks come in BPE order or shuffled (a merges file may list a
 * merge before the merges of its parts), on random words, on runs ("aaaa...",
 * "abab...") where the order of equal pairs matters, and on words long enough to
 * make the queue reclaim stale entries. A word of letters is one pre-token. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/files.h"
#include "base/mem.h"
#include "base/rng.h"
#include "check.h"
#include "data/bpe_tokenizer.h"

#define MAX_TOKENS 1024
#define MAX_TOKEN_LEN 12

typedef struct {
  char text[MAX_TOKENS][MAX_TOKEN_LEN + 1]; /* token bytes; id = index */
  int n_tokens;
  int32_t merge[MAX_TOKENS][3]; /* by rank: left, right, merged */
  int n_merges;
  int16_t rank[MAX_TOKENS][MAX_TOKENS]; /* of (left, right), -1: none */
} vocab;

static uint64_t g_draw;
static uint32_t draw(uint32_t n) { return td_rng_u32(tst_seed(), 77, g_draw++) % n; }

static int find_token(const vocab *v, const char *s) {
  for (int i = 0; i < v->n_tokens; i++)
    if (!strcmp(v->text[i], s)) return i;
  return -1;
}

/* GPT-2's bytes_to_unicode: byte b as vocab.json writes it (UTF-8). */
static void alphabet(int b, char *out) {
  int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  int cp = b;
  if (!printable) {
    int k = 0;
    for (int c = 0; c < b; c++)
      k += !((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE);
    cp = 0x100 + k;
  }
  if (cp < 0x80) out[0] = (char)cp, out[1] = 0;
  else out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3F)), out[2] = 0;
}

/* Every byte (ids 0..255, "<|endoftext|>" would be one more: added last), then
 * n_merges random merges of letter tokens; shuffled: ranks in random order. */
static void make_vocab(vocab *v, int n_merges, int shuffled) {
  memset(v, 0, sizeof *v);
  memset(v->rank, 0xff, sizeof v->rank);
  for (int b = 0; b < 256; b++) v->text[b][0] = (char)b;
  v->n_tokens = 256;
  const int letters[3] = {'a', 'b', 'c'};
  int pool[MAX_TOKENS], n_pool = 3;
  for (int k = 0; k < 3; k++) pool[k] = letters[k];
  for (int tries = 0; v->n_merges < n_merges && tries < 100000; tries++) {
    int x = pool[draw((uint32_t)n_pool)], y = pool[draw((uint32_t)n_pool)];
    char m[2 * MAX_TOKEN_LEN + 1];
    snprintf(m, sizeof m, "%s%s", v->text[x], v->text[y]);
    if (v->rank[x][y] >= 0 || strlen(m) > MAX_TOKEN_LEN || v->n_tokens >= MAX_TOKENS - 1) continue;
    int id = find_token(v, m);
    if (id < 0) {
      id = v->n_tokens++;
      strcpy(v->text[id], m);
      pool[n_pool++] = id;
    }
    v->rank[x][y] = (int16_t)v->n_merges;
    v->merge[v->n_merges][0] = x, v->merge[v->n_merges][1] = y, v->merge[v->n_merges][2] = id;
    v->n_merges++;
  }
  for (int i = v->n_merges - 1; shuffled && i > 0; i--) { /* Fisher-Yates over the ranks */
    int j = (int)draw((uint32_t)i + 1);
    int32_t t[3];
    memcpy(t, v->merge[i], sizeof t), memcpy(v->merge[i], v->merge[j], sizeof t);
    memcpy(v->merge[j], t, sizeof t);
  }
  for (int r = 0; r < v->n_merges; r++) v->rank[v->merge[r][0]][v->merge[r][1]] = (int16_t)r;
}

static void write_files(const vocab *v, const char *dir, char *vpath, char *mpath) {
  cJSON *o = cJSON_CreateObject();
  for (int i = 0; i < v->n_tokens; i++) {
    char key[4 * MAX_TOKEN_LEN + 1] = "";
    if (i < 256) /* a byte token (byte 0 is an empty C string) */
      alphabet(i, key);
    else
      for (const char *c = v->text[i]; *c; c++) alphabet((unsigned char)*c, key + strlen(key));
    cJSON_AddNumberToObject(o, key, i);
  }
  cJSON_AddNumberToObject(o, "<|endoftext|>", v->n_tokens);
  char *text = cJSON_PrintUnformatted(o);
  sprintf(vpath, "%s/vocab.json", dir);
  FILE *f = fopen(vpath, "w");
  fputs(text, f), fclose(f);
  free(text), cJSON_Delete(o);
  sprintf(mpath, "%s/merges.txt", dir);
  f = fopen(mpath, "w");
  fputs("#version: 0.2\n", f);
  for (int r = 0; r < v->n_merges; r++) /* letters stand for themselves in the alphabet */
    fprintf(f, "%s %s\n", v->text[v->merge[r][0]], v->text[v->merge[r][1]]);
  fclose(f);
}

/* encoder.py's bpe() over ids: out gets the ids of word s[0, n); returns the count. */
static size_t reference(const vocab *v, const char *s, size_t n, int32_t *out) {
  for (size_t i = 0; i < n; i++) out[i] = (unsigned char)s[i];
  while (n > 1) {
    int best = -1;
    for (size_t i = 0; i + 1 < n; i++) {
      int r = v->rank[out[i]][out[i + 1]];
      if (r >= 0 && (best < 0 || r < best)) best = r;
    }
    if (best < 0) break;
    const int32_t *m = v->merge[best];
    size_t k = 0;
    for (size_t i = 0; i < n; k++)
      if (i + 1 < n && out[i] == m[0] && out[i + 1] == m[1]) out[k] = m[2], i += 2;
      else out[k] = out[i], i += 1;
    n = k;
  }
  return n;
}

typedef struct {
  const vocab *v;
  td_bpe_worker *w;
  int32_t *ids, *want;
  size_t cap;
  int bad; /* words that differed (each reported once up to a few) */
} checker;

static void check_word(checker *c, const char *s, size_t n, const char *what) {
  char err[256];
  size_t got = 0;
  if (td_bpe_encode(c->w, s, n, &c->ids, &got, &c->cap, err, sizeof err)) {
    CHECK(0, "%s: %s", what, err);
    return;
  }
  size_t want = reference(c->v, s, n, c->want);
  if (got == want && !memcmp(c->ids, c->want, want * sizeof *c->want)) return;
  if (c->bad++ < 3)
    CHECK(0, "%s (%zu bytes '%.40s'): %zu ids, the reference %zu", what, n, s, got, want);
}

static void run_words(checker *c, char *buf, const char *label) {
  static const char *const units[] = {"a", "ab", "aab", "abc", "ba", "abb", "cab"};
  for (int k = 0; k < 300; k++) { /* random words */
    size_t n = 1 + draw(300);
    for (size_t i = 0; i < n; i++) buf[i] = (char)('a' + draw(3));
    check_word(c, buf, n, label);
  }
  for (size_t u = 0; u < sizeof units / sizeof *units; u++) /* runs of one unit */
    for (size_t reps = 1; reps < 3000; reps = reps < 80 ? reps + 1 : reps * 3) {
      size_t n = 0, len = strlen(units[u]);
      for (size_t r = 0; r < reps; r++) memcpy(buf + n, units[u], len), n += len;
      check_word(c, buf, n, label);
    }
  for (int k = 0; k < 20; k++) { /* runs of a's between other letters */
    size_t n = 0;
    while (n < 2000) {
      size_t run = 1 + draw(40);
      memset(buf + n, 'a', run), n += run;
      buf[n++] = (char)('b' + draw(2));
    }
    check_word(c, buf, n, label);
  }
  size_t n = 200000; /* long: the queue reclaims stale entries */
  for (size_t i = 0; i < n; i++) buf[i] = (char)('a' + draw(i % 7 ? 2 : 3));
  check_word(c, buf, n, label);
}

int main(void) {
  char dir[] = "/tmp/td_bpe_order_XXXXXX", vpath[256], mpath[256], err[512];
  if (!mkdtemp(dir)) return 1;
  static vocab v;
  char *buf = td_malloc(400000);
  const struct {
    int merges, shuffled;
  } sets[] = {{40, 0}, {300, 0}, {40, 1}, {300, 1}};
  for (size_t s = 0; s < sizeof sets / sizeof *sets; s++) {
    make_vocab(&v, sets[s].merges, sets[s].shuffled);
    write_files(&v, dir, vpath, mpath);
    td_bpe *bpe = td_bpe_load(vpath, mpath, err, sizeof err);
    CHECK(bpe != NULL, "synthetic vocabulary loads: %s", bpe ? "" : err);
    if (!bpe) continue;
    checker c = {&v, td_bpe_worker_new(bpe), NULL, td_malloc(400000 * sizeof(int32_t)), 0, 0};
    char label[96];
    snprintf(label, sizeof label, "%d merges%s", v.n_merges, sets[s].shuffled ? ", shuffled ranks" : "");
    run_words(&c, buf, label);
    CHECK(c.bad == 0, "%s: every word merges as encoder.py does", label);
    td_free(c.ids), td_free(c.want);
    td_bpe_worker_free(c.w);
    td_bpe_free(bpe);
  }
  unlink(vpath), unlink(mpath), rmdir(dir);
  td_free(buf);
  return tst_finish();
}
