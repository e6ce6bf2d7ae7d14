#include "cmd_flags.h"

#include <string.h>

#include "base/error.h"

const char *td_cmd_flag_value(int argc, char **argv, int *i, const char *name,
                              const char *command) {
  size_t n = strlen(name);
  const char *a = argv[*i];
  if (strncmp(a, name, n)) return NULL;
  if (a[n] == '=') return a + n + 1;
  if (a[n]) return NULL;
  if (*i + 1 >= argc || !strncmp(argv[*i + 1], "--", 2))
    td_fail("%s needs a value (see trident %s --help)", name, command);
  return argv[++*i];
}
