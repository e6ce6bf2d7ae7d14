/* The sealed test device (src/device/sealed_device.h): the same ops as the CPU
 * backend, bit for bit, on memory the host cannot touch between ops.
 *  - a run of ops (copies, fill, matmul, add on views inside one allocation,
 *    layernorm_forward, adamw, cast, sum_squares, cross_entropy_forward,
 *    masked_sum, cross_entropy_combine, attention_forward) gives the CPU
 *    backend's bits; every op the CPU table has is set;
 *  - a host write into an allocation, a host read of the guard page after one,
 *    a host read of a freed allocation and an op given device memory as its host
 *    argument each kill a forked child with SIGSEGV and a line naming the place
 *    (skipped under AddressSanitizer, whose own SIGSEGV handler reports first);
 *  - memory_stats counts allocations up and down and keeps the peak; a freed
 *    address is never handed out again; new memory is zeroed;
 *  - a used-up reservation fails naming TRIDENT_SEALED_RESERVE_GIB. */
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/dtype.h"
#include "base/mem.h"
#include "check.h"
#include "device/device.h"

/* ------------------------------------------------------------ ops vs the CPU */

enum {
  M = 7, K = 13, N = 9,         /* matmul */
  NA = 1000,                    /* add, adamw, cast, sum_squares */
  ROWS = 5, COLS = 24, V = 37,  /* layernorm, cross-entropy */
  AB = 2, AT = 17, AH = 2, AD = 16 /* attention */
};
#define QKV (AB * AT * AH * 3 * AD)
#define AOUT (AB * AT * AH * AD)

typedef struct {
  float a[M * K], b[K * N], bias[N], c0[M * N];
  float x[3 * NA]; /* add's a and b, then its output, in one allocation */
  float ln_x[ROWS * COLS], ln_w[COLS], ln_b[COLS];
  float p[NA], g[NA];
  float logits[ROWS * V], mask[ROWS], lse_parts[2 * ROWS], target_logit[ROWS];
  int32_t targets[ROWS];
  float qkv[QKV];
} inputs;

typedef struct {
  float c[M * N], sum[NA];
  float ln_out[ROWS * COLS], mean[ROWS], rstd[ROWS];
  float p[NA], m[NA], v[NA];
  uint16_t bf[NA];
  double sumsq;
  float losses[ROWS], lse[ROWS], comb_losses[ROWS], comb_lse[ROWS];
  double masked;
  float att_out[AOUT], att_lse[AB * AH * AT];
  float filled[NA];
} outputs;

static void make_inputs(inputs *in) {
  uint64_t s = 1;
  tst_fill_uniform(in->a, M * K, s++, -1, 1);
  tst_fill_uniform(in->b, K * N, s++, -1, 1);
  tst_fill_uniform(in->bias, N, s++, -1, 1);
  tst_fill_uniform(in->c0, M * N, s++, -1, 1);
  tst_fill_uniform(in->x, 2 * NA, s++, -2, 2);
  tst_fill_normal(in->ln_x, ROWS * COLS, s++, 1.5f);
  tst_fill_uniform(in->ln_w, COLS, s++, 0.5f, 1.5f);
  tst_fill_uniform(in->ln_b, COLS, s++, -0.5f, 0.5f);
  tst_fill_normal(in->p, NA, s++, 0.1f);
  tst_fill_normal(in->g, NA, s++, 0.01f);
  tst_fill_normal(in->logits, ROWS * V, s++, 2.0f);
  for (int r = 0; r < ROWS; r++) in->targets[r] = (int32_t)((r * 11 + 3) % V);
  for (int r = 0; r < ROWS; r++) in->mask[r] = (float)(r % 3 != 1);
  tst_fill_uniform(in->lse_parts, 2 * ROWS, s++, 1, 4);
  tst_fill_uniform(in->target_logit, ROWS, s++, -2, 2);
  tst_fill_normal(in->qkv, QKV, s++, 1.0f);
}

static void *up(td_device *d, const void *host, size_t bytes) {
  void *p = d->ops->alloc(d, bytes);
  d->ops->copy_h2d(d, p, host, bytes);
  return p;
}

static void run_matmul(td_device *d, const inputs *in, outputs *o) {
  float *a = up(d, in->a, sizeof in->a), *b = up(d, in->b, sizeof in->b);
  float *bias = up(d, in->bias, sizeof in->bias), *c = up(d, in->c0, sizeof in->c0);
  td_matmul_desc g = {.m = M, .n = N, .k = K, .ab_dtype = TD_F32, .c_dtype = TD_F32,
                      .a = a, .lda = K, .b = b, .ldb = N, .c = c, .ldc = N,
                      .bias = bias, .alpha = 1.0f, .beta = 0.5f, .batch = 1};
  d->ops->matmul(d, &g);
  d->ops->copy_d2h(d, o->c, c, sizeof o->c);
  d->ops->free(d, a), d->ops->free(d, b), d->ops->free(d, bias), d->ops->free(d, c);
}

/* add, cast and sum_squares on views inside one allocation; fill and copy_d2d too */
static void run_elementwise(td_device *d, const inputs *in, outputs *o) {
  float *x = d->ops->alloc(d, sizeof in->x);
  d->ops->copy_h2d(d, x, in->x, 2 * NA * sizeof(float));
  d->ops->add(d, x + 2 * NA, x, x + NA, NA);
  d->ops->copy_d2h(d, o->sum, x + 2 * NA, sizeof o->sum);
  uint16_t *bf = d->ops->alloc(d, sizeof o->bf);
  d->ops->cast(d, bf, TD_BF16, x + 2 * NA, TD_F32, NA);
  d->ops->copy_d2h(d, o->bf, bf, sizeof o->bf);
  o->sumsq = td_device_reduce_now(d, d->ops->sum_squares, x + 2 * NA, NA);
  d->ops->fill(d, x, TD_F32, NA, 0.25f);
  d->ops->copy_d2d(d, x + NA, x, NA * sizeof(float));
  d->ops->copy_d2h(d, o->filled, x + NA, sizeof o->filled);
  d->ops->free(d, x), d->ops->free(d, bf);
}

static void run_layernorm(td_device *d, const inputs *in, outputs *o) {
  float *x = up(d, in->ln_x, sizeof in->ln_x), *w = up(d, in->ln_w, sizeof in->ln_w);
  float *b = up(d, in->ln_b, sizeof in->ln_b);
  float *out = d->ops->alloc(d, sizeof o->ln_out), *mean = d->ops->alloc(d, sizeof o->mean);
  float *rstd = d->ops->alloc(d, sizeof o->rstd);
  d->ops->layernorm_forward(d, out, TD_F32, mean, rstd, x, w, b, ROWS, COLS, 1e-5f);
  d->ops->copy_d2h(d, o->ln_out, out, sizeof o->ln_out);
  d->ops->copy_d2h(d, o->mean, mean, sizeof o->mean);
  d->ops->copy_d2h(d, o->rstd, rstd, sizeof o->rstd);
  float *all[] = {x, w, b, out, mean, rstd};
  for (int i = 0; i < 6; i++) d->ops->free(d, all[i]);
}

static void run_adamw(td_device *d, const inputs *in, outputs *o) {
  float *p = up(d, in->p, sizeof in->p), *g = up(d, in->g, sizeof in->g);
  float *mv = d->ops->alloc(d, 2 * NA * sizeof(float)); /* m and v: views of one buffer */
  for (int64_t step = 1; step <= 3; step++)
    d->ops->adamw(d, p, g, mv, mv + NA, NA, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, step, NULL, TD_F32);
  d->ops->copy_d2h(d, o->p, p, sizeof o->p);
  d->ops->copy_d2h(d, o->m, mv, sizeof o->m);
  d->ops->copy_d2h(d, o->v, mv + NA, sizeof o->v);
  d->ops->free(d, p), d->ops->free(d, g), d->ops->free(d, mv);
}

/* cross_entropy_forward, masked_sum of its losses, cross_entropy_combine */
static void run_loss(td_device *d, const inputs *in, outputs *o) {
  float *logits = up(d, in->logits, sizeof in->logits), *mask = up(d, in->mask, sizeof in->mask);
  int32_t *targets = up(d, in->targets, sizeof in->targets);
  float *losses = d->ops->alloc(d, sizeof o->losses), *lse = d->ops->alloc(d, sizeof o->lse);
  d->ops->cross_entropy_forward(d, losses, lse, logits, TD_F32, targets, ROWS, V);
  d->ops->copy_d2h(d, o->losses, losses, sizeof o->losses);
  d->ops->copy_d2h(d, o->lse, lse, sizeof o->lse);
  double *masked = d->ops->alloc(d, sizeof(double));
  d->ops->masked_sum(d, masked, losses, mask, ROWS);
  d->ops->copy_d2h(d, &o->masked, masked, sizeof o->masked);
  d->ops->free(d, masked);
  float *parts = up(d, in->lse_parts, sizeof in->lse_parts);
  float *tl = up(d, in->target_logit, sizeof in->target_logit);
  d->ops->cross_entropy_combine(d, lse, tl, parts, tl, ROWS, 2); /* losses alias target_logit */
  d->ops->copy_d2h(d, o->comb_lse, lse, sizeof o->comb_lse);
  d->ops->copy_d2h(d, o->comb_losses, tl, sizeof o->comb_losses);
  void *all[] = {logits, mask, targets, losses, lse, parts, tl};
  for (int i = 0; i < 7; i++) d->ops->free(d, all[i]);
}

static void run_attention(td_device *d, const inputs *in, outputs *o) {
  float *qkv = up(d, in->qkv, sizeof in->qkv);
  float *out = d->ops->alloc(d, sizeof o->att_out), *lse = d->ops->alloc(d, sizeof o->att_lse);
  td_attention_desc a = {.batch = AB, .seq = AT, .heads = AH, .head_dim = AD, .dtype = TD_F32,
                         .scale = 0.25f, .qkv = qkv, .out = out, .lse = lse};
  d->ops->attention_forward(d, &a);
  d->ops->copy_d2h(d, o->att_out, out, sizeof o->att_out);
  d->ops->copy_d2h(d, o->att_lse, lse, sizeof o->att_lse);
  d->ops->free(d, qkv), d->ops->free(d, out), d->ops->free(d, lse);
}

static void run_all(td_device *d, const inputs *in, outputs *o) {
  memset(o, 0, sizeof *o);
  run_matmul(d, in, o);
  run_elementwise(d, in, o);
  run_layernorm(d, in, o);
  run_adamw(d, in, o);
  run_loss(d, in, o);
  run_attention(d, in, o);
}

#define SAME(field) \
  CHECK(!memcmp(got->field, want->field, sizeof want->field), "%s: the CPU's bits", #field)

static void test_same_bits(td_device *sealed) {
  inputs *in = td_calloc(sizeof *in);
  outputs *want = td_calloc(sizeof *want), *got = td_calloc(sizeof *got);
  make_inputs(in);
  run_all(tst_device(), in, want);
  run_all(sealed, in, got);
  SAME(c), SAME(sum), SAME(bf), SAME(filled), SAME(ln_out), SAME(mean), SAME(rstd);
  SAME(p), SAME(m), SAME(v), SAME(losses), SAME(lse), SAME(comb_losses), SAME(comb_lse);
  SAME(att_out), SAME(att_lse);
  CHECK(!memcmp(&got->sumsq, &want->sumsq, sizeof got->sumsq), "sum_squares: the CPU's bits (%.17g)",
        got->sumsq);
  CHECK(!memcmp(&got->masked, &want->masked, sizeof got->masked),
        "masked_sum: the CPU's bits (%.17g)", got->masked);
  td_free(in), td_free(want), td_free(got);
}

/* ------------------------------------------------------------ the table */

/* Slot i of an ops table from alloc on (all function pointers) is set. */
typedef void (*any_fn)(void);
static int slot_set(const td_device_ops *o, size_t i) {
  any_fn f;
  memcpy(&f, (const char *)o + offsetof(td_device_ops, alloc) + i * sizeof f, sizeof f);
  return f != NULL;
}

static void test_table(td_device *d) {
  const size_t slots = (sizeof(td_device_ops) - offsetof(td_device_ops, alloc)) / sizeof(any_fn);
  int missing = 0;
  for (size_t i = 0; i < slots; i++) missing += slot_set(tst_device()->ops, i) && !slot_set(d->ops, i);
  CHECK(missing == 0, "every op the CPU has is set (%d of %zu missing)", missing, slots);
  CHECK(!strcmp(d->ops->name, "sealed") && !td_device_has(d, TD_DEVICE_HOST_MEMORY),
        "named sealed, without host memory");
  char buf[160];
  td_device_describe(d, buf, sizeof buf);
  CHECK(strstr(buf, "sealed (the CPU backend") == buf, "describe: %s", buf);
  CHECK(!strstr(td_device_names(), "sealed"), "not listed to users: %s", td_device_names());
}

/* ------------------------------------------------------------ memory */

static void test_memory(td_device *d) {
  size_t a0, p0, a1, p1, a2, p2;
  d->ops->memory_stats(d, &a0, &p0);
  void *x = d->ops->alloc(d, 1000), *y = d->ops->alloc(d, 5000);
  d->ops->memory_stats(d, &a1, &p1);
  CHECK(a1 == a0 + 6000 && p1 >= a1, "allocated %zu -> %zu, peak %zu", a0, a1, p1);
  d->ops->free(d, y);
  d->ops->free(d, NULL);
  d->ops->memory_stats(d, &a2, &p2);
  CHECK(a2 == a0 + 1000 && p2 == p1, "after a free: allocated %zu, peak %zu kept", a2, p2);
  CHECK(((uintptr_t)x & 63) == 0, "64-byte aligned");
  float ones[250], back[250];
  for (int i = 0; i < 250; i++) ones[i] = 1.0f;
  d->ops->copy_h2d(d, x, ones, sizeof ones);
  d->ops->free(d, x);
  void *z = d->ops->alloc(d, 1000);
  CHECK(z != x && z != y, "a freed address is not handed out again (%p, then %p)", x, z);
  d->ops->copy_d2h(d, back, z, sizeof back);
  int zero = 1;
  for (int i = 0; i < 250; i++) zero &= back[i] == 0.0f;
  CHECK(zero, "new memory is zeroed");
  d->ops->free(d, z);
}

/* ------------------------------------------------------------ faults */

typedef void (*poke_fn)(td_device *d, char *p);

/* Run poke(d, p) in a child with stderr in a temporary file: 1 when the child
 * died of signal sig (0: exited with a failure status) and its stderr holds
 * `want` (out: the stderr's start). */
static int child_dies(td_device *d, char *p, poke_fn poke, const char *want, char *out, size_t n,
                      int sig) {
  FILE *f = tmpfile();
  if (!f) return 0;
  fflush(stdout), fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    dup2(fileno(f), 2);
    poke(d, p);
    _exit(0); /* survived: the test fails */
  }
  int status = 0;
  waitpid(pid, &status, 0);
  rewind(f);
  size_t got = fread(out, 1, n - 1, f);
  out[got] = '\0';
  fclose(f);
  char *nl = strchr(out, '\n');
  int found = strstr(out, want) != NULL;
  if (nl) *nl = '\0'; /* the message line, for the check's output */
  int died = sig ? WIFSIGNALED(status) && WTERMSIG(status) == sig
                 : WIFEXITED(status) && WEXITSTATUS(status) != 0;
  return died && found;
}

static int crashes(td_device *d, char *p, poke_fn poke, const char *want, char *out, size_t n) {
  return child_dies(d, p, poke, want, out, n, SIGSEGV);
}

static void write_into(td_device *d, char *p) { (void)d, *(volatile char *)p = 1; }
static void read_at(td_device *d, char *p) { (void)d, (void)*(volatile char *)p; }
/* device memory passed where copy_h2d takes host memory */
static void h2d_from_device(td_device *d, char *p) {
  void *dst = d->ops->alloc(d, 64);
  d->ops->copy_h2d(d, dst, p, 64);
}

/* host memory where an op takes device memory: a GPU kernel would fault on it */
static void scale_host(td_device *d, char *p) {
  (void)p;
  float host[4] = {1, 2, 3, 4};
  d->ops->scale(d, host, 4, 2.0f);
}

/* An op given a host pointer for device memory fails naming the op (not a
 * signal: also under AddressSanitizer). */
static void test_host_pointer_refused(td_device *d) {
  char out[4096];
  int ok = child_dies(d, NULL, scale_host, "scale was given host memory", out, sizeof out, 0);
  CHECK(ok, "host memory as an op's device argument: %s", out);
}

static void test_faults(td_device *d) {
  if (UNDER_ASAN) {
    printf("  skip  host accesses to sealed memory (AddressSanitizer's SIGSEGV handler reports "
           "them first)\n");
    return;
  }
  char out[4096];
  const size_t bytes = 3000, page = (size_t)sysconf(_SC_PAGESIZE);
  char *p = d->ops->alloc(d, bytes);
  float v[4] = {1, 2, 3, 4};
  d->ops->copy_h2d(d, p, v, sizeof v); /* an op opened and sealed it again */
  int ok = crashes(d, p + 8, write_into, "host code touched sealed device memory", out, sizeof out);
  CHECK(ok && strstr(out, "inside an allocation of 3000 bytes"), "a host write: %s", out);
  char *guard = p + (bytes + page - 1) / page * page;
  ok = crashes(d, guard, read_at, "guard page", out, sizeof out);
  CHECK(ok && strstr(out, "host code touched"), "a host read past the end: %s", out);
  ok = crashes(d, p, h2d_from_device, "while op copy_h2d ran", out, sizeof out);
  CHECK(ok, "device memory as copy_h2d's host source: %s", out);
  d->ops->free(d, p);
  ok = crashes(d, p, read_at, "outside any live allocation", out, sizeof out);
  CHECK(ok, "a host read of freed memory: %s", out);
}

/* A child that reserves 1 GiB and asks for 2. Run before this process has
 * reserved anything (the reservation is made once per process). */
static void test_reservation_used_up(void) {
  FILE *f = tmpfile();
  if (!f) return;
  fflush(stdout), fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fileno(f), 2);
    setenv("TRIDENT_SEALED_RESERVE_GIB", "1", 1);
    td_device *d = td_device_open("sealed");
    d->ops->alloc(d, (size_t)600 << 20);
    d->ops->alloc(d, (size_t)600 << 20);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  char out[2048];
  rewind(f);
  out[fread(out, 1, sizeof out - 1, f)] = '\0';
  fclose(f);
  int failed = WIFEXITED(status) && WEXITSTATUS(status) != 0;
  char *nl = strchr(out, '\n');
  if (nl) *nl = '\0';
  CHECK(failed && strstr(out, "TRIDENT_SEALED_RESERVE_GIB"), "a used-up reservation: %s", out);
}

int main(void) {
  test_reservation_used_up();
  td_device *d = td_device_open("sealed");
  test_table(d);
  test_memory(d);
  test_same_bits(d);
  test_faults(d);
  test_host_pointer_refused(d);
  td_device_close(d);
  return tst_finish();
}
