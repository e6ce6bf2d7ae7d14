/* cuBLASLt loaded with dlopen when the first GPU handle opens (td_cuda_open), its
 * functions resolved into td_lt (cuda_cublaslt.cuh says why it is not linked).
 *
 * The soname comes from the headers trident was built with (libcublasLt.so.13
 * for CUDA 13), so the library found is one whose ABI matches them; the
 * unversioned libcublasLt.so (a toolkit install) is the fallback, and its
 * version is checked against the headers' before anything is called. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "device/cuda/cuda_internal.cuh"

#define TD_STR_(x) #x
#define TD_STR(x) TD_STR_(x)
#define TD_CUBLASLT_SONAME "libcublasLt.so." TD_STR(CUBLAS_VER_MAJOR)

td_cublaslt_api td_lt;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static char g_error[1024]; /* why loading failed */

/* The library by its versioned name, else the unversioned one; NULL with the
 * loader's reason for the first in g_error. */
static void *open_library(void) {
  static const char *const names[] = {TD_CUBLASLT_SONAME, "libcublasLt.so"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    /* RTLD_LOCAL: its symbols stay out of the global namespace, as if linked privately */
    void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (lib) return lib;
    const char *why = dlerror();
    if (i == 0) snprintf(g_error, sizeof g_error, "%s", why ? why : "not found");
  }
  return NULL;
}

/* *out = the library's fn; 0 (and g_error says which) when it has no such symbol. */
template <typename F>
static int resolve(void *lib, const char *name, F *out) {
  void *sym = dlsym(lib, name);
  if (!sym) {
    snprintf(g_error, sizeof g_error, "it has no %s (a cuBLASLt older than the headers?)", name);
    return 0;
  }
  *out = reinterpret_cast<F>(sym); /* POSIX: dlsym's void * converts to the function */
  return 1;
}

static int resolve_all(void *lib) {
#define TD_CUBLASLT_RESOLVE(fn) \
  if (!resolve(lib, #fn, &td_lt.fn)) return 0;
  TD_CUBLASLT_FUNCTIONS(TD_CUBLASLT_RESOLVE)
#undef TD_CUBLASLT_RESOLVE
  return 1;
}

/* A library of another major version has another ABI: refuse it before any call. */
static int version_matches(void) {
  size_t v = td_lt.cublasLtGetVersion(); /* major * 10000 + minor * 100 + patch */
  if (v / 10000 == CUBLAS_VER_MAJOR) return 1;
  snprintf(g_error, sizeof g_error,
           "it is cuBLASLt %zu.%zu, but trident was built with the headers of cuBLAS %d",
           v / 10000, v / 100 % 100, CUBLAS_VER_MAJOR);
  return 0;
}

static void load_once(void) {
  void *lib = open_library();
  if (!lib) return;
  if (resolve_all(lib) && version_matches()) return;
  td_lt = td_cublaslt_api(); /* all NULL again: td_cublaslt_load tests one of them */
  dlclose(lib);
}

void td_cublaslt_load(void) {
  pthread_once(&g_once, load_once);
  if (td_lt.cublasLtMatmul) return;
  td_fail("the CUDA backend cannot load cuBLASLt (%s, which its matmul needs): %s. Install "
          "cuBLAS %d (the CUDA %d toolkit, or its runtime package libcublas-%d-%d from NVIDIA's "
          "repository) where the dynamic loader finds it (ldconfig, or LD_LIBRARY_PATH), or run "
          "on --device cpu",
          TD_CUBLASLT_SONAME, g_error, CUBLAS_VER_MAJOR, CUDART_VERSION / 1000,
          CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
}
