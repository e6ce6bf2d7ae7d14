#include "check.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/dtype.h"
#include "base/rng.h"

int tst_passed, tst_failed;

void tst_check(int ok, const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (ok) {
    tst_passed++;
    printf("  ok    ");
  } else {
    tst_failed++;
    printf("  FAIL  %s:%d: ", file, line);
  }
  vprintf(fmt, ap);
  printf("\n");
  fflush(stdout);
  va_end(ap);
}

int tst_check_on_rank(int rank, int size, int ok, const char *fmt, ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (rank == 0)
    tst_check(ok, __FILE__, __LINE__, "rank 0 of %d: %s", size, what);
  else if (!ok)
    fprintf(stderr, "rank %d: FAIL %s\n", rank, what);
  return ok;
}

int tst_finish(void) {
  printf("%d passed, %d failed\n", tst_passed, tst_failed);
  return tst_failed ? 1 : 0;
}

uint64_t tst_seed(void) {
  static uint64_t seed;
  static int ready;
  if (!ready) {
    const char *e = getenv("TRIDENT_TEST_SEED");
    if (e) {
      seed = strtoull(e, NULL, 10);
    } else {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      seed = (uint64_t)ts.tv_sec * 1000003u ^ (uint64_t)ts.tv_nsec;
    }
    printf("test seed %llu (TRIDENT_TEST_SEED=%llu replays it)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    ready = 1;
  }
  return seed;
}

void tst_fill_uniform(float *x, int64_t n, uint64_t stream, float lo, float hi) {
  td_rng_fill_uniform(x, n, tst_seed(), stream, 0);
  for (int64_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * x[i];
}

void tst_fill_normal(float *x, int64_t n, uint64_t stream, float std) {
  td_rng_fill_normal(x, n, tst_seed(), stream, 0, 0.0f, std);
}

double tst_rel_err(const float *got, const double *ref, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - ref[i]);
    if (!(d <= num)) num = d; /* NaN propagates */
    if (fabs(ref[i]) > den) den = fabs(ref[i]);
  }
  return den > 0 ? num / den : num;
}

double tst_err_over(const float *got, const double *ref, int64_t n, double scale) {
  double num = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - ref[i]);
    if (!(d <= num)) num = d;
  }
  return scale > 0 ? num / scale : num;
}

double tst_rel_err_f(const float *got, const float *ref, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - (double)ref[i]);
    if (!(d <= num)) num = d;
    if (fabs((double)ref[i]) > den) den = fabs((double)ref[i]);
  }
  return den > 0 ? num / den : num;
}

td_device *tst_device(void) {
  static td_device *d;
  if (d) return d;
  const char *name = getenv("TRIDENT_TEST_DEVICE");
  if (!name || !*name) name = "cpu";
  if (!td_device_available(name)) { /* cuda without a GPU (or without the backend) */
    printf("SKIP: TRIDENT_TEST_DEVICE=%s is not available here\n", name);
    exit(77);
  }
  d = td_device_open(name);
  return d;
}

int tst_device_is_cpu(void) { return !strcmp(tst_device()->ops->name, "cpu"); }

void *tst_put(const void *host, size_t bytes) {
  td_device *d = tst_device();
  void *p = d->ops->alloc(d, bytes ? bytes : 1);
  if (host && bytes) d->ops->copy_h2d(d, p, host, bytes);
  return p;
}

void tst_get(void *host, const void *dev, size_t bytes) {
  if (bytes) tst_device()->ops->copy_d2h(tst_device(), host, dev, bytes);
}

float *tst_putf(const float *host, int64_t n) { return tst_put(host, (size_t)n * sizeof(float)); }

void tst_getf(float *host, const float *dev, int64_t n) {
  tst_get(host, dev, (size_t)n * sizeof(float));
}

void tst_release(void *dev) {
  if (dev) tst_device()->ops->free(tst_device(), dev);
}

void tst_round_bf16(float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] = td_bf16_to_f32(td_f32_to_bf16(x[i]));
}

td_gpt_config tst_tiny_gpt_config(void) {
  td_gpt_config c;
  memset(&c, 0, sizeof c);
  c.num_layers = 3, c.hidden = 16, c.heads = 2, c.ffn_hidden = 40;
  c.seq_len = TST_TINY_SEQ, c.max_positions = 9;
  c.vocab_size = td_gpt_padded_vocab(TST_TINY_VOCAB, 8, 1);
  c.init_std = 0.02f, c.layernorm_eps = 1e-5f;
  return c;
}
