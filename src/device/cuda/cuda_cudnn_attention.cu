/* cuDNN's fused attention (its flash-attention engines on the tensor cores) for
 * the CUDA backend's attention ops, through the cuDNN frontend's graph API
 * (header-only C++, scripts/fetch-cudnn-frontend.py puts it in third_party/).
 *
 * Which calls it takes: bf16, head_dim a multiple of 8 (cuDNN's alignment), T > 1,
 * a dropout mask (below) of at most 4 GiB; every other call runs trident's
 * kernels (cuda_attention.cu).
 *
 * Dropout: cuDNN would draw its own masks; trident's are td_rng_u32's, the CPU's
 * (part of its parity, and of tensor parallelism's: a rank draws the unsplit
 * model's masks for its heads). So the graphs take a dropout mask as an input
 * (cuDNN's custom-mask dropout): td_attn_dropout_mask_kernel writes it, bf16
 * [B, H, T, T], 1 where cuda_attention.cu's rule keeps a probability and 0 where
 * it drops it or causality masks it, before each call, into a buffer kept with
 * the handle (B H T^2 x 2 bytes: 400 MB at B16 H12 T1024). TRIDENT_CUDA_ATTENTION picks: auto (the default: cuDNN
 * where it takes the call and loads), cudnn (fail instead of falling back: tests
 * and benchmarks that must know which ran), native (never cuDNN).
 *
 * Layouts: td_attention_desc's. Q, K and V are strided views of qkv [B, T, H, 3, D]
 * as [B, H, T, D] tensors (strides T*H*3*D, 3*D, H*3*D, 1; K at +D, V at +2D);
 * O and dO [B, T, H, D] as [B, H, T, D] (strides T*H*D, D, H*D, 1); cuDNN's softmax
 * statistics are max + log(sum exp), the natural-log log-sum-exp of the scaled,
 * masked scores: trident's lse [B, H, T] exactly. The backward runs cuDNN's
 * deterministic algorithm (bit-reproducible dQ, as every trident kernel is).
 *
 * cuDNN is loaded with dlopen at the first call that wants it (libcudnn.so.9, or
 * TRIDENT_CUDNN_LIBRARY): a binary built with it runs where cuDNN is missing, on
 * trident's kernels. Graphs are built once per shape and handle and cached (a
 * curriculum that steps the sequence length builds one per length); a shape
 * cuDNN refuses is remembered and runs trident's kernels, with one warning. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "device/cuda/cuda_internal.cuh"

typedef enum { ATTN_AUTO, ATTN_CUDNN, ATTN_NATIVE } attn_mode;

static attn_mode mode_from_env(void) {
  const char *s = getenv("TRIDENT_CUDA_ATTENTION");
  if (!s || !*s || !strcmp(s, "auto")) return ATTN_AUTO;
  if (!strcmp(s, "cudnn")) return ATTN_CUDNN;
  if (!strcmp(s, "native")) return ATTN_NATIVE;
  td_fail("TRIDENT_CUDA_ATTENTION=%s: expected auto, cudnn or native", s);
}

/* Why cuDNN does not take this call (NULL: it may). */
#define TD_CUDNN_MASK_MAX ((uint64_t)4 << 30) /* bytes of a dropout mask cuDNN is given */

static uint64_t mask_bytes(const td_attention_desc *ad) {
  return (uint64_t)ad->batch * (uint64_t)ad->heads * (uint64_t)ad->seq * (uint64_t)ad->seq * 2;
}

static const char *refusal(const td_attention_desc *ad) {
  if (ad->dtype != TD_BF16) return "cuDNN's fused attention is bf16 here (fp32 runs trident's)";
  if (ad->head_dim % 8 != 0) return "head_dim not a multiple of 8";
  if (ad->seq == 1) return "seq 1 (cuDNN 9.14 refuses s_q = s_kv = 1)";
  if (ad->dropout_p != 0.0f && mask_bytes(ad) > TD_CUDNN_MASK_MAX)
    return "attention dropout whose mask (batch x heads x seq^2 bf16) exceeds 4 GiB";
  return NULL;
}

#ifndef TD_HAVE_CUDNN

static const char *const g_why = "this trident was built without the cuDNN frontend headers";

extern "C" void td_cuda_describe_kernels(char *buf, size_t n) {
  snprintf(buf, n, "attention on trident's kernels (%s)", g_why);
}

int td_cudnn_attention(td_cuda *c, const td_attention_desc *ad, int backward) {
  (void)c, (void)backward;
  attn_mode m = mode_from_env();
  if (m == ATTN_CUDNN) {
    const char *why = refusal(ad);
    td_fail("TRIDENT_CUDA_ATTENTION=cudnn: %s", why ? why : g_why);
  }
  return 0;
}

void td_cudnn_release(td_cuda *c) { (void)c; }

extern "C" const char *td_cudnn_describe(void) { return g_why; }

extern "C" int64_t td_cudnn_attention_calls(void) { return 0; }

#else /* TD_HAVE_CUDNN */

#include <memory>
#include <string>
#include <vector>

#include <cudnn_frontend.h>

namespace fe = cudnn_frontend;

/* The frontend's dynamic loading reads the library's handle from here. */
namespace cudnn_frontend {
void *cudnn_dlhandle = nullptr;
}

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static char g_load_error[512]; /* why cuDNN did not load ("" when it did) */
static size_t g_version;

static void load_once(void) {
  const char *path = getenv("TRIDENT_CUDNN_LIBRARY");
  const char *name = path && *path ? path : "libcudnn.so.9";
  void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = dlerror();
    snprintf(g_load_error, sizeof g_load_error, "cannot load %s: %s", name,
             why ? why : "not found");
    return;
  }
  fe::cudnn_dlhandle = lib;
  try {
    g_version = fe::detail::get_backend_version();
  } catch (const std::exception &e) {
    snprintf(g_load_error, sizeof g_load_error, "%s: %s", name, e.what());
    fe::cudnn_dlhandle = nullptr;
    dlclose(lib);
    return;
  }
  if (g_version / 10000 != 9) {
    snprintf(g_load_error, sizeof g_load_error, "%s is cuDNN %zu.%zu; trident needs cuDNN 9", name,
             g_version / 10000, g_version / 100 % 100);
    fe::cudnn_dlhandle = nullptr;
    dlclose(lib);
  }
}

/* NULL when cuDNN is loaded, else why not. */
static const char *load(void) {
  pthread_once(&g_once, load_once);
  return g_load_error[0] ? g_load_error : NULL;
}

extern "C" const char *td_cudnn_describe(void) {
  static char buf[96];
  const char *why = load();
  if (why) return why;
  snprintf(buf, sizeof buf, "cuDNN %zu.%zu.%zu", g_version / 10000, g_version / 100 % 100,
           g_version % 100);
  return buf;
}

extern "C" void td_cuda_describe_kernels(char *buf, size_t n) {
  const char *why = load();
  attn_mode m = mode_from_env();
  if (m == ATTN_NATIVE)
    snprintf(buf, n, "attention on trident's kernels (TRIDENT_CUDA_ATTENTION=native)");
  else if (why)
    snprintf(buf, n, "attention on trident's kernels (cuDNN: %s)", why);
  else
    snprintf(buf, n,
             "attention on %s's fused kernels for bf16 (dropout with trident's masks), "
             "trident's kernels otherwise",
             td_cudnn_describe());
}

static int64_t g_calls; /* attention ops cuDNN ran (td_cudnn_attention_calls) */

extern "C" int64_t td_cudnn_attention_calls(void) { return __atomic_load_n(&g_calls, __ATOMIC_RELAXED); }

/* Tensor uids of the graphs' variant packs. */
enum { UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV, UID_MASK };

typedef struct {
  int64_t B, T, H, D;
  uint32_t scale_bits, dropout_bits; /* the dropout probability's bits (0: none) */
  int backward;
} graph_key;

typedef struct {
  graph_key key;
  std::shared_ptr<fe::graph::Graph> graph; /* null: cuDNN refused this shape */
  int64_t workspace;
} graph_entry;

struct td_cudnn {
  cudnnHandle_t handle;
  std::vector<graph_entry> graphs;
  void *mask; /* the dropout mask of the latest call with dropout */
  size_t mask_cap;
  size_t mask_refused; /* bytes of a mask the device had no room for (0: none yet) */
};

static bool same_key(const graph_key &a, const graph_key &b) {
  return a.B == b.B && a.T == b.T && a.H == b.H && a.D == b.D && a.scale_bits == b.scale_bits &&
         a.dropout_bits == b.dropout_bits && a.backward == b.backward;
}

/* A frontend call's error as an exception (caught in build_graph). */
static void fe_ok(fe::error_t e, const char *what) {
  if (e.is_bad()) throw std::runtime_error(std::string(what) + ": " + e.get_message());
}

static std::vector<int64_t> qkv_stride(const graph_key &k) {
  return {k.T * k.H * 3 * k.D, 3 * k.D, k.H * 3 * k.D, 1};
}
static std::vector<int64_t> o_stride(const graph_key &k) {
  return {k.T * k.H * k.D, k.D, k.H * k.D, 1};
}

static std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph &g, const char *name,
                                                           int64_t uid,
                                                           const std::vector<int64_t> &dim,
                                                           const std::vector<int64_t> &stride) {
  return g.tensor(
      fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dim).set_stride(stride));
}

static std::shared_ptr<fe::graph::Graph> build_graph(cudnnHandle_t h, const graph_key &k,
                                                     float scale, float dropout_p) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const std::vector<int64_t> dim = {k.B, k.H, k.T, k.D}, sdim = {k.B, k.H, k.T, 1};
  const std::vector<int64_t> sstride = {k.H * k.T, k.T, 1, 1};
  auto q = input(*g, "Q", UID_Q, dim, qkv_stride(k));
  auto kk = input(*g, "K", UID_K, dim, qkv_stride(k));
  auto v = input(*g, "V", UID_V, dim, qkv_stride(k));
  std::shared_ptr<fe::graph::Tensor_attributes> mask; /* trident's dropout mask, bf16 */
  if (dropout_p != 0.0f)
    mask = input(*g, "DropoutMask", UID_MASK, {k.B, k.H, k.T, k.T},
                 {k.H * k.T * k.T, k.T * k.T, k.T, 1});
  const float keep_scale = 1.0f / (1.0f - dropout_p); /* cuda_attention.cu's */
  if (!k.backward) {
    auto opts = fe::graph::SDPA_attributes()
                    .set_name("attention_forward")
                    .set_generate_stats(true)
                    .set_causal_mask(true)
                    .set_attn_scale(scale);
    if (mask) opts.set_dropout(mask, std::make_shared<fe::graph::Tensor_attributes>(keep_scale));
    auto [o, stats] = g->sdpa(q, kk, v, opts);
    o->set_output(true).set_uid(UID_O).set_dim(dim).set_stride(o_stride(k));
    stats->set_output(true).set_uid(UID_STATS).set_data_type(fe::DataType_t::FLOAT);
    stats->set_dim(sdim).set_stride(sstride);
  } else {
    auto o = input(*g, "O", UID_O, dim, o_stride(k));
    auto dout = input(*g, "dO", UID_DO, dim, o_stride(k));
    auto stats = input(*g, "Stats", UID_STATS, sdim, sstride);
    stats->set_data_type(fe::DataType_t::FLOAT);
    auto opts = fe::graph::SDPA_backward_attributes()
                    .set_name("attention_backward")
                    .set_causal_mask(true)
                    .set_attn_scale(scale)
                    .set_deterministic_algorithm(true);
    if (mask)
      opts.set_dropout(mask, std::make_shared<fe::graph::Tensor_attributes>(keep_scale),
                       std::make_shared<fe::graph::Tensor_attributes>(1.0f - dropout_p));
    auto [dq, dk, dv] = g->sdpa_backward(q, kk, v, o, dout, stats, opts);
    dq->set_output(true).set_uid(UID_DQ).set_dim(dim).set_stride(qkv_stride(k));
    dk->set_output(true).set_uid(UID_DK).set_dim(dim).set_stride(qkv_stride(k));
    dv->set_output(true).set_uid(UID_DV).set_dim(dim).set_stride(qkv_stride(k));
  }
  fe_ok(g->validate(), "validate");
  fe_ok(g->build_operation_graph(h), "build_operation_graph");
  fe_ok(g->create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans");
  fe_ok(g->check_support(h), "check_support");
  fe_ok(g->build_plans(h), "build_plans");
  return g;
}

/* The cached entry of this call's shape, built at its first use. */
static graph_entry *entry_for(td_cuda *c, const td_attention_desc *ad, int backward,
                              attn_mode m) {
  if (!c->cudnn) {
    c->cudnn = new td_cudnn();
    if (fe::detail::create_handle(&c->cudnn->handle) != CUDNN_STATUS_SUCCESS)
      td_fail("cuDNN: cudnnCreate failed on %s", c->name);
    if (fe::detail::set_stream(c->cudnn->handle, c->stream) != CUDNN_STATUS_SUCCESS)
      td_fail("cuDNN: cudnnSetStream failed on %s", c->name);
  }
  graph_key k = {ad->batch, ad->seq, ad->heads, ad->head_dim, 0, 0, backward};
  memcpy(&k.scale_bits, &ad->scale, 4);
  memcpy(&k.dropout_bits, &ad->dropout_p, 4);
  for (auto &e : c->cudnn->graphs)
    if (same_key(e.key, k)) return &e;
  graph_entry e = {k, nullptr, 0};
  try {
    e.graph = build_graph(c->cudnn->handle, k, ad->scale, ad->dropout_p);
    fe_ok(e.graph->get_workspace_size(e.workspace), "get_workspace_size");
  } catch (const std::exception &ex) {
    if (m == ATTN_CUDNN)
      td_fail("TRIDENT_CUDA_ATTENTION=cudnn: cuDNN's attention %s refuses B=%lld T=%lld H=%lld "
              "D=%lld: %s",
              backward ? "backward" : "forward", (long long)k.B, (long long)k.T, (long long)k.H,
              (long long)k.D, ex.what());
    td_warn("cuDNN's attention %s refuses B=%lld T=%lld H=%lld D=%lld dropout %g (%s): "
            "trident's kernels run it",
            backward ? "backward" : "forward", (long long)k.B, (long long)k.T, (long long)k.H,
            (long long)k.D, (double)ad->dropout_p, ex.what());
    e.graph = nullptr;
  }
  c->cudnn->graphs.push_back(e);
  return &c->cudnn->graphs.back();
}

/* mask[b, h, i, j] (bf16 [B, H, T, T]) = 1 where trident's attention keeps
 * probability (b, h, i, j), 0 where it drops it (the counter
 * ((b Ht + h0 + h) T + i) T + j's word below thr: cuda_attention.cu's rule), for
 * j <= i only: causality zeroes P above the diagonal, where the buffer holds
 * the zeros of its allocation or an earlier call's 0s and 1s (never a NaN,
 * which 0 would not cancel). One block per row (b, h, i), each thread a Philox
 * block (4 counters) at a time. */
__global__ void td_attn_dropout_mask_kernel(uint16_t *mask, int64_t B, int64_t H, int64_t T,
                                            int64_t Ht, int64_t h0, uint64_t seed,
                                            uint64_t stream, uint32_t thr) {
  for (int64_t row = blockIdx.x; row < B * H * T; row += gridDim.x) {
    const int64_t i = row % T, h = row / T % H, b = row / (T * H);
    const uint64_t c0 = (uint64_t)(((b * Ht + h0 + h) * T + i) * T); /* counter of (i, 0) */
    uint16_t *out = mask + row * T;
    const uint64_t c1 = c0 + (uint64_t)i + 1; /* past (i, i) */
    for (uint64_t blk = c0 / 4 + threadIdx.x; 4 * blk < c1; blk += blockDim.x) {
      const td_hd_u32x4 w = td_hd_rng_block(seed, stream, blk);
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const uint64_t cc = 4 * blk + (uint64_t)e;
        if (cc < c0 || cc >= c1) continue;
        out[cc - c0] = w.w[e] >= thr ? 0x3F80 : 0; /* bf16 1.0 : 0 */
      }
    }
  }
}

/* The call's dropout mask, written on the handle's stream into the kept buffer
 * (grown, never shrunk, when a call needs more; from the backend's stream-ordered
 * pool). NULL when the device has no room for it: the call then runs on
 * trident's kernels, which need no mask, with a warning once (a mask at least
 * as large is not tried again). */
static void *dropout_mask(td_cuda *c, const td_attention_desc *ad) {
  const size_t bytes = (size_t)mask_bytes(ad);
  td_cudnn *n = c->cudnn;
  if (bytes > n->mask_cap) {
    if (n->mask_refused && bytes >= n->mask_refused) return NULL;
    if (n->mask) td_cuda_free_counted(c, n->mask);
    n->mask = NULL, n->mask_cap = 0;
    if (td_cuda_malloc_counted(c, &n->mask, bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      n->mask = NULL, n->mask_refused = bytes;
      td_warn("%s: no room for cuDNN's attention dropout mask (%.1f MiB, batch x heads x "
              "seq^2 bf16): attention with dropout runs on trident's kernels",
              c->name, bytes / 1048576.0);
      return NULL;
    }
    TD_CUDA_OK(cudaMemsetAsync(n->mask, 0, bytes, c->stream)); /* the upper triangles */
    n->mask_cap = bytes;
  }
  const int64_t rows = ad->batch * ad->heads * ad->seq;
  td_attn_dropout_mask_kernel<<<(unsigned)(rows < 1048576 ? rows : 1048576), 128, 0, c->stream>>>(
      (uint16_t *)n->mask, ad->batch, ad->heads, ad->seq,
      ad->heads_total ? ad->heads_total : ad->heads, ad->head_start, ad->seed, ad->stream,
      td_attn_dropout_threshold(ad->dropout_p));
  TD_CUDA_LAUNCHED();
  return n->mask;
}

int td_cudnn_attention(td_cuda *c, const td_attention_desc *ad, int backward) {
  attn_mode m = mode_from_env();
  if (m == ATTN_NATIVE) return 0;
  const char *why = refusal(ad);
  if (!why) why = load();
  if (why) {
    if (m == ATTN_CUDNN) td_fail("TRIDENT_CUDA_ATTENTION=cudnn: %s", why);
    return 0;
  }
  graph_entry *e = entry_for(c, ad, backward, m);
  if (!e->graph) return 0;
  void *mask = ad->dropout_p != 0.0f ? dropout_mask(c, ad) : NULL;
  if (ad->dropout_p != 0.0f && !mask) {
    if (m == ATTN_CUDNN) td_fail("TRIDENT_CUDA_ATTENTION=cudnn: no room for the dropout mask");
    return 0;
  }
  const size_t D = (size_t)ad->head_dim * 2; /* bytes of one head's q (k, v) */
  char *qkv = (char *)ad->qkv;
  std::unordered_map<int64_t, void *> pack = {
      {UID_Q, qkv}, {UID_K, qkv + D}, {UID_V, qkv + 2 * D}, {UID_O, ad->out}, {UID_STATS, ad->lse}};
  if (backward) {
    char *dqkv = (char *)ad->dqkv;
    pack[UID_DO] = (void *)ad->dout;
    pack[UID_DQ] = dqkv, pack[UID_DK] = dqkv + D, pack[UID_DV] = dqkv + 2 * D;
  }
  if (mask) pack[UID_MASK] = mask;
  void *ws = e->workspace > 0 ? td_cuda_scratch(c, (size_t)e->workspace) : NULL;
  fe::error_t r = e->graph->execute(c->cudnn->handle, pack, ws);
  if (r.is_bad()) { /* refused at run time: trident's kernels from now on, as for a refused build */
    if (m == ATTN_CUDNN)
      td_fail("TRIDENT_CUDA_ATTENTION=cudnn: cuDNN's attention %s failed on %s: %s",
              backward ? "backward" : "forward", c->name, r.get_message().c_str());
    td_warn("cuDNN's attention %s failed on %s (%s): trident's kernels run it",
            backward ? "backward" : "forward", c->name, r.get_message().c_str());
    (void)cudaGetLastError();
    e->graph = nullptr;
    return 0;
  }
  __atomic_fetch_add(&g_calls, 1, __ATOMIC_RELAXED);
  return 1;
}

void td_cudnn_release(td_cuda *c) {
  if (!c->cudnn) return;
  if (c->cudnn->mask) td_cuda_free_counted(c, c->cudnn->mask);
  c->cudnn->graphs.clear();
  fe::detail::destroy_handle(c->cudnn->handle);
  delete c->cudnn;
  c->cudnn = nullptr;
}

#endif /* TD_HAVE_CUDNN */
