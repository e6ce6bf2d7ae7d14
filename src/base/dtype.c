#include "base/dtype.h"

#include <string.h>

#include "base/error.h"

size_t td_dtype_size(td_dtype dt) {
  switch (dt) {
  case TD_F32: return 4;
  case TD_BF16: return 2;
  case TD_F16: return 2;
  case TD_I32: return 4;
  case TD_I64: return 8;
  case TD_F64: return 8;
  }
  return 0;
}

static const char *const k_names[] = {"fp32", "bf16", "fp16", "int32", "int64", "fp64"};

const char *td_dtype_name(td_dtype dt) {
  return (unsigned)dt < sizeof k_names / sizeof *k_names ? k_names[dt] : "?";
}

int td_dtype_from_name(const char *name, td_dtype *out) {
  for (unsigned i = 0; i < sizeof k_names / sizeof *k_names; i++)
    if (strcmp(name, k_names[i]) == 0) {
      *out = (td_dtype)i;
      return 0;
    }
  return -1;
}

uint64_t td_dtype_bits_of(td_dtype dt, float value) {
  switch (dt) {
  case TD_F32: return td_f32_bits(value);
  case TD_BF16: return td_f32_to_bf16(value);
  case TD_F16: return td_f32_to_f16(value);
  case TD_I32: return (uint32_t)(int32_t)value;
  case TD_I64: return (uint64_t)(int64_t)value;
  case TD_F64: {
    double v = value;
    uint64_t bits;
    memcpy(&bits, &v, sizeof v);
    return bits;
  }
  }
  td_fail("unknown dtype %d", (int)dt);
}
