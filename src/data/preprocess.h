/* Megatron's tools/preprocess_data.py (without --split-sentences): JSON lines in,
 * one MMapIndexedDataset per JSON key out, PREFIX_KEY_document.bin / .idx, byte
 * for byte what Megatron writes for the same input and tokenizer.
 *
 * Each input line is one document (jsonl.h reads it as Python's json.loads would);
 * each key's text becomes one sequence of GPT-2 BPE ids, followed by the
 * end-of-document id with append_eod when the text has any token. An empty text
 * adds a document with no sequence, as in Megatron. Tokens are uint16 when the
 * vocabulary fits (td_idx_dtype_for_vocab).
 *
 * Worker threads tokenize batches of lines in parallel while the calling thread
 * reads ahead and writes finished batches in input order, so the output does not
 * depend on the number of workers. A bad line (malformed JSON, invalid UTF-8, a
 * missing key, ...) is an error naming its line number and byte offset, and no
 * output file is left behind (td_idx_builder_abort); with skip_bad_lines the line
 * is left out of every output instead and counted. */
#ifndef TD_DATA_PREPROCESS_H
#define TD_DATA_PREPROCESS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "data/bpe_tokenizer.h"

typedef struct {
  const td_bpe *bpe;
  const char *input; /* JSON lines file, or "-" for stdin */
  const char *output_prefix;
  const char *const *json_keys; /* one output per key */
  int n_keys;
  int append_eod;
  int workers;          /* tokenizing threads, >= 1 */
  size_t batch_bytes;   /* input bytes per batch of lines (0: 256 KiB) */
  int64_t log_interval; /* progress line every N documents (0: none) */
  int skip_bad_lines;   /* skip and count bad lines instead of failing */
  FILE *log;            /* progress and skipped-line warnings (NULL: none) */
} td_preprocess_opts;

typedef struct {
  int64_t documents; /* lines written (to every output) */
  int64_t bad_lines; /* lines skipped (skip_bad_lines) */
  int64_t tokens;    /* tokens written, all outputs together, end-of-document ids included */
  int64_t bytes;     /* input bytes read */
  double seconds;    /* wall time of the processing */
} td_preprocess_stats;

/* Skipped lines whose reasons are printed to opts.log; the rest are only counted. */
#define TD_PREPROCESS_SHOWN_BAD_LINES 10

/* Run it. 0, or -1 with err naming the input, the line and the problem. */
int td_preprocess(const td_preprocess_opts *o, td_preprocess_stats *st, char *err, size_t errlen);

/* The output prefix of key: "PREFIX_KEY_document" (td_malloc'ed). */
char *td_preprocess_output_name(const char *prefix, const char *key);

#endif
