#define _XOPEN_SOURCE 700 /* nftw */
#define _DEFAULT_SOURCE
#include "base/error.h"
#include "base/files.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/mem.h"

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
  w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (w->fd < 0) return td_errorf(err, errlen, "cannot create '%s': %s", path, strerror(errno));
  return 0;
}

int td_file_append(td_file_writer *w, const void *data, size_t len, char *err, size_t errlen) {
  const char *p = data;
  while (len > 0) {
    ssize_t n = write(w->fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return td_errorf(err, errlen, "cannot write '%s': %s", w->path, strerror(errno));
    p += n, len -= (size_t)n;
  }
  return 0;
}

int td_file_finish(td_file_writer *w, char *err, size_t errlen) {
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

char *td_read_file(const char *path, size_t *len, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    td_errorf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
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
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    td_free(buf);
    td_errorf(err, errlen, "cannot read '%s'", path);
    return NULL;
  }
  buf[n] = '\0';
  if (len) *len = n;
  return buf;
}

int td_fsync_dir(const char *path, char *err, size_t errlen) {
  int fd = open(path, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return td_errorf(err, errlen, "cannot open directory '%s': %s", path, strerror(errno));
  int rc = fsync(fd);
  close(fd);
  if (rc != 0) return td_errorf(err, errlen, "cannot fsync directory '%s': %s", path, strerror(errno));
  return 0;
}

int td_rename(const char *from, const char *to, char *err, size_t errlen) {
  if (rename(from, to) != 0)
    return td_errorf(err, errlen, "cannot rename '%s' to '%s': %s", from, to, strerror(errno));
  return 0;
}

static const char k_empty_map = 0;

const void *td_mmap_file(const char *path, size_t *len, char *err, size_t errlen) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) {
    td_errorf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
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
