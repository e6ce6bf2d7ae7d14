/* The file that keeps the measured GEMM choices of one machine (cpu_gemm_select.h),
 * so a machine measures each shape class once and later runs repeat its choices
 * bit for bit. Plain POSIX I/O, not base/files.c: the cache is no part of a
 * checkpoint, and its writes must not show in the checkpoint tests' traces of
 * file operations. A JSON object:
 *
 *   {"format": "trident GEMM choices 1", "machine": "<td_gemm_machine()>",
 *    "choices": [{"ab": "fp32", "c": "fp32", "m": 1024, "n": 2304, "k": 768,
 *                 "batch": 1, "trans_a": 0, "trans_b": 1, "bias": 1, "beta": 0,
 *                 "threads": 2, "library": "onednn", "timed": [256, 1152, 768],
 *                 "us": {"onednn": 812.5, "openblas": 955.0}}, ...]} */
#include <cjson/cJSON.h>
#include <cpuid.h>
#include <errno.h>
#include <fcntl.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/mem.h"
#include "device/cpu/cpu_gemm_select.h"
#include "device/cpu/cpu_isa.h"
#include "device/cpu/cpu_openblas.h"

#define FORMAT "trident GEMM choices 1"

static char g_path[4096];
static int g_path_done, g_warned, g_noted;

void td_gemm_cache_reset(void) { g_path_done = 0, g_warned = 0, g_noted = 0; }

/* One warning per process: a broken cache costs time, never correctness. */
static void warn_once(const char *what, const char *reason, const char *consequence) {
  if (g_warned) return;
  g_warned = 1;
  td_warn("GEMM choice cache %s %s: %s; %s (TRIDENT_GEMM_CACHE=PATH|off chooses another file or "
          "none)", td_gemm_cache_path(), what, reason, consequence);
}

#define REMEASURE "it is ignored, the GEMM libraries are measured again and the file rewritten"


/* ----------------------------------------------------------------- machine */

/* "AMD EPYC (family 25 model 17 stepping 1)": cpuid's brand string and signature. */
static void cpu_name(char *buf, size_t n) {
  unsigned r[12] = {0}, a, b, c, d;
  char brand[49] = "unknown CPU";
  if (__get_cpuid(0x80000000u, &a, &b, &c, &d) && a >= 0x80000004u) {
    for (unsigned i = 0; i < 3; i++)
      __get_cpuid(0x80000002u + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
    memcpy(brand, r, 48);
    brand[48] = '\0';
  }
  const char *s = brand;
  while (*s == ' ') s++; /* Intel pads the brand string on the left */
  unsigned fam = 0, model = 0, step = 0;
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    fam = (a >> 8) & 0xf, model = (a >> 4) & 0xf, step = a & 0xf;
    if (fam == 0xf) fam += (a >> 20) & 0xff;
    if (fam >= 6) model += ((a >> 16) & 0xf) << 4;
  }
  snprintf(buf, n, "%s (family %u model %u stepping %u)", s, fam, model, step);
}

const char *td_gemm_machine(void) {
  static char machine[1024];
  if (!machine[0]) {
    char cpu[160];
    cpu_name(cpu, sizeof cpu);
    const dnnl_version_t *v = dnnl_version();
    /* the candidates too: a file measured before a library was added never timed it */
    char libs[128] = "";
    for (int l = 0, len = 0; l < TD_GEMM_LIBRARIES && len < (int)sizeof libs; l++)
      len += snprintf(libs + len, sizeof libs - (size_t)len, "%s%s", l ? " " : "",
                      td_gemm_library_name((td_gemm_library)l));
    /* what the run may use of the CPU: trident's ISA (TRIDENT_CPU_ISA) and oneDNN's cap */
    const char *dnnl_cap = getenv("ONEDNN_MAX_CPU_ISA");
    snprintf(machine, sizeof machine,
             "%s | kernels %s | oneDNN %d.%d.%d%s%s | %s | trident GEMMs %s rev %d", cpu,
             td_cpu_isa_name(td_cpu_isa_get()), v->major, v->minor, v->patch,
             dnnl_cap && *dnnl_cap ? " ONEDNN_MAX_CPU_ISA=" : "", dnnl_cap ? dnnl_cap : "",
             td_openblas_get()->config, libs, TD_GEMM_REVISION);
  }
  return machine;
}

/* --------------------------------------------------------------------- path */

static uint64_t fnv1a(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* The default file under the user's cache directory; "" when no home is known. */
static void default_path(char *out, size_t n) {
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  const char *fmt = "%s/trident/gemm-%016llx.json", *base = xdg;
  if (!xdg || xdg[0] != '/') { /* XDG: a relative value is to be ignored */
    fmt = "%s/.cache/trident/gemm-%016llx.json", base = home;
    if (!home || !*home) return;
  }
  int len = snprintf(out, n, fmt, base, (unsigned long long)fnv1a(td_gemm_machine()));
  if (len < 0 || (size_t)len >= n) out[0] = '\0';
}

const char *td_gemm_cache_path(void) {
  if (!g_path_done) {
    g_path[0] = '\0';
    const char *e = getenv("TRIDENT_GEMM_CACHE");
    if (e && *e && strcmp(e, "off")) {
      if (strlen(e) < sizeof g_path - 16) strcpy(g_path, e);
    } else if (!e || !*e) {
      default_path(g_path, sizeof g_path);
    }
    g_path_done = 1;
  }
  return g_path;
}

/* The directory of path (without the trailing slash; "." for a bare name). */
static void dir_of(const char *path, char *dir, size_t n) {
  const char *slash = strrchr(path, '/');
  if (!slash) {
    snprintf(dir, n, ".");
  } else {
    size_t len = slash == path ? 1 : (size_t)(slash - path);
    snprintf(dir, n, "%.*s", (int)(len < n ? len : n - 1), path);
  }
}

/* mkdir p unless it is a directory already. 0, or -1 with errno set. */
static int make_dir(const char *p) {
  struct stat st;
  if (!mkdir(p, 0700)) return 0;
  if (errno != EEXIST) return -1;
  if (!stat(p, &st) && S_ISDIR(st.st_mode)) return 0;
  errno = ENOTDIR;
  return -1;
}

/* mkdir -p dir (mode 0700: the XDG base directories' mode). 0 on success. */
static int make_dirs(const char *dir) {
  char p[4096];
  snprintf(p, sizeof p, "%s", dir);
  for (char *s = p + 1; *s; s++) {
    if (*s != '/') continue;
    *s = '\0';
    if (make_dir(p)) return -1;
    *s = '/';
  }
  return make_dir(p);
}

/* --------------------------------------------------------------------- lock */

int td_gemm_cache_lock(void) {
  const char *path = td_gemm_cache_path();
  if (!*path) return -1;
  char dir[4096];
  dir_of(path, dir, sizeof dir);
  if (make_dirs(dir)) return -1;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  while (flock(fd, LOCK_EX)) {
    if (errno != EINTR) {
      close(fd);
      return -1;
    }
  }
  return fd;
}

void td_gemm_cache_unlock(int fd) {
  if (fd < 0) return;
  flock(fd, LOCK_UN);
  close(fd);
}

/* ---------------------------------------------------------------- reading */

static const char *dtype_str(int32_t dt) { return dt == TD_BF16 ? "bf16" : "fp32"; }

static int dtype_of(const cJSON *o, const char *key, int32_t *dt) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsString(v)) return -1;
  if (!strcmp(v->valuestring, "fp32")) return *dt = TD_F32, 0;
  if (!strcmp(v->valuestring, "bf16")) return *dt = TD_BF16, 0;
  return -1;
}

static int int_of(const cJSON *o, const char *key, int64_t lo, int64_t hi, int64_t *x) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsNumber(v) || v->valuedouble < (double)lo || v->valuedouble > (double)hi ||
      v->valuedouble != (double)(int64_t)v->valuedouble)
    return -1;
  *x = (int64_t)v->valuedouble;
  return 0;
}

static int library_of(const char *name) {
  for (int lib = 0; lib < TD_GEMM_LIBRARIES; lib++)
    if (!strcmp(name, td_gemm_library_name((td_gemm_library)lib))) return lib;
  return -1;
}

/* The shape fields of one choice. 0, or -1 when one is missing or out of range. */
static int class_from_json(const cJSON *o, td_gemm_class *c) {
  const int64_t big = (int64_t)1 << 40;
  int64_t ta, tb, bias, beta, threads;
  memset(c, 0, sizeof *c);
  if (dtype_of(o, "ab", &c->ab_dtype) || dtype_of(o, "c", &c->c_dtype) ||
      int_of(o, "m", 1, big, &c->m) || int_of(o, "n", 1, big, &c->n) ||
      int_of(o, "k", 1, big, &c->k) || int_of(o, "batch", 1, big, &c->batch) ||
      int_of(o, "trans_a", 0, 1, &ta) || int_of(o, "trans_b", 0, 1, &tb) ||
      int_of(o, "bias", 0, 1, &bias) || int_of(o, "beta", 0, 1, &beta) ||
      int_of(o, "threads", 1, 1 << 20, &threads))
    return -1;
  c->trans_a = (int32_t)ta, c->trans_b = (int32_t)tb, c->bias = (int32_t)bias;
  c->beta = (int32_t)beta, c->threads = (int32_t)threads;
  return 0;
}

/* One element of "choices"; the timings are informative and may be absent. */
static int choice_from_json(const cJSON *o, td_gemm_choice *ch) {
  memset(ch, 0, sizeof *ch);
  const cJSON *lib = cJSON_GetObjectItemCaseSensitive(o, "library");
  if (class_from_json(o, &ch->cls) || !cJSON_IsString(lib)) return -1;
  if ((ch->library = library_of(lib->valuestring)) < 0) return -1;
  const cJSON *timed = cJSON_GetObjectItemCaseSensitive(o, "timed");
  if (cJSON_IsArray(timed) && cJSON_GetArraySize(timed) == 3) {
    ch->tm = (int64_t)cJSON_GetArrayItem(timed, 0)->valuedouble;
    ch->tn = (int64_t)cJSON_GetArrayItem(timed, 1)->valuedouble;
    ch->tk = (int64_t)cJSON_GetArrayItem(timed, 2)->valuedouble;
  }
  const cJSON *us = cJSON_GetObjectItemCaseSensitive(o, "us");
  for (int l = 0; l < TD_GEMM_LIBRARIES; l++) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(us, td_gemm_library_name((td_gemm_library)l));
    if (cJSON_IsNumber(t)) ch->us[l] = t->valuedouble;
  }
  return 0;
}

static char *read_text(const char *path, const char **why) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    *why = errno == ENOENT || errno == ENOTDIR ? NULL : strerror(errno); /* no file yet */
    return NULL;
  }
  size_t cap = 1 << 16, len = 0, got;
  char *buf = malloc(cap), *grown;
  while (buf && (got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
    len += got;
    if (len + 1 < cap) continue;
    if (!(grown = realloc(buf, cap *= 2))) free(buf);
    buf = grown;
  }
  int bad = ferror(f);
  fclose(f);
  if (!buf || bad) {
    free(buf);
    *why = bad ? "read error" : "out of memory";
    return NULL;
  }
  buf[len] = '\0';
  return buf;
}

/* The choices of a parsed file, or NULL with *why set. */
static td_gemm_choice *choices_from_json(const cJSON *root, int *n, const char **why) {
  const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
  const cJSON *machine = cJSON_GetObjectItemCaseSensitive(root, "machine");
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "choices");
  if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, FORMAT) || !cJSON_IsString(machine) ||
      !cJSON_IsArray(list))
    return *why = "is not a trident GEMM choice file", NULL;
  if (strcmp(machine->valuestring, td_gemm_machine())) {
    /* another CPU or library version (a file named by TRIDENT_GEMM_CACHE): stale, not broken */
    if (!g_noted) /* debug: a library upgrade makes every file stale, which is no fault */
      td_debug("GEMM choice cache %s was measured on '%s'; measuring again for '%s'",
              td_gemm_cache_path(), machine->valuestring, td_gemm_machine());
    g_noted = 1;
    *why = NULL;
    return NULL;
  }
  int count = cJSON_GetArraySize(list);
  td_gemm_choice *c = td_malloc(sizeof *c * (size_t)(count ? count : 1));
  for (int i = 0; i < count; i++)
    if (choice_from_json(cJSON_GetArrayItem(list, i), &c[i])) {
      td_free(c);
      return *why = "has a malformed choice", NULL;
    }
  *n = count;
  return c;
}

td_gemm_choice *td_gemm_cache_load(int *n) {
  *n = 0;
  const char *path = td_gemm_cache_path(), *why = NULL;
  if (!*path) return NULL;
  char *text = read_text(path, &why);
  if (!text) {
    if (why) warn_once("cannot be read", why, REMEASURE);
    return NULL;
  }
  cJSON *root = cJSON_Parse(text);
  free(text);
  td_gemm_choice *c = NULL;
  if (!root)
    why = "is not valid JSON";
  else
    c = choices_from_json(root, n, &why);
  cJSON_Delete(root);
  if (!c && why) warn_once("is broken: it", why, REMEASURE);
  return c;
}

/* ---------------------------------------------------------------- writing */

static cJSON *choice_to_json(const td_gemm_choice *ch) {
  const td_gemm_class *c = &ch->cls;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "ab", dtype_str(c->ab_dtype));
  cJSON_AddStringToObject(o, "c", dtype_str(c->c_dtype));
  const struct {
    const char *key;
    double v;
  } ints[] = {{"m", (double)c->m},       {"n", (double)c->n},        {"k", (double)c->k},
              {"batch", (double)c->batch}, {"trans_a", c->trans_a}, {"trans_b", c->trans_b},
              {"bias", c->bias},           {"beta", c->beta},       {"threads", c->threads}};
  for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
    cJSON_AddNumberToObject(o, ints[i].key, ints[i].v);
  cJSON_AddStringToObject(o, "library", td_gemm_library_name((td_gemm_library)ch->library));
  const double timed[3] = {(double)ch->tm, (double)ch->tn, (double)ch->tk};
  cJSON_AddItemToObject(o, "timed", cJSON_CreateDoubleArray(timed, 3));
  cJSON *us = cJSON_AddObjectToObject(o, "us");
  for (int l = 0; l < TD_GEMM_LIBRARIES; l++)
    if (ch->us[l] > 0) cJSON_AddNumberToObject(us, td_gemm_library_name((td_gemm_library)l),
                                               (double)(int64_t)(ch->us[l] * 10 + 0.5) / 10);
  return o;
}

static char *file_text(const td_gemm_choice *c, int n) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "format", FORMAT);
  cJSON_AddStringToObject(root, "machine", td_gemm_machine());
  cJSON_AddStringToObject(root, "note", "trident's measured GEMM library per shape on this "
                                        "machine; delete this file to measure again");
  cJSON *list = cJSON_AddArrayToObject(root, "choices");
  for (int i = 0; i < n; i++)
    if (!c[i].unsaved) cJSON_AddItemToArray(list, choice_to_json(&c[i]));
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  return text;
}

/* Write text to tmp, then rename it over path. 0, or -1 with errno set. */
static int write_atomically(const char *path, const char *tmp, const char *text) {
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  size_t len = strlen(text), done = 0;
  while (done < len) {
    ssize_t w = write(fd, text + done, len - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    done += (size_t)w;
  }
  int err = done < len ? errno : 0;
  if (close(fd) && !err) err = errno;
  if (!err && rename(tmp, path)) err = errno;
  if (err) unlink(tmp);
  errno = err;
  return err ? -1 : 0;
}

void td_gemm_cache_save(const td_gemm_choice *c, int n) {
  const char *path = td_gemm_cache_path();
  if (!*path) return;
  char dir[4096], tmp[4160];
  dir_of(path, dir, sizeof dir);
  snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
  char *text = file_text(c, n);
  if (make_dirs(dir) || write_atomically(path, tmp, text))
    warn_once("cannot be written", strerror(errno), "later runs will measure again");
  cJSON_free(text);
}
