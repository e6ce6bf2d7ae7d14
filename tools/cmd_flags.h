/* Command-line helpers the subcommands other than `train` share (train has
 * Megatron's flag table, src/train/args.c). */
#ifndef TD_TOOLS_CMD_FLAGS_H
#define TD_TOOLS_CMD_FLAGS_H

/* argv[*i] as "--name value" or "--name=value": the value (advancing *i past it),
 * or NULL when argv[*i] is not --name. A missing value, or one that is itself a
 * flag ("--..."), stops with "NAME needs a value (see trident COMMAND --help)". */
const char *td_cmd_flag_value(int argc, char **argv, int *i, const char *name,
                              const char *command);

#endif
