/* The asynchronous half of the device interface (device.h: streams and events,
 * pinned host memory, async copies, statistics left in device memory), on every
 * backend this machine can run: cpu, sealed, and cuda when a GPU is visible (its
 * part reports skipped otherwise, never passed).
 *  - a round trip through host_alloc buffers with async copies, a kernel between
 *    them, and an event waited on by the host gives the values computed here;
 *  - two handles of one device: the second's work waits on an event recorded by
 *    the first, and sees the first's results;
 *  - sum_squares, count_zeros and masked_sum write into slots of one device
 *    array, read back with one copy: double references, and the bits of
 *    td_device_reduce_now; an empty input writes 0;
 *  - the sealed device enforces the waits: reading a copy_d2h_async destination,
 *    or writing a copy_h2d_async source, before a wait kills a forked child
 *    with a line naming the mistake; after the wait it does not; an event
 *    recorded before the copy does not release it; an async copy from memory
 *    not made by host_alloc is refused. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/mem.h"
#include "check.h"
#include "device/device.h"

enum { N = 100003 }; /* odd, several pages, more than one reduction block */

/* ------------------------------------------------------------ round trip */

static void test_round_trip(td_device *d) {
  const td_device_ops *o = d->ops;
  float *in = o->host_alloc(d, N * sizeof(float)), *out = o->host_alloc(d, N * sizeof(float));
  tst_fill_uniform(in, N, 11, -4.0f, 4.0f);
  float *x = o->alloc(d, N * sizeof(float));
  td_event *e = o->event_create(d);
  const uint64_t waits = d->stream_waits;
  o->copy_h2d_async(d, x, in, N * sizeof(float));
  o->scale(d, x, N, 2.0f); /* exact: a power of two */
  o->copy_d2h_async(d, out, x, N * sizeof(float));
  o->event_record(d, e);
  o->event_synchronize(d, e);
  int same = 1;
  for (int64_t i = 0; i < N; i++) same &= out[i] == 2.0f * in[i];
  CHECK(same, "%s: h2d_async, scale, d2h_async, event: the host's values", o->name);
  CHECK(d->stream_waits == waits, "%s: async copies and an event wait are not stream waits (%llu)",
        o->name, (unsigned long long)(d->stream_waits - waits));
  o->copy_h2d(d, x, in, sizeof(float));
  o->copy_d2h(d, out, x, sizeof(float));
  o->synchronize(d);
  CHECK(d->stream_waits == waits + 3, "%s: copy_h2d, copy_d2h and synchronize: 3 stream waits (%llu)",
        o->name, (unsigned long long)(d->stream_waits - waits));
  o->event_destroy(d, e);
  o->free(d, x);
  o->host_free(d, in), o->host_free(d, out);
}

/* ------------------------------------------------------------ two streams */

/* Handle a fills x and records; handle b waits for the event, then copies x and
 * scales the copy. */
static void test_two_handles(const char *name) {
  td_device *a = td_device_open_index(name, 0), *b = td_device_open_index(name, 0);
  CHECK(a->index == b->index, "%s: two handles of device %d", name, a->index);
  float *x = a->ops->alloc(a, N * sizeof(float)), *y = a->ops->alloc(a, N * sizeof(float));
  float *host = a->ops->host_alloc(a, N * sizeof(float));
  td_event *filled = a->ops->event_create(a), *done = b->ops->event_create(b);
  for (int round = 1; round <= 3; round++) {
    a->ops->fill(a, x, TD_F32, N, (float)round);
    a->ops->event_record(a, filled);
    b->ops->event_wait(b, filled);
    b->ops->copy_d2d(b, y, x, N * sizeof(float));
    b->ops->scale(b, y, N, 0.5f);
    b->ops->copy_d2h_async(b, host, y, N * sizeof(float));
    b->ops->event_record(b, done);
    b->ops->event_synchronize(b, done);
    int ok = 1;
    for (int64_t i = 0; i < N; i++) ok &= host[i] == 0.5f * (float)round;
    CHECK(ok, "%s: round %d: the second stream sees the first's fill after its event", name,
          round);
  }
  a->ops->event_destroy(a, filled), b->ops->event_destroy(b, done);
  a->ops->host_free(a, host);
  a->ops->free(a, x), a->ops->free(a, y);
  td_device_close(b), td_device_close(a);
}

/* ------------------------------------------------------------ statistics */

static void test_statistics(td_device *d) {
  const td_device_ops *o = d->ops;
  static const int64_t ns[] = {1, 7, 4097, N};
  enum { K = 4 };
  float *x = td_malloc(N * sizeof(float)), *mask = td_malloc(N * sizeof(float));
  tst_fill_uniform(x, N, 21, -3.0f, 3.0f);
  for (int64_t i = 0; i < N; i += 5) x[i] = (i % 2) ? -0.0f : 0.0f;
  for (int64_t i = 0; i < N; i++) mask[i] = (float)(i % 3 != 1);
  float *dx = o->alloc(d, N * sizeof(float)), *dm = o->alloc(d, N * sizeof(float));
  o->copy_h2d(d, dx, x, N * sizeof(float));
  o->copy_h2d(d, dm, mask, N * sizeof(float));
  double *slots = o->alloc(d, (3 * K + 3) * sizeof(double)), got[3 * K + 3];
  o->fill(d, slots, TD_F64, 3 * K + 3, 7.0f); /* the empty reductions must overwrite it */
  for (int k = 0; k < K; k++) {
    o->sum_squares(d, slots + 3 * k, dx, ns[k]);
    o->count_zeros(d, slots + 3 * k + 1, dx, ns[k]);
    o->masked_sum(d, slots + 3 * k + 2, dx, dm, ns[k]);
  }
  o->sum_squares(d, slots + 3 * K, dx, 0);
  o->count_zeros(d, slots + 3 * K + 1, dx, 0);
  o->masked_sum(d, slots + 3 * K + 2, dx, dm, 0);
  o->copy_d2h(d, got, slots, sizeof got); /* the one wait */
  for (int k = 0; k < K; k++) {
    double sq = 0, ms = 0, mag = 0;
    int64_t zeros = 0;
    for (int64_t i = 0; i < ns[k]; i++) {
      sq += (double)x[i] * x[i], zeros += x[i] == 0.0f;
      ms += (double)x[i] * mask[i], mag += fabs((double)x[i] * mask[i]);
    }
    double now = td_device_reduce_now(d, o->sum_squares, dx, ns[k]);
    CHECK(fabs(got[3 * k] - sq) <= 1e-12 * sq && !memcmp(&now, &got[3 * k], sizeof now),
          "%s n=%lld: sum_squares %.17g (double %.17g), the bits of reduce_now", o->name,
          (long long)ns[k], got[3 * k], sq);
    CHECK(got[3 * k + 1] == (double)zeros, "%s n=%lld: count_zeros %.0f (want %lld)", o->name,
          (long long)ns[k], got[3 * k + 1], (long long)zeros);
    CHECK(fabs(got[3 * k + 2] - ms) <= 1e-12 * (mag > 0 ? mag : 1),
          "%s n=%lld: masked_sum %.17g (double %.17g)", o->name, (long long)ns[k], got[3 * k + 2],
          ms);
  }
  CHECK(got[3 * K] == 0 && got[3 * K + 1] == 0 && got[3 * K + 2] == 0,
        "%s: empty reductions write 0 (%g %g %g)", o->name, got[3 * K], got[3 * K + 1],
        got[3 * K + 2]);
  o->free(d, slots), o->free(d, dx), o->free(d, dm);
  td_free(x), td_free(mask);
}

/* ------------------------------------------------------------ sealed: the waits */

typedef void (*misuse_fn)(td_device *d);

/* Run f(d) in a child with stderr in a temporary file. Returns how it ended:
 * the signal (or 0 when it exited, status in *code) and its stderr's first line. */
static int child(td_device *d, misuse_fn f, int *code, char *out, size_t n) {
  FILE *tmp = tmpfile();
  if (!tmp) return -1;
  fflush(stdout), fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    dup2(fileno(tmp), 2);
    f(d);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  rewind(tmp);
  size_t got = fread(out, 1, n - 1, tmp);
  out[got] = '\0';
  fclose(tmp);
  char *nl = strchr(out, '\n');
  if (nl) *nl = '\0';
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

enum { B = 3 * 4096 };

/* d2h_async, then waits as the variant says, then reads the destination. */
static void d2h_then_read(td_device *d, int wait) {
  char *host = d->ops->host_alloc(d, B), *dev = d->ops->alloc(d, B);
  td_event *before = d->ops->event_create(d), *after = d->ops->event_create(d);
  d->ops->fill(d, dev, TD_I32, B / 4, 5.0f);
  d->ops->event_record(d, before);
  d->ops->copy_d2h_async(d, host + 100, dev, 5000); /* spans two pages */
  d->ops->event_record(d, after);
  if (wait == 1) d->ops->event_synchronize(d, after);
  if (wait == 2) d->ops->event_synchronize(d, before); /* too early: the copy is after it */
  if (wait == 3) d->ops->synchronize(d);
  volatile int32_t v = *(int32_t *)(host + 100 + 4096);
  _exit(v == 5 ? 0 : 3); /* read the copy's value: 0 */
}
static void d2h_read_early(td_device *d) { d2h_then_read(d, 0); }
static void d2h_read_after_event(td_device *d) { d2h_then_read(d, 1); }
static void d2h_read_after_old_event(td_device *d) { d2h_then_read(d, 2); }
static void d2h_read_after_sync(td_device *d) { d2h_then_read(d, 3); }

static void h2d_then_write(td_device *d, int wait) {
  char *host = d->ops->host_alloc(d, B), *dev = d->ops->alloc(d, B);
  d->ops->copy_h2d_async(d, dev, host, B);
  volatile char r = host[7]; /* reading an h2d source is allowed */
  (void)r;
  if (wait) d->ops->synchronize(d);
  host[7] = 1;
  _exit(0);
}
static void h2d_write_early(td_device *d) { h2d_then_write(d, 0); }
static void h2d_write_after_sync(td_device *d) { h2d_then_write(d, 1); }

static void async_from_plain_memory(td_device *d) {
  static char plain[256];
  char *dev = d->ops->alloc(d, sizeof plain);
  d->ops->copy_h2d_async(d, dev, plain, sizeof plain);
  _exit(0);
}

static void test_sealed_waits(td_device *d) {
  if (UNDER_ASAN) {
    printf("  skip  early host accesses to async copies (AddressSanitizer's SIGSEGV handler "
           "reports them first)\n");
    return;
  }
  char out[4096];
  int code = 0, sig;
  sig = child(d, d2h_read_early, &code, out, sizeof out);
  CHECK(sig == SIGSEGV && strstr(out, "is the destination of a copy_d2h_async that nothing has "
                                      "waited for"),
        "reading a d2h_async destination before a wait: signal %d: %s", sig, out);
  sig = child(d, d2h_read_after_event, &code, out, sizeof out);
  CHECK(sig == 0 && code == 0, "after event_synchronize on an event recorded after the copy: "
                               "read the copy's value (signal %d, exit %d) %s", sig, code, out);
  sig = child(d, d2h_read_after_old_event, &code, out, sizeof out);
  CHECK(sig == SIGSEGV && strstr(out, "destination of a copy_d2h_async"),
        "an event recorded before the copy does not release it: signal %d: %s", sig, out);
  sig = child(d, d2h_read_after_sync, &code, out, sizeof out);
  CHECK(sig == 0 && code == 0, "after synchronize: signal %d, exit %d %s", sig, code, out);
  sig = child(d, h2d_write_early, &code, out, sizeof out);
  CHECK(sig == SIGSEGV && strstr(out, "source (written to) of a copy_h2d_async"),
        "writing an h2d_async source before a wait: signal %d: %s", sig, out);
  sig = child(d, h2d_write_after_sync, &code, out, sizeof out);
  CHECK(sig == 0 && code == 0, "writing it after synchronize: signal %d, exit %d %s", sig, code,
        out);
  sig = child(d, async_from_plain_memory, &code, out, sizeof out);
  CHECK(sig == 0 && code == 1 && strstr(out, "not inside memory from host_alloc"),
        "an async copy from plain host memory is refused: exit %d: %s", code, out);
}

/* ------------------------------------------------------------ main */

static void run_backend(const char *name) {
  if (!td_device_available(name)) {
    printf("  skip  %s: no usable device here (its checks are not counted as passed)\n", name);
    return;
  }
  td_device *d = td_device_open(name);
  test_round_trip(d);
  test_statistics(d);
  if (!strcmp(name, "sealed")) test_sealed_waits(d);
  td_device_close(d);
  test_two_handles(name);
}

int main(void) {
  run_backend("cpu");
  run_backend("sealed");
  run_backend("cuda");
  return tst_finish();
}
