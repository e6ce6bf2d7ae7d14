/* Collectives and point-to-point on device memory: comm.h's operations whose
 * buffers belong to a td_device, with comm.h's semantics (counts, in-place rules,
 * ordering).
 *
 * How the bytes move depends on the device:
 *  - memory the host can address (TD_DEVICE_HOST_MEMORY: the CPU backend): the
 *    call goes straight to td_comm, nothing added;
 *  - other memory (a GPU, the sealed test device): staged through host memory,
 *    device-to-host, MPI on the host copy, host-to-device (issue #11's
 *    correctness path; NCCL on device pointers replaces it for CUDA). The
 *    staging is the device's pinned host memory (host_alloc), taken from a pool
 *    for the operation and kept for the next one; td_dcomm_release frees a
 *    device's share before the device closes;
 *  - a communicator of one rank (or NULL) moves nothing between ranks: the
 *    result is a device copy, or nothing when in place.
 * The results are the same bits either way: MPI reduces the same values in the
 * same order whether they sit in device memory or in a host copy. */
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
  void *stage;       /* host staging (NULL: none) */
  void *result;      /* device buffer the staged result is copied to, or NULL */
  size_t result_off; /* where in stage the result starts, bytes */
  size_t result_bytes;
  int active;        /* an MPI request is in flight */
} td_dcomm_request;

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

/* Frees the staging buffers kept for device d (none may be in flight): call
 * before td_device_close(d). */
void td_dcomm_release(td_device *d);

void td_dcomm_wait(td_dcomm_request *r);
int td_dcomm_test(td_dcomm_request *r); /* 1 when complete (the result is in place) */

#endif
