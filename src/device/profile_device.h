/* A timing wrapper device: td_profile_device_open(inner) returns a device whose
 * every op calls the same op of `inner`, waits for it (inner's synchronize) and
 * adds the wall time to an entry keyed by (region, op). Matmuls are keyed by
 * dtype and shape as well and carry their FLOPs (2 m n k per product), attention
 * carries FlashAttention's FLOP count, so a training step can be split into
 * matmul, attention, other kernels and optimizer time without touching the model.
 *
 * Regions are labels the caller sets between calls ("forward", "backward",
 * "optimizer", ...). Memory ops (alloc, free, synchronize) pass through untimed;
 * copies and fill are timed as kernels. The wrapper is meant to be called from one
 * thread (as the model does); the wrapped device's pointers are its pointers. */
#ifndef TD_DEVICE_PROFILE_DEVICE_H
#define TD_DEVICE_PROFILE_DEVICE_H

#include <stdint.h>

#include "device/device.h"

typedef enum {
  TD_PROF_MATMUL = 0,
  TD_PROF_ATTENTION = 1,
  TD_PROF_KERNEL = 2, /* everything else: elementwise, loss, embedding, copies, optimizer */
  TD_PROF_KINDS = 3
} td_prof_kind;

#define TD_PROF_NAME_MAX 96

typedef struct {
  const char *region; /* the region current at the call (caller's string) */
  char
      name[TD_PROF_NAME_MAX]; /* "gelu_forward", "matmul bf16->fp32 m=1024 n=3072 k=768 NT +bias" */
  const char *op;             /* the op's name without shape: "matmul", "gelu_forward" */
  td_prof_kind kind;
  int64_t calls;
  double seconds, flops;
} td_profile_entry;

/* Wrap inner (which stays owned by the caller and must outlive the wrapper). */
td_device *td_profile_device_open(td_device *inner);
void td_profile_device_close(td_device *prof);

/* Label the following calls; region must stay valid (a string literal). */
void td_profile_set_region(td_device *prof, const char *region);
/* Forget all entries (e.g. after warm-up steps). */
void td_profile_reset(td_device *prof);

/* The entries in order of first call. */
int td_profile_count(const td_device *prof);
const td_profile_entry *td_profile_entry_at(const td_device *prof, int i);

const char *td_prof_kind_name(td_prof_kind kind); /* "matmul", "attention", "kernel" */

#endif
