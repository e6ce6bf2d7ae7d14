#include "optim/loss_scaler.h"

void td_loss_scaler_init_constant(td_loss_scaler *s, float scale) {
  *s = (td_loss_scaler){
      .scale = scale, .min_scale = scale, .growth_factor = 1.0f, .backoff_factor = 1.0f};
}

void td_loss_scaler_init_dynamic(td_loss_scaler *s, float initial_scale, float min_scale,
                                 int window, int hysteresis) {
  *s = (td_loss_scaler){.dynamic = 1,
                        .scale = initial_scale,
                        .min_scale = min_scale,
                        .growth_factor = 2.0f,
                        .backoff_factor = 0.5f,
                        .growth_interval = window,
                        .hysteresis = hysteresis,
                        .hysteresis_tracker = hysteresis};
}

void td_loss_scaler_init_deepspeed(td_loss_scaler *s, float initial_scale, float min_scale,
                                   int window, int hysteresis, int consecutive_hysteresis) {
  td_loss_scaler_init_dynamic(s, initial_scale, min_scale, window, hysteresis);
  s->deepspeed = 1;
  s->consecutive_hysteresis = consecutive_hysteresis;
}

static void update_megatron(td_loss_scaler *s, int found_inf) {
  if (found_inf) {
    s->growth_tracker = 0;
    if (--s->hysteresis_tracker <= 0) {
      float backed_off = s->scale * s->backoff_factor;
      s->scale = backed_off > s->min_scale ? backed_off : s->min_scale;
    }
    return;
  }
  if (++s->growth_tracker == s->growth_interval) {
    s->growth_tracker = 0;
    s->hysteresis_tracker = s->hysteresis;
    s->scale *= s->growth_factor;
  }
}

/* growth_tracker is DeepSpeed's cur_iter - last_overflow_iter - 1 (its
 * "stable interval"), which is all its rule reads of the two counters. */
static int update_deepspeed(td_loss_scaler *s, int found_inf) {
  if (found_inf) {
    if (s->hysteresis == 1 || s->hysteresis_tracker == 1) {
      if (s->scale == s->min_scale) return -1;
      float backed_off = s->scale * s->backoff_factor;
      s->scale = backed_off > s->min_scale ? backed_off : s->min_scale;
    } else {
      s->hysteresis_tracker--;
    }
    s->growth_tracker = 0;
    return 0;
  }
  if (s->consecutive_hysteresis) s->hysteresis_tracker = s->hysteresis;
  if (s->growth_tracker > 0 && s->growth_tracker % s->growth_interval == 0) {
    s->hysteresis_tracker = s->hysteresis;
    s->scale *= s->growth_factor;
  }
  s->growth_tracker++;
  return 0;
}

int td_loss_scaler_update(td_loss_scaler *s, int found_inf) {
  if (!s->dynamic) return 0;
  if (s->deepspeed) return update_deepspeed(s, found_inf);
  update_megatron(s, found_inf);
  return 0;
}
