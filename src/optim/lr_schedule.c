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

double td_lr_at(const td_lr_schedule *s, double step) {
  if (s->warmup_steps > 0 && step <= s->warmup_steps)
    return s->init_lr + (s->max_lr - s->init_lr) * step / s->warmup_steps;
  if (s->style == TD_LR_CONSTANT) return s->max_lr;
  if (step > s->decay_steps) return s->min_lr;
  if (s->style == TD_LR_INVERSE_SQRT) {
    double w = fmax(s->warmup_steps, 1.0), n = fmax(step, 1.0);
    return fmax(s->min_lr, s->max_lr * sqrt(w) / sqrt(n));
  }
  return s->min_lr + decay_coeff(s, step) * (s->max_lr - s->min_lr);
}

double td_wd_at(const td_wd_schedule *s, double step) {
  if (step > s->incr_steps || s->style == TD_WD_CONSTANT || s->incr_steps <= 0) return s->end;
  double r = step / s->incr_steps;
  double c = s->style == TD_WD_LINEAR ? r : 0.5 * (cos(M_PI * (1.0 - r)) + 1.0);
  return s->start + c * (s->end - s->start);
}
