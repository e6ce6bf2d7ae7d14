/* Communicator over MPI: the world, sub-groups (split), collectives and
 * point-to-point, blocking and non-blocking, for fp32, bf16, fp16, int32, int64 and fp64 (for statistics).
 *
 * Launch. Under a launcher (mpirun / mpiexec, srun with PMI or PMIx: the
 * environment has OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK or PMI_SIZE)
 * td_comm_init() calls MPI_Init_thread(MPI_THREAD_FUNNELED). Without one it does
 * not touch MPI at all: the world is one rank and every operation on a
 * communicator of size 1 is a local copy (or nothing), so `trident train` needs
 * no launcher and pays nothing (an MPI singleton init would fork a daemon).
 * Communicators of size 1 under mpirun (tp=1: the TP group) take the same
 * local path.
 *
 * Threads. Only the thread that called td_comm_init() calls MPI (FUNNELED);
 * OpenMP regions around it are fine.
 *
 * Errors. Communicators return MPI errors (MPI_ERRORS_RETURN) and every call is
 * checked: a failure is td_fail() naming the MPI function, the world rank and
 * MPI's error string. With more than one rank, td_comm_init() installs an exit
 * hook that prints the rank and calls MPI_Abort(MPI_COMM_WORLD), so a td_fail or
 * TD_CHECK on one rank ends every rank instead of leaving them in a collective.
 *
 * Reductions of bf16 / fp16 accumulate in fp32: the input is converted to an
 * fp32 staging buffer, reduced by MPI as MPI_FLOAT, and converted back (round to
 * nearest even) once at the end. So a sum is as exact as an fp32 sum (MPI's
 * algorithm still rounds to fp32 at each hop of its tree or ring, as for fp32
 * data), and only the final result is rounded to 16 bits; a user-defined MPI_Op
 * on 16-bit data would round to 16 bits at every hop. The price: the staging
 * buffer (4 bytes per element, 4 x count x size for reduce-scatter) is
 * allocated per call and the reduction moves twice the bytes. Max and min go the
 * same way (exact). Other collectives move 16-bit data as it is.
 *
 * Buffers are host memory; counts are elements; `count` of the all-gather,
 * gather, scatter, all-to-all and reduce-scatter is the count per rank (the
 * concatenated buffer has count x size elements, rank r's block at r x count).
 * In place: all_reduce and reduce with send == recv; all_gather with send equal
 * to recv's own block (recv + rank x count elements). Other collectives need
 * distinct buffers. */
#ifndef TD_COMM_COMM_H
#define TD_COMM_COMM_H

#include <mpi.h>
#include <stdint.h>

#include "base/dtype.h"

typedef struct td_comm td_comm;

#include "comm/reduce_op.h"

/* The world: MPI_Init_thread under a launcher (see above), the exit hook, and the
 * threads per rank (omp_set_num_threads(td_comm_default_threads()) unless
 * OMP_NUM_THREADS is set). Call first thing in main; returns the world (a later
 * call just returns it). */
td_comm *td_comm_init(void);
/* MPI_Finalize (when MPI was initialised); a second call does nothing. */
void td_comm_finalize(void);
td_comm *td_comm_world(void); /* after td_comm_init */
/* A blocking call that has not completed after `seconds` ends its rank with a
 * message naming the call (src/base/watchdog.h; Megatron's
 * --distributed-timeout-minutes, default 10 minutes, set by td_comm_init). */
#define TD_COMM_DEFAULT_TIMEOUT_S 600.0
void td_comm_set_timeout(double seconds);
int td_comm_mpi_active(void); /* 1 when MPI was initialised */

int td_comm_rank(const td_comm *c);
int td_comm_size(const td_comm *c);
/* Ranks of the world on this node (MPI_COMM_TYPE_SHARED) and this rank among them. */
int td_comm_local_size(void);
int td_comm_local_rank(void);
/* Collective over c: how many of its ranks on this rank's host (same host
 * name) give the same key, this one included. With the device index as key:
 * the ranks sharing this rank's GPU. */
int td_comm_same_on_host(td_comm *c, int64_t key);
/* Threads per rank: OMP_NUM_THREADS when set; otherwise the CPUs of the node
 * divided by the ranks on it, and at most the CPUs this rank is bound to
 * (mpirun --bind-to core gives each rank one), at least 1. */
int td_comm_default_threads(void);

/* Collective over c: ranks giving the same color form a new communicator, ordered
 * by key (then by rank in c). color < 0: this rank joins none and gets NULL. */
td_comm *td_comm_split(td_comm *c, int color, int key);
void td_comm_free(td_comm *c); /* NULL is fine; never the world */

/* One pointer a layer above may hang on a communicator (device_comm.c: the
 * device collective library's communicator over the same ranks), and what
 * td_comm_free calls with it first (NULL: nothing). Attaching again replaces
 * both; the world's attachment is never detached by td_comm_free. */
void td_comm_attach(td_comm *c, void *attached, void (*detach)(void *attached));
void *td_comm_attached(const td_comm *c);

/* A non-blocking operation in flight. Caller-owned storage; every request that
 * was started must be completed with td_comm_wait or a td_comm_test that
 * returned 1. MPI progresses it inside MPI calls (test/wait): a caller that
 * overlaps communication with compute should test now and then. */
typedef struct {
  MPI_Request mpi;
  float *stage;  /* fp32 staging of a 16-bit reduction, or NULL */
  void *out;     /* ...converted back into out[0..count) on completion */
  int64_t count;
  td_dtype dtype;
  const td_comm *comm;
} td_comm_request;

void td_comm_wait(td_comm_request *r);
int td_comm_test(td_comm_request *r); /* 1 when complete (then r is finished) */
void td_comm_wait_all(td_comm_request *r, int n);

/* Blocking collectives (every rank of c calls them, same count, dtype, op, root). */
void td_comm_barrier(td_comm *c);
void td_comm_broadcast(td_comm *c, void *buf, int64_t count, td_dtype dt, int root);
void td_comm_scatter(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                     int root);
void td_comm_gather(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                    int root);
void td_comm_all_gather(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt);
void td_comm_reduce(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                    td_reduce_op op, int root);
void td_comm_all_reduce(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                        td_reduce_op op);
void td_comm_reduce_scatter(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                            td_reduce_op op);
void td_comm_all_to_all(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt);
void td_comm_send(td_comm *c, const void *buf, int64_t count, td_dtype dt, int dest, int tag);
void td_comm_recv(td_comm *c, void *buf, int64_t count, td_dtype dt, int src, int tag);

/* Non-blocking forms: same arguments, the buffers must stay untouched until the
 * request completes. */
void td_comm_ibarrier(td_comm *c, td_comm_request *r);
void td_comm_ibroadcast(td_comm *c, void *buf, int64_t count, td_dtype dt, int root,
                        td_comm_request *r);
void td_comm_iscatter(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                      int root, td_comm_request *r);
void td_comm_igather(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                     int root, td_comm_request *r);
void td_comm_iall_gather(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                         td_comm_request *r);
void td_comm_ireduce(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                     td_reduce_op op, int root, td_comm_request *r);
void td_comm_iall_reduce(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                         td_reduce_op op, td_comm_request *r);
void td_comm_ireduce_scatter(td_comm *c, const void *send, void *recv, int64_t count,
                             td_dtype dt, td_reduce_op op, td_comm_request *r);
void td_comm_iall_to_all(td_comm *c, const void *send, void *recv, int64_t count, td_dtype dt,
                         td_comm_request *r);
void td_comm_isend(td_comm *c, const void *buf, int64_t count, td_dtype dt, int dest, int tag,
                   td_comm_request *r);
void td_comm_irecv(td_comm *c, void *buf, int64_t count, td_dtype dt, int src, int tag,
                   td_comm_request *r);

/* The MPI communicator underneath (MPI_COMM_NULL when MPI is not active), for
 * measuring against raw MPI calls. */
MPI_Comm td_comm_mpi(const td_comm *c);

#endif
