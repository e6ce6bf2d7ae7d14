#include "base/rng.h"

#include <math.h>

void td_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  td_hd_u32x4 w = td_hd_philox4x32_10(ctr[0], ctr[1], ctr[2], ctr[3], key[0], key[1]);
  for (int i = 0; i < 4; i++) out[i] = w.w[i];
}

static inline void rng_block(uint64_t seed, uint64_t stream, uint64_t block, uint32_t out[4]) {
  td_hd_u32x4 w = td_hd_rng_block(seed, stream, block);
  for (int i = 0; i < 4; i++) out[i] = w.w[i];
}

uint32_t td_rng_u32(uint64_t seed, uint64_t stream, uint64_t i) {
  return td_hd_rng_u32(seed, stream, i);
}

void td_rng_fill_uniform(float *out, int64_t n, uint64_t seed, uint64_t stream, uint64_t offset) {
  int64_t b0 = (int64_t)(offset / 4), b1 = (int64_t)((offset + (uint64_t)n + 3) / 4);
#pragma omp parallel for schedule(static)
  for (int64_t b = b0; b < b1; b++) {
    uint32_t w[4];
    rng_block(seed, stream, (uint64_t)b, w);
    for (int j = 0; j < 4; j++) {
      int64_t k = b * 4 + j - (int64_t)offset;
      if (k >= 0 && k < n) out[k] = td_rng_bits_to_unit(w[j]);
    }
  }
}

void td_rng_fill_normal(float *out, int64_t n, uint64_t seed, uint64_t stream, uint64_t offset,
                        float mean, float std) {
  int64_t b0 = (int64_t)(offset / 4), b1 = (int64_t)((offset + (uint64_t)n + 3) / 4);
#pragma omp parallel for schedule(static)
  for (int64_t b = b0; b < b1; b++) {
    uint32_t w[4];
    rng_block(seed, stream, (uint64_t)b, w);
    double z[4];
    for (int p = 0; p < 2; p++) { /* Box-Muller in double: exact enough to be portable */
      double u1 = td_rng_bits_to_unit(w[2 * p]), u2 = td_rng_bits_to_unit(w[2 * p + 1]);
      double r = sqrt(-2.0 * log(u1)), t = 6.283185307179586 * u2;
      z[2 * p] = r * cos(t);
      z[2 * p + 1] = r * sin(t);
    }
    for (int j = 0; j < 4; j++) {
      int64_t k = b * 4 + j - (int64_t)offset;
      if (k >= 0 && k < n) out[k] = (float)(mean + std * z[j]);
    }
  }
}
