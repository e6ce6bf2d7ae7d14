/* The device ("accelerator") interface: one struct of function pointers through
 * which all memory and kernel calls go (ggml-backend's vtable, DeepSpeed's
 * accelerator). Model code never reads a device pointer's contents; a new
 * backend implements td_device_ops and registers in device.c.
 *
 * Conventions for every kernel:
 *  - row-major; "rows x cols" means cols is the contiguous dimension;
 *  - pointers are device pointers; sizes are element counts (int64_t);
 *  - activations and gradients are fp32 unless a dtype argument says otherwise
 *    (bf16 variants exist where a kernel's output feeds a bf16 matmul);
 *  - backward kernels ACCUMULATE (+=) into parameter gradients, and into input
 *    gradients where the doc says so (residual streams), as llm.c does;
 *  - results do not depend on the number of threads: reductions use a fixed
 *    blocking and a fixed order. */
#ifndef TD_DEVICE_DEVICE_H
#define TD_DEVICE_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"

typedef struct td_device td_device;
/* A point in a handle's stream of work (a CUDA event): backend-defined. */
typedef struct td_event td_event;

typedef enum {
  TD_GELU_ERF = 0, /* exact: x * Phi(x) (Megatron's default) */
  TD_GELU_TANH = 1 /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (GPT-2, --openai-gelu) */
} td_gelu_kind;

/* What a matmul does with its result r = alpha op(A) op(B) + beta C + bias
 * (cuBLASLt's epilogues), where the backend runs it in the GEMM (matmul_fuses):
 *  TD_EPILOGUE_NONE: C = r;
 *  TD_EPILOGUE_GELU_AUX: aux = r, C = gelu(r) (gelu_kind), both from the fp32 r:
 *    a layer's pre-activation kept for backward, and its activation;
 *  TD_EPILOGUE_DGELU: C = r * gelu'(aux) (gelu_kind), aux the pre-activation
 *    (as GELU_AUX stored it): an activation's backward on its input gradient.
 * aux: m x n in c_dtype with row stride ldaux (batch 1). */
typedef enum {
  TD_EPILOGUE_NONE = 0,
  TD_EPILOGUE_GELU_AUX = 1,
  TD_EPILOGUE_DGELU = 2
} td_epilogue;

/* C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b] + bias      for b < batch
 *   op(A): m x k (A is m x k, or k x m when trans_a), lda = row stride of A as stored
 *   op(B): k x n (B is k x n, or n x k when trans_b), ldb likewise
 *   C: m x n with row stride ldc. bias: n floats added to every row, or NULL
 *   (with a bf16 C a backend may round the bias to bf16 first, as PyTorch's
 *   autocast and Megatron's bf16 parameters do; the CPU adds it in fp32).
 *   a_dtype == b_dtype in {TD_F32, TD_BF16}; accumulation is fp32.
 *   c_dtype TD_F32, or TD_BF16 with bf16 inputs and beta == 0.
 *   stride_a/b/c: elements between consecutive batch items (batch > 1).
 *   c_in: NULL, or the matrix beta scales in C's place (C's layout and dtype; C
 *   is then only written: a residual added by the GEMM, y = x + h W^T + b).
 *   epilogue, aux, ldaux, gelu_kind: above.
 * c_in and an epilogue other than NONE only where matmul_fuses said 1. */
typedef struct td_matmul_desc {
  int64_t m, n, k;
  td_dtype ab_dtype, c_dtype;
  const void *a;
  int64_t lda, stride_a;
  int trans_a;
  const void *b;
  int64_t ldb, stride_b;
  int trans_b;
  void *c;
  int64_t ldc, stride_c;
  const float *bias;
  float alpha, beta;
  int64_t batch;
  const void *c_in;
  td_epilogue epilogue;
  void *aux;
  int64_t ldaux;
  td_gelu_kind gelu_kind;
} td_matmul_desc;

/* Causal self-attention over a fused QKV activation, per (batch, head):
 *   S = scale * Q K^T (masked: key j > query i is -inf), P = softmax(S),
 *   P' = dropout(P), O = P' V.
 * Layout (Megatron's, heads interleaved so TP can split by heads):
 *   qkv: [B, T, H, 3, D] (dtype); q, k, v of head h at token t are at
 *        qkv + ((b*T + t)*H + h)*3*D + {0, D, 2D}
 *   out: [B, T, H, D] (dtype)   lse: [B, H, T] fp32 log-sum-exp of each row of S
 * Backward reads qkv, out, dout, lse and WRITES dqkv (same layout as qkv; dtype).
 * Dropout: element (b, h, i, j) is kept with prob 1 - dropout_p using
 * td_rng_u32(seed, stream, ((b*Ht + h0 + h)*T + i)*T + j), kept values scaled by
 * 1/(1 - dropout_p); the same decision in backward. Ht = heads_total and h0 =
 * head_start place these heads among the model's (tensor parallelism gives each
 * rank a range of heads: its masks are the ones the unsplit model draws for
 * them); 0 / 0 mean all heads (Ht = heads, h0 = 0). Memory beyond inputs and
 * outputs is O(T) per head (blocked over queries, flash-attention style). */
typedef struct td_attention_desc {
  int64_t batch, seq, heads, head_dim;
  td_dtype dtype; /* TD_F32 or TD_BF16, for qkv, out, dout, dqkv */
  float scale;    /* usually 1/sqrt(head_dim) */
  const void *qkv;
  void *out;
  float *lse;
  const void *dout;
  void *dqkv;
  float dropout_p;
  uint64_t seed, stream;
  int64_t head_start, heads_total; /* the dropout counter's head numbering, above */
} td_attention_desc;

/* A run of an AdamW update (td_device_adamw_runs; optim/adamw.h): numel elements
 * at these offsets into the parameters, the gradients and the Adam state. */
typedef struct {
  int64_t state_offset; /* elements of exp_avg / exp_avg_sq */
  int64_t param_offset; /* elements of the params base */
  int64_t grad_offset;  /* elements of the grads base */
  int64_t numel;
  int weight_decay; /* 1: decayed group, 0: no decay */
  int decoupled_lr; /* 1: Megatron's --decoupled-lr group (the word embeddings and the output
                       layer), which optim/adamw.h runs at its own rate; backends do not read it */
} td_adam_run;

/* What a backend can do (td_device_ops.caps, a bit set). */
typedef enum {
  /* Its pointers are host addresses that MPI and the host may read and write
   * between ops (the CPU). Without it (a GPU; the "sealed" test device) code above
   * the interface moves device memory only through ops: copies, and collectives
   * staged through host memory (comm/device_comm.h). */
  TD_DEVICE_HOST_MEMORY = 1u << 0,
  /* Its allocations come out of the host's RAM, so they count against the host's
   * memory in the start-up check (the CPU, the sealed test device). */
  TD_DEVICE_HOST_RAM = 1u << 1,
} td_device_cap;

typedef struct td_device_ops {
  const char *name;
  unsigned caps; /* td_device_cap bits */
  /* ---- memory ---- */
  /* zeroed, 64-byte aligned. Like a kernel's output, the memory (and its
   * zeroing) belongs to d's stream order: another handle of the device uses it
   * after an event recorded on d (a GPU's stream-ordered pool). free is in d's
   * stream order too: the work issued on d before it that uses p comes first;
   * work on another handle that uses p must be waited for on d (an event) before
   * the free. */
  void *(*alloc)(td_device *d, size_t bytes);
  /* alloc without the zeroing, for a buffer its user writes in full before
   * reading it (ZeRO's receive buffers and gathered units); freed with free.
   * NULL: td_device_alloc_scratch calls alloc. */
  void *(*alloc_scratch)(td_device *d, size_t bytes);
  void (*free)(td_device *d, void *p);
  void (*copy_h2d)(td_device *d, void *dst, const void *src, size_t bytes);
  void (*copy_d2h)(td_device *d, void *dst, const void *src, size_t bytes);
  void (*copy_d2d)(td_device *d, void *dst, const void *src, size_t bytes);
  void (*fill)(td_device *d, void *dst, td_dtype dt, int64_t n, float value);
  /* The host waits until all work issued on the handle is done. */
  void (*synchronize)(td_device *d);
  /* Bytes of this backend's allocations now and at their peak since the process
   * started (Megatron's "allocated" / "max allocated"); NULL: not tracked. */
  void (*memory_stats)(td_device *d, size_t *allocated, size_t *peak);
  /* The device's own memory, free now and in all (cudaMemGetInfo); NULL where its
   * memory is the host's (TD_DEVICE_HOST_RAM: the host's check covers it). */
  void (*memory_info)(td_device *d, size_t *free_bytes, size_t *total_bytes);
  /* Names the physical device among the processes of a host (a hash of the GPU's
   * UUID: under CUDA_VISIBLE_DEVICES two processes may both see theirs as
   * cuda:0); NULL: the index names it (td_device_key). */
  uint64_t (*device_key)(const td_device *d);

  /* ---- streams and events ----
   * A handle is a stream: its ops run in the order they are issued, and an op may
   * return before its work is done (a GPU) or after (the CPU). What the host reads
   * is complete when the op returns (copy_d2h) unless the op is marked async.
   * Two handles of one device (td_device_open_index twice) share its memory and
   * are two streams, ordered against each other only by events. */
  td_event *(*event_create)(td_device *d);
  void (*event_destroy)(td_device *d, td_event *e);
  /* e marks the work issued on d so far (recording again moves the mark). */
  void (*event_record)(td_device *d, td_event *e);
  /* Work issued on d from now on starts after e's mark (e recorded on any handle of
   * the same device; never recorded: no wait). The host does not wait. */
  void (*event_wait)(td_device *d, td_event *e);
  /* The host waits for e's mark (never recorded: returns at once). */
  void (*event_synchronize)(td_device *d, td_event *e);
  /* 1 when the work before e's mark is done (never recorded: 1); the host does
   * not wait (cudaEventQuery). */
  int (*event_query)(td_device *d, td_event *e);

  /* ---- pinned host memory and asynchronous copies ----
   * Page-locked host memory (cudaMallocHost): the host side of the async copies,
   * and staging buffers that MPI reads and writes. Zeroed, 64-byte aligned. */
  void *(*host_alloc)(td_device *d, size_t bytes);
  void (*host_free)(td_device *d, void *p);
  /* Copies that return once issued, ordered on d's stream. The host side lies in
   * host_alloc memory, and the host must not write src (h2d) or read dst (d2h)
   * until the copy is done: synchronize, or event_synchronize on an event
   * recorded after it. */
  void (*copy_h2d_async)(td_device *d, void *dst, const void *src, size_t bytes);
  void (*copy_d2h_async)(td_device *d, void *dst, const void *src, size_t bytes);

  /* ---- dense algebra ---- */
  void (*matmul)(td_device *d, const td_matmul_desc *desc);
  /* 1 when matmul runs desc's c_in and epilogue itself (fused into the GEMM where
   * it can) at these shapes, dtypes and pointer alignments; 0 (or NULL: none
   * ever) and the caller runs the plain product and the elementwise ops
   * (model/linear.h does). */
  int (*matmul_fuses)(td_device *d, const td_matmul_desc *desc);
  /* dbias[c] += sum_r dout[r, c]; dout: rows x cols in dout_dtype (TD_F32 or TD_BF16;
   * the sums are fp32: a bf16 dout gives the bits its fp32 cast would).
   * dout_cast (NULL: none; an fp32 dout only): dout in cast_dtype (TD_BF16),
   * rounded as cast rounds, written in the same pass over dout: the dY a
   * row-parallel layer's GEMMs read, cast while its bias gradient is summed. */
  void (*bias_backward)(td_device *d, float *dbias, const void *dout, td_dtype dout_dtype,
                        int64_t rows, int64_t cols, void *dout_cast, td_dtype cast_dtype);

  /* ---- normalisation and activations ---- */
  /* out = (x - mean) * rstd * w + b per row; x: rows x cols; mean, rstd: rows (saved
   * for backward, may be NULL); out in out_dtype (TD_F32 or TD_BF16). */
  void (*layernorm_forward)(td_device *d, void *out, td_dtype out_dtype, float *mean, float *rstd,
                            const float *x, const float *w, const float *b, int64_t rows,
                            int64_t cols, float eps);
  /* dx += ..., dw += ..., db += ... (dx accumulates: it is the residual stream) */
  void (*layernorm_backward)(td_device *d, float *dx, float *dw, float *db, const float *dout,
                             const float *x, const float *w, const float *mean, const float *rstd,
                             int64_t rows, int64_t cols);
  /* out = gelu(x); out in out_dtype, x in x_dtype (each TD_F32 or TD_BF16; the
   * math is fp32) */
  void (*gelu_forward)(td_device *d, void *out, td_dtype out_dtype, const void *x,
                       td_dtype x_dtype, int64_t n, td_gelu_kind kind);
  /* g = dout * gelu'(x) in fp32 over rows x cols elements, x in x_dtype; dx = g in
   * dx_dtype (TD_F32 or TD_BF16, rounded as cast rounds; an fp32 dx may alias dout).
   * dbias (cols, or NULL) += sum_r g[r, c] of the fp32 g: the bias gradient of the
   * linear layer that produced x, fused (cuBLASLt's DGELU_BGRAD), with the bits
   * bias_backward gives on an fp32 g. Without dbias only rows * cols matters. */
  void (*gelu_backward)(td_device *d, void *dx, td_dtype dx_dtype, float *dbias,
                        const float *dout, const void *x, td_dtype x_dtype, int64_t rows,
                        int64_t cols, td_gelu_kind kind);
  /* out = a + b (out may alias a or b) */
  void (*add)(td_device *d, float *out, const float *a, const float *b, int64_t n);
  /* out = resid + dropout(x), or dropout(x) where resid is NULL: element k of x
   * kept with prob 1 - p, kept values scaled by 1/(1-p), as td_rng_u32(seed,
   * stream, first + k) decides (first: where x starts in a larger tensor whose
   * masks must not depend on how it is split, e.g. a sequence-parallel rank's
   * tokens); the sum is resid[k] + the masked value, in fp32 (add's bits). out
   * may alias x or resid. p == 0 masks nothing. Megatron's bias-dropout-add in
   * one pass, and the backward's mask applied out of place. */
  void (*dropout)(td_device *d, float *out, const float *resid, const float *x, int64_t n,
                  float p, uint64_t seed, uint64_t stream, uint64_t first);

  /* ---- attention ---- */
  void (*attention_forward)(td_device *d, const td_attention_desc *desc);
  void (*attention_backward)(td_device *d, const td_attention_desc *desc);
  /* attention_forward's rows [q0, q0 + nq) of one sequence (desc->batch 1, q0 + nq
   * <= desc->seq): those queries against the keys and values of rows [0, q0 + nq)
   * of desc->qkv, writing out and lse of those rows only (the other rows are left
   * as they are), with attention_forward's dropout decisions. Generation with a
   * key/value cache (td_gpt_forward_rows): a new token's query reads the keys and
   * values the earlier tokens left in qkv. NULL where a backend has none
   * (td_gpt_forward_rows then recomputes the earlier rows). */
  void (*attention_forward_rows)(td_device *d, const td_attention_desc *desc, int64_t q0,
                                 int64_t nq);

  /* ---- embedding ---- */
  /* out[r] (+)= table[ids[r] - vocab_start] for ids in [vocab_start, vocab_start + rows_in_table),
   * zeros (or nothing added) for ids outside that range (vocab-parallel embedding).
   * out: n x cols; table: rows_in_table x cols; accumulate: 0 overwrite, 1 add. */
  void (*embedding_forward)(td_device *d, float *out, const int32_t *ids, int64_t n,
                            const float *table, int64_t vocab_start, int64_t rows_in_table,
                            int64_t cols, int accumulate);
  /* dtable[ids[r] - vocab_start] += dout[r] for ids in range (scatter-add) */
  void (*embedding_backward)(td_device *d, float *dtable, const float *dout, const int32_t *ids,
                             int64_t n, int64_t vocab_start, int64_t rows_in_table, int64_t cols);

  /* ---- loss ---- */
  /* Per row r of logits (n x vocab, logits_dtype TD_F32 or TD_BF16: the output
   * layer's GEMM writes them in the compute dtype, as autocast and Megatron do;
   * the math is fp32, the sums double): lse[r] = logsumexp(logits[r]),
   * losses[r] = lse[r] - logits[r, targets[r]]. */
  void (*cross_entropy_forward)(td_device *d, float *losses, float *lse, const void *logits,
                                td_dtype logits_dtype, const int32_t *targets, int64_t n,
                                int64_t vocab);
  /* Vocabulary-parallel pieces (Megatron's VocabParallelCrossEntropy): logits
   * (n x vocab) is this rank's slice of the vocabulary, ids [vocab_start,
   * vocab_start + vocab). Per row r: lse[r] = logsumexp(logits[r]) over the slice;
   * target_logit[r] = logits[r, targets[r] - vocab_start] when targets[r] is in the
   * slice, else 0. The ranks' pieces combine into the loss: logsumexp of the lse's
   * minus the sum of the target logits. */
  void (*cross_entropy_slice)(td_device *d, float *lse, float *target_logit, const void *logits,
                              td_dtype logits_dtype, const int32_t *targets, int64_t n,
                              int64_t vocab, int64_t vocab_start);
  /* Vocabulary-parallel combine, once the ranks' pieces are together: per row r,
   * lse[r] = logsumexp over p < parts of lse_parts[p * n + r] (in double, shifted
   * by the maximum), losses[r] = lse[r] - target_logit[r] (target_logit: the sum
   * over the ranks of their target logits; losses may alias it). */
  void (*cross_entropy_combine)(td_device *d, float *lse, float *losses, const float *lse_parts,
                                const float *target_logit, int64_t n, int64_t parts);
  /* out[0] = sum over i of (double)x[i] * mask[i] over a fixed blocking (the loss
   * of a micro-batch: per-token losses under the loss mask). out is one double
   * of device memory: a step's losses stay on the device until it ends. */
  void (*masked_sum)(td_device *d, double *out, const float *x, const float *mask, int64_t n);
  /* dlogits[r] = (exp(logits[r] - lse[r]) - onehot(targets[r] - vocab_start)) * dloss[r]
   * over a slice of the vocabulary as above (vocab_start 0: all of it; lse: the
   * whole vocabulary's; a target outside the slice has no one-hot here). dloss
   * carries the loss mask and the 1/num_tokens of the mean. logits in
   * logits_dtype (TD_F32 or TD_BF16, as above); dlogits in dlogits_dtype (TD_F32,
   * or TD_BF16: each element the fp32 value rounded as cast rounds it, the GEMMs'
   * input in bf16 runs). dlogits may alias logits when the dtypes are the same
   * (each element is read before it is written). */
  void (*cross_entropy_backward)(td_device *d, void *dlogits, td_dtype dlogits_dtype,
                                 const void *logits, td_dtype logits_dtype, const float *lse,
                                 const int32_t *targets, const float *dloss, int64_t n,
                                 int64_t vocab, int64_t vocab_start);
  /* cross_entropy_forward, then cross_entropy_backward with its lse (vocab_start
   * 0), in one pass over each row where the backend has it (NULL:
   * td_device_cross_entropy_fused calls the two): the same bits, the row read
   * once from memory. A training step's loss and dlogits when this rank holds
   * the whole vocabulary. */
  void (*cross_entropy_fused)(td_device *d, float *losses, float *lse, void *dlogits,
                              td_dtype dlogits_dtype, const void *logits, td_dtype logits_dtype,
                              const int32_t *targets, const float *dloss, int64_t n,
                              int64_t vocab);

  /* ---- optimizer and utilities ---- */
  /* AdamW (PyTorch's, decoupled weight decay) on flat fp32 buffers, step t >= 1:
   *   g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2
   *   p -= lr * (wd * p + (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps))
   * copy: NULL, or n elements of copy_dtype (TD_BF16 or TD_F16) that receive the
   * updated p as cast would write it: the low-precision weight copy in the same
   * pass over memory. */
  void (*adamw)(td_device *d, float *param, const float *grad, float *m, float *v, int64_t n,
                float lr, float beta1, float beta2, float eps, float weight_decay,
                float grad_scale, int64_t step, void *copy, td_dtype copy_dtype);
  /* adamw over n_runs runs in one pass (a multi-tensor apply: one launch where a
   * model's tensors would take one each), each run with weight_decay or 0 and the
   * values adamw gives it; copy (or NULL) is laid out as params. NULL where a
   * backend has none: td_device_adamw_runs calls adamw per run. */
  void (*adamw_runs)(td_device *d, float *params, const float *grads, float *m, float *v,
                     const td_adam_run *runs, int n_runs, float lr, float beta1, float beta2,
                     float eps, float weight_decay, float grad_scale, int64_t step, void *copy,
                     td_dtype copy_dtype);
  /* dst = (dst_dtype) src; any pair of TD_F32 / TD_BF16 / TD_F16, round to nearest even */
  void (*cast)(td_device *d, void *dst, td_dtype dst_dtype, const void *src, td_dtype src_dtype,
               int64_t n);
  /* x *= alpha */
  void (*scale)(td_device *d, float *x, int64_t n, float alpha);
  /* Statistics into device memory (out: one double), so a step reads all of its
   * tensors' statistics back at once instead of waiting once per tensor.
   * out[0] = sum of x^2 in double over a fixed blocking (NaN/Inf propagate: the
   * fp16 overflow check). */
  void (*sum_squares)(td_device *d, double *out, const float *x, int64_t n);
  /* out[0] = the number of elements equal to zero (+0 or -0), exact (below 2^53):
   * Megatron's --log-num-zeros-in-grad */
  void (*count_zeros)(td_device *d, double *out, const float *x, int64_t n);
} td_device_ops;

struct td_device {
  const td_device_ops *ops;
  void *impl; /* backend state */
  int index;  /* which device of its backend (the GPU ordinal; 0 on the CPU) */
  /* Times the host waited for all the work issued on this handle: synchronize,
   * copy_h2d and copy_d2h (each backend counts its own calls, including the CPU's
   * whose work is always done). On a GPU each one idles the device until the host
   * issues more, so a training step needs a few, however many layers and
   * micro-batches it runs (the trainer reports them per step). */
  uint64_t stream_waits;
};

static inline int td_device_has(const td_device *d, td_device_cap cap) {
  return (d->ops->caps & cap) != 0;
}

/* AdamW over runs of flat buffers (ops->adamw_runs where the backend has it, else
 * ops->adamw per run: the same values). */
/* d's cross_entropy_fused, or its forward and backward where it has none. */
/* ops->alloc_scratch where the backend has it, else ops->alloc. */
void *td_device_alloc_scratch(td_device *d, size_t bytes);

void td_device_cross_entropy_fused(td_device *d, float *losses, float *lse, void *dlogits,
                                   td_dtype dlogits_dtype, const void *logits,
                                   td_dtype logits_dtype, const int32_t *targets,
                                   const float *dloss, int64_t n, int64_t vocab);
/* desc's fused form as the plain product, then d's elementwise ops: what runs
 * where matmul_fuses says 0 (model/linear.c), and a backend's stand-in for a
 * form its library refuses. Dense rows (ldc = ldaux = n), c_in with beta 1.
 * DGELU's fp32 product goes to scratch (m x n floats; may be C when C is fp32),
 * and dbias (or NULL) += the column sums of the fp32 gradient (gelu_backward's). */
void td_device_matmul_unfused(td_device *d, const td_matmul_desc *desc, float *scratch,
                              float *dbias);
/* d's matmul_fuses(desc), 0 where the backend has none or desc asks nothing of it. */
int td_device_matmul_fuses(td_device *d, const td_matmul_desc *desc);
void td_device_adamw_runs(td_device *d, float *params, const float *grads, float *m, float *v,
                          const td_adam_run *runs, int n_runs, float lr, float beta1,
                          float beta2, float eps, float weight_decay, float grad_scale,
                          int64_t step, void *copy, td_dtype copy_dtype);

/* The physical device d runs on, as device_key (else its index) gives it. */
uint64_t td_device_key(const td_device *d);

/* The value of a reduction op on the host, waiting for it (tests and one-off
 * checks; the training step reads its statistics back together):
 *   double s = td_device_reduce_now(d, d->ops->sum_squares, x, n); */
typedef void (*td_device_reduce_op)(td_device *d, double *out, const float *x, int64_t n);
double td_device_reduce_now(td_device *d, td_device_reduce_op op, const float *x, int64_t n);

/* Open a device by name: "cpu", "cuda" (in a build with the CUDA backend), or
 * "auto" (td_device_resolve). Unknown name: td_fail naming the known ones; a
 * known backend without a usable device (no GPU, no driver): td_fail saying so. */
td_device *td_device_open(const char *name);
/* The same on device `index` of the backend, taken modulo the number it has
 * (pass the rank's local rank: ranks on one host spread over its GPUs). */
td_device *td_device_open_index(const char *name, int index);
void td_device_close(td_device *d);

/* 1 when `name` is a backend of this build and a device of it is usable here
 * ("cpu" always is); never fails. */
int td_device_available(const char *name);
/* "auto" -> "cuda" when that is available, else "cpu"; any other name as given. */
const char *td_device_resolve(const char *name);
/* The backends of this build, for messages: "cpu" or "cpu, cuda". */
const char *td_device_names(void);
/* One line naming the opened device: "cpu", "cuda:0 (NVIDIA H100 80GB HBM3, sm_90, ...)". */
void td_device_describe(const td_device *d, char *buf, size_t n);
/* Which libraries run the backend's heavy kernels, where it has a choice ("attention:
 * cuDNN 9.14.0 fused (bf16 without dropout), trident's kernels otherwise"); 0 and
 * "" when the backend has nothing to say. */
int td_device_describe_kernels(const td_device *d, char *buf, size_t n);

#endif
