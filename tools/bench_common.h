/* Helpers shared by the `trident bench` tools (the clock: base/clock.h): medians,
 * repeated timing of a closure, and device buffers of random values. */
#ifndef TD_TOOLS_BENCH_COMMON_H
#define TD_TOOLS_BENCH_COMMON_H

#include <stdint.h>

#include "base/clock.h"
#include "device/device.h"

/* Median of v[0..n) (sorts v in place); n >= 1. */
double td_bench_median(double *v, int n);

/* Median seconds of fn(arg) over at least 3 runs (after one warm-up), repeating
 * until min_seconds have passed (at most 64 runs). */
double td_bench_time_median(double min_seconds, void (*fn)(void *), void *arg);

/* n device elements of dtype dt (TD_F32 or TD_BF16), uniform in (0, 1) for fp32 and
 * in (-0.5, 0.5) for bf16, from the counter-based RNG (seed 1234, this stream). */
void *td_bench_alloc_random(td_device *dev, int64_t n, td_dtype dt, uint64_t stream);

/* Print s as the body of a JSON string (quotes and backslashes escaped; the GEMM
 * line's cache path may hold either). */
void td_bench_print_json_text(const char *s);

#endif
