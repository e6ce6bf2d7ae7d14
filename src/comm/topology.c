#include "comm/topology.h"

#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/mem.h"
#include "comm/comm.h"

/* Dimensions in Megatron's order tp-dp-pp (fastest first). */
enum { DIMS = 3 };

/* Which dimensions a group kind spans (Megatron's mask); EMBEDDING is derived from PP. */
static const int k_mask[TD_GROUP_KINDS][DIMS] = {
    [TD_GROUP_TP] = {1, 0, 0},
    [TD_GROUP_DP] = {0, 1, 0},
    [TD_GROUP_PP] = {0, 0, 1},
    [TD_GROUP_MP] = {1, 0, 1},
    [TD_GROUP_EMBEDDING] = {0, 0, 1},
};

const char *td_group_name(td_group_kind k) {
  static const char *const names[TD_GROUP_KINDS] = {"tensor", "data", "pipeline", "model",
                                                    "embedding"};
  TD_CHECK((unsigned)k < TD_GROUP_KINDS, "group kind %d", (int)k);
  return names[k];
}

int td_layout_init(td_layout *l, int world, int tp, int pp, char *err, size_t errlen) {
  if (world < 1) return td_errorf(err, errlen, "world size %d: expected >= 1", world);
  if (tp < 1)
    return td_errorf(err, errlen, "--tensor-model-parallel-size %d: expected >= 1", tp);
  if (pp < 1)
    return td_errorf(err, errlen, "--pipeline-model-parallel-size %d: expected >= 1", pp);
  if (world % (tp * pp))
    return td_errorf(err, errlen,
                     "world size %d (the ranks mpirun started) is not divisible by "
                     "--tensor-model-parallel-size %d x --pipeline-model-parallel-size %d = %d",
                     world, tp, pp, tp * pp);
  *l = (td_layout){world, tp, pp, world / (tp * pp)};
  return 0;
}

static void sizes(const td_layout *l, int size[DIMS]) {
  size[0] = l->tp, size[1] = l->dp, size[2] = l->pp;
}

td_rank_coord td_layout_coord(const td_layout *l, int rank) {
  TD_CHECK(rank >= 0 && rank < l->world, "rank %d of %d", rank, l->world);
  return (td_rank_coord){rank % l->tp, rank / l->tp % l->dp, rank / (l->tp * l->dp)};
}

int td_layout_rank(const td_layout *l, td_rank_coord c) {
  return (c.pp * l->dp + c.dp) * l->tp + c.tp;
}

int td_layout_num_groups(const td_layout *l, td_group_kind k) {
  if (k == TD_GROUP_EMBEDDING) return l->world / l->pp;
  return l->world / td_layout_group_size(l, k);
}

int td_layout_group_size(const td_layout *l, td_group_kind k) {
  if (k == TD_GROUP_EMBEDDING) return l->pp > 1 ? 2 : 1;
  int size[DIMS], n = 1;
  sizes(l, size);
  for (int d = 0; d < DIMS; d++)
    if (k_mask[k][d]) n *= size[d];
  return n;
}

/* Megatron's generate_masked_orthogonal_rank_groups: group g decomposes over the
 * dimensions outside the mask (first fastest), its i-th rank over those inside;
 * the rank is the inner product of the indices with the global strides. */
static int masked_rank(const td_layout *l, td_group_kind k, int g, int i) {
  int size[DIMS], stride = 1, rank = 0;
  sizes(l, size);
  for (int d = 0; d < DIMS; d++) {
    int *index = k_mask[k][d] ? &i : &g;
    rank += (*index % size[d]) * stride;
    *index /= size[d];
    stride *= size[d];
  }
  return rank;
}

void td_layout_group(const td_layout *l, td_group_kind k, int g, int *ranks) {
  TD_CHECK(g >= 0 && g < td_layout_num_groups(l, k), "%s group %d", td_group_name(k), g);
  if (k == TD_GROUP_EMBEDDING) { /* first and last stage of pipeline group g */
    ranks[0] = masked_rank(l, TD_GROUP_PP, g, 0);
    if (l->pp > 1) ranks[1] = masked_rank(l, TD_GROUP_PP, g, l->pp - 1);
    return;
  }
  int n = td_layout_group_size(l, k);
  for (int i = 0; i < n; i++) ranks[i] = masked_rank(l, k, g, i);
}

int td_layout_group_of(const td_layout *l, td_group_kind k, int rank, int *pos) {
  td_rank_coord c = td_layout_coord(l, rank);
  int index[DIMS] = {c.tp, c.dp, c.pp}, size[DIMS];
  sizes(l, size);
  const int *mask = k_mask[k];
  int g = 0, i = 0, g_stride = 1, i_stride = 1;
  for (int d = 0; d < DIMS; d++) {
    if (mask[d]) {
      i += index[d] * i_stride, i_stride *= size[d];
    } else {
      g += index[d] * g_stride, g_stride *= size[d];
    }
  }
  if (k == TD_GROUP_EMBEDDING) {
    if (c.pp != 0 && c.pp != l->pp - 1) g = -1;
    i = c.pp == 0 ? 0 : 1;
  }
  if (pos) *pos = g < 0 ? -1 : i;
  return g;
}

void td_topology_init(td_topology *t, td_comm *world, int tp, int pp) {
  char err[256];
  memset(t, 0, sizeof *t);
  if (td_layout_init(&t->layout, td_comm_size(world), tp, pp, err, sizeof err)) td_fail("%s", err);
  t->world = world;
  t->rank = td_comm_rank(world);
  t->coord = td_layout_coord(&t->layout, t->rank);
  for (int k = 0; k < TD_GROUP_KINDS; k++) {
    int pos, g = td_layout_group_of(&t->layout, (td_group_kind)k, t->rank, &pos);
    t->group[k] = td_comm_split(world, g, pos);
  }
}

void td_topology_free(td_topology *t) {
  for (int k = 0; k < TD_GROUP_KINDS; k++) td_comm_free(t->group[k]);
  memset(t, 0, sizeof *t);
}

enum { HOST_BYTES = 64 }; /* gathered as 16 int32 */

void td_topology_print(const td_topology *t, FILE *f) {
  const td_layout *l = &t->layout;
  char host[HOST_BYTES] = {0};
  if (gethostname(host, sizeof host - 1)) strcpy(host, "?");
  char *hosts = t->rank == 0 ? td_malloc((size_t)l->world * HOST_BYTES) : NULL;
  td_comm_gather(t->world, host, hosts, HOST_BYTES / 4, TD_I32, 0);
  if (t->rank != 0) return;
  fprintf(f,
          "trident: %d ranks = tensor-parallel %d x data-parallel %d x pipeline-parallel %d "
          "(order tp-dp-pp: rank = (pp * %d + dp) * %d + tp)\n",
          l->world, l->tp, l->dp, l->pp, l->dp, l->tp);
  fprintf(f, "  %5s  %-24s  %4s  %4s  %4s  %s\n", "rank", "host", "tp", "dp", "pp", "stage");
  for (int r = 0; r < l->world; r++) {
    td_rank_coord c = td_layout_coord(l, r);
    const char *stage = l->pp == 1                ? ""
                        : c.pp == 0               ? "first (embedding)"
                        : c.pp == l->pp - 1       ? "last (output layer)"
                                                  : "middle";
    fprintf(f, "  %5d  %-24.24s  %4d  %4d  %4d  %s\n", r, hosts + (size_t)r * HOST_BYTES, c.tp,
            c.dp, c.pp, stage);
  }
  fflush(f);
  td_free(hosts);
}
