/* Which vector ISA the CPU kernels use, decided once at run time by cpuid: the
 * widest the CPU has. TRIDENT_CPU_ISA=generic / avx2 / avx512 forces one (how the
 * narrower paths are tested on a machine that has AVX-512); forcing one the CPU
 * lacks is an error. */
#ifndef TD_DEVICE_CPU_ISA_H
#define TD_DEVICE_CPU_ISA_H

typedef enum {
  TD_ISA_GENERIC = 0, /* portable C, compiled for baseline x86-64 */
  TD_ISA_AVX512 = 1,  /* AVX-512 F/BW/VL/DQ + FMA + BMI2 (files *_avx512.c) */
  TD_ISA_AVX2 = 2     /* AVX2 + FMA + F16C + BMI2 (files *_avx2.c): AMD Zen 2/3, Intel
                         client cores, and any x86-64 server of the last decade */
} td_cpu_isa;

td_cpu_isa td_cpu_isa_get(void);
const char *td_cpu_isa_name(td_cpu_isa isa);
int td_cpu_has_avx512_bf16(void); /* vdpbf16ps / vcvtne2ps2bf16 */
/* 1 when the AVX-512 kernels round fp32 to bf16 with vcvtneps2bf16 (the CPU has
 * AVX512-BF16): set by td_cpu_isa_get's first call, which every kernel's dispatch
 * makes first; read in their inner loops (cpu_ew_avx512_math.h's v_to_bf16). */
extern int td_cpu_bf16_cvt;
int td_cpu_has_amx_bf16(void);    /* AMX tiles with bf16 (cpuid only) */
/* AMX bf16 kernels may run: AVX-512 dispatch on, AMX-BF16 and AVX512-BF16 present,
 * and Linux granted this process the tile data state (arch_prctl
 * ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA). Probed once. */
int td_cpu_amx_usable(void);

#endif
