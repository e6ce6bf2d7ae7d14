/* Rank topology without MPI: for every factorisation of 8 ranks, every group of
 * every kind equals the one built here from the rank formula
 *   rank = pp_rank * (dp * tp) + dp_rank * tp + tp_rank
 * by nested loops, and the groups of a kind partition the ranks; Megatron's own
 * example (16 ranks, tp 2, pp 4, from parallel_state.py's docstring) literally;
 * sizes that do not divide are errors naming the flags. */
#include <string.h>

#include "check.h"
#include "comm/topology.h"

enum { MAXR = 16 };

/* Expected members of rank (t, d, p)'s group of kind k, in Megatron's order (the
 * varying indices with tp fastest, then pp), computed from the formula. */
static int expected_group(int tp, int dp, int pp, td_group_kind k, int t, int d, int p, int *out) {
#define R(t_, d_, p_) ((p_) * (dp * tp) + (d_) * tp + (t_))
  int n = 0;
  switch (k) {
  case TD_GROUP_TP:
    for (int t2 = 0; t2 < tp; t2++) out[n++] = R(t2, d, p);
    break;
  case TD_GROUP_DP:
    for (int d2 = 0; d2 < dp; d2++) out[n++] = R(t, d2, p);
    break;
  case TD_GROUP_PP:
    for (int p2 = 0; p2 < pp; p2++) out[n++] = R(t, d, p2);
    break;
  case TD_GROUP_MP:
    for (int p2 = 0; p2 < pp; p2++)
      for (int t2 = 0; t2 < tp; t2++) out[n++] = R(t2, d, p2);
    break;
  case TD_GROUP_EMBEDDING:
    if (pp == 1) {
      out[n++] = R(t, d, 0);
    } else if (p == 0 || p == pp - 1) {
      out[n++] = R(t, d, 0);
      out[n++] = R(t, d, pp - 1);
    }
    break;
  }
  return n;
#undef R
}

static void check_layout(int world, int tp, int pp) {
  td_layout l;
  char err[256] = "";
  int dp = world / (tp * pp);
  CHECK(td_layout_init(&l, world, tp, pp, err, sizeof err) == 0 && l.dp == dp,
        "world %d tp %d pp %d: dp %d %s", world, tp, pp, dp, err);
  int bad_coord = 0, bad_group = 0, bad_partition = 0;
  for (int p = 0; p < pp; p++)
    for (int d = 0; d < dp; d++)
      for (int t = 0; t < tp; t++) {
        int rank = p * (dp * tp) + d * tp + t;
        td_rank_coord c = td_layout_coord(&l, rank);
        bad_coord += c.tp != t || c.dp != d || c.pp != p || td_layout_rank(&l, c) != rank;
        for (int k = 0; k < TD_GROUP_KINDS; k++) {
          int want[MAXR], got[MAXR], pos;
          int n = expected_group(tp, dp, pp, (td_group_kind)k, t, d, p, want);
          int g = td_layout_group_of(&l, (td_group_kind)k, rank, &pos);
          if (n == 0) {
            bad_group += g != -1 || pos != -1;
            continue;
          }
          if (g < 0 || td_layout_group_size(&l, (td_group_kind)k) != n) {
            bad_group++;
            continue;
          }
          td_layout_group(&l, (td_group_kind)k, g, got);
          bad_group += memcmp(got, want, (size_t)n * sizeof *got) != 0 || got[pos] != rank;
        }
      }
  /* Every kind but EMBEDDING partitions the ranks; EMBEDDING covers the first and last stage. */
  for (int k = 0; k < TD_GROUP_KINDS; k++) {
    int seen[MAXR] = {0}, members[MAXR];
    td_group_kind kind = (td_group_kind)k;
    int ng = td_layout_num_groups(&l, kind), n = td_layout_group_size(&l, kind);
    for (int g = 0; g < ng; g++) {
      td_layout_group(&l, kind, g, members);
      for (int i = 0; i < n; i++) seen[members[i]]++;
    }
    for (int r = 0; r < world; r++) {
      int stage = r / (tp * dp);
      int want = k != TD_GROUP_EMBEDDING || stage == 0 || stage == pp - 1;
      bad_partition += seen[r] != want;
    }
  }
  CHECK(!bad_coord && !bad_group && !bad_partition,
        "world %d = tp %d x dp %d x pp %d: coordinates (%d bad), groups (%d bad), partition "
        "(%d bad)",
        world, tp, dp, pp, bad_coord, bad_group, bad_partition);
}

static int group_equals(const td_layout *l, td_group_kind k, const int *want, int ng, int n) {
  int got[MAXR];
  if (td_layout_num_groups(l, k) != ng || td_layout_group_size(l, k) != n) return 0;
  for (int g = 0; g < ng; g++) {
    td_layout_group(l, k, g, got);
    if (memcmp(got, want + g * n, (size_t)n * sizeof *got)) return 0;
  }
  return 1;
}

/* parallel_state.initialize_model_parallel's docstring: 16 GPUs, tp 2, pp 4. */
static void check_megatron_example(void) {
  td_layout l;
  CHECK(td_layout_init(&l, 16, 2, 4, NULL, 0) == 0 && l.dp == 2, "16 ranks, tp 2, pp 4: dp 2");
  static const int dp[] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
  static const int tp[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  static const int pp[] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};
  static const int emb[] = {0, 12, 1, 13, 2, 14, 3, 15};
  CHECK(group_equals(&l, TD_GROUP_DP, dp, 8, 2),
        "Megatron's 8 data-parallel groups [g0, g2], ...");
  CHECK(group_equals(&l, TD_GROUP_TP, tp, 8, 2),
        "Megatron's 8 tensor-parallel groups [g0, g1], ...");
  CHECK(group_equals(&l, TD_GROUP_PP, pp, 4, 4),
        "Megatron's 4 pipeline groups [g0, g4, g8, g12], ...");
  CHECK(group_equals(&l, TD_GROUP_EMBEDDING, emb, 4, 2), "embedding groups [g0, g12], ...");
}

static void check_errors(void) {
  td_layout l;
  char err[256] = "";
  CHECK(td_layout_init(&l, 8, 3, 1, err, sizeof err) == -1 && strstr(err, "not divisible") &&
            strstr(err, "--tensor-model-parallel-size 3"),
        "8 ranks, tp 3: %s", err);
  CHECK(td_layout_init(&l, 6, 2, 2, err, sizeof err) == -1 && strstr(err, "world size 6") &&
            strstr(err, "--pipeline-model-parallel-size 2"),
        "6 ranks, tp 2, pp 2: %s", err);
  CHECK(td_layout_init(&l, 8, 0, 1, err, sizeof err) == -1 && strstr(err, "expected >= 1"),
        "tp 0: %s", err);
}

int main(void) {
  for (int tp = 1; tp <= 8; tp *= 2)
    for (int pp = 1; tp * pp <= 8; pp *= 2) check_layout(8, tp, pp);
  check_layout(1, 1, 1);
  check_megatron_example();
  check_errors();
  return tst_finish();
}
