#include "base/watchdog.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static _Atomic int64_t g_since_ns; /* when the blocking call began; 0: none */
static const char *_Atomic g_what;
static _Atomic int64_t g_timeout_ns;
static _Atomic int g_running;
static pthread_t g_thread;
static int g_rank, g_size;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void td_watchdog_enter(const char *what) {
  atomic_store_explicit(&g_what, what, memory_order_relaxed);
  atomic_store_explicit(&g_since_ns, now_ns(), memory_order_release);
}

void td_watchdog_leave(void) { atomic_store_explicit(&g_since_ns, 0, memory_order_release); }

/* The message in one write (async-signal-safe, no stdio lock the stuck thread may hold). */
static void expire(const char *what, double waited_s) {
  char host[64] = "?", line[512];
  gethostname(host, sizeof host - 1);
  int n = snprintf(line, sizeof line,
                   "trident: error: rank %d of %d (host %s): %s has not completed after %.0f s "
                   "(--distributed-timeout-minutes %.4g): another rank or the network between "
                   "hosts is gone; ending this rank so that the launcher ends the job\n",
                   g_rank, g_size, host, what ? what : "an MPI call", waited_s,
                   (double)atomic_load(&g_timeout_ns) / 60e9);
  if (n > 0) (void)!write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
  _exit(1);
}

static void *watch(void *unused) {
  (void)unused;
  while (atomic_load(&g_running)) {
    int64_t since = atomic_load_explicit(&g_since_ns, memory_order_acquire);
    int64_t limit = atomic_load(&g_timeout_ns);
    if (since && now_ns() - since > limit)
      expire(atomic_load_explicit(&g_what, memory_order_relaxed), (double)(now_ns() - since) / 1e9);
    struct timespec tick = {0, 250000000}; /* 4 checks a second: the overshoot stays small */
    nanosleep(&tick, NULL);
  }
  return NULL;
}

void td_watchdog_start(double timeout_s, int rank, int size) {
  if (!(timeout_s > 0)) return;
  /* beyond ~30 years is "never" (and keeps the nanoseconds inside int64) */
  atomic_store(&g_timeout_ns, (int64_t)((timeout_s < 1e9 ? timeout_s : 1e9) * 1e9));
  g_rank = rank, g_size = size;
  if (atomic_exchange(&g_running, 1)) return;
  if (pthread_create(&g_thread, NULL, watch, NULL) != 0) {
    atomic_store(&g_running, 0);
    fprintf(stderr, "trident: warning: could not start the communication watchdog thread: "
                    "a lost rank will not be detected by timeout\n");
  }
}

void td_watchdog_stop(void) {
  if (!atomic_exchange(&g_running, 0)) return;
  pthread_join(g_thread, NULL);
}
