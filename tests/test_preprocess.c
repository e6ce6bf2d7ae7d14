/* data/preprocess: Megatron's reference output byte for byte with 1 to 3 workers and
 * batches small enough that every worker gets many; the KJV corpus the same with 1
 * and 4 workers and its README's counts; the first bad line in input order is the
 * error, with nothing written and an older output untouched; skipped bad lines
 * (counted, the first ones shown) leave what a clean input gives, across several
 * keys; Megatron's progress line; an empty input, a last line without newline and
 * CRLF line ends. */
#define _GNU_SOURCE /* mkdtemp, open_memstream */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/files.h"
#include "base/mem.h"
#include "check.h"
#include "data/indexed_dataset.h"
#include "data/partition.h"
#include "data/preprocess.h"

#define REF_DIR TD_SOURCE_DIR "/tests/data/megatron_ref"
#define KJV_PATH TD_SOURCE_DIR "/data/corpus/kjv.jsonl"
#define GOOD "{\"text\": \"In the beginning\", \"title\": \"Genesis\"}\n"

static td_bpe *g_bpe;
static char g_tmp[256];
static const char *const k_text[] = {"text"};

/* g_tmp/name, valid for the next 31 calls. */
static const char *path(const char *name) {
  static char p[32][512];
  static int next;
  next = (next + 1) % 32;
  snprintf(p[next], sizeof p[next], "%s/%s", g_tmp, name);
  return p[next];
}

static td_preprocess_opts opts(const char *input, const char *prefix, int workers, size_t batch) {
  return (td_preprocess_opts){.bpe = g_bpe,
                              .input = input,
                              .output_prefix = prefix,
                              .json_keys = k_text,
                              .n_keys = 1,
                              .append_eod = 1,
                              .workers = workers,
                              .batch_bytes = batch};
}

static int run(const td_preprocess_opts *o, td_preprocess_stats *st, char *err, size_t errlen) {
  err[0] = 0;
  return td_preprocess(o, st, err, errlen);
}

static int same_file(const char *a, const char *b) {
  size_t na, nb;
  char err[512];
  char *x = td_read_file(a, &na, err, sizeof err), *y = td_read_file(b, &nb, err, sizeof err);
  int same = x && y && na == nb && !memcmp(x, y, na);
  td_free(x), td_free(y);
  return same;
}

/* PREFIX.bin and PREFIX.idx of a and b are identical. */
static int same_dataset(const char *a, const char *b) {
  char pa[600], pb[600];
  int same = 1;
  for (int k = 0; k < 2; k++) {
    snprintf(pa, sizeof pa, "%s.%s", a, k ? "idx" : "bin");
    snprintf(pb, sizeof pb, "%s.%s", b, k ? "idx" : "bin");
    same &= same_file(pa, pb);
  }
  return same;
}

/* No PREFIX.bin, .idx, nor their temporaries. */
static int nothing_written(const char *prefix) {
  const char *ext[] = {".bin", ".idx", ".bin.tmp", ".idx.tmp"};
  char p[600];
  for (int k = 0; k < 4; k++) {
    snprintf(p, sizeof p, "%s%s", prefix, ext[k]);
    if (td_path_exists(p))
      return 0;
  }
  return 1;
}

static void write_text(const char *file, const char *text) {
  char err[512];
  if (td_write_file(file, text, strlen(text), err, sizeof err))
    CHECK(0, "%s", err);
}

/* n lines of GOOD, with `bad` at the 1-based line numbers in bad_at (0-terminated). */
static char *lines_with(int n, const int *bad_at, const char *bad) {
  char *s = td_malloc((size_t)n * (strlen(GOOD) + strlen(bad) + 1) + 1);
  size_t len = 0;
  for (int l = 1; l <= n; l++) {
    int is_bad = 0;
    for (const int *b = bad_at; *b; b++)
      is_bad |= *b == l;
    len += (size_t)sprintf(s + len, "%s", is_bad ? bad : GOOD);
  }
  return s;
}

/* ------------------------------------------------------------------ tests */

static void test_reference(void) {
  const size_t batches[] = {0, 700};
  char err[1024];
  for (int w = 1; w <= 3; w++)
    for (int b = 0; b < 2; b++) {
      td_preprocess_opts o = opts(REF_DIR "/input.jsonl", path("ref"), w, batches[b]);
      td_preprocess_stats st;
      int rc = run(&o, &st, err, sizeof err);
      CHECK(rc == 0 && st.documents == 312 && st.tokens == 25452 &&
                same_dataset(path("ref_text_document"), REF_DIR "/ref_text_document"),
            "reference input, %d workers, batches of %zu bytes: Megatron's bytes %s", w, batches[b],
            err);
    }
}

static void test_kjv(void) {
  char err[1024];
  td_preprocess_stats st[2];
  const int workers[2] = {1, 4};
  for (int k = 0; k < 2; k++) {
    td_preprocess_opts o = opts(KJV_PATH, path(k ? "kjv4" : "kjv1"), workers[k], 1 << 16);
    int rc = run(&o, &st[k], err, sizeof err);
    CHECK(rc == 0 && st[k].documents == 1107 && st[k].tokens == 1009497 && st[k].bytes == 4067523 &&
              st[k].bad_lines == 0,
          "KJV, %d workers: %lld documents, %lld tokens (README: 1107, 1009497) %s", workers[k],
          (long long)st[k].documents, (long long)st[k].tokens, err);
  }
  CHECK(same_dataset(path("kjv1_text_document"), path("kjv4_text_document")),
        "KJV: the same files with 1 and 4 workers");
}

/* The first bad line in input order is the error, though later batches fail first. */
static void test_first_bad_line(void) {
  const int bad_at[] = {60, 150, 190, 0};
  char *text = lines_with(200, bad_at, "{\"text\": \"no end}\n");
  write_text(path("bad.jsonl"), text);
  char err[1024];
  td_preprocess_stats st;
  td_preprocess_opts good = opts(REF_DIR "/input.jsonl", path("keep"), 1, 0);
  CHECK(run(&good, &st, err, sizeof err) == 0, "an earlier good output %s", err);
  td_preprocess_opts o = opts(path("bad.jsonl"), path("keep"), 3, 300);
  int rc = run(&o, &st, err, sizeof err);
  CHECK(rc == -1 && strstr(err, "bad.jsonl line 60: malformed JSON at byte offset 9"),
        "the first bad line is the error: %s", err);
  CHECK(same_dataset(path("keep_text_document"), REF_DIR "/ref_text_document"),
        "the earlier output with that prefix is untouched");
  o.output_prefix = path("fresh");
  rc = run(&o, &st, err, sizeof err);
  CHECK(rc == -1 && nothing_written(path("fresh_text_document")),
        "a failed run leaves no file behind");
  td_free(text);
}

static int count(const char *haystack, const char *needle) {
  int n = 0;
  for (const char *p = haystack; (p = strstr(p, needle)); p++)
    n++;
  return n;
}

/* 15 bad lines of several kinds, skipped: the first 10 shown, all counted. */
static void test_skip(void) {
  const int bad_at[] = {3, 4, 9, 20, 21, 22, 30, 41, 42, 50, 61, 70, 80, 90, 100, 0};
  char *mixed = lines_with(100, bad_at, "{\"title\": \"no text\"}\n");
  const int none[] = {0};
  char *clean = lines_with(100 - 15, none, "");
  write_text(path("mixed.jsonl"), mixed);
  write_text(path("clean.jsonl"), clean);
  char err[1024], *log = NULL;
  size_t log_len = 0;
  td_preprocess_stats st;
  td_preprocess_opts o = opts(path("mixed.jsonl"), path("skipped"), 2, 200);
  o.skip_bad_lines = 1;
  o.log = open_memstream(&log, &log_len);
  int rc = run(&o, &st, err, sizeof err);
  fclose(o.log);
  CHECK(rc == 0 && st.bad_lines == 15 && st.documents == 85, "15 bad lines skipped: %lld %s",
        (long long)st.bad_lines, err);
  int shown = count(log, "(line skipped)") == 10 && count(log, "further bad lines") == 1 &&
              strstr(log, "mixed.jsonl line 3: no key \"text\" (line skipped)") &&
              strstr(log, "mixed.jsonl line 50: no key");
  CHECK(shown, "the first 10 are shown, then a note %s", shown ? "" : log);
  td_preprocess_opts c = opts(path("clean.jsonl"), path("clean"), 1, 0);
  CHECK(run(&c, &st, err, sizeof err) == 0 &&
            same_dataset(path("skipped_text_document"), path("clean_text_document")),
        "the output equals that of the clean lines %s", err);
  free(log); /* open_memstream's buffer comes from malloc */
  td_free(mixed), td_free(clean);
}

/* A line bad for one key is left out of every output, so they stay aligned. */
static void test_keys(void) {
  const char *keys[] = {"text", "title"};
  write_text(path("keys.jsonl"), GOOD "{\"text\": \"no title\"}\n" GOOD);
  write_text(path("keys_clean.jsonl"), GOOD GOOD);
  char err[1024];
  td_preprocess_stats st;
  td_preprocess_opts o = opts(path("keys.jsonl"), path("k"), 2, 0), c = o;
  o.json_keys = c.json_keys = keys, o.n_keys = c.n_keys = 2, o.skip_bad_lines = 1;
  c.input = path("keys_clean.jsonl"), c.output_prefix = path("kc");
  int rc = run(&o, &st, err, sizeof err);
  rc |= st.bad_lines != 1 || st.documents != 2 || run(&c, &st, err, sizeof err);
  CHECK(rc == 0, "two keys, a line without the second skipped %s", err);
  CHECK(same_dataset(path("k_text_document"), path("kc_text_document")) &&
            same_dataset(path("k_title_document"), path("kc_title_document")),
        "both outputs leave the line out");
  char *name = td_preprocess_output_name("out/x", "title");
  CHECK(!strcmp(name, "out/x_title_document"), "output name %s", name);
  td_free(name);
}

static void test_progress(void) {
  char err[1024], *log = NULL;
  size_t log_len = 0;
  td_preprocess_stats st;
  td_preprocess_opts o = opts(REF_DIR "/input.jsonl", path("progress"), 2, 2000);
  o.log_interval = 100;
  o.log = open_memstream(&log, &log_len);
  int rc = run(&o, &st, err, sizeof err);
  fclose(o.log);
  int ok = rc == 0 && count(log, " docs/s, ") == 3 && count(log, " MB/s).\n") == 3 &&
           strstr(log, "Processed 100 documents (") && strstr(log, "\nProcessed 300 documents (");
  CHECK(ok, "Megatron's progress line every 100 documents %s", ok ? "" : log);
  free(log);
}

static void test_line_ends(void) {
  char err[1024];
  td_preprocess_stats st;
  write_text(path("empty.jsonl"), "");
  td_preprocess_opts o = opts(path("empty.jsonl"), path("empty"), 2, 0);
  td_indexed_dataset ds;
  int rc = run(&o, &st, err, sizeof err) || st.documents != 0 ||
           td_indexed_dataset_open(&ds, path("empty_text_document"), err, sizeof err);
  CHECK(!rc && ds.n_sequences == 0 && ds.n_document_indices == 1,
        "an empty input gives an empty dataset %s", err);
  if (!rc)
    td_indexed_dataset_close(&ds);
  const char *forms[] = {GOOD GOOD, GOOD "{\"text\": \"In the beginning\"}",
                         "{\"text\": \"In the beginning\"}\r\n" GOOD};
  write_text(path("lf.jsonl"), forms[0]);
  td_preprocess_opts lf = opts(path("lf.jsonl"), path("lf"), 1, 0);
  CHECK(run(&lf, &st, err, sizeof err) == 0, "LF input %s", err);
  for (int k = 1; k < 3; k++) {
    write_text(path("form.jsonl"), forms[k]);
    td_preprocess_opts f = opts(path("form.jsonl"), path("form"), 1, 0);
    int rc = run(&f, &st, err, sizeof err);
    CHECK(rc == 0 && st.documents == 2 &&
              same_dataset(path("form_text_document"), path("lf_text_document")),
          "%s: the same as LF lines %s", k == 1 ? "no final newline" : "CRLF", err);
  }
}
/* Partition file names split the input as Python's os.path.splitext does: at the
 * last dot of the last component, leading dots excluded. */
static void test_partition_names(void) {
  static const char *const cases[][2] = {
      {"data/in.jsonl", "data/in_2.jsonl"}, {"a.tar.gz", "a.tar_2.gz"},
      {"dir.x/file", "dir.x/file_2"},       {".hidden", ".hidden_2"},
      {"d/..x", "d/..x_2"},                 {"d/.a.json", "d/.a_2.json"},
      {"d/*.jsonl", "d/*_2.jsonl"},         {"noext", "noext_2"}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char *got = td_partition_file_name(cases[i][0], 2);
    CHECK(!strcmp(got, cases[i][1]), "partition 2 of %s: %s, want %s", cases[i][0], got,
          cases[i][1]);
    td_free(got);
  }
}

int main(void) {
  char err[512];
  test_partition_names();
  snprintf(g_tmp, sizeof g_tmp, "/tmp/td_test_preprocess_XXXXXX");
  if (!mkdtemp(g_tmp))
    return printf("mkdtemp failed\n"), 1;
  g_bpe = td_bpe_load(TD_SOURCE_DIR "/data/gpt2/vocab.json", TD_SOURCE_DIR "/data/gpt2/merges.txt",
                      err, sizeof err);
  CHECK(g_bpe != NULL, "load GPT-2 BPE: %s", g_bpe ? "ok" : err);
  if (g_bpe) {
    test_reference();
    test_kjv();
    test_first_bad_line();
    test_skip();
    test_keys();
    test_progress();
    test_line_ends();
    td_bpe_free(g_bpe);
  }
  td_remove_tree(g_tmp, err, sizeof err);
  return tst_finish();
}
