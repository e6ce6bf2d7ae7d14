/* AdamW over fp32 parameters, with Megatron's parameter groups: weight decay on
 * the matrices, none on biases and LayerNorm parameters; with --decoupled-lr the
 * word embeddings and the output layer at a rate of their own. The optimizer sees only
 * runs of elements (optim/ sits below model/): each run's parameters, gradients
 * and Adam state may sit at different offsets of their own buffers, as they do
 * under ZeRO (the state and, from stage 2, the gradients are this rank's shard;
 * from stage 3 the parameters too). The state is device memory, host memory
 * with the update run on the host (DeepSpeed's cpu offload with its cpu_adam,
 * for a device with its own memory: td_adamw_init_host), or a file streamed
 * through the step (ZeRO-Infinity's NVMe offload, optim/nvme_state.h). */
#ifndef TD_OPTIM_ADAMW_H
#define TD_OPTIM_ADAMW_H

#include <stdint.h>

#include "device/device.h" /* td_adam_run: a run of elements of one group */

typedef struct td_nvme_state td_nvme_state;

typedef struct {
  td_device *dev;
  int64_t numel;      /* of the state: exp_avg and exp_avg_sq hold numel elements each */
  float *exp_avg;     /* m (device memory, host memory when host; NULL when nvme) */
  float *exp_avg_sq;  /* v */
  td_device *host;     /* non-NULL: the state is host memory, updated by this CPU
                          device on host copies of the params and grads (td_adamw_init_host) */
  float *host_params, *host_grads; /* those copies (the spans the runs address) */
  int params_on_host;  /* with host: the params base is host memory, updated in place
                          (ZeRO-3's offload_param; td_adamw_params_on_host) */
  int64_t params_span, grads_span;
  td_nvme_state *nvme; /* non-NULL: m and v live in a file (td_adamw_init_nvme) */
  td_adam_run *runs;   /* the runs merged into maximal runs of one group */
  int n_runs;
  td_adam_run *rate_runs[2]; /* the runs at the step's lr [0] and at decoupled_lr [1] */
  int n_rate_runs[2];
  float beta1, beta2, eps, weight_decay;
  float decoupled_lr; /* the rate of the runs marked decoupled_lr (Megatron's --decoupled-lr,
                         set before each step); the others take the step's lr */
  int64_t step; /* updates applied so far (skipped iterations do not count) */
} td_adamw;

/* runs must be sorted by state_offset, not overlap, and lie inside [0, numel);
 * elements between two runs that are merged (same group, the same gap in all
 * three buffers) must hold zeros in params and grads (they then stay zero). */
void td_adamw_init(td_adamw *o, td_device *dev, int64_t numel, const td_adam_run *runs,
                   int n_runs, float beta1, float beta2, float eps, float weight_decay);
/* The same optimizer with m and v in a file under dir (named after stem), streamed
 * through each step in chunks of chunk_elems; NULL (with err) when the file cannot
 * be made. */
int td_adamw_init_nvme(td_adamw *o, td_device *dev, int64_t numel, const td_adam_run *runs,
                       int n_runs, float beta1, float beta2, float eps, float weight_decay,
                       const char *dir, const char *stem, int64_t chunk_elems, char *err,
                       size_t errlen);
/* The same optimizer with m and v in host memory and the update on the host:
 * each step copies the runs' parameters and gradients from dev, runs the CPU
 * backend's AdamW (vectorised, OpenMP threads) and copies the parameters back
 * (DeepSpeed's offload_optimizer.device cpu, Megatron-DeepSpeed's --cpu-optimizer).
 * For a device whose memory is not host memory; the results are the CPU
 * backend's bits. */
void td_adamw_init_host(td_adamw *o, td_device *dev, int64_t numel, const td_adam_run *runs,
                        int n_runs, float beta1, float beta2, float eps, float weight_decay);
/* An optimizer of td_adamw_init_host whose params base is host memory itself
 * (ZeRO-3 with the parameter shard offloaded): the update writes it in place,
 * and no copy of the parameters is kept or moved. */
void td_adamw_params_on_host(td_adamw *o);
void td_adamw_free(td_adamw *o);

/* One update: g = grads * grad_scale (unscale and clip folded in). */
void td_adamw_step(td_adamw *o, float *params, const float *grads, float lr, float grad_scale);
/* The same, also writing the updated parameters into copy (copy_dtype, bf16 or
 * fp16, laid out as params) in the same pass, where the update runs on the
 * device (not offloaded to the host or NVMe): returns 1 when it did, 0 when the
 * caller must cast the copy itself. */
int td_adamw_step_copy(td_adamw *o, float *params, const float *grads, void *copy,
                       td_dtype copy_dtype, float lr, float grad_scale);

/* State elements [offset, offset + n) of exp_avg (which 0) or exp_avg_sq (1),
 * to or from host memory (checkpoints, statistics). */
void td_adamw_read_state(td_adamw *o, int which, int64_t offset, int64_t n, float *host);
void td_adamw_write_state(td_adamw *o, int which, int64_t offset, int64_t n, const float *host);

#endif
