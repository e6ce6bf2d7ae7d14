#!/usr/bin/env bash
# Thread scaling of one process (issue #14 item 2): `trident bench train` (GPT-2
# 124M, seq 256, micro-batch 4, random tokens) on 1, 2, 4, 8, ... threads up to
# the cores here, one dtype. Per count: the median step, tokens/s, the speed-up
# over 2 threads (the issue's measure: 16 threads at least 6x 2 threads) and over
# 1, and where the step goes (matmul, attention, other kernels, optimizer, ms).
# Each count first runs one unmeasured step, so that the GEMM choice (measured
# per thread count and cached, docs/device.md) is not timed.
# Usage: bench/thread_scaling.sh [--trident build/trident] [--dtype fp32|bf16]
#        [--threads "1 2 4 8 16"] [--steps 4] [--warmup 1] [--model "FLAGS"]
# (--model: more `bench train` flags, e.g. "--num-layers 2 --hidden-size 64").
set -euo pipefail
bin=build/trident dtype=bf16 steps=4 warmup=1 counts="" model=""
while [ $# -gt 0 ]; do
  case $1 in
    --trident) bin=$2; shift 2 ;;
    --dtype) dtype=$2; shift 2 ;;
    --threads) counts=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    *) echo "thread_scaling.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "thread_scaling.sh: no trident at $bin (make build)" >&2; exit 2; }
cores=$(nproc)
if [ -z "$counts" ]; then
  for ((t = 1; t <= cores; t *= 2)); do counts+="$t "; done
  [[ " $counts " == *" $cores "* ]] || counts+="$cores"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# field FILE EVENT-MATCH KEY: KEY's number in the first JSON line matching EVENT-MATCH
field() { grep -m1 "$2" "$1" | sed -n "s/.*\"$3\": \([0-9.e+-]*\).*/\1/p"; }

echo "trident bench train --dtype $dtype --steps $steps --warmup $warmup, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $cores cores"
printf '%-8s %10s %10s %9s %9s %9s %9s %9s %9s\n' threads ms/step tokens/s "vs 2" "vs 1" \
  matmul attention other optimizer
base1="" base2=""
for t in $counts; do
  out=$tmp/t$t.jsonl
  # shellcheck disable=SC2086 # $model: flags, split on purpose
  "$bin" bench train --device cpu --dtype "$dtype" --threads "$t" --steps 1 --warmup 0 $model \
    >/dev/null 2>&1 || true # the GEMM choice for this thread count, unmeasured
  # shellcheck disable=SC2086
  "$bin" bench train --device cpu --dtype "$dtype" --threads "$t" --steps "$steps" \
    --warmup "$warmup" $model --json >"$out" 2>"$tmp/t$t.err" ||
    { echo "thread_scaling.sh: $t threads failed: $(tail -2 "$tmp/t$t.err")" >&2; exit 1; }
  ms=$(field "$out" '"event": "summary"' median_step_ms)
  tok=$(field "$out" '"event": "summary"' tokens_per_s)
  [ "$t" = 1 ] && base1=$ms
  [ "$t" = 2 ] && base2=$ms
  phase() { field "$out" "\"phase\": \"$1\"" ms_per_step; }
  ratio() { [ -n "$1" ] && awk -v b="$1" -v m="$ms" 'BEGIN { printf "%.2fx", b / m }' || echo -; }
  printf '%-8s %10.1f %10.1f %9s %9s %9.1f %9.1f %9.1f %9.1f\n' "$t" "$ms" "$tok" \
    "$(ratio "$base2")" "$(ratio "$base1")" "$(phase matmul)" "$(phase attention)" \
    "$(phase other_kernels)" "$(phase optimizer)"
done
