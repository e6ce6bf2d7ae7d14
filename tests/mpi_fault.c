/* A rank that fails brings every rank down: rank 1 (of N >= 2) calls td_fail
 * ("fail") or trips a TD_CHECK ("check") while the others wait in an all-reduce
 * that can never complete. The MPI layer's exit hook turns the failure into
 * MPI_Abort, so mpirun exits non-zero within seconds instead of hanging.
 * Run by cli_mpi_fault.sh, which times it. */
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "comm/comm.h"

int main(int argc, char **argv) {
  td_comm *world = td_comm_init();
  int check = argc > 1 && !strcmp(argv[1], "check");
  if (td_comm_rank(world) == 1) {
    usleep(200 * 1000); /* the others are in the all-reduce by now */
    if (check) TD_CHECK(td_comm_size(world) < 0, "rank 1 trips a check on purpose");
    td_fail("rank 1 fails on purpose");
  }
  float x = 1.0f;
  td_comm_all_reduce(world, &x, &x, 1, TD_F32, TD_OP_SUM);
  td_comm_finalize();
  return 0; /* reached only when rank 1 did not fail (world of one) */
}
