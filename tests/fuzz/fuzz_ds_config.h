/* One fuzz input through the DeepSpeed config (train/ds_config.h): shared by the
 * libFuzzer harness (fuzz_ds_config.c) and the corpus replay (test_fuzz_replay.c).
 *
 * The input is the JSON text. It goes to td_ds_config_parse directly, and as
 * --deepspeed_config_dict through the command-line parser with the flags of a
 * small model (world size 1 or 2: the input's length, odd or even): every path refuses with a
 * message or accepts, never crashes or exits. */
#ifndef TD_FUZZ_DS_CONFIG_H
#define TD_FUZZ_DS_CONFIG_H

#include "fuzz_args.h"
#include "train/ds_config.h"

static inline int td_fuzz_ds_config_one(const uint8_t *data, size_t size) {
  char *text = td_fuzz_strndup(data, size), err[4096] = "";
  td_ds_config *c = td_ds_config_parse(text, "--deepspeed_config_dict", err, sizeof err);
  if (c) {
    td_loss_scaler s;
    td_ds_config_loss_scaler(c, &s);
    td_ds_config_free(c);
  } else {
    TD_CHECK(err[0], "a refused config gives a message");
  }
  const char *flags[] = {"train", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
                         "--seq-length", "32", "--max-position-embeddings", "32", "--train-iters", "10",
                         "--lr", "1e-4", "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "64", "--deepspeed", "--deepspeed_config_dict", text};
  int argc = (int)(sizeof flags / sizeof flags[0]);
  char *argv[sizeof flags / sizeof flags[0] + 1];
  for (int i = 0; i < argc; i++) argv[i] = (char *)flags[i];
  argv[argc] = NULL;
  int ok = td_fuzz_args_run(argc, argv, 1 + (int)(size % 2));
  td_free(text);
  return ok;
}

#endif
