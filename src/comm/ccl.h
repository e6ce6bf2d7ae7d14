/* A device collective library: NCCL's shape (a communicator per group of ranks,
 * bootstrapped from an id one rank makes and MPI broadcasts; collectives and
 * point-to-point on device pointers, enqueued on a device handle's stream and
 * returning at once; ncclGroupStart/End around point-to-point calls that must
 * progress together). device_comm.c drives it; nothing else calls it.
 *
 * Libraries (td_ccl_for picks by the device's backend):
 *  - "nccl" for "cuda" (src/device/cuda/cuda_nccl.cu): libnccl.so.2 loaded
 *    with dlopen at the first use, so a binary without NCCL installed still
 *    trains on one GPU or through host-staged MPI;
 *  - "mpi-staged" for the "sealed" test device (sealed_ccl.c): the same
 *    interface over MPI on host copies, so every path of device_comm.c that
 *    NCCL takes (bootstrap, grouped point-to-point, the communication stream
 *    and its events) runs in the CPU test suite and is checked against MPI.
 *
 * Semantics every library keeps (NCCL's):
 *  - an op is ordered on stream s (a td_device handle) like a kernel: it starts
 *    after the work issued on s before it, and work issued on s after it
 *    starts after it ends;
 *  - collectives are called by every rank of the communicator in the same order;
 *  - send/recv pair up in issue order per peer; a send may not complete before
 *    its receive is posted, so sends and receives between the same ranks that
 *    must progress together go between group_start and group_end (which issues
 *    them as one operation);
 *  - all_gather's recv is rank-major (rank r's block at r x count) and may be
 *    in place (send = recv + rank x count); all_reduce may be in place.
 * Sums of bf16 / fp16: NCCL adds in fp32 and rounds to 16 bits at every step of
 * its ring or tree, where host MPI (comm.h) rounds once at the end; trident's
 * 16-bit data goes through all_gather only (a copy, exact either way), and its
 * reductions are fp32. */
#ifndef TD_COMM_CCL_H
#define TD_COMM_CCL_H

#include <stddef.h>
#include <stdint.h>

#include "comm/reduce_op.h"
#include "device/device.h"

typedef struct td_ccl td_ccl;   /* one communicator of the library */
typedef struct td_comm td_comm; /* comm.h (not included: it brings MPI's header to C++) */

#define TD_CCL_ID_BYTES 128 /* the bootstrap id (NCCL_UNIQUE_ID_BYTES) */

typedef struct td_ccl_ops {
  const char *name;
  /* Loads the library (once per process): 1, or 0 with the reason in why. */
  int (*load)(char *why, size_t n);
  /* The library's version, e.g. "2.28.9" (after load). */
  void (*version)(char *buf, size_t n);
  /* A fresh id (TD_CCL_ID_BYTES) for one new communicator: made on one rank,
   * broadcast by the caller to the others. */
  void (*make_id)(void *id);
  /* Collective over the nranks ranks of `over` (this one being rank), which all
   * pass the id its rank 0 made: the library's communicator of the same ranks
   * in the same order, on d's device (the GPU d's handle runs on). Blocks until
   * all joined. NCCL takes the id; the MPI stand-in its own copy of over. */
  td_ccl *(*create)(td_device *d, td_comm *over, int rank, int nranks, const void *id);
  void (*destroy)(td_ccl *c);
  /* The operations, enqueued on stream s (a handle of the communicator's device). */
  void (*all_reduce)(td_ccl *c, td_device *s, const void *send, void *recv, int64_t count,
                     td_dtype dt, td_reduce_op op);
  void (*all_gather)(td_ccl *c, td_device *s, const void *send, void *recv, int64_t count,
                     td_dtype dt);
  void (*send)(td_ccl *c, td_device *s, const void *buf, int64_t count, td_dtype dt, int peer);
  void (*recv)(td_ccl *c, td_device *s, void *buf, int64_t count, td_dtype dt, int peer);
  void (*group_start)(td_ccl *c);
  void (*group_end)(td_ccl *c);
} td_ccl_ops;

/* The library of d's backend, or NULL when it has none (the CPU: its memory is
 * MPI's own). */
const td_ccl_ops *td_ccl_for(const td_device *d);

#endif
