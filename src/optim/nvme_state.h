/* ZeRO-Infinity's optimizer offload to NVMe: the Adam moments of one rank's
 * shard live in a file and stream through each step in chunks: an I/O thread
 * reads the next chunk and writes the previous one back while the calling
 * thread updates the current one with ops->adamw in device memory (staged
 * through host buffers unless the device is the CPU). Test hook:
 * TRIDENT_TEST_NVME_FAIL_AFTER=N (read at open) makes the N-th chunk write of
 * the state's steps fail with EIO. */
#ifndef TD_OPTIM_NVME_STATE_H
#define TD_OPTIM_NVME_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "optim/adamw.h"

/* The trainer's chunk: 1M elements, 4 MiB of m and of v per buffer set (24 MiB
 * in all: large reads, little memory). */
#define TD_NVME_CHUNK ((int64_t)1 << 20)

/* Create dir/<stem>.adam holding exp_avg then exp_avg_sq, numel fp32 each, all
 * zero (replacing any old one), and three buffer sets of 2 x chunk_elems floats
 * (chunk_elems > 0; capped at numel) in device memory. dir must exist. NULL with
 * err (naming dir, or the path and the errno text) on failure. */
td_nvme_state *td_nvme_state_open(td_device *dev, const char *dir, const char *stem, int64_t numel,
                                  int64_t chunk_elems, char *err, size_t errlen);
/* Remove the file and free the buffers. */
void td_nvme_state_close(td_nvme_state *s);

/* o's update (o->runs, o->step already advanced, hyper-parameters from o) with m
 * and v streamed from the file: the same bits as td_adamw_step in memory. An
 * I/O error (in either thread) stops the run (td_fail) naming the path, the
 * operation and the errno text. */
void td_nvme_state_step(td_nvme_state *s, const td_adamw *o, float *params, const float *grads,
                        float lr, float grad_scale);

/* Elements [offset, offset + n) of exp_avg (which 0) or exp_avg_sq (1) to or
 * from host memory, synchronously, between steps (never during one). An I/O
 * error stops the run (td_fail) naming the path and the errno text. */
void td_nvme_state_read(td_nvme_state *s, int which, int64_t offset, int64_t n, float *host);
void td_nvme_state_write(td_nvme_state *s, int which, int64_t offset, int64_t n, const float *host);

#endif
