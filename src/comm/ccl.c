#include "comm/ccl.h"

#include <string.h>

const td_ccl_ops *td_sealed_ccl_ops(void); /* sealed_ccl.c */
#ifdef TD_HAVE_CUDA
const td_ccl_ops *td_nccl_ops(void); /* device/cuda/cuda_nccl.cu */
#endif

const td_ccl_ops *td_ccl_for(const td_device *d) {
  if (!strcmp(d->ops->name, "sealed")) return td_sealed_ccl_ops();
#ifdef TD_HAVE_CUDA
  if (!strcmp(d->ops->name, "cuda")) return td_nccl_ops();
#endif
  return NULL;
}
