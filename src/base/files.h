/* Files: whole-file read and durable write, directories, mmap. Checkpoints are
 * written into a temporary directory, fsynced, and renamed (DESIGN.md), so a
 * crash never leaves a half-written checkpoint where a loader would look.
 * Functions that can fail on user input return 0 on success and -1 with a
 * message in err (naming the path and the system's reason).
 *
 * Test-only hooks (environment variables, read once per process), so the
 * crash and I/O-error paths of checkpoints are tested even as root:
 *   TRIDENT_TEST_TRACE_FILE_OPS=1   print every operation that changes the file
 *                                   system (mkdir, create, write, fsync, rename,
 *                                   remove of one entry) to stderr, numbered from 1
 *   TRIDENT_TEST_KILL_AT_FILE_OP=K  SIGKILL this process just before its K-th one
 *   TRIDENT_TEST_FAIL_WRITE=TEXT    writes to a path containing TEXT fail (ENOSPC)
 *   TRIDENT_TEST_FAIL_OPEN=TEXT     opening a path containing TEXT (to read, map or
 *                                   list it) fails (EACCES) */
#ifndef TD_BASE_FILES_H
#define TD_BASE_FILES_H

#include <stddef.h>

int td_mkdir_p(const char *path, char *err, size_t errlen);
int td_remove_tree(const char *path, char *err, size_t errlen); /* rm -rf; ok if missing */
int td_path_exists(const char *path);
int td_is_dir(const char *path);

/* Write len bytes to path (created or truncated) and fsync it. */
int td_write_file(const char *path, const void *data, size_t len, char *err, size_t errlen);

/* The same in pieces, for files larger than what should be staged in memory:
 * create, append as often as needed, then finish (fsync, close) or, after a
 * failure, abort (close; the caller removes the file or its directory). */
typedef struct {
  int fd;
  const char *path;
} td_file_writer;
int td_file_create(td_file_writer *w, const char *path, char *err, size_t errlen);
int td_file_append(td_file_writer *w, const void *data, size_t len, char *err, size_t errlen);
int td_file_finish(td_file_writer *w, char *err, size_t errlen);
void td_file_abort(td_file_writer *w);
/* Read a whole file into a NUL-terminated td_malloc'ed buffer (*len excludes the NUL).
 * On failure NULL with err set and errno saying why (ENOENT: no such file). */
char *td_read_file(const char *path, size_t *len, char *err, size_t errlen);
/* fsync a directory, so a rename inside it is durable. */
int td_fsync_dir(const char *path, char *err, size_t errlen);
/* rename(2), replacing a file; a directory target must not exist. */
int td_rename(const char *from, const char *to, char *err, size_t errlen);

/* 0 when path is a directory this process can open; -1 with err set (naming the
 * path and the reason) and errno saying why otherwise (ENOENT: it does not exist,
 * ENOTDIR: it is not a directory, EACCES: it cannot be read). */
int td_open_dir(const char *path, char *err, size_t errlen);

/* The entries of a directory (not . and ..), td_malloc'ed names in a td_malloc'ed
 * array of *n; NULL with err set when it cannot be read. Free with td_free_list. */
char **td_list_dir(const char *path, int *n, char *err, size_t errlen);
void td_free_list(char **names, int n);

/* Map a file read-only. Returns NULL with err set; an empty file maps to a
 * non-NULL dummy with *len = 0. Unmap with td_munmap(p, len). */
const void *td_mmap_file(const char *path, size_t *len, char *err, size_t errlen);
void td_munmap(const void *p, size_t len);

#endif
