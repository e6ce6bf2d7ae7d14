/* libFuzzer entry for the .idx/.bin reader; built by tests/fuzz/run.sh with clang
 * -fsanitize=fuzzer,address,undefined (not part of the normal build). */
#include "fuzz_indexed_dataset.h"

#include "base/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  td_log_set_level(TD_LOG_WARN); /* GPT index building logs at info level */
  td_fuzz_indexed_dataset_one(data, size);
  return 0;
}
