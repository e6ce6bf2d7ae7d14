/* device_comm.h under mpirun -np N (and as a world of one): every operation on
 * device memory, on each path it can take, against comm.h's result on host
 * copies of the same data:
 *   - cpu: host memory, straight to MPI;
 *   - sealed, --distributed-backend gloo: staged through host copies;
 *   - sealed, nccl: the device collective library's path (comm/ccl.h) with the
 *     sealed device's MPI stand-in for NCCL: the bootstrap, the blocking ops
 *     on the compute stream, the non-blocking ones on the communication stream
 *     with their events, the all-to-all and gather as grouped send/recv, the
 *     point-to-point channels between neighbours;
 *   - cuda, when a GPU is visible: staged (ranks share the GPU here).
 * The sealed device faults on any host access to its memory, so a path that
 * touched device memory outside an op would crash this test. Odd counts, and
 * split communicators (freed with their library twin attached). */
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/rng.h"
#include "check.h"
#include "comm/comm.h"
#include "comm/device_comm.h"

static td_comm *g_world;
static int g_rank, g_size, g_failed;
static uint64_t g_seed; /* rank 0's test seed: every rank fills as any other would */

#define expect(ok, ...) (g_failed |= !tst_check_on_rank(g_rank, g_size, (ok), __VA_ARGS__))

/* Host data of rank r: values that differ per rank and element (fp32 with
 * fractions, so a sum's order would show in its bits). */
static void fill(float *x, int64_t n, int r, uint64_t stream) {
  for (int64_t i = 0; i < n; i++)
    x[i] = (float)(td_rng_u32(g_seed, stream * 64 + (uint64_t)r, (uint64_t)i) >> 8) * 0x1p-20f - 3.0f;
}

typedef struct {
  td_device *d;
  const char *name;
} path;

static float *to_device(path *p, const float *h, int64_t n) {
  float *x = p->d->ops->alloc(p->d, (size_t)(n ? n : 1) * sizeof(float));
  if (n) p->d->ops->copy_h2d(p->d, x, h, (size_t)n * sizeof(float));
  return x;
}
static float *to_host(path *p, const float *x, int64_t n) {
  float *h = td_malloc((size_t)(n ? n : 1) * sizeof(float));
  if (n) p->d->ops->copy_d2h(p->d, h, x, (size_t)n * sizeof(float));
  return h;
}
static int same(const float *a, const float *b, int64_t n) {
  return n == 0 || memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

static void check_all_reduce(path *p, td_comm *c, int64_t n, td_reduce_op op) {
  float *h = td_malloc((size_t)n * sizeof(float) + 4);
  fill(h, n, td_comm_rank(c), 1);
  float *x = to_device(p, h, n);
  td_dcomm_all_reduce(c, p->d, x, x, n, TD_F32, op);
  td_comm_all_reduce(c, h, h, n, TD_F32, op);
  float *got = to_host(p, x, n);
  expect(same(got, h, n), "%s: all_reduce op %d of %lld floats over %d ranks (in place) == MPI's",
         p->name, (int)op, (long long)n, td_comm_size(c));
  td_free(got), td_free(h);
  p->d->ops->free(p->d, x);
}

/* all_gather, blocking and not, in place and not; gather to root. */
static void check_gathers(path *p, td_comm *c, int64_t n) {
  const int me = td_comm_rank(c), size = td_comm_size(c);
  const int64_t all = n * size;
  float *h = td_malloc((size_t)(all + 1) * sizeof(float)), *ref = td_malloc((size_t)(all + 1) * sizeof(float));
  fill(h, n, me, 2);
  td_comm_all_gather(c, h, ref, n, TD_F32);
  float *send = to_device(p, h, n);
  float *recv = p->d->ops->alloc(p->d, (size_t)(all + 1) * sizeof(float));

  td_dcomm_all_gather(c, p->d, send, recv, n, TD_F32);
  float *got = to_host(p, recv, all);
  expect(same(got, ref, all), "%s: all_gather of %lld floats x %d ranks", p->name, (long long)n, size);
  td_free(got);

  p->d->ops->fill(p->d, recv, TD_F32, all, 0.0f);
  p->d->ops->copy_d2d(p->d, recv + n * me, send, (size_t)n * sizeof(float));
  td_dcomm_request r;
  td_dcomm_iall_gather(c, p->d, recv + n * me, recv, n, TD_F32, &r);
  while (!td_dcomm_test(&r)) {
  }
  got = to_host(p, recv, all);
  expect(same(got, ref, all), "%s: iall_gather in place, completed by test, %lld floats", p->name,
         (long long)n);
  td_free(got);

  for (int root = 0; root < size; root += size > 1 ? size - 1 : 1) {
    p->d->ops->fill(p->d, recv, TD_F32, all, 0.0f);
    td_dcomm_gather(c, p->d, send, me == root ? recv : NULL, n, TD_F32, root);
    if (me == root) {
      got = to_host(p, recv, all);
      expect(same(got, ref, all), "%s: gather of %lld floats to root %d", p->name, (long long)n, root);
      td_free(got);
    }
  }
  td_free(h), td_free(ref);
  p->d->ops->free(p->d, send), p->d->ops->free(p->d, recv);
}

/* All-to-all: block q of rank r's send is block r of rank q's receive. Two in
 * flight at once, completed by wait (ZeRO's bucket exchange). */
static void check_all_to_all(path *p, td_comm *c, int64_t n) {
  const int me = td_comm_rank(c), size = td_comm_size(c);
  const int64_t all = n * size;
  float *h[2], *ref[2], *send[2], *recv[2];
  td_dcomm_request r[2];
  for (int k = 0; k < 2; k++) {
    h[k] = td_malloc((size_t)(all + 1) * sizeof(float)), ref[k] = td_malloc((size_t)(all + 1) * sizeof(float));
    fill(h[k], all, me, 3 + (uint64_t)k);
    td_comm_all_to_all(c, h[k], ref[k], n, TD_F32);
    send[k] = to_device(p, h[k], all);
    recv[k] = p->d->ops->alloc(p->d, (size_t)(all + 1) * sizeof(float));
    td_dcomm_iall_to_all(c, p->d, send[k], recv[k], n, TD_F32, &r[k]);
  }
  for (int k = 0; k < 2; k++) {
    td_dcomm_wait(&r[k]);
    float *got = to_host(p, recv[k], all);
    expect(same(got, ref[k], all), "%s: iall_to_all #%d of %lld floats per rank, %d ranks", p->name,
           k, (long long)n, size);
    td_free(got), td_free(h[k]), td_free(ref[k]);
    p->d->ops->free(p->d, send[k]), p->d->ops->free(p->d, recv[k]);
  }
}

/* The pipeline's point-to-point, as 1F1B uses it: rank r sends two messages
 * up to r + 1 (both in flight at once), then receives two from r + 1 going
 * down, each side in the same order; with the library, through the channels
 * of td_dcomm_p2p_setup. */
static void check_send_recv(path *p, td_comm *c, int64_t n) {
  const int me = td_comm_rank(c), size = td_comm_size(c);
  if (size < 2) return;
  for (int down = 0; down < 2; down++) {
    const int to = down ? me - 1 : me + 1, from = down ? me + 1 : me - 1;
    const int sends = to >= 0 && to < size, recvs = from >= 0 && from < size;
    float *h[2], *ref[2], *x[2], *y[2];
    td_dcomm_request r[2];
    for (int k = 0; k < 2; k++) {
      h[k] = td_malloc((size_t)n * sizeof(float) + 4), ref[k] = td_malloc((size_t)n * sizeof(float) + 4);
      fill(h[k], n, me, 5 + (uint64_t)(2 * down + k));
      if (recvs) fill(ref[k], n, from, 5 + (uint64_t)(2 * down + k));
      x[k] = to_device(p, h[k], n);
      y[k] = p->d->ops->alloc(p->d, (size_t)n * sizeof(float) + 4);
      if (sends) td_dcomm_isend(c, p->d, x[k], n, TD_F32, to, k, &r[k]);
    }
    for (int k = 0; k < 2; k++) {
      if (recvs) td_dcomm_recv(c, p->d, y[k], n, TD_F32, from, k);
      float *got = to_host(p, y[k], n);
      expect(!recvs || same(got, ref[k], n), "%s: isend / recv #%d of %lld floats %s a chain of %d",
             p->name, k, (long long)n, down ? "down" : "up", size);
      td_free(got);
    }
    for (int k = 0; k < 2; k++) {
      if (sends) td_dcomm_wait(&r[k]);
      td_free(h[k]), td_free(ref[k]);
      p->d->ops->free(p->d, x[k]), p->d->ops->free(p->d, y[k]);
    }
  }
}

static void check_path(path *p) {
  static const int64_t counts[] = {1, 13, 4099};
  td_comm *halves = td_comm_split(g_world, g_rank % 2, g_rank); /* evens, odds */
  td_comm *comms[2] = {g_world, halves};
  for (int k = 0; k < 2; k++) td_dcomm_bind(comms[k], p->d), td_dcomm_p2p_setup(comms[k], p->d);
  for (int k = 0; k < 2; k++)
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) {
      check_all_reduce(p, comms[k], counts[i], TD_OP_SUM);
      check_all_reduce(p, comms[k], counts[i], TD_OP_MAX);
      check_gathers(p, comms[k], counts[i]);
      check_all_to_all(p, comms[k], counts[i]);
      check_send_recv(p, comms[k], counts[i]);
    }
  const int library = td_dcomm_uses_library(p->d);
  expect(!library || td_comm_size(halves) == 1 || td_comm_attached(halves) != NULL,
         "%s: a communicator used with the library has its library twin", p->name);
  expect(library || td_comm_attached(halves) == NULL, "%s: no library twin without the library",
         p->name);
  td_comm_free(halves); /* with its twin: the sanitizer build checks nothing leaks */
}

static void run_path(const char *device, int want_library, const char *name, const char *expect_line) {
  path p = {td_device_open_index(device, td_comm_local_rank()), name};
  char line[640];
  int lib = td_dcomm_setup(g_world, p.d, want_library, line, sizeof line);
  if (g_rank == 0) printf("%s: collectives: %s\n", name, line);
  if (g_size == 1) expect_line = "none (one rank)";
  if (expect_line) {
    expect(strstr(line, expect_line) != NULL, "%s: td_dcomm_setup says '%s' (expected '%s')",
           name, line, expect_line);
    expect(lib == (g_size > 1 && !strcmp(expect_line, "mpi-staged MPI stand-in")),
           "%s: the library is used exactly when chosen", name);
  }
  check_path(&p);
  td_dcomm_release(p.d);
  td_device_close(p.d);
}

int main(void) {
  g_world = td_comm_init();
  g_rank = td_comm_rank(g_world), g_size = td_comm_size(g_world);
  if (g_rank == 0) printf("world of %d ranks\n", g_size);
  g_seed = tst_seed();
  td_comm_broadcast(g_world, &g_seed, 1, TD_I64, 0);
  run_path("cpu", 1, "cpu", "MPI (host memory)");
  run_path("sealed", 0, "sealed, gloo", "MPI through host copies (--distributed-backend gloo)");
  run_path("sealed", 1, "sealed, nccl", "mpi-staged MPI stand-in");
  if (td_device_available("cuda"))
    run_path("cuda", 1, "cuda", g_size > 1 ? NULL : "none"); /* NCCL when each rank has a GPU */
  else if (g_rank == 0)
    printf("SKIP cuda paths: no GPU visible\n");
  int32_t failed = g_failed;
  if (g_rank == 0) failed |= tst_finish();
  td_comm_all_reduce(g_world, &failed, &failed, 1, TD_I32, TD_OP_MAX);
  td_comm_finalize();
  return failed;
}
