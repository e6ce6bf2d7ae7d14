/* Megatron's GPTDataset over MMapIndexedDataset files: the same samples in the same
 * order as Megatron (core_v0.12) for the same data, --split, --seq-length and --seed,
 * so a run moved from Megatron sees identical data. docs/data.md explains the
 * indices; in short, for one dataset and one split (a range of its sequences):
 *
 *   document index  the split's sequences repeated for as many epochs as the requested
 *                   samples need, shuffled with numpy's RandomState(seed) (the last
 *                   epoch shuffled on its own when it is used below 80%)
 *   sample index    (position in the document index, token offset) where each sample
 *                   of seq_length + 1 tokens starts; samples run across documents
 *   shuffle index   a permutation of the samples (same RandomState, continued)
 *
 * Sample i is the seq_length + 1 tokens from sample_index[shuffle[i]] to
 * sample_index[shuffle[i] + 1] (plus one token): inputs are tokens[0..L), labels
 * tokens[1..L]. The indices are cached under --data-cache-path (built once, reused,
 * rebuilt when a parameter or the data file changes or the cache is corrupt).
 *
 * Several datasets ("--data-path 0.3 A 0.7 B", or --train-data-path etc.) are
 * blended as Megatron's BlendedDataset does (blend.h). */
#ifndef TD_DATA_GPT_DATASET_H
#define TD_DATA_GPT_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "data/indexed_dataset.h"

typedef enum { TD_SPLIT_TRAIN = 0, TD_SPLIT_VALID = 1, TD_SPLIT_TEST = 2 } td_split;
const char *td_split_name(td_split s); /* "train", "valid", "test" as Megatron names them */

/* ---- one dataset, one split (Megatron's GPTDataset) ---------------------------- */

typedef struct {
  const td_indexed_dataset *data;
  td_split split;
  int64_t doc_begin, doc_end;   /* the split's sequences of data */
  int64_t num_samples;          /* samples asked for (0: one epoch) */
  int64_t seq_length;
  uint32_t seed;
  const char *cache_dir;        /* NULL: build in memory, no cache */
} td_gpt_index_params;

typedef struct {
  td_gpt_index_params p;
  int64_t tokens_per_epoch, num_epochs;
  int separate_final_epoch;
  int64_t n_documents;              /* length of document_index */
  int64_t n_samples;                /* samples; sample_index has n_samples + 1 rows */
  const int32_t *document_index;    /* sequence ids of data */
  const int64_t *sample_index;      /* [n_samples + 1][2]: document index position, token offset */
  const int64_t *shuffle_index;     /* [n_samples] */
  int loaded_from_cache;            /* 1: read from the cache, 0: built now */
  const void *map;                  /* the mapped cache file, or NULL */
  size_t map_len;
  void *heap;                       /* the arrays when built here */
} td_gpt_index;

/* Build (or load from the cache) the indices. 0, or -1 with a message. A cache that
 * cannot be written is a warning: the indices are then only in memory. */
int td_gpt_index_open(td_gpt_index *gi, const td_gpt_index_params *p, char *err, size_t errlen);
void td_gpt_index_close(td_gpt_index *gi);
/* tokens[0 .. seq_length] of sample i (i < n_samples). */
void td_gpt_index_sample(const td_gpt_index *gi, int64_t i, int32_t *tokens);

/* ---- what the trainer opens: every split, blended when several datasets ---------- */

typedef struct {
  const char *const *data_path;         /* --data-path words ("0.3 A 0.7 B" or "A"), or NULL */
  int n_data_path;
  const char *const *split_data_path[3]; /* --train-data-path, --valid-data-path, --test-data-path */
  int n_split_data_path[3];
  const char *split;                    /* --split, needed with data_path (Megatron's default "969, 30, 1") */
  int64_t seq_length;                   /* --seq-length */
  int64_t seed;                         /* --seed, 0 .. 2^32 - 1 as numpy accepts */
  int64_t num_samples[3];               /* td_gpt_num_samples() */
  const char *cache_dir;                /* --data-cache-path; NULL: PREFIX/cache/GPTDataset_indices as Megatron */
} td_gpt_data_config;

/* Megatron's sample counts: train = train_iters * global_batch, valid =
 * (train_iters / eval_interval + 1) * eval_iters * global_batch, test = eval_iters * global_batch. */
void td_gpt_num_samples(int64_t train_iters, int64_t global_batch, int64_t eval_interval, int64_t eval_iters,
                        int64_t out[3]);

typedef struct td_gpt_dataset td_gpt_dataset;   /* one split: one GPT index or a blend */
typedef struct td_gpt_datasets td_gpt_datasets; /* all splits and the files behind them */

/* Open everything the config names. A split with no samples asked and no documents
 * is absent (NULL below); one with samples asked and no documents is an error. */
td_gpt_datasets *td_gpt_datasets_open(const td_gpt_data_config *cfg, char *err, size_t errlen);
void td_gpt_datasets_close(td_gpt_datasets *d);
const td_gpt_dataset *td_gpt_datasets_split(const td_gpt_datasets *d, td_split s); /* NULL if absent */

int64_t td_gpt_dataset_len(const td_gpt_dataset *ds);
/* tokens[0 .. seq_length] of sample index (index < len). */
void td_gpt_dataset_sample(const td_gpt_dataset *ds, int64_t index, int32_t *tokens);
/* Blend structure, for inspection: number of datasets, and which dataset / which of its
 * samples sample `index` comes from (dataset 0, sample index when not blended). */
int td_gpt_dataset_n_parts(const td_gpt_dataset *ds);
const td_gpt_index *td_gpt_dataset_part(const td_gpt_dataset *ds, int k);
void td_gpt_dataset_locate(const td_gpt_dataset *ds, int64_t index, int *part, int64_t *part_index);

/* ---- masks and positions (Megatron's _get_ltor_masks_and_position_ids) ----------- */

typedef struct {
  int32_t eod;              /* end-of-document token */
  int eod_mask_loss;        /* --eod-mask-loss: no loss where the input token is eod */
  int reset_position_ids;   /* --reset-position-ids: positions restart after each eod */
  int reset_attention_mask; /* --reset-attention-mask: no attention across an eod */
} td_gpt_mask_config;

/* For the n input tokens of a sample (tokens[0..n), n = seq_length), any output may be NULL:
 *   loss_mask[t]       1, or 0 where tokens[t] == eod under eod_mask_loss
 *   position_ids[t]    t, or t - (start of t's document) under reset_position_ids
 *   attention_start[t] 0, or the start of t's document under reset_attention_mask:
 *                      t attends to positions [attention_start[t], t]
 * A document starts after each eod: the eod itself belongs to the document it ends. */
void td_gpt_masks(const int32_t *tokens, int64_t n, const td_gpt_mask_config *c, float *loss_mask,
                  int32_t *position_ids, int32_t *attention_start);

#endif
