/* libFuzzer entry for fuzz_safetensors.h; built by tests/fuzz/run.sh (tests/fuzz/CMakeLists.txt)
 * with clang -fsanitize=fuzzer,address,undefined, not part of the normal build. */
#include "fuzz_safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  td_fuzz_setup();
  td_fuzz_safetensors_one(data, size);
  return 0;
}
