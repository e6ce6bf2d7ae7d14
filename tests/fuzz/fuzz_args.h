/* One fuzz input through the command-line parser (train/args.h): shared by the
 * libFuzzer harness (fuzz_args.c) and the corpus replay (test_fuzz_replay.c).
 *
 * Input: one byte (world size 1 + byte % 8), then the arguments separated by NUL
 * bytes (argv[0] is "train"). td_args_parse, then td_args_validate when parsing
 * succeeded, then td_args_free: either may refuse with a message; neither may crash
 * or exit (td_fail), which the exit hook turns into an abort. */
#ifndef TD_FUZZ_ARGS_H
#define TD_FUZZ_ARGS_H

#include "train/args.h"
#include "fuzz_util.h"

#define TD_FUZZ_ARGS_MAX 256

/* parse + validate argv (argc entries, argv[0] the command); 1 when both accepted. */
static inline int td_fuzz_args_run(int argc, char **argv, int world_size) {
  td_args a;
  char err[4096] = "";
  int ok = td_args_parse(&a, argc, argv, err, sizeof err) == 0;
  if (ok && !a.help) {
    ok = td_args_validate(&a, world_size, err, sizeof err) == 0;
    if (ok) {
      td_lr_schedule lr;
      td_args_lr_schedule(&a, &lr);
      cJSON_Delete(td_args_to_json(&a));
    }
  }
  if (!ok) TD_CHECK(err[0], "a refusal gives a message");
  td_args_free(&a);
  return ok;
}

static inline int td_fuzz_args_one(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  int world_size = 1 + data[0] % 8;
  size_t off[TD_FUZZ_ARGS_MAX], len[TD_FUZZ_ARGS_MAX];
  int n = td_fuzz_split(data + 1, size - 1, TD_FUZZ_ARGS_MAX - 1, off, len);
  char *argv[TD_FUZZ_ARGS_MAX + 1];
  argv[0] = td_fuzz_strndup((const uint8_t *)"train", 5);
  for (int i = 0; i < n; i++) argv[i + 1] = td_fuzz_strndup(data + 1 + off[i], len[i]);
  argv[n + 1] = NULL;
  int ok = td_fuzz_args_run(n + 1, argv, world_size);
  for (int i = 0; i <= n; i++) td_free(argv[i]);
  return ok;
}

#endif
