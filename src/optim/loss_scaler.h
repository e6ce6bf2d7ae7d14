/* Loss scaling for fp16 training, as Megatron-LM's grad scalers do it.
 *
 * Constant: the scale never changes (--loss-scale S; and 1.0 for bf16 / fp32).
 * Dynamic (DynamicGradScaler): starts at --initial-loss-scale (2^32); after
 * --loss-scale-window (1000) consecutive steps without inf/NaN in the gradients
 * the scale doubles and the hysteresis budget is refilled; every step with an
 * overflow resets the growth count and spends one unit of --hysteresis (2); once
 * the budget is spent (<= 0) each further overflow halves the scale, never below
 * --min-loss-scale (1). The budget is *not* refilled by a good step, only by a
 * growth. The step with the overflow is skipped by the optimizer (not here).
 * The scale is an fp32 value, as Megatron keeps it in a float tensor. */
#ifndef TD_OPTIM_LOSS_SCALER_H
#define TD_OPTIM_LOSS_SCALER_H

typedef struct {
  int dynamic;
  float scale, min_scale, growth_factor, backoff_factor;
  int growth_interval, hysteresis;
  int growth_tracker, hysteresis_tracker; /* state: saved in checkpoints */
} td_loss_scaler;

void td_loss_scaler_init_constant(td_loss_scaler *s, float scale);
/* Growth factor 2, backoff 0.5, as Megatron. */
void td_loss_scaler_init_dynamic(td_loss_scaler *s, float initial_scale, float min_scale,
                                 int window, int hysteresis);
/* After each step: found_inf != 0 when any gradient was inf or NaN. */
void td_loss_scaler_update(td_loss_scaler *s, int found_inf);

#endif
