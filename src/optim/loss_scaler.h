/* Loss scaling for fp16 training: Megatron-LM's grad scalers, and DeepSpeed's
 * DynamicLossScaler as a second rule (for a DeepSpeed JSON config's fp16 block).
 *
 * Constant: the scale never changes (--loss-scale S; and 1.0 for bf16 / fp32).
 *
 * Megatron (DynamicGradScaler): starts at --initial-loss-scale (2^32); after
 * --loss-scale-window (1000) consecutive steps without inf/NaN in the gradients
 * the scale doubles and the hysteresis budget is refilled; every step with an
 * overflow resets the growth count and spends one unit of --hysteresis (2); once
 * the budget is spent (<= 0) each further overflow halves the scale, never below
 * --min-loss-scale (1). The budget is *not* refilled by a good step, only by a
 * growth.
 *
 * DeepSpeed (deepspeed/runtime/fp16/loss_scaler.py): starts at
 * 2^initial_scale_power (2^16). It keeps the number of updates since the last
 * overflow, n (0 at the start and right after an overflow):
 *   overflow:  if hysteresis == 1 or the budget is 1: halve, never below
 *              min_loss_scale, and if the scale already *is* the minimum DeepSpeed
 *              stops the run (update returns -1); otherwise spend one unit of the
 *              budget. n = 0.
 *   good step: with consecutive_hysteresis the budget is refilled; then if n > 0
 *              and n % loss_scale_window == 0 the scale doubles (and the budget
 *              is refilled); n += 1.
 * So DeepSpeed raises one step later than Megatron (the first doubling comes on
 * the window+1-th good step after an overflow, Megatron's on the window-th), can
 * refill the budget on every good step, and stops at the floor where Megatron
 * keeps going. Here growth_tracker holds n and hysteresis_tracker the budget,
 * so a checkpoint keeps either rule's state.
 *
 * The step with the overflow is skipped by the optimizer (not here). The scale
 * is an fp32 value, as both keep it. */
#ifndef TD_OPTIM_LOSS_SCALER_H
#define TD_OPTIM_LOSS_SCALER_H

typedef struct {
  int dynamic;
  int deepspeed;              /* DeepSpeed's rule instead of Megatron's */
  int consecutive_hysteresis; /* DeepSpeed: refill the budget on every good step */
  float scale, min_scale, growth_factor, backoff_factor;
  int growth_interval, hysteresis;
  int growth_tracker, hysteresis_tracker; /* state: saved in checkpoints */
} td_loss_scaler;

void td_loss_scaler_init_constant(td_loss_scaler *s, float scale);
/* Megatron's rule: growth factor 2, backoff 0.5. */
void td_loss_scaler_init_dynamic(td_loss_scaler *s, float initial_scale, float min_scale,
                                 int window, int hysteresis);
/* DeepSpeed's rule (factor 2 both ways). */
void td_loss_scaler_init_deepspeed(td_loss_scaler *s, float initial_scale, float min_scale,
                                   int window, int hysteresis, int consecutive_hysteresis);
/* After each step: found_inf != 0 when any gradient was inf or NaN. Returns 0,
 * or -1 under DeepSpeed's rule when an overflow comes with the scale already at
 * its minimum (DeepSpeed raises "Current loss scale already at minimum"; the
 * scale is left as it was). */
int td_loss_scaler_update(td_loss_scaler *s, int found_inf);

#endif
