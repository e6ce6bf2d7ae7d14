/* trident train: pretrain_gpt.py's flags (src/train/args.h), the loop in src/train/trainer.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "comm/comm.h"
#include "commands.h"
#include "train/args.h"
#include "train/trainer.h"

/* One "trident: error: " line per problem, then exit 1 (before MPI: nothing to abort). */
static void fail_lines(const char *err) {
  for (const char *p = err; *p;) {
    const char *e = strchr(p, '\n');
    int n = e ? (int)(e - p) : (int)strlen(p);
    fprintf(stderr, "trident: error: %.*s\n", n, p);
    if (!e) break;
    p = e + 1;
  }
  exit(1);
}

int td_cmd_train(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "--help-flags-markdown")) { /* docs/flags.md's table */
    td_args_print_flags_markdown(stdout);
    return 0;
  }
  td_args a;
  char err[16384]; /* every problem of the command line (and of a DeepSpeed config) */
  if (td_args_parse(&a, argc, argv, err, sizeof err)) fail_lines(err);
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
