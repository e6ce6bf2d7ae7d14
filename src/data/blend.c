#include "data/blend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"

/* Python's float(word) for the words a blend list holds: the whole word is a number. */
static int parse_number(const char *s, double *out) {
  char *end;
  while (*s == ' ' || *s == '\t') s++;
  if (!*s) return 0;
  *out = strtod(s, &end);
  while (*end == ' ' || *end == '\t') end++;
  return end != s && *end == '\0';
}

static char *strip(const char *s) {
  while (*s == ' ' || *s == '\t' || *s == '\n') s++;
  size_t n = strlen(s);
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n')) n--;
  char *d = td_malloc(n + 1);
  memcpy(d, s, n);
  d[n] = '\0';
  return d;
}

/* Weights at the even positions, if every one of them is a number. */
static int parse_weights(const char *const *words, int n_words, double *w) {
  if (n_words % 2) return 0;
  for (int i = 0; i < n_words; i += 2)
    if (!parse_number(words[i], &w[i / 2])) return 0;
  return 1;
}

static int check_weights(const td_blend *b, char *err, size_t errlen) {
  double sum = 0;
  for (int i = 0; i < b->n; i++) {
    if (!isfinite(b->weights[i]) || b->weights[i] < 0)
      return td_errorf(err, errlen, "blend weight %g of '%s' must be a finite number >= 0", b->weights[i], b->prefixes[i]);
    sum += b->weights[i];
  }
  return sum > 0 ? 0 : td_errorf(err, errlen, "the blend weights are all 0");
}

int td_blend_parse(td_blend *b, const char *const *words, int n_words, char *err, size_t errlen) {
  memset(b, 0, sizeof *b);
  if (n_words < 1) return td_errorf(err, errlen, "no dataset in the data path");
  double *w = td_malloc(sizeof(double) * (size_t)(n_words / 2 + 1));
  int weighted = parse_weights(words, n_words, w);
  b->n = weighted ? n_words / 2 : n_words;
  b->prefixes = td_malloc(sizeof(char *) * (size_t)b->n);
  for (int i = 0; i < b->n; i++) b->prefixes[i] = strip(words[weighted ? 2 * i + 1 : i]);
  if (weighted) b->weights = w;
  else td_free(w);
  if (weighted && check_weights(b, err, errlen)) {
    td_blend_free(b);
    return -1;
  }
  return 0;
}

void td_blend_free(td_blend *b) {
  for (int i = 0; i < b->n; i++) td_free(b->prefixes[i]);
  td_free(b->prefixes);
  td_free(b->weights);
  memset(b, 0, sizeof *b);
}

/* numpy's pairwise_sum for float64: plain loop below 8 elements, 8 accumulators up
 * to 128, halves (at a multiple of 8) above. */
static double pairwise_sum(const double *a, int64_t n) {
  if (n < 8) {
    double res = 0.;
    for (int64_t i = 0; i < n; i++) res += a[i];
    return res;
  }
  if (n <= 128) {
    double r[8];
    int64_t i;
    for (int k = 0; k < 8; k++) r[k] = a[k];
    for (i = 8; i < n - (n % 8); i += 8)
      for (int k = 0; k < 8; k++) r[k] += a[i + k];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; i++) res += a[i];
    return res;
  }
  int64_t n2 = n / 2;
  n2 -= n2 % 8;
  return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

double td_numpy_sum(const double *x, int64_t n) {
  return 0. + pairwise_sum(x, n); /* the reduction starts from add's identity */
}

void td_blend_normalize(double *w, int64_t n) {
  double s = td_numpy_sum(w, n);
  for (int64_t i = 0; i < n; i++) w[i] /= s;
}

/* The numbers of a split string: Python's re.findall(r"[.0-9]+") then float(). */
static int split_numbers(const char *s, double v[3], char *err, size_t errlen) {
  int n = 0;
  while (*s) {
    size_t len = strspn(s, ".0123456789");
    if (!len) {
      s++;
      continue;
    }
    char tok[64], *end;
    if (len >= sizeof tok || n == 3) return td_errorf(err, errlen, "bad --split: more than three numbers or a number too long");
    memcpy(tok, s, len);
    tok[len] = '\0';
    v[n] = strtod(tok, &end);
    if (*end || end == tok) return td_errorf(err, errlen, "bad --split: '%s' is not a number", tok);
    n++, s += len;
  }
  for (; n < 3; n++) v[n] = 0.0;
  return 0;
}

int td_split_parse(const char *split, double m[3][2], int present[3], char *err, size_t errlen) {
  double v[3];
  if (split_numbers(split, v, err, errlen)) return -1;
  if (!(v[0] + v[1] + v[2] > 0)) return td_errorf(err, errlen, "bad --split '%s': the weights sum to 0", split);
  td_blend_normalize(v, 3);
  double edge = 0;
  for (int i = 0; i < 3; i++) {
    m[i][0] = edge;
    m[i][1] = edge + v[i];
    present[i] = m[i][1] > m[i][0];
    edge = m[i][1];
  }
  return 0;
}

void td_split_range(const double m[3][2], int i, int64_t n, int64_t *begin, int64_t *end) {
  *begin = (int64_t)nearbyint(m[i][0] * (double)n); /* Python's round(): half to even */
  *end = (int64_t)nearbyint(m[i][1] * (double)n);
}

int64_t td_blend_dataset_size(int64_t target, double weight) {
  return (int64_t)ceil((double)target * weight * 1.005);
}

void td_blend_indices(const double *weights, int n, int64_t size, int16_t *dataset_index,
                      int64_t *dataset_sample_index) {
  TD_CHECK(n >= 1 && n < 32767, "blend of %d datasets", n);
  int64_t *count = td_calloc(sizeof(int64_t) * (size_t)n);
  for (int64_t s = 0; s < size; s++) {
    double at = s > 1 ? (double)s : 1.0;
    int best = 0;
    double best_err = weights[0] * at - (double)count[0];
    for (int d = 1; d < n; d++) {
      double e = weights[d] * at - (double)count[d];
      if (e > best_err) best_err = e, best = d;
    }
    dataset_index[s] = (int16_t)best;
    dataset_sample_index[s] = count[best]++;
  }
  td_free(count);
}
