#include "train/timers.h"

#include <stdio.h>
#include <string.h>

#include "base/clock.h"

static const struct {
  const char *name;
  int level;
} k_timers[TD_TIMERS] = {
    [TD_TIMER_FORWARD_BACKWARD] = {"forward-backward", 1},
    [TD_TIMER_FORWARD_COMPUTE] = {"forward-compute", 2},
    [TD_TIMER_BACKWARD_COMPUTE] = {"backward-compute", 2},
    [TD_TIMER_BATCH_GENERATOR] = {"batch-generator", 2},
    [TD_TIMER_ALL_GRADS_SYNC] = {"all-grads-sync", 1},
    [TD_TIMER_PARAMS_ALL_GATHER] = {"params-all-gather", 1},
    [TD_TIMER_OPTIMIZER_CLIP_MAIN_GRAD] = {"optimizer-clip-main-grad", 1},
    [TD_TIMER_OPTIMIZER_INNER_STEP] = {"optimizer-inner-step", 1},
    [TD_TIMER_OPTIMIZER_COPY_MAIN_TO_MODEL_PARAMS] = {"optimizer-copy-main-to-model-params", 1},
    [TD_TIMER_OPTIMIZER] = {"optimizer", 1},
};

void td_timers_init(td_timers *t, int level, td_device *dev) {
  memset(t, 0, sizeof *t);
  t->level = level;
  t->dev = dev;
}

/* As Megatron's timers (torch.cuda.synchronize at start and stop): a device that
 * runs ops asynchronously has finished the timed work when the clock is read. */
static void wait_device(const td_timers *t) {
  if (t->dev) t->dev->ops->synchronize(t->dev);
}

static int active(const td_timers *t, td_timer_id id) { return k_timers[id].level <= t->level; }

void td_timers_start(td_timers *t, td_timer_id id) {
  if (!active(t, id)) return;
  wait_device(t);
  t->started[id] = td_now_seconds();
}

void td_timers_stop(td_timers *t, td_timer_id id) {
  if (!active(t, id) || t->started[id] == 0) return;
  wait_device(t);
  t->elapsed[id] += td_now_seconds() - t->started[id];
  t->started[id] = 0;
  t->ran[id] = 1;
}

const char *td_timer_name(td_timer_id id) { return k_timers[id].name; }

void td_timers_collect(td_timers *t, td_comm *comm, double iterations, td_timer_stats *s) {
  memset(s, 0, sizeof *s);
  if (t->level < 1) return;
  /* a rank where a timer did not run must not make its minimum 0; one that ran
   * on no rank keeps NOT_RUN */
  const double NOT_RUN = 1e300;
  for (int i = 0; i < TD_TIMERS; i++) s->min[i] = t->ran[i] ? t->elapsed[i] : NOT_RUN;
  td_comm_all_reduce(comm, s->min, s->min, TD_TIMERS, TD_F64, TD_OP_MIN);
  td_comm_all_reduce(comm, t->elapsed, s->max, TD_TIMERS, TD_F64, TD_OP_MAX);
  memset(t->elapsed, 0, sizeof t->elapsed);
  memset(t->ran, 0, sizeof t->ran);
  for (int i = 0; i < TD_TIMERS; i++) {
    s->ran[i] = s->min[i] != NOT_RUN;
    s->min[i] = s->ran[i] ? s->min[i] / iterations : 0;
    s->max[i] /= iterations;
  }
}

void td_timers_format(const td_timer_stats *s, char *out, size_t n) {
  size_t used = 0;
  out[0] = 0;
  for (int i = 0; i < TD_TIMERS && used < n; i++) {
    if (!s->ran[i]) continue;
    if (!used) used += (size_t)snprintf(out, n, "(min, max) time across ranks (ms):");
    char label[64];
    int len = snprintf(label, sizeof label, "%s ", k_timers[i].name);
    while (len < 48) label[len++] = '.'; /* Megatron: (name + ' ').ljust(48, '.') */
    label[len] = 0;
    if (used < n)
      used += (size_t)snprintf(out + used, n - used, "\n    %s: (%.2f, %.2f)", label,
                               1e3 * s->min[i], 1e3 * s->max[i]);
  }
}
