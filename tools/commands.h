/* Subcommands of the trident binary: each is `int td_cmd_NAME(int argc, char **argv)`
 * with argv[0] = the subcommand name, and returns the process exit code. */
#ifndef TD_TOOLS_COMMANDS_H
#define TD_TOOLS_COMMANDS_H

int td_cmd_bench(int argc, char **argv);
int td_cmd_train(int argc, char **argv);
int td_cmd_tokenize(int argc, char **argv);
int td_cmd_convert(int argc, char **argv);
int td_cmd_preprocess(int argc, char **argv);
int td_cmd_dataset(int argc, char **argv);
int td_cmd_generate(int argc, char **argv);

#endif
