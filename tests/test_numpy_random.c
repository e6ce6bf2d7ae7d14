/* data/numpy_random: MT19937 and RandomState's shuffle / randint against numpy 1.24.
 * Every expected number below was printed by numpy (the command is in the comment
 * above it), so these tests pin the exact streams Megatron's GPTDataset draws. */
#include <string.h>

#include "check.h"
#include "data/numpy_random.h"

/* python3 -c 'import numpy as np; r = np.random.RandomState(1234);
 *   print(list(r.randint(0, 2**32, size=1250, dtype=np.uint32)))'  (items 0-7, 623, 624, 1247, 1249) */
static void test_mt19937_outputs(void) {
  static const uint32_t first[8] = {822569775u,  2137449171u, 2671936806u, 3512589365u,
                                    1880026316u, 2629000564u, 3373089432u, 3312965625u};
  td_np_random r;
  td_np_random_seed(&r, 1234);
  uint32_t out[1250];
  for (int i = 0; i < 1250; i++) out[i] = td_np_random_u32(&r);
  CHECK(!memcmp(out, first, sizeof first), "RandomState(1234): first 8 outputs equal numpy's");
  CHECK(out[623] == 1664263489u && out[624] == 303637765u, "outputs 623/624 (across the first regeneration)");
  CHECK(out[1247] == 35944731u && out[1249] == 2009949940u, "outputs 1247/1249 (second regeneration)");
  /* python3 -c 'import numpy as np; print(np.random.RandomState(5489)._bit_generator.random_raw(2))' */
  td_np_random_seed(&r, 5489);
  uint32_t a = td_np_random_u32(&r), b = td_np_random_u32(&r);
  CHECK(a == 3499211612u && b == 581869302u, "seed 5489 (the reference init_genrand default): %u %u", a, b);
}

/* python3 -c 'import numpy as np; print(list(np.random.RandomState(1234).permutation(10)))'
 * and the same with a = np.arange(10); np.random.RandomState(1234).shuffle(a) */
static void test_shuffle_small(void) {
  static const int64_t want[10] = {7, 2, 9, 1, 0, 8, 4, 5, 6, 3};
  int64_t x[10];
  int32_t y[10];
  for (int i = 0; i < 10; i++) x[i] = i, y[i] = i;
  td_np_random r;
  td_np_random_seed(&r, 1234);
  td_np_random_shuffle(&r, x, 10, sizeof x[0]);
  td_np_random_seed(&r, 1234);
  td_np_random_shuffle(&r, y, 10, sizeof y[0]);
  int same32 = 1;
  for (int i = 0; i < 10; i++) same32 &= y[i] == want[i];
  CHECK(!memcmp(x, want, sizeof x), "RandomState(1234).permutation(10) == [7 2 9 1 0 8 4 5 6 3]");
  CHECK(same32, "the same permutation for int32 elements (numpy shuffles the raw buffer)");
  /* python3 -c 'import numpy as np; print(list(np.random.RandomState(4294967295).permutation(10)))' */
  static const int64_t want_max_seed[10] = {6, 9, 5, 1, 8, 0, 7, 4, 2, 3};
  for (int i = 0; i < 10; i++) x[i] = i;
  td_np_random_seed(&r, 4294967295u);
  td_np_random_shuffle(&r, x, 10, sizeof x[0]);
  CHECK(!memcmp(x, want_max_seed, sizeof x), "RandomState(2**32 - 1).permutation(10)");
}

/* python3 -c 'import numpy as np; p = np.random.RandomState(1234).permutation(100000);
 *   print(int((np.arange(100000, dtype=np.int64) * p).sum()), list(p[:5]))' */
static void test_shuffle_large(void) {
  enum { N = 100000 };
  static int64_t p[N];
  for (int64_t i = 0; i < N; i++) p[i] = i;
  td_np_random r;
  td_np_random_seed(&r, 1234);
  td_np_random_shuffle(&r, p, N, sizeof p[0]);
  int64_t dot = 0;
  for (int64_t i = 0; i < N; i++) dot += i * p[i];
  CHECK(p[0] == 13504 && p[1] == 72599 && p[2] == 42217 && p[3] == 97650 && p[4] == 99120,
        "permutation(100000) starts 13504 72599 42217 97650 99120");
  CHECK(dot == 249809377481287LL, "permutation(100000): sum i*p[i] = %lld", (long long)dot);
}

static void test_randint(void) {
  td_np_random r;
  /* python3 -c 'import numpy as np; r = np.random.RandomState(1234);
   *   print([r.randint(3, 17) for _ in range(8)])' */
  static const int64_t want[8] = {6, 9, 8, 15, 7, 11, 12, 4};
  int64_t got[8];
  td_np_random_seed(&r, 1234);
  for (int i = 0; i < 8; i++) got[i] = td_np_random_randint(&r, 3, 17);
  CHECK(!memcmp(got, want, sizeof got), "randint(3, 17) x8 equals numpy's");
  /* python3 -c 'import numpy as np; print(hex(np.random.RandomState(1234).randint(0, 2**40)))'
   * A range over 32 bits draws 64 bits, high word first: 0x31076b2f'7f66e2d3 & (2^40 - 1). */
  td_np_random_seed(&r, 1234);
  int64_t v = td_np_random_randint(&r, 0, 1LL << 40);
  CHECK(v == 0x2f7f66e2d3LL, "randint(0, 2**40) = %#llx (64-bit draws, high word first)", (long long)v);
  /* python3 -c 'import numpy as np; r = np.random.RandomState(0);
   *   print([r.randint(-5, 2**33) for _ in range(3)])' */
  td_np_random_seed(&r, 0);
  int64_t w[3];
  for (int i = 0; i < 3; i++) w[i] = td_np_random_randint(&r, -5, 1LL << 33);
  CHECK(w[0] == 2546248234LL && w[1] == 7921061051LL && w[2] == 6973152974LL,
        "randint(-5, 2**33) x3 with seed 0 (rejections included): %lld %lld %lld", (long long)w[0],
        (long long)w[1], (long long)w[2]);
}

int main(void) {
  test_mt19937_outputs();
  test_shuffle_small();
  test_shuffle_large();
  test_randint();
  return tst_finish();
}
