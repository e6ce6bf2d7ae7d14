#include "train/curriculum.h"

#include <math.h>
#include <stdio.h>

static int64_t fixed_discrete(const td_curriculum *c, int64_t step) {
  if (step > c->max_step[c->n_max_step - 1]) return c->difficulty[c->n_difficulty - 1];
  for (int i = 0; i < c->n_max_step; i++)
    if (step <= c->max_step[i]) return c->difficulty[i];
  return c->difficulty[c->n_difficulty - 1]; /* not reached */
}

static int64_t fixed_root(const td_curriculum *c, int64_t step, double degree) {
  double x = pow((double)step / (double)c->total_step, 1.0 / degree);
  int64_t d = (int64_t)floor(x * (double)(c->max_difficulty - c->min_difficulty) +
                             (double)c->min_difficulty);
  d -= d % c->difficulty_step;
  return d < c->max_difficulty ? d : c->max_difficulty;
}

int64_t td_curriculum_difficulty(const td_curriculum *c, int64_t step) {
  switch (c->schedule) {
  case TD_CURRICULUM_FIXED_DISCRETE: return fixed_discrete(c, step);
  case TD_CURRICULUM_FIXED_ROOT: return fixed_root(c, step, c->root_degree);
  case TD_CURRICULUM_FIXED_LINEAR: return fixed_root(c, step, 1.0);
  }
  return c->max_difficulty;
}

int64_t td_curriculum_update(td_curriculum *c, int64_t step) {
  if (c->current < c->max_difficulty) c->current = td_curriculum_difficulty(c, step);
  return c->current;
}

/* The last step after which the schedule can no longer change. */
static int64_t settled_after(const td_curriculum *c) {
  return c->schedule == TD_CURRICULUM_FIXED_DISCRETE ? c->max_step[c->n_max_step - 1] + 1
                                                     : c->total_step;
}

void td_curriculum_replay(td_curriculum *c, int64_t step) {
  c->current = c->min_difficulty;
  for (int64_t s = 1; s <= step && c->current < c->max_difficulty; s++) td_curriculum_update(c, s);
}

int td_curriculum_check(const td_curriculum *c, int64_t train_iters, int64_t seq_length,
                        int64_t multiple, char *err, size_t errlen) {
  td_curriculum k = *c;
  k.current = k.min_difficulty;
  int64_t last = train_iters < settled_after(c) + 1 ? train_iters : settled_after(c) + 1;
  for (int64_t s = 1; s <= last; s++) {
    int64_t d = td_curriculum_update(&k, s);
    d = td_curriculum_seqlen(d, seq_length);
    if (d >= 1 && d % multiple == 0) continue;
    snprintf(err, errlen,
             "curriculum_learning: iteration %lld would train on %lld tokens per sample, which %s",
             (long long)s, (long long)d,
             d < 1 ? "is not a sequence length (check min_difficulty against difficulty_step)"
                   : "is not a multiple of the tensor-parallel size (sequence parallelism splits "
                     "each sample's tokens over it)");
    return -1;
  }
  return 0;
}
