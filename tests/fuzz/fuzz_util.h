/* Helpers shared by the fuzz harness bodies (fuzz_*.h): a fresh temporary directory
 * per input under /dev/shm (the readers take paths, and a file system in memory keeps
 * an input cheap), an input split into parts, and failures that abort. Everything is
 * static inline so a harness that uses part of this file stays warning-free. */
#ifndef TD_FUZZ_UTIL_H
#define TD_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/files.h"
#include "base/log.h"
#include "base/mem.h"

/* A reader that calls td_fail (exit) instead of returning an error is a finding:
 * abort, so libFuzzer and the replay test report it with a stack. */
static inline void td_fuzz_exit_hook(int code) {
  fprintf(stderr, "trident exits (code %d): a failed internal check (134) or a td_fail, which a reader "
                  "must turn into a returned error\n", code);
  abort();
}

static inline void td_fuzz_setup(void) {
  td_set_exit_hook(td_fuzz_exit_hook);
  td_log_set_level(TD_LOG_WARN);
}

/* A new empty directory /dev/shm/td_fuzz_XXXXXX (/tmp when /dev/shm is missing). */
static inline void td_fuzz_tmpdir(char *out, size_t n) {
  snprintf(out, n, "%s/td_fuzz_XXXXXX", td_is_dir("/dev/shm") ? "/dev/shm" : "/tmp");
  TD_CHECK(mkdtemp(out) != NULL, "mkdtemp %s", out);
}

static inline void td_fuzz_rmdir(const char *dir) {
  char err[512];
  TD_CHECK(td_remove_tree(dir, err, sizeof err) == 0, "%s", err);
}

/* dir/rel <- data[0, len), creating rel's directories. */
static inline void td_fuzz_put(const char *dir, const char *rel, const void *data, size_t len) {
  char p[1024], err[512];
  snprintf(p, sizeof p, "%s/%s", dir, rel);
  char *slash = strrchr(p, '/');
  *slash = 0;
  TD_CHECK(td_mkdir_p(p, err, sizeof err) == 0, "%s", err);
  *slash = '/';
  TD_CHECK(td_write_file(p, data, len, err, sizeof err) == 0, "%s", err);
}

/* The input split at NUL bytes into at most max parts (the last takes the rest, NULs
 * included): parts[i] = data + off[i], len[i] bytes. Returns the number of parts. */
static inline int td_fuzz_split(const uint8_t *data, size_t size, int max, size_t *off, size_t *len) {
  int k = 0;
  size_t start = 0;
  for (size_t i = 0; i < size && k < max - 1; i++)
    if (data[i] == 0) off[k] = start, len[k++] = i - start, start = i + 1;
  off[k] = start, len[k++] = size - start;
  return k;
}

/* A NUL-terminated td_malloc'ed copy of data[0, len). */
static inline char *td_fuzz_strndup(const uint8_t *data, size_t len) {
  char *s = td_malloc(len + 1);
  if (len) memcpy(s, data, len);
  s[len] = 0;
  return s;
}

#endif
