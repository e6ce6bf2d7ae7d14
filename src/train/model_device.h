/* The device a model command (trident train, trident generate) runs on.
 *
 * The name comes from --device or $TRIDENT_DEVICE: cpu, cuda, auto, or the
 * sealed test device. Everything above the interface moves device memory only
 * through ops (tests/cli_train_sealed.sh), so the model runs on any backend;
 * CUDA has not been validated on a GPU yet, so "auto" means the CPU for these
 * commands and "cuda" runs with a note (docs/device.md). */
#ifndef TD_TRAIN_MODEL_DEVICE_H
#define TD_TRAIN_MODEL_DEVICE_H

#include "device/device.h"

/* Open the device for `command` ("train", "generate"); local_rank picks the GPU
 * (local_rank mod the GPUs visible). notes: say on stderr when a visible GPU is
 * passed over. A refused or unknown name is a td_fail naming the reason. */
td_device *td_model_device_open(const char *name, int local_rank, const char *command, int notes);

#endif
