/* Choosing the next token from a row of logits, as Megatron's text generation
 * does (text_generation/sampling.py): greedy (the argmax), or a draw from
 * softmax(logits / temperature) restricted to the top_k largest logits and then
 * to the top_p nucleus (the smallest set of most likely tokens whose probability
 * reaches top_p), renormalised. The random number is the caller's (u uniform in
 * [0, 1)), so a seeded generator makes generation reproducible. */
#ifndef TD_MODEL_SAMPLING_H
#define TD_MODEL_SAMPLING_H

#include <stdint.h>

typedef struct {
  int greedy;        /* argmax; the rest is ignored */
  double temperature; /* > 0 */
  int64_t top_k;     /* 0: no limit */
  double top_p;      /* 0 or >= 1: no limit; else in (0, 1) */
} td_sample_params;

/* The chosen index in [0, n) (n >= 1: the real vocabulary, padding rows left
 * out by the caller). Ties go to the lowest index. */
int64_t td_sample_token(const float *logits, int64_t n, const td_sample_params *p, double u);

#endif
