#include "parallel/ddp.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/mem.h"

int64_t td_ddp_default_bucket_size(int dp_size) {
  int64_t by_dp = 1000000LL * dp_size;
  return by_dp > 40000000LL ? by_dp : 40000000LL;
}

static void add_to_bucket(td_ddp_bucket *b, const td_ddp_tensor *t) {
  int64_t end = t->offset + t->numel;
  if (b->n_tensors == 0 || t->offset < b->begin) b->begin = t->offset;
  if (b->n_tensors == 0 || end > b->end) b->end = end;
  b->n_tensors++;
}

void td_ddp_init(td_ddp *d, td_comm *dp, float *grads, const td_ddp_tensor *tensors, int n,
                 int64_t bucket_size) {
  TD_CHECK(n > 0 && bucket_size > 0, "ddp: %d tensors, bucket size %lld", n, (long long)bucket_size);
  *d = (td_ddp){.dp = dp, .grads = grads, .n_tensors = n};
  d->bucket_of = td_malloc(sizeof *d->bucket_of * (size_t)n);
  d->buckets = td_calloc(sizeof *d->buckets * (size_t)n); /* at most one per tensor */
  int64_t filled = 0;
  for (int i = n - 1; i >= 0; i--) { /* backward order */
    td_ddp_bucket *b = &d->buckets[d->n_buckets];
    if (b->n_tensors > 0 && filled + tensors[i].numel > bucket_size) {
      d->n_buckets++, b++;
      filled = 0;
    }
    add_to_bucket(b, &tensors[i]);
    filled += tensors[i].numel;
    d->bucket_of[i] = d->n_buckets;
  }
  d->n_buckets++;
  for (int k = 0; k < d->n_buckets; k++) d->buckets[k].pending = d->buckets[k].n_tensors;
}

void td_ddp_free(td_ddp *d) {
  td_free(d->bucket_of);
  td_free(d->buckets);
  *d = (td_ddp){0};
}

static void start_bucket(td_ddp *d, td_ddp_bucket *b) {
  if (td_comm_size(d->dp) == 1) { /* nothing to reduce */
    b->state = TD_BUCKET_DONE;
    return;
  }
  b->state = TD_BUCKET_IN_FLIGHT;
  float *g = d->grads + b->begin;
  td_comm_iall_reduce(d->dp, g, g, b->end - b->begin, TD_F32, TD_OP_SUM, &b->req);
  d->reductions++;
}

/* Let MPI move the buckets in flight (completed requests are finished by test). */
static void progress(td_ddp *d) {
  for (int k = 0; k < d->n_buckets; k++)
    if (d->buckets[k].state == TD_BUCKET_IN_FLIGHT && td_comm_test(&d->buckets[k].req))
      d->buckets[k].state = TD_BUCKET_DONE;
}

void td_ddp_grads_ready(td_ddp *d, int first, int count) {
  TD_CHECK(first >= 0 && count >= 0 && first + count <= d->n_tensors, "ddp: tensors [%d, %d) of %d",
           first, first + count, d->n_tensors);
  double t0 = td_now_seconds();
  for (int i = first; i < first + count; i++) {
    td_ddp_bucket *b = &d->buckets[d->bucket_of[i]];
    TD_CHECK(b->pending > 0, "ddp: tensor %d marked ready twice in one backward", i);
    if (--b->pending == 0) start_bucket(d, b);
  }
  progress(d);
  d->comm_seconds += td_now_seconds() - t0;
}

void td_ddp_finish(td_ddp *d) {
  double t0 = td_now_seconds();
  for (int k = 0; k < d->n_buckets; k++) {
    td_ddp_bucket *b = &d->buckets[k];
    if (b->state == TD_BUCKET_WAITING) start_bucket(d, b);
  }
  for (int k = 0; k < d->n_buckets; k++) {
    td_ddp_bucket *b = &d->buckets[k];
    if (b->state == TD_BUCKET_IN_FLIGHT) td_comm_wait(&b->req);
    b->state = TD_BUCKET_WAITING;
    b->pending = b->n_tensors;
  }
  d->comm_seconds += td_now_seconds() - t0;
}
