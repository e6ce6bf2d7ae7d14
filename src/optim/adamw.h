/* AdamW over a flat fp32 parameter buffer, with Megatron's parameter groups:
 * weight decay on the matrices, none on biases and LayerNorm parameters. The
 * optimizer sees only ranges of the flat buffer (optim/ sits below model/). */
#ifndef TD_OPTIM_ADAMW_H
#define TD_OPTIM_ADAMW_H

#include <stdint.h>

#include "device/device.h"

typedef struct {
  int64_t offset, numel; /* elements of the flat buffer */
  int weight_decay;      /* 1: decayed group, 0: no decay */
} td_param_range;

typedef struct {
  td_device *dev;
  int64_t numel;        /* of the flat buffers */
  float *exp_avg;       /* m: flat, same views as the parameters */
  float *exp_avg_sq;    /* v */
  td_param_range *runs; /* the ranges merged into maximal runs of one group */
  int n_runs;
  float beta1, beta2, eps, weight_decay;
  int64_t step; /* updates applied so far (skipped iterations do not count) */
} td_adamw;

/* ranges must be sorted by offset and lie inside [0, numel); gaps between them
 * must hold zeros in params and grads (they then stay zero). */
void td_adamw_init(td_adamw *o, td_device *dev, int64_t numel, const td_param_range *ranges,
                   int n_ranges, float beta1, float beta2, float eps, float weight_decay);
void td_adamw_free(td_adamw *o);

/* One update: g = grads * grad_scale (unscale and clip folded in). */
void td_adamw_step(td_adamw *o, float *params, const float *grads, float lr, float grad_scale);

#endif
