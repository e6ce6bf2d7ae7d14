/* NCCL as trident's device collective library for CUDA (comm/ccl.h), loaded
 * with dlopen at the first use.
 *
 * Why not link it: a binary that links libnccl needs it on every machine it
 * runs on, GPU-less ones included, and NCCL's size and start-up are paid by
 * every process; loaded here, only multi-rank runs with a GPU per rank need it.
 * The library is TRIDENT_NCCL_LIBRARY when set (a file path: NCCL from a pip
 * wheel, nvidia/nccl/lib/libnccl.so.2), else libnccl.so.2 where the loader finds
 * it. Its major version must be the headers' (2); older than 2.18 is refused
 * (ncclBfloat16 and ncclSend/Recv in groups as used here are older, but 2.18 is
 * the oldest tried with CUDA 12+).
 *
 * Every call names itself in a failure with NCCL's error string and its last
 * error message (ncclGetLastError), so a wrong setup (no network, mismatched
 * versions across ranks) says what NCCL saw. An error NCCL meets while its
 * kernels run (a peer or the network gone) is asynchronous: the backend's waits
 * poll for it (td_nccl_check_async) and fail with NCCL's reason, the
 * communicators aborted, rather than spinning until the watchdog's timeout.
 *
 * Connections are made when a communicator is created (NCCL_RUNTIME_CONNECT=0,
 * unless the environment says otherwise): NCCL 2.22 and later otherwise connect
 * at an operation's first use, a blocking rendezvous with the peers in the
 * middle of a step, which ranks reach at different points when ZeRO issues its
 * gathers as earlier exchanges are found complete. */
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/cuda/cuda_internal.cuh"
extern "C" {
#include "comm/ccl.h"
}

/* Every NCCL function called; members typed from nccl.h's declarations. */
#define TD_NCCL_FUNCTIONS(X) \
  X(ncclGetVersion)          \
  X(ncclGetUniqueId)         \
  X(ncclCommInitRank)        \
  X(ncclCommDestroy)         \
  X(ncclCommAbort)           \
  X(ncclCommGetAsyncError)   \
  X(ncclGetErrorString)      \
  X(ncclGetLastError)        \
  X(ncclAllReduce)           \
  X(ncclAllGather)           \
  X(ncclSend)                \
  X(ncclRecv)                \
  X(ncclGroupStart)          \
  X(ncclGroupEnd)

static struct {
#define TD_NCCL_MEMBER(fn) decltype(&::fn) fn;
  TD_NCCL_FUNCTIONS(TD_NCCL_MEMBER)
#undef TD_NCCL_MEMBER
} g_nccl;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static char g_error[1024]; /* why loading failed */
static int g_version;      /* NCCL_VERSION_CODE of the library: major*10000 + minor*100 + patch */

#define TD_NCCL_MIN_VERSION 21800
#define TD_NCCL_STR_(x) #x
#define TD_NCCL_STR(x) TD_NCCL_STR_(x)
#define TD_NCCL_MAJOR_STR TD_NCCL_STR(NCCL_MAJOR)

static void *open_library(void) {
  const char *path = getenv("TRIDENT_NCCL_LIBRARY");
  const char *name = path && *path ? path : "libnccl.so." TD_NCCL_MAJOR_STR;
  void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = dlerror();
    snprintf(g_error, sizeof g_error, "cannot load %s: %s", name, why ? why : "not found");
  }
  return lib;
}

static int resolve_all(void *lib) {
#define TD_NCCL_RESOLVE(fn)                                                                  \
  {                                                                                          \
    void *sym = dlsym(lib, #fn);                                                             \
    if (!sym) {                                                                              \
      snprintf(g_error, sizeof g_error, "the NCCL library found has no %s", #fn);            \
      return 0;                                                                              \
    }                                                                                        \
    g_nccl.fn = reinterpret_cast<decltype(g_nccl.fn)>(sym);                                  \
  }
  TD_NCCL_FUNCTIONS(TD_NCCL_RESOLVE)
#undef TD_NCCL_RESOLVE
  return 1;
}

static int version_ok(void) {
  if (g_nccl.ncclGetVersion(&g_version) != ncclSuccess) {
    snprintf(g_error, sizeof g_error, "ncclGetVersion failed");
    return 0;
  }
  /* codes since 2.9: major*10000 + minor*100 + patch */
  if (g_version / 10000 != NCCL_MAJOR || g_version < TD_NCCL_MIN_VERSION) {
    /* before 2.9 the code was major*1000 + minor*100 + patch */
    const int old = g_version < 10000, major = old ? g_version / 1000 : g_version / 10000;
    const int minor = old ? g_version / 100 % 10 : g_version / 100 % 100;
    snprintf(g_error, sizeof g_error,
             "it is NCCL %d.%d.%d; trident needs NCCL %d.x, at least %d.%d (built with %d.%d.%d)",
             major, minor, g_version % 100, NCCL_MAJOR,
             TD_NCCL_MIN_VERSION / 10000, TD_NCCL_MIN_VERSION / 100 % 100, NCCL_MAJOR, NCCL_MINOR,
             NCCL_PATCH);
    return 0;
  }
  return 1;
}

static void load_once(void) {
  setenv("NCCL_RUNTIME_CONNECT", "0", 0); /* before any communicator: see the top */
  void *lib = open_library();
  if (!lib) return;
  if (resolve_all(lib) && version_ok()) return;
  g_nccl.ncclAllReduce = NULL; /* the mark of "not loaded" */
  dlclose(lib);
}

static int nccl_load(char *why, size_t n) {
  pthread_once(&g_once, load_once);
  if (g_nccl.ncclAllReduce) return 1;
  snprintf(why, n, "%s", g_error);
  return 0;
}

static void nccl_version(char *buf, size_t n) {
  snprintf(buf, n, "%d.%d.%d", g_version / 10000, g_version / 100 % 100, g_version % 100);
}

/* ------------------------------------------------------------ communicators */

struct td_ccl {
  ncclComm_t comm;
  int index; /* the CUDA device */
  int rank, nranks;
};

/* The live communicators, for td_nccl_check_async. */
static struct {
  pthread_mutex_t lock;
  td_ccl *c[256];
  int n;
} g_live = {PTHREAD_MUTEX_INITIALIZER, {0}, 0};

static void live_add(td_ccl *c) {
  pthread_mutex_lock(&g_live.lock);
  const int room = g_live.n < (int)(sizeof g_live.c / sizeof *g_live.c);
  if (room) g_live.c[g_live.n++] = c;
  pthread_mutex_unlock(&g_live.lock);
  if (!room) td_fail("NCCL: more than %d communicators in one process", (int)(sizeof g_live.c / sizeof *g_live.c));
}

static void live_remove(td_ccl *c) {
  pthread_mutex_lock(&g_live.lock);
  for (int i = 0; i < g_live.n; i++)
    if (g_live.c[i] == c) {
      g_live.c[i] = g_live.c[--g_live.n];
      break;
    }
  pthread_mutex_unlock(&g_live.lock);
}

extern "C" int td_nccl_live(void) { return __atomic_load_n(&g_live.n, __ATOMIC_RELAXED) > 0; }

extern "C" void td_nccl_check_async(void) {
  pthread_mutex_lock(&g_live.lock);
  for (int i = 0; i < g_live.n; i++) {
    ncclResult_t a = ncclSuccess;
    if (g_nccl.ncclCommGetAsyncError(g_live.c[i]->comm, &a) != ncclSuccess || a == ncclSuccess ||
        a == ncclInProgress)
      continue;
    const td_ccl *bad = g_live.c[i];
    char last[512];
    snprintf(last, sizeof last, "%s", g_nccl.ncclGetLastError(bad->comm));
    for (int j = 0; j < g_live.n; j++) (void)g_nccl.ncclCommAbort(g_live.c[j]->comm);
    g_live.n = 0; /* aborted: the process ends here */
    pthread_mutex_unlock(&g_live.lock);
    td_fail("NCCL: a communicator of %d ranks on cuda:%d failed while its operations ran: %s%s%s%s",
            bad->nranks, bad->index, g_nccl.ncclGetErrorString(a), *last ? " (" : "", last,
            *last ? ")" : "");
  }
  pthread_mutex_unlock(&g_live.lock);
}

static void nccl_check(ncclResult_t r, const td_ccl *c, const char *what) {
  const char *last = g_nccl.ncclGetLastError(c ? c->comm : NULL);
  const int has_last = last && *last;
  char where[32] = "";
  if (c) snprintf(where, sizeof where, " on cuda:%d", c->index);
  td_fail("NCCL: %s failed%s: %s%s%s%s", what, where, g_nccl.ncclGetErrorString(r),
          has_last ? " (" : "", has_last ? last : "", has_last ? ")" : "");
}
#define TD_NCCL_OK(call, c)                                \
  do {                                                     \
    ncclResult_t r_ = (call);                              \
    if (r_ != ncclSuccess) nccl_check(r_, (c), #call);     \
  } while (0)

static void nccl_make_id(void *id) {
  static_assert(sizeof(ncclUniqueId) == TD_CCL_ID_BYTES, "NCCL's unique id size");
  TD_NCCL_OK(g_nccl.ncclGetUniqueId((ncclUniqueId *)id), (const td_ccl *)NULL);
}

static td_ccl *nccl_create(td_device *d, td_comm *over, int rank, int nranks, const void *id) {
  (void)over;
  td_cuda *cu = td_cuda_enter(d); /* NCCL binds the communicator to the current device */
  td_ccl *c = (td_ccl *)td_calloc(sizeof *c);
  c->index = cu->index, c->rank = rank, c->nranks = nranks;
  ncclUniqueId uid;
  memcpy(&uid, id, sizeof uid);
  /* blocks until every rank joined: under the watchdog, as an MPI call */
  td_watchdog_enter("ncclCommInitRank (every rank of a communicator joins)");
  ncclResult_t r = g_nccl.ncclCommInitRank(&c->comm, c->nranks, uid, c->rank);
  td_watchdog_leave();
  TD_NCCL_OK(r, c);
  live_add(c);
  return c;
}

static void nccl_destroy(td_ccl *c) {
  if (!c) return;
  live_remove(c);
  TD_CUDA_OK(cudaSetDevice(c->index));
  td_watchdog_enter("ncclCommDestroy (waits for the communicator's operations)");
  ncclResult_t r = g_nccl.ncclCommDestroy(c->comm);
  td_watchdog_leave();
  TD_NCCL_OK(r, c);
  td_free(c);
}

/* ------------------------------------------------------------ operations */

static ncclDataType_t nccl_type(td_dtype dt) {
  switch (dt) {
    case TD_F32: return ncclFloat32;
    case TD_BF16: return ncclBfloat16;
    case TD_F16: return ncclFloat16;
    case TD_I32: return ncclInt32;
    case TD_I64: return ncclInt64;
    case TD_F64: return ncclFloat64;
    default: break;
  }
  td_fail("NCCL: no NCCL type for %s", td_dtype_name(dt));
}

static ncclRedOp_t nccl_op(td_reduce_op op) {
  switch (op) {
    case TD_OP_SUM: return ncclSum;
    case TD_OP_MAX: return ncclMax;
    case TD_OP_MIN: return ncclMin;
  }
  td_fail("NCCL: unknown reduction %d", (int)op);
}

/* The stream of handle s, its device made current; s must be the communicator's GPU. */
static cudaStream_t stream_of(const td_ccl *c, td_device *s) {
  td_cuda *cu = td_cuda_enter(s);
  if (cu->index != c->index)
    td_fail("NCCL: a communicator of cuda:%d used on a stream of cuda:%d", c->index, cu->index);
  return cu->stream;
}

static void nccl_all_reduce(td_ccl *c, td_device *s, const void *send, void *recv, int64_t count,
                            td_dtype dt, td_reduce_op op) {
  cudaStream_t st = stream_of(c, s);
  td_watchdog_enter("ncclAllReduce (launching it)");
  ncclResult_t r = g_nccl.ncclAllReduce(send, recv, (size_t)count, nccl_type(dt), nccl_op(op), c->comm, st);
  td_watchdog_leave();
  TD_NCCL_OK(r, c);
}

static void nccl_all_gather(td_ccl *c, td_device *s, const void *send, void *recv, int64_t count,
                            td_dtype dt) {
  cudaStream_t st = stream_of(c, s);
  td_watchdog_enter("ncclAllGather (launching it)");
  ncclResult_t r = g_nccl.ncclAllGather(send, recv, (size_t)count, nccl_type(dt), c->comm, st);
  td_watchdog_leave();
  TD_NCCL_OK(r, c);
}

static void nccl_send(td_ccl *c, td_device *s, const void *buf, int64_t count, td_dtype dt,
                      int peer) {
  cudaStream_t st = stream_of(c, s);
  TD_NCCL_OK(g_nccl.ncclSend(buf, (size_t)count, nccl_type(dt), peer, c->comm, st), c);
}

static void nccl_recv(td_ccl *c, td_device *s, void *buf, int64_t count, td_dtype dt, int peer) {
  cudaStream_t st = stream_of(c, s);
  TD_NCCL_OK(g_nccl.ncclRecv(buf, (size_t)count, nccl_type(dt), peer, c->comm, st), c);
}

static void nccl_group_start(td_ccl *c) { TD_NCCL_OK(g_nccl.ncclGroupStart(), c); }
/* The group's operations are launched here: under the watchdog. */
static void nccl_group_end(td_ccl *c) {
  td_watchdog_enter("ncclGroupEnd (launching NCCL's send/recv)");
  ncclResult_t r = g_nccl.ncclGroupEnd();
  td_watchdog_leave();
  TD_NCCL_OK(r, c);
}

extern "C" const td_ccl_ops *td_nccl_ops(void) {
  static const td_ccl_ops ops = {
      /* name */ "nccl",
      /* load */ nccl_load,
      /* version */ nccl_version,
      /* make_id */ nccl_make_id,
      /* create */ nccl_create,
      /* destroy */ nccl_destroy,
      /* all_reduce */ nccl_all_reduce,
      /* all_gather */ nccl_all_gather,
      /* send */ nccl_send,
      /* recv */ nccl_recv,
      /* group_start */ nccl_group_start,
      /* group_end */ nccl_group_end,
  };
  return &ops;
}
