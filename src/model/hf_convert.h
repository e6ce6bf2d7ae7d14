/* Hugging Face GPT-2 (transformers' GPT2LMHeadModel) <-> trident's GPT
 * (docs/hf_convert.md). A Hugging Face directory holds config.json and
 * model.safetensors, or model.safetensors.index.json and the shards it names.
 *
 *   HF name ("transformer." prefix optional)   trident (Megatron-core) name
 *   wte.weight            [V, C]               embedding.word_embeddings.weight     [Vp, C]
 *   wpe.weight            [P, C]               embedding.position_embeddings.weight [P, C]
 *   h.N.ln_1.{weight,bias}                     decoder.layers.N.input_layernorm.*
 *   h.N.attn.c_attn.weight [C, 3C]  (Conv1D)   ....self_attention.linear_qkv.weight [3C, C]
 *   h.N.attn.c_attn.bias   [3C]                ....self_attention.linear_qkv.bias   [3C]
 *   h.N.attn.c_proj.{weight [C, C],bias}       ....self_attention.linear_proj.*
 *   h.N.ln_2.{weight,bias}                     ....pre_mlp_layernorm.*
 *   h.N.mlp.c_fc.{weight [C, F],bias}          ....mlp.linear_fc1.*   weight [F, C]
 *   h.N.mlp.c_proj.{weight [F, C],bias}        ....mlp.linear_fc2.*   weight [C, F]
 *   ln_f.{weight,bias}                         decoder.final_layernorm.*
 *   lm_head.weight        [V, C]  (untied)     output_layer.weight                  [Vp, C]
 *
 * Conv1D weights are [in, out] (y = x W + b), trident's [out, in]: transposed.
 * c_attn's outputs are [q | k | v], each over all heads ([3, H, D]); trident's
 * are interleaved per head ([H, 3, D], Megatron's layout): re-laid out.
 * Vocabulary: trident pads V to Vp (Megatron's --make-vocab-size-divisible-by);
 * export drops rows V.. Vp-1, import fills them with the mean of the real rows
 * (a padded logit is then the mean of the real logits, which keeps the loss
 * within log(1 + (Vp - V) / V) of the Hugging Face model's; zero rows would give
 * logit 0, far above GPT-2's typical logits). */
#ifndef TD_MODEL_HF_CONVERT_H
#define TD_MODEL_HF_CONVERT_H

#include <stddef.h>
#include <stdint.h>

#include "model/gpt.h"

typedef struct td_hf_gpt2 td_hf_gpt2;

/* Open a Hugging Face GPT-2 directory: read and check config.json and open the
 * safetensors file(s). The model's vocabulary is padded to a multiple of
 * vocab_divisible_by. Returns NULL with err naming the file and the problem. */
td_hf_gpt2 *td_hf_open(const char *dir, int64_t vocab_divisible_by, char *err, size_t errlen);
void td_hf_close(td_hf_gpt2 *h);

/* The trident config of the model (seq_len = max_positions). */
const td_gpt_config *td_hf_config(const td_hf_gpt2 *h);
/* config.json's vocab_size: the real tokens, before padding. */
int64_t td_hf_vocab_size(const td_hf_gpt2 *h);

/* Fill flat (host memory; views: tensors, n of them, for td_hf_config's config,
 * e.g. td_gpt_single_tensors) with the Hugging Face weights in trident's names and
 * layouts. Every tensor must be present with its shape (F32, F16 or BF16), and
 * none may be left over. Returns 0, or -1 with err naming the tensor. */
int td_hf_read_params(const td_hf_gpt2 *h, const td_gpt_tensor *tensors, int n, float *flat,
                      char *err, size_t errlen);

/* Write dir/config.json and dir/model.safetensors (F32, names with the
 * "transformer." prefix as GPT2LMHeadModel.save_pretrained writes them; lm_head
 * only when untied) from trident parameters: flat with views tensors for cfg;
 * true_vocab (<= cfg->vocab_size) rows of the vocabulary are kept. dir is
 * created if needed. Returns 0, or -1 with err. */
int td_hf_write(const char *dir, const td_gpt_config *cfg, int64_t true_vocab,
                const td_gpt_tensor *tensors, int n, const float *flat, char *err, size_t errlen);

#endif
