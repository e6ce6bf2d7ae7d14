/* numpy's legacy numpy.random.RandomState, the parts Megatron's GPTDataset uses,
 * reproduced bit for bit: its document and shuffle indices come from
 * RandomState(seed).shuffle, so the same seed must give the same permutation here
 * or a run moved from Megatron sees different data.
 *
 *  - Generator: MT19937 (Matsumoto & Nishimura). An integer seed goes through the
 *    reference init_genrand (numpy's mt19937_seed), not init_by_array: numpy only
 *    uses init_by_array for array seeds.
 *  - Bounded integers in [0, max]: numpy's legacy masked rejection sampling
 *    (random_interval / rk_interval): mask = smallest 2^k - 1 >= max, draw 32 bits
 *    (64 bits when max > 2^32 - 1: high word first) and keep value & mask if <= max.
 *  - shuffle: Fisher-Yates from the end, for i = n-1 .. 1: swap(x[i], x[interval(i)]).
 *    The element type does not matter (numpy shuffles the raw buffer). */
#ifndef TD_DATA_NUMPY_RANDOM_H
#define TD_DATA_NUMPY_RANDOM_H

#include <stddef.h>
#include <stdint.h>

#define TD_MT19937_N 624

typedef struct {
  uint32_t key[TD_MT19937_N];
  int pos;
} td_np_random;

/* RandomState(seed) for an integer seed (numpy accepts 0 .. 2^32 - 1). */
void td_np_random_seed(td_np_random *r, uint32_t seed);
/* The next tempered 32-bit output (numpy's random_raw / randint(0, 2**32, dtype=uint32)). */
uint32_t td_np_random_u32(td_np_random *r);
/* A uniform integer in [0, max], numpy's legacy masked rejection sampling. */
uint64_t td_np_random_interval(td_np_random *r, uint64_t max);
/* RandomState.randint(low, high) with the default int64 dtype: uniform in [low, high). */
int64_t td_np_random_randint(td_np_random *r, int64_t low, int64_t high);
/* RandomState.shuffle of a 1-D array of n elements of elem_size bytes. */
void td_np_random_shuffle(td_np_random *r, void *data, int64_t n, size_t elem_size);

#endif
