/* The GEMM choice cache (cpu_gemm_select.c, cpu_gemm_cache.c): a measured choice is
 * written to the file and read back by a later "run" (td_cpu_gemm_select_reset)
 * without measuring again; a corrupt file is ignored with one warning and
 * rewritten; a file from another machine is replaced; TRIDENT_GEMM_CACHE=off
 * writes nothing; a forced library, a small product and a call from inside a
 * parallel region measure nothing; a measurement that other load disturbed is not
 * kept; the default for what is not measured is the library that took the least
 * time over the measured classes; OpenBLAS runs kernels this CPU has (cpu_openblas.h). Every file lives in a fresh temporary directory, never in the user's
 * cache. TRIDENT_TEST_GEMM_RUNS=clean makes every timed run count as undisturbed,
 * so the outcome does not depend on this machine's load. */
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/mem.h"
#include "check.h"
#include "device/cpu/cpu_gemm.h"
#include "device/cpu/cpu_gemm_select.h"
#include "device/cpu/cpu_openblas.h"

static char g_dir[256], g_path[300];

/* A fp32 call of m x n x k (up to 32768 elements per operand); td_cpu_gemm_choose
 * reads its A and B when it measures, never writes its C. */
static td_matmul_desc desc(int64_t m, int64_t n, int64_t k) {
  static float dummy[128 * 256];
  td_matmul_desc g = {.m = m, .n = n, .k = k, .ab_dtype = TD_F32, .c_dtype = TD_F32,
                      .a = dummy, .lda = k, .b = dummy, .ldb = n, .c = dummy, .ldc = n,
                      .alpha = 1, .batch = 1};
  return g;
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  CHECK(f != NULL, "cannot write %s", path);
  if (f) fputs(text, f), fclose(f);
}

static cJSON *read_json(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return cJSON_Parse(buf);
}

/* The library the file records for the fp32 class m x n x k (no transposes), or -1. */
static int file_choice(int64_t m, int64_t n, int64_t k) {
  cJSON *root = read_json(g_path);
  int lib = -1;
  const cJSON *c;
  cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(root, "choices")) {
    if (cJSON_GetObjectItemCaseSensitive(c, "m")->valuedouble != (double)m ||
        cJSON_GetObjectItemCaseSensitive(c, "n")->valuedouble != (double)n ||
        cJSON_GetObjectItemCaseSensitive(c, "k")->valuedouble != (double)k)
      continue;
    const char *name = cJSON_GetObjectItemCaseSensitive(c, "library")->valuestring;
    for (int l = 0; l < TD_GEMM_LIBRARIES; l++)
      if (!strcmp(name, td_gemm_library_name((td_gemm_library)l))) lib = l;
  }
  cJSON_Delete(root);
  return lib;
}

/* Rewrite the file's choice for m x n x k to lib. */
static void edit_choice(int64_t m, int64_t n, int64_t k, td_gemm_library lib) {
  cJSON *root = read_json(g_path);
  cJSON *c;
  cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(root, "choices")) {
    if (cJSON_GetObjectItemCaseSensitive(c, "m")->valuedouble == (double)m &&
        cJSON_GetObjectItemCaseSensitive(c, "n")->valuedouble == (double)n &&
        cJSON_GetObjectItemCaseSensitive(c, "k")->valuedouble == (double)k)
      cJSON_ReplaceItemInObjectCaseSensitive(c, "library",
                                             cJSON_CreateString(td_gemm_library_name(lib)));
  }
  char *text = cJSON_Print(root);
  write_text(g_path, text);
  cJSON_free(text);
  cJSON_Delete(root);
}

/* A new "run": the environment read again, no choice remembered. */
static void new_run(const char *cache, const char *fp32) {
  setenv("TRIDENT_GEMM_CACHE", cache, 1);
  if (fp32)
    setenv("TRIDENT_GEMM_FP32", fp32, 1);
  else
    unsetenv("TRIDENT_GEMM_FP32");
  td_cpu_gemm_select_reset();
}

static int exists(const char *path) { return access(path, F_OK) == 0; }

/* Run fn with stderr going to a file; returns what it printed (static buffer). */
static const char *captured_stderr(void (*fn)(void)) {
  static char out[8192];
  char path[320];
  snprintf(path, sizeof path, "%s/stderr.txt", g_dir);
  fflush(stderr);
  int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  dup2(fd, 2);
  fn();
  fflush(stderr);
  dup2(saved, 2);
  close(fd), close(saved);
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
  if (f) fclose(f);
  out[n] = '\0';
  return out;
}

static int count_of(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
  return n;
}

static td_gemm_library g_got[2];
static void choose_two_classes(void) {
  td_matmul_desc a = desc(128, 128, 256), b = desc(128, 256, 128);
  g_got[0] = td_cpu_gemm_choose(&a);
  g_got[1] = td_cpu_gemm_choose(&b);
}

/* Measured, written, read back without measuring, repeated. */
static void test_write_read(void) {
  new_run(g_path, NULL);
  td_matmul_desc g = desc(128, 128, 256); /* 8.4 MFLOP: measured */
  td_gemm_library first = td_cpu_gemm_choose(&g);
  CHECK(first == TD_GEMM_ONEDNN || first == TD_GEMM_OPENBLAS, "fp32 choice %d", (int)first);
  CHECK(td_cpu_gemm_choose(&g) == first, "the same class keeps its library in a process");
  CHECK(file_choice(128, 128, 256) == (int)first, "the file records %s: %d",
        td_gemm_library_name(first), file_choice(128, 128, 256));
  /* a later run takes the file's word: edited to the other library, it runs that */
  td_gemm_library other = first == TD_GEMM_ONEDNN ? TD_GEMM_OPENBLAS : TD_GEMM_ONEDNN;
  edit_choice(128, 128, 256, other);
  new_run(g_path, NULL);
  CHECK(td_cpu_gemm_choose(&g) == other, "a later run reads the cached choice (%s)",
        td_gemm_library_name(other));
  char line[4800];
  td_cpu_gemm_describe(line, sizeof line);
  CHECK(strstr(line, g_path) && strstr(line, "measured per shape ("), "summary: %s", line);
  new_run(g_path, NULL);
  CHECK(td_cpu_gemm_choose(&g) == other, "and again: run to run deterministic");
}

/* A corrupt file: one warning for any number of classes, then rewritten. */
static void test_corrupt(void) {
  write_text(g_path, "{\"format\": \"trident GEMM choices 1\", \"choices\": [ {not json");
  new_run(g_path, NULL);
  const char *err = captured_stderr(choose_two_classes);
  CHECK(count_of(err, "warning") == 1 && strstr(err, g_path) && strstr(err, "not valid JSON"),
        "one warning naming the corrupt file, got: %s", err);
  CHECK(td_cpu_gemm_library_serves(g_got[0], TD_F32) &&
            td_cpu_gemm_library_serves(g_got[1], TD_F32),
        "choices made despite the corrupt file");
  CHECK(file_choice(128, 128, 256) == (int)g_got[0] && file_choice(128, 256, 128) == (int)g_got[1],
        "the corrupt file is rewritten with both choices");
  /* valid JSON of the wrong shape is ignored the same way */
  write_text(g_path, "{\"format\": \"trident GEMM choices 1\", \"machine\": 3, \"choices\": []}");
  new_run(g_path, NULL);
  err = captured_stderr(choose_two_classes);
  CHECK(count_of(err, "warning") == 1 && strstr(err, "not a trident GEMM choice file"),
        "a file of the wrong shape: one warning, got: %s", err);
}

/* A file measured elsewhere (another CPU or library version) is replaced. */
static void test_other_machine(void) {
  write_text(g_path,
             "{\"format\": \"trident GEMM choices 1\", \"machine\": \"another CPU\", \"choices\": "
             "[{\"ab\": \"fp32\", \"c\": \"fp32\", \"m\": 999, \"n\": 999, \"k\": 999, "
             "\"batch\": 1, \"trans_a\": 0, \"trans_b\": 0, \"bias\": 0, \"beta\": 0, "
             "\"threads\": 1, \"library\": \"onednn\"}]}");
  new_run(g_path, NULL);
  td_log_set_level(TD_LOG_DEBUG); /* the note is a debug line */
  const char *err = captured_stderr(choose_two_classes);
  td_log_set_level(TD_LOG_INFO);
  CHECK(count_of(err, "warning") == 0 && count_of(err, "another CPU") == 1,
        "another machine's file: one note, no warning: %s", err);
  CHECK(file_choice(999, 999, 999) == -1 && file_choice(128, 128, 256) == (int)g_got[0],
        "rewritten for this machine");
}

/* A class whose every timed run other processes disturbed runs the default and is
 * not kept: the summary counts it as not measured yet, a later run measures it. */
static void test_disturbed(void) {
  td_matmul_desc g = desc(128, 128, 256);
  unlink(g_path);
  setenv("TRIDENT_TEST_GEMM_RUNS", "disturbed", 1);
  new_run(g_path, NULL);
  char line[4800];
  td_gemm_library lib = td_cpu_gemm_choose(&g);
  td_cpu_gemm_describe(line, sizeof line);
  CHECK(lib == td_cpu_gemm_library(TD_F32) && !exists(g_path) &&
            strstr(line, "(1 not measured yet;"),
        "disturbed: the default (%s), nothing written; %s", td_gemm_library_name(lib), line);
  setenv("TRIDENT_TEST_GEMM_RUNS", "clean", 1);
  new_run(g_path, NULL);
  lib = td_cpu_gemm_choose(&g);
  CHECK(file_choice(128, 128, 256) == (int)lib, "a later, quiet run measures and keeps it");
}

/* TRIDENT_GEMM_CACHE=off, a forced library, a small product, a parallel region and
 * an unwritable path write nothing (the last with one warning). */
static void test_nothing_written(void) {
  td_matmul_desc g = desc(128, 128, 256);
  unlink(g_path);
  new_run("off", NULL);
  CHECK(td_cpu_gemm_library_serves(td_cpu_gemm_choose(&g), TD_F32), "measured without a cache");
  char line[4800];
  td_cpu_gemm_describe(line, sizeof line);
  CHECK(!exists(g_path) && strstr(line, "TRIDENT_GEMM_CACHE=off"), "off: no file; %s", line);
  static const char *const forced[] = {"openblas", "onednn"};
  for (int i = 0; i < 2; i++) {
    new_run(g_path, forced[i]);
    td_gemm_library lib = td_cpu_gemm_choose(&g);
    td_cpu_gemm_describe(line, sizeof line);
    CHECK(!strcmp(td_gemm_library_name(lib), forced[i]) && !exists(g_path) &&
              strstr(line, "forced by TRIDENT_GEMM_FP32"),
          "TRIDENT_GEMM_FP32=%s: %s, nothing measured; %s", forced[i], td_gemm_library_name(lib),
          line);
  }
  new_run(g_path, NULL);
  td_matmul_desc small = desc(64, 64, 64); /* 0.5 MFLOP */
  CHECK(td_cpu_gemm_choose(&small) == td_cpu_gemm_library(TD_F32) && !exists(g_path),
        "a small product runs the default, unmeasured");
  int in_parallel[2] = {-1, -1};
#pragma omp parallel num_threads(2)
  in_parallel[omp_get_thread_num()] = (int)td_cpu_gemm_choose(&g);
  CHECK(in_parallel[0] == (int)td_cpu_gemm_library(TD_F32) && !exists(g_path),
        "inside a parallel region: the default, unmeasured");
  char bad[400];
  snprintf(bad, sizeof bad, "%s/c.json/under-a-file.json", g_dir); /* mkdir fails, even as root */
  write_text(g_path, "x");
  new_run(bad, NULL);
  const char *err = captured_stderr(choose_two_classes);
  CHECK(count_of(err, "warning") == 1 && strstr(err, "cannot be written"),
        "an unwritable cache: one warning, got: %s", err);
  unlink(g_path);
}

/* A cache file of this machine with n fp32 classes (m x 128 x 128, m = 128, 256,
 * ...): class i chose libs[i], oneDNN took us[2i] and OpenBLAS us[2i + 1]
 * microseconds (0: not timed, left out of the file). */
static void write_choices(const td_gemm_library *libs, const double *us, int n) {
  char text[8192];
  int len = snprintf(text, sizeof text,
                     "{\"format\": \"trident GEMM choices 1\", \"machine\": \"%s\", "
                     "\"choices\": [",
                     td_gemm_machine());
  for (int i = 0; i < n; i++) {
    char times[128] = "";
    if (us[2 * i] > 0 && us[2 * i + 1] > 0)
      snprintf(times, sizeof times, ", \"us\": {\"onednn\": %.1f, \"openblas\": %.1f}",
               us[2 * i], us[2 * i + 1]);
    else if (us[2 * i] > 0 || us[2 * i + 1] > 0)
      snprintf(times, sizeof times, ", \"us\": {\"%s\": %.1f}", us[2 * i] > 0 ? "onednn" : "openblas",
               us[2 * i] > 0 ? us[2 * i] : us[2 * i + 1]);
    len += snprintf(text + len, sizeof text - (size_t)len,
                    "%s{\"ab\": \"fp32\", \"c\": \"fp32\", \"m\": %d, \"n\": 128, "
                    "\"k\": 128, \"batch\": 1, \"trans_a\": 0, \"trans_b\": 0, "
                    "\"bias\": 0, \"beta\": 0, \"threads\": 2, \"library\": \"%s\"%s}",
                    i ? ", " : "", 128 * (i + 1), td_gemm_library_name(libs[i]), times);
  }
  snprintf(text + len, sizeof text - (size_t)len, "]}");
  write_text(g_path, text);
}

/* What is not measured (a small product, a parallel region, and the tie rule's
 * default) runs the library that took the least time over the measured classes
 * that timed both, not the one that won most of them (on an Emerald Rapids VM
 * oneDNN won most fp32 classes of the GPT-2 step by a few percent, OpenBLAS a few by
 * 1.3-1.9x, and the step was fastest on OpenBLAS); no class timing both keeps the
 * built-in default (fp32: OpenBLAS). */
static void test_learned_default(void) {
  const td_gemm_library d = TD_GEMM_ONEDNN, o = TD_GEMM_OPENBLAS;
  const td_gemm_library wins_d2[] = {d, o, d}, wins_o2[] = {o, d, o}, one_each[] = {o, d};
  const double few_big[] = {100, 110, 900, 500, 100, 105}; /* oneDNN 2 by a little, OpenBLAS 1 by 1.8x */
  const double big_few[] = {110, 100, 500, 900, 105, 100}; /* the other way round */
  const double half_timed[] = {0, 100, 500, 450}; /* class 0 timed OpenBLAS only: left out */
  const double untimed[] = {0, 0, 0, 0};
  struct { const td_gemm_library *libs; const double *us; int n; td_gemm_library want; } cases[] = {
      {wins_d2, few_big, 3, o},    {wins_o2, big_few, 3, d},  {one_each, half_timed, 2, o},
      {one_each, untimed, 2, o},   {NULL, NULL, 0, o}};
  td_matmul_desc small = desc(64, 64, 64);
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    write_choices(cases[c].libs, cases[c].us, cases[c].n);
    new_run(g_path, NULL);
    char line[4800];
    td_cpu_gemm_describe(line, sizeof line); /* reads the file */
    td_gemm_library dflt = td_cpu_gemm_library(TD_F32), in_small = td_cpu_gemm_choose(&small);
    char want[64];
    snprintf(want, sizeof want, "small products %s",
             cases[c].want == TD_GEMM_ONEDNN ? "oneDNN" : "OpenBLAS");
    CHECK(dflt == cases[c].want && in_small == cases[c].want && strstr(line, want),
          "case %zu: default %s, a small product %s, want %s; %s", c, td_gemm_library_name(dflt),
          td_gemm_library_name(in_small), td_gemm_library_name(cases[c].want), line);
  }
  unlink(g_path);
}

/* OpenBLAS's kernels: trident overrides only OpenBLAS's fallback for a CPU it does
 * not know (a pre-AVX family on a CPU with AVX or better), with the newest family
 * the CPU runs; and the library this process loaded runs such kernels. */
static void test_openblas_kernels(void) {
  struct { const char *detected; int avx, avx2, avx512, bf16; const char *want; } cases[] = {
      {"Prescott", 1, 1, 1, 1, "Cooperlake"}, {"prescott", 1, 1, 1, 0, "SkylakeX"},
      {"Core2", 1, 1, 0, 0, "Haswell"},        {"Nehalem", 1, 0, 0, 0, "Sandybridge"},
      {"Prescott", 0, 0, 0, 0, NULL},          {"Haswell", 1, 1, 1, 1, NULL},
      {"Zen", 1, 1, 1, 1, NULL},               {"SkylakeX", 1, 1, 1, 1, NULL},
      {"Cooperlake", 1, 1, 1, 1, NULL}};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    const char *got = td_openblas_core_for(cases[c].detected, cases[c].avx, cases[c].avx2,
                                           cases[c].avx512, cases[c].bf16);
    CHECK((!got && !cases[c].want) || (got && cases[c].want && !strcmp(got, cases[c].want)),
          "%s on avx %d avx2 %d avx512 %d bf16 %d: %s, want %s", cases[c].detected, cases[c].avx,
          cases[c].avx2, cases[c].avx512, cases[c].bf16, got ? got : "OpenBLAS's own",
          cases[c].want ? cases[c].want : "OpenBLAS's own");
  }
  const td_openblas *blas = td_openblas_get();
  const char *user = getenv("OPENBLAS_CORETYPE");
  const char *better = td_openblas_core_here(blas->core);
  CHECK((user && *user) || !better, "OpenBLAS runs its %s kernels where %s ones run (%s)",
        blas->core, better ? better : "-", blas->config);
  CHECK(!*blas->note || strstr(blas->note, blas->core), "the note names the kernels: %s",
        blas->note);
  printf("OpenBLAS: %s kernels%s%s\n", blas->core, *blas->note ? "; " : "", blas->note);
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/td_gemm_cache_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  CHECK(mkdtemp(g_dir) != NULL, "mkdtemp %s", g_dir);
  snprintf(g_path, sizeof g_path, "%s/c.json", g_dir);
  setenv("TRIDENT_TEST_GEMM_RUNS", "clean", 1);
  test_write_read();
  test_corrupt();
  test_other_machine();
  test_disturbed();
  test_nothing_written();
  test_learned_default();
  test_openblas_kernels();
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  CHECK(system(cmd) == 0, "%s", cmd);
  return tst_finish();
}
