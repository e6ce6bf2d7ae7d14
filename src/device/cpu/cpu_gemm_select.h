/* Internal to the CPU backend: the GEMM library chosen per shape class by
 * measurement (cpu_gemm_select.c) and the file that keeps those choices per
 * machine (cpu_gemm_cache.c). */
#ifndef TD_DEVICE_CPU_GEMM_SELECT_H
#define TD_DEVICE_CPU_GEMM_SELECT_H

#include <stdint.h>

#include "device/cpu/cpu_gemm.h"

/* What decides which library is fastest for a call: the shape, transposes,
 * dtypes, whether a bias is added and C accumulated (beta != 0), and the OpenMP
 * thread count. Zero-initialised and compared bytewise. */
typedef struct {
  int64_t m, n, k, batch;
  int32_t trans_a, trans_b, ab_dtype, c_dtype, bias, beta, threads, pad_;
} td_gemm_class;

/* One class's choice. us[lib] is the time of lib's fastest clean timed run on the
 * timed product (tm x tn x tk: the class's own, or its first tm rows when C is
 * larger than the scratch allows), in microseconds; 0: lib was not timed. */
typedef struct {
  td_gemm_class cls;
  int32_t library;   /* td_gemm_library */
  int32_t unsaved;   /* 1: not measured (measuring budget spent): never written */
  int64_t tm, tn, tk;
  double us[TD_GEMM_LIBRARIES];
} td_gemm_choice;

/* Create what lib needs before its first run of this call (cpu_gemm.c: oneDNN's
 * primitive, JIT-compiled in ms), so a single timed run of a large product does
 * not count it. */
void td_cpu_gemm_prepare(const td_matmul_desc *g, td_gemm_library lib);

/* The cache file: $TRIDENT_GEMM_CACHE, else $XDG_CACHE_HOME/trident/gemm-<hash>.json,
 * else ~/.cache/trident/gemm-<hash>.json, hash = FNV-1a of td_gemm_machine();
 * "" when TRIDENT_GEMM_CACHE=off or no home is known. Resolved once (until
 * td_gemm_cache_reset). */
const char *td_gemm_cache_path(void);

/* Raise when trident's side of a GEMM path changes speed: its own kernels, or how
 * it calls a library (5: OpenBLAS's bias fill on every thread), so that choices
 * measured on an older revision are measured again. */
#define TD_GEMM_REVISION 5

/* The CPU (cpuid brand string, family, model, stepping), trident's vector ISA and
 * oneDNN's ONEDNN_MAX_CPU_ISA cap when set, and the libraries'
 * versions (oneDNN, OpenBLAS's build string with the core it chose) and the
 * names of the libraries measured (a library added since was never timed) with the
 * revision of trident's GEMM paths (TD_GEMM_REVISION): a file
 * measured under another string is ignored. */
const char *td_gemm_machine(void);

/* Read the file's choices (td_malloc'ed array, *n of them; NULL, 0 when there is
 * no file, it is unreadable or corrupt (one warning per process), or it belongs to
 * another machine string). */
td_gemm_choice *td_gemm_cache_load(int *n);
/* Write choices (those not marked unsaved) to the file: a temporary file in the
 * same directory, then rename, so readers see the old file or the new one. A
 * failure is one warning per process. */
void td_gemm_cache_save(const td_gemm_choice *c, int n);
/* An exclusive flock on the cache file's directory, so the processes of one
 * machine (the ranks of a run, parallel tests) measure a class once and agree on
 * it: -1 when there is no cache or the lock cannot be had (then measure alone). */
int td_gemm_cache_lock(void);
void td_gemm_cache_unlock(int fd);
/* Forget the resolved path and the warning already given (tests). */
void td_gemm_cache_reset(void);

#endif
