#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static td_log_level g_level = TD_LOG_INFO;
static int g_level_from_env_done;

void td_log_set_level(td_log_level level) {
  g_level = level;
  g_level_from_env_done = 1;
}

void td_log(td_log_level level, const char *fmt, ...) {
  if (!g_level_from_env_done) {
    const char *e = getenv("TRIDENT_LOG_LEVEL");
    if (e) g_level = (td_log_level)atoi(e);
    g_level_from_env_done = 1;
  }
  if (level < g_level) return;
  static const char *names[] = {"debug", "info", "warning"};
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "trident: %s: ", names[level]);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}
