/* ZeRO-Infinity's NVMe optimizer state (optim/nvme_state.h): AdamW with m and v
 * streamed from a file gives the same bits as AdamW in memory, step after step,
 * for runs at different offsets of params, grads and state, both weight-decay
 * groups, and chunks smaller than, equal to and larger than the runs, on the
 * CPU device (the I/O thread reads into the kernel's buffers) and on a CPU
 * device that says its memory is not host memory (buffers staged through copy_h2d / copy_d2h); state
 * written between steps is what the next step reads; a missing directory is
 * named; the file goes with the optimizer; and a failing write (the
 * TRIDENT_TEST_NVME_FAIL_AFTER hook) or a file cut short ends the run with the
 * path and the cause. */
#define _DEFAULT_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/mem.h"
#include "check.h"
#include "optim/adamw.h"

enum { STEPS = 5, MAX_RUNS = 8 };

static char g_dir[] = "/tmp/td_nvme_XXXXXX";

/* The CPU device's ops under a name without "cpu": nvme_state treats its memory
 * as device memory and stages every chunk; the copies are counted. */
static td_device_ops g_staged_ops;
static td_device g_staged;
static long g_h2d;

static void counting_h2d(td_device *d, void *dst, const void *src, size_t bytes) {
  g_h2d++;
  tst_device()->ops->copy_h2d(d, dst, src, bytes);
}

static td_device *staged_device(void) {
  if (!g_staged.ops) {
    g_staged_ops = *tst_device()->ops;
    g_staged_ops.name = "staged";
    g_staged_ops.caps &= ~(unsigned)TD_DEVICE_HOST_MEMORY; /* as a GPU */
    g_staged_ops.copy_h2d = counting_h2d;
    g_staged = (td_device){.ops = &g_staged_ops, .impl = tst_device()->impl};
  }
  return &g_staged;
}

/* A layout: runs over a state of numel elements, with params and grads in
 * buffers of their own sizes (the same runs, placed differently). */
typedef struct {
  td_adam_run runs[MAX_RUNS];
  int n_runs;
  int64_t numel, n_params, n_grads;
} layout;

/* Runs of the given lengths, alternating groups, with gaps before them of
 * state_gap, param_gap and grad_gap elements (times the run's index, so no two
 * gaps agree and nothing merges unless all three gap kinds are equal); params
 * reversed when reverse_params (a rank's shard need not follow parameter order). */
static layout make_layout(const int64_t *lens, int n, int64_t state_gap, int64_t param_gap,
                          int64_t grad_gap, int reverse_params) {
  layout l = {.n_runs = n};
  for (int i = 0; i < n; i++) {
    td_adam_run *r = &l.runs[i];
    l.numel += state_gap * i;
    l.n_grads += grad_gap * i;
    *r = (td_adam_run){.state_offset = l.numel, .grad_offset = l.n_grads, .numel = lens[i],
                       .weight_decay = i % 2 == 0};
    l.numel += lens[i];
    l.n_grads += lens[i];
  }
  for (int j = 0; j < n; j++) {
    td_adam_run *r = &l.runs[reverse_params ? n - 1 - j : j];
    l.n_params += param_gap * j;
    r->param_offset = l.n_params;
    l.n_params += r->numel;
  }
  l.numel += state_gap; /* a tail no run covers */
  return l;
}

/* Fresh random values on the runs' elements (stream: this call's own), zeros
 * elsewhere (the gaps of merged runs must hold zeros). */
static void fill_runs(float *x, int64_t size, const layout *l, int grads, uint64_t stream) {
  memset(x, 0, (size_t)size * sizeof(float));
  for (int i = 0; i < l->n_runs; i++) {
    const td_adam_run *r = &l->runs[i];
    tst_fill_normal(x + (grads ? r->grad_offset : r->param_offset), r->numel,
                    stream * MAX_RUNS + (uint64_t)i, grads ? 0.1f : 1.0f);
  }
}

static void init_pair(td_device *dev, td_adamw *mem, td_adamw *nvme, const layout *l,
                      int64_t chunk) {
  char err[512] = "";
  td_adamw_init(mem, dev, l->numel, l->runs, l->n_runs, 0.9f, 0.95f, 1e-8f, 0.1f);
  int rc = td_adamw_init_nvme(nvme, dev, l->numel, l->runs, l->n_runs, 0.9f, 0.95f,
                              1e-8f, 0.1f, g_dir, "rank0", chunk, err, sizeof err);
  if (rc) {
    CHECK(0, "init_nvme: %s", err);
    exit(tst_finish());
  }
}

/* Both optimizers' m and v over the whole state, compared bit for bit. */
static int same_state(td_adamw *mem, td_adamw *nvme, int64_t numel) {
  float *a = td_malloc((size_t)numel * sizeof(float)), *b = td_malloc((size_t)numel * sizeof(float));
  int same = 1;
  for (int which = 0; which < 2; which++) {
    td_adamw_read_state(mem, which, 0, numel, a);
    td_adamw_read_state(nvme, which, 0, numel, b);
    same &= memcmp(a, b, (size_t)numel * sizeof(float)) == 0;
  }
  td_free(a);
  td_free(b);
  return same;
}

/* STEPS steps of both optimizers from the same params on the same grads; every
 * step's params and state bit-identical. */
static void check_steps(td_device *dev, const char *name, const layout *l, int64_t chunk,
                        uint64_t stream) {
  size_t pb = (size_t)l->n_params * sizeof(float);
  float *p_mem = td_malloc(pb), *p_nvme = td_malloc(pb), *p0 = td_malloc(pb);
  float *g = td_malloc((size_t)l->n_grads * sizeof(float));
  fill_runs(p_mem, l->n_params, l, 0, stream);
  memcpy(p_nvme, p_mem, pb);
  memcpy(p0, p_mem, pb);
  td_adamw mem, nvme;
  init_pair(dev, &mem, &nvme, l, chunk);
  int params_same = 1, state_same = 1;
  for (int t = 0; t < STEPS; t++) {
    fill_runs(g, l->n_grads, l, 1, stream * STEPS + (uint64_t)t + 1000);
    float lr = 1e-3f * (float)(t + 1), scale = t % 2 ? 0.5f : 1.0f;
    td_adamw_step(&mem, p_mem, g, lr, scale);
    td_adamw_step(&nvme, p_nvme, g, lr, scale);
    params_same &= memcmp(p_mem, p_nvme, pb) == 0;
    state_same &= same_state(&mem, &nvme, l->numel);
  }
  CHECK(params_same && state_same && memcmp(p0, p_mem, pb) != 0,
        "%s, %s, chunk %lld: params, m and v bit-identical after each of %d steps",
        dev->ops->name, name, (long long)chunk, STEPS);
  td_adamw_free(&mem);
  td_adamw_free(&nvme);
  td_free(p_mem);
  td_free(p_nvme);
  td_free(p0);
  td_free(g);
}

/* Every layout with chunks of 1 element (small layouts only), odd sizes, the
 * shortest and the longest run, and the whole state and beyond. */
static void test_bit_identical(td_device *dev) {
  static const int64_t tiny[] = {3, 1, 5}, odd[] = {37, 1001, 5, 257, 999}, big[] = {50001, 777};
  static const struct {
    const char *name;
    const int64_t *lens;
    int n;
    int64_t gaps[3];
    int reverse;
  } cases[] = {
      {"tiny runs", tiny, 3, {2, 3, 1}, 0},
      {"odd runs", odd, 5, {16, 3, 7}, 1},
      {"odd runs, mergeable gaps", odd, 5, {5, 5, 5}, 0},
      {"one long run (threaded kernel)", big, 2, {64, 1, 0}, 1},
  };
  uint64_t stream = 1;
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    layout l = make_layout(cases[c].lens, cases[c].n, cases[c].gaps[0], cases[c].gaps[1],
                           cases[c].gaps[2], cases[c].reverse);
    int64_t shortest = l.runs[0].numel, longest = shortest;
    for (int i = 1; i < l.n_runs; i++) {
      if (l.runs[i].numel < shortest) shortest = l.runs[i].numel;
      if (l.runs[i].numel > longest) longest = l.runs[i].numel;
    }
    const int64_t chunks[] = {1, 7, shortest, 1000, longest, l.numel, 3 * l.numel};
    for (size_t k = 0; k < sizeof chunks / sizeof *chunks; k++) {
      int skip = chunks[k] == 1 && l.numel >= 100; /* 1-element chunks: small layouts */
      for (size_t j = 0; j < k; j++) skip |= chunks[j] == chunks[k]; /* each size once */
      if (!skip) check_steps(dev, cases[c].name, &l, chunks[k], stream++);
    }
  }
}

/* State written between steps reads back, and the next step starts from it. */
static void test_write_state(void) {
  static const int64_t lens[] = {301, 99, 1200};
  layout l = make_layout(lens, 3, 11, 2, 5, 0);
  int64_t off = 50, n = 1400;
  float *x = td_malloc((size_t)n * sizeof(float)), *y = td_malloc((size_t)n * sizeof(float));
  float *p_mem = td_malloc((size_t)l.n_params * sizeof(float));
  float *p_nvme = td_malloc((size_t)l.n_params * sizeof(float));
  float *g = td_malloc((size_t)l.n_grads * sizeof(float));
  td_adamw mem, nvme;
  init_pair(tst_device(), &mem, &nvme, &l, 128);
  int back = 1;
  for (int which = 0; which < 2; which++) {
    tst_fill_uniform(x, n, 500 + (uint64_t)which, 0.0f, 0.01f); /* v >= 0 */
    td_adamw_write_state(&mem, which, off, n, x);
    td_adamw_write_state(&nvme, which, off, n, x);
    td_adamw_read_state(&nvme, which, off, n, y);
    back &= memcmp(x, y, (size_t)n * sizeof(float)) == 0;
  }
  CHECK(back, "write_state then read_state: the same bits");
  fill_runs(p_mem, l.n_params, &l, 0, 600);
  memcpy(p_nvme, p_mem, (size_t)l.n_params * sizeof(float));
  fill_runs(g, l.n_grads, &l, 1, 601);
  td_adamw_step(&mem, p_mem, g, 1e-3f, 1.0f);
  td_adamw_step(&nvme, p_nvme, g, 1e-3f, 1.0f);
  CHECK(memcmp(p_mem, p_nvme, (size_t)l.n_params * sizeof(float)) == 0 &&
            same_state(&mem, &nvme, l.numel),
        "a step after write_state starts from the written state");
  td_adamw_free(&mem);
  td_adamw_free(&nvme);
  td_free(x), td_free(y), td_free(p_mem), td_free(p_nvme), td_free(g);
}

static void test_file_lifetime(void) {
  static const int64_t lens[] = {100};
  layout l = make_layout(lens, 1, 0, 0, 0, 0);
  char path[256], missing[256], err[512] = "";
  snprintf(path, sizeof path, "%s/rank0.adam", g_dir);
  snprintf(missing, sizeof missing, "%s/no-such-dir", g_dir);
  td_adamw o;
  int rc = td_adamw_init_nvme(&o, tst_device(), l.numel, l.runs, 1, 0.9f, 0.95f, 1e-8f, 0.1f,
                              missing, "rank0", 64, err, sizeof err);
  CHECK(rc != 0 && strstr(err, missing) && strstr(err, "No such file or directory"),
        "a missing directory is refused, named: %s", err);
  rc = td_adamw_init_nvme(&o, tst_device(), l.numel, l.runs, 1, 0.9f, 0.95f, 1e-8f, 0.1f, g_dir,
                          "rank0", 64, err, sizeof err);
  struct stat st = {0};
  int found = stat(path, &st) == 0;
  CHECK(rc == 0 && found && st.st_size == 2 * 100 * (off_t)sizeof(float),
        "%s holds m and v (%lld bytes)", path, (long long)st.st_size);
  if (rc == 0) td_adamw_free(&o);
  CHECK(stat(path, &st) != 0, "td_adamw_free removes %s", path);
}

/* A child that steps on a state whose chunk writes fail from the second one
 * (truncate 0), or whose file has been cut short (truncate 1): its exit status
 * and stderr. */
static int run_failing_child(const char *path, int truncate_file, char *out, size_t outlen) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 2);
    if (!truncate_file) setenv("TRIDENT_TEST_NVME_FAIL_AFTER", "2", 1);
    static const int64_t lens[] = {40, 30};
    layout l = make_layout(lens, 2, 3, 0, 0, 0);
    float p[70] = {0}, g[70] = {0};
    td_adamw o, unused;
    init_pair(tst_device(), &unused, &o, &l, 16); /* 5 chunks */
    if (truncate_file && truncate(path, 100) != 0) _exit(0);
    td_adamw_step(&o, p, g, 1e-3f, 1.0f);
    _exit(0);
  }
  close(fds[1]);
  size_t got = 0;
  ssize_t k;
  while (got + 1 < outlen && (k = read(fds[0], out + got, outlen - 1 - got)) > 0) got += (size_t)k;
  out[got] = '\0';
  close(fds[0]);
  int status;
  if (waitpid(pid, &status, 0) != pid) return -1;
  unlink(path); /* the child exited without closing */
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* First, before this process has started any OpenMP threads (a forked child
 * of a process that has cannot use OpenMP). */
static void test_io_errors(void) {
  char out[2048], path[256];
  snprintf(path, sizeof path, "%s/rank0.adam", g_dir);
  int code = run_failing_child(path, 0, out, sizeof out);
  CHECK(code > 0 && strstr(out, path) && strstr(out, "write") && strstr(out, "Input/output error"),
        "a failed chunk write ends the run (exit %d): %s", code, out);
  code = run_failing_child(path, 1, out, sizeof out);
  CHECK(code > 0 && strstr(out, path) && strstr(out, "read") && strstr(out, "ends early"),
        "a state file cut short ends the run (exit %d): %s", code, out);
}

int main(void) {
  if (!mkdtemp(g_dir)) {
    CHECK(0, "mkdtemp %s", g_dir);
    return tst_finish();
  }
  test_io_errors();
  test_bit_identical(tst_device());
  test_bit_identical(staged_device());
  CHECK(g_h2d > 0, "the staged device's chunks went through copy_h2d (%ld copies)", g_h2d);
  test_write_state();
  test_file_lifetime();
  CHECK(rmdir(g_dir) == 0, "%s left empty", g_dir);
  return tst_finish();
}
