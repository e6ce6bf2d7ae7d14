#include "optim/adamw.h"

#include "base/error.h"
#include "base/mem.h"
#include "optim/nvme_state.h"

/* Run b continues run a across a gap that is the same in all three buffers. */
static int mergeable(const td_adam_run *a, const td_adam_run *b) {
  int64_t gap = b->state_offset - a->state_offset;
  return a->weight_decay == b->weight_decay && a->decoupled_lr == b->decoupled_lr &&
         b->param_offset - a->param_offset == gap && b->grad_offset - a->grad_offset == gap;
}

/* Merge consecutive runs of the same group (across the zero gaps between them),
 * so a step is a handful of kernel calls instead of one per tensor. */
static int merge_runs(const td_adam_run *r, int n, td_adam_run *out) {
  int k = 0;
  for (int i = 0; i < n; i++) {
    TD_CHECK(i == 0 || r[i].state_offset >= r[i - 1].state_offset + r[i - 1].numel,
             "runs overlap or unsorted");
    if (k > 0 && mergeable(&out[k - 1], &r[i]))
      out[k - 1].numel = r[i].state_offset + r[i].numel - out[k - 1].state_offset;
    else
      out[k++] = r[i];
  }
  return k;
}

static void init_common(td_adamw *o, td_device *dev, int64_t numel, const td_adam_run *runs,
                        int n_runs, float beta1, float beta2, float eps, float weight_decay) {
  *o = (td_adamw){.dev = dev, .numel = numel, .beta1 = beta1, .beta2 = beta2, .eps = eps,
                  .weight_decay = weight_decay};
  o->runs = td_malloc(sizeof *o->runs * (size_t)(n_runs ? n_runs : 1));
  o->n_runs = merge_runs(runs, n_runs, o->runs);
  for (int g = 0; g < 2; g++) { /* the runs by rate, each list in state order */
    o->rate_runs[g] = td_malloc(sizeof *o->runs * (size_t)(o->n_runs ? o->n_runs : 1));
    for (int i = 0; i < o->n_runs; i++)
      if (!o->runs[i].decoupled_lr == !g) o->rate_runs[g][o->n_rate_runs[g]++] = o->runs[i];
  }
}

static void free_runs(td_adamw *o) {
  td_free(o->runs), td_free(o->rate_runs[0]), td_free(o->rate_runs[1]);
}

void td_adamw_init(td_adamw *o, td_device *dev, int64_t numel, const td_adam_run *runs,
                   int n_runs, float beta1, float beta2, float eps, float weight_decay) {
  init_common(o, dev, numel, runs, n_runs, beta1, beta2, eps, weight_decay);
  o->exp_avg = dev->ops->alloc(dev, (size_t)numel * sizeof(float));
  o->exp_avg_sq = dev->ops->alloc(dev, (size_t)numel * sizeof(float));
}

void td_adamw_init_host(td_adamw *o, td_device *dev, int64_t numel, const td_adam_run *runs,
                        int n_runs, float beta1, float beta2, float eps, float weight_decay) {
  init_common(o, dev, numel, runs, n_runs, beta1, beta2, eps, weight_decay);
  o->host = td_device_open("cpu");
  o->exp_avg = o->host->ops->alloc(o->host, (size_t)numel * sizeof(float));
  o->exp_avg_sq = o->host->ops->alloc(o->host, (size_t)numel * sizeof(float));
  for (int i = 0; i < o->n_runs; i++) {
    const td_adam_run *r = &o->runs[i];
    if (r->param_offset + r->numel > o->params_span) o->params_span = r->param_offset + r->numel;
    if (r->grad_offset + r->numel > o->grads_span) o->grads_span = r->grad_offset + r->numel;
  }
  o->host_params = o->host->ops->alloc(o->host, (size_t)o->params_span * sizeof(float));
  o->host_grads = o->host->ops->alloc(o->host, (size_t)o->grads_span * sizeof(float));
}

void td_adamw_params_on_host(td_adamw *o) {
  TD_CHECK(o->host, "td_adamw_params_on_host: the update does not run on the host");
  o->host->ops->free(o->host, o->host_params);
  o->host_params = NULL;
  o->params_on_host = 1;
}

int td_adamw_init_nvme(td_adamw *o, td_device *dev, int64_t numel, const td_adam_run *runs,
                       int n_runs, float beta1, float beta2, float eps, float weight_decay,
                       const char *dir, const char *stem, int64_t chunk_elems, char *err,
                       size_t errlen) {
  init_common(o, dev, numel, runs, n_runs, beta1, beta2, eps, weight_decay);
  o->nvme = td_nvme_state_open(dev, dir, stem, numel, chunk_elems, err, errlen);
  if (o->nvme) return 0;
  free_runs(o);
  return -1;
}

void td_adamw_free(td_adamw *o) {
  if (o->nvme) {
    td_nvme_state_close(o->nvme);
  } else if (o->host) {
    td_device *h = o->host;
    h->ops->free(h, o->exp_avg), h->ops->free(h, o->exp_avg_sq);
    if (o->host_params) h->ops->free(h, o->host_params);
    h->ops->free(h, o->host_grads);
    td_device_close(h);
  } else {
    o->dev->ops->free(o->dev, o->exp_avg);
    o->dev->ops->free(o->dev, o->exp_avg_sq);
  }
  free_runs(o);
}

/* AdamW over the runs on device d, with params and grads d's buffers (and the
 * copy laid out as params, or NULL): one pass per rate (one without
 * --decoupled-lr). */
static void step_on(td_adamw *o, td_device *d, float *params, const float *grads, void *copy,
                    td_dtype copy_dtype, float lr, float grad_scale) {
  for (int g = 0; g < 2; g++)
    if (o->n_rate_runs[g])
      td_device_adamw_runs(d, params, grads, o->exp_avg, o->exp_avg_sq, o->rate_runs[g],
                           o->n_rate_runs[g], g ? o->decoupled_lr : lr, o->beta1, o->beta2,
                           o->eps, o->weight_decay, grad_scale, o->step, copy, copy_dtype);
}

/* The host update: the runs' parameters (unless they live on the host) and
 * gradients down, AdamW on the host, the parameters back up. */
static void step_host(td_adamw *o, float *params, const float *grads, float lr, float grad_scale) {
  td_device *d = o->dev;
  for (int i = 0; i < o->n_runs; i++) {
    const td_adam_run *r = &o->runs[i];
    size_t bytes = (size_t)r->numel * sizeof(float);
    if (!o->params_on_host)
      d->ops->copy_d2h(d, o->host_params + r->param_offset, params + r->param_offset, bytes);
    d->ops->copy_d2h(d, o->host_grads + r->grad_offset, grads + r->grad_offset, bytes);
  }
  step_on(o, o->host, o->params_on_host ? params : o->host_params, o->host_grads, NULL, TD_F32, lr,
          grad_scale);
  if (o->params_on_host) return;
  for (int i = 0; i < o->n_runs; i++) {
    const td_adam_run *r = &o->runs[i];
    d->ops->copy_h2d(d, params + r->param_offset, o->host_params + r->param_offset,
                     (size_t)r->numel * sizeof(float));
  }
}

int td_adamw_step_copy(td_adamw *o, float *params, const float *grads, void *copy,
                       td_dtype copy_dtype, float lr, float grad_scale) {
  o->step++;
  if (o->nvme)
    td_nvme_state_step(o->nvme, o, params, grads, lr, grad_scale);
  else if (o->host)
    step_host(o, params, grads, lr, grad_scale);
  else
    step_on(o, o->dev, params, grads, copy, copy_dtype, lr, grad_scale);
  return copy && !o->nvme && !o->host;
}

void td_adamw_step(td_adamw *o, float *params, const float *grads, float lr, float grad_scale) {
  td_adamw_step_copy(o, params, grads, NULL, TD_F32, lr, grad_scale);
}

/* The device the state lives on. */
static td_device *state_device(const td_adamw *o) { return o->host ? o->host : o->dev; }

void td_adamw_read_state(td_adamw *o, int which, int64_t offset, int64_t n, float *host) {
  TD_CHECK(offset >= 0 && n >= 0 && offset + n <= o->numel, "state range");
  if (o->nvme) {
    td_nvme_state_read(o->nvme, which, offset, n, host);
    return;
  }
  const float *s = which ? o->exp_avg_sq : o->exp_avg;
  td_device *d = state_device(o);
  d->ops->copy_d2h(d, host, s + offset, (size_t)n * sizeof(float));
}

void td_adamw_write_state(td_adamw *o, int which, int64_t offset, int64_t n, const float *host) {
  TD_CHECK(offset >= 0 && n >= 0 && offset + n <= o->numel, "state range");
  if (o->nvme) {
    td_nvme_state_write(o->nvme, which, offset, n, host);
    return;
  }
  float *s = which ? o->exp_avg_sq : o->exp_avg;
  td_device *d = state_device(o);
  d->ops->copy_h2d(d, s + offset, host, (size_t)n * sizeof(float));
}
