/* Megatron's DynamicGradScaler on a scripted sequence of overflows, each step's
 * scale worked out by hand from its rules (window 3, hysteresis 2). */
#include "check.h"
#include "optim/loss_scaler.h"

static void test_script(void) {
  static const struct {
    int inf;
    float scale;
  } steps[] = {
      {0, 65536},  {0, 65536}, {0, 131072}, /* three good steps: grow, refill hysteresis */
      {1, 131072},                          /* first overflow spends one unit of hysteresis */
      {1, 65536},                           /* the second halves */
      {1, 32768},                           /* budget spent: every overflow halves */
      {0, 32768},  {0, 32768}, {0, 65536},  /* grow again, budget back to 2 */
      {1, 65536},                           /* budget 1 */
      {0, 65536},                           /* a good step does not refill the budget... */
      {1, 32768},                           /* ...so this overflow halves at once */
      {0, 32768},  {1, 16384},              /* budget still spent: halves, resets the count */
      {0, 16384},  {0, 16384}, {0, 32768},  /* a full window again from that overflow */
  };
  td_loss_scaler s;
  td_loss_scaler_init_dynamic(&s, 65536.0f, 1.0f, 3, 2);
  int ok = 1;
  for (int i = 0; i < (int)(sizeof steps / sizeof *steps); i++) {
    td_loss_scaler_update(&s, steps[i].inf);
    if (s.scale != steps[i].scale) {
      CHECK(0, "step %d (inf=%d): scale %g, expected %g", i + 1, steps[i].inf, s.scale,
            steps[i].scale);
      ok = 0;
    }
  }
  CHECK(ok, "dynamic scale follows the script over %d steps", (int)(sizeof steps / sizeof *steps));
}

static void test_floor(void) {
  td_loss_scaler s;
  td_loss_scaler_init_dynamic(&s, 4.0f, 1.0f, 1000, 1);
  td_loss_scaler_update(&s, 1);
  CHECK(s.scale == 2.0f, "hysteresis 1: first overflow halves (%g)", s.scale);
  td_loss_scaler_update(&s, 1);
  td_loss_scaler_update(&s, 1);
  CHECK(s.scale == 1.0f, "never below --min-loss-scale (%g)", s.scale);
}

static void test_megatron_defaults(void) {
  td_loss_scaler s;
  td_loss_scaler_init_dynamic(&s, 4294967296.0f, 1.0f, 1000, 2);
  for (int i = 0; i < 999; i++)
    td_loss_scaler_update(&s, 0);
  CHECK(s.scale == 4294967296.0f, "2^32 holds for 999 good steps");
  td_loss_scaler_update(&s, 0);
  CHECK(s.scale == 8589934592.0f, "and doubles on the 1000th (%g)", s.scale);
}

static void test_constant(void) {
  td_loss_scaler s;
  td_loss_scaler_init_constant(&s, 128.0f);
  for (int i = 0; i < 5; i++)
    td_loss_scaler_update(&s, i % 2);
  CHECK(s.scale == 128.0f, "a constant scale never moves");
}

int main(void) {
  test_script();
  test_floor();
  test_megatron_defaults();
  test_constant();
  return tst_finish();
}
