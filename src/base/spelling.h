/* Suggestions for a misspelt name (a flag, a config key): the edit distance
 * between what was typed and each known name. */
#ifndef TD_BASE_SPELLING_H
#define TD_BASE_SPELLING_H

#include <stddef.h>

/* Levenshtein distance between a[0..la) and b[0..lb) (insertions, deletions and
 * substitutions of one character each); names are short, so only the first 127
 * characters of each count. */
int td_edit_distance(const char *a, size_t la, const char *b, size_t lb);

#endif
