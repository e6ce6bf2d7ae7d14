#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static td_exit_hook g_exit_hook;

void td_set_exit_hook(td_exit_hook hook) { g_exit_hook = hook; }

static noreturn void td_exit(int code) {
  fflush(stdout);
  fflush(stderr);
  if (g_exit_hook) g_exit_hook(code);
  exit(code);
}

int td_errorf(char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return -1;
}

void td_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("trident: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  td_exit(1);
}

void td_check_failed(const char *file, int line, const char *cond, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "trident: internal error at %s:%d: check '%s' failed: ", file, line, cond);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  td_exit(134);
}
