#define _XOPEN_SOURCE 700 /* nftw */
#define _DEFAULT_SOURCE
#include "base/error.h"
#include "base/files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/mem.h"

/* ------------------------------------------------------------------ test hooks
 * Crash and I/O-error paths cannot be reached by ordinary tests (and chmod does
 * not stop root), so the checkpoint tests drive them through the environment
 * (files.h lists the variables). Read once; unset, they cost one branch. */

typedef struct {
  int ready, trace;
  long kill_at, ops;
  const char *fail_write, *fail_open;
} fault_hooks;

static fault_hooks g_hooks;

static fault_hooks *hooks(void) {
  if (!g_hooks.ready) {
    const char *k = getenv("TRIDENT_TEST_KILL_AT_FILE_OP");
    g_hooks.kill_at = k ? atol(k) : 0;
    g_hooks.trace = getenv("TRIDENT_TEST_TRACE_FILE_OPS") != NULL;
    g_hooks.fail_write = getenv("TRIDENT_TEST_FAIL_WRITE");
    g_hooks.fail_open = getenv("TRIDENT_TEST_FAIL_OPEN");
    g_hooks.ready = 1;
  }
  return &g_hooks;
}

/* Every operation that changes the file system passes here (to: a rename's
 * target, else NULL): numbered, traced, and the K-th one is never done (the
 * process dies first, as in a power cut or a scheduler's SIGKILL). */
static void file_op_to(const char *what, const char *path, const char *to) {
  fault_hooks *h = hooks();
  if (!h->trace && !h->kill_at) return;
  long n = ++h->ops;
  if (h->trace)
    fprintf(stderr, "trident: test: file op %ld (pid %d): %s %s%s%s\n", n, (int)getpid(), what, path,
            to ? " -> " : "", to ? to : "");
  if (n == h->kill_at) {
    fflush(NULL);
    raise(SIGKILL);
  }
}

static void file_op(const char *what, const char *path) { file_op_to(what, path, NULL); }

/* An injected failure for path: errno e when path contains the pattern, else 0. */
static int injected(const char *pattern, const char *path, int e) {
  return pattern && *pattern && strstr(path, pattern) ? e : 0;
}
static int open_fault(const char *path) { return injected(hooks()->fail_open, path, EACCES); }

int td_path_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

int td_is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int td_mkdir_p(const char *path, char *err, size_t errlen) {
  char buf[4096];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof buf) return td_errorf(err, errlen, "bad directory path '%s'", path);
  memcpy(buf, path, n + 1);
  file_op("mkdir", path);
  for (size_t i = 1; i <= n; i++) {
    if (buf[i] != '/' && buf[i] != '\0') continue;
    char c = buf[i];
    buf[i] = '\0';
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
      return td_errorf(err, errlen, "cannot create directory '%s': %s", buf, strerror(errno));
    if (!td_is_dir(buf)) return td_errorf(err, errlen, "'%s' exists and is not a directory", buf);
    buf[i] = c;
  }
  return 0;
}

static int remove_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  file_op("remove", p);
  return remove(p);
}

int td_remove_tree(const char *path, char *err, size_t errlen) {
  if (!td_path_exists(path)) return 0;
  if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
    return td_errorf(err, errlen, "cannot remove '%s': %s", path, strerror(errno));
  return 0;
}

int td_file_create(td_file_writer *w, const char *path, char *err, size_t errlen) {
  w->path = path;
  file_op("create", path);
  w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (w->fd < 0) return td_errorf(err, errlen, "cannot create '%s': %s", path, strerror(errno));
  return 0;
}

int td_file_append(td_file_writer *w, const void *data, size_t len, char *err, size_t errlen) {
  const char *p = data;
  file_op("write", w->path);
  int e = injected(hooks()->fail_write, w->path, ENOSPC);
  if (e) return td_errorf(err, errlen, "cannot write '%s': %s", w->path, strerror(e));
  while (len > 0) {
    ssize_t n = write(w->fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = ENOSPC; /* write(2) made no progress: the device is full */
    if (n <= 0) return td_errorf(err, errlen, "cannot write '%s': %s", w->path, strerror(errno));
    p += n, len -= (size_t)n;
  }
  return 0;
}

int td_file_finish(td_file_writer *w, char *err, size_t errlen) {
  file_op("fsync", w->path);
  int bad = fsync(w->fd) != 0;
  int e = errno;
  bad |= close(w->fd) != 0;
  w->fd = -1;
  if (bad) return td_errorf(err, errlen, "cannot flush '%s' to disk: %s", w->path, strerror(e ? e : errno));
  return 0;
}

void td_file_abort(td_file_writer *w) {
  if (w->fd >= 0) close(w->fd);
  w->fd = -1;
}

int td_write_file(const char *path, const void *data, size_t len, char *err, size_t errlen) {
  td_file_writer w;
  if (td_file_create(&w, path, err, errlen)) return -1;
  if (td_file_append(&w, data, len, err, errlen)) {
    td_file_abort(&w);
    return -1;
  }
  return td_file_finish(&w, err, errlen);
}

/* Set err and return -1 with errno kept as e, so a caller can tell ENOENT
 * (nothing there) from a failure. */
static int fail_with(int e, char *err, size_t errlen, const char *what, const char *path) {
  td_errorf(err, errlen, "%s '%s': %s", what, path, strerror(e));
  errno = e;
  return -1;
}

char *td_read_file(const char *path, size_t *len, char *err, size_t errlen) {
  int e = open_fault(path);
  FILE *f = e ? NULL : fopen(path, "rb");
  if (!f) {
    fail_with(e ? e : errno, err, errlen, "cannot open", path);
    return NULL;
  }
  size_t cap = 1 << 16, n = 0;
  char *buf = td_malloc(cap);
  for (;;) {
    if (n + 1 >= cap) {
      char *bigger = td_malloc(cap * 2);
      memcpy(bigger, buf, n);
      td_free(buf);
      buf = bigger, cap *= 2;
    }
    size_t r = fread(buf + n, 1, cap - n - 1, f);
    n += r;
    if (r == 0) break;
  }
  int bad = ferror(f), e2 = errno;
  fclose(f);
  if (bad) {
    td_free(buf);
    fail_with(e2, err, errlen, "cannot read", path);
    return NULL;
  }
  buf[n] = '\0';
  if (len) *len = n;
  return buf;
}

int td_fsync_dir(const char *path, char *err, size_t errlen) {
  file_op("fsync", path);
  int fd = open(path, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return td_errorf(err, errlen, "cannot open directory '%s': %s", path, strerror(errno));
  int rc = fsync(fd);
  close(fd);
  if (rc != 0) return td_errorf(err, errlen, "cannot fsync directory '%s': %s", path, strerror(errno));
  return 0;
}

int td_rename(const char *from, const char *to, char *err, size_t errlen) {
  file_op_to("rename", from, to);
  if (rename(from, to) != 0)
    return td_errorf(err, errlen, "cannot rename '%s' to '%s': %s", from, to, strerror(errno));
  return 0;
}

static const char k_empty_map = 0;

const void *td_mmap_file(const char *path, size_t *len, char *err, size_t errlen) {
  int e = open_fault(path);
  int fd = e ? -1 : open(path, O_RDONLY);
  if (fd < 0) {
    fail_with(e ? e : errno, err, errlen, "cannot open", path);
    return NULL;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    td_errorf(err, errlen, "'%s' is not a regular file", path);
    return NULL;
  }
  *len = (size_t)st.st_size;
  if (*len == 0) {
    close(fd);
    return &k_empty_map;
  }
  void *p = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    td_errorf(err, errlen, "cannot map '%s': %s", path, strerror(errno));
    return NULL;
  }
  return p;
}

void td_munmap(const void *p, size_t len) {
  if (p && p != &k_empty_map && len) munmap((void *)p, len);
}

int td_open_dir(const char *path, char *err, size_t errlen) {
  int e = open_fault(path);
  int fd = e ? -1 : open(path, O_RDONLY | O_DIRECTORY);
  if (fd < 0) {
    e = e ? e : errno;
    if (e == ENOTDIR) {
      td_errorf(err, errlen, "'%s' is not a directory", path);
      errno = e;
      return -1;
    }
    return fail_with(e, err, errlen, "cannot open directory", path);
  }
  close(fd);
  return 0;
}

char **td_list_dir(const char *path, int *n, char *err, size_t errlen) {
  int e = open_fault(path);
  DIR *d = e ? NULL : opendir(path);
  *n = 0;
  if (!d) {
    fail_with(e ? e : errno, err, errlen, "cannot list directory", path);
    return NULL;
  }
  int cap = 16;
  char **names = td_malloc(sizeof *names * (size_t)cap);
  struct dirent *ent;
  while ((ent = readdir(d))) {
    if (!strcmp(ent->d_name, ".") || !strcmp(ent->d_name, "..")) continue;
    if (*n == cap) {
      char **bigger = td_malloc(sizeof *names * (size_t)(2 * cap));
      memcpy(bigger, names, sizeof *names * (size_t)cap);
      td_free(names);
      names = bigger, cap *= 2;
    }
    names[(*n)++] = td_strdup(ent->d_name);
  }
  closedir(d);
  return names;
}

void td_free_list(char **names, int n) {
  for (int i = 0; i < n; i++) td_free(names[i]);
  td_free(names);
}
