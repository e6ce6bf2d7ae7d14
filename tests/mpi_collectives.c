/* Collectives under mpirun -np N (and, run without mpirun, in a world of one):
 * every collective, blocking and non-blocking, for every dtype, against values
 * computed locally; split groups; the topology's communicators; and the checks
 * of Megatron-LM's own unit tests (tests/unit_tests/test_parallel_state.py,
 * tensor_parallel/test_mappings.py, test_data.py, test_utils.py).
 *
 * Each check is decided on every rank and combined over the world (a rank that
 * sees a wrong value prints it to stderr); rank 0 reports. */
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "check.h"
#include "comm/comm.h"
#include "comm/topology.h"

static td_comm *g_world;
static int g_rank, g_size, g_failed;

/* ok on every rank of the world? Rank 0 records the check. */
static void expect(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void expect(int ok, const char *fmt, ...) {
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (!ok) fprintf(stderr, "rank %d: FAIL %s\n", g_rank, what);
  int32_t all = ok;
  td_comm_all_reduce(g_world, &all, &all, 1, TD_I32, TD_OP_MIN);
  if (!all) g_failed = 1;
  if (g_rank == 0) CHECK(all, "%d ranks: %s", g_size, what);
}

/* ---- values in any dtype ---- */

static const td_dtype k_dtypes[] = {TD_F32, TD_BF16, TD_F16, TD_I32, TD_I64, TD_F64};
enum { N_DTYPES = 6 };

static int is_float(td_dtype dt) {
  return dt == TD_F32 || dt == TD_BF16 || dt == TD_F16 || dt == TD_F64;
}

/* Small multiples of 1/2 (floats) or integers: exact in every dtype, and so are
 * their sums over 8 ranks. */
static double value(td_dtype dt, int rank, int64_t i) {
  double v = (double)((rank * 7 + i * 3) % 11 - 5);
  return is_float(dt) ? 0.5 * v : v;
}

static void put(void *buf, int64_t i, td_dtype dt, double v) {
  switch (dt) {
  case TD_F32: ((float *)buf)[i] = (float)v; break;
  case TD_BF16: ((uint16_t *)buf)[i] = td_f32_to_bf16((float)v); break;
  case TD_F16: ((uint16_t *)buf)[i] = td_f32_to_f16((float)v); break;
  case TD_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
  case TD_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
  case TD_F64: ((double *)buf)[i] = v; break;
  }
}

static double get(const void *buf, int64_t i, td_dtype dt) {
  switch (dt) {
  case TD_F32: return ((const float *)buf)[i];
  case TD_BF16: return td_bf16_to_f32(((const uint16_t *)buf)[i]);
  case TD_F16: return td_f16_to_f32(((const uint16_t *)buf)[i]);
  case TD_I32: return ((const int32_t *)buf)[i];
  case TD_I64: return (double)((const int64_t *)buf)[i];
  case TD_F64: return ((const double *)buf)[i];
  }
  return NAN;
}

/* buf[j] = value(dt, rank, first + j) for j < n. */
static void *fill(td_dtype dt, int rank, int64_t first, int64_t n) {
  void *b = td_calloc((size_t)(n ? n : 1) * td_dtype_size(dt));
  for (int64_t j = 0; j < n; j++) put(b, j, dt, value(dt, rank, first + j));
  return b;
}

static double reduced(td_dtype dt, td_reduce_op op, int64_t i) {
  double acc = value(dt, 0, i);
  for (int r = 1; r < g_size; r++) {
    double v = value(dt, r, i);
    acc = op == TD_OP_SUM ? acc + v : op == TD_OP_MAX ? fmax(acc, v) : fmin(acc, v);
  }
  return acc;
}

/* buf[j] == want(first + j) for j < n, with want = reduced(op) or value(rank). */
static int equals_reduced(const void *buf, td_dtype dt, td_reduce_op op, int64_t first, int64_t n) {
  for (int64_t j = 0; j < n; j++)
    if (get(buf, j, dt) != reduced(dt, op, first + j)) return 0;
  return 1;
}

static int equals_values(const void *buf, td_dtype dt, int rank, int64_t first, int64_t n) {
  for (int64_t j = 0; j < n; j++)
    if (get(buf, j, dt) != value(dt, rank, first + j)) return 0;
  return 1;
}

static const char *op_name(td_reduce_op op) {
  return op == TD_OP_SUM ? "sum" : op == TD_OP_MAX ? "max" : "min";
}

/* ---- every collective: blocking (nb = 0) or not (nb = 1: test until done, 2: wait) ---- */

static const char *const k_how[3] = {"blocking", "non-blocking (test)", "non-blocking (wait)"};

static void complete(td_comm_request *r, int nb) {
  if (nb == 1)
    while (!td_comm_test(r)) {
    }
  else if (nb == 2)
    td_comm_wait(r);
}

static void check_reductions(td_dtype dt, int nb) {
  const char *how = k_how[nb];
  const int64_t counts[] = {0, 1, 37, 40000};
  size_t es = td_dtype_size(dt);
  for (int op_i = 0; op_i < 3; op_i++) {
    td_reduce_op op = (td_reduce_op)op_i;
    int ok_ar = 1, ok_in = 1, ok_red = 1, ok_rs = 1;
    for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
      int64_t n = counts[ci];
      void *send = fill(dt, g_rank, 0, n), *recv = td_calloc((size_t)(n + 1) * es);
      td_comm_request r;
      if (nb) td_comm_iall_reduce(g_world, send, recv, n, dt, op, &r), complete(&r, nb);
      else td_comm_all_reduce(g_world, send, recv, n, dt, op);
      ok_ar &= equals_reduced(recv, dt, op, 0, n) && equals_values(send, dt, g_rank, 0, n);
      if (nb) td_comm_iall_reduce(g_world, send, send, n, dt, op, &r), complete(&r, nb);
      else td_comm_all_reduce(g_world, send, send, n, dt, op);
      ok_in &= equals_reduced(send, dt, op, 0, n);
      /* reduce to the last rank */
      int root = g_size - 1;
      memset(recv, 0, (size_t)(n + 1) * es);
      td_free(send);
      send = fill(dt, g_rank, 0, n);
      if (nb) td_comm_ireduce(g_world, send, recv, n, dt, op, root, &r), complete(&r, nb);
      else td_comm_reduce(g_world, send, recv, n, dt, op, root);
      ok_red &= g_rank != root || equals_reduced(recv, dt, op, 0, n);
      td_free(send), td_free(recv);
      /* reduce-scatter: rank r gets block r of the reduced n x size elements */
      send = fill(dt, g_rank, 0, n * g_size), recv = td_calloc((size_t)(n + 1) * es);
      if (nb) td_comm_ireduce_scatter(g_world, send, recv, n, dt, op, &r), complete(&r, nb);
      else td_comm_reduce_scatter(g_world, send, recv, n, dt, op);
      ok_rs &= equals_reduced(recv, dt, op, (int64_t)g_rank * n, n);
      td_free(send), td_free(recv);
    }
    const char *d = td_dtype_name(dt), *o = op_name(op);
    expect(ok_ar, "%s all-reduce %s %s", how, o, d);
    expect(ok_in, "%s all-reduce %s %s in place", how, o, d);
    expect(ok_red, "%s reduce %s %s to the last rank", how, o, d);
    expect(ok_rs, "%s reduce-scatter %s %s", how, o, d);
  }
}

static void check_data_movement(td_dtype dt, int nb) {
  const char *how = k_how[nb], *d = td_dtype_name(dt);
  const int64_t n = 29;
  int64_t total = n * g_size;
  size_t es = td_dtype_size(dt);
  int root = 1 % g_size;
  td_comm_request r;

  /* broadcast: everyone ends with the root's values */
  void *buf = fill(dt, g_rank, 0, n);
  if (nb) td_comm_ibroadcast(g_world, buf, n, dt, root, &r), complete(&r, nb);
  else td_comm_broadcast(g_world, buf, n, dt, root);
  expect(equals_values(buf, dt, root, 0, n), "%s broadcast %s from rank %d", how, d, root);
  td_free(buf);

  /* scatter: rank r gets block r of the root's buffer */
  void *all = fill(dt, root, 0, total), *mine = td_calloc((size_t)n * es);
  if (nb) td_comm_iscatter(g_world, all, mine, n, dt, root, &r), complete(&r, nb);
  else td_comm_scatter(g_world, all, mine, n, dt, root);
  expect(equals_values(mine, dt, root, (int64_t)g_rank * n, n), "%s scatter %s", how, d);
  td_free(all), td_free(mine);

  /* gather / all-gather: block r holds rank r's values (value(r, r*n + j)) */
  mine = fill(dt, g_rank, (int64_t)g_rank * n, n);
  all = td_calloc((size_t)total * es);
  if (nb) td_comm_igather(g_world, mine, all, n, dt, root, &r), complete(&r, nb);
  else td_comm_gather(g_world, mine, all, n, dt, root);
  int ok = 1;
  for (int q = 0; q < g_size && g_rank == root; q++)
    ok &= equals_values((char *)all + (size_t)q * n * es, dt, q, (int64_t)q * n, n);
  expect(ok, "%s gather %s to rank %d", how, d, root);
  memset(all, 0, (size_t)total * es);
  if (nb) td_comm_iall_gather(g_world, mine, all, n, dt, &r), complete(&r, nb);
  else td_comm_all_gather(g_world, mine, all, n, dt);
  ok = 1;
  for (int q = 0; q < g_size; q++)
    ok &= equals_values((char *)all + (size_t)q * n * es, dt, q, (int64_t)q * n, n);
  expect(ok, "%s all-gather %s", how, d);
  /* in place: this rank's block already sits in the output */
  memset(all, 0, (size_t)total * es);
  void *own = (char *)all + (size_t)g_rank * n * es;
  memcpy(own, mine, (size_t)n * es);
  if (nb) td_comm_iall_gather(g_world, own, all, n, dt, &r), complete(&r, nb);
  else td_comm_all_gather(g_world, own, all, n, dt);
  ok = 1;
  for (int q = 0; q < g_size; q++)
    ok &= equals_values((char *)all + (size_t)q * n * es, dt, q, (int64_t)q * n, n);
  expect(ok, "%s all-gather %s in place", how, d);
  td_free(mine), td_free(all);

  /* all-to-all: block q of rank r's input goes to block r of rank q's output;
   * rank r's input is value(r, k) for k < total. */
  void *in = fill(dt, g_rank, 0, total), *out = td_calloc((size_t)total * es);
  if (nb) td_comm_iall_to_all(g_world, in, out, n, dt, &r), complete(&r, nb);
  else td_comm_all_to_all(g_world, in, out, n, dt);
  ok = 1;
  for (int q = 0; q < g_size; q++)
    ok &= equals_values((char *)out + (size_t)q * n * es, dt, q, (int64_t)g_rank * n, n);
  expect(ok, "%s all-to-all %s", how, d);
  td_free(in), td_free(out);

  /* send / recv around a ring */
  if (g_size > 1) {
    int next = (g_rank + 1) % g_size, prev = (g_rank + g_size - 1) % g_size;
    void *s = fill(dt, g_rank, 5, n), *v = td_calloc((size_t)n * es);
    if (nb) {
      td_comm_request rq[2];
      td_comm_irecv(g_world, v, n, dt, prev, 7, &rq[0]);
      td_comm_isend(g_world, s, n, dt, next, 7, &rq[1]);
      td_comm_wait_all(rq, 2);
    } else if (g_rank % 2 == 0) { /* even ranks send first, so blocking never deadlocks */
      td_comm_send(g_world, s, n, dt, next, 7);
      td_comm_recv(g_world, v, n, dt, prev, 7);
    } else {
      td_comm_recv(g_world, v, n, dt, prev, 7);
      td_comm_send(g_world, s, n, dt, next, 7);
    }
    expect(equals_values(v, dt, prev, 5, n), "%s send/recv %s around the ring", how, d);
    td_free(s), td_free(v);
  }
}

/* Several non-blocking operations in flight at once, then waited together. */
static void check_overlapped(void) {
  enum { K = 4, N = 1000 };
  float *a[K];
  uint16_t *h[K];
  td_comm_request rq[2 * K];
  for (int k = 0; k < K; k++) {
    a[k] = fill(TD_F32, g_rank, k * N, N);
    h[k] = fill(TD_BF16, g_rank, k * N, N);
    td_comm_iall_reduce(g_world, a[k], a[k], N, TD_F32, TD_OP_SUM, &rq[2 * k]);
    td_comm_iall_reduce(g_world, h[k], h[k], N, TD_BF16, TD_OP_SUM, &rq[2 * k + 1]);
  }
  td_comm_request b;
  td_comm_ibarrier(g_world, &b);
  td_comm_wait_all(rq, 2 * K);
  td_comm_wait(&b);
  int ok = 1;
  for (int k = 0; k < K; k++) {
    ok &= equals_reduced(a[k], TD_F32, TD_OP_SUM, k * N, N);
    ok &= equals_reduced(h[k], TD_BF16, TD_OP_SUM, k * N, N);
    td_free(a[k]), td_free(h[k]);
  }
  expect(ok, "%d fp32 and %d bf16 all-reduces and a barrier in flight together", K, K);
}

/* bf16 / fp16 sums accumulate in fp32 and round once: rank 0 gives 256, the
 * others 1. A sum rounded to bf16 at each step would stay at 256 (256 + 1 ties to
 * even); accumulated in fp32 it is 255 + size, rounded once. */
static void check_half_accumulation(void) {
  for (int k = 1; k <= 2; k++) {
    td_dtype dt = k == 1 ? TD_BF16 : TD_F16;
    float big = dt == TD_BF16 ? 256.0f : 2048.0f; /* 8 / 11 significant bits */
    uint16_t x, want;
    put(&x, 0, dt, g_rank == 0 ? big : 1.0);
    put(&want, 0, dt, big + (g_size - 1));
    td_comm_all_reduce(g_world, &x, &x, 1, dt, TD_OP_SUM);
    expect(x == want, "%s sum %g + %d x 1 accumulates in fp32: %g (want %g)", td_dtype_name(dt),
           big, g_size - 1, get(&x, 0, dt), get(&want, 0, dt));
  }
}

/* Split into even and odd ranks, ordered by descending world rank. */
static void check_split(void) {
  td_comm *c = td_comm_split(g_world, g_rank % 2, -g_rank);
  int members = (g_size - g_rank % 2 + 1) / 2; /* ranks with my parity */
  int higher = (g_size - 1 - g_rank) / 2;      /* of them, above me */
  expect(td_comm_size(c) == members && td_comm_rank(c) == higher,
         "split by parity, key -rank: size and order");
  int32_t x = g_rank, sum = 0;
  td_comm_all_reduce(c, &x, &sum, 1, TD_I32, TD_OP_SUM);
  int32_t want = 0;
  for (int r = g_rank % 2; r < g_size; r += 2) want += r;
  expect(sum == want, "all-reduce within the parity groups");
  td_comm *none = td_comm_split(g_world, g_rank == 0 ? -1 : 0, g_rank);
  expect((g_rank == 0) == (none == NULL) && (!none || td_comm_size(none) == g_size - 1),
         "split with color -1 leaves rank 0 out");
  td_comm_free(none);
  td_comm_free(c);
}

/* ---- topology and Megatron's unit tests ---- */

static void check_topology(int tp, int pp) {
  td_topology t;
  td_topology_init(&t, g_world, tp, pp);
  int ok = 1;
  for (int k = 0; k < TD_GROUP_KINDS; k++) {
    int pos, g = td_layout_group_of(&t.layout, (td_group_kind)k, g_rank, &pos);
    td_comm *c = t.group[k];
    if (g < 0) {
      ok &= c == NULL;
      continue;
    }
    int n = td_layout_group_size(&t.layout, (td_group_kind)k);
    ok &= c && td_comm_size(c) == n && td_comm_rank(c) == pos;
    /* the members are who the layout says: gather world ranks inside the group */
    int32_t *got = td_malloc((size_t)n * sizeof *got), me = g_rank;
    int *want = td_malloc((size_t)n * sizeof *want);
    td_comm_all_gather(c, &me, got, 1, TD_I32);
    td_layout_group(&t.layout, (td_group_kind)k, g, want);
    for (int i = 0; i < n; i++) ok &= got[i] == want[i];
    td_free(got), td_free(want);
  }
  expect(ok, "topology tp %d pp %d dp %d: every group's communicator has the layout's ranks", tp,
         pp, t.layout.dp);
  td_topology_free(&t);
}

/* test_mappings.py test_CopyToModelParallelRegion: initialize_model_parallel(4, 2);
 * the backward of copy-to-tensor-parallel-region all-reduces the rank id within
 * each TP group: 0+1+2+3 = 6 on ranks 0-3 and 4+5+6+7 = 22 on ranks 4-7. */
static void check_copy_to_tp_region_backward(void) {
  if (g_size != 8) return;
  td_topology t;
  td_topology_init(&t, g_world, 4, 2);
  float grad = (float)g_rank;
  td_comm_all_reduce(t.group[TD_GROUP_TP], &grad, &grad, 1, TD_F32, TD_OP_SUM);
  expect(grad == (g_rank >= 4 ? 22.0f : 6.0f),
         "copy-to-TP-region backward, tp 4 pp 2: all-reduce of the rank id gives 6 on "
         "ranks 0-3, 22 on ranks 4-7");
  td_topology_free(&t);
}

/* test_data.py test_broadcast_data: initialize_model_parallel(2, 4) (or the
 * largest fit); TP rank 0 holds a dict {key: 8x8 tensor}; broadcast_data sends
 * the sizes, then the flattened values, from TP rank 0 to its TP group. The values
 * name the TP group, so data from another group would show. */
static void check_broadcast_data(void) {
  if (g_size % 2) return;
  int pp = g_size >= 8 ? 4 : 1;
  td_topology t;
  td_topology_init(&t, g_world, 2, pp);
  td_comm *tp = t.group[TD_GROUP_TP];
  int group = td_layout_group_of(&t.layout, TD_GROUP_TP, g_rank, NULL);
  enum { KEYS = 8, NUMEL = 64 };
  int64_t sizes[KEYS] = {0};
  float *flat = td_calloc(KEYS * NUMEL * sizeof(float));
  if (t.coord.tp == 0)
    for (int k = 0; k < KEYS; k++) {
      sizes[k] = NUMEL;
      for (int i = 0; i < NUMEL; i++) flat[k * NUMEL + i] = (float)(k + 100 * group);
    }
  td_comm_broadcast(tp, sizes, KEYS, TD_I64, 0);
  int64_t total = 0;
  for (int k = 0; k < KEYS; k++) total += sizes[k];
  td_comm_broadcast(tp, flat, total, TD_F32, 0);
  int ok = total == KEYS * NUMEL;
  for (int k = 0; k < KEYS && ok; k++)
    for (int i = 0; i < NUMEL; i++) ok &= flat[k * NUMEL + i] == (float)(k + 100 * group);
  expect(ok, "broadcast_data of a dict of 8 tensors 8x8 from TP rank 0 (tp 2 pp %d)", pp);
  td_free(flat);
  td_topology_free(&t);
}

/* test_utils.py test_gather_split_1d_tensor: initialize_model_parallel(2, 1);
 * ones(2) * rank all-gathered in the TP group is [r, r, r+1, r+1] on even ranks
 * and [r-1, r-1, r, r] on odd ones. */
static void check_gather_split_1d(void) {
  if (g_size % 2) return;
  td_topology t;
  td_topology_init(&t, g_world, 2, 1);
  float in[2] = {(float)g_rank, (float)g_rank}, out[4] = {0};
  td_comm_all_gather(t.group[TD_GROUP_TP], in, out, 2, TD_F32);
  float lo = (float)(g_rank % 2 ? g_rank - 1 : g_rank);
  expect(out[0] == lo && out[1] == lo && out[2] == lo + 1 && out[3] == lo + 1,
         "gather_split_1d_tensor within tp 2 groups");
  td_topology_free(&t);
}

int main(void) {
  g_world = td_comm_init();
  g_rank = td_comm_rank(g_world), g_size = td_comm_size(g_world);
  if (g_rank == 0)
    printf("world of %d ranks, MPI %s, %d threads per rank (default %d)\n", g_size,
           td_comm_mpi_active() ? "active" : "not used", omp_get_max_threads(),
           td_comm_default_threads());
  expect(td_comm_mpi_active() == (getenv("OMPI_COMM_WORLD_SIZE") != NULL),
         "MPI is initialised exactly when a launcher started us");
  for (int nb = 0; nb <= 2; nb++)
    for (int d = 0; d < N_DTYPES; d++) {
      check_reductions(k_dtypes[d], nb);
      check_data_movement(k_dtypes[d], nb);
    }
  td_comm_barrier(g_world);
  check_overlapped();
  check_half_accumulation();
  check_split();
  for (int tp = 1; tp <= g_size; tp *= 2)
    for (int pp = 1; tp * pp <= g_size; pp *= 2)
      if (g_size % (tp * pp) == 0) check_topology(tp, pp);
  check_copy_to_tp_region_backward();
  check_broadcast_data();
  check_gather_split_1d();
  if (g_size == 8) {
    td_topology t;
    td_topology_init(&t, g_world, 2, 2);
    td_topology_print(&t, stdout);
    td_topology_free(&t);
  }
  int failed = g_failed;
  if (g_rank == 0) failed |= tst_finish();
  td_comm_finalize();
  return failed;
}
