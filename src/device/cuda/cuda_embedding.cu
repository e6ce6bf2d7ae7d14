/* Embedding lookup and its scatter-add backward on the CUDA backend.
 *
 * The backward must be the CPU's bit for bit: dtable[row, c] starts from its own
 * value and adds the dout rows of the ids that map to `row` one by one, in token
 * order (float adds do not reassociate, so the tokens are not summed first), and
 * without atomics. So every (row, column) belongs to one thread, which needs the
 * row's tokens in order:
 *  1. keys: key[r] = ids[r] - vocab_start, or rows_in_table for an id outside
 *     the table; a stable radix sort of (key, r) on just the bits rows_in_table
 *     needs (CUB) lines up every row's tokens, in token order, as one segment;
 *     out-of-table ids sort last.
 *  2. accumulate: a block owns EMB_COLS columns (a thread each) and the segments
 *     that start in its EMB_WIN sorted positions, following the last of them past
 *     its positions as far as it runs. It walks windows of EMB_WIN positions: the
 *     window's keys and tokens are staged in shared memory (the next window's are
 *     fetched meanwhile) and turned into bit masks by warp ballots (segment starts,
 *     this block's positions); each thread then issues all the window's dout loads,
 *     and the table loads of the segments starting there, before adding them in
 *     order and writing each row back once, at its segment's end.
 * Random ids (segments of ~1 token) keep EMB_WIN rows in flight per thread; a
 * frequent token of real text (hundreds of tokens: a chain of dependent adds)
 * costs one memory round trip per EMB_WIN of its tokens, not one per token. The
 * loads are scalar on purpose: registers bound the loads a thread has in flight,
 * and 32 tokens of one column (64 registers with the table values) shorten such a
 * chain 4x more than 8 tokens of float4 would. */
#include "device/cuda/cuda_internal.cuh"

#include <cub/device/device_radix_sort.cuh>

/* The backward's shapes: a block of EMB_COLS threads (one column each) walks windows
 * of EMB_WIN sorted positions (the dout loads each thread has in flight); a window's
 * metadata words: keys at [0, EMB_WIN + 2), tokens at [EMB_TOK, EMB_TOK + EMB_WIN). */
#define EMB_COLS 128
#define EMB_WIN 32
#define EMB_TOK 64
static_assert(EMB_WIN + 2 <= EMB_TOK && EMB_TOK + EMB_WIN <= EMB_COLS, "a word per thread");
static_assert(EMB_WIN == 32, "a window is a warp's ballot");

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

/* The sort's input: keys[r] = ids[r] - vocab_start, or rows_in_table outside
 * [0, rows_in_table); toks[r] = r. */
__global__ void td_embedding_keys_kernel(uint32_t *keys, int32_t *toks, const int32_t *ids,
                                         int64_t n, int64_t vocab_start, int64_t rows_in_table) {
  TD_GRID_STRIDE(r, n) {
    const int64_t row = (int64_t)ids[r] - vocab_start;
    keys[r] = (uint32_t)(row >= 0 && row < rows_in_table ? row : rows_in_table);
    toks[r] = (int32_t)r;
  }
}

/* This thread's word of the metadata of the window at sorted position j0: thread
 * t < EMB_WIN + 2 the key of position j0 - 1 + t (UINT32_MAX before the first,
 * `rows` past the last), thread EMB_TOK + k the token of j0 + k. */
__device__ __forceinline__ uint32_t td_embedding_meta(const uint32_t *keys, const int32_t *toks,
                                                      int64_t n, uint32_t rows, int64_t j0) {
  const int t = threadIdx.x;
  if (t < EMB_WIN + 2) {
    const int64_t j = j0 - 1 + t;
    return j < 0 ? UINT32_MAX : j < n ? keys[j] : rows;
  }
  const int64_t j = j0 + t - EMB_TOK;
  return t >= EMB_TOK && t < EMB_TOK + EMB_WIN && j < n ? (uint32_t)toks[j] : 0;
}

/* dtable[keys[j], c] += dout[toks[j], c] over sorted positions j, in order, for
 * keys below rows (keys, toks: n, sorted by key, stable). grid (ceil(n / EMB_WIN),
 * ceil(cols / EMB_COLS)), block EMB_COLS: column c = blockIdx.y * EMB_COLS +
 * threadIdx.x; the segments starting in positions [blockIdx.x * EMB_WIN, + EMB_WIN). */
__global__ void __launch_bounds__(EMB_COLS)
    td_embedding_backward_kernel(float *dtable, const float *dout, const uint32_t *keys,
                                 const int32_t *toks, int64_t n, uint32_t rows, int64_t cols) {
  __shared__ uint32_t meta[2][EMB_TOK + EMB_WIN]; /* double-buffered window metadata */
  const int64_t p0 = (int64_t)blockIdx.x * EMB_WIN;
  const int64_t c = (int64_t)blockIdx.y * EMB_COLS + threadIdx.x;
  const bool col = c < cols;
  uint32_t word = td_embedding_meta(keys, toks, n, rows, p0);
  float acc = 0.0f;
  for (int64_t j0 = p0, b = 0;; j0 += EMB_WIN, b ^= 1) {
    if (threadIdx.x < EMB_TOK + EMB_WIN) meta[b][threadIdx.x] = word;
    __syncthreads(); /* also: everyone is done with meta[b ^ 1], the previous window */
    word = td_embedding_meta(keys, toks, n, rows, j0 + EMB_WIN);
    const uint32_t *key = meta[b] + 1; /* key[k]: position j0 + k, k in [-1, EMB_WIN] */
    const uint32_t *tok = meta[b] + EMB_TOK;
    /* start: a segment's first position; live: this block's (the first window:
     * from its first start on; later ones: the open segment, up to the next start) */
    const int lane = threadIdx.x & 31;
    const uint32_t start = __ballot_sync(~0u, key[lane] != key[lane - 1]);
    const uint32_t first = start & (0u - start); /* the lowest start, 0 if none */
    const uint32_t in = __ballot_sync(~0u, key[lane] < rows);
    const uint32_t live = in & (j0 == p0 ? 0u - first : first - 1);
    const bool more = key[EMB_WIN] == key[EMB_WIN - 1]; /* the last segment runs on */
    const uint32_t end = start >> 1 | (more ? 0u : 1u << (EMB_WIN - 1));
    if (col) {
      float d[EMB_WIN], t[EMB_WIN]; /* every load of the window in flight before the adds */
#pragma unroll
      for (int k = 0; k < EMB_WIN; k++) {
        const bool l = live >> k & 1, s = start >> k & 1;
        d[k] = l ? dout[(int64_t)tok[k] * cols + c] : 0.0f;
        t[k] = l && s ? dtable[(int64_t)key[k] * cols + c] : 0.0f;
      }
      /* the rows' addresses again from shared memory (volatile: not kept in registers) */
      const volatile uint32_t *vkey = key;
#pragma unroll
      for (int k = 0; k < EMB_WIN; k++)
        if (live >> k & 1) {
          if (start >> k & 1) acc = t[k];
          acc += d[k];
          if (end >> k & 1) dtable[(int64_t)vkey[k] * cols + c] = acc;
        }
    }
    /* block-uniform: go on while this block's last segment runs past the window */
    if (!(live >> (EMB_WIN - 1) & 1) || !more) break;
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
  if (rows_in_table > INT32_MAX)
    td_fail("embedding_backward: %lld table rows", (long long)rows_in_table);
  if (n > INT32_MAX) td_fail("embedding_backward: %lld ids", (long long)n);
  int64_t col_blocks = (cols + EMB_COLS - 1) / EMB_COLS;
  if (col_blocks > 65535) td_fail("embedding_backward: %lld columns", (long long)cols);
  int bits = 1; /* the sort's key bits: enough for rows_in_table itself (out of table) */
  while (bits < 32 && ((int64_t)1 << bits) <= rows_in_table) bits++;
  /* scratch: keys and tokens, in and sorted, then CUB's temporary storage */
  size_t arr = ((size_t)n * 4 + 255) & ~(size_t)255, temp = 0;
  TD_CUDA_OK(cub::DeviceRadixSort::SortPairs(nullptr, temp, (const uint32_t *)nullptr,
                                             (uint32_t *)nullptr, (const int32_t *)nullptr,
                                             (int32_t *)nullptr, (int)n, 0, bits, c->stream));
  char *s = (char *)td_cuda_scratch(c, 4 * arr + temp);
  uint32_t *keys_in = (uint32_t *)s, *keys = (uint32_t *)(s + arr);
  int32_t *toks_in = (int32_t *)(s + 2 * arr), *toks = (int32_t *)(s + 3 * arr);
  td_embedding_keys_kernel<<<td_cuda_grid(c, n, TD_CUDA_THREADS), TD_CUDA_THREADS, 0, c->stream>>>(
      keys_in, toks_in, ids, n, vocab_start, rows_in_table);
  TD_CUDA_LAUNCHED();
  TD_CUDA_OK(cub::DeviceRadixSort::SortPairs(s + 4 * arr, temp, keys_in, keys, toks_in, toks,
                                             (int)n, 0, bits, c->stream));
  dim3 grid((unsigned)((n + EMB_WIN - 1) / EMB_WIN), (unsigned)col_blocks);
  td_embedding_backward_kernel<<<grid, EMB_COLS, 0, c->stream>>>(
      dtable, dout, keys, toks, n, (uint32_t)rows_in_table, cols);
  TD_CUDA_LAUNCHED();
}

void td_cuda_register_embedding(td_device_ops *ops) {
  ops->embedding_forward = cu_embedding_forward;
  ops->embedding_backward = cu_embedding_backward;
}
