/* Next-token sampling (src/model/sampling.h): greedy is the argmax (lowest index
 * on ties); over a grid of M evenly spaced u values the draw frequencies are the
 * renormalised softmax probabilities, computed here, to within 1/M: plain,
 * with temperature, top-k and the top-p nucleus; nothing outside them is drawn. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "model/sampling.h"

#define M 20000

/* Largest |frequency - want| over tokens, drawing at u = (i + 0.5) / M. */
static double worst_freq_error(const float *logits, int n, const td_sample_params *p,
                               const double *want) {
  int count[16] = {0};
  for (int i = 0; i < M; i++) count[td_sample_token(logits, n, p, (i + 0.5) / M)]++;
  double worst = 0;
  for (int j = 0; j < n; j++) worst = fmax(worst, fabs((double)count[j] / M - want[j]));
  return worst;
}

/* softmax(logits / t) over the tokens in keep[] (1 kept, 0 dropped), renormalised */
static void expected(const float *logits, int n, double t, const int *keep, double *want) {
  double z = 0;
  for (int j = 0; j < n; j++) z += keep[j] ? exp(logits[j] / t) : 0;
  for (int j = 0; j < n; j++) want[j] = keep[j] ? exp(logits[j] / t) / z : 0;
}

int main(void) {
  const float logits[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 0.0f};
  const int n = 6, all[6] = {1, 1, 1, 1, 1, 1};
  td_sample_params greedy = {.greedy = 1, .temperature = 1};
  CHECK(td_sample_token(logits, n, &greedy, 0.99) == 1, "greedy: the argmax, lowest index on ties");
  td_sample_params k1 = {.temperature = 1, .top_k = 1};
  CHECK(td_sample_token(logits, n, &k1, 0.7) == 1, "top_k 1 is greedy");

  double want[6];
  td_sample_params plain = {.temperature = 1};
  expected(logits, n, 1, all, want);
  double e = worst_freq_error(logits, n, &plain, want);
  CHECK(e <= 1.0 / M + 1e-12, "softmax draw frequencies: worst error %.2g (<= 1/M)", e);

  td_sample_params hot = {.temperature = 0.5};
  expected(logits, n, 0.5, all, want);
  e = worst_freq_error(logits, n, &hot, want);
  CHECK(e <= 1.0 / M + 1e-12, "temperature 0.5: worst error %.2g", e);

  td_sample_params k3 = {.temperature = 1, .top_k = 3}; /* 2.0, 2.0, 1.0: tokens 1, 3, 4 */
  const int top3[6] = {0, 1, 0, 1, 1, 0};
  expected(logits, n, 1, top3, want);
  e = worst_freq_error(logits, n, &k3, want);
  CHECK(e <= 1.0 / M + 1e-12, "top_k 3: only tokens 1, 3, 4, worst error %.2g", e);

  /* the nucleus computed here: most likely first, until the probability reaches q */
  for (int t = 0; t < 3; t++) {
    const double q[3] = {0.5, 0.8, 0.95};
    double prob[6];
    expected(logits, n, 1, all, prob);
    int keep[6] = {0}, order[6] = {1, 3, 4, 0, 5, 2}; /* by logit, ties by index */
    double cum = 0;
    for (int k = 0; k < n && cum < q[t]; k++) cum += prob[order[k]], keep[order[k]] = 1;
    expected(logits, n, 1, keep, want);
    td_sample_params tp = {.temperature = 1, .top_p = q[t]};
    e = worst_freq_error(logits, n, &tp, want);
    CHECK(e <= 1.0 / M + 1e-12, "top_p %.2f: the nucleus {%s%s%s%s}, worst error %.2g", q[t],
          keep[1] ? "1" : "", keep[3] ? " 3" : "", keep[4] ? " 4" : "", keep[0] ? " 0" : "", e);
  }
  return tst_finish();
}
