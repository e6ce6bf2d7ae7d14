#include "comm/device_comm.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "comm/ccl.h"

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

static void library_release(td_device *d); /* below */

void td_dcomm_release(td_device *d) {
  library_release(d);
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
/* ------------------------------------------------------------ the library
 * Per device that uses its collective library: the library, an event marking
 * the compute work before each non-blocking operation, spare events for
 * requests, the communicators bound (td_dcomm_bind; each also hangs on its
 * td_comm, which destroys it when freed) with the stream each one's
 * non-blocking operations run on, and the point-to-point channels
 * (td_dcomm_p2p_setup) with the stream their sends run on.
 *
 * A stream per communicator, not one for all: a library operation blocks its
 * stream until every rank of its communicator joins, and ZeRO issues its
 * exchanges, gradient gathers and parameter gathers (three communicators) in
 * an order that depends on which earlier ones were found complete (timing), so
 * on one shared stream two ranks could queue them in different orders and
 * each wait on an operation behind the other's. Per communicator the order is
 * the same on every rank. */
typedef struct bound bound;
typedef struct channel channel;
typedef struct {
  td_device *dev;
  const td_ccl_ops *lib;
  td_device *sender;  /* the point-to-point sends' stream (NULL until a channel exists) */
  td_event *issued;   /* compute work issued before a non-blocking operation */
  td_event **spare;   /* events for requests, reused */
  int n_spare, cap_spare;
  bound *first;
  channel *channels;
} library;

/* One direction between two neighbours of a point-to-point communicator: a
 * library communicator of the two ranks that carries only this direction's
 * messages, in issue order. */
struct channel {
  const td_comm *over; /* the communicator td_dcomm_isend / recv name */
  int peer;            /* the other rank, in over */
  int outgoing;        /* 1: this rank sends on it; 0: receives */
  td_comm *pair;       /* the two ranks (owned by the channel of direction 0) */
  td_ccl *ccl;
  int peer_in_ccl;
  channel *next;
};

struct bound {
  td_comm *comm;
  td_ccl *ccl;
  td_device *stream; /* its non-blocking operations' stream (opened at the first one) */
  library *lib;
  bound *next;
};

static struct {
  pthread_mutex_t lock;
  library *lib[8]; /* the devices of this process that use one (usually one) */
  int n;
} g_libs = {.lock = PTHREAD_MUTEX_INITIALIZER};

static library *library_of(const td_device *d) {
  pthread_mutex_lock(&g_libs.lock);
  library *l = NULL;
  for (int i = 0; i < g_libs.n && !l; i++)
    if (g_libs.lib[i]->dev == d) l = g_libs.lib[i];
  pthread_mutex_unlock(&g_libs.lock);
  return l;
}

int td_dcomm_uses_library(const td_device *d) { return library_of(d) != NULL; }

static void unbind(bound *b) {
  library *l = b->lib;
  bound **p = &l->first;
  while (*p != b) p = &(*p)->next;
  *p = b->next;
  l->lib->destroy(b->ccl);
  td_device_close(b->stream);
  td_free(b);
}
/* td_comm_free's hook: the communicator goes, its library twin with it. */
static void detach(void *attached) { unbind(attached); }

/* c's library twin (td_dcomm_bind made it). */
static bound *bound_of(td_comm *c, library *l) {
  bound *b = td_comm_attached(c);
  TD_CHECK(b, "device_comm: a collective through the %s library on a communicator of %d ranks "
           "that td_dcomm_bind did not bind (made at set-up, before any operation is in flight)",
           l->lib->name, td_comm_size(c));
  TD_CHECK(b->lib == l, "device_comm: a communicator used with two devices' libraries");
  return b;
}
static td_ccl *ccl_of(td_comm *c, library *l) { return bound_of(c, l)->ccl; }
/* The stream of c's non-blocking operations. */
static td_device *stream_of(bound *b) {
  if (!b->stream) b->stream = td_device_open_index(b->lib->dev->ops->name, b->lib->dev->index);
  return b->stream;
}

void td_dcomm_bind(td_comm *c, td_device *d) {
  library *l = library_of(d);
  if (!l || alone(c) || td_comm_attached(c)) return;
  unsigned char id[TD_CCL_ID_BYTES];
  if (td_comm_rank(c) == 0) l->lib->make_id(id);
  td_comm_broadcast(c, id, TD_CCL_ID_BYTES / 4, TD_I32, 0);
  bound *b = td_calloc(sizeof *b);
  *b = (bound){.comm = c, .ccl = l->lib->create(l->dev, c, td_comm_rank(c), td_comm_size(c), id),
               .lib = l, .next = l->first};
  l->first = b;
  td_comm_attach(c, b, detach);
  /* the stream of its non-blocking operations now, at set-up: opened at a first
   * use, its allocations (which stop concurrency between the device's streams)
   * would land mid-step, at a point that differs between ranks */
  (void)stream_of(b);
}

static td_event *event_take(library *l) {
  if (l->n_spare) return l->spare[--l->n_spare];
  return l->dev->ops->event_create(l->dev);
}
static void event_give(library *l, td_event *e) {
  if (l->n_spare == l->cap_spare) {
    l->cap_spare = l->cap_spare ? 2 * l->cap_spare : 8;
    td_event **grown = td_malloc(sizeof *grown * (size_t)l->cap_spare);
    for (int i = 0; i < l->n_spare; i++) grown[i] = l->spare[i];
    td_free(l->spare);
    l->spare = grown;
  }
  l->spare[l->n_spare++] = e;
}

/* Stream s starts after the compute work issued so far. */
static void follow_compute(library *l, td_device *s) {
  l->dev->ops->event_record(l->dev, l->issued);
  s->ops->event_wait(s, l->issued);
}
/* The request's end: an event on stream s. */
static void mark_done(library *l, td_device *s, td_dcomm_request *r) {
  r->done = event_take(l);
  s->ops->event_record(s, r->done);
  r->active = 1;
}

static channel *channel_of(library *l, const td_comm *over, int peer, int outgoing) {
  for (channel *ch = l->channels; ch; ch = ch->next)
    if (ch->over == over && ch->peer == peer && ch->outgoing == outgoing) return ch;
  return NULL;
}

static void channels_close(library *l) {
  while (l->channels) {
    channel *ch = l->channels;
    l->channels = ch->next;
    l->lib->destroy(ch->ccl);
    td_comm_free(ch->pair); /* NULL but for direction 0's */
    td_free(ch);
  }
}

static void library_close(library *l) {
  channels_close(l);
  while (l->first) {
    bound *b = l->first;
    td_comm_attach(b->comm, NULL, NULL);
    unbind(b);
  }
  td_device *d = l->dev;
  for (int i = 0; i < l->n_spare; i++) d->ops->event_destroy(d, l->spare[i]);
  td_free(l->spare);
  d->ops->event_destroy(d, l->issued);
  td_device_close(l->sender);
  td_free(l);
}

static void library_release(td_device *d) {
  library *l = NULL;
  pthread_mutex_lock(&g_libs.lock);
  for (int i = 0; i < g_libs.n && !l; i++)
    if (g_libs.lib[i]->dev == d) {
      l = g_libs.lib[i];
      g_libs.lib[i] = g_libs.lib[--g_libs.n];
    }
  pthread_mutex_unlock(&g_libs.lock);
  if (l) library_close(l);
}

/* ---- point-to-point channels ---- */

/* A library communicator over pair (2 ranks), made by both at once. */
static td_ccl *pair_ccl(library *l, td_comm *pair) {
  unsigned char id[TD_CCL_ID_BYTES];
  if (td_comm_rank(pair) == 0) l->lib->make_id(id);
  td_comm_broadcast(pair, id, TD_CCL_ID_BYTES / 4, TD_I32, 0);
  return l->lib->create(l->dev, pair, td_comm_rank(pair), 2, id);
}

void td_dcomm_p2p_setup(td_comm *over, td_device *d) {
  library *l = library_of(d);
  if (!l || alone(over)) return;
  const int me = td_comm_rank(over), size = td_comm_size(over);
  if (!l->sender) l->sender = td_device_open_index(d->ops->name, d->index);
  /* Pairs (r, r + 1) with r even, then with r odd: two splits, each giving every
   * rank at most one pair; every pair makes its low-to-high channel first. */
  for (int parity = 0; parity < 2; parity++) {
    const int low = me - parity < 0 ? -1 : (me - parity) / 2 * 2 + parity;
    const int in_pair = low >= 0 && low + 1 < size;
    td_comm *pair = td_comm_split(over, in_pair ? low : -1, me);
    if (!pair) continue;
    for (int dir = 0; dir < 2; dir++) {
      channel *ch = td_calloc(sizeof *ch);
      const int from = dir == 0 ? low : low + 1;
      *ch = (channel){.over = over, .peer = me == low ? low + 1 : low, .outgoing = me == from,
                      .pair = dir == 0 ? pair : NULL, .ccl = pair_ccl(l, pair),
                      .peer_in_ccl = 1 - td_comm_rank(pair), .next = l->channels};
      l->channels = ch;
    }
  }
}

/* ---- the choice ---- */

int td_dcomm_setup(td_comm *world, td_device *d, int want_library, char *line, size_t n) {
  const td_ccl_ops *lib = direct(d) ? NULL : td_ccl_for(d);
  char why[512] = "";
  int ok = 1;
  if (!lib)
    ok = 0, snprintf(why, sizeof why, direct(d) ? "host memory" : "%s has no collective library",
                     d->ops->name);
  else if (!want_library)
    ok = 0, snprintf(why, sizeof why, "--distributed-backend gloo");
  else if (!lib->load(why, sizeof why))
    ok = 0;
  /* ranks (on every host) whose device another rank of their host uses too */
  int32_t sharing = td_comm_same_on_host(world, (int64_t)td_device_key(d)) > 1;
  if (!alone(world)) td_comm_all_reduce(world, &sharing, &sharing, 1, TD_I32, TD_OP_SUM);
  /* NCCL cannot give two ranks one GPU; the sealed device's stand-in can. */
  if (ok && sharing && strcmp(lib->name, "nccl") == 0)
    ok = 0, snprintf(why, sizeof why, "%d ranks share a GPU with another rank", sharing);
  int32_t all_ok = ok;
  if (!alone(world)) td_comm_all_reduce(world, &all_ok, &all_ok, 1, TD_I32, TD_OP_MIN);
  if (ok && !all_ok) snprintf(why, sizeof why, "another rank cannot use %s", lib->name);
  if (alone(world)) {
    snprintf(line, n, "none (one rank)");
    return 0;
  }
  if (!all_ok) {
    snprintf(line, n, "%s (%s)", direct(d) ? "MPI" : "MPI through host copies", why);
    return 0;
  }
  library *l = td_calloc(sizeof *l);
  *l = (library){.dev = d, .lib = lib, .issued = d->ops->event_create(d)};
  pthread_mutex_lock(&g_libs.lock);
  const int room = g_libs.n < (int)(sizeof g_libs.lib / sizeof *g_libs.lib);
  if (room) g_libs.lib[g_libs.n++] = l;
  pthread_mutex_unlock(&g_libs.lock);
  TD_CHECK(room, "device_comm: too many devices use a collective library in one process");
  char version[64];
  lib->version(version, sizeof version);
  snprintf(line, n, "%s %s, on the device (compute and communication streams)", lib->name,
           version);
  /* the world itself is not bound: no device collective runs over all ranks, and
   * a communicator's buffers (all of them, connected at creation) would be spent
   * on nothing; each group that moves device memory is bound by its user */
  return 1;
}

/* One rank: the result is the input (a device copy unless in place). */
static void local_copy(td_device *d, void *dst, const void *src, size_t n) {
  if (dst != src && n) d->ops->copy_d2d(d, dst, src, n);
}

void td_dcomm_all_reduce(td_comm *c, td_device *d, const void *send, void *recv, int64_t count,
                         td_dtype dt, td_reduce_op op) {
  const size_t n = bytes_of(count, dt);
  if (alone(c)) return local_copy(d, recv, send, n);
  library *l = library_of(d);
  if (l) return l->lib->all_reduce(ccl_of(c, l), d, send, recv, count, dt, op);
  if (direct(d)) return td_comm_all_reduce(c, send, recv, count, dt, op);
  void *h = stage_take(d, n);
  d2h(d, h, send, n);
  td_comm_all_reduce(c, h, h, count, dt, op);
  h2d(d, recv, h, n);
  stage_give(h);
}

void td_dcomm_all_gather(td_comm *c, td_device *d, const void *send, void *recv, int64_t count,
                         td_dtype dt) {
  library *l = alone(c) ? NULL : library_of(d);
  if (l) return l->lib->all_gather(ccl_of(c, l), d, send, recv, count, dt);
  td_dcomm_request r;
  td_dcomm_iall_gather(c, d, send, recv, count, dt, &r);
  td_dcomm_wait(&r);
}

void td_dcomm_gather(td_comm *c, td_device *d, const void *send, void *recv, int64_t count,
                     td_dtype dt, int root) {
  const size_t n = bytes_of(count, dt);
  if (alone(c)) return local_copy(d, recv, send, n);
  const int me = td_comm_rank(c), size = td_comm_size(c);
  library *l = library_of(d);
  if (l) { /* the root receives every other rank's block, in one group */
    td_ccl *cc = ccl_of(c, l);
    if (me == root) local_copy(d, (char *)recv + n * (size_t)root, send, n);
    l->lib->group_start(cc);
    if (me != root) l->lib->send(cc, d, send, count, dt, root);
    for (int r = 0; r < size && me == root; r++)
      if (r != root) l->lib->recv(cc, d, (char *)recv + n * (size_t)r, count, dt, r);
    l->lib->group_end(cc);
    return;
  }
  if (direct(d)) return td_comm_gather(c, send, recv, count, dt, root);
  char *h = stage_take(d, n * (size_t)(me == root ? size + 1 : 1));
  d2h(d, h, send, n);
  td_comm_gather(c, h, me == root ? h + n : NULL, count, dt, root);
  if (me == root) h2d(d, recv, h + n, n * (size_t)size);
  stage_give(h);
}

void td_dcomm_recv(td_comm *c, td_device *d, void *buf, int64_t count, td_dtype dt, int src,
                   int tag) {
  library *l = library_of(d);
  channel *ch = l ? channel_of(l, c, src, 0) : NULL;
  if (ch) { /* on the compute stream: what follows it needs the data */
    l->lib->group_start(ch->ccl);
    l->lib->recv(ch->ccl, d, buf, count, dt, ch->peer_in_ccl);
    l->lib->group_end(ch->ccl);
    return;
  }
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
  library *l = library_of(d);
  if (l) {
    bound *b = bound_of(c, l);
    td_device *s = stream_of(b);
    follow_compute(l, s);
    l->lib->all_gather(b->ccl, s, send, recv, count, dt);
    return mark_done(l, s, r);
  }
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
  library *l = library_of(d);
  if (l) { /* block p to rank p, block p from rank p: one group of send/recv pairs */
    bound *b = bound_of(c, l);
    td_device *s = stream_of(b);
    const int me = td_comm_rank(c), size = td_comm_size(c);
    follow_compute(l, s);
    local_copy(s, (char *)recv + n * (size_t)me, (const char *)send + n * (size_t)me, n);
    l->lib->group_start(b->ccl);
    for (int p = 0; p < size; p++) {
      if (p == me) continue;
      l->lib->send(b->ccl, s, (const char *)send + n * (size_t)p, count, dt, p);
      l->lib->recv(b->ccl, s, (char *)recv + n * (size_t)p, count, dt, p);
    }
    l->lib->group_end(b->ccl);
    return mark_done(l, s, r);
  }
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
  library *l = library_of(d);
  channel *ch = l ? channel_of(l, c, dest, 1) : NULL;
  if (ch) { /* on the senders' stream, after the compute that wrote buf */
    follow_compute(l, l->sender);
    l->lib->group_start(ch->ccl);
    l->lib->send(ch->ccl, l->sender, buf, count, dt, ch->peer_in_ccl);
    l->lib->group_end(ch->ccl);
    return mark_done(l, l->sender, r);
  }
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

/* The library's path: the compute stream waits for the operation's end. */
static void finish_on_device(td_dcomm_request *r) {
  library *l = library_of(r->dev);
  r->dev->ops->event_wait(r->dev, r->done);
  event_give(l, r->done);
  r->done = NULL, r->active = 0;
}

void td_dcomm_wait(td_dcomm_request *r) {
  if (!r->active) return;
  if (r->done) return finish_on_device(r);
  td_comm_wait(&r->req);
  finish(r);
}

int td_dcomm_test(td_dcomm_request *r) {
  if (!r->active) return 1;
  if (r->done) { /* an event of the device: any of its handles can ask */
    if (!r->dev->ops->event_query(r->dev, r->done)) return 0;
    finish_on_device(r);
    return 1;
  }
  if (!td_comm_test(&r->req)) return 0;
  finish(r);
  return 1;
}
