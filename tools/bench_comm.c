/* trident bench comm: bandwidth of the collectives by message size, with
 * nccl-tests' definitions (PERFORMANCE.md there), through trident's
 * communicator and through the raw MPI call on the same buffers, measured the
 * same way. Run under mpirun: `mpirun -np 2 trident bench comm`.
 *
 *   size S      all-reduce: the buffer; all-gather: the gathered output;
 *               reduce-scatter: the input; all-to-all: one rank's input;
 *               sendrecv (each rank sends to the next and receives from the
 *               previous, as pipeline stages do): the message
 *   time t      mean over k iterations (after a warm-up), the slowest rank's
 *   algbw       S / t
 *   busbw       algbw x 2(n-1)/n for all-reduce, x (n-1)/n for all-gather,
 *               reduce-scatter and all-to-all, x 1 for sendrecv: the rate each
 *               link runs at in the optimal algorithm, comparable across rank counts
 *
 * bf16 reductions stage through fp32 in trident (comm.h); raw MPI has no bf16
 * sum, so its columns are empty there. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/error.h"
#include "base/mem.h"
#include "bench_common.h"
#include "comm/comm.h"

typedef enum { ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, SENDRECV, N_OPS } bench_op;
static const char *const k_op_names[N_OPS] = {"all_reduce", "all_gather", "reduce_scatter",
                                              "all_to_all", "sendrecv"};

typedef struct {
  int64_t min_bytes, max_bytes;
  int factor, json, only; /* only: an op, or -1 for all */
  double seconds;
  td_dtype dtype;
} bench_args;

typedef struct {
  td_comm *comm;
  bench_op op;
  td_dtype dtype;
  int64_t count; /* per rank block (all-reduce: the whole buffer) */
  void *send, *recv;
  int raw;       /* 1: the MPI call itself */
} bench_case;

static void usage(FILE *f) {
  fprintf(f,
          "usage: mpirun -np N trident bench comm [--min-bytes B] [--max-bytes B] [--factor F]\n"
          "                                       [--dtype fp32|bf16] [--op NAME] [--seconds S]\n"
          "                                       [--json]\n"
          "  Bandwidth of all_reduce, all_gather, reduce_scatter, all_to_all and sendrecv (to the\n"
          "  next rank, from the previous: pipeline stages' traffic) by message size (nccl-tests'\n"
          "  algbw and busbw), trident's communicator next to the raw MPI call.\n"
          "  --min-bytes B  smallest size (default 1024; K, M, G suffixes)\n"
          "  --max-bytes B  largest size (default 16M)\n"
          "  --factor F     size step (default 4)\n"
          "  --dtype D      fp32 (default) or bf16\n"
          "  --op NAME      only this collective\n"
          "  --seconds S    time per measurement (default 0.2)\n"
          "  --json         one JSON object per line\n");
}

static int64_t parse_bytes(const char *flag, const char *s) {
  char *end;
  double v = strtod(s, &end);
  double unit = !strcmp(end, "K") ? 1024.0 : !strcmp(end, "M") ? 1048576.0
              : !strcmp(end, "G") ? 1073741824.0 : !*end ? 1.0 : 0.0;
  if (unit == 0.0 || !(v >= 1) || v * unit > 2147483648.0)
    td_fail("%s '%s': expected a size in bytes (K, M, G suffixes) from 1 to 2G", flag, s);
  return (int64_t)(v * unit);
}

static void parse(bench_args *a, int argc, char **argv) {
  *a = (bench_args){1024, 16 << 20, 4, 0, -1, 0.2, TD_F32};
  for (int i = 1; i < argc; i++) {
    const char *f = argv[i];
    int has_value = i + 1 < argc;
    if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
      usage(stdout);
      exit(0);
    } else if (!strcmp(f, "--json")) {
      a->json = 1;
    } else if (has_value && !strcmp(f, "--min-bytes")) {
      a->min_bytes = parse_bytes(f, argv[++i]);
    } else if (has_value && !strcmp(f, "--max-bytes")) {
      a->max_bytes = parse_bytes(f, argv[++i]);
    } else if (has_value && !strcmp(f, "--factor")) {
      a->factor = atoi(argv[++i]);
      if (a->factor < 2) td_fail("--factor '%s': expected an integer >= 2", argv[i]);
    } else if (has_value && !strcmp(f, "--dtype")) {
      if (td_dtype_from_name(argv[++i], &a->dtype) || (a->dtype != TD_F32 && a->dtype != TD_BF16))
        td_fail("--dtype '%s': expected fp32 or bf16", argv[i]);
    } else if (has_value && !strcmp(f, "--op")) {
      const char *name = argv[++i];
      for (int k = 0; k < N_OPS; k++)
        if (!strcmp(name, k_op_names[k])) a->only = k;
      if (a->only < 0)
        td_fail("--op '%s': expected all_reduce, all_gather, reduce_scatter, all_to_all or sendrecv",
                name);
    } else if (has_value && !strcmp(f, "--seconds")) {
      char *end;
      a->seconds = strtod(argv[++i], &end);
      if (*end || !(a->seconds > 0)) td_fail("--seconds '%s': expected a number > 0", argv[i]);
    } else {
      td_fail("unknown flag '%s' for 'trident bench comm' (see --help)", f);
    }
  }
  if (a->min_bytes > a->max_bytes)
    td_fail("--min-bytes %lld is larger than --max-bytes %lld", (long long)a->min_bytes,
            (long long)a->max_bytes);
}

static void mpi_ok(int rc, const char *fn) {
  if (rc != MPI_SUCCESS) td_fail("%s failed (MPI error %d)", fn, rc);
}

/* The raw MPI call on the same buffers (fp32 or 16-bit words; no 16-bit sums). */
static void run_raw(const bench_case *b) {
  MPI_Comm m = td_comm_mpi(b->comm);
  MPI_Datatype t = b->dtype == TD_F32 ? MPI_FLOAT : MPI_UINT16_T;
  int n = (int)b->count;
  switch (b->op) {
  case ALL_REDUCE:
    mpi_ok(MPI_Allreduce(b->send, b->recv, n, t, MPI_SUM, m), "MPI_Allreduce");
    break;
  case ALL_GATHER:
    mpi_ok(MPI_Allgather(b->send, n, t, b->recv, n, t, m), "MPI_Allgather");
    break;
  case REDUCE_SCATTER:
    mpi_ok(MPI_Reduce_scatter_block(b->send, b->recv, n, t, MPI_SUM, m),
           "MPI_Reduce_scatter_block");
    break;
  case ALL_TO_ALL: mpi_ok(MPI_Alltoall(b->send, n, t, b->recv, n, t, m), "MPI_Alltoall"); break;
  case SENDRECV: {
    int size = td_comm_size(b->comm), rank = td_comm_rank(b->comm);
    mpi_ok(MPI_Sendrecv(b->send, n, t, (rank + 1) % size, 0, b->recv, n, t,
                        (rank + size - 1) % size, 0, m, MPI_STATUS_IGNORE),
           "MPI_Sendrecv");
    break;
  }
  case N_OPS: break;
  }
}

/* trident's point-to-point calls as a pipeline stage uses them: a non-blocking
 * send to the next rank, a blocking receive from the previous one. */
static void sendrecv(const bench_case *b) {
  int size = td_comm_size(b->comm), rank = td_comm_rank(b->comm);
  td_comm_request r;
  td_comm_isend(b->comm, b->send, b->count, b->dtype, (rank + 1) % size, 0, &r);
  td_comm_recv(b->comm, b->recv, b->count, b->dtype, (rank + size - 1) % size, 0);
  td_comm_wait(&r);
}

static void run(const bench_case *b) {
  if (b->raw) {
    run_raw(b);
    return;
  }
  switch (b->op) {
  case ALL_REDUCE:
    td_comm_all_reduce(b->comm, b->send, b->recv, b->count, b->dtype, TD_OP_SUM);
    break;
  case ALL_GATHER: td_comm_all_gather(b->comm, b->send, b->recv, b->count, b->dtype); break;
  case REDUCE_SCATTER:
    td_comm_reduce_scatter(b->comm, b->send, b->recv, b->count, b->dtype, TD_OP_SUM);
    break;
  case ALL_TO_ALL: td_comm_all_to_all(b->comm, b->send, b->recv, b->count, b->dtype); break;
  case SENDRECV: sendrecv(b); break;
  case N_OPS: break;
  }
}

static double slowest(td_comm *c, double seconds) {
  float t = (float)seconds;
  td_comm_all_reduce(c, &t, &t, 1, TD_F32, TD_OP_MAX);
  return t;
}

/* Mean seconds per call, the slowest rank's: one warm-up, a timed call that sets
 * the iteration count (the same on every rank), then the timed iterations. */
static double time_case(const bench_case *b, double seconds, int *iters) {
  run(b);
  td_comm_barrier(b->comm);
  double t0 = td_now_seconds();
  run(b);
  double one = slowest(b->comm, td_now_seconds() - t0);
  int k = one > 0 && seconds / one < 1000 ? (int)(seconds / one) : 1000;
  if (k < 3) k = 3;
  td_comm_barrier(b->comm);
  t0 = td_now_seconds();
  for (int i = 0; i < k; i++) run(b);
  *iters = k;
  return slowest(b->comm, (td_now_seconds() - t0) / k);
}

/* nccl-tests' bus bandwidth factor. */
static double bus_factor(bench_op op, int n) {
  return op == ALL_REDUCE ? 2.0 * (n - 1) / n : op == SENDRECV ? 1.0 : (double)(n - 1) / n;
}

static void report(const bench_args *a, bench_op op, int n, int64_t bytes, int64_t count,
                   int iters, double t, int raw_iters, double raw_t) {
  double alg = bytes / t / 1e9, bus = alg * bus_factor(op, n);
  double raw_alg = raw_t > 0 ? bytes / raw_t / 1e9 : 0, raw_bus = raw_alg * bus_factor(op, n);
  if (a->json) {
    printf("{\"benchmark\": \"comm\", \"op\": \"%s\", \"dtype\": \"%s\", \"ranks\": %d, "
           "\"bytes\": %lld, \"count\": %lld, \"iters\": %d, \"time_us\": %.3f, "
           "\"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f",
           k_op_names[op], td_dtype_name(a->dtype), n, (long long)bytes, (long long)count, iters,
           t * 1e6, alg, bus);
    if (raw_t > 0)
      printf(", \"mpi_iters\": %d, \"mpi_time_us\": %.3f, \"mpi_algbw_gbps\": %.4f, "
             "\"mpi_busbw_gbps\": %.4f}\n",
             raw_iters, raw_t * 1e6, raw_alg, raw_bus);
    else
      printf(", \"mpi_iters\": null, \"mpi_time_us\": null, \"mpi_algbw_gbps\": null, "
             "\"mpi_busbw_gbps\": null}\n");
  } else if (raw_t > 0) {
    printf("%-15s %11lld %11lld %11.1f %9.3f %9.3f | %11.1f %9.3f %9.3f\n", k_op_names[op],
           (long long)bytes, (long long)count, t * 1e6, alg, bus, raw_t * 1e6, raw_alg, raw_bus);
  } else {
    printf("%-15s %11lld %11lld %11.1f %9.3f %9.3f | %11s %9s %9s\n", k_op_names[op],
           (long long)bytes, (long long)count, t * 1e6, alg, bus, "-", "-", "-");
  }
  fflush(stdout);
}

int td_bench_comm(int argc, char **argv) {
  bench_args a;
  parse(&a, argc, argv);
  td_comm *world = td_comm_init();
  int n = td_comm_size(world), rank = td_comm_rank(world);
  size_t es = td_dtype_size(a.dtype);
  int64_t max_elems = a.max_bytes / (int64_t)es + n; /* room for rounding up to n blocks */
  void *send = td_malloc((size_t)max_elems * es), *recv = td_calloc((size_t)max_elems * es);
  for (int64_t i = 0; i < max_elems; i++) { /* small values: no overflow, no denormals */
    float v = 0.001f * (float)(i % 7 + rank);
    if (a.dtype == TD_F32) ((float *)send)[i] = v;
    else ((uint16_t *)send)[i] = td_f32_to_bf16(v);
  }
  if (rank == 0 && !a.json) {
    printf("trident bench comm: %d ranks (%d on this node), %s, time = slowest rank's mean over "
           "~%.2g s; GB/s = 1e9 bytes/s\n",
           n, td_comm_local_size(), td_dtype_name(a.dtype), a.seconds);
    printf("%-15s %11s %11s %11s %9s %9s | %11s %9s %9s\n", "", "", "", "trident", "", "", "MPI",
           "", "");
    printf("%-15s %11s %11s %11s %9s %9s | %11s %9s %9s\n", "op", "bytes", "count", "time us",
           "algbw", "busbw", "time us", "algbw", "busbw");
  }
  for (int op = 0; op < N_OPS; op++) {
    if ((a.only >= 0 && op != a.only) || (op == SENDRECV && n == 1)) continue;
    for (int64_t s = a.min_bytes; s <= a.max_bytes; s *= a.factor) {
      /* whole blocks of one element or more per rank (all-reduce: any count) */
      int64_t total = s / (int64_t)es;
      int whole = op == ALL_REDUCE || op == SENDRECV; /* any count */
      if (!whole) total = total < n ? n : total / n * n;
      if (total < 1) total = 1;
      int64_t per_rank = whole ? total : total / n;
      bench_case b = {world, (bench_op)op, a.dtype, per_rank, send, recv, 0};
      int iters, raw_iters = 0;
      double t = time_case(&b, a.seconds, &iters), raw_t = 0;
      int reduces = op == ALL_REDUCE || op == REDUCE_SCATTER;
      if (td_comm_mpi_active() && !(reduces && a.dtype != TD_F32)) {
        b.raw = 1;
        raw_t = time_case(&b, a.seconds, &raw_iters);
      }
      if (rank == 0)
        report(&a, (bench_op)op, n, total * (int64_t)es, total, iters, t, raw_iters, raw_t);
    }
  }
  td_free(send), td_free(recv);
  td_comm_finalize();
  return 0;
}
