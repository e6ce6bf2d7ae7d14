/* Megatron's learning-rate schedule at hand-computed points, boundaries included:
 * end of warmup, middle and end of the decay, past the end. */
#include <math.h>

#include "check.h"
#include "optim/lr_schedule.h"

static int close_to(double got, double want) {
  return fabs(got - want) <= 1e-12 * fabs(want) + 1e-18;
}

#define CHECK_LR(s, step, want)                                                                    \
  CHECK(close_to(td_lr_at(s, step), want), "%s at %g: %.12g (want %.12g)",                         \
        td_lr_style_names[(s)->style], (double)(step), td_lr_at(s, step), (double)(want))

static td_lr_schedule base(td_lr_style style) {
  return (td_lr_schedule){.init_lr = 0,
                          .max_lr = 1e-3,
                          .min_lr = 1e-5,
                          .warmup_steps = 100,
                          .decay_steps = 1000,
                          .style = style};
}

static void test_warmup(void) {
  td_lr_schedule s = base(TD_LR_COSINE);
  CHECK_LR(&s, 0, 0.0);
  CHECK_LR(&s, 50, 5e-4);
  CHECK_LR(&s, 100, 1e-3); /* the last warmup step reaches the peak */
  s.init_lr = 1e-4;
  CHECK_LR(&s, 50, 5.5e-4); /* --lr-warmup-init */
  s = base(TD_LR_LINEAR);
  s.warmup_steps = 0;
  CHECK_LR(&s, 0, 1e-3); /* no warmup: decay starts at the peak */
}

static void test_decay(void) {
  td_lr_schedule s = base(TD_LR_COSINE);
  CHECK_LR(&s, 325, 0.000855017856687341); /* a quarter: 1e-5 + (cos(pi/4) + 1) / 2 * 9.9e-4 */
  CHECK_LR(&s, 550, 5.05e-4);              /* half way: the mean of max and min */
  CHECK_LR(&s, 1000, 1e-5);
  CHECK_LR(&s, 1001, 1e-5);
  CHECK_LR(&s, 1e9, 1e-5);
  s = base(TD_LR_LINEAR);
  CHECK_LR(&s, 325, 7.525e-4);
  CHECK_LR(&s, 550, 5.05e-4);
  CHECK_LR(&s, 1000, 1e-5);
  CHECK_LR(&s, 2000, 1e-5);
  s = base(TD_LR_CONSTANT);
  CHECK_LR(&s, 50, 5e-4); /* constant still warms up */
  CHECK_LR(&s, 101, 1e-3);
  CHECK_LR(&s, 5000, 1e-3); /* and never decays, even past the decay steps */
}

static void test_inverse_sqrt(void) {
  td_lr_schedule s = base(TD_LR_INVERSE_SQRT);
  s.decay_steps = 1e6;
  CHECK_LR(&s, 400, 5e-4);   /* 1e-3 * sqrt(100) / sqrt(400) */
  CHECK_LR(&s, 10000, 1e-4); /* 1e-3 * 10 / 100 */
  s.min_lr = 2e-4;
  CHECK_LR(&s, 10000, 2e-4); /* floored at min-lr */
  s.decay_steps = 1000;
  CHECK_LR(&s, 1001, 2e-4); /* past the decay steps: min-lr, checked first */
}

static void test_wsd(void) {
  td_lr_schedule s = base(TD_LR_WSD);
  s.wsd_decay_steps = 200; /* annealing from step 800 to 1000 */
  CHECK_LR(&s, 500, 1e-3);
  CHECK_LR(&s, 800, 1e-3);
  CHECK_LR(&s, 900, 0.0004200714267493642); /* exponential: 2 * 0.5^0.5 - 1 */
  CHECK_LR(&s, 1000, 1e-5);
  s.wsd_style = TD_WSD_LINEAR;
  CHECK_LR(&s, 900, 5.05e-4);
  s.wsd_style = TD_WSD_COSINE;
  CHECK_LR(&s, 900, 5.05e-4);
  s.wsd_style = TD_WSD_MINUS_SQRT;
  CHECK_LR(&s, 900, 0.00029996428662531794); /* 1 - sqrt(0.5) */
}

/* Weight decay from 0.01 to 0.1 over 1000 samples: constant stays at the end
 * value; linear and cosine meet start at 0, end at 1000 and after, and the
 * midpoint at 500 (cos(pi / 2) = 0); cosine at 250 is start + (1 - cos(pi/4))/2 x delta. */
static void test_weight_decay(void) {
  td_wd_schedule w = {.start = 0.01, .end = 0.1, .incr_steps = 1000, .style = TD_WD_CONSTANT};
  CHECK(td_wd_at(&w, 0) == 0.1 && td_wd_at(&w, 700) == 0.1, "constant: the end value");
  w.style = TD_WD_LINEAR;
  CHECK(fabs(td_wd_at(&w, 0) - 0.01) < 1e-15 && fabs(td_wd_at(&w, 500) - 0.055) < 1e-15 &&
            fabs(td_wd_at(&w, 250) - 0.0325) < 1e-15 && td_wd_at(&w, 2000) == 0.1,
        "linear: 0.01 at 0, 0.0325 at 250, 0.055 at 500, 0.1 past the end");
  w.style = TD_WD_COSINE;
  double quarter = 0.01 + (1.0 - cos(M_PI / 4)) / 2 * 0.09;
  CHECK(fabs(td_wd_at(&w, 0) - 0.01) < 1e-15 && fabs(td_wd_at(&w, 500) - 0.055) < 1e-15 &&
            fabs(td_wd_at(&w, 250) - quarter) < 1e-15 && fabs(td_wd_at(&w, 1000) - 0.1) < 1e-15,
        "cosine: 0.01 at 0, %.6f at 250, 0.055 at 500, 0.1 at the end", quarter);
}

/* Megatron-DeepSpeed's token-based get_lr: warmup over Wt tokens, decay over
 * (Wt, Dt], each value from the formula written out here. */
static void test_tokens(void) {
  td_lr_schedule s = base(TD_LR_COSINE);
  s.has_warmup_tokens = 1, s.warmup_tokens = 3000;
  s.has_decay_tokens = 1, s.decay_tokens = 30000;
  const double mx = 1e-3, mn = 1e-5;
  double t = 1500, want = mx * t / 3000; /* warmup by tokens, whatever the samples */
  CHECK(close_to(td_lr_at_tokens(&s, 999, t), want), "token warmup %g", td_lr_at_tokens(&s, 999, t));
  CHECK(close_to(td_lr_at_tokens(&s, 0, 3000), mx), "the warmup's last token reaches the peak");
  t = 9750;
  double r = (t - 3000) / (30000 - 3000);
  want = mn + 0.5 * (cos(M_PI * r) + 1) * (mx - mn);
  CHECK(close_to(td_lr_at_tokens(&s, 5, t), want), "cosine by tokens %.12g want %.12g",
        td_lr_at_tokens(&s, 5, t), want);
  s.style = TD_LR_LINEAR;
  want = mn + (1 - r) * (mx - mn);
  CHECK(close_to(td_lr_at_tokens(&s, 5000, t), want), "linear by tokens (samples past decay ignored)");
  CHECK(close_to(td_lr_at_tokens(&s, 5, 30001), mn), "past the decay tokens: min");
  s.style = TD_LR_INVERSE_SQRT;
  want = fmax(mn, mx * sqrt(3000.0) / sqrt(12000.0));
  CHECK(close_to(td_lr_at_tokens(&s, 5, 12000), want), "inverse-square-root by tokens");
  /* decay by tokens after a warmup by samples (the trainer sets Wt at its end) */
  s = base(TD_LR_LINEAR);
  s.has_decay_tokens = 1, s.decay_tokens = 30000;
  CHECK_LR(&s, 50, 5e-4);
  s.has_warmup_tokens = 1, s.warmup_tokens = 2000;
  want = mn + (1 - (10000.0 - 2000) / (30000 - 2000)) * (mx - mn);
  CHECK(close_to(td_lr_at_tokens(&s, 400, 10000), want), "sample warmup, token decay");
  /* warmup by tokens, decay by samples */
  s = base(TD_LR_LINEAR);
  s.warmup_steps = 0, s.has_warmup_tokens = 1, s.warmup_tokens = 100;
  CHECK(close_to(td_lr_at_tokens(&s, 0, 50), 5e-4), "token warmup, sample decay: warmup");
  want = mn + (1 - 500.0 / 1000) * (mx - mn);
  CHECK(close_to(td_lr_at_tokens(&s, 500, 200), want), "token warmup, sample decay: decay");
}

int main(void) {
  test_tokens();
  test_weight_decay();
  test_warmup();
  test_decay();
  test_inverse_sqrt();
  test_wsd();
  return tst_finish();
}
