/* Errors. Two kinds, as DESIGN.md "Errors" says:
 *  - td_fail(): a user-facing failure (bad flag, file, data): prints
 *    "trident: error: <message>" and exits non-zero on every rank.
 *  - TD_CHECK(): an internal invariant; prints file:line and aborts every rank.
 * Both go through an exit hook so the MPI layer can turn them into MPI_Abort and
 * one failing rank never leaves the others waiting in a collective. */
#ifndef TD_BASE_ERROR_H
#define TD_BASE_ERROR_H

#include <stdnoreturn.h>

noreturn void td_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
noreturn void td_check_failed(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Format a user-facing error message into err (when err and errlen are set) and
 * return -1: the one-liner of every function that reports failure through a
 * caller's buffer ("return td_errorf(err, errlen, "%s: ...", path);"). */
#include <stddef.h>
int td_errorf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Called instead of exit(code) once the message is printed (default: exit). */
typedef void (*td_exit_hook)(int code);
void td_set_exit_hook(td_exit_hook hook);

#define TD_CHECK(cond, ...)                                                    \
  do {                                                                         \
    if (!(cond)) td_check_failed(__FILE__, __LINE__, #cond, __VA_ARGS__);      \
  } while (0)

#endif
