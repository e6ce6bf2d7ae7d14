#!/usr/bin/env bash
# Fuzz the .idx/.bin reader (and a small GPT index over what it accepts) with libFuzzer.
#   tests/fuzz/run.sh [SECONDS]        default 60
# Builds build-fuzz/fuzz_indexed_dataset with clang -fsanitize=fuzzer,address,undefined,
# fuzzes with a working corpus in build-fuzz/corpus seeded from tests/fuzz/corpus, writes
# any crash / timeout / leak input into tests/fuzz/corpus/ (test_indexed_dataset replays
# every file there in the normal ctest run), then merges the inputs that add coverage
# into tests/fuzz/corpus/ so the committed corpus stays small.
set -euo pipefail
secs=${1:-60}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${FUZZ_BUILD_DIR:-$root/build-fuzz}
mkdir -p "$out/corpus"

srcs=("$here/fuzz_indexed_dataset.c")
for f in data/indexed_dataset data/gpt_dataset data/blend data/numpy_random base/files base/mem base/error base/log; do
  srcs+=("$root/src/$f.c")
done
clang -std=gnu11 -g -O1 -Wall -Wextra -Werror -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root/src" -I"$here" "${srcs[@]}" -lm -o "$out/fuzz_indexed_dataset"

# -timeout: an input that takes over 5 s is a hang worth keeping.
"$out/fuzz_indexed_dataset" -max_total_time="$secs" -max_len=4096 -timeout=5 -rss_limit_mb=2048 \
  -artifact_prefix="$here/corpus/" "$out/corpus" "$here/corpus" || status=$?
"$out/fuzz_indexed_dataset" -merge=1 "$here/corpus" "$out/corpus" >/dev/null 2>&1
exit "${status:-0}"
