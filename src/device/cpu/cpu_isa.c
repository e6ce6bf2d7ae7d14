#include "device/cpu/cpu_isa.h"

#include <cpuid.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/error.h"

static int cpu_has_avx512(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2");
}

/* F16C: CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports does not know "f16c"). */
static int cpu_has_f16c(void) {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1u);
}

static int cpu_has_avx2(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c() &&
         __builtin_cpu_supports("bmi2");
}

int td_cpu_has_avx512_bf16(void) {
  __builtin_cpu_init();
  return cpu_has_avx512() && __builtin_cpu_supports("avx512bf16");
}

int td_cpu_has_amx_bf16(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
  return (d >> 22) & 1u; /* CPUID.(EAX=7,ECX=0):EDX[22] = AMX-BF16 */
}

int td_cpu_amx_usable(void) {
  static int usable = -1;
#pragma omp critical(td_amx_probe)
  if (usable < 0)
    usable = td_cpu_isa_get() == TD_ISA_AVX512 && td_cpu_has_avx512_bf16() &&
             td_cpu_has_amx_bf16() &&
             syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
  return usable;
}

static td_cpu_isa detect(void) {
  const char *env = getenv("TRIDENT_CPU_ISA");
  if (env && *env) {
    if (strcmp(env, "generic") == 0) return TD_ISA_GENERIC;
    if (strcmp(env, "avx512") == 0) {
      if (!cpu_has_avx512())
        td_fail("TRIDENT_CPU_ISA=avx512 but this CPU lacks AVX-512 F/BW/VL/DQ");
      return TD_ISA_AVX512;
    }
    if (strcmp(env, "avx2") == 0) {
      if (!cpu_has_avx2()) td_fail("TRIDENT_CPU_ISA=avx2 but this CPU lacks AVX2/FMA/F16C/BMI2");
      return TD_ISA_AVX2;
    }
    td_fail("TRIDENT_CPU_ISA='%s' is not known; expected 'generic', 'avx2' or 'avx512'", env);
  }
  if (cpu_has_avx512()) return TD_ISA_AVX512;
  return cpu_has_avx2() ? TD_ISA_AVX2 : TD_ISA_GENERIC;
}

int td_cpu_bf16_cvt;

td_cpu_isa td_cpu_isa_get(void) {
  static int cached = -1;
  if (cached < 0) {
    td_cpu_isa isa = detect();
    td_cpu_bf16_cvt = isa == TD_ISA_AVX512 && td_cpu_has_avx512_bf16();
    cached = (int)isa;
  }
  return (td_cpu_isa)cached;
}

const char *td_cpu_isa_name(td_cpu_isa isa) {
  return isa == TD_ISA_AVX512 ? "avx512" : isa == TD_ISA_AVX2 ? "avx2" : "generic";
}

/* td_device_describe_kernels for the CPU: the vector ISA of the elementwise and
 * attention kernels, and whether AMX runs the bf16 ones */
void td_cpu_describe_kernels(char *buf, size_t n) {
  const char *env = getenv("TRIDENT_CPU_ISA");
  snprintf(buf, n, "elementwise and attention on %s%s (%s)", td_cpu_isa_name(td_cpu_isa_get()),
           td_cpu_amx_usable() ? ", bf16 attention on AMX" : "",
           env && *env ? "TRIDENT_CPU_ISA" : "the widest this CPU has");
}
