/* trident train: pretrain_gpt.py's flags (src/train/args.h), the loop in src/train/trainer.c. */
#include <stdio.h>

#include "base/error.h"
#include "comm/comm.h"
#include "commands.h"
#include "train/args.h"
#include "train/trainer.h"

int td_cmd_train(int argc, char **argv) {
  td_args a;
  char err[4096]; /* a DeepSpeed config lists all its errors */
  if (td_args_parse(&a, argc, argv, err, sizeof err)) td_fail("%s", err);
  if (a.help) {
    td_args_print_help(stdout);
    td_args_free(&a);
    return 0;
  }
  /* MPI first: its exit hook makes any later failure abort every rank. */
  td_comm *w = td_comm_init();
  if (td_args_validate(&a, td_comm_size(w), err, sizeof err)) td_fail("%s", err);
  td_comm_set_timeout(a.distributed_timeout_minutes * 60);
  if (td_comm_rank(w) == 0) td_args_print_notes(&a, stderr);
  int rc = td_train(&a);
  td_args_free(&a);
  td_comm_finalize();
  return rc;
}
