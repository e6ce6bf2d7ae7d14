/* Megatron's MMapIndexedDataset: the PREFIX.bin / PREFIX.idx pair that
 * tools/preprocess_data.py writes and GPTDataset reads. docs/data.md has the layout;
 * in short, the .idx (all little-endian, packed, no alignment) is
 *
 *   "MMIDIDX\0\0"  u64 version = 1  u8 dtype code  u64 sequence_count  u64 document_count
 *   i32 sequence_lengths[sequence_count]      tokens per sequence
 *   i64 sequence_pointers[sequence_count]     byte offset of each sequence in the .bin
 *   i64 document_indices[document_count]      0, then the sequence count at each document's end
 *
 * and the .bin is the tokens of all sequences back to back in the dtype. An empty
 * document adds an entry to document_indices and no sequence.
 *
 * The reader maps both files and validates everything before use (header, counts
 * against the file size, every length and pointer against the .bin, the document
 * indices), so a corrupt or truncated file is an error that names the file and the
 * problem, never a crash. The writer produces the same bytes as Megatron's
 * IndexedDatasetBuilder for the same token sequences. */
#ifndef TD_DATA_INDEXED_DATASET_H
#define TD_DATA_INDEXED_DATASET_H

#include <stddef.h>
#include <stdint.h>

/* Megatron's DType codes. */
typedef enum {
  TD_IDX_UINT8 = 1,
  TD_IDX_INT8 = 2,
  TD_IDX_INT16 = 3,
  TD_IDX_INT32 = 4,
  TD_IDX_INT64 = 5,
  TD_IDX_FLOAT64 = 6,
  TD_IDX_FLOAT32 = 7,
  TD_IDX_UINT16 = 8,
} td_idx_dtype;

size_t td_idx_dtype_size(td_idx_dtype dt);   /* 0 for an unknown code */
const char *td_idx_dtype_name(td_idx_dtype dt);
/* Integer types of at most 32 bits: the ones td_indexed_dataset_read converts to int32. */
int td_idx_dtype_is_token(td_idx_dtype dt);
/* Megatron's DType.optimal_dtype: uint16 when vocab_size < 65500, else int32. */
td_idx_dtype td_idx_dtype_for_vocab(int64_t vocab_size);

typedef struct {
  char *prefix;                 /* for messages and cache descriptions */
  const uint8_t *idx, *bin;     /* the file contents (mapped, or the caller's memory) */
  size_t idx_len, bin_len;
  int owns_maps;
  td_idx_dtype dtype;
  size_t itemsize;
  int64_t n_sequences;
  int64_t n_document_indices;   /* document_count: documents + 1 */
  int64_t n_tokens;
  const uint8_t *lengths, *pointers, *doc_indices; /* unaligned views into idx */
} td_indexed_dataset;

/* Map and validate PREFIX.idx and PREFIX.bin. 0, or -1 with a message in err. */
int td_indexed_dataset_open(td_indexed_dataset *ds, const char *prefix, char *err, size_t errlen);
/* Validate in-memory contents (not copied: they must outlive ds). name stands for
 * the prefix in messages. */
int td_indexed_dataset_open_memory(td_indexed_dataset *ds, const char *name, const void *idx, size_t idx_len,
                                   const void *bin, size_t bin_len, char *err, size_t errlen);
void td_indexed_dataset_close(td_indexed_dataset *ds);

/* The arrays of the index (i in range; validated at open). */
int32_t td_indexed_dataset_seq_len(const td_indexed_dataset *ds, int64_t seq);
int64_t td_indexed_dataset_seq_ptr(const td_indexed_dataset *ds, int64_t seq);
int64_t td_indexed_dataset_doc_index(const td_indexed_dataset *ds, int64_t i);
/* out[k] = token offset + k of sequence seq, k < n (a token dtype; range checked). */
void td_indexed_dataset_read(const td_indexed_dataset *ds, int64_t seq, int64_t offset, int64_t n, int32_t *out);

/* The writer: PREFIX.bin / PREFIX.idx, byte for byte as Megatron's
 * IndexedDatasetBuilder with add_document(ids, [len(ids)]) per document (one
 * sequence per document, what preprocess_data.py writes without --split-sentences).
 * Both files are written under temporary names and renamed by finalize, so an
 * interrupted run never leaves a half-written dataset under the final names. */
typedef struct td_idx_builder td_idx_builder;

td_idx_builder *td_idx_builder_open(const char *prefix, td_idx_dtype dtype, char *err, size_t errlen);
/* One document of n tokens (n = 0: an empty document, no sequence). Ids must fit the dtype. */
int td_idx_builder_add_document(td_idx_builder *b, const int32_t *ids, int64_t n, char *err, size_t errlen);
/* Append the whole dataset at PREFIX (.bin / .idx, the same dtype), as Megatron's
 * IndexedDatasetBuilder.add_index: its sequences, and its documents after b's. */
int td_idx_builder_add_index(td_idx_builder *b, const char *prefix, char *err, size_t errlen);
/* Write the .idx, sync, rename both into place; frees b whatever the outcome. */
int td_idx_builder_finalize(td_idx_builder *b, char *err, size_t errlen);
/* Give up: remove the temporaries and free b. */
void td_idx_builder_abort(td_idx_builder *b);

#endif
