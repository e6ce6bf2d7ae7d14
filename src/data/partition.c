/* Megatron's input partitions (partition.h). */
#include "data/partition.h"

#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/mem.h"

char *td_partition_file_name(const char *input, int i) {
  const char *base = strrchr(input, '/');
  base = base ? base + 1 : input;
  const char *dot = strrchr(base, '.'), *p = base;
  while (p < dot && *p == '.') p++; /* leading dots start no extension */
  size_t stem = dot && p < dot ? (size_t)(dot - input) : strlen(input);
  const char *ext = input + stem;
  size_t n = stem + strlen(ext) + 16;
  char *out = td_malloc(n);
  snprintf(out, n, "%.*s_%d%s", (int)stem, input, i, ext);
  return out;
}

char **td_partition_inputs(const char *pattern, int *n, char *err, size_t errlen) {
  glob_t g;
  int rc = glob(pattern, 0, NULL, &g);
  if (rc != 0 || g.gl_pathc == 0) {
    td_errorf(err, errlen, "--input '%s': no file matches", pattern);
    if (rc == 0) globfree(&g);
    return NULL;
  }
  char **names = td_malloc(sizeof *names * g.gl_pathc);
  for (size_t i = 0; i < g.gl_pathc; i++) names[i] = td_strdup(g.gl_pathv[i]);
  *n = (int)g.gl_pathc;
  globfree(&g);
  return names;
}

void td_partition_free_names(char **names, int n) {
  for (int i = 0; i < n; i++) td_free(names[i]);
  td_free(names);
}

/* Each line of a file, with its "\n" (the last one without, when the file does
 * not end with one): the lines trident preprocess reads (getline). A "\r\n" line
 * keeps its "\r", white space to JSON, so the datasets are Megatron's, whose text
 * mode turns it into "\n". */
typedef int (*line_fn)(void *ctx, const char *line, size_t len);

static int each_line(const char *path, line_fn fn, void *ctx, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) return td_errorf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
  char *line = NULL;
  size_t cap = 0;
  ssize_t got;
  int rc = 0;
  while (!rc && (got = getline(&line, &cap, f)) >= 0) rc = fn(ctx, line, (size_t)got);
  if (!rc && ferror(f)) rc = td_errorf(err, errlen, "cannot read '%s': %s", path, strerror(errno));
  free(line); /* getline's buffer */
  fclose(f);
  return rc;
}

typedef struct {
  FILE **out;
  int parts, index, keep_sequential;
  long long count, per_part; /* lines written, lines per partition (keep_sequential) */
  int write_errno;           /* a failed write's errno, 0 while none failed */
} splitter;

static int count_line(void *ctx, const char *line, size_t len) {
  (void)line, (void)len;
  ((splitter *)ctx)->count++;
  return 0;
}

static int write_line(void *ctx, const char *line, size_t len) {
  splitter *s = ctx;
  FILE *f = s->out[s->index < s->parts ? s->index : s->parts - 1];
  if (fwrite(line, 1, len, f) != len) {
    s->write_errno = errno ? errno : EIO;
    return -1;
  }
  s->count++;
  if (s->keep_sequential)
    s->index += s->count % s->per_part == 0;
  else
    s->index = (s->index + 1) % s->parts;
  return 0;
}

/* Close the temporaries and rename them into place; with rc != 0 (an error already
 * in err), or when a close or rename fails, remove them instead. */
static int finish(FILE **out, char **names, char **tmps, int parts, int rc, char *err,
                  size_t errlen) {
  for (int i = 0; i < parts; i++)
    if (out[i] && fclose(out[i]) != 0 && rc == 0)
      rc = td_errorf(err, errlen, "cannot write '%s': %s", tmps[i], strerror(errno));
  int renamed = 0;
  while (rc == 0 && renamed < parts) {
    if (rename(tmps[renamed], names[renamed]) != 0)
      rc = td_errorf(err, errlen, "cannot rename '%s' to '%s': %s", tmps[renamed],
                     names[renamed], strerror(errno));
    else
      renamed++;
  }
  if (rc != 0) /* no partial set: the temporaries go, and what this call renamed */
    for (int i = 0; i < parts; i++) unlink(i < renamed ? names[i] : tmps[i]);
  return rc;
}

int td_partition_split(const char *input, char *const *inputs, int n_inputs, int parts,
                       int keep_sequential, int *reused, char *err, size_t errlen) {
  char **names = td_malloc(sizeof *names * (size_t)parts), **tmps = td_malloc(sizeof *tmps * (size_t)parts);
  FILE **out = td_calloc(sizeof *out * (size_t)parts);
  int present = 1, rc = 0;
  for (int i = 0; i < parts; i++) {
    names[i] = td_partition_file_name(input, i);
    size_t n = strlen(names[i]) + 8;
    tmps[i] = td_malloc(n);
    snprintf(tmps[i], n, "%s.tmp", names[i]);
    present &= access(names[i], F_OK) == 0;
  }
  *reused = present;
  splitter s = {.out = out, .parts = parts, .keep_sequential = keep_sequential};
  if (!present && keep_sequential) { /* Megatron counts the lines first */
    for (int f = 0; f < n_inputs && !rc; f++) rc = each_line(inputs[f], count_line, &s, err, errlen);
    s.per_part = (s.count + parts - 1) / parts;
    s.count = 0;
  }
  for (int i = 0; !present && !rc && i < parts; i++)
    if (!(out[i] = fopen(tmps[i], "wb")))
      rc = td_errorf(err, errlen, "cannot create '%s': %s", tmps[i], strerror(errno));
  for (int f = 0; !present && !rc && f < n_inputs; f++)
    if (each_line(inputs[f], write_line, &s, err, errlen))
      rc = s.write_errno ? td_errorf(err, errlen, "cannot write the partitions of '%s': %s",
                                     input, strerror(s.write_errno))
                         : -1;
  if (!present) rc = finish(out, names, tmps, parts, rc, err, errlen);
  for (int i = 0; i < parts; i++) td_free(names[i]), td_free(tmps[i]);
  td_free(names), td_free(tmps), td_free(out);
  return rc;
}
