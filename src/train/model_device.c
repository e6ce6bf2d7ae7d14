#include "train/model_device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* What keeps each command off the GPU (docs/device.md lists the places). */
static const char *not_device_clean(const char *command) {
  if (!strcmp(command, "train"))
    return "the trainer hands device buffers to MPI (the data-, tensor- and pipeline-parallel "
           "collectives, ZeRO's all-gather), ZeRO's checkpoint gather copies them with memcpy, "
           "its timers do not wait for the GPU, and no training step has run on a GPU yet";
  return "its forward pass has not been run and checked on a GPU yet";
}

static int model_on_cuda_allowed(void) {
  const char *e = getenv("TRIDENT_CUDA_MODEL");
  return e && !strcmp(e, "1");
}

td_device *td_model_device_open(const char *name, int local_rank, const char *command, int notes) {
  const int allowed = model_on_cuda_allowed();
  if (!strcmp(name, "auto")) {
    if (td_device_available("cuda")) {
      if (allowed) return td_device_open_index("cuda", local_rank);
      if (notes)
        fprintf(stderr,
                "trident %s: a GPU is visible, but %s does not run on the CUDA backend yet; "
                "running on the CPU (--device cpu says so and silences this note)\n",
                command, command);
    }
    return td_device_open_index("cpu", local_rank);
  }
  if (!strcmp(name, "cuda") && !allowed)
    td_fail("trident %s --device cuda: %s does not run on the CUDA backend yet: %s. Use --device "
            "cpu; `trident bench kernels --device cuda` runs every kernel on the GPU "
            "(TRIDENT_CUDA_MODEL=1 lifts this refusal, to port the model)",
            command, command, not_device_clean(command));
  return td_device_open_index(name, local_rank);
}
