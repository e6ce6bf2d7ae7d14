#!/usr/bin/env bash
# scripts/gpu-check.sh's control flow without a GPU (a GPU session is rare and
# short: a broken script would waste it): a stand-in nvidia-smi, a stand-in
# build folder (trident, and ctest files with a GPU test that skips and a kernel
# test that passes). With a budget the stages run in order and each GPU stage
# that fails says FAILED with its error; with no budget left every stage after
# the tests is named as skipped for time; a skipped GPU test fails the check
# (exit 1); without nvidia-smi's GPU the script exits 2. Arguments: the trident
# binary and the source directory.
set -u
bin=$1
src=$2
source "$(dirname "$0")/script_common.sh" # $tmp, fail, ok

mkdir -p "$tmp/bin" "$tmp/build"
printf '#!/bin/sh\necho "GPU 0: Stand-in GPU (UUID: GPU-0)"\n' >"$tmp/bin/nvidia-smi"
chmod +x "$tmp/bin/nvidia-smi"
ln -s "$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")" "$tmp/build/trident"
cat >"$tmp/build/CTestTestfile.cmake" <<'EOF'
add_test(test_device_cuda "/bin/sh" "-c" "exit 77")
set_tests_properties(test_device_cuda PROPERTIES SKIP_RETURN_CODE 77)
add_test(test_kernel_standin "/bin/true")
EOF

check() { # BUDGET OUT: run the script, its summary in OUT/summary.txt; prints the exit code
  PATH=$tmp/bin:$PATH PREBUILT=1 BUILD=$tmp/build BUDGET_S=$1 OUT=$2 PEERS=0 JOBS=1 \
    bash "$src/scripts/gpu-check.sh" >"$2.log" 2>&1
  local rc=$?
  sed -n '/^== gpu-check summary ==/,$p' "$2.log" >"$2.summary"
  echo $rc
}
has() { grep -qE "$2" "$1"; }

# a budget: every stage runs, each GPU one fails fast here
rc=$(check 400 "$tmp/full")
s=$tmp/full.summary
[ "$rc" = 1 ] && ok "a skipped GPU test: exit 1" || fail "exit $rc with a skipped GPU test, expected 1: $(cat "$tmp/full.log")"
has "$s" 'tests: 100% tests passed, 0 tests failed out of 1;100% tests passed, 0 tests failed out of 1;' &&
  has "$s" 'the GPU tests were SKIPPED' && ok "both test runs, and the skipped GPU test named" ||
  fail "the tests' lines: $(cat "$s")"
n=$(grep -cE '^(trident bench train|breakdown|the same with dropout|the same with TRIDENT_CUDA_FUSE=0|GPT-2 350M|GPT-2 760M).*FAILED' "$s")
[ "$n" = 6 ] && has "$s" 'bench kernels FAILED' && ok "every GPU stage ran and says FAILED ($n + bench kernels)" ||
  fail "$n of 6 step stages say FAILED: $(cat "$s")"
has "$s" 'SKIPPED for time' && fail "a stage skipped for time with 400 s: $(cat "$s")" || ok "nothing skipped for time"
has "$s" '^took [0-9]+ s \(BUDGET_S=400\)$' && ok "the seconds taken" || fail "no 'took' line: $(cat "$s")"

# no budget left after the tests: every later stage named as skipped
rc=$(check 1 "$tmp/none")
s=$tmp/none.summary
n=$(grep -c '^SKIPPED for time: ' "$s")
[ "$rc" = 1 ] && [ "$n" -ge 7 ] && has "$s" 'SKIPPED for time: trident bench train \(needs ~40 s' &&
  ! has "$s" 'FAILED: trident' && ok "no time left: $n stages named as skipped, none run" ||
  fail "no time left: exit $rc, $n skipped: $(cat "$s")"

# no GPU: exit 2 before anything runs
printf '#!/bin/sh\necho "NVIDIA-SMI has failed" >&2\nexit 9\n' >"$tmp/bin/nvidia-smi"
rc=$(check 400 "$tmp/nogpu")
[ "$rc" = 2 ] && has "$tmp/nogpu.log" 'no NVIDIA GPU visible' && ok "no GPU: exit 2" ||
  fail "no GPU: exit $rc: $(cat "$tmp/nogpu.log")"
exit $failed
