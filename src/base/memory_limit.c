#include "base/memory_limit.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>

#include "base/checked.h"
#include "base/error.h"

#define ENV_NAME "TRIDENT_MEMORY_LIMIT"

/* ------------------------------------------------------------------ text */

void td_bytes_text(uint64_t bytes, char *out, size_t n) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes == TD_SIZE_HUGE) {
    snprintf(out, n, "more than 16 EiB");
    return;
  }
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024 && u < 6) v /= 1024, u++;
  if (u == 0)
    snprintf(out, n, "%llu B", (unsigned long long)bytes);
  else
    snprintf(out, n, "%.*f %s", v < 10 ? 2 : v < 100 ? 1 : 0, v, units[u]);
}

int td_memory_parse(const char *s, uint64_t *bytes) {
  if (!strcasecmp(s, "unlimited")) return *bytes = TD_SIZE_HUGE, 0;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || errno || !isfinite(v) || v < 0) return -1;
  static const char units[] = "kmgt";
  double scale = 1;
  const char *u = end[0] ? strchr(units, tolower((unsigned char)end[0])) : NULL;
  if (u) {
    scale = ldexp(1.0, 10 * (int)(u - units + 1));
    end++;
    if (!strcasecmp(end, "ib") || !strcasecmp(end, "b")) end += strlen(end);
  } else if (!strcasecmp(end, "b")) {
    end++;
  }
  if (*end || v * scale >= 18446744073709551615.0) return -1;
  *bytes = (uint64_t)(v * scale);
  return 0;
}

/* ------------------------------------------------------------------ sources */

/* A "Key:   N kB" line of a /proc file, in bytes; -1 when absent. */
static int64_t proc_kb(const char *path, const char *key) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[256];
  size_t klen = strlen(key);
  int64_t v = -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, key, klen) && line[klen] == ':') {
      long long kb = strtoll(line + klen + 1, NULL, 10);
      v = kb >= 0 ? kb * 1024 : -1;
      break;
    }
  fclose(f);
  return v;
}

int64_t td_memory_self_bytes(const char *field) { return proc_kb("/proc/self/status", field); }

/* One number from a cgroup file: TD_SIZE_HUGE for no limit ("max", or cgroup v1's
 * "unlimited", a page counter's maximum near 2^63); 0 when unreadable. */
static uint64_t cgroup_value(const char *dir, const char *file) {
  char path[1200], text[64] = "";
  snprintf(path, sizeof path, "%s/%s", dir, file);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  int ok = fgets(text, sizeof text, f) != NULL;
  fclose(f);
  if (!ok) return 0;
  if (!strncmp(text, "max", 3)) return TD_SIZE_HUGE;
  uint64_t v = strtoull(text, NULL, 10);
  return v >= (1ull << 62) ? TD_SIZE_HUGE : v;
}

/* Whether a comma-separated controller list names "memory". */
static int has_memory(const char *controllers) {
  for (const char *t = controllers; *t;) {
    size_t len = strcspn(t, ",");
    if (len == 6 && !strncmp(t, "memory", 6)) return 1;
    t += len + (t[len] == ',');
  }
  return 0;
}

/* This process's memory cgroup from a /proc/self/cgroup file: the v1 line of the
 * memory controller "N:...memory...:/path" (version 1; on a hybrid system the
 * unified hierarchy's "0::" line is there too, without the controller), else
 * the v2 line "0::/path" (version 2); 0 when neither. */
static int cgroup_path(const char *proc_cgroup, char *path, size_t n) {
  FILE *f = fopen(proc_cgroup, "r");
  if (!f) return 0;
  char line[1024];
  int version = 0;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2) continue;
    *c2 = 0;
    const char *controllers = c1 + 1, *p = c2 + 1;
    int v2 = !strncmp(line, "0:", 2) && !*controllers;
    if ((v2 && !version) || has_memory(controllers)) {
      snprintf(path, n, "%s", strcmp(p, "/") ? p : "");
      version = v2 ? 2 : 1;
    }
  }
  fclose(f);
  return version;
}

uint64_t td_memory_cgroup_room(const char *proc_cgroup, const char *sys_root, char *what,
                               size_t n) {
  char rel[512], dir[1100];
  int version = cgroup_path(proc_cgroup, rel, sizeof rel);
  if (!version) return TD_SIZE_HUGE;
  const char *limit = version == 2 ? "memory.max" : "memory.limit_in_bytes";
  const char *usage = version == 2 ? "memory.current" : "memory.usage_in_bytes";
  const char *mount = version == 2 ? "" : "/memory";
  uint64_t room = TD_SIZE_HUGE;
  /* the process's cgroup and each parent (a job's limit may sit above its step),
   * within the mount; a path that is not there (a container without a cgroup
   * namespace) leaves the mount's own files */
  for (;;) {
    snprintf(dir, sizeof dir, "%s%s%s", sys_root, mount, rel);
    uint64_t max = cgroup_value(dir, limit), used = cgroup_value(dir, usage);
    if (max && max != TD_SIZE_HUGE && used != TD_SIZE_HUGE) {
      uint64_t r = max > used ? max - used : 0;
      if (r < room) {
        room = r;
        if (what) snprintf(what, n, "the cgroup%s %s %s minus %s", version == 1 ? " (v1)" : "",
                           *rel ? rel : "/", limit, usage);
      }
    }
    char *slash = strrchr(rel, '/');
    if (!*rel || !slash) break;
    *slash = 0;
  }
  return room;
}

/* Keep the smaller of the limit so far and bytes (from source). */
static void consider(td_memory_limit *l, uint64_t bytes, const char *source) {
  if (bytes >= l->bytes) return;
  l->bytes = bytes;
  snprintf(l->source, sizeof l->source, "%s", source);
}

static void node_limits(td_memory_limit *l, int ranks) {
  char what[700], dir[600];
  int64_t avail = proc_kb("/proc/meminfo", "MemAvailable");
  int64_t swap = proc_kb("/proc/meminfo", "SwapFree");
  const char *share = ranks > 1 ? ", shared by the job's ranks on this node" : "";
  if (avail >= 0) {
    snprintf(what, sizeof what, "MemAvailable + SwapFree in /proc/meminfo%s", share);
    consider(l, ((uint64_t)avail + (uint64_t)(swap > 0 ? swap : 0)) / (uint64_t)ranks, what);
  }
  uint64_t room = td_memory_cgroup_room("/proc/self/cgroup", "/sys/fs/cgroup", dir, sizeof dir);
  if (room != TD_SIZE_HUGE) {
    snprintf(what, sizeof what, "%s%s", dir, share);
    consider(l, room / (uint64_t)ranks, what);
  }
}

static void process_limits(td_memory_limit *l) {
  struct rlimit r;
  if (getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY) {
    int64_t used = proc_kb("/proc/self/status", "VmSize");
    uint64_t u = used > 0 ? (uint64_t)used : 0;
    consider(l, r.rlim_cur > u ? r.rlim_cur - u : 0, "RLIMIT_AS (ulimit -v) minus the address space in use");
  }
  if (getrlimit(RLIMIT_DATA, &r) == 0 && r.rlim_cur != RLIM_INFINITY) {
    int64_t used = proc_kb("/proc/self/status", "VmData");
    uint64_t u = used > 0 ? (uint64_t)used : 0;
    consider(l, r.rlim_cur > u ? r.rlim_cur - u : 0, "RLIMIT_DATA (ulimit -d) minus the data in use");
  }
}

int td_memory_limit_get(int ranks_per_node, td_memory_limit *l, char *err, size_t errlen) {
  l->bytes = TD_SIZE_HUGE;
  snprintf(l->source, sizeof l->source, "no limit found");
  const char *env = getenv(ENV_NAME);
  if (env && *env) {
    if (td_memory_parse(env, &l->bytes))
      return td_errorf(err, errlen,
                       ENV_NAME "='%s': expected the bytes one trident process may use: a number "
                       "with an optional K, M, G or T suffix (binary: 1.5G, 512MiB), or unlimited",
                       env);
    snprintf(l->source, sizeof l->source, ENV_NAME "=%s", env);
    return 0;
  }
  node_limits(l, ranks_per_node > 1 ? ranks_per_node : 1);
  process_limits(l);
  return 0;
}

int td_memory_check(uint64_t need, int ranks_per_node, const char *what, const char *detail,
                    char *err, size_t errlen) {
  td_memory_limit l;
  if (td_memory_limit_get(ranks_per_node, &l, err, errlen)) return -1;
  if (l.bytes == TD_SIZE_HUGE || need <= l.bytes) return 0;
  char a[32], b[32];
  td_bytes_text(need, a, sizeof a);
  td_bytes_text(l.bytes, b, sizeof b);
  return td_errorf(err, errlen,
                   "%s needs %s%s%s%s, more than the %s available (%s; " ENV_NAME
                   "=bytes sets the limit of one trident process)",
                   what, a, detail ? " (" : "", detail ? detail : "", detail ? ")" : "", b,
                   l.source);
}
