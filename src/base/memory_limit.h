/* How much memory this process may still use, so a model, a batch or an index
 * that cannot fit is refused with its size BEFORE anything is allocated,
 * instead of allocating for half a minute and then failing (or being killed by
 * the kernel's OOM killer).
 *
 * The limit is the smallest of:
 *   - MemAvailable + SwapFree from /proc/meminfo, shared equally by the
 *     ranks_per_node processes of the job on this node (they all allocate at
 *     start-up);
 *   - the memory cgroup's limit minus its usage (a container's or a batch job's:
 *     v2 memory.max - memory.current, v1 memory.limit_in_bytes -
 *     memory.usage_in_bytes), the least over the process's cgroup and its
 *     parents, shared the same way;
 *   - RLIMIT_AS minus the address space in use, RLIMIT_DATA minus the data
 *     segment in use (ulimit -v / -d), per process.
 * TRIDENT_MEMORY_LIMIT replaces all of them: the bytes one trident process may
 * use, as a number with an optional binary suffix (K, M, G, T, with or without
 * "iB"/"B": 1536M, 1.5G, 2GiB), or "unlimited" to turn the check off. */
#ifndef TD_BASE_MEMORY_LIMIT_H
#define TD_BASE_MEMORY_LIMIT_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint64_t bytes;   /* TD_SIZE_HUGE (base/checked.h): no limit */
  char source[768]; /* where the figure comes from, for messages */
} td_memory_limit;

/* The limit for one of ranks_per_node processes (>= 1). Returns 0, or -1 with
 * err when TRIDENT_MEMORY_LIMIT is malformed. */
int td_memory_limit_get(int ranks_per_node, td_memory_limit *l, char *err, size_t errlen);

/* TRIDENT_MEMORY_LIMIT's syntax: 0 and *bytes, or -1 (TD_SIZE_HUGE for "unlimited"). */
int td_memory_parse(const char *s, uint64_t *bytes);

/* The room under the memory cgroup named by a /proc/self/cgroup file
 * (proc_cgroup), with the cgroup file system mounted at sys_root (v1: its
 * memory controller at sys_root/memory): the least limit minus usage over the
 * cgroup and its parents, TD_SIZE_HUGE when none is limited. what (may be NULL)
 * names the cgroup and files that set it. */
uint64_t td_memory_cgroup_room(const char *proc_cgroup, const char *sys_root, char *what,
                               size_t n);

/* A field of /proc/self/status in bytes (e.g. "VmPeak", "VmHWM"); -1 if unknown. */
int64_t td_memory_self_bytes(const char *field);

/* A byte count for people: "512 B", "1.50 KiB", ..., "12.3 GiB"; a saturated
 * count is "more than 16 EiB". */
void td_bytes_text(uint64_t bytes, char *out, size_t n);

/* 0 when need bytes fit the limit of one of ranks_per_node processes; else -1
 * with err = "<what> needs <need> (<detail>), more than the <limit> available
 * (<source>)" (detail may be NULL). */
int td_memory_check(uint64_t need, int ranks_per_node, const char *what, const char *detail,
                    char *err, size_t errlen);

#endif
