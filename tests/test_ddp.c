/* Data-parallel buckets (parallel/ddp.h): whole tensors in backward order (the last
 * tensor in the first bucket), each bucket at most the bucket size unless one
 * tensor alone is larger, every tensor in exactly one bucket, and a bucket's
 * range covering its tensors and nothing of another bucket's. The all-reduce
 * itself is tested under mpirun by cli_train_dp.sh (losses equal to DP=1). */
#include <stdlib.h>

#include "base/mem.h"
#include "check.h"
#include "comm/comm.h"
#include "parallel/ddp.h"

static void check_layout(const td_ddp_tensor *t, int n, int64_t bucket_size) {
  td_ddp d;
  float grads[1];
  td_ddp_init(&d, td_comm_world(), grads, t, n, bucket_size);
  int ordered = 1, sized = 1, covered = 1, disjoint = 1;
  for (int i = 0; i < n; i++) {
    const td_ddp_bucket *b = &d.buckets[d.bucket_of[i]];
    if (i + 1 < n && d.bucket_of[i] < d.bucket_of[i + 1]) ordered = 0; /* later tensor, earlier bucket */
    if (t[i].offset < b->begin || t[i].offset + t[i].numel > b->end) covered = 0;
    for (int k = 0; k < d.n_buckets; k++) /* no other bucket overlaps this tensor */
      if (k != d.bucket_of[i] && t[i].offset < d.buckets[k].end && d.buckets[k].begin < t[i].offset + t[i].numel)
        disjoint = 0;
  }
  for (int k = 0; k < d.n_buckets; k++) {
    int64_t sum = 0;
    for (int i = 0; i < n; i++)
      if (d.bucket_of[i] == k) sum += t[i].numel;
    if (sum > bucket_size && d.buckets[k].n_tensors > 1) sized = 0;
  }
  CHECK(d.bucket_of[n - 1] == 0 && ordered, "%d tensors, bucket %lld: backward order (%d buckets)", n,
        (long long)bucket_size, d.n_buckets);
  CHECK(sized, "bucket %lld: no bucket of several tensors exceeds it", (long long)bucket_size);
  CHECK(covered && disjoint, "bucket %lld: every tensor in exactly its bucket's range", (long long)bucket_size);
  /* a world of one: marking every tensor ready completes and re-arms every bucket */
  for (int i = n - 1; i >= 0; i--) td_ddp_grads_ready(&d, i, 1);
  int armed = 1;
  td_ddp_finish(&d);
  for (int k = 0; k < d.n_buckets; k++) armed &= d.buckets[k].pending == d.buckets[k].n_tensors &&
             d.buckets[k].state == TD_BUCKET_WAITING;
  CHECK(armed, "bucket %lld: every bucket re-armed after finish", (long long)bucket_size);
  td_ddp_free(&d);
}

int main(void) {
  td_comm_init();
  /* aligned views with gaps, as the model lays them out; sizes from 1 to 5000 */
  enum { N = 40 };
  td_ddp_tensor t[N];
  int64_t off = 0;
  srand((unsigned)tst_seed());
  for (int i = 0; i < N; i++) {
    int64_t numel = 1 + rand() % 5000;
    t[i] = (td_ddp_tensor){.offset = off, .numel = numel};
    off += (numel + 15) / 16 * 16;
  }
  static const int64_t sizes[] = {1, 100, 4999, 5000, 12345, 1 << 20};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) check_layout(t, N, sizes[s]);
  td_ddp d;
  float g[1];
  td_ddp_init(&d, td_comm_world(), g, t, N, 1 << 20);
  CHECK(d.n_buckets == 1, "everything in one bucket when it fits: %d", d.n_buckets);
  td_ddp_free(&d);
  CHECK(td_ddp_default_bucket_size(1) == 40000000 && td_ddp_default_bucket_size(64) == 64000000,
        "Megatron's default bucket: max(40M, 1M x dp)");
  td_comm_finalize();
  return tst_finish();
}
