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
 * are 0 when absent. Returns 0, or -1 with err naming the missing or invalid key. */
int td_gpt_config_from_args(const cJSON *args, td_gpt_config *c, int64_t *true_vocab, char *err,
                            size_t errlen);

/* Compare this run's architecture with a checkpoint's args: 0 when every
 * architecture key present in saved_args matches (keys absent, from an older
 * checkpoint, are not compared), else -1 with err listing each flag that differs
 * with the checkpoint's and this run's value. */
int td_gpt_config_check_args(const td_gpt_config *run, const cJSON *saved_args, char *err,
                             size_t errlen);

/* The shortest decimal that reads back as the same float, as a double: what a
 * float config value is written as in JSON, so 1e-5f is written 1e-05 (as a user
 * typed it) and not 9.99999974737875e-06. */
double td_float_shortest(float v);

#endif
