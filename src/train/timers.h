/* Megatron's training timers (--timing-log-level): named wall-clock
 * accumulators, each with the log level Megatron gives it, printed after the
 * iteration line as the minimum and maximum over ranks of the time per
 * iteration (Megatron's default --timing-log-option minmax):
 *
 *   (min, max) time across ranks (ms):
 *       forward-backward ...............................: (1234.56, 1240.01)
 *       optimizer ......................................: (52.30, 52.38)
 *
 * Level 1: forward-backward (data, forward and backward of every micro-batch
 * and the gradient all-reduce), all-grads-sync (waiting for the data-parallel
 * buckets, the sequence-parallel gradient sums), params-all-gather (ZeRO's),
 * the optimizer and its parts.
 * Level 2 adds batch-generator, forward-compute and backward-compute. A timer
 * that did not run on any rank is left out, as Megatron does. */
#ifndef TD_TRAIN_TIMERS_H
#define TD_TRAIN_TIMERS_H

#include <stddef.h>

#include "comm/comm.h"
#include "device/device.h"

/* In Megatron's printing order (training.py's timers_to_log). */
typedef enum {
  TD_TIMER_FORWARD_BACKWARD,
  TD_TIMER_FORWARD_COMPUTE,
  TD_TIMER_BACKWARD_COMPUTE,
  TD_TIMER_BATCH_GENERATOR,
  TD_TIMER_ALL_GRADS_SYNC,
  TD_TIMER_PARAMS_ALL_GATHER,
  TD_TIMER_OPTIMIZER_CLIP_MAIN_GRAD,
  TD_TIMER_OPTIMIZER_INNER_STEP,
  TD_TIMER_OPTIMIZER_COPY_MAIN_TO_MODEL_PARAMS,
  TD_TIMER_OPTIMIZER,
  TD_TIMERS
} td_timer_id;

typedef struct {
  int level;                   /* --timing-log-level: timers above it do not run */
  double elapsed[TD_TIMERS];   /* seconds since the last td_timers_format */
  double started[TD_TIMERS];   /* td_now_seconds() of a running timer, else 0 */
  int ran[TD_TIMERS];          /* stopped at least once since the last format */
  td_device *dev;              /* synchronized at each start and stop (NULL: none) */
} td_timers;

void td_timers_init(td_timers *t, int level, td_device *dev);
/* Start / stop one timer (nothing when its level is above t->level). */
void td_timers_start(td_timers *t, td_timer_id id);
void td_timers_stop(td_timers *t, td_timer_id id);

/* Per iteration, over ranks: seconds; ran: the timer ran on some rank. */
typedef struct {
  double min[TD_TIMERS], max[TD_TIMERS];
  int ran[TD_TIMERS];
} td_timer_stats;

/* Collective over comm (every rank calls it): each timer's time divided by
 * iterations, its min and max over ranks; the accumulators restart. Nothing
 * (and no communication) below level 1. */
void td_timers_collect(td_timers *t, td_comm *comm, double iterations, td_timer_stats *s);

/* The block above from s (empty when no timer ran). */
void td_timers_format(const td_timer_stats *s, char *out, size_t n);

/* Megatron's name of a timer ("forward-backward"). */
const char *td_timer_name(td_timer_id id);

#endif
