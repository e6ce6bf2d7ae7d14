/* The sealed test device (sealed_device.h): CPU kernels on memory the host can
 * reach only through ops. */
#include "device/sealed_device.h"

#include <errno.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/error.h"
#include "base/mem.h"

const td_device_ops *td_cpu_device_ops(void);

/* One allocation: `size` bytes asked for at `start`, whose `span` bytes of whole
 * pages open during the ops that are given it; a guard page follows the span and
 * never opens, so an op that runs past the end faults too. */
typedef struct {
  char *start;
  size_t size, span;
} block;

/* Allocations one op may open: its pointer arguments (at most 8), and those of
 * any op nested inside it (none today: the ops forward to the plain CPU table). */
#define MAX_OPEN 64

#define HUGE_PAGE ((size_t)2 << 20) /* x86-64's transparent huge page */

static struct {
  /* Recursive: td_fail inside an op exits with the lock held, and an exit path
   * may still free device memory on this thread. */
  pthread_mutex_t lock;
  char *base, *top, *end; /* the reservation [base, end); [base, top) handed out */
  size_t page;
  block *live; /* live allocations sorted by start (the bump pointer only grows) */
  size_t n_live, cap_live;
  size_t allocated, peak; /* bytes asked for: now, and the most at once */
  int depth;              /* ops running on the lock's owner */
  block open[MAX_OPEN];   /* allocations unsealed for the running op */
  int n_open;
  /* host_alloc memory, and the async copies whose host side is closed (below) */
  block *hosts;
  size_t n_hosts, cap_hosts;
  struct pending *pend;
  size_t n_pend, cap_pend;
  uint64_t issued; /* async copies issued so far: an event marks a count */
} g;

static const char *volatile g_op;  /* the running op's name, for the fault message */
static td_device g_cpu;             /* the CPU backend every op forwards to */
static const int k_signals[2] = {SIGSEGV, SIGBUS};
static struct sigaction g_before[2]; /* the handlers ours chains to */

/* An async copy not yet waited for: the host pages [lo, hi) of its host side
 * stay at `prot` (PROT_NONE: a d2h destination; PROT_READ: an h2d source). */
typedef struct pending {
  char *lo, *hi;
  int prot;
  uint64_t seq;     /* its number among the copies issued */
  const char *what; /* "destination of a copy_d2h_async", for the fault message */
} pending;

/* An event: the number of async copies issued when it was recorded. */
struct td_event {
  uint64_t seq;
};

/* The live allocation with the greatest start <= a, or NULL. Also called from
 * the signal handler: it only reads. */
static const block *below(const char *a) {
  size_t lo = 0, hi = g.n_live;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (g.live[mid].start <= a)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo ? &g.live[lo - 1] : NULL;
}

/* ------------------------------------------------------------ fault report
 * Signal handlers may only call async-signal-safe functions: the message is
 * built by hand in a buffer and written with write(2). */

typedef struct {
  char buf[640];
  size_t n;
} msg;

static void put(msg *m, const char *s) {
  while (*s && m->n < sizeof m->buf) m->buf[m->n++] = *s++;
}
static void put_num(msg *m, uintptr_t v, unsigned radix) {
  char t[24];
  int k = 0;
  do t[k++] = "0123456789abcdef"[v % radix];
  while (v /= radix);
  if (radix == 16) put(m, "0x");
  while (k && m->n < sizeof m->buf) m->buf[m->n++] = t[--k];
}

static void put_block(msg *m, const char *where, const block *b) {
  put(m, where);
  put(m, " an allocation of ");
  put_num(m, b->size, 10);
  put(m, " bytes at ");
  put_num(m, (uintptr_t)b->start, 16);
}

/* Where address a lies, in words. */
static void put_place(msg *m, const char *a) {
  const block *b = below(a);
  if (a >= g.top)
    put(m, "beyond all memory handed out so far");
  else if (b && a < b->start + b->size)
    put_block(m, "inside", b);
  else if (b && a < b->start + b->span)
    put_block(m, "in the page padding past the end of", b);
  else if (b && a < b->start + b->span + g.page)
    put_block(m, "in a guard page after", b);
  else
    put(m, "outside any live allocation: freed memory, or the space between allocations");
}

/* The pending copy whose host pages hold a, or NULL (read by the signal handler). */
static const pending *pending_at(const char *a) {
  for (size_t i = 0; i < g.n_pend; i++)
    if (a >= g.pend[i].lo && a < g.pend[i].hi) return &g.pend[i];
  return NULL;
}

static void report_backtrace(void) {
  void *frames[64];
  int n = backtrace(frames, 64);
  static const char head[] = "backtrace (addr2line -f -e BINARY 0xOFFSET names a +0x frame):\n";
  (void)!write(2, head, sizeof head - 1);
  backtrace_symbols_fd(frames, n, 2);
}

static void report_pending(const char *a, const pending *p) {
  msg m = {.n = 0};
  put(&m, "trident: error: host memory at ");
  put_num(&m, (uintptr_t)a, 16);
  put(&m, " is the ");
  put(&m, p->what);
  put(&m, " that nothing has waited for: on a GPU the copy may not have happened yet. Wait "
          "first (synchronize, or event_synchronize on an event recorded after the copy)\n");
  (void)!write(2, m.buf, m.n);
  report_backtrace();
}

static void report(const char *a) {
  msg m = {.n = 0};
  const char *op = g_op;
  put(&m, op ? "trident: error: sealed device memory at " :
               "trident: error: host code touched sealed device memory at ");
  put_num(&m, (uintptr_t)a, 16);
  put(&m, " (");
  put_place(&m, a);
  if (op) {
    put(&m, ") was touched while op ");
    put(&m, op);
    put(&m, " ran, outside the device memory it was given: a stale pointer argument, a host "
            "argument that points at device memory, or a kernel past its arguments\n");
  } else {
    put(&m, "): code above the device interface must move device memory through its ops\n");
  }
  (void)!write(2, m.buf, m.n);
  report_backtrace();
}

/* Report a fault inside the reservation, then do what the handler before ours
 * does (the MPI layer's crash line, a sanitizer's report; by default, die of the
 * signal). */
static void on_fault(int sig, siginfo_t *info, void *context) {
  const char *a = info->si_addr;
  const pending *p = pending_at(a);
  if (p)
    report_pending(a, p);
  else if (g.base && a >= g.base && a < g.end)
    report(a);
  const struct sigaction *b = &g_before[sig == SIGSEGV ? 0 : 1];
  sigaction(sig, b, NULL);
  if (b->sa_flags & SA_SIGINFO)
    b->sa_sigaction(sig, info, context);
  else if (b->sa_handler != SIG_DFL && b->sa_handler != SIG_IGN)
    b->sa_handler(sig);
  else {
    signal(sig, SIG_DFL);
    raise(sig); /* delivered when this handler returns */
  }
}

static void install_handler(void) {
  void *frame;
  backtrace(&frame, 1); /* loads libgcc's unwinder now, not inside the handler */
  for (int i = 0; i < 2; i++) {
    struct sigaction sa = {.sa_sigaction = on_fault, .sa_flags = SA_SIGINFO | SA_ONSTACK};
    sigemptyset(&sa.sa_mask);
    sigaction(k_signals[i], &sa, &g_before[i]);
  }
}

/* ------------------------------------------------------------ set-up */

static size_t reserve_bytes(void) {
  const char *e = getenv("TRIDENT_SEALED_RESERVE_GIB");
  if (!e || !*e) return (size_t)64 << 30;
  char *end;
  errno = 0;
  unsigned long long gib = strtoull(e, &end, 10);
  if (errno || *end || *e == '-' || gib < 1 || gib > (1ull << 17))
    td_fail("TRIDENT_SEALED_RESERVE_GIB='%s': want a whole number of GiB from 1 to 131072", e);
  return (size_t)gib << 30;
}

static void reserve(void) {
  size_t bytes = reserve_bytes();
  /* PROT_NONE and MAP_NORESERVE: address space only; pages get memory when an op
   * first writes them. */
  void *p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    td_fail("sealed device: cannot reserve %zu GiB of address space: %s "
            "(TRIDENT_SEALED_RESERVE_GIB=N reserves less)",
            bytes >> 30, strerror(errno));
  g.base = g.top = p;
  g.end = g.base + bytes;
}

/* td_device_ops grows: an op the CPU has and this table lacks would be a call
 * through NULL somewhere in the model. Everything from alloc on is a function
 * pointer, so the two tables are compared slot by slot. */
static void check_complete(const td_device_ops *mine, const td_device_ops *cpu) {
  typedef void (*fn)(void);
  const size_t first = offsetof(td_device_ops, alloc);
  for (size_t at = first; at + sizeof(fn) <= sizeof(td_device_ops); at += sizeof(fn)) {
    fn a, b;
    memcpy(&a, (const char *)mine + at, sizeof a);
    memcpy(&b, (const char *)cpu + at, sizeof b);
    TD_CHECK(a || !b, "sealed device: td_device_ops slot %zu (byte %zu) has no forwarding op in "
             "sealed_device.c", (at - first) / sizeof(fn), at);
  }
}

static void init_once(void) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&g.lock, &attr);
  pthread_mutexattr_destroy(&attr);
  g.page = (size_t)sysconf(_SC_PAGESIZE);
  g_cpu.ops = td_cpu_device_ops();
  check_complete(td_sealed_device_ops(), g_cpu.ops);
  reserve();
  install_handler();
}

/* ------------------------------------------------------------ sealing */

static void lock(void) { pthread_mutex_lock(&g.lock); }
static void unlock(void) { pthread_mutex_unlock(&g.lock); }

static void protect(const block *b, int prot) {
  int rc = mprotect(b->start, b->span, prot);
  TD_CHECK(rc == 0, "sealed device: mprotect of %zu bytes at %p: %s", b->span, (void *)b->start,
           strerror(errno));
}

/* Open the allocation p points into for the running op. Only the arguments'
 * allocations open (a few mprotect calls an op, not one per live allocation);
 * anything else (NULL, host memory, a freed or foreign pointer) stays as it is,
 * and an access to sealed memory there faults naming it. */
static void unseal(const void *p) {
  const char *a = p;
  if (!a || a < g.base || a >= g.top) return;
  const block *b = below(a);
  if (!b || a > b->start + b->size) return; /* a view may end exactly at the end */
  for (int i = 0; i < g.n_open; i++)
    if (g.open[i].start == b->start) return;
  TD_CHECK(g.n_open < MAX_OPEN, "sealed device: more than %d allocations open at once", MAX_OPEN);
  protect(b, PROT_READ | PROT_WRITE);
  g.open[g.n_open++] = *b;
}

/* Around every op but alloc, free, memory_stats and synchronize (which touch no
 * device memory): the lock keeps another thread's op from sealing memory this one
 * is using; the outermost op seals what it opened. */
static void enter(td_device *d, const char *op, const void *const *ptrs, int n) {
  (void)d;
  lock();
  if (g.depth++ == 0) g_op = op;
  for (int i = 0; i < n; i++) {
    const char *a = ptrs[i];
    /* a host pointer where the op wants device memory: a GPU's kernel faults there */
    if (a && (a < g.base || a >= g.top))
      td_fail("sealed device: %s was given host memory (%p, argument %d) where device memory "
              "belongs",
              op, (const void *)a, i + 1);
    unseal(a);
  }
}

static void seal_open(void) {
  for (int i = 0; i < g.n_open; i++) protect(&g.open[i], PROT_NONE);
  g.n_open = 0;
}

static void leave(void) {
  if (--g.depth == 0) {
    seal_open();
    g_op = NULL;
  }
  unlock();
}

/* ENTER(d, "op", device pointers...); FWD(op, args...); leave(); */
#define PTRS(...) ((const void *const[]){__VA_ARGS__})
#define ENTER(d, op, ...) \
  enter(d, op, PTRS(__VA_ARGS__), (int)(sizeof PTRS(__VA_ARGS__) / sizeof(const void *)))
#define FWD(op, ...) g_cpu.ops->op(&g_cpu, __VA_ARGS__)

/* ------------------------------------------------------------ memory */

static void track(const block *b) {
  if (g.n_live == g.cap_live) {
    size_t cap = g.cap_live ? 2 * g.cap_live : 256;
    block *live = realloc(g.live, cap * sizeof *live);
    if (!live) td_fail("sealed device: out of host memory for its allocation table");
    g.live = live, g.cap_live = cap;
  }
  g.live[g.n_live++] = *b;
  g.allocated += b->size;
  if (g.allocated > g.peak) g.peak = g.allocated;
}

static uintptr_t round_up(uintptr_t x, size_t to) { return (x + to - 1) / to * to; }

/* Zeroed (fresh anonymous pages) and page aligned; never an address handed out
 * before, so a stale pointer faults instead of reaching new data. Allocations of
 * 2 MiB or more take whole, aligned transparent huge pages (a hint the kernel may
 * ignore): an mprotect costs about one page-table entry per page, and on a
 * vocabulary-sized buffer with 4 KiB pages that was most of the step. */
static void *s_alloc(td_device *d, size_t bytes) {
  (void)d;
  lock();
  TD_CHECK(g.base, "sealed device: alloc before td_sealed_open");
  const size_t unit = bytes >= HUGE_PAGE ? HUGE_PAGE : g.page;
  const size_t left = (size_t)(g.end - g.top);
  size_t skip = 0, span = 0;
  if (bytes < left) {
    skip = (size_t)(round_up((uintptr_t)g.top, unit) - (uintptr_t)g.top);
    span = (size_t)round_up(bytes + (bytes == 0), unit);
  }
  if (bytes >= left || skip + span + g.page > left)
    td_fail("sealed device: its reserved address space is used up (%zu bytes asked for, %zu of "
            "%zu GiB left; freed addresses are never reused): TRIDENT_SEALED_RESERVE_GIB=N "
            "reserves more",
            bytes, left, (size_t)(g.end - g.base) >> 30);
  block b = {g.top + skip, bytes, span};
  g.top = b.start + span + g.page; /* the guard page */
  if (unit == HUGE_PAGE) (void)madvise(b.start, span, MADV_HUGEPAGE);
  track(&b);
  unlock();
  return b.start;
}

/* The pages go back to the system and stay sealed: a later touch faults. */
static void s_free(td_device *d, void *p) {
  (void)d;
  if (!p) return;
  lock();
  const block *b = below(p);
  TD_CHECK(b && b->start == (char *)p, "sealed device: free(%p): not a live allocation", p);
  int rc = madvise(b->start, b->span, MADV_DONTNEED);
  TD_CHECK(rc == 0, "sealed device: madvise: %s", strerror(errno));
  g.allocated -= b->size;
  size_t i = (size_t)(b - g.live);
  memmove(&g.live[i], &g.live[i + 1], (g.n_live - i - 1) * sizeof *g.live);
  g.n_live--;
  unlock();
}

static void s_memory_stats(td_device *d, size_t *allocated, size_t *peak) {
  (void)d;
  lock();
  *allocated = g.allocated, *peak = g.peak;
  unlock();
}

/* ------------------------------------------------------------ host memory, async copies
 * host_alloc hands out whole pages mapped apart from the reservation, open to the
 * host. An async copy runs at once, as every op here does, and then closes the
 * pages of its host side until a wait says a GPU's copy would be done: a d2h
 * destination to reads and writes (reading it early is the bug), an h2d source
 * to writes. The check is per page: two copies' host sides should not share one. */

static void grow(void **arr, size_t *cap, size_t n, size_t elem, const char *what) {
  if (n < *cap) return;
  size_t c = *cap ? 2 * *cap : 16;
  void *a = realloc(*arr, c * elem);
  if (!a) td_fail("sealed device: out of host memory for its %s table", what);
  *arr = a, *cap = c;
}

static void set_prot(char *p, size_t bytes, int prot) {
  int rc = mprotect(p, bytes, prot);
  TD_CHECK(rc == 0, "sealed device: mprotect of %zu host bytes at %p: %s", bytes, (void *)p,
           strerror(errno));
}

/* Every host block open, then the pending copies' pages closed again (read-only
 * ones first, so a page that is both ends up closed). */
static void reprotect(void) {
  for (size_t i = 0; i < g.n_hosts; i++)
    set_prot(g.hosts[i].start, g.hosts[i].span, PROT_READ | PROT_WRITE);
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < g.n_pend; i++)
      if ((g.pend[i].prot == PROT_NONE) == pass)
        set_prot(g.pend[i].lo, (size_t)(g.pend[i].hi - g.pend[i].lo), g.pend[i].prot);
}

/* Forget the pending copies numbered <= seq (all: UINT64_MAX). */
static void release(uint64_t seq) {
  lock();
  size_t k = 0;
  for (size_t i = 0; i < g.n_pend; i++)
    if (g.pend[i].seq > seq) g.pend[k++] = g.pend[i];
  if (k != g.n_pend) {
    g.n_pend = k;
    reprotect();
  }
  unlock();
}

static void s_synchronize(td_device *d) {
  d->stream_waits++;
  g_cpu.ops->synchronize(&g_cpu);
  release(UINT64_MAX);
}

static void *s_host_alloc(td_device *d, size_t bytes) {
  (void)d;
  size_t span = (size_t)round_up(bytes + (bytes == 0), g.page);
  void *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    td_fail("sealed device: host_alloc of %zu bytes: %s", bytes, strerror(errno));
  lock();
  grow((void **)&g.hosts, &g.cap_hosts, g.n_hosts, sizeof *g.hosts, "host memory");
  g.hosts[g.n_hosts++] = (block){p, bytes, span};
  unlock();
  return p;
}

static void s_host_free(td_device *d, void *p) {
  (void)d;
  if (!p) return;
  lock();
  size_t i = 0;
  while (i < g.n_hosts && g.hosts[i].start != (char *)p) i++;
  TD_CHECK(i < g.n_hosts, "sealed device: host_free(%p): not memory from host_alloc", p);
  block b = g.hosts[i];
  g.hosts[i] = g.hosts[--g.n_hosts];
  size_t k = 0; /* a freed buffer's copies are moot */
  for (size_t j = 0; j < g.n_pend; j++)
    if (g.pend[j].lo < b.start || g.pend[j].lo >= b.start + b.span) g.pend[k++] = g.pend[j];
  g.n_pend = k;
  int rc = munmap(b.start, b.span);
  TD_CHECK(rc == 0, "sealed device: munmap: %s", strerror(errno));
  unlock();
}

/* The host side of an async copy must lie in one host_alloc block, as CUDA's
 * copies are only asynchronous from pinned memory. */
static void check_host_side(const char *op, const void *p, size_t bytes) {
  const char *a = p;
  for (size_t i = 0; i < g.n_hosts; i++)
    if (a >= g.hosts[i].start && bytes <= g.hosts[i].size &&
        (size_t)(a - g.hosts[i].start) <= g.hosts[i].size - bytes)
      return;
  td_fail("sealed device: %s: the host side (%zu bytes at %p) is not inside memory from "
          "host_alloc (async copies take pinned host memory)", op, bytes, p);
}

static void async_copy(td_device *d, const char *op, void *dst, const void *src, size_t bytes,
                       int to_host) {
  if (!bytes) return; /* nothing moves: any pointers will do, as for cudaMemcpyAsync */
  lock();
  const void *host = to_host ? dst : src;
  check_host_side(op, host, bytes);
  for (size_t i = 0; i < g.n_hosts; i++) /* stream order: an earlier copy is done */
    set_prot(g.hosts[i].start, g.hosts[i].span, PROT_READ | PROT_WRITE);
  ENTER(d, op, to_host ? src : dst);
  if (to_host)
    FWD(copy_d2h, dst, src, bytes);
  else
    FWD(copy_h2d, dst, src, bytes);
  leave();
  grow((void **)&g.pend, &g.cap_pend, g.n_pend, sizeof *g.pend, "pending copy");
  char *lo = (char *)((uintptr_t)host / g.page * g.page);
  char *hi = (char *)round_up((uintptr_t)host + bytes, g.page);
  g.pend[g.n_pend++] = (pending){lo, hi, to_host ? PROT_NONE : PROT_READ, ++g.issued,
                                 to_host ? "destination of a copy_d2h_async"
                                         : "source (written to) of a copy_h2d_async"};
  reprotect();
  unlock();
}

static void s_copy_h2d_async(td_device *d, void *dst, const void *src, size_t bytes) {
  async_copy(d, "copy_h2d_async", dst, src, bytes, 0);
}
static void s_copy_d2h_async(td_device *d, void *dst, const void *src, size_t bytes) {
  async_copy(d, "copy_d2h_async", dst, src, bytes, 1);
}

static td_event *s_event_create(td_device *d) {
  (void)d;
  td_event *e = calloc(1, sizeof *e);
  if (!e) td_fail("sealed device: out of host memory for an event");
  return e;
}
static void s_event_destroy(td_device *d, td_event *e) {
  (void)d;
  free(e);
}
static void s_event_record(td_device *d, td_event *e) {
  (void)d;
  lock();
  e->seq = g.issued;
  unlock();
}
/* Ops run when issued: a later op on any handle already follows e's mark. */
static void s_event_wait(td_device *d, td_event *e) { (void)d, (void)e; }
static void s_event_synchronize(td_device *d, td_event *e) {
  (void)d;
  release(e->seq);
}
/* Done at once, but like a GPU's query it says nothing the host may read: only
 * a wait (synchronize, event_synchronize) opens async copies' host pages. */
static int s_event_query(td_device *d, td_event *e) { return (void)d, (void)e, 1; }

/* The blocking copies wait for the stream (on a GPU: cudaMemcpyAsync, then
 * cudaStreamSynchronize): the async copies issued before them are done too. */
static void s_copy_h2d(td_device *d, void *dst, const void *src, size_t bytes) {
  ENTER(d, "copy_h2d", dst); /* src is host memory: a device src faults */
  d->stream_waits++;
  FWD(copy_h2d, dst, src, bytes);
  leave();
  release(UINT64_MAX);
}
static void s_copy_d2h(td_device *d, void *dst, const void *src, size_t bytes) {
  ENTER(d, "copy_d2h", src);
  d->stream_waits++;
  FWD(copy_d2h, dst, src, bytes);
  leave();
  release(UINT64_MAX);
}
static void s_copy_d2d(td_device *d, void *dst, const void *src, size_t bytes) {
  ENTER(d, "copy_d2d", dst, src);
  FWD(copy_d2d, dst, src, bytes);
  leave();
}
static void s_fill(td_device *d, void *dst, td_dtype dt, int64_t n, float value) {
  ENTER(d, "fill", dst);
  FWD(fill, dst, dt, n, value);
  leave();
}

/* ------------------------------------------------------------ kernels */

/* TRIDENT_SEALED_FUSE=1: matmul_fuses offers c_in (beta 1, fp32 C) and the GELU
 * epilogues on dense rows, which matmul runs as the CPU's product and then its
 * elementwise ops, so the model's fused paths (model/linear.c) run in the CPU
 * test suite (test_gpt_grad_sealed_fused). */
static int s_matmul_fuses(td_device *d, const td_matmul_desc *m) {
  (void)d;
  const char *e = getenv("TRIDENT_SEALED_FUSE");
  if (!e || strcmp(e, "1") || m->batch != 1 || m->ldc != m->n) return 0;
  if (m->c_in && (m->beta != 1.0f || m->c_dtype != TD_F32)) return 0;
  return m->epilogue == TD_EPILOGUE_NONE ||
         (m->aux && m->ldaux == m->n && !(m->epilogue == TD_EPILOGUE_DGELU && m->bias));
}

/* The fused forms as s_matmul_fuses offered them: the CPU's ops on the opened
 * memory, DGELU's product in host scratch (the CPU's ops take any memory). */
static void matmul_composed(const td_matmul_desc *m) {
  float *prod = m->epilogue == TD_EPILOGUE_DGELU ? td_malloc((size_t)(m->m * m->n) * sizeof(float))
                                                 : NULL;
  td_device_matmul_unfused(&g_cpu, m, prod, NULL);
  td_free(prod);
}

static void s_matmul(td_device *d, const td_matmul_desc *m) {
  ENTER(d, "matmul", m->a, m->b, m->c, m->bias, m->c_in, m->aux);
  if (m->c_in || m->epilogue != TD_EPILOGUE_NONE)
    matmul_composed(m);
  else
    FWD(matmul, m);
  leave();
}
static void s_bias_backward(td_device *d, float *dbias, const void *dout, td_dtype dout_dtype,
                            int64_t rows, int64_t cols, void *dout_cast, td_dtype cast_dtype) {
  ENTER(d, "bias_backward", dbias, dout, dout_cast);
  FWD(bias_backward, dbias, dout, dout_dtype, rows, cols, dout_cast, cast_dtype);
  leave();
}
static void s_layernorm_forward(td_device *d, void *out, td_dtype out_dtype, float *mean,
                                float *rstd, const float *x, const float *w, const float *b,
                                int64_t rows, int64_t cols, float eps) {
  ENTER(d, "layernorm_forward", out, mean, rstd, x, w, b);
  FWD(layernorm_forward, out, out_dtype, mean, rstd, x, w, b, rows, cols, eps);
  leave();
}
static void s_layernorm_backward(td_device *d, float *dx, float *dw, float *db, const float *dout,
                                 const float *x, const float *w, const float *mean,
                                 const float *rstd, int64_t rows, int64_t cols) {
  ENTER(d, "layernorm_backward", dx, dw, db, dout, x, w, mean, rstd);
  FWD(layernorm_backward, dx, dw, db, dout, x, w, mean, rstd, rows, cols);
  leave();
}
static void s_gelu_forward(td_device *d, void *out, td_dtype out_dtype, const void *x,
                           td_dtype x_dtype, int64_t n, td_gelu_kind kind) {
  ENTER(d, "gelu_forward", out, x);
  FWD(gelu_forward, out, out_dtype, x, x_dtype, n, kind);
  leave();
}
static void s_gelu_backward(td_device *d, void *dx, td_dtype dx_dtype, float *dbias,
                            const float *dout, const void *x, td_dtype x_dtype, int64_t rows,
                            int64_t cols, td_gelu_kind kind) {
  ENTER(d, "gelu_backward", dx, dbias, dout, x);
  FWD(gelu_backward, dx, dx_dtype, dbias, dout, x, x_dtype, rows, cols, kind);
  leave();
}
static void s_add(td_device *d, float *out, const float *a, const float *b, int64_t n) {
  ENTER(d, "add", out, a, b);
  FWD(add, out, a, b, n);
  leave();
}
static void s_dropout(td_device *d, float *out, const float *resid, const float *x, int64_t n,
                      float p, uint64_t seed, uint64_t stream, uint64_t first) {
  ENTER(d, "dropout", out, resid, x);
  FWD(dropout, out, resid, x, n, p, seed, stream, first);
  leave();
}
static void s_attention_forward(td_device *d, const td_attention_desc *a) {
  ENTER(d, "attention_forward", a->qkv, a->out, a->lse);
  FWD(attention_forward, a);
  leave();
}
static void s_attention_forward_rows(td_device *d, const td_attention_desc *a, int64_t q0,
                                     int64_t nq) {
  ENTER(d, "attention_forward_rows", a->qkv, a->out, a->lse);
  FWD(attention_forward_rows, a, q0, nq);
  leave();
}
static void s_attention_backward(td_device *d, const td_attention_desc *a) {
  ENTER(d, "attention_backward", a->qkv, a->out, a->lse, a->dout, a->dqkv);
  FWD(attention_backward, a);
  leave();
}
static void s_embedding_forward(td_device *d, float *out, const int32_t *ids, int64_t n,
                                const float *table, int64_t vocab_start, int64_t rows_in_table,
                                int64_t cols, int accumulate) {
  ENTER(d, "embedding_forward", out, ids, table);
  FWD(embedding_forward, out, ids, n, table, vocab_start, rows_in_table, cols, accumulate);
  leave();
}
static void s_embedding_backward(td_device *d, float *dtable, const float *dout, const int32_t *ids,
                                 int64_t n, int64_t vocab_start, int64_t rows_in_table,
                                 int64_t cols) {
  ENTER(d, "embedding_backward", dtable, dout, ids);
  FWD(embedding_backward, dtable, dout, ids, n, vocab_start, rows_in_table, cols);
  leave();
}
static void s_cross_entropy_forward(td_device *d, float *losses, float *lse, const void *logits,
                                    td_dtype logits_dtype, const int32_t *targets, int64_t n,
                                    int64_t vocab) {
  ENTER(d, "cross_entropy_forward", losses, lse, logits, targets);
  FWD(cross_entropy_forward, losses, lse, logits, logits_dtype, targets, n, vocab);
  leave();
}
static void s_cross_entropy_slice(td_device *d, float *lse, float *target_logit,
                                  const void *logits, td_dtype logits_dtype,
                                  const int32_t *targets, int64_t n, int64_t vocab,
                                  int64_t vocab_start) {
  ENTER(d, "cross_entropy_slice", lse, target_logit, logits, targets);
  FWD(cross_entropy_slice, lse, target_logit, logits, logits_dtype, targets, n, vocab,
      vocab_start);
  leave();
}
static void s_cross_entropy_combine(td_device *d, float *lse, float *losses,
                                    const float *lse_parts, const float *target_logit, int64_t n,
                                    int64_t parts) {
  ENTER(d, "cross_entropy_combine", lse, losses, lse_parts, target_logit);
  FWD(cross_entropy_combine, lse, losses, lse_parts, target_logit, n, parts);
  leave();
}
static void s_masked_sum(td_device *d, double *out, const float *x, const float *mask,
                         int64_t n) {
  ENTER(d, "masked_sum", out, x, mask);
  FWD(masked_sum, out, x, mask, n);
  leave();
}
static void s_cross_entropy_backward(td_device *d, void *dlogits, td_dtype dlogits_dtype,
                                     const void *logits, td_dtype logits_dtype, const float *lse,
                                     const int32_t *targets, const float *dloss, int64_t n,
                                     int64_t vocab, int64_t vocab_start) {
  ENTER(d, "cross_entropy_backward", dlogits, logits, lse, targets, dloss);
  FWD(cross_entropy_backward, dlogits, dlogits_dtype, logits, logits_dtype, lse, targets, dloss,
      n, vocab, vocab_start);
  leave();
}
static void s_cross_entropy_fused(td_device *d, float *losses, float *lse, void *dlogits,
                                  td_dtype dlogits_dtype, const void *logits,
                                  td_dtype logits_dtype, const int32_t *targets,
                                  const float *dloss, int64_t n, int64_t vocab) {
  ENTER(d, "cross_entropy_fused", losses, lse, dlogits, logits, targets, dloss);
  FWD(cross_entropy_fused, losses, lse, dlogits, dlogits_dtype, logits, logits_dtype, targets,
      dloss, n, vocab);
  leave();
}
static void s_adamw(td_device *d, float *param, const float *grad, float *m, float *v, int64_t n,
                    float lr, float beta1, float beta2, float eps, float weight_decay,
                    float grad_scale, int64_t step, void *copy, td_dtype copy_dtype) {
  ENTER(d, "adamw", param, grad, m, v, copy);
  FWD(adamw, param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, step, copy,
      copy_dtype);
  leave();
}
static void s_cast(td_device *d, void *dst, td_dtype dst_dtype, const void *src, td_dtype src_dtype,
                   int64_t n) {
  ENTER(d, "cast", dst, src);
  FWD(cast, dst, dst_dtype, src, src_dtype, n);
  leave();
}
static void s_scale(td_device *d, float *x, int64_t n, float alpha) {
  ENTER(d, "scale", x);
  FWD(scale, x, n, alpha);
  leave();
}
static void s_sum_squares(td_device *d, double *out, const float *x, int64_t n) {
  ENTER(d, "sum_squares", out, x);
  FWD(sum_squares, out, x, n);
  leave();
}
static void s_count_zeros(td_device *d, double *out, const float *x, int64_t n) {
  ENTER(d, "count_zeros", out, x);
  FWD(count_zeros, out, x, n);
  leave();
}

/* ------------------------------------------------------------ public */

static const td_device_ops k_ops = {
    .name = "sealed",
    /* Not TD_DEVICE_HOST_MEMORY, the point of the device; its pages are host RAM. */
    .caps = TD_DEVICE_HOST_RAM,
    .alloc = s_alloc,
    .alloc_scratch = s_alloc, /* its blocks are fresh pages: zero either way */
    .free = s_free,
    .copy_h2d = s_copy_h2d,
    .copy_d2h = s_copy_d2h,
    .copy_d2d = s_copy_d2d,
    .fill = s_fill,
    .synchronize = s_synchronize,
    .memory_stats = s_memory_stats,
    .event_create = s_event_create,
    .event_destroy = s_event_destroy,
    .event_record = s_event_record,
    .event_wait = s_event_wait,
    .event_synchronize = s_event_synchronize,
    .event_query = s_event_query,
    .host_alloc = s_host_alloc,
    .host_free = s_host_free,
    .copy_h2d_async = s_copy_h2d_async,
    .copy_d2h_async = s_copy_d2h_async,
    .matmul = s_matmul,
    .matmul_fuses = s_matmul_fuses,
    .bias_backward = s_bias_backward,
    .layernorm_forward = s_layernorm_forward,
    .layernorm_backward = s_layernorm_backward,
    .gelu_forward = s_gelu_forward,
    .gelu_backward = s_gelu_backward,
    .add = s_add,
    .dropout = s_dropout,
    .attention_forward = s_attention_forward,
    .attention_forward_rows = s_attention_forward_rows,
    .attention_backward = s_attention_backward,
    .embedding_forward = s_embedding_forward,
    .embedding_backward = s_embedding_backward,
    .cross_entropy_forward = s_cross_entropy_forward,
    .cross_entropy_slice = s_cross_entropy_slice,
    .cross_entropy_combine = s_cross_entropy_combine,
    .masked_sum = s_masked_sum,
    .cross_entropy_backward = s_cross_entropy_backward,
    .cross_entropy_fused = s_cross_entropy_fused,
    .adamw = s_adamw,
    .cast = s_cast,
    .scale = s_scale,
    .sum_squares = s_sum_squares,
    .count_zeros = s_count_zeros,
};

const td_device_ops *td_sealed_device_ops(void) { return &k_ops; }

void *td_sealed_open(int *index) {
  *index = 0;
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, init_once);
  return NULL;
}

void td_sealed_describe(const void *impl, char *buf, size_t n) {
  (void)impl;
  snprintf(buf, n, "sealed (the CPU backend with device memory sealed between ops: a test device)");
}
