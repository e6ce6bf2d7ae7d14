#include "model/sampling.h"

#include <math.h>
#include <stdlib.h>

#include "base/mem.h"

typedef struct {
  double logit;
  int64_t index;
} scored;

/* Larger logit first; equal logits by index, so ties go to the lowest index. */
static int by_logit(const void *a, const void *b) {
  const scored *x = a, *y = b;
  if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
  return (x->index > y->index) - (x->index < y->index);
}

static int64_t argmax(const float *logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; i++)
    if (logits[i] > logits[best]) best = i;
  return best;
}

int64_t td_sample_token(const float *logits, int64_t n, const td_sample_params *p, double u) {
  if (p->greedy || p->top_k == 1) return argmax(logits, n);
  scored *s = td_malloc((size_t)n * sizeof *s);
  for (int64_t i = 0; i < n; i++) s[i] = (scored){logits[i] / p->temperature, i};
  qsort(s, (size_t)n, sizeof *s, by_logit);
  int64_t keep = p->top_k > 0 && p->top_k < n ? p->top_k : n;
  /* probabilities of the kept tokens, in double, from the largest logit down */
  double total = 0;
  for (int64_t i = 0; i < keep; i++) total += exp(s[i].logit - s[0].logit);
  if (p->top_p > 0 && p->top_p < 1) {
    double cum = 0;
    int64_t k = 0;
    while (k < keep && cum < p->top_p * total) cum += exp(s[k++].logit - s[0].logit);
    keep = k, total = cum;
  }
  double target = u * total, cum = 0;
  int64_t chosen = s[keep - 1].index;
  for (int64_t i = 0; i < keep; i++) {
    cum += exp(s[i].logit - s[0].logit);
    if (target < cum) {
      chosen = s[i].index;
      break;
    }
  }
  td_free(s);
  return chosen;
}
