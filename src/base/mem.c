#include "base/mem.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

void *td_malloc(size_t bytes) {
  void *p = NULL;
  size_t rounded = (bytes + TD_ALIGN - 1) / TD_ALIGN * TD_ALIGN;
  if (rounded == 0) rounded = TD_ALIGN;
  if (posix_memalign(&p, TD_ALIGN, rounded) != 0 || !p)
    td_fail("out of memory allocating %zu bytes (%.2f GiB)", bytes, bytes / 1073741824.0);
  return p;
}

void *td_calloc(size_t bytes) {
  void *p = td_malloc(bytes);
  memset(p, 0, bytes);
  return p;
}

void td_free(void *p) { free(p); }

char *td_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = td_malloc(n);
  memcpy(d, s, n);
  return d;
}
