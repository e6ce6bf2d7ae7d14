#include "bench_common.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/error.h"
#include "base/mem.h"
#include "base/rng.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double td_bench_median(double *v, int n) {
  TD_CHECK(n >= 1, "median of %d values", n);
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double td_bench_time_median(double min_seconds, void (*fn)(void *), void *arg) {
  double t[64];
  int n = 0;
  fn(arg);
  double start = td_now_seconds();
  while (n < 64 && (n < 3 || td_now_seconds() - start < min_seconds)) {
    double t0 = td_now_seconds();
    fn(arg);
    t[n++] = td_now_seconds() - t0;
  }
  return td_bench_median(t, n);
}

void *td_bench_alloc_random(td_device *dev, int64_t n, td_dtype dt, uint64_t stream) {
  float *host = td_malloc((size_t)n * sizeof(float));
  td_rng_fill_uniform(host, n, 1234, stream, 0);
  void *d = dev->ops->alloc(dev, (size_t)n * td_dtype_size(dt));
  if (dt == TD_F32) {
    dev->ops->copy_h2d(dev, d, host, (size_t)n * sizeof(float));
  } else {
    uint16_t *h16 = td_malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) h16[i] = td_f32_to_bf16(host[i] - 0.5f);
    dev->ops->copy_h2d(dev, d, h16, (size_t)n * 2);
    td_free(h16);
  }
  td_free(host);
  return d;
}

void td_bench_print_json_text(const char *s) {
  for (const char *p = s; *p; p++) printf(*p == '"' || *p == '\\' ? "\\%c" : "%c", *p);
}
