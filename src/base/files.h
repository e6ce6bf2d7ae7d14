/* Files: whole-file read and durable write, directories, mmap. Checkpoints are
 * written into a temporary directory, fsynced, and renamed (DESIGN.md), so a
 * crash never leaves a half-written checkpoint where a loader would look.
 * Functions that can fail on user input return 0 on success and -1 with a
 * message in err (naming the path and the system's reason). */
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
/* Read a whole file into a NUL-terminated td_malloc'ed buffer (*len excludes the NUL). */
char *td_read_file(const char *path, size_t *len, char *err, size_t errlen);
/* fsync a directory, so a rename inside it is durable. */
int td_fsync_dir(const char *path, char *err, size_t errlen);
/* rename(2), replacing a file; a directory target must not exist. */
int td_rename(const char *from, const char *to, char *err, size_t errlen);

/* Map a file read-only. Returns NULL with err set; an empty file maps to a
 * non-NULL dummy with *len = 0. Unmap with td_munmap(p, len). */
const void *td_mmap_file(const char *path, size_t *len, char *err, size_t errlen);
void td_munmap(const void *p, size_t len);

#endif
