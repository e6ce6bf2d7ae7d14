/* GPT-2 as Megatron builds it with --transformer-impl local:
 *
 *   x = dropout(wte[tokens] + wpe[positions])
 *   per layer:  x = x + dropout(proj(attention(ln1(x))))
 *               x = x + dropout(fc2(gelu(fc1(ln2(x)))))
 *   logits = ln_f(x) @ wte^T   (or a separate output_layer.weight when untied)
 *   loss = cross_entropy(logits, targets) per token
 *
 * The fused QKV linear writes per token [heads, 3, head_dim] (Megatron's per-head
 * interleave, device.h's attention layout). Weights are stored like PyTorch's
 * Linear, [out_features, in_features]: y = x W^T + b.
 *
 * The model is built per rank from (config, layout): DESIGN.md. Parameters and
 * gradients each live in ONE flat fp32 device buffer with a view per tensor,
 * named as Megatron-core's GPTModel names them. Every tensor is initialised on its
 * GLOBAL shape from the global seed (stream = td_gpt_name_stream(name), element
 * index = position in the global tensor) and each rank keeps its slice.
 * Activations live in an arena sized at creation for (micro_batch, seq_len): no
 * allocation in forward or backward.
 *
 * Dropout (hidden: after the embeddings, attention proj and fc2; attention: on the
 * probabilities) draws from the counter-based RNG under the micro-batch's seed
 * (td_gpt_dropout_seed), one stream per (global layer, site), so the masks do not
 * depend on threads, and a resumed run draws the same ones.
 *
 * Tensor parallelism (Megatron's tensor_parallel layers, tp ranks): the fused QKV
 * and fc1 are column-parallel (each rank: its heads / its share of the FFN, no
 * communication forward; backward all-reduces the input gradient: "copy to
 * tensor-parallel region"), proj and fc2 row-parallel (each rank multiplies its
 * columns; the partial outputs are all-reduced forward, "reduce from region",
 * and the bias is added once), the word embedding vocabulary-parallel (each rank
 * looks up the ids in its vocabulary range, zeros elsewhere, all-reduced), and
 * the output layer produces this rank's vocabulary slice of the logits, whose
 * cross-entropy combines the ranks' log-sum-exps and target logits so the full
 * logits never exist on one rank. LayerNorms, the residual stream and hidden
 * dropout are replicated (the same stream on every rank); attention dropout
 * numbers its masks by the global head, so a split model draws the masks of the
 * unsplit one. Collectives read and write device memory directly (the CPU
 * device's memory is host memory).
 *
 * Sequence parallelism (Megatron's --sequence-parallel, Korthikanti et al. 2022)
 * splits what tensor parallelism replicates: the residual stream, LayerNorms and
 * hidden dropout hold this rank's NS = N / tp tokens (tokens [r NS, (r+1) NS) of
 * the micro-batch). A column-parallel layer all-gathers its LayerNorm output
 * (again in backward: only this rank's part is kept) and a row-parallel layer
 * reduce-scatters its partial output instead of all-reducing it; the backward
 * runs the conjugates (reduce-scatter of the input gradient, all-gather of the
 * output gradient). Hidden dropout draws the counters of its tokens' place in the
 * whole micro-batch, so the masks do not depend on tp. The replicated parameters
 * (LayerNorms, row-parallel biases, position embedding) then get gradients from
 * this rank's tokens only: td_gpt_reduce_sequence_parallel_grads sums them.
 *
 * Mixed precision (compute dtype TD_BF16 or TD_F16): matmul inputs (weights,
 * LayerNorm and GELU outputs, attention) are bf16 / fp16, accumulation, master
 * weights, gradients and the residual stream fp32. The low-precision weights are
 * a copy of the flat buffer made by td_gpt_cast_weights. fp16 is Megatron's fp16
 * semantics on fp32 GEMMs: every matmul input, and in backward every matmul's dY,
 * is rounded to fp16 precision and range (beyond 65504: Inf) and held in fp32, so
 * a loss scale too large for fp16 makes the gradients Inf/NaN where fp16 would,
 * for the trainer's loss scaler to see (td_gpt_backward's dloss_scale carries the
 * scale). */
#ifndef TD_MODEL_GPT_H
#define TD_MODEL_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "device/device.h"

typedef struct td_gpt_config {
  int64_t num_layers, hidden, heads, ffn_hidden, seq_len, max_positions;
  int64_t vocab_size; /* already padded: td_gpt_padded_vocab */
  float init_std, layernorm_eps, hidden_dropout, attention_dropout;
  int openai_gelu;      /* tanh GELU (GPT-2's) instead of the exact erf form */
  int untie_embeddings; /* separate output_layer.weight */
} td_gpt_config;

typedef struct td_comm td_comm;

/* Full activation recomputation (Megatron's --recompute-granularity full): a
 * recomputed layer keeps only its chunk's input; backward reruns the chunk's
 * forward (the same dropout masks: they are counters, not a stream) and then
 * its backward. UNIFORM: the stage's layers in chunks of recompute_num_layers;
 * BLOCK: the first recompute_num_layers layers, each a chunk of one, the rest
 * keep everything. */
typedef enum { TD_RECOMPUTE_NONE = 0, TD_RECOMPUTE_UNIFORM, TD_RECOMPUTE_BLOCK } td_recompute;

/* This rank's part of the model: its tensor-parallel rank among tp_size (tp_comm,
 * the TP group, may be NULL when tp_size is 1) and its pipeline stage (a layer
 * range, and whether it holds the embedding and the output layer: the first
 * stage holds the embedding, the last the head). Any stage runs (see the
 * td_gpt_stage_* functions below); the trainer does not schedule pipelines yet. */
typedef struct td_gpt_layout {
  int tp_size, tp_rank;
  int64_t layer_begin, layer_end; /* global layer indices [begin, end) */
  int has_embedding, has_head;
  td_comm *tp_comm;
  int sequence_parallel; /* with tp_size > 1: LayerNorm / dropout regions split by tokens */
  td_recompute recompute;
  int64_t recompute_num_layers; /* 1 .. this stage's layers, with recompute */
  int64_t unit_multiple; /* > 1: every unit (td_gpt_unit) starts at and is padded (with
                            zeros) to a multiple of it, so data parallelism can split each
                            unit into equal pieces, one per rank */
  int no_flat_grads;  /* ZeRO-2/3: no flat gradient buffer; td_gpt_bind_grads places them */
  int no_flat_params; /* ZeRO-3: no flat parameter (or weight) buffer; td_gpt_bind_params */
  int no_gelu_fusion;     /* --no-bias-gelu-fusion: GELU apart from its GEMMs (model/linear.h) */
  int no_residual_fusion; /* --no-bias-dropout-fusion: the residual apart from its GEMM */
  int64_t logits_chunk; /* tokens whose logits [logits_chunk, V / tp] exist at a time in the
                           output layer and loss; 0 (or >= the micro-batch's tokens): all of
                           them, as td_gpt_logits and a td_gpt_forward_to followed by
                           td_gpt_backward need (td_gpt_auto_logits_chunk) */
} td_gpt_layout;

/* The logits chunk of a training run (td_gpt_layout.logits_chunk): 0 (all tokens at
 * once) while a micro-batch's fp32 logits over the whole vocabulary fit the
 * budget, else the largest power of two of tokens within it, at least 128. The
 * budget: 256 MiB where device memory is host RAM (a CPU: chunks that stream
 * through its caches), 4 GiB on a device with its own memory (a GPU: the output
 * layer's products at full size; GPT-2 at 16 x 1024 tokens in one). It depends on
 * the global vocabulary and the kind of device only, so every parallel layout on
 * one kind cuts the same chunks (and sums the output layer's weight gradient in
 * the same order). */
int64_t td_gpt_auto_logits_chunk(const td_gpt_config *cfg, int64_t micro_batch,
                                 const td_device *dev);

/* The single-process layout: tp = 1, all layers, embedding and head. */
td_gpt_layout td_gpt_layout_single(const td_gpt_config *cfg);

/* Megatron's vocabulary padding: the smallest multiple of divisible_by * tp_size
 * that is >= vocab (so every TP rank holds an equal, aligned share); INT64_MAX
 * when that overflows (td_gpt_check_sizes then refuses it). */
int64_t td_gpt_padded_vocab(int64_t vocab, int64_t divisible_by, int tp_size);

/* The RNG stream of a tensor's initialisation: FNV-1a 64 of its global name. */
uint64_t td_gpt_name_stream(const char *name);

/* The dropout seed of one micro-batch (micro_batch: its index in the global batch
 * over all data-parallel ranks), so a resumed run draws the same masks. */
uint64_t td_gpt_dropout_seed(uint64_t seed, int64_t iteration, int64_t micro_batch);

#define TD_GPT_NAME_MAX 96

/* One parameter tensor: its global identity and where this rank's slice lives in
 * the flat parameter and gradient buffers (same offsets in both). */
typedef struct td_gpt_tensor {
  char name[TD_GPT_NAME_MAX]; /* Megatron-core name, global layer index */
  int ndim;                   /* 1 or 2 */
  int64_t shape[2];           /* global shape (ndim entries) */
  int64_t local_shape[2];     /* this rank's slice */
  int split_dim;              /* dimension split over TP ranks, -1: replicated */
  int64_t slice_start;        /* first index of the slice along split_dim */
  int64_t offset, numel;      /* elements in the flat buffers; numel of the slice */
  int weight_decay;           /* 0 for biases and LayerNorm parameters (Megatron) */
  int embedding_or_output;    /* the word embeddings and the output layer's weight: Megatron's
                                 is_embedding_or_output_parameter (--decoupled-lr's group) */
  float init_std;             /* normal(0, init_std), or when 0 the constant init_value */
  float init_value;
} td_gpt_tensor;

typedef struct td_gpt td_gpt;

/* Build this rank's model on dev for micro-batches of micro_batch x cfg->seq_len
 * tokens; compute_dtype TD_F32, TD_BF16 or TD_F16. Parameters start at zero: call
 * td_gpt_init_params or load them. Sizes beyond their limits, or a model larger
 * than the memory available (base/memory_limit.h), are refused (td_fail) before
 * anything is allocated. */
td_gpt *td_gpt_create(td_device *dev, const td_gpt_config *cfg, const td_gpt_layout *lay,
                      int64_t micro_batch, td_dtype compute_dtype);
void td_gpt_destroy(td_gpt *m);

/* Another activation arena for the same model: forward and backward on the
 * replica read m's parameters (and low-precision copy) and accumulate into m's
 * gradients, so a pipeline stage can keep several micro-batches in flight (one
 * replica each). Destroy replicas before m. */
td_gpt *td_gpt_create_replica(const td_gpt *m);

/* Draw every parameter from seed (see above), then td_gpt_cast_weights. */
void td_gpt_init_params(td_gpt *m, uint64_t seed);

float *td_gpt_params(td_gpt *m);       /* flat fp32 device buffer (NULL: no_flat_params) */
/* The flat low-precision weight copy, laid out as the parameters, in
 * td_gpt_weight_dtype (NULL in fp32, or no_flat_params). */
void *td_gpt_weights(td_gpt *m);
float *td_gpt_grads(td_gpt *m);        /* flat fp32 device buffer, same views (NULL: no_flat_grads) */
int64_t td_gpt_flat_numel(const td_gpt *m); /* elements in each flat buffer (views are
                                               64-byte aligned; the gaps stay zero) */
int64_t td_gpt_num_params(const td_gpt *m); /* parameters on this rank (sum of numel) */
int td_gpt_num_tensors(const td_gpt *m);
const td_gpt_tensor *td_gpt_tensor_at(const td_gpt *m, int i);
const td_gpt_tensor *td_gpt_find_tensor(const td_gpt *m, const char *name); /* or NULL */
const td_gpt_config *td_gpt_get_config(const td_gpt *m);
td_device *td_gpt_device(const td_gpt *m);
td_dtype td_gpt_compute_dtype(const td_gpt *m);

/* The parameter tensors td_gpt_create would make for cfg in the single-rank
 * layout (same names, shapes, and offsets into a flat buffer of *flat_numel
 * floats), without building the model: for tools that move parameters between
 * files (trident convert). *n tensors; free with td_free. */
td_gpt_tensor *td_gpt_single_tensors(const td_gpt_config *cfg, int *n, int64_t *flat_numel);

void td_gpt_zero_grads(td_gpt *m);
/* Refresh the bf16 / fp16 weight copy from the fp32 parameters (a no-op in fp32).
 * Call after every change of the parameters: optimizer step, checkpoint load. */
void td_gpt_cast_weights(td_gpt *m);

/* The sequence length of the next micro-batches, T in [1, config seq_len] (a
 * multiple of the TP size under sequence parallelism): Megatron-DeepSpeed's
 * seqlen curriculum trains on each sample's first T tokens. The activation
 * arena keeps its size; positions restart at 0 every T tokens. */
void td_gpt_set_seq_length(td_gpt *m, int64_t T);

/* Forward one micro-batch. tokens, targets: [micro_batch, seq_len] int32 and
 * loss_mask: [micro_batch, seq_len] float, host memory (seq_len: the one set by
 * td_gpt_set_seq_length, else the config's). training = 0 disables dropout.
 * Writes sum_t loss_t * mask_t into loss_sum, one double of the model's device
 * memory, without waiting for it (a step reads its micro-batches' losses back
 * together), and sets *mask_sum = sum_t mask_t (host; may be NULL). */
void td_gpt_forward_to(td_gpt *m, const int32_t *tokens, const int32_t *targets,
                       const float *loss_mask, uint64_t dropout_seed, int training,
                       double *loss_sum, double *mask_sum);
/* A training forward (dropout on) that also runs the output layer's backward, chunk
 * by chunk while each chunk's logits exist (so with logits_chunk they never exist
 * for the whole micro-batch): token t's loss weighted by loss_mask_t x dloss_scale,
 * as td_gpt_backward takes it. The td_gpt_backward that follows must pass the
 * same dloss_scale; it continues below the head. On a stage without the head it
 * is td_gpt_forward_to with training = 1. */
void td_gpt_forward_train_to(td_gpt *m, const int32_t *tokens, const int32_t *targets,
                             const float *loss_mask, uint64_t dropout_seed, float dloss_scale,
                             double *loss_sum, double *mask_sum);
/* The same, returning the loss sum to the host (it waits for the device). */
double td_gpt_forward(td_gpt *m, const int32_t *tokens, const int32_t *targets,
                      const float *loss_mask, uint64_t dropout_seed, int training,
                      double *mask_sum);

/* Pipeline stages (a layout without the embedding or without the head):
 * td_gpt_forward still takes the micro-batch's tokens, targets and mask (the
 * stage holding the head reads the targets and mask). A stage without the
 * embedding takes the previous stage's output [NS, C] fp32, written into
 * td_gpt_stage_input before its forward; a stage without the head returns 0 (no
 * loss) and leaves its output in td_gpt_stage_output. Backward: a stage without
 * the head reads the gradient of its output, written into
 * td_gpt_stage_output_grad before td_gpt_backward (dloss_scale unused); a stage
 * without the embedding leaves the gradient of its input in
 * td_gpt_stage_input_grad. A tied output layer on a last stage without the
 * embedding is its own copy of the word embeddings (same name and init). */
float *td_gpt_stage_input(td_gpt *m);
int64_t td_gpt_stage_numel(const td_gpt *m); /* of each of the four: NS x C */
const float *td_gpt_stage_output(const td_gpt *m);
float *td_gpt_stage_output_grad(td_gpt *m);
const float *td_gpt_stage_input_grad(const td_gpt *m);

/* Token `token`'s row of the logits of the last td_gpt_forward_to (this rank's
 * vocabulary slice: V / tp values) copied to host memory `out` as fp32; the
 * device keeps them in the compute dtype (fp32 or bf16), valid until the next
 * forward or backward (which turns them into their gradient). For generation; a
 * model with logits chunks (logits_chunk) keeps none (td_fail). */
void td_gpt_logits_row_to_host(const td_gpt *m, int64_t token, float *out);

/* Generation with a key/value cache: the forward of rows [r0, r1) of one
 * sequence whose tokens[0, r1) are in host memory, reusing rows [0, r0) of the
 * activations from the calls before (each layer's qkv holds the earlier tokens'
 * keys and values), and the logits of row r1 - 1 into last_logits (V floats,
 * host memory, this model's whole vocabulary). Inference: no dropout, no
 * backward after it. The model must be one sequence (micro-batch 1) with every
 * layer, the embedding and the head at tensor-parallel size 1, no recomputation
 * and no hooks (a td_gpt_layout_single model); rows [0, r0) must come from calls
 * with the same tokens since the model's last other forward. A backend without
 * attention_forward_rows recomputes rows [0, r0) too: the same logits, within a
 * rounding. */
void td_gpt_forward_rows(td_gpt *m, const int32_t *tokens, int64_t r0, int64_t r1,
                         float *last_logits);

/* Backward of the last forward (once: it consumes the logits), token t's loss weighted by loss_mask_t * dloss_scale
 * (the trainer passes loss_scale / tokens in the global batch); ACCUMULATES into
 * the gradients. After td_gpt_forward_to the logits must have been kept whole
 * (logits_chunk 0); after td_gpt_forward_train_to the head's part is done. */
void td_gpt_backward(td_gpt *m, float dloss_scale);

/* Units: the runs of tensors that one phase of forward or backward uses
 * together, in flat order: the embeddings, each transformer layer, the final
 * LayerNorm (with an untied output layer, or a last stage's copy of the word
 * embeddings). Each is contiguous in the flat buffers (offset, numel: padded to
 * unit_multiple). Data parallelism reduces gradients, and ZeRO-3 gathers
 * parameters, per unit. */
typedef struct {
  int first_tensor, n_tensors;
  int64_t offset, numel;
} td_gpt_unit;
int td_gpt_num_units(const td_gpt *m);
const td_gpt_unit *td_gpt_unit_at(const td_gpt *m, int u);
int td_gpt_unit_of(const td_gpt *m, int tensor);

/* Where unit u's parameters (fp32, and under bf16/fp16 compute its weight copy
 * in the matmul dtype, NULL in fp32) and gradients are: pointers to the unit's
 * first flat element, unit numel elements. By default the model's own flat
 * buffers; ZeRO-3 binds gathered copies, ZeRO-2/3 gradient buffers of their own.
 * Replicas share the bindings. */
void td_gpt_bind_params(td_gpt *m, int u, float *params, void *weights);
void td_gpt_bind_grads(td_gpt *m, int u, float *grads);
/* The weight dtype (bf16 for TD_BF16 compute; fp32 otherwise) and the cast of n
 * fp32 parameters into it (bf16, or fp16-rounded for TD_F16; nothing in fp32). */
td_dtype td_gpt_weight_dtype(const td_gpt *m);
void td_gpt_cast_unit_weights(td_gpt *m, void *weights, const float *params, int64_t n);

/* Callbacks around each use of a unit (ctx first), in the order the model runs:
 * params_needed before a forward, recomputation or backward reads unit u's
 * parameters and params_done after; grads_needed before backward first adds to
 * u's gradients in this backward, grads_ready once they are final for it (the
 * final LayerNorm's unit, each layer from the last to the first, then the
 * embeddings: a tied word embedding is final only there). A NULL member is not
 * called; td_gpt_set_hooks(m, NULL) removes them. */
typedef struct {
  void *ctx;
  void (*params_needed)(void *ctx, td_gpt *m, int unit);
  void (*params_done)(void *ctx, td_gpt *m, int unit);
  void (*grads_needed)(void *ctx, td_gpt *m, int unit);
  void (*grads_ready)(void *ctx, td_gpt *m, int unit);
} td_gpt_hooks;
void td_gpt_set_hooks(td_gpt *m, const td_gpt_hooks *h);

/* Initialise unit u's parameters from seed (as td_gpt_init_params) into dst:
 * unit numel fp32 device elements, the gaps zero. */
void td_gpt_init_unit(td_gpt *m, int u, uint64_t seed, float *dst);

/* Under sequence parallelism, sum the gradients of the replicated parameters over
 * the TP group (each rank's backward saw its own tokens); nothing otherwise. Call
 * once per iteration after the last backward, when no other operation on the
 * gradients is in flight (after the data-parallel all-reduce). */
void td_gpt_reduce_sequence_parallel_grads(td_gpt *m);

/* Seconds spent in tensor-parallel collectives since the previous call. */
double td_gpt_take_comm_seconds(td_gpt *m);

/* Device bytes held by the model. weights_bf16: the low-precision weight copy
 * (bf16; under TD_F16 the fp16-rounded weights, held in fp32). host: host memory
 * beside them (the tensor and activation tables, the loss staging, and at
 * creation the positions and the initialisation buffer). */
typedef struct td_gpt_memory {
  size_t params, grads, weights_bf16, activations;
  size_t activations_per_layer; /* what one transformer layer keeps for backward */
  size_t host;
} td_gpt_memory;
td_gpt_memory td_gpt_memory_report(const td_gpt *m);

/* This rank's parameter tensors, counted: flat elements (with the alignment gaps
 * and the flat_multiple padding), parameters, tensors, and the largest tensor's
 * elements. Counts saturate at TD_SIZE_HUGE (base/checked.h). */
typedef struct {
  uint64_t flat_numel, num_params, n_tensors, largest;
  uint64_t largest_unit; /* flat elements of the largest unit (td_gpt_unit) */
} td_gpt_param_count;

/* What td_gpt_create would allocate, computed without allocating anything (so a
 * model of a billion layers is measured, not built): the figures
 * td_gpt_memory_report gives after creation, each saturating at TD_SIZE_HUGE
 * (base/checked.h) instead of overflowing. The sizes are checked first
 * (td_gpt_check_sizes, under trident train's flag names). Returns 0, or -1 with
 * err. counts (may be NULL): the parameter tensors on this rank. */
int td_gpt_plan(const td_gpt_config *cfg, const td_gpt_layout *lay, int64_t micro_batch,
                td_dtype compute_dtype, td_gpt_memory *mem, td_gpt_param_count *counts,
                char *err, size_t errlen);
/* The sum of the figures but activations_per_layer (saturating). */
uint64_t td_gpt_memory_total(const td_gpt_memory *m);

#endif
