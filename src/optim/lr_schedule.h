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

typedef struct {
  double init_lr, max_lr, min_lr;
  double warmup_steps, decay_steps; /* in samples; decay_steps > warmup_steps */
  double wsd_decay_steps;           /* WSD only: length of the annealing phase */
  td_lr_style style;
  td_wsd_style wsd_style;
} td_lr_schedule;

/* The learning rate after `step` samples. */
double td_lr_at(const td_lr_schedule *s, double step);

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
