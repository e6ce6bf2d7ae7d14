/* The arithmetic of Megatron's BlendedMegatronDatasetBuilder and BlendedDataset,
 * reproduced to the bit so a blend selects the same samples as Megatron:
 *  - "--data-path 0.3 A 0.7 B" -> prefixes and weights (get_blend_from_list),
 *  - weights normalised as numpy does it (w / numpy.sum(w), pairwise summation),
 *  - "--split 949,50,1" -> the split matrix of [begin, end) fractions,
 *  - samples asked of each dataset: ceil(target * weight * 1.005) (core_v0.12),
 *  - the blending index: greedily the dataset furthest behind its weight. */
#ifndef TD_DATA_BLEND_H
#define TD_DATA_BLEND_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  int n;
  char **prefixes;
  double *weights; /* NULL when the list gives no weights */
} td_blend;

/* Megatron's get_blend_from_list: an even number of words that alternate number,
 * path is a weighted blend; otherwise every word is a prefix. Weights must be
 * finite, >= 0 and not all 0. Returns 0, or -1 with a message. */
int td_blend_parse(td_blend *b, const char *const *words, int n_words, char *err, size_t errlen);
void td_blend_free(td_blend *b);

/* numpy.sum of a float64 array (numpy's pairwise summation, bit for bit). */
double td_numpy_sum(const double *x, int64_t n);
/* Megatron's normalize: w[i] / numpy.sum(w), in place. */
void td_blend_normalize(double *w, int64_t n);

/* Megatron's parse_and_normalize_split + convert_split_vector_to_split_matrix:
 * the numbers in split (runs of digits and dots), padded with zeros to three and
 * normalised; split i covers fractions [m[i][0], m[i][1]) when present[i]. */
int td_split_parse(const char *split, double m[3][2], int present[3], char *err, size_t errlen);
/* The [begin, end) of split i over n elements: round-half-even of fraction * n. */
void td_split_range(const double m[3][2], int i, int64_t n, int64_t *begin, int64_t *end);

/* Samples Megatron asks of a blended dataset: ceil(target * weight * 1.005). */
int64_t td_blend_dataset_size(int64_t target, double weight);
/* Megatron's build_blending_indices: for each of size samples, the dataset whose
 * count lags furthest behind weight * max(sample, 1) (ties to the lowest index)
 * and the running count of that dataset. */
void td_blend_indices(const double *weights, int n, int64_t size, int16_t *dataset_index,
                      int64_t *dataset_sample_index);

#endif
