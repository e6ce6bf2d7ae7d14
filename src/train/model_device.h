/* The device a model command (trident train, trident generate) runs on.
 *
 * The name comes from --device or $TRIDENT_DEVICE: cpu, cuda or auto. The CUDA
 * backend runs every op of the device interface (tests/test_device_cuda.c), but
 * the model and trainer code around it has not run on a GPU yet and still hands
 * device buffers to the host in places (docs/device.md, "CUDA: not yet done"),
 * so for these commands "auto" means the CPU and "cuda" is refused with the
 * reason; TRIDENT_CUDA_MODEL=1 lifts both (for the session porting them). */
#ifndef TD_TRAIN_MODEL_DEVICE_H
#define TD_TRAIN_MODEL_DEVICE_H

#include "device/device.h"

/* Open the device for `command` ("train", "generate"); local_rank picks the GPU
 * (local_rank mod the GPUs visible). notes: say on stderr when a visible GPU is
 * passed over. A refused or unknown name is a td_fail naming the reason. */
td_device *td_model_device_open(const char *name, int local_rank, const char *command, int notes);

#endif
