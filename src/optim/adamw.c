#include "optim/adamw.h"

#include "base/error.h"
#include "base/mem.h"

/* Merge consecutive ranges of the same group (across the zero gaps between
 * them), so a step is a handful of kernel calls instead of one per tensor. */
static int merge_runs(const td_param_range *r, int n, td_param_range *out) {
  int k = 0;
  for (int i = 0; i < n; i++) {
    TD_CHECK(i == 0 || r[i].offset >= r[i - 1].offset + r[i - 1].numel, "ranges overlap or unsorted");
    if (k > 0 && out[k - 1].weight_decay == r[i].weight_decay) {
      out[k - 1].numel = r[i].offset + r[i].numel - out[k - 1].offset;
    } else {
      out[k++] = r[i];
    }
  }
  return k;
}

void td_adamw_init(td_adamw *o, td_device *dev, int64_t numel, const td_param_range *ranges,
                   int n_ranges, float beta1, float beta2, float eps, float weight_decay) {
  o->dev = dev, o->numel = numel, o->step = 0;
  o->beta1 = beta1, o->beta2 = beta2, o->eps = eps, o->weight_decay = weight_decay;
  o->exp_avg = dev->ops->alloc(dev, (size_t)numel * sizeof(float));
  o->exp_avg_sq = dev->ops->alloc(dev, (size_t)numel * sizeof(float));
  o->runs = td_malloc(sizeof *o->runs * (size_t)(n_ranges ? n_ranges : 1));
  o->n_runs = merge_runs(ranges, n_ranges, o->runs);
}

void td_adamw_free(td_adamw *o) {
  o->dev->ops->free(o->dev, o->exp_avg);
  o->dev->ops->free(o->dev, o->exp_avg_sq);
  td_free(o->runs);
}

void td_adamw_step(td_adamw *o, float *params, const float *grads, float lr, float grad_scale) {
  o->step++;
  for (int i = 0; i < o->n_runs; i++) {
    const td_param_range *r = &o->runs[i];
    o->dev->ops->adamw(o->dev, params + r->offset, grads + r->offset, o->exp_avg + r->offset,
                       o->exp_avg_sq + r->offset, r->numel, lr, o->beta1, o->beta2, o->eps,
                       r->weight_decay ? o->weight_decay : 0.0f, grad_scale, o->step);
  }
}
