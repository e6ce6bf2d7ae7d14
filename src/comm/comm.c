#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "comm/comm.h"

#include <limits.h>
#include <omp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/watchdog.h"

struct td_comm {
  MPI_Comm mpi; /* MPI_COMM_NULL when MPI is not active (then size is 1) */
  int rank, size;
  void *attached; /* td_comm_attach's */
  void (*detach)(void *attached);
};

static td_comm g_world;
static int g_ready, g_finalized, g_mpi, g_local_size = 1, g_local_rank;

static void mpi_check(int rc, const char *fn) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", rc);
  td_fail("%s failed on rank %d of %d: %s", fn, g_world.rank, g_world.size, msg);
}

/* An MPI call: the blocking function, or its non-blocking form (whose arguments end
 * with the request). */
#define TD_MPI(blocking, fn, args, ifn, iargs)                                              \
  ((blocking) ? (td_watchdog_enter(#fn), mpi_check(fn args, #fn), td_watchdog_leave())    \
              : mpi_check(ifn iargs, #ifn))

/* A blocking MPI call under the watchdog (src/base/watchdog.h). */
#define TD_MPI_WATCHED(call, name) \
  (td_watchdog_enter(name), mpi_check(call, name), td_watchdog_leave())

/* After a rank's "trident: error: ..." line: the rank, in the same format, in
 * one flushed write before MPI_Abort, so the job's output names the failed rank
 * beside Open MPI's own notice. */
static void abort_all_ranks(int code) {
  fprintf(stderr, "trident: error: rank %d of %d failed (exit code %d): aborting every rank\n",
          g_world.rank, g_world.size, code);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
}

/* ------------------------------------------------------------------ fatal signals
 * A rank that crashes (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) says so, naming
 * itself, before it dies of the signal: mpirun then names the rank and the
 * signal too, and ends the job. The line is written with write(2) (the only
 * output a signal handler may do), built when MPI starts; the handler runs on
 * its own stack, so a stack overflow is reported as well. A handler installed
 * before (Open MPI's backtrace, a sanitizer's report) runs after the line.
 * A rank killed by SIGKILL cannot say anything: then only mpirun's notice names
 * it. The other ranks learn nothing from MPI (a collective with the dead rank
 * never returns: Open MPI 4.1 has no failure notification without ULFM);
 * mpirun stops them with SIGTERM, and each says so, so the job's output
 * explains every rank's end (the trainer's --exit-signal-handler replaces this
 * with its own SIGTERM handling). */

#define N_FATAL 5
static const int k_fatal[N_FATAL] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
static struct sigaction g_fatal_before[N_FATAL];
static char g_crash_line[96];
static size_t g_crash_len;

static const char *signal_name(int sig) {
  switch (sig) {
  case SIGSEGV: return "SIGSEGV (an invalid memory access)";
  case SIGBUS: return "SIGBUS (a bad memory access)";
  case SIGFPE: return "SIGFPE (an arithmetic fault)";
  case SIGILL: return "SIGILL (an illegal instruction)";
  default: return "SIGABRT (an abort)";
  }
}

static void on_fatal_signal(int sig, siginfo_t *info, void *context) {
  const char *name = signal_name(sig);
  (void)!write(2, g_crash_line, g_crash_len);
  (void)!write(2, name, strlen(name));
  (void)!write(2, "\n", 1);
  for (int i = 0; i < N_FATAL; i++) {
    const struct sigaction *b = &g_fatal_before[i];
    if (k_fatal[i] != sig) continue;
    sigaction(sig, b, NULL); /* the one before, for what it does next */
    if (b->sa_flags & SA_SIGINFO)
      b->sa_sigaction(sig, info, context);
    else if (b->sa_handler != SIG_DFL && b->sa_handler != SIG_IGN)
      b->sa_handler(sig);
  }
  signal(sig, SIG_DFL); /* die of it, so mpirun reports the signal */
  raise(sig);
}

static char g_term_line[192];
static size_t g_term_len;

static void on_sigterm(int sig) {
  (void)!write(2, g_term_line, g_term_len);
  signal(sig, SIG_DFL);
  raise(sig);
}

static void catch_signals(void) {
  static char alt_stack[1 << 16];
  stack_t ss = {.ss_sp = alt_stack, .ss_size = sizeof alt_stack};
  sigaltstack(&ss, NULL);
  int n = snprintf(g_crash_line, sizeof g_crash_line, "trident: error: rank %d of %d: killed by ",
                   g_world.rank, g_world.size);
  g_crash_len = n > 0 && (size_t)n < sizeof g_crash_line ? (size_t)n : 0;
  for (int i = 0; i < N_FATAL; i++) {
    struct sigaction sa = {.sa_sigaction = on_fatal_signal, .sa_flags = SA_SIGINFO | SA_ONSTACK};
    sigemptyset(&sa.sa_mask);
    sigaction(k_fatal[i], &sa, &g_fatal_before[i]);
  }
  n = snprintf(g_term_line, sizeof g_term_line,
               "trident: rank %d of %d: stopped by SIGTERM (mpirun stops all ranks when one "
               "fails; see the message naming the failed rank)\n",
               g_world.rank, g_world.size);
  g_term_len = n > 0 && (size_t)n < sizeof g_term_line ? (size_t)n : 0;
  struct sigaction old, term = {.sa_handler = on_sigterm};
  sigemptyset(&term.sa_mask);
  if (sigaction(SIGTERM, NULL, &old) == 0 && old.sa_handler == SIG_DFL) /* not a launcher's own */
    sigaction(SIGTERM, &term, NULL);
}

/* mpirun / mpiexec (Open MPI, MPICH's hydra, Intel MPI) and srun with PMI or PMIx
 * set one of these in every rank's environment. */
static int under_launcher(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
    if (getenv(vars[i])) return 1;
  return 0;
}

#if defined(__SANITIZE_ADDRESS__)
/* The sanitizer build (make test-sanitize): Open MPI's plugins are dlopen'ed and
 * closed again at MPI_Finalize, leaving allocations no stack can name or suppress;
 * LeakSanitizer's exit check runs only for processes that never started MPI. */
static int g_mpi_started;
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void) { return g_mpi_started; }
#define TD_NOTE_MPI_STARTED() (g_mpi_started = 1)
#else
#define TD_NOTE_MPI_STARTED() ((void)0)
#endif

static void init_mpi(void) {
  TD_NOTE_MPI_STARTED();
  int provided;
  int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) td_fail("MPI_Init_thread failed (error %d)", rc);
  g_mpi = 1;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  g_world.mpi = MPI_COMM_WORLD;
  mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &g_world.rank), "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &g_world.size), "MPI_Comm_size");
  if (g_world.size > 1) td_set_exit_hook(abort_all_ranks);
  if (g_world.size > 1) catch_signals();
  td_comm_set_timeout(TD_COMM_DEFAULT_TIMEOUT_S);
  if (provided < MPI_THREAD_FUNNELED)
    td_fail("the MPI library gives thread level %d, trident needs MPI_THREAD_FUNNELED (%d)",
            provided, MPI_THREAD_FUNNELED);
  MPI_Comm node;
  mpi_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_world.rank, MPI_INFO_NULL,
                                &node),
            "MPI_Comm_split_type");
  mpi_check(MPI_Comm_size(node, &g_local_size), "MPI_Comm_size");
  mpi_check(MPI_Comm_rank(node, &g_local_rank), "MPI_Comm_rank");
  mpi_check(MPI_Comm_free(&node), "MPI_Comm_free");
}

td_comm *td_comm_init(void) {
  if (g_ready) return &g_world;
  TD_CHECK(!g_finalized, "td_comm_init after td_comm_finalize (MPI cannot start twice)");
  g_world = (td_comm){.mpi = MPI_COMM_NULL, .rank = 0, .size = 1};
  if (under_launcher()) init_mpi();
  const char *tasks = getenv("SLURM_STEP_NUM_TASKS");
  if (g_world.size == 1 && tasks && atoi(tasks) > 1)
    td_warn("srun started %s tasks but this one sees a world of 1 rank: give srun --mpi=pmix "
            "(or pmi2) so the tasks form one job",
            tasks);
  g_ready = 1;
  const char *omp = getenv("OMP_NUM_THREADS");
  if (!omp || !*omp) omp_set_num_threads(td_comm_default_threads());
  return &g_world;
}

void td_comm_finalize(void) {
  if (!g_ready) return;
  g_ready = 0, g_finalized = 1;
  if (!g_mpi) return;
  td_set_exit_hook(NULL);
  td_watchdog_stop();
  mpi_check(MPI_Finalize(), "MPI_Finalize");
  g_mpi = 0;
}

void td_comm_set_timeout(double seconds) {
  if (g_mpi && g_world.size > 1) td_watchdog_start(seconds, g_world.rank, g_world.size);
}

td_comm *td_comm_world(void) {
  TD_CHECK(g_ready, "td_comm_world before td_comm_init");
  return &g_world;
}

int td_comm_mpi_active(void) { return g_mpi; }
int td_comm_rank(const td_comm *c) { return c->rank; }
int td_comm_size(const td_comm *c) { return c->size; }
int td_comm_local_size(void) { return g_local_size; }
int td_comm_local_rank(void) { return g_local_rank; }

static uint64_t host_hash(void) {
  char name[256] = "";
  gethostname(name, sizeof name - 1);
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  return h;
}

int td_comm_same_on_host(td_comm *c, int64_t key) {
  const int size = c->size;
  if (size == 1) return 1;
  int64_t mine[2] = {(int64_t)host_hash(), key};
  int64_t *all = td_malloc(sizeof *all * 2 * (size_t)size);
  td_comm_all_gather(c, mine, all, 2, TD_I64);
  int n = 0;
  for (int r = 0; r < size; r++) n += all[2 * r] == mine[0] && all[2 * r + 1] == key;
  td_free(all);
  return n;
}

void td_comm_attach(td_comm *c, void *attached, void (*detach)(void *attached)) {
  c->attached = attached, c->detach = detach;
}
void *td_comm_attached(const td_comm *c) { return c->attached; }
MPI_Comm td_comm_mpi(const td_comm *c) { return c->mpi; }

int td_comm_default_threads(void) {
  const char *omp = getenv("OMP_NUM_THREADS");
  if (omp && *omp) return omp_get_max_threads();
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  long bound = online;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) bound = CPU_COUNT(&set);
  long t = online / g_local_size;
  if (t > bound) t = bound;
  return t < 1 ? 1 : (int)t;
}

td_comm *td_comm_split(td_comm *c, int color, int key) {
  if (c->mpi == MPI_COMM_NULL) { /* a world of one: every color has just this rank */
    if (color < 0) return NULL;
    td_comm *s = td_malloc(sizeof *s);
    *s = (td_comm){.mpi = MPI_COMM_NULL, .rank = 0, .size = 1};
    return s;
  }
  MPI_Comm m;
  TD_MPI_WATCHED(MPI_Comm_split(c->mpi, color < 0 ? MPI_UNDEFINED : color, key, &m), "MPI_Comm_split");
  if (m == MPI_COMM_NULL) return NULL;
  mpi_check(MPI_Comm_set_errhandler(m, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  td_comm *s = td_calloc(sizeof *s);
  s->mpi = m;
  mpi_check(MPI_Comm_rank(m, &s->rank), "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(m, &s->size), "MPI_Comm_size");
  return s;
}

void td_comm_free(td_comm *c) {
  if (!c) return;
  TD_CHECK(c != &g_world, "td_comm_free of the world");
  if (c->detach) c->detach(c->attached);
  if (c->mpi != MPI_COMM_NULL) mpi_check(MPI_Comm_free(&c->mpi), "MPI_Comm_free");
  td_free(c);
}

/* ---- types, ops, staging ---- */

static MPI_Datatype mpi_type(td_dtype dt) {
  switch (dt) {
  case TD_F32: return MPI_FLOAT;
  case TD_BF16:
  case TD_F16: return MPI_UINT16_T; /* moved as bits; reductions go through fp32 */
  case TD_I32: return MPI_INT32_T;
  case TD_I64: return MPI_INT64_T;
  case TD_F64: return MPI_DOUBLE;
  }
  td_check_failed(__FILE__, __LINE__, "dtype", "unknown dtype %d", (int)dt);
}

static MPI_Op mpi_op(td_reduce_op op) {
  switch (op) {
  case TD_OP_SUM: return MPI_SUM;
  case TD_OP_MAX: return MPI_MAX;
  case TD_OP_MIN: return MPI_MIN;
  }
  td_check_failed(__FILE__, __LINE__, "op", "unknown reduce op %d", (int)op);
}

static int is_half(td_dtype dt) { return dt == TD_BF16 || dt == TD_F16; }

static int mpi_count(int64_t count) {
  TD_CHECK(count >= 0 && count <= INT_MAX, "count %lld: MPI counts are int", (long long)count);
  return (int)count;
}

static void *at(const void *base, int64_t elems, td_dtype dt) {
  return (char *)base + elems * (int64_t)td_dtype_size(dt);
}

static void local_copy(void *dst, const void *src, int64_t count, td_dtype dt) {
  if (dst != src) memmove(dst, src, (size_t)count * td_dtype_size(dt));
}

static float *stage_from(const void *src, int64_t count, td_dtype dt) {
  float *s = td_malloc((size_t)(count ? count : 1) * sizeof(float));
  const uint16_t *h = src;
  if (dt == TD_BF16)
    for (int64_t i = 0; i < count; i++) s[i] = td_bf16_to_f32(h[i]);
  else
    for (int64_t i = 0; i < count; i++) s[i] = td_f16_to_f32(h[i]);
  return s;
}

/* Start r as a request with nothing in flight. */
static void begin(td_comm_request *r, const td_comm *c) {
  *r = (td_comm_request){MPI_REQUEST_NULL, NULL, NULL, 0, TD_F32, c};
}

/* Staging for a 16-bit reduction: fp32 copy of count elements of src, converted
 * back into out[0..out_count) when r completes (out NULL: nothing to keep). */
static float *stage(td_comm_request *r, const void *src, int64_t count, td_dtype dt, void *out,
                    int64_t out_count) {
  r->stage = stage_from(src, count, dt);
  r->out = out, r->count = out_count, r->dtype = dt;
  return r->stage;
}

static void finish(td_comm_request *r) {
  if (!r->stage) return;
  if (r->out) {
    uint16_t *h = r->out;
    if (r->dtype == TD_BF16)
      for (int64_t i = 0; i < r->count; i++) h[i] = td_f32_to_bf16(r->stage[i]);
    else
      for (int64_t i = 0; i < r->count; i++) h[i] = td_f32_to_f16(r->stage[i]);
  }
  td_free(r->stage);
  r->stage = NULL;
}

void td_comm_wait(td_comm_request *r) {
  if (r->mpi != MPI_REQUEST_NULL) TD_MPI_WATCHED(MPI_Wait(&r->mpi, MPI_STATUS_IGNORE), "MPI_Wait");
  finish(r);
}

int td_comm_test(td_comm_request *r) {
  if (r->mpi != MPI_REQUEST_NULL) {
    int done = 0;
    mpi_check(MPI_Test(&r->mpi, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (!done) return 0;
  }
  finish(r);
  return 1;
}

void td_comm_wait_all(td_comm_request *r, int n) {
  for (int i = 0; i < n; i++) td_comm_wait(&r[i]);
}

/* ---- collectives: one body each; blocking = start, then finish at once ---- */

static void barrier(td_comm *c, td_comm_request *r, int blocking) {
  begin(r, c);
  if (c->size == 1) return;
  TD_MPI(blocking, MPI_Barrier, (c->mpi),
         MPI_Ibarrier, (c->mpi, &r->mpi));
}

static void broadcast(td_comm *c, void *buf, int64_t count, td_dtype dt, int root,
                      td_comm_request *r, int blocking) {
  begin(r, c);
  TD_CHECK(root >= 0 && root < c->size, "broadcast root %d of %d ranks", root, c->size);
  if (c->size == 1) return;
  int n = mpi_count(count);
  MPI_Datatype t = mpi_type(dt);
  TD_MPI(blocking, MPI_Bcast, (buf, n, t, root, c->mpi),
         MPI_Ibcast, (buf, n, t, root, c->mpi, &r->mpi));
}

static void scatter(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                    int root, td_comm_request *r, int blocking) {
  begin(r, c);
  TD_CHECK(root >= 0 && root < c->size, "scatter root %d of %d ranks", root, c->size);
  if (c->size == 1) {
    local_copy(recv, send, count, dt);
    return;
  }
  int n = mpi_count(count);
  MPI_Datatype t = mpi_type(dt);
  TD_MPI(blocking, MPI_Scatter, (send, n, t, recv, n, t, root, c->mpi),
         MPI_Iscatter, (send, n, t, recv, n, t, root, c->mpi, &r->mpi));
}

static void gather(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt, int root,
                   td_comm_request *r, int blocking) {
  begin(r, c);
  TD_CHECK(root >= 0 && root < c->size, "gather root %d of %d ranks", root, c->size);
  if (c->size == 1) {
    local_copy(recv, send, count, dt);
    return;
  }
  int n = mpi_count(count);
  MPI_Datatype t = mpi_type(dt);
  TD_MPI(blocking, MPI_Gather, (send, n, t, recv, n, t, root, c->mpi),
         MPI_Igather, (send, n, t, recv, n, t, root, c->mpi, &r->mpi));
}

static void all_gather(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                       td_comm_request *r, int blocking) {
  begin(r, c);
  void *own = at(recv, (int64_t)c->rank * count, dt);
  if (c->size == 1) {
    local_copy(own, send, count, dt);
    return;
  }
  int n = mpi_count(count);
  MPI_Datatype t = mpi_type(dt);
  const void *s = send == own ? MPI_IN_PLACE : send;
  TD_MPI(blocking, MPI_Allgather, (s, n, t, recv, n, t, c->mpi),
         MPI_Iallgather, (s, n, t, recv, n, t, c->mpi, &r->mpi));
}

static void reduce(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                   td_reduce_op op, int root, td_comm_request *r, int blocking) {
  begin(r, c);
  TD_CHECK(root >= 0 && root < c->size, "reduce root %d of %d ranks", root, c->size);
  if (c->size == 1) {
    local_copy(recv, send, count, dt);
    return;
  }
  int n = mpi_count(count), is_root = c->rank == root;
  MPI_Op o = mpi_op(op);
  MPI_Datatype t = mpi_type(dt);
  void *buf = recv;
  if (is_half(dt)) {
    buf = stage(r, send, count, dt, is_root ? recv : NULL, count);
    send = buf, t = MPI_FLOAT;
  }
  const void *s = is_root && send == buf ? MPI_IN_PLACE : send;
  TD_MPI(blocking, MPI_Reduce, (s, buf, n, t, o, root, c->mpi),
         MPI_Ireduce, (s, buf, n, t, o, root, c->mpi, &r->mpi));
}

static void all_reduce(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                       td_reduce_op op, td_comm_request *r, int blocking) {
  begin(r, c);
  if (c->size == 1) {
    local_copy(recv, send, count, dt);
    return;
  }
  int n = mpi_count(count);
  MPI_Op o = mpi_op(op);
  MPI_Datatype t = mpi_type(dt);
  void *buf = recv;
  if (is_half(dt)) {
    buf = stage(r, send, count, dt, recv, count);
    send = buf, t = MPI_FLOAT;
  }
  const void *s = send == buf ? MPI_IN_PLACE : send;
  TD_MPI(blocking, MPI_Allreduce, (s, buf, n, t, o, c->mpi),
         MPI_Iallreduce, (s, buf, n, t, o, c->mpi, &r->mpi));
}

static void reduce_scatter(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                           td_reduce_op op, td_comm_request *r, int blocking) {
  begin(r, c);
  TD_CHECK(send != recv, "reduce_scatter in place");
  if (c->size == 1) {
    local_copy(recv, send, count, dt);
    return;
  }
  int n = mpi_count(count);
  MPI_Op o = mpi_op(op);
  MPI_Datatype t = mpi_type(dt);
  if (is_half(dt)) { /* in place on the staging: the result is its first count elements */
    float *s = stage(r, send, count * c->size, dt, recv, count);
    TD_MPI(blocking, MPI_Reduce_scatter_block, (MPI_IN_PLACE, s, n, MPI_FLOAT, o, c->mpi),
         MPI_Ireduce_scatter_block, (MPI_IN_PLACE, s, n, MPI_FLOAT, o, c->mpi, &r->mpi));
    return;
  }
  TD_MPI(blocking, MPI_Reduce_scatter_block, (send, recv, n, t, o, c->mpi),
         MPI_Ireduce_scatter_block, (send, recv, n, t, o, c->mpi, &r->mpi));
}

static void all_to_all(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                       td_comm_request *r, int blocking) {
  begin(r, c);
  TD_CHECK(send != recv, "all_to_all in place");
  if (c->size == 1) {
    local_copy(recv, send, count, dt);
    return;
  }
  int n = mpi_count(count);
  MPI_Datatype t = mpi_type(dt);
  TD_MPI(blocking, MPI_Alltoall, (send, n, t, recv, n, t, c->mpi),
         MPI_Ialltoall, (send, n, t, recv, n, t, c->mpi, &r->mpi));
}

static void check_peer(const td_comm *c, int peer, const char *what) {
  TD_CHECK(peer >= 0 && peer < c->size && peer != c->rank, "%s peer %d: this is rank %d of %d",
           what, peer, c->rank, c->size);
}

static void p2p_send(td_comm *c, const void *buf, int64_t count, td_dtype dt, int dest, int tag,
                 td_comm_request *r, int blocking) {
  begin(r, c);
  check_peer(c, dest, "send");
  int n = mpi_count(count);
  MPI_Datatype t = mpi_type(dt);
  TD_MPI(blocking, MPI_Send, (buf, n, t, dest, tag, c->mpi),
         MPI_Isend, (buf, n, t, dest, tag, c->mpi, &r->mpi));
}

static void p2p_recv(td_comm *c, void *buf, int64_t count, td_dtype dt, int src, int tag,
                 td_comm_request *r, int blocking) {
  begin(r, c);
  check_peer(c, src, "recv");
  int n = mpi_count(count);
  MPI_Datatype t = mpi_type(dt);
  TD_MPI(blocking, MPI_Recv, (buf, n, t, src, tag, c->mpi, MPI_STATUS_IGNORE),
         MPI_Irecv, (buf, n, t, src, tag, c->mpi, &r->mpi));
}

/* ---- public entry points ---- */

#define TD_BLOCKING(body)                                                                   \
  do {                                                                                      \
    td_comm_request r_;                                                                     \
    body;                                                                                   \
    finish(&r_);                                                                            \
  } while (0)

void td_comm_barrier(td_comm *c) { TD_BLOCKING(barrier(c, &r_, 1)); }
void td_comm_broadcast(td_comm *c, void *buf, int64_t count, td_dtype dt, int root) {
  TD_BLOCKING(broadcast(c, buf, count, dt, root, &r_, 1));
}
void td_comm_scatter(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                     int root) {
  TD_BLOCKING(scatter(c, send, recv, count, dt, root, &r_, 1));
}
void td_comm_gather(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                    int root) {
  TD_BLOCKING(gather(c, send, recv, count, dt, root, &r_, 1));
}
void td_comm_all_gather(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt) {
  TD_BLOCKING(all_gather(c, send, recv, count, dt, &r_, 1));
}
void td_comm_reduce(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                    td_reduce_op op, int root) {
  TD_BLOCKING(reduce(c, send, recv, count, dt, op, root, &r_, 1));
}
void td_comm_all_reduce(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                        td_reduce_op op) {
  TD_BLOCKING(all_reduce(c, send, recv, count, dt, op, &r_, 1));
}
void td_comm_reduce_scatter(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                            td_reduce_op op) {
  TD_BLOCKING(reduce_scatter(c, send, recv, count, dt, op, &r_, 1));
}
void td_comm_all_to_all(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt) {
  TD_BLOCKING(all_to_all(c, send, recv, count, dt, &r_, 1));
}
void td_comm_send(td_comm *c, const void *buf, int64_t count, td_dtype dt, int dest, int tag) {
  TD_BLOCKING(p2p_send(c, buf, count, dt, dest, tag, &r_, 1));
}
void td_comm_recv(td_comm *c, void *buf, int64_t count, td_dtype dt, int src, int tag) {
  TD_BLOCKING(p2p_recv(c, buf, count, dt, src, tag, &r_, 1));
}

void td_comm_ibarrier(td_comm *c, td_comm_request *r) { barrier(c, r, 0); }
void td_comm_ibroadcast(td_comm *c, void *buf, int64_t count, td_dtype dt, int root,
                        td_comm_request *r) {
  broadcast(c, buf, count, dt, root, r, 0);
}
void td_comm_iscatter(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                      int root, td_comm_request *r) {
  scatter(c, send, recv, count, dt, root, r, 0);
}
void td_comm_igather(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                     int root, td_comm_request *r) {
  gather(c, send, recv, count, dt, root, r, 0);
}
void td_comm_iall_gather(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                         td_comm_request *r) {
  all_gather(c, send, recv, count, dt, r, 0);
}
void td_comm_ireduce(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                     td_reduce_op op, int root, td_comm_request *r) {
  reduce(c, send, recv, count, dt, op, root, r, 0);
}
void td_comm_iall_reduce(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                         td_reduce_op op, td_comm_request *r) {
  all_reduce(c, send, recv, count, dt, op, r, 0);
}
void td_comm_ireduce_scatter(td_comm *c, const void *send, void *recv, int64_t count,
                             td_dtype dt, td_reduce_op op, td_comm_request *r) {
  reduce_scatter(c, send, recv, count, dt, op, r, 0);
}
void td_comm_iall_to_all(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                         td_comm_request *r) {
  all_to_all(c, send, recv, count, dt, r, 0);
}
void td_comm_isend(td_comm *c, const void *buf, int64_t count, td_dtype dt, int dest, int tag,
                   td_comm_request *r) {
  p2p_send(c, buf, count, dt, dest, tag, r, 0);
}
void td_comm_irecv(td_comm *c, void *buf, int64_t count, td_dtype dt, int src, int tag,
                   td_comm_request *r) {
  p2p_recv(c, buf, count, dt, src, tag, r, 0);
}
