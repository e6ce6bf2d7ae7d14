/* Replays every committed fuzzing corpus file (tests/fuzz/corpus/<target>/: the
 * seeds and every input a fuzzer found a bug with) through the same harness body
 * the libFuzzer target runs (tests/fuzz/fuzz_<target>.h), so a fixed reader bug
 * stays fixed in the normal test suite. A missing or empty corpus directory is a
 * failure: a target whose corpus went missing must not pass silently. */
#include <dirent.h>
#include <string.h>

#include "check.h"
#include "fuzz/fuzz_args.h"
#include "fuzz/fuzz_checkpoint.h"
#include "fuzz/fuzz_ds_config.h"
#include "fuzz/fuzz_hf_config.h"
#include "fuzz/fuzz_indexed_dataset.h"
#include "fuzz/fuzz_jsonl.h"
#include "fuzz/fuzz_safetensors.h"
#include "fuzz/fuzz_tokenizer.h"

typedef struct {
  const char *name;
  int (*one)(const uint8_t *data, size_t size); /* 1 accepted, 0 refused cleanly */
} target;

static const target k_targets[] = {
    {"indexed_dataset", td_fuzz_indexed_dataset_one},
    {"safetensors", td_fuzz_safetensors_one},
    {"checkpoint", td_fuzz_checkpoint_one},
    {"jsonl", td_fuzz_jsonl_one},
    {"tokenizer", td_fuzz_tokenizer_one},
    {"hf_config", td_fuzz_hf_config_one},
    {"args", td_fuzz_args_one},
    {"ds_config", td_fuzz_ds_config_one},
};

/* Every file of tests/fuzz/corpus/<t->name>/ through t->one. */
static void replay(const target *t) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/%s", TD_SOURCE_DIR, t->name);
  DIR *d = opendir(dir);
  CHECK(d != NULL, "corpus directory %s exists", dir);
  if (!d) return;
  int files = 0, accepted = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[2048], err[512];
    size_t len;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    char *data = td_read_file(path, &len, err, sizeof err);
    if (!data) {
      CHECK(0, "read %s: %s", path, err);
      continue;
    }
    accepted += t->one((const uint8_t *)data, len);
    files++;
    td_free(data);
  }
  closedir(d);
  CHECK(files > 0 && accepted > 0, "%s: replayed %d corpus inputs (%d accepted, %d refused cleanly)", t->name,
        files, accepted, files - accepted);
}

int main(void) {
  td_fuzz_setup();
  for (size_t i = 0; i < sizeof k_targets / sizeof k_targets[0]; i++) replay(&k_targets[i]);
  td_log_set_level(TD_LOG_INFO);
  return tst_finish();
}
