/* Elementwise kernels III, on the device under test (TRIDENT_TEST_DEVICE: cpu,
 * sealed, cuda): cast between fp32 / bf16 / fp16 bit-exact against the scalar
 * conversions of base/dtype.h (every bf16 and fp16 bit pattern; random fp32 bit
 * patterns and the special cases: NaN payloads, Inf, subnormals, rounding ties,
 * overflow to Inf), unaligned and odd lengths; and fill in every dtype. Inputs are
 * built on the host and copied to device memory; results are copied back to check. */
#include <string.h>

#include "base/dtype.h"
#include "base/mem.h"
#include "base/rng.h"
#include "check.h"

#define OPS (tst_device()->ops)
#define DEV tst_device()

/* All 65536 16-bit patterns, from offset 1 of the buffer (unaligned) when odd. */
static uint16_t *all_halves(int odd) {
  uint16_t *h = td_malloc(65537 * 2);
  for (uint32_t i = 0; i < 65536; i++) h[i + (uint32_t)odd] = (uint16_t)i;
  return h;
}

static float h_to_f32(uint16_t h, td_dtype dt) {
  return dt == TD_BF16 ? td_bf16_to_f32(h) : td_f16_to_f32(h);
}
static uint16_t f32_to_h(float f, td_dtype dt) {
  return dt == TD_BF16 ? td_f32_to_bf16(f) : td_f32_to_f16(f);
}

/* 16-bit -> fp32, and 16-bit -> the other 16-bit type (through fp32, as the scalar
 * functions compose), over every pattern; n = 65536 - odd. */
static void test_from_half(td_dtype src, int odd) {
  int64_t n = 65536 - odd;
  td_dtype other = src == TD_BF16 ? TD_F16 : TD_BF16;
  uint16_t *h = all_halves(odd), *h2 = td_malloc(65536 * 2);
  uint32_t *f = td_malloc(65536 * 4);
  uint16_t *dh = tst_put(h, 65537 * 2), *dh2 = tst_put(NULL, 65536 * 2);
  uint32_t *df = tst_put(NULL, 65536 * 4);
  OPS->cast(DEV, df, TD_F32, dh + odd, src, n);
  OPS->cast(DEV, dh2, other, dh + odd, src, n);
  tst_get(f, df, (size_t)n * 4);
  tst_get(h2, dh2, (size_t)n * 2);
  int64_t bad = 0, bad2 = 0;
  for (int64_t i = 0; i < n; i++) {
    uint16_t x = h[i + odd];
    bad += f[i] != td_f32_bits(h_to_f32(x, src));
    bad2 += h2[i] != f32_to_h(h_to_f32(x, src), other);
  }
  CHECK(bad == 0 && bad2 == 0, "cast %s -> fp32 and -> %s, all %lld patterns: %lld, %lld differ",
        td_dtype_name(src), td_dtype_name(other), (long long)n, (long long)bad, (long long)bad2);
  td_free(h), td_free(h2), td_free(f);
  tst_release(dh), tst_release(dh2), tst_release(df);
}

static const uint32_t k_special[] = {
    0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, /* zeros, infinities */
    0x7fc00000u, 0x7f800001u, 0xffbfffffu, 0x7fffffffu, 0x7fa00000u, 0xff802000u, /* NaNs */
    0x00000001u, 0x007fffffu, 0x80000001u, 0x00800000u, 0x7f7fffffu, 0xff7fffffu, /* tiny, huge */
    0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f807fffu, 0x7f7f8000u, 0xbf808000u, /* bf16 ties */
    0x477fe000u, 0x477fefffu, 0x477ff000u, 0xc77ff000u, 0x47800000u, /* fp16 max, overflow */
    0x33800000u, 0x33000000u, 0x33400000u, 0x33c00000u, 0x33000001u, /* fp16 subnormal ties */
    0x38800000u, 0x387fffffu, 0x387ff000u, 0x3f801000u, 0x3f803000u, 0x3f801001u, /* fp16 normal */
};

/* fp32 -> bf16 / fp16 on random bit patterns (all classes) with the specials in front */
static void test_from_f32(td_dtype dst, int64_t n) {
  uint32_t *f = td_malloc((size_t)n * 4);
  uint16_t *h = td_malloc((size_t)n * 2);
  for (int64_t i = 0; i < n; i++) f[i] = td_rng_u32(tst_seed(), 900, (uint64_t)i);
  int64_t ns = (int64_t)(sizeof k_special / sizeof *k_special);
  for (int64_t i = 0; i < ns && i < n; i++) f[i] = k_special[i];
  uint32_t *df = tst_put(f, (size_t)n * 4);
  uint16_t *dh = tst_put(NULL, (size_t)n * 2);
  OPS->cast(DEV, dh, dst, df, TD_F32, n);
  tst_get(h, dh, (size_t)n * 2);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) bad += h[i] != f32_to_h(td_bits_f32(f[i]), dst);
  CHECK(bad == 0, "cast fp32 -> %s, %lld values (specials and random bits): %lld differ",
        td_dtype_name(dst), (long long)n, (long long)bad);
  td_free(f), td_free(h);
  tst_release(df), tst_release(dh);
}

static void test_same_dtype(void) {
  uint16_t *h = all_halves(0), *h2 = td_malloc(65536 * 2);
  uint16_t *dh = tst_put(h, 65536 * 2), *dh2 = tst_put(NULL, 65536 * 2);
  OPS->cast(DEV, dh2, TD_BF16, dh, TD_BF16, 65536);
  tst_get(h2, dh2, 65536 * 2);
  int ok = memcmp(h, h2, 65536 * 2) == 0;
  OPS->cast(DEV, dh2, TD_F16, dh2, TD_F16, 65536); /* in place */
  tst_get(h2, dh2, 65536 * 2);
  CHECK(ok && memcmp(h, h2, 65536 * 2) == 0, "cast to the same dtype copies the bits");
  td_free(h), td_free(h2);
  tst_release(dh), tst_release(dh2);
}

/* Fill n elements of dt at dev with value and copy them back to host. */
static void fill_and_get(void *host, void *dev, td_dtype dt, int64_t n, float value) {
  OPS->fill(DEV, dev, dt, n, value);
  tst_get(host, dev, (size_t)n * td_dtype_size(dt));
}

/* fill: every dtype, a length past one piece */
static void test_fill(void) {
  const int64_t n = 40003;
  void *buf = td_malloc((size_t)n * 8), *dbuf = tst_put(NULL, (size_t)n * 8);
  int64_t bad = 0;
  fill_and_get(buf, dbuf, TD_F32, n, -2.5f);
  for (int64_t i = 0; i < n; i++) bad += ((float *)buf)[i] != -2.5f;
  fill_and_get(buf, dbuf, TD_BF16, n, 1.00390625f); /* a bf16 tie: rounds to even, 1.0 */
  for (int64_t i = 0; i < n; i++) bad += ((uint16_t *)buf)[i] != 0x3f80;
  fill_and_get(buf, dbuf, TD_F16, n, 65520.0f); /* overflows to +Inf */
  for (int64_t i = 0; i < n; i++) bad += ((uint16_t *)buf)[i] != 0x7c00;
  fill_and_get(buf, dbuf, TD_I32, n, -7.0f);
  for (int64_t i = 0; i < n; i++) bad += ((int32_t *)buf)[i] != -7;
  fill_and_get(buf, dbuf, TD_I64, n, 3.0f);
  for (int64_t i = 0; i < n; i++) bad += ((int64_t *)buf)[i] != 3;
  fill_and_get(buf, dbuf, TD_F32, n, 0.0f);
  for (int64_t i = 0; i < n; i++) bad += ((uint32_t *)buf)[i] != 0;
  CHECK(bad == 0, "fill fp32 / bf16 / fp16 / int32 / int64 (%lld wrong)", (long long)bad);
  td_free(buf);
  tst_release(dbuf);
}

/* a zero fill large enough for non-temporal stores, from an unaligned start: every
 * element zero, the neighbours untouched (the whole buffer is copied back to see them) */
static void test_fill_large(void) {
  const int64_t n = (16 << 20) / 4 + 1001;
  uint32_t *buf = td_malloc((size_t)(n + 3) * 4);
  for (int64_t i = 0; i < n + 3; i++) buf[i] = 0xdeadbeefu;
  uint32_t *dbuf = tst_put(buf, (size_t)(n + 3) * 4);
  OPS->fill(DEV, dbuf + 1, TD_F32, n, 0.0f);
  tst_get(buf, dbuf, (size_t)(n + 3) * 4);
  int64_t bad = (buf[0] != 0xdeadbeefu) + (buf[n + 1] != 0xdeadbeefu);
  for (int64_t i = 1; i <= n; i++) bad += buf[i] != 0;
  CHECK(bad == 0, "fill fp32 zero, %lld elements from an unaligned start (%lld wrong)",
        (long long)n, (long long)bad);
  td_free(buf);
  tst_release(dbuf);
}

int main(void) {
  for (int odd = 0; odd < 2; odd++) {
    test_from_half(TD_BF16, odd);
    test_from_half(TD_F16, odd);
  }
  static const int64_t sizes[] = {1, 17, 45, 771, 1 << 22};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    test_from_f32(TD_BF16, sizes[i]);
    test_from_f32(TD_F16, sizes[i]);
  }
  test_same_dtype();
  test_fill();
  test_fill_large();
  return tst_finish();
}
