/* DeepSpeed's legacy curriculum scheduler (train/curriculum.h). The expected
 * difficulties were computed in Python with the formula DeepSpeed's
 * curriculum_scheduler.py uses, (s / T)^(1/r) (max - min) + min, floored, less
 * its remainder by difficulty_step, at most max (math.floor, Python's % and **):
 *   fixed_linear  min 8  max 64   T 10  step 8, s = 1..12
 *   fixed_root    min 16 max 1024 T 100 step 16 root 2, s = 1 2 5 10 25 50 99 100 101 1000
 *   fixed_root    min 8  max 200  T 7   step 8  root 3, s = 1..8
 * and fixed_discrete's rule written out by hand. */
#include <string.h>

#include "check.h"
#include "train/curriculum.h"

static td_curriculum root_schedule(td_curriculum_schedule kind, int64_t min, int64_t max,
                                   int64_t total, int64_t step, double degree) {
  return (td_curriculum){.enabled = 1, .schedule = kind, .min_difficulty = min,
                         .max_difficulty = max, .current = min, .total_step = total,
                         .difficulty_step = step, .root_degree = degree};
}

static void test_fixed_linear(void) {
  static const int64_t want[12] = {8, 16, 24, 24, 32, 40, 40, 48, 56, 64, 64, 64};
  td_curriculum c = root_schedule(TD_CURRICULUM_FIXED_LINEAR, 8, 64, 10, 8, 0);
  int same = 1;
  for (int s = 1; s <= 12; s++) same &= td_curriculum_difficulty(&c, s) == want[s - 1];
  CHECK(same, "fixed_linear 8..64 over 10 steps of 8: DeepSpeed's difficulties");
}

static void test_fixed_root(void) {
  static const int64_t steps[10] = {1, 2, 5, 10, 25, 50, 99, 100, 101, 1000};
  static const int64_t want[10] = {112, 144, 240, 320, 512, 720, 1008, 1024, 1024, 1024};
  td_curriculum c = root_schedule(TD_CURRICULUM_FIXED_ROOT, 16, 1024, 100, 16, 2);
  int same = 1;
  for (int i = 0; i < 10; i++) same &= td_curriculum_difficulty(&c, steps[i]) == want[i];
  CHECK(same, "fixed_root (square root) 16..1024 over 100 steps of 16");
  static const int64_t want3[8] = {104, 128, 152, 160, 176, 184, 200, 200};
  td_curriculum k = root_schedule(TD_CURRICULUM_FIXED_ROOT, 8, 200, 7, 8, 3);
  same = 1;
  for (int s = 1; s <= 8; s++) same &= td_curriculum_difficulty(&k, s) == want3[s - 1];
  CHECK(same, "fixed_root (cube root) 8..200 over 7 steps of 8, max not a multiple of the step");
}

/* difficulty [8, 64, 32], max_step [2, 4]: 8 up to step 2, 64 up to 4, then 32;
 * update_difficulty stops changing once the difficulty is max_difficulty (64). */
static void test_fixed_discrete_and_state(void) {
  td_curriculum c = {.enabled = 1, .schedule = TD_CURRICULUM_FIXED_DISCRETE, .min_difficulty = 8,
                     .max_difficulty = 64, .current = 8, .difficulty = {8, 64, 32},
                     .max_step = {2, 4}, .n_difficulty = 3, .n_max_step = 2};
  static const int64_t get[6] = {8, 8, 64, 64, 32, 32}, upd[6] = {8, 8, 64, 64, 64, 64};
  int same_get = 1, same_upd = 1;
  for (int s = 1; s <= 6; s++) {
    same_get &= td_curriculum_difficulty(&c, s) == get[s - 1];
    same_upd &= td_curriculum_update(&c, s) == upd[s - 1];
  }
  CHECK(same_get, "fixed_discrete: the difficulty of the first max_step at or after the step, "
                  "the last one beyond");
  CHECK(same_upd, "update_difficulty keeps max_difficulty once reached (32 never comes back)");
  td_curriculum r = c;
  td_curriculum_replay(&r, 0);
  CHECK(r.current == 8, "replay to step 0: min_difficulty");
  td_curriculum_replay(&r, 5);
  CHECK(r.current == 64, "replay to step 5: the state of a run that took steps 1..5 (%lld)",
        (long long)r.current);
}

static void test_check(void) {
  char err[512] = "";
  td_curriculum ok = root_schedule(TD_CURRICULUM_FIXED_LINEAR, 8, 64, 10, 8, 0);
  CHECK(td_curriculum_check(&ok, 100, 64, 8, err, sizeof err) == 0, "8..64 by 8 with TP 8: %s", err);
  td_curriculum zero = root_schedule(TD_CURRICULUM_FIXED_LINEAR, 4, 64, 100, 8, 0); /* 4.6 -> 0 */
  CHECK(td_curriculum_check(&zero, 100, 64, 1, err, sizeof err) == -1 &&
            strstr(err, "iteration 1 would train on 0 tokens") && strstr(err, "min_difficulty"),
        "min_difficulty 4 with difficulty_step 8 gives 0 tokens at iteration 1: %s", err);
  CHECK(td_curriculum_check(&ok, 100, 64, 16, err, sizeof err) == -1 &&
            strstr(err, "iteration 1 would train on 8 tokens") &&
            strstr(err, "tensor-parallel size"),
        "8 tokens with sequence parallelism over 16 ranks: %s", err);
  /* 16, 32, 48, 64 by steps 1..4; with --seq-length 40 step 3 trains on 40 tokens */
  td_curriculum cap = root_schedule(TD_CURRICULUM_FIXED_LINEAR, 16, 64, 4, 16, 0);
  CHECK(td_curriculum_check(&cap, 100, 40, 16, err, sizeof err) == -1 &&
            strstr(err, "iteration 3 would train on 40 tokens"),
        "a difficulty beyond --seq-length trains whole samples, and those are checked: %s", err);
  CHECK(td_curriculum_seqlen(4096, 48) == 48 && td_curriculum_seqlen(16, 48) == 16,
        "tokens per sample: the difficulty, at most the sequence length");
}

int main(void) {
  test_fixed_linear();
  test_fixed_root();
  test_fixed_discrete_and_state();
  test_check();
  return tst_finish();
}
