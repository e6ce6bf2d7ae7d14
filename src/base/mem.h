/* Aligned host allocation. 64 bytes: one cache line, one AVX-512 register.
 * Failure to allocate is a user-facing error (it names the size), not a crash. */
#ifndef TD_BASE_MEM_H
#define TD_BASE_MEM_H

#include <stddef.h>

#define TD_ALIGN 64

void *td_malloc(size_t bytes);  /* aligned, never NULL */
void *td_calloc(size_t bytes);  /* aligned, zeroed, never NULL */
void td_free(void *p);
char *td_strdup(const char *s);

#endif
