/* ZeRO-Infinity's NVMe optimizer-state offload (DeepSpeed's "offload_optimizer":
 * {"device": "nvme"}): m and v live in one file and pass through a ring of
 * chunk buffers during the step. The file is laid out as
 *     [exp_avg: numel fp32][exp_avg_sq: numel fp32]
 * so chunk [a, a + n) of the state is two preads (or pwrites) at a and numel + a.
 *
 * A step is a three-stage pipeline over the chunks of o's runs (every run split
 * into pieces of at most chunk elements), with one buffer set per stage:
 *     I/O thread:     read chunk k + 1         write chunk k - 1
 *     calling thread:          update chunk k (ops->adamw)
 * Chunk k uses buffer set k % TD_NVME_SETS; the I/O thread reads chunk k into a
 * set only once the chunk that used it before (k - TD_NVME_SETS) is written. The
 * update is elementwise, so chunking does not change a bit of the result. */
#define _DEFAULT_SOURCE
#include "optim/nvme_state.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/mem.h"

/* read-ahead, compute, write-behind */
#define TD_NVME_SETS 3

/* One buffer set: m then v, chunk elements each. dev is what ops->adamw updates
 * (device memory); io is what the I/O thread reads into and writes from: a host
 * staging copy, or dev itself when the device's memory is host memory. */
typedef struct {
  float *dev;
  float *io;
} buffer_set;

struct td_nvme_state {
  td_device *dev;
  char *path;
  int fd;
  int64_t numel, chunk; /* chunk: elements of m (and of v) per buffer set */
  int staged;           /* 1: io buffers are host copies of device buffers */
  buffer_set sets[TD_NVME_SETS];
  long fail_after, writes; /* test hook: the fail_after-th chunk write fails with EIO */
};

/* ------------------------------------------------------------------ file I/O */

/* All of [off, off + bytes) of the file to or from buf, across short transfers
 * and signals; 0, or -1 with err naming the path, the operation and the cause. */
static int transfer(const td_nvme_state *s, int to_file, void *buf, size_t bytes, off_t off,
                    char *err, size_t errlen) {
  const char *op = to_file ? "write" : "read";
  size_t total = bytes;
  off_t start = off;
  char *p = buf;
  while (bytes > 0) {
    ssize_t k = to_file ? pwrite(s->fd, p, bytes, off) : pread(s->fd, p, bytes, off);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0)
      return td_errorf(err, errlen, "%s: %s of %zu bytes at offset %lld: %s", s->path, op, total,
                       (long long)start,
                       k < 0 ? strerror(errno) : to_file ? "no progress" : "the file ends early");
    p += k, bytes -= (size_t)k, off += k;
  }
  return 0;
}

/* Elements [offset, offset + n) of m (which 0) or v (1). */
static int transfer_state(const td_nvme_state *s, int to_file, int which, int64_t offset,
                          int64_t n, void *buf, char *err, size_t errlen) {
  off_t off = (off_t)(which * s->numel + offset) * (off_t)sizeof(float);
  return transfer(s, to_file, buf, (size_t)n * sizeof(float), off, err, errlen);
}

void td_nvme_state_read(td_nvme_state *s, int which, int64_t offset, int64_t n, float *host) {
  char err[1024];
  if (transfer_state(s, 0, which, offset, n, host, err, sizeof err)) td_fail("%s", err);
}

void td_nvme_state_write(td_nvme_state *s, int which, int64_t offset, int64_t n,
                         const float *host) {
  char err[1024];
  if (transfer_state(s, 1, which, offset, n, (void *)host, err, sizeof err)) td_fail("%s", err);
}

/* ------------------------------------------------------------ open and close */

static void alloc_sets(td_nvme_state *s) {
  size_t bytes = 2 * (size_t)s->chunk * sizeof(float);
  for (int i = 0; i < TD_NVME_SETS; i++) {
    buffer_set *b = &s->sets[i];
    b->dev = s->dev->ops->alloc(s->dev, bytes);
    b->io = s->staged ? td_malloc(bytes) : b->dev;
  }
}

static void free_sets(td_nvme_state *s) {
  for (int i = 0; i < TD_NVME_SETS; i++) {
    if (s->staged) td_free(s->sets[i].io);
    s->dev->ops->free(s->dev, s->sets[i].dev);
  }
}

/* The file, zero-filled (sparse: ftruncate writes nothing); -1 with err. */
static int create_file(const char *path, int64_t numel, char *err, size_t errlen) {
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return td_errorf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
  if (ftruncate(fd, (off_t)(2 * numel) * (off_t)sizeof(float)) != 0) {
    td_errorf(err, errlen, "%s: cannot size to %lld bytes: %s", path,
              (long long)(2 * numel * (int64_t)sizeof(float)), strerror(errno));
    close(fd);
    unlink(path);
    return -1;
  }
  return fd;
}

td_nvme_state *td_nvme_state_open(td_device *dev, const char *dir, const char *stem, int64_t numel,
                                  int64_t chunk_elems, char *err, size_t errlen) {
  TD_CHECK(numel >= 0 && chunk_elems > 0, "nvme state: numel %lld, chunk %lld", (long long)numel,
           (long long)chunk_elems);
  struct stat st;
  if (stat(dir, &st) != 0) {
    td_errorf(err, errlen, "NVMe offload directory %s: %s", dir, strerror(errno));
    return NULL;
  }
  if (!S_ISDIR(st.st_mode)) {
    td_errorf(err, errlen, "NVMe offload directory %s: not a directory", dir);
    return NULL;
  }
  size_t len = strlen(dir) + strlen(stem) + sizeof "/.adam";
  char *path = td_malloc(len);
  snprintf(path, len, "%s/%s.adam", dir, stem);
  int fd = create_file(path, numel, err, errlen);
  if (fd < 0) {
    td_free(path);
    return NULL;
  }
  int64_t chunk = chunk_elems < numel ? chunk_elems : numel; /* no run is longer than the state */
  const char *fail = getenv("TRIDENT_TEST_NVME_FAIL_AFTER");
  td_nvme_state *s = td_malloc(sizeof *s);
  *s = (td_nvme_state){.dev = dev, .path = path, .fd = fd, .numel = numel,
                       .chunk = chunk > 0 ? chunk : 1,
                       .staged = !td_device_has(dev, TD_DEVICE_HOST_MEMORY),
                       .fail_after = fail ? atol(fail) : 0};
  alloc_sets(s);
  return s;
}

void td_nvme_state_close(td_nvme_state *s) {
  if (!s) return;
  close(s->fd);
  unlink(s->path);
  free_sets(s);
  td_free(s->path);
  td_free(s);
}

/* ------------------------------------------------------------------ the step */

/* A piece of one run: state elements [state, state + n), params and grads at
 * param and grad. */
typedef struct {
  int64_t state, param, grad, n;
  int weight_decay, decoupled_lr;
} chunk;

/* What the two threads share during a step (under mu): chunks [0, read) have
 * been read, [0, computed) updated, [0, written) written back. */
typedef struct {
  td_nvme_state *s;
  const chunk *chunks;
  int64_t n_chunks;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int64_t read, computed, written;
  int failed;     /* the I/O thread stopped on an error ... */
  char err[1024]; /* ... this one */
} pipeline;

/* o's runs cut into chunks of at most s->chunk elements; *n gets the count. */
static chunk *make_chunks(const td_nvme_state *s, const td_adamw *o, int64_t *n) {
  int64_t count = 0;
  for (int i = 0; i < o->n_runs; i++) count += (o->runs[i].numel + s->chunk - 1) / s->chunk;
  chunk *c = td_malloc(sizeof *c * (size_t)(count ? count : 1));
  int64_t k = 0;
  for (int i = 0; i < o->n_runs; i++) {
    const td_adam_run *r = &o->runs[i];
    for (int64_t j = 0; j < r->numel; j += s->chunk)
      c[k++] = (chunk){.state = r->state_offset + j, .param = r->param_offset + j,
                       .grad = r->grad_offset + j,
                       .n = r->numel - j < s->chunk ? r->numel - j : s->chunk,
                       .weight_decay = r->weight_decay, .decoupled_lr = r->decoupled_lr};
  }
  *n = count;
  return c;
}

/* Chunk k's m and v between the file and its buffer set's io buffers. */
static int chunk_io(td_nvme_state *s, const chunk *c, int64_t k, int to_file, char *err,
                    size_t errlen) {
  float *m = s->sets[k % TD_NVME_SETS].io, *v = m + s->chunk;
  if (to_file && s->fail_after > 0 && ++s->writes == s->fail_after) /* the test hook */
    return td_errorf(err, errlen, "%s: write of chunk %lld (simulated): %s", s->path,
                     (long long)k, strerror(EIO));
  if (transfer_state(s, to_file, 0, c->state, c->n, m, err, errlen)) return -1;
  return transfer_state(s, to_file, 1, c->state, c->n, v, err, errlen);
}

/* The I/O thread: read ahead while a buffer set is free, else write back what
 * the caller has updated; reads first, since the caller waits on the next one.
 * Stops at the first error (recorded for the caller to report). */
static void *io_thread(void *arg) {
  pipeline *p = arg;
  pthread_mutex_lock(&p->mu);
  while (p->written < p->n_chunks) {
    int64_t k;
    int to_file;
    if (p->read < p->n_chunks && p->read - p->written < TD_NVME_SETS)
      k = p->read, to_file = 0;
    else if (p->computed > p->written)
      k = p->written, to_file = 1;
    else {
      pthread_cond_wait(&p->cv, &p->mu);
      continue;
    }
    pthread_mutex_unlock(&p->mu);
    int rc = chunk_io(p->s, &p->chunks[k], k, to_file, p->err, sizeof p->err);
    pthread_mutex_lock(&p->mu);
    if (rc)
      p->failed = 1;
    else if (to_file)
      p->written = k + 1;
    else
      p->read = k + 1;
    pthread_cond_broadcast(&p->cv);
    if (p->failed) break;
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* Wait until *count > k (chunk k read, or written) or the I/O thread failed;
 * 0 when it got there. */
static int wait_for(pipeline *p, const int64_t *count, int64_t k) {
  pthread_mutex_lock(&p->mu);
  while (*count <= k && !p->failed) pthread_cond_wait(&p->cv, &p->mu);
  int failed = p->failed;
  pthread_mutex_unlock(&p->mu);
  return failed ? -1 : 0;
}

/* The update of chunk k in its buffer set (staged through the device when the
 * set's io buffers are host copies). */
static void update_chunk(td_nvme_state *s, const td_adamw *o, const chunk *c, int64_t k,
                         float *params, const float *grads, float lr, float grad_scale) {
  td_device *d = s->dev;
  const buffer_set *b = &s->sets[k % TD_NVME_SETS];
  size_t bytes = (size_t)c->n * sizeof(float);
  float *m = b->dev, *v = m + s->chunk;
  if (s->staged) {
    d->ops->copy_h2d(d, m, b->io, bytes);
    d->ops->copy_h2d(d, v, b->io + s->chunk, bytes);
  }
  d->ops->adamw(d, params + c->param, grads + c->grad, m, v, c->n,
                c->decoupled_lr ? o->decoupled_lr : lr, o->beta1, o->beta2, o->eps,
                c->weight_decay ? o->weight_decay : 0.0f, grad_scale, o->step, NULL, TD_F32);
  if (s->staged) {
    d->ops->copy_d2h(d, b->io, m, bytes);
    d->ops->copy_d2h(d, b->io + s->chunk, v, bytes);
  }
}

/* Update chunks in order as the I/O thread delivers them, handing each back for
 * its write; -1 when the I/O thread failed. */
static int run_pipeline(pipeline *p, const td_adamw *o, float *params, const float *grads,
                        float lr, float grad_scale) {
  for (int64_t k = 0; k < p->n_chunks; k++) {
    if (wait_for(p, &p->read, k)) return -1;
    update_chunk(p->s, o, &p->chunks[k], k, params, grads, lr, grad_scale);
    pthread_mutex_lock(&p->mu);
    p->computed = k + 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
  }
  return wait_for(p, &p->written, p->n_chunks - 1);
}

void td_nvme_state_step(td_nvme_state *s, const td_adamw *o, float *params, const float *grads,
                        float lr, float grad_scale) {
  pipeline p = {.s = s};
  chunk *chunks = make_chunks(s, o, &p.n_chunks);
  p.chunks = chunks;
  if (p.n_chunks == 0) {
    td_free(chunks);
    return;
  }
  pthread_mutex_init(&p.mu, NULL);
  pthread_cond_init(&p.cv, NULL);
  pthread_t io;
  int rc = pthread_create(&io, NULL, io_thread, &p);
  if (rc) td_fail("%s: cannot start the I/O thread: %s", s->path, strerror(rc));
  int failed = run_pipeline(&p, o, params, grads, lr, grad_scale);
  pthread_join(io, NULL); /* on failure the thread has stopped already */
  pthread_cond_destroy(&p.cv);
  pthread_mutex_destroy(&p.mu);
  td_free(chunks);
  if (failed) td_fail("%s", p.err);
}
