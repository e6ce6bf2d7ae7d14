/* The training loop of `trident train`, pretrain_gpt.py's: per iteration, the
 * global batch in micro-batches (gradient accumulation), forward and backward,
 * loss scaling, gradient norm and clipping, AdamW, LR schedule; Megatron's log
 * line every --log-interval, validation every --eval-interval and at the end,
 * checkpoints every --save-interval and at the end, resume from --load. */
#ifndef TD_TRAIN_TRAINER_H
#define TD_TRAIN_TRAINER_H

#include "train/args.h"

/* Run training for validated args. Returns the process exit code. */
int td_train(td_args *args);

#endif
