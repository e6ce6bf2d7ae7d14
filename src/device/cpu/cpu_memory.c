/* The CPU backend's device memory: host memory with a size header (so
 * memory_stats counts what is allocated and its peak), zeroed by the threads
 * that will use it, and a cache of freed large blocks.
 *
 * Why the cache: a block of a megabyte or more comes from mmap, and free gives
 * it back to the kernel, so the next allocation of it faults in every page
 * again. ZeRO allocates a unit's receive buffer, its gradient buffer (stages 2
 * and 3) and its gathered parameters (stage 3) for each use and frees them
 * after, tens to hundreds of megabytes a step: touching 268 MiB of fresh pages
 * took 200-240 ms on a 2-core VM where zeroing the same resident bytes took
 * 31-39 ms. Freed large blocks therefore stay in the process, and an allocation
 * of the same size takes one back (zeroed again: alloc's contract; as it was
 * for alloc_scratch, whose user writes it in full). The cache
 * lets the process hold at most one block more than the peak of live
 * allocations so far: before a block that misses is allocated, cached blocks
 * are given back, oldest first, until live + cached + the new block fits under
 * that peak plus the largest block freed so far (a block alone above it raises
 * the peak, as any allocation does). That one block of slack lets ZeRO's
 * different unit sizes (the embeddings, a layer) stay cached side by side. Under
 * AddressSanitizer a cached block is poisoned, so a use after free still
 * reports. */
#include <omp.h>
#include <pthread.h>
#include <string.h>

#include "base/mem.h"
#include "device/cpu/cpu_kernels.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

enum { HEADER = 64 };              /* the size, in front of the 64-byte aligned block */
enum { CACHED_MIN = 1 << 20 };     /* blocks from this size on are kept when freed */
enum { CACHE_SLOTS = 64 };         /* at most this many kept (the oldest goes first) */

static size_t g_allocated, g_peak; /* live bytes and their peak (under g_lock) */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct {
  char *base; /* the header's address (NULL: empty) */
  size_t bytes;
  unsigned long long age;
} cached_block;
static cached_block g_cache[CACHE_SLOTS];
static size_t g_cached;               /* bytes held in g_cache */
static size_t g_largest;              /* the largest block freed so far: the cache's slack */
static unsigned long long g_clock;    /* ages the cache entries */

/* A large buffer is zeroed by the threads that will use it. A page lands on the
 * NUMA node of the thread that first writes it, and the flat kernels give thread
 * t the t-th contiguous block of their 16384-element pieces (schedule(static));
 * zeroing fp32 pieces of the same size the same way puts each thread's share of
 * the parameters, gradients and Adam state on its own node, as PyTorch's
 * first-touch advice has it. Small buffers are zeroed by the caller's thread. */
enum { FIRST_TOUCH_PIECE = 16384 * sizeof(float), FIRST_TOUCH_MIN = 1 << 20 };
static void zero_first_touch(char *p, size_t bytes) {
  if (bytes < FIRST_TOUCH_MIN || omp_get_max_threads() == 1) {
    memset(p, 0, bytes);
    return;
  }
  const int64_t pieces = (int64_t)((bytes + FIRST_TOUCH_PIECE - 1) / FIRST_TOUCH_PIECE);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < pieces; i++) {
    size_t at = (size_t)i * FIRST_TOUCH_PIECE;
    memset(p + at, 0, bytes - at < FIRST_TOUCH_PIECE ? bytes - at : FIRST_TOUCH_PIECE);
  }
}

/* A cached block of exactly `bytes`, taken out of the cache (NULL: none).
 * Under g_lock. */
static char *take_cached(size_t bytes) {
  int best = -1;
  for (int i = 0; i < CACHE_SLOTS; i++)
    if (g_cache[i].base && g_cache[i].bytes == bytes &&
        (best < 0 || g_cache[i].age > g_cache[best].age))
      best = i;
  if (best < 0) return NULL;
  char *b = g_cache[best].base;
  g_cache[best].base = NULL;
  g_cached -= bytes;
  return b;
}

/* Give cached blocks back, oldest first, until live + cached + `need` fits
 * under the peak plus the slack (or nothing is cached). Under g_lock; returns the blocks to
 * free outside it through out (at most CACHE_SLOTS). */
static int evict_for(size_t need, char **out) {
  int n = 0;
  while (g_cached && g_allocated + g_cached + need > g_peak + g_largest) {
    int old = -1;
    for (int i = 0; i < CACHE_SLOTS; i++)
      if (g_cache[i].base && (old < 0 || g_cache[i].age < g_cache[old].age)) old = i;
    out[n++] = g_cache[old].base;
    g_cached -= g_cache[old].bytes;
    g_cache[old].base = NULL;
  }
  return n;
}

/* A block leaving the cache for good (its header holds its size). */
static void release_block(char *base) {
  size_t bytes;
  UNPOISON(base, HEADER);
  memcpy(&bytes, base, sizeof bytes);
  UNPOISON(base, bytes + HEADER);
  td_free(base);
}

static void count_live(size_t bytes) {
  g_allocated += bytes;
  if (g_allocated > g_peak) g_peak = g_allocated;
}

/* zero: alloc's contract; without it (alloc_scratch) a kept block comes back
 * as it was, and only fresh pages are touched (by first_touch's threads). */
static void *alloc_block(size_t bytes, int zero) {
  char *base = NULL, *evicted[CACHE_SLOTS];
  int n_evicted = 0;
  pthread_mutex_lock(&g_lock);
  if (bytes >= CACHED_MIN) base = take_cached(bytes);
  if (!base) n_evicted = evict_for(bytes, evicted);
  count_live(bytes);
  pthread_mutex_unlock(&g_lock);
  for (int i = 0; i < n_evicted; i++) release_block(evicted[i]);
  const int fresh = !base;
  if (base)
    UNPOISON(base, bytes + HEADER);
  else
    base = td_malloc(bytes + HEADER);
  if (zero || fresh) zero_first_touch(base + HEADER, bytes);
  memcpy(base, &bytes, sizeof bytes);
  return base + HEADER;
}

static void *cpu_alloc(td_device *d, size_t bytes) {
  (void)d;
  return alloc_block(bytes, 1);
}

static void *cpu_alloc_scratch(td_device *d, size_t bytes) {
  (void)d;
  return alloc_block(bytes, 0);
}

static void cpu_free(td_device *d, void *p) {
  (void)d;
  if (!p) return;
  char *base = (char *)p - HEADER;
  size_t bytes;
  memcpy(&bytes, base, sizeof bytes);
  int slot = -1;
  pthread_mutex_lock(&g_lock);
  g_allocated -= bytes;
  if (bytes >= CACHED_MIN) {
    if (bytes > g_largest) g_largest = bytes;
    for (int i = 0; i < CACHE_SLOTS && slot < 0; i++)
      if (!g_cache[i].base) slot = i;
    if (slot >= 0) { /* poisoned before another thread can take it */
      POISON(base, bytes + HEADER);
      g_cache[slot] = (cached_block){.base = base, .bytes = bytes, .age = ++g_clock};
      g_cached += bytes;
    }
  }
  pthread_mutex_unlock(&g_lock);
  if (slot < 0) td_free(base);
}

static void cpu_memory_stats(td_device *d, size_t *allocated, size_t *peak) {
  (void)d;
  pthread_mutex_lock(&g_lock);
  *allocated = g_allocated, *peak = g_peak;
  pthread_mutex_unlock(&g_lock);
}

void *td_cpu_workspace_get(td_cpu_workspace *w, size_t bytes) {
  if (bytes > w->bytes) {
    td_free(w->p);
    w->p = td_malloc(bytes);
    w->bytes = bytes;
  }
  return w->p;
}

size_t td_cpu_cached_memory(void) {
  pthread_mutex_lock(&g_lock);
  size_t n = g_cached;
  pthread_mutex_unlock(&g_lock);
  return n;
}

void td_cpu_release_cached_memory(void) {
  char *evicted[CACHE_SLOTS];
  pthread_mutex_lock(&g_lock);
  int n = 0;
  for (int i = 0; i < CACHE_SLOTS; i++)
    if (g_cache[i].base) evicted[n++] = g_cache[i].base, g_cache[i].base = NULL;
  g_cached = 0;
  pthread_mutex_unlock(&g_lock);
  for (int i = 0; i < n; i++) release_block(evicted[i]);
}

void td_cpu_register_memory(td_device_ops *ops) {
  ops->alloc = cpu_alloc;
  ops->alloc_scratch = cpu_alloc_scratch;
  ops->free = cpu_free;
  ops->memory_stats = cpu_memory_stats;
}
