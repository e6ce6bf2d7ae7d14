/* trident bench <what>: benchmarks of the device kernels and the tokenizer. */
#include <stdio.h>
#include <string.h>

#include "commands.h"

int td_bench_kernels(int argc, char **argv);
int td_bench_tokenizer(int argc, char **argv);
int td_bench_train(int argc, char **argv);

int td_cmd_bench(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "kernels")) return td_bench_kernels(argc - 1, argv + 1);
  if (argc >= 2 && !strcmp(argv[1], "train")) return td_bench_train(argc - 1, argv + 1);
  if (argc >= 2 && !strcmp(argv[1], "tokenizer")) return td_bench_tokenizer(argc - 1, argv + 1);
  FILE *f = argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) ? stdout : stderr;
  fprintf(f, "usage: trident bench kernels [--json] [--dtype fp32|bf16] [--only NAME]\n"
             "       trident bench tokenizer [--input F.jsonl] [--json]\n");
  if (f == stderr && argc >= 2) fprintf(stderr, "trident: error: unknown benchmark '%s'\n", argv[1]);
  return f == stdout ? 0 : 2;
}
