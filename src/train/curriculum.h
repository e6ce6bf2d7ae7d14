/* DeepSpeed's (legacy) curriculum learning scheduler, as Megatron-DeepSpeed uses
 * it for a sequence-length warm-up: the DeepSpeed config's
 *   "curriculum_learning": {"enabled": true, "curriculum_type": "seqlen",
 *     "min_difficulty": 8, "max_difficulty": 1024, "schedule_type": "fixed_linear",
 *     "schedule_config": {"total_curriculum_step": 15000, "difficulty_step": 8}}
 * gives each training iteration a difficulty, and the iteration trains on the
 * first `difficulty` tokens of each sample (evaluation on whole samples).
 *
 * Difficulty at global step s (the iteration about to run, from 1), as
 * deepspeed/runtime/data_pipeline/curriculum_scheduler.py computes it:
 *  - fixed_discrete (difficulty[0..k], max_step[0..k-1]): difficulty[i] for the
 *    first i with s <= max_step[i], difficulty[k] beyond max_step[k-1];
 *  - fixed_root (total_curriculum_step T, difficulty_step d, root_degree r):
 *    x = floor((s / T)^(1/r) (max - min) + min), x -= x mod d, min(x, max);
 *  - fixed_linear: fixed_root with r = 1.
 * The scheduler is stateful as DeepSpeed's update_difficulty: once the
 * difficulty reaches max_difficulty it stays there. */
#ifndef TD_TRAIN_CURRICULUM_H
#define TD_TRAIN_CURRICULUM_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  TD_CURRICULUM_FIXED_DISCRETE,
  TD_CURRICULUM_FIXED_ROOT,
  TD_CURRICULUM_FIXED_LINEAR
} td_curriculum_schedule;

#define TD_CURRICULUM_MAX_LIST 64

typedef struct {
  int enabled;
  td_curriculum_schedule schedule;
  int64_t min_difficulty, max_difficulty, current;
  int64_t total_step, difficulty_step; /* fixed_root, fixed_linear */
  double root_degree;                  /* fixed_root */
  int64_t difficulty[TD_CURRICULUM_MAX_LIST], max_step[TD_CURRICULUM_MAX_LIST]; /* discrete */
  int n_difficulty, n_max_step;
} td_curriculum;

/* DeepSpeed's get_difficulty at global step s (stateless). */
int64_t td_curriculum_difficulty(const td_curriculum *c, int64_t step);
/* DeepSpeed's update_difficulty: the difficulty of step s, kept at max once reached. */
int64_t td_curriculum_update(td_curriculum *c, int64_t step);
/* The state after steps 1..step (a resumed run replays them); current = min at 0. */
void td_curriculum_replay(td_curriculum *c, int64_t step);

/* The tokens per sample an iteration trains on: the difficulty, at most the
 * sequence length (a difficulty beyond it trains on whole samples). */
static inline int64_t td_curriculum_seqlen(int64_t difficulty, int64_t seq_length) {
  return difficulty < seq_length ? difficulty : seq_length;
}

/* Before training: every difficulty that steps 1..train_iters give makes a usable
 * sequence length (>= 1, and a multiple of `multiple`: the TP size under
 * sequence parallelism); 0, or -1 with err naming the first step that does not. */
int td_curriculum_check(const td_curriculum *c, int64_t train_iters, int64_t seq_length,
                        int64_t multiple, char *err, size_t errlen);

#endif
