/* The communication watchdog (Megatron's --distributed-timeout-minutes, NCCL's
 * watchdog): MPI has no timeout, so a collective whose peer died without MPI
 * noticing (a host or the network between hosts gone: no process exit, no TCP
 * reset) would block forever; so would the host waiting for a GPU stream whose
 * NCCL kernel waits for that peer. Every blocking MPI call of src/comm, and
 * every host wait for a CUDA stream or event, runs between td_watchdog_enter
 * and td_watchdog_leave; a thread checks four times a second and, when a call
 * has been blocked longer than the timeout, prints which call on which rank
 * and ends the process (exit 1), which makes mpirun end the job. Unstarted (one
 * rank), enter and leave only store a timestamp.
 *
 * The main thread only stores a timestamp per call (two relaxed atomic stores):
 * nothing measurable next to an MPI call. */
#ifndef TD_BASE_WATCHDOG_H
#define TD_BASE_WATCHDOG_H

/* Start watching (timeout_s > 0; once per process, later calls change the
 * timeout); rank and size name this rank in the message. */
void td_watchdog_start(double timeout_s, int rank, int size);
void td_watchdog_stop(void);

/* A blocking call named `what` (a string literal) starts / ends. */
void td_watchdog_enter(const char *what);
void td_watchdog_leave(void);

#endif
