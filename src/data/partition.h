/* Megatron's preprocess_data.py --partitions N: the input (a file, or a glob
 * pattern of files) is split by line into N partition files next to it, each is
 * preprocessed into its own datasets, and those are merged in partition order
 * (td_idx_builder_add_index). The merged dataset is the one a single run over the
 * partitions' lines, concatenated, would write; Megatron's file names:
 *
 *   INPUT_STEM_i.EXT                    partition i of the input (kept; an existing
 *                                       full set is reused, as Megatron does)
 *   PREFIX_i_KEY_document.bin / .idx    partition i's dataset (kept)
 *   PREFIX_KEY_document.bin / .idx      the merged dataset
 *
 * Lines go round-robin (line j to partition j mod N), or with keep_sequential in
 * runs of ceil(lines / N) (the input's order kept). Lines end at "\n", as trident
 * preprocess reads them, and are copied as they are. */
#ifndef TD_DATA_PARTITION_H
#define TD_DATA_PARTITION_H

#include <stddef.h>

/* "STEM_i.EXT" for the input path, split as Python's os.path.splitext splits it
 * (td_malloc'ed). */
char *td_partition_file_name(const char *input, int i);

/* The input files a pattern names (glob(3), sorted; Python's glob.glob lists them
 * in directory order), or NULL with err when none matches. *n gets their count;
 * free with td_partition_free_names. */
char **td_partition_inputs(const char *pattern, int *n, char *err, size_t errlen);
void td_partition_free_names(char **names, int n);

/* Write the partitions of inputs[0..n_inputs) for the input path `input` (whose
 * name they take), unless all of them exist already (*reused = 1). Each file is
 * written under a temporary name and renamed, so an interrupted run leaves no
 * partial partition behind. 0, or -1 with err. */
int td_partition_split(const char *input, char *const *inputs, int n_inputs, int parts,
                       int keep_sequential, int *reused, char *err, size_t errlen);

#endif
