/* The GPT's architecture under Megatron's argument names, as a checkpoint's
 * metadata keeps it (metadata.json "state"."args", Megatron's checkpoint['args']):
 *
 *   num_layers, hidden_size, num_attention_heads, ffn_hidden_size,
 *   max_position_embeddings, padded_vocab_size, layernorm_epsilon, openai_gelu,
 *   untie_embeddings_and_output_weights     the architecture (compared on --load)
 *   true_vocab_size                         tokens before padding (Megatron's
 *                                           checkpoint tools' name), when known
 *   init_method_std, hidden_dropout, attention_dropout   training settings
 *
 * `trident convert` writes these for an imported model and reads them to export
 * one; the trainer writes them beside its other args and checks a loaded
 * checkpoint's against its own model, so a flag that differs (a different head
 * count keeps every shape, a different GELU or epsilon changes no tensor at all)
 * is a message naming the flag, not a silently different model. */
#ifndef TD_MODEL_GPT_CONFIG_H
#define TD_MODEL_GPT_CONFIG_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "model/gpt.h"

/* Set the keys above in args (replacing keys already there); true_vocab <= 0
 * leaves true_vocab_size out. */
void td_gpt_config_to_args(const td_gpt_config *c, int64_t true_vocab, cJSON *args);

/* The config the keys above describe (seq_len = max_position_embeddings: the args
 * of a model do not fix it), and *true_vocab (0 when the args do not say). The
 * architecture keys are required except padded_vocab_size (vocab_size 0 when
 * absent: trainer checkpoints from before it was recorded); the training settings
 * are 0 when absent. Returns 0, or -1 with err naming the missing or invalid key,
 * or a size beyond the limits below (td_gpt_check_sizes, td_gpt_check_layers). */
int td_gpt_config_from_args(const cJSON *args, td_gpt_config *c, int64_t *true_vocab, char *err,
                            size_t errlen);

/* Compare this run's architecture with a checkpoint's args: 0 when every
 * architecture key present in saved_args matches (keys absent, from an older
 * checkpoint, are not compared), else -1 with err listing each flag that differs
 * with the checkpoint's and this run's value. */
int td_gpt_config_check_args(const td_gpt_config *run, const cJSON *saved_args, char *err,
                             size_t errlen);

/* ------------------------------------------------------------------ size limits
 * What each size may be, because of what the code indexes it with (every flag
 * and every config.json / checkpoint value goes through these before anything
 * is sized from it):
 *   hidden x 3 (the fused QKV layer's outputs), ffn hidden, the vocabulary and
 *   the tokens of a micro-batch (micro-batch x seq-length) are GEMM dimensions,
 *   32-bit BLAS ints; token ids and position ids are int32.
 * Products of two such sizes then fit int64 (element counts: every tensor, every
 * activation), and byte counts are summed with saturation (base/checked.h), so
 * a model too large for the machine is refused by its memory figure
 * (td_gpt_plan, base/memory_limit.h), not by an overflow. The layer count is
 * bounded last (TD_GPT_MAX_LAYERS: the tensors are numbered by int), after the
 * memory check, whose message says more. */
#define TD_GPT_MAX_HIDDEN (INT32_MAX / 3)
#define TD_GPT_MAX_DIM INT32_MAX
#define TD_GPT_MAX_LAYERS ((INT32_MAX - 16) / 12) /* 12 tensors per layer */

/* Which size a message names: names[] (below) is indexed by these. */
typedef enum {
  TD_GPT_SIZE_LAYERS,
  TD_GPT_SIZE_HIDDEN,
  TD_GPT_SIZE_HEADS,
  TD_GPT_SIZE_FFN,
  TD_GPT_SIZE_SEQ,
  TD_GPT_SIZE_POSITIONS,
  TD_GPT_SIZE_VOCAB,
  TD_GPT_SIZE_MICRO_BATCH,
  TD_GPT_SIZE_COUNT
} td_gpt_size;

/* The names trident train's flags give the sizes ("--hidden-size", ...). */
extern const char *const td_gpt_flag_names[TD_GPT_SIZE_COUNT];

/* Check c's sizes against the limits above, and that they fit together
 * (heads divide hidden, seq_len <= max_positions); with micro_batch > 0 also
 * the micro-batch's tokens. Returns 0, or -1 with err naming the size by
 * names[] (NULL: td_gpt_flag_names), its value and the limit. The layer count
 * is only checked to be positive: see td_gpt_check_layers. */
int td_gpt_check_sizes(const td_gpt_config *c, int64_t micro_batch, const char *const *names,
                       char *err, size_t errlen);

/* c->num_layers <= TD_GPT_MAX_LAYERS; else -1 with err naming it by `name`. */
int td_gpt_check_layers(const td_gpt_config *c, const char *name, char *err, size_t errlen);

/* The shortest decimal that reads back as the same float, as a double: what a
 * float config value is written as in JSON, so 1e-5f is written 1e-05 (as a user
 * typed it) and not 9.99999974737875e-06. */
double td_float_shortest(float v);

#endif
