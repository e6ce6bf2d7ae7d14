/* trident bench <what>: benchmarks of the device kernels, a training step, the
 * tokenizer and the MPI collectives. */
#include <stdio.h>
#include <string.h>

#include "commands.h"

int td_bench_kernels(int argc, char **argv);
int td_bench_tokenizer(int argc, char **argv);
int td_bench_train(int argc, char **argv);
int td_bench_comm(int argc, char **argv);

static const struct {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *usage;
} k_benches[] = {
    {"kernels", td_bench_kernels, "kernels [--json] [--dtype fp32|bf16] [--only NAME]"},
    {"train", td_bench_train, "train [--dtype fp32|bf16] [--seq-len T] [--steps N] [--json]"},
    {"tokenizer", td_bench_tokenizer, "tokenizer [--input F.jsonl] [--json]"},
    {"comm", td_bench_comm, "comm [--op NAME] [--dtype fp32|bf16] [--json]   (under mpirun)"},
};

int td_cmd_bench(int argc, char **argv) {
  for (size_t i = 0; argc >= 2 && i < sizeof k_benches / sizeof *k_benches; i++)
    if (!strcmp(argv[1], k_benches[i].name)) return k_benches[i].run(argc - 1, argv + 1);
  int help = argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"));
  FILE *f = help ? stdout : stderr;
  for (size_t i = 0; i < sizeof k_benches / sizeof *k_benches; i++)
    fprintf(f, "%s trident bench %s\n", i ? "      " : "usage:", k_benches[i].usage);
  if (!help && argc >= 2) fprintf(stderr, "trident: error: unknown benchmark '%s'\n", argv[1]);
  return help ? 0 : 2;
}
