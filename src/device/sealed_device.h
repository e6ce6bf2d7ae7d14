/* The "sealed" test device: the CPU backend's kernels on device memory that the
 * host cannot touch between ops, as a GPU's cannot be. Code above the device
 * interface (model, trainer, ZeRO, comm) that reads or writes device memory with
 * a host loop, memcpy or MPI instead of an op crashes at that access, with a line
 * naming the address and the allocation and a backtrace (docs/device.md, "The
 * sealed test device").
 *
 * How:
 *  - memory comes from one PROT_NONE reservation of address space per process
 *    (64 GiB; TRIDENT_SEALED_RESERVE_GIB=N sets it), handed out by a bump pointer
 *    in whole pages (2 MiB huge pages for buffers that large), each allocation
 *    followed by a guard page that is never made accessible; addresses are never
 *    reused (a stale pointer faults);
 *  - an op makes the allocations its pointer arguments lie in readable and
 *    writable, runs the CPU backend's op and seals them again, so an op that
 *    strays outside its arguments faults too;
 *  - host_alloc memory is open to the host, except the pages of an async copy's
 *    host side until a wait (synchronize, event_synchronize, a blocking copy)
 *    says a GPU's copy would be done: reading a copy_d2h_async destination, or
 *    writing a copy_h2d_async source, too early faults;
 *  - a SIGSEGV / SIGBUS handler names faults inside the reservation and in
 *    closed host pages, then hands the signal to the handler installed before it
 *    (the MPI layer's crash line).
 *
 * It is a test device: "sealed" opens it by name (`--device sealed`,
 * TRIDENT_DEVICE=sealed) but td_device_names() does not list it to users. */
#ifndef TD_DEVICE_SEALED_DEVICE_H
#define TD_DEVICE_SEALED_DEVICE_H

#include <stddef.h>

#include "device/device.h"

/* The backend's entry points for device.c's registry. */
const td_device_ops *td_sealed_device_ops(void);
/* Reserves the address space and installs the fault handler (once per process);
 * the handle has no state of its own (returns NULL); there is one device (*index = 0). */
void *td_sealed_open(int *index);
void td_sealed_describe(const void *impl, char *buf, size_t n);

#endif
