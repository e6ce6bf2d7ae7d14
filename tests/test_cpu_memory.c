/* The CPU backend's device memory (device/cpu/cpu_memory.c): a freed block of a
 * megabyte or more is kept and handed back to the next allocation of its size
 * (no fresh pages to fault in), zeroed again as alloc promises (alloc_scratch
 * leaves it as it was); memory_stats
 * counts live bytes only; the kept blocks never take the process past the peak
 * of live bytes plus the largest block freed (the oldest are given back first);
 * small blocks are not kept; closing a CPU device gives every kept block back. */
#include <string.h>

#include "check.h"
#include "device/cpu/cpu_kernels.h"
#include "device/device.h"

#define MIB ((size_t)1 << 20)

static int all_zero(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return 0;
  return 1;
}

int main(void) {
  td_device *d = td_device_open("cpu");
  const td_device_ops *o = d->ops;
  td_cpu_release_cached_memory();
  size_t live0, peak0, live, peak;
  o->memory_stats(d, &live0, &peak0);

  unsigned char *a = o->alloc(d, 3 * MIB);
  memset(a, 0xab, 3 * MIB);
  o->free(d, a);
  o->memory_stats(d, &live, &peak);
  CHECK(live == live0 && td_cpu_cached_memory() == 3 * MIB,
        "a freed 3 MiB block leaves the live count and is kept (%zu kept)", td_cpu_cached_memory());
  unsigned char *b = o->alloc(d, 3 * MIB);
  CHECK(b == a && td_cpu_cached_memory() == 0, "the next 3 MiB allocation takes it back");
  CHECK(all_zero(b, 3 * MIB), "zeroed again, as alloc promises");
  memset(b, 0xcd, 3 * MIB);
  o->free(d, b);
  unsigned char *c = o->alloc_scratch(d, 3 * MIB);
  CHECK(c == a && c[0] == 0xcd && c[3 * MIB - 1] == 0xcd,
        "alloc_scratch takes the kept block back as it was (no zeroing: its user writes it)");
  o->free(d, c);

  unsigned char *s = o->alloc(d, 4096);
  o->free(d, s);
  CHECK(td_cpu_cached_memory() == 3 * MIB, "a 4 KiB block is not kept");

  /* the bound: live + kept + new <= peak + the largest block freed */
  td_cpu_release_cached_memory();
  o->memory_stats(d, &live0, &peak0);
  const size_t base = peak0 - live0; /* room under the peak before this part */
  unsigned char *x = o->alloc(d, base + 4 * MIB), *y = o->alloc(d, 8 * MIB);
  o->free(d, x), o->free(d, y);
  CHECK(td_cpu_cached_memory() == base + 12 * MIB, "two freed blocks kept (%zu)",
        td_cpu_cached_memory());
  unsigned char *z = o->alloc(d, 2 * (base + 12 * MIB)); /* a miss above peak + slack */
  o->memory_stats(d, &live, &peak);
  CHECK(td_cpu_cached_memory() == 0, "a miss above the peak plus the slack gives the kept blocks "
                                     "back (%zu kept)", td_cpu_cached_memory());
  o->free(d, z);
  unsigned char *w = o->alloc(d, 2 * MIB); /* fits under peak + slack: z stays kept */
  CHECK(td_cpu_cached_memory() == 2 * (base + 12 * MIB),
        "a miss that fits under the peak plus the slack keeps what is cached");
  size_t kept = td_cpu_cached_memory();
  o->memory_stats(d, &live, &peak);
  CHECK(live + kept <= peak + 2 * (base + 12 * MIB), "live + kept <= peak + the largest block freed");
  o->free(d, w);
  td_device_close(d);
  CHECK(td_cpu_cached_memory() == 0, "closing the CPU device gives every kept block back");
  return tst_finish();
}
