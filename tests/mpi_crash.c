/* A rank that crashes names itself before it dies: rank 1 (of N >= 2) makes an
 * invalid memory access ("segv") or overflows its stack ("stack") while the
 * others wait in an all-reduce that can never complete; its fatal-signal
 * handler (src/comm/comm.c) writes "trident: error: rank 1 of N: killed by
 * (SIGSEGV ...)" and the rank dies of the signal, so mpirun names it too and
 * ends the job. Run by cli_mpi_crash.sh, which times it. */
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"

/* Recursion the compiler cannot turn into a loop: each frame keeps 4 KB live. */
static int deep(volatile char *prev, int n) {
  volatile char frame[4096];
  frame[0] = (char)n, frame[4095] = prev ? prev[0] : 0;
  return n > 0 ? deep(frame, n + 1) + frame[4095] : 0;
}

int main(int argc, char **argv) {
  td_comm *world = td_comm_init();
  if (td_comm_rank(world) == 1) {
    usleep(200 * 1000); /* the others are in the all-reduce by now */
    if (argc > 1 && !strcmp(argv[1], "stack")) return deep(NULL, 1);
    volatile int *nowhere = NULL;
    *nowhere = 1;
  }
  float x = 1.0f;
  td_comm_all_reduce(world, &x, &x, 1, TD_F32, TD_OP_SUM);
  td_comm_finalize();
  return 0; /* reached only when rank 1 did not crash (world of one) */
}
