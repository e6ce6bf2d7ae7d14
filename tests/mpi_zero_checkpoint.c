/* ZeRO's checkpoint buffers across ranks (parallel/zero.h, td_zero_gather_full
 * and td_zero_scatter_full) under mpirun -np N: DP rank 0's whole parameters,
 * Adam m and Adam v handed out to every rank's shard (or whole copy) and
 * gathered back to DP rank 0 give the same bits, at ZeRO stages 0-3, with the
 * optimizer's state on the device or on the host (DeepSpeed's cpu offload),
 * and at stage 3 with the parameter shard in host memory (offload_param), on
 * the CPU and on the sealed device (whose memory the host cannot touch: every
 * move goes through the device's copies). Where every rank keeps the whole
 * parameters (stages 0-2), each rank's copy is DP rank 0's. The pieces go
 * through host memory a unit at a time (no whole buffer on the device), so a
 * unit that is split wrongly, or a rank that stores a part of the wrong size,
 * shows as a difference. */
#include <string.h>

#include "base/mem.h"
#include "check.h"
#include "comm/comm.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "parallel/zero.h"

static td_comm *g_world;
static int g_rank, g_size, g_failed;

#define expect(ok, ...) (g_failed |= !tst_check_on_rank(g_rank, g_size, (ok), __VA_ARGS__))

/* Values for the whole flat buffer, zero in the gaps between tensors and at the
 * ends of units (where the model keeps zeros). */
static void fill_whole(td_gpt *m, float *x, int64_t n, uint64_t stream) {
  for (int64_t i = 0; i < n; i++) x[i] = 0.0f;
  for (int i = 0; i < td_gpt_num_tensors(m); i++) {
    const td_gpt_tensor *t = td_gpt_tensor_at(m, i);
    for (int64_t j = 0; j < t->numel; j++)
      x[t->offset + j] = (float)((stream * 7919 + (uint64_t)(t->offset + j) * 104729) % 2003) / 1001.0f - 1.0f;
  }
}

static void round_trip(const char *device, int stage, int optimizer_on_host, int params_on_host) {
  td_device *d = td_device_open(device);
  td_gpt_config cfg = tst_tiny_gpt_config();
  td_gpt_layout lay = td_gpt_layout_single(&cfg);
  lay.unit_multiple = td_zero_unit_multiple(g_size);
  lay.no_flat_grads = stage >= 2, lay.no_flat_params = stage == 3;
  td_gpt *model = td_gpt_create(d, &cfg, &lay, 1, TD_F32);
  td_zero *z = td_zero_create(model, g_world, stage, 1000, params_on_host);
  td_zero_init_params(z, 3);
  int n_runs;
  const td_adam_run *runs = td_zero_runs(z, NULL, &n_runs);
  td_adamw opt;
  if (optimizer_on_host)
    td_adamw_init_host(&opt, d, td_zero_shard_numel(z), runs, n_runs, 0.9f, 0.95f, 1e-8f, 0.1f);
  else
    td_adamw_init(&opt, d, td_zero_shard_numel(z), runs, n_runs, 0.9f, 0.95f, 1e-8f, 0.1f);
  if (params_on_host) td_adamw_params_on_host(&opt);
  const int64_t n = td_gpt_flat_numel(model);
  float *in = td_malloc((size_t)n * sizeof(float)), *out = td_malloc((size_t)n * sizeof(float));
  for (int which = 0; which < 3; which++) {
    fill_whole(model, in, n, (uint64_t)(11 + which));
    td_zero_scatter_full(z, &opt, which, g_rank == 0 ? in : NULL);
    if (which == 0 && stage < 3) { /* every rank keeps the whole parameters: DP rank 0's */
      d->ops->copy_d2h(d, out, td_gpt_params(model), (size_t)n * sizeof(float));
      expect(!memcmp(in, out, (size_t)n * sizeof(float)),
             "%s ZeRO-%d: each rank's whole parameters are DP rank 0's after the load", device, stage);
    }
    memset(out, 0xff, (size_t)n * sizeof(float));
    td_zero_gather_full(z, &opt, which, g_rank == 0 ? out : NULL);
    if (g_rank == 0)
      expect(!memcmp(in, out, (size_t)n * sizeof(float)),
             "%s ZeRO-%d%s%s: %s handed out and gathered back, bit for bit", device, stage,
             optimizer_on_host ? ", Adam on the host" : "",
             params_on_host ? ", parameters on the host" : "",
             which == 0 ? "parameters" : which == 1 ? "Adam's m" : "Adam's v");
  }
  td_free(in), td_free(out);
  td_adamw_free(&opt);
  td_zero_free(z);
  td_gpt_destroy(model);
  td_device_close(d);
}

int main(void) {
  g_world = td_comm_init();
  g_rank = td_comm_rank(g_world), g_size = td_comm_size(g_world);
  for (int stage = 0; stage <= 3; stage++) {
    round_trip("cpu", stage, 0, 0);
    round_trip("sealed", stage, 0, 0);
    round_trip("sealed", stage, 1, 0);
  }
  round_trip("sealed", 3, 1, 1);
  int32_t failed = g_failed;
  if (g_rank == 0) failed |= tst_finish();
  td_comm_all_reduce(g_world, &failed, &failed, 1, TD_I32, TD_OP_MAX);
  td_comm_finalize();
  return failed;
}
