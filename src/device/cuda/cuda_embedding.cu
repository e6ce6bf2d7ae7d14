/* Embedding lookup and its scatter-add backward on the CUDA backend.
 *
 * The backward is deterministic without atomics: every element (row, c) of the
 * table gradient belongs to one thread, which adds the rows of dout whose id
 * maps to `row` in token order, the order the CPU adds them in (so the result
 * is the CPU's, bit for bit). Threads are laid out as (column, bucket of table
 * rows): a block owns EMB_COLS columns of the rows with row % buckets == bucket,
 * and walks all n ids (staged through shared memory) picking its own. The
 * bucket count only spreads the work; it does not change any sum. */
#include "device/cuda/cuda_internal.cuh"

#define EMB_COLS 128 /* columns per block (the block's threads) */
#define EMB_IDS 1024 /* ids staged per pass */

/* out[r, c] (+)= table[ids[r] - vocab_start, c], or 0 / nothing for an id outside
 * [vocab_start, vocab_start + rows_in_table); out: n x cols, table: rows_in_table x
 * cols. One block per row r (grid-stride over rows). */
__global__ void td_embedding_forward_kernel(float *out, const int32_t *ids, int64_t n,
                                            const float *table, int64_t vocab_start,
                                            int64_t rows_in_table, int64_t cols, int accumulate) {
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const int64_t row = (int64_t)ids[r] - vocab_start;
    const int valid = row >= 0 && row < rows_in_table;
    float *o = out + r * cols;
    const float *t = table + (valid ? row : 0) * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      if (accumulate) {
        if (valid) o[c] += t[c];
      } else {
        o[c] = valid ? t[c] : 0.0f;
      }
    }
  }
}

/* dtable[ids[r] - vocab_start, c] += dout[r, c] for ids in range, r in order.
 * grid (ceil(cols / EMB_COLS), buckets), block EMB_COLS: column c = blockIdx.x *
 * EMB_COLS + threadIdx.x, table rows with row % buckets == blockIdx.y. */
__global__ void td_embedding_backward_kernel(float *dtable, const float *dout, const int32_t *ids,
                                             int64_t n, int64_t vocab_start, int64_t rows_in_table,
                                             int64_t cols, int buckets) {
  __shared__ int32_t rows[EMB_IDS]; /* the pass's table rows, -1: not this block's */
  const int64_t c = (int64_t)blockIdx.x * EMB_COLS + threadIdx.x;
  const int64_t bucket = blockIdx.y;
  for (int64_t r0 = 0; r0 < n; r0 += EMB_IDS) {
    const int len = (int)min((int64_t)EMB_IDS, n - r0);
    __syncthreads(); /* the previous pass is done with rows[] */
    for (int t = threadIdx.x; t < len; t += blockDim.x) {
      int64_t row = (int64_t)ids[r0 + t] - vocab_start;
      rows[t] = row >= 0 && row < rows_in_table && row % buckets == bucket ? (int32_t)row : -1;
    }
    __syncthreads();
    if (c < cols)
      for (int t = 0; t < len; t++) {
        const int32_t row = rows[t];
        if (row >= 0) dtable[(int64_t)row * cols + c] += dout[(r0 + t) * cols + c];
      }
  }
}

static void cu_embedding_forward(td_device *d, float *out, const int32_t *ids, int64_t n,
                                 const float *table, int64_t vocab_start, int64_t rows_in_table,
                                 int64_t cols, int accumulate) {
  td_cuda *c = td_cuda_enter(d);
  if (n <= 0 || cols <= 0) return;
  unsigned grid = (unsigned)(n < 65536 * 16 ? n : 65536 * 16);
  td_embedding_forward_kernel<<<grid, TD_CUDA_THREADS, 0, c->stream>>>(
      out, ids, n, table, vocab_start, rows_in_table, cols, accumulate);
  TD_CUDA_LAUNCHED();
}

static void cu_embedding_backward(td_device *d, float *dtable, const float *dout,
                                  const int32_t *ids, int64_t n, int64_t vocab_start,
                                  int64_t rows_in_table, int64_t cols) {
  td_cuda *c = td_cuda_enter(d);
  if (n <= 0 || cols <= 0 || rows_in_table <= 0) return;
  if (rows_in_table > INT32_MAX) td_fail("embedding_backward: %lld table rows", (long long)rows_in_table);
  int64_t col_blocks = (cols + EMB_COLS - 1) / EMB_COLS;
  if (col_blocks > INT32_MAX) td_fail("embedding_backward: %lld columns", (long long)cols);
  /* about four blocks per SM, at most one bucket per table row */
  int64_t buckets = ((int64_t)c->sm_count * 4 + col_blocks - 1) / col_blocks;
  if (buckets > rows_in_table) buckets = rows_in_table;
  if (buckets > 65535) buckets = 65535;
  if (buckets < 1) buckets = 1;
  dim3 grid((unsigned)col_blocks, (unsigned)buckets);
  td_embedding_backward_kernel<<<grid, EMB_COLS, 0, c->stream>>>(
      dtable, dout, ids, n, vocab_start, rows_in_table, cols, (int)buckets);
  TD_CUDA_LAUNCHED();
}

void td_cuda_register_embedding(td_device_ops *ops) {
  ops->embedding_forward = cu_embedding_forward;
  ops->embedding_backward = cu_embedding_backward;
}
