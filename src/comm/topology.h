/* Rank topology: Megatron-LM's parallel_state with context and expert parallel
 * sizes of 1.
 *
 * A world of W ranks with tensor-parallel size tp and pipeline-parallel size pp
 * has data-parallel size dp = W / (tp x pp). Ranks are laid out in Megatron's
 * default order "tp-cp-ep-dp-pp" (RankGenerator), here tp-dp-pp: tensor fastest,
 * then data, then pipeline:
 *
 *   rank = pp_rank x (dp x tp) + dp_rank x tp + tp_rank
 *
 * so the ranks of a TP group are neighbours (one node, fast links) and the
 * stages of a pipeline are furthest apart. Groups of each kind, as Megatron's
 * generate_masked_orthogonal_rank_groups builds them (both the list of groups
 * and the order of ranks inside a group):
 *   TP         ranks that differ only in tp_rank             (W / tp groups of tp)
 *   DP         ranks that differ only in dp_rank             (W / dp groups of dp)
 *   PP         ranks that differ only in pp_rank             (W / pp groups of pp)
 *   MP         model parallel, tp x pp: differ in tp and pp  (dp groups of tp x pp)
 *   EMBEDDING  the first and last rank of each PP group (the stages holding the
 *              word embedding and the output layer, whose tied weights' gradients
 *              are all-reduced between them); the PP group itself when pp = 1;
 *              middle stages are in none.
 *
 * The layout functions are pure (no MPI) and testable on their own;
 * td_topology_init builds the groups of this rank as communicators. */
#ifndef TD_COMM_TOPOLOGY_H
#define TD_COMM_TOPOLOGY_H

#include <stddef.h>
#include <stdio.h>

typedef struct td_comm td_comm;

typedef struct {
  int world, tp, pp, dp;
} td_layout;

typedef struct {
  int tp, dp, pp;
} td_rank_coord;

typedef enum {
  TD_GROUP_TP = 0,
  TD_GROUP_DP = 1,
  TD_GROUP_PP = 2,
  TD_GROUP_MP = 3,
  TD_GROUP_EMBEDDING = 4,
} td_group_kind;
#define TD_GROUP_KINDS 5

const char *td_group_name(td_group_kind k); /* "tensor", "data", ... */

/* dp = world / (tp x pp). Returns 0, or -1 with err naming the sizes (flags) when
 * a size is < 1 or tp x pp does not divide the world. */
int td_layout_init(td_layout *l, int world, int tp, int pp, char *err, size_t errlen);

td_rank_coord td_layout_coord(const td_layout *l, int rank);
int td_layout_rank(const td_layout *l, td_rank_coord c);

/* The groups of a kind: how many, how big (all the same size), and the ranks of
 * group g in Megatron's order. */
int td_layout_num_groups(const td_layout *l, td_group_kind k);
int td_layout_group_size(const td_layout *l, td_group_kind k);
void td_layout_group(const td_layout *l, td_group_kind k, int g, int *ranks);
/* The group of kind k that holds rank, and rank's position in it (*pos may be
 * NULL); -1 when rank is in none (EMBEDDING, middle pipeline stages). */
int td_layout_group_of(const td_layout *l, td_group_kind k, int rank, int *pos);

/* This rank's place and its groups as communicators (rank order inside each is
 * the Megatron order above). */
typedef struct {
  td_layout layout;
  int rank;
  td_rank_coord coord;
  td_comm *world;
  td_comm *group[TD_GROUP_KINDS]; /* group[TD_GROUP_EMBEDDING] is NULL when in none */
} td_topology;

/* Collective over world. A layout that does not fit is td_fail with the sizes. */
void td_topology_init(td_topology *t, td_comm *world, int tp, int pp);
void td_topology_free(td_topology *t);

/* The layout, one line per rank with its host (collective: gathers host names;
 * rank 0 writes to f). */
void td_topology_print(const td_topology *t, FILE *f);

#endif
