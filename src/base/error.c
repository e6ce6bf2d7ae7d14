#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static td_exit_hook g_exit_hook;

void td_set_exit_hook(td_exit_hook hook) { g_exit_hook = hook; }

/* An error exit hands what the process holds back to the OS: _exit skips the
 * exit-time handlers (trident registers none), so LeakSanitizer's exit check in
 * the sanitizer build judges clean exits only, not the buffers of a failed run. */
static noreturn void td_exit(int code) {
  fflush(stdout);
  fflush(stderr);
  if (g_exit_hook) g_exit_hook(code);
  _exit(code);
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

/* prefix + message + newline in ONE write, so the lines of several ranks failing
 * at once on a shared stderr do not interleave mid-line. */
static void print_line(const char *prefix, const char *fmt, va_list ap) {
  char line[4096];
  int n = snprintf(line, sizeof line, "%s", prefix);
  if (n < 0) n = 0;
  if ((size_t)n < sizeof line) {
    int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    if (m > 0) n = (size_t)(n + m) < sizeof line - 1 ? n + m : (int)sizeof line - 2;
  }
  if ((size_t)n > sizeof line - 2) n = (int)sizeof line - 2;
  line[n++] = '\n';
  fwrite(line, 1, (size_t)n, stderr);
  fflush(stderr);
}

void td_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  print_line("trident: error: ", fmt, ap);
  va_end(ap);
  td_exit(1);
}

void td_check_failed(const char *file, int line, const char *cond, const char *fmt, ...) {
  char prefix[512];
  snprintf(prefix, sizeof prefix, "trident: internal error at %s:%d: check '%s' failed: ", file,
           line, cond);
  va_list ap;
  va_start(ap, fmt);
  print_line(prefix, fmt, ap);
  va_end(ap);
  td_exit(134);
}
