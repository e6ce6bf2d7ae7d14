#include "train/model_device.h"

#include <stdio.h>
#include <string.h>

#include "base/error.h"

/* The model code is device-clean (tests/cli_train_sealed.sh proves it on the
 * sealed device), but no training step or generation has run on a GPU yet
 * (scripts/gpu-check.sh is the check that will): until one has, "auto" keeps
 * these commands on the CPU, and an explicit "cuda" runs with a note saying so. */
td_device *td_model_device_open(const char *name, int local_rank, const char *command, int notes) {
  if (!strcmp(name, "auto")) {
    if (td_device_available("cuda") && notes)
      fprintf(stderr,
              "trident %s: a GPU is visible, but %s has not been validated on the CUDA backend "
              "yet; running on the CPU (--device cuda runs it on the GPU, --device cpu silences "
              "this note)\n",
              command, command);
    return td_device_open_index("cpu", local_rank);
  }
  if (!strcmp(name, "cuda") && notes)
    fprintf(stderr,
            "trident %s --device cuda: the model's code goes through the device interface only, "
            "but this is not yet validated on a GPU (scripts/gpu-check.sh compares it with the "
            "CPU); check the losses against a --device cpu run\n",
            command);
  return td_device_open_index(name, local_rank);
}
