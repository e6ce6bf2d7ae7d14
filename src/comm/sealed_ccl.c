/* The sealed test device's collective library (comm/ccl.h): NCCL's interface
 * over MPI, moving device memory only through the device's own copies, so the
 * CPU test suite runs every path device_comm.c takes with NCCL on a GPU and
 * checks it against host MPI.
 *
 * How it stands in:
 *  - a communicator is an MPI duplicate of the group it mirrors (NCCL joins by
 *    the id; the id is made and broadcast all the same, as for NCCL);
 *  - an op stages through pinned host memory with copy_d2h_async / copy_h2d_async
 *    and event_synchronize on the stream it was given, then calls MPI: the
 *    sealed device runs ops when issued, so the op is complete in stream order
 *    when it returns. These waits are the stand-in's, not the design's (NCCL
 *    makes the host wait for nothing), so they do not count as stream waits;
 *  - send/recv only between group_start and group_end (device_comm.c's use):
 *    group_end posts them all as non-blocking MPI calls and waits for the
 *    receives, so pairs that NCCL would progress together do here; per peer
 *    they pair in issue order (MPI's ordering on one communicator and tag), as
 *    NCCL's do. A send's data is staged at once (its device buffer is free when
 *    group_end returns, as stream order makes it on a GPU), and the MPI send
 *    completes later: every call tests the sends in flight, destroy waits for
 *    them. A send that blocked the host here would deadlock 1F1B where NCCL's,
 *    blocking only its own stream, does not. A send or receive outside a group
 *    is refused: NCCL's would block the stream until its peer's is posted,
 *    which a host-blocking stand-in cannot mirror. */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "comm/ccl.h"
#include "comm/comm.h"

struct td_ccl {
  td_comm *comm; /* MPI duplicate of the mirrored group */
  td_device *dev;
  int grouped;   /* inside group_start .. group_end */
  struct pending {
    int send; /* 1 send, 0 recv */
    td_device *s;
    void *dev_buf; /* device side */
    void *host;    /* pinned staging */
    size_t bytes;
    int64_t count;
    td_dtype dt;
    int peer;
  } *ops;
  int n, cap;
  struct in_flight { /* sends posted, not yet complete */
    td_comm_request req;
    td_device *s;
    void *host;
  } *sends;
  int n_sends, cap_sends;
};

/* Completes the sends in flight that are done (all of them: wait). */
static void progress_sends(td_ccl *c, int wait) {
  int k = 0;
  for (int i = 0; i < c->n_sends; i++) {
    struct in_flight *f = &c->sends[i];
    if (wait)
      td_comm_wait(&f->req);
    else if (!td_comm_test(&f->req)) {
      c->sends[k++] = *f;
      continue;
    }
    f->s->ops->host_free(f->s, f->host);
  }
  c->n_sends = k;
}

static int sealed_load(char *why, size_t n) {
  (void)why, (void)n;
  return 1;
}
static void sealed_version(char *buf, size_t n) { snprintf(buf, n, "MPI stand-in"); }
static void sealed_make_id(void *id) { memset(id, 0x5e, TD_CCL_ID_BYTES); }

static td_ccl *sealed_create(td_device *d, td_comm *over, int rank, int nranks, const void *id) {
  (void)id, (void)nranks;
  td_ccl *c = td_calloc(sizeof *c);
  c->comm = td_comm_split(over, 0, rank);
  c->dev = d;
  return c;
}

static void sealed_destroy(td_ccl *c) {
  if (!c) return;
  TD_CHECK(!c->grouped && !c->n, "sealed ccl: a communicator destroyed inside a group");
  progress_sends(c, 1);
  td_comm_free(c->comm);
  td_free(c->ops), td_free(c->sends);
  td_free(c);
}

/* ---- staging through the stream's own copies ---- */

static void wait_stream(td_device *s) {
  td_event *e = s->ops->event_create(s);
  s->ops->event_record(s, e);
  s->ops->event_synchronize(s, e);
  s->ops->event_destroy(s, e);
}
static void *down(td_device *s, const void *dev, size_t bytes) {
  void *h = s->ops->host_alloc(s, bytes ? bytes : 1);
  if (bytes) s->ops->copy_d2h_async(s, h, dev, bytes);
  wait_stream(s);
  return h;
}
static void up(td_device *s, void *dev, void *host, size_t bytes) {
  if (bytes) s->ops->copy_h2d_async(s, dev, host, bytes);
  wait_stream(s);
  s->ops->host_free(s, host);
}
static size_t bytes_of(int64_t count, td_dtype dt) { return (size_t)count * td_dtype_size(dt); }

static void sealed_all_reduce(td_ccl *c, td_device *s, const void *send, void *recv, int64_t count,
                              td_dtype dt, td_reduce_op op) {
  progress_sends(c, 0);
  const size_t n = bytes_of(count, dt);
  void *h = down(s, send, n);
  td_comm_all_reduce(c->comm, h, h, count, dt, op);
  up(s, recv, h, n);
}

static void sealed_all_gather(td_ccl *c, td_device *s, const void *send, void *recv, int64_t count,
                              td_dtype dt) {
  progress_sends(c, 0);
  const size_t n = bytes_of(count, dt), size = (size_t)td_comm_size(c->comm);
  char *all = s->ops->host_alloc(s, n * size > 0 ? n * size : 1);
  void *mine = down(s, send, n);
  memcpy(all + n * (size_t)td_comm_rank(c->comm), mine, n);
  s->ops->host_free(s, mine);
  td_comm_all_gather(c->comm, all + n * (size_t)td_comm_rank(c->comm), all, count, dt);
  up(s, recv, all, n * size);
}

/* Room for one more element in the array *p of n (capacity *cap). */
static void reserve_one(void **p, int *cap, int n, size_t elem) {
  if (n < *cap) return;
  *cap = *cap ? 2 * *cap : 16;
  void *grown = td_malloc(elem * (size_t)*cap);
  if (n) memcpy(grown, *p, elem * (size_t)n);
  td_free(*p);
  *p = grown;
}

static void queue(td_ccl *c, int send, td_device *s, void *buf, int64_t count, td_dtype dt,
                  int peer) {
  TD_CHECK(c->grouped, "sealed ccl: %s outside group_start/group_end (NCCL's would block the "
           "stream until its peer's is posted)", send ? "send" : "recv");
  TD_CHECK(peer >= 0 && peer < td_comm_size(c->comm), "sealed ccl: peer %d of %d ranks", peer,
           td_comm_size(c->comm));
  reserve_one((void **)&c->ops, &c->cap, c->n, sizeof *c->ops);
  c->ops[c->n++] = (struct pending){.send = send, .s = s, .dev_buf = buf,
                                    .bytes = bytes_of(count, dt), .count = count, .dt = dt,
                                    .peer = peer};
}

static void sealed_send(td_ccl *c, td_device *s, const void *buf, int64_t count, td_dtype dt,
                        int peer) {
  queue(c, 1, s, (void *)buf, count, dt, peer);
}
static void sealed_recv(td_ccl *c, td_device *s, void *buf, int64_t count, td_dtype dt, int peer) {
  queue(c, 0, s, buf, count, dt, peer);
}

static void sealed_group_start(td_ccl *c) {
  TD_CHECK(!c->grouped, "sealed ccl: group_start inside a group");
  c->grouped = 1;
}

/* A send posted (its request a value: MPI keeps no pointer to it). */
static void keep_send(td_ccl *c, td_device *s, void *host, td_comm_request req) {
  reserve_one((void **)&c->sends, &c->cap_sends, c->n_sends, sizeof *c->sends);
  c->sends[c->n_sends++] = (struct in_flight){.req = req, .s = s, .host = host};
}

static void sealed_group_end(td_ccl *c) {
  TD_CHECK(c->grouped, "sealed ccl: group_end without group_start");
  progress_sends(c, 0);
  td_comm_request *recv = td_malloc(sizeof *recv * (size_t)(c->n ? c->n : 1));
  int n_recv = 0;
  for (int i = 0; i < c->n; i++) {
    struct pending *p = &c->ops[i];
    if (p->send) {
      td_comm_request req;
      void *host = down(p->s, p->dev_buf, p->bytes);
      td_comm_isend(c->comm, host, p->count, p->dt, p->peer, 0, &req);
      keep_send(c, p->s, host, req);
    } else {
      p->host = p->s->ops->host_alloc(p->s, p->bytes ? p->bytes : 1);
      td_comm_irecv(c->comm, p->host, p->count, p->dt, p->peer, 0, &recv[n_recv++]);
    }
  }
  td_comm_wait_all(recv, n_recv);
  for (int i = 0; i < c->n; i++) {
    struct pending *p = &c->ops[i];
    if (!p->send) up(p->s, p->dev_buf, p->host, p->bytes);
  }
  td_free(recv);
  c->n = 0, c->grouped = 0;
}

const td_ccl_ops *td_sealed_ccl_ops(void) {
  static const td_ccl_ops ops = {
      .name = "mpi-staged",
      .load = sealed_load,
      .version = sealed_version,
      .make_id = sealed_make_id,
      .create = sealed_create,
      .destroy = sealed_destroy,
      .all_reduce = sealed_all_reduce,
      .all_gather = sealed_all_gather,
      .send = sealed_send,
      .recv = sealed_recv,
      .group_start = sealed_group_start,
      .group_end = sealed_group_end,
  };
  return &ops;
}
