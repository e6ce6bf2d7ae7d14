#!/usr/bin/env bash
# Data-parallel equality and scaling over GPUs (issue #12 item 5), on a host with
# two or more GPUs: `trident train --mock-data`, no dropout, a fixed global batch,
# in these layouts (one rank per GPU; ranks take GPU local_rank % count, and
# their collectives go through NCCL):
#   dp1   one rank: the global batch as gradient accumulation
#   dpN   N ranks (--gpus N), data-parallel, the same global batch
#   dpNwire  dpN with the gradients sent in bf16 (--grad-reduce-in-bf16; acts in bf16)
#   dpNz1ovl dpN with ZeRO-1 and its parameter all-gather overlapped with the next
#         forward (--use-distributed-optimizer --overlap-param-gather)
#   tp2   2 ranks, tensor-parallel (Megatron's column / row split, NCCL all-reduce)
#   pp2   2 ranks, pipeline-parallel (1F1B, NCCL send / receive)
# It checks dpN's and dpNwire's losses against dp1's, iteration for iteration:
# equal as printed in fp32 (relative 1e-6: trident's data parallelism keeps the
# bits of the single-rank sum), within --tol (default 1e-3) in bf16; dpNz1ovl's
# against dpN's, equal (ZeRO-1 and the overlap change no bit); and prints each
# layout's median ms per iteration, tokens/s, and scaling efficiency:
# tokens/s over (ranks x dp1's tokens/s).
# Usage: bench/gpu/scaling.sh [--trident build/trident] [--device cuda|cpu|sealed]
#        [--gpus N] [--dtype fp32|bf16] [--iters 8] [--skip 3] [--tol X]
#        [--model gpt2|tiny] [--layouts "dp1 dpN dpNwire dpNz1ovl tp2 pp2"]
# --model gpt2 (default): GPT-2 124M, seq 1024, micro-batch 8; tiny: 2 layers of
# 64, seq 64, for a run of the script's own logic on a CPU (tests/cli_gpu_scaling.sh).
# Exit 0 when every run finished and every check held, else 1.
set -uo pipefail
bin=build/trident device=cuda gpus= dtype=bf16 iters=8 skip=3 tol= size=gpt2
layouts="dp1 dpN dpNwire dpNz1ovl tp2 pp2"
while [ $# -gt 0 ]; do
  case $1 in
    --trident) bin=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --gpus) gpus=$2; shift 2 ;;
    --dtype) dtype=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --skip) skip=$2; shift 2 ;;
    --tol) tol=$2; shift 2 ;;
    --model) size=$2; shift 2 ;;
    --layouts) layouts=$2; shift 2 ;;
    *) echo "bench/gpu/scaling.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case $dtype in fp32) tol=${tol:-1e-6} ;; bf16) tol=${tol:-1e-3} ;;
  *) echo "bench/gpu/scaling.sh: --dtype fp32 or bf16, not $dtype" >&2; exit 2 ;; esac
if [ -z "$gpus" ]; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  [ "$device" = cuda ] || gpus=2
fi
if ! [ "$gpus" -ge 2 ] 2>/dev/null; then
  echo "bench/gpu/scaling.sh: $gpus GPU(s) visible; data-parallel scaling needs 2 or more (--gpus N)" >&2
  exit 2
fi
source "$(dirname "$0")/../common.sh"

case $size in
  gpt2) mbs=8 seq=1024
    model=("${gpt2_124m[@]}" --seq-length $seq --micro-batch-size $mbs) ;;
  tiny) mbs=2 seq=64
    model=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length $seq
      --max-position-embeddings $seq --micro-batch-size $mbs --lr 1e-3 --mock-data
      --tokenizer-type NullTokenizer --vocab-size 500 --log-interval 1 --eval-iters 0) ;;
  *) echo "bench/gpu/scaling.sh: --model gpt2 or tiny, not $size" >&2; exit 2 ;;
esac
gbs=$((mbs * gpus * 2)) # two micro-batches per rank at dpN: accumulation and DP both run
model+=(--global-batch-size $gbs --hidden-dropout 0 --attention-dropout 0 --train-iters "$iters"
  --device "$device" --seed 1234)
[ "$dtype" = bf16 ] && model+=(--bf16)
tokens=$((gbs * seq))
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run NAME NP ARGS...: trident train on NP ranks
run() {
  local name=$1 np=$2
  shift 2
  if [ "$np" = 1 ]; then
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$bin" train "${model[@]}" "$@" >"$tmp/$name.log" 2>&1
  else
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} mpirun --oversubscribe --allow-run-as-root -np "$np" \
      "$bin" train "${model[@]}" "$@" >"$tmp/$name.log" 2>&1
  fi
}
losses() { grep -oE 'lm loss: [^ ]+' "$1" | sed -E 's/.*: //'; }
ms_per_iter() {
  grep -oE 'elapsed time per iteration \(ms\): [0-9.]+' "$1" | awk '{ print $NF }' |
    tail -n +$((skip + 1)) | median
}

rc=0 base=
printf "GPT %s, %s, global batch %d x seq %d, device %s, %d ranks at most\n" "$size" "$dtype" "$gbs" \
  "$seq" "$device" "$gpus"
printf "%-8s %6s %12s %12s %11s\n" layout ranks "ms/iter" "tokens/s" efficiency
for l in $layouts; do
  case $l in
    dp1) np=1; run $l 1 ;;
    dpN) np=$gpus; run $l "$np" ;;
    dpNwire) np=$gpus; run $l "$np" --grad-reduce-in-bf16 ;;
    dpNz1ovl) np=$gpus; run $l "$np" --use-distributed-optimizer --overlap-param-gather ;;
    tp2) np=2; run $l 2 --tensor-model-parallel-size 2 ;;
    pp2) np=2; run $l 2 --pipeline-model-parallel-size 2 ;;
    *) echo "bench/gpu/scaling.sh: unknown layout $l" >&2; exit 2 ;;
  esac
  ms=$(ms_per_iter "$tmp/$l.log")
  if [ -z "$ms" ]; then
    echo "$l FAILED:"; tail -5 "$tmp/$l.log"; rc=1; continue
  fi
  tps=$(awk -v t="$tokens" -v m="$ms" 'BEGIN { printf "%.0f", t * 1000 / m }')
  [ "$l" = dp1 ] && base=$tps
  eff=$([ -n "$base" ] && awk -v b="$base" -v t="$tps" -v n="$np" 'BEGIN { printf "%.1f%%", 100 * t / (n * b) }')
  printf "%-8s %6d %12.1f %12s %11s\n" "$l" "$np" "$ms" "$tps" "$eff"
done

# compare A B TOL WHAT: A's and B's losses, iteration for iteration
compare() {
  [ -f "$tmp/$1.log" ] && [ -f "$tmp/$2.log" ] || return 0
  losses "$tmp/$1.log" >"$tmp/a" && losses "$tmp/$2.log" >"$tmp/b"
  local n worst
  n=$(wc -l <"$tmp/a")
  if [ "$n" -lt "$iters" ] || [ "$n" -ne "$(wc -l <"$tmp/b")" ]; then
    echo "DP check FAILED ($4): $n losses ($1) against $(wc -l <"$tmp/b") ($2)"; rc=1
    return
  fi
  worst=$(paste "$tmp/a" "$tmp/b" | awk '{ d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1);
    if (r > w) w = r } END { printf "%.3g", w }')
  if awk -v w="$worst" -v t="$3" 'BEGIN { exit !(w <= t) }'; then
    echo "$4: $n losses, worst relative difference $worst (<= $3)"
  else
    echo "DP check FAILED ($4): worst relative difference $worst > $3"
    paste "$tmp/a" "$tmp/b" | head -5; rc=1
  fi
}
compare dp1 dpN "$tol" "DP=$gpus == DP=1"
compare dp1 dpNwire "$tol" "DP=$gpus, gradients sent in bf16 (--grad-reduce-in-bf16) == DP=1"
compare dpN dpNz1ovl 0 "DP=$gpus ZeRO-1 with --overlap-param-gather == DP=$gpus"
exit $rc
