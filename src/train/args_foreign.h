/* The rest of Megatron's flag names: every flag of Megatron-LM's
 * (megatron/training/arguments.py) and Megatron-DeepSpeed's (megatron/arguments.py,
 * plus DeepSpeed's add_config_arguments) parsers that train/args.c's own table
 * does not act on. A script that names one never meets "unknown flag": the
 * flag is either a note (it changes nothing that trident trains: a GPU kernel
 * choice, a logger, a service) or a refusal with the reason (it would train
 * something else). Each such flag takes every following word that is not a
 * flag as its values (argparse's nargs vary; trident has no positional words).
 *
 * The names live in groups that share one reason, as space-separated lists. */
#ifndef TD_TRAIN_ARGS_FOREIGN_H
#define TD_TRAIN_ARGS_FOREIGN_H

#include <stddef.h>

typedef struct {
  const char *names; /* space-separated flag names without "--" */
  int refused;       /* 1: refused with why; 0: a note */
  const char *why;
} td_foreign_group;

extern const td_foreign_group td_foreign_groups[];
extern const int td_foreign_group_count;

/* The group holding the flag name s[0..len), or -1. */
int td_foreign_find(const char *s, size_t len);

#endif
