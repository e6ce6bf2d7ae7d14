#!/usr/bin/env bash
# The price of full activation recomputation, side by side in one session:
# `trident train --mock-data` on GPT-2 124M (12 layers, 768 hidden, 12 heads,
# vocabulary 50257 -> 50304, seq 256, micro-batch 4, global batch 4), one process
# with the machine's threads, keeping every activation and with
# --recompute-granularity full (uniform 1: every layer keeps only its input;
# block 6: the first 6 layers do). Configurations alternate for --rounds rounds;
# prints the median time per iteration (the first --skip iterations of each run
# are warm-up), its ratio to keeping everything, and the activation total and
# peak resident memory trident reports.
# Usage: bench/recompute.sh [--trident build/trident] [--dtype fp32|bf16]
#        [--iters 5] [--skip 1] [--rounds 2]
set -euo pipefail
bin=build/trident dtype=fp32 iters=5 skip=1 rounds=2
while [ $# -gt 0 ]; do
  case $1 in
    --trident) bin=$2; shift 2 ;;
    --dtype) dtype=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --skip) skip=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
source "$(dirname "$0")/common.sh"
model=("${gpt2_124m[@]}" --global-batch-size 4 --train-iters "$iters")
[ "$dtype" = bf16 ] && model+=(--bf16)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
names=(keep uniform1 block6)
flags_of() {
  case $1 in
    keep) ;;
    uniform1) echo --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 ;;
    block6) echo --recompute-granularity full --recompute-method block --recompute-num-layers 6 ;;
  esac
}
timer=() # peak RSS from GNU time (Debian package "time") when present
[ -x /usr/bin/time ] && timer=(/usr/bin/time -f "peak RSS %M KiB")

for r in $(seq "$rounds"); do
  for n in "${names[@]}"; do
    # shellcheck disable=SC2046
    "${timer[@]}" "$bin" train "${model[@]}" $(flags_of "$n") >"$tmp/$n.$r.log" 2>&1
    grep -oE 'elapsed time per iteration \(ms\): [0-9.]+' "$tmp/$n.$r.log" | awk '{ print $NF }' |
      tail -n +$((skip + 1)) >>"$tmp/$n.ms"
  done
done
printf "%-9s %-5s %10s %10s %16s %14s\n" config dtype "ms/iter" "vs keep" "activations MiB" "peak RSS MiB"
base=
for n in "${names[@]}"; do
  ms=$(median <"$tmp/$n.ms")
  [ -z "$base" ] && base=$ms
  act=$(grep -oE 'activations [0-9.]+' "$tmp/$n.1.log" | awk '{ print $2 }')
  rss=$(grep -oE 'peak RSS [0-9]+' "$tmp/$n.1.log" | awk '{ printf "%.0f", $3 / 1024 }' || true)
  printf "%-9s %-5s %10.1f %10.3f %16s %14s\n" "$n" "$dtype" "$ms" \
    "$(awk -v b="$base" -v m="$ms" 'BEGIN { print m / b }')" "$act" "$rss"
done
