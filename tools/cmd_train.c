/* trident train: pretrain_gpt.py's flags (src/train/args.h), the loop in src/train/trainer.c. */
#include <stdio.h>

#include "base/error.h"
#include "comm/comm.h"
#include "commands.h"
#include "train/args.h"
#include "train/trainer.h"

int td_cmd_train(int argc, char **argv) {
  td_args a;
  char err[1024];
  if (td_args_parse(&a, argc, argv, err, sizeof err)) td_fail("%s", err);
  if (a.help) {
    td_args_print_help(stdout);
    td_args_free(&a);
    return 0;
  }
  /* MPI first: its exit hook makes any later failure abort every rank. */
  int world = td_comm_size(td_comm_init());
  if (world > 1)
    td_fail("launched with %d ranks: data, tensor and pipeline parallel training are not in "
            "this build of `trident train` yet; run one process", world);
  if (td_args_validate(&a, world, err, sizeof err)) td_fail("%s", err);
  td_args_print_notes(&a, stderr);
  int rc = td_train(&a);
  td_args_free(&a);
  td_comm_finalize();
  return rc;
}
