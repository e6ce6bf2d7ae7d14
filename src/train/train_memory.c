#include "train/train_memory.h"

#include <stdio.h>
#include <string.h>

#include "base/checked.h"
#include "base/error.h"
#include "base/memory_limit.h"
#include "optim/nvme_state.h"
#include "parallel/zero.h"
#include "train/checkpoint.h"

/* The trainer's per-tensor host tables: the checkpoint views of the parameters
 * and of Adam's two moments with their names, and (a bound for) the DDP buckets
 * and the optimizer's ranges. */
#define TRAINER_BYTES_PER_TENSOR \
  (3 * sizeof(td_ckpt_tensor) + 2 * (TD_GPT_NAME_MAX + 16) + 128)

/* Micro-batches in flight on this stage (the trainer's setup_pipeline), each
 * with its own activation arena. */
static int arenas(const td_args *a, const td_train_place *p) {
  int64_t span = p->pp_size - p->pp_rank, m = a->num_micro_batches;
  return p->pp_size > 1 ? (int)(span < m ? span : m) : 1;
}

int td_train_memory_plan(const td_args *a, const td_gpt_config *cfg, const td_gpt_layout *lay,
                         td_dtype compute, const td_train_place *p, td_train_memory *m,
                         char *err, size_t errlen) {
  td_gpt_param_count c;
  memset(m, 0, sizeof *m);
  if (td_gpt_plan(cfg, lay, a->micro_batch_size, compute, &m->model, &c, err, errlen)) return -1;
  m->arenas = arenas(a, p);
  m->activations = td_sat_mul(m->model.activations, (uint64_t)m->arenas);
  int z = p->zero_stage;
  uint64_t share = z ? c.flat_numel / (uint64_t)p->dp_size : c.flat_numel; /* equal shards */
  m->optimizer = td_sat_mul(share, 2 * sizeof(float));
  if (a->optimizer_nvme_path) /* NVMe offload: three chunks of m and v in memory */
    m->optimizer = (share < TD_NVME_CHUNK ? share : TD_NVME_CHUNK) * 6 * sizeof(float);
  m->shards = td_sat_mul(share, (uint64_t)((z >= 2) + (z == 3)) * sizeof(float));
  /* Data parallelism reduces 2 units at a time, each with its receive buffer
   * (fp32: the unit; a half-precision wire: the unit sent and received in it,
   * and 2 fp32 pieces). ZeRO-2/3 also hold the gradient buffers of a bucket's
   * units until it reduces (a bucket of whole units, up to the bucket size) and
   * the tied embedding's across backward; ZeRO-3 3 slots of the largest unit in
   * fp32 and (low precision) its weights. On the CPU, freed blocks kept for
   * reuse may add one unit (device/cpu/cpu_memory.c). */
  uint64_t bucket = a->ddp_bucket_size > 0 ? (uint64_t)a->ddp_bucket_size
                                           : (uint64_t)td_zero_default_bucket_size(p->dp_size);
  if (bucket > c.flat_numel) bucket = c.flat_numel;
  uint64_t unit = td_sat_mul(c.largest_unit, sizeof(float));
  if (p->dp_size > 1) {
    uint64_t recv = a->grad_comm_dtype == TD_F32
                        ? unit
                        : td_sat_add(td_sat_mul(c.largest_unit, 2 * td_dtype_size(a->grad_comm_dtype)),
                                     td_sat_mul(c.largest_unit / (uint64_t)p->dp_size, 2 * sizeof(float)));
    m->transient = td_sat_mul(recv, 2);
  }
  if (z >= 2)
    m->transient = td_sat_add(m->transient,
                              td_sat_add(td_sat_mul(bucket, sizeof(float)),
                                         td_sat_mul(unit, 1 + (z == 3 ? 3 + 3 * (compute != TD_F32) : 0))));
  if (p->device_is_host && m->transient) m->transient = td_sat_add(m->transient, unit);
  if (z && (a->save || a->load) && p->dp_rank == 0)
    m->checkpoint = td_sat_mul(c.flat_numel, (2 + (z == 3)) * sizeof(float));
  uint64_t tokens = td_sat_mul((uint64_t)a->global_batch_size, (uint64_t)a->seq_length);
  m->staging = td_sat_add(td_sat_mul(tokens, 2 * sizeof(int32_t) + sizeof(float)),
                          td_sat_mul((uint64_t)a->seq_length + 1, sizeof(int32_t)));
  m->tables = td_sat_add(td_sat_mul(m->model.host, (uint64_t)m->arenas), /* a replica's tables */
                         td_sat_mul(c.n_tensors, TRAINER_BYTES_PER_TENSOR));
  if (p->optimizer_on_host) /* m and v, and host copies of the parameters and gradients */
    m->optimizer = td_sat_mul(share, 4 * sizeof(float));
  uint64_t device = td_sat_add(td_sat_add(m->model.params, m->model.grads),
                               td_sat_add(m->model.weights_bf16, m->activations));
  /* offload_param: the parameter shard (part of shards at stage 3) is host memory */
  uint64_t param_shard = p->params_on_host ? td_sat_mul(share, sizeof(float)) : 0;
  device = td_sat_add(device, p->optimizer_on_host ? 0 : m->optimizer);
  device = td_sat_add(device, td_sat_add(m->shards - param_shard, m->transient));
  uint64_t host = td_sat_add(td_sat_add(m->staging, m->tables), td_sat_add(m->checkpoint, param_shard));
  if (p->optimizer_on_host) host = td_sat_add(host, m->optimizer);
  m->total = td_sat_add(p->device_is_host ? device : 0, host);
  m->device = device;
  return 0;
}

typedef struct {
  const char *name;
  uint64_t bytes;
} part;

/* The flags behind each part of td_train_memory, for the largest one. */
static void part_flags(int k, const td_args *a, const td_gpt_config *cfg, char *out, size_t n) {
  switch (k) {
  case 0: case 1: case 2: case 3: case 4: case 5: case 6:
    snprintf(out, n,
             "--num-layers %lld, --hidden-size %lld, --ffn-hidden-size %lld, "
             "--max-position-embeddings %lld and the padded vocabulary of %lld",
             (long long)cfg->num_layers, (long long)cfg->hidden, (long long)cfg->ffn_hidden,
             (long long)cfg->max_positions, (long long)cfg->vocab_size);
    break;
  case 7:
    snprintf(out, n,
             "--micro-batch-size %lld x --seq-length %lld tokens through --num-layers %lld layers "
             "(hidden %lld, ffn %lld, vocabulary %lld)",
             (long long)a->micro_batch_size, (long long)cfg->seq_len, (long long)cfg->num_layers,
             (long long)cfg->hidden, (long long)cfg->ffn_hidden, (long long)cfg->vocab_size);
    break;
  case 8:
    snprintf(out, n, "--global-batch-size %lld x --seq-length %lld tokens",
             (long long)a->global_batch_size, (long long)a->seq_length);
    break;
  default:
    snprintf(out, n, "--num-layers %lld (12 tensors per layer)", (long long)cfg->num_layers);
  }
}

static void describe(const td_train_memory *m, const td_args *a, const td_gpt_config *cfg,
                     char *out, size_t n) {
  const part parts[] = {{"parameters", m->model.params},
                        {"gradients", m->model.grads},
                        {"optimizer state", m->optimizer},
                        {"checkpoint's gathered buffers (host)", m->checkpoint},
                        {"ZeRO shards", m->shards},
                        {"data-parallel unit buffers", m->transient},
                        {"low-precision weights", m->model.weights_bf16},
                        {"activations", m->activations},
                        {"batch staging", m->staging},
                        {"host tables", m->tables}};
  size_t len = 0;
  int largest = 0;
  for (int k = 0; k < (int)(sizeof parts / sizeof *parts) && len < n; k++) {
    char b[32];
    if (!parts[k].bytes) continue;
    if (parts[k].bytes > parts[largest].bytes) largest = k;
    td_bytes_text(parts[k].bytes, b, sizeof b);
    int w = snprintf(out + len, n - len, "%s%s %s%s", len ? ", " : "", parts[k].name, b,
                     k == 7 && m->arenas > 1 ? " in the pipeline's arenas" : "");
    len += w > 0 ? (size_t)w : 0;
  }
  char flags[320];
  part_flags(largest, a, cfg, flags, sizeof flags);
  if (len < n) snprintf(out + len, n - len, "; the largest, %s, from %s", parts[largest].name, flags);
}

int td_train_check_memory(const td_args *a, const td_gpt_config *cfg, const td_gpt_layout *lay,
                          td_dtype compute, const td_train_place *p, int ranks_per_node,
                          char *err, size_t errlen) {
  td_train_memory m;
  if (td_train_memory_plan(a, cfg, lay, compute, p, &m, err, errlen)) return -1;
  char detail[1024];
  describe(&m, a, cfg, detail, sizeof detail);
  if (td_memory_check(m.total, ranks_per_node, "each rank of this run", detail, err, errlen))
    return -1;
  const int sharing = p->ranks_on_device > 1 ? p->ranks_on_device : 1;
  const uint64_t share = p->device_free / (uint64_t)sharing;
  if (p->device_is_host || !p->device_free || m.device <= share) return 0;
  char need[32], free_b[32], total[32], shared[96] = "";
  td_bytes_text(m.device, need, sizeof need);
  td_bytes_text(p->device_free, free_b, sizeof free_b);
  td_bytes_text(p->device_total, total, sizeof total);
  if (sharing > 1) {
    char s[32];
    td_bytes_text(share, s, sizeof s);
    snprintf(shared, sizeof shared, ", %s for each of the %d ranks that share it", s, sharing);
  }
  return td_errorf(err, errlen,
                   "each rank of this run needs %s of device memory on %s (%s), more than the %s "
                   "free of its %s%s: a smaller model or micro-batch, more tensor- or "
                   "pipeline-parallel ranks, a higher ZeRO stage, or --cpu-optimizer",
                   need, p->device_name ? p->device_name : "the device", detail, free_b, total,
                   shared);
}
