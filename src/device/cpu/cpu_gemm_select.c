/* Which GEMM library runs a call: chosen per shape class by measurement on the
 * machine that runs, because the fastest library depends on the CPU and on how
 * each library was built for it. Debian's OpenBLAS 0.3.21 does not know Sapphire
 * Rapids and falls back to a slow kernel there (fp32 at 13-26% of oneDNN's rate,
 * issue #14), while on a 2-core EPYC it beat oneDNN 2.6 where oneDNN falls back
 * to slow kernels (bench/RESULTS.md); a fixed default is wrong somewhere.
 *
 * On the first call of a class (cpu_gemm_select.h: m, n, k, batch, transposes,
 * dtypes, bias, beta != 0, threads) whose product is at least MIN_FLOPS, each
 * library that can serve it (fp32: oneDNN, OpenBLAS; bf16: oneDNN, and trident's
 * own on AMX and on AVX512-BF16 where the CPU has them) runs the call's own product, reading its A and B
 * and writing a scratch C (timed_call), in rounds that run each library once in
 * turn (so a burst of load from other processes hits all of them) until each has
 * enough runs that no other process disturbed (time_one); the fastest clean run
 * per library counts. A class with a library that had no clean run (a busy
 * machine) runs the default, unsaved, and a later run measures it; so do classes
 * met once a process has spent its budget measuring (BUDGET_S, or a tenth of the
 * time since its first GEMM when that is more). The caller's output is never
 * touched: the real call then runs once, on the chosen library.
 *
 * Why the call's own product and not a small one of the same kind: on the 2-core
 * EPYC, oneDNN 2.6 ran the lm_head's input gradient (m 1024, n 768, k 50304) at
 * 159 GFLOP/s against OpenBLAS's 196, yet was 1.5-2x faster on every smaller
 * product tried in its place (256 x 256 x 800; 128 x 96 x 5904, the same aspect):
 * a choice made on those cost 2-3% of the training step (bench/RESULTS.md). A large
 * class therefore costs one or two runs of its product per library, once per
 * machine.
 *
 * The default (td_cpu_gemm_library) runs what is not measured: classes under
 * MIN_FLOPS, calls from inside parallel regions (the attention's blocks), and the
 * budget's overflow. It is learned too: the library that took the least time over
 * the measured classes of the dtype in the cache when the process starts (so a
 * small product keeps its library for the whole run), before any the built-in one
 * (fp32 OpenBLAS, bf16 AMX where usable, else oneDNN). A library wins a class only when
 * it is more than TIE faster than the default, so a near-tie does not flip
 * between runs.
 *
 * Choices go to the cache file (cpu_gemm_cache.c) under a lock on its directory,
 * so later runs, and the ranks of one run, repeat them: results are then
 * reproducible bit for bit; the first run on a machine measures.
 * TRIDENT_GEMM_FP32=onednn|openblas and TRIDENT_GEMM_BF16=onednn|amx|avx512bf16 force a
 * library (no measurement); "auto" or unset measures. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/dtype.h"
#include "base/error.h"
#include "base/log.h"
#include "base/mem.h"
#include "device/cpu/cpu_gemm.h"
#include "device/cpu/cpu_gemm_bf16.h"
#include "device/cpu/cpu_gemm_select.h"
#include "device/cpu/cpu_openblas.h"

#define MIN_FLOPS 4e6  /* below: call overhead decides, not the kernel; the default runs */
#define SCRATCH_C_BYTES ((size_t)64 << 20) /* the scratch output of a timed run, at most */
#define SHORT_S 3e-3   /* a product expected to run this long or less is short */
#define ROUNDS 3       /* short: rounds at least, and CLEAN clean runs per library */
#define CLEAN 2
#define MAX_ROUNDS 8
#define LONG_ROUNDS 3  /* long: one clean run per library, within this many rounds */
#define CLEAN_CPU 0.8  /* a run is clean when the calling thread ran 80% of its time */
#define DROP 3.0       /* a library 3x slower than the best clean run runs no more */
#define TIE 1.05       /* another library must beat the default by more than 5% */
#define CLASS_S 0.1    /* seconds of rounds per short class at most (a busy machine) */
#define BUDGET_S 0.4   /* seconds of measuring per process, crossed by one class at most, */
#define BUDGET_SHARE 0.1 /* or this share of the time since the first GEMM, if more */

/* ----------------------------------------------------------------- default */

static const char *const k_env[2] = {"TRIDENT_GEMM_FP32", "TRIDENT_GEMM_BF16"};
static const char *const k_pretty[TD_GEMM_LIBRARIES] = {"oneDNN", "OpenBLAS", "AMX",
                                                            "AVX512-BF16"};
static int g_forced[2] = {-2, -2}; /* per dtype: -2 not read yet, -1 measure, else a library */

/* The library forced by the dtype's environment variable, or -1 ("auto" or unset). */
static int forced_from_env(td_dtype dt) {
  const char *e = getenv(k_env[dt == TD_BF16]);
  if (!e || !*e || !strcmp(e, "auto")) return -1;
  for (int lib = 0; lib < TD_GEMM_LIBRARIES; lib++)
    if (!strcmp(e, td_gemm_library_name((td_gemm_library)lib)) &&
        td_cpu_gemm_library_serves((td_gemm_library)lib, dt))
      return lib;
  td_fail("%s='%s' is not known here; expected %s or 'auto'", k_env[dt == TD_BF16], e,
          dt == TD_F32 ? "'onednn', 'openblas'" : "'onednn', 'amx' (on a CPU with AMX-BF16), 'avx512bf16' (with AVX512-BF16)");
}

static int forced_library(td_dtype dt) {
  int i = dt == TD_BF16;
  if (g_forced[i] == -2) {
#pragma omp critical(td_gemm_env)
    if (g_forced[i] == -2) g_forced[i] = forced_from_env(dt);
  }
  return g_forced[i];
}

/* Per input dtype, the library that took the least time over the measured classes
 * in the cache file when this process first read it (learn_default), or -1: read outside the
 * critical section too (calls from parallel regions), hence atomically. */
static int g_learned[2] = {-1, -1};

td_gemm_library td_cpu_gemm_library(td_dtype ab_dtype) {
  int forced = forced_library(ab_dtype);
  if (forced >= 0) return (td_gemm_library)forced;
  int learned = __atomic_load_n(&g_learned[ab_dtype == TD_BF16], __ATOMIC_RELAXED);
  if (learned >= 0 && td_cpu_gemm_library_serves((td_gemm_library)learned, ab_dtype))
    return (td_gemm_library)learned;
  if (ab_dtype == TD_BF16) return td_cpu_gemm_amx_usable() ? TD_GEMM_AMX : TD_GEMM_ONEDNN;
  return TD_GEMM_OPENBLAS;
}

/* ------------------------------------------------------------------ classes */

static td_gemm_class class_of(const td_matmul_desc *g) {
  td_gemm_class c;
  memset(&c, 0, sizeof c);
  c.m = g->m, c.n = g->n, c.k = g->k, c.batch = g->batch;
  c.trans_a = g->trans_a != 0, c.trans_b = g->trans_b != 0;
  c.ab_dtype = g->ab_dtype, c.c_dtype = g->c_dtype;
  c.bias = g->bias != NULL, c.beta = g->beta != 0.0f, c.threads = omp_get_max_threads();
  return c;
}

static double class_flops(const td_gemm_class *c) {
  return 2.0 * (double)c->m * (double)c->n * (double)c->k * (double)c->batch;
}

/* The libraries that can run the class here, the default first when it is one. */
static int candidates(const td_gemm_class *c, td_gemm_library *out) {
  td_gemm_library dflt = td_cpu_gemm_library((td_dtype)c->ab_dtype);
  int n = 0;
  for (int i = -1; i < TD_GEMM_LIBRARIES; i++) {
    td_gemm_library lib = i < 0 ? dflt : (td_gemm_library)i;
    if (i >= 0 && lib == dflt) continue;
    if (!td_cpu_gemm_library_serves(lib, (td_dtype)c->ab_dtype)) continue;
    /* trident's bf16 GEMM leaves a bf16 output deeper than one pass to oneDNN */
    if ((lib == TD_GEMM_AMX || lib == TD_GEMM_DPBF16) && c->c_dtype == TD_BF16 &&
        c->k > TD_GEMM_BF16_KMAX)
      continue;
    out[n++] = lib;
  }
  return n;
}

/* ------------------------------------------------------------- measurement */

/* The product timed for call g: g's own A, B and bias (only read) into a scratch C
 * (zeroed, so its pages are in place before the clock starts) of at most
 * SCRATCH_C_BYTES: only the first rows of C when C is larger (a 4096-token
 * lm_head's logits are 824 MB; its first 333 rows still stream all of B). */
static td_matmul_desc timed_call(const td_matmul_desc *g) {
  td_matmul_desc d = *g;
  size_t esz = g->c_dtype == TD_BF16 ? 2 : 4, row = (size_t)g->n * esz;
  if (d.batch > 1 && (size_t)(d.batch * d.m) * row > SCRATCH_C_BYTES) d.batch = 1;
  if ((size_t)(d.batch * d.m) * row > SCRATCH_C_BYTES)
    d.m = (int64_t)(SCRATCH_C_BYTES / row) > 16 ? (int64_t)(SCRATCH_C_BYTES / row) : 16;
  d.ldc = d.n, d.stride_c = d.m * d.n;
  size_t bytes = (size_t)(d.batch * d.m) * row;
  d.c = td_malloc(bytes);
  memset(d.c, 0, bytes);
  return d;
}

static int g_runs_hook = -1; /* TRIDENT_TEST_GEMM_RUNS: -1 detect, 1 clean, 0 disturbed */

/* Wall seconds of one run, negative when the run was disturbed: the calling thread,
 * which runs its share of the GEMM and then waits for the others (spinning, then
 * asleep), was on a CPU for less than CLEAN_CPU of the time, so other processes
 * had the cores. On a 2-core VM at load 9, 100 MFLOP runs took 0.5 ms clean and
 * 20-140 ms disturbed (the calling thread on a CPU 5-30% of that), every one of
 * them disturbed for some classes: a plain minimum of 3 would have chosen on noise. */
static double time_one(const td_matmul_desc *d, td_gemm_library lib) {
  struct timespec c0, c1;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
  double t0 = td_now_seconds();
  td_cpu_gemm_with(d, lib);
  double wall = td_now_seconds() - t0;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
  double cpu = (double)(c1.tv_sec - c0.tv_sec) + 1e-9 * (double)(c1.tv_nsec - c0.tv_nsec);
  int clean = g_runs_hook >= 0 ? g_runs_hook : cpu >= CLEAN_CPU * wall;
  return clean ? wall : -wall;
}

/* The best rate (flop/s) a clean run reached in this process, per input dtype: how
 * long the next class's runs will take. Before any, a modest guess per thread. */
static double g_rate[2];

static double expected_seconds(const td_matmul_desc *d) {
  int i = d->ab_dtype == TD_BF16;
  double rate = g_rate[i] > 0 ? g_rate[i] : omp_get_max_threads() * (i ? 80e9 : 20e9);
  return 2.0 * (double)d->m * (double)d->n * (double)d->k * (double)d->batch / rate;
}

/* us[lib]: microseconds of each candidate's fastest clean run (other load only adds
 * time), 0 when it had none. Rounds run each candidate once in turn, so a burst of
 * load hits all of them. A short product (SHORT_S) is run once untimed first, then
 * for at least ROUNDS rounds, until each candidate has CLEAN clean runs (or is DROP
 * times slower than the best), at most MAX_ROUNDS; a long one has only its oneDNN
 * primitive made first and needs one clean run each, at most LONG_ROUNDS. Rounds
 * stop after CLASS_S or twice the expected time of the runs, if longer. */
static void time_candidates(const td_matmul_desc *d, const td_gemm_library *cand, int nc,
                            double *us) {
  double fastest[TD_GEMM_LIBRARIES] = {0}, best = 0, expect = expected_seconds(d);
  int clean[TD_GEMM_LIBRARIES] = {0}, is_short = expect <= SHORT_S;
  int want = is_short ? CLEAN : 1, min_rounds = is_short ? ROUNDS : 1;
  int max_rounds = is_short ? MAX_ROUNDS : LONG_ROUNDS;
  double cap = 2 * expect * nc * max_rounds > CLASS_S ? 2 * expect * nc * max_rounds : CLASS_S;
  for (int i = 0; i < nc; i++) { /* primitives, packing buffers, pages */
    if (is_short)
      time_one(d, cand[i]);
    else
      td_cpu_gemm_prepare(d, cand[i]);
  }
  double start = td_now_seconds();
  for (int r = 0, settled = 0; r < max_rounds && !settled; r++) {
    settled = r + 1 >= min_rounds;
    for (int i = 0; i < nc; i++) {
      int lost = clean[i] && best > 0 && fastest[i] > DROP * best;
      if (clean[i] >= want || lost) continue;
      double t = time_one(d, cand[i]);
      if (t > 0 && (!clean[i]++ || t < fastest[i])) fastest[i] = t;
      if (t > 0 && (best == 0 || t < best)) best = t;
      settled &= clean[i] >= want;
    }
    if (td_now_seconds() - start > cap) break;
  }
  for (int i = 0; i < nc; i++) us[cand[i]] = 1e6 * fastest[i];
  int di = d->ab_dtype == TD_BF16;
  double flops = 2.0 * (double)d->m * (double)d->n * (double)d->k * (double)d->batch;
  if (best > 0 && flops / best > g_rate[di]) g_rate[di] = flops / best;
}

/* The fastest candidate; the default (cand[0]) unless another beats it by TIE. A
 * candidate that was never timed (us 0: no clean run) cannot win. */
static int pick(const td_gemm_library *cand, int nc, const double *us) {
  int best = 0;
  for (int i = 1; i < nc; i++)
    if (us[cand[i]] > 0 && (us[cand[best]] == 0 || us[cand[i]] < us[cand[best]])) best = i;
  if (us[cand[0]] <= TIE * us[cand[best]]) best = 0;
  return (int)cand[best];
}

static double g_spent; /* seconds this process has spent measuring */
static double g_first; /* when this process first chose a library (td_now_seconds) */

/* Seconds of measuring this process may have spent by now: BUDGET_S, growing with
 * the run (a short test measures little; a training run measures every class of
 * its model within its first steps, at a cost of at most BUDGET_SHARE of them). */
static double budget(void) {
  if (g_first == 0) g_first = td_now_seconds();
  double share = BUDGET_SHARE * (td_now_seconds() - g_first);
  return share > BUDGET_S ? share : BUDGET_S;
}

/* Test hook, so tests reach both outcomes on a machine of any load:
 * TRIDENT_TEST_GEMM_RUNS=clean counts every timed run as clean, =disturbed none. */
static void read_runs_hook(void) {
  const char *e = getenv("TRIDENT_TEST_GEMM_RUNS");
  g_runs_hook = e && !strcmp(e, "clean") ? 1 : e && !strcmp(e, "disturbed") ? 0 : -1;
}

static void log_choice(const td_gemm_choice *ch, const td_gemm_library *cand, int nc,
                       double spent, int disturbed) {
  const td_gemm_class *c = &ch->cls;
  char times[256] = "";
  for (int i = 0, len = 0; i < nc && len < (int)sizeof times; i++)
    len += snprintf(times + len, sizeof times - (size_t)len, "%s%s %.0f us", i ? ", " : "",
                    k_pretty[cand[i]], ch->us[cand[i]]);
  td_debug("GEMM %s m %lld n %lld k %lld ta %d tb %d: %s at m %lld n %lld k %lld (%.1f ms "
           "measuring) -> %s%s",
           td_dtype_name((td_dtype)c->ab_dtype), (long long)c->m, (long long)c->n,
           (long long)c->k, c->trans_a, c->trans_b, times, (long long)ch->tm, (long long)ch->tn,
           (long long)ch->tk, 1e3 * spent, k_pretty[ch->library],
           disturbed ? " (other load disturbed every run: not kept)" : "");
}

/* Time the candidates on call g's product and choose. Once the budget is spent, a
 * class runs the default, unsaved, and a later run measures it; the class that
 * crosses the budget is measured whole (so every run makes progress, and a large
 * product, a 1024-token lm_head at ~0.8 s for two libraries on 2 cores, gets
 * measured even though it alone exceeds the budget). */
static void measure(td_gemm_choice *ch, const td_matmul_desc *g, const td_gemm_library *cand,
                    int nc) {
  if (g_spent > budget()) {
    ch->library = (int32_t)cand[0], ch->unsaved = 1;
    td_debug("GEMM %s m %lld n %lld k %lld: measuring budget spent, %s (not kept)",
             td_dtype_name((td_dtype)ch->cls.ab_dtype), (long long)ch->cls.m,
             (long long)ch->cls.n, (long long)ch->cls.k, k_pretty[cand[0]]);
    return;
  }
  double t0 = td_now_seconds();
  read_runs_hook();
  td_matmul_desc d = timed_call(g);
  time_candidates(&d, cand, nc, ch->us);
  td_free(d.c);
  ch->library = (int32_t)pick(cand, nc, ch->us);
  ch->tm = d.m, ch->tn = d.n, ch->tk = d.k;
  double spent = td_now_seconds() - t0;
  g_spent += spent;
  int disturbed = 0;
  for (int i = 0; i < nc; i++) disturbed |= ch->us[cand[i]] == 0;
  if (disturbed) /* no clean run of some library: the default, and a later run measures */
    ch->library = (int32_t)cand[0], ch->unsaved = 1;
  log_choice(ch, cand, nc, spent, disturbed);
}

/* ------------------------------------------------------------------ choices */

/* Every class met or read from the cache file in this process; guarded by the
 * critical section td_gemm_select. */
static td_gemm_choice *g_choices;
static int g_n, g_cap, g_loaded;

static td_gemm_choice *find(const td_gemm_class *c) {
  for (int i = 0; i < g_n; i++)
    if (!memcmp(&g_choices[i].cls, c, sizeof *c)) return &g_choices[i];
  return NULL;
}

static td_gemm_choice *append(const td_gemm_choice *ch) {
  if (g_n == g_cap) {
    g_cap = g_cap ? 2 * g_cap : 64;
    td_gemm_choice *grown = td_malloc(sizeof *grown * (size_t)g_cap);
    if (g_n) memcpy(grown, g_choices, sizeof *grown * (size_t)g_n);
    td_free(g_choices);
    g_choices = grown;
  }
  g_choices[g_n] = *ch;
  return &g_choices[g_n++];
}

/* The default for what is not measured, learned from what is: per dtype, the
 * library that took the least time over the measured classes that timed every
 * library of the dtype (-1 when none did). A fixed default is wrong somewhere:
 * OpenBLAS on a CPU it runs slow kernels on made every class the first run could
 * not measure 3-4x slower (issue #14). Not the library that won the most classes:
 * on an Emerald Rapids VM oneDNN won 11 of 18 fp32 classes of the GPT-2 step by
 * 1-18%, OpenBLAS 3 by 1.3-1.9x; as the default (which also takes the near-ties)
 * oneDNN made the step 4.0-4.4 s against 3.1-3.8 s on OpenBLAS alone. */
static void learn_default(void) {
  for (int dt = 0; dt < 2; dt++) {
    int timed[TD_GEMM_LIBRARIES] = {0}, best = -1;
    double total[TD_GEMM_LIBRARIES] = {0};
    for (int i = 0; i < g_n; i++) /* the libraries this dtype's classes timed */
      if ((g_choices[i].cls.ab_dtype == TD_BF16) == dt && !g_choices[i].unsaved)
        for (int l = 0; l < TD_GEMM_LIBRARIES; l++) timed[l] |= g_choices[i].us[l] > 0;
    for (int i = 0; i < g_n; i++) {
      const td_gemm_choice *ch = &g_choices[i];
      int all = (ch->cls.ab_dtype == TD_BF16) == dt && !ch->unsaved;
      for (int l = 0; l < TD_GEMM_LIBRARIES && all; l++) all = !timed[l] || ch->us[l] > 0;
      for (int l = 0; l < TD_GEMM_LIBRARIES && all; l++) total[l] += ch->us[l];
    }
    for (int l = 0; l < TD_GEMM_LIBRARIES; l++)
      if (timed[l] && total[l] > 0 && (best < 0 || total[l] < total[best])) best = l;
    __atomic_store_n(&g_learned[dt], best, __ATOMIC_RELAXED);
  }
}

/* Add the file's choices for classes this process has not met (its own stay: the
 * process has already computed with them). */
static void merge_file(void) {
  int n, first = !g_loaded;
  td_gemm_choice *c = td_gemm_cache_load(&n);
  for (int i = 0; i < n; i++)
    if (!find(&c[i].cls)) append(&c[i]);
  td_free(c);
  g_loaded = 1;
  if (first) learn_default(); /* once: the default must not change under a running process */
}

static int is_candidate(int lib, const td_gemm_library *cand, int nc) {
  for (int i = 0; i < nc; i++)
    if ((int)cand[i] == lib) return 1;
  return 0;
}

/* The choice for class c: known, read from the file (which another process may
 * have just written), or measured and saved. */
static int choose_locked(const td_gemm_class *c, const td_matmul_desc *g,
                         const td_gemm_library *cand, int nc) {
  if (!g_loaded) merge_file();
  td_gemm_choice *ch = find(c);
  if (ch && is_candidate(ch->library, cand, nc)) return ch->library;
  int fd = td_gemm_cache_lock();
  merge_file();
  ch = find(c);
  if (!ch || !is_candidate(ch->library, cand, nc)) { /* new, or a library not usable here */
    td_gemm_choice fresh;
    memset(&fresh, 0, sizeof fresh);
    fresh.cls = *c;
    if (!ch) ch = append(&fresh);
    else *ch = fresh;
    measure(ch, g, cand, nc);
    if (!ch->unsaved) td_gemm_cache_save(g_choices, g_n);
  }
  td_gemm_cache_unlock(fd);
  return ch->library;
}

td_gemm_library td_cpu_gemm_choose(const td_matmul_desc *g) {
  int forced = forced_library(g->ab_dtype);
  if (forced >= 0) return (td_gemm_library)forced;
  td_gemm_class c = class_of(g);
  td_gemm_library cand[TD_GEMM_LIBRARIES];
  int nc = candidates(&c, cand);
  if (nc == 1) return cand[0];
  if (omp_in_parallel() || g->m <= 0 || g->n <= 0 || g->k <= 0 || g->batch <= 0 ||
      class_flops(&c) < MIN_FLOPS)
    return cand[0];
  int lib;
#pragma omp critical(td_gemm_select)
  lib = choose_locked(&c, g, cand, nc);
  return (td_gemm_library)lib;
}

void td_cpu_gemm_select_reset(void) {
#pragma omp critical(td_gemm_select)
  {
    td_free(g_choices);
    g_choices = NULL, g_n = g_cap = g_loaded = 0, g_spent = g_first = 0, g_rate[0] = g_rate[1] = 0;
    g_learned[0] = g_learned[1] = -1;
    g_forced[0] = g_forced[1] = -2;
    td_gemm_cache_reset();
  }
}

/* ----------------------------------------------------------------- summary */

/* "measured per shape (oneDNN 12, OpenBLAS 3; small products OpenBLAS)" for dtype dt;
 * returns 1 when dt's library is measured (not forced, more than one candidate). */
static int describe_dtype(td_dtype dt, char *buf, size_t n) {
  int forced = forced_library(dt), count[TD_GEMM_LIBRARIES] = {0};
  td_gemm_class probe = {.m = 1, .n = 1, .k = 1, .batch = 1, .ab_dtype = dt, .c_dtype = TD_F32};
  td_gemm_library cand[TD_GEMM_LIBRARIES];
  int nc = candidates(&probe, cand);
  if (forced >= 0) {
    snprintf(buf, n, "%s (forced by %s)", k_pretty[forced], k_env[dt == TD_BF16]);
    return 0;
  }
  if (nc == 1) {
    snprintf(buf, n, "%s (the only library here)", k_pretty[cand[0]]);
    return 0;
  }
  int pending = 0; /* classes running the default until a run measures them */
  for (int i = 0; i < g_n; i++) {
    const td_gemm_choice *ch = &g_choices[i];
    if (ch->cls.ab_dtype == (int32_t)dt && ch->cls.threads == omp_get_max_threads())
      ch->unsaved ? pending++ : count[ch->library]++;
  }
  char counts[160] = "none cached yet";
  size_t used = 0;
  for (int l = 0; l < TD_GEMM_LIBRARIES; l++)
    if (count[l] && used < sizeof counts)
      used += (size_t)snprintf(counts + used, sizeof counts - used, "%s%s %d", used ? ", " : "",
                               k_pretty[l], count[l]);
  if (pending && used < sizeof counts)
    snprintf(counts + used, sizeof counts - used, "%s%d not measured yet", used ? ", " : "",
             pending);
  snprintf(buf, n, "measured per shape (%s; small products %s)", counts, k_pretty[cand[0]]);
  return 1;
}

void td_cpu_gemm_describe(char *buf, size_t n) {
  char f32[256], bf16[256], cache[4200] = "";
  int measured = 0;
#pragma omp critical(td_gemm_select)
  {
    if (!g_loaded) merge_file();
    measured += describe_dtype(TD_F32, f32, sizeof f32);
    measured += describe_dtype(TD_BF16, bf16, sizeof bf16);
  }
  const char *path = td_gemm_cache_path(), *env = getenv("TRIDENT_GEMM_CACHE");
  if (measured) { /* where the choices are kept: nothing to say when none is measured */
    if (*path)
      snprintf(cache, sizeof cache, "; choices cached in %s", path);
    else
      snprintf(cache, sizeof cache, "; choices not cached (%s): measured again every run",
               env && !strcmp(env, "off") ? "TRIDENT_GEMM_CACHE=off" : "no home directory");
  }
  const char *blas_note = td_openblas_get()->note; /* kernels trident chose for OpenBLAS */
  const char *widened = td_cpu_gemm_onednn_bf16() ? ""
                        : "; oneDNN has no bf16 kernels for this CPU: its bf16 products run as "
                          "fp32 GEMMs on inputs widened to fp32";
  snprintf(buf, n, "fp32 %s, bf16 %s%s%s%s%s", f32, bf16, widened, cache, *blas_note ? "; " : "",
           blas_note);
}
