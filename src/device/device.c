#include "device/device.h"

#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "device/sealed_device.h"
#ifdef TD_HAVE_CUDA
#include "device/cuda/cuda_device.h"
#endif

const td_device_ops *td_cpu_device_ops(void);
void td_cpu_close(void *impl);
void td_cpu_describe_kernels(char *buf, size_t n);

/* A backend: its ops table and, for backends with per-handle state, how to make
 * and release it (NULL: none), whether it can run here, and how to name it. */
typedef struct {
  const char *name;
  const td_device_ops *(*ops)(void);
  void *(*open)(int *index); /* in: the index asked for; out: the device's */
  void (*close)(void *impl);
  int (*available)(void);
  void (*describe)(const void *impl, char *buf, size_t n);
  void (*describe_kernels)(char *buf, size_t n); /* NULL: nothing to say */
} backend;

static const backend k_backends[] = {
    {"cpu", td_cpu_device_ops, NULL, td_cpu_close, NULL, NULL, td_cpu_describe_kernels},
    /* A test device (sealed_device.h): opened by name, left out of td_device_names(). */
    {"sealed", td_sealed_device_ops, td_sealed_open, NULL, NULL, td_sealed_describe, NULL},
#ifdef TD_HAVE_CUDA
    {"cuda", td_cuda_device_ops, td_cuda_open, td_cuda_close, td_cuda_available, td_cuda_describe,
     td_cuda_describe_kernels},
#endif
};
#define N_BACKENDS (sizeof k_backends / sizeof *k_backends)

const char *td_device_names(void) {
#ifdef TD_HAVE_CUDA
  return "cpu, cuda";
#else
  return "cpu";
#endif
}

static const backend *find(const char *name) {
  for (size_t i = 0; i < N_BACKENDS; i++)
    if (strcmp(name, k_backends[i].name) == 0) return &k_backends[i];
  return NULL;
}

int td_device_available(const char *name) {
  const backend *b = find(name);
  return b && (!b->available || b->available());
}

const char *td_device_resolve(const char *name) {
  if (strcmp(name, "auto") != 0) return name;
  return td_device_available("cuda") ? "cuda" : "cpu";
}

td_device *td_device_open_index(const char *name, int index) {
  const backend *b = find(td_device_resolve(name));
  if (!b) {
    if (!strcmp(name, "cuda"))
      td_fail("device 'cuda': this trident was built without the CUDA backend (no nvcc at build "
              "time, or -DTRIDENT_CUDA=OFF); known devices: %s", td_device_names());
    td_fail("unknown device '%s'; known devices: %s, auto", name, td_device_names());
  }
  td_device *d = td_calloc(sizeof *d);
  d->ops = b->ops();
  d->index = index;
  d->impl = b->open ? b->open(&d->index) : NULL;
  if (!b->open) d->index = 0;
  return d;
}

td_device *td_device_open(const char *name) { return td_device_open_index(name, 0); }

void td_device_close(td_device *d) {
  if (!d) return;
  for (size_t i = 0; i < N_BACKENDS; i++)
    if (d->ops == k_backends[i].ops() && k_backends[i].close) k_backends[i].close(d->impl);
  td_free(d);
}

uint64_t td_device_key(const td_device *d) {
  return d->ops->device_key ? d->ops->device_key(d) : (uint64_t)d->index;
}

void *td_device_alloc_scratch(td_device *d, size_t bytes) {
  return d->ops->alloc_scratch ? d->ops->alloc_scratch(d, bytes) : d->ops->alloc(d, bytes);
}

void td_device_cross_entropy_fused(td_device *d, float *losses, float *lse, void *dlogits,
                                   td_dtype dlogits_dtype, const void *logits,
                                   td_dtype logits_dtype, const int32_t *targets,
                                   const float *dloss, int64_t n, int64_t vocab) {
  if (d->ops->cross_entropy_fused) {
    d->ops->cross_entropy_fused(d, losses, lse, dlogits, dlogits_dtype, logits, logits_dtype,
                                targets, dloss, n, vocab);
    return;
  }
  d->ops->cross_entropy_forward(d, losses, lse, logits, logits_dtype, targets, n, vocab);
  d->ops->cross_entropy_backward(d, dlogits, dlogits_dtype, logits, logits_dtype, lse, targets,
                                 dloss, n, vocab, 0);
}

void td_device_matmul_unfused(td_device *d, const td_matmul_desc *g, float *scratch,
                              float *dbias) {
  td_matmul_desc p = *g;
  p.c_in = NULL, p.epilogue = TD_EPILOGUE_NONE, p.aux = NULL;
  const int64_t len = g->m * g->n;
  if (g->epilogue == TD_EPILOGUE_GELU_AUX) { /* the pre-activation, then its GELU */
    p.c = g->aux, p.ldc = g->ldaux;
    d->ops->matmul(d, &p);
    d->ops->gelu_forward(d, g->c, g->c_dtype, g->aux, g->c_dtype, len, g->gelu_kind);
  } else if (g->epilogue == TD_EPILOGUE_DGELU) { /* the fp32 product, then GELU's gradient */
    p.c = scratch, p.c_dtype = TD_F32, p.ldc = g->n;
    d->ops->matmul(d, &p);
    d->ops->gelu_backward(d, g->c, g->c_dtype, dbias, scratch, g->aux, g->c_dtype, g->m, g->n,
                          g->gelu_kind);
  } else { /* the product with its bias, then the residual (add's bits) */
    p.beta = 0.0f;
    d->ops->matmul(d, &p);
    if (g->c_in) d->ops->add(d, (float *)g->c, (const float *)g->c_in, (const float *)g->c, len);
  }
}

int td_device_matmul_fuses(td_device *d, const td_matmul_desc *desc) {
  if (!desc->c_in && desc->epilogue == TD_EPILOGUE_NONE) return 0;
  return d->ops->matmul_fuses ? d->ops->matmul_fuses(d, desc) : 0;
}

void td_device_adamw_runs(td_device *d, float *params, const float *grads, float *m, float *v,
                          const td_adam_run *runs, int n_runs, float lr, float beta1,
                          float beta2, float eps, float weight_decay, float grad_scale,
                          int64_t step, void *copy, td_dtype copy_dtype) {
  if (d->ops->adamw_runs) {
    d->ops->adamw_runs(d, params, grads, m, v, runs, n_runs, lr, beta1, beta2, eps, weight_decay,
                       grad_scale, step, copy, copy_dtype);
    return;
  }
  for (int i = 0; i < n_runs; i++) {
    const td_adam_run *r = &runs[i];
    void *c = copy ? (char *)copy + (size_t)r->param_offset * td_dtype_size(copy_dtype) : NULL;
    d->ops->adamw(d, params + r->param_offset, grads + r->grad_offset, m + r->state_offset,
                  v + r->state_offset, r->numel, lr, beta1, beta2, eps,
                  r->weight_decay ? weight_decay : 0.0f, grad_scale, step, c, copy_dtype);
  }
}

double td_device_reduce_now(td_device *d, td_device_reduce_op op, const float *x, int64_t n) {
  double *out = d->ops->alloc(d, sizeof(double)), v;
  op(d, out, x, n);
  d->ops->copy_d2h(d, &v, out, sizeof v);
  d->ops->free(d, out);
  return v;
}

void td_device_describe(const td_device *d, char *buf, size_t n) {
  for (size_t i = 0; i < N_BACKENDS; i++)
    if (d->ops == k_backends[i].ops() && k_backends[i].describe) {
      k_backends[i].describe(d->impl, buf, n);
      return;
    }
  snprintf(buf, n, "%s", d->ops->name);
}

int td_device_describe_kernels(const td_device *d, char *buf, size_t n) {
  for (size_t i = 0; i < N_BACKENDS; i++)
    if (d->ops == k_backends[i].ops() && k_backends[i].describe_kernels) {
      k_backends[i].describe_kernels(buf, n);
      return 1;
    }
  if (n) buf[0] = 0;
  return 0;
}
