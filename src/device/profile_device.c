#include "device/profile_device.h"

#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/mem.h"

#define MAX_ENTRIES 1024

typedef struct {
  td_device_ops ops; /* this wrapper's table (its name says what it wraps) */
  char name[64];
  td_device *inner;
  const char *region;
  td_profile_entry *entries;
  int n_entries;
} profiler;

static profiler *PR(td_device *d) { return d->impl; }
static td_device *IN(td_device *d) { return PR(d)->inner; }

static td_profile_entry *entry(profiler *p, const char *op, const char *name, td_prof_kind kind) {
  for (int i = p->n_entries - 1; i >= 0; i--) {
    td_profile_entry *e = &p->entries[i];
    if (!strcmp(e->name, name) && !strcmp(e->region, p->region)) return e;
  }
  TD_CHECK(p->n_entries < MAX_ENTRIES, "more than %d distinct profiled ops", MAX_ENTRIES);
  td_profile_entry *e = &p->entries[p->n_entries++];
  memset(e, 0, sizeof *e);
  e->region = p->region, e->op = op, e->kind = kind;
  snprintf(e->name, sizeof e->name, "%s", name);
  return e;
}

/* Wait for the inner device, then account the time since t0. */
static void done(td_device *d, double t0, const char *op, const char *name, td_prof_kind kind,
                 double flops) {
  profiler *p = PR(d);
  p->inner->ops->synchronize(p->inner);
  double dt = td_now_seconds() - t0;
  td_profile_entry *e = entry(p, op, name, kind);
  e->calls++, e->seconds += dt, e->flops += flops;
}

static void kernel_done(td_device *d, double t0, const char *op) {
  done(d, t0, op, op, TD_PROF_KERNEL, 0);
}

/* ------------------------------------------------------------------ memory */

static void *p_alloc(td_device *d, size_t bytes) { return IN(d)->ops->alloc(IN(d), bytes); }
static void p_free(td_device *d, void *ptr) { IN(d)->ops->free(IN(d), ptr); }
static void p_synchronize(td_device *d) {
  d->stream_waits++;
  IN(d)->ops->synchronize(IN(d));
}
static void p_memory_info(td_device *d, size_t *free_bytes, size_t *total_bytes) {
  IN(d)->ops->memory_info(IN(d), free_bytes, total_bytes);
}
static uint64_t p_device_key(const td_device *d) { return td_device_key(IN((td_device *)d)); }
static void p_memory_stats(td_device *d, size_t *allocated, size_t *peak) {
  IN(d)->ops->memory_stats(IN(d), allocated, peak);
}

static void p_copy_h2d(td_device *d, void *dst, const void *src, size_t bytes) {
  double t0 = td_now_seconds();
  d->stream_waits++;
  IN(d)->ops->copy_h2d(IN(d), dst, src, bytes);
  kernel_done(d, t0, "copy_h2d");
}
static void p_copy_d2h(td_device *d, void *dst, const void *src, size_t bytes) {
  double t0 = td_now_seconds();
  d->stream_waits++;
  IN(d)->ops->copy_d2h(IN(d), dst, src, bytes);
  kernel_done(d, t0, "copy_d2h");
}
/* Timed like the kernels, so they wait too: a profile serialises everything. */
static void p_copy_h2d_async(td_device *d, void *dst, const void *src, size_t bytes) {
  double t0 = td_now_seconds();
  IN(d)->ops->copy_h2d_async(IN(d), dst, src, bytes);
  kernel_done(d, t0, "copy_h2d_async");
}
static void p_copy_d2h_async(td_device *d, void *dst, const void *src, size_t bytes) {
  double t0 = td_now_seconds();
  IN(d)->ops->copy_d2h_async(IN(d), dst, src, bytes);
  kernel_done(d, t0, "copy_d2h_async");
}
static td_event *p_event_create(td_device *d) { return IN(d)->ops->event_create(IN(d)); }
static void p_event_destroy(td_device *d, td_event *e) { IN(d)->ops->event_destroy(IN(d), e); }
static void p_event_record(td_device *d, td_event *e) { IN(d)->ops->event_record(IN(d), e); }
static void p_event_wait(td_device *d, td_event *e) { IN(d)->ops->event_wait(IN(d), e); }
static int p_event_query(td_device *d, td_event *e) { return IN(d)->ops->event_query(IN(d), e); }
static void p_event_synchronize(td_device *d, td_event *e) {
  IN(d)->ops->event_synchronize(IN(d), e);
}
static void *p_host_alloc(td_device *d, size_t bytes) { return IN(d)->ops->host_alloc(IN(d), bytes); }
static void p_host_free(td_device *d, void *p) { IN(d)->ops->host_free(IN(d), p); }

static void p_copy_d2d(td_device *d, void *dst, const void *src, size_t bytes) {
  double t0 = td_now_seconds();
  IN(d)->ops->copy_d2d(IN(d), dst, src, bytes);
  kernel_done(d, t0, "copy_d2d");
}
static void p_fill(td_device *d, void *dst, td_dtype dt, int64_t n, float value) {
  double t0 = td_now_seconds();
  IN(d)->ops->fill(IN(d), dst, dt, n, value);
  kernel_done(d, t0, "fill");
}

/* ------------------------------------------------------------------ matmul */

static int p_matmul_fuses(td_device *d, const td_matmul_desc *g) {
  return IN(d)->ops->matmul_fuses(IN(d), g);
}

static void p_matmul(td_device *d, const td_matmul_desc *g) {
  double t0 = td_now_seconds();
  IN(d)->ops->matmul(IN(d), g);
  char name[TD_PROF_NAME_MAX], batch[32] = "";
  if (g->batch > 1) snprintf(batch, sizeof batch, " batch=%lld", (long long)g->batch);
  static const char *epilogues[] = {"", " gelu", " dgelu"};
  snprintf(name, sizeof name, "matmul %s->%s m=%lld n=%lld k=%lld %c%c%s%s%s%s",
           td_dtype_name(g->ab_dtype), td_dtype_name(g->c_dtype), (long long)g->m, (long long)g->n,
           (long long)g->k, g->trans_a ? 'T' : 'N', g->trans_b ? 'T' : 'N', g->bias ? " +bias" : "",
           g->beta == 0.0f ? "" : g->c_in ? " +C_in" : " +=C", epilogues[g->epilogue], batch);
  done(d, t0, "matmul", name, TD_PROF_MATMUL,
       2.0 * (double)g->m * (double)g->n * (double)g->k * (double)g->batch);
}

static void p_bias_backward(td_device *d, float *dbias, const void *dout, td_dtype dout_dtype,
                            int64_t rows, int64_t cols, void *dout_cast, td_dtype cast_dtype) {
  double t0 = td_now_seconds();
  IN(d)->ops->bias_backward(IN(d), dbias, dout, dout_dtype, rows, cols, dout_cast, cast_dtype);
  kernel_done(d, t0, "bias_backward");
}

/* --------------------------------------------------------- norm, activation */

static void p_layernorm_forward(td_device *d, void *out, td_dtype out_dtype, float *mean,
                                float *rstd, const float *x, const float *w, const float *b,
                                int64_t rows, int64_t cols, float eps) {
  double t0 = td_now_seconds();
  IN(d)->ops->layernorm_forward(IN(d), out, out_dtype, mean, rstd, x, w, b, rows, cols, eps);
  kernel_done(d, t0, "layernorm_forward");
}
static void p_layernorm_backward(td_device *d, float *dx, float *dw, float *db, const float *dout,
                                 const float *x, const float *w, const float *mean,
                                 const float *rstd, int64_t rows, int64_t cols) {
  double t0 = td_now_seconds();
  IN(d)->ops->layernorm_backward(IN(d), dx, dw, db, dout, x, w, mean, rstd, rows, cols);
  kernel_done(d, t0, "layernorm_backward");
}
static void p_gelu_forward(td_device *d, void *out, td_dtype out_dtype, const void *x,
                           td_dtype x_dtype, int64_t n, td_gelu_kind kind) {
  double t0 = td_now_seconds();
  IN(d)->ops->gelu_forward(IN(d), out, out_dtype, x, x_dtype, n, kind);
  kernel_done(d, t0, "gelu_forward");
}
static void p_gelu_backward(td_device *d, void *dx, td_dtype dx_dtype, float *dbias,
                            const float *dout, const void *x, td_dtype x_dtype, int64_t rows,
                            int64_t cols, td_gelu_kind kind) {
  double t0 = td_now_seconds();
  IN(d)->ops->gelu_backward(IN(d), dx, dx_dtype, dbias, dout, x, x_dtype, rows, cols, kind);
  kernel_done(d, t0, dbias ? "gelu_backward+bias" : "gelu_backward");
}
static void p_add(td_device *d, float *out, const float *a, const float *b, int64_t n) {
  double t0 = td_now_seconds();
  IN(d)->ops->add(IN(d), out, a, b, n);
  kernel_done(d, t0, "add");
}
static void p_dropout(td_device *d, float *out, const float *resid, const float *x, int64_t n,
                      float p, uint64_t seed, uint64_t stream, uint64_t first) {
  double t0 = td_now_seconds();
  IN(d)->ops->dropout(IN(d), out, resid, x, n, p, seed, stream, first);
  kernel_done(d, t0, resid ? "dropout+add" : "dropout");
}

/* --------------------------------------------------------------- attention */

static double attention_flops(const td_attention_desc *a, double factor) {
  return factor * 2.0 * (double)a->batch * (double)a->heads * (double)a->seq * (double)a->seq *
         (double)a->head_dim;
}

static void attention_name(char *name, const char *op, const td_attention_desc *a) {
  snprintf(name, TD_PROF_NAME_MAX, "%s %s B=%lld T=%lld H=%lld D=%lld", op, td_dtype_name(a->dtype),
           (long long)a->batch, (long long)a->seq, (long long)a->heads, (long long)a->head_dim);
}

/* FLOPs as FlashAttention counts them: forward 4 B H T^2 D / 2 (causal), backward 2.5x. */
static void p_attention_forward(td_device *d, const td_attention_desc *a) {
  double t0 = td_now_seconds();
  IN(d)->ops->attention_forward(IN(d), a);
  char name[TD_PROF_NAME_MAX];
  attention_name(name, "attention_forward", a);
  done(d, t0, "attention_forward", name, TD_PROF_ATTENTION, attention_flops(a, 1.0));
}
/* Rows [q0, q0 + nq): each query row i against i + 1 keys, 4 D FLOPs a key a head. */
static void p_attention_forward_rows(td_device *d, const td_attention_desc *a, int64_t q0,
                                     int64_t nq) {
  double t0 = td_now_seconds();
  IN(d)->ops->attention_forward_rows(IN(d), a, q0, nq);
  char name[TD_PROF_NAME_MAX];
  snprintf(name, TD_PROF_NAME_MAX, "attention_forward_rows %s rows=[%lld,%lld) H=%lld D=%lld",
           td_dtype_name(a->dtype), (long long)q0, (long long)(q0 + nq), (long long)a->heads,
           (long long)a->head_dim);
  double keys = (double)nq * (double)q0 + (double)nq * (double)(nq + 1) / 2.0;
  done(d, t0, "attention_forward_rows", name, TD_PROF_ATTENTION,
       4.0 * keys * (double)a->heads * (double)a->head_dim);
}
static void p_attention_backward(td_device *d, const td_attention_desc *a) {
  double t0 = td_now_seconds();
  IN(d)->ops->attention_backward(IN(d), a);
  char name[TD_PROF_NAME_MAX];
  attention_name(name, "attention_backward", a);
  done(d, t0, "attention_backward", name, TD_PROF_ATTENTION, attention_flops(a, 2.5));
}

/* --------------------------------------------------------- embedding, loss */

static void p_embedding_forward(td_device *d, float *out, const int32_t *ids, int64_t n,
                                const float *table, int64_t vocab_start, int64_t rows_in_table,
                                int64_t cols, int accumulate) {
  double t0 = td_now_seconds();
  IN(d)->ops->embedding_forward(IN(d), out, ids, n, table, vocab_start, rows_in_table, cols,
                                accumulate);
  kernel_done(d, t0, "embedding_forward");
}
static void p_embedding_backward(td_device *d, float *dtable, const float *dout, const int32_t *ids,
                                 int64_t n, int64_t vocab_start, int64_t rows_in_table,
                                 int64_t cols) {
  double t0 = td_now_seconds();
  IN(d)->ops->embedding_backward(IN(d), dtable, dout, ids, n, vocab_start, rows_in_table, cols);
  kernel_done(d, t0, "embedding_backward");
}
static void p_cross_entropy_forward(td_device *d, float *losses, float *lse, const void *logits,
                                    td_dtype logits_dtype, const int32_t *targets, int64_t n,
                                    int64_t vocab) {
  double t0 = td_now_seconds();
  IN(d)->ops->cross_entropy_forward(IN(d), losses, lse, logits, logits_dtype, targets, n, vocab);
  kernel_done(d, t0, "cross_entropy_forward");
}
static void p_cross_entropy_combine(td_device *d, float *lse, float *losses,
                                    const float *lse_parts, const float *target_logit, int64_t n,
                                    int64_t parts) {
  double t0 = td_now_seconds();
  IN(d)->ops->cross_entropy_combine(IN(d), lse, losses, lse_parts, target_logit, n, parts);
  kernel_done(d, t0, "cross_entropy_combine");
}
static void p_masked_sum(td_device *d, double *out, const float *x, const float *mask,
                         int64_t n) {
  double t0 = td_now_seconds();
  IN(d)->ops->masked_sum(IN(d), out, x, mask, n);
  kernel_done(d, t0, "masked_sum");
}
static void p_cross_entropy_slice(td_device *d, float *lse, float *target_logit,
                                  const void *logits, td_dtype logits_dtype,
                                  const int32_t *targets, int64_t n, int64_t vocab,
                                  int64_t vocab_start) {
  double t0 = td_now_seconds();
  IN(d)->ops->cross_entropy_slice(IN(d), lse, target_logit, logits, logits_dtype, targets, n, vocab,
                                  vocab_start);
  kernel_done(d, t0, "cross_entropy_slice");
}
static void p_cross_entropy_backward(td_device *d, void *dlogits, td_dtype dlogits_dtype,
                                     const void *logits, td_dtype logits_dtype, const float *lse,
                                     const int32_t *targets, const float *dloss, int64_t n,
                                     int64_t vocab, int64_t vocab_start) {
  double t0 = td_now_seconds();
  IN(d)->ops->cross_entropy_backward(IN(d), dlogits, dlogits_dtype, logits, logits_dtype, lse,
                                     targets, dloss, n, vocab, vocab_start);
  kernel_done(d, t0, "cross_entropy_backward");
}
static void p_cross_entropy_fused(td_device *d, float *losses, float *lse, void *dlogits,
                                  td_dtype dlogits_dtype, const void *logits,
                                  td_dtype logits_dtype, const int32_t *targets,
                                  const float *dloss, int64_t n, int64_t vocab) {
  double t0 = td_now_seconds();
  IN(d)->ops->cross_entropy_fused(IN(d), losses, lse, dlogits, dlogits_dtype, logits,
                                  logits_dtype, targets, dloss, n, vocab);
  kernel_done(d, t0, "cross_entropy_fused");
}

/* --------------------------------------------------------------- optimizer */

static void p_adamw(td_device *d, float *param, const float *grad, float *m, float *v, int64_t n,
                    float lr, float beta1, float beta2, float eps, float weight_decay,
                    float grad_scale, int64_t step, void *copy, td_dtype copy_dtype) {
  double t0 = td_now_seconds();
  IN(d)->ops->adamw(IN(d), param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale,
                    step, copy, copy_dtype);
  kernel_done(d, t0, "adamw");
}
static void p_adamw_runs(td_device *d, float *params, const float *grads, float *m, float *v,
                         const td_adam_run *runs, int n_runs, float lr, float beta1, float beta2,
                         float eps, float weight_decay, float grad_scale, int64_t step,
                         void *copy, td_dtype copy_dtype) {
  double t0 = td_now_seconds();
  IN(d)->ops->adamw_runs(IN(d), params, grads, m, v, runs, n_runs, lr, beta1, beta2, eps,
                         weight_decay, grad_scale, step, copy, copy_dtype);
  kernel_done(d, t0, "adamw_runs");
}
static void p_cast(td_device *d, void *dst, td_dtype dst_dtype, const void *src, td_dtype src_dtype,
                   int64_t n) {
  double t0 = td_now_seconds();
  IN(d)->ops->cast(IN(d), dst, dst_dtype, src, src_dtype, n);
  char name[TD_PROF_NAME_MAX];
  snprintf(name, sizeof name, "cast %s->%s", td_dtype_name(src_dtype), td_dtype_name(dst_dtype));
  done(d, t0, "cast", name, TD_PROF_KERNEL, 0);
}
static void p_scale(td_device *d, float *x, int64_t n, float alpha) {
  double t0 = td_now_seconds();
  IN(d)->ops->scale(IN(d), x, n, alpha);
  kernel_done(d, t0, "scale");
}
static void p_count_zeros(td_device *d, double *out, const float *x, int64_t n) {
  double t0 = td_now_seconds();
  IN(d)->ops->count_zeros(IN(d), out, x, n);
  kernel_done(d, t0, "count_zeros");
}
static void p_sum_squares(td_device *d, double *out, const float *x, int64_t n) {
  double t0 = td_now_seconds();
  IN(d)->ops->sum_squares(IN(d), out, x, n);
  kernel_done(d, t0, "sum_squares");
}

/* ------------------------------------------------------------------ public */

td_device *td_profile_device_open(td_device *inner) {
  profiler *p = td_calloc(sizeof *p);
  p->inner = inner;
  p->region = "";
  p->entries = td_calloc(sizeof *p->entries * MAX_ENTRIES);
  snprintf(p->name, sizeof p->name, "profile(%s)", inner->ops->name);
  td_device_ops *o = &p->ops;
  o->name = p->name;
  o->caps = inner->ops->caps;
  o->alloc = p_alloc, o->free = p_free, o->synchronize = p_synchronize;
  o->memory_stats = inner->ops->memory_stats ? p_memory_stats : NULL;
  o->memory_info = inner->ops->memory_info ? p_memory_info : NULL;
  o->device_key = p_device_key;
  o->copy_h2d = p_copy_h2d, o->copy_d2h = p_copy_d2h, o->copy_d2d = p_copy_d2d, o->fill = p_fill;
  o->event_create = p_event_create, o->event_destroy = p_event_destroy;
  o->event_record = p_event_record, o->event_wait = p_event_wait;
  o->event_synchronize = p_event_synchronize, o->event_query = p_event_query;
  o->host_alloc = p_host_alloc, o->host_free = p_host_free;
  o->copy_h2d_async = p_copy_h2d_async, o->copy_d2h_async = p_copy_d2h_async;
  o->matmul = p_matmul, o->bias_backward = p_bias_backward;
  o->matmul_fuses = inner->ops->matmul_fuses ? p_matmul_fuses : NULL;
  o->layernorm_forward = p_layernorm_forward, o->layernorm_backward = p_layernorm_backward;
  o->gelu_forward = p_gelu_forward, o->gelu_backward = p_gelu_backward;
  o->add = p_add, o->dropout = p_dropout;
  o->attention_forward = p_attention_forward, o->attention_backward = p_attention_backward;
  o->attention_forward_rows = inner->ops->attention_forward_rows ? p_attention_forward_rows : NULL;
  o->embedding_forward = p_embedding_forward, o->embedding_backward = p_embedding_backward;
  o->cross_entropy_forward = p_cross_entropy_forward;
  o->cross_entropy_slice = p_cross_entropy_slice;
  o->cross_entropy_combine = p_cross_entropy_combine, o->masked_sum = p_masked_sum;
  o->cross_entropy_backward = p_cross_entropy_backward;
  o->cross_entropy_fused = inner->ops->cross_entropy_fused ? p_cross_entropy_fused : NULL;
  o->adamw_runs = inner->ops->adamw_runs ? p_adamw_runs : NULL;
  o->adamw = p_adamw, o->cast = p_cast, o->scale = p_scale, o->sum_squares = p_sum_squares;
  o->count_zeros = p_count_zeros;
  td_device *d = td_calloc(sizeof *d);
  d->ops = o, d->impl = p, d->index = inner->index;
  return d;
}

void td_profile_device_close(td_device *prof) {
  if (!prof) return;
  td_free(PR(prof)->entries);
  td_free(prof->impl);
  td_free(prof);
}

void td_profile_set_region(td_device *prof, const char *region) { PR(prof)->region = region; }

void td_profile_reset(td_device *prof) { PR(prof)->n_entries = 0; }

int td_profile_count(const td_device *prof) { return ((const profiler *)prof->impl)->n_entries; }

const td_profile_entry *td_profile_entry_at(const td_device *prof, int i) {
  const profiler *p = prof->impl;
  TD_CHECK(i >= 0 && i < p->n_entries, "profile entry %d of %d", i, p->n_entries);
  return &p->entries[i];
}

const char *td_prof_kind_name(td_prof_kind kind) {
  static const char *names[TD_PROF_KINDS] = {"matmul", "attention", "kernel"};
  TD_CHECK(kind >= 0 && kind < TD_PROF_KINDS, "profile kind %d", (int)kind);
  return names[kind];
}
