/* --mock-data: Megatron's mock GPT dataset shape — documents [1, 2, ..., L-1, eod]
 * with pseudo-random lengths L in [1, 4096) — concatenated and cut into samples
 * of seq_length + 1 tokens (inputs and shifted targets), as GPTDataset cuts real
 * documents. Lengths come from the counter-based RNG (seed, split), so any sample
 * can be produced on its own, identically on every rank and after a resume.
 * (Megatron draws its mock lengths with numpy; the exact numpy stream is the
 * data pipeline's concern, not the trainer's.) Ids stay below eod. */
#ifndef TD_DATA_MOCK_DATA_H
#define TD_DATA_MOCK_DATA_H

#include <stdint.h>

typedef struct {
  int64_t seq_length;
  int32_t eod;      /* end-of-document id; ids are in [1, eod] */
  uint64_t seed;    /* --seed */
  uint64_t split;   /* 0 train, 1 valid, 2 test: independent document streams */
  int64_t n_docs;   /* documents whose prefix sums are known */
  int64_t cap;
  int64_t *doc_end; /* doc_end[d] = tokens in documents 0..d */
} td_mock_data;

void td_mock_data_init(td_mock_data *m, int64_t seq_length, int32_t eod, uint64_t seed, uint64_t split);
void td_mock_data_free(td_mock_data *m);
/* tokens[0 .. seq_length] of sample `index` (seq_length + 1 ids). */
void td_mock_data_sample(td_mock_data *m, int64_t index, int32_t *tokens);

#endif
