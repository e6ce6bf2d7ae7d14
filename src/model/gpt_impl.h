/* Internal to src/model: the td_gpt struct shared by gpt_params.c (tensor views,
 * initialisation) and gpt.c (arena, forward, backward).
 * Sizes (this rank's): B micro-batch, T sequence, N = B*T tokens, C hidden,
 * H heads, D = C/H head dim, F ffn hidden, V vocabulary; cd the compute dtype,
 * md the dtype matmul inputs are stored in ("md" in the comments below): bf16 for
 * TD_BF16, fp32 otherwise (TD_F16 keeps fp16-rounded values in fp32, because the
 * GEMMs here have no fp16 inputs: oneDNN 2.6 has no f16 matmul on this CPU). */
#ifndef TD_MODEL_GPT_IMPL_H
#define TD_MODEL_GPT_IMPL_H

#include "model/gpt.h"

/* The tensors of one transformer layer, in order; a layer's tensor i is
 * m->tensors[layer_first + l * TD_GPT_LAYER_TENSORS + i]. */
enum {
  TD_LN1_W, TD_LN1_B, TD_QKV_W, TD_QKV_B, TD_PROJ_W, TD_PROJ_B,
  TD_LN2_W, TD_LN2_B, TD_FC1_W, TD_FC1_B, TD_FC2_W, TD_FC2_B,
  TD_GPT_LAYER_TENSORS
};

/* What one layer keeps from forward for backward (device memory). Rows NS are
 * this rank's tokens of the sequence-parallel region (N without it). */
typedef struct {
  const float *x;              /* NS x C   the layer's input (residual stream) */
  float *ln1_mean, *ln1_rstd;  /* NS */
  void *ln1;                   /* NS x C   md */
  void *qkv;                   /* N x 3A   md, per token [H, 3, D] (this rank's heads) */
  void *att;                   /* N x A    md, per token [H, D] */
  float *att_lse;              /* B x H x T */
  float *mid;                  /* NS x C   residual after attention */
  float *ln2_mean, *ln2_rstd;  /* NS */
  void *ln2;                   /* NS x C   md */
  void *fc1;                   /* N x F    md, before GELU */
  void *gelu;                  /* N x F    md */
  float *out;                  /* NS x C   residual after the MLP: the next layer's x */
} td_gpt_layer_acts;

struct td_gpt {
  td_device *dev;
  td_gpt_config cfg;
  td_gpt_layout lay;
  td_dtype cd, md;
  int64_t B, T, N, C, H, D, F, V, n_layers; /* local sizes; n_layers on this rank */
  int64_t A;                                /* H * D: this rank's attention width */
  int sp;                                   /* sequence parallelism on (tp > 1) */
  int64_t NS, ns0; /* tokens of the sequence-parallel region held here, the first:
                      N / tp and tp_rank x NS under sequence parallelism, else N and 0 */
  int64_t vocab_start;                      /* first vocabulary row held here */
  int64_t R; /* tokens whose logits exist at once (the layout's logits_chunk; N: all) */

  /* parameters: views into the flat buffers */
  td_gpt_tensor *tensors;
  int n_tensors;
  int wte, wpe, layer_first, lnf_w, lnf_b, head_w; /* tensor indices (-1: absent) */
  int64_t flat_numel, num_params;
  float *params, *grads; /* flat buffers (NULL when the layout says no_flat_*) */
  void *weights_lp; /* flat low-precision copy in md (bf16, or fp16 values for TD_F16);
                       NULL in fp32 */
  td_gpt_unit *units; /* gpt.h; the flat buffers are the units back to back */
  int n_units;
  int *unit_of;           /* tensor -> unit */
  float **unit_params;    /* per unit: where its parameters are (td_gpt_bind_params) */
  void **unit_weights;    /* per unit: its md weight copy (NULL in fp32) */
  float **unit_grads;     /* per unit: its gradients (td_gpt_bind_grads) */

  /* activations: one arena */
  void *arena;
  size_t arena_bytes;
  td_gpt_layer_acts *acts;           /* n_layers (host array of device pointers) */
  int32_t *tokens, *targets, *positions; /* N */
  float *emb;                        /* NS x C  embedding output: layer 0's input */
  float *lnf_mean, *lnf_rstd;        /* NS */
  void *lnf;                         /* NS x C  md */
  void *logits;                      /* R x V   md: one chunk's (dlogits in backward, in place) */
  float *losses, *ce_lse, *mask, *dloss; /* N */
  double *loss_sum;                      /* 1: td_gpt_forward's slot for the loss */
  /* the micro-batch's way in: tokens, targets (N int32 each) and mask (N floats)
   * in pinned host memory, copied asynchronously (a GPU does not wait for the host
   * to upload), and the event after that copy, which the next upload waits for
   * before it overwrites the buffer */
  char *upload;
  td_event *uploaded;
  int upload_pending;
  float *ce_parts;  /* tp x R: the TP ranks' lse's (vocabulary-parallel cross-entropy) */
  float *hidden;                     /* N x C   linear output before dropout + residual */
  /* backward scratch */
  float *dres;   /* NS x C  gradient of the residual stream */
  float *dln;    /* N x C   gradient of a LayerNorm output (before it, a row-parallel
                            layer's dY cast for its GEMMs) */
  float *gf;     /* N x max(C, 3A) fp32 scratch: dropout-masked gradients, fp32 dqkv */
  float *dff;    /* N x F   gradient of the MLP hidden */
  void *gatt;    /* N x A   md: gradient of the attention output */
  void *gh;      /* half_numel md: dY of a matmul as the GEMMs read it (dqkv, dfc1) */
  uint16_t *half;     /* half_numel fp16 scratch of the fp16 rounding (TD_F16 only) */
  int64_t half_numel; /* N x max(C, 3A, F) */
  /* sequence parallelism only (NULL otherwise) */
  float *full;  /* N x C   fp32: the embedding's partial lookup, all-gathered gradients */
  void *gath;   /* N x C   md: an all-gathered LayerNorm output */
  float *hs;    /* NS x C  a row-parallel output reduce-scattered to this rank's tokens */
  float *dlns;  /* NS x C  an input gradient reduce-scattered to this rank's tokens */
  size_t layer_bytes; /* what one layer keeps (activations_per_layer) */
  size_t host_bytes;  /* td_gpt_memory's host figure, from the plan at creation */

  double comm_seconds; /* in TP collectives, since td_gpt_take_comm_seconds */
  const td_gpt *replica_of; /* td_gpt_create_replica: the model whose buffers it shares */
  td_gpt_hooks hooks; /* td_gpt_set_hooks (all NULL: none) */

  /* the last forward, for backward */
  int pending_backward;
  int logits_whole;        /* m->logits holds all N tokens' logits (R >= N, no backward run) */
  int head_done;           /* td_gpt_forward_train_to ran the head's backward... */
  float head_dloss_scale;  /* ...with this scale */
  uint64_t seed;
  float p_hidden, p_attn;
};

/* gpt_params.c: build m->tensors and m->units from cfg and layout (sets the
 * tensor indices, flat_numel, num_params). */
void td_gpt_build_tensors(td_gpt *m);

/* What td_gpt_build_tensors would give for (cfg, lay), without building the
 * table of every layer (a billion layers must be measurable); td_gpt_param_count
 * is in gpt.h. The sizes must have passed td_gpt_check_sizes. */
td_gpt_param_count td_gpt_count_params(const td_gpt_config *cfg, const td_gpt_layout *lay);

#endif
