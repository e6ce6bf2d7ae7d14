#include "data/numpy_random.h"

#include <string.h>

#include "base/error.h"

#define MT_M 397
#define MT_UPPER 0x80000000u
#define MT_LOWER 0x7fffffffu
#define MT_MATRIX_A 0x9908b0dfu

void td_np_random_seed(td_np_random *r, uint32_t seed) {
  for (int i = 0; i < TD_MT19937_N; i++) {
    r->key[i] = seed;
    seed = 1812433253u * (seed ^ (seed >> 30)) + (uint32_t)i + 1u; /* Knuth, TAOCP vol. 2 */
  }
  r->pos = TD_MT19937_N; /* the first draw regenerates the whole state */
}

static uint32_t twist(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t y = (a & MT_UPPER) | (b & MT_LOWER);
  return c ^ (y >> 1) ^ ((y & 1u) ? MT_MATRIX_A : 0u);
}

static void regenerate(td_np_random *r) {
  uint32_t *k = r->key;
  int i = 0;
  for (; i < TD_MT19937_N - MT_M; i++) k[i] = twist(k[i], k[i + 1], k[i + MT_M]);
  for (; i < TD_MT19937_N - 1; i++) k[i] = twist(k[i], k[i + 1], k[i + MT_M - TD_MT19937_N]);
  k[TD_MT19937_N - 1] = twist(k[TD_MT19937_N - 1], k[0], k[MT_M - 1]);
  r->pos = 0;
}

uint32_t td_np_random_u32(td_np_random *r) {
  if (r->pos == TD_MT19937_N) regenerate(r);
  uint32_t y = r->key[r->pos++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

/* numpy's mt19937_next64: the first 32-bit draw is the high word. */
static uint64_t next_u64(td_np_random *r) {
  uint64_t hi = td_np_random_u32(r);
  return hi << 32 | td_np_random_u32(r);
}

uint64_t td_np_random_interval(td_np_random *r, uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;
  for (int s = 1; s <= 32; s <<= 1) mask |= mask >> s;
  uint64_t v;
  if (max <= 0xffffffffu) {
    while ((v = (td_np_random_u32(r) & mask)) > max) {}
  } else {
    while ((v = (next_u64(r) & mask)) > max) {}
  }
  return v;
}

int64_t td_np_random_randint(td_np_random *r, int64_t low, int64_t high) {
  TD_CHECK(low < high, "randint: low %lld >= high %lld", (long long)low, (long long)high);
  uint64_t range = (uint64_t)high - (uint64_t)low - 1u;
  return (int64_t)((uint64_t)low + td_np_random_interval(r, range));
}

void td_np_random_shuffle(td_np_random *r, void *data, int64_t n, size_t elem_size) {
  unsigned char *x = data, tmp[16];
  TD_CHECK(elem_size <= sizeof tmp, "shuffle: element of %zu bytes", elem_size);
  for (int64_t i = n - 1; i >= 1; i--) {
    uint64_t j = td_np_random_interval(r, (uint64_t)i);
    memcpy(tmp, x + j * elem_size, elem_size);
    memcpy(x + j * elem_size, x + (size_t)i * elem_size, elem_size);
    memcpy(x + (size_t)i * elem_size, tmp, elem_size);
  }
}
