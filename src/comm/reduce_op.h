/* The reductions of comm.h's collectives and of the device collective library
 * (ccl.h), apart from comm.h so C++ (the CUDA backend's NCCL file) can name
 * them without MPI's header. */
#ifndef TD_COMM_REDUCE_OP_H
#define TD_COMM_REDUCE_OP_H

typedef enum { TD_OP_SUM = 0, TD_OP_MAX = 1, TD_OP_MIN = 2 } td_reduce_op;

#endif
