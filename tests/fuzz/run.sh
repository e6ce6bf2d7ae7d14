#!/usr/bin/env bash
# libFuzzer over every reader of user files (one harness per tests/fuzz/fuzz_*.c).
#   tests/fuzz/run.sh [TARGET|all] [SECONDS]     default: all, 60 s per target
# Targets: indexed_dataset safetensors checkpoint jsonl tokenizer hf_config args ds_config
# Builds build-fuzz/ (tests/fuzz/CMakeLists.txt: the library and the harnesses with
# clang -fsanitize=fuzzer,address,undefined), then fuzzes each target with a working
# corpus in build-fuzz/corpus/TARGET seeded from tests/fuzz/corpus/TARGET. A crash,
# timeout or leak input is written into tests/fuzz/corpus/TARGET/ (test_fuzz_replay
# replays every file there in the normal ctest run). Then the inputs that add coverage
# are merged (-merge=1) into a fresh directory, which replaces the committed corpus so
# it stays small; hand-written seeds (seed_*) and found inputs (crash-*, timeout-*,
# leak-*, oom-*, slow-unit-*) are always kept. Exit status: non-zero when a target
# found something.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${FUZZ_BUILD_DIR:-$root/build-fuzz}
all=(indexed_dataset safetensors checkpoint jsonl tokenizer hf_config args ds_config)
which=${1:-all}
secs=${2:-60}
if [ "$which" = all ]; then targets=("${all[@]}"); else targets=("$which"); fi

# FUZZ_NO_BUILD=1: use the binaries already there (two run.sh side by side).
if [ -z "${FUZZ_NO_BUILD:-}" ]; then
  CC=${FUZZ_CC:-clang} cmake -S "$here" -B "$out" -DCMAKE_BUILD_TYPE=None >/dev/null
  cmake --build "$out" -j "$(nproc)" --target "${targets[@]/#/fuzz_}" >/dev/null
fi

# Inputs large enough for a whole seed file (a checkpoint's metadata.json and model).
max_len() {
  case $1 in checkpoint) echo 24576 ;; safetensors | hf_config) echo 12288 ;; *) echo 4096 ;; esac
}

fuzz_one() {
  local t=$1 bin="$out/fuzz_$1" committed="$here/corpus/$1" work="$out/corpus/$1"
  [ -d "$committed" ] || { echo "run.sh: no corpus $committed" >&2; return 1; }
  mkdir -p "$work"
  local rc=0
  # -timeout: an input that takes over 5 s is a hang worth keeping
  "$bin" -max_total_time="$secs" -max_len="$(max_len "$t")" -timeout=5 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$committed/" "$work" "$committed" || rc=$?
  local fresh="$out/merge-$t"
  rm -rf "$fresh" && mkdir -p "$fresh"
  "$bin" -merge=1 -max_len="$(max_len "$t")" "$fresh" "$committed" "$work" >"$out/merge-$t.log" 2>&1 || true
  find "$committed" -maxdepth 1 -type f \( -name 'seed_*' -o -name 'crash-*' -o -name 'timeout-*' \
    -o -name 'leak-*' -o -name 'oom-*' -o -name 'slow-unit-*' \) -exec cp -n {} "$fresh/" \;
  if [ -n "$(ls -A "$fresh")" ]; then
    find "$committed" -maxdepth 1 -type f -delete
    cp "$fresh"/* "$committed/"
  fi
  echo "run.sh: $t: $(ls "$committed" | wc -l) corpus files (exit $rc)"
  return "$rc"
}

status=0
for t in "${targets[@]}"; do fuzz_one "$t" || status=1; done
exit "$status"
