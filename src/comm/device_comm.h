/* Collectives and point-to-point on device memory: comm.h's operations whose
 * buffers belong to a td_device, with comm.h's semantics (counts, in-place rules,
 * ordering).
 *
 * How the bytes move depends on the device and on td_dcomm_setup:
 *  - memory the host can address (TD_DEVICE_HOST_MEMORY: the CPU backend): the
 *    call goes straight to td_comm, nothing added;
 *  - the device's collective library (comm/ccl.h: NCCL on CUDA), once
 *    td_dcomm_setup chose it: each communicator gets the library's communicator
 *    of the same ranks from td_dcomm_bind, at set-up (rank 0 makes the id, MPI
 *    broadcasts it; NCCL's initialisation may synchronise the device, so never
 *    in the middle of a step). Blocking collectives are enqueued on the handle's
 *    own stream (the compute stream: tensor parallelism's all-reduce is ordered
 *    with the kernels around it and the host does not wait). Non-blocking ones
 *    (ZeRO's bucket exchanges and gathers) run on a stream of their
 *    communicator's (another handle of the device), after an event marks the
 *    compute work issued so far, so they overlap the compute issued after them;
 *    completing the
 *    request (td_dcomm_wait, or td_dcomm_test once the library's work is done)
 *    makes the compute stream wait for it, and never the host. The all-to-all
 *    and the gather are the library's send/recv in one group. Point-to-point
 *    (the pipeline's activations and gradients) goes through the channels of
 *    td_dcomm_p2p_setup (a communicator per direction between neighbours),
 *    and without them takes the staged path below;
 *  - other memory (a GPU without the library, ranks sharing a GPU, the sealed
 *    test device with --distributed-backend gloo): staged through host memory,
 *    device-to-host, MPI on the host copy, host-to-device. The staging is the
 *    device's pinned host memory (host_alloc), taken from a pool for the
 *    operation and kept for the next one; td_dcomm_release frees a device's
 *    share before the device closes;
 *  - a communicator of one rank (or NULL) moves nothing between ranks: the
 *    result is a device copy, or nothing when in place.
 * Staged and direct give the same bits: MPI reduces the same values in the same
 * order whether they sit in device memory or in a host copy. The library's sums
 * follow its own order (NCCL's ring or tree): fp32 within rounding of MPI's;
 * ZeRO's reduce-scatter sums the exchanged pieces itself, in rank order, so
 * data parallelism keeps its bits on every path. */
#ifndef TD_COMM_DEVICE_COMM_H
#define TD_COMM_DEVICE_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "device/device.h"

/* A non-blocking operation in flight on device buffers; complete it with
 * td_dcomm_wait, or td_dcomm_test until it returns 1. */
typedef struct {
  td_comm_request req;
  td_device *dev;
  td_event *done;    /* the library's path: marks the operation's end on its
                        stream (communication or sends; NULL: MPI's request) */
  void *stage;       /* host staging (NULL: none) */
  void *result;      /* device buffer the staged result is copied to, or NULL */
  size_t result_off; /* where in stage the result starts, bytes */
  size_t result_bytes;
  int active;        /* an operation is in flight (MPI's request, or done's) */
} td_dcomm_request;

/* Chooses, collectively over world, how d's collectives move for the rest of the
 * run: through d's collective library when want_library (Megatron's
 * --distributed-backend nccl; 0: gloo, i.e. host MPI), the backend has one that
 * loads, and no two ranks of a host share a device (NCCL cannot; the sealed
 * device's stand-in can), on every rank; else host-staged (or direct) MPI.
 * Writes a line for the start-up summary ("nccl 2.28.9, on the device (compute
 * and communication streams)", "MPI through host copies (2 ranks share a GPU
 * with another rank)") and returns 1 when the library is used. Every rank must call it before its first collective on d. */
int td_dcomm_setup(td_comm *world, td_device *d, int want_library, char *line, size_t n);
/* 1 when d's collectives go through its library (after td_dcomm_setup). */
int td_dcomm_uses_library(const td_device *d);
/* Collective over c: when d uses its library, c's library twin (nothing for a
 * communicator of one rank, or one bound already). Every communicator of more
 * than one rank that collectives on d's memory use must be bound first, at
 * set-up: a collective through the library on an unbound one is an error.
 * td_dcomm_setup does not bind the world (no device collective of the trainer
 * spans all ranks): a user of the world's bind it too. */
void td_dcomm_bind(td_comm *c, td_device *d);
/* Collective over `over` (the pipeline's communicator): when d uses its
 * library, each two neighbours r, r + 1 of it get a library communicator per
 * direction, and td_dcomm_isend / td_dcomm_recv between them go through it
 * from then on: a receive on the handle's stream (the compute stream: what
 * follows needs the data; the host does not wait), a send on a stream of its
 * own after an event marking the compute that wrote the buffer, its request
 * completing on the device as the collectives' do. One channel per direction
 * keeps each NCCL communicator's operations in one order (NCCL runs a
 * communicator's operations one after another), so 1F1B's sends one way and
 * receives the other never wait on each other. Messages pair by issue order
 * on a channel (the tag is not matched): the sender's sends and the receiver's
 * receives between two ranks must come in the same order, as 1F1B's do.
 * Without the library, or for ranks that are not neighbours, nothing changes. */
void td_dcomm_p2p_setup(td_comm *over, td_device *d);

void td_dcomm_all_reduce(td_comm *c, td_device *d, const void *send, void *recv, int64_t count,
                         td_dtype dt, td_reduce_op op);
void td_dcomm_all_gather(td_comm *c, td_device *d, const void *send, void *recv, int64_t count,
                         td_dtype dt);
/* recv (count x size elements) matters at root only; elsewhere it may be NULL. */
void td_dcomm_gather(td_comm *c, td_device *d, const void *send, void *recv, int64_t count,
                     td_dtype dt, int root);
void td_dcomm_recv(td_comm *c, td_device *d, void *buf, int64_t count, td_dtype dt, int src, int tag);

void td_dcomm_iall_gather(td_comm *c, td_device *d, const void *send, void *recv, int64_t count,
                          td_dtype dt, td_dcomm_request *r);
void td_dcomm_iall_to_all(td_comm *c, td_device *d, const void *send, void *recv, int64_t count,
                          td_dtype dt, td_dcomm_request *r);
void td_dcomm_isend(td_comm *c, td_device *d, const void *buf, int64_t count, td_dtype dt, int dest,
                    int tag, td_dcomm_request *r);

/* Frees the staging buffers kept for device d (none may be in flight), and the
 * library's communicators, stream and events: call before td_device_close(d). */
void td_dcomm_release(td_device *d);

void td_dcomm_wait(td_dcomm_request *r);
int td_dcomm_test(td_dcomm_request *r); /* 1 when complete (the result is in place) */

#endif
