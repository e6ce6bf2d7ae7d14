#!/usr/bin/env bash
# Data and tensor parallelism on one 2-core host, side by side in one session:
# `trident train --mock-data` on GPT-2 124M (12 layers, 768 hidden, 12 heads,
# vocabulary 50257 -> 50304, seq 256, micro-batch 4, global batch 8, no dropout)
# as
#   1x2   one process, 2 threads (2 micro-batches of gradient accumulation)
#   dp2   mpirun -np 2, 1 thread each, data-parallel (1 micro-batch each)
#   dp2zero  the same with ZeRO-1 (--use-distributed-optimizer)
#   dp2zeroovl  dp2zero with the parameter all-gather overlapped with the next forward (--overlap-param-gather)
#   dp2wire  dp2 with the gradients sent in bf16 (--grad-reduce-in-bf16; acts with --dtype bf16)
#   pp2   mpirun -np 2, 1 thread each, pipeline-parallel 2 (2 micro-batches)
#   tp2   mpirun -np 2, 1 thread each, tensor-parallel 2 (2 micro-batches)
#   tp2sp the same with --sequence-parallel
# Prints, per layout, the median time per iteration over the measured iterations
# (the first `--skip` are warm-up), tokens/s, its ratio to 1x2, the share of the
# iteration in communication trident reports (data parallel: the all-reduce time
# not hidden behind backward; tensor parallel: the TP collectives), and the
# activation bytes one layer keeps.
# Usage: bench/parallel_scaling.sh [--trident build/trident] [--dtype fp32|bf16]
#        [--iters 6] [--skip 2] [--layouts "1x2 dp2 tp2 tp2sp"]
set -euo pipefail
bin=build/trident dtype=fp32 iters=6 skip=2 layouts="1x2 dp2 tp2 tp2sp"
while [ $# -gt 0 ]; do
  case $1 in
    --trident) bin=$2; shift 2 ;;
    --dtype) dtype=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --skip) skip=$2; shift 2 ;;
    --layouts) layouts=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
source "$(dirname "$0")/common.sh"
model=("${gpt2_124m[@]}" --global-batch-size 8 --hidden-dropout 0 --attention-dropout 0
  --train-iters "$iters")
[ "$dtype" = bf16 ] && model+=(--bf16)
mpi=(mpirun --oversubscribe --allow-run-as-root -np 2 --bind-to core)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tokens=$((8 * 256))


printf "%-6s %-9s %12s %10s %8s %14s %12s\n" layout dtype "ms/iter" "tokens/s" "vs 1x2" "comm share" "act/layer MiB"
base=
for l in $layouts; do
  case $l in
    1x2) OMP_NUM_THREADS=2 "$bin" train "${model[@]}" >"$tmp/$l.log" 2>&1 ;;
    dp2) OMP_NUM_THREADS=1 "${mpi[@]}" "$bin" train "${model[@]}" >"$tmp/$l.log" 2>&1 ;;
    dp2zero) OMP_NUM_THREADS=1 "${mpi[@]}" "$bin" train "${model[@]}" --use-distributed-optimizer \
      --timing-log-level 1 >"$tmp/$l.log" 2>&1 ;;
    dp2zeroovl) OMP_NUM_THREADS=1 "${mpi[@]}" "$bin" train "${model[@]}" --use-distributed-optimizer \
      --overlap-param-gather --timing-log-level 1 >"$tmp/$l.log" 2>&1 ;;
    dp2wire) OMP_NUM_THREADS=1 "${mpi[@]}" "$bin" train "${model[@]}" --grad-reduce-in-bf16 \
      >"$tmp/$l.log" 2>&1 ;;
    pp2) OMP_NUM_THREADS=1 "${mpi[@]}" "$bin" train "${model[@]}" --pipeline-model-parallel-size 2 \
      >"$tmp/$l.log" 2>&1 ;;
    tp2) OMP_NUM_THREADS=1 "${mpi[@]}" "$bin" train "${model[@]}" --tensor-model-parallel-size 2 >"$tmp/$l.log" 2>&1 ;;
    tp2sp) OMP_NUM_THREADS=1 "${mpi[@]}" "$bin" train "${model[@]}" --tensor-model-parallel-size 2 \
      --sequence-parallel >"$tmp/$l.log" 2>&1 ;;
    *) echo "unknown layout $l" >&2; exit 2 ;;
  esac
  ms=$(grep -oE 'elapsed time per iteration \(ms\): [0-9.]+' "$tmp/$l.log" | awk '{ print $NF }' |
    tail -n +$((skip + 1)) | median)
  exposed=$(grep -oE '(backward|communication): [0-9.]+ ms per iteration \([0-9.]+%' "$tmp/$l.log" |
    tail -n +$((skip + 1)) | sed -E 's/.*\(([0-9.]+)%/\1/' | median || true)
  act=$(grep -oE '[0-9.]+ per layer' "$tmp/$l.log" | cut -d' ' -f1 || true)
  [ -n "$ms" ] || { echo "$l failed:"; tail -5 "$tmp/$l.log"; continue; }
  [ -z "$base" ] && base=$ms
  printf "%-6s %-9s %12.1f %10.0f %8.3f %14s %12s\n" "$l" "$dtype" "$ms" \
    "$(awk -v t="$tokens" -v m="$ms" 'BEGIN { print t * 1000 / m }')" \
    "$(awk -v b="$base" -v m="$ms" 'BEGIN { print b / m }')" "${exposed:+$exposed%}" "$act"
done
