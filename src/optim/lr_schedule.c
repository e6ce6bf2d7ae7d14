#include "optim/lr_schedule.h"

#include <math.h>
#include <stddef.h>

const char *const td_lr_style_names[] = {"constant", "linear", "cosine", "inverse-square-root",
                                         "WSD",      NULL};
const char *const td_wsd_style_names[] = {"exponential", "linear", "cosine", "minus_sqrt", NULL};

/* Decay coefficient of the WSD annealing phase, q in [0, 1]. */
static double wsd_coeff(td_wsd_style style, double q) {
  switch (style) {
  case TD_WSD_LINEAR: return 1.0 - q;
  case TD_WSD_COSINE: return 0.5 * (cos(M_PI * q) + 1.0);
  case TD_WSD_MINUS_SQRT: return 1.0 - sqrt(q);
  case TD_WSD_EXPONENTIAL: break;
  }
  return 2.0 * pow(0.5, q) - 1.0;
}

/* Decay coefficient in [0, 1] for warmup < step <= decay. */
static double decay_coeff(const td_lr_schedule *s, double step) {
  double r = (step - s->warmup_steps) / (s->decay_steps - s->warmup_steps);
  if (s->style == TD_LR_LINEAR) return 1.0 - r;
  if (s->style == TD_LR_COSINE) return 0.5 * (cos(M_PI * r) + 1.0);
  double anneal_start = s->decay_steps - s->wsd_decay_steps; /* WSD */
  if (step <= anneal_start) return 1.0;
  return wsd_coeff(s->wsd_style, (step - anneal_start) / s->wsd_decay_steps);
}

/* DeepSpeed's warmup fraction g(i) for 0 <= i < W. */
static double ds_warmup_gamma(const td_ds_lr *s, double i) {
  return s->linear_warmup ? i / s->warmup_steps : log(i + 1.0) / log(s->warmup_steps);
}

static double ds_cosine_ratio(const td_ds_lr *s, double i) {
  if (i < 0) return 0.0; /* WarmupCosineLR's rate before the first step */
  if (i < s->warmup_steps)
    return s->warmup_min_ratio + ds_warmup_gamma(s, i) * (1.0 - s->warmup_min_ratio);
  double p = fmin(1.0, (i - s->warmup_steps + 1.0) / fmax(1.0, s->total_steps - s->warmup_steps));
  return fmax(0.0, s->cos_min_ratio + (1.0 - s->cos_min_ratio) * (1.0 + cos(M_PI * p)) / 2.0);
}

/* OneCycle's position h in [0, 1] within the cycle at iteration i < C. */
static double cycle_height(const td_ds_lr *s, double i) {
  const double n = i + 1.0, q = s->cycle_first / s->cycle_total;
  const double f = 1.0 + n / s->cycle_total - floor(1.0 + n / s->cycle_total);
  return f <= q ? f / q : (f - 1.0) / (q - 1.0);
}

/* OneCycle's decay factor d / decay_step_size x rate after the cycle (0: none). */
static double cycle_decay(const td_ds_lr *s, double i, double rate) {
  if (s->decay_step_size == 0.0 || rate == 0.0) return 0.0;
  return rate * (i - s->cycle_total + 1.0) / s->decay_step_size;
}

static double one_cycle_lr(const td_ds_lr *s, double i) {
  if (i < 0) return s->cycle_lo; /* set at construction */
  if (i < s->cycle_total) return s->cycle_lo + (s->cycle_hi - s->cycle_lo) * cycle_height(s, i);
  return s->cycle_lo / (1.0 + cycle_decay(s, i, s->decay_lr_rate));
}

int td_ds_betas_at_iteration(const td_ds_lr *s, double i, double *beta1, double *beta2) {
  if (s->type != TD_DS_LR_ONE_CYCLE || !s->cycle_momentum) return 0;
  *beta2 = 0.99;
  if (i < 0)
    *beta1 = s->mom_lo;
  else if (i < s->cycle_total)
    *beta1 = s->mom_hi - (s->mom_hi - s->mom_lo) * cycle_height(s, i);
  else
    *beta1 = s->mom_hi * (1.0 + cycle_decay(s, i, s->decay_mom_rate));
  return 1;
}

double td_ds_lr_at_iteration(const td_ds_lr *s, double i) {
  if (s->type == TD_DS_LR_WARMUP_COSINE) return s->base_lr * ds_cosine_ratio(s, i);
  if (s->type == TD_DS_LR_ONE_CYCLE) return one_cycle_lr(s, i);
  if (s->type == TD_DS_LR_RANGE_TEST) {
    double x = (i + 1.0) / s->range_step_size;
    return s->min_lr * (1.0 + s->range_step_rate * (s->range_staircase ? floor(x) : x));
  }
  double g = 1.0;
  if (i < 0)
    g = 0.0; /* WarmupLR's rate before the first step: warmup_min_lr */
  else if (i < s->warmup_steps)
    g = ds_warmup_gamma(s, i);
  else if (s->type == TD_DS_LR_WARMUP_DECAY)
    g = fmax(0.0, (s->total_steps - i) / fmax(1.0, s->total_steps - s->warmup_steps));
  return s->min_lr + (s->max_lr - s->min_lr) * g;
}

/* The warmup phase, or -1 past it: by tokens when --lr-warmup-tokens is known,
 * else by samples (Megatron-DeepSpeed's get_lr). */
static double warmup_lr(const td_lr_schedule *s, double step, double tokens) {
  if (s->has_warmup_tokens)
    return s->warmup_tokens > 0 && tokens <= s->warmup_tokens
               ? s->init_lr + (s->max_lr - s->init_lr) * tokens / s->warmup_tokens
               : -1.0;
  if (s->warmup_steps > 0 && step <= s->warmup_steps)
    return s->init_lr + (s->max_lr - s->init_lr) * step / s->warmup_steps;
  return -1.0;
}

static double token_decay_lr(const td_lr_schedule *s, double tokens) {
  double w = s->has_warmup_tokens ? s->warmup_tokens : 0.0;
  if (tokens > s->decay_tokens) return s->min_lr;
  double r = (tokens - w) / (s->decay_tokens - w);
  double c = s->style == TD_LR_COSINE ? 0.5 * (cos(M_PI * r) + 1.0) : 1.0 - r;
  return s->min_lr + c * (s->max_lr - s->min_lr);
}

/* DeepSpeed's iteration of the update after `step` samples: step k (0-based)
 * runs with iteration k - 1's values. */
static double ds_iteration(const td_lr_schedule *s, double step) {
  return floor(step / s->ds.samples_per_step + 0.5) - 1.0;
}

int td_betas_at(const td_lr_schedule *s, double step, double *beta1, double *beta2) {
  return s->ds.type != TD_DS_LR_NONE &&
         td_ds_betas_at_iteration(&s->ds, ds_iteration(s, step), beta1, beta2);
}

double td_lr_at_tokens(const td_lr_schedule *s, double step, double tokens) {
  if (s->ds.type != TD_DS_LR_NONE) return td_ds_lr_at_iteration(&s->ds, ds_iteration(s, step));
  double w = warmup_lr(s, step, tokens);
  if (w >= 0) return w;
  if (s->style == TD_LR_CONSTANT) return s->max_lr;
  if (s->style == TD_LR_INVERSE_SQRT && s->has_warmup_tokens) {
    if (s->has_decay_tokens && tokens > s->decay_tokens) return s->min_lr;
    return fmax(s->min_lr, s->max_lr * sqrt(fmax(s->warmup_tokens, 1.0)) / sqrt(fmax(tokens, 1.0)));
  }
  if (s->has_decay_tokens && s->style != TD_LR_INVERSE_SQRT) return token_decay_lr(s, tokens);
  if (s->has_decay_tokens && tokens > s->decay_tokens) return s->min_lr;
  if (!s->has_decay_tokens && step > s->decay_steps) return s->min_lr;
  if (s->style == TD_LR_INVERSE_SQRT) {
    double ws = fmax(s->warmup_steps, 1.0), n = fmax(step, 1.0);
    return fmax(s->min_lr, s->max_lr * sqrt(ws) / sqrt(n));
  }
  return s->min_lr + decay_coeff(s, step) * (s->max_lr - s->min_lr);
}

double td_lr_at(const td_lr_schedule *s, double step) { return td_lr_at_tokens(s, step, NAN); }

double td_wd_at(const td_wd_schedule *s, double step) {
  if (step > s->incr_steps || s->style == TD_WD_CONSTANT || s->incr_steps <= 0) return s->end;
  double r = step / s->incr_steps;
  double c = s->style == TD_WD_LINEAR ? r : 0.5 * (cos(M_PI * (1.0 - r)) + 1.0);
  return s->start + c * (s->end - s->start);
}
