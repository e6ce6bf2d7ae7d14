#include "comm/device_comm.h"

#include <pthread.h>

#include "base/error.h"
#include "base/mem.h"

/* ------------------------------------------------------------ staging pool
 * Host staging is pinned memory (host_alloc), kept for reuse: on a GPU a pinned
 * allocation costs milliseconds, and copies from it run at the link's full
 * rate where pageable memory is copied twice. A buffer is busy from take to
 * give; a take reuses the smallest idle buffer of the device that is large
 * enough, else allocates one. */
typedef struct {
  td_device *dev;
  void *p;
  size_t bytes;
  int busy;
} staging;

static struct {
  pthread_mutex_t lock;
  staging *buf;
  int n, cap;
} g_pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void *stage_take(td_device *d, size_t bytes) {
  pthread_mutex_lock(&g_pool.lock);
  staging *best = NULL;
  for (int i = 0; i < g_pool.n; i++) {
    staging *s = &g_pool.buf[i];
    if (!s->busy && s->dev == d && s->bytes >= bytes && (!best || s->bytes < best->bytes)) best = s;
  }
  if (!best) {
    if (g_pool.n == g_pool.cap) {
      g_pool.cap = g_pool.cap ? 2 * g_pool.cap : 16;
      staging *grown = td_malloc(sizeof *grown * (size_t)g_pool.cap);
      for (int i = 0; i < g_pool.n; i++) grown[i] = g_pool.buf[i];
      td_free(g_pool.buf);
      g_pool.buf = grown;
    }
    best = &g_pool.buf[g_pool.n++];
    *best = (staging){.dev = d, .p = d->ops->host_alloc(d, bytes), .bytes = bytes};
  }
  best->busy = 1;
  void *p = best->p;
  pthread_mutex_unlock(&g_pool.lock);
  return p;
}

static void stage_give(void *p) {
  pthread_mutex_lock(&g_pool.lock);
  int i = 0;
  while (i < g_pool.n && g_pool.buf[i].p != p) i++;
  TD_CHECK(i < g_pool.n && g_pool.buf[i].busy, "device_comm: staging buffer %p is not in use", p);
  g_pool.buf[i].busy = 0;
  pthread_mutex_unlock(&g_pool.lock);
}

void td_dcomm_release(td_device *d) {
  pthread_mutex_lock(&g_pool.lock);
  int k = 0;
  for (int i = 0; i < g_pool.n; i++) {
    staging *s = &g_pool.buf[i];
    if (s->dev != d) {
      g_pool.buf[k++] = *s;
      continue;
    }
    TD_CHECK(!s->busy, "td_dcomm_release: a staged operation on this device is still in flight");
    d->ops->host_free(d, s->p);
  }
  g_pool.n = k;
  if (!k) td_free(g_pool.buf), g_pool.buf = NULL, g_pool.cap = 0;
  pthread_mutex_unlock(&g_pool.lock);
}

/* ------------------------------------------------------------ operations */

static int direct(const td_device *d) { return td_device_has(d, TD_DEVICE_HOST_MEMORY); }
static int alone(const td_comm *c) { return !c || td_comm_size(c) == 1; }
static size_t bytes_of(int64_t count, td_dtype dt) { return (size_t)count * td_dtype_size(dt); }

static void d2h(td_device *d, void *host, const void *dev, size_t n) {
  if (n) d->ops->copy_d2h(d, host, dev, n);
}
static void h2d(td_device *d, void *dev, const void *host, size_t n) {
  if (n) d->ops->copy_h2d(d, dev, host, n);
}
/* One rank: the result is the input (a device copy unless in place). */
static void local_copy(td_device *d, void *dst, const void *src, size_t n) {
  if (dst != src && n) d->ops->copy_d2d(d, dst, src, n);
}

void td_dcomm_all_reduce(td_comm *c, td_device *d, const void *send, void *recv, int64_t count,
                         td_dtype dt, td_reduce_op op) {
  const size_t n = bytes_of(count, dt);
  if (alone(c)) return local_copy(d, recv, send, n);
  if (direct(d)) return td_comm_all_reduce(c, send, recv, count, dt, op);
  void *h = stage_take(d, n);
  d2h(d, h, send, n);
  td_comm_all_reduce(c, h, h, count, dt, op);
  h2d(d, recv, h, n);
  stage_give(h);
}

void td_dcomm_all_gather(td_comm *c, td_device *d, const void *send, void *recv, int64_t count,
                         td_dtype dt) {
  td_dcomm_request r;
  td_dcomm_iall_gather(c, d, send, recv, count, dt, &r);
  td_dcomm_wait(&r);
}

void td_dcomm_gather(td_comm *c, td_device *d, const void *send, void *recv, int64_t count,
                     td_dtype dt, int root) {
  const size_t n = bytes_of(count, dt);
  if (alone(c)) return local_copy(d, recv, send, n);
  if (direct(d)) return td_comm_gather(c, send, recv, count, dt, root);
  const int me = td_comm_rank(c), size = td_comm_size(c);
  char *h = stage_take(d, n * (size_t)(me == root ? size + 1 : 1));
  d2h(d, h, send, n);
  td_comm_gather(c, h, me == root ? h + n : NULL, count, dt, root);
  if (me == root) h2d(d, recv, h + n, n * (size_t)size);
  stage_give(h);
}

void td_dcomm_recv(td_comm *c, td_device *d, void *buf, int64_t count, td_dtype dt, int src,
                   int tag) {
  if (direct(d)) return td_comm_recv(c, buf, count, dt, src, tag);
  const size_t n = bytes_of(count, dt);
  void *h = stage_take(d, n);
  td_comm_recv(c, h, count, dt, src, tag);
  h2d(d, buf, h, n);
  stage_give(h);
}

/* ------------------------------------------------------------ non-blocking */

static void start(td_dcomm_request *r, td_device *d) { *r = (td_dcomm_request){.dev = d}; }

/* The staged result lands in `result` when the operation completes. */
static void stage(td_dcomm_request *r, size_t bytes, void *result, size_t off, size_t n) {
  r->stage = stage_take(r->dev, bytes);
  r->result = result, r->result_off = off, r->result_bytes = n;
}

void td_dcomm_iall_gather(td_comm *c, td_device *d, const void *send, void *recv, int64_t count,
                          td_dtype dt, td_dcomm_request *r) {
  const size_t n = bytes_of(count, dt);
  start(r, d);
  if (alone(c)) return local_copy(d, recv, send, n);
  r->active = 1;
  if (direct(d)) return td_comm_iall_gather(c, send, recv, count, dt, &r->req);
  const int me = td_comm_rank(c), size = td_comm_size(c);
  stage(r, n * (size_t)size, recv, 0, n * (size_t)size);
  char *mine = (char *)r->stage + n * (size_t)me;
  d2h(d, mine, send, n); /* in place stays in place: the block sits at its own offset */
  td_comm_iall_gather(c, mine, r->stage, count, dt, &r->req);
}

void td_dcomm_iall_to_all(td_comm *c, td_device *d, const void *send, void *recv, int64_t count,
                          td_dtype dt, td_dcomm_request *r) {
  const size_t n = bytes_of(count, dt);
  start(r, d);
  if (alone(c)) return local_copy(d, recv, send, n);
  r->active = 1;
  if (direct(d)) return td_comm_iall_to_all(c, send, recv, count, dt, &r->req);
  const size_t all = n * (size_t)td_comm_size(c);
  stage(r, 2 * all, recv, all, all); /* [send copy | received] */
  d2h(d, r->stage, send, all);
  td_comm_iall_to_all(c, r->stage, (char *)r->stage + all, count, dt, &r->req);
}

void td_dcomm_isend(td_comm *c, td_device *d, const void *buf, int64_t count, td_dtype dt, int dest,
                    int tag, td_dcomm_request *r) {
  start(r, d);
  r->active = 1;
  if (direct(d)) return td_comm_isend(c, buf, count, dt, dest, tag, &r->req);
  const size_t n = bytes_of(count, dt);
  stage(r, n, NULL, 0, 0);
  d2h(d, r->stage, buf, n);
  td_comm_isend(c, r->stage, count, dt, dest, tag, &r->req);
}

static void finish(td_dcomm_request *r) {
  r->active = 0;
  if (r->result) h2d(r->dev, r->result, (char *)r->stage + r->result_off, r->result_bytes);
  if (r->stage) stage_give(r->stage); /* none on the direct path */
  r->stage = NULL, r->result = NULL;
}

void td_dcomm_wait(td_dcomm_request *r) {
  if (!r->active) return;
  td_comm_wait(&r->req);
  finish(r);
}

int td_dcomm_test(td_dcomm_request *r) {
  if (!r->active) return 1;
  if (!td_comm_test(&r->req)) return 0;
  finish(r);
  return 1;
}
