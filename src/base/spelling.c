#include "base/spelling.h"

/* One row of the dynamic programme at a time (row[j]: distance of a's prefix so
 * far to b[0..j)). */
int td_edit_distance(const char *a, size_t la, const char *b, size_t lb) {
  enum { MAX = 127 };
  if (la > MAX) la = MAX;
  if (lb > MAX) lb = MAX;
  int row[MAX + 1];
  for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    int diag = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= lb; j++) {
      int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      diag = up, row[j] = best;
    }
  }
  return row[lb];
}
