/* Scalar functions compiled both for the host (C11) and for CUDA devices
 * (nvcc: __host__ __device__), so a GPU kernel draws the same random bits and
 * rounds the same way as the CPU backend:
 *   - Philox4x32-10 and the element-indexed stream of base/rng.h
 *     (td_hd_rng_u32(seed, stream, i) == td_rng_u32(seed, stream, i));
 *   - the fp32 <-> bf16 / fp16 conversions of base/dtype.h (round to nearest
 *     even, NaN kept quiet, Inf kept).
 * The one implementation of each: rng.c and dtype.h call these (host code can
 * call them; device code could not call theirs). tests/test_base.c holds them to
 * Random123's known answers and to independent rounding references, and
 * tests/test_device_cuda.c the device build to the CPU backend. */
#ifndef TD_BASE_HOSTDEV_H
#define TD_BASE_HOSTDEV_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define TD_HD __host__ __device__
#else
#define TD_HD
#endif

/* ------------------------------------------------------------------ bits */

static inline TD_HD uint32_t td_hd_f32_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
#endif
}

static inline TD_HD float td_hd_bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, 4);
  return f;
#endif
}

/* ------------------------------------------------------------------ Philox */

#define TD_HD_PHILOX_M0 0xD2511F53u
#define TD_HD_PHILOX_M1 0xCD9E8D57u
#define TD_HD_PHILOX_W0 0x9E3779B9u
#define TD_HD_PHILOX_W1 0xBB67AE85u

/* The four words of Philox4x32-10 for counter {c0, c1, c2, c3}, key {k0, k1}. */
typedef struct {
  uint32_t w[4];
} td_hd_u32x4;

static inline TD_HD td_hd_u32x4 td_hd_philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2,
                                                   uint32_t c3, uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; r++) {
    if (r > 0) {
      k0 += TD_HD_PHILOX_W0;
      k1 += TD_HD_PHILOX_W1;
    }
    uint64_t p0 = (uint64_t)TD_HD_PHILOX_M0 * c0;
    uint64_t p1 = (uint64_t)TD_HD_PHILOX_M1 * c2;
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  td_hd_u32x4 out = {{c0, c1, c2, c3}};
  return out;
}

/* Block j of stream s under seed: words 4j .. 4j+3 of the stream (rng.h's layout:
 * counter {j_lo, j_hi, s_lo, s_hi}, key {seed_lo, seed_hi}). */
static inline TD_HD td_hd_u32x4 td_hd_rng_block(uint64_t seed, uint64_t stream, uint64_t j) {
  return td_hd_philox4x32_10((uint32_t)j, (uint32_t)(j >> 32), (uint32_t)stream,
                             (uint32_t)(stream >> 32), (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* 32 random bits for element i of stream s (== td_rng_u32). */
static inline TD_HD uint32_t td_hd_rng_u32(uint64_t seed, uint64_t stream, uint64_t i) {
  td_hd_u32x4 b = td_hd_rng_block(seed, stream, i / 4);
  return b.w[i % 4];
}

/* Uniform in (0, 1] (== td_rng_bits_to_unit): the midpoint (k + 1/2) 2^-24 of
 * the top 24 bits k, except the last, 1 - 2^-25, which rounds to 1.0f. A dropout
 * keeping unit >= p would keep 2^-24 of the elements at p = 1 (scaled by an
 * infinite 1 / (1 - p)): dropout probabilities are in [0, 1) (the flags). */
static inline TD_HD float td_hd_bits_to_unit(uint32_t bits) {
  return (float)(bits >> 8) * 5.9604644775390625e-8f + 2.98023223876953125e-8f;
}

/* ------------------------------------------------------------- conversions */

static inline TD_HD uint16_t td_hd_f32_to_bf16(float f) {
  uint32_t u = td_hd_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
  return (uint16_t)(u >> 16);
}

static inline TD_HD float td_hd_bf16_to_f32(uint16_t h) { return td_hd_bits_f32((uint32_t)h << 16); }

static inline TD_HD uint16_t td_hd_f32_to_f16(float f) {
  uint32_t x = td_hd_f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) /* Inf, or NaN made quiet */
    return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0u));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to Inf */
  if (ax < 0x38800000u) {
    /* subnormal or zero: adding 0.5f puts the value in units of 2^-24 in the low
     * mantissa bits, rounded to nearest even by the FPU (no flush to zero here) */
    float a = td_hd_bits_f32(ax) + 0.5f;
    return (uint16_t)(sign | (td_hd_f32_bits(a) - 0x3f000000u));
  }
  uint32_t odd = (ax >> 13) & 1u;
  ax += 0xc8000fffu + odd; /* rebias exponent by -112 and round to nearest even */
  return (uint16_t)(sign | (ax >> 13));
}

static inline TD_HD float td_hd_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    float v = (float)m * 5.9604644775390625e-8f; /* m * 2^-24, exact */
    return td_hd_bits_f32(td_hd_f32_bits(v) | sign);
  }
  if (e == 31) return td_hd_bits_f32(sign | 0x7f800000u | (m << 13));
  return td_hd_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

#endif
