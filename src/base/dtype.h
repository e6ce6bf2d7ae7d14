/* Element types and the bf16 / fp16 conversions (round to nearest even; NaN and
 * Inf are kept: a NaN stays a (quiet) NaN, an Inf the same Inf). Scalar and
 * inline: the bulk conversions live in the device backends (cast kernel). */
#ifndef TD_BASE_DTYPE_H
#define TD_BASE_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "base/hostdev.h"

typedef enum { TD_F32 = 0, TD_BF16 = 1, TD_F16 = 2, TD_I32 = 3, TD_I64 = 4, TD_F64 = 5 } td_dtype;

size_t td_dtype_size(td_dtype dt);
const char *td_dtype_name(td_dtype dt);        /* "fp32", "bf16", "fp16", "int32", "int64", "fp64" */
int td_dtype_from_name(const char *name, td_dtype *out); /* 0 on success */
/* value as one element of dt, in the low td_dtype_size(dt) bytes: what a fill
 * writes (floats rounded as the conversions below round, integers truncated). */
uint64_t td_dtype_bits_of(td_dtype dt, float value);

/* The conversions are base/hostdev.h's, the one implementation the host and the
 * GPU kernels share (so a cast rounds the same way on every backend). */
static inline uint32_t td_f32_bits(float f) { return td_hd_f32_bits(f); }
static inline float td_bits_f32(uint32_t u) { return td_hd_bits_f32(u); }
static inline uint16_t td_f32_to_bf16(float f) { return td_hd_f32_to_bf16(f); }
static inline float td_bf16_to_f32(uint16_t h) { return td_hd_bf16_to_f32(h); }
static inline uint16_t td_f32_to_f16(float f) { return td_hd_f32_to_f16(f); }
static inline float td_f16_to_f32(uint16_t h) { return td_hd_f16_to_f32(h); }

#endif
