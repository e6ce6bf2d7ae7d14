/* Overflow-checked size arithmetic. Sizes that come from users (flags,
 * config.json, checkpoint metadata) are multiplied into element counts and
 * bytes; a product that wraps would allocate a small buffer and then write past
 * it. Two forms:
 *  - td_mul_i64 / td_add_i64: exact, or report the overflow (the caller names
 *    the flags whose product it is);
 *  - td_sat_mul / td_sat_add: byte counts that saturate at TD_SIZE_HUGE, so a
 *    memory figure that overflowed stays "more than any machine has" and the
 *    memory check (base/memory_limit.h) refuses it with a message. */
#ifndef TD_BASE_CHECKED_H
#define TD_BASE_CHECKED_H

#include <stdint.h>

#define TD_SIZE_HUGE UINT64_MAX /* a saturated byte count */

/* *out = a * b; returns 0, or -1 when the product does not fit int64_t. */
static inline int td_mul_i64(int64_t a, int64_t b, int64_t *out) {
  return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}

/* *out = a + b; returns 0, or -1 on overflow. */
static inline int td_add_i64(int64_t a, int64_t b, int64_t *out) {
  return __builtin_add_overflow(a, b, out) ? -1 : 0;
}

static inline uint64_t td_sat_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? TD_SIZE_HUGE : r;
}

static inline uint64_t td_sat_add(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? TD_SIZE_HUGE : r;
}

/* n elements of `size` bytes (n < 0 counts as huge: it came from an overflow). */
static inline uint64_t td_sat_bytes(int64_t n, uint64_t size) {
  return n < 0 ? TD_SIZE_HUGE : td_sat_mul((uint64_t)n, size);
}

#endif
