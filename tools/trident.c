/* trident: distributed GPT training in C. One binary, subcommands. */
#include <stdio.h>
#include <string.h>

#include "commands.h"

typedef struct {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *summary;
} command;

static const command k_commands[] = {
    {"train", td_cmd_train, "pretrain a GPT with Megatron-LM's flags (pretrain_gpt.py)"},
    {"preprocess", td_cmd_preprocess, "JSON lines to Megatron's .bin/.idx (tools/preprocess_data.py)"},
    {"dataset", td_cmd_dataset, "samples and counts of the GPT dataset the training flags give"},
    {"tokenize", td_cmd_tokenize, "GPT-2 BPE ids of JSON lines, one array per line (--decode: back to text)"},
    {"convert", td_cmd_convert, "Hugging Face GPT-2 <-> trident checkpoints"},
    {"generate", td_cmd_generate, "continue a prompt with a trained checkpoint (greedy or sampled)"},
    {"bench", td_cmd_bench, "measure kernels (trident bench kernels)"},
};
#define N_COMMANDS (sizeof k_commands / sizeof *k_commands)

static void usage(FILE *f) {
  fprintf(f, "usage: trident <command> [flags]   (trident <command> --help for its flags)\n\n"
             "commands:\n");
  for (size_t i = 0; i < N_COMMANDS; i++)
    fprintf(f, "  %-12s %s\n", k_commands[i].name, k_commands[i].summary);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return 0;
  }
  for (size_t i = 0; i < N_COMMANDS; i++)
    if (!strcmp(argv[1], k_commands[i].name)) return k_commands[i].run(argc - 1, argv + 1);
  fprintf(stderr, "trident: error: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
