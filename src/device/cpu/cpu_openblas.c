/* OpenBLAS loaded at start-up, its kernels chosen (cpu_openblas.h). */
#include "device/cpu/cpu_openblas.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/error.h"
#include "base/log.h"

#ifndef TD_OPENBLAS_PATH /* CMake names the OpenMP build it found */
#define TD_OPENBLAS_PATH "libopenblas.so.0"
#endif

/* OpenBLAS's x86 kernel families without AVX (its corename list): what it falls
 * back to on a CPU it does not know (0.3.21: Prescott on any unknown Intel model). */
static const char *const k_pre_avx[] = {"Unknown", "Katmai",  "Coppermine", "Northwood",
                                        "Prescott", "Banias", "Atom",       "Core2",
                                        "Penryn",  "Dunnington", "Nehalem", "Athlon",
                                        "Opteron", "Opteron_SSE3", "Barcelona", "Nano",
                                        "Bobcat"};

const char *td_openblas_core_for(const char *detected, int has_avx, int has_avx2, int has_avx512,
                                 int has_avx512_bf16) {
  int pre_avx = 0;
  for (size_t i = 0; i < sizeof k_pre_avx / sizeof *k_pre_avx; i++)
    pre_avx |= detected && !strcasecmp(detected, k_pre_avx[i]);
  if (!pre_avx) return NULL;
  if (has_avx512) return has_avx512_bf16 ? "Cooperlake" : "SkylakeX";
  if (has_avx2) return "Haswell";
  if (has_avx) return "Sandybridge";
  return NULL;
}

const char *td_openblas_core_here(const char *detected) {
  __builtin_cpu_init();
  int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return td_openblas_core_for(detected, __builtin_cpu_supports("avx"),
                              __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"),
                              avx512, avx512 && __builtin_cpu_supports("avx512bf16"));
}

typedef const char *(*name_fn)(void);

static td_openblas g_blas;
static void *g_handle;
static char g_path[512];

/* The library's directory holds its soname; the configured path may be the -dev
 * link; a bare soname goes through LD_LIBRARY_PATH and ld.so's cache. */
static void *open_library(void) {
  static char in_dir[512];
  const char *slash = strrchr(TD_OPENBLAS_PATH, '/');
  const char *candidates[3];
  int n = 0;
  if (slash && snprintf(in_dir, sizeof in_dir, "%.*s/libopenblas.so.0",
                        (int)(slash - TD_OPENBLAS_PATH), TD_OPENBLAS_PATH) < (int)sizeof in_dir)
    candidates[n++] = in_dir;
  candidates[n++] = TD_OPENBLAS_PATH;
  candidates[n++] = "libopenblas.so.0";
  for (int i = 0; i < n; i++) {
    void *h = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
    if (h) {
      snprintf(g_path, sizeof g_path, "%s", candidates[i]);
      return h;
    }
  }
  td_fail("cannot load OpenBLAS (tried %s and libopenblas.so.0: %s); install Debian's "
          "libopenblas0-openmp (scripts/install-deps.sh) or put its directory on LD_LIBRARY_PATH",
          candidates[0], dlerror());
}

static void *symbol(const char *name) {
  void *p = dlsym(g_handle, name);
  if (!p) td_fail("OpenBLAS at %s has no %s: not an OpenBLAS library", g_path, name);
  return p;
}

static const char *corename(void) { return ((name_fn)symbol("openblas_get_corename"))(); }

/* Load again with OPENBLAS_CORETYPE=core (the constructor reads it); 1 when the
 * library was really unloaded in between. */
static int reload_with_core(const char *core) {
  dlclose(g_handle);
  void *still = dlopen(g_path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (still) { /* something else holds it: its constructor will not run again */
    g_handle = still;
    return 0;
  }
  setenv("OPENBLAS_CORETYPE", core, 1);
  g_handle = dlopen(g_path, RTLD_NOW | RTLD_LOCAL);
  unsetenv("OPENBLAS_CORETYPE"); /* trident's choice, not the user's: children choose again */
  if (!g_handle) td_fail("cannot load OpenBLAS again from %s: %s", g_path, dlerror());
  return 1;
}

static void load(void) {
  g_handle = open_library();
  const char *detected = corename();
  const char *user = getenv("OPENBLAS_CORETYPE");
  const char *want = user && *user ? NULL : td_openblas_core_here(detected);
  char was[64];
  snprintf(was, sizeof was, "%s", detected); /* the old library's string goes with it */
  if (want) {
    int reloaded = reload_with_core(want);
    const char *now = corename();
    if (reloaded && !strcasecmp(now, want))
      snprintf(g_blas.note, sizeof g_blas.note,
               "OpenBLAS took this CPU for %s, trident set OPENBLAS_CORETYPE=%s", was, want);
    else
      td_warn("OpenBLAS runs its %s kernels on this CPU (it does not know it) and trident could "
              "not make it load its %s ones: its fp32 GEMMs will be slow; set "
              "OPENBLAS_CORETYPE=%s, or TRIDENT_GEMM_FP32=onednn",
              now, want, want);
  }
  g_blas.sgemm = (__typeof__(cblas_sgemm) *)symbol("cblas_sgemm");
  g_blas.config = ((name_fn)symbol("openblas_get_config"))();
  g_blas.core = corename();
}

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

const td_openblas *td_openblas_get(void) {
  pthread_once(&g_once, load);
  return &g_blas;
}

/* Loaded when the process starts, as a linked library would be: OpenBLAS takes its
 * 128 MiB buffer when it loads and, should that allocation fail (a process near its
 * ulimit -v, after the model's buffers), retries forever instead of failing. At
 * start-up the buffer fits wherever the library itself does, and trident's own
 * allocations then meet the limit with their clear refusal. Single-threaded here,
 * so setenv is safe too. */
__attribute__((constructor)) static void load_at_start(void) { td_openblas_get(); }
