/* Element types and the bf16 / fp16 conversions (round to nearest even; NaN and
 * Inf are kept: a NaN stays a (quiet) NaN, an Inf the same Inf). Scalar and
 * inline: the bulk conversions live in the device backends (cast kernel). */
#ifndef TD_BASE_DTYPE_H
#define TD_BASE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum { TD_F32 = 0, TD_BF16 = 1, TD_F16 = 2, TD_I32 = 3, TD_I64 = 4, TD_F64 = 5 } td_dtype;

size_t td_dtype_size(td_dtype dt);
const char *td_dtype_name(td_dtype dt);        /* "fp32", "bf16", "fp16", "int32", "int64", "fp64" */
int td_dtype_from_name(const char *name, td_dtype *out); /* 0 on success */

static inline uint32_t td_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float td_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline uint16_t td_f32_to_bf16(float f) {
  uint32_t u = td_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
  return (uint16_t)(u >> 16);
}

static inline float td_bf16_to_f32(uint16_t h) { return td_bits_f32((uint32_t)h << 16); }

static inline uint16_t td_f32_to_f16(float f) {
  uint32_t x = td_f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) /* Inf, or NaN made quiet */
    return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0u));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to Inf */
  if (ax < 0x38800000u) {
    /* Result is subnormal (or zero): adding 0.5f puts the value in units of 2^-24
     * in the low mantissa bits, and the FPU rounds to nearest even for us. */
    float a = td_bits_f32(ax) + 0.5f;
    return (uint16_t)(sign | (td_f32_bits(a) - 0x3f000000u));
  }
  uint32_t odd = (ax >> 13) & 1u;
  ax += 0xc8000fffu + odd; /* rebias exponent by -112 and round to nearest even */
  return (uint16_t)(sign | (ax >> 13));
}

static inline float td_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    float v = (float)m * 5.9604644775390625e-8f; /* m * 2^-24, exact */
    return td_bits_f32(td_f32_bits(v) | sign);
  }
  if (e == 31) return td_bits_f32(sign | 0x7f800000u | (m << 13));
  return td_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

#endif
