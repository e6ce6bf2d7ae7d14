/* Learning-rate schedule with Megatron-LM's semantics (OptimizerParamScheduler).
 *
 * Steps count *samples*, as in Megatron: the trainer advances the schedule by
 * the global batch size after every successful (not skipped) iteration, and
 * iteration-based flags are turned into samples by multiplying by the global
 * batch size (td_args_lr_schedule does that).
 *
 * With n the step, W the warmup steps, D the decay steps:
 *   W > 0 and n <= W:   init + (max - init) * n / W            (linear warmup)
 *   constant:           max
 *   n > D:              min
 *   inverse-square-root: max(min, max * sqrt(max(W,1)) / sqrt(max(n,1)))
 *   otherwise           min + c * (max - min), r = (n - W) / (D - W), with
 *     linear c = 1 - r, cosine c = (cos(pi r) + 1) / 2,
 *     WSD: c = 1 until n <= D - S (S = wsd decay steps), then with
 *       q = (n - (D - S)) / S: exponential 2 * 0.5^q - 1, linear 1 - q,
 *       cosine (cos(pi q) + 1) / 2, minus_sqrt 1 - sqrt(q). */
#ifndef TD_OPTIM_LR_SCHEDULE_H
#define TD_OPTIM_LR_SCHEDULE_H

typedef enum {
  TD_LR_CONSTANT,
  TD_LR_LINEAR,
  TD_LR_COSINE,
  TD_LR_INVERSE_SQRT,
  TD_LR_WSD
} td_lr_style;
typedef enum { TD_WSD_EXPONENTIAL, TD_WSD_LINEAR, TD_WSD_COSINE, TD_WSD_MINUS_SQRT } td_wsd_style;

/* Megatron's spellings, indexed by the enums above; NULL-terminated. */
extern const char *const td_lr_style_names[];
extern const char *const td_wsd_style_names[];

/* DeepSpeed's schedules (deepspeed/runtime/lr_schedules.py), used when a
 * DeepSpeed JSON config names one (train/ds_config.h). They count optimizer
 * steps, not samples. DeepSpeed sets the rate at construction (iteration -1)
 * and after every applied step, so the optimizer step k (0-based, skipped fp16
 * steps not counted) runs with the rate of iteration i = k - 1. With W =
 * max(2, warmup_num_steps), T = total_num_steps and the warmup fraction
 *   g(i) = log(i + 1) / log(W)   (warmup_type "log", DeepSpeed's default)
 *   g(i) = i / W                 (warmup_type "linear"):
 *   WarmupLR:       i < 0: min;  i < W: min + (max - min) g(i);  else max
 *   WarmupDecayLR:  as WarmupLR while i < W, then
 *                   min + (max - min) * max(0, (T - i) / max(1, T - W))
 *   WarmupCosineLR: base * r, with i < 0: r = 0;  i < W: r = wmin + (1 - wmin) g(i);
 *                   else p = min(1, (i - W + 1) / max(1, T - W)),
 *                   r = max(0, cmin + (1 - cmin) (1 + cos(pi p)) / 2)
 * (min, max: warmup_min_lr, warmup_max_lr; base: the optimizer's lr; wmin,
 * cmin: warmup_min_ratio, cos_min_ratio), and with n = i + 1:
 *   LRRangeTest:    min (1 + rate x), x = n / S, or floor(n / S) with staircase
 *                   (min, S, rate: lr_range_test_min_lr, _step_size, _step_rate)
 *   OneCycle:       a cycle of C = S1 + S2 iterations (cycle_first_step_size,
 *                   cycle_second_step_size, default S1), q = S1 / C:
 *                   i < C: f = n / C + 1 - floor(1 + n / C); h = f / q if f <= q,
 *                          else (f - 1) / (q - 1);  lr = lo + (hi - lo) h
 *                   else, d = i - C + 1: lo / (1 + decay_lr_rate d / decay_step_size)
 *                          (lo when decay_step_size or decay_lr_rate is 0)
 *                   (lo, hi: cycle_min_lr, cycle_max_lr; before the first step, lo).
 *                   With cycle_momentum (default on) it sets Adam's betas too:
 *                   beta2 = 0.99 (DeepSpeed's fixed second element); beta1 =
 *                   cycle_min_mom before the first step, mhi - (mhi - mlo) h in
 *                   the cycle, after it mhi (1 + decay_mom_rate d / decay_step_size)
 *                   (mhi when decay_step_size or decay_mom_rate is 0). The stair
 *                   counts change nothing, as in DeepSpeed. */
typedef enum {
  TD_DS_LR_NONE, /* Megatron's schedule (the fields above) */
  TD_DS_LR_WARMUP,
  TD_DS_LR_WARMUP_DECAY,
  TD_DS_LR_WARMUP_COSINE,
  TD_DS_LR_RANGE_TEST,
  TD_DS_LR_ONE_CYCLE
} td_ds_lr_type;

typedef struct {
  td_ds_lr_type type;
  int linear_warmup;                 /* warmup_type "linear"; 0: "log" */
  double min_lr, max_lr;             /* WarmupLR, WarmupDecayLR */
  double base_lr;                    /* WarmupCosineLR: the optimizer's lr */
  double warmup_min_ratio, cos_min_ratio; /* WarmupCosineLR */
  double warmup_steps;               /* W: warmup_num_steps, at least 2 (as DeepSpeed) */
  double total_steps;                /* T: total_num_steps (WarmupDecayLR, WarmupCosineLR) */
  double samples_per_step;           /* the global batch: trident's step counter is in samples */
  double range_step_size, range_step_rate; /* LRRangeTest (min_lr: its lr_range_test_min_lr) */
  int range_staircase;
  double cycle_lo, cycle_hi, cycle_first, cycle_total; /* OneCycle */
  double decay_step_size, decay_lr_rate;
  int cycle_momentum;
  double mom_lo, mom_hi, decay_mom_rate;
} td_ds_lr;

/* DeepSpeed's get_lr() at last_batch_iteration i (-1: before the first step). */
double td_ds_lr_at_iteration(const td_ds_lr *s, double i);
/* OneCycle's Adam betas at iteration i: 1 with *beta1 and *beta2 set when the
 * schedule sets them (cycle_momentum), else 0. */
int td_ds_betas_at_iteration(const td_ds_lr *s, double i, double *beta1, double *beta2);

typedef struct {
  double init_lr, max_lr, min_lr;
  double warmup_steps, decay_steps; /* in samples; decay_steps > warmup_steps */
  double wsd_decay_steps;           /* WSD only: length of the annealing phase */
  td_lr_style style;
  td_wsd_style wsd_style;
  td_ds_lr ds; /* type != TD_DS_LR_NONE: DeepSpeed's schedule instead of the above */
  /* Megatron-DeepSpeed's token-based schedule (--lr-warmup-tokens, --lr-decay-tokens):
   * NAN when not given. With t the tokens the schedule has seen, Wt, Dt these:
   *   Wt given: warmup while Wt > 0 and t <= Wt: init + (max - init) t / Wt
   *             (else the sample warmup above);
   *   Dt given: t > Dt: min; r = (t - Wt) / (Dt - Wt) (else the sample decay);
   *   inverse-square-root with Wt: max(min, max sqrt(max(Wt,1)) / sqrt(max(t,1))).
   * Dt without Wt: Megatron-DeepSpeed sets Wt to the tokens seen when the sample
   * warmup ends (the trainer does so; 0 without warmup). */
  double warmup_tokens, decay_tokens;
  int has_warmup_tokens, has_decay_tokens;
} td_lr_schedule;

/* The learning rate after `step` samples (DeepSpeed's schedules: after step /
 * samples_per_step applied optimizer steps). */
double td_lr_at(const td_lr_schedule *s, double step);

/* The same with Megatron-DeepSpeed's token count t (td_lr_at passes NAN: no
 * token-based schedule). */
double td_lr_at_tokens(const td_lr_schedule *s, double step, double tokens);

/* The Adam betas the update after `step` samples runs with, where the schedule
 * sets them (DeepSpeed's OneCycle with cycle_momentum): 1 and *beta1, *beta2;
 * else 0 (the optimizer's own). */
int td_betas_at(const td_lr_schedule *s, double step, double *beta1, double *beta2);

/* Megatron's weight-decay schedule (OptimizerParamScheduler.get_wd), over
 * incr_steps samples (the whole training run), r = step / incr_steps:
 *   step > incr_steps or constant: end
 *   linear: start + r (end - start)
 *   cosine: start + (cos(pi (1 - r)) + 1) / 2 (end - start) */
typedef enum { TD_WD_CONSTANT, TD_WD_LINEAR, TD_WD_COSINE } td_wd_style;

typedef struct {
  double start, end, incr_steps;
  td_wd_style style;
} td_wd_schedule;

/* The weight decay after `step` samples. */
double td_wd_at(const td_wd_schedule *s, double step);

#endif
