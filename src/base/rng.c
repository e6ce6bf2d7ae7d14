#include "base/rng.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static inline void philox_round(uint32_t c[4], const uint32_t k[2]) {
  uint64_t p0 = (uint64_t)PHILOX_M0 * c[0];
  uint64_t p1 = (uint64_t)PHILOX_M1 * c[2];
  uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
  uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
  uint32_t n0 = hi1 ^ c[1] ^ k[0], n2 = hi0 ^ c[3] ^ k[1];
  c[0] = n0;
  c[1] = lo1;
  c[2] = n2;
  c[3] = lo0;
}

void td_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
  uint32_t k[2] = {key[0], key[1]};
  for (int r = 0; r < 10; r++) {
    if (r > 0) {
      k[0] += PHILOX_W0;
      k[1] += PHILOX_W1;
    }
    philox_round(c, k);
  }
  for (int i = 0; i < 4; i++) out[i] = c[i];
}

static inline void rng_block(uint64_t seed, uint64_t stream, uint64_t block, uint32_t out[4]) {
  uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)stream,
                     (uint32_t)(stream >> 32)};
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  td_philox4x32_10(ctr, key, out);
}

uint32_t td_rng_u32(uint64_t seed, uint64_t stream, uint64_t i) {
  uint32_t w[4];
  rng_block(seed, stream, i / 4, w);
  return w[i % 4];
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
