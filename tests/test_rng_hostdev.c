/* base/hostdev.h (the scalar code GPU kernels share with the host) against the
 * originals it copies: td_hd_rng_u32 == td_rng_u32 and td_hd_bits_to_unit ==
 * td_rng_bits_to_unit over seeds, streams and element indices with every bit
 * range, and the bf16 / fp16 conversions == dtype.h's for every 16-bit pattern
 * and for fp32 values around every rounding boundary (ties, subnormals,
 * overflow, NaN payloads). The CUDA build of the same header is held to the CPU
 * backend by test_device_cuda. */
#include <math.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/hostdev.h"
#include "base/rng.h"
#include "check.h"

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static void test_philox(void) {
  uint64_t s = tst_seed(), bad = 0, n = 0;
  static const uint64_t fixed[] = {0, 1, 2, 3, 4, 5, 0xffffffffull, 0x100000000ull,
                                   0xfffffffffffffffcull, UINT64_MAX};
  for (size_t a = 0; a < sizeof fixed / sizeof *fixed; a++)
    for (size_t b = 0; b < sizeof fixed / sizeof *fixed; b++)
      for (size_t c = 0; c < sizeof fixed / sizeof *fixed; c++, n++)
        bad += td_hd_rng_u32(fixed[a], fixed[b], fixed[c]) != td_rng_u32(fixed[a], fixed[b], fixed[c]);
  for (int k = 0; k < 200000; k++, n++) {
    uint64_t seed = splitmix(&s), stream = splitmix(&s), i = splitmix(&s);
    int shift = k % 64; /* small and large indices alike */
    i >>= shift;
    bad += td_hd_rng_u32(seed, stream, i) != td_rng_u32(seed, stream, i);
  }
  CHECK(bad == 0, "td_hd_rng_u32 == td_rng_u32: %llu of %llu differ", (unsigned long long)bad,
        (unsigned long long)n);
  uint32_t ctr[4] = {1, 2, 3, 4}, key[2] = {5, 6}, out[4];
  td_philox4x32_10(ctr, key, out);
  td_hd_u32x4 h = td_hd_philox4x32_10(1, 2, 3, 4, 5, 6);
  CHECK(h.w[0] == out[0] && h.w[1] == out[1] && h.w[2] == out[2] && h.w[3] == out[3],
        "td_hd_philox4x32_10 == td_philox4x32_10");
  bad = 0;
  for (uint64_t k = 0; k < 1u << 20; k++) {
    uint32_t bits = (uint32_t)(k * 4099u) ^ (uint32_t)(k << 12);
    bad += td_f32_bits(td_hd_bits_to_unit(bits)) != td_f32_bits(td_rng_bits_to_unit(bits));
  }
  bad += td_hd_bits_to_unit(0) != td_rng_bits_to_unit(0);
  bad += td_hd_bits_to_unit(UINT32_MAX) != td_rng_bits_to_unit(UINT32_MAX);
  CHECK(bad == 0, "td_hd_bits_to_unit == td_rng_bits_to_unit (%llu differ)", (unsigned long long)bad);
}

static void test_half_to_f32(void) {
  uint64_t bad_b = 0, bad_h = 0;
  for (uint32_t u = 0; u < 65536; u++) {
    bad_b += td_f32_bits(td_hd_bf16_to_f32((uint16_t)u)) != td_f32_bits(td_bf16_to_f32((uint16_t)u));
    bad_h += td_f32_bits(td_hd_f16_to_f32((uint16_t)u)) != td_f32_bits(td_f16_to_f32((uint16_t)u));
  }
  CHECK(bad_b == 0, "bf16 -> fp32, all 65536 patterns (%llu differ)", (unsigned long long)bad_b);
  CHECK(bad_h == 0, "fp16 -> fp32, all 65536 patterns (%llu differ)", (unsigned long long)bad_h);
}

/* fp32 bit patterns near every bf16 / fp16 rounding point: each 16-bit value's
 * fp32 image, +-1 ulp, and the halfway points between neighbours, plus random ones. */
static uint64_t f32_to_half_mismatches(uint32_t x) {
  float f = td_bits_f32(x);
  return (uint64_t)(td_hd_f32_to_bf16(f) != td_f32_to_bf16(f)) +
         (uint64_t)(td_hd_f32_to_f16(f) != td_f32_to_f16(f));
}

static void test_f32_to_half(void) {
  uint64_t bad = 0, n = 0, s = tst_seed() ^ 0x5eed;
  for (uint32_t u = 0; u < 65536; u++) {
    uint32_t b = u << 16; /* bf16 grid points and the ties between them */
    for (int d = -2; d <= 2; d++, n++) bad += f32_to_half_mismatches(b + (uint32_t)d);
    for (int d = -1; d <= 1; d++, n++) bad += f32_to_half_mismatches(b + 0x8000u + (uint32_t)d);
    uint32_t h = td_f32_bits(td_f16_to_f32((uint16_t)u)); /* fp16 grid points and ties */
    for (int d = -1; d <= 1; d++, n++) bad += f32_to_half_mismatches(h + (uint32_t)d);
    for (int d = -1; d <= 1; d++, n++) bad += f32_to_half_mismatches(h + 0x1000u + (uint32_t)d);
  }
  for (int k = 0; k < 1000000; k++, n++) bad += f32_to_half_mismatches((uint32_t)splitmix(&s));
  static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 65504.0f, 65520.0f,
                                  65519.99f, 6.1035156e-05f, 5.9604645e-08f, 2.9802322e-08f,
                                  1e-45f, 3.4028235e38f};
  for (size_t i = 0; i < sizeof special / sizeof *special; i++, n++)
    bad += f32_to_half_mismatches(td_f32_bits(special[i]));
  CHECK(bad == 0, "fp32 -> bf16 / fp16 near every rounding point and at random (%llu of %llu differ)",
        (unsigned long long)bad, (unsigned long long)n);
}

int main(void) {
  test_philox();
  test_half_to_f32();
  test_f32_to_half();
  return tst_finish();
}
