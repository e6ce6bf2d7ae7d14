/* base/: Philox known answers, RNG independence from the thread count, the
 * bf16 / fp16 conversions against independent references, and the edit distance
 * of the spelling suggestions against a full-matrix reference. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "base/dtype.h"
#include "base/mem.h"
#include "base/rng.h"
#include "base/spelling.h"
#include "check.h"

/* Random123's known-answer vectors for philox4x32-10. */
static void test_philox_kat(void) {
  static const uint32_t cases[][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
       0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
       0x94fdcceb, 0x5001e420, 0x24126ea1},
  };
  for (int c = 0; c < 3; c++) {
    uint32_t out[4];
    td_philox4x32_10(cases[c], cases[c] + 4, out);
    CHECK(!memcmp(out, cases[c] + 6, sizeof out), "philox4x32-10 known answer %d", c);
  }
}

static void test_rng_threads(void) {
  const int64_t n = 100003;
  float *a = td_malloc(n * 4), *b = td_malloc(n * 4), *part = td_malloc(n * 4);
  omp_set_num_threads(1);
  td_rng_fill_normal(a, n, 42, 7, 0, 0.0f, 0.02f);
  omp_set_num_threads(2);
  td_rng_fill_normal(b, n, 42, 7, 0, 0.0f, 0.02f);
  CHECK(!memcmp(a, b, n * 4), "normal stream identical with 1 and 2 threads");
  td_rng_fill_normal(part, 1001, 42, 7, 5003, 0.0f, 0.02f); /* a slice drawn on its own */
  CHECK(!memcmp(part, a + 5003, 1001 * 4), "a slice (offset 5003) equals the same range of the whole");
  td_rng_fill_uniform(a, n, 42, 7, 0);
  omp_set_num_threads(1);
  td_rng_fill_uniform(b, n, 42, 7, 0);
  CHECK(!memcmp(a, b, n * 4), "uniform stream identical with 1 and 2 threads");
  double mean = 0, var = 0;
  td_rng_fill_normal(a, n, 43, 1, 0, 0.0f, 1.0f);
  for (int64_t i = 0; i < n; i++) mean += a[i];
  mean /= n;
  for (int64_t i = 0; i < n; i++) var += (a[i] - mean) * (a[i] - mean);
  var /= n;
  CHECK(fabs(mean) < 0.02 && fabs(var - 1) < 0.02, "normal(0,1): mean %.4f var %.4f", mean, var);
  td_free(a), td_free(b), td_free(part);
}

/* The nearest bf16 to x (ties to even mantissa), by comparing neighbours in double. */
static uint16_t bf16_reference(float x) {
  uint32_t u = td_f32_bits(x);
  uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
  double dl = fabs((double)td_bf16_to_f32(lo) - x), dh = fabs((double)td_bf16_to_f32(hi) - x);
  if ((hi & 0x7f80) == 0x7f80 && (lo & 0x7fff) == 0x7f7f) /* rounding up overflows to Inf */
    dh = fabs(copysign(ldexp(1.0, 128), x) - x);          /* Inf sits one ulp above the max: 2^128 */
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1) ? hi : lo;
}

static void test_bf16(void) {
  int bad = 0;
  for (uint32_t h = 0; h < 65536; h++) { /* every bf16 survives a round trip */
    float f = td_bf16_to_f32((uint16_t)h);
    uint16_t back = td_f32_to_bf16(f);
    if (isnan(f) ? !(back & 0x7f) || (back & 0x7f80) != 0x7f80 : back != h) bad++;
  }
  CHECK(bad == 0, "bf16 -> fp32 -> bf16 is exact for all 65536 patterns (%d bad)", bad);
  bad = 0;
  for (uint64_t i = 0; i < 2000000; i++) {
    uint32_t u = td_rng_u32(tst_seed(), 99, i);
    float x = td_bits_f32(u);
    if (isnan(x) || isinf(x)) continue;
    if (td_f32_to_bf16(x) != bf16_reference(x)) bad++;
  }
  CHECK(bad == 0, "fp32 -> bf16 rounds to nearest even on 2M random patterns (%d bad)", bad);
  CHECK(td_f32_to_bf16(td_bits_f32(0x3f808000)) == 0x3f80, "tie rounds to even (down)");
  CHECK(td_f32_to_bf16(td_bits_f32(0x3f818000)) == 0x3f82, "tie rounds to even (up)");
  CHECK(td_f32_to_bf16(INFINITY) == 0x7f80 && td_f32_to_bf16(-INFINITY) == 0xff80, "Inf kept");
  CHECK(isnan(td_bf16_to_f32(td_f32_to_bf16(NAN))), "NaN kept");
  CHECK(isnan(td_bf16_to_f32(td_f32_to_bf16(td_bits_f32(0x7f800001)))), "NaN with low payload kept");
}

/* fp16 against the compiler's _Float16 conversions (IEEE, round to nearest even). */
static void test_f16(void) {
  int bad = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    uint16_t hh = (uint16_t)h;
    _Float16 ref;
    memcpy(&ref, &hh, 2);
    float want = (float)ref, got = td_f16_to_f32(hh);
    if (isnan(want) ? !isnan(got) : td_f32_bits(want) != td_f32_bits(got)) bad++;
  }
  CHECK(bad == 0, "fp16 -> fp32 exact for all 65536 patterns (%d bad)", bad);
  bad = 0;
  for (uint64_t i = 0; i < 2000000; i++) {
    uint32_t u = td_rng_u32(tst_seed(), 98, i);
    if (i % 2) u = (u & 0x8fffffffu) | 0x30000000u; /* half of them near fp16's range */
    float x = td_bits_f32(u);
    _Float16 r = (_Float16)x;
    uint16_t want;
    memcpy(&want, &r, 2);
    uint16_t got = td_f32_to_f16(x);
    if (isnan(x) ? (got & 0x7c00) != 0x7c00 || !(got & 0x3ff) : got != want) bad++;
  }
  CHECK(bad == 0, "fp32 -> fp16 matches IEEE RNE on 2M random patterns (%d bad)", bad);
  CHECK(td_f32_to_f16(65520.0f) == 0x7c00 && td_f32_to_f16(65519.0f) == 0x7bff, "overflow edge");
  CHECK(td_f32_to_f16(td_bits_f32(0x33000000)) == 0, "2^-25 (half of the smallest subnormal) ties to 0");
  CHECK(td_f32_to_f16(td_bits_f32(0x33000001)) == 1, "just above 2^-25 rounds up to the smallest subnormal");
}

/* Levenshtein distance by the whole (la + 1) x (lb + 1) matrix. */
static int edit_reference(const char *a, int la, const char *b, int lb) {
  int d[24][24];
  for (int i = 0; i <= la; i++) d[i][0] = i;
  for (int j = 0; j <= lb; j++) d[0][j] = j;
  for (int i = 1; i <= la; i++)
    for (int j = 1; j <= lb; j++) {
      int v = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
      d[i][j] = v;
    }
  return d[la][lb];
}

static void test_edit_distance(void) {
  CHECK(td_edit_distance("kitten", 6, "sitting", 7) == 3, "kitten -> sitting: 3 edits");
  CHECK(td_edit_distance("", 0, "abc", 3) == 3 && td_edit_distance("abc", 3, "", 0) == 3,
        "to and from the empty name");
  CHECK(td_edit_distance("--lr", 4, "--lr", 4) == 0, "a name is 0 edits from itself");
  CHECK(td_edit_distance("--hidden-size", 8, "--hidden", 8) == 0, "only a's first la characters");
  int bad = 0;
  uint64_t s = tst_seed();
  for (int t = 0; t < 20000; t++) { /* short strings over 3 letters: many near misses */
    char a[24], b[24];
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    int la = (int)(s >> 59) % 24, lb = (int)(s >> 54 & 31) % 24;
    for (int i = 0; i < la; i++) s = s * 6364136223846793005ull + 1, a[i] = (char)('a' + (s >> 62) % 3);
    for (int j = 0; j < lb; j++) s = s * 6364136223846793005ull + 1, b[j] = (char)('a' + (s >> 62) % 3);
    bad += td_edit_distance(a, (size_t)la, b, (size_t)lb) != edit_reference(a, la, b, lb);
  }
  CHECK(bad == 0, "edit distance == the full-matrix reference on 20000 random pairs (%d differ)", bad);
  char long_a[300], long_b[300];
  memset(long_a, 'x', sizeof long_a), memset(long_b, 'x', sizeof long_b);
  long_b[200] = 'y'; /* beyond the 127 characters that count */
  CHECK(td_edit_distance(long_a, 300, long_b, 300) == 0 &&
            td_edit_distance(long_a, 300, long_b, 100) == 27,
        "names longer than 127 characters count their first 127");
}

int main(void) {
  test_philox_kat();
  test_edit_distance();
  test_rng_threads();
  test_bf16();
  test_f16();
  return tst_finish();
}
